//! Where commands connect, decided before any I/O: a URL (`--database-url` / `DATABASE_URL`), libpq's
//! `PG*` variables, or the embedded local server; and connecting to it.
//!
//! The URL or the `PG*` variables are read by the client library as libpq reads them
//! ([`pglease::ConnectOptions`]: libpq's variables for what the URL leaves out, the password file,
//! TLS by `sslmode`, `sslrootcert`, `sslcert` and `sslkey`), so the command and programs using the
//! library connect alike. The embedded local server is reached over its unix socket, without TLS.
//!
//! Every exchange with the server is bounded ([`Limits`]): establishing a connection by libpq's
//! `connect_timeout` (URL or conninfo, else `PGCONNECT_TIMEOUT`, else 10 s; per host; 0 means no
//! bound), which here covers the startup and authentication too, not only the socket as in
//! tokio-postgres; and each answer by `--request-timeout` ([`Target::answer`]). Signals are the
//! callers' business (`config.rs`); a bound that passes is a [`NoAnswer`] error.

use std::future::Future;
use std::time::Duration;

use pglease::{ConnectOptions, TlsConnector};
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Config, Socket};

use crate::cli::ConnArgs;
use crate::exit::{self, BoxError};
use crate::local::LocalServer;

/// The variables whose presence selects libpq-style settings over the local server.
const SELECTING_VARS: &[&str] = &["PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE"];

/// How long connecting to one host may take when neither `connect_timeout` (in the URL) nor
/// `PGCONNECT_TIMEOUT` says: libpq would wait without bound, pglease does not.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long pglease waits for each answer from the server (`--request-timeout`,
/// `PGLEASE_REQUEST_TIMEOUT`); a blocking acquire may take `--wait` longer.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// libpq's shortest connect timeout: smaller positive values count as 2 seconds.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The time bounds of every exchange with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Establishing a connection, per host tried (socket, startup, authentication); `None` when
    /// `connect_timeout` is 0 (libpq's "wait indefinitely"; a signal still ends the command).
    pub connect: Option<Duration>,
    /// Each answer to a request on an established connection.
    pub request: Duration,
}

impl Limits {
    /// The limits for commands without connection arguments (`pglease local ...`): the local
    /// server's connections honour `PGCONNECT_TIMEOUT` and `PGLEASE_REQUEST_TIMEOUT`.
    ///
    /// # Errors
    ///
    /// An invalid value of either variable (a usage error).
    pub fn from_env() -> Result<Limits, ConfigError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let request = match env("PGLEASE_REQUEST_TIMEOUT") {
            Some(v) => crate::cli::parse_request_timeout(&v)
                .map_err(|e| ConfigError::Usage(format!("PGLEASE_REQUEST_TIMEOUT={v}: {e}")))?,
            None => DEFAULT_REQUEST_TIMEOUT,
        };
        Ok(Limits {
            connect: connect_timeout("", &env).map_err(ConfigError::Usage)?,
            request,
        })
    }
}

/// The connect timeout libpq would use: `connect_timeout` in `url`, else `PGCONNECT_TIMEOUT`, else
/// [`DEFAULT_CONNECT_TIMEOUT`]; 0 or less means no bound, 1 means 2 seconds (as libpq has it).
fn connect_timeout(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Duration>, String> {
    let (text, source) = match raw_param(url, "connect_timeout") {
        Some(v) => (v, "connect_timeout"),
        None => match env("PGCONNECT_TIMEOUT") {
            Some(v) => (v, "PGCONNECT_TIMEOUT"),
            None => return Ok(Some(DEFAULT_CONNECT_TIMEOUT)),
        },
    };
    let secs: i64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{source}: invalid number of seconds {text:?}"))?;
    Ok(u64::try_from(secs)
        .ok()
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s).max(MIN_CONNECT_TIMEOUT)))
}

/// The raw value of setting `name` in a URL's query (`?connect_timeout=5`) or a conninfo string
/// (`connect_timeout=5`, `connect_timeout = '5'`).
fn raw_param(url: &str, name: &str) -> Option<String> {
    if url.starts_with("postgresql://") || url.starts_with("postgres://") {
        let query = url.split_once('?')?.1;
        return query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned());
    }
    // conninfo: key = value pairs, values optionally single-quoted with backslash escapes.
    let mut chars = url.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        if key.is_empty() {
            return None;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\'' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        if key == name {
            return Some(value);
        }
    }
}

/// Where to connect, and how long each exchange may take.
#[derive(Debug, Clone)]
pub struct Target {
    place: Place,
    limits: Limits,
}

