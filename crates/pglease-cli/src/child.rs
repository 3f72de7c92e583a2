//! The command that `pglease run` supervises: spawning it in its own process group (handing it the
//! terminal when pglease has it), signalling the whole group, and turning its exit status into
//! pglease's exit code the way shells do.
//!
//! Why a process group: `sh -c 'a; b'` or a script with children must be stopped as a whole when
//! the lease is lost, so every signal goes to the group (`kill(-pgid, sig)`). A group of its own
//! would lose the terminal's Ctrl-C and input, so when pglease is in the terminal's foreground
//! group, the command's group becomes the foreground group for its lifetime (as a shell does for
//! a job) and pglease takes the terminal back afterwards. pglease ignores SIGTTOU throughout, so
//! writing from the background or taking the terminal back never stops it; the command gets the
//! default action back before exec.
//!
//! If pglease itself dies (SIGKILL), the command receives SIGTERM (Linux `PR_SET_PDEATHSIG`): a
//! command must not outlive the process that keeps its lease (and the watchdog kills it at the
//! lease's deadline: `watchdog.rs`).
//!
//! Who reaps: pglease becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`) before it starts the
//! command, so every process the command leaves behind (`sh -c 'job &'`, a daemon that forked away
//! or left the process group) is reparented to pglease instead of init. pglease reaps every child
//! itself (`waitpid(-1)` on SIGCHLD; tokio's process support is not used), so it knows when the
//! command exited and when the last of its descendants did: no child left means no descendant left.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitCode, ExitStatus};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exit::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND};
use crate::procs;
use crate::signals;

/// A running command.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    terminal: Option<File>,
    sigchld: Signal,
    /// The command's status once it has been reaped.
    status: Option<ExitStatus>,
    /// The watchdog's pid: not one of the command's descendants, though it is pglease's child
    /// when pglease is the init of a PID namespace.
    watchdog: i32,
}

/// Why the command did not start.
#[derive(Debug)]
pub struct SpawnError {
    /// The exit code to report: [`EXIT_NOT_FOUND`] or [`EXIT_CANNOT_EXECUTE`].
    pub code: u8,
    /// What happened.
    pub message: String,
}

/// Makes pglease the reaper of every orphaned descendant (Linux `PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag, no pointers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Catches SIGCHLD, for [`spawn`]: created before the command starts, so no exit is missed.
pub fn catch_sigchld() -> io::Result<Signal> {
    signal(SignalKind::child())
}

/// Starts `command` with `env` added to pglease's environment, in a new process group.
pub fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    sigchld: Signal,
    watchdog: i32,
) -> Result<Child, SpawnError> {
    let (program, args) = command.split_first().expect("clap requires a command");
    let terminal = foreground_terminal();
    ignore_sigttou();
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let tty_fd: Option<RawFd> = terminal.as_ref().map(File::as_raw_fd);
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (getpid, tcsetpgrp, signal, prctl, getppid, kill).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = tty_fd {
                // In our own group by now (process_group runs first); SIGTTOU is still ignored.
                libc::tcsetpgrp(fd, libc::getpid());
            }
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                // pglease died before prctl took effect.
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => SpawnError {
                code: EXIT_NOT_FOUND,
                message: format!("{name}: command not found"),
            },
            _ => SpawnError {
                code: EXIT_CANNOT_EXECUTE,
                message: format!("{name}: cannot execute: {e}"),
            },
        }
    })?;
    let pid = child.id() as i32;
    // Reaped below with waitpid, not through std's handle.
    drop(child);
    if let Some(tty) = &terminal {
        // Also from this side, so the handover does not depend on which process runs first.
        // SAFETY: a valid descriptor of our controlling terminal; pid is the child's new group.
        unsafe { libc::tcsetpgrp(tty.as_raw_fd(), pid) };
    }
    Ok(Child {
        pid,
        terminal,
        sigchld,
        status: None,
        watchdog,
    })
}

