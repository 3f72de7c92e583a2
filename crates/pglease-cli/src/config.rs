//! A parsed command line resolved into what to run: one [`Config`] variant per command, holding its
//! arguments with where it connects and who it acts as, all decided before any I/O; and running it.

use std::process::ExitCode;

use crate::cli::{
    AcquireArgs, Cli, Command, DemoArgs, InspectArgs, InstallArgs, ListArgs, LocalCommand,
    PurgeArgs, ReleaseArgs, RenewArgs, RunArgs, StatusArgs,
};
use crate::connect::{ConfigError, Target};
use crate::exit::BoxError;
use crate::local::LocalServer;
use crate::{admin, demo, leases, run};

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
    /// `pglease install`.
    Install { args: InstallArgs, target: Target },
    /// `pglease status`.
    Status { args: StatusArgs, target: Target },
    /// `pglease local ...` on `server`.
    Local {
        command: LocalCommand,
        server: LocalServer,
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
            Command::Run(args) => Config::Run {
                target: target(&args.conn)?,
                owner: run::owner(args.owner.as_deref()),
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
            Command::Install(args) => Config::Install {
                target: target(&args.conn)?,
                args,
            },
            Command::Status(args) => Config::Status {
                target: target(&args.conn)?,
                args,
            },
            Command::Local(command) => Config::Local {
                command,
                server: LocalServer::from_env().map_err(ConfigError::Other)?,
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
            Config::Run {
                args,
                owner,
                target,
            } => run::run(args, owner, &target).await,
            Config::Acquire {
                args,
                owner,
                target,
            } => leases::acquire(args, owner, &target).await,
            Config::Renew { args, target } => leases::renew(args, &target).await,
            Config::Release { args, target } => leases::release(args, &target).await,
            Config::Inspect { args, target } => leases::inspect(args, &target).await,
            Config::List { args, target } => leases::list(args, &target).await,
            Config::Purge { args, target } => leases::purge(args, &target).await,
            Config::Install { args, target } => admin::install(args, &target).await,
            Config::Status { args, target } => admin::status(args, &target).await,
            Config::Local { command, server } => match command {
                LocalCommand::Start(args) => admin::local_start(args, &server).await,
                LocalCommand::Stop => admin::local_stop(&server).await,
                LocalCommand::Status(args) => admin::local_status(args, &server).await,
                LocalCommand::Url(args) => admin::local_url(args, &server).await,
            },
            Config::Demo(args) => demo::run(args).await,
        }
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
