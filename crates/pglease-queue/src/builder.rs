//! [`ConsumerBuilder`]: which partitions a consumer claims and how it shares them, its leases'
//! ttl, batches, retry delays, how it waits for new messages, and how it stops.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::balance;
use crate::consumer::{Consumer, Inner, OnShutdown};
use crate::error::{Error, Result};
use crate::producer::check_queue_name;
use crate::waiting::Listening;

/// Which partitions a consumer claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Assignment {
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
    pub(crate) listen: Option<Listening>,
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
    /// renewing loses its partitions after it, and the next holder gets its open batch again. The
    /// keepalive renews at the client's [`renew_fraction`](pglease::ClientBuilder::renew_fraction)
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

    /// Waits for new messages with `LISTEN` on channel `lease_queue`: on the client's listening
    /// connection ([`pglease::Client::subscribe`]) when the client has one, so the process holds
    /// one listening connection, not two; else (a client in pooler mode, or built from a pool
    /// without one) on a connection of its own opened with `config`, without TLS (for TLS use
    /// [`listen_options`](Self::listen_options)) ([`pglease::Listener`]). An idle partition sleeps until a notification for it, until its
    /// next message is due (`next_due`), or a third of the ttl, whichever comes first.
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

    /// As [`listen`](Self::listen), connecting as `options` say (TLS included).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: pglease::Client) -> pglease::Result<()> {
    /// let options = pglease::ConnectOptions::parse("host=db.example user=app sslmode=require")?;
    /// let b = pglease_queue::Consumer::builder(client, "orders").listen_options(&options);
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen_options(self, options: &pglease::ConnectOptions) -> ConsumerBuilder {
        self.listen_with(options.config().clone(), options.tls())
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
        self.listen = Some(Listening::with_tls(config, tls));
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
                delivered: AtomicU64::new(0),
            }),
        })
    }
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
}
