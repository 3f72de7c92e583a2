//! The peers section: per-key ordered (FIFO) throughput of pg_lease_queue and the PostgreSQL
//! queues users pick instead, on the same private server, in the same run (issue 26, item 3).
//!
//! Systems, each consuming **in per-key order**:
//! - `lease_queue` (ours): keyed messages; one partition per consumer, ack_and_receive (ours.rs);
//! - `pgmq-fifo`: pgmq's FIFO groups, `read_grouped` → `delete` (pgmq's SQL from PyPI at bench
//!   time, as in the queue section; pgmq_fifo.rs);
//! - `pg-boss`: its `key_strict_fifo` queue policy, the key as `singletonKey`, consumed by
//!   `work()`; `pg-boss-fetch`: the same queue drained by loops of `fetch` → `complete`;
//! - `graphile-worker`: one named queue (`queue_name`) per key.
//!
//! The last three are installed at bench time from the npm registry (node.rs) and driven by our
//! scripts in bench/peers/. Per cell (keys × consumers) every system in turn, the order reversed
//! from one cell to the next: a backlog is preloaded with the system's batch insert, then its
//! consumers drain it for at most `seconds`; every handled message is checked for per-key order
//! (workload.rs).

mod meter;
mod node;
mod ours;
mod pgmq_fifo;
mod report;
mod workload;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;

use crate::server::Db;
use crate::stats::{LoadAvg, round1, round3};
use crate::{BoxResult, err};
use meter::{ClientProc, Cost, Meter};
use workload::{OrderCheck, Rec, Tickets};

pub use node::NodePins;
pub use report::{markdown, thousands};
pub use workload::preload_batch;

/// The systems, in their order of the first cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Ours,
    PgmqFifo,
    PgBoss,
    PgBossFetch,
    Graphile,
    GraphileBatched,
}

pub const SYSTEMS: [System; 6] = [
    System::Ours,
    System::PgmqFifo,
    System::PgBoss,
    System::PgBossFetch,
    System::Graphile,
    System::GraphileBatched,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Ours => "lease_queue",
            System::PgmqFifo => "pgmq-fifo",
            System::PgBoss => "pg-boss",
            System::PgBossFetch => "pg-boss-fetch",
            System::Graphile => "graphile-worker",
            System::GraphileBatched => "graphile-batched",
        }
    }

    pub fn parse(s: &str) -> Option<System> {
        SYSTEMS.into_iter().find(|x| x.name() == s)
    }

    fn code(self) -> &'static str {
        match self {
            System::Ours => "lq",
            System::PgmqFifo => "mq",
            System::PgBoss => "pb",
            System::PgBossFetch => "pf",
            System::Graphile => "gw",
            System::GraphileBatched => "gb",
        }
    }

    fn node(self) -> bool {
        matches!(
            self,
            System::PgBoss | System::PgBossFetch | System::Graphile | System::GraphileBatched
        )
    }
}

/// What the section runs.
#[derive(Clone, Debug, Serialize)]
pub struct PeersOptions {
    /// The most seconds each drain may take.
    pub seconds: u32,
    /// Messages preloaded per run.
    pub backlog: u64,
    pub keys: Vec<u32>,
    pub consumers: Vec<u32>,
    /// Messages per receive / read / fetch / local queue.
    pub batch: u32,
    /// The most messages per preload call (fewer when there are fewer keys: workload.rs).
    pub preload_max: u32,
    /// Messages per preload call whatever the keys (then a call may carry several messages of
    /// one key: an experiment on how each system orders those).
    pub preload_batch: Option<u32>,
    pub systems: Vec<String>,
    pub pgmq_version: String,
    pub node: NodePins,
}

