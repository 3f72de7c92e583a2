//! Process-wide registry of live clusters, cleaned up at process exit.
//!
//! Clusters held in `static`s are never dropped, so every started cluster registers its
//! postmaster pid and temporary directory here, and an `atexit` handler (registered once)
//! shuts down whatever is still registered and removes the directories. Rust's test harness
//! ends via `exit`, which runs `atexit` handlers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError, TryLockError};
use std::time::Duration;

use crate::{ipc, proctree};

struct Entry {
    id: u64,
    pid: Option<i32>,
    dir: PathBuf,
    data_dir: PathBuf,
    keep: bool,
}

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static ATEXIT: Once = Once::new();

/// Registers a cluster directory; returns the id used for later updates.
pub(crate) fn register(dir: PathBuf, data_dir: PathBuf, keep: bool) -> u64 {
    ATEXIT.call_once(|| {
        // SAFETY: registering a plain extern "C" function that never unwinds.
        unsafe { libc::atexit(at_exit) };
    });
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    lock().push(Entry {
        id,
        pid: None,
        dir,
        data_dir,
        keep,
    });
    id
}

/// Records the current postmaster pid (or `None` once it is stopped and reaped).
pub(crate) fn set_pid(id: u64, pid: Option<i32>) {
    if let Some(e) = lock().iter_mut().find(|e| e.id == id) {
        e.pid = pid;
    }
}

/// Forgets a cluster (its owner cleans up itself).
pub(crate) fn unregister(id: u64) {
    lock().retain(|e| e.id != id);
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Shuts down every cluster still registered in this process (immediate shutdown, then
/// SIGKILL of the whole process tree) and removes their temporary directories, unless
/// `PGCLUSTER_KEEP` was set when they were created.
///
/// This runs automatically at process exit; call it yourself only where `exit` handlers do
/// not run (e.g. before `std::process::abort`). Clusters cleaned up this way must not be
/// used afterwards.
pub fn cleanup_registered() {
    let entries = match REGISTRY.try_lock() {
        Ok(mut guard) => std::mem::take(&mut *guard),
        Err(TryLockError::Poisoned(p)) => std::mem::take(&mut *p.into_inner()),
        // Another thread holds the lock while the process exits; do not deadlock.
        Err(TryLockError::WouldBlock) => return,
    };
    for entry in entries {
        if let Some(pid) = entry.pid {
            shut_down_unowned(pid);
        }
        ipc::release(&entry.data_dir);
        if entry.keep {
            eprintln!("pgcluster: keeping {}", entry.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&entry.dir);
        }
    }
}

/// Stops a postmaster that is our child but whose `Child` handle we cannot use.
fn shut_down_unowned(pid: i32) {
    proctree::signal_tree_children_first(pid, libc::SIGCONT);
    proctree::signal(pid, libc::SIGQUIT);
    if !proctree::reap_raw(pid, Duration::from_secs(5)) {
        let killed = proctree::kill_tree(pid);
        proctree::reap_raw(pid, Duration::from_secs(10));
        proctree::wait_all_gone(&killed, Duration::from_secs(10));
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(cleanup_registered);
}
