//! `pglease run`: mutual exclusion between runs (also when their default owners would collide, and
//! for what a command leaves running), termination on loss (also when pglease itself is stalled),
//! signal forwarding.

use std::time::Duration;

use crate::common::{Case, eventually, expect_eq, read_when_written, start_cluster};

/// A generous bound on what should take a moment (about correctness, never speed).
pub const LONG: Duration = Duration::from_secs(60);

/// Parses `<epoch> <nanoseconds>` as written by the children below.
fn stamp(text: &str) -> (i64, u128) {
    let mut parts = text.split_whitespace();
    let epoch = parts.next().and_then(|p| p.parse().ok());
    let nanos = parts.next().and_then(|p| p.parse().ok());
    match (epoch, nanos) {
        (Some(e), Some(n)) => (e, n),
        _ => panic!("expected `<epoch> <nanoseconds>`, got {text:?}"),
    }
}

#[test]
fn a_second_run_waits_and_starts_only_after_the_first_exits() {
    let case = Case::new("ordering");
    let dir = case.path().display().to_string();
    // The first holder writes when it starts, waits for the test's go-ahead, writes when it ends.
    let mut first = case
        .pglease([
            "run",
            "--key",
            "ordered",
            "--ttl",
            "30s",
            "--",
            "sh",
            "-c",
            &format!(
                "echo \"$PGLEASE_EPOCH $(date +%s%N)\" > {dir}/a.start; \
                 while [ ! -e {dir}/go ]; do sleep 0.02; done; \
                 echo \"$PGLEASE_EPOCH $(date +%s%N)\" > {dir}/a.end"
            ),
        ])
        .spawn();
    first.read_when_written(&case.file("a.start"), LONG);

    let second = case
        .pglease([
            "run",
            "--key",
            "ordered",
            "--ttl",
            "30s",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!("echo \"$PGLEASE_EPOCH $(date +%s%N)\" > {dir}/b.start"),
        ])
        .spawn();
    // The second run is waiting: registered as a waiter for the holder's release (the client
    // library's way), or inside a blocking `lease.acquire` (sleeping between polls on the server).
    let db = case.url.rsplit('/').next().unwrap().to_string();
    eventually("the second run to wait for the key", LONG, || {
        let waiting = crate::common::cluster()
            .psql(
                &db,
                "SELECT coalesce((SELECT waiting FROM lease.leases WHERE key = 'ordered'), false) \
                     OR EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() \
                                AND wait_event = 'PgSleep' AND query LIKE '%lease.acquire%')",
            )
            .unwrap();
        (waiting.trim() == "t").then_some(())
    });
    // ... and its command has not started.
    assert!(
        !case.file("b.start").exists(),
        "the second command started while the first held the key"
    );

    std::fs::write(case.file("go"), "").unwrap();
    first.wait(LONG).expect_code(0);
    second.wait(LONG).expect_code(0);

    let (a_epoch, a_end) = stamp(&read_when_written(&case.file("a.end"), LONG));
    let (b_epoch, b_start) = stamp(&read_when_written(&case.file("b.start"), LONG));
    assert!(
        a_end <= b_start,
        "\nthe second command started before the first ended\n  first ended:    {a_end} ns\n  second started: {b_start} ns\n"
    );
    assert!(
        b_epoch > a_epoch,
        "\nthe second grant's epoch must be greater\n  first:  {a_epoch}\n  second: {b_epoch}\n"
    );
}

#[test]
fn a_command_that_outlives_its_lease_is_terminated() {
    // A server of its own: pausing it must not stall the other cases.
    let cluster = start_cluster();
    let case = Case::on(&cluster, "lost");
    let dir = case.path().display().to_string();
    let mut run = case
        .pglease([
            "run",
            "--key",
            "doomed",
            "--ttl",
            "2s",
            "--kill-after",
            "5s",
            "--",
            "sh",
            "-c",
            &format!(
                "trap 'echo terminated > {dir}/terminated; exit 0' TERM; \
                 echo started > {dir}/started; \
                 while :; do sleep 0.05; done"
            ),
        ])
        .spawn();
    run.read_when_written(&case.file("started"), LONG);
    cluster.pause();
    let out = run.wait(LONG);
    cluster.resume();
    out.expect_code(4);
    expect_eq(
        "the command's TERM trap ran",
        "terminated\n".to_string(),
        std::fs::read_to_string(case.file("terminated")).unwrap_or_default(),
    );
    assert!(
        out.stderr().contains("lost the lease on doomed"),
        "\nexpected stderr to say the lease was lost\n{}\n",
        out.report()
    );
}

