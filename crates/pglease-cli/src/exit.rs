//! How a command ends: the documented exit codes (`cli::EXIT_CODES_HELP`), the boxed error every
//! command fails with, an error with context, the exit after a signal, and printing an error chain
//! once (prefixed `pglease:`), where a closed stdout (broken pipe) is not an error.

use std::process::ExitCode;

/// Any error a command can fail with; printed once with its source chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Exit code: an infrastructure error (no PostgreSQL, connection lost, SQL error).
pub const EXIT_ERROR: u8 = 1;
/// Exit code: an invalid command line (clap's own), or a payload that is not JSON.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the key is held by another owner (`acquire`; `run` within `--wait`, unless
/// `--conflict-exit-code`).
pub const EXIT_NOT_ACQUIRED: u8 = 3;
/// Exit code: renew/release refused; `run`: the lease was lost while the command ran (unless
/// `--lost-exit-code`).
pub const EXIT_LOST: u8 = 4;
/// Exit code: the extension a command needs is not installed in its database, or is older than
/// this pglease (`missing.rs`); every command, `run` and `elect` included (before any command
/// starts).
pub const EXIT_NOT_INSTALLED: u8 = 5;
/// Exit code of `run` when the command could not be executed (shells' convention).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code of `run` when the command was not found (shells' convention).
pub const EXIT_NOT_FOUND: u8 = 127;

/// The exit code after giving up on a signal: 128 + its number, as shells report it.
pub fn signal_exit(sig: i32) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(255))
}

/// How a command's result ends the process: its own code, success for a broken pipe, else the
/// error chain on stderr and [`EXIT_NOT_INSTALLED`] or [`EXIT_ERROR`].
pub fn finish(result: Result<ExitCode, BoxError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&*e);
            if crate::missing::is_not_ready(&*e) {
                ExitCode::from(EXIT_NOT_INSTALLED)
            } else if e.is::<Usage>() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_ERROR)
            }
        }
    }
}

/// Prints `e` and its source chain once on stderr (`pglease: <error>: <source>: ...`).
pub fn print_error(e: &(dyn std::error::Error + 'static)) {
    eprintln!("{}", chain(e));
    if let Some(advice) = advice(e) {
        eprintln!("pglease: {advice}");
    }
}

/// What to do about a refusal whose message alone does not say: a lease held under another role
/// (SQLSTATE 42501 from renew, release or fence names the role; the way out is pglease's). That
/// refusal carries a DETAIL (whose role the session has); PostgreSQL's own 42501 for a missing
/// privilege has none.
fn advice(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let lease_error = std::iter::successors(Some(e), |e| e.source())
        .find_map(|e| e.downcast_ref::<pglease::Error>())?;
    (lease_error.is_other_role() && lease_error.detail().is_some()).then_some(
        "the lease belongs to another database role: run the command as that role (or a member \
         of it); an operator ends a stuck grant with `pglease force-release --key KEY`",
    )
}

/// `pglease: <error>: <source>: ...`, skipping a source whose text the message already ends with.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = format!("pglease: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.ends_with(&text) {
            msg.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    msg
}

/// An error with a message saying what was being done, keeping the cause as its source (so the
/// printed chain reads `pglease: connecting to ...: error connecting to server: Connection refused`).
#[derive(Debug)]
pub struct Context {
    message: String,
    source: BoxError,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// A usage error found only once the command ran (a payload read from stdin): exit code 2, as
/// for an invalid command line.
#[derive(Debug)]
pub struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A [`Usage`] error.
pub fn usage(message: impl Into<String>) -> BoxError {
    Box::new(Usage(message.into()))
}

/// Wraps `source` with what was being done.
pub fn context(message: impl Into<String>, source: impl Into<BoxError>) -> BoxError {
    Box::new(Context {
        message: message.into(),
        source: source.into(),
    })
}

/// Whether `e` or any of its sources is an I/O error of kind `BrokenPipe`.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(err) = current {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        current = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_each_cause_once() {
        let e = context(
            "connecting to x",
            context("error connecting", "Connection refused"),
        );
        assert_eq!(
            chain(&*e),
            "pglease: connecting to x: error connecting: Connection refused"
        );
        let repeated = context("lost: Connection refused", "Connection refused");
        assert_eq!(chain(&*repeated), "pglease: lost: Connection refused");
    }

    #[test]
    fn a_broken_pipe_is_found_behind_context() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(is_broken_pipe(&*context("writing", pipe)));
        assert!(!is_broken_pipe(&*context("writing", "other")));
        assert_eq!(signal_exit(libc::SIGTERM), ExitCode::from(143));
    }
}
