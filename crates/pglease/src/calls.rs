//! Typed calls of pg_lease's SQL API: one async function per SQL function, one statement each.
//!
//! Every function takes any [`GenericClient`], so it runs on a [`tokio_postgres::Client`]
//! (autocommit: the call commits on return) or inside a [`tokio_postgres::Transaction`] (its effect
//! commits or rolls back with the transaction). The server's clock is the only clock: a
//! [`SystemTime`] returned here is the server's `clock_timestamp()` plus the ttl, to be compared with
//! server time, not the local clock.
//!
//! Durations are sent as whole microseconds, rounded down (so a ttl under one microsecond is sent as
//! zero and rejected). A duration too large for PostgreSQL's `interval` is sent as
//! [`MAX_DURATION`], which the server rejects as invalid input (SQLSTATE `22023`) like any other
//! value above its 365-day limit.
//!
//! # Cancel safety
//!
//! None of these calls is cancel safe in the sense that matters: once the statement is sent,
//! dropping the future does not stop the server from executing it. An acquire may then hold a lease
//! nobody knows about (until its ttl lapses), exactly as after [`crate::Error::is_connection`].

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql, Type};

use crate::error::{Error, Result};

/// The largest duration sent to the server (100 × 365 days); longer durations are sent as this.
///
/// It is a valid `interval` above every limit of the SQL API, so the server answers SQLSTATE `22023`
/// with a DETAIL saying which argument is too long.
///
/// # Examples
///
/// ```
/// assert!(pglease::MAX_DURATION > std::time::Duration::from_secs(365 * 86_400));
/// ```
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// `d` in whole microseconds, rounded down, at most [`MAX_DURATION`].
pub(crate) fn micros(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    // MAX_DURATION is about 3.2e15 µs, far inside i64 (and exact in the server's float8 arithmetic).
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A lease granted by [`acquire`]: the fencing epoch and the expiry, both decided by the server.
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
pub struct Grant {
    /// The fencing epoch of this grant; greater than every earlier epoch of the key.
    pub epoch: i64,
    /// Server time at which the lease lapses unless renewed.
    pub expires_at: SystemTime,
}

/// The outcome of [`renew`] and [`release`], mapping one-to-one to the SQL API's status strings.
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

/// The outcome of [`renew`]: the status and, when it is [`Status::Ok`], the new expiry.
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
pub struct Renewal {
    /// Whether the renewal took effect, and if not, why.
    pub status: Status,
    /// The new expiry (server time + ttl): `Some` exactly when `status` is [`Status::Ok`].
    pub expires_at: Option<SystemTime>,
}

/// A key's state as the server judges it now, from [`inspect`] and [`list`].
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
}

/// One row of [`list`]: a key and its state.
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
pub struct ListedLease {
    /// The key.
    pub key: String,
    /// Its state, with the same meaning as [`inspect`]'s.
    pub state: LeaseState,
}

const ACQUIRE: &str = "SELECT acquired, epoch, expires_at FROM lease.acquire($1, $2, \
     $3::bigint * interval '1 microsecond', $4::bigint * interval '1 microsecond')";
const RENEW: &str = "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
const RELEASE: &str = "SELECT status FROM lease.release($1, $2, $3)";
const INSPECT: &str = "SELECT held, owner, epoch, expires_at FROM lease.inspect($1)";
const LIST: &str = "SELECT key, held, owner, epoch, expires_at FROM lease.list($1)";
const PURGE: &str = "SELECT lease.purge($1::bigint * interval '1 microsecond')";