#[test]
fn signals_to_pglease_are_forwarded_to_the_command() {
    let case = Case::new("signals");
    let dir = case.path().display().to_string();
    let mut run = case
        .pglease([
            "run",
            "--key",
            "forwarded",
            "--ttl",
            "30s",
            "--",
            "sh",
            "-c",
            &format!(
                "trap 'echo TERM > {dir}/trapped; exit 5' TERM; \
                 echo ready > {dir}/ready; \
                 while :; do sleep 0.05; done"
            ),
        ])
        .spawn();
    run.read_when_written(&case.file("ready"), LONG);
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(run.pid(), libc::SIGTERM) }, 0);
    let out = run.wait(LONG);
    out.expect_code(5); // the command's own status passes through
    expect_eq(
        "the command's trap saw",
        "TERM\n".to_string(),
        read_when_written(&case.file("trapped"), LONG),
    );
    // And the lease was released on the way out.
    let state = case
        .pglease(["inspect", "--key", "forwarded", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "held after the run",
        &serde_json::Value::Bool(false),
        &state["held"],
    );
}

#[test]
fn the_command_gets_the_lease_in_its_environment() {
    let case = Case::new("environment");
    let out = case
        .pglease([
            "run",
            "--key",
            "env-key",
            "--owner",
            "env-owner",
            "--ttl",
            "30s",
            "--",
            "sh",
            "-c",
            "echo \"$PGLEASE_KEY $PGLEASE_OWNER $PGLEASE_EPOCH\"",
        ])
        .expect_code(0);
    // The owner is the given one with the run's nonce (16 hex digits) appended.
    let printed = out.stdout();
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert!(
        fields.len() == 3
            && fields[0] == "env-key"
            && fields[2] == "1"
            && fields[1].strip_prefix("env-owner-").is_some_and(|nonce| {
                nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit())
            }),
        "\nexpected `env-key env-owner-<16 hex digits> 1`\n{}\n",
        out.report()
    );
}

#[test]
fn a_command_longer_than_the_ttl_keeps_its_lease() {
    let case = Case::new("renewed");
    let dir = case.path().display().to_string();
    // Two and a half ttls long: only a kept-alive lease lets it finish. It then stays until the
    // test has inspected the lease, so the lease is still the command's when `inspect` looks.
    let mut run = case
        .pglease([
            "run",
            "--key",
            "long",
            "--owner",
            "long-owner",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!(
                "sleep 5; echo \"$PGLEASE_OWNER\" > {dir}/owner; echo \"$PGLEASE_EPOCH\" > {dir}/done; \
                 while [ ! -e {dir}/go ]; do sleep 0.02; done"
            ),
        ])
        .spawn();
    run.read_when_written(&case.file("done"), LONG);
    let state = case
        .pglease(["inspect", "--key", "long", "--json"])
        .output();
    std::fs::write(case.file("go"), "").unwrap();
    let out = run.wait(LONG);
    out.expect_code(0);
    state.expect_code(0);
    let state = state.json();
    expect_eq(
        "held after two and a half ttls",
        &serde_json::Value::Bool(true),
        &state["held"],
    );
    let owner = std::fs::read_to_string(case.file("owner")).unwrap();
    assert!(
        owner.starts_with("long-owner-"),
        "the run's owner: {owner:?}"
    );
    expect_eq(
        "the holder after two and a half ttls",
        &serde_json::Value::from(owner.trim()),
        &state["owner"],
    );
    expect_eq(
        "the epoch held after two and a half ttls",
        &serde_json::Value::from(1),
        &state["epoch"],
    );
    expect_eq(
        "the epoch the command saw",
        "1\n".to_string(),
        std::fs::read_to_string(case.file("done")).unwrap(),
    );
}
