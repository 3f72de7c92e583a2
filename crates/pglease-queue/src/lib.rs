//! Producer and consumer for **pg_lease_queue** (schema `lease_queue`), the ordered, partitioned
//! PostgreSQL queue whose partitions are owned through [`pglease`] leases and whose every
//! consuming call is fenced by the lease's epoch.
//!
//! This crate uses only `pglease`'s public API, as etcd's recipes use its session: a partition
//! is claimed with `lease_queue.claim` and handed to the [`pglease::Client`]'s keepalive with
//! [`pglease::Client::adopt`], so its loss is signalled before a successor can claim it.
//!
//! # Layers
//!
//! - **Producing** ([`Producer`], [`Message`]): `send` / `send_batch` on any
//!   [`tokio_postgres::GenericClient`], so a message commits in the caller's own transaction (a
//!   transactional outbox), or on a client's pool.
//! - **Consuming** ([`Consumer`], [`ConsumerBuilder`], [`Delivery`]): claims partitions (a fixed
//!   list, or a fair share balanced with the other consumers), keeps them alive, loops
//!   `receive` → handler → `ack`, nacks failures with [`Backoff`], waits on `LISTEN` (or polls
//!   behind a pooler), and releases its partitions when stopped ([`OnShutdown`]).
//!   [`Consumer::run`] handles at least once; [`Consumer::run_transactional`] gives the handler a
//!   transaction that commits with the ack: exactly-once effects inside the database.
//! - **Errors** ([`Error`]): opaque; [`Error::code`] is the SQLSTATE, with predicates for the
//!   queue's codes and [`Error::is_fenced`] for pg_lease's fencing codes.
//!
//! The SQL contract is `docs/QUEUE.md`; this client's is `docs/QUEUE-CLIENT.md`.
//!
//! # Example
//!
//! ```no_run
//! use pglease_queue::{Consumer, Delivery, Message, Producer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let conninfo = "host=localhost user=app dbname=app";
//!     let client = pglease::Client::connect(conninfo).await?;
//!
//!     // Produce: in your own transaction, with your own writes.
//!     let orders = Producer::new("orders")?;
//!     let mut db = client.pool().get().await?;
//!     let tx = db.transaction().await?;
//!     tx.execute("UPDATE carts SET checked_out = true WHERE id = 7", &[]).await?;
//!     orders.send(&*tx, &Message::new(&serde_json::json!({"cart": 7}))?.with_key("cart-7")).await?;
//!     tx.commit().await?;
//!
//!     // Consume: a fair share of the partitions, woken by notifications.
//!     let consumer = Consumer::builder(client, "orders").listen(conninfo.parse()?).build()?;
//!     let stop = consumer.stop_token();
//!     tokio::spawn(async move {
//!         let _ = tokio::signal::ctrl_c().await;
//!         stop.cancel(); // finish the open batches, release the partitions
//!     });
//!     consumer
//!         .run(|d: Delivery| async move {
//!             println!("{:?} #{} (attempt {}): {}", d.key(), d.id(), d.attempts(), d.payload());
//!             Ok::<(), std::io::Error>(())
//!         })
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! `examples/worker.rs` is a complete worker.

#![warn(missing_docs)]

mod backoff;
mod balance;
mod builder;
mod calls;
mod consumer;
mod error;
mod message;
mod pause;
mod process;
mod producer;
mod rebalance;
mod run;
mod settle;
mod sql;
mod trace;
mod waiting;
mod worker;

pub use backoff::Backoff;
pub use builder::ConsumerBuilder;
pub use consumer::{Consumer, OnShutdown, TxFuture};
pub use error::{Error, Result};
pub use message::{Delivery, MAX_KEY_BYTES, Message};
pub use producer::{MAX_QUEUE_NAME_BYTES, Producer};
