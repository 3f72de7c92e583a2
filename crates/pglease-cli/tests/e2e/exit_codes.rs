//! Exit codes match the documentation (`pglease --help`, README): the command's status passes
//! through `run`; 3 not acquired; 4 lost or refused; 1 infrastructure error; 2 usage error; `run`'s
//! own outcomes can be given codes of their own, apart from the command's.

use crate::common::{Case, expect_eq};

#[test]
fn run_passes_the_commands_exit_status_through() {
    let case = Case::new("passthrough");
    case.pglease(["run", "-k", "p", "-t", "30s", "--", "sh", "-c", "exit 42"])
        .expect_code(42);
    case.pglease(["run", "-k", "p", "-t", "30s", "--", "true"])
        .expect_code(0);
    // Killed by a signal: 128 + its number, as shells report it.
    case.pglease([
        "run",
        "-k",
        "p",
        "-t",
        "30s",
        "--",
        "sh",
        "-c",
        "kill -KILL $$",
    ])
    .expect_code(128 + 9);
    // Not found / not executable: 127 / 126, and the lease is released either way.
    case.pglease(["run", "-k", "p", "-t", "30s", "--", "./no-such-command"])
        .expect_code(127);
    std::fs::write(case.file("not-executable"), "").unwrap();
    case.pglease(["run", "-k", "p", "-t", "30s", "--", "./not-executable"])
        .expect_code(126);
    let state = case
        .pglease(["inspect", "-k", "p", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "held after the runs",
        &serde_json::Value::Bool(false),
        &state["held"],
    );
}

#[test]
fn a_key_held_by_another_owner_is_not_acquired() {
    let case = Case::new("not_acquired");
    case.pglease(["acquire", "-k", "busy", "-o", "holder", "-t", "1m"])
        .expect_code(0);
    let out = case
        .pglease(["acquire", "-k", "busy", "-o", "other", "-t", "1m"])
        .expect_code(3);
    assert!(
        out.stderr().contains("held by holder"),
        "\nexpected the refusal to name the holder\n{}\n",
        out.report()
    );
    // run gives up at once without --wait, and after --wait otherwise; the command never runs.
    let marker = case.file("ran");
    for wait in ["0s", "300ms"] {
        case.pglease([
            "run",
            "-k",
            "busy",
            "-t",
            "1m",
            "-w",
            wait,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ])
        .expect_code(3);
    }
    assert!(!marker.exists(), "the command ran without the lease");
}

#[test]
fn refused_renewals_and_releases_exit_with_4() {
    let case = Case::new("refused");
    case.pglease(["acquire", "-k", "r", "-o", "me", "-t", "1m"])
        .expect_code(0);
    case.pglease(["renew", "-k", "r", "-o", "me", "-e", "1", "-t", "1m"])
        .expect_code(0);
    case.pglease(["renew", "-k", "r", "-o", "me", "-e", "2", "-t", "1m"])
        .expect_code(4);
    case.pglease(["release", "-k", "r", "-o", "you", "-e", "1"])
        .expect_code(4);
    case.pglease(["release", "-k", "r", "-o", "me", "-e", "1"])
        .expect_code(0);
    case.pglease(["release", "-k", "r", "-o", "me", "-e", "1"])
        .expect_code(4);
}

#[test]
fn an_unreachable_server_is_an_infrastructure_error() {
    let case = Case::new("infra");
    for args in [
        vec!["inspect", "-k", "x"],
        vec!["run", "-k", "x", "-t", "5s", "--", "true"],
    ] {
        let out = case
            .bare(&args)
            .env("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
            .expect_code(1);
        assert!(
            out.stderr().starts_with("pglease: "),
            "\nexpected one error line prefixed `pglease: `\n{}\n",
            out.report()
        );
    }
}

#[test]
fn an_invalid_command_line_is_a_usage_error() {
    let case = Case::new("usage");
    for args in [
        vec!["run", "-k", "x", "--", "true"],               // no --ttl
        vec!["run", "-k", "x", "-t", "soon", "--", "true"], // not a duration
        vec!["acquire", "-k", "", "-t", "5s"],              // empty key
        vec!["renew", "-k", "x", "-o", "me", "-t", "5s"],   // no --epoch
        vec!["no-such-command"],
    ] {
        case.pglease(&args).expect_code(2);
    }
    case.bare([
        "inspect",
        "-k",
        "x",
        "--database-url",
        "postgresql://h:notaport/db",
    ])
    .expect_code(2);
    case.bare(["inspect", "-k", "x"])
        .env("DATABASE_URL", "postgresql://h/db?sslmode=sometimes")
        .expect_code(2);
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let case = Case::new("pipe");
    for i in 0..50 {
        case.pglease(["acquire", "-k", &format!("k{i:02}"), "-o", "me", "-t", "1m"])
            .expect_code(0);
    }
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} list --database-url '{}' | true",
            crate::common::PGLEASE,
            case.url
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("pglease:") && !stderr.contains("panicked"),
        "\nexpected no error when stdout closes early, got:\n{stderr}\n"
    );
}

