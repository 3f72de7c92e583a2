//! `pglease run`: hold a lease for as long as a command (and everything it started) runs.
//!
//! 1. Acquire the key with the client library ([`pglease::Client`]) as an owner unique to this run
//!    ([`owner`]), waiting up to `--wait` (progress line on a terminal; SIGINT/SIGTERM give up
//!    cleanly): not acquired exits with `--conflict-exit-code` (3).
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
//! Why the owner is unique: `lease.acquire` returns the current grant unchanged to its owner (the
//! SQL API's idempotence, so a retried call is safe). Two runs with one owner string would both be
//! "granted" the key at one epoch, and the server cannot tell them apart. So a run's owner always
//! ends with a random nonce, and a grant returned to it can only be its own.
//!
//! Keeping the lease alive is the library's job ([`pglease::Lease`]'s keepalive renews it every
//! third of the ttl and declares it lost at its validity deadline, before the server would let a
//! successor in). This file only needs what the [`HeldLease`] trait names.

use std::future::Future;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use crate::child::{self, Child};
use crate::cli::{Descendants, RunArgs};
use crate::connect::Target;
use crate::exit::{self, BoxError};
use crate::output;
use crate::signals::{self, Signals};
use crate::waiting::{self, Outcome, Waited};
use crate::watchdog::Watchdog;

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

/// The default owner of `acquire`: `<hostname>-<pid>-<nonce>` (`pglease` if the host name is
/// unknown), where the nonce is 16 random hex digits: processes in different PID namespaces (or
/// containers) with one host name and one pid still get different owners.
pub fn default_owner() -> String {
    let host = pglease::hostname().unwrap_or_else(|| "pglease".to_string());
    format!("{host}-{}-{}", std::process::id(), nonce())
}

/// The owner of a run: `<OWNER>-<nonce>` with `--owner OWNER`, else [`default_owner`]. Always
/// unique to the run (see the module docs).
pub fn owner(given: Option<&str>) -> String {
    match given {
        Some(name) => format!("{name}-{}", nonce()),
        None => default_owner(),
    }
}

/// The length in bytes of what [`owner`] appends to `--owner`.
pub const OWNER_SUFFIX_BYTES: usize = 17;

