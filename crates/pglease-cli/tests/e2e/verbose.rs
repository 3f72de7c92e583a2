//! `-v/--verbose` and `PGLEASE_LOG`: the client library's events on stderr, one line each, with
//! the key, owner and epoch; nothing more on stderr without them; no secrets either way.

use crate::common::{Case, expect_eq};

/// The stderr lines that are log events (`<time> <LEVEL> <target>: <message> <fields>`).
fn log_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
                .iter()
                .any(|level| l.contains(&format!(" {level} pglease::")))
        })
        .collect()
}

#[test]
fn verbose_prints_the_grant_on_stderr_and_without_it_stderr_is_unchanged() {
    let case = Case::new("verbose");
    // Without -v (and with PGLEASE_LOG empty): a grant prints nothing on stderr, a refusal only
    // its one message.
    let quiet = case
        .pglease(["acquire", "-k", "quiet", "-o", "me", "-t", "1m", "--json"])
        .env("PGLEASE_LOG", "")
        .expect_code(0);
    expect_eq("stderr of a grant without -v", "", quiet.stderr().as_str());
    let refused = case
        .pglease(["acquire", "-k", "quiet", "-o", "you", "-t", "1m"])
        .env("PGLEASE_LOG", "")
        .expect_code(3);
    let lines: Vec<String> = refused.stderr().lines().map(str::to_owned).collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("pglease: not acquired: quiet is held by me"),
        "\nexpected only the refusal's message\n{}\n",
        refused.report()
    );

    // -v: the grant, at info, with key, owner and epoch; stdout is the same document as without.
    let out = case
        .pglease([
            "-v", "acquire", "-k", "loud", "-o", "me", "-t", "1m", "--json",
        ])
        .env("PGLEASE_LOG", "")
        .expect_code(0);
    let epoch = out.json()["epoch"].as_i64().expect("an epoch");
    let stderr = out.stderr();
    let lines = log_lines(&stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains(" INFO pglease::call: lease granted ")
            && lines[0].contains(r#"key="loud""#)
            && lines[0].contains(r#"owner="me""#)
            && lines[0].contains(&format!("epoch={epoch}")),
        "\nexpected one info line for the grant\n{}\n",
        out.report()
    );
    expect_eq(
        "stderr lines that are not log lines",
        0,
        stderr.lines().count() - lines.len(),
    );
    let keys = |v: &serde_json::Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    expect_eq(
        "the JSON document's fields",
        keys(&quiet.json()),
        keys(&out.json()),
    );

    // The flag is global: after the subcommand too. -v hides the debug refusal; -vv shows it.
    let v = case
        .pglease(["acquire", "-v", "-k", "loud", "-o", "you", "-t", "1m"])
        .env("PGLEASE_LOG", "")
        .expect_code(3);
    assert!(log_lines(&v.stderr()).is_empty(), "{}", v.report());
    let vv = case
        .pglease(["acquire", "-vv", "-k", "loud", "-o", "you", "-t", "1m"])
        .env("PGLEASE_LOG", "")
        .expect_code(3);
    let vv_stderr = vv.stderr();
    let lines = log_lines(&vv_stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains(" DEBUG pglease::call: key held by another owner ")
            && lines[0].contains(r#"key="loud""#),
        "\nexpected the refusal at debug, not as an error\n{}\n",
        vv.report()
    );
}

#[test]
fn verbose_run_logs_the_lease_life_cycle_without_the_password() {
    let case = Case::new("verbose_run");
    // The server's URL carries its generated password (the TCP login of `postgres`).
    let url = case.url.clone();
    let password = url
        .split_once("postgres:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(password, _)| password.to_owned())
        .expect("the test server's URL has a password");
    let out = case
        .pglease([
            "-vvv", "run", "-k", "job", "-o", "runner", "-t", "1m", "--", "true",
        ])
        .env("DATABASE_URL", &url)
        .env("PGLEASE_LOG", "")
        .expect_code(0);
    let stderr = out.stderr();
    let granted = log_lines(&stderr)
        .into_iter()
        .find(|l| l.contains(" INFO pglease::lease: lease granted "))
        .unwrap_or_else(|| panic!("\nno grant logged\n{}\n", out.report()))
        .to_owned();
    assert!(
        // A run's owner is `--owner` plus the run's nonce.
        granted.contains(r#"key="job""#) && granted.contains(r#"owner="runner-"#),
        "{granted}"
    );
    assert!(
        log_lines(&stderr)
            .iter()
            .any(|l| l.contains(" INFO pglease::lease: lease released ")
                && l.contains(r#"reason="released""#)),
        "\nno release logged\n{}\n",
        out.report()
    );
    assert!(
        !stderr.contains(&password),
        "\nthe password was logged\n{}\n",
        out.report()
    );
}

#[test]
fn pglease_log_replaces_the_level_and_is_validated() {
    let case = Case::new("verbose_env");
    case.pglease(["acquire", "-k", "held", "-o", "me", "-t", "1m"])
        .expect_code(0);
    // Without -v, PGLEASE_LOG alone turns the log on, per target.
    let out = case
        .pglease(["acquire", "-k", "held", "-o", "you", "-t", "1m"])
        .env("PGLEASE_LOG", "pglease::call=debug")
        .expect_code(3);
    let stderr = out.stderr();
    assert!(
        log_lines(&stderr)
            .iter()
            .any(|l| l.contains(" DEBUG pglease::call: key held by another owner ")),
        "{}",
        out.report()
    );
    // And it wins over -v: info of pglease::call is switched off here.
    let out = case
        .pglease(["-v", "acquire", "-k", "other", "-o", "me", "-t", "1m"])
        .env("PGLEASE_LOG", "pglease::call=off")
        .expect_code(0);
    assert!(log_lines(&out.stderr()).is_empty(), "{}", out.report());
    // A malformed value is a usage error.
    let out = case
        .pglease(["acquire", "-k", "x", "-t", "1m"])
        .env("PGLEASE_LOG", "pglease=loudest")
        .expect_code(2);
    assert!(out.stderr().contains("PGLEASE_LOG"), "{}", out.report());
}

#[test]
fn the_log_has_colours_only_on_a_terminal_or_with_color_always() {
    let case = Case::new("verbose_colour");
    let piped = case
        .pglease(["-v", "acquire", "-k", "c1", "-o", "me", "-t", "1m"])
        .expect_code(0);
    assert!(
        !log_lines(&piped.stderr()).is_empty() && !piped.stderr().contains('\u{1b}'),
        "\nexpected the log without colour codes in a pipe\n{}\n",
        piped.report()
    );
    let always = case
        .pglease([
            "acquire", "--color", "always", "-v", "-k", "c2", "-o", "me", "-t", "1m",
        ])
        .env("NO_COLOR", "1")
        .expect_code(0);
    assert!(always.stderr().contains('\u{1b}'), "{}", always.report());
    for out in [&piped, &always] {
        assert!(!out.stdout().contains('\u{1b}'), "{}", out.report());
    }
}