/// Grants `key` to `owner` for `ttl` if it is free, lapsed or unknown; `None` if another owner holds
/// it (with `wait` zero).
///
/// A grant carries a new epoch, greater than every earlier epoch of the key. If `owner` already
/// holds the key, returns its current grant unchanged (same epoch, same expiry): a lost answer can be
/// retried safely. With `wait` above zero the server polls (every 50 ms, holding no row lock and
/// keeping the transaction open) until the key becomes grantable or `wait` has passed. Run waiting
/// acquires under READ COMMITTED (the default): under REPEATABLE READ the server reads one snapshot
/// and cannot see the key being freed.
///
/// `ttl` and `wait` are sent as whole microseconds, rounded down (see [`MAX_DURATION`]).
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty key or owner, a key or owner over 1024 bytes,
///   `ttl` not in (0, 365 days], `wait` over 365 days; [`Error::detail`] names every violation.
///   Nothing changed. (Text containing a NUL character is rejected by PostgreSQL itself, with
///   SQLSTATE `22021`.)
/// - [`Error::is_wait_timeout`] (`57014`): `wait` passed while another owner held the key.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let ttl = Duration::from_secs(30);
/// match pglease::acquire(client, "job-42", "worker-a1", ttl, Duration::ZERO).await? {
///     Some(grant) => println!("mine at epoch {}", grant.epoch),
///     None => println!("held by another owner"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn acquire<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    ttl: Duration,
    wait: Duration,
) -> Result<Option<Grant>> {
    let (ttl, wait) = (micros(ttl), micros(wait));
    let rows = client
        .query_typed(
            ACQUIRE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&ttl, Type::INT8),
                (&wait, Type::INT8),
            ],
        )
        .await?;
    let row = one_row(rows, "lease.acquire")?;
    let acquired: Option<bool> = get(&row, 0, "lease.acquire")?;
    let epoch: Option<i64> = get(&row, 1, "lease.acquire")?;
    let expires_at: Option<SystemTime> = get(&row, 2, "lease.acquire")?;
    match (acquired, epoch, expires_at) {
        (Some(true), Some(epoch), Some(expires_at)) => Ok(Some(Grant { epoch, expires_at })),
        (Some(false), None, None) => Ok(None),
        other => Err(Error::protocol(format!(
            "lease.acquire returned (acquired, epoch, expires_at) = {other:?}"
        ))),
    }
}

/// Extends `owner`'s lease on `key` at `epoch` to server time + `ttl` (which may shorten it); the
/// epoch never changes.
///
/// Takes effect only if `owner` holds `key` at `epoch` and the lease has not lapsed; otherwise
/// changes nothing and reports why (see [`Status`] for the precedence). A [`Status::Lapsed`] or
/// [`Status::EpochMismatch`] means the caller has lost the lease and must stop acting on it.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]), `ttl` not in
///   (0, 365 days]. Nothing changed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, grant: pglease::Grant) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let ttl = Duration::from_secs(30);
/// let renewal = pglease::renew(client, "job-42", "worker-a1", grant.epoch, ttl).await?;
/// if !renewal.status.is_ok() {
///     eprintln!("lost the lease: {}", renewal.status);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn renew<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: Duration,
) -> Result<Renewal> {
    let ttl = micros(ttl);
    let rows = client
        .query_typed(
            RENEW,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
                (&ttl, Type::INT8),
            ],
        )
        .await?;
    let row = one_row(rows, "lease.renew")?;
    let status = status(&row, "lease.renew")?;
    let expires_at: Option<SystemTime> = get(&row, 1, "lease.renew")?;
    if status.is_ok() != expires_at.is_some() {
        return Err(Error::protocol(format!(
            "lease.renew returned status {status} with expires_at {expires_at:?}"
        )));
    }
    Ok(Renewal { status, expires_at })
}

/// Frees `key` if `owner` holds it at `epoch`, advancing its fencing counter; otherwise changes
/// nothing and reports why.
///
/// After an `ok` release the key's counter is `epoch + 1`, so the next grant gets `epoch + 2` and
/// every guard that records epochs rejects `epoch`. A lapsed lease cannot be released
/// ([`Status::Lapsed`]); it is already free to take over.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]). Nothing changed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, grant: pglease::Grant) -> pglease::Result<()> {
/// let status = pglease::release(client, "job-42", "worker-a1", grant.epoch).await?;
/// println!("release: {status}");
/// # Ok(())
/// # }
/// ```
pub async fn release<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<Status> {
    let rows = client
        .query_typed(
            RELEASE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
            ],
        )
        .await?;
    release_status(rows)
}

