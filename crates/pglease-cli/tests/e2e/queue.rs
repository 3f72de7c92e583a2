//! `pglease queue ...`: create, send, stats, dead letters, redrive, drop, on a real server, as
//! scripts use them (`--json`), with the documented exit codes.

use serde_json::Value;

use crate::common::{Case, expect_eq};

/// A case whose database also has pg_lease_queue.
fn queue_case(name: &str) -> Case {
    let case = Case::new(name);
    case.pglease(["install", "pg_lease_queue"]).expect_code(0);
    case
}

#[test]
fn create_send_and_stats_show_the_messages_in_their_partitions() {
    let case = queue_case("queue_cli_flow");
    let created = case
        .pglease(["queue", "create", "orders", "--partitions", "4", "--json"])
        .expect_code(0)
        .json();
    expect_eq("create.partitions", &Value::from(4), &created["partitions"]);
    expect_eq("create.notify", &Value::Bool(true), &created["notify"]);

    let first = case
        .pglease([
            "queue",
            "send",
            "orders",
            "--key",
            "c42",
            r#"{"n": 1}"#,
            "--json",
        ])
        .expect_code(0)
        .json();
    let second = case
        .pglease([
            "queue",
            "send",
            "orders",
            "-k",
            "c42",
            r#"{"n": 2}"#,
            "--json",
        ])
        .expect_code(0)
        .json();
    // One key, one partition; ids increase.
    expect_eq("same partition", &first["partition"], &second["partition"]);
    assert!(second["id"].as_i64() > first["id"].as_i64());

    let stats = case
        .pglease(["queue", "stats", "orders", "--json"])
        .expect_code(0)
        .json();
    let partitions = stats.as_array().expect("an array of partitions");
    expect_eq("partitions listed", 4, partitions.len());
    let p = first["partition"].as_u64().unwrap() as usize;
    expect_eq(
        "backlog of c42's partition",
        &Value::from(2),
        &partitions[p]["backlog"],
    );
    let total: i64 = partitions
        .iter()
        .map(|x| x["backlog"].as_i64().unwrap())
        .sum();
    expect_eq("total backlog", 2, total);
    expect_eq("no holder", &Value::Null, &partitions[p]["owner"]);

    let text = case.pglease(["queue", "stats", "orders"]).expect_code(0);
    assert!(text.stdout().contains("BACKLOG"), "{}", text.report());

    // No terminal to ask on (stdin is /dev/null) and no --yes: a usage error, nothing dropped.
    let refused = case.pglease(["queue", "drop", "orders"]).expect_code(2);
    assert!(refused.stderr().contains("--yes"), "{}", refused.report());
    case.pglease(["queue", "stats", "orders"]).expect_code(0);
    case.pglease(["queue", "drop", "orders", "--yes"])
        .expect_code(0);
    // A missing queue is told in pglease's terms, its SQLSTATE kept.
    let out = case.pglease(["queue", "stats", "orders"]).expect_code(1);
    let stderr = out.stderr();
    assert!(
        stderr.contains("queue orders does not exist: create it with `pglease queue create orders")
            && stderr.contains("(SQLSTATE LQ001)")
            && !stderr.contains("lease_queue.create_queue"),
        "{}",
        out.report()
    );
    // With --json the error is also a document on stdout, with its SQLSTATE.
    let doc = case
        .pglease(["queue", "stats", "orders", "--json"])
        .expect_code(1)
        .json();
    expect_eq("sqlstate", &Value::from("LQ001"), &doc["sqlstate"]);
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("pglease queue create orders"),
        "{doc}"
    );
    for args in [
        vec!["queue", "send", "orders", "1"],
        vec!["queue", "consume", "orders", "--", "true"],
    ] {
        let out = case.pglease(&args).expect_code(1);
        assert!(
            out.stderr().contains("`pglease queue create orders")
                && out.stderr().contains("(SQLSTATE LQ001)"),
            "{}",
            out.report()
        );
    }
}

