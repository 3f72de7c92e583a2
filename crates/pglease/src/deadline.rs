//! [`Deadline`]: when a waiting call gives up, an instant or never. Every waiting part of the
//! client (acquires, reservations, the observer of an election) takes one.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

/// When a wait gives up: an instant, or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    /// No deadline: wait without bound.
    pub(crate) const NEVER: Deadline = Deadline(None);

    /// `timeout` from now; a timeout too large for an instant (e.g. `Duration::MAX`) is never.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline(Instant::now().checked_add(timeout))
    }

    /// The time left until the deadline (zero once passed); `None` for [`Deadline::NEVER`].
    pub(crate) fn remaining(self) -> Option<Duration> {
        self.0.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(self) -> bool {
        self.0.is_some_and(|d| Instant::now() >= d)
    }

    /// The earlier of `at` and the deadline.
    pub(crate) fn cap(self, at: Instant) -> Instant {
        self.0.map_or(at, |d| d.min(at))
    }

    /// Completes when the deadline passes (never, for [`Deadline::NEVER`]).
    pub(crate) async fn reached(self) {
        match self.0 {
            Some(deadline) => sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    }
}