/// The status in the only row of a release.
fn release_status(rows: Vec<Row>) -> Result<Status> {
    let row = one_row(rows, "lease.release")?;
    status(&row, "lease.release")
}

/// The state of `key` as of now by the server clock; `None` if the key was never leased (or was
/// purged).
///
/// Advisory: it takes no lock, so the state may change right after. A key that is known but not held
/// (free or lapsed) reports its fencing counter in [`LeaseState::epoch`].
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): empty key, or a key over 1024 bytes.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// match pglease::inspect(client, "job-42").await? {
///     Some(state) if state.held => println!("held by {:?}", state.owner),
///     Some(state) => println!("free; epochs <= {} are stale", state.epoch),
///     None => println!("never leased"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn inspect<C: GenericClient>(client: &C, key: &str) -> Result<Option<LeaseState>> {
    let rows = client.query_typed(INSPECT, &[(&key, Type::TEXT)]).await?;
    match rows.as_slice() {
        [] => Ok(None),
        [row] => lease_state(row, 0, "lease.inspect").map(Some),
        rows => Err(Error::protocol(format!(
            "lease.inspect returned {} rows, expected at most 1",
            rows.len()
        ))),
    }
}

/// Every key, or every key starting with `prefix` (compared byte-wise), ordered by key, with its
/// state as [`inspect`] reports it.
///
/// Meant for operators: it reads the whole matching range without locks, so it is advisory like
/// [`inspect`].
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): `prefix` over 1024 bytes.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// for lease in pglease::list(client, Some("job-")).await? {
///     println!("{} held={} epoch={}", lease.key, lease.state.held, lease.state.epoch);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn list<C: GenericClient>(client: &C, prefix: Option<&str>) -> Result<Vec<ListedLease>> {
    let rows = client.query_typed(LIST, &[(&prefix, Type::TEXT)]).await?;
    rows.iter()
        .map(|row| {
            Ok(ListedLease {
                key: get(row, 0, "lease.list")?,
                state: lease_state(row, 1, "lease.list")?,
            })
        })
        .collect()
}

/// Deletes the state of keys that have been free or lapsed for longer than `older_than`, returning
/// how many it deleted; held keys are never touched and epochs never go back.
///
/// A purged key that is acquired again starts above every epoch it ever had. By default only the
/// role that installed pg_lease may call it (`GRANT EXECUTE ON FUNCTION lease.purge(interval)` to
/// others). `older_than` is sent as whole microseconds, rounded down.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): `older_than` over 365 days.
/// - SQLSTATE `42501` for a role without the privilege; any other server error,
///   [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let purged = pglease::purge(client, Duration::from_secs(7 * 86_400)).await?;
/// println!("purged {purged} idle keys");
/// # Ok(())
/// # }
/// ```
pub async fn purge<C: GenericClient>(client: &C, older_than: Duration) -> Result<u64> {
    let older_than = micros(older_than);
    let rows = client
        .query_typed(PURGE, &[(&older_than, Type::INT8)])
        .await?;
    let row = one_row(rows, "lease.purge")?;
    let purged: Option<i64> = get(&row, 0, "lease.purge")?;
    purged
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Error::protocol(format!("lease.purge returned {purged:?}")))
}

/// The answer of [`register_waiter`]: the holder the waiter waits for, and when its lease lapses.
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

