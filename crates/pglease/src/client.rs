//! The [`Client`]: acquires leases (at once, or waiting without polling), keeps them alive, and
//! owns the connections that do so.
//!
//! A client holds a connection pool (deadpool-postgres) for short calls: acquires, renewals,
//! releases, inspections. Waiting for a key never holds a pooled connection (`wait.rs`). One
//! acquire attempt is made here: it reserves the key in the client (`slots.rs`), sends the acquire,
//! releases in the background whatever an unanswered or abandoned acquire may have granted, and
//! hands a grant to its keepalive task (`keepalive.rs`).
//!
//! The client is made by [`crate::ClientBuilder`] (`builder.rs`, which also holds
//! [`Client::connect`] and [`Client::builder`]); its elections by [`Client::election`]
//! (`election.rs`). Its reads (inspect, history, list, browse, summary, high_water) are in
//! `client/reads.rs`.

mod reads;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acquire::AcquireBuilder;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::gate::{Gate, Permit};
use crate::granted::Granted;
use crate::guard::LeaseGuard;
use crate::identity::default_owner;
use crate::lease::Lease;
use crate::listener::{self, Listener};
use crate::pooled::{Connections, Statements};
use crate::renewer::Renewer;
use crate::reservations::Reservations;
use crate::target::Target;
use crate::timing::Timing;
use crate::wait::Waits;

/// Default fraction of the ttl between renewals.
const DEFAULT_RENEW_FRACTION: f64 = 1.0 / 3.0;
/// Default constant part of the safety margin.
const DEFAULT_SAFETY_MARGIN: Duration = Duration::from_millis(20);
/// Default cap on one sleep of a wait without `LISTEN` (pooler mode).
const DEFAULT_POLL_CAP: Duration = Duration::from_secs(1);
/// Default pool size.
const DEFAULT_MAX_CONNECTIONS: usize = 10;
/// Default bound on opening one pooled connection.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Configuration of a [`Client`], set with [`crate::ClientBuilder`]; every setting has a default.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) owner: Option<String>,
    pub(crate) renew_fraction: f64,
    pub(crate) safety_margin: Duration,
    pub(crate) pooler_mode: bool,
    pub(crate) poll_cap: Duration,
    pub(crate) check_version: bool,
    pub(crate) max_connections: usize,
    pub(crate) connect_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            owner: None,
            renew_fraction: DEFAULT_RENEW_FRACTION,
            safety_margin: DEFAULT_SAFETY_MARGIN,
            pooler_mode: false,
            poll_cap: DEFAULT_POLL_CAP,
            check_version: true,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// A pg_lease client: acquires leases and keeps them alive, waits for keys without polling, and
