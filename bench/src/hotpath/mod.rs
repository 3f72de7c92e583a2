//! The hot-path section (issue 26, item 1 "Targets"): pg_lease_queue against pgmq's unordered
//! read + delete on the same server, in one run, every measurement interleaved in rounds
//! (contenders in order A B C, then C B A, ...), reported as the median of the rounds and the
//! median of the per-round ratios ours / pgmq.
//!
//! - **Consume** (consume.rs): batch 100 and 1, at 1 and 4 consumers: an untimed backlog, then the
//!   consumers drain it for a fixed time. Ours: one partition per consumer (a queue of as many
//!   partitions as consumers), receive → ack, and `ack_and_receive` if the installed version has
//!   it. pgmq: read → delete.
//! - **Produce** (produce.rs): send and send_batch(100), at 1 and 4 producers sharing 64 keys, for
//!   a fixed time; ours with the queue's notify on and off; scaling = 4-producer / 1-producer rate.
//! - **Tuple writes, WAL and storage per message** (writes.rs): one producer sends N messages, one
//!   consumer consumes and acks them, the system's tables' pg_stat_user_tables counters, the WAL
//!   position and the tables' sizes read between the phases.
//! - **send → handler latency** (latency.rs): the queue section's measurement, in rounds.
//!
//! Every workload session runs with `synchronous_commit=off` (set per connection), payloads are
//! about 100 bytes of JSON, keys are chosen with `lease_queue.partition_of` so that partitions are
//! equally loaded, and pgmq's SQL comes from its PyPI package (bench/src/queue/pgmq.rs).

mod consume;
mod contenders;
mod latency;
mod produce;
mod report;
mod waits;
mod writes;

use std::path::Path;

use serde::Serialize;

use crate::BoxResult;
use crate::plan::Plan;
use crate::queue::pgmq::{PgmqSource, fetch_pgmq, install_pgmq};
use crate::server::Db;
use crate::stats::{Latency, LoadAvg, Spread};
pub use contenders::Contender;

pub use report::markdown;

/// Keys per queue (shared by all producers; spread equally over the partitions).
pub const KEYS: u32 = 64;

/// One timed run of one contender (consume or produce).
#[derive(Clone, Debug, Serialize)]
pub struct RateRun {
    pub contender: String,
    pub round: u32,
    /// Messages consumed (acked / deleted) or produced (committed).
    pub messages: u64,
    /// From the first client's start to the last client's last call.
    pub seconds: f64,
    pub per_s: f64,
    /// Time per consumer step (receive + ack, ack_and_receive, read + delete) or producer call.
    pub call: Latency,
    /// Server CPU per message (µs), from /proc (private cluster only).
    pub server_cpu_us: Option<f64>,
    /// Consume: the messages waiting at the start, and whether a consumer found nothing left
    /// before the time was up (it then stopped: the rate is over the time until the last one did).
    pub backlog: u64,
    /// Consume: how long the untimed backlog took to send (send_batch of 1000, one connection).
    pub preload_seconds: f64,
    pub ran_dry: bool,
    /// Consume (pgmq): reads that returned nothing while messages were left (retried after 1 ms).
    pub empty_reads: u64,
    /// pg_stat_activity samples of the clients' backends during the run (waits.rs).
    pub waits: Vec<(String, u64)>,
    pub load_before: f64,
    pub load_after: f64,
}

/// One contender at one point: the median (min–max) of its rounds.
#[derive(Clone, Debug, Serialize)]
pub struct ContenderRates {
    pub contender: String,
    pub per_s: Spread,
    pub server_cpu_us: Spread,
    pub call_p50_us: Spread,
    pub call_p99_us: Spread,
    pub runs: Vec<RateRun>,
}

/// Ratio of two contenders' rates, per round.
#[derive(Clone, Debug, Serialize)]
pub struct RatioVs {
    pub contender: String,
    pub vs: String,
    pub ratio: Spread,
}

/// One configuration (e.g. consume, batch 100, 4 consumers), every contender.
#[derive(Clone, Debug, Serialize)]
pub struct RatePoint {
    /// `consume`, `send` or `send_batch`.
    pub op: String,
    pub batch: u32,
    pub clients: u32,
    pub contenders: Vec<ContenderRates>,
    /// Each of ours / pgmq.
    pub ratios: Vec<RatioVs>,
}