/// The server a [`Target`] names.
#[derive(Debug, Clone)]
enum Place {
    /// A given server: from the URL, or from `PG*` variables alone.
    Remote {
        /// The complete configuration, TLS included.
        options: Box<ConnectOptions>,
        /// What chose it, for messages: `database URL` or `PG* variables`.
        via: &'static str,
    },
    /// The embedded local server, started on demand with PostgreSQL `major` if it has to be created.
    Local {
        /// The server.
        server: LocalServer,
        /// The major version of a new local server.
        major: u32,
        /// A connector for its unix socket, where TLS is never used.
        tls: TlsConnector,
    },
}

impl Target {
    /// Decides the target from the arguments and the environment; no I/O.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, a `PG*` variable with an invalid value, a TLS setting naming a
    /// missing or unusable file (all usage errors); or no place for the local server.
    pub fn resolve(args: &ConnArgs, local_major: u32) -> Result<Target, ConfigError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let target = Target::resolve_with(args, local_major, &env)?;
        if let Place::Remote { options, .. } = &target.place {
            for warning in options.warnings() {
                eprintln!("pglease: warning: {warning}");
            }
        }
        Ok(target)
    }

    fn resolve_with(
        args: &ConnArgs,
        local_major: u32,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Target, ConfigError> {
        let (text, via, context) = match &args.database_url {
            Some(url) => (
                url.as_str(),
                "database URL",
                "--database-url / DATABASE_URL",
            ),
            None if SELECTING_VARS.iter().any(|v| env(v).is_some()) => {
                ("", "PG* variables", "the PG* variables")
            }
            None => {
                let server = LocalServer::from_env().map_err(ConfigError::Other)?;
                // The local server's socket: no TLS, and nothing from the environment.
                let tls = ConnectOptions::parse_with_env("host=/ user=pglease", &|_| None)
                    .map_err(|e| ConfigError::Other(e.message().to_owned()))?
                    .tls();
                return Ok(Target {
                    place: Place::Local {
                        server,
                        major: local_major,
                        tls,
                    },
                    limits: Limits {
                        connect: connect_timeout("", env).map_err(ConfigError::Usage)?,
                        request: args.request_timeout,
                    },
                });
            }
        };
        let mut options = ConnectOptions::parse_with_env(text, env)
            .map_err(|e| ConfigError::Usage(format!("{context}: {}", e.message())))?;
        let connect = connect_timeout(text, env).map_err(ConfigError::Usage)?;
        let config = options.config_mut();
        if config.get_application_name().is_none() {
            config.application_name("pglease");
        }
        if let Some(timeout) = connect {
            config.connect_timeout(timeout);
        }
        Ok(Target {
            place: Place::Remote {
                options: Box::new(options),
                via,
            },
            limits: Limits {
                connect,
                request: args.request_timeout,
            },
        })
    }

    /// The TLS connector to use with [`config`](Self::config).
    pub fn tls(&self) -> TlsConnector {
        match &self.place {
            Place::Remote { options, .. } => options.tls(),
            Place::Local { tls, .. } => tls.clone(),
        }
    }

    /// Whether this is the embedded local server.
    pub fn is_local(&self) -> bool {
        matches!(self.place, Place::Local { .. })
    }

    /// The connection settings (starting the local server first if it is the target), with
    /// `connect_timeout` set to the connect bound for each host.
    pub async fn config(&self) -> Result<Config, BoxError> {
        match &self.place {
            Place::Remote { options, .. } => Ok(options.config().clone()),
            Place::Local { server, major, .. } => {
                let started = server.ensure_started(*major, self.limits).await?;
                if started.created || started.started {
                    // Said once, when this command starts it: under cron (no DATABASE_URL) a job
                    // would otherwise silently use a private server.
                    eprintln!(
                        "pglease: no database URL given (--database-url, DATABASE_URL or PG* \
                         variables): {} the local server in {} (see `pglease local --help`)",
                        if started.created {
                            "created and started"
                        } else {
                            "started"
                        },
                        server.dir().display()
                    );
                }
                let mut config = server.pg_config();
                if let Some(timeout) = self.limits.connect {
                    config.connect_timeout(timeout);
                }
                Ok(config)
            }
        }
    }

    /// Connects (starting the local server first if it is the target), within the connect bound.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, BoxError> {
        let config = self.config().await?;
        connect_config(&config, self.tls(), self.limits)
            .await
            .map_err(|e| exit::context(format!("connecting to {}", self.describe()), e))
    }

    /// A [`pglease::Client`] for this target (for `pglease run`): one connection is opened first
    /// with [`connect`](Self::connect), so that a refused or silent server is reported as such
    /// within the connect bound; the client's pool then uses the same bound for each connection.
    pub async fn client(
        &self,
        builder: pglease::ClientBuilder,
    ) -> Result<pglease::Client, BoxError> {
        drop(self.connect().await?);
        let config = self.config().await?;
        let builder = match self.limits.connect {
            Some(timeout) => builder.connect_timeout(timeout * hosts(&config)),
            None => builder,
        };
        builder
            .connect_with(config, self.tls())
            .await
            .map_err(|e| exit::context(format!("connecting to {}", self.describe()), e))
    }

    /// Awaits one answer from the server, at most the request bound.
    ///
    /// # Errors
    ///
    /// The call's own error, or [`NoAnswer`] when the bound passes first (the call's future is
    /// dropped: its outcome on the server is unknown).
    pub async fn answer<T, E: Into<BoxError>>(
        &self,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, BoxError> {
        self.answer_after(Duration::ZERO, fut).await
    }

    /// Like [`answer`](Self::answer) for a call that may legitimately take `extra` longer (a
    /// blocking acquire waits up to `--wait` on the server).
    pub async fn answer_after<T, E: Into<BoxError>>(
        &self,
        extra: Duration,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, BoxError> {
        let bound = self.limits.request.saturating_add(extra);
        within(bound, || format!("waiting for {}", self.describe()), fut).await
    }

    /// A description for messages, without the password.
    pub fn describe(&self) -> String {
        match &self.place {
            Place::Remote { options, via } => {
                // The mode is named where it makes the connection TLS-only.
                let mode = options.ssl_mode();
                let tls = if mode.requires_tls() {
                    format!(", sslmode={mode}")
                } else {
                    String::new()
                };
                format!(
                    "{} (from the {via}{tls})",
                    describe_config(options.config())
                )
            }
            Place::Local { server, .. } => format!("local server in {}", server.dir().display()),
        }
    }
}

/// A server that gave no answer within a bound.
#[derive(Debug)]
pub struct NoAnswer {
    /// What was being done.
    what: String,
    /// The bound.
    after: Duration,
    /// What it means, and which setting sets the bound.
    how: &'static str,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: no answer within {} ({})",
            self.what,
            crate::output::duration(self.after),
            self.how
        )
    }
}

