//! A parsed command line resolved into what to run: each command's parsed arguments handed to its
//! handler with where it connects and who it acts as, all decided before any I/O; and running it.
//! A new command is a variant of `cli::Command` and an arm here.
//!
//! Every command but `run` (which forwards signals to its command) ends promptly on SIGINT,
//! SIGTERM, SIGHUP or SIGQUIT, in whatever state it is (connecting, waiting for an answer, starting
//! the local server), exiting with 128 + the signal's number; `acquire` first cancels a blocking
//! acquire on the server (see `waiting.rs`).

use std::future::Future;
use std::io::IsTerminal;
use std::pin::Pin;
use std::process::ExitCode;

use crate::cli::{
    Cli, Command, ConnArgs, Holding, LocalCommand, QueueCommand, semaphore_name_fits,
};
use crate::connect::{ConfigError, Limits, Target};
use crate::exit::{self, BoxError};
use crate::local::LocalServer;
use crate::missing::explained;
use crate::run::LeaseRequest;
use crate::signals::Signals;
use crate::{
    admin, consume, demo, history, leader, leases, owner, queue, queue_errors, queue_grants, run,
};

use pglease::PG_LEASE;

/// The major version of a new local server when a command starts it on demand.
const DEFAULT_LOCAL_MAJOR: u32 = 15;

/// A command's run, not yet started: what its handler returns when first polled.
type Handler = Pin<Box<dyn Future<Output = Result<ExitCode, BoxError>>>>;

/// A validated command, ready to run: its handler, holding the command's parsed arguments with
/// where it connects and who it acts as. Nothing has run yet (no I/O).
pub struct Config(Handler);

impl Config {
    /// Validates the command line and resolves the connection target, the owner and the local
    /// server (as each command needs) without any I/O.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Usage`] for an invalid URL, `PG*` variable, `PGLEASE_LOCAL_PG_VERSION` or
    /// `run --limit` key; [`ConfigError::Other`] when there is no place for the local server.
    pub fn new(cli: Cli) -> Result<Config, ConfigError> {
        let major = local_major()?;
        let url = cli.database_url;
        let target = |args: &ConnArgs| Target::resolve(&with_url(args, &url), major);
        let handler: Handler = match cli.command {
            // `run` catches and forwards signals itself.
            Command::Run(args) => {
                if args.limit.is_some() {
                    semaphore_name_fits(&args.key.key).map_err(ConfigError::Usage)?;
                }
                let target = target(&args.supervision.conn)?;
                let request = LeaseRequest {
                    holding: args.holding(),
                    key: args.key.key,
                    ttl: args.ttl.ttl,
                    wait: args.wait.wait,
                    data: args.data.data,
                    exact_owner: None,
                    handover_to: None,
                };
                Box::pin(async move { run::run(request, args.supervision, &target).await })
            }
            // `elect` is a run that holds an election's leadership.
            Command::Elect(args) => {
                if args.handover_to.is_some() && args.handover_to == args.exact_owner {
                    return Err(ConfigError::Usage(format!(
                        "--handover-to names this candidate itself ({}): name the successor's \
                         --exact-owner",
                        args.handover_to.unwrap_or_default()
                    )));
                }
                let target = target(&args.supervision.conn)?;
                let request = LeaseRequest {
                    holding: Holding::Leadership,
                    key: args.name,
                    ttl: args.ttl,
                    wait: args.wait,
                    data: args.data.data,
                    exact_owner: args.exact_owner,
                    handover_to: args.handover_to,
                };
                Box::pin(async move { run::run(request, args.supervision, &target).await })
            }
            // `acquire` handles signals itself: a blocking acquire must be cancelled on the server.
            Command::Acquire(args) => {
                let target = target(&args.conn)?;
                let owner = args.owner.clone().unwrap_or_else(owner::default_owner);
                Box::pin(async move {
                    let mut signals = Signals::catch()?;
                    explained(
                        &target,
                        &PG_LEASE,
                        leases::acquire(args, owner, &target, &mut signals),
                    )
                    .await
                })
            }
            Command::Leader(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leader::leader(args, &target)).await
                })
            }
            Command::Renew(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::renew(args, &target)).await
                })
            }
            Command::Release(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::release(args, &target)).await
                })
            }
            Command::Transfer(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::transfer(args, &target)).await
                })
            }
            Command::History(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, history::history(args, &target)).await
                })
            }
            Command::ForceRelease(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::force_release(args, &target)).await
                })
            }
            Command::Inspect(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::inspect(args, &target)).await
                })
            }
            Command::List(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::list(args, &target)).await
                })
            }
            Command::Purge(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, leases::purge(args, &target)).await
                })
            }
            Command::Configure(args) => {
                let target = target(&args.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, admin::configure(args, &target)).await
                })
            }
            Command::Install(args) => {
                let target = target(&args.conn)?;
                until_signal(async move { admin::install(args, &target).await })
            }
            Command::Status(args) => {
                let target = target(&args.conn)?;
                until_signal(async move { admin::status(args, &target).await })
            }
            Command::Ui(args) => {
                crate::ui::check_listen(args.listen, &args.console)?;
                let target = target(&args.console.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, crate::ui::ui(args, &target)).await
                })
            }
            Command::Metrics(args) => {
                crate::ui::check_listen(args.listen, &args.console)?;
                let target = target(&args.console.conn)?;
                until_signal(async move {
                    explained(&target, &PG_LEASE, crate::ui::metrics(args, &target)).await
                })
            }
            Command::Queue(command) => queue_handler(command, &url, major)?,
            Command::Local(command) => local_handler(command)?,
            Command::Demo(args) => until_signal(demo::run(args)),
        };
        Ok(Config(handler))
    }

    /// Runs the command; returns its exit code.
    ///
    /// # Errors
    ///
    /// Whatever the command fails with (exit code 1); refusals are exit codes, not errors.
    pub async fn run(self) -> Result<ExitCode, BoxError> {
        self.0.await
    }
}

