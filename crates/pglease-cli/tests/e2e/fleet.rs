//! Fleet commands: `run --limit N` (a semaphore), `elect` and `leader`, and lease data in
//! `inspect` / `list`.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Case, binary, cluster, eventually, expect_eq};

/// A generous bound on what should take a moment (about correctness, never speed).
const LONG: Duration = Duration::from_secs(60);

/// The case's database name (the last part of its URL).
fn db(case: &Case) -> String {
    case.url.rsplit('/').next().unwrap().to_string()
}

/// One line of psql output for `sql` in the case's database.
fn psql(case: &Case, sql: &str) -> String {
    cluster().psql(&db(case), sql).unwrap().trim().to_string()
}

/// A shell command that writes `<slot> <epoch> <key>` to `DIR/NAME.start` and then waits for
/// `DIR/NAME.go`.
fn hold_until_go(dir: &str, name: &str) -> String {
    format!(
        "echo \"$PGLEASE_SLOT $PGLEASE_EPOCH $PGLEASE_KEY $PGLEASE_SEMAPHORE\" > {dir}/{name}.start; \
         while [ ! -e {dir}/{name}.go ]; do sleep 0.02; done"
    )
}

#[test]
fn run_with_a_limit_runs_at_most_n_commands_and_a_freed_slot_goes_to_a_waiting_run() {
    let case = Case::new("limit");
    let dir = case.path().display().to_string();
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec!["run", "--key", "backups", "--limit", "2", "--ttl", "30s"];
        args.extend_from_slice(extra);
        let script = hold_until_go(&dir, name);
        args.extend_from_slice(&["--", "sh", "-c"]);
        let mut cmd = case.pglease(args);
        cmd.args([script]);
        cmd.spawn()
    };
    let mut a = run("a", &[]);
    let a_start = a.read_when_written(&case.file("a.start"), LONG);
    let mut b = run("b", &[]);
    let b_start = b.read_when_written(&case.file("b.start"), LONG);
    let slot_of = |start: &str| -> (u32, String, String) {
        let f: Vec<&str> = start.split_whitespace().collect();
        assert_eq!(f.len(), 4, "slot, epoch, key, semaphore: {start:?}");
        assert_eq!(f[3], "backups", "PGLEASE_SEMAPHORE names the semaphore");
        (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
    };
    let (sa, _, ka) = slot_of(&a_start);
    let (sb, _, kb) = slot_of(&b_start);
    let mut slots = [sa, sb];
    slots.sort_unstable();
    expect_eq("the two runs hold the two slots", [1, 2], slots);
    expect_eq(
        "PGLEASE_KEY is the slot's lease key",
        format!("backups#{sa}"),
        ka,
    );
    expect_eq(
        "PGLEASE_KEY is the slot's lease key",
        format!("backups#{sb}"),
        kb,
    );

    // A third run without --wait is refused at once: every slot is held.
    let third = case
        .pglease([
            "run", "--key", "backups", "--limit", "2", "--ttl", "30s", "--", "true",
        ])
        .output();
    third.expect_code(3);
    assert!(
        third.stderr().contains("all 2 are held"),
        "{}",
        third.report()
    );

    // A fourth waits for a slot (it registered as a waiter on the held slots) ...
    let mut d = run("d", &["--wait", "60s"]);
    eventually("the waiting run to register for the slots", LONG, || {
        (psql(
            &case,
            "SELECT count(*) FROM lease.leases WHERE key LIKE 'backups#%' AND waiting",
        ) == "2")
            .then_some(())
    });
    assert!(
        !case.file("d.start").exists(),
        "a third command ran while both slots were held"
    );
    // ... and gets the slot the first run frees, at a higher epoch of that slot.
    std::fs::write(case.file("a.go"), "").unwrap();
    a.wait(LONG).expect_code(0);
    let d_start = d.read_when_written(&case.file("d.start"), LONG);
    let (sd, _, _) = slot_of(&d_start);
    expect_eq("the freed slot", sa, sd);
    let epoch = |start: &str| -> i64 { start.split_whitespace().nth(1).unwrap().parse().unwrap() };
    assert!(
        epoch(&d_start) > epoch(&a_start),
        "the slot's epoch went up: {a_start:?} then {d_start:?}"
    );
    std::fs::write(case.file("b.go"), "").unwrap();
    std::fs::write(case.file("d.go"), "").unwrap();
    b.wait(LONG).expect_code(0);
    d.wait(LONG).expect_code(0);
}

#[test]
fn a_semaphore_key_too_long_for_its_slot_keys_is_a_usage_error() {
    let case = Case::new("limit_usage");
    let long = "k".repeat(1019);
    let out = case
        .pglease([
            "run", "--key", &long, "--limit", "2", "--ttl", "30s", "--", "true",
        ])
        .output();
    out.expect_code(2);
    let zero = case
        .pglease([
            "run", "--key", "k", "--limit", "0", "--ttl", "30s", "--", "true",
        ])
        .output();
    zero.expect_code(2);
}

