//! A start after a crash: the lock files a killed postmaster left behind, removed when they are
//! stale (see [`PersistentCluster::clear_stale_lock_files`]).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use super::PersistentCluster;
use crate::error::{Error, Result};
use crate::{ipc, proctree};

/// How long a start waits for orphaned backends of a crashed server to exit.
const ORPHAN_WAIT: Duration = Duration::from_secs(10);

impl PersistentCluster {
    /// Removes the lock files (`postmaster.pid`, the socket's `.s.PGSQL.<port>.lock`) a crashed
    /// postmaster (SIGKILL, the OOM killer) left behind, so that the next start recovers.
    ///
    /// PostgreSQL treats them as stale itself when the pid they name is gone, but refuses to start
    /// ("lock file already exists") while that pid exists: a zombie that nobody reaps (in a
    /// container whose PID 1 does not reap orphans, the detached postmaster is reparented to it),
    /// or a pid reused by another process. They are removed only when the pid is not a live
    /// postgres and no process is attached to the shared memory segment the file names, the check
    /// by which PostgreSQL refuses to start beside orphaned backends of the old server; those are
    /// waited for up to [`ORPHAN_WAIT`] (they exit once they notice the postmaster's death).
    ///
    /// # Errors
    ///
    /// [`Error::Start`] if processes stay attached to the old server's shared memory;
    /// [`Error::Io`] if a lock file cannot be read or removed.
    pub(super) fn clear_stale_lock_files(&self) -> Result<()> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let text = match fs::read_to_string(&pid_file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("reading", &pid_file, e)),
        };
        let lines: Vec<&str> = text.lines().collect();
        let Some(pid) = lines.first().and_then(|l| l.trim().parse::<i32>().ok()) else {
            return Ok(()); // being written, or not PostgreSQL's: pg_ctl will say
        };
        if proctree::is_alive(pid) && proctree::looks_like_postgres(pid) {
            return Ok(()); // a live postmaster (not ready yet, or shutting down)
        }
        let shmid = lines
            .get(6)
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok());
        let deadline = Instant::now() + ORPHAN_WAIT;
        while let Some(n) = shmid.and_then(ipc::attached).filter(|n| *n > 0) {
            if Instant::now() >= deadline {
                return Err(Error::Start {
                    message: format!(
                        "the crashed server's shared memory is still attached by {n} process{} \
                         (orphaned backends of postmaster {pid}); stop them, then start again",
                        if n == 1 { "" } else { "es" }
                    ),
                    log_tail: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let socket_lock = self
            .socket_dir()
            .join(format!(".s.PGSQL.{}.lock", self.port));
        let same_pid = fs::read_to_string(&socket_lock)
            .is_ok_and(|t| t.lines().next().map(str::trim) == Some(&pid.to_string()));
        if same_pid {
            remove_if_present(&socket_lock)?;
        }
        remove_if_present(&pid_file)
    }
}

/// Removes `path`; a file already gone is fine.
fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("removing", path, e)),
        _ => Ok(()),
    }
}