impl std::error::Error for NoAnswer {}

/// Awaits `fut`, at most `bound`; then fails with [`NoAnswer`] saying what was awaited.
pub async fn within<T, E: Into<BoxError>>(
    bound: Duration,
    what: impl FnOnce() -> String,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, BoxError> {
    match tokio::time::timeout(bound, fut).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(Box::new(NoAnswer {
            what: what(),
            after: bound,
            how: "the outcome of the call is unknown; --request-timeout or \
                  PGLEASE_REQUEST_TIMEOUT sets this bound",
        })),
    }
}

/// How many hosts (names and addresses) `config` may try, at least 1.
fn hosts(config: &Config) -> u32 {
    let n = config.get_hosts().len().max(config.get_hostaddrs().len());
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// A configuration problem found before any I/O.
#[derive(Debug)]
pub enum ConfigError {
    /// The command line or a connection variable is invalid: exit code 2.
    Usage(String),
    /// Anything else: exit code 1.
    Other(String),
}

/// `user@host:port/dbname` for messages (no password).
fn describe_config(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    // A host's name is what the user chose (and what TLS checks); addresses only when no name.
    let hosts = if hosts.is_empty() {
        config
            .get_hostaddrs()
            .iter()
            .map(|a| a.to_string())
            .collect()
    } else {
        hosts
    };
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let port = if ports.is_empty() {
        "5432".to_string()
    } else {
        ports.join(",")
    };
    format!(
        "{}@{}:{}/{}",
        config.get_user().unwrap_or("(os user)"),
        hosts.join(","),
        port,
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(os user)")
    )
}

/// Connects with `config` and the TLS connector `tls`, and drives the connection on a spawned
/// task. Establishing it (socket, TLS, startup, authentication: everything libpq's
/// `connect_timeout` covers) may take at most `limits.connect` per host; tokio-postgres alone
/// bounds only the socket connect.
pub async fn connect_config<T>(
    config: &Config,
    tls: T,
    limits: Limits,
) -> Result<tokio_postgres::Client, BoxError>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let connecting = config.connect(tls);
    let (client, connection) = match limits.connect {
        None => connecting.await?,
        Some(per_host) => {
            let bound = per_host * hosts(config);
            tokio::time::timeout(bound, connecting)
                .await
                .map_err(|_| NoAnswer {
                    what: "establishing the connection".into(),
                    after: bound,
                    how: "the server accepted but did not answer; connect_timeout in the URL or \
                          PGCONNECT_TIMEOUT sets this bound per host",
                })??
        }
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

#[cfg(test)]
mod tests;
