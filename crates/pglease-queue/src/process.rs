//! The two ways of handling a batch ([`Process`]): [`AtLeastOnce`] calls the handler per message
//! and settles on pooled connections; [`Transactional`] handles the whole batch in one
//! transaction that also acks it, each message in a savepoint.

use std::collections::HashSet;
use std::fmt::Display;
use std::future::Future;

use tokio_postgres::Transaction;

use crate::consumer::TxFuture;
use crate::error::Result;
use crate::message::Delivery;
use crate::worker::PartitionWorker;

/// One way of handling a batch.
pub(crate) trait Process: Sync {
    /// Handles `deliveries` (one batch, in delivery order) and settles the batch; with `going_on`,
    /// the settling call also opens the next batch and returns it (`Some`, empty when nothing is
    /// deliverable), else it only acks (`None`).
    fn batch<'a>(
        &'a self,
        worker: &'a PartitionWorker<'a>,
        deliveries: Vec<Delivery>,
        going_on: bool,
    ) -> impl Future<Output = Result<Option<Vec<Delivery>>>> + Send + 'a;
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
        worker: &'a PartitionWorker<'a>,
        deliveries: Vec<Delivery>,
        going_on: bool,
    ) -> impl Future<Output = Result<Option<Vec<Delivery>>>> + Send + 'a {
        async move {
            let batch_id = deliveries.first().map_or(0, |d| d.batch_id);
            let mut held_back = HashSet::new();
            for d in deliveries {
                if d.key.as_ref().is_some_and(|k| held_back.contains(k)) {
                    // The nack of an earlier message of its key sent it back undelivered.
                    continue;
                }
                worker.trace_delivery(&d);
                let outcome = (self.0)(d.clone()).await.map_err(|e| e.to_string());
                if let Err(reason) = outcome {
                    worker.nack_retrying(&d, &reason).await?;
                    if let Some(key) = d.key {
                        held_back.insert(key);
                    }
                }
            }
            worker.ack_then_next_retrying(batch_id, going_on).await
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
        worker: &'a PartitionWorker<'a>,
        deliveries: Vec<Delivery>,
        going_on: bool,
    ) -> impl Future<Output = Result<Option<Vec<Delivery>>>> + Send + 'a {
        async move {
            let batch_id = deliveries.first().map_or(0, |d| d.batch_id);
            let mut conn = worker.inner.client.pool().get().await?;
            let db: &mut tokio_postgres::Client = &mut conn;
            let mut tx = db.transaction().await?;
            let mut held_back = HashSet::new();
            for d in &deliveries {
                if d.key.as_ref().is_some_and(|k| held_back.contains(k)) {
                    continue;
                }
                worker.trace_delivery(d);
                let savepoint = tx.savepoint("pglease_queue_message").await?;
                let outcome = (self.0)(&savepoint, d).await.map_err(|e| e.to_string());
                match outcome {
                    Ok(()) => savepoint.commit().await?,
                    Err(reason) => {
                        savepoint.rollback().await?;
                        worker.nack(&tx, d, &reason).await?;
                        if let Some(key) = &d.key {
                            held_back.insert(key.clone());
                        }
                    }
                }
            }
            // Fenced: a lost partition makes this fail, and the whole transaction rolls back. The
            // next batch is opened in this transaction: it exists only if the ack commits.
            let next = worker.ack_then_next(&tx, batch_id, going_on).await?;
            tx.commit().await?;
            Ok(next)
        }
    }
}
