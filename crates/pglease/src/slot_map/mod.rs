//! The [`SlotMap`]: which database is the one authority of each key when keys are sharded over
//! several independent primaries (docs/CLIENT.md, "Sharding").
//!
//! A key belongs to one of a fixed number of **map slots** (not to be confused with a semaphore's
//! slots): FNV-1a 64 of its routing key's UTF-8 bytes, modulo the slot count. Every map slot is
//! assigned to exactly one shard by name, and may be **paused** while it is moved. The map is a
//! value: it never changes, and every constructor checks that each slot is assigned exactly once,
//! so a `SlotMap` that exists is a valid one. [`SlotMapError`] says what is wrong with one that
//! could not be made.
//!
//! The hash, the routing key and the text form are a contract: every client of a fleet must put
//! every key in the same slot, whatever its version. `tests.rs` pins them with vectors.
//!
//! The map's errors are in `error.rs`, its text form (`Display`, `FromStr`) in `text.rs`.

use std::ops::RangeInclusive;
use std::sync::Arc;

mod error;
#[cfg(test)]
mod tests;
mod text;

pub use error::SlotMapError;

/// The slot count of [`SlotMap::single`], [`SlotMap::even`] with it, and of a text form without
/// a count: 16 384.
///
/// # Examples
///
/// ```
/// let map = pglease::SlotMap::single("a").unwrap();
/// assert_eq!(map.slots(), pglease::DEFAULT_SLOTS);
/// ```
pub const DEFAULT_SLOTS: u32 = 16_384;

/// The largest slot count a map may have: 2^20 (1 048 576).
///
/// # Examples
///
/// ```
/// assert!(pglease::SlotMap::even(pglease::MAX_SLOTS + 1, &["a"]).is_err());
/// ```
pub const MAX_SLOTS: u32 = 1 << 20;

/// The longest shard name, in bytes. A shard name is 1 to 64 ASCII letters, digits, `-`, `_` or
/// `.`, so the text form of a map needs no quoting.
///
/// # Examples
///
/// ```
/// assert!(pglease::SlotMap::single(&"s".repeat(pglease::MAX_SHARD_NAME_BYTES)).is_ok());
/// assert!(pglease::SlotMap::single(&"s".repeat(pglease::MAX_SHARD_NAME_BYTES + 1)).is_err());
/// ```
pub const MAX_SHARD_NAME_BYTES: usize = 64;

/// FNV-1a 64 of `bytes`: the hash that puts a routing key in its slot (offset basis
/// `0xcbf29ce484222325`, prime `0x100000001b3`). Part of the sharding contract: it never changes.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(pglease::fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
/// ```
pub const fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The part of `key` that decides its slot: for a semaphore's slot key `name#N` (N a slot number,
/// `[1-9][0-9]{0,4}`, after the **last** `#`, and `name` not empty: exactly the keys
/// `lease.acquire_slot` counts as slots of `name`) it is `name`, so every slot of a semaphore
/// lives in the database of the semaphore; for every other key it is the key itself.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::routing_key("backups#3"), "backups");
/// assert_eq!(pglease::routing_key("a#b#10000"), "a#b");
/// assert_eq!(pglease::routing_key("job-42"), "job-42");
/// assert_eq!(pglease::routing_key("v#0"), "v#0");        // not a slot number
/// assert_eq!(pglease::routing_key("v#100000"), "v#100000");
/// assert_eq!(pglease::routing_key("#3"), "#3");          // no name
/// ```
pub fn routing_key(key: &str) -> &str {
    match key.rsplit_once('#') {
        Some((name, n)) if !name.is_empty() && is_slot_number(n) => name,
        _ => key,
    }
}

/// Whether `n` is a semaphore slot number as the SQL API spells it: `[1-9][0-9]{0,4}`.
fn is_slot_number(n: &str) -> bool {
    let b = n.as_bytes();
    (1..=5).contains(&b.len()) && b[0] != b'0' && b.iter().all(u8::is_ascii_digit)
}

