//! The queue section: pg_lease_queue side by side with pgmq, on the same server, in the same run.
//!
//! pgmq is not part of this repository: its SQL is taken at bench time from the PyPI package (`pip
//! download --no-deps pgmq==<version>`, which ships `pgmq/sql/pgmq.sql`), cached under
//! `target/bench-cache/`, and run as the workload role (no extension files). Its version is
//! recorded.
//!
//! - **Throughput**: per (synchronous_commit, partitions, batch size), every system in turn (order
//!   alternating between configurations): a *produce* phase (producers send or send_batch into an
//!   empty queue for `queue_seconds`, or until `queue_backlog` messages), a top-up to exactly the
//!   backlog, then a *consume* phase (one consumer per partition drains it for at most
//!   `queue_seconds`). Systems: `lq-keyed` (keyed messages; consumers claim one partition each and
//!   loop receive → ack), `lq-unkeyed` (NULL keys: no order), `pgmq` (read / delete: no order) and
//!   `pgmq-fifo` (read_grouped / delete with the same keys as FIFO groups: per-key order, as ours).
//!   pgmq has no partitions: "partitions" there is the number of consumers on the one queue.
//! - **Latency**: send → handler with an idle waiting consumer (ours woken by LISTEN lease_queue;
//!   pgmq by read_with_poll, and by its own insert notifications), and takeover after a consumer
//!   stops (lease lapse / visibility timeout → the heir holds the message).
//! - **Bloat**: steady rate-limited send + consume on both systems at once, table sizes and
//!   pg_stat_user_tables sampled every second, autovacuum on.

mod bloat;
pub(crate) mod latency;
pub(crate) mod pgmq;
mod report;
pub(crate) mod system;
mod throughput;

use std::path::Path;

use serde::Serialize;

use crate::BoxResult;
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::LoadAvg;
use bloat::*;
use latency::*;
use pgmq::*;
use system::*;
use throughput::*;

pub use report::markdown;
pub use throughput::ThroughputRun;

#[derive(Clone, Debug, Serialize)]
pub struct QueueResult {
    pub pgmq: PgmqSource,
    pub lease_queue_version: String,
    pub systems: Vec<(String, String)>,
    pub throughput: Vec<ThroughputRun>,
    pub latency: Vec<LatencyMode>,
    pub takeover_ttl_ms: i64,
    pub takeover: Vec<LatencyMode>,
    pub bloat: Option<BloatResult>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

pub async fn run(
    db: &Db,
    plan: &Plan,
    repo: &Path,
    pgmq_version: &str,
    prefix: &str,
) -> BoxResult<QueueResult> {
    let load_before = LoadAvg::now();
    let (sql, mut src) = fetch_pgmq(repo, pgmq_version)?;
    let c = db.connect(false).await?;
    install_pgmq(&c, &sql, &mut src).await?;
    let lease_queue_version: String = c
        .query_one("SELECT lease_queue.version()", &[])
        .await?
        .get(0);
    eprintln!(
        "  pgmq {} (PyPI package {}), pg_lease_queue {lease_queue_version}",
        src.sql_version, src.pypi_version
    );

    eprintln!(
        "  bloat: {} s of steady load, {} messages/s per system",
        plan.queue_bloat_seconds, plan.queue_bloat_rate
    );
    let bloat = if plan.queue_bloat_seconds > 0 {
        Some(bloat(db, plan, prefix).await?)
    } else {
        None
    };

    eprintln!("  send → handler latency");
    let mut latency = Vec::new();
    for sync in [false, true] {
        for wait in [
            Wait::LqListen,
            Wait::PgmqPoll(100),
            Wait::PgmqPoll(10),
            Wait::PgmqNotify,
        ] {
            let m = send_latency(db, sync, wait, plan.queue_latency_samples, prefix).await?;
            eprintln!(
                "    sync {:<3} {:<28} p50 {:>7} us  p99 {:>7} us  failures {}",
                m.sync_commit, m.name, m.latency.p50_us, m.latency.p99_us, m.failures
            );
            latency.push(m);
        }
    }

    eprintln!("  takeover (ttl / vt {TAKEOVER_TTL_MS} ms)");
    let mut takeover_modes = Vec::new();
    for heir in [Heir::LqTimer, Heir::LqPoll, Heir::PgmqPoll] {
        let m = takeover(db, heir, plan.queue_takeover_samples, prefix).await?;
        eprintln!(
            "    {:<36} p50 {:>7} us  p99 {:>7} us  failures {}",
            m.name, m.latency.p50_us, m.latency.p99_us, m.failures
        );
        takeover_modes.push(m);
    }

    eprintln!("  throughput");
    let mut throughput = Vec::new();
    let mut k = 0usize;
    for sync in [false, true] {
        for &p in &plan.queue_partitions {
            for &b in &plan.queue_batches {
                let mut order = SYSTEMS.to_vec();
                if k % 2 == 1 {
                    order.reverse();
                }
                k += 1;
                for sys in order {
                    let cell = Cell {
                        sys,
                        partitions: p,
                        batch: b,
                        sync,
                    };
                    throughput.push(throughput_run(db, &c, plan, cell, prefix).await?);
                }
            }
        }
    }
    Ok(QueueResult {
        pgmq: src,
        lease_queue_version,
        systems: SYSTEMS
            .iter()
            .map(|s| (s.name().to_string(), s.what().to_string()))
            .collect(),
        throughput,
        latency,
        takeover_ttl_ms: TAKEOVER_TTL_MS,
        takeover: takeover_modes,
        bloat,
        load_before,
        load_after: LoadAvg::now(),
    })
}