impl Child {
    /// The command's process group (its pid).
    pub fn pgid(&self) -> i32 {
        self.pid
    }

    /// Sends `sig` to the command's process group.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
        unsafe { libc::kill(-self.pid, sig) };
    }

    /// Sends `sig` to the command's process group and to every other descendant of pglease.
    pub fn signal_all(&self, sig: i32) {
        self.signal(sig);
        for p in self.descendants() {
            procs::signal(&p, sig);
        }
    }

    /// Whether any descendant of pglease (but the watchdog) is still running. `false` if `/proc`
    /// cannot tell.
    pub fn has_descendants(&self) -> bool {
        !self.descendants().is_empty()
    }

    /// The running descendants of pglease, but the watchdog.
    fn descendants(&self) -> Vec<procs::Proc> {
        let Some(me) = procs::self_proc_pid() else {
            return Vec::new();
        };
        procs::descendants(me)
            .into_iter()
            .filter(|p| p.pid != self.watchdog && p.is_running())
            .collect()
    }

    /// Waits for the command to exit (reaping any other child meanwhile) and takes the terminal
    /// back. Cancel safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            match self.reap().await? {
                Some((pid, status)) if pid == self.pid => {
                    self.status = Some(ExitStatus::from_raw(status));
                    self.reclaim_terminal();
                }
                Some(_) => {}
                None => return Err(io::Error::other("the command was reaped by someone else")),
            }
        }
    }

    /// Waits until pglease has no child left: the command and every process it left behind have
    /// exited. Cancel safe.
    pub async fn wait_descendants(&mut self) -> io::Result<()> {
        while let Some((pid, status)) = self.reap().await? {
            if pid == self.pid {
                self.status = Some(ExitStatus::from_raw(status));
                self.reclaim_terminal();
            }
        }
        Ok(())
    }

    /// Reaps one exited child: `(pid, wait status)`, or `None` once pglease has no child left but
    /// the watchdog.
    async fn reap(&mut self) -> io::Result<Option<(i32, i32)>> {
        loop {
            let mut status = 0;
            // SAFETY: a valid pointer to an int.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid > 0 {
                return Ok(Some((pid, status)));
            }
            if pid == 0 {
                if self.only_the_watchdog_is_left() {
                    return Ok(None);
                }
                self.sigchld.recv().await;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ECHILD) => return Ok(None),
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
    }

    /// Whether the watchdog is pglease's child (pglease is a PID namespace's init) and no other
    /// process is left: then "no child left" can never be observed.
    fn only_the_watchdog_is_left(&self) -> bool {
        let mut status = 0;
        // SAFETY: a valid pointer; WNOHANG returns 0 for a live child, -1 (ECHILD) for another's.
        let ours = unsafe { libc::waitpid(self.watchdog, &mut status, libc::WNOHANG) } == 0;
        ours && self.status.is_some() && self.descendants().is_empty()
    }

    fn reclaim_terminal(&mut self) {
        if let Some(tty) = self.terminal.take() {
            // SAFETY: valid descriptor; SIGTTOU is ignored, so a background caller is not stopped.
            unsafe { libc::tcsetpgrp(tty.as_raw_fd(), libc::getpgrp()) };
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.reclaim_terminal();
    }
}

/// pglease's exit code for the command's exit status: its code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)),
        (None, None) => ExitCode::FAILURE,
    }
}

/// `exited with 3`, `was killed by SIGTERM`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(sig)) => format!("was killed by {}", signals::name(sig)),
        (None, None) => status.to_string(),
    }
}

/// Our controlling terminal, if pglease is in its foreground process group.
fn foreground_terminal() -> Option<File> {
    let tty = File::options()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    // SAFETY: a valid descriptor; tcgetpgrp and getpgrp have no other preconditions.
    let foreground = unsafe { libc::tcgetpgrp(tty.as_raw_fd()) == libc::getpgrp() };
    foreground.then_some(tty)
}

/// Ignores SIGTTOU for the rest of pglease's life (see the module docs).
fn ignore_sigttou() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
}
