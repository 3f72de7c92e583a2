//! PostgreSQL-native leases with fencing epochs: a lease client for the pg_lease SQL API.
//!
//! pg_lease (schema `lease`) grants a named key to one owner at a time, until server time + ttl
//! unless renewed. Every grant carries a fencing epoch greater than all earlier epochs of the key,
//! so a resource that checks epochs can reject a former holder. The server's clock is the only
//! clock, and every call is one statement that commits or rolls back with the caller's transaction.
//!
//! # Layers
//!
//! - **The client** ([`Client`], [`Lease`], [`Semaphore`], [`Election`], [`Fence`]): leases with a
//!   keepalive (renewals of all leases batched into one call), prompt and reliable loss detection
//!   ([`Lease::lost`](crate::LeaseGuard::lost)), waits that hold no pooled connection, lease data
//!   ([`AcquireBuilder::data`], [`Lease::set_data`]), semaphores of N holders, fencing inside the
//!   database, and leader election with watching observers. Built on tokio-postgres and a
//!   deadpool-postgres pool.
//! - **Listening** ([`Client::subscribe`], [`Listener`], [`Subscription`]): the application's
//!   own notifications on the client's one listening connection (or on one of its own behind a
//!   pooler), with the guarantee the client's waits rely on; the queue consumer listens this way.
//! - **Sharding** ([`SlotMap`], [`ShardedClient`], [`SlotMove`]): keys spread over several
//!   independent pg_lease databases by a fixed slot map in the client, each key's authority
//!   exactly one database, and a procedure for moving a slot that keeps its epochs above every
//!   earlier grant.
//! - **Calls** ([`acquire`], [`renew`], [`renew_many`], [`release`], [`transfer`], [`inspect`],
//!   [`list`], [`browse`], [`summary`], [`history`], [`purge`], [`register_waiter`], [`watch`], [`acquire_slot`],
//!   [`list_slots`], [`register_slot_waiter`], [`fence()`], [`configure`], [`configure_history`],
//!   [`configuration`], [`high_water`], [`raise_min_epoch`]): one async function per SQL function, generic over
//!   [`tokio_postgres::GenericClient`], so each runs on a `Client` (autocommit) or inside a
//!   `Transaction`. They hold no state of their own.
//! - **Connecting** ([`ConnectOptions`], [`SslMode`], [`TlsConnector`]): a connection string read
//!   as libpq reads it — `PG*` variables, the password file, TLS by `sslmode`, `sslrootcert`,
//!   `sslcert` and `sslkey` (rustls) — one value for the client, a [`Listener`] and the queue
//!   consumer.
//! - **Installation** ([`install()`], [`create_extension`], [`installed`], [`check_version`]):
//!   puts the SQL API into a database, either with `CREATE EXTENSION` or, on managed PostgreSQL
//!   without the extension files, by running the extension's own scripts ([`MIGRATIONS`]).
//! - **Limits and identity** ([`limits`], [`hostname`]): the lengths and durations the SQL API
//!   accepts (the one table of them), and the host name the default owner identities are built
//!   from.
//! - **Errors** ([`Error`], [`sqlstate`]): one opaque error type; server errors keep their SQLSTATE
//!   ([`Error::code`]); [`Error::is_lease_lost`] and [`Error::is_fenced`] name the two ways a
//!   lease stops being yours.
//!
//! # What the client guarantees
//!
//! The full contract, with the reasoning, is in `docs/CLIENT.md`. In short:
//!
//! - **Loss is signalled before anyone else can acquire.** The client never compares its wall clock
//!   with the server's. It takes a monotonic instant *before sending* each acquire or renew and
//!   treats the lease as held until `sent + min(ttl, left) - margin`, where `left` is the time the
//!   server reported left on the lease and `margin = ttl / 1000 + safety_margin` (default 20 ms):
//!   the proportional part covers both clocks being slewed in opposite directions at the kernel's
//!   500 ppm maximum; the constant covers timer and wake-up latency. If no renewal is confirmed by
//!   then, [`Lease::lost`](crate::LeaseGuard::lost) completes with [`LostReason::Expired`], before
//!   the server's expiry. A renewal answered `not_owner`, `lapsed` or `epoch_mismatch` ends the
//!   lease at once.
//! - **Transient errors are not loss.** A failed or unanswered renewal is retried with jittered
//!   exponential backoff (from `clamp(ttl / 100, 10 ms, 100 ms)`, capped at the renewal
//!   interval) on a fresh connection until the deadline; an unanswered renewal is never counted,
//!   and renewal is idempotent, so re-sending it is safe.
//! - **No leaks.** A lease's keepalive task ends when the lease is released, dropped or lost, or
//!   the client shuts down; a released lease sends nothing more to the server.
//! - **Waiting without polling.** [`Client::acquire`] waits on one shared `LISTEN` connection per
//!   client, woken by the release notification or at the holder's lapse time (as the server
//!   measured it); behind a transaction-mode pooler ([`ClientBuilder::pooler_mode`]) it sleeps
//!   until the lapse, at most [`ClientBuilder::poll_cap`] (default 1 s) at a time.
//! - **Fencing inside the database.** [`Lease::fence`](crate::LeaseGuard::fence) guards a
//!   transaction with `lease.fence`; a stale grant fails with [`Error::is_fenced`] (SQLSTATE
//!   `LE001`/`LE002`/`LE003`).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! #[tokio::main]
//! async fn main() -> pglease::Result<()> {
//!     let client = pglease::Client::connect("host=localhost user=app dbname=app").await?;
//!
//!     // Wait up to a minute for the key; the lease is renewed in the background.
//!     let ttl = Duration::from_secs(10);
//!     let lease = client.acquire("job-42", ttl, Duration::from_secs(60)).await?;
//!
//!     let mut db = client.pool().get().await?;
//!     tokio::select! {
//!         reason = lease.lost() => {
//!             println!("lost job-42 ({reason}): stop acting on it");
//!             return Ok(());
//!         }
//!         done = async {
//!             // A write that only lands while the lease is current.
//!             let tx = db.transaction().await?;
//!             lease.fence(&*tx).await?;
//!             tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
//!             tx.commit().await?;
//!             Ok::<(), pglease::Error>(())
//!         } => done?,
//!     }
//!     lease.release().await
//! }
//! ```
//!
//! `examples/lifecycle.rs` walks the whole lifecycle, including the lost and fenced paths.

