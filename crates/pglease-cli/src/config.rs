//! A parsed command line resolved into what to run: one [`Config`] variant per command, holding its
//! arguments with where it connects and who it acts as, all decided before any I/O; and running it.
//!
//! Every command but `run` (which forwards signals to its command) ends promptly on SIGINT,
//! SIGTERM, SIGHUP or SIGQUIT, in whatever state it is (connecting, waiting for an answer, starting
//! the local server), exiting with 128 + the signal's number; `acquire` first cancels a blocking
//! acquire on the server (see `waiting.rs`).

use std::process::ExitCode;

use crate::cli::{
    AcquireArgs, Cli, Command, ConfigureArgs, DemoArgs, InspectArgs, InstallArgs, LeaderArgs,
    ListArgs, LocalCommand, PurgeArgs, QueueCommand, ReleaseArgs, RenewArgs, RunArgs, StatusArgs,
};
use crate::connect::{ConfigError, Limits, Target};
use crate::exit::{self, BoxError};
use crate::local::LocalServer;
use crate::signals::Signals;
use crate::{admin, demo, leases, queue, run};

/// The major version of a new local server when a command starts it on demand.
const DEFAULT_LOCAL_MAJOR: u32 = 15;

/// A validated command, ready to run.
#[derive(Debug)]
pub enum Config {
    /// `pglease run`, as `owner`.
    Run {
        args: RunArgs,
        owner: String,
        target: Target,
    },
    /// `pglease leader`.
    Leader { args: LeaderArgs, target: Target },
    /// `pglease acquire`, as `owner`.
    Acquire {
        args: AcquireArgs,
        owner: String,
        target: Target,
    },
    /// `pglease renew`.
    Renew { args: RenewArgs, target: Target },
    /// `pglease release`.
    Release { args: ReleaseArgs, target: Target },
    /// `pglease inspect`.
    Inspect { args: InspectArgs, target: Target },
    /// `pglease list`.
    List { args: ListArgs, target: Target },
    /// `pglease purge`.
    Purge { args: PurgeArgs, target: Target },
    /// `pglease configure`.
    Configure { args: ConfigureArgs, target: Target },
    /// `pglease install`.
    Install { args: InstallArgs, target: Target },
    /// `pglease status`.
    Status { args: StatusArgs, target: Target },
    /// `pglease queue ...`.
    Queue {
        command: QueueCommand,
        target: Target,
    },
    /// `pglease local ...` on `server`, its connections bounded by `limits`.
    Local {
        command: LocalCommand,
        server: LocalServer,
        limits: Limits,
    },
    /// `pglease demo`.
    Demo(DemoArgs),
}

impl Config {
    /// Resolves the connection target, the owner and the local server (as each command needs)
    /// without any I/O.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Usage`] for an invalid URL, `PG*` variable or `PGLEASE_LOCAL_PG_VERSION`;
    /// [`ConfigError::Other`] when there is no place for the local server.
    pub fn new(cli: Cli) -> Result<Config, ConfigError> {
        let major = local_major()?;
        let target = |conn| Target::resolve(conn, major);
        let owner = |owner: &Option<String>| owner.clone().unwrap_or_else(run::default_owner);
        Ok(match cli.command {
            Command::Run(args) => run_config(args, major)?,
            Command::Elect(args) => run_config(args.into_run(), major)?,
            Command::Leader(args) => Config::Leader {
                target: target(&args.conn)?,
                args,
            },
            Command::Acquire(args) => Config::Acquire {
                target: target(&args.conn)?,
                owner: owner(&args.owner),
                args,
            },
            Command::Renew(args) => Config::Renew {
                target: target(&args.conn)?,
                args,
            },
            Command::Release(args) => Config::Release {
                target: target(&args.conn)?,
                args,
            },
            Command::Inspect(args) => Config::Inspect {
                target: target(&args.conn)?,
                args,
            },
            Command::List(args) => Config::List {
                target: target(&args.conn)?,
                args,
            },
            Command::Purge(args) => Config::Purge {
                target: target(&args.conn)?,
                args,
            },
            Command::Configure(args) => Config::Configure {
                target: target(&args.conn)?,
                args,
            },
            Command::Install(args) => Config::Install {
                target: target(&args.conn)?,
                args,
            },
            Command::Status(args) => Config::Status {
                target: target(&args.conn)?,
                args,
            },
            Command::Queue(command) => Config::Queue {
                target: target(match &command {
                    QueueCommand::Create(a) => &a.conn,
                    QueueCommand::Drop(a) => &a.conn,
                    QueueCommand::Send(a) => &a.conn,
                    QueueCommand::Stats(a) => &a.conn,
                    QueueCommand::DeadLetters(a) => &a.conn,
                    QueueCommand::Redrive(a) => &a.conn,
                    QueueCommand::Consume(a) => &a.conn,
                })?,
                command,
            },
            Command::Local(command) => Config::Local {
                command,
                server: LocalServer::from_env().map_err(ConfigError::Other)?,
                limits: Limits::from_env()?,
            },
            Command::Demo(args) => Config::Demo(args),
        })
    }

