//! Row decoders: one per result shape of the SQL API, each checking the shape (which columns are
//! NULL together) and building the value, so the public calls and the pooled calls decode alike.
//!
//! A row of any other shape is a protocol error ([`Error::is_protocol`]), naming the call.

use std::time::{Duration, SystemTime};

use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::browse_results::{BrowsedLease, KeyState, LeaseCounts};
use crate::error::{Error, Result};
use crate::results::{
    Configuration, EndedBy, Grant, HistoryEntry, LeaseState, ListedLease, Renewal, SlotGrant,
    SlotState, SlotWaiter, Status, Transfer, Waiter, Watched,
};

/// A grant together with the time left on it, measured on the server clock after the call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimedGrant {
    pub(crate) grant: Grant,
    pub(crate) remaining: Duration,
}

/// One pair's answer of renew_many: the key and, unless busy, its renewal with the time left on
/// it (when `ok`).
pub(crate) type TimedKeyRenewal = (String, Option<(Renewal, Option<Duration>)>);

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

/// A count of microseconds (never negative) as a duration; a negative count is zero.
fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// `(acquired, epoch, expires_at)`: `Some` grant, or `None` if another owner holds the key.
pub(crate) fn grant(row: &Row, call: &str) -> Result<Option<Grant>> {
    let acquired: Option<bool> = get(row, 0, call)?;
    let epoch: Option<i64> = get(row, 1, call)?;
    let expires_at: Option<SystemTime> = get(row, 2, call)?;
    match (acquired, epoch, expires_at) {
        (Some(true), Some(epoch), Some(expires_at)) => Ok(Some(Grant { epoch, expires_at })),
        (Some(false), None, None) => Ok(None),
        other => Err(Error::protocol(format!(
            "{call} returned (acquired, epoch, expires_at) = {other:?}"
        ))),
    }
}

/// `(acquired, epoch, expires_at, remaining µs)`: a [`grant`] with the time left on it.
pub(crate) fn timed_grant(row: &Row, call: &str) -> Result<Option<TimedGrant>> {
    let remaining: Option<i64> = get(row, 3, call)?;
    match (grant(row, call)?, remaining) {
        (Some(grant), Some(remaining)) => Ok(Some(TimedGrant {
            grant,
            remaining: micros(remaining),
        })),
        (None, None) => Ok(None),
        (grant, remaining) => Err(Error::protocol(format!(
            "{call} returned grant {grant:?} with remaining {remaining:?}"
        ))),
    }
}

/// `(status, ...)`: column 0 as a [`Status`].
pub(crate) fn status(row: &Row, call: &str) -> Result<Status> {
    let s: Option<&str> = get(row, 0, call)?;
    s.ok_or_else(|| Error::protocol(format!("{call} returned a NULL status")))?
        .parse()
}

/// `(status, expires_at)`: a [`Renewal`], with an expiry exactly when `ok`.
pub(crate) fn renewal(row: &Row, call: &str) -> Result<Renewal> {
    let status = status(row, call)?;
    let expires_at: Option<SystemTime> = get(row, 1, call)?;
    if status.is_ok() != expires_at.is_some() {
        return Err(Error::protocol(format!(
            "{call} returned status {status} with expires_at {expires_at:?}"
        )));
    }
    Ok(Renewal { status, expires_at })
}

/// `(status, expires_at, remaining µs)` (from column `first`): a [`renewal`] and, when `ok`, the
/// time left on it.
pub(crate) fn timed_renewal(row: &Row, call: &str) -> Result<(Renewal, Option<Duration>)> {
    timed_renewal_at(row, 0, call)
}

fn timed_renewal_at(row: &Row, first: usize, call: &str) -> Result<(Renewal, Option<Duration>)> {
    let s: Option<&str> = get(row, first, call)?;
    let status: Status = s
        .ok_or_else(|| Error::protocol(format!("{call} returned a NULL status")))?
        .parse()?;
    let expires_at: Option<SystemTime> = get(row, first + 1, call)?;
    if status.is_ok() != expires_at.is_some() {
        return Err(Error::protocol(format!(
            "{call} returned status {status} with expires_at {expires_at:?}"
        )));
    }
    let renewal = Renewal { status, expires_at };
    let remaining: Option<i64> = get(row, first + 2, call)?;
    if renewal.expires_at.is_some() != remaining.is_some() {
        return Err(Error::protocol(format!(
            "{call} returned status {} with expires_at {:?}",
            renewal.status, renewal.expires_at
        )));
    }
    Ok((renewal, remaining.map(micros)))
}

