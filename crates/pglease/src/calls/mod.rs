//! Typed calls of pg_lease's SQL API: one async function per SQL function, one statement each:
//! the calls on a key's lease (`keys.rs`), its history (`history.rs`), an operator console's
//! pages of keys and counts (`browse.rs`), on semaphores (`semaphores.rs`), for waiting without
//! polling (`waiting.rs`), and on the server-wide state (`admin.rs`).
//!
//! The values they return are in `results.rs`, the decoders of their rows in `rows.rs`, and the
//! client's own variants on pooled connections (prepared statements, time left) in `pooled.rs`.
//!
//! Every function takes any [`GenericClient`](tokio_postgres::GenericClient), so it runs on a
//! [`tokio_postgres::Client`] (autocommit: the call commits on return) or inside a
//! [`tokio_postgres::Transaction`] (its effect commits or rolls back with the transaction). The
//! server's clock is the only clock: a [`SystemTime`](std::time::SystemTime) returned here is the
//! server's `clock_timestamp()` plus the ttl, to be compared with server time, not the local clock.
//!
//! Durations are sent as whole microseconds, rounded down (so a ttl under one microsecond is sent
//! as zero and rejected). A duration too large for PostgreSQL's `interval` is sent as
//! [`MAX_DURATION`], which the server rejects as invalid input (SQLSTATE `22023`) like any other
//! value above its 365-day limit.
//!
//! # Observability
//!
//! [`acquire`], [`renew`], [`release`], [`transfer`], [`purge`], [`configure_history`] and
//! [`raise_min_epoch`] log the server's answer on target `pglease::call`: a grant, an `ok`
//! release, an `ok` transfer, a purge, the history's settings and a raised minimum at `info`,
//! everything else at `debug`. Inside a
//! transaction the event says what the server answered; it takes effect only if the transaction
//! commits.
//!
//! # Cancel safety
//!
//! None of these calls is cancel safe in the sense that matters: once the statement is sent,
//! dropping the future does not stop the server from executing it. An acquire may then hold a lease
//! nobody knows about (until its ttl lapses), exactly as after [`crate::Error::is_connection`].

use std::time::Duration;

use crate::limits;
// The installer decodes its rows with the same helpers.
pub(crate) use crate::rows::{get, one_row};

/// The largest duration sent to the server (100 × [`limits::MAX_INTERVAL`], 36 500 days); longer
/// durations are sent as this.
///
/// It is a valid `interval` above every limit of the SQL API, so the server answers SQLSTATE
/// `22023` with a DETAIL saying which argument is too long.
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
    // MAX_DURATION is about 3.2e15 µs, far inside i64 (and exact in the server's float8
    // arithmetic).
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

mod admin;
mod browse;
mod history;
mod keys;
mod semaphores;
mod waiting;

pub use admin::{
    configuration, configure, configure_history, force_release, high_water, purge, raise_min_epoch,
};
pub use browse::{BrowseQuery, browse, summary};
pub use history::{HistoryQuery, history};
pub(crate) use keys::{RELEASE, RENEW_MANY};
pub use keys::{acquire, fence, inspect, list, release, renew, renew_many, transfer};
pub(crate) use semaphores::ACQUIRE_SLOT;
pub use semaphores::{acquire_slot, list_slots, register_slot_waiter, slot_key};
pub use waiting::{register_waiter, watch};

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
