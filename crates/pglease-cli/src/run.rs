//! `pglease run` and `pglease elect`: hold a lease (a key, a semaphore slot or an election's
//! leadership, see [`Holding`]) for as long as a command (and everything it started) runs.
//!
//! 1. Acquire the lease with the client library ([`pglease::Client`]) as an owner unique to this
//!    run ([`owner::unique_owner`]), waiting up to `--wait` (progress line on a terminal;
//!    SIGINT/SIGTERM give up cleanly): not acquired exits with `--conflict-exit-code` (3).
//! 2. Arm the watchdog (`watchdog.rs`) with the lease's local deadline, become a child subreaper,
//!    and start the command with `PGLEASE_KEY`, `PGLEASE_OWNER` and `PGLEASE_EPOCH` (`child.rs`).
//! 3. While it runs: forward caught signals to its process group, move the watchdog's deadline on
//!    every confirmed renewal, and watch the lease. If the lease is lost, or no renewal has been
//!    confirmed when less than [`grace`](crate::supervise::grace) of it is left, send SIGTERM to
//!    the command and everything it started, then SIGKILL after `--kill-after` (the watchdog's
//!    SIGKILL at the local deadline comes first if that is sooner), and exit with
//!    `--lost-exit-code` (4).
//! 4. When the command exits: by default keep the lease until every process it left behind has
//!    exited too (`--descendants wait`), or stop them (`--descendants kill`); then release the lease
//!    (`elect --handover-to OWNER`: transfer it to OWNER) and exit with the command's status (128 +
//!    signal if killed). A SIGTERM or SIGINT to pglease is passed on to the command, so stepping
//!    down on a signal is this same order: the lease is kept until the command has exited.
//!
//! The owner always ends with a random nonce, so a grant returned to it can only be its own (see
//! `owner.rs`), except `elect --exact-owner`, which a leader's `--handover-to` names.
//!
//! Keeping the lease alive is the library's job ([`pglease::Lease`]'s keepalive renews it every
//! third of the ttl and declares it lost at its validity deadline, before the server would let a
//! successor in). Steps 2 to 4 are `supervise.rs`, which needs only what its
//! [`HeldLease`](crate::supervise::HeldLease) trait names.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{Holding, SupervisionArgs};
use crate::connect::Target;
use crate::exit::{self, BoxError};
use crate::signals::Signals;
use crate::supervise::{LeaseEnv, Supervision, supervise};
use crate::waiting::{self, Holder, Outcome, Waited};
use crate::{missing, output, owner};

/// The lease `run` or `elect` holds the command under, as parsed.
#[derive(Debug)]
pub struct LeaseRequest {
    /// The key, the semaphore's name or the election's name.
    pub key: String,
    /// The lease's ttl, renewed every third of it.
    pub ttl: Duration,
    /// How long to wait for the lease (zero: one attempt).
    pub wait: Duration,
    /// Which lease it is.
    pub holding: Holding,
    /// The value the grant carries (`--data`).
    pub data: Option<String>,
    /// `elect --exact-owner`: campaign as exactly this owner (no nonce).
    pub exact_owner: Option<String>,
    /// `elect --handover-to`: on a graceful step-down, hand the leadership to this owner.
    pub handover_to: Option<String>,
}

/// `pglease run` and `pglease elect`: holds `request`'s lease while the command of `args` runs.
pub async fn run(
    request: LeaseRequest,
    args: SupervisionArgs,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let supervision = Supervision::new(&args, request.ttl, request.handover_to.clone());
    let codes = supervision.codes;
    match run_inner(request, args, supervision, target).await {
        Ok(code) => Ok(code),
        Err(e) => {
            // Bounded by the connect and request timeouts, and interruptible.
            let mut signals = Signals::catch()?;
            let e = tokio::select! {
                e = missing::explain(e, target, &pglease::PG_LEASE) => e,
                sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
            };
            exit::print_error(&*e);
            if missing::is_not_ready(&*e) {
                return Ok(ExitCode::from(codes.not_installed));
            }
            Ok(ExitCode::from(codes.error))
        }
    }
}

async fn run_inner(
    request: LeaseRequest,
    args: SupervisionArgs,
    supervision: Supervision,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let owner = match &request.exact_owner {
        Some(exact) => exact.clone(),
        None => owner::unique_owner(args.owner.as_deref()),
    };
    let command = args.argv();
    let mut signals = Signals::catch()?;
    let builder = pglease::Client::builder()
        .owner(owner.clone())
        .max_connections(2);
    // Connecting is bounded (the connect timeout) and interruptible.
    let client = tokio::select! {
        client = target.client(builder) => client?,
        sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
    };
    let code = match acquire(&client, target, &request, &mut signals).await? {
        Outcome::Granted(lease) => {
            // A slot's lease key is KEY#N: that is what the epoch fences.
            let lease_key = pglease::LeaseGuard::key(&lease).to_owned();
            let mut env = Vec::new();
            if let Some(slot) = pglease::LeaseGuard::slot(&lease) {
                env.push(("PGLEASE_SLOT", slot.to_string()));
                env.push(("PGLEASE_SEMAPHORE", request.key.clone()));
            }
            let names = LeaseEnv {
                key: &lease_key,
                owner: &owner,
                extra: &env,
            };
            supervise(&command, names, lease, supervision, &mut signals).await?
        }
        Outcome::Held(holder) => {
            report_not_acquired(&request, holder);
            ExitCode::from(supervision.codes.conflict)
        }
        Outcome::Interrupted(sig) => exit::signal_exit(sig),
    };
    client.shutdown().await;
    Ok(code)
}

