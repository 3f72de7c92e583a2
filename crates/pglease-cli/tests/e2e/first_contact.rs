//! What a new user meets first: a database without the extension (or with an older one) gets one
//! message from every command, naming the database and the command that fixes it, and exit 5.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::{Case, run_sql};

/// Exit code: the extension is not installed, or older than this pglease.
const NOT_INSTALLED: i32 = 5;

/// Every command that needs pg_lease, as a user would first type it.
fn lease_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["acquire", "-k", "job", "-t", "30s"],
        vec!["inspect", "job"],
        vec!["list"],
        vec!["renew", "-k", "job", "-o", "me", "-e", "1", "-t", "30s"],
        vec!["release", "-k", "job", "-o", "me", "-e", "1"],
        vec!["purge", "--older-than", "1h"],
        vec!["configure"],
        vec!["run", "-k", "job", "-t", "30s", "--", "true"],
        vec![
            "run", "-k", "job", "--limit", "2", "-t", "30s", "--", "true",
        ],
        vec!["elect", "job", "--wait", "1s", "--", "true"],
        vec!["leader", "job"],
    ]
}

/// Every queue command.
fn queue_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["queue", "create", "orders", "--partitions", "2"],
        vec!["queue", "drop", "orders", "--yes"],
        vec!["queue", "send", "orders", "{}"],
        vec!["queue", "stats"],
        vec!["queue", "dead-letters", "orders"],
        vec!["queue", "redrive", "orders", "--all"],
        vec![
            "queue",
            "consume",
            "orders",
            "--max-messages",
            "1",
            "--",
            "true",
        ],
    ]
}

#[track_caller]
fn expect_not_installed(case: &Case, args: &[&str], extension: &str, install: &str) {
    let out = case.pglease(args).expect_code(NOT_INSTALLED);
    let stderr = out.stderr();
    let db = case.url.rsplit('/').next().unwrap();
    for wanted in [
        format!("pglease: {extension} is not installed in database \"{db}\" on "),
        format!("run `{install}`"),
        "CREATE on the database".to_owned(),
    ] {
        assert!(
            stderr.contains(&wanted),
            "\nexpected {wanted:?} in stderr\n{}\n",
            out.report()
        );
    }
    assert!(
        !stderr.contains("SQLSTATE") && stderr.lines().count() == 1,
        "\nexpected one line without a SQL error\n{}\n",
        out.report()
    );
}

#[test]
fn every_command_on_a_database_without_pg_lease_says_how_to_install_it() {
    let case = Case::empty("first_contact_missing");
    for args in lease_commands() {
        expect_not_installed(&case, &args, "pg_lease", "pglease install");
    }
    for args in queue_commands() {
        expect_not_installed(
            &case,
            &args,
            "pg_lease_queue",
            "pglease install pg_lease_queue",
        );
    }
    let doc = case
        .pglease(["queue", "stats", "--json"])
        .expect_code(NOT_INSTALLED)
        .json();
    assert!(
        doc["not_installed"] == true && doc["error"].as_str().is_some(),
        "{doc}"
    );
    let status = case.pglease(["status"]).expect_code(0);
    assert!(
        status
            .stdout()
            .contains("not installed (run `pglease install`)")
    );
    // run's --error-exit-code moves it, as every other error of pglease's own.
    case.pglease([
        "run",
        "-k",
        "job",
        "-t",
        "30s",
        "--error-exit-code",
        "77",
        "--",
        "true",
    ])
    .expect_code(77);
    // The command named fixes it.
    case.pglease(["install"]).expect_code(0);
    case.pglease(["list"]).expect_code(0);
}

#[test]
fn queue_commands_without_pg_lease_queue_name_its_install() {
    let case = Case::new("first_contact_no_queue");
    for args in queue_commands() {
        expect_not_installed(
            &case,
            &args,
            "pg_lease_queue",
            "pglease install pg_lease_queue",
        );
    }
}

#[test]
fn an_older_pg_lease_is_named_with_the_upgrade() {
    let case = Case::empty("first_contact_older");
    run_sql(&case.url, "CREATE EXTENSION pg_lease VERSION '0.6.0'");
    let out = case
        .pglease(["run", "-k", "job", "-t", "30s", "--", "true"])
        .expect_code(NOT_INSTALLED);
    let stderr = out.stderr();
    assert!(
        stderr.contains("pg_lease 0.6.0 is installed in database")
            && stderr.contains("upgrade it with `pglease install`"),
        "\n{}\n",
        out.report()
    );
    case.pglease(["install"]).expect_code(0);
    case.pglease(["run", "-k", "job", "-t", "30s", "--", "true"])
        .expect_code(0);
}

