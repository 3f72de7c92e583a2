//! The embedded default: without a URL, commands start a private local server on demand, later
//! invocations reuse it, and `local stop` stops it.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Case, eventually, expect_eq};

/// Stops the case's local server however the test ends.
struct StopOnDrop<'a>(&'a Case);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.bare(["local", "stop"]).output();
    }
}

fn pid_alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn the_local_server_starts_on_demand_is_reused_and_stops() {
    let case = Case::new("local");
    let _stop = StopOnDrop(&case);
    let local_dir = case.file("local").display().to_string();

    let before = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "running before any command",
        &Value::Bool(false),
        &before["running"],
    );
    expect_eq("dir", &Value::from(local_dir.clone()), &before["dir"]);

    // A lease command without a URL starts the server and uses it.
    let granted = case
        .bare([
            "acquire",
            "-k",
            "local-key",
            "-o",
            "me",
            "-t",
            "1m",
            "--json",
        ])
        .expect_code(0)
        .json();
    expect_eq(
        "acquired on the local server",
        &Value::Bool(true),
        &granted["acquired"],
    );

    let first = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "running after a command",
        &Value::Bool(true),
        &first["running"],
    );
    let pid = first["pid"].as_i64().expect("a pid while running");

    // A second invocation reuses the same server (same postmaster) and sees the same lease.
    let again = case
        .bare(["local", "start", "--json"])
        .expect_code(0)
        .json();
    expect_eq("pid after a second start", Some(pid), again["pid"].as_i64());
    expect_eq("url after a second start", &first["url"], &again["url"]);
    let state = case
        .bare(["inspect", "-k", "local-key", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "holder seen by a later invocation",
        &Value::from("me"),
        &state["owner"],
    );

    // `local url` is a URL that pglease (and libpq) can use.
    let url = case
        .bare(["local", "url"])
        .expect_code(0)
        .stdout()
        .trim()
        .to_string();
    expect_eq("local url", first["url"].as_str().unwrap(), url.as_str());
    let status = case
        .bare(["status", "--json", "--database-url", &url])
        .expect_code(0)
        .json();
    expect_eq(
        "pg_lease in the local server",
        &Value::from(pglease::VERSION),
        &status["pg_lease"]["version"],
    );
    expect_eq(
        "leases via the url",
        Some(1),
        status["leases"]["held"].as_i64(),
    );

    case.bare(["local", "stop"]).expect_code(0);
    let after = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq("running after stop", &Value::Bool(false), &after["running"]);
    eventually("the postmaster to exit", Duration::from_secs(30), || {
        (!pid_alive(pid)).then_some(())
    });

    // Data persists: the next command restarts the server and the lease is still there.
    let state = case
        .bare(["inspect", "-k", "local-key", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "holder after a restart",
        &Value::from("me"),
        &state["owner"],
    );
}

#[test]
fn concurrent_first_starts_create_one_server() {
    let case = Case::new("local_race");
    let _stop = StopOnDrop(&case);
    let starters: Vec<_> = (0..3)
        .map(|_| case.bare(["local", "start", "--json"]).spawn())
        .collect();
    let pids: Vec<Option<i64>> = starters
        .into_iter()
        .map(|s| {
            let out = s.wait(Duration::from_secs(120));
            out.expect_code(0);
            out.json()["pid"].as_i64()
        })
        .collect();
    assert!(pids[0].is_some(), "a pid: {pids:?}");
    expect_eq(
        "every starter sees the same server",
        &pids[..1].repeat(3),
        &pids,
    );
    let status = case.bare(["status", "--json"]).expect_code(0).json();
    expect_eq(
        "pg_lease in the local server",
        &Value::from(pglease::VERSION),
        &status["pg_lease"]["version"],
    );
}
