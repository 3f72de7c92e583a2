//! Calls on counting semaphores, whose slots are the keys `name#1` .. `name#max`.

use std::time::Duration;

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::{micros, one_row};
use crate::error::Result;
use crate::results::{SlotGrant, SlotState, SlotWaiter};
use crate::rows;
use crate::trace;

pub(crate) const ACQUIRE_SLOT: &str = "SELECT s.acquired, s.slot, s.key, s.epoch, s.expires_at, \
     floor(extract(epoch FROM s.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.acquire_slot($1, $2, $3::bigint * interval '1 microsecond', $4, interval '0', $5) AS s";
const LIST_SLOTS: &str =
    "SELECT slot, key, held, owner, epoch, expires_at, data FROM lease.list_slots($1)";
const REGISTER_SLOT_WAITER: &str = "SELECT holders, \
     ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_slot_waiter($1)";

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
/// [`renew`](super::renew), [`release`](super::release) and [`fence()`](super::fence()). The limit
/// is an argument of each call, not stored: raising it takes effect at once; lowering it refuses
/// new grants until fewer holders than the new limit remain (docs/SEMANTICS.md §7). Never waits
/// (`wait = 0`); [`crate::Semaphore`] waits without polling.
///
/// # Errors
///
/// - [`Error::is_invalid_input`](crate::Error::is_invalid_input) (`22023`): an empty or over-long
///   (1018 bytes) name, a bad owner or ttl, `max_holders` not in 1..=10000, data over 8192 bytes.
///   Nothing changed.
/// - any other server error, [`Error::is_connection`](crate::Error::is_connection) (outcome
///   unknown) or [`Error::is_protocol`](crate::Error::is_protocol).
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
/// state as [`inspect`](super::inspect) reports it. Advisory, like [`inspect`](super::inspect).
///
/// # Errors
///
/// - [`Error::is_invalid_input`](crate::Error::is_invalid_input) (`22023`): an empty or over-long
///   name.
/// - any other server error, [`Error::is_connection`](crate::Error::is_connection) or
///   [`Error::is_protocol`](crate::Error::is_protocol).
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
/// - [`Error::is_invalid_input`](crate::Error::is_invalid_input) (`22023`): an empty or over-long
///   name.
/// - any other server error, [`Error::is_connection`](crate::Error::is_connection) or
///   [`Error::is_protocol`](crate::Error::is_protocol).
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
