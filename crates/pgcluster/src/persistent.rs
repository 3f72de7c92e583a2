//! Clusters that outlive the process: a data directory kept on disk, a server started detached
//! with the installation's own `pg_ctl` (so it keeps running after this process exits), found again
//! by later processes ([`PersistentCluster::attach`]), and a lock file that makes processes
//! starting or stopping the same directory take turns.
//!
//! Unlike [`Cluster`](crate::Cluster)s, nothing here is removed on drop or at exit, and nothing
//! is swept: the directory and the server belong to whoever chose the directory.
//! The directory's layout is documented on [`PersistentCluster`].
//!
//! # Who may connect
//!
//! Only the user who created the directory (and root). The server listens on no TCP port; its
//! socket directory is mode 0700, owned by the server's account; and every connection must
//! authenticate with `scram-sha-256` as `postgres`, whose password is generated at creation and
//! kept in `password` (mode 0600, owned by the creating user). When root creates the directory the
//! server runs as an unprivileged account (`nobody`) that can reach the socket but cannot read the
//! password, so other processes of that account are refused too. A directory made by an older
//! version (trust authentication) is converted on its next start: the server is stopped if it
//! runs, the password set in single-user mode, and `pg_hba.conf` rewritten.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cluster::{conninfo_quote, spawn_connection};
use crate::discover::ensure;
use crate::error::{Error, IoContext, Result};
use crate::install::{Installation, run_stdout};
use crate::proctree;
use crate::user::{self, ServerUser};
use crate::version::PgVersion;

mod create;
mod stale;

use create::check_reachable;

/// The port number of the socket unless [`PersistentCluster::with_port`] says otherwise.
pub const DEFAULT_PORT: u16 = 5432;
/// How long `pg_ctl` waits for start-up or shutdown, in seconds.
const PG_CTL_TIMEOUT_SECS: u32 = 60;
/// The longest unix socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A cluster in a directory that outlives the process. Creating the value reads and writes
/// nothing; the data directory is made by the first [`start`](Self::start).
///
/// # Layout
///
/// | path | what |
/// | --- | --- |
/// | `data/` | the data directory (`initdb` into `data.init-<pid>/`, then renamed: never half made) |
/// | `run/` | the unix socket directory (`.s.PGSQL.<port>`); the server listens on no TCP port |
/// | `server.log` | the server's log (`pg_ctl -l`; mode 0600) |
/// | `bindir` | the PostgreSQL bin directory the data directory was created with |
/// | `password` | the password of role `postgres` (mode 0600, the creating user's) |
/// | `lock` | `flock`ed while a process starts or stops the server |
///
/// As root, `initdb`, `pg_ctl` and the server run as [`server_user`](crate::server_user), which
/// must be able to enter every ancestor of the directory (checked before start, with a clear
/// error).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pgcluster::Result<()> {
/// let dir = pgcluster::PersistentCluster::new("/var/lib/myapp/pg");
/// let started = dir.start(15)?; // creates it the first time; a no-op if it runs
/// let client = started.server.connect("postgres").await?;
/// client.simple_query("SELECT 1").await?;
/// drop(started); // the server keeps running; a later process attaches to it
/// assert!(dir.attach().is_some());
/// dir.stop()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistentCluster {
    root: PathBuf,
    port: u16,
}

/// A running server of a [`PersistentCluster`], as read from its `postmaster.pid`. Dropping it
/// leaves the server running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedServer {
    pid: u32,
    socket_dir: PathBuf,
    port: u16,
    password: Option<String>,
}

/// What [`StartStopLock::start`] found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The running server.
    pub server: DetachedServer,
    /// Whether this call created the data directory (`initdb`).
    pub created: bool,
    /// Whether this call started the server (false: it was running already).
    pub started: bool,
}

/// The exclusive lock of a [`PersistentCluster`]'s directory, held while a process starts or
/// stops its server (an `flock` on the `lock` file, released on drop, also if the process dies).
/// Only a holder can [`start`](Self::start) or [`stop`](Self::stop).
#[derive(Debug)]
pub struct StartStopLock {
    cluster: PersistentCluster,
    _file: File,
}

