//! The keepalive task of one lease: renews at a fraction of the ttl, retries failed renewals with
//! backoff on fresh connections until the validity deadline, signals loss, and releases the lease
//! when its handle is released or dropped or the client shuts down. Its renewals are sent by the
//! client's renewer (`renewer.rs`), in one `lease.renew_many` call with the other leases' due
//! renewals; it decides alone what each answer means for its lease.
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
//! - Every wait is bounded by the deadline; the task ends on release, transfer, drop, loss or
//!   client shutdown, and nothing renews after it has ended: a renewal still queued is withdrawn,
//!   one in flight is waited for before the release (or the transfer) is sent.
//! - A renewal the batch reports `busy` (the key's row locked by another transaction) is sent
//!   again at once on its own (`lease.renew`), bounded by the deadline.
//!
//! It runs in the lease's `keepalive` span (made by the client) and logs on target
//! `pglease::lease`: each renewal (`debug`), each failed one with its error and SQLSTATE (`warn`),
//! the first success after failures (`info`), the release (`info`, or `warn` if it failed) and the
//! transfer (`info`, or `warn` if it failed).
//! The loss itself is logged where every loss passes, `Shared::end`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::lease_calls::{handover, release_once, renew_once, transfer_once};
use crate::lost::LostReason;
use crate::pooled::Connections;
use crate::renewer::{Outcome, Renewer, Ticket};
use crate::reservations::Reservation;
use crate::results::{Handover, Status};
use crate::shared::{Command, Health, Shared};
use crate::trace;

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
    pub(crate) conns: Connections,
    /// The client's renewer, which sends this lease's renewals with the others'.
    pub(crate) renewer: Renewer,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    /// The client's shutdown token.
    pub(crate) shutdown: CancellationToken,
    /// Keeps the key (and, for a slot, its semaphore) reserved in the client until the task has
    /// finished with it.
    pub(crate) reservations: Vec<Reservation>,
    /// When the grant (or its last confirmed renewal) was sent.
    pub(crate) sent: Instant,
    /// Keeps the task counted as live until it ends (dropped with the task).
    pub(crate) _live: Live,
}

/// How the renewal loop ended.
enum Exit {
    /// Release requested by the handle (with a reply) or by its drop (without).
    Release(Option<oneshot::Sender<Result<()>>>),
    /// Transfer to another owner requested by the handle ([`crate::Lease::transfer_to`]).
    Transfer {
        to_owner: String,
        ttl: std::time::Duration,
        reply: oneshot::Sender<Result<Handover>>,
    },
    /// The client shut down.
    Shutdown,
    /// The lease ended for `reason` (lost, or ended by a handle).
    Ended(LostReason),
}

/// What waiting for one renewal came to.
enum Waited {
    /// The renewal's answer (or why it has none).
    Answer(Result<Outcome>),
    /// The lease's token was cancelled or its deadline passed: look at its health again.
    LookAgain,
    /// The loop ends.
    Exit(Exit),
}

/// When the next renewal is due, and how many renewals in a row have failed.
struct Schedule {
    next: Instant,
    failures: u32,
}

impl Keepalive {
    /// Runs until the lease ends; see the module docs.
    pub(crate) async fn run(mut self) {
        let exit = self.renew_until_ended().await;
        self.finish(exit).await;
    }

    /// Renews the lease, each renewal due at a fraction of the ttl after the last confirmed one,
    /// until it is released, lost, or the client shuts down.
    async fn renew_until_ended(&mut self) -> Exit {
        let shared = Arc::clone(&self.shared);
        let valid_until = match shared.health() {
            Health::Held { valid_until, .. } => valid_until,
            Health::Ended(_) => self.sent,
        };
        let mut schedule = Schedule {
            next: shared.timing.next_renewal(self.sent, valid_until),
            failures: 0,
        };
        loop {
            let valid_until = match shared.health() {
                Health::Held { valid_until, .. } => valid_until,
                Health::Ended(reason) => return Exit::Ended(reason),
            };
            let answer = match self.renewal(schedule.next, valid_until).await {
                Waited::Answer(Ok(Outcome::Busy)) => match self.renew_alone(valid_until).await {
                    Waited::Answer(answer) => answer,
                    Waited::LookAgain => continue,
                    Waited::Exit(exit) => return exit,
                },
                Waited::Answer(answer) => answer,
                Waited::LookAgain => continue,
                Waited::Exit(exit) => return exit,
            };
            schedule.judge(&shared, answer, valid_until);
        }
    }

