//! `pglease queue consume -- CMD`: a [`pglease_queue::Consumer`] whose handler runs CMD once per
//! message (payload on stdin, the message's coordinates in the environment; exit 0 acks, anything
//! else nacks).
//!
//! CMD runs in a process group of its own. When the consumer drops a handler — the partition's
//! lease was lost — the [`Child`] guard sends the group SIGTERM and, after `--kill-after`, SIGKILL
//! (from a thread of its own, so a stalled runtime does not keep the command alive). Terminating
//! signals sent to pglease are forwarded to the running command's group and stop the consumer,
//! which finishes its open batch and releases its partitions.

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use pglease_queue::{Consumer, Delivery, OnShutdown};

use crate::cli::QueueConsumeArgs;
use crate::connect::Target;
use crate::exit::{self, BoxError};
use crate::signals::{self, Signals};

/// The process group of the command that runs now (0: none).
static RUNNING_GROUP: AtomicI32 = AtomicI32::new(0);

/// A started command: kills its process group when dropped before it exited.
struct Child {
    pgid: i32,
    kill_after: Duration,
    exited: bool,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = RUNNING_GROUP.compare_exchange(self.pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
        if self.exited {
            return;
        }
        let (pgid, kill_after) = (self.pgid, self.kill_after);
        tracing::warn!(target: "pglease::cli", pgid, "stopping the command: its message's lease was lost");
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: as above. The group may be gone already (ESRCH), which is fine.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        });
    }
}

/// Runs the command for one delivery; Ok when it exits 0.
async fn handle(command: &[String], kill_after: Duration, d: &Delivery) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("PGLEASE_QUEUE", d.queue())
        .env("PGLEASE_PARTITION", d.partition().to_string())
        .env("PGLEASE_EPOCH", d.epoch().to_string())
        .env("PGLEASE_MESSAGE_ID", d.id().to_string())
        .env("PGLEASE_ATTEMPTS", d.attempts().to_string())
        .env("PGLEASE_BATCH_ID", d.batch_id().to_string())
        .stdin(Stdio::piped())
        .process_group(0);
    match d.key() {
        Some(k) => cmd.env("PGLEASE_KEY", k),
        None => cmd.env_remove("PGLEASE_KEY"),
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {:?}: {e}", command[0]))?;
    let pgid = child.id().map_or(0, |p| p as i32);
    let mut guard = Child {
        pgid,
        kill_after,
        exited: false,
    };
    RUNNING_GROUP.store(pgid, Ordering::SeqCst);
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt as _;
        // A command that does not read its stdin closes the pipe: not an error.
        let _ = stdin.write_all(d.payload().to_string().as_bytes()).await;
        drop(stdin);
    }
    let status = child
        .wait()
        .await
        .map_err(|e| format!("waiting for {:?}: {e}", command[0]))?;
    guard.exited = true;
    if status.success() {
        Ok(())
    } else {
        Err(match status.code() {
            Some(code) => format!("{:?} exited with {code}", command[0]),
            None => format!("{:?} was killed by a signal", command[0]),
        })
    }
}

/// `pglease queue consume`.
pub async fn consume(args: QueueConsumeArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let mut signals = Signals::catch()?;
    let owner = crate::owner::unique_owner(args.owner.as_deref());
    let builder = pglease::Client::builder().owner(owner);
    let client = tokio::select! {
        client = target.client(builder) => client?,
        sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
    };
    let mut consumer = Consumer::builder(client.clone(), args.queue.queue.clone())
        .ttl(args.ttl)
        .batch_size(args.batch)
        .on_shutdown(OnShutdown::Finish)
        .listen_with(target.config().await?, target.tls());
    if !args.partitions.is_empty() {
        consumer = consumer.partitions(args.partitions.iter().copied());
    }
    if let Some(n) = args.max_partitions {
        consumer = consumer.max_partitions(n);
    }
    let consumer = Arc::new(consumer.build()?);
    let handled = Arc::new(AtomicU64::new(0));
    let (command, kill_after, max) = (args.command.clone(), args.kill_after, args.max_messages);
    let run = {
        let consumer = Arc::clone(&consumer);
        let handled = Arc::clone(&handled);
        async move {
            consumer
                .run(|d: Delivery| {
                    let (command, handled, consumer) =
                        (command.clone(), Arc::clone(&handled), Arc::clone(&consumer));
                    async move {
                        let result = handle(&command, kill_after, &d).await;
                        let n = handled.fetch_add(1, Ordering::SeqCst) + 1;
                        if max.is_some_and(|m| n >= m) {
                            consumer.stop();
                        }
                        result
                    }
                })
                .await
        }
    };
    tokio::pin!(run);
    let mut stopped_by: Option<i32> = None;
    loop {
        tokio::select! {
            result = &mut run => {
                result?;
                client.shutdown().await;
                return Ok(match stopped_by {
                    Some(sig) => exit::signal_exit(sig),
                    None => ExitCode::SUCCESS,
                });
            }
            sig = signals.recv_terminating() => {
                let pgid = RUNNING_GROUP.load(Ordering::SeqCst);
                if pgid > 0 {
                    // SAFETY: signals the command's process group.
                    unsafe { libc::kill(-pgid, sig) };
                }
                if stopped_by.is_none() {
                    eprintln!(
                        "pglease: {}: finishing the open batch and releasing the partitions",
                        signals::name(sig)
                    );
                }
                stopped_by = Some(sig);
                consumer.stop();
            }
        }
    }
}
