//! [`ConnectOptions`]: where and how to connect, read as libpq reads it — a connection string in
//! either form, the `PG*` variables for what it leaves out, the password file, and the TLS
//! settings (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) — and turned into what tokio-postgres
//! takes: a [`Config`] and a [`TlsConnector`].
//!
//! tokio-postgres' own parser knows only three sslmodes and no certificate files, and reads no
//! environment; everything libpq adds is applied here, then the rest is handed to it.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::{Config, Connection, Socket};

use crate::conninfo;
use crate::error::{Error, Result};
use crate::pgpass;
use crate::tls::{self, ClientCert, Roots, SslMode, TlsConnector};

/// Keywords handed to tokio-postgres as they are.
const PASSED: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
];

/// Keywords read here.
const OWN: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "passfile",
    "fallback_application_name",
    "sslsni",
    "sslcompression",
    "gssencmode",
    "client_encoding",
];

/// libpq keywords pglease does not implement: refused rather than silently ignored.
const UNSUPPORTED: &[&str] = &[
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslcertmode",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "requirepeer",
    "require_auth",
    "replication",
];

/// libpq's variables and the keyword each one supplies when the connection string omits it.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGPASSFILE", "passfile"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGSSLSNI", "sslsni"),
    ("PGSSLCOMPRESSION", "sslcompression"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGGSSENCMODE", "gssencmode"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
    ("PGCLIENTENCODING", "client_encoding"),
];

/// Where and how to connect, as libpq would: one value used by [`Client`](crate::Client)'s
/// builder, [`Listener`](crate::Listener), the queue consumer and the `pglease` command.
///
/// Made from a connection string, `postgresql://user@host:port/dbname?key=value` or
/// `host=... dbname=...`, with libpq's keywords. What the string leaves out comes from libpq's
/// variables ([`ENVIRONMENT`]: `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
/// `PGSSLMODE`, `PGSSLROOTCERT`, ...), else from libpq's defaults: the default socket directory,
/// port 5432, the operating-system user, database = user, `sslmode=prefer`, and files in
/// `~/.postgresql/` (`root.crt`, `postgresql.crt`, `postgresql.key`). Without a password, the
/// password file is read (`passfile`, `PGPASSFILE`, else `~/.pgpass`). Connections over a unix
/// socket never use TLS, as in libpq. The sslmodes and what each checks are in docs/CLIENT.md,
/// "Connecting".
///
/// Reading it opens only local files (certificates, keys, the password file); nothing connects
/// until it is used.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pglease::Result<()> {
/// let options = pglease::ConnectOptions::parse(
///     "postgresql://app@db.example/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
/// )?;
/// let client = pglease::Client::builder().connect_options(&options).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ConnectOptions {
    config: Config,
    ssl_mode: SslMode,
    tls: TlsConnector,
    password_file: Option<PathBuf>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Config's Debug redacts the password.
        f.debug_struct("ConnectOptions")
            .field("config", &self.config)
            .field("ssl_mode", &self.ssl_mode)
            .field("password_file", &self.password_file)
            .finish_non_exhaustive()
    }
}

impl FromStr for ConnectOptions {
    type Err = Error;

    fn from_str(s: &str) -> Result<ConnectOptions> {
        ConnectOptions::parse(s)
    }
}

impl ConnectOptions {
    /// Reads `conninfo` (either form; empty for the variables and defaults alone) with this
    /// process's environment.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`], with a message saying which part or setting is wrong and
    /// why: a string that does not parse, an unknown or unsupported keyword, an invalid value, a
    /// certificate or key file that is missing or unusable, a weak sslmode with
    /// `sslrootcert=system`.
    ///
    /// # Examples
    ///
    /// ```
    /// let e = pglease::ConnectOptions::parse("host=db dbname").unwrap_err();
    /// assert!(e.is_invalid_input());
    /// assert!(e.message().contains("missing `=` after \"dbname\""));
    /// ```
    pub fn parse(conninfo: &str) -> Result<ConnectOptions> {
        ConnectOptions::parse_with_env(conninfo, &|name| {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        })
    }

    /// The variables and defaults alone: [`parse`](Self::parse) of an empty string.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse).
    pub fn from_env() -> Result<ConnectOptions> {
        ConnectOptions::parse("")
    }