/// A script that writes its arguments, one a line, to `path`.
fn args_recorder(case: &Case, path: &std::path::Path) -> String {
    let script = case.file("record-args.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat >/dev/null\nprintf '%s\\n' \"$@\" > '{}'\n",
            path.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script.display().to_string()
}

#[test]
fn options_after_the_command_go_to_it_in_run_elect_and_consume_with_or_without_dashes() {
    let case = Case::new("first_contact_dashes");
    case.pglease(["install", "pg_lease_queue"]).expect_code(0);
    case.pglease(["queue", "create", "q", "-p", "1"])
        .expect_code(0);
    let out = case.file("args");
    let script = args_recorder(&case, &out);
    let heads: [&[&str]; 3] = [
        &["run", "-k", "dashes", "-t", "30s"],
        &["elect", "dashes", "-t", "30s"],
        &["queue", "consume", "q", "--max-messages", "1"],
    ];
    for head in heads {
        for dashes in [true, false] {
            if head[0] == "queue" {
                case.pglease(["queue", "send", "q", "{}"]).expect_code(0);
            }
            let _ = std::fs::remove_file(&out);
            let mut args: Vec<&str> = head.to_vec();
            if dashes {
                args.push("--");
            }
            args.extend([script.as_str(), "--ttl", "5", "-v"]);
            case.pglease(&args).expect_code(0);
            crate::common::expect_eq(
                &format!("the arguments {args:?} passed to the command"),
                "--ttl\n5\n-v\n",
                &std::fs::read_to_string(&out).unwrap(),
            );
        }
    }
}

#[test]
fn database_url_is_accepted_before_and_after_the_subcommand() {
    let case = Case::new("first_contact_global_url");
    let url = case.url.as_str();
    case.bare([
        "acquire",
        "-k",
        "global-url",
        "-t",
        "1m",
        "--database-url",
        url,
    ])
    .expect_code(0);
    for args in [
        vec!["--database-url", url, "inspect", "global-url", "--json"],
        vec!["inspect", "global-url", "--json", "--database-url", url],
        vec!["-v", "--database-url", url, "queue", "stats", "--json"],
    ] {
        let out = case.bare(&args).output();
        // No local server was created: the URL given before the subcommand was used.
        assert!(
            !case.file("local").exists() && !out.stderr().contains("local server"),
            "{}",
            out.report()
        );
        if args.contains(&"inspect") {
            out.expect_code(0);
            crate::common::expect_eq("state", "held", out.json()["state"].as_str().unwrap());
        } else {
            out.expect_code(5); // pg_lease_queue is not installed in this case's database
        }
    }
}

#[test]
fn inspect_of_a_semaphore_shows_its_slots() {
    let case = Case::new("first_contact_semaphore");
    let marker = case.file("holding");
    let hold = format!("touch '{}'; sleep 30", marker.display());
    let running = case
        .pglease([
            "run", "-k", "backups", "--limit", "3", "-t", "30s", "-o", "nightly", "--shell", &hold,
        ])
        .spawn();
    crate::common::eventually("the slot to be held", Duration::from_secs(20), || {
        marker.exists().then_some(())
    });
    let json = case
        .pglease(["inspect", "backups", "--json"])
        .expect_code(0)
        .json();
    crate::common::expect_eq("state", "semaphore", json["state"].as_str().unwrap());
    crate::common::expect_eq("holders", 1, json["holders"].as_u64().unwrap());
    let slot = &json["slots"][0];
    crate::common::expect_eq("slot", 1, slot["slot"].as_u64().unwrap());
    crate::common::expect_eq("its key", "backups#1", slot["key"].as_str().unwrap());
    assert!(
        slot["owner"].as_str().unwrap().starts_with("nightly-") && slot["epoch"].as_i64() > Some(0),
        "{json}"
    );
    let text = case.pglease(["inspect", "backups"]).expect_code(0).stdout();
    assert!(
        text.contains("semaphore: 1 slot held") && text.contains("backups#1  held  nightly-"),
        "{text}"
    );
    crate::common::send_signal(running.pid(), libc::SIGTERM);
    running.wait(Duration::from_secs(20));
    // A name that was never leased is still unknown.
    let unknown = case
        .pglease(["inspect", "never", "--json"])
        .expect_code(0)
        .json();
    crate::common::expect_eq("state", "unknown", unknown["state"].as_str().unwrap());
}
