//! The reservations of one client: a client holds (or is acquiring) at most one lease per key
//! (and one slot per semaphore), so two tasks of one process never share a grant.
//! [`Reservations::claim`] reserves a name until its [`Reservation`] drops;
//! [`Reservations::claim_by`] waits for the name to be freed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::deadline::Deadline;

/// The keys this client holds or is acquiring: one lease per key per client.
#[derive(Default)]
pub(crate) struct Reservations {
    held: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    /// Notified whenever a reservation is freed.
    freed: Notify,
}

impl Reservations {
    /// Reserves `key`, or `None` if this client already holds or is acquiring it.
    pub(crate) fn claim(self: &Arc<Self>, key: &str) -> Option<Reservation> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(key) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        held.insert(key.to_owned(), id);
        Some(Reservation {
            reservations: Arc::clone(self),
            key: key.to_owned(),
            id,
        })
    }

    /// Reserves `key`, waiting while another lease (or acquire) of this client has it; `None` if
    /// `deadline` passes first.
    ///
    /// Cancel safe: nothing is reserved until it returns.
    pub(crate) async fn claim_by(
        self: &Arc<Self>,
        key: &str,
        deadline: Deadline,
    ) -> Option<Reservation> {
        loop {
            // Listen for frees before looking, so a free between the look and the wait is seen.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(reservation) = self.claim(key) {
                return Some(reservation);
            }
            tokio::select! {
                () = freed => {}
                () = deadline.reached() => return None,
            }
        }
    }
}

/// A reserved key (or semaphore); frees it on drop.
pub(crate) struct Reservation {
    reservations: Arc<Reservations>,
    key: String,
    id: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self
            .reservations
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if held.get(&self.key) == Some(&self.id) {
            held.remove(&self.key);
        }
        drop(held);
        self.reservations.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_reserved_once_per_client_until_its_guard_drops() {
        let reservations = Arc::new(Reservations::default());
        let guard = reservations.claim("k").expect("free");
        assert!(reservations.claim("k").is_none());
        assert!(reservations.claim("other").is_some());
        drop(guard);
        assert!(reservations.claim("k").is_some());
    }
}
