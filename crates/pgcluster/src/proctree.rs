//! Signalling a postmaster and all its descendants.
//!
//! Every postmaster child calls `setsid()`, so backends are *not* in the postmaster's
//! process group; they are found by walking parent links in `/proc` instead. The postmaster
//! is stopped (SIGSTOP) first so it cannot fork while its children are being enumerated.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Sends `sig` to `pid`; returns whether the call succeeded.
pub(crate) fn signal(pid: i32, sig: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Whether `pid` exists and is not a zombie.
pub(crate) fn is_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// The state letter of `/proc/<pid>/stat`, if the process exists.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Parent pid of `pid` from `/proc/<pid>/stat`.
fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// All live descendants of `root` (not including `root`), found via `/proc`.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some(parent) = ppid(pid) {
                children.entry(parent).or_default().push(pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if !out.contains(&c) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

/// SIGKILLs `postmaster` and all its descendants; returns the descendants that were
/// signalled (the postmaster itself must still be reaped by its parent).
pub(crate) fn kill_tree(postmaster: i32) -> Vec<i32> {
    signal(postmaster, libc::SIGSTOP);
    let mut killed: Vec<i32> = Vec::new();
    for _ in 0..20 {
        let fresh: Vec<i32> = descendants(postmaster)
            .into_iter()
            .filter(|p| !killed.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            // Children are their own process-group leaders (setsid); kill their groups too.
            signal(-p, libc::SIGKILL);
            signal(p, libc::SIGKILL);
            killed.push(p);
        }
    }
    signal(-postmaster, libc::SIGKILL);
    signal(postmaster, libc::SIGKILL);
    killed
}

/// Sends `sig` to the postmaster first, then to each descendant (used for SIGSTOP).
pub(crate) fn signal_tree_parent_first(postmaster: i32, sig: i32) {
    signal(postmaster, sig);
    for p in descendants(postmaster) {
        signal(p, sig);
    }
}

/// Sends `sig` to each descendant first, then to the postmaster (used for SIGCONT).
pub(crate) fn signal_tree_children_first(postmaster: i32, sig: i32) {
    for p in descendants(postmaster) {
        signal(p, sig);
    }
    signal(postmaster, sig);
}

/// Waits until none of `pids` is alive (gone or zombie); returns false on timeout.
pub(crate) fn wait_all_gone(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids.iter().all(|&p| !is_alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `/proc/<pid>/cmdline` mentions `postgres` (guards against pid reuse).
pub(crate) fn looks_like_postgres(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("postgres"))
}

/// Polls `waitpid(pid, WNOHANG)` (for a child we have no `Child` handle to) until it is
/// reaped or `timeout` passes; returns whether it was reaped (or is not our child).
pub(crate) fn reap_raw(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid || rc < 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until each of `pids` is stopped (or gone); returns false on timeout.
pub(crate) fn wait_all_stopped(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids
            .iter()
            .all(|&p| state(p).is_none_or(|s| matches!(s, 'T' | 't' | 'Z' | 'X')))
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
