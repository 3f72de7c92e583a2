//! A grant confirmed by the server, handed to a new keepalive task: [`Granted`] and
//! [`Client::start_keepalive`], the last step of every acquire ([`Client::try_acquire_target`],
//! [`Client::acquire_target`]) and of [`Client::adopt`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::keepalive::{self, Keepalive};
use crate::lease::Lease;
use crate::reservations::Reservation;
use crate::shared::Shared;
use crate::timing::Timing;
use crate::trace;

/// A grant confirmed by the server, ready for its keepalive ([`Client::start_keepalive`]).
pub(crate) struct Granted<'a> {
    /// What the lease keeps reserved in the client until its keepalive ends: the key (and the
    /// semaphore, for a slot).
    pub(crate) reservations: Vec<Reservation>,
    pub(crate) key: &'a str,
    /// The slot number, for a semaphore's slot.
    pub(crate) slot: Option<u32>,
    pub(crate) grant: crate::results::Grant,
    pub(crate) timing: Timing,
    /// When the granting call was sent.
    pub(crate) sent: Instant,
    /// The time the server reported left on the grant after the call.
    pub(crate) left: Duration,
    /// The data the grant was made with.
    pub(crate) data: Option<String>,
}

impl Client {
    /// Hands a confirmed grant to a new keepalive task and returns its [`Lease`]: the validity
    /// deadline is `sent + min(ttl, left) - margin` (`sent`: when the granting call was sent,
    /// `left`: the time the server reported left on the grant).
    pub(crate) fn start_keepalive(&self, granted: Granted<'_>) -> Lease {
        let Granted {
            reservations,
            key,
            slot,
            grant,
            timing,
            sent,
            left,
            data,
        } = granted;
        let conns = &self.inner.conns;
        let valid_until = timing.valid_until(sent, left);
        let shared = Arc::new(
            Shared::new(
                key.to_owned(),
                self.inner.owner.clone(),
                grant.epoch,
                timing,
                valid_until,
                grant.expires_at,
                self.inner.root.child_token(),
            )
            .with_slot(slot)
            .with_data(data),
        );
        let (control, commands) = mpsc::unbounded_channel();
        let keepalive = Keepalive {
            shared: Arc::clone(&shared),
            conns: conns.clone(),
            renewer: self.inner.renewer.clone(),
            commands,
            shutdown: self.inner.root.clone(),
            reservations,
            sent,
            _live: keepalive::Live::new(Arc::clone(&self.inner.live)),
        };
        tracing::info!(
            target: trace::LEASE,
            key,
            owner = self.owner(),
            epoch = grant.epoch,
            ttl = ?timing.ttl,
            "lease granted"
        );
        // A root span (the lease outlives the acquire call), linked to the acquire that made it.
        let span = tracing::info_span!(
            target: trace::LEASE,
            parent: None,
            "keepalive",
            key,
            owner = self.owner(),
            epoch = grant.epoch,
        );
        span.follows_from(tracing::Span::current());
        self.inner.tracker.spawn(keepalive.run().instrument(span));
        Lease::new(shared, conns.clone(), self.clone(), control)
    }
}