/// 16 hex digits from the kernel's random generator (getrandom, else /dev/urandom; if both fail,
/// the clocks and the pid, which still differ between two runs started at different instants).
fn nonce() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: a valid buffer of the given length.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(filled).ok() != Some(bytes.len()) {
        use std::io::Read;
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
        if read.is_err() {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mono = Instant::now().elapsed().as_nanos() as u64;
            bytes = (wall ^ mono.rotate_left(32) ^ u64::from(std::process::id())).to_be_bytes();
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

/// `pglease run`.
pub async fn run(args: RunArgs, owner: String, target: &Target) -> Result<ExitCode, BoxError> {
    let codes = Codes {
        conflict: args.conflict_exit_code,
        lost: args.lost_exit_code,
        error: args.error_exit_code,
    };
    match run_inner(args, owner, target, codes).await {
        Ok(code) => Ok(code),
        Err(e) => {
            exit::print_error(&*e);
            Ok(ExitCode::from(codes.error))
        }
    }
}

async fn run_inner(
    args: RunArgs,
    owner: String,
    target: &Target,
    codes: Codes,
) -> Result<ExitCode, BoxError> {
    let key = args.key.key;
    let (ttl, wait) = (args.ttl.ttl, args.wait.wait);
    let mut signals = Signals::catch()?;
    let builder = pglease::Client::builder()
        .owner(owner.clone())
        .max_connections(2);
    // Connecting is bounded (the connect timeout) and interruptible.
    let client = tokio::select! {
        client = target.client(builder) => client?,
        sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
    };
    let how = if args.elect {
        How::Elect
    } else if let Some(n) = args.limit {
        How::Slot(n)
    } else {
        How::Key
    };
    let data = args.data.data.clone();
    let outcome = acquire(&client, target, &key, ttl, wait, how, data, &mut signals).await?;
    let supervision = Supervision {
        ttl,
        kill_after: args.kill_after,
        descendants: args.descendants,
        codes,
    };
    let code = match outcome {
        Outcome::Granted(lease) => {
            // A slot's lease key is KEY#N: that is what the epoch fences.
            let lease_key = pglease::LeaseGuard::key(&lease).to_owned();
            let mut env = Vec::new();
            if let Some(slot) = pglease::LeaseGuard::slot(&lease) {
                env.push(("PGLEASE_SLOT", slot.to_string()));
                env.push(("PGLEASE_SEMAPHORE", key.clone()));
            }
            supervise(
                &args.command,
                &lease_key,
                &owner,
                &env,
                lease,
                supervision,
                &mut signals,
            )
            .await?
        }
        Outcome::Held(holder) => {
            let waited = if wait.is_zero() {
                String::new()
            } else {
                format!(" within {}", output::duration(wait))
            };
            match how {
                How::Slot(n) => {
                    eprintln!(
                        "pglease: could not acquire a slot of {key}{waited}: all {n} are held"
                    )
                }
                How::Key | How::Elect => {
                    let state = holder.map_or_else(|| "not held".to_string(), |h| h.describe());
                    let what = if matches!(how, How::Elect) {
                        "become the leader of"
                    } else {
                        "acquire"
                    };
                    eprintln!("pglease: could not {what} {key}{waited}: it is {state}");
                }
            }
            ExitCode::from(codes.conflict)
        }
        Outcome::Interrupted(sig) => exit::signal_exit(sig),
    };
    client.shutdown().await;
    Ok(code)
}
/// What `run` holds while the command runs.
#[derive(Debug, Clone, Copy)]
enum How {
    /// The key itself.
    Key,
    /// One of N slots of the semaphore named by the key (`--limit N`).
    Slot(u32),
    /// The key as an election's leadership (`pglease elect`).
    Elect,
}

/// Acquires `key` (as `how` says) with a keepalive, waiting up to `wait` with progress on a
/// terminal.
#[allow(clippy::too_many_arguments)]
async fn acquire(
    client: &pglease::Client,
    target: &Target,
    key: &str,
    ttl: Duration,
    wait: Duration,
    how: How,
    data: Option<String>,
    signals: &mut Signals,
) -> Result<Outcome<pglease::Lease>, BoxError> {
    let acquired = match how {
        How::Key => {
            let mut request = client.acquire_with(key, ttl);
            if let Some(data) = data {
                request = request.data(data);
            }
            if wait.is_zero() {
                // One answer, bounded by the request timeout, and interruptible (cancel safe as
                // below).
                tokio::select! {
                    acquired = target.answer(request.try_acquire()) => acquired,
                    sig = signals.recv_terminating() => return Ok(Outcome::Interrupted(sig)),
                }
            } else {
                // Cancel safe: dropped on a signal, the library gives back whatever it was granted.
                match waiting::while_waiting(target, key, wait, signals, request.acquire(wait))
                    .await
                {
                    Waited::Done(Ok(lease)) => Ok(Some(lease)),
                    Waited::Done(Err(e)) if e.is_wait_timeout() => Ok(None),
                    Waited::Done(Err(e)) => Err(BoxError::from(e)),
                    Waited::Interrupted(sig) => return Ok(Outcome::Interrupted(sig)),
                }
            }
        }
        How::Slot(n) => {
            let mut semaphore = client.semaphore(key, n, ttl);
            if let Some(data) = data {
                semaphore = semaphore.with_data(data);
            }
            if wait.is_zero() {
                tokio::select! {
                    acquired = target.answer(semaphore.try_acquire()) => acquired,
                    sig = signals.recv_terminating() => return Ok(Outcome::Interrupted(sig)),
                }
            } else {
                // No progress line: the holders are many (`pglease list KEY#`). Cancel safe as
                // above.
                tokio::select! {
                    acquired = semaphore.acquire(wait) => match acquired {
                        Ok(lease) => Ok(Some(lease)),
                        Err(e) if e.is_wait_timeout() => Ok(None),
                        Err(e) => Err(BoxError::from(e)),
                    },
                    sig = signals.recv_terminating() => return Ok(Outcome::Interrupted(sig)),
                }
            }
        }
        How::Elect => {
            let mut election = client.election(key, ttl);
            if let Some(data) = data {
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
            match waiting::while_waiting(target, key, wait, signals, campaign).await {
                Waited::Done(done) => done,
                Waited::Interrupted(sig) => return Ok(Outcome::Interrupted(sig)),
            }
        }
    };
    match acquired? {
        Some(lease) => Ok(Outcome::Granted(lease)),
        None if matches!(how, How::Slot(_)) => Ok(Outcome::Held(None)),
        None => {
            let holder = async {
                let observer = target.connect().await?;
                target.answer(waiting::holder(&observer, key)).await
            };
            tokio::select! {
                holder = holder => Ok(Outcome::Held(holder?)),
                sig = signals.recv_terminating() => Ok(Outcome::Interrupted(sig)),
            }
        }
    }
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

/// Runs the command under `lease` and releases the lease when it (and, by default, everything it
/// started) has exited.
async fn supervise(
    command: &[std::ffi::OsString],
    key: &str,
    owner: &str,
    extra_env: &[(&'static str, String)],
    lease: impl HeldLease,
    sup: Supervision,
    signals: &mut Signals,
) -> Result<ExitCode, BoxError> {
    let mut env = vec![
        ("PGLEASE_KEY", key.to_owned()),
        ("PGLEASE_OWNER", owner.to_owned()),
        ("PGLEASE_EPOCH", lease.epoch().to_string()),
    ];
    env.extend(extra_env.iter().cloned());
    let Some(deadline) = lease.valid_until() else {
        eprintln!("pglease: lost the lease on {key} before the command started");
        return Ok(ExitCode::from(sup.codes.lost));
    };
    let started = child::catch_sigchld()
        .map_err(|e| exit::context("catching SIGCHLD", e))
        .and_then(|sigchld| {
            let watchdog = Watchdog::start(watchdog_deadline(deadline, sup.ttl))
                .map_err(|e| exit::context("starting the watchdog", e))?;
            Ok((sigchld, watchdog))
        })
        .and_then(|(sigchld, watchdog)| match child::become_subreaper() {
            Ok(()) => Ok((sigchld, watchdog)),
            Err(e) => {
                watchdog.finish();
                Err(exit::context("becoming a child subreaper", e))
            }
        });
    let (sigchld, mut watchdog) = match started {
        Ok(started) => started,
        Err(e) => {
            release(lease, key, sup.ttl).await;
            return Err(e);
        }
    };
    let mut child = match child::spawn(command, &env, sigchld, watchdog.pid()) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("pglease: {}", e.message);
            watchdog.finish();
            release(lease, key, sup.ttl).await;
            return Ok(ExitCode::from(e.code));
        }
    };

    let mut stop = Stop {
        lost: None,
        kill_at: None,
        kill_after: sup.kill_after,
    };
    if let Err(e) = watchdog.watch_group(child.pgid()) {
        stop.lose(&child, key, format!("the watchdog is gone: {e}"));
    }
    let grace = grace(sup.ttl, sup.kill_after);
    let mut main: Option<ExitStatus> = None;
    let mut lost_seen = false;
    let mut tick = tokio::time::interval(tick_every(sup.ttl));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    {
        let lost = lease.lost();
        tokio::pin!(lost);
        loop {
            let kill_at = stop.kill_at;
            let kill_timer = async move {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                exited = exits(&mut child, main.is_none()) => match exited? {
                None => break,
                Some(status) => {
                    main = Some(status);
                    if stop.lost.is_none() {
                        if lease.valid_until().is_none_or(|v| Instant::now() >= v) {
                            stop.lose(&child, key, "its local deadline passed".into());
                        } else if child.has_descendants() {
                            let what = child::describe(status);
                            match sup.descendants {
                                Descendants::Wait => eprintln!(
                                    "pglease: the command {what}; keeping the lease on {key} until the \
                                     processes it left behind exit"
                                ),
                                Descendants::Kill => {
                                    eprintln!(
                                        "pglease: the command {what}; stopping the processes it left \
                                         behind (SIGTERM, SIGKILL after {})",
                                        output::duration(sup.kill_after)
                                    );
                                    stop.terminate(&child);
                                }
                            }
                        }
                    }
                }
                },
                sig = signals.recv() => {
                    if main.is_none() {
                        child.signal(sig);
                    } else {
                        child.signal_all(sig);
                    }
                }
                reason = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    if stop.lost.is_none() {
                        stop.lose(&child, key, reason);
                    }
                }
                _ = tick.tick(), if stop.lost.is_none() => {
                    if let Some(valid_until) = lease.valid_until() {
                        if let Err(e) = watchdog.extend(watchdog_deadline(valid_until, sup.ttl)) {
                            stop.lose(&child, key, format!("the watchdog is gone: {e}"));
                        } else if !grace.is_zero() && Instant::now() + grace >= valid_until {
                            stop.lose(
                                &child,
                                key,
                                format!(
                                    "no renewal confirmed with {} of it left",
                                    output::duration(grace)
                                ),
                            );
                        }
                    }
                }
                () = kill_timer, if stop.kill_at.is_some() => {
                    stop.kill_at = None;
                    eprintln!(
                        "pglease: still running after {}; sending {}",
                        output::duration(sup.kill_after),
                        signals::name(libc::SIGKILL)
                    );
                    child.signal_all(libc::SIGKILL);
                }
            }
        }
    }
    watchdog.finish();
    let status = main.expect("the loop ends only after the command exited");
    if stop.lost.is_some() {
        eprintln!("pglease: the command {}", child::describe(status));
        if lease.valid_until().is_some_and(|v| Instant::now() < v) {
            // Given up before the deadline: the key may still be ours.
            release(lease, key, sup.ttl).await;
        }
        return Ok(ExitCode::from(sup.codes.lost));
    }
    release(lease, key, sup.ttl).await;
    Ok(child::exit_code(status))
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

    fn is_nonce(s: &str) -> bool {
        s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
    }

    #[test]
    fn every_owner_ends_with_a_fresh_nonce() {
        let given = owner(Some("worker"));
        assert!(
            given.strip_prefix("worker-").is_some_and(is_nonce),
            "{given}"
        );
        assert_eq!(given.len(), "worker".len() + OWNER_SUFFIX_BYTES);
        let default = default_owner();
        let (host_pid, nonce) = default.rsplit_once('-').unwrap();
        assert!(is_nonce(nonce), "{default}");
        assert!(
            host_pid.ends_with(&format!("-{}", std::process::id())),
            "{default}"
        );
        // Same process, same name: still different owners.
        assert_ne!(owner(Some("worker")), owner(Some("worker")));
        assert_ne!(default_owner(), default_owner());
    }

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
