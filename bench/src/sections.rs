//! The pgbench-driven sections: W1 cycle, W2 contend, renew storm, key scale.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;

use crate::interleave::{Group, GroupResult, Ratio, RunRecord, VariantResult, run_group};
use crate::pgbench::{self, Job};
use crate::plan::Plan;
use crate::scripts::{self, Variant};
use crate::server::{Db, SCHEMA};
use crate::stats::{self, Latency, LoadAvg, Spread, round1};
use crate::{BoxResult, err};

/// W1: acquire + renew + release in one transaction on a private key per client.
pub async fn cycle(pgbench: &Path, db: &Db, plan: &Plan) -> BoxResult<Vec<GroupResult>> {
    let mut out = Vec::new();
    for sync in [false, true] {
        for &clients in &plan.clients {
            let variants = if sync {
                vec![
                    scripts::w1_lease(),
                    scripts::w1_floor(),
                    scripts::w1_rowver(),
                ]
            } else {
                vec![
                    scripts::w1_lease(),
                    scripts::w1_floor(),
                    scripts::w1_rowver(),
                    scripts::w1_advisory(),
                    scripts::w1_txn(),
                ]
            };
            let g = Group {
                workload: "W1".into(),
                sync_commit: sync,
                clients,
                variants,
                baseline: "floor",
                rounds: if sync {
                    plan.rounds_sync_on
                } else {
                    plan.rounds
                },
                mixed_rounds: if sync {
                    plan.mixed_rounds_sync_on
                } else {
                    plan.mixed_rounds
                },
                seconds: plan.seconds,
                warmup_seconds: plan.warmup_seconds,
            };
            out.push(run_group(pgbench, &db.conninfo(), &g).await?);
        }
    }
    Ok(out)
}

/// The target check of issue 6: W1 lease against its floor only, synchronous_commit=off, at the
/// target client counts, in many short alternating runs (A B B A ..., 1 s each), so each ratio
/// compares runs one second apart. At 4 clients (CPU-bound on 2 cores) the cost of a transaction
/// is what limits throughput, so the ratio of throughputs is the measure; mixed runs would
/// understate it there (a transaction's latency then includes the queue it shares with the others).
pub async fn targets(pgbench: &Path, db: &Db, plan: &Plan) -> BoxResult<Vec<GroupResult>> {
    let mut out = Vec::new();
    for (clients, _) in crate::report::TARGETS {
        let g = Group {
            workload: "W1-target".into(),
            sync_commit: false,
            clients,
            variants: vec![scripts::w1_lease(), scripts::w1_floor()],
            baseline: "floor",
            rounds: plan.target_rounds,
            mixed_rounds: 0,
            seconds: 1,
            warmup_seconds: plan.warmup_seconds.max(1),
        };
        out.push(run_group(pgbench, &db.conninfo(), &g).await?);
    }
    Ok(out)
}

