//! The embedded local PostgreSQL server: what every command uses when no database URL is given.
//!
//! Unlike pgcluster's throw-away clusters (removed on drop, killed at process exit), this server
//! persists: its data directory survives, and the server keeps running after `pglease` exits so the
//! next invocation reuses it. Creating, starting (detached), finding and stopping it is
//! pgcluster's job ([`pgcluster::PersistentCluster`], which documents the directory's layout:
//! `data/`, the socket in `run/`, `server.log`, `bindir`, `lock`); this file chooses the directory,
//! says how to connect, and installs pg_lease and pg_lease_queue.
//!
//! Only the user who started it can connect (pgcluster's "Who may connect"): no TCP listener, a
//! socket directory of mode 0700, and SCRAM authentication with a generated password kept in the
//! directory's `password` file (0600). `pglease local url` prints a URL with that password.
//!
//! The directory is `$PGLEASE_LOCAL_DIR`, else `$XDG_DATA_HOME/pglease/local`, else
//! `~/.local/share/pglease/local`; as root `/var/lib/pglease/local` (chosen by pgcluster's
//! [`PersistentCluster::pglease_local`], which the crates' examples use too). As root, the server
//! runs as `$PGCLUSTER_USER` (default `nobody`), which must be able to reach the directory (checked
//! by pgcluster, with a clear error).
//!
//! # pg_lease in the local server
//!
//! Whenever a command uses the server, pg_lease is installed in database `postgres` if it is not yet:
//! the extension files embedded in this binary are written into the installation's
//! `<sharedir>/extension/` (when writable) and `CREATE EXTENSION` runs; where the server has no
//! extension files (a non-root user with a system PostgreSQL), the extension-less installer
//! ([`pglease::install`]) runs instead.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use pgcluster::{PersistentCluster, Started};

use crate::connect::{self, Limits};
use crate::embedded;
use crate::exit::{self, BoxError};

/// The port number of the local server's socket (`.s.PGSQL.5432`). The socket lives in the local
/// directory and the server listens on no TCP port, so it never collides with another server.
pub const PORT: u16 = 5432;
/// The database commands use, where pg_lease is installed.
pub const DATABASE: &str = "postgres";
/// The superuser created by `initdb`; it authenticates with the password pgcluster generated
/// (`password` in the local directory, mode 0600), over a socket only the server's account (and
/// root) may reach.
pub const USER: &str = "postgres";

/// The local server's directory, and everything derived from it.
#[derive(Debug, Clone)]
pub struct LocalServer {
    cluster: PersistentCluster,
}

impl LocalServer {
    /// The local server at `$PGLEASE_LOCAL_DIR` or the per-user default (see the module docs).
    ///
    /// # Errors
    ///
    /// Neither `PGLEASE_LOCAL_DIR` nor `HOME` (nor `XDG_DATA_HOME`) is set for a non-root user.
    pub fn from_env() -> Result<LocalServer, String> {
        let cluster = PersistentCluster::pglease_local().ok_or(
            "cannot place the local server: set PGLEASE_LOCAL_DIR (or HOME), or pass --database-url",
        )?;
        Ok(LocalServer::at(cluster.root().to_path_buf()))
    }

    /// The local server in `dir` (absolute).
    fn at(dir: PathBuf) -> LocalServer {
        LocalServer {
            cluster: PersistentCluster::new(dir).with_port(PORT),
        }
    }

    /// The local directory.
    pub fn dir(&self) -> &Path {
        self.cluster.root()
    }

    /// The server log.
    pub fn log_path(&self) -> PathBuf {
        self.cluster.log_path()
    }

    /// A connection URL for libpq and pglease, without the password (for showing): the socket
    /// directory percent-encoded as the host.
    pub fn url(&self) -> String {
        format!(
            "postgresql://{USER}@{}:{PORT}/{DATABASE}",
            percent_encode(self.cluster.socket_dir().as_os_str().as_bytes())
        )
    }

    /// [`url`](Self::url) with the password, for connecting (`None` before the server is created).
    pub fn url_with_password(&self) -> Option<String> {
        let password = self.cluster.password()?;
        Some(format!(
            "postgresql://{USER}:{}@{}:{PORT}/{DATABASE}",
            percent_encode(password.as_bytes()),
            percent_encode(self.cluster.socket_dir().as_os_str().as_bytes())
        ))
    }

    /// The file holding the password.
    pub fn password_path(&self) -> PathBuf {
        self.cluster.password_path()
    }

