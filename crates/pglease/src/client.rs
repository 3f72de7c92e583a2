//! The [`Client`]: acquires leases (at once, or waiting without polling), keeps them alive, and
//! owns the connections that do so.
//!
//! A client holds a connection pool (deadpool-postgres) for short calls: acquires, renewals,
//! releases, inspections. Waiting for a key never holds a pooled connection: the client waits on
//! its one shared `LISTEN` connection (see [`crate::register_waiter`]) or, behind a
//! transaction-mode pooler, sleeps until the holder's lapse time, capped.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, sleep_until};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::calls::{self, LeaseState, ListedLease};
use crate::election::Election;
use crate::error::{Error, Result};
use crate::keepalive::{self, Keepalive, Timing};
use crate::lease::{Lease, LeaseGuard, Shared};
use crate::listener::{self, Listener, Subscription};

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
/// How long a wait gives the listening connection to come up before it sleeps without it.
const LISTEN_READY_TIMEOUT: Duration = Duration::from_secs(2);
/// Slack added to a server-reported lapse time, so the retry comes after the lapse.
const LAPSE_SLACK: Duration = Duration::from_millis(2);

/// Configuration of a [`Client`]; every setting has a default.
#[derive(Debug, Clone)]
struct Options {
    owner: Option<String>,
    renew_fraction: f64,
    safety_margin: Duration,
    pooler_mode: bool,
    poll_cap: Duration,
    check_version: bool,
    max_connections: usize,
    connect_timeout: Duration,
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

/// Builds a [`Client`]; start with [`Client::builder`].
///
/// | setting | default |
/// | --- | --- |
/// | [`owner`](Self::owner) | `host:pid:random` |
/// | [`renew_fraction`](Self::renew_fraction) | 1/3 of the ttl |
/// | [`safety_margin`](Self::safety_margin) | 20 ms (plus ttl/1000) |
/// | [`pooler_mode`](Self::pooler_mode) | off: wait on a `LISTEN` connection |
/// | [`poll_cap`](Self::poll_cap) | 1 s |
/// | [`check_version`](Self::check_version) | on |
/// | [`max_connections`](Self::max_connections) | 10 |
/// | [`connect_timeout`](Self::connect_timeout) | 10 s |
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let client = pglease::Client::builder()
///     .owner("billing-worker-1")
///     .renew_fraction(0.25)
///     .connect("host=db.example user=app dbname=app")
///     .await?;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct ClientBuilder {
    options: Options,
    listen: Option<listener::Connect>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("options", &self.options)
            .field("listen", &self.listen.is_some())
            .finish()
    }
}

impl ClientBuilder {
    /// Sets the owner identity presented to the server. Default: `host:pid:random` (the host name,
    /// the process id and 32 random bits), unique per client.
    ///
    /// Two clients with the same owner are one owner to the server (either may renew or release
    /// the other's leases), so only set it to something unique per process.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = pglease::Client::builder().owner("worker-7");
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> ClientBuilder {
        self.options.owner = Some(owner.into());
        self
    }

    /// Sets the fraction of the ttl between keepalive renewals, in (0, 1). Default 1/3.
    ///
    /// Whatever the fraction, a renewal is also never scheduled later than halfway to the
    /// validity deadline, so there is always time to retry.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = pglease::Client::builder().renew_fraction(0.25);
    /// ```
    pub fn renew_fraction(mut self, fraction: f64) -> ClientBuilder {
        self.options.renew_fraction = fraction;
        self
    }

    /// Sets the constant part of the safety margin. Default 20 ms.
    ///
    /// A lease is treated as valid until `sent + ttl - margin`, with `margin = ttl / 1000 +
    /// safety_margin`: the proportional part covers clock-rate drift between this host and the
    /// server (2 × the 500 ppm a kernel may slew a clock), the constant covers timer and
    /// scheduling latency between the deadline and your code seeing [`Lease::lost`]. Raise it on
    /// heavily loaded hosts. A ttl must exceed twice the margin.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = pglease::Client::builder().safety_margin(Duration::from_millis(50));
    /// ```
    pub fn safety_margin(mut self, margin: Duration) -> ClientBuilder {
        self.options.safety_margin = margin;
        self
    }

