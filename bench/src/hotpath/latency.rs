//! send → handler latency, the queue section's measurement (bench/src/queue/latency.rs) in
//! interleaved rounds: a producer sends one message (autocommit) after a random 5–30 ms pause to a
//! 1-partition queue whose consumer waits idle; the time from the send's start to the consumer's
//! receive (read) returning it. Ours waits on `LISTEN lease_queue` then receives; pgmq, like with
//! like, on its own insert notifications (`enable_notify_insert(q, 0)`) then reads.

use serde::Serialize;

use super::Contender;
use crate::BoxResult;
use crate::plan::Plan;
use crate::queue::latency::{LatencyMode, Wait, send_latency};
use crate::server::Db;
use crate::stats::Spread;

/// The target: ours' send → handler p50 (ms).
pub const TARGET_P50_MS: f64 = 5.0;

#[derive(Clone, Debug, Serialize)]
pub struct LatencyRun {
    pub contender: String,
    pub round: u32,
    pub mode: LatencyMode,
}

#[derive(Clone, Debug, Serialize)]
pub struct LatencyResult {
    pub samples_per_round: u32,
    /// (contender, how it waits)
    pub modes: Vec<(String, String)>,
    /// Median (min–max) of the rounds' p50 and p99, µs.
    pub p50_us: Vec<(String, Spread)>,
    pub p99_us: Vec<(String, Spread)>,
    /// ours p50 / pgmq p50, per round.
    pub ratio_p50: Spread,
    pub runs: Vec<LatencyRun>,
}

impl LatencyResult {
    pub fn p50(&self, name: &str) -> Option<&Spread> {
        self.p50_us.iter().find(|x| x.0 == name).map(|x| &x.1)
    }

    pub fn p99(&self, name: &str) -> Option<&Spread> {
        self.p99_us.iter().find(|x| x.0 == name).map(|x| &x.1)
    }
}

pub async fn run(db: &Db, plan: &Plan, prefix: &str) -> BoxResult<LatencyResult> {
    let who = [Contender::Ours, Contender::Pgmq];
    let mut runs = Vec::new();
    for round in 0..plan.hotpath_rounds {
        for w in super::in_order(&who, round) {
            let wait = if w.ours() {
                Wait::LqListen
            } else {
                Wait::PgmqNotify
            };
            super::contenders::vacuum(db).await?;
            let mode = send_latency(
                db,
                false,
                wait,
                plan.hotpath_latency_samples,
                &format!("{prefix}hp{round}_"),
            )
            .await?;
            eprintln!(
                "    round {round} {:<28} p50 {:>6} µs  p99 {:>6} µs  failures {}",
                mode.name, mode.latency.p50_us, mode.latency.p99_us, mode.failures
            );
            runs.push(LatencyRun {
                contender: w.name().into(),
                round,
                mode,
            });
        }
    }
    let of = |name: &str, f: fn(&LatencyMode) -> u64| {
        Spread::of(
            &runs
                .iter()
                .filter(|r| r.contender == name)
                .map(|r| f(&r.mode) as f64)
                .collect::<Vec<_>>(),
        )
    };
    let ratio: Vec<f64> = (0..plan.hotpath_rounds)
        .filter_map(|k| {
            let get = |n: &str| {
                runs.iter()
                    .find(|r| r.contender == n && r.round == k)
                    .map(|r| r.mode.latency.p50_us as f64)
            };
            match (get(who[0].name()), get(who[1].name())) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            }
        })
        .collect();
    Ok(LatencyResult {
        samples_per_round: plan.hotpath_latency_samples,
        modes: runs
            .iter()
            .take(who.len())
            .map(|r| (r.contender.clone(), r.mode.what.clone()))
            .collect(),
        p50_us: who
            .iter()
            .map(|w| (w.name().to_string(), of(w.name(), |m| m.latency.p50_us)))
            .collect(),
        p99_us: who
            .iter()
            .map(|w| (w.name().to_string(), of(w.name(), |m| m.latency.p99_us)))
            .collect(),
        ratio_p50: Spread::of(&ratio),
        runs,
    })
}
