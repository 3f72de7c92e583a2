//! Settling a batch: `ack` and `nack` of a partition worker, on the batch's transaction or on
//! pooled connections (retried while they get no answer: both are idempotent for the epoch that
//! holds the batch), with their log events.

use std::future::Future;

use tokio_postgres::GenericClient;

use crate::calls::{self, Nacked};
use crate::error::{Error, Result};
use crate::message::Delivery;
use crate::pause;
use crate::trace;
use crate::worker::PartitionWorker;

/// The longest nack reason the queue accepts, in bytes.
const MAX_REASON_BYTES: usize = 8192;

impl PartitionWorker<'_> {
    /// Logs a delivery that is a redelivery.
    pub(crate) fn trace_delivery(&self, d: &Delivery) {
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
    pub(crate) async fn ack<C: GenericClient>(&self, db: &C, batch_id: i64) -> Result<()> {
        calls::ack(db, self.holder(), batch_id).await
    }

    /// `ack` of `batch_id` and the next batch, in one statement on `db`: the next batch when the
    /// worker goes on, a plain `ack` (and `None`) when it is to stop or give the partition up after
    /// this batch, so that no batch is opened that nobody will handle.
    pub(crate) async fn ack_then_next<C: GenericClient>(
        &self,
        db: &C,
        batch_id: i64,
        going_on: bool,
    ) -> Result<Option<Vec<Delivery>>> {
        if going_on {
            calls::ack_and_receive(db, self.holder(), batch_id, self.inner.batch_size)
                .await
                .map(Some)
        } else {
            self.ack(db, batch_id).await.map(|()| None)
        }
    }

    /// [`Self::ack_then_next`] on pooled connections, retried while it gets no answer (a repeated
    /// call acks nothing more and returns the batch the first one opened).
    pub(crate) async fn ack_then_next_retrying(
        &self,
        batch_id: i64,
        going_on: bool,
    ) -> Result<Option<Vec<Delivery>>> {
        self.retry_unanswered(|| async {
            let conn = self.inner.client.pool().get().await?;
            self.ack_then_next(&**conn, batch_id, going_on).await
        })
        .await
    }

    /// `nack` of `d` on `db`, with the backoff's delay for its attempts and `reason`.
    pub(crate) async fn nack<C: GenericClient>(
        &self,
        db: &C,
        d: &Delivery,
        reason: &str,
    ) -> Result<()> {
        let retry_after = self.inner.backoff.delay(d.attempts);
        let reason = truncate(reason, MAX_REASON_BYTES);
        let nacked = calls::nack(db, self.holder(), d.batch_id, d.id, retry_after, reason).await?;
        match nacked {
            Nacked::Retrying => tracing::warn!(
                target: trace::CONSUMER,
                queue = self.queue(),
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
            Nacked::DeadLettered => tracing::warn!(
                target: trace::CONSUMER,
                queue = self.queue(),
                partition = self.partition,
                owner = self.owner(),
                epoch = self.epoch,
                id = d.id,
                key = d.key.as_deref(),
                attempts = d.attempts,
                error = reason,
                "handler failed; the message is a dead letter"
            ),
        }
        Ok(())
    }

    /// `nack` on pooled connections, retried while it gets no answer (a repeated nack changes
    /// nothing).
    pub(crate) async fn nack_retrying(&self, d: &Delivery, reason: &str) -> Result<()> {
        self.retry_unanswered(|| async {
            let conn = self.inner.client.pool().get().await?;
            self.nack(&**conn, d, reason).await
        })
        .await
    }

    /// Runs `call` until it gets an answer (any result but a connection error), pausing with
    /// [`pause::UNANSWERED_SETTLE`] between tries.
    async fn retry_unanswered<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut failures = 0u32;
        loop {
            match call().await {
                Err(e) if e.is_connection() => {
                    failures = failures.saturating_add(1);
                    self.settle_pause(&e, failures).await;
                }
                other => return other,
            }
        }
    }

    /// Logs a settling call that got no answer and pauses before the next try.
    async fn settle_pause(&self, e: &Error, failures: u32) {
        let pause = pause::UNANSWERED_SETTLE.after(failures);
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
