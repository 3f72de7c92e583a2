//! Consume: an untimed backlog, then 1 or 4 consumers drain it for a fixed time; messages/s.
//!
//! Ours: a queue of as many partitions as consumers (64 keys, equally many per partition); each
//! consumer claims its own partition (before the clock starts) and loops receive → ack, or
//! ack_and_receive. pgmq: one queue table, every consumer loops read → delete. The clock starts
//! when every consumer is connected and prepared (a barrier), and each consumer stops at the
//! deadline or when it finds nothing left; the rate is the messages settled over the time from
//! the first consumer's start to the last one's last settling call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use super::contenders::{self, Consumer, Contender};
use super::{KEYS, RatePoint, RateRun, in_order};
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg, round1};
use crate::{BoxResult, err};

/// Every configuration: batch 100 then 1, 1 then 4 consumers.
pub async fn run(
    db: &Db,
    plan: &Plan,
    who: &[Contender],
    prefix: &str,
) -> BoxResult<Vec<RatePoint>> {
    let mut points = Vec::new();
    for batch in [100u32, 1] {
        for clients in [1u32, 4] {
            let backlog = if batch == 1 {
                plan.hotpath_backlog_single
            } else {
                plan.hotpath_backlog
            };
            let mut runs = Vec::new();
            for round in 0..plan.hotpath_rounds {
                for w in in_order(who, round) {
                    let r =
                        consume_run(db, plan, w, batch, clients, backlog, round, prefix).await?;
                    eprintln!(
                        "    batch {batch:>3} consumers {clients} round {round} {:<28} {:>8.0} msg/s ({} in {:.2} s{}; cpu {} µs/msg; preload {:.1} s; load {:.2})",
                        r.contender,
                        r.per_s,
                        r.messages,
                        r.seconds,
                        if r.ran_dry { ", ran dry" } else { "" },
                        r.server_cpu_us.map_or("–".into(), |x| format!("{x:.1}")),
                        r.preload_seconds,
                        r.load_after
                    );
                    runs.push(r);
                }
            }
            points.push(RatePoint::of("consume", batch, clients, runs));
        }
    }
    Ok(points)
}

struct ConsumerOutcome {
    client: tokio_postgres::Client,
    consumer: Consumer,
    hist: hdrhistogram::Histogram<u64>,
    start: Instant,
    end: Instant,
    dry: bool,
    empty: u64,
}

#[allow(clippy::too_many_arguments)]
async fn consume_run(
    db: &Db,
    plan: &Plan,
    who: Contender,
    batch: u32,
    clients: u32,
    backlog: u64,
    round: u32,
    prefix: &str,
) -> BoxResult<RateRun> {
    let load_before = LoadAvg::now().one;
    let queue = format!("{prefix}hp_c{batch}_{clients}_{}_{round}", who.code());
    let c = db.connect(false).await?;
    contenders::create(&c, who, &queue, clients).await?;
    let keys = contenders::keys(&c, clients, KEYS).await?;
    let t = Instant::now();
    contenders::preload(db, who, &queue, &keys, backlog).await?;
    let preload_seconds = stats::round3(t.elapsed().as_secs_f64());
    contenders::vacuum(db).await?;

    let consumed = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(clients as usize + 1));
    let secs = Duration::from_secs_f64(plan.hotpath_seconds);
    let mut tasks = Vec::new();
    for p in 0..clients {
        let db = db.clone();
        let queue = queue.clone();
        let consumed = consumed.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let client = db.connect(false).await?;
            let mut consumer = Consumer::new(&client, who, &queue, batch, p).await?;
            barrier.wait().await;
            let start = Instant::now();
            let deadline = start + secs;
            let mut hist = stats::histogram();
            let (mut end, mut dry, mut empty) = (start, false, 0u64);
            while Instant::now() < deadline {
                let t = Instant::now();
                let n = consumer.step(&client).await?;
                if n == 0 {
                    // Ours: the partition is drained (nothing else sends). pgmq: drained when
                    // everything is settled, else the visible heads were taken by the others.
                    if who.ours() || consumed.load(Ordering::SeqCst) >= backlog {
                        dry = true;
                        end = Instant::now();
                        break;
                    }
                    empty += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                stats::record(&mut hist, t.elapsed().as_micros() as u64);
                consumed.fetch_add(n, Ordering::SeqCst);
                end = Instant::now();
            }
            consumer.settle(&client).await?;
            if who == Contender::OursAar {
                end = Instant::now();
            }
            BoxResult::Ok(ConsumerOutcome {
                client,
                consumer,
                hist,
                start,
                end,
                dry,
                empty,
            })
        }));
    }
    let sampler = super::waits::Sampler::start(db).await?;
    barrier.wait().await;
    let cpu0 = stats::cpu::server_ticks().map(|t| t.0);
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await??);
    }
    let cpu1 = stats::cpu::server_ticks().map(|t| t.0);
    let waits = sampler.finish().await?;
    let first = outcomes
        .iter()
        .map(|o| o.start)
        .min()
        .ok_or_else(|| err("no consumer"))?;
    let last = outcomes.iter().map(|o| o.end).max().unwrap_or(first);
    let mut hist = stats::histogram();
    for o in &outcomes {
        hist.add(&o.hist).expect("same bounds");
        o.consumer.finish(&o.client).await?;
    }
    let messages = consumed.load(Ordering::SeqCst);
    let seconds = last.duration_since(first).as_secs_f64().max(1e-6);
    contenders::drop_queue(&c, who, &queue).await?;
    Ok(RateRun {
        contender: who.name().into(),
        round,
        messages,
        seconds: stats::round3(seconds),
        per_s: round1(messages as f64 / seconds),
        call: Latency::of(&hist),
        server_cpu_us: cpu_per(cpu0, cpu1, messages),
        backlog,
        preload_seconds,
        ran_dry: outcomes.iter().any(|o| o.dry),
        waits,
        empty_reads: outcomes.iter().map(|o| o.empty).sum(),
        load_before,
        load_after: LoadAvg::now().one,
    })
}

/// Server CPU per message (µs) between two readings of the server's ticks.
pub fn cpu_per(before: Option<u64>, after: Option<u64>, n: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if n > 0 => Some(round1(
            b.saturating_sub(a) as f64 * stats::cpu::TICK_US / n as f64,
        )),
        _ => None,
    }
}
