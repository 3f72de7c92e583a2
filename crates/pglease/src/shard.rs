//! The [`ShardedClient`]: keys sharded over several independent primaries by a [`SlotMap`], one
//! [`Client`] per shard; each key's authority is exactly one database (docs/CLIENT.md,
//! "Sharding").
//!
//! The map is enforced where grants are made, not only where keys are routed: each shard's
//! client is joined to the sharded client's router through its gate (`gate.rs`, below the
//! client), which admits or refuses every acquire attempt of that client. [`ShardedClient`] is the
//! facade above: it routes calls to the shard's client, changes the map in force
//! ([`ShardedClient::set_map`]) and waits for attempts admitted under an earlier map
//! ([`ShardedClient::settle`]). Renewals and releases are never gated: leases already held on a
//! paused slot run their course.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::AcquireBuilder;
use crate::client::Client;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::gate::{Gate, Router};
use crate::lease::Lease;
use crate::limits;
use crate::results::LeaseState;
use crate::semaphore::Semaphore;
use crate::slot_map::{SlotMap, SlotMapError, check_shard_name};
use crate::trace;

/// Keys sharded over several independent pg_lease databases: one [`Client`] per shard, and a
/// [`SlotMap`] saying which shard is the authority of each key. Cheap to clone (clones share
/// everything).
///
/// Every grant a shard's client makes — through this type, through
/// [`ShardedClient::client_for`], or through any [`Semaphore`], [`Election`] or
/// [`AcquireBuilder`] made from it — is checked against the map in force when the acquire is
/// sent: a key of a paused slot is refused with [`Error::is_slot_paused`], a key another shard
/// owns with [`Error::is_wrong_shard`], both before anything is sent. Renewals and releases are
/// not checked. A client given to a sharded client stays governed by its map for as long as the
/// client lives; grants that do not go through a shard's [`Client`] (the plain calls such as
/// [`crate::acquire`] on your own connection, `lease_queue.claim`) are not checked.
///
/// Epochs stay per key, as in one database; a slot moved to another shard keeps its epochs above
/// every earlier grant if the move follows [`crate::SlotMove`]'s procedure.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pglease::Result<()> {
/// use std::time::Duration;
/// use pglease::{Client, ShardedClient, SlotMap};
///
/// let map: SlotMap = "0-8191=east,8192-16383=west".parse()?;
/// let shards = ShardedClient::new(
///     map,
///     [
///         ("east", Client::connect("host=db-east user=app dbname=app").await?),
///         ("west", Client::connect("host=db-west user=app dbname=app").await?),
///     ],
/// )?;
/// let lease = shards.acquire("job-42", Duration::from_secs(10), Duration::from_secs(30)).await?;
/// println!("job-42 is held on shard {} at epoch {}", shards.map().shard_of("job-42"), lease.epoch());
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ShardedClient {
    inner: Arc<Inner>,
}

struct Inner {
    clients: BTreeMap<String, Client>,
    router: Arc<Router>,
}