#![warn(missing_docs)]

// The calls of the SQL API: the public calls, their result types, the row decoders, and the
// client's variants on pooled connections.
mod browse_results;
mod calls;
mod history_results;
mod pooled;
mod results;
mod rows;

// The client: its builder, the acquire attempt (and acquires with options), waiting, per-key slots,
// retrying, owner identity.
mod acquire;
mod attempt;
mod builder;
mod client;
mod confirmed;
mod connect_options;
mod conninfo;
mod deadline;
mod identity;
mod pgpass;
mod reservations;
mod retry;
mod target;
mod tls;
mod wait;

// A held lease: the handle, its guard, the state they share with the keepalive, why it ends, and
// its timing.
mod granted;
mod guard;
mod keepalive;
mod lease;
mod lease_calls;
mod lost;
mod renewer;
mod shared;
mod timing;

mod election;
mod error;
mod extension;
mod fence;
mod install;
pub mod limits;
mod listener;
mod listening;
mod semaphore;
pub mod sqlstate;
mod trace;

// Sharding: the slot map, the sharded client (and the gate that enforces the map on its
// clients), and moving a slot.
mod gate;
mod shard;
mod slot_map;
mod slot_move;

pub use acquire::AcquireBuilder;
pub use builder::ClientBuilder;
pub use calls::{
    BrowseQuery, HistoryQuery, MAX_DURATION, acquire, acquire_slot, browse, configuration,
    configure, configure_history, fence, force_release, high_water, history, inspect, list,
    list_slots, purge, raise_min_epoch, register_slot_waiter, register_waiter, release, renew,
    renew_many, slot_key, summary, transfer, watch,
};
pub use client::Client;
pub use confirmed::{ConfirmedConnect, drive_connection};
pub use connect_options::{ConnectOptions, ENVIRONMENT};
pub use election::{Election, Leader, LeaderStream};
pub use error::{Error, Result};
pub use extension::{
    CONTROL, EXTENSIONS, Extension, LOCK_KEY, MIGRATIONS, Migration, PG_LEASE, PG_LEASE_QUEUE,
    VERSION,
};
pub use fence::Fence;
pub use guard::LeaseGuard;
pub use identity::hostname;
pub use install::{Installed, Via, check_version, create_extension, install, installed};
pub use lease::Lease;
pub use listening::{Listener, Subscription};
pub use lost::LostReason;
pub use results::{
    BrowsedLease, Configuration, EndedBy, Grant, Handover, HistoryEntry, KeyRenewal, KeyState,
    LeaseCounts, LeaseState, ListedLease, Renewal, SlotGrant, SlotState, SlotWaiter, Status,
    Transfer, Waiter, Watched,
};
pub use semaphore::Semaphore;
pub use shard::ShardedClient;
pub use slot_map::{
    DEFAULT_SLOTS, MAX_SHARD_NAME_BYTES, MAX_SLOTS, Route, SlotMap, SlotMapError, SlotRange,
    fnv1a_64, routing_key,
};
pub use slot_move::{SlotMove, Transferred};
pub use tls::{SslMode, TlsConnector};

/// The connection pool crate the [`Client`] is built on (for [`ClientBuilder::from_pool`]).
pub use deadpool_postgres;
/// The cancellation token type of [`Lease::token`](crate::LeaseGuard::token).
pub use tokio_util::sync::CancellationToken;