/// Whether `name` is a valid shard name ([`MAX_SHARD_NAME_BYTES`]).
fn is_valid_shard_name(name: &str) -> bool {
    (1..=MAX_SHARD_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// One run of consecutive slots with the same shard and pause state (the map keeps runs merged).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    start: u32,
    end: u32,
    shard: Arc<str>,
    paused: bool,
}

/// A fixed map from keys to shards: [`SlotMap::slots`] map slots, each assigned to exactly one
/// shard by name, some perhaps paused. Immutable; the `with_*` methods return changed copies.
///
/// - **Key → slot**: [`fnv1a_64`] of [`routing_key`]`(key)` (UTF-8 bytes) modulo the slot count
///   ([`SlotMap::slot_of`]); a semaphore by its name ([`SlotMap::slot_of_semaphore`]), which is
///   the routing key of each of its slot keys.
/// - **Slot → shard**: by ranges of slots ([`SlotMap::route_slot`]).
/// - **Paused**: a slot being moved; [`crate::ShardedClient`] refuses new grants of its keys
///   ([`Error::is_slot_paused`](crate::Error::is_slot_paused)) and lets held leases be renewed and
///   released.
///
/// **Text form** (`FromStr` / `Display`, for configuration): an optional slot count and `:`, then
/// comma-separated entries `[!]first[-last]=shard`, where `!` marks the range paused; spaces around
/// tokens are ignored, and without a count the map has [`DEFAULT_SLOTS`]. `Display` writes the
/// count and the merged runs, so it reads back as an equal map.
///
/// # Examples
///
/// ```
/// use pglease::SlotMap;
///
/// let map: SlotMap = "0-8191=a, 8192-16383=b".parse().unwrap();
/// assert_eq!(map.slot_of("nightly-report"), 14251);
/// assert_eq!(map.shard_of("nightly-report"), "b");
///
/// let paused = map.with_paused(14251).unwrap();
/// assert!(paused.route("nightly-report").paused);
/// assert_eq!(
///     paused.to_string(),
///     "16384:0-8191=a,8192-14250=b,!14251=b,14252-16383=b"
/// );
/// assert_eq!(paused.to_string().parse::<SlotMap>().unwrap(), paused);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SlotMap {
    slots: u32,
    /// Sorted, covering 0..slots exactly once, adjacent runs differing in shard or pause.
    runs: Vec<Run>,
}

/// Where a key or slot goes: its slot, the shard that is its authority, and whether the slot is
/// paused. From [`SlotMap::route`] and [`SlotMap::route_slot`].
///
/// # Examples
///
/// ```
/// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
/// let route = map.route("job-42");
/// assert_eq!((route.slot, route.shard, route.paused), (5, "b", false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    /// The map slot.
    pub slot: u32,
    /// The shard the slot is assigned to.
    pub shard: &'a str,
    /// Whether the slot is paused.
    pub paused: bool,
}

/// A run of consecutive slots with one shard and one pause state, from [`SlotMap::ranges`].
///
/// # Examples
///
/// ```
/// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
/// let runs: Vec<_> = map.ranges().map(|r| (r.start, r.end, r.shard)).collect();
/// assert_eq!(runs, [(0, 3, "a"), (4, 7, "b")]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange<'a> {
    /// The first slot.
    pub start: u32,
    /// The last slot.
    pub end: u32,
    /// The shard.
    pub shard: &'a str,
    /// Whether these slots are paused.
    pub paused: bool,
}

