//! Typed calls of pg_lease's SQL API: one async function per SQL function, one statement each.
//!
//! The values they return are in `results.rs`, the decoders of their rows in `rows.rs`, and the
//! client's own variants on pooled connections (prepared statements, time left) in `pooled.rs`.
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
//! # Observability
//!
//! [`acquire`], [`renew`], [`release`], [`purge`] and [`raise_min_epoch`] log the server's answer
//! on target `pglease::call`: a grant, an `ok` release, a purge and a raised minimum at `info`,
//! everything else at `debug`. Inside a
//! transaction the event says what the server answered; it takes effect only if the transaction
//! commits.
//!
//! # Cancel safety
//!
//! None of these calls is cancel safe in the sense that matters: once the statement is sent,
//! dropping the future does not stop the server from executing it. An acquire may then hold a lease
//! nobody knows about (until its ttl lapses), exactly as after [`crate::Error::is_connection`].

use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use crate::error::{Error, Result};
use crate::limits;
use crate::results::{
    Configuration, Grant, KeyRenewal, LeaseState, ListedLease, Renewal, SlotGrant, SlotState,
    SlotWaiter, Status, Waiter, Watched,
};
use crate::rows;
use crate::trace;
// The installer decodes its rows with the same helpers.
pub(crate) use crate::rows::{get, one_row};

/// The largest duration sent to the server (100 × [`limits::MAX_INTERVAL`], 36 500 days); longer
/// durations are sent as this.
///
/// It is a valid `interval` above every limit of the SQL API, so the server answers SQLSTATE `22023`
/// with a DETAIL saying which argument is too long.
///
/// # Examples
///
/// ```
/// assert!(pglease::MAX_DURATION > std::time::Duration::from_secs(365 * 86_400));
/// ```
pub const MAX_DURATION: Duration = Duration::from_secs(100 * limits::MAX_INTERVAL.as_secs());

/// `d` in whole microseconds, rounded down, at most [`MAX_DURATION`].
pub(crate) fn micros(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    // MAX_DURATION is about 3.2e15 µs, far inside i64 (and exact in the server's float8 arithmetic).
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

const ACQUIRE: &str = "SELECT acquired, epoch, expires_at FROM lease.acquire($1, $2, \
     $3::bigint * interval '1 microsecond', $4::bigint * interval '1 microsecond')";
const RENEW: &str = "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
pub(crate) const RELEASE: &str = "SELECT status FROM lease.release($1, $2, $3)";
const INSPECT: &str = "SELECT held, owner, epoch, expires_at, data FROM lease.inspect($1)";
const LIST: &str = "SELECT key, held, owner, epoch, expires_at, data FROM lease.list($1)";
const WATCH: &str = "SELECT held, owner, epoch, expires_at, data, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.watch($1)";
const PURGE: &str = "SELECT lease.purge($1::bigint * interval '1 microsecond')";
const HIGH_WATER: &str = "SELECT lease.high_water()";
const RAISE_MIN_EPOCH: &str = "SELECT lease.raise_min_epoch($1)";
/// The columns of lease.configuration_result, durations in whole microseconds.
const CONFIGURATION_COLUMNS: &str = "floor(extract(epoch FROM c.max_ttl) * 1000000)::bigint, \
     floor(extract(epoch FROM c.failover_quarantine) * 1000000)::bigint, \
     c.timeline, c.quarantine_until, c.min_epoch";

const REGISTER_WAITER: &str = "SELECT held, owner, epoch, expires_at, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_waiter($1)";
const FENCE: &str = "SELECT lease.fence($1, $2, $3)";
pub(crate) const RENEW_MANY: &str = "SELECT r.key, r.status, r.expires_at, \
     floor(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.renew_many($1, $2, $3, $4::bigint * interval '1 microsecond') AS r";
pub(crate) const ACQUIRE_SLOT: &str = "SELECT s.acquired, s.slot, s.key, s.epoch, s.expires_at, \
     floor(extract(epoch FROM s.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.acquire_slot($1, $2, $3::bigint * interval '1 microsecond', $4, interval '0', $5) AS s";
const LIST_SLOTS: &str =
    "SELECT slot, key, held, owner, epoch, expires_at, data FROM lease.list_slots($1)";
const REGISTER_SLOT_WAITER: &str = "SELECT holders, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_slot_waiter($1)";
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
    let (ttl_us, wait_us) = (micros(ttl), micros(wait));
    let rows = client
        .query_typed(
            ACQUIRE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&ttl_us, Type::INT8),
                (&wait_us, Type::INT8),
            ],
        )
        .await?;
    let grant = rows::grant(&one_row(rows, "lease.acquire")?, "lease.acquire")?;
    match &grant {
        Some(grant) => tracing::info!(
            target: trace::CALL,
            key,
            owner,
            epoch = grant.epoch,
            ttl = ?ttl,
            "lease granted"
        ),
        None => tracing::debug!(
            target: trace::CALL,
            key,
            owner,
            wait = ?wait,
            "key held by another owner"
        ),
    }
    Ok(grant)
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
    let renewal = rows::renewal(&one_row(rows, "lease.renew")?, "lease.renew")?;
    tracing::debug!(
        target: trace::CALL,
        key,
        owner,
        epoch,
        status = renewal.status.as_str(),
        "lease renewal answered"
    );
    Ok(renewal)
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
    let status = rows::status(&one_row(rows, "lease.release")?, "lease.release")?;
    if status.is_ok() {
        tracing::info!(target: trace::CALL, key, owner, epoch, "lease released");
    } else {
        tracing::debug!(
            target: trace::CALL,
            key,
            owner,
            epoch,
            status = status.as_str(),
            "lease release refused"
        );
    }
    Ok(status)
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
        [row] => rows::lease_state(row, 0, "lease.inspect").map(Some),
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
        .map(|row| rows::listed(row, "lease.list"))
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
    let older_than_us = micros(older_than);
    let rows = client
        .query_typed(PURGE, &[(&older_than_us, Type::INT8)])
        .await?;
    let purged = rows::count(&one_row(rows, "lease.purge")?, "lease.purge")?;
    tracing::info!(target: trace::CALL, purged, older_than = ?older_than, "keys purged");
    Ok(purged)
}

