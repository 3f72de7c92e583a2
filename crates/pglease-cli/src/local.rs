//! The embedded local PostgreSQL server: what every command uses when no database URL is given.
//!
//! Unlike pgcluster's throw-away clusters (removed on drop, killed at process exit), this server
//! persists: its data directory survives, and the server keeps running after `pglease` exits so the
//! next invocation reuses it. It is created and driven with the installation's own `initdb` and
//! `pg_ctl` (from [`pgcluster::ensure`]), so it daemonizes like any PostgreSQL server.
//!
//! # Layout of the local directory
//!
//! | path | what |
//! | --- | --- |
//! | `data/` | the data directory (`initdb` into `data.init-<pid>/`, then renamed: never half made) |
//! | `run/` | the unix socket directory (`.s.PGSQL.5432`); the server listens on no TCP port |
//! | `server.log` | the server's log (`pg_ctl -l`) |
//! | `bindir` | the PostgreSQL bin directory the data directory was created with |
//! | `lock` | `flock`ed while a process starts or stops the server, so concurrent starts are safe |
//!
//! The directory is `$PGLEASE_LOCAL_DIR`, else `$XDG_DATA_HOME/pglease/local`, else
//! `~/.local/share/pglease/local`; as root `/var/lib/pglease/local`. As root, `initdb`, `pg_ctl` and
//! the server run as `$PGCLUSTER_USER` (default `nobody`), which must be able to reach the
//! directory (checked, with a clear error).
//!
//! # pg_lease in the local server
//!
//! Whenever a command uses the server, pg_lease is installed in database `postgres` if it is not yet:
//! the extension files embedded in this binary are written into the installation's
//! `<sharedir>/extension/` (when writable) and `CREATE EXTENSION` runs; where the server has no
//! extension files (a non-root user with a system PostgreSQL), the extension-less installer
//! ([`pglease::install`]) runs instead.

use pgcluster::ServerUser;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::BoxError;

/// The port number of the local server's socket (`.s.PGSQL.5432`). The socket lives in the local
/// directory and the server listens on no TCP port, so it never collides with another server.
pub const PORT: u16 = 5432;
/// The database commands use, where pg_lease is installed.
pub const DATABASE: &str = "postgres";
/// The superuser created by `initdb` (trust authentication over the private socket).
pub const USER: &str = "postgres";
/// How long `pg_ctl` waits for start-up or shutdown, in seconds.
const PG_CTL_TIMEOUT_SECS: u32 = 60;
/// The longest unix socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The local server's directory, and everything derived from it.
#[derive(Debug, Clone)]
pub struct LocalServer {
    dir: PathBuf,
}

/// A running local server, as read from its `postmaster.pid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    /// The postmaster's pid.
    pub pid: u32,
}

/// What [`LocalServer::ensure_started`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The postmaster's pid.
    pub pid: u32,
    /// Whether this call created the data directory (`initdb`).
    pub created: bool,
    /// Whether this call started the server (false: it was running already).
    pub started: bool,
}

