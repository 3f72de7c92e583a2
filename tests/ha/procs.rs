//! Processes of a node, found through `/proc`: a Patroni process, the postmaster it started (which
//! is not its child: Patroni starts PostgreSQL through a helper that exits, as `pg_ctl` does, so the
//! postmaster is reparented to init), and everything either of them started. Every postmaster
//! child calls `setsid()`, so process groups do not cover a node; parent links do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Sends `sig` to `pid` (nothing for pid ≤ 0); whether it was delivered.
pub fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill has no memory-safety preconditions; pid > 0 names one process.
    pid > 0 && unsafe { libc::kill(pid, sig) == 0 }
}

/// The fields of `/proc/<pid>/stat` after the command name: state first, parent pid second.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The state letter of `pid` (`R`, `S`, `T`, `Z`, …), if it exists.
pub fn state(pid: i32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// The command line of `pid`, NULs as spaces (empty if it is gone).
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// Every live descendant of the `roots` (not the roots themselves).
pub fn descendants(roots: &[i32]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1)?.parse().ok()) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue = roots.to_vec();
    while let Some(p) = queue.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            if !out.contains(&c) && !roots.contains(&c) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

/// The hard crash of a whole node: freezes `roots` and every descendant (SIGSTOP, parents first,
/// repeated until no new process appears, so nothing forks behind our back and no process runs
/// between the first kill and the last), then SIGKILLs all of them. Returns the pids killed.
pub fn freeze_and_kill(roots: &[i32]) -> Vec<i32> {
    let mut all: Vec<i32> = roots.iter().copied().filter(|&p| is_alive(p)).collect();
    for &p in &all {
        signal(p, libc::SIGSTOP);
    }
    for _ in 0..50 {
        let fresh: Vec<i32> = descendants(&all)
            .into_iter()
            .filter(|p| !all.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for &p in &fresh {
            signal(p, libc::SIGSTOP);
        }
        all.extend(fresh);
    }
    for &p in &all {
        signal(p, libc::SIGKILL);
    }
    all
}

/// Waits until none of `pids` is alive (gone or a zombie); false if `timeout` passed first.
pub fn wait_gone(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while pids.iter().any(|&p| is_alive(p)) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits until `pid` is stopped (state `T`); false if it is gone or `timeout` passed first.
pub fn wait_stopped(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match state(pid) {
            Some('T' | 't') => return true,
            None | Some('Z' | 'X') => return false,
            _ if Instant::now() >= deadline => return false,
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
