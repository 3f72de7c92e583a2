//! The process tree below a process, read from `/proc`, and signalling its members safely: for
//! `pglease run` (forwarding signals to, and stopping, everything a command started) and its
//! watchdog.
//!
//! Two hazards are handled here:
//! - PID namespaces: `/proc` may belong to another PID namespace than pglease (`unshare --pid
//!   --fork` without `--mount-proc`), where its numbers name other processes. The tree is walked in
//!   `/proc`'s numbers, starting at `/proc/self`, and each member's pid in pglease's own namespace is
//!   taken from the `NSpid` line of its `status`.
//! - Pid reuse: a member may exit and its pid be reused between reading `/proc` and sending the
//!   signal. A signal goes through a pidfd (`pidfd_open`, `pidfd_send_signal`), opened and then
//!   checked against the start time read from `/proc`, so it reaches the process that was read or
//!   nobody.

use std::collections::HashMap;

/// One process of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Its pid in pglease's PID namespace.
    pub pid: i32,
    /// Its pid as `/proc` numbers it.
    proc_pid: i32,
    /// Its state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Its start time in clock ticks after boot (field 22 of `stat`).
    start: u64,
}

impl Proc {
    /// Whether it still runs (is not a zombie waiting to be reaped).
    pub fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// `/proc`'s number for this process, if `/proc` is mounted and shows it.
pub fn self_proc_pid() -> Option<i32> {
    std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

/// Every descendant of the process `/proc` numbers `root`, with its pid in our namespace. Empty if
/// `/proc` is unreadable.
pub fn descendants(root: i32) -> Vec<Proc> {
    let depth = ns_depth(&status("self").unwrap_or_default());
    let mut children: HashMap<i32, Vec<(i32, char, u64)>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((state, ppid, start)) = stat(pid) {
            children.entry(ppid).or_default().push((pid, state, start));
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for &(proc_pid, state, start) in children.get(&parent).map_or(&[][..], Vec::as_slice) {
            queue.push(proc_pid);
            // Our namespace's pid: the entry of NSpid at our depth (the same number without
            // namespaces). A process we cannot place is left alone.
            let pid = match depth {
                Some(depth) => {
                    status(&proc_pid.to_string()).and_then(|s| ns_pids(&s).get(depth - 1).copied())
                }
                None => (self_proc_pid() == Some(std::process::id() as i32)).then_some(proc_pid),
            };
            if let Some(pid) = pid {
                found.push(Proc {
                    pid,
                    proc_pid,
                    state,
                    start,
                });
            }
        }
    }
    found
}

/// The process whose pid in our namespace is `pid`, if it exists.
pub fn find(pid: i32) -> Option<Proc> {
    let record = |proc_pid: i32| {
        let (state, _, start) = stat(proc_pid)?;
        Some(Proc {
            pid,
            proc_pid,
            state,
            start,
        })
    };
    if self_proc_pid()? == std::process::id() as i32 {
        return record(pid); // `/proc` is our namespace's
    }
    let depth = ns_depth(&status("self")?)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(proc_pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let here = status(&proc_pid.to_string()).and_then(|s| ns_pids(&s).get(depth - 1).copied());
        if here == Some(pid) {
            return record(proc_pid);
        }
    }
    None
}

/// Whether `p` is still the process that was read, and running.
pub fn is_alive(p: &Proc) -> bool {
    stat(p.proc_pid)
        .is_some_and(|(state, _, start)| start == p.start && !matches!(state, 'Z' | 'X' | 'x'))
}

/// The running descendants of `p` (empty once `p` is gone: its pid may name another process).
pub fn descendants_of(p: &Proc) -> Vec<Proc> {
    if !is_alive(p) {
        return Vec::new();
    }
    descendants(p.proc_pid)
        .into_iter()
        .filter(Proc::is_running)
        .collect()
}

/// Sends `sig` to `p` if it is still the process that was read (see the module docs). Returns
/// whether it was sent.
pub fn signal(p: &Proc, sig: i32) -> bool {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) };
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    if fd < 0 {
        return false;
    }
    let same = stat(p.proc_pid).is_some_and(|(_, _, start)| start == p.start);
    let sent = same
        // SAFETY: a pidfd we own; a null siginfo means "as kill(2) would".
        && unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        } == 0;
    // SAFETY: closing the descriptor we opened.
    unsafe { libc::close(fd) };
    sent
}

/// `(state, ppid, start time)` from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may contain anything, so parse after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    // Field 22 overall is the 20th after `comm` (state is the 3rd overall).
    let start = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

fn status(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// The pids of the `NSpid:` line, outermost (`/proc`'s namespace) first.
fn ns_pids(status: &str) -> Vec<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// How deep our namespace is below `/proc`'s (1: the same), from our own `NSpid`.
fn ns_depth(own_status: &str) -> Option<usize> {
    let n = ns_pids(own_status).len();
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_is_read_outermost_first() {
        let status = "Name:\tsh\nNSpid:\t4242\t7\t1\nNSpgid:\t4242\n";
        assert_eq!(ns_pids(status), vec![4242, 7, 1]);
        assert_eq!(ns_depth(status), Some(3));
        assert_eq!(ns_depth("Name:\tsh\n"), None);
    }

    #[test]
    fn the_children_of_this_process_are_found() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = self_proc_pid().expect("/proc is mounted");
        let found = descendants(me);
        let pid = child.id() as i32;
        let p = found.iter().find(|p| p.pid == pid).copied();
        assert!(p.is_some(), "sleep {pid} not among {found:?}");
        assert!(signal(&p.unwrap(), libc::SIGKILL));
        child.wait().unwrap();
        // Reaped: the same record no longer names a process.
        assert!(!signal(&p.unwrap(), libc::SIGKILL));
    }
}
