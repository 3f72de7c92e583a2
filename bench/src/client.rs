//! Client overhead: the Rust client's typed calls against raw tokio-postgres prepared statements of
//! the same SQL, one connection, autocommit (each call its own transaction), interleaved rounds.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::interleave::Ratio;
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg, Spread, round1};
use crate::{BoxResult, err};

// The SQL the typed calls send (crates/pglease/src/calls.rs), prepared once here.
const ACQUIRE: &str = "SELECT acquired, epoch, expires_at FROM lease.acquire($1, $2, \
     $3::bigint * interval '1 microsecond', $4::bigint * interval '1 microsecond')";
const RENEW: &str = "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
const RELEASE: &str = "SELECT status FROM lease.release($1, $2, $3)";

#[derive(Clone, Debug, Serialize)]
pub struct ClientVariant {
    pub name: String,
    pub what: String,
    /// Cycles (acquire + renew + release) per second, per round.
    pub cycles_per_second: Spread,
    pub acquire: Latency,
    pub renew: Latency,
    pub release: Latency,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClientResult {
    pub rounds: u32,
    pub round_seconds: u32,
    pub sync_commit: String,
    pub variants: Vec<ClientVariant>,
    pub ratios: Vec<Ratio>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

struct Prepared {
    acquire: tokio_postgres::Statement,
    renew: tokio_postgres::Statement,
    release: tokio_postgres::Statement,
}

const TTL: Duration = Duration::from_secs(30);

async fn cycle_typed(c: &Client, key: &str, t: &mut [Duration; 3]) -> BoxResult<()> {
    let t0 = Instant::now();
    let g = pglease::acquire(c, key, "client", TTL, Duration::ZERO)
        .await?
        .ok_or_else(|| err("typed acquire refused"))?;
    let t1 = Instant::now();
    let r = pglease::renew(c, key, "client", g.epoch, TTL).await?;
    let t2 = Instant::now();
    let s = pglease::release(c, key, "client", g.epoch).await?;
    let t3 = Instant::now();
    if !r.status.is_ok() || !s.is_ok() {
        return Err(err("typed renew/release not ok"));
    }
    *t = [t1 - t0, t2 - t1, t3 - t2];
    Ok(())
}

async fn cycle_prepared(
    c: &Client,
    p: &Prepared,
    key: &str,
    t: &mut [Duration; 3],
) -> BoxResult<()> {
    let ttl = TTL.as_micros() as i64;
    let zero = 0i64;
    let t0 = Instant::now();
    let row = c
        .query_one(&p.acquire, &[&key, &"client", &ttl, &zero])
        .await?;
    let acquired: Option<bool> = row.try_get(0)?;
    let epoch: Option<i64> = row.try_get(1)?;
    let _expires: Option<std::time::SystemTime> = row.try_get(2)?;
    let epoch = match (acquired, epoch) {
        (Some(true), Some(e)) => e,
        _ => return Err(err("prepared acquire refused")),
    };
    let t1 = Instant::now();
    let row = c
        .query_one(&p.renew, &[&key, &"client", &epoch, &ttl])
        .await?;
    let renew_status: Option<String> = row.try_get(0)?;
    let _expires: Option<std::time::SystemTime> = row.try_get(1)?;
    let t2 = Instant::now();
    let row = c.query_one(&p.release, &[&key, &"client", &epoch]).await?;
    let release_status: Option<String> = row.try_get(0)?;
    let t3 = Instant::now();
    if renew_status.as_deref() != Some("ok") || release_status.as_deref() != Some("ok") {
        return Err(err("prepared renew/release not ok"));
    }
    *t = [t1 - t0, t2 - t1, t3 - t2];
    Ok(())
}

async fn cycle_client(c: &pglease::Client, key: &str, t: &mut [Duration; 3]) -> BoxResult<()> {
    let t0 = Instant::now();
    let lease = c
        .try_acquire(key, TTL)
        .await?
        .ok_or_else(|| err("Client::try_acquire refused"))?;
    let t1 = Instant::now();
    lease.renew().await?;
    let t2 = Instant::now();
    lease.release().await?;
    let t3 = Instant::now();
    *t = [t1 - t0, t2 - t1, t3 - t2];
    Ok(())
}

const NAMES: [&str; 3] = ["prepared", "typed", "client"];
const WHATS: [&str; 3] = [
    "raw tokio-postgres: the typed calls' SQL, prepared once, executed with query_one",
    "pglease::acquire / renew / release (query_typed: one round trip each, unnamed statement)",
    "pglease::Client (pool of 1 connection): try_acquire -> Lease::renew -> Lease::release (keepalive task, bookkeeping)",
];

/// The three ways, interleaved cycle by cycle (A B C A B C ...) on the same server, so they see
/// the same machine at every moment; one round = `client_seconds` of that. Ratios per round are
/// of mean cycle times.
pub async fn client_overhead(db: &Db, plan: &Plan) -> BoxResult<ClientResult> {
    let load_before = LoadAvg::now();
    let c = db.connect(false).await?;
    let p = Prepared {
        acquire: c
            .prepare_typed(ACQUIRE, &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8])
            .await?,
        renew: c
            .prepare_typed(RENEW, &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8])
            .await?,
        release: c
            .prepare_typed(RELEASE, &[Type::TEXT, Type::TEXT, Type::INT8])
            .await?,
    };
    let mut cfg = db.config.clone();
    cfg.options(crate::server::sync_options(false));
    let lc = pglease::Client::builder()
        .owner("client")
        .max_connections(1)
        .connect_with(cfg, tokio_postgres::NoTls)
        .await?;
    let n = NAMES.len();
    let mut hists: Vec<[hdrhistogram::Histogram<u64>; 3]> = (0..n)
        .map(|_| [stats::histogram(), stats::histogram(), stats::histogram()])
        .collect();
    let mut means: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut t = [Duration::ZERO; 3];
    let run = async |v: usize, t: &mut [Duration; 3]| -> BoxResult<()> {
        match v {
            0 => cycle_prepared(&c, &p, "client-prepared", t).await,
            1 => cycle_typed(&c, "client-typed", t).await,
            _ => cycle_client(&lc, "client-client", t).await,
        }
    };
    // Warm-up: one second of the interleaving.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        for v in 0..n {
            run(v, &mut t).await?;
        }
    }
    for _round in 0..plan.client_rounds {
        let mut cycle: Vec<_> = (0..n).map(|_| stats::histogram()).collect();
        let until = Instant::now() + Duration::from_secs(u64::from(plan.client_seconds));
        while Instant::now() < until {
            for v in 0..n {
                run(v, &mut t).await?;
                for (h, d) in hists[v].iter_mut().zip(t) {
                    stats::record(h, d.as_micros() as u64);
                }
                stats::record(&mut cycle[v], t.iter().map(|d| d.as_micros() as u64).sum());
            }
        }
        for v in 0..n {
            means[v].push(cycle[v].mean());
            p50s[v].push(cycle[v].value_at_quantile(0.5) as f64);
        }
    }
    lc.shutdown().await;
    let variants: Vec<ClientVariant> = (0..n)
        .map(|v| ClientVariant {
            name: NAMES[v].into(),
            what: WHATS[v].into(),
            cycles_per_second: Spread::of(
                &means[v].iter().map(|m| round1(1e6 / m)).collect::<Vec<_>>(),
            ),
            acquire: Latency::of(&hists[v][0]),
            renew: Latency::of(&hists[v][1]),
            release: Latency::of(&hists[v][2]),
        })
        .collect();
    let ratio = |a: usize, b: usize| Ratio {
        variant: NAMES[a].into(),
        vs: NAMES[b].into(),
        time: Spread::of(
            &means[a]
                .iter()
                .zip(&means[b])
                .map(|(x, y)| x / y)
                .collect::<Vec<_>>(),
        ),
        p50: Spread::of(
            &p50s[a]
                .iter()
                .zip(&p50s[b])
                .map(|(x, y)| x / y)
                .collect::<Vec<_>>(),
        ),
        cpu: Spread::default(),
        mixed_mean: Spread::default(),
        mixed_p50: Spread::default(),
    };
    let ratios = vec![ratio(1, 0), ratio(2, 0), ratio(2, 1)];
    for v in &variants {
        eprintln!(
            "    {:<9} {:>7.0} cycles/s  acquire p50 {} us  renew p50 {} us  release p50 {} us",
            v.name, v.cycles_per_second.median, v.acquire.p50_us, v.renew.p50_us, v.release.p50_us
        );
    }
    for r in &ratios {
        eprintln!("    {} / {}: {}", r.variant, r.vs, r.time.ratio_text());
    }
    Ok(ClientResult {
        rounds: plan.client_rounds,
        round_seconds: plan.client_seconds,
        sync_commit: "off".into(),
        variants,
        ratios,
        load_before,
        load_after: LoadAvg::now(),
    })
}
