//! The [`Consumer`] and its [`ConsumerBuilder`]: which partitions to claim and how to share them
//! with other consumers, the run loop that claims, balances and drives one worker per partition
//! (`worker.rs`), and shutdown.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::{Instant, sleep_until};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::Type;
use tokio_postgres::{Config, NoTls, Socket, Transaction};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::balance::{self, View};
use crate::error::{Error, Result};
use crate::listener::{self, Connect, Hub};
use crate::message::Delivery;
use crate::producer::check_queue_name;
use crate::sql::{self, from_micros, get, micros, one};
use crate::trace;
use crate::worker::{AtLeastOnce, Claimed, Exit, Process, Transactional};

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

/// Which partitions a consumer claims.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Assignment {
    /// Free partitions, as many as its share (and at most `max`), sharing with the other balanced
    /// consumers of the queue.
    Balanced { max: Option<u32> },
    /// Exactly these partitions, claimed whenever they are free.
    Fixed(BTreeSet<u32>),
}

/// Builds a [`Consumer`]; start with [`Consumer::builder`].
///
/// | setting | default |
/// | --- | --- |
/// | which partitions | balanced: a fair share of all ([`max_partitions`](Self::max_partitions), [`partitions`](Self::partitions)) |
/// | [`ttl`](Self::ttl) of the partition leases | 30 s |
/// | [`batch_size`](Self::batch_size) | 100 |
/// | [`retry_backoff`](Self::retry_backoff) of a failed message | 1 s doubling to 5 min |
/// | waiting | polling every [`poll_interval`](Self::poll_interval) (1 s), unless [`listen`](Self::listen) |
/// | [`rebalance_interval`](Self::rebalance_interval) | 5 s |
/// | [`on_shutdown`](Self::on_shutdown) | [`OnShutdown::Finish`] |
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: pglease::Client) -> pglease_queue::Result<()> {
/// use std::time::Duration;
///
/// let consumer = pglease_queue::Consumer::builder(client, "orders")
///     .max_partitions(4)
///     .ttl(Duration::from_secs(15))
///     .batch_size(50)
///     .listen("host=db.example user=app dbname=app".parse().expect("valid conninfo"))
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct ConsumerBuilder {
    client: pglease::Client,
    queue: String,
    assignment: Assignment,
    ttl: Duration,
    batch_size: u32,
    backoff: Backoff,
    poll_interval: Duration,
    rebalance_interval: Duration,
    on_shutdown: OnShutdown,
    listen: Option<Connect>,
}

impl std::fmt::Debug for ConsumerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("queue", &self.queue)
            .field("assignment", &self.assignment)
            .field("ttl", &self.ttl)
            .field("batch_size", &self.batch_size)
            .field("backoff", &self.backoff)
            .field("poll_interval", &self.poll_interval)
            .field("rebalance_interval", &self.rebalance_interval)
            .field("on_shutdown", &self.on_shutdown)
            .field("listen", &self.listen.is_some())
            .finish()
    }
}

impl ConsumerBuilder {
    /// Claims exactly these partitions (each whenever it is free), instead of balancing. Such a
    /// consumer does not count as a member for the balanced ones, which leave its partitions
    /// alone.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders").partitions([0, 3]);
    /// # }
    /// ```
    pub fn partitions(mut self, partitions: impl IntoIterator<Item = u32>) -> ConsumerBuilder {
        self.assignment = Assignment::Fixed(partitions.into_iter().collect());
        self
    }

    /// Balances (the default) and holds at most `n` partitions, fewer if its share is smaller.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders").max_partitions(2);
    /// # }
    /// ```
    pub fn max_partitions(mut self, n: u32) -> ConsumerBuilder {
        self.assignment = Assignment::Balanced { max: Some(n) };
        self
    }

