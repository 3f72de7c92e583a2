//! The keepalive task of one lease: renews at a fraction of the ttl, retries failed renewals with
//! backoff on fresh connections until the validity deadline, signals loss, and releases the lease
//! when its handle is released or dropped or the client shuts down.
//!
//! Rules it keeps:
//!
//! - The validity deadline only moves on a *confirmed* renewal: `sent + min(ttl, left) - margin`,
//!   with `sent` taken before the renewal was sent. An unanswered renewal (connection error, or no
//!   answer within the attempt timeout) proves nothing, so it neither extends nor ends the lease;
//!   the next confirmed call decides (renew is idempotent for the same owner and epoch).
//! - A renewal refused by the server (`not_owner`, `lapsed`, `epoch_mismatch`) ends the lease at
//!   once. Anything else is retried until the deadline, then the lease ends as
//!   [`LostReason::Expired`].
//! - Every wait is bounded by the deadline; the task ends on release, drop, loss or client
//!   shutdown, and nothing renews after it has ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use crate::calls::{self, Status};
use crate::client::SlotGuard;
use crate::error::{Error, Result};
use crate::lease::{Command, Health, LostReason, Shared};

/// The clock-rate term of the safety margin: 1/1000 of the ttl (1000 ppm), twice the 500 ppm that
/// the Linux kernel lets NTP slew a clock, so it covers the client's and the server's clocks
/// drifting apart at the largest rate either may be slewed.
pub(crate) const DRIFT_DIVISOR: u32 = 1000;

/// The longest a best-effort release (on drop, loss by expiry or shutdown) may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// The timing of one lease, derived from its ttl and the client's options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) ttl: Duration,
    /// Time between regular renewals: `ttl × renew_fraction`.
    pub(crate) interval: Duration,
    /// Subtracted from every validity span: `ttl / 1000 + safety_margin`.
    pub(crate) margin: Duration,
    /// The first retry delay; doubles per failure, up to `interval`.
    pub(crate) backoff_base: Duration,
}

impl Timing {
    /// The timing for `ttl`, or an invalid-argument error if `ttl` is too short for the margin.
    pub(crate) fn new(
        ttl: Duration,
        renew_fraction: f64,
        safety_margin: Duration,
    ) -> Result<Timing> {
        let margin = ttl / DRIFT_DIVISOR + safety_margin;
        if ttl <= margin * 2 {
            return Err(Error::invalid_argument(format!(
                "ttl {ttl:?} is too short: it must exceed twice the safety margin ({margin:?} = \
                 ttl/{DRIFT_DIVISOR} + {safety_margin:?})"
            )));
        }
        let interval = ttl.mul_f64(renew_fraction).max(Duration::from_millis(1));
        let backoff_base = (ttl / 100).clamp(Duration::from_millis(10), Duration::from_millis(100));
        Ok(Timing {
            ttl,
            interval,
            margin,
            backoff_base,
        })
    }

    /// The validity deadline proved by a call sent at `sent` that reported `left` on the lease.
    pub(crate) fn valid_until(&self, sent: Instant, left: Duration) -> Instant {
        sent + self.ttl.min(left).saturating_sub(self.margin)
    }

    /// When to renew next after a confirmed call sent at `sent` with deadline `valid_until`:
    /// after one interval, but never later than halfway to the deadline.
    pub(crate) fn next_renewal(&self, sent: Instant, valid_until: Instant) -> Instant {
        let half = valid_until.saturating_duration_since(sent) / 2;
        sent + self.interval.min(half)
    }

    /// How long one renewal attempt may wait for an answer before the connection is abandoned and
    /// the renewal is sent again on another one.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.interval.max(Duration::from_millis(50))
    }

    /// The delay before retry number `failures` (1-based): exponential from `backoff_base`, capped at
    /// the renewal interval, with jitter (between half and all of it).
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        backoff(self.backoff_base, self.interval, failures)
    }
}

/// Exponential backoff from `base`, capped at `cap`, with "equal jitter" (half fixed, half random).
pub(crate) fn backoff(base: Duration, cap: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let delay = base.saturating_mul(1 << exp).min(cap.max(base));
    let half = delay / 2;
    half + half.mul_f64(random_unit())
}

