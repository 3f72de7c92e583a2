//! The pglease operator console: a web page that shows every lease, semaphore, leader and queue
//! of a database live, a JSON API (the one the page uses), and Prometheus metrics. `pglease ui`
//! and `pglease metrics` serve it; docs/CONSOLE.md documents the views, the API, the metrics and
//! the security model.
//!
//! The page is server-side HTML with one plain JavaScript file, both compiled into the binary: no
//! Node build at install or test time. It renders the JSON of `/api/...` and keeps it current with
//! Server-Sent Events (`/api/events`), which push the view every `refresh` while the page is open.
//!
//! Read-only unless built with [`ConsoleBuilder::allow_actions`]; then redriving dead letters,
//! force-releasing a queue partition and purging are offered (never on a standby), each behind a
//! confirmation, the CSRF checks of [`auth`], and logged (`tracing` target
//! `pglease_console::action`).
//!
//! ```no_run
//! # async fn demo(client: pglease::Client) -> std::io::Result<()> {
//! let console = pglease_console::Console::builder(client).build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! console.serve(listener, std::future::pending()).await
//! # }
//! ```

#![warn(missing_docs)]

mod api;
pub mod auth;
mod db;
mod live;
mod metrics;
mod page;
mod sampler;
mod shared;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use crate::auth::Secrets;
use crate::db::Db;
use crate::sampler::Sampler;

/// A console, ready to serve: made by [`Console::builder`].
#[derive(Clone)]
pub struct Console {
    state: Arc<State>,
}

/// What every request handler shares.
pub(crate) struct State {
    pub db: Db,
    pub secrets: Secrets,
    pub actions: bool,
    pub show_payloads: bool,
    pub base_path: String,
    pub refresh: Duration,
    pub elections: Vec<String>,
    pub expiring_within: Duration,
    pub metric_key_prefixes: Vec<String>,
    pub sampler: Sampler,
    pub metrics_only: bool,
    /// Cancelled when the console stops serving: ends the open event streams.
    pub shutdown: pglease::CancellationToken,
    /// The history's insert count at the first scrape (metrics.rs).
    pub grants_baseline: std::sync::Mutex<Option<i64>>,
}

/// Options of a [`Console`].
pub struct ConsoleBuilder {
    client: pglease::Client,
    token: Option<String>,
    actions: bool,
    show_payloads: bool,
    base_path: String,
    refresh: Duration,
    statement_timeout: Duration,
    elections: Vec<String>,
    expiring_within: Duration,
    metric_key_prefixes: Vec<String>,
    metrics_only: bool,
}

impl Console {
    /// A console on the database of `client` (its pool serves the console's reads), read-only,
    /// without authentication (so: for a loopback address only), refreshing every second.
    pub fn builder(client: pglease::Client) -> ConsoleBuilder {
        ConsoleBuilder {
            client,
            token: None,
            actions: false,
            show_payloads: false,
            base_path: String::new(),
            refresh: Duration::from_secs(1),
            statement_timeout: Duration::from_secs(5),
            elections: Vec::new(),
            expiring_within: Duration::from_secs(10),
            metric_key_prefixes: Vec::new(),
            metrics_only: false,
        }
    }

    /// The console's routes, under its base path.
    pub fn router(&self) -> Router {
        api::routes(self.state.clone())
    }

    /// Serves the console on `listener` until `shutdown` completes (open event streams are ended
    /// then).
    ///
    /// # Errors
    ///
    /// The listener's I/O errors.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let streams = self.state.shutdown.clone();
        let shutdown = async move {
            shutdown.await;
            streams.cancel();
        };
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
    }

    /// The path the console is served under (empty for the root; else `/name`, no trailing `/`).
    pub fn base_path(&self) -> &str {
        &self.state.base_path
    }

    /// Whether the console offers actions (redrive, force-release, purge).
    pub fn allows_actions(&self) -> bool {
        self.state.actions
    }
}

impl ConsoleBuilder {
    /// Require this token for every request (as `Bearer`, as the password of Basic auth, or
    /// typed into the login page). Required to serve off loopback.
    pub fn token(mut self, token: impl Into<String>) -> ConsoleBuilder {
        self.token = Some(token.into());
        self
    }

    /// Offer the actions: redrive dead letters, force-release a queue partition, purge. Off by
    /// default (read-only: every action answers 403). Never offered on a standby.
    pub fn allow_actions(mut self, allow: bool) -> ConsoleBuilder {
        self.actions = allow;
        self
    }

    /// Show message payloads (dead letters). Hidden by default: they may hold personal data.
    pub fn show_payloads(mut self, show: bool) -> ConsoleBuilder {
        self.show_payloads = show;
        self
    }

    /// Serve under this path (e.g. `/pglease` behind a proxy); empty or `/` for the root.
    pub fn base_path(mut self, path: &str) -> ConsoleBuilder {
        let trimmed = path.trim_end_matches('/');
        self.base_path = if trimmed.is_empty() {
            String::new()
        } else if trimmed.starts_with('/') {
            trimmed.to_owned()
        } else {
            format!("/{trimmed}")
        };
        self
    }

    /// How often an open page gets its view pushed (1 s by default; at least 100 ms).
    pub fn refresh(mut self, every: Duration) -> ConsoleBuilder {
        self.refresh = every.max(Duration::from_millis(100));
        self
    }

    /// The bound of every statement the console sends (5 s by default): a query that takes
    /// longer is cancelled by the server and the page shows a notice instead of hanging.
    pub fn statement_timeout(mut self, timeout: Duration) -> ConsoleBuilder {
        self.statement_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Show this election (an exact key, or every key starting with `prefix*`) in the elections
    /// view and in the metrics. An election is an ordinary key: the database does not know
    /// which keys are elections.
    pub fn election(mut self, name: impl Into<String>) -> ConsoleBuilder {
        self.elections.push(name.into());
        self
    }

    /// What counts as "expiring" (held, lapsing within this unless renewed): 10 s by default.
    pub fn expiring_within(mut self, within: Duration) -> ConsoleBuilder {
        self.expiring_within = within;
        self
    }

    /// Export per-key metrics (`pglease_lease_expires_in_seconds{key}`) for the keys starting
    /// with `prefix` (at most 1000 keys per prefix): label cardinality stays what you choose.
    pub fn metric_key_prefix(mut self, prefix: impl Into<String>) -> ConsoleBuilder {
        self.metric_key_prefixes.push(prefix.into());
        self
    }

    /// Serve `/metrics` only (`pglease metrics`): no page, no API.
    pub fn metrics_only(mut self, only: bool) -> ConsoleBuilder {
        self.metrics_only = only;
        self
    }

    /// The console.
    pub fn build(self) -> Console {
        Console {
            state: Arc::new(State {
                db: Db::new(self.client, self.statement_timeout),
                secrets: Secrets::new(self.token),
                actions: self.actions,
                show_payloads: self.show_payloads,
                base_path: self.base_path,
                refresh: self.refresh,
                elections: self.elections,
                expiring_within: self.expiring_within,
                metric_key_prefixes: self.metric_key_prefixes,
                sampler: Sampler::default(),
                metrics_only: self.metrics_only,
                shutdown: pglease::CancellationToken::new(),
                grants_baseline: std::sync::Mutex::new(None),
            }),
        }
    }
}