    /// The ttl of the partition leases (and of the membership lease): a consumer that stops
    /// renewing loses its partitions after it, and the next holder gets its open batch again.
    /// The keepalive renews at the client's [`renew_fraction`](pglease::ClientBuilder::renew_fraction)
    /// of it, and so does every `receive`. Default 30 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders").ttl(std::time::Duration::from_secs(10));
    /// # }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> ConsumerBuilder {
        self.ttl = ttl;
        self
    }

    /// The most messages per batch (1 to 10 000). Default 100.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders").batch_size(10);
    /// # }
    /// ```
    pub fn batch_size(mut self, n: u32) -> ConsumerBuilder {
        self.batch_size = n;
        self
    }

    /// The delay before a message whose handler failed is delivered again (it is `nack`ed with
    /// it). Default: [`Backoff::default`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// use std::time::Duration;
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .retry_backoff(pglease_queue::Backoff::new(Duration::from_millis(200), Duration::from_secs(60)));
    /// # }
    /// ```
    pub fn retry_backoff(mut self, backoff: Backoff) -> ConsumerBuilder {
        self.backoff = backoff;
        self
    }

    /// Waits for new messages on a connection of its own that `LISTEN`s on channel
    /// `lease_queue` (one per consumer, opened with `config`, without TLS): an idle partition
    /// sleeps until a notification for it, until its next message is due (`next_due`), or a
    /// third of the ttl, whichever comes first.
    ///
    /// Without it (behind a transaction-mode pooler, where `LISTEN` does not work, or for a queue
    /// created with `notify => false`) the consumer polls every
    /// [`poll_interval`](Self::poll_interval).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) -> Result<(), tokio_postgres::Error> {
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .listen("host=db.example user=app dbname=app".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen(self, config: Config) -> ConsumerBuilder {
        self.listen_with(config, NoTls)
    }

    /// As [`listen`](Self::listen), with the TLS connector `tls`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client, config: tokio_postgres::Config) {
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .listen_with(config, tokio_postgres::NoTls);
    /// # }
    /// ```
    pub fn listen_with<T>(mut self, config: Config, tls: T) -> ConsumerBuilder
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        self.listen = Some(listener::connector(config, tls));
        self
    }

    /// The longest an idle partition sleeps without a listening connection (pooler mode, or while
    /// the listening connection is down). Default 1 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .poll_interval(std::time::Duration::from_millis(250));
    /// # }
    /// ```
    pub fn poll_interval(mut self, interval: Duration) -> ConsumerBuilder {
        self.poll_interval = interval;
        self
    }

    /// How often the consumer looks at the other consumers and claims or gives up partitions
    /// (and retries claiming the partitions of a fixed list that were busy). Default 5 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .rebalance_interval(std::time::Duration::from_secs(1));
    /// # }
    /// ```
    pub fn rebalance_interval(mut self, interval: Duration) -> ConsumerBuilder {
        self.rebalance_interval = interval;
        self
    }

    /// What to do with open batches on [`Consumer::stop`]. Default [`OnShutdown::Finish`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let b = pglease_queue::Consumer::builder(client, "orders")
    ///     .on_shutdown(pglease_queue::OnShutdown::Abandon);
    /// # }
    /// ```
    pub fn on_shutdown(mut self, what: OnShutdown) -> ConsumerBuilder {
        self.on_shutdown = what;
        self
    }

    /// Checks the settings and makes the consumer (it connects nothing until
    /// [`Consumer::run`]).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] (no code): a bad queue name, a batch size outside 1..=10 000, a
    /// partition above 1023, a zero interval, or an owner too long for the membership key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) -> pglease_queue::Result<()> {
    /// let consumer = pglease_queue::Consumer::builder(client, "orders").build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Consumer> {
        check_queue_name(&self.queue)?;
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(Error::invalid_argument(format!(
                "batch_size must be 1 to 10000, got {}",
                self.batch_size
            )));
        }
        if self.poll_interval.is_zero() || self.rebalance_interval.is_zero() || self.ttl.is_zero() {
            return Err(Error::invalid_argument(
                "ttl, poll_interval and rebalance_interval must be positive",
            ));
        }
        match &self.assignment {
            Assignment::Fixed(list) if list.is_empty() => {
                return Err(Error::invalid_argument("the list of partitions is empty"));
            }
            Assignment::Fixed(list) if list.iter().any(|p| *p > 1023) => {
                return Err(Error::invalid_argument("partitions are 0 to 1023"));
            }
            Assignment::Balanced { max: Some(0) } => {
                return Err(Error::invalid_argument("max_partitions must be at least 1"));
            }
            _ => {}
        }
        let owner = self.client.owner().to_owned();
        let member_key = format!("{}{owner}", balance::member_prefix(&self.queue));
        if !pglease::limits::is_valid_name(&member_key) {
            return Err(Error::invalid_argument(format!(
                "owner and queue name are too long for the membership key (at most {} bytes)",
                pglease::limits::MAX_NAME_BYTES
            )));
        }
        Ok(Consumer {
            inner: Arc::new(Inner {
                queue: Arc::from(self.queue.as_str()),
                client: self.client,
                owner,
                member_key,
                assignment: self.assignment,
                ttl: self.ttl,
                batch_size: i32::try_from(self.batch_size).unwrap_or(10_000),
                backoff: self.backoff,
                poll_interval: self.poll_interval,
                rebalance_interval: self.rebalance_interval,
                on_shutdown: self.on_shutdown,
                listen: self.listen,
                stop: CancellationToken::new(),
                running: AtomicBool::new(false),
                owned: Mutex::default(),
                delivered: Arc::default(),
            }),
        })
    }
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
/// - **Waiting.** See [`ConsumerBuilder::listen`].
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
    inner: Arc<Inner>,
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
    member_key: String,
    assignment: Assignment,
    pub(crate) ttl: Duration,
    pub(crate) batch_size: i32,
    pub(crate) backoff: Backoff,
    pub(crate) poll_interval: Duration,
    rebalance_interval: Duration,
    pub(crate) on_shutdown: OnShutdown,
    listen: Option<Connect>,
    pub(crate) stop: CancellationToken,
    running: AtomicBool,
    /// The partitions held now (for [`Consumer::partitions`]).
    owned: Mutex<BTreeSet<u32>>,
    delivered: Arc<AtomicU64>,
}

