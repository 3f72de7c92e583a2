//! Moving a map slot from one shard to another without ever letting an epoch go back:
//! [`SlotMove`] (docs/CLIENT.md, "Sharding", has the procedure and what it assumes).
//!
//! Steps (a) and (d) of the procedure deploy maps, which only the operator can do for every
//! client of a fleet; [`SlotMove`] computes those maps ([`SlotMove::paused_map`],
//! [`SlotMove::moved_map`]) and does steps (b) and (c) itself ([`SlotMove::transfer`]).

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::GenericClient;

use crate::calls;
use crate::error::{Error, Result};
use crate::results::ListedLease;
use crate::slot_map::{SlotMap, SlotMapError, check_shard_name};
use crate::trace;

/// Default time between two looks at the source while its holders are waited for.
const DEFAULT_POLL: Duration = Duration::from_millis(250);
/// The bound on each statement of a transfer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The move of one map slot to another shard, keeping every epoch granted after the move for
/// every key of the slot above every epoch granted before it.
///
/// The procedure (docs/CLIENT.md, "Sharding"):
///
/// 1. **(a) Pause.** Deploy [`SlotMove::paused_map`] to *every* client of the fleet, and wait
///    until each has it in force with no acquire admitted under the earlier map still going
///    ([`crate::ShardedClient::set_map`], then [`crate::ShardedClient::settle`]). From then on,
///    no client grants a key of the slot anywhere; leases already held are renewed and released
///    as usual.
/// 2. **(b) Drain** and **(c) raise the floor**: [`SlotMove::transfer`]. It waits (bounded) until
///    the source holds no lease of the slot's keys (`lease.list`, filtered by slot), reads the
///    source's high-water epoch (`lease.high_water()`) and raises the target's minimum epoch
///    above it (`lease.raise_min_epoch(high_water + 1)`, as the role that installed pg_lease on
///    the target), then checks the source once more.
/// 3. **(d) Resume on the target.** Deploy [`SlotMove::moved_map`] (the slot on the target, not
///    paused) to every client.
///
/// Every epoch the source ever granted or reserved is at most its high water, and every later
/// grant on the target is above it; a key's own earlier grants on the target are below its new
/// ones anyway (epochs per key never go back). Since the high water includes the minimum epoch,
/// the bound carries over chained moves (a → b → a → c ...).
///
/// **What it assumes** (no client can check it for another): every client runs the paused map
/// before (b) — a client still on the old map can grant a key of the slot on the source after
/// the drain, at an epoch the target's floor may not exceed, and two databases then both believe
/// they are the key's authority. The transfer detects that only if the grant comes before its
/// last look at the source ([`Error::is_slot_busy`]). And the raised minimum must reach every
/// standby of the target that could be promoted before (d) is deployed.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(
/// #     shards: &pglease::ShardedClient,
/// #     source_admin: &tokio_postgres::Client,
/// #     target_admin: &tokio_postgres::Client,
/// # ) -> pglease::Result<()> {
/// use std::time::Duration;
/// use pglease::SlotMove;
///
/// let slot = shards.map().slot_of("job-42");
/// let mv = SlotMove::new(&shards.map(), slot, "west")?;
/// // (a) in every process of the fleet (here: this one).
/// shards.set_map(mv.paused_map().clone())?;
/// shards.settle(Duration::from_secs(30)).await?;
/// // (b) and (c).
/// let done = mv.transfer(source_admin, target_admin, Duration::from_secs(120)).await?;
/// println!("slot {} on {}: epochs from {}", done.slot, mv.target(), done.target_min_epoch);
/// // (d) in every process of the fleet.
/// shards.set_map(mv.moved_map().clone())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SlotMove {
    slot: u32,
    source: String,
    target: String,
    paused: SlotMap,
    moved: SlotMap,
    poll: Duration,
}

/// What [`SlotMove::transfer`] did: the source's high water it read, and the target's minimum
/// epoch after raising it (above the high water).
///
/// # Examples
///
/// ```no_run
/// # fn demo(done: pglease::Transferred) {
/// assert!(done.target_min_epoch > done.source_high_water);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transferred {
    /// The map slot moved.
    pub slot: u32,
    /// The source's `lease.high_water()` once it held no lease of the slot.
    pub source_high_water: i64,
    /// The target's minimum epoch after `lease.raise_min_epoch(source_high_water + 1)`: every
    /// later grant on the target has at least this epoch.
    pub target_min_epoch: i64,
}

