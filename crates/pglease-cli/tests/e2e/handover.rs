//! A key's grant history (`history`, and the last grants under `inspect`), handing a lease over
//! (`transfer`, `elect --handover-to`), and the graceful order of an elected leader stepping down
//! on SIGTERM: the leadership is held until the command has exited, then released or handed over.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Case, binary, cluster, eventually, expect_eq, read_when_written};

/// A generous bound on what should take a moment (about correctness, never speed).
const LONG: Duration = Duration::from_secs(60);

/// One line of psql output for `sql` in the case's database.
fn psql(case: &Case, sql: &str) -> String {
    let db = case.url.rsplit('/').next().unwrap().to_string();
    cluster().psql(&db, sql).unwrap().trim().to_string()
}

/// `(epoch, owner, ended_by)` of each grant of a `history --json` document.
fn grants(doc: &Value) -> Vec<(i64, String, Option<String>)> {
    doc["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| {
            (
                g["epoch"].as_i64().unwrap(),
                g["owner"].as_str().unwrap().to_owned(),
                g["ended_by"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn grant(owner: &str, epoch: i64, ended_by: Option<&str>) -> (i64, String, Option<String>) {
    (epoch, owner.to_owned(), ended_by.map(str::to_owned))
}

/// `acquire --json` as `owner` for `ttl`: the epoch.
fn acquire(case: &Case, key: &str, owner: &str, ttl: &str) -> i64 {
    case.pglease([
        "acquire", "--key", key, "--owner", owner, "--ttl", ttl, "--json",
    ])
    .expect_code(0)
    .json()["epoch"]
        .as_i64()
        .unwrap()
}

#[test]
fn history_prints_each_grant_as_a_table_or_json_and_inspect_shows_the_last_ones() {
    let case = Case::new("history");
    let e1 = acquire(&case, "hk", "alice", "1h");
    case.pglease([
        "release",
        "--key",
        "hk",
        "--owner",
        "alice",
        "--epoch",
        &e1.to_string(),
    ])
    .expect_code(0);
    // A grant of a millisecond has lapsed by the time the next command runs.
    let e2 = acquire(&case, "hk", "bob", "1ms");
    let e3 = acquire(&case, "hk", "carol", "1h");
    let moved = case
        .pglease([
            "transfer",
            "--key",
            "hk",
            "--owner",
            "carol",
            "--epoch",
            &e3.to_string(),
            "--to",
            "dave",
            "--ttl",
            "1h",
            "--json",
        ])
        .expect_code(0)
        .json();
    let e4 = moved["to_epoch"].as_i64().unwrap();
    expect_eq("epochs", (e1 + 2, e2 + 1, e3 + 1), (e2, e3, e4));

    let doc = case
        .pglease(["history", "hk", "--json"])
        .expect_code(0)
        .json();
    expect_eq("the key", "hk", doc["key"].as_str().unwrap());
    expect_eq(
        "the grants, oldest first",
        vec![
            grant("alice", e1, Some("released")),
            grant("bob", e2, Some("lapsed")),
            grant("carol", e3, Some("transferred")),
            grant("dave", e4, None),
        ],
        grants(&doc),
    );
    let all = doc["grants"].as_array().unwrap();
    let current = &all[3];
    expect_eq(
        "the current grant",
        true,
        current["current"].as_bool().unwrap(),
    );
    assert!(current["ended_at"].is_null() && current["expires_at"].is_string());
    assert!(current["duration_ms"].is_u64(), "{current}");
    for ended in &all[..3] {
        expect_eq("an ended grant", false, ended["current"].as_bool().unwrap());
        assert!(
            ended["granted_at"].is_string() && ended["ended_at"].is_string(),
            "{ended}"
        );
        assert!(ended["duration_ms"].is_u64(), "{ended}");
        assert!(ended["holder_role"].is_string(), "{ended}");
    }
    // A transfer ends a grant when the next begins.
    expect_eq(
        "the hand-over instant",
        &all[3]["granted_at"],
        &all[2]["ended_at"],
    );

    // The table: a header, a line per grant, the current one held.
    let text = case.pglease(["history", "hk"]).expect_code(0).stdout();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    expect_eq(
        "the header",
        vec!["EPOCH", "OWNER", "FROM", "TO", "DURATION", "ENDED", "BY"],
        header,
    );
    for (line, (epoch, owner, end)) in lines[1..].iter().zip([
        (e1, "alice", "released"),
        (e2, "bob", "lapsed"),
        (e3, "carol", "transferred"),
        (e4, "dave", "held (expires in"),
    ]) {
        assert!(
            line.starts_with(&format!("{epoch} ")) && line.contains(owner) && line.contains(end),
            "{line:?} in\n{text}"
        );
    }
    assert!(lines[4].contains(" so far"), "{text}");

    // Filters.
    let of = |args: &[&str]| {
        let mut all = vec!["history", "hk", "--json"];
        all.extend_from_slice(args);
        grants(&case.pglease(all).expect_code(0).json())
    };
    expect_eq(
        "--owner",
        vec![grant("bob", e2, Some("lapsed"))],
        of(&["--owner", "bob"]),
    );
    expect_eq(
        "--limit 2: the latest two",
        vec![
            grant("carol", e3, Some("transferred")),
            grant("dave", e4, None),
        ],
        of(&["--limit", "2"]),
    );
    expect_eq("--since 1h", 4, of(&["--since", "1h"]).len());
    expect_eq(
        "--since a future time: only the current grant",
        vec![grant("dave", e4, None)],
        of(&["--since", "2999-01-01T00:00:00Z"]),
    );
    case.pglease(["history", "hk", "--since", "yesterday"])
        .expect_code(2);
    case.pglease(["history", "hk", "--limit", "0"])
        .expect_code(2);
    let none = case.pglease(["history", "never-leased"]).expect_code(0);
    assert!(
        none.stdout().is_empty() && none.stderr().contains("no recorded grants"),
        "{}",
        none.report()
    );

    // inspect: the state, then the last 5 grants.
    for i in 0..3 {
        let e = case
            .pglease([
                "transfer",
                "--key",
                "hk",
                "--owner",
                "dave",
                "--epoch",
                &e4.to_string(),
                "--to",
                "erin",
                "--ttl",
                "1h",
            ])
            .output();
        // Only the first succeeds: then dave's epoch is fenced.
        e.expect_code(if i == 0 { 0 } else { 4 });
    }
    let doc = case
        .pglease(["inspect", "hk", "--json"])
        .expect_code(0)
        .json();
    expect_eq("inspect's owner", "erin", doc["owner"].as_str().unwrap());
    let recent: Vec<i64> = doc["recent"]
        .as_array()
        .expect("recent")
        .iter()
        .map(|g| g["epoch"].as_i64().unwrap())
        .collect();
    expect_eq("the last 5 grants", vec![e1, e2, e3, e4, e4 + 1], recent);
    let text = case.pglease(["inspect", "hk"]).expect_code(0).stdout();
    assert!(
        text.lines()
            .any(|l| l.starts_with("state") && l.ends_with(" held"))
            && text.contains("last grants (`pglease history hk` shows more):")
            && text.contains("EPOCH")
            && text.contains("transferred")
            && text.contains("held (expires in"),
        "{text}"
    );
    // A key never leased: no last grants.
    let doc = case
        .pglease(["inspect", "never-leased", "--json"])
        .expect_code(0)
        .json();
    expect_eq("no grants", 0, doc["recent"].as_array().unwrap().len());
}

#[test]
fn transfer_exits_0_when_done_4_when_refused_and_2_on_a_bad_command_line() {
    let case = Case::new("transfer");
    let epoch = acquire(&case, "tk", "alice", "1h");
    let transfer = |owner: &str, epoch: i64, to: &str| {
        case.pglease([
            "transfer",
            "--key",
            "tk",
            "--owner",
            owner,
            "--epoch",
            &epoch.to_string(),
            "--to",
            to,
            "--ttl",
            "1h",
            "--json",
        ])
        .output()
    };
    let state = || {
        case.pglease(["inspect", "tk", "--json"])
            .expect_code(0)
            .json()
    };
    let before = state();

    for (owner, e, status) in [
        ("alice", epoch + 1, "epoch_mismatch"),
        ("mallory", epoch, "not_owner"),
    ] {
        let out = transfer(owner, e, "bob");
        out.expect_code(4);
        let doc = out.json();
        expect_eq("status", status, doc["status"].as_str().unwrap());
        expect_eq("transferred", false, doc["transferred"].as_bool().unwrap());
        assert!(doc["to_epoch"].is_null() && doc["expires_at"].is_null());
    }
    expect_eq("nothing changed", &before["owner"], &state()["owner"]);
    expect_eq("nothing changed", &before["epoch"], &state()["epoch"]);
    let text = case
        .pglease([
            "transfer", "--key", "tk", "--owner", "alice", "--epoch", "999", "--to", "bob",
            "--ttl", "1h",
        ])
        .output();
    text.expect_code(4);
    assert!(
        text.stderr().contains("transfer refused: epoch_mismatch"),
        "{}",
        text.report()
    );
    // Invalid command lines: nothing is sent.
    case.pglease([
        "transfer", "--key", "tk", "--owner", "alice", "--epoch", "1", "--to", "", "--ttl", "1h",
    ])
    .expect_code(2);
    case.pglease([
        "transfer", "--key", "tk", "--owner", "alice", "--epoch", "1", "--ttl", "1h",
    ])
    .expect_code(2);

    // Done: bob holds the key at the next epoch; alice's epoch is fenced (release refused: 4).
    let text = case
        .pglease([
            "transfer",
            "--key",
            "tk",
            "--owner",
            "alice",
            "--epoch",
            &epoch.to_string(),
            "--to",
            "bob",
            "--ttl",
            "1h",
        ])
        .expect_code(0)
        .stdout();
    assert!(
        text.contains("transferred  tk") && text.contains(&format!("epoch        {}", epoch + 1)),
        "{text}"
    );
    let after = state();
    expect_eq("the new holder", "bob", after["owner"].as_str().unwrap());
    expect_eq("its epoch", epoch + 1, after["epoch"].as_i64().unwrap());
    case.pglease([
        "release",
        "--key",
        "tk",
        "--owner",
        "alice",
        "--epoch",
        &epoch.to_string(),
    ])
    .expect_code(4);
    // A lapsed grant cannot be handed over.
    let short = acquire(&case, "tk2", "alice", "1ms");
    let out = case
        .pglease([
            "transfer",
            "--key",
            "tk2",
            "--owner",
            "alice",
            "--epoch",
            &short.to_string(),
            "--to",
            "bob",
            "--ttl",
            "1h",
            "--json",
        ])
        .output();
    out.expect_code(4);
    expect_eq("lapsed", "lapsed", out.json()["status"].as_str().unwrap());
}

/// A shell command for an elected leader: writes `$PGLEASE_EPOCH $PGLEASE_OWNER` to `DIR/NAME.start`,
/// and on SIGTERM writes what `pglease inspect --json` says of its key to `DIR/NAME.during` and
/// exits 0; otherwise exits 0 once `DIR/NAME.go` exists.
fn leader_script(dir: &str, name: &str) -> String {
    let pglease = binary().display().to_string();
    format!(
        "trap '\"{pglease}\" inspect --key \"$PGLEASE_KEY\" --json > {dir}/{name}.tmp; \
         mv {dir}/{name}.tmp {dir}/{name}.during; exit 0' TERM; \
         echo \"$PGLEASE_EPOCH $PGLEASE_OWNER\" > {dir}/{name}.start; \
         while [ ! -e {dir}/{name}.go ]; do sleep 0.02; done"
    )
}

/// `(epoch, owner)` from a `.start` file.
fn started(text: &str) -> (i64, String) {
    let mut words = text.split_whitespace();
    let epoch = words.next().unwrap().parse().unwrap();
    (epoch, words.next().unwrap().to_owned())
}

fn sigterm(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions; the test started this process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

#[test]
fn elect_hands_over_to_the_named_candidate_when_its_command_exits() {
    let case = Case::new("handover");
    let dir = case.path().display().to_string();
    // A ttl far above the bound below: the successor is woken by the transfer, not the lapse.
    let elect = |name: &str, extra: &[&str]| {
        let mut args = vec!["elect", "sched", "--ttl", "120s", "--exact-owner", name];
        args.extend_from_slice(extra);
        let script = leader_script(&dir, name);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        case.pglease(args).spawn()
    };
    let mut first = elect("cand-a", &["--handover-to", "cand-b"]);
    let (term, owner) = started(&first.read_when_written(&case.file("cand-a.start"), LONG));
    expect_eq("the exact owner", "cand-a", owner.as_str());
    let mut second = elect("cand-b", &[]);
    eventually("cand-b to wait as a registered waiter", LONG, || {
        (psql(
            &case,
            "SELECT waiting FROM lease.leases WHERE key = 'sched'",
        ) == "t")
            .then_some(())
    });

    std::fs::write(case.file("cand-a.go"), "").unwrap();
    let out = first.wait(LONG);
    out.expect_code(0);
    assert!(
        out.stderr().contains(&format!(
            "handed the leadership of sched to cand-b (its term: epoch {})",
            term + 1
        )),
        "{}",
        out.report()
    );
    let (next, owner) =
        started(&second.read_when_written(&case.file("cand-b.start"), Duration::from_secs(20)));
    expect_eq(
        "the successor's term",
        (term + 1, "cand-b"),
        (next, owner.as_str()),
    );
    let doc = case
        .pglease(["history", "sched", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "the history",
        vec![
            grant("cand-a", term, Some("transferred")),
            grant("cand-b", term + 1, None),
        ],
        grants(&doc),
    );
    // cand-b has no --handover-to: it releases.
    std::fs::write(case.file("cand-b.go"), "").unwrap();
    second.wait(LONG).expect_code(0);
    let doc = case
        .pglease(["history", "sched", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "released at the end",
        Some("released".to_owned()),
        grants(&doc)[1].2.clone(),
    );
    // A candidate cannot name itself.
    case.pglease([
        "elect",
        "sched",
        "--exact-owner",
        "x",
        "--handover-to",
        "x",
        "--",
        "true",
    ])
    .expect_code(2);
}

#[test]
fn elect_on_sigterm_keeps_the_leadership_until_the_command_exited_then_hands_it_over() {
    let case = Case::new("handover_sigterm");
    let dir = case.path().display().to_string();
    let elect = |name: &str, extra: &[&str]| {
        let mut args = vec!["elect", "svc", "--ttl", "120s", "--exact-owner", name];
        args.extend_from_slice(extra);
        let script = leader_script(&dir, name);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        case.pglease(args).spawn()
    };
    let mut first = elect("svc-a", &["--handover-to", "svc-b"]);
    let (term, _) = started(&first.read_when_written(&case.file("svc-a.start"), LONG));
    let mut second = elect("svc-b", &[]);
    eventually("svc-b to wait as a registered waiter", LONG, || {
        (psql(&case, "SELECT waiting FROM lease.leases WHERE key = 'svc'") == "t").then_some(())
    });

    sigterm(first.pid());
    // The command handled SIGTERM while svc-a still led: the leadership is kept until it exits.
    let during: Value =
        serde_json::from_str(&read_when_written(&case.file("svc-a.during"), LONG)).unwrap();
    expect_eq(
        "the leadership while the command stops",
        ("held", "svc-a", term),
        (
            during["state"].as_str().unwrap(),
            during["owner"].as_str().unwrap(),
            during["epoch"].as_i64().unwrap(),
        ),
    );
    let out = first.wait(LONG);
    out.expect_code(0); // the command's own status (it exited 0 on SIGTERM)
    assert!(
        out.stderr()
            .contains("handed the leadership of svc to svc-b"),
        "{}",
        out.report()
    );
    let (next, owner) =
        started(&second.read_when_written(&case.file("svc-b.start"), Duration::from_secs(20)));
    expect_eq(
        "the successor's term",
        (term + 1, "svc-b"),
        (next, owner.as_str()),
    );
    std::fs::write(case.file("svc-b.go"), "").unwrap();
    second.wait(LONG).expect_code(0);
}

#[test]
fn elect_on_sigterm_releases_only_after_the_command_exited() {
    let case = Case::new("elect_sigterm");
    let dir = case.path().display().to_string();
    let script = leader_script(&dir, "only");
    let mut leader = case
        .pglease(["elect", "solo", "--ttl", "30s", "--", "sh", "-c", &script])
        .spawn();
    let (term, owner) = started(&leader.read_when_written(&case.file("only.start"), LONG));
    sigterm(leader.pid());
    let during: Value =
        serde_json::from_str(&read_when_written(&case.file("only.during"), LONG)).unwrap();
    expect_eq(
        "held while the command stops",
        ("held", owner.as_str(), term),
        (
            during["state"].as_str().unwrap(),
            during["owner"].as_str().unwrap(),
            during["epoch"].as_i64().unwrap(),
        ),
    );
    leader.wait(LONG).expect_code(0);
    // Released once it had exited: free, its counter one above the term.
    let after = case
        .pglease(["inspect", "solo", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "released after the command exited",
        ("not_held", term + 1),
        (
            after["state"].as_str().unwrap(),
            after["epoch"].as_i64().unwrap(),
        ),
    );
    expect_eq(
        "its history",
        Some("released"),
        after["recent"][0]["ended_by"].as_str(),
    );
}

#[test]
fn configure_shows_and_changes_whether_grants_are_recorded_and_for_how_long() {
    let case = Case::new("history_config");
    let shown = case.pglease(["configure", "--json"]).expect_code(0).json();
    expect_eq("on by default", true, shown["history"].as_bool().unwrap());
    expect_eq(
        "30 days by default",
        30 * 86_400_000,
        shown["history_retention_ms"].as_u64().unwrap(),
    );
    let off = case
        .pglease([
            "configure",
            "--history",
            "off",
            "--history-retention",
            "7d",
            "--json",
        ])
        .expect_code(0)
        .json();
    expect_eq(
        "off, 7 days",
        (false, 7 * 86_400_000),
        (
            off["history"].as_bool().unwrap(),
            off["history_retention_ms"].as_u64().unwrap(),
        ),
    );
    // Not recorded while off.
    acquire(&case, "quiet", "alice", "1h");
    let doc = case
        .pglease(["history", "quiet", "--json"])
        .expect_code(0)
        .json();
    expect_eq("nothing recorded", 0, grants(&doc).len());
    // On again, the retention kept; the next grant is recorded.
    let on = case
        .pglease(["configure", "--history", "on", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "on, still 7 days",
        (true, 7 * 86_400_000),
        (
            on["history"].as_bool().unwrap(),
            on["history_retention_ms"].as_u64().unwrap(),
        ),
    );
    acquire(&case, "loud", "bob", "1h");
    let doc = case
        .pglease(["history", "loud", "--json"])
        .expect_code(0)
        .json();
    expect_eq("recorded", vec![grant("bob", 1, None)], grants(&doc));
    let text = case.pglease(["configure"]).expect_code(0).stdout();
    assert!(text.contains("history: on, kept 7d00h"), "{text}");
    case.pglease(["configure", "--history", "maybe"])
        .expect_code(2);
    case.pglease(["configure", "--history-retention", "500ms"])
        .expect_code(2);
}