    /// Runs the command; returns its exit code.
    ///
    /// # Errors
    ///
    /// Whatever the command fails with (exit code 1); refusals are exit codes, not errors.
    pub async fn run(self) -> Result<ExitCode, BoxError> {
        match self {
            // `run` catches and forwards signals itself.
            Config::Run {
                args,
                owner,
                target,
            } => run::run(args, owner, &target).await,
            // `acquire` handles signals itself: a blocking acquire must be cancelled on the server.
            Config::Acquire {
                args,
                owner,
                target,
            } => {
                let mut signals = Signals::catch()?;
                leases::acquire(args, owner, &target, &mut signals).await
            }
            Config::Renew { args, target } => until_signal(leases::renew(args, &target)).await,
            Config::Release { args, target } => until_signal(leases::release(args, &target)).await,
            Config::Inspect { args, target } => until_signal(leases::inspect(args, &target)).await,
            Config::Leader { args, target } => {
                until_signal(crate::leader::leader(args, &target)).await
            }
            Config::List { args, target } => until_signal(leases::list(args, &target)).await,
            Config::Purge { args, target } => until_signal(leases::purge(args, &target)).await,
            Config::Configure { args, target } => {
                until_signal(admin::configure(args, &target)).await
            }
            Config::Install { args, target } => until_signal(admin::install(args, &target)).await,
            Config::Status { args, target } => until_signal(admin::status(args, &target)).await,
            Config::Queue { command, target } => match command {
                QueueCommand::Create(a) => until_signal(queue::create(a, &target)).await,
                QueueCommand::Drop(a) => until_signal(queue::drop_queue(a, &target)).await,
                QueueCommand::Send(a) => until_signal(queue::send(a, &target)).await,
                QueueCommand::Stats(a) => until_signal(queue::stats(a, &target)).await,
                QueueCommand::DeadLetters(a) => until_signal(queue::dead_letters(a, &target)).await,
                QueueCommand::Redrive(a) => until_signal(queue::redrive(a, &target)).await,
                // `consume` forwards signals to its command and shuts down cleanly itself.
                QueueCommand::Consume(a) => crate::consume::consume(a, &target).await,
            },
            Config::Local {
                command,
                server,
                limits,
            } => match command {
                LocalCommand::Start(args) => {
                    until_signal(admin::local_start(args, &server, limits)).await
                }
                LocalCommand::Stop => until_signal(admin::local_stop(&server)).await,
                LocalCommand::Status(args) => {
                    until_signal(admin::local_status(args, &server)).await
                }
                LocalCommand::Url(args) => {
                    until_signal(admin::local_url(args, &server, limits)).await
                }
            },
            Config::Demo(args) => until_signal(demo::run(args)).await,
        }
    }
}

/// Runs `command`, ending it (dropped) on a terminating signal with 128 + the signal's number.
/// `pglease run` (and `elect`, which is a run that campaigns): validated without I/O.
fn run_config(mut args: RunArgs, major: u32) -> Result<Config, ConfigError> {
    if args.limit.is_some() {
        crate::cli::semaphore_name_fits(&args.key.key).map_err(ConfigError::Usage)?;
    }
    // `--shell SCRIPT` is `-- sh -c SCRIPT`: run.rs sees an ordinary command.
    if let Some(script) = args.shell.take() {
        args.command = vec!["sh".into(), "-c".into(), script];
    }
    Ok(Config::Run {
        target: Target::resolve(&args.conn, major)?,
        owner: run::owner(args.owner.as_deref()),
        args,
    })
}

async fn until_signal(
    command: impl std::future::Future<Output = Result<ExitCode, BoxError>>,
) -> Result<ExitCode, BoxError> {
    let mut signals = Signals::catch()?;
    tokio::select! {
        result = command => result,
        sig = signals.recv_terminating() => Ok(exit::signal_exit(sig)),
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
