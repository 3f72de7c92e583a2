//! A running (or stopped) private PostgreSQL cluster and its lifecycle.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::error::{Error, IoContext, Result};
use crate::install::Installation;
use crate::user::{self, ServerUser};
use crate::version::PgVersion;
use crate::{ipc, proctree, registry};

mod connect;

pub(crate) use connect::{conninfo_quote, spawn_connection};

/// How long to wait for start-up and for a fast shutdown.
const SERVER_TIMEOUT: Duration = Duration::from_secs(60);
/// How often to poll while waiting for the server process.
const POLL: Duration = Duration::from_millis(20);
/// How many ports to try when the chosen one is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;

/// A private PostgreSQL cluster in a temporary directory, created by
/// [`ClusterBuilder::start`](crate::ClusterBuilder::start).
///
/// The server accepts only the user who started it. It listens on a unix socket in
/// [`socket_dir`](Self::socket_dir), a directory only the server's account can enter (mode 0700; as
/// root, that account is the unprivileged server user, and root itself), where every role needs no
/// password; and on `127.0.0.1:`[`port`](Self::port), where only `postgres` may log in, with the
/// generated [`password`](Self::password) (`scram-sha-256`). Dropping the
/// cluster (also during a panic's unwinding) shuts the server down and deletes the
/// directory; clusters never dropped (e.g. in `static`s) are cleaned up at process exit.
#[derive(Debug)]
pub struct Cluster {
    installation: Installation,
    server: Installation,
    user: Option<ServerUser>,
    settings: Vec<(String, String)>,
    tempdir: Option<TempDir>,
    base: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    /// The password of `postgres` over TCP, generated for this cluster.
    password: String,
    child: Mutex<Option<Child>>,
    paused: AtomicBool,
    registry_id: u64,
    keep: bool,
    /// The `application_name` it streams under, for a cluster made as a standby.
    application_name: Option<String>,
    /// Extra environment of the server process (from the next start).
    server_env: Vec<(String, String)>,
}

impl Cluster {
    pub(crate) fn new(
        installation: Installation,
        server: Installation,
        user: Option<ServerUser>,
        settings: Vec<(String, String)>,
        tempdir: TempDir,
        registry_id: u64,
        keep: bool,
    ) -> Result<Cluster> {
        let base = tempdir.path().to_path_buf();
        let password = crate::secret::random_password()?;
        Ok(Cluster {
            installation,
            server,
            user,
            settings,
            data_dir: base.join("data"),
            socket_dir: base.join("s"),
            log_path: base.join("server.log"),
            base,
            tempdir: Some(tempdir),
            port: 0,
            password,
            child: Mutex::new(None),
            paused: AtomicBool::new(false),
            registry_id,
            keep,
            application_name: None,
            server_env: Vec::new(),
        })
    }

    /// The password of role `postgres`, needed over TCP (the unix socket needs none); generated
    /// for this cluster.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Starts the server on the existing data directory (after [`stop`](Self::stop) or
    /// [`crash`](Self::crash)) and waits until it accepts connections; a no-op if running.
    ///
    /// The previous port is tried first; if it has been taken meanwhile a new free port is
    /// used, so re-read [`port`](Self::port) / connection strings after a restart.
    pub fn start(&mut self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        let mut port = if self.port != 0 {
            self.port
        } else {
            free_port()?
        };
        let mut attempt = 1;
        loop {
            match self.spawn_and_wait(port) {
                Ok(()) => {
                    self.port = port;
                    return Ok(());
                }
                Err((true, _)) if attempt < PORT_ATTEMPTS => {
                    attempt += 1;
                    port = free_port()?;
                }
                Err((_, e)) => return Err(e),
            }
        }
    }

