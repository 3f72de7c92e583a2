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
//!    confirmed when less than [`grace`] of it is left, send SIGTERM to the command and everything
//!    it started, then SIGKILL after `--kill-after` (the watchdog's SIGKILL at the local deadline
//!    comes first if that is sooner), and exit with `--lost-exit-code` (4).
//! 4. When the command exits: by default keep the lease until every process it left behind has
//!    exited too (`--descendants wait`), or stop them (`--descendants kill`); then release the lease
//!    and exit with the command's status (128 + signal if killed).
//!
//! The owner always ends with a random nonce, so a grant returned to it can only be its own (see
//! `owner.rs`).
//!
//! Keeping the lease alive is the library's job ([`pglease::Lease`]'s keepalive renews it every
//! third of the ttl and declares it lost at its validity deadline, before the server would let a
//! successor in). This file only needs what the [`HeldLease`] trait names.

use std::future::Future;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use crate::child::{self, Child};
use crate::cli::{Descendants, Holding, SupervisionArgs};
use crate::connect::Target;
use crate::exit::{self, BoxError};
use crate::signals::{self, Signals};
use crate::waiting::{self, Holder, Outcome, Waited};
use crate::watchdog::Watchdog;
use crate::{output, owner};

/// What `run` needs from a lease held for the command's lifetime and kept alive by someone else.
pub trait HeldLease {
    /// The grant's fencing epoch.
    fn epoch(&self) -> i64;

    /// The lease's local validity deadline (moved by each confirmed renewal), `None` once it ended.
    fn valid_until(&self) -> Option<Instant>;

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

    fn valid_until(&self) -> Option<Instant> {
        pglease::LeaseGuard::valid_until(self)
    }

    async fn lost(&self) -> String {
        pglease::LeaseGuard::lost(self).await.to_string()
    }

    async fn release(self) -> Result<(), BoxError> {
        Ok(pglease::Lease::release(self).await?)
    }
}

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
}

/// The exit codes of pglease's own outcomes, as chosen on the command line.
#[derive(Debug, Clone, Copy)]
struct Codes {
    conflict: u8,
    lost: u8,
    error: u8,
}

/// How the command is supervised.
#[derive(Debug, Clone, Copy)]
struct Supervision {
    ttl: Duration,
    kill_after: Duration,
    descendants: Descendants,
    codes: Codes,
}

impl Supervision {
    fn new(args: &SupervisionArgs, ttl: Duration) -> Supervision {
        Supervision {
            ttl,
            kill_after: args.kill_after,
            descendants: args.descendants,
            codes: Codes {
                conflict: args.conflict_exit_code,
                lost: args.lost_exit_code,
                error: args.error_exit_code,
            },
        }
    }
}

/// `pglease run` and `pglease elect`: holds `request`'s lease while the command of `args` runs.
pub async fn run(
    request: LeaseRequest,
    args: SupervisionArgs,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let supervision = Supervision::new(&args, request.ttl);
    match run_inner(request, args, supervision, target).await {
        Ok(code) => Ok(code),
        Err(e) => {
            exit::print_error(&*e);
            Ok(ExitCode::from(supervision.codes.error))
        }
    }
}

async fn run_inner(
    request: LeaseRequest,
    args: SupervisionArgs,
    supervision: Supervision,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let owner = owner::unique_owner(args.owner.as_deref());
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

/// How long before the lease's local deadline a lease whose renewals are not getting through is
/// given up, so the command has time to stop on SIGTERM before the watchdog's SIGKILL: the smaller
/// of `--kill-after` and a third of the ttl (a renewal is then a third of the ttl late: the
/// keepalive renews when a third of the ttl has passed).
pub fn grace(ttl: Duration, kill_after: Duration) -> Duration {
    kill_after.min(ttl / 3)
}

/// How long before the lease's local deadline the watchdog fires: a twentieth of the ttl, at most
/// 250 ms, for its own wake-up and kill latency on a loaded host (the lease's safety margin is for
/// the keepalive; this keeps the SIGKILL ahead of it rather than racing it).
pub fn watchdog_lead(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(250))
}

/// The watchdog's deadline for a lease valid until `valid_until`.
fn watchdog_deadline(valid_until: Instant, ttl: Duration) -> Instant {
    valid_until
        .checked_sub(watchdog_lead(ttl))
        .unwrap_or(valid_until)
}

/// How often the supervisor passes the lease's deadline on to the watchdog.
fn tick_every(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

/// What the command is told of its lease, in its environment.
struct LeaseEnv<'a> {
    /// The lease key (`KEY#N` for a semaphore slot): `PGLEASE_KEY`.
    key: &'a str,
    /// `PGLEASE_OWNER`.
    owner: &'a str,
    /// More variables (a slot's `PGLEASE_SLOT` and `PGLEASE_SEMAPHORE`).
    extra: &'a [(&'static str, String)],
}