impl SlotMap {
    /// A map of `slots` slots, each range of `ranges` assigned to its shard, none paused.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::SlotCount`], [`SlotMapError::EmptyRange`], [`SlotMapError::OutOfRange`],
    /// [`SlotMapError::Overlap`], [`SlotMapError::Gap`], [`SlotMapError::ShardName`]: every slot
    /// must be assigned exactly once, to a valid name.
    ///
    /// # Examples
    ///
    /// ```
    /// use pglease::{SlotMap, SlotMapError};
    ///
    /// let map = SlotMap::new(16, [(0..=9, "east"), (10..=15, "west")]).unwrap();
    /// assert_eq!(map.route_slot(12).unwrap().shard, "west");
    /// assert_eq!(
    ///     SlotMap::new(16, [(0..=9, "east"), (9..=15, "west")]),
    ///     Err(SlotMapError::Overlap { slot: 9 })
    /// );
    /// ```
    pub fn new<I, S>(slots: u32, ranges: I) -> Result<SlotMap, SlotMapError>
    where
        I: IntoIterator<Item = (RangeInclusive<u32>, S)>,
        S: AsRef<str>,
    {
        let entries = ranges
            .into_iter()
            .map(|(range, shard)| {
                (
                    *range.start(),
                    *range.end(),
                    shard.as_ref().to_owned(),
                    false,
                )
            })
            .collect();
        SlotMap::build(slots, entries)
    }

    /// Every one of [`DEFAULT_SLOTS`] slots on `shard`: one database, ready to be split by moves.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::ShardName`].
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::single("main").unwrap();
    /// assert_eq!(map.shards(), ["main"]);
    /// ```
    pub fn single(shard: &str) -> Result<SlotMap, SlotMapError> {
        SlotMap::new(DEFAULT_SLOTS, [(0..=DEFAULT_SLOTS - 1, shard)])
    }

    /// `slots` slots split into contiguous ranges of (almost) equal size, one per shard in the
    /// order given; the first `slots % shards.len()` ranges are one slot longer.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::SlotCount`]; [`SlotMapError::Gap`] if there are no shards or more shards
    /// than slots; [`SlotMapError::ShardName`].
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(10, &["a", "b", "c"]).unwrap();
    /// assert_eq!(map.to_string(), "10:0-3=a,4-6=b,7-9=c");
    /// ```
    pub fn even<S: AsRef<str>>(slots: u32, shards: &[S]) -> Result<SlotMap, SlotMapError> {
        check_slot_count(slots)?;
        let n = u32::try_from(shards.len()).unwrap_or(u32::MAX);
        if n == 0 || n > slots {
            return Err(SlotMapError::Gap {
                start: 0,
                end: slots - 1,
            });
        }
        let (size, extra) = (slots / n, slots % n);
        let mut start = 0;
        let mut entries = Vec::with_capacity(shards.len());
        for (i, shard) in (0..n).zip(shards) {
            let len = size + u32::from(i < extra);
            entries.push((start, start + len - 1, shard.as_ref().to_owned(), false));
            start += len;
        }
        SlotMap::build(slots, entries)
    }

    /// The number of slots.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::SlotMap::even(64, &["a"]).unwrap().slots(), 64);
    /// ```
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The slot of `key`: [`fnv1a_64`]`(`[`routing_key`]`(key))` modulo [`SlotMap::slots`].
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::single("a").unwrap();
    /// assert_eq!(map.slot_of("job-42"), 8101);
    /// assert_eq!(map.slot_of("backups#3"), map.slot_of_semaphore("backups"));
    /// ```
    pub fn slot_of(&self, key: &str) -> u32 {
        self.slot_of_routing_key(routing_key(key))
    }

    /// The slot of semaphore `name`, and of each of its slot keys `name#N`: the hash of `name`
    /// itself (a semaphore's name is not stripped of a `#N` suffix).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::single("a").unwrap();
    /// assert_eq!(map.slot_of_semaphore("backups"), 3108);
    /// ```
    pub fn slot_of_semaphore(&self, name: &str) -> u32 {
        self.slot_of_routing_key(name)
    }

    fn slot_of_routing_key(&self, routing_key: &str) -> u32 {
        // The remainder is below `slots`, a u32.
        u32::try_from(fnv1a_64(routing_key.as_bytes()) % u64::from(self.slots)).unwrap_or(0)
    }

