//! The [`Consumer`]: a consumer of one queue, what it holds, how it is run (at least once or in
//! transactions) and stopped. Its settings are `builder.rs`, its run loop `run.rs`, its
//! rebalancing rounds `rebalance.rs`, each partition's worker `worker.rs`.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::Transaction;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::builder::Assignment;
use crate::error::Result;
use crate::message::Delivery;
use crate::process::{AtLeastOnce, Process, Transactional};
use crate::waiting::Listening;

/// The future a transactional handler returns (see [`Consumer::run_transactional`]).
pub type TxFuture<'t, E> = Pin<Box<dyn Future<Output = std::result::Result<(), E>> + Send + 't>>;

/// What a consumer does with its open batches when it is stopped ([`Consumer::stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnShutdown {
    /// Finish the open batches (handle the rest of each, ack it), then release the partitions.
    /// The default.
    #[default]
    Finish,
    /// Stop handling at once (the handler's future is dropped; a transactional handler's
    /// transaction rolls back), and release the partitions with `force`, which puts the open
    /// batches back: the next holder gets them again, with the delivery counted.
    Abandon,
}

/// A consumer of one queue: claims partitions (a fixed list, or a fair share balanced with the
/// other consumers), and for each one loops `receive` → handler → `ack`, until it is stopped or
/// loses the partition.
///
/// - **Leases.** Each partition is owned through its pg_lease lease, claimed with
///   `lease_queue.claim`/`claim_any` and kept alive by the [`pglease::Client`]'s keepalive
///   ([`pglease::Client::adopt`]). Its loss is signalled before a successor can claim the
///   partition, and the consumer stops handling the partition at once (the handler's future is
///   dropped): the successor gets the open batch again.
/// - **Failures.** A handler error `nack`s the message with [`Backoff`]; the queue then holds back
///   only that message's key (the key's later messages in the batch go back undelivered and are
///   not handed to the handler), and makes it a dead letter after the queue's `max_attempts`.
/// - **Waiting.** See [`ConsumerBuilder::listen`](crate::ConsumerBuilder::listen).
/// - **Stopping.** [`Consumer::stop`] (or cancelling [`Consumer::stop_token`]): no new batches;
///   the open ones are finished or abandoned ([`OnShutdown`]); every partition is released, so
///   other consumers can claim it at once.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let conninfo = "host=db.example user=app dbname=app";
/// let client = pglease::Client::connect(conninfo).await?;
/// let consumer = pglease_queue::Consumer::builder(client, "orders")
///     .listen(conninfo.parse()?)
///     .build()?;
/// let stop = consumer.stop_token();
/// tokio::spawn(async move {
///     let _ = tokio::signal::ctrl_c().await;
///     stop.cancel();
/// });
/// consumer
///     .run(|delivery: pglease_queue::Delivery| async move {
///         println!("{:?}: {}", delivery.key(), delivery.payload());
///         Ok::<(), std::io::Error>(())
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Consumer {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &&*self.inner.queue)
            .field("owner", &self.inner.owner)
            .field("partitions", &self.partitions())
            .field("stopped", &self.inner.stop.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Everything a consumer's run needs; shared with its workers.
pub(crate) struct Inner {
    pub(crate) queue: Arc<str>,
    pub(crate) client: pglease::Client,
    pub(crate) owner: String,
    pub(crate) member_key: String,
    pub(crate) assignment: Assignment,
    pub(crate) ttl: Duration,
    pub(crate) batch_size: i32,
    pub(crate) backoff: Backoff,
    pub(crate) poll_interval: Duration,
    pub(crate) rebalance_interval: Duration,
    pub(crate) on_shutdown: OnShutdown,
    /// How it waits for new messages when it listens (else it polls).
    pub(crate) listen: Option<Listening>,
    pub(crate) stop: CancellationToken,
    pub(crate) running: AtomicBool,
    /// The partitions held now (for [`Consumer::partitions`]).
    pub(crate) owned: Mutex<BTreeSet<u32>>,
    /// Idle sleeps of its partitions that a notification ended.
    pub(crate) delivered: AtomicU64,
}

impl Consumer {
    /// The queue consumed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// println!("consuming {}", consumer.queue());
    /// # }
    /// ```
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// The owner identity its claims present (its client's).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// println!("I am {}", consumer.owner());
    /// # }
    /// ```
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The partitions it holds now, in order.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// println!("holding {:?}", consumer.partitions());
    /// # }
    /// ```
    pub fn partitions(&self) -> Vec<u32> {
        self.inner
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    /// Stops the consumer: [`run`](Self::run) stops taking batches, finishes or abandons the open
    /// ones ([`OnShutdown`]), releases its partitions and returns. A stopped consumer stays
    /// stopped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// consumer.stop();
    /// # }
    /// ```
    pub fn stop(&self) {
        self.inner.stop.cancel();
    }

    /// A token whose cancellation stops the consumer (as [`Consumer::stop`]), for a signal
    /// handler or a parent task.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// let token = consumer.stop_token();
    /// tokio::spawn(async move {
    ///     let _ = tokio::signal::ctrl_c().await;
    ///     token.cancel();
    /// });
    /// # }
    /// ```
    pub fn stop_token(&self) -> pglease::CancellationToken {
        self.inner.stop.clone()
    }

    /// How many idle sleeps of its partitions a notification ended (or the loss of the listening
    /// connection, which wakes them all), for tests and diagnostics.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(consumer: &pglease_queue::Consumer) {
    /// println!("{} wake-ups by notification", consumer.notifications_delivered());
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn notifications_delivered(&self) -> u64 {
        self.inner.delivered.load(Ordering::Relaxed)
    }

    /// Runs the consumer until it is stopped, handling each message with `handler` (at least
    /// once).
    ///
    /// Messages of a batch are handled one after another, in delivery order (within a key, in
    /// the key's order); the partitions run concurrently on the task that polls this future. A
    /// handler `Ok` counts as done: the batch is acked when all its messages are done. A handler
    /// `Err` nacks the message (its error's `Display` is the dead letter's reason), and the key's
    /// later messages in the batch are skipped (the queue sent them back undelivered).
    ///
    /// A message is handled **at least once**: after a lost partition, a crash or an abandoned
    /// batch it is delivered again ([`Delivery::is_redelivery`]), so make the handler's effects
    /// idempotent, or fence them with [`Delivery::epoch`]. For exactly-once effects inside the
    /// database use [`Consumer::run_transactional`].
    ///
    /// # Errors
    ///
    /// - [`Error::is_queue_not_found`] (`LQ001`): the queue does not exist (or was dropped).
    /// - [`Error::is_invalid_input`]: a partition of the fixed list is out of range for the
    ///   queue, or the consumer is already running, or another consumer of this client consumes
    ///   the queue.
    /// - [`Error::is_closed`]: the client was shut down.
    ///
    /// [`Error::is_queue_not_found`]: crate::Error::is_queue_not_found
    /// [`Error::is_invalid_input`]: crate::Error::is_invalid_input
    /// [`Error::is_closed`]: crate::Error::is_closed
    ///
    /// Connection errors and losses are not errors of the run: they are logged and retried.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops handling at once; the partitions' leases are then released in
    /// the background (open batches stay open and go to the next holder). Prefer
    /// [`Consumer::stop`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(consumer: pglease_queue::Consumer) -> pglease_queue::Result<()> {
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// consumer
    ///     .run(|d: pglease_queue::Delivery| async move {
    ///         let order: Order = d.payload_as()?;
    ///         println!("order {} (epoch {})", order.id, d.epoch());
    ///         Ok::<(), pglease_queue::Error>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn run<F, Fut, E>(&self, handler: F) -> Result<()>
    where
        F: Fn(Delivery) -> Fut + Sync,
        Fut: Future<Output = std::result::Result<(), E>> + Send,
        E: Display,
    {
        self.run_with(&AtLeastOnce(handler)).await
    }

    /// Runs the consumer until it is stopped, handling each batch in **one transaction that
    /// also acks it**: exactly-once effects inside the database.
    ///
    /// For each batch the consumer opens a transaction on a pooled connection; each message is
    /// handled in a savepoint of it, and `handler` gets that savepoint (a [`Transaction`]) to
    /// write with. `Ok` keeps the message's writes; `Err` rolls them back and nacks the message
    /// in the same transaction. Then the batch is acked in it, and it commits.
    ///
    /// What is exactly-once, and what is not:
    ///
    /// - **Exactly once**: the handler's writes *in this transaction*. They commit together with
    ///   the ack, or not at all. The ack is fenced (`lease.fence`): if the partition was lost —
    ///   lapsed, taken over, or this process paused past its ttl (a zombie) — the ack fails with
    ///   `LE00x` and the whole transaction rolls back; if the ack passes, the lease row stays
    ///   locked until the commit, so no successor can be granted the partition (and receive the
    ///   batch again) before the writes are committed. A commit whose answer is lost is resolved
    ///   by the queue: if it committed, the batch is closed; if not, the same batch comes again
    ///   and nothing of it was applied.
    /// - **At least once**: anything else the handler does — HTTP calls, e-mails, writes on other
    ///   connections or databases. A batch whose transaction rolled back (a lost partition, a
    ///   failed commit, a crash) is handled again, by this or another consumer. Fence such effects
    ///   with [`Delivery::epoch`] (the external system rejects epochs lower than the highest it
    ///   has seen), or make them idempotent.
    /// - The handler runs **more than once** for the same message in those cases, even though its
    ///   database writes are applied once: do not count handler calls.
    ///
    /// Keep the transaction short (the batch size bounds it): the ack's fence takes the lease row
    /// `FOR SHARE`, which holds back the lease's own renewal until the commit, and the partition's
    /// row is locked from the first nack to the commit. The transaction runs at the connection's
    /// default isolation level (READ COMMITTED is what the queue expects).
    ///
    /// # Errors
    ///
    /// As [`Consumer::run`].
    ///
    /// # Cancel safety
    ///
    /// As [`Consumer::run`]; an open transaction rolls back.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(consumer: pglease_queue::Consumer) -> pglease_queue::Result<()> {
    /// consumer
    ///     .run_transactional(|tx, d| {
    ///         Box::pin(async move {
    ///             let id = d.id();
    ///             tx.execute("INSERT INTO processed (message_id) VALUES ($1)", &[&id]).await?;
    ///             Ok::<(), tokio_postgres::Error>(())
    ///         })
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn run_transactional<F, E>(&self, handler: F) -> Result<()>
    where
        F: for<'t> Fn(&'t Transaction<'t>, &'t Delivery) -> TxFuture<'t, E> + Sync,
        E: Display,
    {
        self.run_with(&Transactional(handler)).await
    }

    /// The run loop, for either way of handling (`run.rs`).
    async fn run_with<P: Process>(&self, process: &P) -> Result<()> {
        self.inner.run(process).await
    }
}

impl Inner {
    /// The notifications of `partition`, if the consumer listens.
    pub(crate) fn subscribe(&self, partition: u32) -> Option<pglease::Subscription> {
        self.listen
            .as_ref()?
            .subscribe(&self.client, &self.queue, partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only if both runs can be spawned on a multi-threaded runtime.
    #[allow(dead_code)]
    fn runs_are_send(consumer: &Consumer) {
        fn send<T: Send>(_: T) {}
        send(consumer.run(|_d: Delivery| async { Ok::<(), std::io::Error>(()) }));
        send(consumer.run_transactional(|tx, d| {
            Box::pin(async move {
                tx.execute("SELECT $1::bigint", &[&d.id()]).await?;
                Ok::<(), tokio_postgres::Error>(())
            })
        }));
    }
}