/// A pseudo-random number in [0, 1), good enough for jitter.
pub(crate) fn random_unit() -> f64 {
    use std::hash::BuildHasher;
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Counts a keepalive task as live from its creation until it ends (or is dropped unpolled with its
/// runtime).
pub(crate) struct Live(Arc<AtomicUsize>);

impl Live {
    pub(crate) fn new(count: Arc<AtomicUsize>) -> Live {
        count.fetch_add(1, Ordering::SeqCst);
        Live(count)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One lease's keepalive task.
pub(crate) struct Keepalive {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pool: Pool,
    pub(crate) timing: Timing,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    /// The client's shutdown token.
    pub(crate) shutdown: CancellationToken,
    /// Keeps the key reserved in the client until the task has finished with it.
    pub(crate) slot: Option<SlotGuard>,
    /// When the grant (or its last confirmed renewal) was sent.
    pub(crate) sent: Instant,
    /// Keeps the task counted as live until it ends (dropped with the task).
    pub(crate) _live: Live,
}

/// How the renewal loop ended.
enum Exit {
    /// Release requested by the handle (with a reply) or by its drop (without).
    Release(Option<oneshot::Sender<Result<()>>>),
    /// The client shut down.
    Shutdown,
    /// The lease ended for `reason` (lost, or ended by a handle).
    Ended(LostReason),
}

impl Keepalive {
    /// Runs until the lease ends; see the module docs.
    pub(crate) async fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let valid_until = match shared.health() {
            Health::Held { valid_until, .. } => valid_until,
            Health::Ended(_) => self.sent,
        };
        let mut next = self.timing.next_renewal(self.sent, valid_until);
        let mut failures = 0u32;

        let exit = loop {
            let valid_until = match shared.health() {
                Health::Held { valid_until, .. } => valid_until,
                Health::Ended(reason) => break Exit::Ended(reason),
            };
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => break Exit::Shutdown,
                command = self.commands.recv() => match command {
                    Some(Command::Release(reply)) => break Exit::Release(Some(reply)),
                    None => break Exit::Release(None),
                },
                () = shared.token.cancelled() => continue,
                () = sleep_until(valid_until) => {
                    shared.end(LostReason::Expired);
                    continue;
                }
                () = sleep_until(next) => {}
            }

            // One renewal attempt. A release request waits for it (so no renewal of ours reaches
            // the server after the release); loss and shutdown interrupt it.
            let sent = Instant::now();
            let deadline = valid_until.min(sent + self.timing.attempt_timeout());
            let attempt = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => break Exit::Shutdown,
                () = shared.token.cancelled() => continue,
                attempt = renew_once(&self.pool, &shared, deadline) => attempt,
            };
            match attempt {
                Ok((Status::Ok, Some((left, expires_at)))) => {
                    failures = 0;
                    let valid_until = self.timing.valid_until(sent, left);
                    shared.extend(valid_until, expires_at);
                    next = self.timing.next_renewal(sent, valid_until);
                }
                Ok((status, _)) => {
                    let reason = LostReason::from_status(status).unwrap_or(LostReason::Lapsed);
                    shared.end(reason);
                }
                Err(_) => {
                    failures = failures.saturating_add(1);
                    next = Instant::now() + self.timing.backoff(failures);
                }
            }
        };

        match exit {
            Exit::Release(reply) => {
                let result = match shared.check() {
                    Err(reason) => {
                        if reason == LostReason::Expired || reason == LostReason::Released {
                            // Dropped, or lost by expiry: the server may still hold it for us.
                            let _ = release_once(&self.pool, &shared).await;
                        }
                        Err(Error::lease_lost(reason))
                    }
                    Ok(()) => {
                        let result = release_once(&self.pool, &shared).await;
                        match result {
                            Ok(Status::Ok) => {
                                shared.end(LostReason::Released);
                                Ok(())
                            }
                            Ok(status) => {
                                let reason =
                                    LostReason::from_status(status).unwrap_or(LostReason::Lapsed);
                                shared.end(reason);
                                Err(Error::lease_lost(reason))
                            }
                            Err(e) => {
                                shared.end(LostReason::Released);
                                Err(e)
                            }
                        }
                    }
                };
                // Free the key in the client before answering, so that the caller of `release`
                // can acquire it again at once.
                drop(self.slot.take());
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            Exit::Shutdown => {
                let held = shared.check().is_ok();
                shared.end(LostReason::Shutdown);
                if held {
                    let _ = release_once(&self.pool, &shared).await;
                }
            }
            Exit::Ended(reason) => {
                if matches!(reason, LostReason::Expired | LostReason::Released) {
                    // Released: the handle was dropped. Expired: the server may still hold the
                    // lease for us (unconfirmed renewals); freeing it lets a successor in sooner.
                    let _ = release_once(&self.pool, &shared).await;
                }
            }
        }
        // Answer late release requests (the handle's `release` raced with the end).
        while let Ok(Command::Release(reply)) = self.commands.try_recv() {
            let reason = shared.check().err().unwrap_or(LostReason::Released);
            let _ = reply.send(Err(Error::lease_lost(reason)));
        }
        drop(self.slot.take());
    }
}

/// One renewal on a pooled connection, bounded by `deadline`. Returns the status and, for `ok`,
/// the time left and the server expiry. A connection that gave no answer in time is discarded.
async fn renew_once(
    pool: &Pool,
    shared: &Shared,
    deadline: Instant,
) -> Result<(Status, Option<(Duration, std::time::SystemTime)>)> {
    let conn = checkout(pool, deadline).await?;
    let answer = timeout_at(
        deadline,
        calls::renew_timed(
            &conn,
            shared.statements,
            &shared.key,
            &shared.owner,
            shared.epoch,
            shared.ttl,
        ),
    )
    .await;
    match answer {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the renewal in time"))
        }
        Ok(Err(e)) => {
            if e.is_connection() {
                discard(conn);
            }
            Err(e)
        }
        Ok(Ok((renewal, left))) => Ok((renewal.status, left.zip(renewal.expires_at))),
    }
}

/// One release on a pooled connection, bounded by [`RELEASE_TIMEOUT`] (or the ttl, if shorter
/// but at least a second: past it the lease lapses by itself).
pub(crate) async fn release_once(pool: &Pool, shared: &Shared) -> Result<Status> {
    let bound = shared.ttl.clamp(Duration::from_secs(1), RELEASE_TIMEOUT);
    let deadline = Instant::now() + bound;
    let conn = checkout(pool, deadline).await?;
    match timeout_at(
        deadline,
        calls::release_pooled(
            &conn,
            shared.statements,
            &shared.key,
            &shared.owner,
            shared.epoch,
        ),
    )
    .await
    {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the release in time"))
        }
        Ok(result) => {
            if result.as_ref().is_err_and(Error::is_connection) {
                discard(conn);
            }
            result
        }
    }
}

