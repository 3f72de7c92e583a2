//! Single calls, this release against the previous one: acquire → renew → release on one
//! connection per release, interleaved cycle by cycle.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use super::*;
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, Spread, cpu, round1};
use crate::{BoxResult, err};

pub(super) const ACQUIRE: &str = "SELECT acquired, epoch FROM lease.acquire($1, $2, \
     $3::bigint * interval '1 microsecond')";
pub(super) const RELEASE: &str = "SELECT status FROM lease.release($1, $2, $3)";

pub(super) struct Single {
    pub(super) client: Client,
    pub(super) acquire: Statement,
    pub(super) renew: Statement,
    pub(super) release: Statement,
    pub(super) pid: u32,
}

impl Single {
    pub(super) async fn new(db: &Db) -> BoxResult<Single> {
        let client = db.connect(false).await?;
        let t = Type::TEXT;
        let acquire = client
            .prepare_typed(ACQUIRE, &[t.clone(), t.clone(), Type::INT8])
            .await?;
        let renew = client
            .prepare_typed(RENEW, &[t.clone(), t.clone(), Type::INT8, Type::INT8])
            .await?;
        let release = client
            .prepare_typed(RELEASE, &[t.clone(), t.clone(), Type::INT8])
            .await?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        Ok(Single {
            client,
            acquire,
            renew,
            release,
            pid: pid as u32,
        })
    }

    /// acquire (a grant) → renew → release; the time of each call.
    pub(super) async fn cycle(&self) -> BoxResult<[Duration; 3]> {
        let key = "rm-single";
        let t0 = Instant::now();
        let row = self
            .client
            .query_one(&self.acquire, &[&key, &OWNER, &TTL_US])
            .await?;
        let t1 = Instant::now();
        let (acquired, epoch): (Option<bool>, Option<i64>) = (row.get(0), row.get(1));
        let (Some(true), Some(epoch)) = (acquired, epoch) else {
            return Err(err("single: acquire refused"));
        };
        let row = self
            .client
            .query_one(&self.renew, &[&key, &OWNER, &epoch, &TTL_US])
            .await?;
        let t2 = Instant::now();
        let renewed: Option<String> = row.get(0);
        let row = self
            .client
            .query_one(&self.release, &[&key, &OWNER, &epoch])
            .await?;
        let t3 = Instant::now();
        let released: Option<String> = row.get(0);
        if renewed.as_deref() != Some("ok") || released.as_deref() != Some("ok") {
            return Err(err("single: renew / release not ok"));
        }
        Ok([t1 - t0, t2 - t1, t3 - t2])
    }
}

pub(super) async fn single_calls(db: &Db, previous: &Db, plan: &Plan) -> BoxResult<SingleResult> {
    let sides = [Single::new(db).await?, Single::new(previous).await?];
    let mut versions = Vec::new();
    for s in &sides {
        versions.push(
            s.client
                .query_one(
                    "SELECT extversion FROM pg_extension WHERE extname = 'pg_lease'",
                    &[],
                )
                .await?
                .get::<_, String>(0),
        );
    }
    eprintln!(
        "  single calls: pg_lease {} vs {}, interleaved cycle by cycle",
        versions[0], versions[1]
    );
    let mut hists: Vec<[Histogram<u64>; 3]> = (0..2)
        .map(|_| [stats::histogram(), stats::histogram(), stats::histogram()])
        .collect();
    // mean[side][call][round], cpu[side][round]
    let mut means = vec![vec![Vec::new(); 3]; 2];
    let mut cpus = vec![Vec::new(); 2];
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        for s in &sides {
            s.cycle().await?;
        }
    }
    for _round in 0..plan.client_rounds {
        let mut round: Vec<[Histogram<u64>; 3]> = (0..2)
            .map(|_| [stats::histogram(), stats::histogram(), stats::histogram()])
            .collect();
        let cpu0: Vec<Option<u64>> = sides.iter().map(|s| cpu::process_ticks(s.pid)).collect();
        let mut cycles = 0u64;
        let until = Instant::now() + Duration::from_secs(u64::from(plan.client_seconds));
        while Instant::now() < until {
            // Alternate which side goes first, so neither always follows the other.
            let order = if cycles.is_multiple_of(2) {
                [0, 1]
            } else {
                [1, 0]
            };
            for i in order {
                let t = sides[i].cycle().await?;
                for (k, d) in t.iter().enumerate() {
                    stats::record(&mut round[i][k], d.as_micros() as u64);
                    stats::record(&mut hists[i][k], d.as_micros() as u64);
                }
            }
            cycles += 1;
        }
        for (i, s) in sides.iter().enumerate() {
            for k in 0..3 {
                means[i][k].push(round[i][k].mean());
            }
            cpus[i].push(match (cpu0[i], cpu::process_ticks(s.pid)) {
                (Some(a), Some(b)) => (b - a) as f64 * cpu::TICK_US / cycles as f64,
                _ => f64::NAN,
            });
        }
    }
    let ratio = |a: &Vec<f64>, b: &Vec<f64>| {
        Spread::of(&a.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>())
    };
    let result = SingleResult {
        rounds: plan.client_rounds,
        round_seconds: plan.client_seconds,
        versions: (0..2)
            .map(|i| SingleVersion {
                version: versions[i].clone(),
                acquire: Latency::of(&hists[i][0]),
                renew: Latency::of(&hists[i][1]),
                release: Latency::of(&hists[i][2]),
                backend_cpu_us_per_cycle: Spread::of(
                    &cpus[i].iter().map(|x| round1(*x)).collect::<Vec<_>>(),
                ),
            })
            .collect(),
        acquire_ratio: ratio(&means[0][0], &means[1][0]),
        renew_ratio: ratio(&means[0][1], &means[1][1]),
        release_ratio: ratio(&means[0][2], &means[1][2]),
        cpu_ratio: ratio(&cpus[0], &cpus[1]),
    };
    for v in &result.versions {
        eprintln!(
            "    {:<6} acquire p50 {} µs  renew p50 {} µs  release p50 {} µs  backend CPU {:.1} µs/cycle",
            v.version,
            v.acquire.p50_us,
            v.renew.p50_us,
            v.release.p50_us,
            v.backend_cpu_us_per_cycle.median
        );
    }
    eprintln!(
        "    {} / {}: acquire {}, renew {}, release {}, CPU {}",
        versions[0],
        versions[1],
        result.acquire_ratio.ratio_text(),
        result.renew_ratio.ratio_text(),
        result.release_ratio.ratio_text(),
        result.cpu_ratio.ratio_text()
    );
    Ok(result)
}
