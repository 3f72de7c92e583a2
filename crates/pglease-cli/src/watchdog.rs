//! The watchdog of `pglease run`: a separate process that kills the command at the lease's local
//! deadline unless the supervisor has extended that deadline, so the command stops in time even
//! when the supervisor itself is stalled (SIGSTOP, a debugger, a starved or hung runtime).
//!
//! Why a process: a timer or task inside pglease stops with pglease. The watchdog is pglease's own
//! binary started again (`pglease __pglease-watchdog SUPERVISOR-PID`, recognised in `main.rs` before
//! the command line is parsed). It forks once and its first process exits, so the watchdog is not a
//! child of the supervisor (which reaps every child it has: see `child.rs`) and not in the
//! command's process group. It ignores the terminating signals (a signal to pglease's process
//! group must not disarm it) and lives until the supervisor says it is done, or dies.
//!
//! Protocol (one line per message on the watchdog's stdin, a pipe from the supervisor):
//! - `D <ns>`: the deadline, in nanoseconds of `CLOCK_MONOTONIC` (the clock of `std::time::Instant`
//!   on Linux, shared by every process on the machine). Sent before the command starts and after
//!   every confirmed renewal.
//! - `G <pgid>`: the command's process group, once it runs.
//! - `Q`: the supervisor is done; the watchdog exits.
//!
//! When the deadline passes, the watchdog sends SIGKILL to the command's process group and to every
//! descendant of the supervisor (the supervisor is a child subreaper, so processes that left the
//! group or were orphaned are still its descendants), until none is left running. If the pipe
//! closes without `Q` (the supervisor died), it sends SIGTERM to the group at once and SIGKILL at
//! the deadline, to the group and to the descendants it saw at the supervisor's last message (they
//! are reparented elsewhere by then) and theirs.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::procs;

/// The first argument that starts pglease as a watchdog.
pub const ARG: &str = "__pglease-watchdog";

/// The supervisor's end of the watchdog's pipe.
#[derive(Debug)]
pub struct Watchdog {
    pipe: std::process::ChildStdin,
    pid: i32,
    deadline: Option<Instant>,
}

impl Watchdog {
    /// Starts the watchdog armed with `deadline`. Must be called before pglease becomes a child
    /// subreaper (the watchdog must not be reparented to it).
    pub fn start(deadline: Instant) -> io::Result<Watchdog> {
        // This very binary, even if its file was replaced or removed since pglease started.
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        // The supervisor as `/proc` numbers it (0: no /proc; the watchdog then kills the group only).
        let supervisor = procs::self_proc_pid().unwrap_or(0);
        let mut first = std::process::Command::new(exe)
            .arg(ARG)
            .arg(supervisor.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let pipe = first.stdin.take().expect("piped stdin");
        let mut told = String::new();
        first
            .stdout
            .take()
            .expect("piped stdout")
            .read_to_string(&mut told)?;
        // The first process forks the watchdog, prints its pid and exits.
        let status = first.wait()?;
        let pid = told.trim().parse::<i32>().ok().filter(|&p| p > 0);
        let Some(pid) = pid.filter(|_| status.success()) else {
            return Err(io::Error::other(format!(
                "the watchdog did not start ({status})"
            )));
        };
        let mut watchdog = Watchdog {
            pipe,
            pid,
            deadline: None,
        };
        watchdog.extend(deadline)?;
        Ok(watchdog)
    }

    /// The watchdog's pid. It is pglease's child only when pglease is the init of a PID namespace
    /// (orphans go to it); `child.rs` then does not count it among the command's descendants.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Moves the deadline to `deadline` (a no-op if unchanged). An error means the watchdog is gone.
    pub fn extend(&mut self, deadline: Instant) -> io::Result<()> {
        if self.deadline == Some(deadline) {
            return Ok(());
        }
        self.deadline = Some(deadline);
        let now_ns = monotonic_ns();
        let left = deadline.saturating_duration_since(Instant::now());
        let at = now_ns.saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX));
        self.send(&format!("D {at}\n"))
    }

    /// Tells the watchdog the command's process group.
    pub fn watch_group(&mut self, pgid: i32) -> io::Result<()> {
        self.send(&format!("G {pgid}\n"))
    }

    /// Disarms the watchdog and lets it exit.
    pub fn finish(mut self) {
        let _ = self.send("Q\n");
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        self.pipe.write_all(line.as_bytes())
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// If pglease was started as a watchdog (`pglease __pglease-watchdog PID`), runs it and returns
/// its exit code; otherwise `None`.
pub fn main_if_requested() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != ARG {
        return None;
    }
    let supervisor = args
        .next()
        .and_then(|a| a.to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| pid >= 0);
    let Some(supervisor) = supervisor else {
        eprintln!("pglease: {ARG} is internal to `pglease run`");
        return Some(ExitCode::from(2));
    };
    // Detach from the supervisor: the first process exits, the second is the watchdog.
    // SAFETY: single-threaded at this point (nothing else has run yet); fork has no other
    // preconditions, and both sides continue in ordinary Rust.
    match unsafe { libc::fork() } {
        -1 => return Some(ExitCode::FAILURE),
        0 => {}
        pid => {
            println!("{pid}");
            return Some(ExitCode::SUCCESS);
        }
    }
    // SAFETY: replaces our copy of the stdout pipe (the supervisor reads it to its end) by stderr.
    unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGTSTP,
    ] {
        // SAFETY: setting a disposition to SIG_IGN has no memory-safety preconditions.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    watch((supervisor > 0).then_some(supervisor));
    Some(ExitCode::SUCCESS)
}

