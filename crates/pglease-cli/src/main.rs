//! The `pglease` command: entry point. Parses the command line and resolves where to connect
//! (all before any I/O), runs the command, prints an error chain once (prefixed `pglease:`) and
//! maps outcomes to the documented exit codes (`cli::EXIT_CODES_HELP`). A closed stdout (broken
//! pipe) ends the command quietly with success.

mod admin;
mod child;
mod cli;
mod connect;
mod demo;
mod embedded;
mod leases;
mod local;
mod output;
mod progress;
mod run;
mod signals;
mod waiting;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, ConnArgs, LocalCommand};
use crate::connect::{ConfigError, Target};
use crate::local::LocalServer;

/// Any error a command can fail with; printed once with its source chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Exit code: an infrastructure error (no PostgreSQL, connection lost, SQL error).
pub const EXIT_ERROR: u8 = 1;
/// Exit code: the key is held by another owner (`acquire`; `run` within `--wait`).
pub const EXIT_NOT_ACQUIRED: u8 = 3;
/// Exit code: renew/release refused; `run`: the lease was lost while the command ran.
pub const EXIT_LOST: u8 = 4;
/// The major version of a new local server when a command starts it on demand.
const DEFAULT_LOCAL_MAJOR: u32 = 15;

fn main() -> ExitCode {
    let cli = Cli::parse(); // exits with 2 on an invalid command line
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
    match run(config) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("pglease: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                let text = s.to_string();
                if !msg.ends_with(&text) {
                    msg.push_str(&format!(": {text}"));
                }
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// A validated command: its arguments plus where it connects.
struct Config {
    command: Command,
    target: Option<Target>,
    local: Option<LocalServer>,
    owner: Option<String>,
}

impl Config {
    /// Resolves the connection target (and defaults) without any I/O.
    fn new(cli: Cli) -> Result<Config, ConfigError> {
        let major = local_major()?;
        let target = |conn: &ConnArgs| Target::resolve(conn, major).map(Some);
        let (target, owner) = match &cli.command {
            Command::Run(a) => (
                target(&a.conn)?,
                Some(a.owner.clone().unwrap_or_else(run::default_owner)),
            ),
            Command::Acquire(a) => (
                target(&a.conn)?,
                Some(a.owner.clone().unwrap_or_else(run::default_owner)),
            ),
            Command::Renew(a) => (target(&a.conn)?, None),
            Command::Release(a) => (target(&a.conn)?, None),
            Command::Inspect(a) => (target(&a.conn)?, None),
            Command::List(a) => (target(&a.conn)?, None),
            Command::Purge(a) => (target(&a.conn)?, None),
            Command::Install(a) => (target(&a.conn)?, None),
            Command::Status(a) => (target(&a.conn)?, None),
            Command::Local(_) | Command::Demo(_) => (None, None),
        };
        let local = match &cli.command {
            Command::Local(_) => Some(LocalServer::from_env().map_err(ConfigError::Other)?),
            _ => None,
        };
        Ok(Config {
            command: cli.command,
            target,
            local,
            owner,
        })
    }
}

/// The major version of a new local server started on demand: `$PGLEASE_LOCAL_PG_VERSION` or 15.
fn local_major() -> Result<u32, ConfigError> {
    match std::env::var("PGLEASE_LOCAL_PG_VERSION") {
        Ok(v) if !v.is_empty() => v
            .trim()
            .parse()
            .ok()
            .filter(|m| (14..=18).contains(m))
            .ok_or_else(|| {
                ConfigError::Usage(format!("PGLEASE_LOCAL_PG_VERSION={v}: expected 14 to 18"))
            }),
        _ => Ok(DEFAULT_LOCAL_MAJOR),
    }
}

fn run(config: Config) -> Result<ExitCode, BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let Config {
        command,
        target,
        local,
        owner,
    } = config;
    let target = || target.as_ref().expect("resolved for commands that connect");
    let local = || local.as_ref().expect("resolved for local commands");
    let owner = || owner.clone().expect("resolved for run and acquire");
    runtime.block_on(async {
        match command {
            Command::Run(a) => run::run(a, owner(), target()).await,
            Command::Acquire(a) => leases::acquire(a, owner(), target()).await,
            Command::Renew(a) => leases::renew(a, target()).await,
            Command::Release(a) => leases::release(a, target()).await,
            Command::Inspect(a) => leases::inspect(a, target()).await,
            Command::List(a) => leases::list(a, target()).await,
            Command::Purge(a) => leases::purge(a, target()).await,
            Command::Install(a) => admin::install(a, target()).await,
            Command::Status(a) => admin::status(a, target()).await,
            Command::Local(LocalCommand::Start(a)) => admin::local_start(a, local()).await,
            Command::Local(LocalCommand::Stop) => admin::local_stop(local()).await,
            Command::Local(LocalCommand::Status(a)) => admin::local_status(a, local()).await,
            Command::Local(LocalCommand::Url(a)) => admin::local_url(a, local()).await,
            Command::Demo(a) => demo::run(a).await,
        }
    })
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

/// Wraps `source` with what was being done.
pub fn context(message: impl Into<String>, source: impl Into<BoxError>) -> BoxError {
    Box::new(Context {
        message: message.into(),
        source: source.into(),
    })
}

/// The exit code after giving up on a signal: 128 + its number, as shells report it.
pub fn signal_exit(sig: i32) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(255))
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
