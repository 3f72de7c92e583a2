//! `pglease demo`: the lease life cycle on a throw-away server with the embedded extension files.

use crate::common::{Case, major};

#[test]
fn the_demo_fences_the_stale_worker_and_exits_0() {
    let case = Case::new("demo");
    let out = case
        .bare(["demo", "--ttl", "1s", "--pg-version", &major().to_string()])
        .expect_code(0);
    let stdout = out.stdout();
    for expected in [
        "CREATE EXTENSION pg_lease as a non-superuser",
        "new epoch 2",
        "REJECTED: the fence has seen a newer epoch",
        "worker-b (epoch 2): \"final report\"",
    ] {
        assert!(
            stdout.contains(expected),
            "\nexpected {expected:?} in the demo's output\n{}\n",
            out.report()
        );
    }
}