impl SlotMove {
    /// The move of `slot` from its shard in `map` (the map in force, paused or not) to `target`.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::OutOfRange`] (no such slot); [`SlotMapError::ShardName`] (a bad target
    /// name); [`SlotMapError::SameShard`] (the slot is on `target` already).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// let mv = pglease::SlotMove::new(&map, 3, "b").unwrap();
    /// assert_eq!((mv.source(), mv.target()), ("a", "b"));
    /// assert_eq!(mv.paused_map().to_string(), "8:0-2=a,!3=a,4-7=b");
    /// assert_eq!(mv.moved_map().to_string(), "8:0-2=a,3-7=b");
    /// ```
    pub fn new(
        map: &SlotMap,
        slot: u32,
        target: &str,
    ) -> std::result::Result<SlotMove, SlotMapError> {
        let source = map
            .route_slot(slot)
            .ok_or(SlotMapError::OutOfRange {
                start: slot,
                end: slot,
                slots: map.slots(),
            })?
            .shard
            .to_owned();
        check_shard_name(target)?;
        if source == target {
            return Err(SlotMapError::SameShard {
                slot,
                shard: source,
            });
        }
        let paused = map.with_paused(slot)?;
        let moved = paused.with_assigned(slot, target)?.with_resumed(slot)?;
        Ok(SlotMove {
            slot,
            source,
            target: target.to_owned(),
            paused,
            moved,
            poll: DEFAULT_POLL,
        })
    }

    /// Sets the time between two looks at the source while [`SlotMove::transfer`] waits for its
    /// holders (each look is one `lease.list` of the whole source). Default 250 ms; at least 1 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// let mv = pglease::SlotMove::new(&map, 2, "b").unwrap().poll_interval(Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> SlotMove {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The map slot being moved.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(pglease::SlotMove::new(&map, 2, "b").unwrap().slot(), 2);
    /// ```
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The shard the slot moves from.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(pglease::SlotMove::new(&map, 6, "c").unwrap().source(), "b");
    /// ```
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The shard the slot moves to.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(pglease::SlotMove::new(&map, 6, "c").unwrap().target(), "c");
    /// ```
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The map of step (a): the map the move was made from, with the slot paused.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert!(pglease::SlotMove::new(&map, 6, "a").unwrap().paused_map().is_paused(6));
    /// ```
    pub fn paused_map(&self) -> &SlotMap {
        &self.paused
    }

    /// The map of step (d): the slot assigned to the target and no longer paused (every other
    /// slot as in the map the move was made from).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// let moved = pglease::SlotMove::new(&map, 6, "a").unwrap().moved_map().clone();
    /// assert_eq!(moved.route_slot(6).map(|r| (r.shard, r.paused)), Some(("a", false)));
    /// ```
    pub fn moved_map(&self) -> &SlotMap {
        &self.moved
    }

