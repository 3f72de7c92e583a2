//! What a new user meets first: durations checked at parse time (with the real minimum), honest
//! connection errors, versions, the local server announced, `--wait forever`, `--shell`, and
//! `inspect KEY`.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Case, SilentServer, eventually, expect_eq};

#[test]
fn a_ttl_below_the_keepalive_minimum_is_a_usage_error_named_in_help() {
    let case = Case::new("usage_ttl");
    for ttl in ["1ms", "40ms"] {
        let out = case
            .pglease(["run", "-k", "k", "-t", ttl, "--", "true"])
            .expect_code(2);
        assert!(out.stderr().contains("at least 41ms"), "{}", out.report());
    }
    // 41ms is accepted by the command line and by the client (whether such a short lease survives
    // its first renewal on a busy machine is another matter: 0 or 4, never 1 or 2).
    let out = case
        .pglease(["run", "-k", "k", "-t", "41ms", "--", "true"])
        .output();
    assert!(matches!(out.code(), Some(0 | 4)), "{}", out.report());
    let help = case.bare(["run", "--help"]).expect_code(0).stdout();
    assert!(help.contains("41ms to 365 days"), "run --help:\n{help}");
    // A single acquire has no keepalive: the server takes any ttl from 1ms.
    case.pglease(["acquire", "-k", "k1", "-t", "1ms"])
        .expect_code(0);
    case.pglease(["acquire", "-k", "k1", "-t", "0s"])
        .expect_code(2);
}

#[test]
fn negative_durations_are_refused_as_values_not_as_unknown_flags() {
    let case = Case::new("usage_negative");
    for args in [
        &["acquire", "-k", "k", "--ttl", "-5s"][..],
        &["acquire", "-k", "k", "-t", "5s", "--wait", "-1m"],
        &["run", "-k", "k", "--ttl", "-5s", "--", "true"],
        &["purge", "--older-than", "-1d"],
    ] {
        let out = case.pglease(args).expect_code(2);
        assert!(
            out.stderr().contains("must not be negative") && !out.stderr().contains("unexpected"),
            "{}",
            out.report()
        );
    }
}

#[test]
fn a_refused_connection_is_reported_as_refused() {
    let case = Case::new("usage_refused");
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgresql://app@127.0.0.1:{port}/app");
    for args in [
        &["inspect", "k"][..],
        &["acquire", "-k", "k", "-t", "1m"],
        &["run", "-k", "k", "-t", "1m", "--", "true"],
    ] {
        let out = case.bare(args).env("DATABASE_URL", &url).expect_code(1);
        let stderr = out.stderr();
        assert!(
            stderr.contains("Connection refused") && !stderr.contains("outcome unknown"),
            "{}",
            out.report()
        );
    }
}

#[test]
fn run_against_a_silent_server_names_the_bound_not_the_pool() {
    let case = Case::new("usage_pool");
    let silent = SilentServer::start();
    let out = case
        .bare(["run", "-k", "k", "-t", "1m", "--", "true"])
        .env("DATABASE_URL", silent.url())
        .env("PGCONNECT_TIMEOUT", "2")
        .spawn()
        .wait(Duration::from_secs(60));
    out.expect_code(1);
    assert!(
        out.stderr().contains("no answer within 2.0s")
            && !out.stderr().contains("Timeout occurred"),
        "{}",
        out.report()
    );
}

#[test]
fn version_names_the_binary_and_the_sql_api_it_speaks() {
    let case = Case::new("usage_version");
    let version = case.bare(["--version"]).expect_code(0).stdout();
    expect_eq(
        "--version",
        format!(
            "pglease {} (pg_lease SQL API {})\n",
            env!("CARGO_PKG_VERSION"),
            pglease::VERSION
        ),
        version,
    );
    let status = case.pglease(["status", "--json"]).expect_code(0).json();
    expect_eq(
        "status speaks the same SQL API",
        &Value::from(pglease::VERSION),
        &status["client_version"],
    );
}