    /// As [`parse`](Self::parse), with the environment `env` (a variable's value, `None` when
    /// unset or empty) instead of the process's: `HOME` and the [`ENVIRONMENT`] variables.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse).
    pub fn parse_with_env(
        conninfo: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ConnectOptions> {
        Reading::new(conninfo, env)
            .and_then(Reading::finish)
            .map_err(Error::invalid_argument)
    }

    /// The tokio-postgres configuration: everything but TLS's certificate checks, which are the
    /// [`tls`](Self::tls) connector's.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The configuration, to change what tokio-postgres lets one change (e.g. a connect timeout).
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The connector to use with [`config`](Self::config).
    pub fn tls(&self) -> TlsConnector {
        self.tls.clone()
    }

    /// The sslmode in force (`prefer` unless set; `disable` for unix-socket connections).
    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    /// The password file the password was read from, if it was.
    pub fn password_file(&self) -> Option<&Path> {
        self.password_file.as_deref()
    }

    /// What libpq would have warned about while reading (a password file with group or world
    /// access, which is then ignored). A program shows these to its user; the library only
    /// emits them as `tracing` warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Connects one tokio-postgres connection; drive the returned `Connection` (e.g. spawn it).
    ///
    /// Only the socket connect is bounded (by `connect_timeout`); bound the whole with a timeout
    /// of your own.
    ///
    /// # Errors
    ///
    /// tokio-postgres' error: the server refused, authentication failed, TLS failed (the
    /// message says why the certificate was refused).
    pub async fn connect(
        &self,
    ) -> std::result::Result<
        (
            tokio_postgres::Client,
            Connection<
                Socket,
                <TlsConnector as tokio_postgres::tls::MakeTlsConnect<Socket>>::Stream,
            >,
        ),
        tokio_postgres::Error,
    > {
        self.config.connect(self.tls()).await
    }
}

/// A connection string being read: its settings, last one winning, then the variables'.
struct Reading<'a> {
    settings: BTreeMap<String, String>,
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
}