impl LeaseEnv<'_> {
    /// The variables to add to the command's environment, with the grant's `epoch`.
    fn vars(&self, epoch: i64) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("PGLEASE_KEY", self.key.to_owned()),
            ("PGLEASE_OWNER", self.owner.to_owned()),
            ("PGLEASE_EPOCH", epoch.to_string()),
        ];
        env.extend(self.extra.iter().cloned());
        env
    }
}

/// Runs the command under `lease` and releases the lease when it (and, by default, everything it
/// started) has exited.
async fn supervise(
    command: &[std::ffi::OsString],
    names: LeaseEnv<'_>,
    lease: impl HeldLease,
    sup: Supervision,
    signals: &mut Signals,
) -> Result<ExitCode, BoxError> {
    let key = names.key;
    let Some(deadline) = lease.valid_until() else {
        eprintln!("pglease: lost the lease on {key} before the command started");
        return Ok(ExitCode::from(sup.codes.lost));
    };
    let (sigchld, watchdog) = match protect(deadline, sup.ttl) {
        Ok(protected) => protected,
        Err(e) => {
            release(lease, key, sup.ttl).await;
            return Err(e);
        }
    };
    let env = names.vars(lease.epoch());
    let child = match child::spawn(command, &env, sigchld, watchdog.pid()) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("pglease: {}", e.message);
            watchdog.finish();
            release(lease, key, sup.ttl).await;
            return Ok(ExitCode::from(e.code));
        }
    };
    let mut supervisor = Supervisor {
        child,
        watchdog,
        stop: Stop {
            lost: None,
            kill_at: None,
            kill_after: sup.kill_after,
        },
        main: None,
        key,
        sup,
    };
    if let Err(e) = supervisor.watchdog.watch_group(supervisor.child.pgid()) {
        let reason = format!("the watchdog is gone: {e}");
        supervisor.stop.lose(&supervisor.child, key, reason);
    }
    supervisor.watch(&lease, signals).await?;
    supervisor.finish(lease).await
}

/// Before the command starts: catch SIGCHLD, start the watchdog with the lease's local `deadline`,
/// and become a child subreaper (so the processes the command leaves behind stay ours to wait for
/// and to stop).
fn protect(
    deadline: Instant,
    ttl: Duration,
) -> Result<(tokio::signal::unix::Signal, Watchdog), BoxError> {
    let sigchld = child::catch_sigchld().map_err(|e| exit::context("catching SIGCHLD", e))?;
    let watchdog = Watchdog::start(watchdog_deadline(deadline, ttl))
        .map_err(|e| exit::context("starting the watchdog", e))?;
    if let Err(e) = child::become_subreaper() {
        watchdog.finish();
        return Err(exit::context("becoming a child subreaper", e));
    }
    Ok((sigchld, watchdog))
}

/// The running command, its watchdog, and what has happened to them.
struct Supervisor<'a> {
    child: Child,
    watchdog: Watchdog,
    stop: Stop,
    /// The command's exit status, once it has exited (its descendants may still run).
    main: Option<ExitStatus>,
    key: &'a str,
    sup: Supervision,
}