    /// The leases of the slot's keys held now in the database `db` (`lease.list` of every key,
    /// kept if held and in the slot), ordered by key. Advisory, like `lease.list`.
    ///
    /// # Errors
    ///
    /// As [`crate::list`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mv: &pglease::SlotMove, source: &tokio_postgres::Client) -> pglease::Result<()> {
    /// for h in mv.holders(source).await? {
    ///     println!("{} held by {:?} at epoch {}", h.key, h.state.owner, h.state.epoch);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn holders<C: GenericClient>(&self, db: &C) -> Result<Vec<ListedLease>> {
        let mut rows = self.rows(db).await?;
        rows.retain(|r| r.state.held);
        Ok(rows)
    }

    /// Steps (b) and (c): waits up to `wait` until `source` holds no lease of the slot's keys,
    /// then raises `target`'s minimum epoch above `source`'s high water, and looks at `source`
    /// once more. Run it after step (a) has been deployed everywhere; deploy
    /// [`SlotMove::moved_map`] once it returns `Ok`.
    ///
    /// `source` and `target` are connections (or transactions) to the two databases; `target`'s
    /// role must be allowed to call `lease.raise_min_epoch` (by default only the role that
    /// installed pg_lease). The wait for the source's holders is bounded by `wait`, and each
    /// statement by 30 s.
    ///
    /// # Errors
    ///
    /// - [`Error::is_slot_busy`], with [`Error::holders`]: the target holds leases of the slot
    ///   (a client runs a map that gives it the slot already; nothing changed); the source still
    ///   held leases of the slot when `wait` ran out (nothing changed); or the source granted
    ///   keys of the slot during the transfer (a client still runs a map without the pause; the
    ///   target's minimum is raised, which is harmless). Do not deploy the moved map.
    /// - [`Error::is_wait_timeout`] (client-side): a statement went unanswered for 30 s.
    /// - SQLSTATE `42501` (the target's role may not raise its minimum), `42883` (pg_lease
    ///   before 0.7.0), `22023` (the high water + 1 is above 2^62), any other server error,
    ///   [`Error::is_connection`] or [`Error::is_protocol`]. The transfer can be run again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, it leaves at most the target's minimum raised;
    /// run it again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mv: &pglease::SlotMove, s: &tokio_postgres::Client, t: &tokio_postgres::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// match mv.transfer(s, t, Duration::from_secs(60)).await {
    ///     Ok(done) => println!("deploy {}", mv.moved_map()),
    ///     Err(e) if e.is_slot_busy() => eprintln!("{e}; in the way: {:?}", e.holders()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transfer<S, T>(
        &self,
        source: &S,
        target: &T,
        wait: Duration,
    ) -> Result<Transferred>
    where
        S: GenericClient,
        T: GenericClient,
    {
        let (slot, from, to) = (self.slot, self.source.as_str(), self.target.as_str());
        let deadline = Instant::now().checked_add(wait);

        let on_target = bounded("lease.list on the target", self.holders(target)).await?;
        if !on_target.is_empty() {
            tracing::warn!(
                target: trace::SHARD,
                slot,
                source = from,
                target = to,
                holders = on_target.len(),
                "slot transfer refused: the target holds leases of the slot"
            );
            return Err(Error::slot_busy(
                format!(
                    "shard {to:?} holds {} leases of slot {slot} before the move (a client runs a \
                     map that gives it the slot already): {}",
                    on_target.len(),
                    describe(&on_target)
                ),
                on_target,
            ));
        }

        // (b) The source holds no lease of the slot.
        let mut announced = false;
        loop {
            let held = bounded("lease.list on the source", self.holders(source)).await?;
            if held.is_empty() {
                break;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                tracing::warn!(
                    target: trace::SHARD,
                    slot,
                    source = from,
                    target = to,
                    holders = held.len(),
                    "slot transfer refused: the source's holders outlasted the wait"
                );
                return Err(Error::slot_busy(
                    format!(
                        "shard {from:?} still holds {} leases of slot {slot} after {wait:?}: {}",
                        held.len(),
                        describe(&held)
                    ),
                    held,
                ));
            }
            if !announced {
                announced = true;
                tracing::info!(
                    target: trace::SHARD,
                    slot,
                    source = from,
                    target = to,
                    holders = held.len(),
                    "slot transfer: waiting for the source's holders"
                );
            }
            tokio::time::sleep(left.map_or(self.poll, |left| left.min(self.poll))).await;
        }

        // (c) Every later grant on the target is above every epoch of the source.
        let high_water =
            bounded("lease.high_water on the source", calls::high_water(source)).await?;
        let at_least = high_water
            .checked_add(1)
            .ok_or_else(|| Error::protocol(format!("lease.high_water returned {high_water}")))?;
        let min_epoch = bounded(
            "lease.raise_min_epoch on the target",
            calls::raise_min_epoch(target, at_least),
        )
        .await?;
        if min_epoch < at_least {
            return Err(Error::protocol(format!(
                "lease.raise_min_epoch({at_least}) returned {min_epoch}"
            )));
        }

        // Nothing of the slot was granted on the source since it was drained.
        let mut late = bounded("lease.list on the source", self.rows(source)).await?;
        late.retain(|r| r.state.held || r.state.epoch > high_water);
        if !late.is_empty() {
            tracing::warn!(
                target: trace::SHARD,
                slot,
                source = from,
                target = to,
                holders = late.len(),
                "slot transfer refused: the source granted keys of the slot during the transfer"
            );
            return Err(Error::slot_busy(
                format!(
                    "shard {from:?} granted {} keys of slot {slot} during the transfer (a client \
                     still runs a map without the pause): {}",
                    late.len(),
                    describe(&late)
                ),
                late,
            ));
        }
        tracing::info!(
            target: trace::SHARD,
            slot,
            source = from,
            target = to,
            high_water,
            min_epoch,
            "slot transferred"
        );
        Ok(Transferred {
            slot,
            source_high_water: high_water,
            target_min_epoch: min_epoch,
        })
    }

    /// Every row of the slot's keys in `db`, held or not, ordered by key.
    async fn rows<C: GenericClient>(&self, db: &C) -> Result<Vec<ListedLease>> {
        let mut rows = calls::list(db, None).await?;
        rows.retain(|r| self.paused.slot_of(&r.key) == self.slot);
        Ok(rows)
    }
}