    /// Declares that the connections go through a transaction-mode pooler (PgBouncer
    /// `pool_mode = transaction`), where `LISTEN` cannot work. Default off.
    ///
    /// In pooler mode, waits sleep until the holder's lapse time as the server reports it, but
    /// never longer than [`poll_cap`](Self::poll_cap) at a time, so a release is noticed within
    /// one cap. Every statement is sent as an unnamed statement (outside pooler mode the client
    /// prepares its statements once per pooled connection), so pooler mode needs nothing else.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = pglease::Client::builder().pooler_mode(true);
    /// ```
    pub fn pooler_mode(mut self, on: bool) -> ClientBuilder {
        self.options.pooler_mode = on;
        self
    }

    /// Sets the longest single sleep of a wait without `LISTEN` (pooler mode, a pool without a
    /// listening connection, or while the listening connection is down). Default 1 s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = pglease::Client::builder().pooler_mode(true).poll_cap(Duration::from_millis(250));
    /// ```
    pub fn poll_cap(mut self, cap: Duration) -> ClientBuilder {
        self.options.poll_cap = cap;
        self
    }

    /// Whether connecting checks that pg_lease is installed at this library's
    /// [`crate::VERSION`] ([`crate::check_version`]). Default on.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = pglease::Client::builder().check_version(false);
    /// ```
    pub fn check_version(mut self, on: bool) -> ClientBuilder {
        self.options.check_version = on;
        self
    }

    /// Sets the size of the connection pool made by [`connect`](Self::connect) and
    /// [`connect_with`](Self::connect_with). Default 10. (The listening connection is extra.)
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = pglease::Client::builder().max_connections(4);
    /// ```
    pub fn max_connections(mut self, n: usize) -> ClientBuilder {
        self.options.max_connections = n;
        self
    }

