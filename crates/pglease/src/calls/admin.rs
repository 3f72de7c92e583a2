//! Calls on the server-wide state: purging ended leases, an operator's end of a grant
//! (`force_release`), the settings (`configure`, `configure_history`, `configuration`), and the
//! epochs' high-water mark and floor.

use std::time::Duration;

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::{get, micros, one_row};
use crate::error::{Error, Result};
use crate::results::Configuration;
use crate::rows;
use crate::trace;

const PURGE: &str = "SELECT lease.purge($1::bigint * interval '1 microsecond')";
const FORCE_RELEASE: &str = "SELECT lease.force_release($1)";
const HIGH_WATER: &str = "SELECT lease.high_water()";
const RAISE_MIN_EPOCH: &str = "SELECT lease.raise_min_epoch($1)";
/// The columns of lease.configuration_result, durations in whole microseconds.
const CONFIGURATION_COLUMNS: &str = "floor(extract(epoch FROM c.max_ttl) * 1000000)::bigint, \
     floor(extract(epoch FROM c.failover_quarantine) * 1000000)::bigint, \
     c.timeline, c.quarantine_until, c.min_epoch, c.history, \
     floor(extract(epoch FROM c.history_retention) * 1000000)::bigint";

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

/// An operator's end of whatever grant of `key` is held, whoever made it (a stuck holder, an
/// application gone for good): the key is freed as by a release — its next grant gets a higher
/// epoch, waiters are woken — and the ended grant's epoch is returned; `None` when the key was not
/// held (nothing changed). The ended holder's next renewal or fence is refused, so its
/// [`crate::Lease`] reports the loss. Written to the server log with the calling role.
///
/// A grant belongs to the login role that made it: other roles cannot renew, release or fence it
/// ([`Error::is_other_role`]); this is the escape hatch. By default only the role that installed
/// pg_lease may call it (`GRANT EXECUTE ON FUNCTION lease.force_release(text)` to operators).
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty or over-long key.
/// - SQLSTATE `42501` for a role without the privilege; any other server error,
///   [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// match pglease::force_release(client, "billing-leader").await? {
///     Some(epoch) => println!("ended the grant at epoch {epoch}"),
///     None => println!("nobody held it"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn force_release<C: GenericClient>(client: &C, key: &str) -> Result<Option<i64>> {
    let rows = client
        .query_typed(FORCE_RELEASE, &[(&key, Type::TEXT)])
        .await?;
    let ended: Option<i64> = get(
        &one_row(rows, "lease.force_release")?,
        0,
        "lease.force_release",
    )?;
    tracing::warn!(target: trace::CALL, key, ended_epoch = ?ended, "lease force-released");
    Ok(ended)
}

/// Sets the installing role's ttl cap and failover quarantine (`lease.configure`; docs/SEMANTICS.md
/// §8.4) and returns the settings as they now apply.
///
/// `max_ttl`: the longest ttl any acquire or renewal may give (`None`: no cap beyond the API's 365
/// days); a longer one gets [`Error::is_invalid_input`] once this commits. `failover_quarantine`:
/// after a promotion, no new grant for this long from the first acquire on the new timeline
/// ([`Error::is_quarantined`]); `None` (or a zero duration) turns it off — both settings are
/// always set, as given. A quarantine needs a cap and must be at least
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
    // SQL's NULL keeps the current quarantine and 0 turns it off: `None` here means off.
    let quarantine_us = Some(failover_quarantine.map_or(0, micros));
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

/// Turns the recording of grants in the history on or off and sets how long [`purge`] keeps the
/// history of an ended grant (`lease.configure_history`, pg_lease 0.9.0, docs/SEMANTICS.md §15);
/// returns the settings as they now apply.
///
/// `enabled`: `Some(false)` stops recording new grants (those already recorded are kept, and still
/// completed where their end is written: forced, transferred, purge); `Some(true)` records again
/// (on is the default); `None` keeps the current setting. `retention`: from 1 second to 3650 days
/// ([`MAX_HISTORY_RETENTION`](crate::limits::MAX_HISTORY_RETENTION)), 30 days by default; `None`
/// keeps it. Applies to every call that starts after this commits. Sent as whole microseconds,
/// rounded down. By default only the installing role may call it.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): a retention out of [1 s, 3650 days]. Nothing changed.
/// - SQLSTATE `42501` for a role without the privilege; `42883` if the installed pg_lease
///   predates 0.9.0; any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let week = Duration::from_secs(7 * 86_400);
/// let c = pglease::configure_history(client, Some(true), Some(week)).await?;
/// assert!(c.history);
/// assert_eq!(c.history_retention, week);
/// # Ok(())
/// # }
/// ```
pub async fn configure_history<C: GenericClient>(
    client: &C,
    enabled: Option<bool>,
    retention: Option<Duration>,
) -> Result<Configuration> {
    const CALL: &str = "lease.configure_history";
    let retention_us = retention.map(micros);
    let sql = format!(
        "SELECT {CONFIGURATION_COLUMNS} FROM lease.configure_history($1, \
         $2::bigint * interval '1 microsecond') AS c"
    );
    let rows = client
        .query_typed(&sql, &[(&enabled, Type::BOOL), (&retention_us, Type::INT8)])
        .await?;
    let configuration = rows::configuration(&one_row(rows, CALL)?, CALL)?;
    tracing::info!(
        target: trace::CALL,
        history = configuration.history,
        history_retention = ?configuration.history_retention,
        "grant history configured"
    );
    Ok(configuration)
}

/// The installing role's settings as they apply now (`lease.configuration`): the ttl cap, the
/// failover quarantine and whether one is running, the timeline, the least epoch of a grant, and
/// whether grants are recorded in the history and for how long.
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
