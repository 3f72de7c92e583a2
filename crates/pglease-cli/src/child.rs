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
//! command must not outlive the process that keeps its lease.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};

use crate::exit::{BoxError, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND};
use crate::signals;

/// A running command.
#[derive(Debug)]
pub struct Child {
    child: tokio::process::Child,
    pgid: i32,
    terminal: Option<File>,
}

/// Why the command did not start.
#[derive(Debug)]
pub struct SpawnError {
    /// The exit code to report: [`EXIT_NOT_FOUND`] or [`EXIT_CANNOT_EXECUTE`].
    pub code: u8,
    /// What happened.
    pub message: String,
}

/// Starts `command` with `env` added to pglease's environment, in a new process group.
pub fn spawn(command: &[OsString], env: &[(&str, String)]) -> Result<Child, SpawnError> {
    let (program, args) = command.split_first().expect("clap requires a command");
    let terminal = foreground_terminal();
    ignore_sigttou();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).process_group(0).kill_on_drop(false);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let tty_fd: Option<RawFd> = terminal.as_ref().map(File::as_raw_fd);
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
            if libc::getppid() == 1 {
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
    let pgid = child.id().map_or(0, |id| id as i32);
    if let Some(tty) = &terminal {
        // Also from this side, so the handover does not depend on which process runs first.
        // SAFETY: a valid descriptor of our controlling terminal; pgid is the child's new group.
        unsafe { libc::tcsetpgrp(tty.as_raw_fd(), pgid) };
    }
    Ok(Child {
        child,
        pgid,
        terminal,
    })
}

impl Child {
    /// Sends `sig` to the command's process group (no-op once it has been reaped).
    pub fn signal(&self, sig: i32) {
        if self.pgid > 0 {
            // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
            unsafe { libc::kill(-self.pgid, sig) };
        }
    }

    /// Waits for the command to exit and takes the terminal back. Cancel safe.
    pub async fn wait(&mut self) -> Result<ExitStatus, BoxError> {
        let status = self.child.wait().await?;
        self.reclaim_terminal();
        Ok(status)
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
