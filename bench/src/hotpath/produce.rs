//! Produce: send (one message per autocommit call) and send_batch(100), at 1 and 4 producers, into
//! an empty queue of 4 partitions, for a fixed time; messages/s. All producers share the same 64
//! keys (equally many per partition), each starting at another offset in them. Ours twice: with
//! the queue's notify on (the default) and off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use super::consume::cpu_per;
use super::contenders::{self, Contender};
use super::{KEYS, RatePoint, RateRun, Scaling, in_order, per_round_ratio};
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg, round1};
use crate::{BoxResult, err};

/// Partitions of the produce runs' queues.
pub const PARTITIONS: u32 = 4;

pub async fn run(
    db: &Db,
    plan: &Plan,
    who: &[Contender],
    prefix: &str,
) -> BoxResult<(Vec<RatePoint>, Vec<Scaling>)> {
    let mut points = Vec::new();
    let mut scaling = Vec::new();
    for (op, batch) in [("send", 1u32), ("send_batch", 100)] {
        let mut by_clients = Vec::new();
        for clients in [1u32, 4] {
            let mut runs = Vec::new();
            for round in 0..plan.hotpath_rounds {
                for w in in_order(who, round) {
                    let r = produce_run(db, plan, w, batch, clients, round, prefix).await?;
                    eprintln!(
                        "    {op:<10} producers {clients} round {round} {:<24} {:>8.0} msg/s (call p50 {} µs; cpu {} µs/msg; load {:.2})",
                        r.contender,
                        r.per_s,
                        r.call.p50_us,
                        r.server_cpu_us.map_or("–".into(), |x| format!("{x:.1}")),
                        r.load_after
                    );
                    runs.push(r);
                }
            }
            by_clients.push(runs.clone());
            points.push(RatePoint::of(op, batch, clients, runs));
        }
        // Scaling: the 4-producer run of a round over the same contender's 1-producer run of it.
        let (one, four) = (&by_clients[0], &by_clients[1]);
        for w in who {
            let mut pair: Vec<RateRun> = Vec::new();
            for r in one.iter().filter(|r| r.contender == w.name()) {
                let mut x = r.clone();
                x.contender = "1".into();
                pair.push(x);
            }
            for r in four.iter().filter(|r| r.contender == w.name()) {
                let mut x = r.clone();
                x.contender = "4".into();
                pair.push(x);
            }
            scaling.push(Scaling {
                contender: w.name().into(),
                op: op.into(),
                clients: (1, 4),
                ratio: per_round_ratio(&pair, "4", "1", |r| r.per_s),
            });
        }
    }
    Ok((points, scaling))
}

async fn produce_run(
    db: &Db,
    plan: &Plan,
    who: Contender,
    batch: u32,
    clients: u32,
    round: u32,
    prefix: &str,
) -> BoxResult<RateRun> {
    let load_before = LoadAvg::now().one;
    let queue = format!("{prefix}hp_p{batch}_{clients}_{}_{round}", who.code());
    let c = db.connect(false).await?;
    contenders::create(&c, who, &queue, PARTITIONS).await?;
    let keys = contenders::keys(&c, PARTITIONS, KEYS).await?;
    contenders::vacuum(db).await?;
    let barrier = Arc::new(Barrier::new(clients as usize + 1));
    let secs = Duration::from_secs_f64(plan.hotpath_seconds);
    let mut tasks = Vec::new();
    for id in 0..clients {
        let db = db.clone();
        let queue = queue.clone();
        let keys = keys.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let client = db.connect(false).await?;
            let mut s = contenders::sender(&client, who, &queue, batch, keys, id).await?;
            barrier.wait().await;
            let start = Instant::now();
            let deadline = start + secs;
            let mut hist = stats::histogram();
            let (mut end, mut sent) = (start, 0u64);
            while Instant::now() < deadline {
                let t = Instant::now();
                let n = s.send(&client).await?;
                if n != u64::from(batch) {
                    return Err(err(format!("{queue}: sent {n} of {batch}")));
                }
                stats::record(&mut hist, t.elapsed().as_micros() as u64);
                sent += n;
                end = Instant::now();
            }
            // The connection lives until the server's CPU has been read (see contenders::gone).
            BoxResult::Ok((hist, start, end, sent, client))
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
        .map(|o| o.1)
        .min()
        .ok_or_else(|| err("no producer"))?;
    let last = outcomes.iter().map(|o| o.2).max().unwrap_or(first);
    let mut hist = stats::histogram();
    for o in &outcomes {
        hist.add(&o.0).expect("same bounds");
    }
    let messages: u64 = outcomes.iter().map(|o| o.3).sum();
    drop(outcomes);
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
        backlog: 0,
        preload_seconds: 0.0,
        ran_dry: false,
        waits,
        empty_reads: 0,
        load_before,
        load_after: LoadAvg::now().one,
    })
}