impl std::fmt::Debug for ShardedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedClient")
            .field("map", &self.map())
            .field("shards", &self.inner.clients.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ShardedClient {
    /// A sharded client routing by `map` over `clients`, each given with its shard name.
    ///
    /// Every shard the map names must have a client; clients of shards the map does not name
    /// yet are welcome (the targets of later moves). Each client joins this sharded client for
    /// good: from now on its grants are checked against this map (see [`ShardedClient`]).
    ///
    /// # Errors
    ///
    /// [`SlotMapError::NoClient`] (a shard of the map without a client),
    /// [`SlotMapError::DuplicateShard`], [`SlotMapError::ShardName`],
    /// [`SlotMapError::AlreadySharded`] (a client that already belongs to a sharded client).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(a: pglease::Client) -> pglease::Result<()> {
    /// use pglease::{ShardedClient, SlotMap, SlotMapError};
    ///
    /// let map = SlotMap::even(pglease::DEFAULT_SLOTS, &["a", "b"])?;
    /// let e = ShardedClient::new(map, [("a", a)]).unwrap_err();
    /// assert_eq!(e, SlotMapError::NoClient { shard: "b".into() });
    /// # Ok(())
    /// # }
    /// ```
    pub fn new<I, S>(map: SlotMap, clients: I) -> std::result::Result<ShardedClient, SlotMapError>
    where
        I: IntoIterator<Item = (S, Client)>,
        S: Into<String>,
    {
        let mut named = BTreeMap::new();
        for (shard, client) in clients {
            let shard = shard.into();
            check_shard_name(&shard)?;
            if client.gate().is_some() {
                return Err(SlotMapError::AlreadySharded { shard });
            }
            if named.contains_key(&shard) {
                return Err(SlotMapError::DuplicateShard { shard });
            }
            named.insert(shard, client);
        }
        check_clients(&map, &named)?;
        let router = Arc::new(Router::new(map));
        for (shard, client) in &named {
            let gate = Gate::new(Arc::clone(&router), Arc::from(shard.as_str()));
            if !client.join(gate) {
                // Joined by another sharded client since the check above.
                return Err(SlotMapError::AlreadySharded {
                    shard: shard.clone(),
                });
            }
        }
        let sharded = ShardedClient {
            inner: Arc::new(Inner {
                clients: named,
                router,
            }),
        };
        log_in_force(0, &sharded.map());
        Ok(sharded)
    }

    /// The map in force.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(shards: &pglease::ShardedClient) {
    /// println!("routing by {}", shards.map());
    /// # }
    /// ```
    pub fn map(&self) -> Arc<SlotMap> {
        self.inner.router.map()
    }

    /// The client of shard `name`, if this sharded client has one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(shards: &pglease::ShardedClient) {
    /// assert!(shards.shard("east").is_some());
    /// # }
    /// ```
    pub fn shard(&self, name: &str) -> Option<&Client> {
        self.inner.clients.get(name)
    }

    /// Every shard's name and client, ordered by name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(shards: &pglease::ShardedClient) {
    /// for (name, client) in shards.shards() {
    ///     println!("{name}: {}", client.owner());
    /// }
    /// # }
    /// ```
    pub fn shards(&self) -> impl Iterator<Item = (&str, &Client)> {
        self.inner.clients.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// The client of the one database that is the authority of `key` under the map in force
    /// (also while its slot is paused: renew, release, inspect and fence there).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] (client-side): `key` is not 1 to
    /// [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES) bytes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// let state = shards.client_for("job-42")?.inspect("job-42").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client_for(&self, key: &str) -> Result<&Client> {
        if !limits::is_valid_name(key) {
            return Err(Error::invalid_argument(format!(
                "key must be 1 to {} bytes",
                limits::MAX_NAME_BYTES
            )));
        }
        self.client_of(self.map().shard_of(key))
    }

    /// The client of shard `shard`, which every map in force names a client for.
    fn client_of(&self, shard: &str) -> Result<&Client> {
        self.inner.clients.get(shard).ok_or_else(|| {
            // Unreachable: every map is checked against the clients when it comes into force.
            Error::invalid_argument(format!("no client for shard {shard:?}"))
        })
    }

    /// [`Client::try_acquire`] on the key's shard.
    ///
    /// # Errors
    ///
    /// [`Error::is_slot_paused`] (nothing sent) while the key's slot is paused;
    /// [`Error::is_wrong_shard`] if the map changed between routing and sending; otherwise as
    /// [`Client::try_acquire`] and [`ShardedClient::client_for`].
    ///
    /// # Cancel safety
    ///
    /// As [`Client::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// match shards.try_acquire("job-42", Duration::from_secs(10)).await {
    ///     Ok(Some(lease)) => println!("mine at epoch {}", lease.epoch()),
    ///     Ok(None) => println!("busy"),
    ///     Err(e) if e.is_slot_paused() => println!("being moved: try again soon"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.client_for(key)?.try_acquire(key, ttl).await
    }

    /// [`Client::acquire`] on the key's shard: waits up to `timeout` while another owner holds
    /// the key.
    ///
    /// # Errors
    ///
    /// As [`ShardedClient::try_acquire`] and [`Client::acquire`]. A wait that began before the
    /// key's slot was paused ends with [`Error::is_slot_paused`] at its next attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`Client::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lease = shards.acquire("job-42", Duration::from_secs(10), Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str, ttl: Duration, timeout: Duration) -> Result<Lease> {
        self.client_for(key)?.acquire(key, ttl, timeout).await
    }

    /// [`Client::acquire_with`] on the key's shard (routed now, checked again when sent).
    ///
    /// # Errors
    ///
    /// As [`ShardedClient::client_for`]; its `acquire` and `try_acquire` as
    /// [`ShardedClient::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lease = shards
    ///     .acquire_with("scheduler", Duration::from_secs(10))?
    ///     .data("10.0.0.7:8080")
    ///     .acquire(Duration::from_secs(60))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_with(&self, key: &str, ttl: Duration) -> Result<AcquireBuilder> {
        Ok(self.client_for(key)?.acquire_with(key, ttl))
    }

    /// [`Client::semaphore`] on the shard of semaphore `name` (routed by the name, so all its
    /// slot keys `name#N` are in one database).
    ///
    /// The semaphore is bound to that shard's client: after the slot of `name` moved, its
    /// acquires fail with [`Error::is_wrong_shard`]; make it again.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] (client-side): `name` is not 1 to
    /// [`MAX_SEMAPHORE_BYTES`](crate::limits::MAX_SEMAPHORE_BYTES) bytes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let runners = shards.semaphore("backups", 3, Duration::from_secs(30))?;
    /// let slot = runners.acquire(Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, max_holders: u32, ttl: Duration) -> Result<Semaphore> {
        if !limits::is_valid_semaphore(name) {
            return Err(Error::invalid_argument(format!(
                "semaphore name must be 1 to {} bytes",
                limits::MAX_SEMAPHORE_BYTES
            )));
        }
        let shard = self.map().route_semaphore(name).shard.to_owned();
        Ok(self.client_of(&shard)?.semaphore(name, max_holders, ttl))
    }

    /// [`Client::election`] on the shard of key `name`.
    ///
    /// The election is bound to that shard's client: after the slot of `name` moved, its
    /// campaigns fail with [`Error::is_wrong_shard`]; make it again. Observing it
    /// ([`Election::observe`], [`Election::leader`]) reads that shard and is not checked against
    /// the map: an observer made before a move keeps reading the old shard (no leader there), so
    /// make observers again after a move too.
    ///
    /// # Errors
    ///
    /// As [`ShardedClient::client_for`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let leadership = shards.election("scheduler", Duration::from_secs(10))?.campaign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str, ttl: Duration) -> Result<Election> {
        Ok(self.client_for(name)?.election(name, ttl))
    }

    /// [`Client::inspect`] on the key's shard.
    ///
    /// # Errors
    ///
    /// As [`ShardedClient::client_for`] and [`Client::inspect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// if let Some(state) = shards.inspect("job-42").await? {
    ///     println!("epoch {}", state.epoch);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Option<LeaseState>> {
        self.client_for(key)?.inspect(key).await
    }

    /// Puts `map` in force at once: every acquire attempt from now on is routed and checked by
    /// it. Attempts admitted under the earlier map may still be going; [`ShardedClient::settle`]
    /// waits for them.
    ///
    /// A slot may change shard only if it is paused in the map in force (step (a) of the move
    /// procedure, [`crate::SlotMove`]); pausing and resuming are always allowed.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::NoClient`]; [`SlotMapError::SlotCountChanged`] (another slot count would
    /// move most keys at once); [`SlotMapError::UnpausedMove`]. The map in force is then
    /// unchanged.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let slot = shards.map().slot_of("job-42");
    /// shards.set_map(shards.map().with_paused(slot)?)?;
    /// shards.settle(Duration::from_secs(30)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_map(&self, map: SlotMap) -> std::result::Result<(), SlotMapError> {
        check_clients(&map, &self.inner.clients)?;
        let map = Arc::new(map);
        let generation = {
            let mut state = self.inner.router.state();
            check_change(&state.map, &map)?;
            state.map = Arc::clone(&map);
            state.generation += 1;
            state.generation
        };
        log_in_force(generation, &map);
        Ok(())
    }

    /// Waits until no acquire attempt admitted under an earlier map than the one in force is
    /// still going: each such attempt has had its answer, or (unanswered or dropped) its
    /// clean-up has released whatever it may have granted (bounded by 10 s). Then every grant
    /// this process made under an earlier map is visible on its shard, and none can follow.
    ///
    /// Waiting acquires (between attempts) do not hold it up: their next attempt is checked
    /// against the map in force.
    ///
    /// # Errors
    ///
    /// [`Error::is_wait_timeout`] (client-side) if attempts are still going after `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only waits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: &pglease::ShardedClient, paused: pglease::SlotMap) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// shards.set_map(paused)?;
    /// shards.settle(Duration::from_secs(30)).await?;   // now this process grants nothing of the slot
    /// # Ok(())
    /// # }
    /// ```
    pub async fn settle(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        let router = &self.inner.router;
        let generation = router.state().generation;
        loop {
            let ended = router.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let pending = router.in_flight_before(generation);
            if pending == 0 {
                tracing::debug!(
                    target: trace::SHARD,
                    generation,
                    "no acquire admitted under an earlier map is in flight"
                );
                return Ok(());
            }
            tracing::debug!(
                target: trace::SHARD,
                generation,
                pending,
                "waiting for acquires admitted under an earlier map"
            );
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut ended => {}
                        () = tokio::time::sleep_until(deadline) => {
                            let pending = router.in_flight_before(generation);
                            if pending == 0 {
                                return Ok(());
                            }
                            return Err(Error::timeout(format!(
                                "{pending} acquire attempts admitted under an earlier slot map \
                                 are still in flight"
                            )));
                        }
                    }
                }
                None => ended.await,
            }
        }
    }

    /// Shuts every shard's client down ([`Client::shutdown`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdowns go on in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(shards: pglease::ShardedClient) {
    /// shards.shutdown().await;
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let all = self.inner.clients.values().map(Client::shutdown);
        futures_util::future::join_all(all).await;
    }
}

