//! Steps 2 to 4 of `pglease run` (see `run.rs`): the command under a held lease. Arm the watchdog,
//! start the command, forward signals, keep the watchdog's deadline moving with the lease's, stop
//! everything if the lease is lost (or its renewals stop getting through), wait for or stop the
//! processes the command leaves behind, release the lease (or hand it over: `elect --handover-to`),
//! and end with the right exit code.
//!
//! Stepping down is one order whatever starts it: the command exits by itself, or a SIGTERM or
//! SIGINT sent to pglease is passed on to it and it exits; either way the lease is kept (renewed,
//! watched by the watchdog) until the command and, by default, what it left running have exited,
//! and only then released or handed over (as Kubernetes' graceful leader shutdown, KEP-5366).

use std::future::Future;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use crate::child::{self, Child};
use crate::cli::{Descendants, SupervisionArgs};
use crate::exit::{self, BoxError};
use crate::output;
use crate::signals::{self, Signals};
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

    /// Hands the lease to `to` (stopping the keepalive) and returns the successor's epoch; on an
    /// error the lease is released or lost, never kept. Errors are reported, not fatal.
    fn hand_over(self, to: &str) -> impl Future<Output = Result<i64, BoxError>>;
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

    async fn hand_over(self, to: &str) -> Result<i64, BoxError> {
        let ttl = pglease::LeaseGuard::ttl(&self);
        Ok(pglease::Lease::transfer_to(self, to, ttl).await?.epoch)
    }
}

/// The exit codes of pglease's own outcomes, as chosen on the command line.
#[derive(Debug, Clone, Copy)]
pub struct Codes {
    /// `--conflict-exit-code`: not acquired.
    pub conflict: u8,
    /// `--lost-exit-code`: the lease was lost while the command ran.
    pub lost: u8,
    /// `--error-exit-code`: pglease's own error.
    pub error: u8,
    /// `--error-exit-code` if given, else [`exit::EXIT_NOT_INSTALLED`]: the extension is missing.
    pub not_installed: u8,
}

/// How the command is supervised.
#[derive(Debug, Clone)]
pub struct Supervision {
    ttl: Duration,
    kill_after: Duration,
    descendants: Descendants,
    /// `elect --handover-to`: the owner the lease is handed to when the command has exited.
    handover_to: Option<String>,
    /// pglease's own exit codes.
    pub codes: Codes,
}

impl Supervision {
    /// The supervision `args` ask for, of a lease of `ttl`, handed to `handover_to` (if given)
    /// instead of released when the command has exited.
    pub fn new(args: &SupervisionArgs, ttl: Duration, handover_to: Option<String>) -> Supervision {
        Supervision {
            ttl,
            kill_after: args.kill_after,
            descendants: args.descendants,
            handover_to,
            codes: Codes {
                conflict: args.conflict_exit_code,
                lost: args.lost_exit_code,
                error: args.error_exit_code.unwrap_or(exit::EXIT_ERROR),
                not_installed: args.error_exit_code.unwrap_or(exit::EXIT_NOT_INSTALLED),
            },
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

/// What the command is told of its lease, in its environment.
pub struct LeaseEnv<'a> {
    /// The lease key (`KEY#N` for a semaphore slot): `PGLEASE_KEY`.
    pub key: &'a str,
    /// `PGLEASE_OWNER`.
    pub owner: &'a str,
    /// More variables (a slot's `PGLEASE_SLOT` and `PGLEASE_SEMAPHORE`).
    pub extra: &'a [(&'static str, String)],
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
pub async fn supervise(
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
        leftover_stops: 0,
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
    /// How many terminating signals came since the command exited, while its leftovers run.
    leftover_stops: u32,
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
                        self.leftovers_signalled(sig);
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
                     left behind exit (a signal, e.g. Ctrl-C, is passed on to them; a second one \
                     kills them; --descendants kill stops them at once)"
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

    /// `sig` came while the lease is kept for the processes the command left behind: forwarded to
    /// them. A second terminating signal (Ctrl-C again) kills them (SIGKILL): a job started with
    /// `&` by `sh -c` ignores SIGINT, and the user would otherwise be left waiting.
    fn leftovers_signalled(&mut self, sig: i32) {
        if !signals::TERMINATING.contains(&sig) || self.stop.lost.is_some() {
            self.child.signal_all(sig);
            return;
        }
        self.leftover_stops += 1;
        let name = signals::name(sig);
        if self.leftover_stops == 1 {
            eprintln!(
                "pglease: {name}: passed on to the processes the command left behind; the lease on \
                 {} is kept until they exit. Send it again (Ctrl-C) to kill them (SIGKILL); \
                 --descendants kill stops them (SIGTERM, then SIGKILL) when the command exits",
                self.key
            );
            self.child.signal_all(sig);
        } else {
            eprintln!(
                "pglease: {name} again: killing the processes the command left behind ({})",
                signals::name(libc::SIGKILL)
            );
            self.child.signal_all(libc::SIGKILL);
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

    /// Everything has exited: stops the watchdog, releases the lease or hands it over (unless it is
    /// lost) and returns the exit code: the command's own, or `--lost-exit-code`.
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
        match &self.sup.handover_to {
            Some(to) => hand_over(lease, key, to, ttl).await,
            None => release(lease, key, ttl).await,
        }
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

/// Hands `lease` to `to` within the ttl (at most 10 s), saying so on stderr; a failure is reported
/// (the library then released the lease, or it had been lost, or it lapses at its expiry).
async fn hand_over(lease: impl HeldLease, key: &str, to: &str, ttl: Duration) {
    let bound = ttl.min(Duration::from_secs(10));
    match tokio::time::timeout(bound, lease.hand_over(to)).await {
        Ok(Ok(epoch)) => {
            eprintln!("pglease: handed the leadership of {key} to {to} (its term: epoch {epoch})")
        }
        Ok(Err(e)) => eprintln!(
            "pglease: could not hand {key} over to {to} ({e}); it was released instead, or \
             lapses at its expiry"
        ),
        Err(_) => eprintln!(
            "pglease: could not hand {key} over to {to} within {}; it lapses at its expiry",
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
