//! The state one lease's handle ([`crate::Lease`]), guards ([`crate::LeaseGuard`]) and keepalive
//! task share: the grant (key, owner, epoch, timing), where the lease stands ([`Health`]), and the
//! token cancelled when it ends.
//!
//! A lease is *held* from its grant until its **validity deadline**, a local monotonic instant:
//! `sent + min(ttl, left) - margin`, where `sent` is taken before the acquire or renew that
//! confirmed it was sent, `left` is the time the server reported left on the lease after the call,
//! and `margin` is `ttl / 1000` plus [`crate::ClientBuilder::safety_margin`] (see `timing.rs`). The
//! keepalive moves the deadline forward with each confirmed renewal; if none is confirmed in time,
//! the lease ends with [`LostReason::Expired`] at the deadline, which is before the server's own
//! expiry and hence before anyone else can be granted the key (see `docs/CLIENT.md`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lost::LostReason;
use crate::timing::Timing;
use crate::trace;

/// Where a lease stands, as this process knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Held until `valid_until` (local, monotonic); the server last reported `expires_at`.
    Held {
        valid_until: Instant,
        expires_at: SystemTime,
    },
    /// Ended, for good.
    Ended(LostReason),
}

/// The state one lease's handle, guards and keepalive task share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) epoch: i64,
    /// The lease's ttl, safety margin and renewal schedule.
    pub(crate) timing: Timing,
    health: watch::Sender<Health>,
    /// Cancelled when the lease ends, for any reason.
    pub(crate) token: CancellationToken,
    /// Whether the lease is an election's leadership (its loss is also logged as such).
    leadership: AtomicBool,
    /// The slot number, for a semaphore's slot (the key is then the slot key `name#slot`).
    pub(crate) slot: Option<u32>,
    /// The data the server last confirmed for this grant (set by the acquire, replaced by a
    /// renewal with data).
    data: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn new(
        key: String,
        owner: String,
        epoch: i64,
        timing: Timing,
        valid_until: Instant,
        expires_at: SystemTime,
        token: CancellationToken,
    ) -> Shared {
        let (health, _) = watch::channel(Health::Held {
            valid_until,
            expires_at,
        });
        Shared {
            key,
            owner,
            epoch,
            timing,
            health,
            token,
            leadership: AtomicBool::new(false),
            slot: None,
            data: Mutex::new(None),
        }
    }

    /// The same state, for slot `slot` of a semaphore (`None`: a plain key).
    pub(crate) fn with_slot(mut self, slot: Option<u32>) -> Shared {
        self.slot = slot;
        self
    }

    /// The same state, with the data the grant was made with.
    pub(crate) fn with_data(self, data: Option<String>) -> Shared {
        *self.data.lock().unwrap_or_else(PoisonError::into_inner) = data;
        self
    }

    /// The data the server last confirmed for this grant.
    pub(crate) fn data(&self) -> Option<String> {
        self.data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records data the server confirmed (a renewal with data answered `ok`).
    pub(crate) fn set_data(&self, data: String) {
        *self.data.lock().unwrap_or_else(PoisonError::into_inner) = Some(data);
    }

    /// Marks the lease as an election's leadership ([`crate::Election::campaign`]).
    pub(crate) fn mark_leadership(&self) {
        self.leadership.store(true, Ordering::Relaxed);
    }

    /// Whether the lease is an election's leadership.
    pub(crate) fn is_leadership(&self) -> bool {
        self.leadership.load(Ordering::Relaxed)
    }

    pub(crate) fn health(&self) -> Health {
        *self.health.borrow()
    }

    /// Moves the validity deadline forward (never back) after a confirmed renewal.
    pub(crate) fn extend(&self, valid_until: Instant, expires_at: SystemTime) {
        self.health.send_if_modified(|h| match h {
            Health::Held {
                valid_until: v,
                expires_at: x,
            } if valid_until > *v => {
                *v = valid_until;
                *x = expires_at;
                true
            }
            _ => false,
        });
    }

    /// Ends the lease with `reason` unless it already ended; returns whether this call ended it.
    /// Cancels the lease's token either way.
    pub(crate) fn end(&self, reason: LostReason) -> bool {
        let ended = self.health.send_if_modified(|h| match h {
            Health::Held { .. } => {
                *h = Health::Ended(reason);
                true
            }
            Health::Ended(_) => false,
        });
        self.token.cancel();
        if ended && reason.is_loss() {
            // The one place every loss passes through (keepalive, manual renewal, a check that
            // finds the deadline passed), so each is logged exactly once.
            tracing::warn!(
                target: trace::LEASE,
                key = self.key.as_str(),
                owner = self.owner.as_str(),
                epoch = self.epoch,
                reason = reason.as_str(),
                "lease lost"
            );
            if self.is_leadership() {
                tracing::warn!(
                    target: trace::ELECTION,
                    key = self.key.as_str(),
                    owner = self.owner.as_str(),
                    epoch = self.epoch,
                    reason = reason.as_str(),
                    "leadership lost"
                );
            }
        }
        ended
    }

    /// `Ok` while the lease is held and its validity deadline has not passed; otherwise the
    /// reason it ended (a passed deadline ends it as [`LostReason::Expired`] here and now).
    pub(crate) fn check(&self) -> std::result::Result<(), LostReason> {
        match self.health() {
            Health::Held { valid_until, .. } if Instant::now() < valid_until => Ok(()),
            Health::Held { .. } => {
                self.end(LostReason::Expired);
                match self.health() {
                    Health::Ended(reason) => Err(reason),
                    Health::Held { .. } => Err(LostReason::Expired),
                }
            }
            Health::Ended(reason) => Err(reason),
        }
    }

    /// Completes with the reason when the lease ends (at once if it has).
    pub(crate) async fn lost(&self) -> LostReason {
        if let Err(reason) = self.check() {
            return reason;
        }
        let mut rx = self.health.subscribe();
        match rx.wait_for(|h| matches!(h, Health::Ended(_))).await {
            Ok(h) => match *h {
                Health::Ended(reason) => reason,
                Health::Held { .. } => unreachable!("wait_for returned a held state"),
            },
            // The sender lives in `self`, so it cannot be gone while we borrow it.
            Err(_) => LostReason::Released,
        }
    }

    /// The validity deadline while held.
    pub(crate) fn valid_until(&self) -> Option<std::time::Instant> {
        match self.health() {
            Health::Held { valid_until, .. } => Some(valid_until.into_std()),
            Health::Ended(_) => None,
        }
    }

    /// The server expiry last reported, while held.
    pub(crate) fn expires_at(&self) -> Option<SystemTime> {
        match self.health() {
            Health::Held { expires_at, .. } => Some(expires_at),
            Health::Ended(_) => None,
        }
    }

    pub(crate) fn fencing_token(&self) -> Fence {
        Fence::new(self.key.clone(), self.owner.clone(), self.epoch)
    }

    /// Runs `lease.fence` in `client`'s transaction, unless the lease has ended locally.
    pub(crate) async fn fence<C: GenericClient>(&self, client: &C) -> Result<SystemTime> {
        self.check().map_err(Error::lease_lost)?;
        crate::calls::fence(client, &self.key, &self.owner, self.epoch).await
    }
}

/// What a lease's handle asks of its keepalive task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Stop renewing, release the lease, and report the outcome.
    Release(oneshot::Sender<Result<()>>),
    /// Stop renewing, hand the lease to `to_owner` for `ttl` (`lease.transfer`), and report the
    /// outcome.
    Transfer {
        to_owner: String,
        ttl: std::time::Duration,
        reply: oneshot::Sender<Result<crate::results::Handover>>,
    },
}
