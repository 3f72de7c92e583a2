//! Time bounds and signals: every command gives up on a server that accepts but never answers
//! (the connect bound: `connect_timeout` / `PGCONNECT_TIMEOUT`, default 10s) or that stops answering
//! on an established connection (the answer bound: `--request-timeout`), and ends promptly on
//! SIGINT or SIGTERM whatever it is waiting for.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Case, Running, SilentServer, cluster, eventually, send_signal};

/// Every command that talks to PostgreSQL, with valid arguments.
const COMMANDS: &[&[&str]] = &[
    &["inspect", "k"],
    &["list"],
    &["status"],
    &["install"],
    &["acquire", "-k", "k", "-o", "me", "-t", "1m"],
    &["acquire", "-k", "k", "-o", "me", "-t", "1m", "-w", "1m"],
    &["renew", "-k", "k", "-o", "me", "-e", "1", "-t", "1m"],
    &["release", "-k", "k", "-o", "me", "-e", "1"],
    &["purge", "--older-than", "1d"],
];

/// `run`, which gives up on a silent server too (its signal handling is tested in run.rs).
const RUN: &[&str] = &["run", "-k", "k", "-t", "10s", "--", "true"];

/// Generous: far above every bound used here, only there to fail instead of hanging.
const EXIT_WITHIN: Duration = Duration::from_secs(60);

fn all_commands() -> impl Iterator<Item = &'static [&'static str]> {
    COMMANDS.iter().copied().chain([RUN])
}

/// Waits for every command and checks it failed with exit 1 naming the bound.
fn expect_all_gave_up(running: Vec<Running>, bound_text: &str, setting: &str) {
    for command in running {
        let out = command.wait(EXIT_WITHIN);
        out.expect_code(1);
        let stderr = out.stderr();
        assert!(
            stderr.contains(&format!("no answer within {bound_text}")) && stderr.contains(setting),
            "\nexpected the error to name the bound ({bound_text}) and {setting}\n{}\n",
            out.report()
        );
        assert!(
            !stderr.contains("Timeout occurred"),
            "\nthe connection pool's wording leaked\n{}\n",
            out.report()
        );
    }
}

#[test]
fn pgconnect_timeout_bounds_connecting_to_a_server_that_never_answers() {
    let case = Case::new("bounds_env");
    let silent = SilentServer::start();
    let running: Vec<Running> = all_commands()
        .map(|args| {
            case.bare(args)
                .env("DATABASE_URL", silent.url())
                .env("PGCONNECT_TIMEOUT", "2")
                .spawn()
        })
        .collect();
    expect_all_gave_up(running, "2.0s", "PGCONNECT_TIMEOUT");
}

#[test]
fn connect_timeout_in_the_url_or_conninfo_bounds_connecting() {
    let case = Case::new("bounds_url");
    let silent = SilentServer::start();
    let socket = silent.socket_dir().display().to_string();
    let urls = [
        format!("{}?connect_timeout=3", silent.url()),
        format!(
            "host={socket} port={} user=app dbname=app connect_timeout=3",
            silent.port
        ),
    ];
    for url in &urls {
        let running: Vec<Running> = all_commands()
            .map(|args| {
                case.bare(args)
                    .env("DATABASE_URL", url)
                    // The URL's setting wins over the variable, as in libpq.
                    .env("PGCONNECT_TIMEOUT", "600")
                    .spawn()
            })
            .collect();
        expect_all_gave_up(running, "3.0s", "connect_timeout");
    }
}

#[test]
fn without_a_setting_connecting_is_bounded_by_the_documented_default() {
    let case = Case::new("bounds_default");
    let silent = SilentServer::start();
    let out = case
        .bare(["inspect", "k"])
        .env("DATABASE_URL", silent.url())
        .spawn()
        .wait(EXIT_WITHIN);
    out.expect_code(1);
    assert!(
        out.stderr().contains("no answer within 10.0s"),
        "\nexpected the default connect bound of 10s\n{}\n",
        out.report()
    );
}

