//! Throughput: a produce phase, a top-up to the backlog, a consume phase, per system and
//! configuration.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio_postgres::Client;

use super::system::*;
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg, round1};
use crate::{BoxResult, err};

#[derive(Clone, Debug, Serialize)]
pub struct ThroughputRun {
    pub system: String,
    pub partitions: u32,
    pub batch: u32,
    pub sync_commit: String,
    pub producers: u32,
    pub consumers: u32,
    pub produced: u64,
    pub produce_seconds: f64,
    pub produced_per_s: f64,
    /// Time per producer transaction (one send / send_batch call, autocommit).
    pub produce_call: Latency,
    /// Server CPU per message produced / consumed (µs), from /proc.
    pub produce_cpu_us: Option<f64>,
    /// Messages waiting when the consume phase started.
    pub backlog: u64,
    pub consumed: u64,
    pub consume_seconds: f64,
    pub consumed_per_s: f64,
    /// Time per consumer cycle (receive + ack, or read + delete).
    pub consume_cycle: Latency,
    pub consume_cpu_us: Option<f64>,
    /// Reads that returned nothing while messages were left (pgmq: all visible heads taken by
    /// other consumers at that moment); the consumer retried after 1 ms.
    pub empty_reads: u64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

pub(super) fn cpu_now() -> Option<u64> {
    stats::cpu::server_ticks().map(|(t, _)| t)
}

pub(super) fn cpu_per(before: Option<u64>, after: Option<u64>, n: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if n > 0 => {
            Some(round1((b - a) as f64 * stats::cpu::TICK_US / n as f64))
        }
        _ => None,
    }
}

/// What one producer phase sends: `batch` messages per transaction, until `deadline` or until
/// `cap` messages in all (counted in `count`).
pub(super) struct Produce<'a> {
    pub(super) db: &'a Db,
    pub(super) sync: bool,
    pub(super) sys: System,
    pub(super) queue: &'a str,
    pub(super) batch: u32,
    pub(super) producers: u32,
    pub(super) keys: &'a Arc<Vec<String>>,
    pub(super) cap: u64,
    pub(super) deadline: Instant,
}

/// Runs the producers; returns the per-call histogram.
pub(super) async fn produce(job: Produce<'_>, count: &Arc<AtomicU64>) -> BoxResult<Histogram<u64>> {
    let Produce {
        db,
        sync,
        sys,
        queue,
        batch,
        producers,
        keys,
        cap,
        deadline,
    } = job;
    let mut tasks = Vec::new();
    for id in 0..producers {
        let db = db.clone();
        let queue = queue.to_string();
        let keys = keys.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let c = db.connect(sync).await?;
            let mut s = Sender::new(&c, sys, &queue, batch, keys, id).await?;
            let mut h = stats::histogram();
            while Instant::now() < deadline {
                if count.fetch_add(u64::from(batch), Ordering::SeqCst) >= cap {
                    count.fetch_sub(u64::from(batch), Ordering::SeqCst);
                    break;
                }
                let t0 = Instant::now();
                let n = s.send(&c).await?;
                stats::record(&mut h, t0.elapsed().as_micros() as u64);
                if n != u64::from(batch) {
                    return Err(err(format!("{queue}: sent {n} of {batch}")));
                }
            }
            BoxResult::Ok(h)
        }));
    }
    let mut hist = stats::histogram();
    for t in tasks {
        hist.add(&t.await??).expect("same bounds");
    }
    Ok(hist)
}

/// One cell of the throughput matrix.
#[derive(Clone, Copy)]
pub(super) struct Cell {
    pub(super) sys: System,
    pub(super) partitions: u32,
    pub(super) batch: u32,
    pub(super) sync: bool,
}

