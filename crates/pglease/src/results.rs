//! The values pg_lease's calls return: [`Grant`] (acquire), [`Status`] and [`Renewal`] (renew,
//! release), [`Transfer`] (transfer) and [`Handover`] (a lease handed over), [`LeaseState`] and
//! [`ListedLease`] (inspect, list), [`HistoryEntry`] and [`EndedBy`] (history), [`BrowsedLease`],
//! [`KeyState`] and [`LeaseCounts`] (browse, summary) and [`Waiter`] (register_waiter).
//!
//! Each mirrors one result shape of the SQL API; the decoders that check a row's shape and build
//! these values are in `rows.rs`.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::lost::LostReason;

pub use crate::browse_results::{BrowsedLease, KeyState, LeaseCounts};
pub use crate::history_results::{EndedBy, HistoryEntry};

/// A lease granted by [`acquire`](crate::acquire): the fencing epoch and the expiry, both decided
/// by the server.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
/// let ttl = Duration::from_secs(30);
/// if let Some(grant) = pglease::acquire(db, "job-42", "worker-a1", ttl, Duration::ZERO).await? {
///     println!("epoch {} until {:?}", grant.epoch, grant.expires_at);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Grant {
    /// The fencing epoch of this grant; greater than every earlier epoch of the key.
    pub epoch: i64,
    /// Server time at which the lease lapses unless renewed.
    pub expires_at: SystemTime,
}

impl Grant {
    /// A grant at `epoch` until `expires_at`, as a call of one's own returned it (for
    /// [`Client::adopt`](crate::Client::adopt) of a lease granted outside the client).
    pub fn new(epoch: i64, expires_at: SystemTime) -> Grant {
        Grant { epoch, expires_at }
    }
}

/// The outcome of [`renew`](crate::renew) and [`release`](crate::release), mapping one-to-one to
/// the SQL API's status strings.
///
/// The refusals are reported in this precedence: [`Status::NotOwner`], then [`Status::Lapsed`],
/// then [`Status::EpochMismatch`]. A refused call changed nothing.
///
/// # Examples
///
/// ```
/// use pglease::Status;
/// let status: Status = "not_owner".parse().unwrap();
/// assert!(!status.is_ok());
/// assert_eq!(status, Status::NotOwner);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `ok`: the owner held the key at that epoch; the call took effect.
    Ok,
    /// `not_owner`: the key is unknown, free, or held (or last held, if lapsed) by another owner.
    NotOwner,
    /// `lapsed`: the owner's lease expired; it must re-acquire (and gets a new epoch).
    Lapsed,
    /// `epoch_mismatch`: the owner holds the key, but at another epoch than the one presented.
    EpochMismatch,
}

impl Status {
    /// The SQL API's string for this status: `ok`, `not_owner`, `lapsed` or `epoch_mismatch`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::Status::EpochMismatch.as_str(), "epoch_mismatch");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotOwner => "not_owner",
            Status::Lapsed => "lapsed",
            Status::EpochMismatch => "epoch_mismatch",
        }
    }

    /// Whether the call took effect (`ok`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(pglease::Status::Ok.is_ok());
    /// assert!(!pglease::Status::Lapsed.is_ok());
    /// ```
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }

    /// Why a lease ended, for a refused renew or release (`None` for [`Status::Ok`]).
    pub(crate) fn lost_reason(self) -> Option<LostReason> {
        match self {
            Status::Ok => None,
            Status::NotOwner => Some(LostReason::NotOwner),
            Status::Lapsed => Some(LostReason::Lapsed),
            Status::EpochMismatch => Some(LostReason::EpochMismatch),
        }
    }
}

impl FromStr for Status {
    type Err = Error;

    /// Parses one of the SQL API's status strings, exactly (case-sensitive, no whitespace).
    ///
    /// # Errors
    ///
    /// Any other string is a protocol error ([`Error::is_protocol`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use pglease::Status;
    /// assert_eq!("lapsed".parse::<Status>().unwrap(), Status::Lapsed);
    /// assert!("LAPSED".parse::<Status>().unwrap_err().is_protocol());
    /// ```
    fn from_str(s: &str) -> Result<Status> {
        match s {
            "ok" => Ok(Status::Ok),
            "not_owner" => Ok(Status::NotOwner),
            "lapsed" => Ok(Status::Lapsed),
            "epoch_mismatch" => Ok(Status::EpochMismatch),
            other => Err(Error::protocol(format!("unknown lease status {other:?}"))),
        }
    }
}