#[test]
fn elect_runs_the_command_on_the_leader_only_and_hands_over_when_it_exits() {
    let case = Case::new("elect");
    let dir = case.path().display().to_string();
    let elect = |name: &str, data: &str| {
        let script = format!(
            "echo \"$PGLEASE_EPOCH $PGLEASE_KEY\" > {dir}/{name}.start; \
             while [ ! -e {dir}/{name}.go ]; do sleep 0.02; done"
        );
        case.pglease([
            "elect",
            "scheduler",
            "--ttl",
            "30s",
            "--data",
            data,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
    };
    let mut first = elect("first", "10.0.0.1:8080");
    let first_start = first.read_when_written(&case.file("first.start"), LONG);
    let leader = case
        .pglease(["leader", "scheduler", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "the leader's data",
        "10.0.0.1:8080",
        leader["data"].as_str().unwrap(),
    );
    let first_epoch: i64 = first_start
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    expect_eq(
        "the leader's term",
        first_epoch,
        leader["epoch"].as_i64().unwrap(),
    );

    // The second candidate waits: registered as a waiter for the leader's release.
    let mut second = elect("second", "10.0.0.2:8080");
    eventually("the second candidate to wait", LONG, || {
        (psql(
            &case,
            "SELECT waiting FROM lease.leases WHERE key = 'scheduler'",
        ) == "t")
            .then_some(())
    });
    assert!(
        !case.file("second.start").exists(),
        "two leaders ran the command"
    );

    // The leader's command exits: it resigns and the second takes over, with a greater term.
    std::fs::write(case.file("first.go"), "").unwrap();
    first.wait(LONG).expect_code(0);
    let second_start = second.read_when_written(&case.file("second.start"), LONG);
    let second_epoch: i64 = second_start
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        second_epoch > first_epoch,
        "terms increase: {first_epoch} then {second_epoch}"
    );
    let leader = case
        .pglease(["leader", "scheduler", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "the new leader's data",
        "10.0.0.2:8080",
        leader["data"].as_str().unwrap(),
    );
    std::fs::write(case.file("second.go"), "").unwrap();
    second.wait(LONG).expect_code(0);

    // Nobody leads now: `leader` says so with exit 3.
    let none = case.pglease(["leader", "scheduler", "--json"]).output();
    none.expect_code(3);
    expect_eq("no leader", false, none.json()["leader"].as_bool().unwrap());
}

#[test]
fn elect_gives_up_after_its_wait_and_a_lost_leadership_stops_the_command() {
    let case = Case::new("elect_wait");
    // Someone else leads (a plain grant of the election's key, for an hour).
    case.pglease([
        "acquire", "--key", "sched", "--owner", "other", "--ttl", "1h",
    ])
    .expect_code(0);
    let out = case
        .pglease(["elect", "sched", "--wait", "200ms", "--", "true"])
        .output();
    out.expect_code(3);
    case.pglease([
        "release", "--key", "sched", "--owner", "other", "--epoch", "1",
    ])
    .expect_code(0);

    // Leadership taken away behind the leader's back (its grant lapsed and another owner took
    // the key): the command is stopped and elect exits 4.
    let dir = case.path().display().to_string();
    let mut leader = case
        .pglease([
            "elect",
            "sched",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!("echo $PGLEASE_EPOCH > {dir}/started; exec sleep 60"),
        ])
        .spawn();
    leader.read_when_written(&case.file("started"), LONG);
    psql(
        &case,
        "UPDATE lease.leases SET owner = 'usurper', epoch = epoch + 1 WHERE key = 'sched'",
    );
    leader.wait(LONG).expect_code(4);
}

/// Starts `pglease leader NAME --watch --json` with its stdout in `DIR/watch.out`.
fn watch(case: &Case, name: &str) -> std::process::Child {
    let out = std::fs::File::create(case.file("watch.out")).unwrap();
    Command::new(binary())
        .args(["leader", name, "--watch", "--json"])
        .env("DATABASE_URL", &case.url)
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The JSON lines `leader --watch` wrote so far.
fn watched(case: &Case) -> Vec<serde_json::Value> {
    std::fs::read_to_string(case.file("watch.out"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn leader_watch_prints_a_line_per_change_of_leader_or_data() {
    let case = Case::new("watch");
    let mut watcher = watch(&case, "sched");
    // First the current state (no leader), and the key is marked as watched.
    eventually("the first line", LONG, || {
        (watched(&case).len() == 1).then_some(())
    });
    expect_eq(
        "no leader at first",
        false,
        watched(&case)[0]["leader"].as_bool().unwrap(),
    );
    eventually("the key to be watched", LONG, || {
        (psql(
            &case,
            "SELECT watched_until > now() FROM lease.leases WHERE key = 'sched'",
        ) == "t")
            .then_some(())
    });

    let dir = case.path().display().to_string();
    let leader = case
        .pglease([
            "elect",
            "sched",
            "--data",
            "one",
            "--",
            "sh",
            "-c",
            &format!("while [ ! -e {dir}/go ]; do sleep 0.02; done"),
        ])
        .spawn();
    eventually("a line for the new leader", LONG, || {
        watched(&case)
            .last()
            .filter(|l| l["leader"].as_bool() == Some(true))
            .cloned()
    });
    let line = watched(&case).last().unwrap().clone();
    expect_eq("its data", "one", line["data"].as_str().unwrap());

    std::fs::write(case.file("go"), "").unwrap();
    leader.wait(LONG).expect_code(0);
    eventually("a line for no leader after the resignation", LONG, || {
        let lines = watched(&case);
        (lines.len() >= 3 && lines.last().unwrap()["leader"].as_bool() == Some(false)).then_some(())
    });
    let _ = watcher.kill();
    let _ = watcher.wait();
    // One line per change: no leader, the leader, no leader.
    let leaders: Vec<bool> = watched(&case)
        .iter()
        .map(|l| l["leader"].as_bool().unwrap())
        .collect();
    expect_eq("the changes", vec![false, true, false], leaders);
}

#[test]
fn inspect_and_list_show_the_data_of_a_held_lease_and_not_after_it_ends() {
    let case = Case::new("data");
    let dir = case.path().display().to_string();
    let mut run = case
        .pglease([
            "run",
            "--key",
            "job",
            "--ttl",
            "30s",
            "--data",
            "{\"host\":\"a\"}",
            "--",
            "sh",
            "-c",
            &format!("echo > {dir}/started; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
        ])
        .spawn();
    run.read_when_written(&case.file("started"), LONG);
    let inspected = case
        .pglease(["inspect", "job", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "inspect's data",
        "{\"host\":\"a\"}",
        inspected["data"].as_str().unwrap(),
    );
    let listed = case.pglease(["list", "--json"]).expect_code(0).json();
    expect_eq(
        "list's data",
        "{\"host\":\"a\"}",
        listed[0]["data"].as_str().unwrap(),
    );
    let text = case.pglease(["inspect", "job"]).expect_code(0).stdout();
    assert!(
        text.contains("data") && text.contains("{\"host\":\"a\"}"),
        "{text}"
    );
    let table = case.pglease(["list"]).expect_code(0).stdout();
    assert!(table.contains("DATA"), "{table}");

    std::fs::write(case.file("go"), "").unwrap();
    run.wait(LONG).expect_code(0);
    let inspected = case
        .pglease(["inspect", "job", "--json"])
        .expect_code(0)
        .json();
    assert!(
        inspected["data"].is_null(),
        "released: no data: {inspected}"
    );
}

#[test]
fn configure_shows_and_changes_the_ttl_cap_and_the_failover_quarantine() {
    let case = Case::new("configure");
    let shown = case.pglease(["configure", "--json"]).expect_code(0).json();
    expect_eq(
        "no cap by default",
        serde_json::Value::Null,
        shown["max_ttl_ms"].clone(),
    );
    expect_eq(
        "no quarantine by default",
        serde_json::Value::Null,
        shown["failover_quarantine_ms"].clone(),
    );
    expect_eq(
        "a server never promoted",
        1,
        shown["timeline"].as_i64().unwrap(),
    );

    let set = case
        .pglease([
            "configure",
            "--max-ttl",
            "1m",
            "--failover-quarantine",
            "70s",
            "--json",
        ])
        .expect_code(0)
        .json();
    expect_eq("the cap", 60_000, set["max_ttl_ms"].as_u64().unwrap());
    expect_eq(
        "the quarantine",
        70_000,
        set["failover_quarantine_ms"].as_u64().unwrap(),
    );
    expect_eq(
        "no quarantine runs without a promotion",
        serde_json::Value::Null,
        set["quarantine_until"].clone(),
    );
    // A ttl above the cap is refused by the server (exit 1, 22023); at the cap it is granted.
    let refused = case
        .pglease(["acquire", "--key", "capped", "--ttl", "2m"])
        .output();
    refused.expect_code(1);
    assert!(refused.stderr().contains("22023"), "{}", refused.report());
    case.pglease(["acquire", "--key", "capped", "--ttl", "1m"])
        .expect_code(0);

    // An option not given keeps its value; a quarantine shorter than the cap is refused.
    let kept = case
        .pglease(["configure", "--failover-quarantine", "2m", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "the cap is kept",
        60_000,
        kept["max_ttl_ms"].as_u64().unwrap(),
    );
    let short = case
        .pglease(["configure", "--failover-quarantine", "30s"])
        .output();
    short.expect_code(1);
    assert!(short.stderr().contains("22023"), "{}", short.report());

    // Removing the cap removes the quarantine that needs it.
    let cleared = case
        .pglease(["configure", "--no-max-ttl", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "no cap",
        serde_json::Value::Null,
        cleared["max_ttl_ms"].clone(),
    );
    expect_eq(
        "no quarantine",
        serde_json::Value::Null,
        cleared["failover_quarantine_ms"].clone(),
    );
    let text = case.pglease(["configure"]).expect_code(0).stdout();
    assert!(text.contains("max ttl: none"), "{text}");
}