    /// The route of `key`: its slot, the slot's shard, and whether it is paused.
    ///
    /// # Examples
    ///
    /// ```
    /// let map: pglease::SlotMap = "8:0-3=a,!4=b,5-7=b".parse().unwrap();
    /// let route = map.route("backups");
    /// assert_eq!((route.slot, route.shard, route.paused), (4, "b", true));
    /// ```
    pub fn route(&self, key: &str) -> Route<'_> {
        self.route_of(self.slot_of(key))
    }

    /// The route of semaphore `name` (and of its slot keys).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.route_semaphore("backups").shard, "b");
    /// ```
    pub fn route_semaphore(&self, name: &str) -> Route<'_> {
        self.route_of(self.slot_of_semaphore(name))
    }

    /// The route of `slot`; `None` beyond the last slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.route_slot(7).map(|r| r.shard), Some("b"));
    /// assert_eq!(map.route_slot(8), None);
    /// ```
    pub fn route_slot(&self, slot: u32) -> Option<Route<'_>> {
        (slot < self.slots).then(|| self.route_of(slot))
    }

    /// The route of a slot known to be in the map.
    fn route_of(&self, slot: u32) -> Route<'_> {
        let run = &self.runs[self.run_index(slot)];
        Route {
            slot,
            shard: &run.shard,
            paused: run.paused,
        }
    }

    /// The index of the run holding `slot` (< slots).
    fn run_index(&self, slot: u32) -> usize {
        // The runs cover 0..slots in order: the last run starting at or before `slot`.
        self.runs.partition_point(|r| r.start <= slot) - 1
    }

    /// The shard of `key` ([`SlotMap::route`]`(key).shard`).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.shard_of("scheduler"), "a");
    /// ```
    pub fn shard_of(&self, key: &str) -> &str {
        self.route(key).shard
    }

    /// Whether `slot` is paused (`false` beyond the last slot).
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a"]).unwrap().with_paused(3).unwrap();
    /// assert!(map.is_paused(3) && !map.is_paused(2));
    /// ```
    pub fn is_paused(&self, slot: u32) -> bool {
        self.route_slot(slot).is_some_and(|r| r.paused)
    }

    /// The shards the map assigns slots to, sorted, each once.
    ///
    /// # Examples
    ///
    /// ```
    /// let map: pglease::SlotMap = "4:0=b,1=a,2-3=b".parse().unwrap();
    /// assert_eq!(map.shards(), ["a", "b"]);
    /// ```
    pub fn shards(&self) -> Vec<&str> {
        let mut shards: Vec<&str> = self.runs.iter().map(|r| &*r.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// The runs of consecutive slots with one shard and pause state, in slot order.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a"]).unwrap().with_paused(0).unwrap();
    /// let paused: Vec<u32> = map.ranges().filter(|r| r.paused).map(|r| r.start).collect();
    /// assert_eq!(paused, [0]);
    /// ```
    pub fn ranges(&self) -> impl Iterator<Item = SlotRange<'_>> {
        self.runs.iter().map(|r| SlotRange {
            start: r.start,
            end: r.end,
            shard: &r.shard,
            paused: r.paused,
        })
    }

    /// This map with `slot` paused (a no-op if it is).
    ///
    /// # Errors
    ///
    /// [`SlotMapError::OutOfRange`] for a slot beyond the last.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.with_paused(4).unwrap().to_string(), "8:0-3=a,!4=b,5-7=b");
    /// ```
    pub fn with_paused(&self, slot: u32) -> Result<SlotMap, SlotMapError> {
        self.with_slot(slot, |run| run.paused = true)
    }

    /// This map with `slot` no longer paused (a no-op if it is not).
    ///
    /// # Errors
    ///
    /// [`SlotMapError::OutOfRange`] for a slot beyond the last.
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.with_paused(4).unwrap().with_resumed(4).unwrap(), map);
    /// ```
    pub fn with_resumed(&self, slot: u32) -> Result<SlotMap, SlotMapError> {
        self.with_slot(slot, |run| run.paused = false)
    }

    /// This map with `slot` assigned to `shard` (its pause state unchanged). To move a slot that
    /// has leases, follow the procedure of [`crate::SlotMove`] instead of deploying this alone.
    ///
    /// # Errors
    ///
    /// [`SlotMapError::OutOfRange`]; [`SlotMapError::ShardName`].
    ///
    /// # Examples
    ///
    /// ```
    /// let map = pglease::SlotMap::even(8, &["a", "b"]).unwrap();
    /// assert_eq!(map.with_assigned(3, "b").unwrap().to_string(), "8:0-2=a,3-7=b");
    /// ```
    pub fn with_assigned(&self, slot: u32, shard: &str) -> Result<SlotMap, SlotMapError> {
        check_shard_name(shard)?;
        let shard: Arc<str> = Arc::from(shard);
        self.with_slot(slot, move |run| run.shard = shard)
    }

    /// A copy with `change` applied to the run of the one slot `slot`.
    fn with_slot(&self, slot: u32, change: impl FnOnce(&mut Run)) -> Result<SlotMap, SlotMapError> {
        if slot >= self.slots {
            return Err(SlotMapError::OutOfRange {
                start: slot,
                end: slot,
                slots: self.slots,
            });
        }
        let i = self.run_index(slot);
        let run = &self.runs[i];
        let mut one = Run {
            start: slot,
            end: slot,
            ..run.clone()
        };
        change(&mut one);
        let mut runs = Vec::with_capacity(self.runs.len() + 2);
        runs.extend_from_slice(&self.runs[..i]);
        if run.start < slot {
            runs.push(Run {
                end: slot - 1,
                ..run.clone()
            });
        }
        runs.push(one);
        if slot < run.end {
            runs.push(Run {
                start: slot + 1,
                ..run.clone()
            });
        }
        runs.extend_from_slice(&self.runs[i + 1..]);
        Ok(SlotMap {
            slots: self.slots,
            runs: merged(runs),
        })
    }

    /// Checks and builds a map from `(first, last, shard, paused)` entries in any order.
    fn build(
        slots: u32,
        mut entries: Vec<(u32, u32, String, bool)>,
    ) -> Result<SlotMap, SlotMapError> {
        check_slot_count(slots)?;
        for (start, end, shard, _) in &entries {
            if start > end {
                return Err(SlotMapError::EmptyRange {
                    start: *start,
                    end: *end,
                });
            }
            if *end >= slots {
                return Err(SlotMapError::OutOfRange {
                    start: *start,
                    end: *end,
                    slots,
                });
            }
            check_shard_name(shard)?;
        }
        entries.sort_by_key(|e| e.0);
        let mut next = 0u32; // the first slot not yet covered
        let mut runs = Vec::with_capacity(entries.len());
        for (start, end, shard, paused) in entries {
            if start < next {
                return Err(SlotMapError::Overlap { slot: start });
            }
            if start > next {
                return Err(SlotMapError::Gap {
                    start: next,
                    end: start - 1,
                });
            }
            runs.push(Run {
                start,
                end,
                shard: Arc::from(shard),
                paused,
            });
            next = end + 1;
        }
        if next < slots {
            return Err(SlotMapError::Gap {
                start: next,
                end: slots - 1,
            });
        }
        Ok(SlotMap {
            slots,
            runs: merged(runs),
        })
    }
}

/// `runs` (sorted, contiguous) with neighbours of equal shard and pause state merged.
fn merged(runs: Vec<Run>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    for run in runs {
        match out.last_mut() {
            Some(last) if last.shard == run.shard && last.paused == run.paused => {
                last.end = run.end
            }
            _ => out.push(run),
        }
    }
    out
}

fn check_slot_count(slots: u32) -> Result<(), SlotMapError> {
    if (1..=MAX_SLOTS).contains(&slots) {
        Ok(())
    } else {
        Err(SlotMapError::SlotCount { slots })
    }
}

pub(crate) fn check_shard_name(name: &str) -> Result<(), SlotMapError> {
    if is_valid_shard_name(name) {
        Ok(())
    } else {
        Err(SlotMapError::ShardName {
            name: name.to_owned(),
        })
    }
}