/// One system's run of one cell.
#[derive(Clone, Debug, Serialize)]
pub struct PeerRun {
    pub system: String,
    pub keys: u32,
    pub consumers: u32,
    pub backlog: u64,
    pub preload_batch: u32,
    pub produce_seconds: f64,
    pub produced_per_s: f64,
    pub produce: Cost,
    pub consumed: u64,
    pub consume_seconds: f64,
    pub consumed_per_s: f64,
    /// Every preloaded message was handled before the deadline.
    pub drained: bool,
    pub consume: Cost,
    pub order: OrderCheck,
    /// Reads / fetches that returned nothing while messages were left.
    pub empty_reads: u64,
    /// Errors the library reported (logged, not fatal).
    pub errors: u64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

#[derive(Clone, Debug, Serialize)]
pub struct PeersResult {
    pub options: PeersOptions,
    /// Versions of every system and runtime, as installed and reported.
    pub versions: Vec<(String, String)>,
    /// What each system does and with which settings.
    pub systems: Vec<(String, String)>,
    pub npm: String,
    pub pgmq_installed: String,
    pub runs: Vec<PeerRun>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

/// One system's run: where, what, how much.
struct Job<'a> {
    db: &'a Db,
    /// A connection for the meters (WAL position), outside the measured work.
    mon: &'a Client,
    queue: String,
    keys: Arc<Vec<String>>,
    backlog: u64,
    preload_batch: u32,
    consumers: u32,
    batch: u32,
    seconds: u32,
}

/// The measurements of one run.
struct Outcome {
    produce_seconds: f64,
    produce: Cost,
    consumed: u64,
    consume_seconds: f64,
    consume: Cost,
    records: Vec<Rec>,
    empty_reads: u64,
    errors: u64,
}

/// `[a, b)` ranges of message numbers, `size` per preload call.
fn preload_ranges(backlog: u64, size: u32) -> impl Iterator<Item = (u64, u64)> {
    let size = u64::from(size.max(1));
    (0..backlog.div_ceil(size)).map(move |i| (i * size, ((i + 1) * size).min(backlog)))
}

/// Runs `work` (a preload) and measures it: seconds and cost per message of `n`.
async fn timed(
    mon: &Client,
    proc_: ClientProc,
    n: u64,
    work: impl Future<Output = BoxResult<()>>,
) -> BoxResult<(f64, Cost)> {
    let m = Meter::start(mon, proc_).await;
    let t0 = Instant::now();
    work.await?;
    let seconds = t0.elapsed().as_secs_f64();
    Ok((seconds, m.finish(mon, n).await))
}

/// What one consumer task did.
struct Consumed {
    recs: Vec<Rec>,
    /// When its last settle returned.
    last: Option<Instant>,
    empty_reads: u64,
    /// Calls that failed without failing the run (pgmq: reads cancelled at the deadline).
    errors: u64,
    /// The consumer's connection, closed only after the drain's meter has read the server's CPU
    /// (a backend exiting while /proc is read would take its CPU time out of the sum).
    conn: Client,
}

struct Drained {
    seconds: f64,
    cost: Cost,
    recs: Vec<Rec>,
    empty_reads: u64,
    errors: u64,
}

impl Drained {
    fn outcome(self, produce_seconds: f64, produce: Cost) -> Outcome {
        Outcome {
            produce_seconds,
            produce,
            consumed: self.recs.len() as u64,
            consume_seconds: self.seconds,
            consume: self.cost,
            records: self.recs,
            empty_reads: self.empty_reads,
            errors: self.errors,
        }
    }
}

/// Runs `job.consumers` consumer tasks (`consumer(index, deadline, tickets, handled)`) from now
/// until they return; seconds = until the last settle.
async fn drain<F, Fut>(job: &Job<'_>, consumer: F) -> BoxResult<Drained>
where
    F: Fn(u32, Instant, Arc<Tickets>, Arc<AtomicU64>) -> Fut,
    Fut: Future<Output = BoxResult<Consumed>> + Send + 'static,
{
    let tickets = Arc::new(Tickets::default());
    let handled = Arc::new(AtomicU64::new(0));
    let m = Meter::start(job.mon, ClientProc::Harness).await;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(u64::from(job.seconds));
    let tasks: Vec<_> = (0..job.consumers)
        .map(|i| tokio::spawn(consumer(i, deadline, tickets.clone(), handled.clone())))
        .collect();
    let mut recs = Vec::new();
    let mut last = t0;
    let mut empty_reads = 0;
    let mut errors = 0;
    let mut conns = Vec::new();
    for t in tasks {
        let c = t.await??;
        recs.extend(c.recs);
        last = last.max(c.last.unwrap_or(t0));
        empty_reads += c.empty_reads;
        errors += c.errors;
        conns.push(c.conn);
    }
    let cost = m.finish(job.mon, recs.len() as u64).await;
    drop(conns);
    Ok(Drained {
        seconds: last.duration_since(t0).as_secs_f64(),
        cost,
        recs,
        empty_reads,
        errors,
    })
}

/// Deletes what a Graphile Worker run left (jobs not drained before the deadline, the named
/// queues' rows), so that every run starts from empty tables.
async fn graphile_cleanup(c: &Client) -> BoxResult<()> {
    c.batch_execute(
        "DELETE FROM graphile_worker._private_jobs; DELETE FROM graphile_worker._private_job_queues;",
    )
    .await?;
    Ok(())
}

struct Section<'a> {
    db: &'a Db,
    mon: &'a Client,
    env: Option<node::NodeEnv>,
    versions: Vec<(String, String)>,
    settings: Vec<(String, String)>,
}

impl Section<'_> {
    fn note(list: &mut Vec<(String, String)>, name: &str, value: String) {
        if !list.iter().any(|(n, _)| n == name) {
            list.push((name.to_string(), value));
        }
    }

