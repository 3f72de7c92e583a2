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

    case.pglease(["queue", "drop", "orders"]).expect_code(0);
    let out = case.pglease(["queue", "stats", "orders"]).expect_code(1);
    assert!(
        out.stderr().contains("LQ001") || out.stderr().contains("does not exist"),
        "{}",
        out.report()
    );
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
    // Not JSON: refused before connecting.
    case.pglease(["queue", "send", "q", "not json"])
        .expect_code(1);
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
    let out = case.pglease(["queue", "stats"]).expect_code(1);
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