impl fmt::Display for Status {
    /// Writes [`Status::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`renew`](crate::renew): the status and, when it is [`Status::Ok`], the new
/// expiry.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client, epoch: i64) -> pglease::Result<()> {
/// let ttl = std::time::Duration::from_secs(30);
/// let renewal = pglease::renew(db, "job-42", "worker-a1", epoch, ttl).await?;
/// match renewal.expires_at {
///     Some(at) => println!("renewed until {at:?}"),
///     None => println!("refused: {}", renewal.status),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Renewal {
    /// Whether the renewal took effect, and if not, why.
    pub status: Status,
    /// The new expiry (server time + ttl): `Some` exactly when `status` is [`Status::Ok`].
    pub expires_at: Option<SystemTime>,
}

/// A key's state as the server judges it now, from [`inspect`](crate::inspect) and
/// [`list`](crate::list).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// if let Some(state) = pglease::inspect(db, "job-42").await? {
///     println!("held={} owner={:?} epoch={}", state.held, state.owner, state.epoch);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LeaseState {
    /// Whether an owner holds the key now (granted and not lapsed).
    pub held: bool,
    /// The holder: `Some` exactly when `held`.
    pub owner: Option<String>,
    /// Held: the holder's epoch. Not held: the key's fencing counter, so every epoch `<=` it is
    /// stale and the next grant is greater.
    pub epoch: i64,
    /// The holder's expiry: `Some` exactly when `held`.
    pub expires_at: Option<SystemTime>,
    /// The holder's data (at most [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes of
    /// text), as set by its acquire or its last renewal with data: `None` when not held or when
    /// the holder set none. Never part of the lease's logic.
    pub data: Option<String>,
}

/// One row of [`list`](crate::list): a key and its state (its data in
/// [`LeaseState::data`]).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// for listed in pglease::list(db, None).await? {
///     println!("{}: {:?}", listed.key, listed.state);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ListedLease {
    /// The key.
    pub key: String,
    /// Its state, with the same meaning as [`inspect`](crate::inspect)'s.
    pub state: LeaseState,
}

/// The answer of [`watch`](crate::watch): the key's state as [`inspect`](crate::inspect) reports
/// it, and when the holder's lease lapses.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// db.batch_execute("LISTEN pg_lease_changed").await?;
/// let watched = pglease::watch(db, "scheduler").await?;
/// println!("held={} data={:?} lapses in {:?}", watched.state.held, watched.state.data, watched.lapses_in);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Watched {
    /// The key's state now (a key never leased reports a free state at the epoch floor).
    pub state: LeaseState,
    /// How long until the holder's lease lapses, on the server clock when the call ran (rounded
    /// up to whole microseconds): `Some` exactly when held. A lapse sends no notification: wake
    /// up then.
    pub lapses_in: Option<Duration>,
}

/// The answer of [`register_waiter`](crate::register_waiter): the holder the waiter waits for, and
/// when its lease lapses.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// let waiter = pglease::register_waiter(db, "job-42").await?;
/// if waiter.held {
///     println!("held by {:?} for {:?}", waiter.owner, waiter.lapses_in);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Waiter {
    /// Whether an owner holds the key now. `false`: the key is free, lapsed or unknown, so acquire
    /// it now (the other fields are `None`).
    pub held: bool,
    /// The holder: `Some` exactly when `held`.
    pub owner: Option<String>,
    /// The holder's epoch: `Some` exactly when `held`.
    pub epoch: Option<i64>,
    /// The holder's expiry (server time): `Some` exactly when `held`.
    pub expires_at: Option<SystemTime>,
    /// How long until the holder's lease lapses, measured on the server clock when the call ran
    /// (rounded up to whole microseconds): `Some` exactly when `held`.
    pub lapses_in: Option<Duration>,
}

/// A slot of a semaphore granted by [`acquire_slot`](crate::acquire_slot): which slot, its lease
/// key, and the grant on that key.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
/// let ttl = Duration::from_secs(30);
/// if let Some(s) = pglease::acquire_slot(db, "runners", "worker-a1", ttl, 3, None).await? {
///     println!("slot {} ({}) at epoch {}", s.slot, s.key, s.grant.epoch);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SlotGrant {
    /// The slot number, in `1..=max_holders`.
    pub slot: u32,
    /// The slot's lease key, `name#slot` ([`slot_key`](crate::slot_key)): renew, release and fence
    /// it like any key.
    pub key: String,
    /// The grant on that key (its epoch fences exactly this grant).
    pub grant: Grant,
}