/// Columns `first..first + 5`, `(held, owner, epoch, expires_at, data)`: a [`LeaseState`], with
/// an owner and an expiry exactly when held, and data only when held.
pub(crate) fn lease_state(row: &Row, first: usize, call: &str) -> Result<LeaseState> {
    let held: Option<bool> = get(row, first, call)?;
    let owner: Option<String> = get(row, first + 1, call)?;
    let epoch: Option<i64> = get(row, first + 2, call)?;
    let expires_at: Option<SystemTime> = get(row, first + 3, call)?;
    let data: Option<String> = get(row, first + 4, call)?;
    match (held, epoch) {
        (Some(held), Some(epoch))
            if held == owner.is_some()
                && held == expires_at.is_some()
                && (held || data.is_none()) =>
        {
            Ok(LeaseState {
                held,
                owner,
                epoch,
                expires_at,
                data,
            })
        }
        _ => Err(Error::protocol(format!(
            "{call} returned (held, owner, epoch, expires_at, data) = \
             ({held:?}, {owner:?}, {epoch:?}, {expires_at:?}, {data:?})"
        ))),
    }
}

/// `(held, owner, epoch, expires_at, data, lapses_in µs)`: a [`Watched`], lapses_in `Some`
/// exactly when held.
pub(crate) fn watched(row: &Row, call: &str) -> Result<Watched> {
    let state = lease_state(row, 0, call)?;
    let lapses_in: Option<i64> = get(row, 5, call)?;
    if state.held != lapses_in.is_some() {
        return Err(Error::protocol(format!(
            "{call} returned held = {} with lapses_in {lapses_in:?}",
            state.held
        )));
    }
    Ok(Watched {
        state,
        lapses_in: lapses_in.map(micros),
    })
}

/// `(key, held, owner, epoch, expires_at)`: a [`ListedLease`].
pub(crate) fn listed(row: &Row, call: &str) -> Result<ListedLease> {
    Ok(ListedLease {
        key: get(row, 0, call)?,
        state: lease_state(row, 1, call)?,
    })
}

/// `(held, owner, epoch, expires_at, lapses_in µs)`: a [`Waiter`], every other field `Some`
/// exactly when held.
pub(crate) fn waiter(row: &Row, call: &str) -> Result<Waiter> {
    let held: Option<bool> = get(row, 0, call)?;
    let owner: Option<String> = get(row, 1, call)?;
    let epoch: Option<i64> = get(row, 2, call)?;
    let expires_at: Option<SystemTime> = get(row, 3, call)?;
    let lapses_in: Option<i64> = get(row, 4, call)?;
    match held {
        Some(true) if owner.is_some() && epoch.is_some() && expires_at.is_some() => {
            let lapses_in = lapses_in
                .map(micros)
                .ok_or_else(|| Error::protocol(format!("{call} returned a NULL lapses_in")))?;
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
            "{call} returned (held, owner, epoch, expires_at, lapses_in) = \
             ({held:?}, {owner:?}, {epoch:?}, {expires_at:?}, {lapses_in:?})"
        ))),
    }
}

/// `(expires_at)`, never NULL: fence's answer.
pub(crate) fn expiry(row: &Row, call: &str) -> Result<SystemTime> {
    let expires_at: Option<SystemTime> = get(row, 0, call)?;
    expires_at.ok_or_else(|| Error::protocol(format!("{call} returned NULL")))
}

/// `(count)`, never NULL or negative: purge's answer.
pub(crate) fn count(row: &Row, call: &str) -> Result<u64> {
    let n: Option<i64> = get(row, 0, call)?;
    n.and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Error::protocol(format!("{call} returned {n:?}")))
}

/// A slot number from the server (1..=10000) as `u32`.
fn slot_number(n: i32, call: &str) -> Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| Error::protocol(format!("{call} returned slot {n}")))
}