/// W2: single acquire attempts on 4 shared keys.
pub async fn contend(pgbench: &Path, db: &Db, plan: &Plan) -> BoxResult<Vec<GroupResult>> {
    let mut out = Vec::new();
    for sync in [false, true] {
        for &clients in &plan.clients {
            let variants = if sync {
                vec![scripts::w2_lease(), scripts::w2_floor()]
            } else {
                vec![
                    scripts::w2_lease(),
                    scripts::w2_floor(),
                    scripts::w2_advisory(),
                    scripts::w2_select1(),
                ]
            };
            let g = Group {
                workload: "W2".into(),
                sync_commit: sync,
                clients,
                variants,
                baseline: "floor",
                rounds: if sync {
                    plan.rounds_sync_on
                } else {
                    plan.rounds
                },
                mixed_rounds: if sync {
                    plan.mixed_rounds_sync_on
                } else {
                    plan.mixed_rounds
                },
                seconds: plan.seconds,
                warmup_seconds: plan.warmup_seconds,
            };
            out.push(run_group(pgbench, &db.conninfo(), &g).await?);
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Renew storm
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct TableStat {
    pub table: String,
    pub heap_bytes: i64,
    pub index_bytes: i64,
    pub live_tuples: i64,
    pub dead_tuples: i64,
    pub updates: i64,
    pub hot_updates: i64,
    pub autovacuums: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the storm started.
    pub t: f64,
    /// Which variant was renewing at that moment.
    pub phase: String,
    pub tables: Vec<TableStat>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Segment {
    pub run: RunRecord,
    pub start_s: f64,
    pub per_second: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StormResult {
    pub keys: u64,
    pub clients: u32,
    pub segment_seconds: u32,
    pub sync_commit: String,
    pub lease: VariantResult,
    pub floor: VariantResult,
    pub ratio: Ratio,
    pub segments: Vec<Segment>,
    pub samples: Vec<Sample>,
    /// Share of updates that were HOT over the whole storm, per table.
    pub hot_share: Vec<(String, f64)>,
    /// Keys still held after the storm (every renew must have been `ok`).
    pub held_after: i64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

const STORM_TABLES: &str = "'lease.leases'::regclass, 'pglease_bench.storm_floor'::regclass";

async fn table_stats(c: &Client) -> BoxResult<Vec<TableStat>> {
    table_stats_of(c, STORM_TABLES).await
}

/// Size and statistics of `tables` (a list of `'name'::regclass`), ordered by name.
pub async fn table_stats_of(c: &Client, tables: &str) -> BoxResult<Vec<TableStat>> {
    let rows = c
        .query(
            &format!(
                "SELECT s.relid::regclass::text, pg_relation_size(s.relid), pg_indexes_size(s.relid),
                        s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd, s.autovacuum_count
                   FROM pg_stat_user_tables AS s
                  WHERE s.relid IN ({tables})
                  ORDER BY 1"
            ),
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| TableStat {
            table: r.get(0),
            heap_bytes: r.get(1),
            index_bytes: r.get(2),
            live_tuples: r.get(3),
            dead_tuples: r.get(4),
            updates: r.get(5),
            hot_updates: r.get(6),
            autovacuums: r.get(7),
        })
        .collect())
}

pub async fn storm(pgbench: &Path, db: &Db, plan: &Plan, prefix: &str) -> BoxResult<StormResult> {
    let load_before = LoadAvg::now();
    let n = plan.storm_keys;
    let c = db.connect(false).await?;
    eprintln!("  preloading {n} held leases and {n} floor rows");
    let row = c
        .query_one(
            "SELECT count(*), min(a.epoch), max(a.epoch)
               FROM generate_series(1, $1::bigint) AS g,
                    LATERAL lease.acquire($2::text || g, 'storm', interval '1 hour') AS a
              WHERE a.acquired",
            &[&(n as i64), &prefix],
        )
        .await?;
    let (granted, min_e, max_e): (i64, Option<i64>, Option<i64>) =
        (row.get(0), row.get(1), row.get(2));
    let epoch = match (min_e, max_e) {
        (Some(a), Some(b)) if a == b && granted == n as i64 => a,
        _ => {
            return Err(err(format!(
                "storm preload: {granted} grants, epochs {min_e:?}..{max_e:?}"
            )));
        }
    };
    c.execute(
        &format!(
            "INSERT INTO {SCHEMA}.storm_floor (key, owner, epoch, expires_at)
             SELECT $2::text || g, 'storm', $3, clock_timestamp() + interval '1 hour'
               FROM generate_series(1, $1::bigint) AS g"
        ),
        &[&(n as i64), &prefix, &epoch],
    )
    .await?;
    if let Some(su) = db.connect_superuser().await? {
        su.batch_execute(&format!(
            "VACUUM (ANALYZE) lease.leases, {SCHEMA}.storm_floor"
        ))
        .await?;
        su.batch_execute("CHECKPOINT").await?;
    }

    let variants = [
        scripts::storm_lease(prefix, n, epoch),
        scripts::storm_floor(prefix, n, epoch),
    ];
    let phase = Arc::new(Mutex::new(String::from("idle")));
    let started = Instant::now();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = {
        let phase = phase.clone();
        let sc = db.connect(false).await?;
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stop_rx => break,
                }
                let t = started.elapsed().as_secs_f64();
                let p = phase.lock().expect("phase lock").clone();
                if let Ok(tables) = table_stats(&sc).await {
                    samples.push(Sample {
                        t: round1(t),
                        phase: p,
                        tables,
                    });
                }
            }
            if let Ok(tables) = table_stats(&sc).await {
                samples.push(Sample {
                    t: round1(started.elapsed().as_secs_f64()),
                    phase: "end".into(),
                    tables,
                });
            }
            samples
        })
    };

    let conninfo = db.conninfo();
    let mut segments = Vec::new();
    let mut hists = [stats::histogram(), stats::histogram()];
    let mut tps = [Vec::new(), Vec::new()];
    let mut p50 = [Vec::new(), Vec::new()];
    let mut cpus = [Vec::new(), Vec::new()];
    for round in 0..plan.storm_rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let v: &Variant = &variants[i];
            *phase.lock().expect("phase lock") = v.name.to_string();
            let start_s = started.elapsed().as_secs_f64();
            eprintln!(
                "  storm round {round}: {} for {} s",
                v.name, plan.storm_segment_seconds
            );
            let out = pgbench::run(
                pgbench,
                &Job {
                    scripts: vec![&v.script],
                    clients: plan.storm_clients,
                    seconds: plan.storm_segment_seconds,
                    sync_commit: false,
                    conninfo: &conninfo,
                },
            )
            .await?;
            *phase.lock().expect("phase lock") = "idle".into();
            hists[i].add(&out.hist).expect("same bounds");
            let lat = Latency::of(&out.hist);
            tps[i].push(out.tps);
            p50[i].push(lat.p50_us as f64);
            cpus[i].push(out.server_cpu_per_txn_us.unwrap_or(f64::NAN));
            eprintln!("    {:.0} tps, p50 {} us", out.tps, lat.p50_us);
            segments.push(Segment {
                run: RunRecord {
                    variant: v.name.into(),
                    round,
                    tps: round1(out.tps),
                    server_cpu_us: out.server_cpu_per_txn_us.map(round1),
                    pgbench_cpu_us: round1(out.client_cpu_per_txn_us),
                    transactions: out.transactions,
                    failed: out.failed,
                    latency: lat,
                    load_before: out.load_before,
                    load_after: out.load_after,
                },
                start_s: round1(start_s),
                per_second: out.per_second,
            });
        }
    }
    let _ = stop_tx.send(());
    let samples = sampler.await?;
    let held_after: i64 = c
        .query_one(
            "SELECT count(*) FROM lease.list($1::text) WHERE held",
            &[&prefix],
        )
        .await?
        .get(0);
    let hot_share = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => a
            .tables
            .iter()
            .zip(&b.tables)
            .map(|(x, y)| {
                let upd = (y.updates - x.updates) as f64;
                let hot = (y.hot_updates - x.hot_updates) as f64;
                (
                    y.table.clone(),
                    if upd > 0.0 {
                        stats::round3(hot / upd)
                    } else {
                        f64::NAN
                    },
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let vr = |i: usize| VariantResult {
        name: variants[i].name.into(),
        what: variants[i].what.into(),
        script: variants[i].script.clone(),
        tps: Spread::of(&tps[i].iter().map(|x| round1(*x)).collect::<Vec<_>>()),
        server_cpu_us: Spread::of(&cpus[i].iter().map(|x| round1(*x)).collect::<Vec<_>>()),
        latency: Latency::of(&hists[i]),
        mixed_latency: None,
    };
    let ratio = Ratio {
        variant: "lease".into(),
        vs: "floor".into(),
        time: Spread::of(
            &tps[1]
                .iter()
                .zip(&tps[0])
                .map(|(f, l)| f / l)
                .collect::<Vec<_>>(),
        ),
        p50: Spread::of(
            &p50[0]
                .iter()
                .zip(&p50[1])
                .map(|(l, f)| l / f)
                .collect::<Vec<_>>(),
        ),
        cpu: Spread::of(
            &cpus[0]
                .iter()
                .zip(&cpus[1])
                .map(|(l, f)| l / f)
                .collect::<Vec<_>>(),
        ),
        mixed_mean: Spread::default(),
        mixed_p50: Spread::default(),
    };
    eprintln!(
        "    storm lease / floor: {}; held after: {held_after}/{n}",
        ratio.time.ratio_text()
    );
    Ok(StormResult {
        keys: n,
        clients: plan.storm_clients,
        segment_seconds: plan.storm_segment_seconds,
        sync_commit: "off".into(),
        lease: vr(0),
        floor: vr(1),
        ratio,
        segments,
        samples,
        hot_share,
        held_after,
        load_before,
        load_after: LoadAvg::now(),
    })
}

// ---------------------------------------------------------------------------------------------
// Scale in keys
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct ScalePoint {
    pub keys: u64,
    pub preload_seconds: f64,
    pub lease_table_bytes: i64,
    pub floor_table_bytes: i64,
    pub group: GroupResult,
}

pub async fn scale(pgbench: &Path, db: &Db, plan: &Plan) -> BoxResult<Option<Vec<ScalePoint>>> {
    let Some(su) = db.connect_superuser().await? else {
        eprintln!("  scale: skipped (preloading lease.leases needs a superuser)");
        return Ok(None);
    };
    let mut have: u64 = 0;
    let mut points = Vec::new();
    for &n in &plan.scale_keys {
        let t0 = Instant::now();
        if n > have {
            eprintln!(
                "  preloading keys {}..={n} (FREE rows, counter 1, idle since yesterday)",
                have + 1
            );
            for table in ["lease.leases", &format!("{SCHEMA}.scale_floor")] {
                su.execute(
                    &format!(
                        "INSERT INTO {table} (key, owner, epoch, expires_at)
                         SELECT 'scale-' || g, NULL, 1, now() - interval '1 day'
                           FROM generate_series($1::bigint, $2::bigint) AS g
                         ON CONFLICT DO NOTHING"
                    ),
                    &[&((have + 1) as i64), &(n as i64)],
                )
                .await?;
            }
            su.batch_execute(&format!(
                "VACUUM (ANALYZE) lease.leases, {SCHEMA}.scale_floor"
            ))
            .await?;
            su.batch_execute("CHECKPOINT").await?;
            have = n;
        }
        let preload_seconds = round1(t0.elapsed().as_secs_f64());
        let sizes = su
            .query_one(
                &format!(
                    "SELECT pg_total_relation_size('lease.leases'), pg_total_relation_size('{SCHEMA}.scale_floor')"
                ),
                &[],
            )
            .await?;
        let g = Group {
            workload: format!("scale-{n}"),
            sync_commit: false,
            clients: 1,
            variants: vec![scripts::scale_lease(n), scripts::scale_floor(n)],
            baseline: "floor",
            rounds: plan.scale_rounds,
            mixed_rounds: plan.scale_rounds,
            seconds: plan.scale_seconds,
            warmup_seconds: plan.warmup_seconds,
        };
        let group = run_group(pgbench, &db.conninfo(), &g).await?;
        points.push(ScalePoint {
            keys: n,
            preload_seconds,
            lease_table_bytes: sizes.get(0),
            floor_table_bytes: sizes.get(1),
            group,
        });
    }
    Ok(Some(points))
}

/// Removes the rows the scale section preloaded (only needed in a shared database).
pub async fn scale_cleanup(db: &Db) -> BoxResult<()> {
    if let Some(su) = db.connect_superuser().await? {
        su.batch_execute(&format!(
            "DELETE FROM lease.leases WHERE key LIKE 'scale-%'; DELETE FROM {SCHEMA}.scale_floor"
        ))
        .await?;
    }
    Ok(())
}