/// One slot of a semaphore, from [`list_slots`](crate::list_slots): its number, key and state.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// for s in pglease::list_slots(db, "runners").await? {
///     println!("slot {}: held={} by {:?} data {:?}", s.slot, s.state.held, s.state.owner, s.state.data);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SlotState {
    /// The slot number.
    pub slot: u32,
    /// The slot's lease key, `name#slot`.
    pub key: String,
    /// Its state, with the same meaning as [`inspect`](crate::inspect)'s.
    pub state: LeaseState,
}

/// The answer of [`register_slot_waiter`](crate::register_slot_waiter): how many slots of the
/// semaphore are held, and when the first of them lapses.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// db.batch_execute("LISTEN pg_lease_released").await?;
/// let w = pglease::register_slot_waiter(db, "runners").await?;
/// println!("{} holders; the first lapses in {:?}", w.holders, w.lapses_in);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SlotWaiter {
    /// How many slots are held now.
    pub holders: u32,
    /// How long until the first held slot lapses, on the server clock when the call ran: `None`
    /// when no slot is held.
    pub lapses_in: Option<Duration>,
}

/// One pair's answer from [`renew_many`](crate::renew_many): the key and its renewal, judged as
/// [`renew`](crate::renew) would, or `None` when the key was **busy** (its row locked by another
/// transaction, e.g. a [`fence`](crate::fence()) in progress): not judged and not renewed; renew it
/// on its own.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// let ttl = std::time::Duration::from_secs(30);
/// for r in pglease::renew_many(db, "worker-a1", &[("job-1", 7), ("job-2", 9)], ttl).await? {
///     match r.renewal {
///         Some(renewal) => println!("{}: {}", r.key, renewal.status),
///         None => println!("{}: busy, renew it on its own", r.key),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KeyRenewal {
    /// The key of the pair.
    pub key: String,
    /// Its renewal, or `None` if it was busy.
    pub renewal: Option<Renewal>,
}

/// The outcome of [`transfer`](crate::transfer): the status and, when it is [`Status::Ok`], the
/// successor's grant.
///
/// The refusals are [`Status::NotOwner`], [`Status::Lapsed`] and [`Status::EpochMismatch`], in
/// renew's precedence; a refused transfer changed nothing.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client, epoch: i64) -> pglease::Result<()> {
/// let ttl = std::time::Duration::from_secs(30);
/// let t = pglease::transfer(db, "scheduler", "node-1", epoch, "node-2", ttl).await?;
/// match t.grant {
///     Some(grant) => println!("node-2 holds it at epoch {}", grant.epoch),
///     None => println!("refused: {}", t.status),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Transfer {
    /// Whether the transfer took effect, and if not, why.
    pub status: Status,
    /// The successor's grant (the next epoch, expiring at server time + ttl): `Some` exactly when
    /// `status` is [`Status::Ok`].
    pub grant: Option<Grant>,
}

/// A lease this process handed to another owner ([`Lease::transfer_to`](crate::Lease::transfer_to),
/// [`Election::handover`](crate::Election::handover)): who had it, who has it now, and the
/// successor's grant.
///
/// From the moment the transfer committed, `to_owner` holds `key` at `epoch` (greater than
/// `from_epoch`) until `expires_at` (server time) unless it renews, and `from_epoch` is fenced:
/// renew, release and fence with it are refused.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lease: pglease::Lease) -> pglease::Result<()> {
/// let handover = lease.transfer_to("node-2", std::time::Duration::from_secs(10)).await?;
/// assert!(handover.epoch > handover.from_epoch);
/// println!("{} now holds {} at epoch {}", handover.to_owner, handover.key, handover.epoch);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Handover {
    /// The key handed over.
    pub key: String,
    /// The owner that held it (this process's).
    pub from_owner: String,
    /// The epoch it held it at: fenced from the transfer on.
    pub from_epoch: i64,
    /// The successor.
    pub to_owner: String,
    /// The successor's epoch: the key's next epoch, greater than `from_epoch`.
    pub epoch: i64,
    /// The successor's expiry (server time + the ttl given): it lapses then unless the successor
    /// acquires it (its acquire returns this grant) and renews it.
    pub expires_at: SystemTime,
}

