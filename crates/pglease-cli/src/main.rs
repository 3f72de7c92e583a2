//! The `pglease` command: entry point. Parses arguments into a command, runs it, prints the error
//! chain once (prefixed `pglease:`) and maps outcomes to the documented exit codes.

mod cli;
mod demo;
mod embedded;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Any error a command can fail with; printed once with its source chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Exit code: an infrastructure error (no PostgreSQL, connection lost, SQL error).
pub const EXIT_ERROR: u8 = 1;
/// Exit code: the command line was invalid (clap's own code).
pub const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut msg = format!("pglease: {e}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, crate::BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
    }
}
