//! Observability: the `tracing` targets the library emits its spans and events on, and the
//! conventions every event keeps. The contract (targets, levels, span and field names, messages)
//! is documented in `docs/CLIENT.md`, "Observability"; a test in `tests/it/observability.rs` holds
//! the library to it.
//!
//! Conventions:
//!
//! - Every event about a lease carries `key` and `owner`, and `epoch` once there is a grant; they
//!   are fields of the event itself, not only of an enclosing span, so a subscriber that disables
//!   spans (or filters by level) still sees them.
//! - An error is recorded as `error` (its display) and `sqlstate` (only when the server sent one).
//! - Durations are recorded with their `Debug` form (`10s`, `250ms`).
//! - Levels: `info` for changes of ownership (granted, released, leader elected), `debug` for
//!   routine traffic (renewals, refusals by a holder, waits), `warn` for failures that are retried
//!   and for losses. Nothing is logged at `error`: the library returns its errors, and expected
//!   refusals are answers, not errors.
//! - Never a connection string, password or other configuration value.
//!
//! Nothing is printed unless the application installs a subscriber: `tracing` without one is a
//! no-op, and the library never writes to stdout or stderr itself.

use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::Error;

/// The lifecycle of a [`crate::Client`]'s leases: acquire, renewals, loss, release.
pub(crate) const LEASE: &str = "pglease::lease";
/// Waiting for a key: the holder, what woke the waiter, retries while waiting.
pub(crate) const WAIT: &str = "pglease::wait";
/// Leader elections: elected, resigned, leadership lost, observed leader changes.
pub(crate) const ELECTION: &str = "pglease::election";
/// The client's listening connection (`LISTEN` for release notifications).
pub(crate) const LISTENER: &str = "pglease::listener";
/// Sharding: the slot map in force, grants refused by it, and slot moves.
pub(crate) const SHARD: &str = "pglease::shard";
/// The client's pooled connections: one closed because a commit was not confirmed by the
/// synchronous standby (`warn`), server notices (`debug`).
pub(crate) const CONNECTION: &str = "pglease::connection";
/// The plain calls of the SQL API ([`crate::acquire`], [`crate::renew`], [`crate::release`],
/// [`crate::purge`], [`crate::raise_min_epoch`]), on whatever connection or transaction the
/// caller passes.
pub(crate) const CALL: &str = "pglease::call";

/// The SQLSTATE of `e`, if the server sent one (an `Option` field is recorded only when `Some`).
pub(crate) fn sqlstate(e: &Error) -> Option<&str> {
    e.code()
}

/// What lies under an error without an answer (the connection's own error: refused, reset, a
/// standby that does not allow writes, a withheld answer), for the `cause` field; `None` for
/// errors that carry the server's answer.
pub(crate) fn cause(e: &Error) -> Option<String> {
    use std::error::Error as _;
    e.source().map(ToString::to_string)
}

/// How long a wait may last, for the `wait` field of the `acquire` span: a duration (to the
/// nearest millisecond, so a 10 s timeout reads `10s`), or `unbounded`.
pub(crate) fn wait_field(deadline: Deadline) -> String {
    match deadline.remaining() {
        Some(left) => {
            let ms = (left.as_micros().saturating_add(500)) / 1000;
            format!(
                "{:?}",
                Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
            )
        }
        None => "unbounded".to_owned(),
    }
}

/// `d` rounded to whole milliseconds, so durations read `2.5s`, not `2.499873211s`.
pub(crate) fn ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