/// Says on stderr that `request`'s lease was not acquired within its wait, and who holds it.
fn report_not_acquired(request: &LeaseRequest, holder: Option<Holder>) {
    let key = &request.key;
    let waited = if request.wait.is_zero() {
        String::new()
    } else {
        format!(" within {}", output::duration(request.wait))
    };
    match request.holding {
        Holding::SemaphoreSlot(n) => {
            eprintln!("pglease: could not acquire a slot of {key}{waited}: all {n} are held")
        }
        Holding::Key | Holding::Leadership => {
            let state = holder.map_or_else(|| "not held".to_string(), |h| h.describe());
            let what = if request.holding == Holding::Leadership {
                "become the leader of"
            } else {
                "acquire"
            };
            eprintln!("pglease: could not {what} {key}{waited}: it is {state}");
        }
    }
}

/// Acquires `request`'s lease with a keepalive, waiting up to its wait with progress on a terminal.
async fn acquire(
    client: &pglease::Client,
    target: &Target,
    request: &LeaseRequest,
    signals: &mut Signals,
) -> Result<Outcome<pglease::Lease>, BoxError> {
    let acquired = match request.holding {
        Holding::Key => acquire_key(client, target, request, signals).await,
        Holding::SemaphoreSlot(n) => acquire_slot(client, target, request, n, signals).await,
        Holding::Leadership => campaign(client, target, request, signals).await,
    };
    let acquired = match acquired {
        Waited::Done(acquired) => acquired?,
        Waited::Interrupted(sig) => return Ok(Outcome::Interrupted(sig)),
    };
    match acquired {
        Some(lease) => Ok(Outcome::Granted(lease)),
        None if matches!(request.holding, Holding::SemaphoreSlot(_)) => Ok(Outcome::Held(None)),
        None => {
            let holder = async {
                let observer = target.connect().await?;
                target
                    .answer(waiting::holder(&observer, &request.key))
                    .await
            };
            tokio::select! {
                holder = holder => Ok(Outcome::Held(holder?)),
                sig = signals.recv_terminating() => Ok(Outcome::Interrupted(sig)),
            }
        }
    }
}

/// What an attempt to acquire gives: the lease, `None` when the wait ran out, or the signal that
/// ended it (nothing is then held).
type Attempt = Waited<Result<Option<pglease::Lease>, BoxError>>;

/// `run`: the key itself.
async fn acquire_key(
    client: &pglease::Client,
    target: &Target,
    request: &LeaseRequest,
    signals: &mut Signals,
) -> Attempt {
    let (key, wait) = (request.key.as_str(), request.wait);
    let mut acquiring = client.acquire_with(key, request.ttl);
    if let Some(data) = request.data.clone() {
        acquiring = acquiring.data(data);
    }
    if wait.is_zero() {
        // One answer, bounded by the request timeout, and interruptible (cancel safe as below).
        return tokio::select! {
            acquired = target.answer(acquiring.try_acquire()) => Waited::Done(acquired),
            sig = signals.recv_terminating() => Waited::Interrupted(sig),
        };
    }
    // Cancel safe: dropped on a signal, the library gives back whatever it was granted.
    match waiting::while_waiting(target, key, wait, signals, acquiring.acquire(wait)).await {
        Waited::Done(Ok(lease)) => Waited::Done(Ok(Some(lease))),
        Waited::Done(Err(e)) if e.is_wait_timeout() => Waited::Done(Ok(None)),
        Waited::Done(Err(e)) => Waited::Done(Err(BoxError::from(e))),
        Waited::Interrupted(sig) => Waited::Interrupted(sig),
    }
}

/// `run --limit n`: one of `n` slots of the semaphore named by the key.
async fn acquire_slot(
    client: &pglease::Client,
    target: &Target,
    request: &LeaseRequest,
    n: u32,
    signals: &mut Signals,
) -> Attempt {
    let mut semaphore = client.semaphore(&request.key, n, request.ttl);
    if let Some(data) = request.data.clone() {
        semaphore = semaphore.with_data(data);
    }
    if request.wait.is_zero() {
        return tokio::select! {
            acquired = target.answer(semaphore.try_acquire()) => Waited::Done(acquired),
            sig = signals.recv_terminating() => Waited::Interrupted(sig),
        };
    }
    // No progress line: the holders are many (`pglease list KEY#`). Cancel safe as for a key.
    tokio::select! {
        acquired = semaphore.acquire(request.wait) => Waited::Done(match acquired {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.is_wait_timeout() => Ok(None),
            Err(e) => Err(BoxError::from(e)),
        }),
        sig = signals.recv_terminating() => Waited::Interrupted(sig),
    }
}

/// `elect`: the key as an election's leadership.
async fn campaign(
    client: &pglease::Client,
    target: &Target,
    request: &LeaseRequest,
    signals: &mut Signals,
) -> Attempt {
    let (key, wait) = (request.key.as_str(), request.wait);
    let mut election = client.election(key, request.ttl);
    if let Some(data) = request.data.clone() {
        election = election.with_data(data);
    }
    // Campaigning waits without polling; --wait bounds it (forever: the API's maximum).
    let campaign = async {
        match tokio::time::timeout(wait, election.campaign()).await {
            Ok(Ok(lease)) => Ok(Some(lease)),
            Ok(Err(e)) => Err(BoxError::from(e)),
            Err(_elapsed) => Ok(None),
        }
    };
    waiting::while_waiting(target, key, wait, signals, campaign).await
}
