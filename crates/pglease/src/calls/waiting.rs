//! Calls for clients that wait without polling: register as a key's waiter, watch a key's changes.

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::one_row;
use crate::error::Result;
use crate::results::{Waiter, Watched};
use crate::rows;

const REGISTER_WAITER: &str = "SELECT held, owner, epoch, expires_at, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_waiter($1)";
const WATCH: &str = "SELECT held, owner, epoch, expires_at, data, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.watch($1)";

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
/// - [`Error::is_invalid_input`](crate::Error::is_invalid_input) (`22023`): empty key, or a key
///   over 1024 bytes.
/// - any other server error, [`Error::is_connection`](crate::Error::is_connection) or
///   [`Error::is_protocol`](crate::Error::is_protocol).
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
/// - [`Error::is_invalid_input`](crate::Error::is_invalid_input) (`22023`): empty key, or a key
///   over 1024 bytes.
/// - any other server error, [`Error::is_connection`](crate::Error::is_connection) or
///   [`Error::is_protocol`](crate::Error::is_protocol).
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