#[test]
fn usage_errors_exit_2_and_server_refusals_exit_1() {
    let case = queue_case("queue_cli_errors");
    // Usage: bad queue name, partitions out of range, redrive without a choice, bad delay.
    for args in [
        vec!["queue", "create", "bad name", "-p", "1"],
        vec!["queue", "create", "q", "-p", "0"],
        vec!["queue", "create", "q", "-p", "1025"],
        vec!["queue", "redrive", "q"],
        vec!["queue", "redrive", "q", "--all", "--unkeyed"],
        vec!["queue", "send", "q", "--delay", "-1s", "1"],
    ] {
        case.pglease(&args).expect_code(2);
    }
    // Not JSON: a usage error before connecting, with the shell quoting that keeps JSON intact;
    // from stdin too.
    let out = case
        .pglease(["queue", "send", "q", "{order: 42}"])
        .expect_code(2);
    assert!(
        out.stderr().contains("not JSON") && out.stderr().contains(r#"'{"order": 42}'"#),
        "{}",
        out.report()
    );
    let out = case
        .pglease([
            "queue",
            "send",
            "q",
            "--database-url",
            "postgresql://nowhere.invalid/x",
        ])
        .expect_code(2);
    assert!(out.stderr().contains("not JSON"), "{}", out.report());
    // The server's refusals: a missing queue, a duplicate.
    case.pglease(["queue", "send", "missing", "1"])
        .expect_code(1);
    case.pglease(["queue", "create", "dup", "-p", "1"])
        .expect_code(0);
    case.pglease(["queue", "create", "dup", "-p", "1"])
        .expect_code(1);
}

#[test]
fn queue_commands_say_how_to_install_the_extension_when_it_is_missing() {
    let case = Case::new("queue_cli_missing_ext");
    let out = case.pglease(["queue", "stats"]).expect_code(5);
    assert!(
        out.stderr().contains("pglease install pg_lease_queue"),
        "{}",
        out.report()
    );
}

#[test]
fn dead_letters_are_listed_and_redriven_in_order() {
    let case = queue_case("queue_cli_dead");
    case.pglease(["queue", "create", "jobs", "-p", "1", "--max-attempts", "1"])
        .expect_code(0);
    for n in ["1", "2"] {
        case.pglease(["queue", "send", "jobs", "-k", "k", n])
            .expect_code(0);
    }
    // Dead-letter both through SQL: one delivery each (max_attempts 1), then nacks.
    let psql = |sql: &str| {
        let out = std::process::Command::new(crate::common::psql())
            .args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-d",
                &case.url,
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    psql(
        "SELECT lease_queue.claim('jobs', 0, 'w', '1 hour');
         SELECT lease_queue.nack('jobs', 0, 'w', 1, r.batch_id, r.id)
           FROM lease_queue.receive('jobs', 0, 'w', 1, 10) AS r ORDER BY r.id LIMIT 1;",
    );
    let dead = case
        .pglease(["queue", "dead-letters", "jobs", "--json"])
        .expect_code(0)
        .json();
    let dead = dead.as_array().unwrap();
    expect_eq("dead letters", 1, dead.len());
    expect_eq("its payload", &Value::from(1), &dead[0]["payload"]);
    expect_eq("its attempts", &Value::from(1), &dead[0]["attempts"]);

    // Refused while the key is in the open batch (message 2 went back undelivered, but the batch
    // is still open): 55006, exit 1.
    psql(
        "SELECT lease_queue.ack('jobs', 0, 'w', 1, batch_id) FROM lease_queue.status('jobs') WHERE batch_id IS NOT NULL",
    );
    let redriven = case
        .pglease(["queue", "redrive", "jobs", "--all", "--json"])
        .expect_code(0)
        .json();
    expect_eq("redriven", &Value::from(1), &redriven["redriven"]);
    // The redriven message is back at the head of its key: delivered before message 2.
    let got = psql(
        "SELECT string_agg(payload::text, ',') FROM lease_queue.receive('jobs', 0, 'w', 1, 10)",
    );
    expect_eq("order after redrive", "1,2", got.trim());
}

#[test]
fn consume_acks_on_exit_0_and_retries_a_failing_message_until_it_is_a_dead_letter() {
    let case = queue_case("queue_cli_consume");
    case.pglease(["queue", "create", "work", "-p", "2", "--max-attempts", "2"])
        .expect_code(0);
    for n in 1..=3 {
        case.pglease(["queue", "send", "work", "-k", "a", &n.to_string()])
            .expect_code(0);
    }
    case.pglease(["queue", "send", "work", "-k", "b", r#""fail""#])
        .expect_code(0);
    let log = case.file("handled");
    let script = format!(
        r#"p=$(cat); echo "$PGLEASE_KEY $p $PGLEASE_ATTEMPTS" >> {log}; [ "$p" != '"fail"' ]"#,
        log = log.display()
    );
    // 3 messages of a, and b twice (max attempts 2): 5 runs.
    case.pglease([
        "queue",
        "consume",
        "work",
        "--ttl",
        "10s",
        "--max-messages",
        "5",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .expect_code(0);
    let handled = std::fs::read_to_string(&log).unwrap();
    let of_a: Vec<&str> = handled.lines().filter(|l| l.starts_with("a ")).collect();
    expect_eq(
        "key a in order, once each",
        vec!["a 1 1", "a 2 1", "a 3 1"],
        of_a,
    );
    let of_b: Vec<&str> = handled.lines().filter(|l| l.starts_with("b ")).collect();
    expect_eq("b retried", vec![r#"b "fail" 1"#, r#"b "fail" 2"#], of_b);
    let dead = case
        .pglease(["queue", "dead-letters", "work", "--json"])
        .expect_code(0)
        .json();
    expect_eq("the dead letter", &Value::from("fail"), &dead[0]["payload"]);
    // Everything settled, and the partitions released.
    let stats = case
        .pglease(["queue", "stats", "work", "--json"])
        .expect_code(0)
        .json();
    for p in stats.as_array().unwrap() {
        expect_eq("backlog", &Value::from(0), &p["backlog"]);
        expect_eq("holder after exit", &Value::Null, &p["owner"]);
    }
}

#[test]
fn a_lease_lost_while_the_command_runs_stops_it_and_the_message_is_handled_again() {
    let case = queue_case("queue_cli_consume_loss");
    case.pglease(["queue", "create", "slow", "-p", "1"])
        .expect_code(0);
    case.pglease(["queue", "send", "slow", "-k", "k", "1"])
        .expect_code(0);
    let log = case.file("runs");
    // First delivery: freeze pglease (SIGSTOP) past the 1 s ttl, let it go, and wait to be
    // stopped. The redelivery (attempts 2) succeeds at once.
    let script = format!(
        r#"cat >/dev/null
        echo "start $PGLEASE_ATTEMPTS $PGLEASE_EPOCH" >> {log}
        if [ "$PGLEASE_ATTEMPTS" = 1 ]; then
            trap 'echo "stopped $PGLEASE_EPOCH" >> {log}; exit 143' TERM
            kill -STOP $PPID; sleep 3; kill -CONT $PPID
            i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
            echo "not stopped" >> {log}
        fi"#,
        log = log.display()
    );
    case.pglease([
        "queue",
        "consume",
        "slow",
        "--ttl",
        "1s",
        "--kill-after",
        "5s",
        // A run stopped by a loss is neither acked nor nacked: only the redelivery counts.
        "--max-messages",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .expect_code(0);
    let runs = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 3, "{runs}");
    let first: Vec<&str> = lines[0].split(' ').collect();
    let stopped: Vec<&str> = lines[1].split(' ').collect();
    let second: Vec<&str> = lines[2].split(' ').collect();
    expect_eq("first run", ("start", "1"), (first[0], first[1]));
    expect_eq("stopped on loss", "stopped", stopped[0]);
    expect_eq("redelivered", ("start", "2"), (second[0], second[1]));
    let (e1, e2): (i64, i64) = (first[2].parse().unwrap(), second[2].parse().unwrap());
    assert!(e2 > e1, "the redelivery runs at a newer epoch: {runs}");
}