#[test]
fn sigterm_and_sigint_end_every_command_while_it_waits_for_a_silent_server() {
    let case = Case::new("bounds_signals");
    let silent = SilentServer::start();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        for args in COMMANDS {
            let before = silent.accepted();
            // No connect bound (libpq's 0): only the signal can end the command.
            let running = case
                .bare(*args)
                .env("DATABASE_URL", silent.url())
                .env("PGCONNECT_TIMEOUT", "0")
                .spawn();
            eventually("the command to connect", EXIT_WITHIN, || {
                (silent.accepted() > before).then_some(())
            });
            send_signal(running.pid(), sig);
            let out = running.wait(Duration::from_secs(20));
            out.expect_code(128 + sig);
        }
    }
}

/// A session of the installation's psql holding `LOCK TABLE lease.leases` (so that every lease
/// call blocks on the server) until dropped.
struct TableLock {
    psql: std::process::Child,
}

impl TableLock {
    fn hold(url: &str) -> TableLock {
        let psql = cluster().installation().bin("psql");
        let mut child = Command::new(psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("psql starts");
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(
                b"BEGIN;\nLOCK TABLE lease.leases IN ACCESS EXCLUSIVE MODE;\nSELECT 'locked';\n",
            )
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        // Keep stdin open: psql keeps the transaction until it reads EOF.
        std::mem::forget(stdin);
        TableLock { psql: child }
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        let _ = self.psql.kill();
        let _ = self.psql.wait();
    }
}

#[test]
fn request_timeout_bounds_each_answer_of_a_server_that_stops_answering() {
    let case = Case::new("bounds_request");
    let _lock = TableLock::hold(&case.url);
    let running: Vec<Running> = COMMANDS
        .iter()
        .filter(|args| args[0] != "install")
        .map(|args| {
            // A blocking acquire may wait its --wait on top.
            let args: Vec<&str> = args
                .iter()
                .map(|a| {
                    if *a == "1m" && args.contains(&"-w") {
                        "1s"
                    } else {
                        a
                    }
                })
                .collect();
            case.pglease(args).args(["--request-timeout", "2s"]).spawn()
        })
        .collect();
    for command in running {
        let out = command.wait(EXIT_WITHIN);
        out.expect_code(1);
        let stderr = out.stderr();
        assert!(
            (stderr.contains("no answer within 2.0s") || stderr.contains("no answer within 3.0s"))
                && stderr.contains("--request-timeout"),
            "\nexpected the answer bound to end the command\n{}\n",
            out.report()
        );
    }
    // The environment variable sets it too.
    let out = case
        .pglease(["inspect", "k"])
        .env("PGLEASE_REQUEST_TIMEOUT", "2s")
        .spawn()
        .wait(EXIT_WITHIN);
    out.expect_code(1);
    assert!(
        out.stderr().contains("no answer within 2.0s"),
        "{}",
        out.report()
    );
}

#[test]
fn a_signal_ends_a_command_waiting_for_an_answer() {
    let case = Case::new("bounds_request_signal");
    let _lock = TableLock::hold(&case.url);
    for args in [
        &["inspect", "k"][..],
        &["acquire", "-k", "k", "-o", "me", "-t", "1m", "-w", "1m"],
    ] {
        let running = case.pglease(args).spawn();
        // Observable: the command's session waits for the table lock.
        let db = case.url.rsplit('/').next().unwrap();
        eventually("the command to block on the lock", EXIT_WITHIN, || {
            let waiting = cluster()
                .psql(
                    "postgres",
                    &format!(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' \
                         AND application_name = 'pglease' AND wait_event_type = 'Lock'"
                    ),
                )
                .unwrap();
            (waiting.trim() != "0").then_some(())
        });
        send_signal(running.pid(), libc::SIGTERM);
        running.wait(Duration::from_secs(20)).expect_code(143);
    }
}

#[test]
fn invalid_bounds_are_usage_errors() {
    let case = Case::new("bounds_usage");
    for (var, value) in [
        ("PGCONNECT_TIMEOUT", "soon"),
        ("PGLEASE_REQUEST_TIMEOUT", "0s"),
        ("PGLEASE_REQUEST_TIMEOUT", "-1s"),
    ] {
        case.pglease(["inspect", "k"])
            .env(var, value)
            .expect_code(2);
    }
    case.pglease(["inspect", "k", "--request-timeout", "0s"])
        .expect_code(2);
}