/// `pglease queue ...`.
fn queue_handler(
    command: QueueCommand,
    url: &Option<String>,
    major: u32,
) -> Result<Handler, ConfigError> {
    if let QueueCommand::Drop(a) = &command
        && !a.yes
        && !std::io::stdin().is_terminal()
    {
        return Err(ConfigError::Usage(format!(
            "queue drop deletes {}'s messages and dead letters: pass --yes (there is no terminal \
             to ask on)",
            a.queue.queue
        )));
    }
    let conn = match &command {
        QueueCommand::Create(a) => &a.conn,
        QueueCommand::Drop(a) => &a.conn,
        QueueCommand::Send(a) => &a.conn,
        QueueCommand::Stats(a) => &a.conn,
        QueueCommand::DeadLetters(a) => &a.conn,
        QueueCommand::Redrive(a) => &a.conn,
        QueueCommand::Grant(a) | QueueCommand::Revoke(a) => &a.conn,
        QueueCommand::Consume(a) => &a.conn,
    };
    let target = Target::resolve(&with_url(conn, url), major)?;
    let queue = match &command {
        QueueCommand::Create(a) => Some(a.queue.queue.clone()),
        QueueCommand::Drop(a) => Some(a.queue.queue.clone()),
        QueueCommand::Send(a) => Some(a.queue.queue.clone()),
        QueueCommand::Stats(a) => a.queue.clone(),
        QueueCommand::DeadLetters(a) => Some(a.queue.queue.clone()),
        QueueCommand::Redrive(a) => Some(a.queue.queue.clone()),
        QueueCommand::Grant(a) | QueueCommand::Revoke(a) => Some(a.queue.queue.clone()),
        QueueCommand::Consume(a) => Some(a.queue.queue.clone()),
    };
    let json = match &command {
        QueueCommand::Create(a) => a.output.json,
        QueueCommand::Drop(a) => a.output.json,
        QueueCommand::Send(a) => a.output.json,
        QueueCommand::Stats(a) => a.output.json,
        QueueCommand::DeadLetters(a) => a.output.json,
        QueueCommand::Redrive(a) => a.output.json,
        QueueCommand::Grant(a) | QueueCommand::Revoke(a) => a.output.json,
        QueueCommand::Consume(_) => false,
    };
    // Errors in pglease's terms (a missing pg_lease_queue is checked first by every command);
    // with --json also as a document on stdout.
    let spoken = move |result: Result<ExitCode, BoxError>| {
        result.map_err(|e| {
            let e = queue_errors::speak(e, queue.as_deref());
            if json {
                queue_errors::print_json(&*e);
            }
            e
        })
    };
    Ok(match command {
        QueueCommand::Create(a) => {
            until_signal(async move { spoken(queue::create(a, &target).await) })
        }
        QueueCommand::Drop(a) => {
            until_signal(async move { spoken(queue::drop_queue(a, &target).await) })
        }
        QueueCommand::Send(a) => until_signal(async move { spoken(queue::send(a, &target).await) }),
        QueueCommand::Stats(a) => {
            until_signal(async move { spoken(queue::stats(a, &target).await) })
        }
        QueueCommand::DeadLetters(a) => {
            until_signal(async move { spoken(queue::dead_letters(a, &target).await) })
        }
        QueueCommand::Redrive(a) => {
            until_signal(async move { spoken(queue::redrive(a, &target).await) })
        }
        QueueCommand::Grant(a) => {
            until_signal(async move { spoken(queue_grants::grant(a, true, &target).await) })
        }
        QueueCommand::Revoke(a) => {
            until_signal(async move { spoken(queue_grants::grant(a, false, &target).await) })
        }
        // `consume` forwards signals to its command and shuts down cleanly itself.
        QueueCommand::Consume(a) => Box::pin(async move {
            let ext = &pglease::PG_LEASE_QUEUE;
            spoken(explained(&target, ext, consume::consume(a, &target)).await)
        }),
    })
}

/// A command's connection arguments with the global `--database-url` (or `DATABASE_URL`).
fn with_url(args: &ConnArgs, url: &Option<String>) -> ConnArgs {
    ConnArgs {
        database_url: url.clone(),
        ..args.clone()
    }
}

/// `pglease local ...` on the local server, its connections bounded by `PGLEASE_*` limits.
fn local_handler(command: LocalCommand) -> Result<Handler, ConfigError> {
    let server = LocalServer::from_env().map_err(ConfigError::Other)?;
    let limits = Limits::from_env()?;
    Ok(match command {
        LocalCommand::Start(args) => {
            until_signal(async move { admin::local_start(args, &server, limits).await })
        }
        LocalCommand::Stop => until_signal(async move { admin::local_stop(&server).await }),
        LocalCommand::Status(args) => {
            until_signal(async move { admin::local_status(args, &server).await })
        }
        LocalCommand::Url(args) => {
            until_signal(async move { admin::local_url(args, &server, limits).await })
        }
    })
}

/// Runs `command`, ending it (dropped) on a terminating signal with 128 + the signal's number.
fn until_signal(command: impl Future<Output = Result<ExitCode, BoxError>> + 'static) -> Handler {
    Box::pin(async move {
        let mut signals = Signals::catch()?;
        tokio::select! {
            result = command => result,
            sig = signals.recv_terminating() => Ok(exit::signal_exit(sig)),
        }
    })
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
