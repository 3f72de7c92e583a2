//! One claimed partition's worker: loops `receive` → handle → `ack` while the partition's lease is
//! held, waits without polling when there is nothing to receive, and ends by releasing the
//! partition (a rebalance or a stop), abandoning its batch (a stop with [`OnShutdown::Abandon`]),
//! or at once when the lease is lost.
//!
//! The two ways of handling a batch ([`Process`]): [`AtLeastOnce`] calls the handler per message
//! and settles on pooled connections; [`Transactional`] handles the whole batch in one
//! transaction that also acks it.

use std::collections::HashSet;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use pglease::{LeaseGuard, LostReason};
use tokio::sync::Notify;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};
use tokio_util::sync::CancellationToken;

use crate::consumer::{OnShutdown, Run, TxFuture};
use crate::error::{Error, Result};
use crate::message::Delivery;
use crate::sql::{self, get, micros, one};
use crate::trace;

/// The longest nack reason the queue accepts, in bytes.
const MAX_REASON_BYTES: usize = 8192;

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

/// One way of handling a batch.
pub(crate) trait Process: Sync {
    /// Handles `deliveries` (one batch, in delivery order) and settles the batch.
    fn batch<'a>(
        &'a self,
        part: &'a Part<'a>,
        deliveries: Vec<Delivery>,
    ) -> impl Future<Output = Result<()>> + Send + 'a;
}

/// [`crate::Consumer::run`]'s handler: one call per message, settled on pooled connections.
pub(crate) struct AtLeastOnce<F>(pub(crate) F);

impl<F, Fut, E> Process for AtLeastOnce<F>
where
    F: Fn(Delivery) -> Fut + Sync,
    Fut: Future<Output = std::result::Result<(), E>> + Send,
    E: Display,
{
    // Not an `async fn`: that would capture `Fut` and `E`, which need not outlive `'a`.
    #[allow(clippy::manual_async_fn)]
    fn batch<'a>(
        &'a self,
        part: &'a Part<'a>,
        deliveries: Vec<Delivery>,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        async move {
            let batch_id = deliveries.first().map_or(0, |d| d.batch_id);
            let mut held_back = HashSet::new();
            for d in deliveries {
                if d.key.as_ref().is_some_and(|k| held_back.contains(k)) {
                    // The nack of an earlier message of its key sent it back undelivered.
                    continue;
                }
                part.trace_delivery(&d);
                let outcome = (self.0)(d.clone()).await.map_err(|e| e.to_string());
                if let Err(reason) = outcome {
                    part.nack_retrying(&d, &reason).await?;
                    if let Some(key) = d.key {
                        held_back.insert(key);
                    }
                }
            }
            part.ack_retrying(batch_id).await
        }
    }
}

/// [`crate::Consumer::run_transactional`]'s handler: the batch in one transaction with its ack,
/// each message in a savepoint.
pub(crate) struct Transactional<F>(pub(crate) F);

impl<F, E> Process for Transactional<F>
where
    F: for<'t> Fn(&'t Transaction<'t>, &'t Delivery) -> TxFuture<'t, E> + Sync,
    E: Display,
{
    // Not an `async fn`: that would capture `Fut` and `E`, which need not outlive `'a`.
    #[allow(clippy::manual_async_fn)]
    fn batch<'a>(
        &'a self,
        part: &'a Part<'a>,
        deliveries: Vec<Delivery>,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        async move {
            let batch_id = deliveries.first().map_or(0, |d| d.batch_id);
            let mut conn = part.run.inner.client.pool().get().await?;
            let db: &mut tokio_postgres::Client = &mut conn;
            let mut tx = db.transaction().await?;
            let mut held_back = HashSet::new();
            for d in &deliveries {
                if d.key.as_ref().is_some_and(|k| held_back.contains(k)) {
                    continue;
                }
                part.trace_delivery(d);
                let savepoint = tx.savepoint("pglease_queue_message").await?;
                let outcome = (self.0)(&savepoint, d).await.map_err(|e| e.to_string());
                match outcome {
                    Ok(()) => savepoint.commit().await?,
                    Err(reason) => {
                        savepoint.rollback().await?;
                        part.nack(&tx, d, &reason).await?;
                        if let Some(key) = &d.key {
                            held_back.insert(key.clone());
                        }
                    }
                }
            }
            // Fenced: a lost partition makes this fail, and the whole transaction rolls back.
            part.ack(&tx, batch_id).await?;
            tx.commit().await?;
            Ok(())
        }
    }
}

/// One claimed partition, as its worker and the batch handling see it.
pub(crate) struct Part<'a> {
    pub(crate) run: &'a Run<'a>,
    partition: u32,
    epoch: i64,
    guard: LeaseGuard,
}