const REGISTER_WAITER: &str = "SELECT held, owner, epoch, expires_at, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_waiter($1)";
const FENCE: &str = "SELECT lease.fence($1, $2, $3)";
/// As ACQUIRE, plus the time left until the returned expiry, read on the server clock *after* the
/// call ran (so it never overstates what is left).
const ACQUIRE_TIMED: &str = "SELECT a.acquired, a.epoch, a.expires_at, \
     floor(extract(epoch FROM a.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.acquire($1, $2, $3::bigint * interval '1 microsecond') AS a";
/// As RENEW, plus the time left (see ACQUIRE_TIMED).
const RENEW_TIMED: &str = "SELECT r.status, r.expires_at, \
     floor(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.renew($1, $2, $3, $4::bigint * interval '1 microsecond') AS r";

/// Marks `key` as awaited, so that its holder's release notifies channel `pg_lease_released`
/// (payload: the key), and reports the holder and how long until its lease lapses.
///
/// For clients that wait without polling: `LISTEN pg_lease_released` first, then call this; if
/// [`Waiter::held`] is `false`, acquire now; otherwise sleep until the notification for the key or
/// until [`Waiter::lapses_in`] has passed, whichever comes first, then acquire (and register again
/// if another waiter won). The mark is cleared by the key's next grant. [`crate::Client::acquire`]
/// does all of this for you, on one shared `LISTEN` connection per client.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): empty key, or a key over 1024 bytes.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Cancel safety
///
/// Not cancel safe in the usual sense (the statement may still run), but harmless: the only effect
/// is the mark, which costs the holder one notification.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// client.batch_execute("LISTEN pg_lease_released").await?;
/// let waiter = pglease::register_waiter(client, "job-42").await?;
/// match waiter.lapses_in {
///     Some(lapses_in) => println!("held by {:?}; lapses in {lapses_in:?}", waiter.owner),
///     None => println!("free: acquire now"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn register_waiter<C: GenericClient>(client: &C, key: &str) -> Result<Waiter> {
    const CALL: &str = "lease.register_waiter";
    let rows = client
        .query_typed(REGISTER_WAITER, &[(&key, Type::TEXT)])
        .await?;
    let row = one_row(rows, CALL)?;
    let held: Option<bool> = get(&row, 0, CALL)?;
    let owner: Option<String> = get(&row, 1, CALL)?;
    let epoch: Option<i64> = get(&row, 2, CALL)?;
    let expires_at: Option<SystemTime> = get(&row, 3, CALL)?;
    let lapses_in: Option<i64> = get(&row, 4, CALL)?;
    match held {
        Some(true) if owner.is_some() && epoch.is_some() && expires_at.is_some() => {
            let lapses_in = lapses_in
                .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)))
                .ok_or_else(|| Error::protocol(format!("{CALL} returned a NULL lapses_in")))?;
            Ok(Waiter {
                held: true,
                owner,
                epoch,
                expires_at,
                lapses_in: Some(lapses_in),
            })
        }
        Some(false) if owner.is_none() && epoch.is_none() && expires_at.is_none() => Ok(Waiter {
            held: false,
            owner: None,
            epoch: None,
            expires_at: None,
            lapses_in: None,
        }),
        _ => Err(Error::protocol(format!(
            "{CALL} returned (held, owner, epoch, expires_at, lapses_in) = \
             ({held:?}, {owner:?}, {epoch:?}, {expires_at:?}, {lapses_in:?})"
        ))),
    }
}

