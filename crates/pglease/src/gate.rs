//! The sharding gate: where a [`crate::ShardedClient`]'s slot map is enforced, below the
//! [`crate::Client`] whose every acquire attempt it admits or refuses.
//!
//! Each shard's client is joined to the sharded client's [`Router`] (the map in force) through
//! its [`Gate`], and every acquire attempt of that client (a key, a semaphore's slot, an
//! election's campaign, through any handle) is admitted only if the map in force makes that
//! client the key's authority and the key's slot is not paused. A key is routed by
//! [`crate::routing_key`], a semaphore by its name. An admitted attempt holds a [`Permit`] until
//! its answer has come (or, for an unanswered attempt, until the clean-up that releases whatever
//! it may have granted has finished), so the sharded client can wait until no attempt admitted
//! under an earlier map is still going. Renewals and releases are never gated.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::slot_map::SlotMap;
use crate::target::Target;
use crate::trace;

/// The map in force, shared by a sharded client and the gates of its shards' clients, and the
/// acquire attempts admitted under each map still in flight.
pub(crate) struct Router {
    state: Mutex<RouterState>,
    /// Notified whenever an admitted attempt ends.
    pub(crate) ended: Notify,
}

pub(crate) struct RouterState {
    pub(crate) map: Arc<SlotMap>,
    /// Incremented by every [`ShardedClient::set_map`].
    pub(crate) generation: u64,
    /// Admitted attempts still in flight, by the generation they were admitted under.
    pub(crate) in_flight: BTreeMap<u64, usize>,
}

impl Router {
    pub(crate) fn new(map: SlotMap) -> Router {
        Router {
            state: Mutex::new(RouterState {
                map: Arc::new(map),
                generation: 0,
                in_flight: BTreeMap::new(),
            }),
            ended: Notify::new(),
        }
    }

    /// The state; a panic elsewhere while it was held leaves nothing half-done (every update is
    /// one assignment), so a poisoned lock is used as it is.
    pub(crate) fn state(&self) -> MutexGuard<'_, RouterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn map(&self) -> Arc<SlotMap> {
        Arc::clone(&self.state().map)
    }

    /// How many attempts admitted before generation `generation` are still in flight.
    pub(crate) fn in_flight_before(&self, generation: u64) -> usize {
        self.state()
            .in_flight
            .range(..generation)
            .map(|(_, n)| n)
            .sum()
    }
}

/// A client's membership of a sharded client: the router and the shard the client is.
pub(crate) struct Gate {
    router: Arc<Router>,
    shard: Arc<str>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("shard", &self.shard).finish()
    }
}

impl Gate {
    /// The gate of shard `shard` of the sharded client whose map is in `router`.
    pub(crate) fn new(router: Arc<Router>, shard: Arc<str>) -> Gate {
        Gate { router, shard }
    }

    /// Admits an acquire attempt of `what` on this shard, or refuses it: [`Error::is_wrong_shard`]
    /// if the map in force gives its slot to another shard, [`Error::is_slot_paused`] if the slot
    /// is paused. The permit must live until the attempt's outcome is settled on the server.
    pub(crate) fn admit(&self, target: &Target, owner: &str) -> Result<Permit> {
        let mut state = self.router.state();
        let (key, route) = match target {
            Target::Key(key) => (key.as_str(), state.map.route(key)),
            Target::Semaphore { name, .. } => (name.as_str(), state.map.route_semaphore(name)),
        };
        if route.shard != &*self.shard {
            tracing::debug!(
                target: trace::SHARD,
                key,
                owner,
                slot = route.slot,
                shard = &*self.shard,
                authority = route.shard,
                "grant refused: another shard is the key's authority"
            );
            return Err(Error::wrong_shard(format!(
                "key {key:?} is in slot {} of shard {:?}, not of shard {:?}",
                route.slot, route.shard, self.shard
            )));
        }
        if route.paused {
            tracing::debug!(
                target: trace::SHARD,
                key,
                owner,
                slot = route.slot,
                shard = &*self.shard,
                "grant refused: slot paused"
            );
            return Err(Error::slot_paused(format!(
                "key {key:?} is in slot {} of shard {:?}, which is paused",
                route.slot, self.shard
            )));
        }
        let generation = state.generation;
        *state.in_flight.entry(generation).or_insert(0) += 1;
        Ok(Permit {
            router: Arc::clone(&self.router),
            generation,
        })
    }
}

/// An admitted acquire attempt; dropping it ends the attempt for [`ShardedClient::settle`].
pub(crate) struct Permit {
    router: Arc<Router>,
    generation: u64,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("generation", &self.generation)
            .finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        {
            let mut state = self.router.state();
            if let Some(n) = state.in_flight.get_mut(&self.generation) {
                *n -= 1;
                if *n == 0 {
                    state.in_flight.remove(&self.generation);
                }
            }
        }
        self.router.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> SlotMap {
        text.parse().unwrap()
    }

    fn key(key: &str) -> Target {
        Target::Key(key.to_owned())
    }

    #[test]
    fn permits_are_counted_by_the_map_they_were_admitted_under() {
        let router = Arc::new(Router::new(map("8:0-3=a,4-7=b")));
        let gate = |shard: &str| Gate::new(Arc::clone(&router), Arc::from(shard));
        let (a, b) = (gate("a"), gate("b"));
        // "foobar" is in slot 0 (shard a), "job-42" in slot 5 (shard b).
        let first = a.admit(&key("foobar"), "o").unwrap();
        assert!(b.admit(&key("foobar"), "o").unwrap_err().is_wrong_shard());
        let second = b.admit(&key("job-42"), "o").unwrap();
        // "backups" (semaphore) is in slot 4 (shard b).
        let backups = Target::Semaphore {
            name: "backups".into(),
            max_holders: 2,
        };
        let third = b.admit(&backups, "o").unwrap();
        {
            let mut state = router.state();
            state.map = Arc::new(map("8:!0=a,1-3=a,4-7=b"));
            state.generation += 1;
        }
        assert!(a.admit(&key("foobar"), "o").unwrap_err().is_slot_paused());
        let fourth = b.admit(&key("job-42"), "o").unwrap();
        assert_eq!(router.in_flight_before(1), 3);
        drop((first, second));
        assert_eq!(router.in_flight_before(1), 1);
        drop(third);
        assert_eq!(router.in_flight_before(1), 0);
        assert_eq!(router.in_flight_before(2), 1);
        drop(fourth);
        assert!(router.state().in_flight.is_empty());
    }
}