impl Run<'_> {
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
        let part = Part {
            run: self,
            partition,
            epoch: lease.epoch(),
            guard: lease.guard(),
        };
        // Subscribe before the first receive, so that no notification is missed.
        let wake = self.hub.as_ref().map(|hub| hub.subscribe(partition));
        let stop = &self.inner.stop;
        let abandon = self.inner.on_shutdown == OnShutdown::Abandon;
        let mut failures = 0u32;
        loop {
            if stop.is_cancelled() || release.is_cancelled() {
                let why = if stop.is_cancelled() {
                    "shutdown"
                } else {
                    "rebalance"
                };
                return part.give_up(lease, why).await;
            }
            let received = tokio::select! {
                biased;
                reason = part.guard.lost() => return part.lost(reason),
                received = part.receive() => received,
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
                if let Some(reason) = part.idle(wake.as_deref(), release).await {
                    return part.lost(reason);
                }
                continue;
            }
            let (batch_id, size) = (deliveries[0].batch_id, deliveries.len());
            let outcome = tokio::select! {
                biased;
                reason = part.guard.lost() => return part.lost(reason),
                () = stop.cancelled(), if abandon => return part.abandon(lease).await,
                outcome = process.batch(&part, deliveries) => outcome,
            };
            match outcome {
                Ok(()) => {
                    failures = 0;
                    tracing::debug!(
                        target: trace::CONSUMER,
                        queue = &*self.inner.queue,
                        partition,
                        owner = self.inner.owner.as_str(),
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

impl Part<'_> {
    fn queue(&self) -> &str {
        &self.run.inner.queue
    }

    fn owner(&self) -> &str {
        &self.run.inner.owner
    }

    fn partition_i32(&self) -> i32 {
        i32::try_from(self.partition).unwrap_or(i32::MAX)
    }

    /// `receive`: the open batch (or a new one) of up to `batch_size` messages.
    async fn receive(&self) -> Result<Vec<Delivery>> {
        const CALL: &str = "lease_queue.receive";
        let inner = self.run.inner;
        let conn = inner.client.pool().get().await?;
        let queue = self.queue();
        let partition = self.partition_i32();
        let rows = sql::query(
            &**conn,
            sql::RECEIVE,
            &[
                (&queue, Type::TEXT),
                (&partition, Type::INT4),
                (&inner.owner, Type::TEXT),
                (&self.epoch, Type::INT8),
                (&inner.batch_size, Type::INT4),
            ],
        )
        .await?;
        rows.iter()
            .map(|row| {
                let payload: String = get(row, 3, CALL)?;
                let attempts: i32 = get(row, 4, CALL)?;
                Ok(Delivery {
                    queue: inner.queue.clone(),
                    partition: self.partition,
                    epoch: self.epoch,
                    batch_id: get(row, 0, CALL)?,
                    id: get(row, 1, CALL)?,
                    key: get(row, 2, CALL)?,
                    payload: serde_json::from_str(&payload)
                        .map_err(|e| Error::protocol(format!("{CALL}: payload: {e}")))?,
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    enqueued_at: get(row, 5, CALL)?,
                })
            })
            .collect()
    }

    /// How long until the next message outside the open batch is due (`None`: nothing pending).
    async fn next_due(&self) -> Result<Option<Duration>> {
        let conn = self.run.inner.client.pool().get().await?;
        let queue = self.queue();
        let partition = self.partition_i32();
        let row = one(
            sql::query(
                &**conn,
                sql::NEXT_DUE,
                &[(&queue, Type::TEXT), (&partition, Type::INT4)],
            )
            .await?,
            "lease_queue.next_due",
        )?;
        let ms: Option<i64> = get(&row, 0, "lease_queue.next_due")?;
        Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    /// Sleeps after an empty receive: until a notification for the partition, the next message
    /// is due, a third of the ttl passes (without a listening connection: at most the poll
    /// interval), the consumer stops or gives the partition up, or the lease is lost (returned).
    async fn idle(&self, wake: Option<&Notify>, release: &CancellationToken) -> Option<LostReason> {
        let inner = self.run.inner;
        let listening = self.run.hub.as_ref().is_some_and(|hub| hub.is_listening());
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
            match wake {
                Some(notify) => notify.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            reason = self.guard.lost() => Some(reason),
            () = inner.stop.cancelled() => None,
            () = release.cancelled() => None,
            () = notified => {
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
        let pause = Duration::from_millis(50)
            .saturating_mul(1 << failures.min(7))
            .min(Duration::from_secs(5));
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
            () = self.run.inner.stop.cancelled() => None,
            () = release.cancelled() => None,
            () = tokio::time::sleep(pause) => None,
        }
    }

    /// Logs a delivery that is a redelivery.
    fn trace_delivery(&self, d: &Delivery) {
        if d.is_redelivery() {
            tracing::info!(
                target: trace::CONSUMER,
                queue = self.queue(),
                partition = self.partition,
                owner = self.owner(),
                epoch = self.epoch,
                id = d.id,
                key = d.key.as_deref(),
                attempts = d.attempts,
                "message redelivered"
            );
        }
    }

    /// `ack` of `batch_id` on `db`.
    async fn ack<C: GenericClient>(&self, db: &C, batch_id: i64) -> Result<()> {
        let queue = self.queue();
        let partition = self.partition_i32();
        sql::query(
            db,
            sql::ACK,
            &[
                (&queue, Type::TEXT),
                (&partition, Type::INT4),
                (&self.run.inner.owner, Type::TEXT),
                (&self.epoch, Type::INT8),
                (&batch_id, Type::INT8),
            ],
        )
        .await?;
        Ok(())
    }

    /// `ack` on pooled connections, retried while it gets no answer (an ack is idempotent for
    /// the epoch that closed the batch). Ends with the lease at the latest (the caller races it).
    async fn ack_retrying(&self, batch_id: i64) -> Result<()> {
        let mut failures = 0u32;
        loop {
            let result = async {
                let conn = self.run.inner.client.pool().get().await?;
                self.ack(&**conn, batch_id).await
            }
            .await;
            match result {
                Err(e) if e.is_connection() => {
                    failures = failures.saturating_add(1);
                    self.settle_pause(&e, failures).await;
                }
                other => return other,
            }
        }
    }

    /// `nack` of `d` on `db`, with the backoff's delay for its attempts and `reason`.
    async fn nack<C: GenericClient>(&self, db: &C, d: &Delivery, reason: &str) -> Result<()> {
        const CALL: &str = "lease_queue.nack";
        let inner = self.run.inner;
        let retry_after = inner.backoff.delay(d.attempts);
        let retry_micros = micros(retry_after);
        let reason = truncate(reason, MAX_REASON_BYTES);
        let queue = self.queue();
        let partition = self.partition_i32();
        let row = one(
            sql::query(
                db,
                sql::NACK,
                &[
                    (&queue, Type::TEXT),
                    (&partition, Type::INT4),
                    (&inner.owner, Type::TEXT),
                    (&self.epoch, Type::INT8),
                    (&d.batch_id, Type::INT8),
                    (&d.id, Type::INT8),
                    (&retry_micros, Type::INT8),
                    (&reason, Type::TEXT),
                ],
            )
            .await?,
            CALL,
        )?;
        let state: String = get(&row, 0, CALL)?;
        match state.as_str() {
            "retrying" => tracing::warn!(
                target: trace::CONSUMER,
                queue,
                partition = self.partition,
                owner = self.owner(),
                epoch = self.epoch,
                id = d.id,
                key = d.key.as_deref(),
                attempts = d.attempts,
                error = reason,
                retry_in = ?retry_after,
                "handler failed; the message will be retried"
            ),
            "dead_lettered" => tracing::warn!(
                target: trace::CONSUMER,
                queue,
                partition = self.partition,
                owner = self.owner(),
                epoch = self.epoch,
                id = d.id,
                key = d.key.as_deref(),
                attempts = d.attempts,
                error = reason,
                "handler failed; the message is a dead letter"
            ),
            other => return Err(Error::protocol(format!("{CALL} returned {other:?}"))),
        }
        Ok(())
    }

    /// `nack` on pooled connections, retried while it gets no answer (a repeated nack changes
    /// nothing).
    async fn nack_retrying(&self, d: &Delivery, reason: &str) -> Result<()> {
        let mut failures = 0u32;
        loop {
            let result = async {
                let conn = self.run.inner.client.pool().get().await?;
                self.nack(&**conn, d, reason).await
            }
            .await;
            match result {
                Err(e) if e.is_connection() => {
                    failures = failures.saturating_add(1);
                    self.settle_pause(&e, failures).await;
                }
                other => return other,
            }
        }
    }

    async fn settle_pause(&self, e: &Error, failures: u32) {
        let pause = Duration::from_millis(50)
            .saturating_mul(1 << failures.min(6))
            .min(Duration::from_secs(2));
        tracing::warn!(
            target: trace::CONSUMER,
            queue = self.queue(),
            partition = self.partition,
            owner = self.owner(),
            epoch = self.epoch,
            error = %e,
            failures,
            retry_in = ?pause,
            "settling the batch got no answer, retrying"
        );
        tokio::time::sleep(pause).await;
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
            let conn = self.run.inner.client.pool().get().await?;
            let queue = self.queue();
            let partition = self.partition_i32();
            let force = true;
            let row = one(
                sql::query(
                    &**conn,
                    sql::RELEASE,
                    &[
                        (&queue, Type::TEXT),
                        (&partition, Type::INT4),
                        (&self.run.inner.owner, Type::TEXT),
                        (&self.epoch, Type::INT8),
                        (&force, Type::BOOL),
                    ],
                )
                .await?,
                "lease_queue.release",
            )?;
            get::<i32>(&row, 0, "lease_queue.release")
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

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn reasons_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("abc", 8), "abc");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate(&"x".repeat(9000), 8192).len(), 8192);
    }
}
