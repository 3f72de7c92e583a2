//! Bloat: steady rate-limited send + consume on both systems at once, table sizes and
//! pg_stat_user_tables sampled every second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::system::*;
use crate::BoxResult;
use crate::plan::Plan;
use crate::sections::{TableStat, table_stats_of};
use crate::server::Db;
use crate::stats::{self, LoadAvg, round1};

#[derive(Clone, Debug, Serialize)]
pub struct BloatSample {
    pub t: f64,
    /// Messages produced and consumed so far: [lease_queue, pgmq].
    pub produced: [u64; 2],
    pub consumed: [u64; 2],
    pub tables: Vec<TableStat>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BloatTable {
    pub table: String,
    pub heap_start: i64,
    pub heap_end: i64,
    pub heap_max: i64,
    pub index_start: i64,
    pub index_end: i64,
    pub index_max: i64,
    pub live_max: i64,
    pub dead_max: i64,
    pub dead_end: i64,
    pub autovacuums: i64,
    pub hot_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BloatResult {
    pub seconds: u32,
    /// Offered rate per system (messages/s), in send_batch calls of `batch`.
    pub rate: u32,
    pub batch: u32,
    pub partitions: u32,
    pub consumers: u32,
    pub sync_commit: String,
    pub produced: [u64; 2],
    pub consumed: [u64; 2],
    pub tables: Vec<BloatTable>,
    pub samples: Vec<BloatSample>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

pub(super) async fn bloat(db: &Db, plan: &Plan, prefix: &str) -> BoxResult<BloatResult> {
    let load_before = LoadAvg::now();
    let parts = 4u32;
    let (sys_ours, sys_pgmq) = (System::Keyed, System::Pgmq);
    let q_ours = format!("{prefix}bloat");
    let q_pgmq = format!("{prefix}bloat");
    let c = db.connect(false).await?;
    create(&c, sys_ours, &q_ours, parts).await?;
    create(&c, sys_pgmq, &q_pgmq, parts).await?;
    let keys = Arc::new(balanced_keys(&c, parts, 8).await?);
    let tables = format!(
        "'lease_queue.messages'::regclass, 'lease_queue.keys'::regclass, 'lease_queue.partitions'::regclass, \
         'lease_queue.commit_marks'::regclass, 'lease.leases'::regclass, 'pgmq.q_{q_pgmq}'::regclass"
    );
    let produced = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let consumed = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(plan.queue_bloat_seconds));
    let mut tasks = Vec::new();
    for (i, (sys, q)) in [(sys_ours, &q_ours), (sys_pgmq, &q_pgmq)]
        .into_iter()
        .enumerate()
    {
        // A producer at the offered rate.
        {
            let db = db.clone();
            let q = q.clone();
            let keys = keys.clone();
            let count = produced[i].clone();
            let batch = plan.queue_bloat_batch;
            let every =
                Duration::from_secs_f64(f64::from(batch) / f64::from(plan.queue_bloat_rate));
            tasks.push(tokio::spawn(async move {
                let c = db.connect(false).await?;
                let mut s = Sender::new(&c, sys, &q, batch, keys, 0).await?;
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while Instant::now() < deadline {
                    tick.tick().await;
                    count.fetch_add(s.send(&c).await?, Ordering::SeqCst);
                }
                BoxResult::Ok(())
            }));
        }
        for p in 0..parts {
            let db = db.clone();
            let q = q.clone();
            let count = consumed[i].clone();
            tasks.push(tokio::spawn(async move {
                let c = db.connect(false).await?;
                let r = Receiver::new(&c, sys, &q, 100, p).await?;
                while Instant::now() < deadline {
                    let n = r.cycle(&c).await?;
                    if n == 0 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    count.fetch_add(n, Ordering::SeqCst);
                }
                r.finish(&c).await?;
                BoxResult::Ok(())
            }));
        }
    }
    let mut samples = Vec::new();
    let sc = db.connect(false).await?;
    let snap = |t: f64, tables: Vec<TableStat>| BloatSample {
        t: round1(t),
        produced: [
            produced[0].load(Ordering::SeqCst),
            produced[1].load(Ordering::SeqCst),
        ],
        consumed: [
            consumed[0].load(Ordering::SeqCst),
            consumed[1].load(Ordering::SeqCst),
        ],
        tables,
    };
    samples.push(snap(0.0, table_stats_of(&sc, &tables).await?));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while Instant::now() < deadline {
        tick.tick().await;
        let st = table_stats_of(&sc, &tables).await?;
        samples.push(snap(started.elapsed().as_secs_f64(), st));
    }
    for t in tasks {
        t.await??;
    }
    samples.push(snap(
        started.elapsed().as_secs_f64(),
        table_stats_of(&sc, &tables).await?,
    ));
    let first = samples.first().expect("a sample").tables.clone();
    let last = samples.last().expect("a sample").tables.clone();
    let summary = last
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t0 = &first[i];
            let series = || samples.iter().filter_map(|s| s.tables.get(i));
            let upd = (t.updates - t0.updates) as f64;
            BloatTable {
                table: t.table.clone(),
                heap_start: t0.heap_bytes,
                heap_end: t.heap_bytes,
                heap_max: series().map(|x| x.heap_bytes).max().unwrap_or(0),
                index_start: t0.index_bytes,
                index_end: t.index_bytes,
                index_max: series().map(|x| x.index_bytes).max().unwrap_or(0),
                live_max: series().map(|x| x.live_tuples).max().unwrap_or(0),
                dead_max: series().map(|x| x.dead_tuples).max().unwrap_or(0),
                dead_end: t.dead_tuples,
                autovacuums: t.autovacuums - t0.autovacuums,
                hot_share: if upd > 0.0 {
                    stats::round3((t.hot_updates - t0.hot_updates) as f64 / upd)
                } else {
                    f64::NAN
                },
            }
        })
        .collect();
    drop_queue(&c, sys_ours, &q_ours).await?;
    drop_queue(&c, sys_pgmq, &q_pgmq).await?;
    let end = samples.last().expect("a sample");
    let res = BloatResult {
        seconds: plan.queue_bloat_seconds,
        rate: plan.queue_bloat_rate,
        batch: plan.queue_bloat_batch,
        partitions: parts,
        consumers: parts,
        sync_commit: "off".into(),
        produced: end.produced,
        consumed: end.consumed,
        tables: summary,
        samples: samples.clone(),
        load_before,
        load_after: LoadAvg::now(),
    };
    for t in &res.tables {
        eprintln!(
            "    {:<26} heap {:>6} → {:>6} KiB (max {:>6})  index {:>5} → {:>5} KiB  dead max {:>6}  autovacuums {}",
            t.table,
            t.heap_start / 1024,
            t.heap_end / 1024,
            t.heap_max / 1024,
            t.index_start / 1024,
            t.index_end / 1024,
            t.dead_max,
            t.autovacuums
        );
    }
    Ok(res)
}