    /// Submits the renewal due at `next` to the client's renewer, which sends it together with
    /// the other leases' due renewals, and waits for its answer. While it is queued anything may
    /// interrupt; once it is in flight, a release or an end waits for its answer (`settle`), so
    /// no renewal of ours reaches the server after the release.
    async fn renewal(&mut self, next: Instant, valid_until: Instant) -> Waited {
        let shared = Arc::clone(&self.shared);
        let mut ticket = self.renewer.submit(Arc::clone(&shared), next);
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Waited::Exit(Exit::Shutdown),
            command = self.commands.recv() => {
                let exit = match command {
                    Some(Command::Release(reply)) => Exit::Release(Some(reply)),
                    Some(Command::Transfer { to_owner, ttl, reply }) => {
                        Exit::Transfer { to_owner, ttl, reply }
                    }
                    None => Exit::Release(None),
                };
                if !self.settle(&mut ticket, valid_until).await {
                    return Waited::Exit(Exit::Shutdown);
                }
                Waited::Exit(exit)
            }
            () = shared.token.cancelled() => {
                if !self.settle(&mut ticket, valid_until).await {
                    return Waited::Exit(Exit::Shutdown);
                }
                Waited::LookAgain
            }
            () = sleep_until(valid_until) => {
                shared.end(LostReason::Expired);
                if !self.settle(&mut ticket, valid_until).await {
                    return Waited::Exit(Exit::Shutdown);
                }
                Waited::LookAgain
            }
            answer = ticket.answer() => Waited::Answer(answer),
        }
    }

    /// Renews the lease on its own (`lease.renew`) after the batch reported it busy: its row is
    /// locked by another transaction (a guarded transaction, most likely), so the call waits for
    /// the lock, bounded by the deadline.
    async fn renew_alone(&self, valid_until: Instant) -> Waited {
        let shared = &self.shared;
        tracing::debug!(
            target: trace::LEASE,
            key = shared.key.as_str(),
            owner = shared.owner.as_str(),
            epoch = shared.epoch,
            "lease busy in a batched renewal: renewing it on its own"
        );
        let sent = Instant::now();
        let deadline = valid_until.min(sent + shared.timing.attempt_timeout());
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Waited::Exit(Exit::Shutdown),
            () = shared.token.cancelled() => Waited::LookAgain,
            answer = renew_once(&self.conns, shared, deadline) => Waited::Answer(
                answer.map(|(status, left)| Outcome::Judged { sent, status, left }),
            ),
        }
    }

    /// Ends the lease as the loop's exit says: releases it when asked to (answering the handle),
    /// or when the server may still hold it for us; then answers any late release requests.
    async fn finish(mut self, exit: Exit) {
        let shared = Arc::clone(&self.shared);
        match exit {
            Exit::Release(reply) => {
                let result = self.release_requested().await;
                // Free the key in the client before answering, so that the caller of `release`
                // can acquire it again at once.
                self.reservations.clear();
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            Exit::Transfer {
                to_owner,
                ttl,
                reply,
            } => {
                let result = self.transfer_requested(&to_owner, ttl).await;
                self.reservations.clear();
                let _ = reply.send(result);
            }
            Exit::Shutdown => {
                let held = shared.check().is_ok();
                shared.end(LostReason::Shutdown);
                if held {
                    let result = release_once(&self.conns, &shared).await;
                    log_release(&shared, &result, LostReason::Shutdown);
                }
            }
            Exit::Ended(reason) => {
                if matches!(reason, LostReason::Expired | LostReason::Released) {
                    // Released: the handle was dropped. Expired: the server may still hold the
                    // lease for us (unconfirmed renewals); freeing it lets a successor in sooner.
                    let result = release_once(&self.conns, &shared).await;
                    log_release(&shared, &result, reason);
                }
            }
        }
        // Answer late requests (the handle's `release` or `transfer_to` raced with the end).
        while let Ok(command) = self.commands.try_recv() {
            let reason = shared.check().err().unwrap_or(LostReason::Released);
            match command {
                Command::Release(reply) => {
                    let _ = reply.send(Err(Error::lease_lost(reason)));
                }
                Command::Transfer { reply, .. } => {
                    let _ = reply.send(Err(Error::lease_lost(reason)));
                }
            }
        }
        self.reservations.clear();
    }

    /// The release the handle asked for (or its drop did): what `Lease::release` answers.
    async fn release_requested(&self) -> Result<()> {
        let shared = &self.shared;
        match shared.check() {
            Err(reason) => {
                if reason == LostReason::Expired || reason == LostReason::Released {
                    // Dropped, or lost by expiry: the server may still hold it for us.
                    let result = release_once(&self.conns, shared).await;
                    log_release(shared, &result, reason);
                }
                Err(Error::lease_lost(reason))
            }
            Ok(()) => {
                let result = release_once(&self.conns, shared).await;
                if !matches!(result, Ok(ref status) if !status.is_ok()) {
                    // A refusal is logged as the loss it is, by `end` below.
                    log_release(shared, &result, LostReason::Released);
                }
                match result {
                    Ok(Status::Ok) => {
                        shared.end(LostReason::Released);
                        Ok(())
                    }
                    Ok(status) => {
                        let reason = status.lost_reason().unwrap_or(LostReason::Lapsed);
                        shared.end(reason);
                        Err(Error::lease_lost(reason))
                    }
                    Err(e) => {
                        shared.end(LostReason::Released);
                        Err(e)
                    }
                }
            }
        }
    }
}