#[test]
fn the_implicit_local_server_is_announced_once_when_started() {
    let case = Case::new("usage_announce");
    let stop = || {
        let _ = case.bare(["local", "stop"]).output();
    };
    let first = case.bare(["list"]).output();
    let second = case.bare(["list"]).output();
    stop();
    first.expect_code(0);
    second.expect_code(0);
    assert!(
        first.stderr().contains("no database URL given")
            && first
                .stderr()
                .contains(&case.file("local").display().to_string()),
        "{}",
        first.report()
    );
    assert!(
        !second.stderr().contains("no database URL given"),
        "announced again:\n{}",
        second.report()
    );
}

#[test]
fn wait_forever_waits_until_the_holder_releases() {
    let case = Case::new("usage_forever");
    case.pglease(["acquire", "-k", "k", "-o", "holder", "-t", "10m"])
        .expect_code(0);
    let waiter = case
        .pglease([
            "acquire", "-k", "k", "-o", "waiter", "-t", "1m", "--wait", "forever", "--json",
        ])
        .spawn();
    // Observable: the waiter's blocking acquire sleeps on the server.
    let db = case.url.rsplit('/').next().unwrap().to_string();
    eventually("the waiter to block", Duration::from_secs(30), || {
        let n = crate::common::cluster()
            .psql(
                "postgres",
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' \
                     AND application_name = 'pglease' AND state = 'active' \
                     AND query LIKE '%acquire%'"
                ),
            )
            .unwrap();
        (n.trim() != "0").then_some(())
    });
    case.pglease(["release", "-k", "k", "-o", "holder", "-e", "1"])
        .expect_code(0);
    let out = waiter.wait(Duration::from_secs(60));
    out.expect_code(0);
    expect_eq("acquired", &Value::Bool(true), &out.json()["acquired"]);
}

#[test]
fn run_shell_runs_a_script_with_sh() {
    let case = Case::new("usage_shell");
    let out = case
        .pglease([
            "run",
            "-k",
            "k",
            "-t",
            "5s",
            "--shell",
            "echo one; echo \"two $PGLEASE_KEY\"; exit 3",
        ])
        .expect_code(3);
    expect_eq("stdout", "one\ntwo k\n", out.stdout().as_str());
    // A script and a command are one too many.
    case.pglease([
        "run", "-k", "k", "-t", "5s", "--shell", "true", "--", "true",
    ])
    .expect_code(2);
}

#[test]
fn inspect_takes_the_key_as_an_argument_or_with_key() {
    let case = Case::new("usage_inspect");
    case.pglease(["acquire", "-k", "pos-key", "-o", "me", "-t", "1m"])
        .expect_code(0);
    for args in [
        &["inspect", "pos-key", "--json"][..],
        &["inspect", "--key", "pos-key", "--json"],
    ] {
        let state = case.pglease(args).expect_code(0).json();
        expect_eq("owner", &Value::from("me"), &state["owner"]);
    }
    case.pglease(["inspect"]).expect_code(2);
    case.pglease(["inspect", "a", "--key", "b"]).expect_code(2);
}

#[test]
fn install_takes_one_of_our_extensions_by_name() {
    let case = Case::new("usage_install");
    let out = case
        .pglease(["install", "pg_lease", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "install.extension",
        &Value::from("pg_lease"),
        &out["extension"],
    );
    let out = case
        .pglease(["install", "pg_lease_queue", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "install.extension",
        &Value::from("pg_lease_queue"),
        &out["extension"],
    );
    expect_eq(
        "install.version",
        &Value::from(pglease::PG_LEASE_QUEUE.version),
        &out["version"],
    );
    let out = case
        .pglease(["install", "no_such_extension"])
        .expect_code(2);
    assert!(
        out.stderr().contains("pg_lease"),
        "the error names what can be installed\n{}",
        out.report()
    );
}
