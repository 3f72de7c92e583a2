//! The consumer's calls of `lease_queue`: one typed function per SQL function (`claim`,
//! `claim_any`, `receive`, `ack`, `nack`, `release`, `next_due`, and the queue's partition
//! count), each on any [`GenericClient`] (a pooled connection or the batch's transaction). The
//! statements are in `sql.rs`; what the calls mean is `docs/QUEUE.md`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use crate::error::{Error, Result};
use crate::message::Delivery;
use crate::sql::{self, from_micros, get, micros, one};

/// What every fenced call presents: the partition, and the owner and epoch it holds it at.
#[derive(Clone, Copy)]
pub(crate) struct Holder<'a> {
    pub(crate) queue: &'a Arc<str>,
    pub(crate) partition: u32,
    pub(crate) owner: &'a str,
    pub(crate) epoch: i64,
}

impl Holder<'_> {
    fn partition_i32(&self) -> i32 {
        partition_arg(self.partition)
    }
}

/// A partition number as the SQL API's `integer`; one above its range is sent as `i32::MAX`,
/// which no queue has (at most 1024 partitions), so the server refuses it as it refuses any
/// partition the queue does not have.
fn partition_arg(partition: u32) -> i32 {
    i32::try_from(partition).unwrap_or(i32::MAX)
}

/// The grant of a claim's row from column `at` on: its epoch, expiry and the time left.
fn claimed(
    row: &tokio_postgres::Row,
    partition: u32,
    at: usize,
    call: &str,
) -> Result<PartitionGrant> {
    Ok(PartitionGrant {
        partition,
        grant: pglease::Grant::new(get(row, at, call)?, get::<SystemTime>(row, at + 1, call)?),
        left: from_micros(get(row, at + 2, call)?),
    })
}

/// A partition granted by `claim` or `claim_any`.
pub(crate) struct PartitionGrant {
    pub(crate) partition: u32,
    pub(crate) grant: pglease::Grant,
    /// The time the server reported left on the grant.
    pub(crate) left: Duration,
}

/// What `nack` did with the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nacked {
    /// It is delivered again after its retry delay.
    Retrying,
    /// It had its last attempt: it is a dead letter.
    DeadLettered,
}

/// `claim`: partition `partition` for `owner` for `ttl`, if it is free.
pub(crate) async fn claim<C: GenericClient>(
    db: &C,
    queue: &str,
    partition: u32,
    owner: &str,
    ttl: Duration,
) -> Result<Option<PartitionGrant>> {
    const CALL: &str = "lease_queue.claim";
    let p = partition_arg(partition);
    let ttl = micros(ttl);
    let row = one(
        sql::query(
            db,
            sql::CLAIM,
            &[
                (&queue, Type::TEXT),
                (&p, Type::INT4),
                (&owner, Type::TEXT),
                (&ttl, Type::INT8),
            ],
        )
        .await?,
        CALL,
    )?;
    if !get::<bool>(&row, 0, CALL)? {
        return Ok(None);
    }
    claimed(&row, partition, 1, CALL).map(Some)
}

