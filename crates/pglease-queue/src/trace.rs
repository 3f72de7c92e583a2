//! Observability: the `tracing` targets of this crate. Every event about a partition carries
//! `queue`, `partition` and `owner`, and `epoch` once it is claimed; about a message also `id`,
//! `key` and `attempts`. Errors are recorded as `error` (display) and `sqlstate` (when the server
//! sent one). Levels: `info` for ownership changes (claimed, released) and redeliveries, `warn` for
//! losses, handler failures, dead letters and retried errors, `debug` for routine traffic (batches,
//! acks, wake-ups). Nothing is printed unless the application installs a subscriber.

/// The consumer: claims, losses, releases, batches, redeliveries, nacks, dead letters.
pub(crate) const CONSUMER: &str = "pglease_queue::consumer";
/// Sends ([`crate::Producer`]).
pub(crate) const PRODUCER: &str = "pglease_queue::producer";