    /// Stops the server with a fast shutdown (SIGINT) and waits for it to exit; after 60 s
    /// the whole process tree is SIGKILLed and [`Error::Timeout`] returned. A no-op if not
    /// running. A paused server is resumed first.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.take_running_child() else {
            return Ok(());
        };
        let pid = child.id() as i32;
        self.resume_tree(pid);
        proctree::signal(pid, libc::SIGINT);
        let result = if wait_child(&mut child, SERVER_TIMEOUT) {
            Ok(())
        } else {
            let killed = proctree::kill_tree(pid);
            let _ = child.wait();
            proctree::wait_all_gone(&killed, SERVER_TIMEOUT);
            Err(Error::Timeout {
                what: "fast shutdown of PostgreSQL (server was SIGKILLed)".into(),
                seconds: SERVER_TIMEOUT.as_secs(),
            })
        };
        registry::set_pid(self.registry_id, None);
        result
    }

    /// Simulates a crash: SIGKILLs the postmaster and every backend/auxiliary process (no
    /// shutdown checkpoint), reaps the postmaster and waits until all of them are gone, so
    /// that [`start`](Self::start) can run crash recovery. A no-op if not running.
    ///
    /// The postmaster is stopped first (so it cannot fork); its children keep running until
    /// each one is killed. See [`kill_all`](Self::kill_all) for a kill at one instant.
    pub fn crash(&mut self) -> Result<()> {
        self.kill(false)
    }

    /// Simulates the hard crash of a whole node: freezes the postmaster and every process it
    /// started (SIGSTOP, as [`pause`](Self::pause)), then SIGKILLs all of them, reaps the
    /// postmaster and waits until every one is gone. A no-op if not running.
    ///
    /// Unlike [`crash`](Self::crash), no process of the server runs between the first kill
    /// and the last: no walsender sends another byte after any backend died, no backend sees a
    /// sibling disappear. Afterwards no process of the server is left (check with
    /// [`processes`](Self::processes) taken before); [`start`](Self::start) runs crash recovery.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if killed processes do not exit within 60 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> pgcluster::Result<()> {
    /// let mut cluster = pgcluster::ClusterBuilder::for_major(15)?.start()?;
    /// assert!(cluster.processes().len() > 1); // postmaster, checkpointer, walwriter, ...
    /// cluster.kill_all()?;
    /// assert!(!cluster.is_running());
    /// assert!(cluster.processes().is_empty());
    /// cluster.start()?; // crash recovery
    /// # Ok(())
    /// # }
    /// ```
    pub fn kill_all(&mut self) -> Result<()> {
        self.kill(true)
    }

    /// The pids of the running server: the postmaster first, then every descendant (backends,
    /// walsenders, walreceiver, auxiliary processes). Empty if not running.
    pub fn processes(&self) -> Vec<u32> {
        let Some(pm) = self.postmaster_pid() else {
            return Vec::new();
        };
        let mut pids = vec![pm];
        pids.extend(
            proctree::descendants(pm as i32)
                .into_iter()
                .map(|p| p as u32),
        );
        pids
    }

    /// SIGKILLs the whole tree (frozen first if `freeze`), reaps and waits until it is gone.
    fn kill(&mut self, freeze: bool) -> Result<()> {
        let Some(mut child) = self.take_running_child() else {
            return Ok(());
        };
        let pid = child.id() as i32;
        if freeze {
            proctree::signal_tree_parent_first(pid, libc::SIGSTOP);
        }
        let killed = proctree::kill_tree(pid);
        let _ = child.wait();
        self.paused.store(false, Ordering::SeqCst);
        registry::set_pid(self.registry_id, None);
        if proctree::wait_all_gone(&killed, SERVER_TIMEOUT) {
            Ok(())
        } else {
            Err(Error::Timeout {
                what: "killed PostgreSQL processes to exit".into(),
                seconds: SERVER_TIMEOUT.as_secs(),
            })
        }
    }

    /// Sets an environment variable of the server process, from its next start
    /// ([`restart`](Self::restart)) on: e.g. `LD_PRELOAD` and `FAKETIME` to run one node of a
    /// replicated pair on a skewed clock (libfaketime). `PG*` variables are not passed on.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(standby: &mut pgcluster::Cluster) -> pgcluster::Result<()> {
    /// standby.set_server_env("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1");
    /// standby.set_server_env("FAKETIME", "+20s");
    /// standby.restart()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_server_env(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        self.server_env.retain(|(k, _)| *k != name);
        self.server_env.push((name, value.into()));
    }

    /// [`stop`](Self::stop) followed by [`start`](Self::start).
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.start()
    }

    /// Freezes the server: SIGSTOPs the postmaster and all its descendants and waits until
    /// they are stopped. Clients see an unresponsive (not closed) server until
    /// [`resume`](Self::resume). A no-op if not running.
    pub fn pause(&self) {
        let Some(pid) = self.postmaster_pid().map(|p| p as i32) else {
            return;
        };
        self.paused.store(true, Ordering::SeqCst);
        proctree::signal_tree_parent_first(pid, libc::SIGSTOP);
        let mut all = proctree::descendants(pid);
        all.push(pid);
        proctree::wait_all_stopped(&all, Duration::from_secs(5));
    }

    /// Unfreezes a server frozen by [`pause`](Self::pause) (SIGCONT to all its processes).
    pub fn resume(&self) {
        if let Some(pid) = self.postmaster_pid() {
            self.resume_tree(pid as i32);
        }
    }

    /// Whether the server is paused with [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Sends signal `sig` (e.g. `libc::SIGTERM`) to `pid`, which must be a process of this
    /// server (a backend from `pg_backend_pid()`, or the postmaster).
    pub fn signal_backend(&self, pid: i32, sig: i32) -> Result<()> {
        let Some(pm) = self.postmaster_pid().map(|p| p as i32) else {
            return Err(Error::io(
                "server not running; cannot signal pid",
                Path::new(&pid.to_string()),
                std::io::ErrorKind::NotFound.into(),
            ));
        };
        if pid != pm && !proctree::descendants(pm).contains(&pid) {
            return Err(Error::io(
                "not a process of this server",
                Path::new(&pid.to_string()),
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        if proctree::signal(pid, sig) {
            Ok(())
        } else {
            Err(Error::io(
                "sending signal to",
                Path::new(&pid.to_string()),
                std::io::Error::last_os_error(),
            ))
        }
    }

    /// Whether the postmaster process is alive (a paused server counts as running).
    pub fn is_running(&self) -> bool {
        self.lock_child()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The postmaster's pid while it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let mut guard = self.lock_child();
        let child = guard.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// The server's version.
    pub fn version(&self) -> PgVersion {
        self.installation.version()
    }

    /// The installation the cluster was built from (its `psql` is used by [`psql`](Self::psql)).
    pub fn installation(&self) -> &Installation {
        &self.installation
    }

    /// The installation the server actually runs from: [`installation`](Self::installation),
    /// or a private mirror of it when extension files needed one.
    pub fn server_installation(&self) -> &Installation {
        &self.server
    }

    /// The TCP port on 127.0.0.1 (also the unix socket's port number).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server log file (stdout and stderr of every start, appended).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole server log so far (lossily decoded).
    pub fn log(&self) -> String {
        fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The `application_name` this cluster streams from its primary under, if it was made with
    /// [`Cluster::replica`] (kept after [`promote`](Self::promote)); `None` for a cluster
    /// made by [`ClusterBuilder`](crate::ClusterBuilder).
    pub fn application_name(&self) -> Option<&str> {
        self.application_name.as_deref()
    }

    pub(crate) fn set_application_name(&mut self, name: String) {
        self.application_name = Some(name);
    }

    /// Adds server settings (effective from the next start), replacing earlier values.
    pub(crate) fn add_settings(&mut self, settings: Vec<(String, String)>) {
        for (name, value) in settings {
            self.settings.retain(|(k, _)| *k != name);
            self.settings.push((name, value));
        }
    }

    pub(crate) fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    pub(crate) fn base_dir(&self) -> &Path {
        &self.base
    }

    pub(crate) fn server_user(&self) -> Option<&ServerUser> {
        self.user.as_ref()
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the child out of its slot if it is still running (clearing a dead one).
    fn take_running_child(&mut self) -> Option<Child> {
        let mut child = self.lock_child().take()?;
        if matches!(child.try_wait(), Ok(None)) {
            Some(child)
        } else {
            registry::set_pid(self.registry_id, None);
            self.paused.store(false, Ordering::SeqCst);
            None
        }
    }

    fn resume_tree(&self, pid: i32) {
        if self.paused.swap(false, Ordering::SeqCst) {
            proctree::signal_tree_children_first(pid, libc::SIGCONT);
        }
    }

    /// Spawns the postmaster on `port` and waits until it is ready. On failure returns
    /// whether the port was taken, and the error.
    fn spawn_and_wait(&mut self, port: u16) -> std::result::Result<(), (bool, Error)> {
        let plain = |e: Error| (false, e);
        let log_offset = fs::metadata(&self.log_path).map(|m| m.len()).unwrap_or(0);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .ctx("opening log", &self.log_path)
            .map_err(plain)?;
        let log2 = log
            .try_clone()
            .ctx("opening log", &self.log_path)
            .map_err(plain)?;
        let postgres = self.server.bin("postgres");
        let mut cmd = Command::new(&postgres);
        cmd.arg("-D").arg(&self.data_dir);
        for (k, v) in &self.settings {
            if !matches!(
                k.as_str(),
                "port" | "listen_addresses" | "unix_socket_directories"
            ) {
                cmd.arg("-c").arg(format!("{k}={v}"));
            }
        }
        cmd.arg("-c")
            .arg(format!("port={port}"))
            .arg("-c")
            .arg("listen_addresses=127.0.0.1")
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.socket_dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        user::prepare_server_command(&mut cmd, self.user.as_ref(), &self.base);
        for (k, v) in &self.server_env {
            if !k.starts_with("PG") {
                cmd.env(k, v);
            }
        }
        let child = cmd.spawn().ctx("starting", &postgres).map_err(plain)?;
        let pid = child.id() as i32;
        registry::set_pid(self.registry_id, Some(pid));
        *self.lock_child() = Some(child);

        let deadline = Instant::now() + SERVER_TIMEOUT;
        loop {
            let exited = {
                let mut guard = self.lock_child();
                let child = guard.as_mut().expect("child was just stored");
                match child.try_wait() {
                    Ok(Some(status)) => Some(status.to_string()),
                    Ok(None) => None,
                    Err(e) => Some(format!("wait failed: {e}")),
                }
            };
            if let Some(status) = exited {
                *self.lock_child() = None;
                registry::set_pid(self.registry_id, None);
                let log_tail = self.log_tail(log_offset);
                let port_taken = log_tail.contains("could not bind")
                    || log_tail.contains("Address already in use");
                let message = format!("postgres exited ({status}) before becoming ready");
                return Err((port_taken, Error::Start { message, log_tail }));
            }
            if self.postmaster_ready(pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                if let Some(mut child) = self.lock_child().take() {
                    let killed = proctree::kill_tree(pid);
                    let _ = child.wait();
                    proctree::wait_all_gone(&killed, SERVER_TIMEOUT);
                }
                registry::set_pid(self.registry_id, None);
                return Err(plain(Error::Timeout {
                    what: format!(
                        "PostgreSQL to become ready; server log tail:\n{}",
                        self.log_tail(log_offset)
                    ),
                    seconds: SERVER_TIMEOUT.as_secs(),
                }));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Whether `postmaster.pid` names `pid` and reports status `ready` (line 8), or `standby`
    /// (a hot standby that accepts read-only connections).
    fn postmaster_ready(&self, pid: i32) -> bool {
        let Ok(text) = fs::read_to_string(self.data_dir.join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().collect();
        lines.first().and_then(|l| l.trim().parse::<i32>().ok()) == Some(pid)
            && lines
                .get(7)
                .is_some_and(|s| matches!(s.trim(), "ready" | "standby"))
    }

    /// The last 40 lines of the log written since byte `offset`.
    fn log_tail(&self, offset: u64) -> String {
        let mut text = String::new();
        if let Ok(mut f) = fs::File::open(&self.log_path)
            && f.seek(SeekFrom::Start(offset)).is_ok()
        {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Cluster {
    /// Shuts the server down (immediate shutdown, SIGKILL of the whole tree after 10 s),
    /// releases leftover shared memory and removes the temporary directory, unless
    /// `PGCLUSTER_KEEP` was set at creation (then the path is printed to stderr).
    fn drop(&mut self) {
        if let Some(mut child) = self.take_running_child() {
            let pid = child.id() as i32;
            self.resume_tree(pid);
            proctree::signal(pid, libc::SIGQUIT);
            if !wait_child(&mut child, Duration::from_secs(10)) {
                let killed = proctree::kill_tree(pid);
                let _ = child.wait();
                proctree::wait_all_gone(&killed, Duration::from_secs(10));
            }
        }
        ipc::release(&self.data_dir);
        registry::unregister(self.registry_id);
        if let Some(tempdir) = self.tempdir.take() {
            if self.keep {
                let path = tempdir.keep();
                eprintln!("pgcluster: keeping cluster directory {}", path.display());
            } else {
                let _ = fs::remove_dir_all(tempdir.path());
            }
        }
    }
}

/// Polls `child` until it exits or `timeout` passes; returns whether it exited (reaped).
pub(crate) fn wait_child(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A currently free TCP port on 127.0.0.1 (bound, then released).
fn free_port() -> Result<u16> {
    let addr = "127.0.0.1:0";
    let listener = std::net::TcpListener::bind(addr).ctx("binding", Path::new(addr))?;
    let port = listener
        .local_addr()
        .ctx("binding", Path::new(addr))?
        .port();
    Ok(port)
}