pub(super) async fn throughput_run(
    db: &Db,
    c: &Client,
    plan: &Plan,
    cell: Cell,
    prefix: &str,
) -> BoxResult<ThroughputRun> {
    let Cell {
        sys,
        partitions,
        batch,
        sync,
    } = cell;
    let load_before = LoadAvg::now();
    let name = format!(
        "{prefix}tp_{}_{partitions}_{batch}_{}",
        sys.code(),
        if sync { "on" } else { "off" }
    );
    create(c, sys, &name, partitions).await?;
    let keys = Arc::new(balanced_keys(c, partitions, 8).await?);
    let seconds = Duration::from_secs(u64::from(plan.queue_seconds));
    let cap = u64::from(plan.queue_backlog);

    // Produce.
    let count = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let produce_call = produce(
        Produce {
            db,
            sync,
            sys,
            queue: &name,
            batch,
            producers: plan.queue_producers,
            keys: &keys,
            cap,
            deadline: t0 + seconds,
        },
        &count,
    )
    .await?;
    let produce_seconds = t0.elapsed().as_secs_f64();
    let produce_cpu = cpu_per(cpu0, cpu_now(), count.load(Ordering::SeqCst));
    let produced = count.load(Ordering::SeqCst);
    // Top up to the backlog (one connection, batches of up to 1000; synchronous_commit=off).
    if produced < cap {
        let tc = db.connect(false).await?;
        let mut s = Sender::new(&tc, sys, &name, 1000, keys.clone(), 99).await?;
        let mut have = produced;
        while have < cap {
            let n = (cap - have).min(1000) as u32;
            if n != s.batch {
                s = Sender::new(&tc, sys, &name, n, keys.clone(), 99).await?;
            }
            have += s.send(&tc).await?;
        }
        count.store(have, Ordering::SeqCst);
    }
    let backlog = count.load(Ordering::SeqCst);

    // Consume.
    let consumed = Arc::new(AtomicU64::new(0));
    let empty = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let deadline = t0 + seconds;
    let mut tasks = Vec::new();
    for p in 0..partitions {
        let db = db.clone();
        let name = name.clone();
        let consumed = consumed.clone();
        let empty = empty.clone();
        tasks.push(tokio::spawn(async move {
            let c = db.connect(sync).await?;
            let r = Receiver::new(&c, sys, &name, batch, p).await?;
            let mut h = stats::histogram();
            let mut end = Instant::now();
            while Instant::now() < deadline && consumed.load(Ordering::SeqCst) < backlog {
                let t = Instant::now();
                let n = r.cycle(&c).await?;
                if n == 0 {
                    if sys.ours() {
                        // The partition is drained (no producer is running).
                        break;
                    }
                    empty.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                stats::record(&mut h, t.elapsed().as_micros() as u64);
                consumed.fetch_add(n, Ordering::SeqCst);
                end = Instant::now();
            }
            r.finish(&c).await?;
            BoxResult::Ok((h, end))
        }));
    }
    let mut consume_cycle = stats::histogram();
    let mut last = t0;
    for t in tasks {
        let (h, end) = t.await??;
        consume_cycle.add(&h).expect("same bounds");
        last = last.max(end);
    }
    let consume_seconds = last.duration_since(t0).as_secs_f64().max(1e-6);
    let consumed = consumed.load(Ordering::SeqCst);
    let consume_cpu = cpu_per(cpu0, cpu_now(), consumed);
    drop_queue(c, sys, &name).await?;
    let run = ThroughputRun {
        system: sys.name().into(),
        partitions,
        batch,
        sync_commit: if sync { "on" } else { "off" }.into(),
        producers: plan.queue_producers,
        consumers: partitions,
        produced,
        produce_seconds: stats::round3(produce_seconds),
        produced_per_s: round1(produced as f64 / produce_seconds),
        produce_call: Latency::of(&produce_call),
        produce_cpu_us: produce_cpu,
        backlog,
        consumed,
        consume_seconds: stats::round3(consume_seconds),
        consumed_per_s: round1(consumed as f64 / consume_seconds),
        consume_cycle: Latency::of(&consume_cycle),
        consume_cpu_us: consume_cpu,
        empty_reads: empty.load(Ordering::SeqCst),
        load_before,
        load_after: LoadAvg::now(),
    };
    eprintln!(
        "    sync {:<3} {:>2} partitions batch {:>3} {:<10} produced {:>7.0}/s  consumed {:>7.0}/s (backlog {}, {} in {:.2} s)",
        run.sync_commit,
        partitions,
        batch,
        run.system,
        run.produced_per_s,
        run.consumed_per_s,
        backlog,
        consumed,
        consume_seconds
    );
    Ok(run)
}