/// The installing role's settings as they apply now ([`configure`](crate::configure),
/// [`configuration`](crate::configuration); docs/SEMANTICS.md §8.4–8.5).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// let c = pglease::configuration(db).await?;
/// if let Some(until) = c.quarantine_until {
///     println!("timeline {}: no new grants until {until:?}", c.timeline);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Configuration {
    /// The longest ttl any call may give; `None`: the API's limit of 365 days.
    pub max_ttl: Option<Duration>,
    /// How long after a promotion no new grant is made (from the first acquire on the new
    /// timeline); `None`: no quarantine.
    pub failover_quarantine: Option<Duration>,
    /// The server's WAL timeline (1 on a server never promoted).
    pub timeline: i64,
    /// The end of the failover quarantine on this timeline (server time; in the past once over):
    /// `None` when none is configured or none began on this timeline.
    pub quarantine_until: Option<SystemTime>,
    /// The least epoch a grant gets now: the timeline band or the min epoch, whichever is higher.
    pub min_epoch: i64,
    /// Whether grants are recorded in the history ([`history`](crate::history)); on by default,
    /// turned off and on with [`configure_history`](crate::configure_history).
    pub history: bool,
    /// How long [`purge`](crate::purge) keeps the history of a grant after it ended (30 days by
    /// default).
    pub history_retention: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Status; 4] = [
        Status::Ok,
        Status::NotOwner,
        Status::Lapsed,
        Status::EpochMismatch,
    ];

    #[test]
    fn status_strings_round_trip() {
        for s in ALL {
            assert_eq!(s.as_str().parse::<Status>().unwrap(), s);
            assert_eq!(s.to_string(), s.as_str());
        }
        let strings: Vec<&str> = ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(strings, ["ok", "not_owner", "lapsed", "epoch_mismatch"]);
    }

    #[test]
    fn status_strings_appear_in_the_sql() {
        for s in ALL {
            let quoted = format!("'{}'", s.as_str());
            assert!(
                crate::PG_LEASE.install_script().script.contains(&quoted),
                "{quoted}"
            );
        }
    }

    #[test]
    fn ended_by_strings_round_trip_and_appear_in_the_sql() {
        let sql = crate::PG_LEASE.install_script().script;
        for end in EndedBy::KNOWN {
            assert_eq!(EndedBy::parse(end.as_str()), end);
            assert_eq!(end.to_string(), end.as_str());
            assert!(sql.contains(&format!("'{}'", end.as_str())), "{end}");
        }
        assert_eq!(
            EndedBy::parse("RELEASED"),
            EndedBy::Other("RELEASED".into())
        );
    }

    /// Every quoted word on a line of the SQL that sets or names an `ended_by` is one this client
    /// knows: a new end reason in the SQL fails here until `EndedBy` has it.
    #[test]
    fn every_ended_by_the_sql_writes_is_known() {
        let sql = crate::PG_LEASE.install_script().script;
        let mut found = Vec::new();
        for line in sql.lines().filter(|l| {
            let code = l.split("--").next().unwrap_or("");
            code.contains("ended_by") && !l.trim_start().starts_with("--")
        }) {
            let code = line.split("--").next().unwrap_or("");
            let mut parts = code.split('\'');
            parts.next();
            while let (Some(word), Some(_)) = (parts.next(), parts.next()) {
                if !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    found.push(word.to_owned());
                }
            }
        }
        for word in &found {
            assert!(
                !matches!(EndedBy::parse(word), EndedBy::Other(_)),
                "the SQL writes ended_by {word:?}, unknown to EndedBy"
            );
        }
        for end in ["released", "lapsed", "forced", "transferred", "unrecorded"] {
            assert!(found.iter().any(|w| w == end), "{end} not found: {found:?}");
        }
    }

    #[test]
    fn unknown_status_is_a_protocol_error() {
        for bad in ["", "OK", " ok", "ok ", "held", "not-owner", "\u{0}"] {
            let e = bad.parse::<Status>().unwrap_err();
            assert!(e.is_protocol(), "{bad:?}");
            assert_eq!(e.code(), None);
        }
    }
}