impl RatePoint {
    pub fn of(op: &str, batch: u32, clients: u32, runs: Vec<RateRun>) -> RatePoint {
        let mut names: Vec<String> = Vec::new();
        for r in &runs {
            if !names.contains(&r.contender) {
                names.push(r.contender.clone());
            }
        }
        let contenders: Vec<ContenderRates> = names
            .iter()
            .map(|n| {
                let mine: Vec<RateRun> =
                    runs.iter().filter(|r| &r.contender == n).cloned().collect();
                let f = |g: &dyn Fn(&RateRun) -> f64| -> Spread {
                    Spread::of(&mine.iter().map(g).collect::<Vec<_>>())
                };
                ContenderRates {
                    contender: n.clone(),
                    per_s: f(&|r| r.per_s),
                    server_cpu_us: f(&|r| r.server_cpu_us.unwrap_or(f64::NAN)),
                    call_p50_us: f(&|r| r.call.p50_us as f64),
                    call_p99_us: f(&|r| r.call.p99_us as f64),
                    runs: mine,
                }
            })
            .collect();
        let pgmq = Contender::Pgmq.name();
        let ratios = names
            .iter()
            .filter(|n| n.as_str() != pgmq)
            .map(|n| RatioVs {
                contender: n.clone(),
                vs: pgmq.into(),
                ratio: per_round_ratio(&runs, n, pgmq, |r| r.per_s),
            })
            .collect();
        RatePoint {
            op: op.into(),
            batch,
            clients,
            contenders,
            ratios,
        }
    }

    pub fn contender(&self, name: &str) -> Option<&ContenderRates> {
        self.contenders.iter().find(|c| c.contender == name)
    }

    pub fn ratio(&self, name: &str) -> Option<&RatioVs> {
        self.ratios.iter().find(|r| r.contender == name)
    }
}