/// Sets the installing role's ttl cap and failover quarantine (`lease.configure`; docs/SEMANTICS.md
/// §8.4) and returns the settings as they now apply.
///
/// `max_ttl`: the longest ttl any acquire or renewal may give (`None`: no cap beyond the API's 365
/// days); a longer one gets [`Error::is_invalid_input`] once this commits. `failover_quarantine`:
/// after a promotion, no new grant for this long from the first acquire on the new timeline
/// ([`Error::is_quarantined`]); `None` turns it off. A quarantine needs a cap and must be at least
/// as long, so that every grant the old primary made has lapsed before a new one is made (with
/// asynchronous replication, grants the standby never received). Durations are sent as whole
/// microseconds, rounded down. By default only the installing role may call it.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): a duration out of (0, 365 days], a quarantine without
///   a cap or shorter than it. Nothing changed.
/// - SQLSTATE `42501` for a role without the privilege; any other server error,
///   [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let max_ttl = Duration::from_secs(60);
/// let c = pglease::configure(client, Some(max_ttl), Some(max_ttl + Duration::from_secs(5))).await?;
/// assert_eq!(c.max_ttl, Some(max_ttl));
/// # Ok(())
/// # }
/// ```
pub async fn configure<C: GenericClient>(
    client: &C,
    max_ttl: Option<Duration>,
    failover_quarantine: Option<Duration>,
) -> Result<Configuration> {
    let max_ttl_us = max_ttl.map(micros);
    let quarantine_us = failover_quarantine.map(micros);
    let sql = format!(
        "SELECT {CONFIGURATION_COLUMNS} FROM lease.configure($1::bigint * interval '1 microsecond', \
         $2::bigint * interval '1 microsecond') AS c"
    );
    let rows = client
        .query_typed(
            &sql,
            &[(&max_ttl_us, Type::INT8), (&quarantine_us, Type::INT8)],
        )
        .await?;
    let configuration = rows::configuration(&one_row(rows, "lease.configure")?, "lease.configure")?;
    tracing::info!(
        target: trace::CALL,
        max_ttl = ?configuration.max_ttl,
        failover_quarantine = ?configuration.failover_quarantine,
        "pg_lease configured"
    );
    Ok(configuration)
}