impl Keepalive {
    /// The transfer the handle asked for ([`crate::Lease::transfer_to`]): hands the lease to
    /// `to_owner` unless it has ended. The lease ends in every case: `Transferred` on `ok`, the
    /// refusal's reason, or (after an error, when the transfer may not have happened) released as
    /// on drop, so that the key does not stay held by nobody's keepalive.
    async fn transfer_requested(
        &self,
        to_owner: &str,
        ttl: std::time::Duration,
    ) -> Result<Handover> {
        let shared = &self.shared;
        if let Err(reason) = shared.check() {
            if reason == LostReason::Expired || reason == LostReason::Released {
                let result = release_once(&self.conns, shared).await;
                log_release(shared, &result, reason);
            }
            return Err(Error::lease_lost(reason));
        }
        match transfer_once(&self.conns, shared, to_owner, ttl).await {
            Ok(transfer) => match (transfer.status.lost_reason(), transfer.grant) {
                (None, Some(grant)) => {
                    shared.end(LostReason::Transferred);
                    tracing::info!(
                        target: trace::LEASE,
                        key = shared.key.as_str(),
                        owner = shared.owner.as_str(),
                        epoch = shared.epoch,
                        to_owner,
                        to_epoch = grant.epoch,
                        "lease transferred"
                    );
                    Ok(handover(shared, to_owner, grant))
                }
                (reason, _) => {
                    // A refusal: the lease had already ended on the server (logged by `end`).
                    let reason = reason.unwrap_or(LostReason::Lapsed);
                    shared.end(reason);
                    Err(Error::lease_lost(reason))
                }
            },
            Err(e) => {
                tracing::warn!(
                    target: trace::LEASE,
                    key = shared.key.as_str(),
                    owner = shared.owner.as_str(),
                    epoch = shared.epoch,
                    to_owner,
                    error = %e,
                    sqlstate = trace::sqlstate(&e),
                    "lease transfer failed: releasing the lease instead"
                );
                shared.end(LostReason::Released);
                // Refused (and harmless) if the transfer did take effect.
                let result = release_once(&self.conns, shared).await;
                log_release(shared, &result, LostReason::Released);
                Err(e)
            }
        }
    }
}

