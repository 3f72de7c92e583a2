//! The signals pglease catches while it waits for a key or runs a command: SIGINT, SIGTERM, SIGHUP
//! and SIGQUIT end a wait (and are forwarded to a running command, with SIGUSR1 and SIGUSR2).
//!
//! Catching is installed when a [`Signals`] is created and stays for the rest of the process (tokio
//! never restores the default action), so it is created only by commands that wait or run.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals that end a wait, and are forwarded to a command.
pub const TERMINATING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// Signals forwarded to a command but ignored while waiting for a key.
pub const FORWARDED_ONLY: [i32; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// A stream of the caught signals.
#[derive(Debug)]
pub struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    /// Starts catching [`TERMINATING`] and [`FORWARDED_ONLY`]. Must run inside a tokio runtime.
    pub fn catch() -> std::io::Result<Signals> {
        let streams = TERMINATING
            .into_iter()
            .chain(FORWARDED_ONLY)
            .map(|sig| Ok((sig, signal(SignalKind::from_raw(sig))?)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next caught signal's number. Cancel safe: a signal is not lost if the future is dropped.
    pub async fn recv(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// The next caught signal among [`TERMINATING`] (others are dropped).
    pub async fn recv_terminating(&mut self) -> i32 {
        loop {
            let sig = self.recv().await;
            if TERMINATING.contains(&sig) {
                return sig;
            }
        }
    }
}

/// The conventional name of a signal number, for messages (`SIGTERM`).
pub fn name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGUSR2 => "SIGUSR2".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        other => format!("signal {other}"),
    }
}
