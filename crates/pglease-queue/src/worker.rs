//! One claimed partition's worker: loops `receive` → handle → `ack` while the partition's lease is
//! held, waits without polling when there is nothing to receive, and ends by releasing the
//! partition (a rebalance or a stop), abandoning its batch (a stop with [`OnShutdown::Abandon`]),
//! or at once when the lease is lost. How a batch is handled is `process.rs`; how it is settled,
//! `settle.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pglease::{LeaseGuard, LostReason, Subscription};
use tokio_util::sync::CancellationToken;

use crate::calls::{self, Holder};
use crate::consumer::{Inner, OnShutdown};
use crate::error::{Error, Result};
use crate::message::Delivery;
use crate::pause;
use crate::process::Process;
use crate::trace;

/// The shortest sleep of an idle partition whose next message is already due (a key row locked
/// by a committing producer makes `receive` skip it for that instant).
const MIN_IDLE: Duration = Duration::from_millis(20);

/// A partition just claimed, with its lease under the client's keepalive.
pub(crate) struct Claimed {
    pub(crate) partition: u32,
    pub(crate) lease: pglease::Lease,
}

/// How a worker ended.
pub(crate) enum Exit {
    /// Released after its last batch (a rebalance or a stop).
    Released,
    /// Its open batch was abandoned and the partition released with force (a stop).
    Abandoned,
    /// The lease was lost (or a fenced call was refused).
    Lost,
    /// An error that is not worth retrying on this partition (the queue was dropped).
    Failed(Error),
}

/// One claimed partition, as its worker and the batch handling see it.
pub(crate) struct PartitionWorker<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) partition: u32,
    pub(crate) epoch: i64,
    guard: LeaseGuard,
    /// The partition's notifications, if the consumer listens.
    wake: Option<Subscription>,
}

impl Inner {
    /// Works on a claimed partition until it is released, abandoned or lost; returns the
    /// partition and how it ended. Cancelling `release` gives the partition up after its batch.
    pub(crate) async fn work<P: Process>(
        &self,
        claimed: Claimed,
        process: &P,
        release: CancellationToken,
    ) -> (u32, Exit) {
        let partition = claimed.partition;
        let exit = self.work_on(claimed, process, &release).await;
        (partition, exit)
    }

    async fn work_on<P: Process>(
        &self,
        claimed: Claimed,
        process: &P,
        release: &CancellationToken,
    ) -> Exit {
        let Claimed { partition, lease } = claimed;
        let part = PartitionWorker {
            inner: self,
            partition,
            epoch: lease.epoch(),
            guard: lease.guard(),
            // Subscribe before the first receive, so that no notification is missed.
            wake: self.subscribe(partition),
        };
        let stop = &self.stop;
        let abandon = self.on_shutdown == OnShutdown::Abandon;
        let mut failures = 0u32;
        // The batch the last settling call opened (ack_and_receive), to handle before receiving.
        let mut next: Option<Vec<Delivery>> = None;
        loop {
            // A batch in hand is handled first, whatever comes (as one received just before).
            if next.is_none() && (stop.is_cancelled() || release.is_cancelled()) {
                let why = if stop.is_cancelled() {
                    "shutdown"
                } else {
                    "rebalance"
                };
                return part.give_up(lease, why).await;
            }
            // A message committed before the connection listened sent a notification nobody got:
            // the idle sleep after this receive is bounded as when polling.
            let listening = part.wake.as_ref().is_some_and(Subscription::is_listening);
            let received = match next.take() {
                Some(opened) => Ok(opened),
                None => tokio::select! {
                    biased;
                    reason = part.guard.lost() => return part.lost(reason),
                    received = part.receive() => received,
                },
            };
            let deliveries = match received {
                Ok(deliveries) => deliveries,
                Err(e) if e.is_fenced() => return part.fenced(&e),
                Err(e) if e.is_queue_not_found() => return Exit::Failed(e),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if let Some(reason) = part.pause_after(&e, failures, release).await {
                        return part.lost(reason);
                    }
                    continue;
                }
            };
            if deliveries.is_empty() {
                failures = 0;
                if let Some(reason) = part.idle(listening, release).await {
                    return part.lost(reason);
                }
                continue;
            }
            let (batch_id, size) = (deliveries[0].batch_id, deliveries.len());
            // Open the next batch with this one's ack only while the worker goes on.
            let going_on = !stop.is_cancelled() && !release.is_cancelled();
            let outcome = tokio::select! {
                biased;
                reason = part.guard.lost() => return part.lost(reason),
                () = stop.cancelled(), if abandon => return part.abandon(lease).await,
                outcome = process.batch(&part, deliveries, going_on) => outcome,
            };
            match outcome {
                Ok(opened) => {
                    failures = 0;
                    next = opened;
                    tracing::debug!(
                        target: trace::CONSUMER,
                        queue = &*self.queue,
                        partition,
                        owner = self.owner.as_str(),
                        epoch = part.epoch,
                        batch_id,
                        size,
                        "batch acked"
                    );
                }
                Err(e) if e.is_fenced() => return part.fenced(&e),
                Err(e) if e.is_queue_not_found() => return Exit::Failed(e),
                Err(e) => {
                    // The batch stays open at our epoch: the next receive returns it again.
                    failures = failures.saturating_add(1);
                    if let Some(reason) = part.pause_after(&e, failures, release).await {
                        return part.lost(reason);
                    }
                }
            }
        }
    }
}