    /// The tokio-postgres configuration for the local server (with the password once created).
    pub fn pg_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.cluster.socket_dir())
            .port(PORT)
            .user(USER)
            .dbname(DATABASE)
            .application_name("pglease");
        if let Some(password) = self.cluster.password() {
            config.password(password);
        }
        config
    }

    /// The PostgreSQL major version of the data directory, if it has been created.
    pub fn major(&self) -> Option<u32> {
        self.cluster.major()
    }

    /// The running server's pid, if it runs.
    pub fn running(&self) -> Option<u32> {
        self.cluster.attach().map(|server| server.pid())
    }

    /// The server's full version (`postgres --version` of its installation), if known.
    pub fn version(&self) -> Option<String> {
        self.cluster.version().map(|v| v.to_string())
    }

    /// Creates the server if needed (PostgreSQL `major`), starts it if it is not running, and makes
    /// sure pg_lease is installed; returns once it accepts connections.
    ///
    /// Safe to call from several processes at once: they serialise on the directory's lock file, and
    /// all but the first find the server running. Connecting and each statement of the
    /// installation are bounded by `limits` (a hung server fails this instead of hanging it).
    pub async fn ensure_started(&self, major: u32, limits: Limits) -> Result<Started, BoxError> {
        let cluster = self.cluster.clone();
        let (started, _lock) = tokio::task::spawn_blocking(move || {
            let lock = cluster.lock()?;
            lock.start(major).map(|started| (started, lock))
        })
        .await?
        .map_err(|e| {
            let dir = self.dir().display();
            match e {
                // One line, with the log's path, instead of pages of old server log.
                pgcluster::Error::Start { message, log_tail } => exit::context(
                    format!("local server in {dir}"),
                    start_failure(&message, &log_tail, &self.log_path()),
                ),
                // The directory is at fault: say how to choose another.
                e @ pgcluster::Error::Directory { .. } => {
                    exit::context(format!("local server in {dir} (set PGLEASE_LOCAL_DIR)"), e)
                }
                e => exit::context(format!("local server in {dir}"), e),
            }
        })?;
        // Still under the lock: concurrent first starts install once (the installers also lock).
        self.ensure_installed(limits)
            .await
            .map_err(|e| exit::context("installing pg_lease in the local server", e))?;
        Ok(started)
    }

    /// Stops the server with a fast shutdown; returns whether it was running.
    pub async fn stop(&self) -> Result<bool, BoxError> {
        let cluster = self.cluster.clone();
        Ok(tokio::task::spawn_blocking(move || cluster.stop()).await??)
    }

    /// Installs our extensions (pg_lease, pg_lease_queue) in [`DATABASE`] unless they are there at
    /// this binary's versions.
    async fn ensure_installed(&self, limits: Limits) -> Result<(), BoxError> {
        let mut client =
            connect::connect_config(&self.pg_config(), tokio_postgres::NoTls, limits).await?;
        let what = || format!("waiting for the local server in {}", self.dir().display());
        let mut current = true;
        for ext in pglease::EXTENSIONS {
            let found = connect::within(limits.request, what, ext.installed(&client)).await?;
            current &= found.is_some_and(|f| f.version == ext.version);
        }
        if current {
            return Ok(());
        }
        // Where the installation's extension directory is not writable, its files may still be
        // there (installed by `make install` or a package); CREATE EXTENSION tells.
        if let Some(installation) = self.cluster.installation() {
            for files in embedded::extension_files() {
                let _ = files.install_into(&installation);
            }
        }
        for ext in pglease::EXTENSIONS {
            let created = connect::within(limits.request, what, async {
                Ok::<_, BoxError>(ext.create_extension(&mut client).await)
            })
            .await?;
            match created {
                Ok(_) => {}
                Err(e) if e.is_install() => {
                    connect::within(limits.request, what, ext.install(&mut client)).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Percent-encodes everything but unreserved URL characters.
fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A failed start in one line: what failed, the server's last error from the log, and the log's
/// path.
fn start_failure(message: &str, log_tail: &str, log: &std::path::Path) -> String {
    let what = message
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no reason given");
    let last_error = log_tail.lines().rev().find_map(|l| {
        ["FATAL:", "PANIC:", "ERROR:"].iter().find_map(|level| {
            let at = l.find(level)?;
            Some(format!("{level} {}", l[at + level.len()..].trim()))
        })
    });
    match last_error {
        Some(error) => format!(
            "PostgreSQL failed to start: {what}; the server said {error} (log: {})",
            log.display()
        ),
        None => format!(
            "PostgreSQL failed to start: {what} (log: {})",
            log.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_socket_directory() {
        let server = LocalServer::at(PathBuf::from("/tmp/a b/local"));
        assert_eq!(
            server.url(),
            "postgresql://postgres@%2Ftmp%2Fa%20b%2Flocal%2Frun:5432/postgres"
        );
        let parsed: tokio_postgres::Config = server.url().parse().unwrap();
        assert_eq!(
            parsed.get_hosts(),
            [tokio_postgres::config::Host::Unix(PathBuf::from(
                "/tmp/a b/local/run"
            ))]
        );
        assert_eq!(parsed.get_ports(), [PORT]);
        assert_eq!(parsed.get_dbname(), Some(DATABASE));
    }

    #[test]
    fn a_failed_start_is_one_line_with_the_servers_error_and_the_log() {
        let tail = "2026-12-04 02:08:50.376 UTC [1] LOG:  database system is ready\n\
                    2026-12-04 02:08:51.608 UTC [2] FATAL:  lock file \"postmaster.pid\" already exists\n\
                    2026-12-04 02:08:51.608 UTC [2] HINT:  Is another postmaster running?";
        let line = start_failure(
            "pg_ctl start failed (exit status: 1): pg_ctl: could not start server\nExamine the log",
            tail,
            Path::new("/d/server.log"),
        );
        assert_eq!(
            line,
            "PostgreSQL failed to start: pg_ctl start failed (exit status: 1): pg_ctl: could not \
             start server; the server said FATAL: lock file \"postmaster.pid\" already exists \
             (log: /d/server.log)"
        );
    }
}
