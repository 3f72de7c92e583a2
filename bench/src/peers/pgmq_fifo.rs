//! pgmq's FIFO groups: header `x-pgmq-group` = key (with pgmq's FIFO index), consumers on the one
//! queue loop `read_grouped` → `delete(ids)`.
//!
//! pgmq 1.13 has three grouped reads: `read_grouped` (SQS-FIFO style: fills the batch from the
//! group with the oldest visible head first, then the next), `read_grouped_rr` (round robin: the
//! head of every group, then the second message of every group, …) and `read_grouped_head` (one
//! message per group). `read_grouped` is used: it is the one pgmq documents as its FIFO read, it
//! batches a key's messages together as our receive does, and it is what the queue section
//! measured (issue 13).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::meter::ClientProc;
use super::workload::{message, payload};
use super::{Consumed, Job, Outcome, drain, preload_ranges, timed};
use crate::queue::system::{PGMQ_DELETE, PGMQ_SEND_BATCH_FIFO, group_header};
use crate::{BoxResult, err};

const READ: &str = "SELECT msg_id, (message->>'k')::int4, (message->>'s')::int4 \
     FROM pgmq.read_grouped($1::text, $2::int, $3::int)";

/// Visibility timeout of a read, seconds (beyond a drain: nothing is read twice by timeout).
const VT: i32 = 30;

/// Seconds a read may run past the drain window before it is cancelled.
const GRACE_S: u64 = 5;

pub(super) async fn preload(c: &Client, job: &Job<'_>) -> BoxResult<()> {
    let stmt = c.prepare(PGMQ_SEND_BATCH_FIFO).await?;
    let nkeys = job.keys.len() as u32;
    for (a, b) in preload_ranges(job.backlog, job.preload_batch) {
        let mut bodies = Vec::with_capacity((b - a) as usize);
        let mut headers = Vec::with_capacity((b - a) as usize);
        for i in a..b {
            let (k, s) = message(i, nkeys);
            bodies.push(payload(k, s));
            headers.push(group_header(&job.keys[k as usize]));
        }
        let n: i64 = c
            .query_one(&stmt, &[&job.queue, &bodies, &headers])
            .await?
            .get(0);
        if n as u64 != b - a {
            return Err(err(format!(
                "{}: pgmq send_batch sent {n} of {}",
                job.queue,
                b - a
            )));
        }
    }
    Ok(())
}

pub(super) async fn run(job: &Job<'_>) -> BoxResult<Outcome> {
    let c = job.db.connect(false).await?;
    c.execute("SELECT pgmq.create($1::text)", &[&job.queue])
        .await?;
    c.execute("SELECT pgmq.create_fifo_index($1::text)", &[&job.queue])
        .await?;
    let out = run_created(job, &c).await;
    c.execute("SELECT pgmq.drop_queue($1::text)", &[&job.queue])
        .await?;
    out
}

async fn run_created(job: &Job<'_>, c: &Client) -> BoxResult<Outcome> {
    let (produce_seconds, produce) =
        timed(job.mon, ClientProc::Harness, job.backlog, preload(c, job)).await?;
    let batch = job.batch as i32;
    let backlog = job.backlog;
    // A grouped read over a large backlog can take longer than the whole drain window: it is
    // cancelled GRACE_S after the window, and its consumer stops (counted under errors).
    let timeout = format!(
        "SET statement_timeout = '{}s'",
        u64::from(job.seconds) + GRACE_S
    );
    let d = drain(job, |_, deadline, tickets, handled| {
        let db = job.db.clone();
        let queue = job.queue.clone();
        let timeout = timeout.clone();
        async move {
            let c = db.connect(false).await?;
            c.batch_execute(&timeout).await?;
            let read = c.prepare(READ).await?;
            let delete = c.prepare(PGMQ_DELETE).await?;
            let mut recs = Vec::new();
            let mut msgs = Vec::new();
            let mut last = None;
            let mut empty_reads = 0;
            let mut cancelled = 0;
            while Instant::now() < deadline && handled.load(Ordering::SeqCst) < backlog {
                let rows = match c.query(&read, &[&queue, &VT, &batch]).await {
                    Ok(rows) => rows,
                    Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
                        cancelled += 1;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                };
                if rows.is_empty() {
                    // Every visible head is taken by another consumer at this moment.
                    empty_reads += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                msgs.clear();
                let mut ids = Vec::with_capacity(rows.len());
                for r in &rows {
                    ids.push(r.get::<_, i64>(0));
                    let (k, s): (i32, i32) = (r.get(1), r.get(2));
                    msgs.push((k as u32, s as u32));
                }
                tickets.handle(&msgs, &mut recs);
                c.query_one(&delete, &[&queue, &ids]).await?;
                handled.fetch_add(ids.len() as u64, Ordering::SeqCst);
                last = Some(Instant::now());
            }
            Ok(Consumed {
                recs,
                last,
                empty_reads,
                errors: cancelled,
                conn: c,
            })
        }
    })
    .await?;
    Ok(d.outcome(produce_seconds, produce))
}