/// A pooled connection, or an error if none could be had by `deadline`.
pub(crate) async fn checkout(pool: &Pool, deadline: Instant) -> Result<Object> {
    match timeout_at(deadline, pool.get()).await {
        Ok(result) => result.map_err(Error::pool),
        Err(_) => Err(Error::connection("no connection in time")),
    }
}

/// Takes a connection out of the pool and closes it (it may be hung or broken).
pub(crate) fn discard(conn: Object) {
    drop(Object::take(conn));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_a_thousandth_of_the_ttl_plus_the_constant() {
        let t = Timing::new(
            Duration::from_secs(10),
            1.0 / 3.0,
            Duration::from_millis(20),
        )
        .unwrap();
        assert_eq!(t.margin, Duration::from_millis(30));
        let now = Instant::now();
        assert_eq!(
            t.valid_until(now, Duration::from_secs(10)),
            now + Duration::from_millis(9970)
        );
        // A grant with less left than the ttl (an idempotent re-acquire) counts only what is left.
        assert_eq!(
            t.valid_until(now, Duration::from_secs(1)),
            now + Duration::from_millis(970)
        );
        assert_eq!(t.valid_until(now, Duration::ZERO), now);
    }

    #[test]
    fn ttl_must_exceed_twice_the_margin() {
        let e = Timing::new(Duration::from_millis(40), 0.3, Duration::from_millis(20)).unwrap_err();
        assert!(e.is_invalid_input() && e.code().is_none());
        assert!(Timing::new(Duration::from_millis(100), 0.3, Duration::from_millis(20)).is_ok());
    }

    #[test]
    fn renewals_come_before_half_the_validity_span() {
        let t = Timing::new(Duration::from_secs(3), 0.9, Duration::from_millis(20)).unwrap();
        let now = Instant::now();
        let valid_until = t.valid_until(now, Duration::from_secs(3));
        assert!(t.next_renewal(now, valid_until) <= now + (valid_until - now) / 2);
        let t = Timing::new(Duration::from_secs(3), 0.2, Duration::from_millis(20)).unwrap();
        assert_eq!(
            t.next_renewal(now, valid_until),
            now + Duration::from_millis(600)
        );
    }

    #[test]
    fn backoff_grows_and_stays_capped_with_jitter() {
        let base = Duration::from_millis(10);
        let cap = Duration::from_millis(300);
        for failures in 1..40 {
            let d = backoff(base, cap, failures);
            let full = base.saturating_mul(1 << (failures - 1).min(16)).min(cap);
            assert!(d >= full / 2 && d <= full, "{failures}: {d:?} vs {full:?}");
        }
    }
}
