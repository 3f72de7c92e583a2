//! `examples/worker.rs` end to end: connected by `DATABASE_URL`, it sends ten orders, records each
//! exactly once, and on SIGINT finishes, releases its partitions and exits successfully; its log
//! in a pipe has no colour codes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{conninfo, eventually, holders, superuser};

/// The example's binary: built by `cargo test` (all targets) next to this test binary's
/// directory, or built here with the cargo that runs the tests (`cargo test --test it`).
fn worker_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join("worker");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "-p", "pglease-queue", "--example", "worker"])
            .status()
            .expect("run cargo");
        assert!(
            status.success() && path.exists(),
            "could not build {}",
            path.display()
        );
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_example_records_every_order_once_and_shuts_down_cleanly() {
    let su = superuser().await;
    let child = Command::new(worker_binary())
        .env("DATABASE_URL", conninfo("example-worker"))
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example");
    let recorded = eventually("ten orders recorded", Duration::from_secs(60), || async {
        let n: i64 = su
            .query_opt(
                "SELECT count(*) FROM example_orders \
                  WHERE to_regclass('example_orders') IS NOT NULL",
                &[],
            )
            .await
            .ok()
            .flatten()
            .map_or(0, |r| r.get(0));
        (n >= 10).then_some(n)
    })
    .await;
    assert_eq!(recorded, 10);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .expect("wait for the example");
    assert!(
        out.status.success(),
        "the example exited with {}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sent 10 orders") && !stdout.contains('\u{1b}'),
        "expected its log without colour codes in a pipe:\n{stdout}"
    );
    assert!(
        holders(&su, "example-orders")
            .await
            .iter()
            .all(Option::is_none),
        "every partition released"
    );
}
