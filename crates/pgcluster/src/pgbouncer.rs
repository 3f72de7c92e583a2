//! A throw-away PgBouncer in transaction-pooling mode in front of a [`Cluster`], for tests of
//! clients behind a pooler.
//!
//! PgBouncer is not fetched: it must be installed (the Debian package `pgbouncer`, found at
//! `/usr/sbin/pgbouncer`, `/usr/bin/pgbouncer` or on `PATH`). It listens only on a unix socket in a
//! directory that its own account alone (and root) may enter, reaches the cluster through the
//! cluster's unix socket, trusts the users it is told about (as the cluster's socket does), and
//! runs from a private temporary directory (configuration, user list, log) that is removed with it.
//! As root, it is started with `-u <user>` for the same unprivileged user as the server
//! ([`server_user`](crate::server_user)), since PgBouncer refuses to run as root.
//!
//! ```no_run
//! # fn demo() -> pgcluster::Result<()> {
//! let cluster = pgcluster::ClusterBuilder::for_major(15)?.start()?;
//! let bouncer = pgcluster::pgbouncer::PgBouncer::builder(&cluster)
//!     .database("postgres")
//!     .user("postgres")
//!     .pool_size(1)
//!     .start()?;
//! println!("{}", bouncer.connection_string("postgres", "postgres"));
//! # Ok(())
//! # }
//! ```

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Cluster, Error, Result};

/// How long PgBouncer may take to start listening.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Configures a [`PgBouncer`]; start it with [`PgBouncerBuilder::start`].
#[derive(Debug)]
pub struct PgBouncerBuilder<'a> {
    cluster: &'a Cluster,
    databases: Vec<String>,
    users: Vec<String>,
    admin_users: Vec<String>,
    pool_size: u32,
    max_client_conn: u32,
}

