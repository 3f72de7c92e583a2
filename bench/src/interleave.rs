//! Side-by-side measurement: the variants of a group run in alternating short rounds on the same
//! server (order A B .. then .. B A, and so on), and every ratio is computed per round, so drift of
//! the shared machine between rounds cancels out of the ratio. We report the median of the
//! per-round ratios with their minimum and maximum.
//!
//! A second, finer interleaving ("mixed"): one pgbench run per round with every variant's script,
//! pgbench picking a script at random for each transaction, and the latency log telling them apart.
//! The variants then share every instant of the run, so even second-to-second drift cancels; the
//! ratio is that of mean (and median) transaction latencies.

use std::path::Path;

use serde::Serialize;

use crate::BoxResult;
use crate::pgbench::{self, Job};
use crate::scripts::Variant;
use crate::stats::{self, Latency, LoadAvg, Spread, round1};

pub struct Group {
    pub workload: String,
    pub sync_commit: bool,
    pub clients: u32,
    pub variants: Vec<Variant>,
    /// The variant every other one is compared with (the bare-SQL floor).
    pub baseline: &'static str,
    pub rounds: u32,
    /// Rounds of the mixed interleaving (0: none).
    pub mixed_rounds: u32,
    pub seconds: u32,
    pub warmup_seconds: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct MixedRun {
    pub round: u32,
    /// Latency of each variant's transactions in this run.
    pub latency: Vec<(String, Latency)>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    pub variant: String,
    pub round: u32,
    pub tps: f64,
    /// CPU per transaction (µs): all server processes, and pgbench.
    pub server_cpu_us: Option<f64>,
    pub pgbench_cpu_us: f64,
    pub transactions: u64,
    pub failed: u64,
    pub latency: Latency,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

#[derive(Clone, Debug, Serialize)]
pub struct VariantResult {
    pub name: String,
    pub what: String,
    pub script: String,
    /// Throughput of each round.
    pub tps: Spread,
    /// Server CPU per transaction (µs) of each round.
    pub server_cpu_us: Spread,
    /// Latency over all rounds (histograms merged).
    pub latency: Latency,
    /// Latency in the mixed runs (histograms merged).
    pub mixed_latency: Option<Latency>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub variant: String,
    pub vs: String,
    /// Time per transaction relative to `vs`: `tps(vs) / tps(variant)`, one value per round.
    pub time: Spread,
    /// Median latency relative to `vs`, one value per round.
    pub p50: Spread,
    /// Server CPU per transaction relative to `vs`, one value per round (empty for a remote
    /// server).
    pub cpu: Spread,
    /// Mixed runs: mean latency relative to `vs`, one value per mixed round.
    pub mixed_mean: Spread,
    /// Mixed runs: median latency relative to `vs`, one value per mixed round.
    pub mixed_p50: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupResult {
    pub workload: String,
    pub sync_commit: String,
    pub clients: u32,
    pub threads: u32,
    pub rounds: u32,
    pub round_seconds: u32,
    pub warmup_seconds: u32,
    pub baseline: String,
    pub variants: Vec<VariantResult>,
    pub ratios: Vec<Ratio>,
    pub runs: Vec<RunRecord>,
    pub mixed_rounds: u32,
    pub mixed_runs: Vec<MixedRun>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

impl GroupResult {
    pub fn variant(&self, name: &str) -> Option<&VariantResult> {
        self.variants.iter().find(|v| v.name == name)
    }

    pub fn ratio(&self, variant: &str, vs: &str) -> Option<&Ratio> {
        self.ratios
            .iter()
            .find(|r| r.variant == variant && r.vs == vs)
    }
}

pub async fn run_group(pgbench: &Path, conninfo: &str, g: &Group) -> BoxResult<GroupResult> {
    let load_before = LoadAvg::now();
    eprintln!(
        "  {} sync_commit={} clients={}: {} variants x {} rounds x {} s (load {})",
        g.workload,
        on_off(g.sync_commit),
        g.clients,
        g.variants.len(),
        g.rounds,
        g.seconds,
        load_before.short()
    );
    fn job<'a>(g: &Group, conninfo: &'a str, v: &'a Variant, seconds: u32) -> Job<'a> {
        Job {
            scripts: vec![&v.script],
            clients: g.clients,
            seconds,
            sync_commit: g.sync_commit,
            conninfo,
        }
    }
    if g.warmup_seconds > 0 {
        // One run of every variant mixed: warms caches, plans and the table pages of all of them.
        let job = Job {
            scripts: g.variants.iter().map(|v| v.script.as_str()).collect(),
            clients: g.clients,
            seconds: g.warmup_seconds,
            sync_commit: g.sync_commit,
            conninfo,
        };
        pgbench::run(pgbench, &job).await?;
    }
    let n = g.variants.len();
    let mut hists: Vec<_> = (0..n).map(|_| stats::histogram()).collect();
    // tps[variant][round], p50[variant][round]
    let mut tps = vec![vec![f64::NAN; g.rounds as usize]; n];
    let mut p50 = vec![vec![f64::NAN; g.rounds as usize]; n];
    let mut cpu = vec![vec![f64::NAN; g.rounds as usize]; n];
    let mut runs = Vec::new();
    let mut threads = 1;
    for round in 0..g.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in order {
            let v = &g.variants[i];
            let out = pgbench::run(pgbench, &job(g, conninfo, v, g.seconds)).await?;
            threads = out.threads;
            hists[i].add(&out.hist).expect("same histogram bounds");
            let lat = Latency::of(&out.hist);
            tps[i][round as usize] = out.tps;
            p50[i][round as usize] = lat.p50_us as f64;
            cpu[i][round as usize] = out.server_cpu_per_txn_us.unwrap_or(f64::NAN);
            runs.push(RunRecord {
                variant: v.name.to_string(),
                round,
                tps: round1(out.tps),
                server_cpu_us: out.server_cpu_per_txn_us.map(round1),
                pgbench_cpu_us: round1(out.client_cpu_per_txn_us),
                transactions: out.transactions,
                failed: out.failed,
                latency: lat,
                load_before: out.load_before,
                load_after: out.load_after,
            });
        }
    }
    // Mixed rounds: every variant in one run, picked at random per transaction.
    let mut mixed_hists: Vec<_> = (0..n).map(|_| stats::histogram()).collect();
    let mut mixed_mean = vec![vec![f64::NAN; g.mixed_rounds as usize]; n];
    let mut mixed_p50 = vec![vec![f64::NAN; g.mixed_rounds as usize]; n];
    let mut mixed_runs = Vec::new();
    for round in 0..g.mixed_rounds {
        let job = Job {
            scripts: g.variants.iter().map(|v| v.script.as_str()).collect(),
            clients: g.clients,
            seconds: g.seconds,
            sync_commit: g.sync_commit,
            conninfo,
        };
        let out = pgbench::run(pgbench, &job).await?;
        let mut lat = Vec::new();
        for (i, h) in out.per_script.iter().enumerate() {
            mixed_hists[i].add(h).expect("same histogram bounds");
            mixed_mean[i][round as usize] = h.mean();
            mixed_p50[i][round as usize] = h.value_at_quantile(0.5) as f64;
            lat.push((g.variants[i].name.to_string(), Latency::of(h)));
        }
        mixed_runs.push(MixedRun {
            round,
            latency: lat,
            load_before: out.load_before,
            load_after: out.load_after,
        });
    }
    let variants: Vec<VariantResult> = g
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| VariantResult {
            name: v.name.to_string(),
            what: v.what.to_string(),
            script: v.script.clone(),
            tps: Spread::of(&tps[i].iter().map(|x| round1(*x)).collect::<Vec<_>>()),
            server_cpu_us: Spread::of(&cpu[i].iter().map(|x| round1(*x)).collect::<Vec<_>>()),
            latency: Latency::of(&hists[i]),
            mixed_latency: (g.mixed_rounds > 0).then(|| Latency::of(&mixed_hists[i])),
        })
        .collect();
    let mut ratios = Vec::new();
    let base = g.variants.iter().position(|v| v.name == g.baseline);
    let lease = g.variants.iter().position(|v| v.name == "lease");
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    if let Some(b) = base {
        pairs.extend((0..n).filter(|&i| i != b).map(|i| (i, b)));
    }
    if let Some(l) = lease {
        pairs.extend(
            (0..n)
                .filter(|&i| i != l && Some(i) != base)
                .map(|i| (l, i)),
        );
    }
    for (a, b) in pairs {
        let per_round = |m: &Vec<Vec<f64>>, invert: bool| -> Vec<f64> {
            (0..m[a].len())
                .map(|r| {
                    if invert {
                        m[b][r] / m[a][r]
                    } else {
                        m[a][r] / m[b][r]
                    }
                })
                .collect()
        };
        ratios.push(Ratio {
            variant: g.variants[a].name.to_string(),
            vs: g.variants[b].name.to_string(),
            time: Spread::of(&per_round(&tps, true)),
            cpu: Spread::of(&per_round(&cpu, false)),
            p50: Spread::of(&per_round(&p50, false)),
            mixed_mean: Spread::of(&per_round(&mixed_mean, false)),
            mixed_p50: Spread::of(&per_round(&mixed_p50, false)),
        });
    }
    let result = GroupResult {
        workload: g.workload.clone(),
        sync_commit: on_off(g.sync_commit).into(),
        clients: g.clients,
        threads,
        rounds: g.rounds,
        round_seconds: g.seconds,
        warmup_seconds: g.warmup_seconds,
        baseline: g.baseline.to_string(),
        variants,
        ratios,
        runs,
        mixed_rounds: g.mixed_rounds,
        mixed_runs,
        load_before,
        load_after: LoadAvg::now(),
    };
    for v in &result.variants {
        eprintln!(
            "    {:<12} {:>9.0} tps  p50 {:>6} us  p99 {:>7} us  server CPU {:>6.1} us/txn",
            v.name, v.tps.median, v.latency.p50_us, v.latency.p99_us, v.server_cpu_us.median
        );
    }
    if let Some(r) = result.ratio("lease", g.baseline) {
        eprintln!(
            "    lease / {}: time {}, server CPU {}, p50 {}; mixed: mean {}, p50 {}",
            g.baseline,
            r.time.ratio_text(),
            r.cpu.ratio_text(),
            r.p50.ratio_text(),
            r.mixed_mean.ratio_text(),
            r.mixed_p50.ratio_text()
        );
    }
    Ok(result)
}

pub fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}