#[test]
fn help_and_docs_list_the_same_exit_codes() {
    let case = Case::new("help");
    let help = case.bare(["--help"]).expect_code(0).stdout();
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CLI.md"),
    )
    .unwrap();
    for (code, meaning) in [
        (0, "success"),
        (1, "error"),
        (2, "invalid command line"),
        (3, "not acquired"),
        (4, "lost"),
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code}    {meaning}"))),
            "\n`pglease --help` does not document exit code {code} ({meaning}):\n{help}\n"
        );
        assert!(
            docs.contains(&format!("| {code} | {meaning}")),
            "docs/CLI.md does not document exit code {code} ({meaning})"
        );
    }
}

#[test]
fn run_reports_its_own_outcomes_with_the_codes_chosen_for_them() {
    // The command's own 1, 3 and 4 look like pglease's defaults; chosen codes tell them apart.
    let case = Case::new("chosen_codes");
    let codes = [
        "--conflict-exit-code",
        "75",
        "--lost-exit-code",
        "76",
        "--error-exit-code",
        "77",
    ];
    let run = |extra: &[&str], command: &[&str]| {
        let mut args = vec!["run", "-k", "c", "-t", "1s"];
        args.extend_from_slice(&codes);
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(command);
        case.pglease(&args)
    };
    // The command's status, whatever it is, passes through unchanged.
    for status in ["1", "3", "4"] {
        run(&[], &["sh", "-c", &format!("exit {status}")]).expect_code(status.parse().unwrap());
    }

    // Not acquired.
    let grant = case
        .pglease(["acquire", "-k", "c", "-o", "holder", "-t", "1m", "--json"])
        .expect_code(0)
        .json();
    let epoch = grant["epoch"].to_string();
    let marker = case.file("ran");
    let out = run(&[], &["touch", marker.to_str().unwrap()]).expect_code(75);
    assert!(
        out.stderr().contains("could not acquire c"),
        "{}",
        out.report()
    );
    // 0, like `flock -E 0`: "someone else is doing it" is not a failure.
    let mut args = vec!["run", "-k", "c", "-t", "1s", "--conflict-exit-code", "0"];
    args.extend(["--", "touch", marker.to_str().unwrap()]);
    case.pglease(&args).expect_code(0);
    assert!(!marker.exists(), "the command ran without the lease");
    case.pglease(["release", "-k", "c", "-o", "holder", "-e", &epoch])
        .expect_code(0);

    // Lost: the row is handed to someone else, so the next renewal is refused.
    let db = case.url.rsplit('/').next().unwrap().to_string();
    let mut running = run(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "echo up > {}/up; while :; do sleep 0.02; done",
                case.path().display()
            ),
        ],
    )
    .spawn();
    running.read_when_written(&case.file("up"), std::time::Duration::from_secs(60));
    crate::common::cluster()
        .psql(
            &db,
            "UPDATE lease.leases SET owner = 'intruder' WHERE key = 'c'",
        )
        .unwrap();
    running
        .wait(std::time::Duration::from_secs(60))
        .expect_code(76);

    // pglease's own error (no server there).
    let mut args = vec!["run", "-k", "c", "-t", "1s"];
    args.extend_from_slice(&codes);
    args.extend(["--", "true"]);
    let out = case
        .bare(&args)
        .env("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
        .expect_code(77);
    assert!(out.stderr().starts_with("pglease: "), "{}", out.report());
}

#[test]
fn run_rejects_codes_and_owners_out_of_range() {
    let case = Case::new("code_range");
    for args in [
        vec![
            "run",
            "-k",
            "x",
            "-t",
            "1s",
            "--conflict-exit-code",
            "256",
            "--",
            "true",
        ],
        vec![
            "run",
            "-k",
            "x",
            "-t",
            "1s",
            "--lost-exit-code",
            "-1",
            "--",
            "true",
        ],
        vec![
            "run",
            "-k",
            "x",
            "-t",
            "1s",
            "--descendants",
            "leave",
            "--",
            "true",
        ],
    ] {
        case.pglease(&args).expect_code(2);
    }
    // The owner must leave room for the run's nonce within the 1024 bytes of an owner.
    let longest = "o".repeat(1007);
    case.pglease(["run", "-k", "x", "-t", "5s", "-o", &longest, "--", "true"])
        .expect_code(0);
    let too_long = "o".repeat(1008);
    case.pglease(["run", "-k", "x", "-t", "5s", "-o", &too_long, "--", "true"])
        .expect_code(2);
}