/// `call`, failing with a client-side timeout after [`CALL_TIMEOUT`].
async fn bounded<F, T>(call: &str, f: F) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(Error::timeout(format!(
                "{call}: no answer in {CALL_TIMEOUT:?}"
            )))
        })
}

/// The first few leases, for an error message.
fn describe(leases: &[ListedLease]) -> String {
    const SHOWN: usize = 5;
    let mut out: Vec<String> = leases
        .iter()
        .take(SHOWN)
        .map(|l| match (&l.state.owner, l.state.held) {
            (Some(owner), true) => {
                format!("{:?} held by {owner:?} at epoch {}", l.key, l.state.epoch)
            }
            _ => format!("{:?} at epoch {}", l.key, l.state.epoch),
        })
        .collect();
    if leases.len() > SHOWN {
        out.push(format!("and {} more", leases.len() - SHOWN));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_pauses_then_reassigns_one_slot() {
        let map: SlotMap = "8:0-3=a,!5=b,4=b,6-7=b".parse().unwrap();
        let mv = SlotMove::new(&map, 6, "a").unwrap();
        assert_eq!((mv.slot(), mv.source(), mv.target()), (6, "b", "a"));
        assert_eq!(mv.paused_map().to_string(), "8:0-3=a,4=b,!5-6=b,7=b");
        // Slot 5 stays paused (another move); slot 6 is on a, running.
        assert_eq!(mv.moved_map().to_string(), "8:0-3=a,4=b,!5=b,6=a,7=b");
        assert_eq!(
            SlotMove::new(&map, 6, "b").unwrap_err(),
            SlotMapError::SameShard {
                slot: 6,
                shard: "b".into()
            }
        );
        assert_eq!(
            SlotMove::new(&map, 8, "a").unwrap_err(),
            SlotMapError::OutOfRange {
                start: 8,
                end: 8,
                slots: 8
            }
        );
        assert!(matches!(
            SlotMove::new(&map, 1, "x y"),
            Err(SlotMapError::ShardName { .. })
        ));
        // A paused slot can be the one moved (step (a) already deployed).
        let again = SlotMove::new(mv.paused_map(), 6, "a").unwrap();
        assert_eq!(again.moved_map(), mv.moved_map());
    }

    #[test]
    fn refusals_name_the_first_leases_in_the_way() {
        let lease = |key: &str, held: bool| ListedLease {
            key: key.to_owned(),
            state: crate::LeaseState {
                held,
                owner: held.then(|| "w".to_owned()),
                epoch: 7,
                expires_at: None,
                data: None,
            },
        };
        assert_eq!(
            describe(&[lease("k", true), lease("j", false)]),
            "\"k\" held by \"w\" at epoch 7, \"j\" at epoch 7"
        );
        let many: Vec<_> = (0..7).map(|i| lease(&format!("k{i}"), true)).collect();
        assert!(describe(&many).ends_with("and 2 more"));
    }
}