/// runs leader elections. Cheap to clone (clones share everything).
///
/// Every [`Lease`] it grants keeps it alive; dropping all clones of a client and all its leases
/// stops its background tasks. [`Client::shutdown`] releases every lease and stops them at once.
///
/// A client given to a [`crate::ShardedClient`] is one shard of it for good: each of its acquire
/// attempts (keys, semaphore slots, campaigns) is checked against the sharded client's slot map
/// in force ([`Error::is_slot_paused`], [`Error::is_wrong_shard`]); renewals and releases are not.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let client = pglease::Client::connect("host=db.example user=app dbname=app").await?;
/// let lease = client.acquire("job-42", Duration::from_secs(10), Duration::from_secs(30)).await?;
/// println!("{} holds job-42 at epoch {}", client.owner(), lease.epoch());
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) owner: String,
    pub(crate) options: Options,
    /// The pool, as every short call uses it (failing once `root` is cancelled).
    pub(crate) conns: Connections,
    /// The listening connection and everything else a wait needs.
    pub(crate) waits: Waits,
    /// Cancelled by shutdown, or when the last clone and lease are gone.
    pub(crate) root: CancellationToken,
    pub(crate) tracker: TaskTracker,
    pub(crate) reservations: Arc<Reservations>,
    pub(crate) live: Arc<AtomicUsize>,
    /// Sends the renewals of all leases, batched.
    pub(crate) renewer: Renewer,
    /// The sharded client this client is a shard of, if any: every acquire attempt is checked
    /// against its map in force (`shard.rs`).
    pub(crate) gate: OnceLock<Gate>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.root.cancel();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("owner", &self.inner.owner)
            .field("options", &self.inner.options)
            .field("listener", &self.inner.waits.listener())
            .field("closed", &self.inner.root.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The owner identity this client presents.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// println!("I am {}", client.owner());
    /// # }
    /// ```
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The connection pool, for your own statements (e.g. transactions guarded with
    /// [`Lease::fence`](crate::LeaseGuard::fence)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client, lease: &pglease::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut conn = client.pool().get().await?;
    /// let tx = conn.transaction().await?;
    /// lease.fence(&*tx).await?;
    /// tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn pool(&self) -> &Pool {
        self.inner.conns.pool()
    }

    /// Acquires `key` for `ttl` if it is free, lapsed or unknown; `None` if another owner (or
    /// another lease of this client) holds it.
    ///
    /// The returned [`Lease`] is kept alive by a keepalive task until it is released, dropped or
    /// lost.
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`]: bad key (server) or a ttl too short for the safety margin
    ///   (client, nothing sent).
    /// - [`Error::is_connection`]: no answer. The server may have granted the key; the client then
    ///   releases it in the background.
    /// - [`Error::is_slot_paused`], [`Error::is_wrong_shard`] (client-side, nothing sent): this
    ///   client is a shard of a [`crate::ShardedClient`] whose map in force pauses the key's slot
    ///   or gives it to another shard.
    /// - [`Error::is_closed`] after [`Client::shutdown`]; any other server error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped after the acquire was sent, the client releases
    /// whatever it granted, in the background, on the same connection.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// match client.try_acquire("job-42", Duration::from_secs(10)).await? {
    ///     Some(lease) => println!("mine at epoch {}", lease.epoch()),
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.try_acquire_with_data(key, ttl, None).await
    }

    /// A request to acquire `key` for `ttl` with options ([`AcquireBuilder::data`]), sent by
    /// [`AcquireBuilder::try_acquire`] or [`AcquireBuilder::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lease = client
    ///     .acquire_with("scheduler", Duration::from_secs(10))
    ///     .data("10.0.0.7:8080")
    ///     .acquire(Duration::from_secs(60))
    ///     .await?;
    /// assert_eq!(lease.data().as_deref(), Some("10.0.0.7:8080"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_with(&self, key: impl Into<String>, ttl: Duration) -> AcquireBuilder {
        AcquireBuilder::new(self.clone(), key.into(), ttl)
    }

    /// [`Client::try_acquire`] with `data` (validated here, then by the server).
    pub(crate) async fn try_acquire_with_data(
        &self,
        key: &str,
        ttl: Duration,
        data: Option<&str>,
    ) -> Result<Option<Lease>> {
        self.try_acquire_target(&Target::Key(key.to_owned()), ttl, data)
            .await
    }

    /// Acquires `key` for `ttl`, waiting up to `timeout` while another owner holds it.
    ///
    /// The wait holds no pooled connection and no transaction, and does not poll: the client
    /// registers as a waiter (`lease.register_waiter`), listens on its shared `LISTEN` connection,
    /// and retries when the holder releases the key or when its lease lapses by the server's
    /// reckoning, whichever comes first. In [pooler mode](crate::ClientBuilder::pooler_mode) it
    /// sleeps until the lapse, at most [`ClientBuilder::poll_cap`](crate::ClientBuilder::poll_cap)
    /// at a time. Connection errors while waiting are retried with backoff. Waiters are not queued:
    /// whoever retries first wins. A `timeout` too long to represent as an instant (e.g.
    /// [`Duration::MAX`]) waits without bound.
    ///
    /// # Errors
    ///
    /// - [`Error::is_wait_timeout`] (client-side, no SQLSTATE): `timeout` passed.
    /// - as [`Client::try_acquire`], except that connection errors are retried until `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (as [`Client::try_acquire`]); `tokio::time::timeout` around it works too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// match client.acquire("job-42", Duration::from_secs(10), Duration::from_secs(60)).await {
    ///     Ok(lease) => lease.release().await?,
    ///     Err(e) if e.is_wait_timeout() => println!("still busy after a minute"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str, ttl: Duration, timeout: Duration) -> Result<Lease> {
        self.acquire_target(
            &Target::Key(key.to_owned()),
            ttl,
            None,
            Deadline::after(timeout),
        )
        .await
    }

    /// Acquires `key` (waiting without bound), runs the future `f` makes from a [`LeaseGuard`],
    /// and releases the key when the future completes. If the lease is lost first, the future is
    /// dropped (cancelled) at once.
    ///
    /// # Errors
    ///
    /// - [`Error::is_lease_lost`]: the lease was lost before the future completed (it was
    ///   cancelled); [`Error::lost_reason`] says why.
    /// - as [`Client::acquire`]. A failed release after completion is not an error (the lease is
    ///   no longer renewed and lapses by itself).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the future and releases the lease in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let rows = client
    ///     .with_lease("nightly-report", Duration::from_secs(30), |guard| async move {
    ///         println!("running the report at epoch {}", guard.epoch());
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lease<F, Fut, T>(&self, key: &str, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LeaseGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self
            .acquire_target(&Target::Key(key.to_owned()), ttl, None, Deadline::NEVER)
            .await?;
        let work = f(lease.guard());
        let outcome = tokio::select! {
            biased;
            reason = lease.lost() => Err(reason),
            out = work => Ok(out),
        };
        match outcome {
            Ok(out) => {
                let _ = lease.release().await;
                Ok(out)
            }
            Err(reason) => Err(Error::lease_lost(reason)),
        }
    }

    /// Puts under this client's keepalive a lease that another call granted to this client's
    /// owner, such as `lease_queue.claim` (which calls `lease.acquire` inside), and returns its
    /// [`Lease`]: renewed, watched for loss and released exactly like one from
    /// [`Client::try_acquire`].
    ///
    /// - `key` and `grant` are what the server granted to [`Client::owner`]; the client trusts
    ///   them (the first renewal tells: a grant that is not this owner's ends the lease at once).
    /// - `ttl` is the ttl the grant was made with; every renewal extends the lease by it.
    /// - `sent_at` is a monotonic instant taken **before the granting call was sent**, and
    ///   `remaining` the time the server reported left on the grant after it (e.g.
    ///   `expires_at - clock_timestamp()` in the same statement; for a fresh grant about `ttl`).
    ///   As for an acquire, the lease is treated as held until `sent_at + min(ttl, remaining) -
    ///   margin` unless a renewal is confirmed: loss is still signalled before the server can
    ///   grant the key to anyone else. A deadline already passed gives a lease that has ended
    ///   ([`LostReason::Expired`](crate::LostReason::Expired)).
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`] (client-side, no code): a ttl too short for the safety
    ///   margin, or another lease of this client holds `key` (one lease per key per client).
    /// - [`Error::is_closed`] after [`Client::shutdown`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, Instant};
    ///
    /// let ttl = Duration::from_secs(10);
    /// let db = client.pool().get().await?;
    /// let sent_at = Instant::now();
    /// let row = db
    ///     .query_one(
    ///         "SELECT c.claimed, c.epoch, c.expires_at, \
    ///                 extract(epoch FROM c.expires_at - clock_timestamp())::float8 \
    ///            FROM lease_queue.claim('orders', 0, $1, $2::float8 * interval '1 second') AS c",
    ///         &[&client.owner(), &ttl.as_secs_f64()],
    ///     )
    ///     .await?;
    /// if row.get::<_, bool>(0) {
    ///     let grant = pglease::Grant::new(row.get(1), row.get(2));
    ///     let remaining = Duration::from_secs_f64(row.get::<_, f64>(3).max(0.0));
    ///     let lease = client.adopt("lease_queue:orders:0", grant, ttl, sent_at, remaining)?;
    ///     println!("partition 0 is mine at epoch {}", lease.epoch());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn adopt(
        &self,
        key: &str,
        grant: crate::results::Grant,
        ttl: Duration,
        sent_at: std::time::Instant,
        remaining: Duration,
    ) -> Result<Lease> {
        self.inner.conns.check_open()?;
        let timing = self.timing(ttl)?;
        let Some(reserved) = self.inner.reservations.claim(key) else {
            return Err(Error::invalid_argument(format!(
                "key {key:?} is held by another lease of this client"
            )));
        };
        Ok(self.start_keepalive(Granted {
            reservations: vec![reserved],
            key,
            slot: None,
            grant,
            timing,
            sent: Instant::from_std(sent_at),
            left: remaining,
            data: None,
        }))
    }

    /// Shuts the client down: releases every lease it holds, stops every keepalive and the
    /// listening connection, and closes the pool. Every lease then reports
    /// [`crate::LostReason::Shutdown`], and later calls fail with [`Error::is_closed`].
    ///
    /// Returns when every background task has finished (each release is bounded by 10 s).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown goes on in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: pglease::Client) {
    /// client.shutdown().await;
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        self.inner.root.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
        self.inner.conns.pool().close();
    }

    /// How many keepalive tasks of this client are running (for leak tests).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(client: &pglease::Client) {
    /// assert_eq!(client.live_keepalives(), 0);
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn live_keepalives(&self) -> usize {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// How many release notifications woke a waiter of this client (for tests).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(client: &pglease::Client) {
    /// println!("{} wake-ups by notification", client.notifications_delivered());
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn notifications_delivered(&self) -> u64 {
        self.inner.waits.listener().map_or(0, Listener::delivered)
    }

    // ---------------------------------------------------------------------------------------
    // Internals
    // ---------------------------------------------------------------------------------------

    /// Starts a client on `pool` (the builder's last step): the listening connection (unless in
    /// pooler mode or without `listen`), and the version check if asked for.
    pub(crate) async fn start(
        options: Options,
        pool: Pool,
        listen: Option<listener::Connect>,
    ) -> Result<Client> {
        let root = CancellationToken::new();
        let tracker = TaskTracker::new();
        let listener = match (listen, options.pooler_mode) {
            (Some(connect), false) => Some(Listener::new(connect, root.clone(), tracker.clone())),
            _ => None,
        };
        let statements = if options.pooler_mode {
            Statements::Unnamed
        } else {
            Statements::Prepared
        };
        let conns = Connections::new(pool, statements, root.clone());
        let owner = options.owner.clone().unwrap_or_else(default_owner);
        let waits = Waits::new(
            owner.clone(),
            conns.clone(),
            listener,
            options.poll_cap,
            root.clone(),
        );
        let renewer = Renewer::start(conns.clone(), owner.clone(), root.clone(), &tracker);
        let client = Client {
            inner: Arc::new(Inner {
                renewer,
                owner,
                options,
                conns,
                waits,
                root,
                tracker,
                reservations: Arc::default(),
                live: Arc::default(),
                gate: OnceLock::new(),
            }),
        };
        if client.inner.options.check_version {
            let conn = client.inner.conns.get().await?;
            crate::install::check_version(&**conn).await?;
        }
        Ok(client)
    }

    /// The sharded client this client is a shard of, if any.
    pub(crate) fn gate(&self) -> Option<&Gate> {
        self.inner.gate.get()
    }

    /// Makes this client a shard of a sharded client, for good; `false` if it already is one.
    pub(crate) fn join(&self, gate: Gate) -> bool {
        self.inner.gate.set(gate).is_ok()
    }

    /// Admits one acquire attempt of `what`: `None` outside a sharded client; a permit to hold
    /// until the attempt's outcome is settled, or the sharded client's refusal.
    pub(crate) fn admit(&self, target: &Target) -> Result<Option<Permit>> {
        self.gate()
            .map(|gate| gate.admit(target, self.owner()))
            .transpose()
    }

    /// The client's pooled connections.
    pub(crate) fn conns(&self) -> &Connections {
        &self.inner.conns
    }

    /// The keys (and semaphores) this client holds or is acquiring.
    pub(crate) fn reservations(&self) -> &Arc<Reservations> {
        &self.inner.reservations
    }

    /// How this client's waits wait: the interface its elections (and other waiting calls) use.
    pub(crate) fn waits(&self) -> &Waits {
        &self.inner.waits
    }

    pub(crate) fn timing(&self, ttl: Duration) -> Result<Timing> {
        Timing::new(
            ttl,
            self.inner.options.renew_fraction,
            self.inner.options.safety_margin,
        )
    }
}
