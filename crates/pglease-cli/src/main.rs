//! The `pglease` command: entry point. Parses the command line, resolves it into a validated
//! [`Config`] (all before any I/O), runs it, and ends with its exit code or the error chain printed
//! once (see `exit.rs` for the codes, `cli::EXIT_CODES_HELP` for their documentation).

mod admin;
mod child;
mod cli;
mod config;
mod connect;
mod consume;
mod demo;
mod demo_live;
mod embedded;
mod exit;
mod history;
mod leader;
mod leases;
mod local;
mod missing;
mod output;
mod owner;
mod procs;
mod progress;
mod queue;
mod queue_errors;
mod queue_grants;
mod run;
mod signals;
mod supervise;
mod ui;
mod verbose;
mod waiting;
mod watchdog;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::Cli;
use crate::config::Config;
use crate::connect::ConfigError;
use crate::exit::{BoxError, EXIT_ERROR};

fn main() -> ExitCode {
    if let Some(code) = watchdog::main_if_requested() {
        return code; // `pglease run`'s watchdog process (internal)
    }
    let cli = Cli::parse(); // exits with 2 on an invalid command line
    if let Err(message) = verbose::install(cli.verbose, cli.color) {
        Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit();
    }
    let config = match Config::new(cli) {
        Ok(config) => config,
        Err(ConfigError::Usage(message)) => {
            Cli::command()
                .error(clap::error::ErrorKind::ValueValidation, message)
                .exit();
        }
        Err(ConfigError::Other(message)) => {
            eprintln!("pglease: {message}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    exit::finish(run(config))
}

/// Runs `config` on a multi-threaded tokio runtime. The runtime is shut down without waiting for
/// blocking tasks: a command ended by a signal or a time bound while a blocking task waits (for the
/// local server's lock, or `pg_ctl`) exits at once instead of waiting for it.
fn run(config: Config) -> Result<ExitCode, BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(config.run());
    runtime.shutdown_background();
    result
}
