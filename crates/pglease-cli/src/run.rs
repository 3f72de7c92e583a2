//! `pglease run`: hold a lease for as long as a command runs.
//!
//! 1. Acquire the key with the client library ([`pglease::Client`]), waiting up to `--wait`
//!    (progress line on a terminal; SIGINT/SIGTERM give up cleanly): not acquired exits with 3.
//! 2. Start the command with `PGLEASE_KEY`, `PGLEASE_OWNER` and `PGLEASE_EPOCH` (see `child.rs`).
//! 3. While it runs: forward caught signals to its process group, and watch the lease. If the lease
//!    is lost, send SIGTERM, then SIGKILL after `--kill-after`, and exit with 4.
//! 4. When it exits: release the lease and exit with its status (128 + signal if killed).
//!
//! Keeping the lease alive is the library's job ([`pglease::Lease`]'s keepalive renews it every
//! third of the ttl and declares it lost at its validity deadline, before the server would let a
//! successor in). This file only needs what the [`HeldLease`] trait names.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use crate::child::{self, Child};
use crate::cli::RunArgs;
use crate::connect::Target;
use crate::exit::{self, BoxError, EXIT_LOST, EXIT_NOT_ACQUIRED};
use crate::output;
use crate::signals::{self, Signals};
use crate::waiting::{self, Outcome, Waited};

/// What `run` needs from a lease held for the command's lifetime and kept alive by someone else.
pub trait HeldLease {
    /// The grant's fencing epoch.
    fn epoch(&self) -> i64;

    /// Completes when the lease is lost, with the reason (`expired`, `not_owner`, ...). Must be
    /// cancel safe: `run` polls it in a `select!` loop.
    fn lost(&self) -> impl Future<Output = String>;

    /// Releases the lease (stopping the keepalive); errors are reported, not fatal.
    fn release(self) -> impl Future<Output = Result<(), BoxError>>;
}

impl HeldLease for pglease::Lease {
    fn epoch(&self) -> i64 {
        pglease::LeaseGuard::epoch(self)
    }

    async fn lost(&self) -> String {
        pglease::LeaseGuard::lost(self).await.to_string()
    }

    async fn release(self) -> Result<(), BoxError> {
        Ok(pglease::Lease::release(self).await?)
    }
}

/// The default owner: `<hostname>-<pid>` (`pglease-<pid>` if the host name is unknown).
pub fn default_owner() -> String {
    let host = pglease::hostname().unwrap_or_else(|| "pglease".to_string());
    format!("{host}-{}", std::process::id())
}

/// `pglease run`.
pub async fn run(args: RunArgs, owner: String, target: &Target) -> Result<ExitCode, BoxError> {
    let key = args.key.key;
    let (ttl, wait) = (args.ttl.ttl, args.wait.wait);
    let mut signals = Signals::catch()?;
    let builder = pglease::Client::builder()
        .owner(owner.clone())
        .max_connections(2);
    let client = target.client(builder).await?;
    let outcome = acquire(&client, target, &key, ttl, wait, &mut signals).await?;
    let code = match outcome {
        Outcome::Granted(lease) => {
            supervise(
                &args.command,
                &key,
                &owner,
                lease,
                args.kill_after,
                &mut signals,
            )
            .await?
        }
        Outcome::Held(holder) => {
            let state = holder.map_or_else(|| "not held".to_string(), |h| h.describe());
            let waited = if wait.is_zero() {
                String::new()
            } else {
                format!(" within {}", output::duration(wait))
            };
            eprintln!("pglease: could not acquire {key}{waited}: it is {state}");
            ExitCode::from(EXIT_NOT_ACQUIRED)
        }
        Outcome::Interrupted(sig) => exit::signal_exit(sig),
    };
    client.shutdown().await;
    Ok(code)
}

/// Acquires `key` with a keepalive, waiting up to `wait` with progress on a terminal.
async fn acquire(
    client: &pglease::Client,
    target: &Target,
    key: &str,
    ttl: Duration,
    wait: Duration,
    signals: &mut Signals,
) -> Result<Outcome<pglease::Lease>, BoxError> {
    let acquired = if wait.is_zero() {
        client.try_acquire(key, ttl).await
    } else {
        // Cancel safe: dropped on a signal, the library gives back whatever it was granted.
        match waiting::while_waiting(target, key, wait, signals, client.acquire(key, ttl, wait))
            .await
        {
            Waited::Done(Ok(lease)) => Ok(Some(lease)),
            Waited::Done(Err(e)) if e.is_wait_timeout() => Ok(None),
            Waited::Done(Err(e)) => Err(e),
            Waited::Interrupted(sig) => return Ok(Outcome::Interrupted(sig)),
        }
    };
    match acquired? {
        Some(lease) => Ok(Outcome::Granted(lease)),
        None => {
            let observer = target.connect().await?;
            Ok(Outcome::Held(waiting::holder(&observer, key).await?))
        }
    }
}

/// Runs the command under `lease` and releases the lease when it exits.
async fn supervise(
    command: &[std::ffi::OsString],
    key: &str,
    owner: &str,
    lease: impl HeldLease,
    kill_after: Duration,
    signals: &mut Signals,
) -> Result<ExitCode, BoxError> {
    let env = [
        ("PGLEASE_KEY", key.to_owned()),
        ("PGLEASE_OWNER", owner.to_owned()),
        ("PGLEASE_EPOCH", lease.epoch().to_string()),
    ];
    let mut child = match child::spawn(command, &env) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("pglease: {}", e.message);
            release(lease, key).await;
            return Ok(ExitCode::from(e.code));
        }
    };

    let ended = {
        let lost = lease.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                status = child.wait() => break Ok(status?),
                sig = signals.recv() => child.signal(sig),
                reason = &mut lost => break Err(reason),
            }
        }
    };
    let lost = match ended {
        Ok(status) => {
            release(lease, key).await;
            return Ok(child::exit_code(status));
        }
        Err(reason) => reason,
    };
    eprintln!(
        "pglease: lost the lease on {key} ({lost}); stopping the command (SIGTERM, SIGKILL after {})",
        output::duration(kill_after)
    );
    let status = terminate(&mut child, kill_after, signals).await?;
    eprintln!("pglease: the command {}", child::describe(status));
    drop(lease);
    Ok(ExitCode::from(EXIT_LOST))
}

/// SIGTERM to the command's group, SIGKILL after `kill_after`; forwards signals meanwhile.
async fn terminate(
    child: &mut Child,
    kill_after: Duration,
    signals: &mut Signals,
) -> Result<std::process::ExitStatus, BoxError> {
    child.signal(libc::SIGTERM);
    let grace = tokio::time::sleep(kill_after);
    tokio::pin!(grace);
    let mut killed = false;
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                // Whatever the group leader left behind goes too.
                child.signal(libc::SIGKILL);
                return Ok(status);
            }
            sig = signals.recv() => child.signal(sig),
            () = &mut grace, if !killed => {
                killed = true;
                eprintln!(
                    "pglease: the command is still running after {}; sending {}",
                    output::duration(kill_after),
                    signals::name(libc::SIGKILL)
                );
                child.signal(libc::SIGKILL);
            }
        }
    }
}

/// Releases `lease`, reporting a failure on stderr (the lease then lapses at its expiry).
async fn release(lease: impl HeldLease, key: &str) {
    if let Err(e) = lease.release().await {
        eprintln!("pglease: could not release {key} ({e}); it lapses at its expiry");
    }
}