/// `f(a) / f(b)` in each round that has both.
pub fn per_round_ratio(runs: &[RateRun], a: &str, b: &str, f: impl Fn(&RateRun) -> f64) -> Spread {
    let rounds: Vec<u32> = {
        let mut v: Vec<u32> = runs.iter().map(|r| r.round).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let find = |name: &str, round: u32| {
        runs.iter()
            .find(|r| r.contender == name && r.round == round)
    };
    let values: Vec<f64> = rounds
        .iter()
        .filter_map(|&k| match (find(a, k), find(b, k)) {
            (Some(x), Some(y)) if f(y) > 0.0 => Some(f(x) / f(y)),
            _ => None,
        })
        .collect();
    Spread::of(&values)
}

/// The contenders in round `round`'s order: as given in even rounds, reversed in odd ones.
pub fn in_order(contenders: &[Contender], round: u32) -> Vec<Contender> {
    let mut v = contenders.to_vec();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// Producer scaling of one contender and operation: 4-producer rate / 1-producer rate, per round.
#[derive(Clone, Debug, Serialize)]
pub struct Scaling {
    pub contender: String,
    pub op: String,
    pub clients: (u32, u32),
    pub ratio: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct HotpathResult {
    pub postgres_version: String,
    pub lease_queue_version: String,
    pub pgmq: PgmqSource,
    /// Whether `lease_queue.ack_and_receive` exists (and so was measured).
    pub ack_and_receive: bool,
    /// Whether the system's tables were vacuumed before every run (needs a superuser).
    pub vacuum_before_runs: bool,
    pub sync_commit: String,
    pub payload_bytes: usize,
    pub keys: u32,
    pub rounds: u32,
    pub seconds: f64,
    pub contenders: Vec<(String, String)>,
    pub writes: Vec<writes::CyclePoint>,
    pub storage: Vec<writes::Storage>,
    pub consume: Vec<RatePoint>,
    pub produce: Vec<RatePoint>,
    pub scaling: Vec<Scaling>,
    pub latency: latency::LatencyResult,
    pub section_seconds: f64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

pub async fn run(
    db: &Db,
    plan: &Plan,
    repo: &Path,
    pgmq_version: &str,
    prefix: &str,
) -> BoxResult<HotpathResult> {
    let t0 = std::time::Instant::now();
    let load_before = LoadAvg::now();
    let (sql, mut src) = fetch_pgmq(repo, pgmq_version)?;
    let c = db.connect(false).await?;
    install_pgmq(&c, &sql, &mut src).await?;
    let lease_queue_version: String = c
        .query_one("SELECT lease_queue.version()", &[])
        .await?
        .get(0);
    let postgres_version: String = c
        .query_one("SELECT current_setting('server_version')", &[])
        .await?
        .get(0);
    let aar = contenders::has_ack_and_receive(&c).await?;
    let vacuumed = contenders::vacuum(db).await?;
    eprintln!(
        "  PostgreSQL {postgres_version}, pg_lease_queue {lease_queue_version}{}, pgmq {} (PyPI package {}); synchronous_commit=off",
        if aar {
            " (with ack_and_receive)"
        } else {
            " (no ack_and_receive)"
        },
        src.sql_version,
        src.pypi_version
    );
    let mut consumers = vec![Contender::Ours];
    if aar {
        consumers.push(Contender::OursAar);
    }
    consumers.push(Contender::Pgmq);
    let producers = [Contender::Ours, Contender::OursNotifyOff, Contender::Pgmq];

    // First, while the tables are fresh: storage per queued message is measured on the first run.
    eprintln!("  tuple writes, WAL and storage per message");
    let (writes, storage) = writes::run(db, plan, &consumers, prefix).await?;
    eprintln!("  consume");
    let consume = consume::run(db, plan, &consumers, prefix).await?;
    eprintln!("  produce");
    let (produce, scaling) = produce::run(db, plan, &producers, prefix).await?;
    eprintln!("  send → handler latency");
    let latency = latency::run(db, plan, prefix).await?;

    let mut all = consumers.clone();
    all.push(Contender::OursNotifyOff);
    Ok(HotpathResult {
        postgres_version,
        lease_queue_version,
        pgmq: src,
        ack_and_receive: aar,
        vacuum_before_runs: vacuumed,
        sync_commit: "off".into(),
        payload_bytes: crate::queue::system::payload(0, 0).len(),
        keys: KEYS,
        rounds: plan.hotpath_rounds,
        seconds: plan.hotpath_seconds,
        contenders: all
            .iter()
            .map(|w| (w.name().to_string(), w.what().to_string()))
            .collect(),
        writes,
        storage,
        consume,
        produce,
        scaling,
        latency,
        section_seconds: crate::stats::round1(t0.elapsed().as_secs_f64()),
        load_before,
        load_after: LoadAvg::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(contender: &str, round: u32, per_s: f64) -> RateRun {
        RateRun {
            contender: contender.into(),
            round,
            messages: 0,
            seconds: 1.0,
            per_s,
            call: Latency::default(),
            server_cpu_us: None,
            backlog: 0,
            preload_seconds: 0.0,
            ran_dry: false,
            empty_reads: 0,
            waits: Vec::new(),
            load_before: 0.0,
            load_after: 0.0,
        }
    }

    #[test]
    fn rounds_alternate_the_order() {
        let who = [Contender::Ours, Contender::OursAar, Contender::Pgmq];
        assert_eq!(in_order(&who, 0), who.to_vec());
        assert_eq!(
            in_order(&who, 1),
            vec![Contender::Pgmq, Contender::OursAar, Contender::Ours]
        );
        assert_eq!(in_order(&who, 2), who.to_vec());
    }

    #[test]
    fn ratios_are_per_round_then_the_median() {
        let runs = vec![
            run("lease_queue", 0, 10.0),
            run("pgmq", 0, 20.0),
            run("pgmq", 1, 10.0),
            run("lease_queue", 1, 10.0),
            run("lease_queue", 2, 30.0),
            run("pgmq", 2, 40.0),
        ];
        let p = RatePoint::of("consume", 100, 1, runs);
        let r = p.ratio("lease_queue").expect("a ratio");
        assert_eq!(r.ratio.values, vec![0.5, 1.0, 0.75]);
        assert_eq!(r.ratio.median, 0.75);
        assert_eq!(p.contender("pgmq").expect("pgmq").per_s.median, 20.0);
        assert!(p.ratio("pgmq").is_none());
    }
}