impl PartitionWorker<'_> {
    pub(crate) fn queue(&self) -> &str {
        &self.inner.queue
    }

    pub(crate) fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The partition, owner and epoch its fenced calls present.
    pub(crate) fn holder(&self) -> Holder<'_> {
        Holder {
            queue: &self.inner.queue,
            partition: self.partition,
            owner: &self.inner.owner,
            epoch: self.epoch,
        }
    }

    /// `receive`: the open batch (or a new one) of up to `batch_size` messages.
    async fn receive(&self) -> Result<Vec<Delivery>> {
        let conn = self.inner.client.pool().get().await?;
        calls::receive(&**conn, self.holder(), self.inner.batch_size).await
    }

    /// How long until the next message outside the open batch is due (`None`: nothing pending).
    async fn next_due(&self) -> Result<Option<Duration>> {
        let conn = self.inner.client.pool().get().await?;
        calls::next_due(&**conn, self.queue(), self.partition).await
    }

    /// Sleeps after an empty receive: until a notification for the partition, the next message
    /// is due, a third of the ttl passes (without a listening connection, or if it was not
    /// listening at the receive: at most the poll interval), the consumer stops or gives the
    /// partition up, or the lease is lost (returned).
    async fn idle(&self, listening: bool, release: &CancellationToken) -> Option<LostReason> {
        let inner = self.inner;
        let renewal = inner.ttl / 3;
        let cap = if listening {
            renewal
        } else {
            inner.poll_interval.min(renewal)
        };
        let wait = match self.next_due().await {
            Ok(Some(due)) => due.clamp(MIN_IDLE, cap.max(MIN_IDLE)),
            Ok(None) => cap,
            Err(e) => {
                tracing::debug!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    error = %e,
                    sqlstate = e.code(),
                    "next_due failed; sleeping for the poll interval"
                );
                inner.poll_interval.min(renewal)
            }
        };
        let notified = async {
            match &self.wake {
                Some(subscription) => subscription.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            reason = self.guard.lost() => Some(reason),
            () = inner.stop.cancelled() => None,
            () = release.cancelled() => None,
            () = notified => {
                inner.delivered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    "woken by a notification"
                );
                None
            }
            () = tokio::time::sleep(wait) => None,
        }
    }

    /// Logs a failed call and sleeps with backoff (ending early on loss, stop or release).
    async fn pause_after(
        &self,
        e: &Error,
        failures: u32,
        release: &CancellationToken,
    ) -> Option<LostReason> {
        let pause = pause::FAILED_CALL.after(failures);
        tracing::warn!(
            target: trace::CONSUMER,
            queue = self.queue(),
            partition = self.partition,
            owner = self.owner(),
            epoch = self.epoch,
            error = %e,
            sqlstate = e.code(),
            failures,
            retry_in = ?pause,
            "queue call failed, retrying"
        );
        tokio::select! {
            biased;
            reason = self.guard.lost() => Some(reason),
            () = self.inner.stop.cancelled() => None,
            () = release.cancelled() => None,
            () = tokio::time::sleep(pause) => None,
        }
    }

    /// The lease ended: stop at once.
    fn lost(&self, reason: LostReason) -> Exit {
        tracing::warn!(
            target: trace::CONSUMER,
            queue = self.queue(),
            partition = self.partition,
            owner = self.owner(),
            epoch = self.epoch,
            reason = reason.as_str(),
            "partition lost: stopped handling it"
        );
        Exit::Lost
    }

    /// A fenced call was refused: the partition is someone else's (or lapsed).
    fn fenced(&self, e: &Error) -> Exit {
        tracing::warn!(
            target: trace::CONSUMER,
            queue = self.queue(),
            partition = self.partition,
            owner = self.owner(),
            epoch = self.epoch,
            error = %e,
            sqlstate = e.code(),
            "partition lost: a fenced call was refused"
        );
        Exit::Lost
    }

    /// Releases the partition after its last batch.
    async fn give_up(&self, lease: pglease::Lease, why: &'static str) -> Exit {
        // No batch is open (the last one was acked): releasing the lease is the queue's release.
        match lease.release().await {
            Ok(()) => {
                tracing::info!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    epoch = self.epoch,
                    reason = why,
                    "partition released"
                );
                Exit::Released
            }
            Err(e) if e.is_lease_lost() => {
                self.lost(e.lost_reason().unwrap_or(LostReason::NotOwner))
            }
            Err(e) => {
                tracing::warn!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    epoch = self.epoch,
                    error = %e,
                    sqlstate = e.code(),
                    "partition release failed: it lapses after its ttl"
                );
                Exit::Released
            }
        }
    }

    /// Abandons the open batch and releases the partition (`release` with force).
    async fn abandon(&self, lease: pglease::Lease) -> Exit {
        let result = async {
            let conn = self.inner.client.pool().get().await?;
            calls::release(&**conn, self.holder(), true).await
        }
        .await;
        // Released on the server (or not ours any more): the keepalive's own release is refused.
        drop(lease);
        match result {
            Ok(messages) => {
                tracing::warn!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    epoch = self.epoch,
                    messages,
                    "batch abandoned and partition released"
                );
                Exit::Abandoned
            }
            Err(e) if e.is_fenced() => self.fenced(&e),
            Err(e) => {
                tracing::warn!(
                    target: trace::CONSUMER,
                    queue = self.queue(),
                    partition = self.partition,
                    owner = self.owner(),
                    epoch = self.epoch,
                    error = %e,
                    sqlstate = e.code(),
                    "forced release failed: the lease is released without it, and the next \
                     holder gets the open batch again"
                );
                Exit::Abandoned
            }
        }
    }
}