impl PersistentCluster {
    /// The cluster in `root` (made absolute against the current directory when relative),
    /// with its socket on port [`DEFAULT_PORT`].
    pub fn new(root: impl Into<PathBuf>) -> PersistentCluster {
        let root = root.into();
        let root = match std::env::current_dir() {
            Ok(cwd) if root.is_relative() => cwd.join(root),
            _ => root,
        };
        PersistentCluster {
            root,
            port: DEFAULT_PORT,
        }
    }

    /// pglease's local server (`pglease local`, and the examples without `DATABASE_URL`): the
    /// directory `$PGLEASE_LOCAL_DIR`, else as root `/var/lib/pglease/local`, else
    /// `$XDG_DATA_HOME/pglease/local`, else `~/.local/share/pglease/local`; port
    /// [`DEFAULT_PORT`]. `None` when none of those variables places it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> pgcluster::Result<()> {
    /// if let Some(local) = pgcluster::PersistentCluster::pglease_local() {
    ///     let started = local.start(15)?;
    ///     println!("{}", started.server.connection_string("postgres"));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn pglease_local() -> Option<PersistentCluster> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = if let Some(dir) = var("PGLEASE_LOCAL_DIR") {
            PathBuf::from(dir)
        } else if user::is_root() {
            PathBuf::from("/var/lib/pglease/local")
        } else if let Some(data) = var("XDG_DATA_HOME") {
            PathBuf::from(data).join("pglease/local")
        } else {
            PathBuf::from(var("HOME")?).join(".local/share/pglease/local")
        };
        Some(PersistentCluster::new(dir))
    }

    /// Uses `port` as the socket's port number (`.s.PGSQL.<port>`) for servers started later.
    pub fn with_port(mut self, port: u16) -> PersistentCluster {
        self.port = port;
        self
    }

    /// The directory holding everything.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The directory of the unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("run")
    }

    /// The port number servers start with.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server log.
    pub fn log_path(&self) -> PathBuf {
        self.root.join("server.log")
    }

    fn bindir_file(&self) -> PathBuf {
        self.root.join("bindir")
    }

    fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// The file holding the password of role `postgres` (mode 0600).
    pub fn password_path(&self) -> PathBuf {
        self.root.join("password")
    }

    /// The password of role `postgres`, once the directory has been created (readable only by the
    /// user who created it, and root).
    pub fn password(&self) -> Option<String> {
        let text = fs::read_to_string(self.password_path()).ok()?;
        let line = text.lines().next()?.trim();
        (!line.is_empty()).then(|| line.to_owned())
    }

    /// Whether the data directory has been created.
    pub fn is_created(&self) -> bool {
        self.data_dir().join("PG_VERSION").is_file()
    }

    /// The PostgreSQL major version of the data directory, once created.
    pub fn major(&self) -> Option<u32> {
        fs::read_to_string(self.data_dir().join("PG_VERSION"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The bin directory the data directory was created with, once created.
    pub fn bindir(&self) -> Option<PathBuf> {
        let text = fs::read_to_string(self.bindir_file()).ok()?;
        let line = text.lines().next()?.trim();
        (!line.is_empty()).then(|| PathBuf::from(line))
    }

    /// The installation the data directory was created with (from [`bindir`](Self::bindir)),
    /// if it is still there.
    pub fn installation(&self) -> Option<Installation> {
        Installation::from_bindir(self.bindir()?).ok()
    }

    /// The full version of the installation the data directory was created with
    /// (`postgres --version`), if it is still there.
    pub fn version(&self) -> Option<PgVersion> {
        let postgres = self.bindir()?.join("postgres");
        let out = run_stdout(Command::new(postgres).arg("--version")).ok()?;
        PgVersion::from_version_output(&out)
    }

    /// The running server, if `postmaster.pid` names a live postgres process that reported
    /// ready. No lock is taken: a server being started or stopped may be missed or seen.
    pub fn attach(&self) -> Option<DetachedServer> {
        let text = fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        let pid: u32 = lines.first()?.trim().parse().ok()?;
        let ready = lines.get(7).is_some_and(|s| s.trim() == "ready");
        let alive = proctree::is_alive(pid as i32) && proctree::looks_like_postgres(pid as i32);
        if !(ready && alive) {
            return None;
        }
        let port = lines
            .get(3)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(self.port);
        let socket_dir = lines
            .get(4)
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map_or_else(|| self.socket_dir(), PathBuf::from);
        Some(DetachedServer {
            pid,
            socket_dir,
            port,
            password: self.password(),
        })
    }

    /// Takes the directory's lock (creating the directory if missing: mode 0700, or 0711 as root
    /// so that the server's account can reach its parts), blocking until other starters and
    /// stoppers are done.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the directory or lock file cannot be made or locked.
    pub fn lock(&self) -> Result<StartStopLock> {
        create_dir(&self.root, if user::is_root() { 0o711 } else { 0o700 })?;
        let path = self.lock_path();
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .ctx("opening", &path)?;
        loop {
            // SAFETY: flock on a valid open descriptor; released when the file is closed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("locking", &path, e));
            }
        }
        Ok(StartStopLock {
            cluster: self.clone(),
            _file: file,
        })
    }

    /// [`lock`](Self::lock)s the directory and [`start`](StartStopLock::start)s the server.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Self::lock) and [`StartStopLock::start`].
    pub fn start(&self, major: u32) -> Result<Started> {
        self.lock()?.start(major)
    }

    /// Stops the server (fast shutdown) under the directory's lock; returns whether it ran.
    /// The data directory stays. A directory never created is left as it is.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Self::lock) and [`StartStopLock::stop`].
    pub fn stop(&self) -> Result<bool> {
        if !self.is_created() {
            return Ok(false);
        }
        self.lock()?.stop()
    }

    /// The recorded bin directory (if it still has `pg_ctl`), else that of the installation
    /// of `major` that [`ensure`] finds.
    fn resolve_bindir(&self, major: u32) -> Result<PathBuf> {
        if let Some(bindir) = self.bindir().filter(|b| b.join("pg_ctl").is_file()) {
            return Ok(bindir);
        }
        Ok(ensure(major)?.bindir().to_path_buf())
    }

    /// Runs a server-side program (initdb, pg_ctl) as the server user, in the directory, with
    /// libpq's `PG*` variables removed; `Err((status, output))` inside if it fails.
    fn run_as_server(
        &self,
        mut cmd: Command,
        user: Option<&ServerUser>,
    ) -> Result<std::result::Result<(), (String, String)>> {
        user::prepare_server_command(&mut cmd, user, &self.root);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = PathBuf::from(cmd.get_program());
        let out = cmd.output().ctx("running", &program)?;
        if out.status.success() {
            return Ok(Ok(()));
        }
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(Err((out.status.to_string(), output.trim_end().to_owned())))
    }

    /// The last 20 lines of the server log.
    fn log_tail(&self) -> String {
        let text = fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl StartStopLock {
    /// The locked cluster.
    pub fn cluster(&self) -> &PersistentCluster {
        &self.cluster
    }

    /// Creates the data directory if needed (PostgreSQL `major`, found or fetched with
    /// [`ensure`]), and starts the server detached with `pg_ctl` unless it runs already; returns
    /// once it accepts connections. An existing data directory runs with the installation it
    /// was created with, whatever `major` says.
    ///
    /// # Errors
    ///
    /// [`Error::Directory`] if the server user cannot enter the directory or the socket path
    /// is too long; [`Error::Initdb`], [`Error::Start`] (with the log's tail) if PostgreSQL
    /// fails; any error of [`ensure`] or of the file system.
    pub fn start(&self, major: u32) -> Result<Started> {
        let c = &self.cluster;
        if let Some(server) = c.attach() {
            if c.is_secure() {
                return Ok(Started {
                    server,
                    created: false,
                    started: false,
                });
            }
            // Made by an older version, running with trust authentication: restart it secured.
            self.stop()?;
            wait_stopped(c);
        }
        let user = user::server_user()?;
        if let Some(user) = &user {
            check_reachable(&c.root, user)?;
        }
        let socket = c.socket_dir().join(format!(".s.PGSQL.{}", c.port));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(Error::Directory {
                path: socket,
                reason: format!(
                    "longer than the {MAX_SOCKET_PATH} bytes unix sockets allow; \
                     choose a shorter directory"
                ),
            });
        }
        let created = !c.is_created();
        if created {
            c.initdb(major, user.as_ref())?;
        }
        let bindir = c.resolve_bindir(c.major().unwrap_or(major))?;
        if !created {
            c.clear_stale_lock_files()?;
            c.secure(&bindir, user.as_ref())?;
        }

        // Only the server's account may enter the socket directory (root may anyway).
        let socket_dir = c.socket_dir();
        create_dir(&socket_dir, 0o700)?;
        fs::set_permissions(&socket_dir, fs::Permissions::from_mode(0o700))
            .ctx("chmod", &socket_dir)?;
        user::chown_to(&socket_dir, user.as_ref())?;
        let log = c.log_path();
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)
            .ctx("creating", &log)?;
        fs::set_permissions(&log, fs::Permissions::from_mode(0o600)).ctx("chmod", &log)?;
        user::chown_to(&log, user.as_ref())?;

        let options = [
            "listen_addresses=".to_string(),
            format!("port={}", c.port),
            format!("unix_socket_directories={}", socket_dir.display()),
            "unix_socket_permissions=0700".to_string(),
        ]
        .iter()
        .map(|setting| format!("-c {}", shell_quote(setting)))
        .collect::<Vec<_>>()
        .join(" ");
        let mut cmd = Command::new(bindir.join("pg_ctl"));
        cmd.arg("start")
            .arg("-D")
            .arg(c.data_dir())
            .arg("-l")
            .arg(&log)
            .args(["-w", "-s", "-t"])
            .arg(PG_CTL_TIMEOUT_SECS.to_string())
            .arg("-o")
            .arg(options);
        if let Err((status, output)) = c.run_as_server(cmd, user.as_ref())? {
            return Err(Error::Start {
                message: format!("pg_ctl start failed ({status}): {output}"),
                log_tail: c.log_tail(),
            });
        }
        let server = c.attach().ok_or_else(|| Error::Start {
            message: "pg_ctl reported a start, but no running server was found".into(),
            log_tail: c.log_tail(),
        })?;
        Ok(Started {
            server,
            created,
            started: true,
        })
    }

    /// Stops the server with a fast shutdown (`pg_ctl stop -m fast`) and waits until it has
    /// exited; returns whether it was running.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if `pg_ctl stop` fails; any error of [`ensure`] when the recorded
    /// installation is gone.
    pub fn stop(&self) -> Result<bool> {
        let c = &self.cluster;
        if c.attach().is_none() {
            return Ok(false);
        }
        let major = c.major().ok_or_else(|| {
            Error::io(
                "unreadable PG_VERSION in",
                c.data_dir(),
                std::io::ErrorKind::InvalidData.into(),
            )
        })?;
        let bindir = c.resolve_bindir(major)?;
        let user = user::server_user()?;
        let mut cmd = Command::new(bindir.join("pg_ctl"));
        cmd.arg("stop")
            .arg("-D")
            .arg(c.data_dir())
            .args(["-m", "fast", "-w", "-s", "-t"])
            .arg(PG_CTL_TIMEOUT_SECS.to_string());
        if let Err((status, output)) = c.run_as_server(cmd, user.as_ref())? {
            return Err(Error::Command {
                program: "pg_ctl stop".into(),
                status,
                stderr: output,
            });
        }
        Ok(true)
    }
}

impl DetachedServer {
    /// The postmaster's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory holding the unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The socket's port number.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The password of role `postgres` (from the directory's `password` file), if readable.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// A libpq key=value connection string over the unix socket, with the password:
    /// `host=<socket_dir> port=<port> user=postgres password=<password> dbname=<dbname>`.
    pub fn connection_string(&self, dbname: &str) -> String {
        let password = self
            .password
            .as_deref()
            .map(|p| format!(" password={}", conninfo_quote(p)))
            .unwrap_or_default();
        format!(
            "host={} port={} user=postgres{password} dbname={}",
            conninfo_quote(&self.socket_dir.to_string_lossy()),
            self.port,
            conninfo_quote(dbname)
        )
    }

    /// Connects as `postgres` (with the password) to `dbname` over the unix socket.
    ///
    /// Must be called inside a tokio runtime: the connection future is `tokio::spawn`ed.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] if the server refuses or is gone.
    pub async fn connect(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(self.port)
            .user("postgres")
            .dbname(dbname);
        if let Some(password) = &self.password {
            config.password(password);
        }
        spawn_connection(config).await
    }
}

/// Waits (at most 60 s) until the postmaster of `cluster` has removed its `postmaster.pid`.
fn wait_stopped(cluster: &PersistentCluster) {
    let pid = cluster.data_dir().join("postmaster.pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pid.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Creates `dir` (and parents) with `mode` if missing.
fn create_dir(dir: &Path, mode: u32) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .ctx("creating", dir)
}

/// Quotes `s` for a POSIX shell (pg_ctl passes `-o` through `sh -c`).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