    async fn run_one(&mut self, sys: System, job: &Job<'_>) -> BoxResult<Outcome> {
        match sys {
            System::Ours => ours::run(job).await,
            System::PgmqFifo => pgmq_fifo::run(job).await,
            System::PgBoss | System::PgBossFetch | System::Graphile | System::GraphileBatched => {
                let env = self
                    .env
                    .as_ref()
                    .ok_or_else(|| err("the Node.js peers were not installed"))?;
                let (script, mode) = match sys {
                    System::PgBoss => ("pgboss.mjs", "work"),
                    System::PgBossFetch => ("pgboss.mjs", "fetch"),
                    System::GraphileBatched => ("graphile.mjs", "batched"),
                    _ => ("graphile.mjs", "run"),
                };
                let r = node::run(job, env, script, mode).await;
                if matches!(sys, System::Graphile | System::GraphileBatched) {
                    let _ = graphile_cleanup(self.mon).await;
                }
                let r = r?;
                if let Some(obj) = r.versions.as_object() {
                    for (k, v) in obj {
                        Self::note(&mut self.versions, k, v.as_str().unwrap_or("?").to_string());
                    }
                }
                Self::note(&mut self.settings, sys.name(), r.settings);
                Ok(r.outcome)
            }
        }
    }
}

pub async fn run(db: &Db, repo: &Path, o: &PeersOptions, prefix: &str) -> BoxResult<PeersResult> {
    let load_before = LoadAvg::now();
    let mut systems = Vec::new();
    for s in &o.systems {
        systems.push(System::parse(s).ok_or_else(|| {
            err(format!(
                "unknown peers system {s} (known: {})",
                SYSTEMS.map(System::name).join(", ")
            ))
        })?);
    }
    if systems.is_empty() || o.keys.is_empty() || o.consumers.is_empty() {
        return Err(err(
            "peers: no systems, key counts or consumer counts to run",
        ));
    }
    let mon = db.connect(false).await?;
    let (sql, mut src) = crate::queue::pgmq::fetch_pgmq(repo, &o.pgmq_version)?;
    crate::queue::pgmq::install_pgmq(&mon, &sql, &mut src).await?;
    let lq: String = mon
        .query_one("SELECT lease_queue.version()", &[])
        .await?
        .get(0);
    let pg: String = mon.query_one("SHOW server_version", &[]).await?.get(0);
    let (env, npm) = if systems.iter().any(|s| s.node()) {
        let env = node::install(repo, &o.node)?;
        let npm = env.installed.clone();
        (Some(env), npm)
    } else {
        (None, "not needed".into())
    };
    let mut sec = Section {
        db,
        mon: &mon,
        env,
        versions: vec![
            ("PostgreSQL".into(), pg),
            ("pg_lease_queue".into(), lq),
            (
                "pgmq".into(),
                format!(
                    "{} (SQL of the PyPI package pgmq {})",
                    src.sql_version, src.pypi_version
                ),
            ),
        ],
        settings: vec![
            (
                System::Ours.name().into(),
                format!(
                    "keyed send_batch; consumers = partitions, each claims one and loops ack_and_receive(previous batch, max {}) (the ack and the next batch in one call), its last batch acked with ack",
                    o.batch
                ),
            ),
            (
                System::PgmqFifo.name().into(),
                format!(
                    "send_batch with header x-pgmq-group = key, create_fifo_index; consumers loop read_grouped(vt 30 s, qty {}) → delete(ids), 1 ms pause after an empty read; statement_timeout = drain window + 5 s (a read cancelled by it ends its consumer: counted under errors)",
                    o.batch
                ),
            ),
        ],
    };
    eprintln!(
        "  {} s drains of {} messages; keys {:?}; consumers {:?}; systems {}",
        o.seconds,
        o.backlog,
        o.keys,
        o.consumers,
        o.systems.join(", ")
    );
    let mut runs = Vec::new();
    let mut cell = 0usize;
    for &nkeys in &o.keys {
        for &consumers in &o.consumers {
            let per = nkeys.div_ceil(consumers.max(1));
            let mut keys = crate::queue::system::balanced_keys(&mon, consumers, per).await?;
            keys.truncate(nkeys as usize);
            let keys = Arc::new(keys);
            let mut order = systems.clone();
            if cell % 2 == 1 {
                order.reverse();
            }
            cell += 1;
            for sys in order {
                let job = Job {
                    db: sec.db,
                    mon: sec.mon,
                    queue: format!("{prefix}peers_{}_{nkeys}_{consumers}", sys.code()),
                    keys: keys.clone(),
                    backlog: o.backlog,
                    preload_batch: o
                        .preload_batch
                        .unwrap_or_else(|| preload_batch(nkeys, o.preload_max))
                        .max(1),
                    consumers,
                    batch: o.batch,
                    seconds: o.seconds,
                };
                let load_before = LoadAvg::now();
                let out = sec.run_one(sys, &job).await?;
                let order = workload::check(&out.records, nkeys);
                let drained = order.distinct >= o.backlog;
                // Not drained: the consumers worked the whole window (or a call ran past it).
                let consume_seconds = if drained {
                    out.consume_seconds
                } else {
                    out.consume_seconds.max(f64::from(o.seconds))
                };
                let r = PeerRun {
                    system: sys.name().into(),
                    keys: nkeys,
                    consumers,
                    backlog: o.backlog,
                    preload_batch: job.preload_batch,
                    produce_seconds: round3(out.produce_seconds),
                    produced_per_s: round1(o.backlog as f64 / out.produce_seconds.max(1e-6)),
                    produce: out.produce,
                    consumed: out.consumed,
                    consume_seconds: round3(consume_seconds),
                    consumed_per_s: round1(out.consumed as f64 / consume_seconds.max(1e-6)),
                    drained,
                    consume: out.consume,
                    order,
                    empty_reads: out.empty_reads,
                    errors: out.errors,
                    load_before,
                    load_after: LoadAvg::now(),
                };
                eprintln!(
                    "    {:>5} keys {} consumer{} {:<15} produced {:>7.0}/s  consumed {:>7.0}/s ({} in {:.2} s{})  order violations {}",
                    nkeys,
                    consumers,
                    if consumers == 1 { " " } else { "s" },
                    r.system,
                    r.produced_per_s,
                    r.consumed_per_s,
                    r.consumed,
                    r.consume_seconds,
                    if r.drained { ", drained" } else { "" },
                    r.order.violations
                );
                runs.push(r);
            }
        }
    }
    Ok(PeersResult {
        options: o.clone(),
        versions: sec.versions,
        systems: sec.settings,
        npm,
        pgmq_installed: src.installed,
        runs,
        load_before,
        load_after: LoadAvg::now(),
    })
}