    /// Sets how long opening one pooled connection may take. Default 10 s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = pglease::Client::builder().connect_timeout(Duration::from_secs(3));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.options.connect_timeout = timeout;
        self
    }

    /// Sets the connection used for `LISTEN` by a client built with [`from_pool`](Self::from_pool)
    /// (which cannot take one from the pool: a pooled connection is not polled for
    /// notifications). Without it, such a client waits as in [`pooler_mode`](Self::pooler_mode).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(pool: deadpool_postgres::Pool) -> pglease::Result<()> {
    /// let config: tokio_postgres::Config = "host=db.example user=app dbname=app".parse()?;
    /// let client = pglease::Client::builder()
    ///     .listen_with(config, tokio_postgres::NoTls)
    ///     .from_pool(pool)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen_with<T>(mut self, config: Config, tls: T) -> ClientBuilder
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        self.listen = Some(listener::connector(config, tls));
        self
    }

    /// Connects without TLS to the server named by a libpq-style connection string
    /// (`host=... user=... dbname=...` or a `postgresql://` URL).
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`]: an unparsable connection string or an invalid setting.
    /// - with [`check_version`](Self::check_version): [`Error::is_not_installed`],
    ///   [`Error::is_version_mismatch`], or the connection's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing outlives the dropped future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// let client = pglease::Client::builder()
    ///     .connect("postgresql://app@db.example/app")
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(self, conninfo: &str) -> Result<Client> {
        let config: Config = conninfo
            .parse()
            .map_err(|e| Error::invalid_argument(format!("connection string: {e}")))?;
        self.connect_with(config, NoTls).await
    }

    /// Connects with `config` and the TLS connector `tls` (e.g. `tokio_postgres::NoTls`,
    /// `postgres-native-tls` or `tokio-postgres-rustls`).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing outlives the dropped future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// let mut config = tokio_postgres::Config::new();
    /// config.host("db.example").user("app").dbname("app");
    /// let client = pglease::Client::builder()
    ///     .connect_with(config, tokio_postgres::NoTls)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with<T>(mut self, config: Config, tls: T) -> Result<Client>
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        self.validate()?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.options.max_connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.options.connect_timeout))
            .build()
            .map_err(|e| Error::invalid_argument(format!("connection pool: {e}")))?;
        if self.listen.is_none() {
            self.listen = Some(listener::connector(config, tls));
        }
        self.finish(pool).await
    }

    /// Uses an existing deadpool-postgres pool for every short call. The client waits with
    /// `LISTEN` only if [`listen_with`](Self::listen_with) gave it a connection to do so.
    ///
    /// The pool should recycle connections at least with [`RecyclingMethod::Fast`] (the
    /// default), so that a connection that broke is not handed out again.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing outlives the dropped future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// use deadpool_postgres::{Manager, Pool};
    ///
    /// let config: tokio_postgres::Config = "host=db.example user=app dbname=app".parse()?;
    /// let manager = Manager::new(config, tokio_postgres::NoTls);
    /// let pool = Pool::builder(manager).max_size(8).build().expect("valid pool settings");
    /// let client = pglease::Client::builder().from_pool(pool).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_pool(self, pool: Pool) -> Result<Client> {
        self.validate()?;
        self.finish(pool).await
    }

    fn validate(&self) -> Result<()> {
        let f = self.options.renew_fraction;
        if !(f > 0.0 && f < 1.0) {
            return Err(Error::invalid_argument(format!(
                "renew_fraction must be in (0, 1), got {f}"
            )));
        }
        if self.options.max_connections == 0 {
            return Err(Error::invalid_argument(
                "max_connections must be at least 1",
            ));
        }
        if self.options.poll_cap.is_zero() {
            return Err(Error::invalid_argument("poll_cap must be positive"));
        }
        if let Some(owner) = &self.options.owner
            && (owner.is_empty() || owner.len() > 1024)
        {
            return Err(Error::invalid_argument(
                "owner must be non-empty text of at most 1024 bytes",
            ));
        }
        Ok(())
    }

    async fn finish(self, pool: Pool) -> Result<Client> {
        let root = CancellationToken::new();
        let tracker = TaskTracker::new();
        let listener = match (&self.listen, self.options.pooler_mode) {
            (Some(connect), false) => Some(Listener::new(
                Arc::clone(connect),
                root.clone(),
                tracker.clone(),
            )),
            _ => None,
        };
        let owner = self.options.owner.clone().unwrap_or_else(default_owner);
        let client = Client {
            inner: Arc::new(Inner {
                pool,
                owner,
                options: self.options,
                listener,
                root,
                tracker,
                slots: Arc::default(),
                live: Arc::default(),
            }),
        };
        if client.inner.options.check_version {
            let conn = client.get().await?;
            crate::install::check_version(&**conn).await?;
        }
        Ok(client)
    }
}

/// A pg_lease client: acquires leases and keeps them alive, waits for keys without polling, and
/// runs leader elections. Cheap to clone (clones share everything).
///
/// Every [`Lease`] it grants keeps it alive; dropping all clones of a client and all its leases
/// stops its background tasks. [`Client::shutdown`] releases every lease and stops them at once.
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
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    owner: String,
    options: Options,
    listener: Option<Listener>,
    /// Cancelled by shutdown, or when the last clone and lease are gone.
    root: CancellationToken,
    tracker: TaskTracker,
    slots: Arc<Slots>,
    live: Arc<AtomicUsize>,
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
            .field("listener", &self.inner.listener)
            .field("closed", &self.inner.root.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects with default settings (see [`ClientBuilder`]), without TLS.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing outlives the dropped future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// let client = pglease::Client::connect("host=db.example user=app dbname=app").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(conninfo: &str) -> Result<Client> {
        Client::builder().connect(conninfo).await
    }

    /// A builder with every setting at its default.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// let client = pglease::Client::builder()
    ///     .pooler_mode(true)
    ///     .connect("host=pgbouncer.example port=6432 user=app dbname=app")
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            options: Options::default(),
            listen: None,
        }
    }

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
    /// [`Lease::fence`]).
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
        &self.inner.pool
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
        self.check_open()?;
        let timing = self.timing(ttl)?;
        let Some(slot) = self.inner.slots.claim(key) else {
            return Ok(None);
        };
        Ok(self.acquire_once(slot, key, timing).await?.ok())
    }

    /// Acquires `key` for `ttl`, waiting up to `timeout` while another owner holds it.
    ///
    /// The wait holds no pooled connection and no transaction, and does not poll: the client
    /// registers as a waiter (`lease.register_waiter`), listens on its shared `LISTEN`
    /// connection, and retries when the holder releases the key or when its lease lapses by the
    /// server's reckoning, whichever comes first. In [pooler mode](ClientBuilder::pooler_mode) it
    /// sleeps until the lapse, at most [`ClientBuilder::poll_cap`] at a time. Connection errors
    /// while waiting are retried with backoff. Waiters are not queued: whoever retries first wins.
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
        let deadline = Instant::now().checked_add(timeout);
        self.acquire_until(key, ttl, deadline).await
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
        let lease = self.acquire_until(key, ttl, None).await?;
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

    /// The state of `key` now, by the server clock ([`crate::inspect`] on a pooled connection).
    ///
    /// # Errors
    ///
    /// As [`crate::inspect`], plus pool errors ([`Error::is_connection`], [`Error::is_closed`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// if let Some(state) = client.inspect("job-42").await? {
    ///     println!("held={} owner={:?} epoch={}", state.held, state.owner, state.epoch);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Option<LeaseState>> {
        let conn = self.get().await?;
        calls::inspect(&**conn, key).await
    }

    /// Every key starting with `prefix` (all keys for `None`), with its state
    /// ([`crate::list`] on a pooled connection).
    ///
    /// # Errors
    ///
    /// As [`crate::list`], plus pool errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// for lease in client.list(Some("job-")).await? {
    ///     println!("{}: held={}", lease.key, lease.state.held);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<ListedLease>> {
        let conn = self.get().await?;
        calls::list(&**conn, prefix).await
    }

    /// A leader election on key `name`, whose leader holds it for `ttl` at a time (renewed by
    /// the keepalive).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let election = client.election("scheduler-leader", Duration::from_secs(10));
    /// let leadership = election.campaign().await?;
    /// println!("leading at epoch {}", leadership.epoch());
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: impl Into<String>, ttl: Duration) -> Election {
        Election::new(self.clone(), name.into(), ttl)
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
        self.inner.pool.close();
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
        self.inner.listener.as_ref().map_or(0, Listener::delivered)
    }

    // ---------------------------------------------------------------------------------------
    // Internals
    // ---------------------------------------------------------------------------------------

    pub(crate) fn timing(&self, ttl: Duration) -> Result<Timing> {
        Timing::new(
            ttl,
            self.inner.options.renew_fraction,
            self.inner.options.safety_margin,
        )
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.inner.root.is_cancelled() {
            Err(Error::closed())
        } else {
            Ok(())
        }
    }

    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.root
    }

    /// A pooled connection.
    /// How this client's pooled connections send the library's statements: prepared once per
    /// connection, except in pooler mode.
    pub(crate) fn statements(&self) -> calls::Statements {
        if self.inner.options.pooler_mode {
            calls::Statements::Unnamed
        } else {
            calls::Statements::Prepared
        }
    }

    pub(crate) async fn get(&self) -> Result<Object> {
        self.check_open()?;
        self.inner.pool.get().await.map_err(Error::pool)
    }

    /// Acquires `key`, waiting until `deadline` (`None`: without bound).
    pub(crate) async fn acquire_until(
        &self,
        key: &str,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Lease> {
        let timing = self.timing(ttl)?;
        let mut failures = 0u32;
        loop {
            self.check_open()?;
            let freed = self.inner.slots.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let Some(slot) = self.inner.slots.claim(key) else {
                // Another lease (or acquire) of this client has the key: wait for it to end.
                tokio::select! {
                    () = freed => continue,
                    () = sleep_until_opt(deadline) => return Err(timed_out(key)),
                    () = self.inner.root.cancelled() => return Err(Error::closed()),
                }
            };
            let result = match self.acquire_once(slot, key, timing).await {
                Ok(Ok(lease)) => return Ok(lease),
                Ok(Err(_held)) => {
                    if past(deadline) {
                        return Err(timed_out(key));
                    }
                    self.wait_for_turn(key, deadline).await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => failures = 0,
                Err(e) if is_transient(&e) => {
                    failures = failures.saturating_add(1);
                    let delay = keepalive::backoff(
                        Duration::from_millis(50),
                        Duration::from_secs(2),
                        failures,
                    );
                    let until = opt_min(Instant::now() + delay, deadline);
                    tokio::select! {
                        () = sleep_until(until) => {}
                        () = self.inner.root.cancelled() => return Err(Error::closed()),
                    }
                    if past(deadline) {
                        return Err(timed_out(key));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One acquire attempt with the key's slot: `Ok(Ok(lease))` if granted, `Ok(Err(()))` if
    /// another owner holds it.
    async fn acquire_once(
        &self,
        slot: SlotGuard,
        key: &str,
        timing: Timing,
    ) -> Result<std::result::Result<Lease, ()>> {
        let conn = self.get().await?;
        let mut in_flight = InFlight {
            conn: Some(conn),
            slot: Some(slot),
            pool: self.inner.pool.clone(),
            key: key.to_owned(),
            owner: self.inner.owner.clone(),
            armed: true,
        };
        let sent = Instant::now();
        let conn = in_flight.conn.as_ref().expect("set above");
        let answer =
            calls::acquire_timed(conn, self.statements(), key, &self.inner.owner, timing.ttl).await;
        let (grant, sent, left) = match answer {
            Ok(Some(timed)) => (timed.grant, sent, timed.remaining),
            Ok(None) => {
                in_flight.armed = false;
                return Ok(Err(()));
            }
            Err(e) => {
                if e.is_connection() {
                    // Ambiguous: the cleanup (on drop of `in_flight`) releases what may be ours.
                    if let Some(conn) = in_flight.conn.take() {
                        keepalive::discard(conn);
                    }
                } else {
                    in_flight.armed = false;
                }
                return Err(e);
            }
        };
        // A grant this owner already held (a retried acquire) may have little time left: renew at
        // once rather than hand out a lease about to expire.
        let (sent, left, expires_at) = if timing.valid_until(sent, left) <= sent + timing.margin {
            let sent = Instant::now();
            let conn = in_flight.conn.as_ref().expect("still set");
            match calls::renew_timed(
                conn,
                self.statements(),
                key,
                &self.inner.owner,
                grant.epoch,
                timing.ttl,
            )
            .await
            {
                Ok((renewal, Some(left))) if renewal.status.is_ok() => {
                    (sent, left, renewal.expires_at.unwrap_or(grant.expires_at))
                }
                _ => return Ok(Err(())),
            }
        } else {
            (sent, left, grant.expires_at)
        };
        in_flight.armed = false;
        let slot = in_flight.slot.take().expect("set above");
        drop(in_flight);

        let valid_until = timing.valid_until(sent, left);
        let shared = Arc::new(
            Shared::new(
                key.to_owned(),
                self.inner.owner.clone(),
                grant.epoch,
                timing.ttl,
                valid_until,
                expires_at,
                self.inner.root.child_token(),
            )
            .with_statements(self.statements()),
        );
        let (control, commands) = mpsc::unbounded_channel();
        let keepalive = Keepalive {
            shared: Arc::clone(&shared),
            pool: self.inner.pool.clone(),
            timing,
            commands,
            shutdown: self.inner.root.clone(),
            slot: Some(slot),
            sent,
            _live: keepalive::Live::new(Arc::clone(&self.inner.live)),
        };
        self.inner.tracker.spawn(keepalive.run());
        Ok(Ok(Lease::new(shared, self.clone(), control)))
    }

    /// Waits (without a pooled connection) until `key` may be free: released, lapsed, or the
    /// deadline. Returns at once if the key is not held.
    pub(crate) async fn wait_for_turn(&self, key: &str, deadline: Option<Instant>) -> Result<()> {
        let subscription = self.subscribe(key, deadline).await;
        let waiter = {
            let conn = self.get().await?;
            calls::register_waiter(&**conn, key).await?
        };
        let Some(lapses_in) = waiter.lapses_in.filter(|_| waiter.held) else {
            return Ok(());
        };
        self.sleep_until_released(subscription.as_ref(), lapses_in, deadline)
            .await
    }

    /// Subscribes to releases of `key` on the listening connection, if this client has one and
    /// it comes up in time.
    pub(crate) async fn subscribe(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Option<Subscription> {
        let listener = self.inner.listener.as_ref()?;
        let ready_by = opt_min(Instant::now() + LISTEN_READY_TIMEOUT, deadline);
        listener.subscribe(key, ready_by).await
    }

    /// Sleeps until `subscription` reports a release, `lapses_in` (server-measured) has passed,
    /// or the deadline; without a subscription, at most [`ClientBuilder::poll_cap`].
    pub(crate) async fn sleep_until_released(
        &self,
        subscription: Option<&Subscription>,
        lapses_in: Duration,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let now = Instant::now();
        let mut wake = now + lapses_in + LAPSE_SLACK;
        if subscription.is_none() {
            wake = wake.min(now + self.inner.options.poll_cap);
        }
        let wake = opt_min(wake, deadline);
        let released = async {
            match subscription {
                Some(s) => s.released().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = released => Ok(()),
            () = sleep_until(wake) => Ok(()),
            () = self.inner.root.cancelled() => Err(Error::closed()),
        }
    }
}

/// The key of an acquire whose answer never came (or was dropped), until the cleanup has released
/// whatever it may have granted.
struct InFlight {
    conn: Option<Object>,
    slot: Option<SlotGuard>,
    pool: Pool,
    key: String,
    owner: String,
    armed: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (conn, slot, pool) = (self.conn.take(), self.slot.take(), self.pool.clone());
        let (key, owner) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.owner),
        );
        runtime.spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            let cleanup = async {
                // The same connection as the acquire, if it still works: the cleanup then runs
                // after the acquire on the server.
                let conn = match conn {
                    Some(conn) if !conn.is_closed() => conn,
                    _ => keepalive::checkout(&pool, deadline).await?,
                };
                if let Some(state) = calls::inspect(&**conn, &key).await?
                    && state.held
                    && state.owner.as_deref() == Some(owner.as_str())
                {
                    calls::release(&**conn, &key, &owner, state.epoch).await?;
                }
                Ok::<(), Error>(())
            };
            let _ = tokio::time::timeout_at(deadline, cleanup).await;
            drop(slot);
        });
    }
}

/// The keys this client holds or is acquiring: one lease per key per client.
#[derive(Default)]
pub(crate) struct Slots {
    held: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    /// Notified whenever a slot is freed.
    freed: Notify,
}

impl Slots {
    /// Reserves `key`, or `None` if this client already holds or is acquiring it.
    fn claim(self: &Arc<Self>, key: &str) -> Option<SlotGuard> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(key) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        held.insert(key.to_owned(), id);
        Some(SlotGuard {
            slots: Arc::clone(self),
            key: key.to_owned(),
            id,
        })
    }
}

/// A reserved key; frees it on drop.
pub(crate) struct SlotGuard {
    slots: Arc<Slots>,
    key: String,
    id: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if held.get(&self.key) == Some(&self.id) {
            held.remove(&self.key);
        }
        drop(held);
        self.slots.freed.notify_waiters();
    }
}

/// Whether retrying the same call may succeed: no answer, or a server error that says nothing
/// about the lease (connection exceptions, shutdown, resource limits, serialization, cancels).
pub(crate) fn is_transient(e: &Error) -> bool {
    if e.is_connection() {
        return true;
    }
    match e.code() {
        Some(code) => {
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || matches!(code, "40001" | "40P01" | "57014")
        }
        None => false,
    }
}

fn timed_out(key: &str) -> Error {
    Error::timeout(format!("acquire of key {key:?}: the wait ran out"))
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

pub(crate) fn opt_min(at: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// `host:pid:random`: the host name, the process id and 32 random bits.
fn default_owner() -> String {
    let random = (keepalive::random_unit() * f64::from(u32::MAX)) as u32;
    format!("{}:{}:{random:08x}", hostname(), std::process::id())
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes, as gethostname(2) requires.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_owned();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if !name.is_empty() => name.to_owned(),
        _ => "localhost".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_owner_is_host_pid_random() {
        let owner = default_owner();
        let parts: Vec<&str> = owner.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{owner}");
        assert_eq!(parts[0].len(), 8);
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(!parts[2].is_empty());
        assert_ne!(default_owner(), owner, "two clients get two owners");
    }

    #[test]
    fn a_key_is_reserved_once_per_client_until_its_guard_drops() {
        let slots = Arc::new(Slots::default());
        let guard = slots.claim("k").expect("free");
        assert!(slots.claim("k").is_none());
        assert!(slots.claim("other").is_some());
        drop(guard);
        assert!(slots.claim("k").is_some());
    }

    #[test]
    fn transient_errors_are_connection_errors_and_operational_codes() {
        assert!(is_transient(&Error::connection("gone")));
        assert!(!is_transient(&Error::invalid_argument("ttl")));
        assert!(!is_transient(&Error::closed()));
    }
}