impl Schedule {
    /// What a renewal's answer means for the lease: a confirmed renewal moves the validity
    /// deadline and schedules the next one; a refusal ends the lease; anything else is retried
    /// with backoff (the deadline is left where it is).
    fn judge(&mut self, shared: &Shared, answer: Result<Outcome>, valid_until: Instant) {
        let timing = shared.timing;
        match answer {
            Ok(Outcome::Judged {
                sent,
                status: Status::Ok,
                left: Some((left, expires_at)),
            }) => {
                let valid_until = timing.valid_until(sent, left);
                shared.extend(valid_until, expires_at);
                self.next = timing.next_renewal(sent, valid_until);
                let valid_for = trace::ms(valid_until.saturating_duration_since(Instant::now()));
                if self.failures > 0 {
                    tracing::info!(
                        target: trace::LEASE,
                        key = shared.key.as_str(),
                        owner = shared.owner.as_str(),
                        epoch = shared.epoch,
                        failures = self.failures,
                        valid_for = ?valid_for,
                        "lease renewed after failed renewals"
                    );
                } else {
                    tracing::debug!(
                        target: trace::LEASE,
                        key = shared.key.as_str(),
                        owner = shared.owner.as_str(),
                        epoch = shared.epoch,
                        valid_for = ?valid_for,
                        "lease renewed"
                    );
                }
                self.failures = 0;
            }
            Ok(Outcome::Judged { status, .. }) => {
                let reason = status.lost_reason().unwrap_or(LostReason::Lapsed);
                shared.end(reason);
            }
            Ok(Outcome::Busy) => {
                // Only a batched renewal can be busy, and its answer is renewed alone first;
                // should one reach here, it proves nothing: retry like an unanswered renewal.
                self.retry(
                    shared,
                    &Error::connection("the lease was busy"),
                    valid_until,
                );
            }
            Err(e) => self.retry(shared, &e, valid_until),
        }
    }

    /// Schedules the next attempt after a failed renewal, with backoff.
    fn retry(&mut self, shared: &Shared, e: &Error, valid_until: Instant) {
        self.failures = self.failures.saturating_add(1);
        let retry_in = shared.timing.backoff(self.failures);
        self.next = Instant::now() + retry_in;
        tracing::warn!(
            target: trace::LEASE,
            key = shared.key.as_str(),
            owner = shared.owner.as_str(),
            epoch = shared.epoch,
            error = %e,
            sqlstate = trace::sqlstate(e),
            cause = trace::cause(e),
            failures = self.failures,
            retry_in = ?trace::ms(retry_in),
            valid_for = ?trace::ms(valid_until.saturating_duration_since(Instant::now())),
            "lease renewal failed, retrying"
        );
    }
}

impl Keepalive {
    /// Withdraws `ticket`'s renewal if it is still queued; if it is in flight, waits for its
    /// answer (bounded by the deadline `valid_until` and the call's own attempt timeout), so that
    /// it cannot reach the server after what follows (a release). A confirmed renewal is still
    /// counted. Returns `false` if the client shut down meanwhile.
    async fn settle(&self, ticket: &mut Ticket, valid_until: Instant) -> bool {
        if ticket.withdraw() {
            return true;
        }
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => false,
            () = sleep_until(valid_until) => true,
            answer = ticket.answer() => {
                if let Ok(Outcome::Judged { sent, status: Status::Ok, left: Some((left, expires_at)) }) = answer {
                    self.shared.extend(self.shared.timing.valid_until(sent, left), expires_at);
                }
                true
            }
        }
    }
}

/// Logs the outcome of the release that ended a lease for `reason` (`released` when the handle
/// released or dropped it, `shutdown`, or `expired` for the clean-up after an expiry).
fn log_release(shared: &Shared, result: &Result<Status>, reason: LostReason) {
    match result {
        Ok(Status::Ok) => tracing::info!(
            target: trace::LEASE,
            key = shared.key.as_str(),
            owner = shared.owner.as_str(),
            epoch = shared.epoch,
            reason = reason.as_str(),
            "lease released"
        ),
        Ok(status) => tracing::debug!(
            target: trace::LEASE,
            key = shared.key.as_str(),
            owner = shared.owner.as_str(),
            epoch = shared.epoch,
            reason = reason.as_str(),
            status = status.as_str(),
            "release refused: the lease had already ended on the server"
        ),
        Err(e) => tracing::warn!(
            target: trace::LEASE,
            key = shared.key.as_str(),
            owner = shared.owner.as_str(),
            epoch = shared.epoch,
            reason = reason.as_str(),
            error = %e,
            sqlstate = trace::sqlstate(e),
            "lease release failed: the lease lapses by itself at its expiry"
        ),
    }
}
