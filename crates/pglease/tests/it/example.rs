//! `examples/lifecycle.rs` end to end: connected by `DATABASE_URL`, it walks the whole life cycle
//! and exits successfully, printing plain text (no colour codes) into a pipe.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::conninfo;

/// The example's binary: built by `cargo test` (all targets) next to this test binary's
/// directory, or built here with the cargo that runs the tests (`cargo test --test it`).
fn lifecycle_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join("lifecycle");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "-p", "pglease", "--example", "lifecycle"])
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
async fn the_lifecycle_example_runs_on_database_url_and_prints_no_colour_into_a_pipe() {
    let url = conninfo("example-lifecycle");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(lifecycle_binary())
            .env("DATABASE_URL", url)
            .env_remove("NO_COLOR")
            .env_remove("PGLEASE_LOCAL_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("run the example")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the example exited with {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("stale write refused") && !stdout.contains('\u{1b}'),
        "expected the whole walk, without colour codes:\n{stdout}"
    );
    assert!(
        !stderr.contains("local server"),
        "DATABASE_URL was given, yet:\n{stderr}"
    );
}