/// `(acquired, slot, key, epoch, expires_at, remaining µs)`: a [`SlotGrant`] with the time left
/// on it, or `None` when refused (every other column NULL).
pub(crate) fn timed_slot_grant(row: &Row, call: &str) -> Result<Option<(SlotGrant, Duration)>> {
    let acquired: Option<bool> = get(row, 0, call)?;
    let slot: Option<i32> = get(row, 1, call)?;
    let key: Option<String> = get(row, 2, call)?;
    let epoch: Option<i64> = get(row, 3, call)?;
    let expires_at: Option<SystemTime> = get(row, 4, call)?;
    let remaining: Option<i64> = get(row, 5, call)?;
    match (acquired, slot, key, epoch, expires_at, remaining) {
        (Some(true), Some(slot), Some(key), Some(epoch), Some(expires_at), Some(remaining)) => {
            Ok(Some((
                SlotGrant {
                    slot: slot_number(slot, call)?,
                    key,
                    grant: Grant { epoch, expires_at },
                },
                micros(remaining),
            )))
        }
        (Some(false), None, None, None, None, None) => Ok(None),
        other => Err(Error::protocol(format!(
            "{call} returned (acquired, slot, key, epoch, expires_at, remaining) = {other:?}"
        ))),
    }
}

/// `(slot, key, held, owner, epoch, expires_at, data)`: a [`SlotState`].
pub(crate) fn slot_state(row: &Row, call: &str) -> Result<SlotState> {
    let slot: i32 = get(row, 0, call)?;
    Ok(SlotState {
        slot: slot_number(slot, call)?,
        key: get(row, 1, call)?,
        state: lease_state(row, 2, call)?,
    })
}

/// `(holders, lapses_in µs)`: a [`SlotWaiter`], lapses_in `Some` exactly when a slot is held.
pub(crate) fn slot_waiter(row: &Row, call: &str) -> Result<SlotWaiter> {
    let holders: Option<i32> = get(row, 0, call)?;
    let lapses_in: Option<i64> = get(row, 1, call)?;
    match holders.and_then(|n| u32::try_from(n).ok()) {
        Some(holders) if (holders > 0) == lapses_in.is_some() => Ok(SlotWaiter {
            holders,
            lapses_in: lapses_in.map(micros),
        }),
        _ => Err(Error::protocol(format!(
            "{call} returned (holders, lapses_in) = ({holders:?}, {lapses_in:?})"
        ))),
    }
}

/// `(key, status, expires_at, remaining µs)` of renew_many: the key and, unless `busy`, its
/// renewal with the time left on it (when `ok`).
pub(crate) fn timed_key_renewal(row: &Row, call: &str) -> Result<TimedKeyRenewal> {
    let key: String = get(row, 0, call)?;
    let s: Option<&str> = get(row, 1, call)?;
    if s == Some("busy") {
        let expires_at: Option<SystemTime> = get(row, 2, call)?;
        if expires_at.is_some() {
            return Err(Error::protocol(format!(
                "{call} returned busy with an expiry"
            )));
        }
        return Ok((key, None));
    }
    Ok((key, Some(timed_renewal_at(row, 1, call)?)))
}

/// `(max_ttl µs, failover_quarantine µs, timeline, quarantine_until, min_epoch, history,
/// history_retention µs)`: a [`Configuration`].
pub(crate) fn configuration(row: &Row, call: &str) -> Result<Configuration> {
    let max_ttl: Option<i64> = get(row, 0, call)?;
    let failover_quarantine: Option<i64> = get(row, 1, call)?;
    let timeline: Option<i64> = get(row, 2, call)?;
    let quarantine_until: Option<SystemTime> = get(row, 3, call)?;
    let min_epoch: Option<i64> = get(row, 4, call)?;
    let history: Option<bool> = get(row, 5, call)?;
    let history_retention: Option<i64> = get(row, 6, call)?;
    match (timeline, min_epoch, history, history_retention) {
        (Some(timeline), Some(min_epoch), Some(history), Some(retention)) => Ok(Configuration {
            max_ttl: max_ttl.map(micros),
            failover_quarantine: failover_quarantine.map(micros),
            timeline,
            quarantine_until,
            min_epoch,
            history,
            history_retention: micros(retention),
        }),
        other => Err(Error::protocol(format!(
            "{call} returned (timeline, min_epoch, history, history_retention) = {other:?}"
        ))),
    }
}

/// `(status, epoch, expires_at)` of transfer: a [`Transfer`], with the successor's grant exactly
/// when `ok`.
pub(crate) fn transfer(row: &Row, call: &str) -> Result<Transfer> {
    let status = status(row, call)?;
    let epoch: Option<i64> = get(row, 1, call)?;
    let expires_at: Option<SystemTime> = get(row, 2, call)?;
    let grant = match (status.is_ok(), epoch, expires_at) {
        (true, Some(epoch), Some(expires_at)) => Some(Grant { epoch, expires_at }),
        (false, None, None) => None,
        (_, epoch, expires_at) => {
            return Err(Error::protocol(format!(
                "{call} returned status {status} with (epoch, expires_at) = \
                 ({epoch:?}, {expires_at:?})"
            )));
        }
    };
    Ok(Transfer { status, grant })
}