/// Guards the writes of the caller's transaction: checks that `owner` holds `key` at `epoch` now
/// and locks the key's row (`FOR SHARE`) until the transaction ends, so no takeover, release or
/// renew of the key can commit before the guarded writes do; returns the lease's expiry.
///
/// Call it inside a transaction, before the writes it guards. [`crate::Lease::fence`] and
/// [`crate::Fence::check`] call it with a lease's own key, owner and epoch.
///
/// # Errors
///
/// - [`Error::is_fenced`]: SQLSTATE `LE001` (`owner` does not hold `key`), `LE002` (its lease
///   lapsed) or `LE003` (it holds `key` at another epoch). The transaction is aborted: roll it
///   back and stop acting on the lease.
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]).
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Cancel safety
///
/// Dropping the future after the statement was sent leaves the transaction in an unknown state;
/// roll it back (dropping a `Transaction` does).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client, epoch: i64) -> pglease::Result<()> {
/// let tx = client.transaction().await?;
/// pglease::fence(&tx, "job-42", "worker-a1", epoch).await?;
/// tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub async fn fence<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<SystemTime> {
    const CALL: &str = "lease.fence";
    let rows = client
        .query_typed(
            FENCE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
            ],
        )
        .await?;
    let row = one_row(rows, CALL)?;
    let expires_at: Option<SystemTime> = get(&row, 0, CALL)?;
    expires_at.ok_or_else(|| Error::protocol(format!("{CALL} returned NULL")))
}

/// How the pooled connections of a [`Client`](crate::Client) send the library's statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statements {
    /// Unnamed statements, parsed and planned by the server on every call: they work through a
    /// transaction-mode pooler ([pooler mode](crate::ClientBuilder::pooler_mode)).
    Unnamed,
    /// Prepared once per connection (the pool's statement cache), then executed by name: saves the
    /// parse and plan of every call.
    Prepared,
}