/// The `slot map in force` event of map generation `generation`.
fn log_in_force(generation: u64, map: &SlotMap) {
    tracing::info!(
        target: trace::SHARD,
        generation,
        slots = map.slots(),
        shards = %map.shards().join(","),
        paused = map.ranges().filter(|r| r.paused).map(|r| r.end - r.start + 1).sum::<u32>(),
        "slot map in force"
    );
}

/// Every shard `map` names has a client in `clients`.
fn check_clients(
    map: &SlotMap,
    clients: &BTreeMap<String, Client>,
) -> std::result::Result<(), SlotMapError> {
    match map.shards().into_iter().find(|s| !clients.contains_key(*s)) {
        Some(shard) => Err(SlotMapError::NoClient {
            shard: shard.to_owned(),
        }),
        None => Ok(()),
    }
}

/// `next` may replace `current`: the same slot count, and every slot that changes shard is paused
/// in `current`.
fn check_change(current: &SlotMap, next: &SlotMap) -> std::result::Result<(), SlotMapError> {
    if current.slots() != next.slots() {
        return Err(SlotMapError::SlotCountChanged {
            from: current.slots(),
            to: next.slots(),
        });
    }
    // Walk both run lists together: each step covers slots where neither map changes run.
    let (mut a, mut b) = (current.ranges().peekable(), next.ranges().peekable());
    while let (Some(ra), Some(rb)) = (a.peek().copied(), b.peek().copied()) {
        let end = ra.end.min(rb.end);
        if ra.shard != rb.shard && !ra.paused {
            return Err(SlotMapError::UnpausedMove {
                slot: ra.start.max(rb.start),
                from: ra.shard.to_owned(),
                to: rb.shard.to_owned(),
            });
        }
        if ra.end == end {
            a.next();
        }
        if rb.end == end {
            b.next();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> SlotMap {
        text.parse().unwrap()
    }

    #[test]
    fn a_slot_changes_shard_only_from_a_paused_map() {
        let current = map("8:0-3=a,4-7=b");
        assert_eq!(check_change(&current, &current), Ok(()));
        assert_eq!(check_change(&current, &map("8:0-3=a,!4=b,5-7=b")), Ok(()));
        assert_eq!(
            check_change(&current, &map("8:0-4=a,5-7=b")),
            Err(SlotMapError::UnpausedMove {
                slot: 4,
                from: "b".into(),
                to: "a".into()
            })
        );
        assert_eq!(
            check_change(&current, &map("8:0-3=a,4-6=b,7=c")),
            Err(SlotMapError::UnpausedMove {
                slot: 7,
                from: "b".into(),
                to: "c".into()
            })
        );
        let paused = map("8:0-3=a,!4=b,5-7=b");
        assert_eq!(check_change(&paused, &map("8:0-4=a,5-7=b")), Ok(()));
        assert_eq!(check_change(&paused, &map("8:0-3=a,!4=a,5-7=b")), Ok(()));
        assert_eq!(
            check_change(&paused, &map("8:0-5=a,6-7=b")),
            Err(SlotMapError::UnpausedMove {
                slot: 5,
                from: "b".into(),
                to: "a".into()
            })
        );
        assert_eq!(
            check_change(&current, &map("4:0-3=a")),
            Err(SlotMapError::SlotCountChanged { from: 8, to: 4 })
        );
    }
}