impl Supervisor<'_> {
    /// Until the command and every process it left behind have exited: forwards `signals`, keeps
    /// the watchdog's deadline moving with the lease's, and stops everything if the lease is lost.
    async fn watch(
        &mut self,
        lease: &impl HeldLease,
        signals: &mut Signals,
    ) -> std::io::Result<()> {
        let mut lost_seen = false;
        let mut tick = tokio::time::interval(tick_every(self.sup.ttl));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let lost = lease.lost();
        tokio::pin!(lost);
        loop {
            let kill_at = self.stop.kill_at;
            let kill_timer = async move {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                exited = exits(&mut self.child, self.main.is_none()) => match exited? {
                    None => return Ok(()),
                    Some(status) => self.command_exited(status, lease),
                },
                sig = signals.recv() => {
                    if self.main.is_none() {
                        self.child.signal(sig);
                    } else {
                        self.child.signal_all(sig);
                    }
                }
                reason = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    if self.stop.lost.is_none() {
                        self.stop.lose(&self.child, self.key, reason);
                    }
                }
                _ = tick.tick(), if self.stop.lost.is_none() => self.check_lease(lease),
                () = kill_timer, if self.stop.kill_at.is_some() => self.kill_now(),
            }
        }
    }

    /// The command exited with `status`: a lease past its deadline is lost; processes it left
    /// behind are waited for or stopped (`--descendants`).
    fn command_exited(&mut self, status: ExitStatus, lease: &impl HeldLease) {
        self.main = Some(status);
        if self.stop.lost.is_some() {
            return;
        }
        let key = self.key;
        if lease.valid_until().is_none_or(|v| Instant::now() >= v) {
            self.stop
                .lose(&self.child, key, "its local deadline passed".into());
        } else if self.child.has_descendants() {
            let what = child::describe(status);
            match self.sup.descendants {
                Descendants::Wait => eprintln!(
                    "pglease: the command {what}; keeping the lease on {key} until the processes it \
                     left behind exit"
                ),
                Descendants::Kill => {
                    eprintln!(
                        "pglease: the command {what}; stopping the processes it left behind \
                         (SIGTERM, SIGKILL after {})",
                        output::duration(self.sup.kill_after)
                    );
                    self.stop.terminate(&self.child);
                }
            }
        }
    }

    /// Passes the lease's deadline on to the watchdog, and gives the lease up if no renewal has
    /// been confirmed with less than the grace left.
    fn check_lease(&mut self, lease: &impl HeldLease) {
        let Some(valid_until) = lease.valid_until() else {
            return;
        };
        let grace = grace(self.sup.ttl, self.sup.kill_after);
        if let Err(e) = self
            .watchdog
            .extend(watchdog_deadline(valid_until, self.sup.ttl))
        {
            let reason = format!("the watchdog is gone: {e}");
            self.stop.lose(&self.child, self.key, reason);
        } else if !grace.is_zero() && Instant::now() + grace >= valid_until {
            let reason = format!(
                "no renewal confirmed with {} of it left",
                output::duration(grace)
            );
            self.stop.lose(&self.child, self.key, reason);
        }
    }

    /// `--kill-after` has passed since SIGTERM: SIGKILL to everything.
    fn kill_now(&mut self) {
        self.stop.kill_at = None;
        eprintln!(
            "pglease: still running after {}; sending {}",
            output::duration(self.sup.kill_after),
            signals::name(libc::SIGKILL)
        );
        self.child.signal_all(libc::SIGKILL);
    }

    /// Everything has exited: stops the watchdog, releases the lease (unless it is lost) and
    /// returns the exit code: the command's own, or `--lost-exit-code`.
    async fn finish(self, lease: impl HeldLease) -> Result<ExitCode, BoxError> {
        self.watchdog.finish();
        let status = self
            .main
            .expect("the watch ends only after the command exited");
        let (key, ttl) = (self.key, self.sup.ttl);
        if self.stop.lost.is_some() {
            eprintln!("pglease: the command {}", child::describe(status));
            if lease.valid_until().is_some_and(|v| Instant::now() < v) {
                // Given up before the deadline: the key may still be ours.
                release(lease, key, ttl).await;
            }
            return Ok(ExitCode::from(self.sup.codes.lost));
        }
        release(lease, key, ttl).await;
        Ok(child::exit_code(status))
    }
}

/// The command's exit status (while `running`), else `None` once no descendant is left.
async fn exits(child: &mut Child, running: bool) -> std::io::Result<Option<ExitStatus>> {
    if running {
        child.wait().await.map(Some)
    } else {
        child.wait_descendants().await.map(|()| None)
    }
}

/// Stopping the command: why (if the lease is lost or given up) and when SIGKILL is due.
struct Stop {
    lost: Option<String>,
    kill_at: Option<tokio::time::Instant>,
    kill_after: Duration,
}

impl Stop {
    /// The lease is lost (or given up): say so and stop everything.
    fn lose(&mut self, child: &Child, key: &str, reason: String) {
        eprintln!(
            "pglease: lost the lease on {key} ({reason}); stopping the command (SIGTERM, SIGKILL \
             after {} at the latest by the lease's local deadline)",
            output::duration(self.kill_after)
        );
        self.lost = Some(reason);
        self.terminate(child);
    }

    /// SIGTERM to the command and everything it started; SIGKILL due after `kill_after`.
    fn terminate(&mut self, child: &Child) {
        if self.kill_at.is_some() {
            return;
        }
        if self.kill_after.is_zero() {
            child.signal_all(libc::SIGKILL);
            return;
        }
        child.signal_all(libc::SIGTERM);
        self.kill_at = Some(tokio::time::Instant::now() + self.kill_after);
    }
}

/// Releases `lease` within the ttl (at most 10 s), reporting a failure on stderr (the lease then
/// lapses at its expiry).
async fn release(lease: impl HeldLease, key: &str, ttl: Duration) {
    let bound = ttl.min(Duration::from_secs(10));
    match tokio::time::timeout(bound, lease.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("pglease: could not release {key} ({e}); it lapses at its expiry"),
        Err(_) => eprintln!(
            "pglease: could not release {key} within {}; it lapses at its expiry",
            output::duration(bound)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_at_most_a_third_of_the_ttl() {
        let s = Duration::from_secs;
        assert_eq!(grace(s(30), s(10)), s(10));
        assert_eq!(grace(s(3), s(10)), s(1));
        assert_eq!(grace(s(30), Duration::ZERO), Duration::ZERO);
        assert!(tick_every(Duration::from_millis(1)) >= Duration::from_millis(10));
        assert!(tick_every(s(3600)) <= Duration::from_millis(500));
        assert_eq!(watchdog_lead(s(2)), Duration::from_millis(100));
        assert_eq!(watchdog_lead(s(60)), Duration::from_millis(250));
    }
}