/// The installing role's settings as they apply now (`lease.configuration`): the ttl cap, the
/// failover quarantine and whether one is running, the timeline and the least epoch of a grant.
/// Any role may read them; the call never starts a quarantine.
///
/// # Errors
///
/// Any server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// let c = pglease::configuration(client).await?;
/// println!("timeline {}, ttl cap {:?}", c.timeline, c.max_ttl);
/// # Ok(())
/// # }
/// ```
pub async fn configuration<C: GenericClient>(client: &C) -> Result<Configuration> {
    let sql = format!("SELECT {CONFIGURATION_COLUMNS} FROM lease.configuration() AS c");
    let rows = client.query_typed(&sql, &[]).await?;
    rows::configuration(
        &one_row(rows, "lease.configuration")?,
        "lease.configuration",
    )
}

/// The database's high-water epoch (`lease.high_water()`, pg_lease 0.7.0, docs/SEMANTICS.md
/// §8.5): at least every epoch this database granted or holds in reserve — every key's epoch (a
/// free key's is the next one it grants), the purge floor, and the least epoch a grant gets now
/// minus one. Any role with USAGE on schema `lease` may call it; it only reads, but it reads every
/// row (an operator's call, not a worker's).
///
/// A slot move reads it on the source and raises the target's minimum epoch above it
/// ([`crate::SlotMove`]), so that the target's grants of the slot's keys exceed every epoch the
/// source granted.
///
/// # Errors
///
/// Any server error (SQLSTATE `42883` if the installed pg_lease predates 0.7.0),
/// [`Error::is_connection`] or [`Error::is_protocol`] (a NULL or negative answer).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// let high_water = pglease::high_water(client).await?;
/// println!("no epoch above {high_water} was ever granted here");
/// # Ok(())
/// # }
/// ```
pub async fn high_water<C: GenericClient>(client: &C) -> Result<i64> {
    const CALL: &str = "lease.high_water";
    let rows = client.query_typed(HIGH_WATER, &[]).await?;
    epoch_answer(&one_row(rows, CALL)?, CALL)
}

/// Raises the database's minimum epoch to at least `at_least` (`lease.raise_min_epoch`, pg_lease
/// 0.7.0, docs/SEMANTICS.md §8.5): once this call commits, every grant in the database — of any
/// key, new, free or lapsed — has an epoch `>= at_least`, and after later promotions 2^40 more for
/// every timeline since. It never lowers the minimum, and grants already held keep their epochs;
/// returns the least epoch a grant gets now (`>= at_least`).
///
/// Only the role that installed pg_lease may call it by default, like [`purge`]. Inside a
/// transaction it takes effect when the transaction commits. Make sure the commit has reached
/// every standby that could be promoted before relying on it (synchronous replication, or wait
/// for the standbys to replay it), as for any other write.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): `at_least` negative or above 2^62. Nothing changed.
/// - SQLSTATE `42501` for a role without the privilege; `42883` if the installed pg_lease
///   predates 0.7.0; any other server error, [`Error::is_connection`] (outcome unknown: it is
///   safe to call again) or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(source: &tokio_postgres::Client, target: &tokio_postgres::Client) -> pglease::Result<()> {
/// // As the installing role of the target: its next grants are above all of the source's.
/// let high_water = pglease::high_water(source).await?;
/// let min = pglease::raise_min_epoch(target, high_water + 1).await?;
/// assert!(min > high_water);
/// # Ok(())
/// # }
/// ```
pub async fn raise_min_epoch<C: GenericClient>(client: &C, at_least: i64) -> Result<i64> {
    const CALL: &str = "lease.raise_min_epoch";
    let rows = client
        .query_typed(RAISE_MIN_EPOCH, &[(&at_least, Type::INT8)])
        .await?;
    let min_epoch = epoch_answer(&one_row(rows, CALL)?, CALL)?;
    tracing::info!(
        target: trace::CALL,
        at_least,
        min_epoch,
        "minimum epoch raised"
    );
    Ok(min_epoch)
}

/// `(bigint)`, never NULL or negative: an epoch the server reports.
fn epoch_answer(row: &tokio_postgres::Row, call: &str) -> Result<i64> {
    let epoch: Option<i64> = get(row, 0, call)?;
    epoch
        .filter(|e| *e >= 0)
        .ok_or_else(|| Error::protocol(format!("{call} returned {epoch:?}")))
}

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
    rows::waiter(&one_row(rows, CALL)?, CALL)
}