/// The watchdog's loop: read messages, fire at the deadline.
fn watch(supervisor: Option<i32>) {
    let mut stdin = io::stdin().lock();
    let fd = stdin.as_raw_fd();
    let mut deadline: Option<u64> = None;
    let mut group: Option<i32> = None;
    let mut fired = false;
    let mut buf = Vec::new();
    let mut orphaned = false;
    // The supervisor's descendants, refreshed every REFRESH_MS and on each message: after the
    // supervisor died they are reparented elsewhere, and only this list still finds them.
    let mut known: Vec<procs::Proc> = Vec::new();
    loop {
        let now = monotonic_ns();
        if !fired && deadline.is_some_and(|at| now >= at) {
            fired = true;
            eprintln!(
                "pglease: watchdog: the lease's local deadline passed without a confirmed renewal; \
                 killing the command (SIGKILL)"
            );
            kill_everything(group, supervisor.filter(|_| !orphaned), &known);
            if orphaned {
                return;
            }
        }
        if orphaned && deadline.is_none() {
            return;
        }
        let timeout_ms = match deadline {
            Some(at) if !fired => i32::try_from(at.saturating_sub(now).div_ceil(1_000_000))
                .unwrap_or(i32::MAX)
                .max(1),
            _ => -1,
        };
        // While the command runs, wake up to keep the list of descendants current.
        let timeout_ms = match (group, timeout_ms) {
            (Some(_), -1) if !fired => REFRESH_MS,
            (Some(_), t) if !fired => t.min(REFRESH_MS),
            (_, t) => t,
        };
        if orphaned {
            // Nothing more to read: sleep until the deadline.
            std::thread::sleep(Duration::from_millis(
                u64::try_from(timeout_ms).unwrap_or(0),
            ));
            continue;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if ready <= 0 {
            // Timeout (or EINTR): the pipe is still open, so the supervisor was alive just now.
            if let Some(root) = supervisor.filter(|_| group.is_some() && !fired) {
                remember(&mut known, root);
            }
            continue;
        }
        let mut chunk = [0u8; 512];
        let n = match stdin.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            // The supervisor died without saying it was done.
            if let Some(pgid) = group {
                // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
                unsafe { libc::kill(-pgid, libc::SIGTERM) };
            }
            for p in &known {
                procs::signal(p, libc::SIGTERM);
            }
            if fired {
                return;
            }
            orphaned = true;
            continue;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            let mut parts = line.split_whitespace();
            match (
                parts.next(),
                parts.next().and_then(|v| v.parse::<i64>().ok()),
            ) {
                (Some("D"), Some(at)) => deadline = u64::try_from(at).ok(),
                (Some("G"), Some(pgid)) => {
                    group = i32::try_from(pgid).ok().filter(|&p| p > 0);
                    // The command itself, found by its pid (whether or not the supervisor still
                    // lives): what it starts stays below it while it runs.
                    if let Some(leader) = group
                        .and_then(procs::find)
                        .filter(|leader| !known.contains(leader))
                    {
                        known.push(leader);
                    }
                }
                (Some("Q"), _) => return,
                _ => {}
            }
            if fired {
                // Already fired: whatever was started since goes too.
                kill_everything(group, supervisor, &known);
            }
        }
        if let Some(root) = supervisor {
            remember(&mut known, root);
        }
    }
}

/// How often the watchdog refreshes its list of the supervisor's descendants, in milliseconds.
const REFRESH_MS: i32 = 200;

/// Adds the running descendants of `root` to `known`, dropping those that have exited.
fn remember(known: &mut Vec<procs::Proc>, root: i32) {
    let me = std::process::id() as i32;
    known.retain(procs::is_alive);
    for p in procs::descendants(root) {
        if p.pid != me && p.is_running() && !known.contains(&p) {
            known.push(p);
        }
    }
}

/// SIGKILL to `group`, to every live descendant of `supervisor` (as `/proc` numbers it), and to
/// the `known` descendants and theirs, until none is left (a bounded number of rounds, for
/// processes forked while we kill).
fn kill_everything(group: Option<i32>, supervisor: Option<i32>, known: &[procs::Proc]) {
    let me = std::process::id() as i32;
    for _ in 0..100 {
        // Find everything first: once a parent dies, its children are reparented away and can no
        // longer be found below it.
        let mut alive: Vec<procs::Proc> = supervisor.map(procs::descendants).unwrap_or_default();
        for p in known.iter().filter(|p| procs::is_alive(p)) {
            alive.push(*p);
            alive.extend(procs::descendants_of(p));
        }
        alive.retain(|p| p.pid != me && p.is_running());
        if let Some(pgid) = group {
            // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        if alive.is_empty() {
            return;
        }
        for p in &alive {
            procs::signal(p, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