/// The state of one run that its workers share.
pub(crate) struct Run<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) hub: Option<Arc<Hub>>,
}

/// What one rebalancing round decided.
#[derive(Default)]
struct Plan {
    claimed: Vec<Claimed>,
    /// How many partitions to give up.
    surplus: usize,
    /// An error that ends the run (the queue does not exist).
    fatal: Option<Error>,
}

impl Consumer {
    /// A builder for a consumer of `queue` that claims under `client`'s owner and keeps its
    /// partitions alive with `client`'s keepalive. Give each consumer its own client (two
    /// consumers of one owner would be one consumer to the server).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) {
    /// let builder = pglease_queue::Consumer::builder(client, "orders");
    /// # }
    /// ```
    pub fn builder(client: pglease::Client, queue: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder {
            client,
            queue: queue.into(),
            assignment: Assignment::Balanced { max: None },
            ttl: Duration::from_secs(30),
            batch_size: 100,
            backoff: Backoff::default(),
            poll_interval: Duration::from_secs(1),
            rebalance_interval: Duration::from_secs(5),
            on_shutdown: OnShutdown::Finish,
            listen: None,
        }
    }

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

    /// How many notifications woke one of its partitions (for tests and diagnostics).
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

    /// The run loop, for either way of handling.
    async fn run_with<P: Process>(&self, process: &P) -> Result<()> {
        let inner = &*self.inner;
        if inner.running.swap(true, Ordering::SeqCst) {
            return Err(Error::invalid_argument("the consumer is already running"));
        }
        let _running = Running(inner);
        let partitions = inner.partition_count().await?;
        if let Assignment::Fixed(list) = &inner.assignment
            && let Some(p) = list.iter().find(|p| **p >= partitions)
        {
            return Err(Error::invalid_argument(format!(
                "partition {p} is out of range: queue {:?} has {partitions}",
                &*inner.queue
            )));
        }
        let run_token = CancellationToken::new();
        let _end = run_token.clone().drop_guard();
        let hub = inner.listen.as_ref().map(|connect| {
            listener::start(
                Arc::clone(connect),
                &inner.queue,
                Arc::clone(&inner.delivered),
                run_token.child_token(),
            )
        });
        if let Some(hub) = &hub {
            // Listen before the first receive; poll meanwhile if the server is slow to answer.
            hub.ready(Duration::from_secs(5)).await;
        }
        let mut membership = match &inner.assignment {
            Assignment::Balanced { .. } => Some(inner.join().await?),
            Assignment::Fixed(_) => None,
        };
        tracing::info!(
            target: trace::CONSUMER,
            queue = &*inner.queue,
            owner = inner.owner.as_str(),
            partitions,
            "consumer started"
        );

        let run = Run {
            inner,
            hub: hub.clone(),
        };
        let run = &run;
        let mut workers = FuturesUnordered::new();
        // Each held partition's release request (cancelled: give it up after its batch).
        let mut held: HashMap<u32, CancellationToken> = HashMap::new();
        let mut planning: Option<Pin<Box<dyn Future<Output = Plan> + Send + '_>>> = None;
        let mut next_round = Instant::now();
        let mut fatal = None;

        loop {
            tokio::select! {
                biased;
                () = inner.stop.cancelled() => break,
                Some((partition, exit)) = workers.next(), if !workers.is_empty() => {
                    held.remove(&partition);
                    inner.set_owned(&held);
                    if let Exit::Failed(e) = exit
                        && e.is_queue_not_found()
                    {
                        fatal = Some(e);
                        break;
                    }
                }
                plan = async { planning.as_mut().expect("guarded").await }, if planning.is_some() => {
                    planning = None;
                    next_round = Instant::now() + inner.rebalance_interval;
                    if let Some(e) = plan.fatal {
                        fatal = Some(e);
                        break;
                    }
                    for claimed in plan.claimed {
                        let release = CancellationToken::new();
                        held.insert(claimed.partition, release.clone());
                        workers.push(run.work(claimed, process, release));
                    }
                    // Give up the surplus: the highest partitions not already going.
                    let mut going: Vec<u32> = held
                        .iter()
                        .filter(|(_, t)| !t.is_cancelled())
                        .map(|(p, _)| *p)
                        .collect();
                    going.sort_unstable_by(|a, b| b.cmp(a));
                    for p in going.into_iter().take(plan.surplus) {
                        held[&p].cancel();
                    }
                    inner.set_owned(&held);
                }
                () = sleep_until(next_round), if planning.is_none() => {
                    if membership.as_ref().is_some_and(|lease| !lease.is_held()) {
                        // Lost (e.g. the server was unreachable for a ttl): take it again without
                        // waiting, so the workers are not held up; else at the next round.
                        match inner.client.try_acquire(&inner.member_key, inner.ttl).await {
                            Ok(Some(lease)) => membership = Some(lease),
                            Ok(None) => {}
                            Err(e) => tracing::warn!(
                                target: trace::CONSUMER,
                                queue = &*inner.queue,
                                owner = inner.owner.as_str(),
                                error = %e,
                                sqlstate = e.code(),
                                "could not renew the consumer's membership; retrying at the next round"
                            ),
                        }
                    }
                    let keep: Vec<u32> = held
                        .iter()
                        .filter(|(_, t)| !t.is_cancelled())
                        .map(|(p, _)| *p)
                        .collect();
                    planning = Some(Box::pin(inner.plan(keep, partitions)));
                }
            }
        }

        // Stopping: finish the round in flight (so nothing it claimed is left behind), then let
        // every worker finish or abandon its batch and release its partition.
        inner.stop.cancel();
        if let Some(planning) = planning.take() {
            let plan = planning.await;
            for claimed in plan.claimed {
                let _ = claimed.lease.release().await;
            }
        }
        while let Some((partition, exit)) = workers.next().await {
            held.remove(&partition);
            inner.set_owned(&held);
            if let Exit::Failed(e) = exit
                && fatal.is_none()
                && e.is_queue_not_found()
            {
                fatal = Some(e);
            }
        }
        if let Some(lease) = membership {
            let _ = lease.release().await;
        }
        tracing::info!(
            target: trace::CONSUMER,
            queue = &*inner.queue,
            owner = inner.owner.as_str(),
            "consumer stopped"
        );
        fatal.map_or(Ok(()), Err)
    }
}