/// Watches `key`: marks it so that every grant, release and change of data of it notifies channel
/// `pg_lease_changed` (payload: the key) for the next hour, and returns its state now with the
/// time until the holder's lapse (a lapse notifies nothing: wake up then).
///
/// For observers of a key's holder: `LISTEN pg_lease_changed` first, then call this, and call it
/// again on every wake-up (a notification, the lapse, or at least every half hour, which keeps the
/// mark). A key never leased gets a free row at the epoch floor, so its first grant notifies too.
/// [`crate::Election::observe`] does all of this on the client's shared `LISTEN` connection.
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
/// client.batch_execute("LISTEN pg_lease_changed").await?;
/// let watched = pglease::watch(client, "scheduler").await?;
/// match (&watched.state.owner, watched.lapses_in) {
///     (Some(owner), Some(lapses_in)) => println!("{owner} leads; lapses in {lapses_in:?}"),
///     _ => println!("no leader: wait for a notification"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn watch<C: GenericClient>(client: &C, key: &str) -> Result<Watched> {
    const CALL: &str = "lease.watch";
    let rows = client.query_typed(WATCH, &[(&key, Type::TEXT)]).await?;
    rows::watched(&one_row(rows, CALL)?, CALL)
}

/// Guards the writes of the caller's transaction: checks that `owner` holds `key` at `epoch` now
/// and locks the key's row (`FOR SHARE`) until the transaction ends, so no takeover, release or
/// renew of the key can commit before the guarded writes do; returns the lease's expiry.
///
/// Call it inside a transaction, before the writes it guards. [`Lease::fence`](crate::LeaseGuard::fence) and
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
    rows::expiry(&one_row(rows, CALL)?, CALL)
}