/// `claim_any`: any free partition for `owner` for `ttl`.
pub(crate) async fn claim_any<C: GenericClient>(
    db: &C,
    queue: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<PartitionGrant>> {
    const CALL: &str = "lease_queue.claim_any";
    let ttl = micros(ttl);
    let row = one(
        sql::query(
            db,
            sql::CLAIM_ANY,
            &[
                (&queue, Type::TEXT),
                (&owner, Type::TEXT),
                (&ttl, Type::INT8),
            ],
        )
        .await?,
        CALL,
    )?;
    if !get::<bool>(&row, 0, CALL)? {
        return Ok(None);
    }
    let partition = u32::try_from(get::<i32>(&row, 1, CALL)?)
        .map_err(|_| Error::protocol("negative partition"))?;
    claimed(&row, partition, 2, CALL).map(Some)
}

/// `receive`: the open batch (or a new one) of up to `batch_size` messages.
pub(crate) async fn receive<C: GenericClient>(
    db: &C,
    holder: Holder<'_>,
    batch_size: i32,
) -> Result<Vec<Delivery>> {
    const CALL: &str = "lease_queue.receive";
    let queue: &str = holder.queue;
    let partition = holder.partition_i32();
    let rows = sql::query(
        db,
        sql::RECEIVE,
        &[
            (&queue, Type::TEXT),
            (&partition, Type::INT4),
            (&holder.owner, Type::TEXT),
            (&holder.epoch, Type::INT8),
            (&batch_size, Type::INT4),
        ],
    )
    .await?;
    deliveries(&rows, holder, CALL)
}

/// `ack_and_receive`: `ack` of batch `batch_id`, then `receive` of up to `batch_size` messages,
/// in one statement.
pub(crate) async fn ack_and_receive<C: GenericClient>(
    db: &C,
    holder: Holder<'_>,
    batch_id: i64,
    batch_size: i32,
) -> Result<Vec<Delivery>> {
    const CALL: &str = "lease_queue.ack_and_receive";
    let queue: &str = holder.queue;
    let partition = holder.partition_i32();
    let rows = sql::query(
        db,
        sql::ACK_AND_RECEIVE,
        &[
            (&queue, Type::TEXT),
            (&partition, Type::INT4),
            (&holder.owner, Type::TEXT),
            (&holder.epoch, Type::INT8),
            (&batch_id, Type::INT8),
            (&batch_size, Type::INT4),
        ],
    )
    .await?;
    deliveries(&rows, holder, CALL)
}

/// The deliveries of `receive` / `ack_and_receive` rows.
fn deliveries(
    rows: &[tokio_postgres::Row],
    holder: Holder<'_>,
    call: &'static str,
) -> Result<Vec<Delivery>> {
    rows.iter()
        .map(|row| {
            let payload: String = get(row, 3, call)?;
            let attempts: i32 = get(row, 4, call)?;
            Ok(Delivery {
                queue: Arc::clone(holder.queue),
                partition: holder.partition,
                epoch: holder.epoch,
                batch_id: get(row, 0, call)?,
                id: get(row, 1, call)?,
                key: get(row, 2, call)?,
                payload: serde_json::from_str(&payload)
                    .map_err(|e| Error::protocol(format!("{call}: payload: {e}")))?,
                attempts: u32::try_from(attempts).unwrap_or(0),
                enqueued_at: get(row, 5, call)?,
            })
        })
        .collect()
}

/// `ack` of batch `batch_id`.
pub(crate) async fn ack<C: GenericClient>(db: &C, holder: Holder<'_>, batch_id: i64) -> Result<()> {
    let queue: &str = holder.queue;
    let partition = holder.partition_i32();
    sql::query(
        db,
        sql::ACK,
        &[
            (&queue, Type::TEXT),
            (&partition, Type::INT4),
            (&holder.owner, Type::TEXT),
            (&holder.epoch, Type::INT8),
            (&batch_id, Type::INT8),
        ],
    )
    .await?;
    Ok(())
}

/// `nack` of message `id` of batch `batch_id`: retried after `retry_after`, or a dead letter,
/// with `reason`.
pub(crate) async fn nack<C: GenericClient>(
    db: &C,
    holder: Holder<'_>,
    batch_id: i64,
    id: i64,
    retry_after: Duration,
    reason: &str,
) -> Result<Nacked> {
    const CALL: &str = "lease_queue.nack";
    let queue: &str = holder.queue;
    let partition = holder.partition_i32();
    let retry_micros = micros(retry_after);
    let row = one(
        sql::query(
            db,
            sql::NACK,
            &[
                (&queue, Type::TEXT),
                (&partition, Type::INT4),
                (&holder.owner, Type::TEXT),
                (&holder.epoch, Type::INT8),
                (&batch_id, Type::INT8),
                (&id, Type::INT8),
                (&retry_micros, Type::INT8),
                (&reason, Type::TEXT),
            ],
        )
        .await?,
        CALL,
    )?;
    let state: String = get(&row, 0, CALL)?;
    match state.as_str() {
        "retrying" => Ok(Nacked::Retrying),
        "dead_lettered" => Ok(Nacked::DeadLettered),
        other => Err(Error::protocol(format!("{CALL} returned {other:?}"))),
    }
}

/// `release` of the partition (with `force`, putting its open batch back); how many messages
/// it put back.
pub(crate) async fn release<C: GenericClient>(
    db: &C,
    holder: Holder<'_>,
    force: bool,
) -> Result<i32> {
    const CALL: &str = "lease_queue.release";
    let queue: &str = holder.queue;
    let partition = holder.partition_i32();
    let row = one(
        sql::query(
            db,
            sql::RELEASE,
            &[
                (&queue, Type::TEXT),
                (&partition, Type::INT4),
                (&holder.owner, Type::TEXT),
                (&holder.epoch, Type::INT8),
                (&force, Type::BOOL),
            ],
        )
        .await?,
        CALL,
    )?;
    get::<i32>(&row, 0, CALL)
}

/// `next_due`: how long until the next message of `partition` outside its open batch is due
/// (`None`: nothing pending).
pub(crate) async fn next_due<C: GenericClient>(
    db: &C,
    queue: &str,
    partition: u32,
) -> Result<Option<Duration>> {
    const CALL: &str = "lease_queue.next_due";
    let partition = partition_arg(partition);
    let row = one(
        sql::query(
            db,
            sql::NEXT_DUE,
            &[(&queue, Type::TEXT), (&partition, Type::INT4)],
        )
        .await?,
        CALL,
    )?;
    let ms: Option<i64> = get(&row, 0, CALL)?;
    Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
}

/// The queue's number of partitions (`LQ001` if there is no such queue).
pub(crate) async fn partition_count<C: GenericClient>(db: &C, queue: &str) -> Result<u32> {
    // Raises the server's LQ001 if there is no such queue.
    sql::query(db, sql::QUEUE_EXISTS, &[(&queue, Type::TEXT)]).await?;
    let rows = sql::query(db, sql::PARTITIONS, &[(&queue, Type::TEXT)]).await?;
    match rows.first() {
        None => Err(Error::protocol(format!("queue {queue:?} vanished"))),
        Some(row) => {
            let n: i32 = get(row, 0, "lease_queue.list_queues")?;
            u32::try_from(n).map_err(|_| Error::protocol("negative number of partitions"))
        }
    }
}