/// Runs one of the library's statements on a pooled connection, as `how` says.
pub(crate) async fn pooled_rows(
    conn: &deadpool_postgres::ClientWrapper,
    how: Statements,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>> {
    match how {
        Statements::Unnamed => Ok(conn.query_typed(sql, params).await?),
        Statements::Prepared => {
            let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
            let statement = conn.prepare_typed_cached(sql, &types).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            Ok(conn.query(&statement, &values).await?)
        }
    }
}

/// [`release`] on a pooled connection.
pub(crate) async fn release_pooled(
    conn: &deadpool_postgres::ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<Status> {
    let rows = pooled_rows(
        conn,
        how,
        RELEASE,
        &[
            (&key, Type::TEXT),
            (&owner, Type::TEXT),
            (&epoch, Type::INT8),
        ],
    )
    .await?;
    release_status(rows)
}

/// A grant together with the time left on it, measured on the server clock after the call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimedGrant {
    pub(crate) grant: Grant,
    pub(crate) remaining: Duration,
}

/// [`acquire`] without waiting, also reporting the time left on the grant (for a fresh grant about
/// `ttl`; for a grant the owner already held, what is left of it).
pub(crate) async fn acquire_timed(
    conn: &deadpool_postgres::ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<TimedGrant>> {
    const CALL: &str = "lease.acquire";
    let ttl = micros(ttl);
    let rows = pooled_rows(
        conn,
        how,
        ACQUIRE_TIMED,
        &[(&key, Type::TEXT), (&owner, Type::TEXT), (&ttl, Type::INT8)],
    )
    .await?;
    let row = one_row(rows, CALL)?;
    let acquired: Option<bool> = get(&row, 0, CALL)?;
    let epoch: Option<i64> = get(&row, 1, CALL)?;
    let expires_at: Option<SystemTime> = get(&row, 2, CALL)?;
    let remaining: Option<i64> = get(&row, 3, CALL)?;
    match (acquired, epoch, expires_at, remaining) {
        (Some(true), Some(epoch), Some(expires_at), Some(remaining)) => Ok(Some(TimedGrant {
            grant: Grant { epoch, expires_at },
            remaining: Duration::from_micros(u64::try_from(remaining).unwrap_or(0)),
        })),
        (Some(false), None, None, None) => Ok(None),
        other => Err(Error::protocol(format!(
            "{CALL} returned (acquired, epoch, expires_at, remaining) = {other:?}"
        ))),
    }
}

/// [`renew`], also reporting the time left on the renewed lease (`None` unless `ok`).
pub(crate) async fn renew_timed(
    conn: &deadpool_postgres::ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: Duration,
) -> Result<(Renewal, Option<Duration>)> {
    const CALL: &str = "lease.renew";
    let ttl = micros(ttl);
    let rows = pooled_rows(
        conn,
        how,
        RENEW_TIMED,
        &[
            (&key, Type::TEXT),
            (&owner, Type::TEXT),
            (&epoch, Type::INT8),
            (&ttl, Type::INT8),
        ],
    )
    .await?;
    let row = one_row(rows, CALL)?;
    let status = status(&row, CALL)?;
    let expires_at: Option<SystemTime> = get(&row, 1, CALL)?;
    let remaining: Option<i64> = get(&row, 2, CALL)?;
    if status.is_ok() != expires_at.is_some() || expires_at.is_some() != remaining.is_some() {
        return Err(Error::protocol(format!(
            "{CALL} returned status {status} with expires_at {expires_at:?}"
        )));
    }
    let remaining = remaining.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
    Ok((Renewal { status, expires_at }, remaining))
}

/// The only row of `rows`.
pub(crate) fn one_row(rows: Vec<Row>, call: &str) -> Result<Row> {
    let n = rows.len();
    let mut rows = rows.into_iter();
    match (rows.next(), n) {
        (Some(row), 1) => Ok(row),
        _ => Err(Error::protocol(format!(
            "{call} returned {n} rows, expected 1"
        ))),
    }
}

/// Column `idx` of `row` as `T`; a missing column or another type is a protocol error.
pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, idx: usize, call: &str) -> Result<T> {
    row.try_get(idx)
        .map_err(|e| Error::protocol(format!("{call}: column {idx}: {e}")))
}

/// Column 0 of `row` as a [`Status`].
fn status(row: &Row, call: &str) -> Result<Status> {
    let s: Option<&str> = get(row, 0, call)?;
    s.ok_or_else(|| Error::protocol(format!("{call} returned a NULL status")))?
        .parse()
}

/// Columns `first..first + 4` of `row` as a [`LeaseState`], checked for consistency.
fn lease_state(row: &Row, first: usize, call: &str) -> Result<LeaseState> {
    let held: Option<bool> = get(row, first, call)?;
    let owner: Option<String> = get(row, first + 1, call)?;
    let epoch: Option<i64> = get(row, first + 2, call)?;
    let expires_at: Option<SystemTime> = get(row, first + 3, call)?;
    match (held, epoch) {
        (Some(held), Some(epoch)) if held == owner.is_some() && held == expires_at.is_some() => {
            Ok(LeaseState {
                held,
                owner,
                epoch,
                expires_at,
            })
        }
        _ => Err(Error::protocol(format!(
            "{call} returned (held, owner, epoch, expires_at) = \
             ({held:?}, {owner:?}, {epoch:?}, {expires_at:?})"
        ))),
    }
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
                crate::install::MIGRATIONS[0].script.contains(&quoted),
                "{quoted}"
            );
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

    #[test]
    fn durations_become_whole_microseconds_rounded_down() {
        assert_eq!(micros(Duration::ZERO), 0);
        assert_eq!(micros(Duration::from_nanos(999)), 0);
        assert_eq!(micros(Duration::from_nanos(1_999)), 1);
        assert_eq!(micros(Duration::from_millis(1500)), 1_500_000);
        assert_eq!(
            micros(Duration::from_secs(365 * 86_400)),
            31_536_000_000_000
        );
    }

    #[test]
    fn huge_durations_saturate_above_the_api_limit() {
        let cap = micros(MAX_DURATION);
        assert_eq!(cap, 3_153_600_000_000_000);
        assert_eq!(micros(MAX_DURATION + Duration::from_secs(1)), cap);
        assert_eq!(micros(Duration::MAX), cap);
        assert!(cap > micros(Duration::from_secs(365 * 86_400)));
        // Exact in float8 (interval * float8 on the server) and inside interval's range.
        assert!(cap < 1 << 53);
    }
}