/// Renews many grants of `owner` in one statement (`lease.renew_many`): for each `(key, epoch)`
/// pair the judgement [`renew`] would give, extending every held one to server time + `ttl`, and
/// one [`KeyRenewal`] per pair (in no particular order). A key whose row another transaction holds
/// locked (a [`fence()`] in progress, a concurrent call) is not waited for: it comes back busy
/// (`renewal: None`), unjudged and unrenewed; renew it on its own with [`renew`]. Data is left as
/// it is.
///
/// The keys must be distinct; at most [`MAX_RENEW_MANY`](crate::limits::MAX_RENEW_MANY) pairs.
/// [`crate::Client`] renews its leases this way (docs/CLIENT.md, "Batched renewal").
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): a bad owner, key or ttl, duplicate keys, or too many
///   pairs; nothing was renewed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let pairs = [("job-1", 7), ("job-2", 9)];
/// for r in pglease::renew_many(client, "worker-a1", &pairs, Duration::from_secs(30)).await? {
///     match r.renewal {
///         Some(renewal) if renewal.status.is_ok() => {}
///         Some(renewal) => eprintln!("lost {}: {}", r.key, renewal.status),
///         None => { /* busy: pglease::renew(client, &r.key, ...) */ }
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub async fn renew_many<C: GenericClient>(
    client: &C,
    owner: &str,
    pairs: &[(&str, i64)],
    ttl: Duration,
) -> Result<Vec<KeyRenewal>> {
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
    let epochs: Vec<i64> = pairs.iter().map(|(_, e)| *e).collect();
    let ttl_us = micros(ttl);
    let rows = client
        .query_typed(
            RENEW_MANY,
            &[
                (&owner, Type::TEXT),
                (&keys, Type::TEXT_ARRAY),
                (&epochs, Type::INT8_ARRAY),
                (&ttl_us, Type::INT8),
            ],
        )
        .await?;
    let answers = rows
        .iter()
        .map(|row| {
            let (key, judged) = rows::timed_key_renewal(row, "lease.renew_many")?;
            Ok(KeyRenewal {
                key,
                renewal: judged.map(|(renewal, _)| renewal),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    tracing::debug!(
        target: trace::CALL,
        owner,
        leases = answers.len(),
        "lease renewals answered"
    );
    Ok(answers)
}

/// The lease key of slot `slot` of semaphore `semaphore`: `semaphore#slot`, as
/// `lease.slot_key` spells it (computed here, nothing sent).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::slot_key("runners", 3), "runners#3");
/// ```
pub fn slot_key(semaphore: &str, slot: u32) -> String {
    format!("{semaphore}#{slot}")
}

/// Grants `owner` a slot of semaphore `semaphore` for `ttl` if fewer than `max_holders` of its
/// slots are held (the lowest free or lapsed slot in `1..=max_holders`, with a new epoch for that
/// slot's key), carrying `data`; returns the owner's current slot unchanged if it holds one
/// (its data replaced when `data` is given); `None` when `max_holders` slots are held by others.
///
/// The slot is an ordinary lease key ([`SlotGrant::key`]): renew, release and fence it with
/// [`renew`], [`release`] and [`fence()`]. The limit is an argument of each call, not stored:
/// raising it takes effect at once; lowering it refuses new grants until fewer holders than the
/// new limit remain (docs/SEMANTICS.md §7). Never waits (`wait = 0`); [`crate::Semaphore`] waits
/// without polling.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty or over-long (1018 bytes) name, a bad owner
///   or ttl, `max_holders` not in 1..=10000, data over 8192 bytes. Nothing changed.
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
/// match pglease::acquire_slot(client, "runners", "worker-a1", ttl, 3, Some("a1")).await? {
///     Some(s) => println!("slot {} at epoch {}", s.slot, s.grant.epoch),
///     None => println!("3 runners already"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn acquire_slot<C: GenericClient>(
    client: &C,
    semaphore: &str,
    owner: &str,
    ttl: Duration,
    max_holders: u32,
    data: Option<&str>,
) -> Result<Option<SlotGrant>> {
    const CALL: &str = "lease.acquire_slot";
    let ttl_us = micros(ttl);
    let max = i32::try_from(max_holders).unwrap_or(i32::MAX);
    let rows = client
        .query_typed(
            ACQUIRE_SLOT,
            &[
                (&semaphore, Type::TEXT),
                (&owner, Type::TEXT),
                (&ttl_us, Type::INT8),
                (&max, Type::INT4),
                (&data, Type::TEXT),
            ],
        )
        .await?;
    let granted = rows::timed_slot_grant(&one_row(rows, CALL)?, CALL)?.map(|(grant, _)| grant);
    match &granted {
        Some(s) => tracing::info!(
            target: trace::CALL,
            key = s.key.as_str(),
            owner,
            epoch = s.grant.epoch,
            ttl = ?ttl,
            "lease granted"
        ),
        None => tracing::debug!(
            target: trace::CALL,
            key = semaphore,
            owner,
            "every slot held by another owner"
        ),
    }
    Ok(granted)
}

/// Every slot of semaphore `semaphore` that has a row (held or not), ordered by slot, with its
/// state as [`inspect`] reports it. Advisory, like [`inspect`].
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty or over-long name.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// let held = pglease::list_slots(client, "runners").await?.into_iter().filter(|s| s.state.held).count();
/// println!("{held} runners");
/// # Ok(())
/// # }
/// ```
pub async fn list_slots<C: GenericClient>(client: &C, semaphore: &str) -> Result<Vec<SlotState>> {
    let rows = client
        .query_typed(LIST_SLOTS, &[(&semaphore, Type::TEXT)])
        .await?;
    rows.iter()
        .map(|row| rows::slot_state(row, "lease.list_slots"))
        .collect()
}

/// Marks every held slot of semaphore `semaphore` as awaited (so its release notifies
/// `pg_lease_released` with the slot's key, `name#N`), and reports how many are held and when
/// the first of them lapses.
///
/// For clients that wait for a slot without polling: `LISTEN pg_lease_released` first, then call
/// this; if fewer than your `max_holders` are held, try [`acquire_slot`] now; otherwise sleep until
/// a notification for one of the semaphore's slot keys or until [`SlotWaiter::lapses_in`], then
/// try again. [`crate::Semaphore::acquire`] does all of this.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty or over-long name.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// client.batch_execute("LISTEN pg_lease_released").await?;
/// let waiter = pglease::register_slot_waiter(client, "runners").await?;
/// println!("{} held, first lapse in {:?}", waiter.holders, waiter.lapses_in);
/// # Ok(())
/// # }
/// ```
pub async fn register_slot_waiter<C: GenericClient>(
    client: &C,
    semaphore: &str,
) -> Result<SlotWaiter> {
    const CALL: &str = "lease.register_slot_waiter";
    let rows = client
        .query_typed(REGISTER_SLOT_WAITER, &[(&semaphore, Type::TEXT)])
        .await?;
    rows::slot_waiter(&one_row(rows, CALL)?, CALL)
}

#[cfg(test)]
mod tests {
    use super::*;

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
