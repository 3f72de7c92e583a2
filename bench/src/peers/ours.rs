//! pg_lease_queue: keyed messages (per-key commit order); one partition per consumer, each
//! consumer claims its partition and loops ack_and_receive (the previous batch's ack and the next
//! batch in one call, as the Rust consumer does), the last batch acked with ack.

use std::time::Instant;

use tokio_postgres::Client;

use super::meter::ClientProc;
use super::workload::{Rec, Tickets, message, payload};
use super::{Consumed, Job, Outcome, drain, preload_ranges, timed};
use crate::queue::system::{LQ_ACK, LQ_CLAIM, LQ_RELEASE, LQ_SEND_BATCH};
use crate::{BoxResult, err};

/// ack_and_receive, with the payload's key index and sequence number.
const ACK_AND_RECEIVE: &str = "SELECT batch_id, (payload->>'k')::int4, (payload->>'s')::int4 \
     FROM lease_queue.ack_and_receive($1::text, $2::int, $3::text, $4::bigint, $5::int8, $6::int)";

/// A claimed partition.
pub(super) struct Partition {
    pub(super) queue: String,
    pub(super) partition: i32,
    pub(super) owner: String,
    pub(super) epoch: i64,
}

/// The consume loop of one consumer: ack the previous batch and receive up to `batch` messages
/// (one call) → handle them, until the partition is drained (no producer runs during the drain;
/// the call that finds nothing has acked the last batch) or `deadline` (the batch in hand is then
/// acked with ack). Returns when its last ack returned.
pub(super) async fn consume(
    c: &Client,
    p: &Partition,
    batch: i32,
    deadline: Instant,
    tickets: &Tickets,
    out: &mut Vec<Rec>,
) -> BoxResult<Option<Instant>> {
    let next = c.prepare(ACK_AND_RECEIVE).await?;
    let ack = c.prepare(LQ_ACK).await?;
    let mut last = None;
    let mut open: Option<i64> = None;
    let mut msgs = Vec::with_capacity(batch.max(1) as usize);
    while Instant::now() < deadline {
        let rows = c
            .query(
                &next,
                &[&p.queue, &p.partition, &p.owner, &p.epoch, &open, &batch],
            )
            .await?;
        if open.take().is_some() {
            last = Some(Instant::now());
        }
        let Some(first) = rows.first() else {
            break;
        };
        open = Some(first.get(0));
        msgs.clear();
        for r in &rows {
            let (k, s): (i32, i32) = (r.get(1), r.get(2));
            msgs.push((k as u32, s as u32));
        }
        tickets.handle(&msgs, out);
    }
    if let Some(batch_id) = open {
        c.execute(
            &ack,
            &[&p.queue, &p.partition, &p.owner, &p.epoch, &batch_id],
        )
        .await?;
        last = Some(Instant::now());
    }
    Ok(last)
}

/// Claims partition `partition` of `queue` for a consumer.
async fn claim(c: &Client, queue: &str, partition: u32) -> BoxResult<Partition> {
    let owner = format!("peers-consumer-{partition}");
    let row = c
        .query_one(
            LQ_CLAIM,
            &[&queue, &(partition as i32), &owner, &600_000i64],
        )
        .await?;
    let claimed: bool = row.get(0);
    if !claimed {
        return Err(err(format!("{queue}: partition {partition} not claimed")));
    }
    Ok(Partition {
        queue: queue.into(),
        partition: partition as i32,
        owner,
        epoch: row.get(1),
    })
}

pub(super) async fn create(c: &Client, job: &Job<'_>) -> BoxResult<()> {
    c.execute(
        "SELECT lease_queue.create_queue($1::text, $2::int)",
        &[&job.queue, &(job.consumers as i32)],
    )
    .await?;
    Ok(())
}

pub(super) async fn drop_queue(c: &Client, queue: &str) -> BoxResult<()> {
    c.execute("SELECT lease_queue.drop_queue($1::text)", &[&queue])
        .await?;
    Ok(())
}

/// send_batch of `preload_batch` messages per call, one connection.
pub(super) async fn preload(c: &Client, job: &Job<'_>) -> BoxResult<()> {
    let stmt = c.prepare(LQ_SEND_BATCH).await?;
    let nkeys = job.keys.len() as u32;
    for (a, b) in preload_ranges(job.backlog, job.preload_batch) {
        let mut keys = Vec::with_capacity((b - a) as usize);
        let mut bodies = Vec::with_capacity((b - a) as usize);
        for i in a..b {
            let (k, s) = message(i, nkeys);
            keys.push(Some(job.keys[k as usize].as_str()));
            bodies.push(payload(k, s));
        }
        let n: i64 = c
            .query_one(&stmt, &[&job.queue, &keys, &bodies])
            .await?
            .get(0);
        if n as u64 != b - a {
            return Err(err(format!(
                "{}: send_batch sent {n} of {}",
                job.queue,
                b - a
            )));
        }
    }
    Ok(())
}

/// One consumer per partition: claim, consume, release.
pub(super) async fn run(job: &Job<'_>) -> BoxResult<Outcome> {
    let c = job.db.connect(false).await?;
    create(&c, job).await?;
    let out = run_created(job, &c).await;
    drop_queue(&c, &job.queue).await?;
    out
}

async fn run_created(job: &Job<'_>, c: &Client) -> BoxResult<Outcome> {
    let (produce_seconds, produce) =
        timed(job.mon, ClientProc::Harness, job.backlog, preload(c, job)).await?;
    let batch = job.batch as i32;
    let d = drain(job, |p, deadline, tickets, _handled| {
        let db = job.db.clone();
        let queue = job.queue.clone();
        async move {
            let c = db.connect(false).await?;
            let part = claim(&c, &queue, p).await?;
            let mut recs = Vec::new();
            let last = consume(&c, &part, batch, deadline, &tickets, &mut recs).await?;
            c.execute(
                LQ_RELEASE,
                &[&part.queue, &part.partition, &part.owner, &part.epoch],
            )
            .await?;
            Ok(Consumed {
                recs,
                last,
                empty_reads: 0,
                errors: 0,
                conn: c,
            })
        }
    })
    .await?;
    Ok(d.outcome(produce_seconds, produce))
}
