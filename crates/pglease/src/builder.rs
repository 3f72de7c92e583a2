//! Making a [`Client`]: the [`ClientBuilder`] (every setting, its default and its check), and the
//! constructors [`Client::connect`] and [`Client::builder`].
//!
//! The builder makes the pool (or takes the caller's) and the connector of the listening
//! connection, checks the settings, and hands them to the client, which starts.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, Socket};

use crate::client::{Client, Options};
use crate::confirmed::ConfirmedConnect;
use crate::connect_options::ConnectOptions;
use crate::error::{Error, Result};
use crate::limits;
use crate::listener;

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
    /// server (2 × the 500 ppm a kernel may slew a clock), the constant covers timer and scheduling
    /// latency between the deadline and your code seeing [`Lease::lost`](crate::LeaseGuard::lost).
    /// Raise it on heavily loaded hosts. A ttl must exceed twice the margin.
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

    /// Connects to the server named by a libpq connection string (`host=... user=...
    /// dbname=...` or a `postgresql://` URL), read as libpq reads it: the `PG*` variables for
    /// what it leaves out, the password file, and TLS as `sslmode`, `sslrootcert`, `sslcert` and
    /// `sslkey` say ([`ConnectOptions`]).
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`]: a connection string that does not parse, an invalid
    ///   setting, an unusable certificate or key file ([`ConnectOptions::parse`]).
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
    ///     .connect("postgresql://app@db.example/app?sslmode=verify-full&sslrootcert=ca.pem")
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(self, conninfo: &str) -> Result<Client> {
        let options = ConnectOptions::parse(conninfo)?;
        self.connect_options(&options).await
    }

    /// Connects as `options` say: its configuration and its TLS connector.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), but for parsing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing outlives the dropped future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> pglease::Result<()> {
    /// let options = pglease::ConnectOptions::from_env()?;
    /// let client = pglease::Client::builder().connect_options(&options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_options(self, options: &ConnectOptions) -> Result<Client> {
        self.connect_with(options.config().clone(), options.tls())
            .await
    }

    /// Connects with `config` and the TLS connector `tls` (e.g. `tokio_postgres::NoTls`, a
    /// [`ConnectOptions::tls`] connector, `postgres-native-tls` or `tokio-postgres-rustls`).
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
        // Connections that withhold an answer whose commit the synchronous standby did not confirm
        // (confirmed.rs).
        let manager = Manager::from_connect(
            config.clone(),
            ConfirmedConnect::new(tls.clone()),
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
    /// default), so that a connection that broke is not handed out again. With synchronous
    /// replication, build its manager with [`ConfirmedConnect`] (as below): a pool whose
    /// connections are driven otherwise delivers an answer whose commit's wait for the standby was
    /// cancelled, and the client would then report a grant the standby may not have
    /// (docs/CLIENT.md, "Synchronous replication").
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
    /// use deadpool_postgres::{Manager, ManagerConfig, Pool};
    ///
    /// let config: tokio_postgres::Config = "host=db.example user=app dbname=app".parse()?;
    /// let connect = pglease::ConfirmedConnect::new(tokio_postgres::NoTls);
    /// let manager = Manager::from_connect(config, connect, ManagerConfig::default());
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
            && !limits::is_valid_name(owner)
        {
            return Err(Error::invalid_argument(format!(
                "owner must be non-empty text of at most {} bytes",
                limits::MAX_NAME_BYTES
            )));
        }
        Ok(())
    }

    async fn finish(self, pool: Pool) -> Result<Client> {
        Client::start(self.options, pool, self.listen).await
    }
}

impl Client {
    /// Connects with default settings (see [`ClientBuilder`]), as
    /// [`ClientBuilder::connect`]: libpq's variables, password file and TLS settings apply.
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
}
