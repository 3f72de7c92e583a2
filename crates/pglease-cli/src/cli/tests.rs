//! Unit tests of `cli.rs`.

use super::*;
use clap::CommandFactory;
use pglease::limits::MAX_INTERVAL;

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn durations_are_human() {
    assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_ttl("1500ms"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_ttl("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_ttl("0s").is_err());
    assert!(parse_ttl("366d").is_err());
    assert!(parse_ttl("soon").is_err());
    assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_wait("365d"), Ok(MAX_INTERVAL));
}

#[test]
fn waits_may_be_forever_and_nothing_is_negative() {
    assert_eq!(parse_wait_arg("forever"), Ok(MAX_INTERVAL));
    assert_eq!(parse_wait_arg("2m"), Ok(Duration::from_secs(120)));
    for bad in ["-5s", " -1ms", "-0s"] {
        assert!(parse_wait(bad).unwrap_err().contains("negative"), "{bad}");
    }
    assert!(parse_wait("forever").is_err(), "only --wait takes forever");
    assert_eq!(parse_run_ttl("41ms"), Ok(MIN_RUN_TTL));
    assert!(parse_run_ttl("40ms").unwrap_err().contains("41ms"));
    assert!(parse_request_timeout("0s").is_err());
}

#[test]
fn the_minimum_run_ttl_is_the_keepalives() {
    // ttl > 2 × (ttl/1000 + 20ms): true at 41ms, false at 40ms.
    let fits = |ttl: Duration| ttl > (ttl / 1000 + Duration::from_millis(20)) * 2;
    assert!(fits(MIN_RUN_TTL));
    assert!(!fits(MIN_RUN_TTL - Duration::from_millis(1)));
}

#[test]
fn shell_and_positional_keys_parse() {
    let cli =
        Cli::try_parse_from(["pglease", "run", "-k", "k", "-t", "5s", "--shell", "a; b"]).unwrap();
    let Command::Run(args) = cli.command else {
        panic!("not run")
    };
    assert_eq!(
        args.supervision.shell.as_deref(),
        Some(std::ffi::OsStr::new("a; b"))
    );
    let cli = Cli::try_parse_from(["pglease", "inspect", "job-1"]).unwrap();
    let Command::Inspect(args) = cli.command else {
        panic!("not inspect")
    };
    assert_eq!(args.key(), "job-1");
    assert!(Cli::try_parse_from(["pglease", "inspect"]).is_err());
    assert!(Cli::try_parse_from(["pglease", "inspect", "a", "-k", "b"]).is_err());
}

#[test]
fn names_are_bounded() {
    assert!(parse_name("").is_err());
    assert!(parse_name(&"k".repeat(1024)).is_ok());
    assert!(parse_name(&"k".repeat(1025)).is_err());
    assert_eq!(parse_prefix(""), Ok(String::new()));
}

#[test]
fn run_takes_the_command_after_the_separator() {
    let cli = Cli::try_parse_from([
        "pglease", "run", "--key", "k", "--ttl", "5s", "--", "sh", "-c", "exit 3",
    ])
    .unwrap();
    let Command::Run(args) = cli.command else {
        panic!("not run")
    };
    assert_eq!(args.supervision.command, ["sh", "-c", "exit 3"]);
    assert_eq!(args.wait.wait, Duration::ZERO);
    assert_eq!(args.supervision.kill_after, Duration::from_secs(10));
}