/// `(epoch, owner, holder_role, granted_at, expires_at, ended_at, ended_by, data)` of history: a
/// [`HistoryEntry`]. A grant still held (no `ended_by`) has an expiry and no end.
pub(crate) fn history_entry(row: &Row, call: &str) -> Result<HistoryEntry> {
    let epoch: Option<i64> = get(row, 0, call)?;
    let owner: Option<String> = get(row, 1, call)?;
    let holder_role: Option<String> = get(row, 2, call)?;
    let granted_at: Option<SystemTime> = get(row, 3, call)?;
    let expires_at: Option<SystemTime> = get(row, 4, call)?;
    let ended_at: Option<SystemTime> = get(row, 5, call)?;
    let ended_by: Option<&str> = get(row, 6, call)?;
    let data: Option<String> = get(row, 7, call)?;
    match (epoch, owner) {
        (Some(epoch), Some(owner))
            if ended_by.is_some() || (ended_at.is_none() && expires_at.is_some()) =>
        {
            Ok(HistoryEntry {
                epoch,
                owner,
                holder_role,
                granted_at,
                expires_at,
                ended_at,
                ended_by: ended_by.map(EndedBy::parse),
                data,
            })
        }
        (epoch, owner) => Err(Error::protocol(format!(
            "{call} returned (epoch, owner, expires_at, ended_at, ended_by) = \
             ({epoch:?}, {owner:?}, {expires_at:?}, {ended_at:?}, {ended_by:?})"
        ))),
    }
}

/// `(key, state, owner, epoch, expires_at, data, waiting, last_owner)` of browse: a
/// [`BrowsedLease`], whose columns must fit its state: an owner (and data) only while held, an
/// expiry unless free, a last owner only when lapsed, the waiter mark never for a free key.
pub(crate) fn browsed(row: &Row, call: &str) -> Result<BrowsedLease> {
    let key: Option<String> = get(row, 0, call)?;
    let state: Option<&str> = get(row, 1, call)?;
    let owner: Option<String> = get(row, 2, call)?;
    let epoch: Option<i64> = get(row, 3, call)?;
    let expires_at: Option<SystemTime> = get(row, 4, call)?;
    let data: Option<String> = get(row, 5, call)?;
    let waiting: Option<bool> = get(row, 6, call)?;
    let last_owner: Option<String> = get(row, 7, call)?;
    let state: Option<KeyState> = state.map(str::parse).transpose()?;
    let fits = |s: KeyState| match s {
        KeyState::Held => owner.is_some() && expires_at.is_some() && last_owner.is_none(),
        KeyState::Lapsed => {
            owner.is_none() && data.is_none() && expires_at.is_some() && last_owner.is_some()
        }
        KeyState::Free => {
            owner.is_none()
                && data.is_none()
                && expires_at.is_none()
                && last_owner.is_none()
                && waiting == Some(false)
        }
    };
    match (key, state, epoch, waiting) {
        (Some(key), Some(state), Some(epoch), Some(waiting)) if fits(state) => Ok(BrowsedLease {
            key,
            state,
            owner,
            epoch,
            expires_at,
            data,
            waiting,
            last_owner,
        }),
        (key, state, epoch, waiting) => Err(Error::protocol(format!(
            "{call} returned (key, state, owner, epoch, expires_at, data, waiting, last_owner) = \
             ({key:?}, {state:?}, {owner:?}, {epoch:?}, {expires_at:?}, {data:?}, {waiting:?}, \
             {last_owner:?})"
        ))),
    }
}

/// `(held, lapsed, free, expiring, waiting)` of summary: [`LeaseCounts`], none of them NULL or
/// negative.
pub(crate) fn lease_counts(row: &Row, call: &str) -> Result<LeaseCounts> {
    let mut n = [0u64; 5];
    for (i, slot) in n.iter_mut().enumerate() {
        let v: Option<i64> = get(row, i, call)?;
        *slot = v
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| Error::protocol(format!("{call} returned {v:?} in column {i}")))?;
    }
    let [held, lapsed, free, expiring, waiting] = n;
    Ok(LeaseCounts {
        held,
        lapsed,
        free,
        expiring,
        waiting,
    })
}