impl<'a> Reading<'a> {
    fn new(
        conninfo: &str,
        env: &'a dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<Reading<'a>, String> {
        let mut settings = BTreeMap::new();
        for (key, value) in conninfo::parse(conninfo)? {
            if UNSUPPORTED.contains(&key.as_str()) {
                return Err(format!(
                    "connection option {key:?} is not supported by pglease (see docs/CLIENT.md, \
                     \"Connecting\")"
                ));
            }
            if !PASSED.contains(&key.as_str()) && !OWN.contains(&key.as_str()) {
                return Err(format!(
                    "invalid connection option {key:?}; known options: {}",
                    PASSED
                        .iter()
                        .chain(OWN)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            settings.insert(key, value);
        }
        for (var, key) in ENVIRONMENT {
            if !settings.contains_key(*key)
                && let Some(value) = env(var)
            {
                settings.insert((*key).to_owned(), value);
            }
        }
        Ok(Reading {
            settings,
            env,
            warnings: Vec::new(),
        })
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    fn finish(mut self) -> std::result::Result<ConnectOptions, String> {
        self.check_accepted_values()?;
        let account = os_account(self.env);
        if self.get("host").is_none() && self.get("hostaddr").is_none() {
            self.settings.insert(
                "host".into(),
                default_socket_dir().to_string_lossy().into_owned(),
            );
        }
        if self.get("user").is_none() {
            let user = account
                .name
                .clone()
                .ok_or("no user given (user, PGUSER) and the operating-system user is unknown")?;
            self.settings.insert("user".into(), user);
        }
        if self.get("application_name").is_none()
            && let Some(name) = self.settings.remove("fallback_application_name")
        {
            self.settings.insert("application_name".into(), name);
        }
        if let Some(timeout) = self.get("connect_timeout") {
            let secs: i64 = timeout.trim().parse().map_err(|_| {
                format!("connect_timeout: {timeout:?} is not a whole number of seconds")
            })?;
            // libpq: 0 or less waits without bound; 1 counts as 2.
            match secs {
                ..=0 => self.settings.remove("connect_timeout"),
                1 => self.settings.insert("connect_timeout".into(), "2".into()),
                _ => None,
            };
        }
        let home = account.home.clone();
        let password_file = if self.get("password").is_none() {
            self.password_from_file(home.as_deref())
        } else {
            None
        };
        let unix_only = self.unix_only();
        let requested = self.ssl_mode()?;
        let ssl_mode = if unix_only {
            SslMode::Disable
        } else {
            requested
        };
        // tokio-postgres names the TLS peer by `host` only; libpq checks an address-only
        // connection against the address.
        if ssl_mode != SslMode::Disable
            && self.get("host").is_none()
            && let Some(addrs) = self.get("hostaddr").map(str::to_owned)
        {
            self.settings.insert("host".into(), addrs);
        }
        let tls = if ssl_mode == SslMode::Disable {
            tls::connector(SslMode::Disable, &Roots::None, None)?
        } else {
            let roots = self.roots(ssl_mode, home.as_deref())?;
            let client = self.client_cert(home.as_deref())?;
            tls::connector(ssl_mode, &roots, client.as_ref())?
        };
        let mut text = String::new();
        for (key, value) in &self.settings {
            if PASSED.contains(&key.as_str()) {
                text.push_str(&format!("{key}={} ", conninfo::quote(value)));
            }
        }
        let mut config: Config = text
            .parse()
            .map_err(|e| format!("invalid connection string: {e}"))?;
        config.ssl_mode(ssl_mode.wire());
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
        Ok(ConnectOptions {
            config,
            ssl_mode,
            tls,
            password_file,
            warnings: self.warnings,
        })
    }

    /// Settings pglease accepts only with the values that need nothing it lacks.
    fn check_accepted_values(&self) -> std::result::Result<(), String> {
        if let Some(mode) = self.get("gssencmode")
            && !matches!(mode, "disable" | "prefer")
        {
            return Err(format!(
                "gssencmode={mode}: pglease has no GSSAPI encryption; use disable or prefer"
            ));
        }
        if let Some(encoding) = self.get("client_encoding")
            && !encoding.eq_ignore_ascii_case("utf8")
            && !encoding.eq_ignore_ascii_case("auto")
        {
            return Err(format!(
                "client_encoding={encoding}: pglease always uses UTF8"
            ));
        }
        for key in ["sslsni", "sslcompression"] {
            if let Some(value) = self.get(key)
                && !matches!(value, "0" | "1")
            {
                return Err(format!("{key}={value}: expected 0 or 1"));
            }
        }
        Ok(())
    }

    /// Whether every host is a unix-socket directory (then TLS is never used, as in libpq).
    fn unix_only(&self) -> bool {
        self.get("hostaddr").is_none()
            && self.get("host").is_some_and(|h| {
                h.split(',')
                    .all(|h| h.starts_with('/') || h.starts_with('@'))
            })
    }

    /// The sslmode asked for; `sslrootcert=system` makes `verify-full` the default and the only
    /// mode allowed, as in libpq 16.
    fn ssl_mode(&self) -> std::result::Result<SslMode, String> {
        let system = self.get("sslrootcert") == Some("system");
        match self.get("sslmode") {
            None if system => Ok(SslMode::VerifyFull),
            None => Ok(SslMode::Prefer),
            Some(text) => {
                let mode = SslMode::parse(text).ok_or_else(|| {
                    format!(
                        "invalid sslmode {text:?}; expected disable, allow, prefer, require, \
                         verify-ca or verify-full"
                    )
                })?;
                if system && mode != SslMode::VerifyFull {
                    return Err(format!(
                        "sslmode={mode} may not be used with sslrootcert=system (use verify-full)"
                    ));
                }
                Ok(mode)
            }
        }
    }

    /// The roots the server's certificate is checked against, if any.
    fn roots(&self, mode: SslMode, home: Option<&Path>) -> std::result::Result<Roots, String> {
        let (path, setting) = match self.get("sslrootcert") {
            Some("system") => return Ok(Roots::System),
            Some(path) => (PathBuf::from(path), "sslrootcert"),
            None => match home {
                Some(home) => (home.join(".postgresql/root.crt"), "the default sslrootcert"),
                None if mode.verifies() => {
                    return Err(format!(
                        "sslmode={mode} needs the CA's certificate, and there is no home \
                         directory to find ~/.postgresql/root.crt in: set sslrootcert"
                    ));
                }
                None => return Ok(Roots::None),
            },
        };
        if path.is_file() {
            return Ok(Roots::File(path));
        }
        if mode.verifies() {
            return Err(format!(
                "sslmode={mode}: root certificate file {} ({setting}) does not exist; provide \
                 the CA's certificate there, use the system's trusted CAs with \
                 sslrootcert=system, or choose an sslmode that does not verify the server",
                path.display()
            ));
        }
        Ok(Roots::None)
    }

    /// The client certificate and key: `sslcert`/`sslkey`, else `~/.postgresql/postgresql.crt`
    /// and `.key` when the certificate exists.
    fn client_cert(&self, home: Option<&Path>) -> std::result::Result<Option<ClientCert>, String> {
        let cert = match (self.get("sslcert"), home) {
            (Some(path), _) => {
                let path = PathBuf::from(path);
                if !path.is_file() {
                    return Err(format!(
                        "sslcert {}: the certificate file does not exist",
                        path.display()
                    ));
                }
                path
            }
            (None, Some(home)) => {
                let path = home.join(".postgresql/postgresql.crt");
                if !path.is_file() {
                    return Ok(None);
                }
                path
            }
            (None, None) => return Ok(None),
        };
        let key = match (self.get("sslkey"), home) {
            (Some(path), _) => PathBuf::from(path),
            (None, Some(home)) => home.join(".postgresql/postgresql.key"),
            (None, None) => {
                return Err(format!("sslcert {} is given but no sslkey", cert.display()));
            }
        };
        check_key_file(&key)?;
        Ok(Some(ClientCert { cert, key }))
    }

    /// The password from the password file, if one matches; the file it came from.
    fn password_from_file(&mut self, home: Option<&Path>) -> Option<PathBuf> {
        let path = match self.get("passfile") {
            Some(path) => PathBuf::from(path),
            None => home?.join(".pgpass"),
        };
        let user = self.get("user").unwrap_or_default().to_owned();
        let dbname = self.get("dbname").unwrap_or(&user).to_owned();
        let port = self
            .get("port")
            .and_then(|p| p.split(',').next())
            .filter(|p| !p.is_empty())
            .unwrap_or("5432")
            .to_owned();
        let default_socket = default_socket_dir().to_string_lossy().into_owned();
        let mut hosts: Vec<String> = match (self.get("host"), self.get("hostaddr")) {
            (Some(hosts), _) => hosts.split(',').map(str::to_owned).collect(),
            (None, Some(addrs)) => addrs.split(',').map(str::to_owned).collect(),
            (None, None) => vec!["localhost".into()],
        };
        if hosts.contains(&default_socket) {
            hosts.push("localhost".into());
        }
        let lookup = pgpass::Lookup {
            hosts: hosts.iter().map(String::as_str).collect(),
            port: &port,
            dbname: &dbname,
            user: &user,
        };
        let mut warnings = Vec::new();
        let found = pgpass::find(&path, &lookup, &mut |w| warnings.push(w));
        self.warnings.extend(warnings);
        let password = found?;
        self.settings.insert("password".into(), password);
        Some(path)
    }
}

/// libpq's check of a private key file: no group or world access, except group read when root
/// owns it.
fn check_key_file(path: &Path) -> std::result::Result<(), String> {
    let meta = fs::metadata(path).map_err(|e| {
        format!(
            "sslkey {}: cannot read the private key file: {e}",
            path.display()
        )
    })?;
    let mode = meta.mode();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let too_open =
        (meta.uid() == euid && mode & 0o077 != 0) || (meta.uid() == 0 && mode & 0o037 != 0);
    if too_open {
        return Err(format!(
            "sslkey {}: the private key file has group or world access; it must have \
             permissions u=rw (0600) or less if owned by the current user, or u=rw,g=r (0640) \
             or less if owned by root",
            path.display()
        ));
    }
    Ok(())
}

/// libpq's default socket directory: Debian's `/var/run/postgresql` if present, else `/tmp`.
pub(crate) fn default_socket_dir() -> &'static Path {
    ["/run/postgresql", "/var/run/postgresql"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .unwrap_or(Path::new("/tmp"))
}

/// The operating-system account: its name and home directory (`HOME` first, as libpq).
struct Account {
    name: Option<String>,
    home: Option<PathBuf>,
}

fn os_account(env: &dyn Fn(&str) -> Option<String>) -> Account {
    let mut name = None;
    let mut dir = None;
    // SAFETY: passwd is plain data (integers and pointers), valid when zeroed.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `pwd` and `result` are local, `buf` is
    // writable for `buf.len()` bytes; the strings read after it live in `buf`.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc == 0 && !result.is_null() {
        // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings in `buf`.
        unsafe {
            if !pwd.pw_name.is_null() {
                name = CStr::from_ptr(pwd.pw_name).to_str().ok().map(str::to_owned);
            }
            if !pwd.pw_dir.is_null() {
                dir = CStr::from_ptr(pwd.pw_dir).to_str().ok().map(PathBuf::from);
            }
        }
    }
    Account {
        name,
        home: env("HOME").map(PathBuf::from).or(dir),
    }
}

#[cfg(test)]
mod tests;
