//! PostgreSQL-native leases with fencing epochs: a typed client for the pg_lease SQL API.
//!
//! pg_lease (schema `lease`) grants a named key to one owner at a time, until server time + ttl
//! unless renewed. Every grant carries a fencing epoch greater than all earlier epochs of the key, so
//! a resource that records the highest epoch it has seen can reject a former holder. The server's
//! clock is the only clock, and every call is one statement that commits or rolls back with the
//! caller's transaction.
//!
//! # Layers
//!
//! - **Calls** ([`acquire`], [`renew`], [`release`], [`inspect`], [`list`], [`purge`]): one async
//!   function per SQL function, generic over [`tokio_postgres::GenericClient`], so each runs on a
//!   `Client` (autocommit) or inside a `Transaction`. They return typed rows ([`Grant`],
//!   [`Renewal`], [`Status`], [`LeaseState`], [`ListedLease`]) and never panic on what the server
//!   sends; they hold no state of their own.
//! - **Installation** ([`install()`], [`create_extension`], [`installed`], [`check_version`]):
//!   puts the SQL API into a database, either with `CREATE EXTENSION` or, on managed PostgreSQL
//!   without the extension files, by running the extension's own scripts ([`MIGRATIONS`]).
//! - **Errors** ([`Error`], [`sqlstate`]): one opaque error type; server errors keep their SQLSTATE,
//!   and [`sqlstate`] is the single table of the codes pg_lease raises.
//!
//! Handles that own a lease (keepalive, fencing helpers, leader election) build on the calls layer.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! #[tokio::main]
//! async fn main() -> pglease::Result<()> {
//!     let (mut client, connection) =
//!         tokio_postgres::connect("host=localhost user=app dbname=app", tokio_postgres::NoTls)
//!             .await?;
//!     tokio::spawn(connection);
//!
//!     pglease::install(&mut client).await?; // no-op when already installed
//!     pglease::check_version(&client).await?;
//!
//!     let ttl = Duration::from_secs(30);
//!     let Some(grant) = pglease::acquire(&client, "job-42", "worker-a1", ttl, Duration::ZERO).await?
//!     else {
//!         println!("job-42 is held by another worker");
//!         return Ok(());
//!     };
//!     // ... work, presenting grant.epoch to every fenced resource ...
//!     let renewal = pglease::renew(&client, "job-42", "worker-a1", grant.epoch, ttl).await?;
//!     if !renewal.status.is_ok() {
//!         println!("lost job-42 ({}): stop acting on it", renewal.status);
//!         return Ok(());
//!     }
//!     let status = pglease::release(&client, "job-42", "worker-a1", grant.epoch).await?;
//!     println!("released: {status}");
//!
//!     match pglease::acquire(&client, "", "worker-a1", ttl, Duration::ZERO).await {
//!         Err(e) if e.is_invalid_input() => println!("rejected: {}", e.detail().unwrap_or("")),
//!         other => println!("unexpected: {other:?}"),
//!     }
//!     Ok(())
//! }
//! ```

#![warn(missing_docs)]

mod calls;
mod error;
mod install;
pub mod sqlstate;

pub use calls::{
    Grant, LeaseState, ListedLease, MAX_DURATION, Renewal, Status, acquire, inspect, list, purge,
    release, renew,
};
pub use error::{Error, Result};
pub use install::{
    CONTROL, Installed, LOCK_KEY, MIGRATIONS, Migration, VERSION, Via, check_version,
    create_extension, install, installed,
};
