//! What a new user meets first: a database without the extension (or with an older one) gets one
//! message from every command, naming the database and the command that fixes it, and exit 5.

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
    let status = case.pglease(["status"]).expect_code(0);
    assert!(
        status
            .stdout()
            .contains("not installed (run `pglease install`)")
    );
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
