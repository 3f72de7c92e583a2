//! Why a slot map could not be made or changed.

use std::fmt;

use super::{MAX_SHARD_NAME_BYTES, MAX_SLOTS};

/// Why a [`SlotMap`](super::SlotMap) could not be made or changed, or why a
/// [`crate::ShardedClient`] or a [`crate::SlotMove`] refused one. Converts into [`crate::Error`]
/// (as [`Error::is_invalid_input`](crate::Error::is_invalid_input)) for `?`.
///
/// # Examples
///
/// ```
/// use pglease::{SlotMap, SlotMapError};
///
/// let gap = SlotMap::new(8, [(0..=3, "a"), (5..=7, "b")]).unwrap_err();
/// assert_eq!(gap, SlotMapError::Gap { start: 4, end: 4 });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotMapError {
    /// The slot count is 0 or above [`MAX_SLOTS`].
    SlotCount {
        /// The count asked for.
        slots: u32,
    },
    /// A range whose first slot is after its last.
    EmptyRange {
        /// Its first slot.
        start: u32,
        /// Its last slot.
        end: u32,
    },
    /// A range, or a slot, beyond the last slot of the map.
    OutOfRange {
        /// Its first slot.
        start: u32,
        /// Its last slot.
        end: u32,
        /// The map's slot count (the last slot is one less).
        slots: u32,
    },
    /// A slot assigned twice (the first such slot).
    Overlap {
        /// The slot.
        slot: u32,
    },
    /// Slots assigned to no shard (the first such run).
    Gap {
        /// The first unassigned slot.
        start: u32,
        /// The last unassigned slot of the run.
        end: u32,
    },
    /// A shard name that is empty, too long, or has a character other than ASCII letters, digits,
    /// `-`, `_` and `.` ([`MAX_SHARD_NAME_BYTES`]).
    ShardName {
        /// The name.
        name: String,
    },
    /// The text form could not be read.
    Syntax {
        /// The entry (or count) that could not be read.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A map names a shard that the [`crate::ShardedClient`] has no client for.
    NoClient {
        /// The shard.
        shard: String,
    },
    /// Two clients were given one shard name.
    DuplicateShard {
        /// The shard.
        shard: String,
    },
    /// A client already belongs to a [`crate::ShardedClient`] (a client is a shard of one sharded
    /// client, for good).
    AlreadySharded {
        /// The shard it was given as.
        shard: String,
    },
    /// [`crate::ShardedClient::set_map`] with another slot count: that would move most keys at
    /// once, without the move procedure.
    SlotCountChanged {
        /// The slot count in force.
        from: u32,
        /// The slot count of the new map.
        to: u32,
    },
    /// [`crate::ShardedClient::set_map`] would give a slot to another shard although it is not
    /// paused in the map in force: a slot changes shard only from a paused map (the procedure's
    /// step (a) comes first).
    UnpausedMove {
        /// The slot.
        slot: u32,
        /// Its shard in the map in force.
        from: String,
        /// Its shard in the new map.
        to: String,
    },
    /// A [`crate::SlotMove`] to the shard the slot is already on.
    SameShard {
        /// The slot.
        slot: u32,
        /// The shard.
        shard: String,
    },
}

impl fmt::Display for SlotMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotMapError::SlotCount { slots } => {
                write!(f, "a slot map has 1 to {MAX_SLOTS} slots, not {slots}")
            }
            SlotMapError::EmptyRange { start, end } => {
                write!(f, "slot range {start}-{end} is empty")
            }
            SlotMapError::OutOfRange { start, end, slots } => write!(
                f,
                "slot range {start}-{end} is beyond the last slot ({})",
                slots - 1
            ),
            SlotMapError::Overlap { slot } => write!(f, "slot {slot} is assigned twice"),
            SlotMapError::Gap { start, end } if start == end => {
                write!(f, "slot {start} is assigned to no shard")
            }
            SlotMapError::Gap { start, end } => {
                write!(f, "slots {start}-{end} are assigned to no shard")
            }
            SlotMapError::ShardName { name } => write!(
                f,
                "shard name {name:?} is not 1 to {MAX_SHARD_NAME_BYTES} ASCII letters, digits, '-', '_' or '.'"
            ),
            SlotMapError::Syntax { entry, reason } => {
                write!(f, "slot map entry {entry:?}: {reason}")
            }
            SlotMapError::NoClient { shard } => {
                write!(f, "the slot map names shard {shard:?}, which has no client")
            }
            SlotMapError::DuplicateShard { shard } => {
                write!(f, "two clients were given as shard {shard:?}")
            }
            SlotMapError::AlreadySharded { shard } => write!(
                f,
                "the client given as shard {shard:?} already belongs to a sharded client"
            ),
            SlotMapError::SlotCountChanged { from, to } => write!(
                f,
                "the slot count cannot change from {from} to {to} (it would move most keys at once)"
            ),
            SlotMapError::UnpausedMove { slot, from, to } => write!(
                f,
                "slot {slot} cannot move from shard {from:?} to {to:?}: it is not paused in the map in force"
            ),
            SlotMapError::SameShard { slot, shard } => {
                write!(f, "slot {slot} is already on shard {shard:?}")
            }
        }
    }
}

impl std::error::Error for SlotMapError {}