/// Clears the running flag when a run ends.
struct Running<'a>(&'a Inner);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
        self.0
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl Inner {
    fn set_owned(&self, held: &HashMap<u32, CancellationToken>) {
        let mut owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        owned.clear();
        owned.extend(held.keys().copied());
    }

    /// The queue's number of partitions (`LQ001` if there is no such queue).
    async fn partition_count(&self) -> Result<u32> {
        let conn = self.client.pool().get().await?;
        let queue: &str = &self.queue;
        // Raises the server's LQ001 if there is no such queue.
        sql::query(&**conn, sql::QUEUE_EXISTS, &[(&queue, Type::TEXT)]).await?;
        let rows = sql::query(&**conn, sql::PARTITIONS, &[(&queue, Type::TEXT)]).await?;
        match rows.first() {
            None => Err(Error::protocol(format!("queue {queue:?} vanished"))),
            Some(row) => {
                let n: i32 = get(row, 0, "lease_queue.list_queues")?;
                u32::try_from(n).map_err(|_| Error::protocol("negative number of partitions"))
            }
        }
    }

    /// Takes the membership lease of a balanced consumer.
    async fn join(&self) -> Result<pglease::Lease> {
        match self.client.try_acquire(&self.member_key, self.ttl).await? {
            Some(lease) => Ok(lease),
            None => {
                // Held by this owner's earlier lease (lapsing) or by another consumer of it.
                match self
                    .client
                    .acquire(&self.member_key, self.ttl, self.ttl * 2)
                    .await
                {
                    Ok(lease) => Ok(lease),
                    Err(e) if e.is_wait_timeout() => Err(Error::invalid_argument(format!(
                        "another consumer with owner {:?} consumes queue {:?}",
                        self.owner, &*self.queue
                    ))),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// One rebalancing round: claims what the assignment asks for, given the partitions held
    /// (and not being given up), and says how many to give up.
    async fn plan(&self, keep: Vec<u32>, partitions: u32) -> Plan {
        let mut plan = Plan::default();
        let result = match &self.assignment {
            Assignment::Fixed(list) => {
                let wanted: Vec<u32> = list.iter().filter(|p| !keep.contains(p)).copied().collect();
                self.claim_each(&wanted, &mut plan).await
            }
            Assignment::Balanced { max } => self.balance(&keep, partitions, *max, &mut plan).await,
        };
        if let Err(e) = result {
            if e.is_queue_not_found() {
                plan.fatal = Some(e);
            } else {
                tracing::warn!(
                    target: trace::CONSUMER,
                    queue = &*self.queue,
                    owner = self.owner.as_str(),
                    error = %e,
                    sqlstate = e.code(),
                    "rebalancing failed; retrying at the next round"
                );
            }
        }
        plan
    }

    async fn claim_each(&self, wanted: &[u32], plan: &mut Plan) -> Result<()> {
        for p in wanted {
            if let Some(claimed) = self.claim(Some(*p)).await? {
                plan.claimed.push(claimed);
            }
        }
        Ok(())
    }

    async fn balance(
        &self,
        keep: &[u32],
        partitions: u32,
        max: Option<u32>,
        plan: &mut Plan,
    ) -> Result<()> {
        let mut view = View::default();
        for listed in self
            .client
            .list(Some(&balance::member_prefix(&self.queue)))
            .await?
        {
            if let (true, Some(owner)) = (listed.state.held, listed.state.owner) {
                view.members.insert(owner);
            }
        }
        for listed in self
            .client
            .list(Some(&balance::partition_prefix(&self.queue)))
            .await?
        {
            if let (true, Some(owner)) = (listed.state.held, listed.state.owner) {
                view.holders.push(owner);
            }
        }
        let target = balance::target(partitions, &view, &self.owner, max) as usize;
        let have = keep.len();
        tracing::debug!(
            target: trace::CONSUMER,
            queue = &*self.queue,
            owner = self.owner.as_str(),
            members = view.members.len(),
            target,
            have,
            "rebalancing"
        );
        if have > target {
            plan.surplus = have - target;
            return Ok(());
        }
        while have + plan.claimed.len() < target {
            match self.claim(None).await? {
                Some(claimed) => plan.claimed.push(claimed),
                None => break,
            }
        }
        Ok(())
    }

    /// Claims partition `p` (`claim`), or any free one (`claim_any`), and puts its lease under
    /// the client's keepalive.
    async fn claim(&self, p: Option<u32>) -> Result<Option<Claimed>> {
        let conn = self.client.pool().get().await?;
        let ttl = micros(self.ttl);
        let queue: &str = &self.queue;
        let sent_at = std::time::Instant::now();
        let (partition, epoch, expires_at, left) = match p {
            Some(p) => {
                let p = i32::try_from(p).unwrap_or(i32::MAX);
                let row = one(
                    sql::query(
                        &**conn,
                        sql::CLAIM,
                        &[
                            (&queue, Type::TEXT),
                            (&p, Type::INT4),
                            (&self.owner, Type::TEXT),
                            (&ttl, Type::INT8),
                        ],
                    )
                    .await?,
                    "lease_queue.claim",
                )?;
                if !get::<bool>(&row, 0, "lease_queue.claim")? {
                    return Ok(None);
                }
                (
                    p,
                    get::<i64>(&row, 1, "lease_queue.claim")?,
                    get(&row, 2, "lease_queue.claim")?,
                    get::<i64>(&row, 3, "lease_queue.claim")?,
                )
            }
            None => {
                let row = one(
                    sql::query(
                        &**conn,
                        sql::CLAIM_ANY,
                        &[
                            (&queue, Type::TEXT),
                            (&self.owner, Type::TEXT),
                            (&ttl, Type::INT8),
                        ],
                    )
                    .await?,
                    "lease_queue.claim_any",
                )?;
                if !get::<bool>(&row, 0, "lease_queue.claim_any")? {
                    return Ok(None);
                }
                (
                    get::<i32>(&row, 1, "lease_queue.claim_any")?,
                    get::<i64>(&row, 2, "lease_queue.claim_any")?,
                    get(&row, 3, "lease_queue.claim_any")?,
                    get::<i64>(&row, 4, "lease_queue.claim_any")?,
                )
            }
        };
        drop(conn);
        let partition =
            u32::try_from(partition).map_err(|_| Error::protocol("negative partition"))?;
        let grant = pglease::Grant { epoch, expires_at };
        let key = balance::partition_key(queue, partition);
        let lease = self
            .client
            .adopt(&key, grant, self.ttl, sent_at, from_micros(left))?;
        tracing::info!(
            target: trace::CONSUMER,
            queue,
            partition,
            owner = self.owner.as_str(),
            epoch,
            ttl = ?self.ttl,
            "partition claimed"
        );
        Ok(Some(Claimed { partition, lease }))
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