impl LocalServer {
    /// The local server at `$PGLEASE_LOCAL_DIR` or the per-user default (see the module docs).
    ///
    /// # Errors
    ///
    /// Neither `PGLEASE_LOCAL_DIR` nor `HOME` (nor `XDG_DATA_HOME`) is set for a non-root user.
    pub fn from_env() -> Result<LocalServer, String> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = if let Some(dir) = var("PGLEASE_LOCAL_DIR") {
            PathBuf::from(dir)
        } else if is_root() {
            PathBuf::from("/var/lib/pglease/local")
        } else if let Some(data) = var("XDG_DATA_HOME") {
            PathBuf::from(data).join("pglease/local")
        } else if let Some(home) = var("HOME") {
            PathBuf::from(home).join(".local/share/pglease/local")
        } else {
            return Err(
                "cannot place the local server: set PGLEASE_LOCAL_DIR (or HOME), or pass --database-url"
                    .into(),
            );
        };
        let dir = if dir.is_relative() {
            std::env::current_dir()
                .map_err(|e| format!("current directory: {e}"))?
                .join(dir)
        } else {
            dir
        };
        Ok(LocalServer { dir })
    }

    /// The local directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The server log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn bindir_file(&self) -> PathBuf {
        self.dir.join("bindir")
    }

    /// A connection URL for libpq and pglease: the socket directory percent-encoded as the host.
    pub fn url(&self) -> String {
        format!(
            "postgresql://{USER}@{}:{PORT}/{DATABASE}",
            percent_encode(self.socket_dir().as_os_str().as_bytes())
        )
    }

    /// The tokio-postgres configuration for the local server.
    pub fn pg_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.socket_dir())
            .port(PORT)
            .user(USER)
            .dbname(DATABASE)
            .application_name("pglease");
        config
    }

    /// The PostgreSQL major version of the data directory, if it has been created.
    pub fn major(&self) -> Option<u32> {
        fs::read_to_string(self.data_dir().join("PG_VERSION"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The bin directory the data directory was created with, if recorded.
    pub fn bindir(&self) -> Option<PathBuf> {
        let text = fs::read_to_string(self.bindir_file()).ok()?;
        let line = text.lines().next()?.trim();
        (!line.is_empty()).then(|| PathBuf::from(line))
    }

    /// The running server, if `postmaster.pid` names a live postgres process that reported ready.
    pub fn running(&self) -> Option<Running> {
        let text = fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        let pid: u32 = lines.first()?.trim().parse().ok()?;
        let ready = lines.get(7).is_some_and(|s| s.trim() == "ready");
        (ready && is_postgres_process(pid)).then_some(Running { pid })
    }

    /// Creates the server if needed (PostgreSQL `major`), starts it if it is not running, and makes
    /// sure pg_lease is installed; returns once it accepts connections.
    ///
    /// Safe to call from several processes at once: they serialise on the directory's lock file, and
    /// all but the first find the server running.
    pub async fn ensure_started(&self, major: u32) -> Result<Started, BoxError> {
        let this = self.clone();
        let (started, _lock) = tokio::task::spawn_blocking(move || this.start_blocking(major))
            .await?
            .map_err(|e| crate::context(format!("local server in {}", self.dir.display()), e))?;
        // Still under the lock: concurrent first starts install once (the installers also lock).
        self.ensure_installed()
            .await
            .map_err(|e| crate::context("installing pg_lease in the local server", e))?;
        Ok(started)
    }

    /// Stops the server with a fast shutdown; returns whether it was running.
    pub fn stop(&self) -> Result<bool, BoxError> {
        if !self.data_dir().join("PG_VERSION").is_file() {
            return Ok(false);
        }
        let _lock = self.lock()?;
        if self.running().is_none() {
            return Ok(false);
        }
        let bindir = self.resolve_bindir(self.major().unwrap_or(15))?;
        let user = server_user()?;
        let mut cmd = Command::new(bindir.join("pg_ctl"));
        cmd.arg("stop")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w", "-s", "-t"])
            .arg(PG_CTL_TIMEOUT_SECS.to_string());
        self.run_as_server(cmd, user.as_ref(), "pg_ctl stop")?;
        Ok(true)
    }

    /// The server's full version (`postgres --version` of its bin directory), if known.
    pub fn version(&self) -> Option<String> {
        let bindir = self.bindir()?;
        let out = Command::new(bindir.join("postgres"))
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "postgres (PostgreSQL) 15.13 (Debian 15.13-0+deb12u1)" -> "15.13"
        text.split_whitespace().nth(2).map(str::to_owned)
    }

    /// Takes the directory's lock (blocking until other starters or stoppers are done).
    fn lock(&self) -> Result<File, BoxError> {
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        // SAFETY: flock on a valid open descriptor; it is released when the file is closed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(
                format!("locking {}: {}", path.display(), io::Error::last_os_error()).into(),
            );
        }
        Ok(file)
    }

    /// The blocking part of [`ensure_started`](Self::ensure_started): directories, `initdb`,
    /// `pg_ctl start`. Returns the lock, to be held until pg_lease is installed.
    fn start_blocking(&self, major: u32) -> Result<(Started, File), BoxError> {
        let user = server_user()?;
        create_dir(&self.dir, 0o755)?;
        let lock = self.lock()?;
        if let Some(Running { pid }) = self.running() {
            return Ok((
                Started {
                    pid,
                    created: false,
                    started: false,
                },
                lock,
            ));
        }
        if let Some(user) = &user {
            check_reachable(&self.dir, user)?;
        }
        let socket = self.socket_dir().join(format!(".s.PGSQL.{PORT}"));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "the socket path {} is longer than the {MAX_SOCKET_PATH} bytes unix sockets allow; \
                 choose a shorter PGLEASE_LOCAL_DIR",
                socket.display()
            )
            .into());
        }
        let created = !self.data_dir().join("PG_VERSION").is_file();
        if created {
            self.initdb(major, user.as_ref())?;
        }
        let bindir = self.resolve_bindir(self.major().unwrap_or(major))?;

        create_dir(&self.socket_dir(), 0o755)?;
        chown(&self.socket_dir(), user.as_ref())?;
        let log = self.log_path();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("creating {}: {e}", log.display()))?;
        chown(&log, user.as_ref())?;

        let options = [
            "listen_addresses=".to_string(),
            format!("port={PORT}"),
            format!("unix_socket_directories={}", self.socket_dir().display()),
        ]
        .iter()
        .map(|setting| format!("-c {}", shell_quote(setting)))
        .collect::<Vec<_>>()
        .join(" ");
        let mut cmd = Command::new(bindir.join("pg_ctl"));
        cmd.arg("start")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(&log)
            .args(["-w", "-s", "-t"])
            .arg(PG_CTL_TIMEOUT_SECS.to_string())
            .arg("-o")
            .arg(options);
        if let Err(e) = self.run_as_server(cmd, user.as_ref(), "pg_ctl start") {
            return Err(format!("{e}\nserver log tail:\n{}", self.log_tail()).into());
        }
        let pid = self
            .running()
            .ok_or_else(|| {
                format!(
                    "pg_ctl reported a start, but no running server was found\nserver log tail:\n{}",
                    self.log_tail()
                )
            })?
            .pid;
        Ok((
            Started {
                pid,
                created,
                started: true,
            },
            lock,
        ))
    }

    /// Creates the data directory with `initdb` (into a temporary name, renamed when complete).
    fn initdb(&self, major: u32, user: Option<&ServerUser>) -> Result<(), BoxError> {
        let installation =
            pgcluster::ensure(major).map_err(|e| format!("finding PostgreSQL {major}: {e}"))?;
        let staging = self.dir.join(format!("data.init-{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        create_dir(&staging, 0o700)?;
        chown(&staging, user)?;
        let mut cmd = Command::new(installation.bin("initdb"));
        cmd.arg("-D")
            .arg(&staging)
            .args(["-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C"]);
        if let Err(e) = self.run_as_server(cmd, user, "initdb") {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        let bindir = self.bindir_file();
        fs::write(
            &bindir,
            format!("{}\n", installation.bindir().to_string_lossy()),
        )
        .map_err(|e| format!("writing {}: {e}", bindir.display()))?;
        fs::rename(&staging, self.data_dir())
            .map_err(|e| format!("moving {} into place: {e}", staging.display()))?;
        Ok(())
    }

    /// The recorded bin directory, else the installation of `major` that pgcluster finds.
    fn resolve_bindir(&self, major: u32) -> Result<PathBuf, BoxError> {
        if let Some(bindir) = self.bindir().filter(|b| b.join("pg_ctl").is_file()) {
            return Ok(bindir);
        }
        let installation =
            pgcluster::ensure(major).map_err(|e| format!("finding PostgreSQL {major}: {e}"))?;
        Ok(installation.bindir().to_path_buf())
    }

    /// Runs a server-side program (initdb, pg_ctl) as the server user, in the local directory, with
    /// libpq's PG* variables removed; fails with its output if it fails.
    fn run_as_server(
        &self,
        mut cmd: Command,
        user: Option<&ServerUser>,
        what: &str,
    ) -> Result<(), BoxError> {
        if let Some(user) = user {
            cmd.uid(user.uid).gid(user.gid);
            cmd.env("HOME", &self.dir);
        }
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("PG") && !k.starts_with("PGCLUSTER_") {
                cmd.env_remove(&key);
            }
        }
        cmd.current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = cmd.get_program().to_string_lossy().into_owned();
        let out = cmd
            .output()
            .map_err(|e| format!("running {program}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Err(format!("{what} failed ({}): {}", out.status, output.trim_end()).into())
    }

    /// Installs pg_lease in [`DATABASE`] unless it is there at this binary's version.
    async fn ensure_installed(&self) -> Result<(), BoxError> {
        let mut client = crate::connect::connect_config(&self.pg_config()).await?;
        if let Some(found) = pglease::installed(&client).await?
            && found.version == pglease::VERSION
        {
            return Ok(());
        }
        // Where the installation's extension directory is not writable, its files may still be
        // there (installed by `make install` or a package); CREATE EXTENSION tells.
        if let Some(sharedir) = self.sharedir() {
            let _ = write_extension_files(&sharedir.join("extension"));
        }
        match pglease::create_extension(&mut client).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_install() => {
                pglease::install(&mut client).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The installation's share directory (`pg_config --sharedir`), via pgcluster's inspection.
    fn sharedir(&self) -> Option<PathBuf> {
        let bindir = self.bindir()?;
        let installation = pgcluster::Installation::from_bindir(bindir).ok()?;
        Some(installation.sharedir().to_path_buf())
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

/// Writes the extension's control file and scripts (embedded in this binary) into `ext_dir`,
/// atomically, leaving identical files alone.
fn write_extension_files(ext_dir: &Path) -> io::Result<()> {
    let mut files = vec![("pg_lease.control", pglease::CONTROL)];
    files.extend(pglease::MIGRATIONS.iter().map(|m| (m.file, m.script)));
    for (name, content) in files {
        let dst = ext_dir.join(name);
        if fs::read(&dst).is_ok_and(|old| old == content.as_bytes()) {
            continue;
        }
        let tmp = ext_dir.join(format!(".{name}.pglease-{}.tmp", std::process::id()));
        let result = fs::write(&tmp, content)
            .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)))
            .and_then(|()| fs::rename(&tmp, &dst));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The user the local server runs as (pgcluster's rule: `PGCLUSTER_USER`, default `nobody`, when
/// root; ourselves otherwise).
fn server_user() -> Result<Option<ServerUser>, BoxError> {
    Ok(pgcluster::server_user()?)
}

/// Fails with a clear message if `user` cannot traverse every ancestor of `dir` (root made it, but
/// the server runs as `user`).
fn check_reachable(dir: &Path, user: &ServerUser) -> Result<(), BoxError> {
    for ancestor in dir.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(ancestor) else {
            continue;
        };
        let mode = meta.mode();
        let can = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !can {
            return Err(format!(
                "the server runs as {:?}, which cannot enter {} (mode {:o}); \
                 choose another PGLEASE_LOCAL_DIR or make that directory searchable (chmod o+x)",
                user.name,
                ancestor.display(),
                mode & 0o7777
            )
            .into());
        }
    }
    Ok(())
}

/// Creates `dir` (and parents) with `mode` if missing.
fn create_dir(dir: &Path, mode: u32) -> Result<(), BoxError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()).into())
}

/// Gives `path` to the server user (no-op when not root).
fn chown(path: &Path, user: Option<&ServerUser>) -> Result<(), BoxError> {
    if let Some(user) = user {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Whether `pid` is a live process named `postgres` (a stale `postmaster.pid` after a reboot may
/// name a reused pid).
fn is_postgres_process(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let name = &stat[open + 1..close];
    let state = stat[close + 1..].split_whitespace().next();
    name.starts_with("postgres") && state != Some("Z")
}

/// Quotes `s` for a POSIX shell (pg_ctl passes `-o` through `sh -c`).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_socket_directory() {
        let server = LocalServer {
            dir: PathBuf::from("/tmp/a b/local"),
        };
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
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        assert_eq!(shell_quote("listen_addresses="), "'listen_addresses='");
    }
}