/// A running PgBouncer with `pool_mode = transaction`; killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// A builder for a PgBouncer in front of `cluster`: no databases or users yet, a pool of 20
    /// server connections per (database, user), at most 200 client connections.
    pub fn builder(cluster: &Cluster) -> PgBouncerBuilder<'_> {
        PgBouncerBuilder {
            cluster,
            databases: Vec::new(),
            users: Vec::new(),
            admin_users: Vec::new(),
            pool_size: 20,
            max_client_conn: 200,
        }
    }

    /// The port of PgBouncer's unix socket (`.s.PGSQL.<port>` in [`socket_dir`](Self::socket_dir)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of PgBouncer's unix socket (mode 0700: only PgBouncer's account, and root,
    /// may enter). PgBouncer has no TCP listener.
    pub fn socket_dir(&self) -> PathBuf {
        socket_dir(self.dir.path())
    }

    fn socket_path(&self) -> PathBuf {
        self.socket_dir().join(format!(".s.PGSQL.{}", self.port))
    }

    /// A libpq key=value connection string through PgBouncer:
    /// `host=<socket_dir> port=<port> user=<user> dbname=<dbname>`. The database `pgbouncer` is
    /// PgBouncer's admin console (for [admin users](PgBouncerBuilder::admin_user)).
    pub fn connection_string(&self, dbname: &str, user: &str) -> String {
        format!(
            "host={} port={} user={user} dbname={dbname}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// PgBouncer's log so far (its stdout and stderr); empty if unreadable.
    pub fn log(&self) -> String {
        fs::read_to_string(log_path(self.dir.path())).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PgBouncerBuilder<'_> {
    /// Serves the cluster's database `name` under the same name (repeatable).
    pub fn database(mut self, name: impl Into<String>) -> Self {
        self.databases.push(name.into());
        self
    }

    /// Lets `name` log in, without a password, as the same role on the cluster (repeatable).
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.users.push(name.into());
        self
    }

    /// Lets `name` log in and use the admin console (`SHOW CONFIG`, ...), database `pgbouncer`.
    pub fn admin_user(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.users.push(name.clone());
        self.admin_users.push(name);
        self
    }

    /// Server connections per (database, user) pair (`default_pool_size`). With 1, every client
    /// transaction of a user runs on the same server session.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// Client connections PgBouncer accepts in all (`max_client_conn`).
    pub fn max_client_conn(mut self, n: u32) -> Self {
        self.max_client_conn = n;
        self
    }

    /// Writes the configuration, starts PgBouncer and returns once it accepts TCP connections.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if PgBouncer is not installed or its files cannot be written or it cannot be
    /// spawned; [`Error::UnknownUser`] as root without an unprivileged user to run it as;
    /// [`Error::Command`] if it exits during start-up (its log is the message);
    /// [`Error::Timeout`] if it does not listen within 30 seconds.
    pub fn start(self) -> Result<PgBouncer> {
        let exe = find_pgbouncer()?;
        let dir = tempfile::Builder::new()
            .prefix("pgcluster-pgbouncer-")
            .tempdir()
            .map_err(|e| Error::io("creating a directory for", std::env::temp_dir(), e))?;
        // PgBouncer may run as another user: it must read its files.
        set_mode(dir.path(), 0o755)?;
        let port = free_port()?;
        let users = dir.path().join("userlist.txt");
        let userlist: String = self
            .users
            .iter()
            .map(|u| format!("\"{u}\" \"\"\n"))
            .collect();
        write_readable(&users, &userlist)?;
        let ini = dir.path().join("pgbouncer.ini");
        // Clients reach PgBouncer only through a unix socket in a directory of its own account
        // (mode 0700): it trusts whoever reaches it, as the cluster's socket does.
        let socket_dir = socket_dir(dir.path());
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&socket_dir)
            .map_err(|e| Error::io("creating", &socket_dir, e))?;
        if let Some(user) = crate::server_user()? {
            std::os::unix::fs::chown(&socket_dir, Some(user.uid), Some(user.gid))
                .map_err(|e| Error::io("chown", &socket_dir, e))?;
        }
        write_readable(&ini, &self.ini(port, &users, &socket_dir))?;

        let log = log_path(dir.path());
        let out = fs::File::create(&log).map_err(|e| Error::io("creating", &log, e))?;
        let err = out.try_clone().map_err(|e| Error::io("opening", &log, e))?;
        let mut command = Command::new(&exe);
        if let Some(user) = crate::server_user()? {
            command.args(["-u", &user.name]);
        }
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io("starting", &exe, e))?;
        let mut bouncer = PgBouncer { child, port, dir };
        let deadline = Instant::now() + START_LIMIT;
        while UnixStream::connect(bouncer.socket_path()).is_err() {
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                return Err(Error::Command {
                    program: exe.display().to_string(),
                    status: status.to_string(),
                    stderr: bouncer.log(),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "PgBouncer to listen on port {port}; log:\n{}",
                        bouncer.log()
                    ),
                    seconds: START_LIMIT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(bouncer)
    }

    /// The contents of `pgbouncer.ini`.
    fn ini(&self, port: u16, users: &Path, socket_dir: &Path) -> String {
        let server = self.cluster.port();
        let databases: String = self
            .databases
            .iter()
            .map(|db| {
                format!(
                    "{db} = host={} port={server} dbname={db}\n",
                    self.cluster.socket_dir().display()
                )
            })
            .collect();
        let admin_users = if self.admin_users.is_empty() {
            String::new()
        } else {
            format!("admin_users = {}\n", self.admin_users.join(", "))
        };
        format!(
            "[databases]\n\
             {databases}\
             [pgbouncer]\n\
             listen_addr =\n\
             listen_port = {port}\n\
             unix_socket_dir = {socket_dir}\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = transaction\n\
             default_pool_size = {pool_size}\n\
             max_client_conn = {max_client_conn}\n\
             {admin_users}\
             ignore_startup_parameters = extra_float_digits\n",
            users = users.display(),
            socket_dir = socket_dir.display(),
            pool_size = self.pool_size,
            max_client_conn = self.max_client_conn,
        )
    }
}

/// The installed PgBouncer binary.
fn find_pgbouncer() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    [PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")]
        .into_iter()
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join("pgbouncer"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::io(
                "finding",
                "pgbouncer",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not in /usr/sbin, /usr/bin or on PATH; install it (Debian: \
                     `apt-get install pgbouncer`)",
                ),
            )
        })
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("pgbouncer.log")
}

fn write_readable(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).map_err(|e| Error::io("writing", path, e))?;
    set_mode(path, 0o644)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("changing the mode of", path, e))
}

/// Where PgBouncer's unix socket is, in its directory `dir`.
fn socket_dir(dir: &Path) -> PathBuf {
    dir.join("s")
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> Result<u16> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("binding a free port on", "127.0.0.1", e))
}
