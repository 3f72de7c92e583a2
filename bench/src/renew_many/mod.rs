//! The renew-many section (issue 14, item 2): what renewing N held leases of one owner costs, one
//! call per key against one `lease.renew_many` call against the bare SQL batch UPDATE, at 1, 100
//! and 10 000 held keys, on the same rows of `lease.leases`, in one interleaved run.
//!
//! - `per-key`: one `lease.renew` call per key, all N calls of a pass pipelined on one connection
//!   (tokio-postgres sends every call before reading the first answer; each call is its own
//!   autocommit transaction): the best a client can do without a batch call.
//! - `renew-many`: one `lease.renew_many(owner, keys, epochs, ttl)` call with all N pairs.
//! - `bare`: the cheapest SQL making the same row change, one `UPDATE lease.leases ... FROM
//!   unnest(keys, epochs) ... RETURNING key, expires_at` (same matching rule as renew: key, owner
//!   and epoch match and the grant has not lapsed), run as the table's owner (a superuser: the
//!   extension's objects belong to the bootstrap superuser). It sets `expires_at` and nothing else,
//!   as the other sections' floors do: no statuses, no validation, no lock-wait rules.
//!
//! Each variant has a connection of its own (synchronous_commit=off, so the numbers are CPU, not
//! WAL flushes). A *run* repeats passes (renew all N keys once, every key `ok`) for `seconds`;
//! its server CPU is that backend's utime + stime from `/proc/<pg_backend_pid()>/stat` before and
//! after (and, for the record, the whole server's). Runs alternate a b c, c b a, ... per round, and
//! the ratios are per round. A second part compares single `lease.acquire` / `lease.renew` /
//! `lease.release` calls of this release with the previous one (installed in its own database),
//! interleaved call by call.

use std::time::Instant;

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg, Spread, cpu, round1};
use crate::{BoxResult, err};

mod report;
mod single;

pub use report::markdown;
use single::single_calls;

/// Numbers of held keys (the issue's).
pub const HELD: [usize; 3] = [1, 100, 10_000];
/// The targets at 10 000 keys: renew-many renewals/s ≥ 5× per-key; CPU per key ≤ 1.2× bare.
pub const TARGET_RATE: f64 = 5.0;
pub const TARGET_CPU: f64 = 1.2;

const OWNER: &str = "renew-many-bench";
/// The ttl every variant renews with (µs): long enough that no key lapses during the section.
const TTL_US: i64 = 3_600_000_000;

const RENEW: &str = "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
const RENEW_MANY: &str = "SELECT key, status, expires_at FROM lease.renew_many($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
const BARE: &str = "UPDATE lease.leases AS l \
        SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond' \
       FROM unnest($2::text[], $3::bigint[]) AS p(key, epoch) \
      WHERE l.key = p.key AND l.owner = $1 AND l.epoch = p.epoch \
        AND l.expires_at > clock_timestamp() \
     RETURNING l.key, l.expires_at";

const NAMES: [&str; 3] = ["per-key", "renew-many", "bare"];
const WHATS: [&str; 3] = [
    "one lease.renew call per key, the N calls of a pass pipelined on one connection (each its own autocommit transaction)",
    "one lease.renew_many(owner, keys, epochs, ttl) call with all N pairs",
    "UPDATE lease.leases ... FROM unnest(keys, epochs) WHERE key, owner, epoch match AND expires_at > clock_timestamp() RETURNING key, expires_at, as the table owner (sets expires_at only)",
];

/// One way of renewing, on its own connection.
struct Way {
    client: Client,
    stmt: Statement,
    pid: u32,
}

impl Way {
    async fn new(client: Client, sql: &str, types: &[Type]) -> BoxResult<Way> {
        let stmt = client.prepare_typed(sql, types).await?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        Ok(Way {
            client,
            stmt,
            pid: pid as u32,
        })
    }
}

/// The keys and their epochs.
struct Held {
    keys: Vec<String>,
    epochs: Vec<i64>,
}

/// Renews the first `n` keys once with variant `v`; errors unless every key was renewed.
async fn pass(v: usize, way: &Way, held: &Held, n: usize) -> BoxResult<()> {
    let (keys, epochs) = (&held.keys[..n], &held.epochs[..n]);
    match v {
        0 => {
            let calls = keys.iter().zip(epochs).map(|(k, e)| async move {
                way.client
                    .query_one(&way.stmt, &[k, &OWNER, e, &TTL_US])
                    .await
            });
            for row in join_all(calls).await {
                let status: Option<String> = row?.try_get(0)?;
                if status.as_deref() != Some("ok") {
                    return Err(err(format!("per-key: renew returned {status:?}")));
                }
            }
        }
        1 => {
            let rows = way
                .client
                .query(&way.stmt, &[&OWNER, &keys, &epochs, &TTL_US])
                .await?;
            let ok = rows
                .iter()
                .filter(|r| r.get::<_, Option<String>>(1).as_deref() == Some("ok"))
                .count();
            if ok != n || rows.len() != n {
                return Err(err(format!(
                    "renew-many: {ok} ok of {} rows for {n} keys",
                    rows.len()
                )));
            }
        }
        _ => {
            let rows = way
                .client
                .query(&way.stmt, &[&OWNER, &keys, &epochs, &TTL_US])
                .await?;
            if rows.len() != n {
                return Err(err(format!("bare: {} rows for {n} keys", rows.len())));
            }
        }
    }
    Ok(())
}

/// One measured run: passes of `n` keys for `seconds` (at least one pass).
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub variant: String,
    pub keys: usize,
    pub round: u32,
    pub passes: u64,
    pub renewed: u64,
    pub seconds: f64,
    pub renewals_per_s: f64,
    /// The variant's backend: utime + stime per renewed key (µs).
    pub backend_cpu_us: Option<f64>,
    /// Every server process (the backend, the WAL writer, ...) per renewed key (µs).
    pub server_cpu_us: Option<f64>,
    /// This harness process per renewed key (µs): encoding the calls, decoding the rows.
    pub client_cpu_us: f64,
    /// Time of one pass (renew all N keys once).
    pub pass: Latency,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

async fn run_once(
    v: usize,
    way: &Way,
    held: &Held,
    n: usize,
    seconds: f64,
) -> BoxResult<(Run, Histogram<u64>)> {
    let load_before = LoadAvg::now();
    let mut hist = stats::histogram();
    let backend0 = cpu::process_ticks(way.pid);
    let server0 = cpu::server_ticks().map(|(t, _)| t);
    let self0 = cpu::self_ticks();
    let t0 = Instant::now();
    let mut passes = 0u64;
    loop {
        let t = Instant::now();
        pass(v, way, held, n).await?;
        stats::record(&mut hist, t.elapsed().as_micros() as u64);
        passes += 1;
        if t0.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let renewed = passes * n as u64;
    let per = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(stats::round3(
            b.saturating_sub(a) as f64 * cpu::TICK_US / renewed as f64,
        )),
        _ => None,
    };
    let run = Run {
        variant: NAMES[v].into(),
        keys: n,
        round: 0,
        passes,
        renewed,
        seconds: stats::round3(elapsed),
        renewals_per_s: round1(renewed as f64 / elapsed),
        backend_cpu_us: per(backend0, cpu::process_ticks(way.pid)),
        server_cpu_us: per(server0, cpu::server_ticks().map(|(t, _)| t)),
        client_cpu_us: per(Some(self0), Some(cpu::self_ticks())).unwrap_or(f64::NAN),
        pass: Latency::of(&hist),
        load_before,
        load_after: LoadAvg::now(),
    };
    Ok((run, hist))
}

#[derive(Clone, Debug, Serialize)]
pub struct VariantSummary {
    pub name: String,
    pub renewals_per_s: Spread,
    pub backend_cpu_us: Spread,
    pub server_cpu_us: Spread,
    /// Time of one pass, over all rounds.
    pub pass: Latency,
}

#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub keys: usize,
    pub variants: Vec<VariantSummary>,
    /// renewals/s of renew-many / of per-key, per round.
    pub rate_many_over_per_key: Spread,
    /// Backend CPU per key of renew-many / of bare, per round.
    pub cpu_many_over_bare: Spread,
    /// Backend CPU per key of per-key / of bare, per round.
    pub cpu_per_key_over_bare: Spread,
    /// The same ratios with the whole server's CPU.
    pub server_cpu_many_over_bare: Spread,
}

/// Single calls of this release and the previous one, interleaved call by call.
#[derive(Clone, Debug, Serialize)]
pub struct SingleVersion {
    pub version: String,
    pub acquire: Latency,
    pub renew: Latency,
    pub release: Latency,
    /// Backend CPU per cycle (acquire + renew + release), per round (µs).
    pub backend_cpu_us_per_cycle: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct SingleResult {
    pub rounds: u32,
    pub round_seconds: u32,
    pub versions: Vec<SingleVersion>,
    /// This release / the previous one, per round: mean latency of each call, backend CPU per
    /// cycle.
    pub acquire_ratio: Spread,
    pub renew_ratio: Spread,
    pub release_ratio: Spread,
    pub cpu_ratio: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct RenewManyResult {
    pub version: String,
    pub owner: String,
    pub ttl_seconds: i64,
    pub sync_commit: String,
    pub rounds: u32,
    pub round_seconds: f64,
    pub variants: Vec<(String, String)>,
    /// EXPLAIN of the bare UPDATE at each N (its plan decides its cost).
    pub bare_plans: Vec<(usize, String)>,
    /// How often the bare UPDATE's prepared statement ran a generic / a custom plan (from
    /// pg_prepared_statements at the end).
    pub bare_generic_custom: Option<(i64, i64)>,
    pub points: Vec<Point>,
    pub runs: Vec<Run>,
    pub single: Option<SingleResult>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

async fn acquire_held(c: &Client, n: usize) -> BoxResult<Held> {
    let rows = c
        .query(
            "SELECT 'rm-' || g, a.epoch
               FROM generate_series(1, $1::bigint) AS g,
                    LATERAL lease.acquire('rm-' || g, $2, interval '1 hour') AS a
              WHERE a.acquired
              ORDER BY g",
            &[&(n as i64), &OWNER],
        )
        .await?;
    if rows.len() != n {
        return Err(err(format!(
            "renew-many preload: {} grants of {n}",
            rows.len()
        )));
    }
    Ok(Held {
        keys: rows.iter().map(|r| r.get(0)).collect(),
        epochs: rows.iter().map(|r| r.get(1)).collect(),
    })
}

/// Runs the section; `None` without a superuser (the bare UPDATE runs as the table's owner).
/// `previous`: a database with the previous release installed, for the single-call comparison.
pub async fn run(
    db: &Db,
    previous: Option<&Db>,
    plan: &Plan,
) -> BoxResult<Option<RenewManyResult>> {
    let load_before = LoadAvg::now();
    let Some(su_cfg) = db.superuser.clone() else {
        eprintln!(
            "  renew-many: skipped (the bare UPDATE runs as the owner of lease.leases: needs a superuser)"
        );
        return Ok(None);
    };
    let setup = db.connect(false).await?;
    let version: String = setup
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await?
        .get(0);
    let max = *HELD.iter().max().expect("HELD is not empty");
    eprintln!("  acquiring {max} keys as {OWNER:?} (ttl 1 hour)");
    let held = acquire_held(&setup, max).await?;
    let su = crate::server::connect(&su_cfg, None).await?;
    su.batch_execute("VACUUM (ANALYZE) lease.leases").await?;
    let mut bare_plans = Vec::new();
    for n in HELD {
        let rows = su
            .query(
                &format!("EXPLAIN {BARE}"),
                &[&OWNER, &&held.keys[..n], &&held.epochs[..n], &TTL_US],
            )
            .await?;
        let text: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        bare_plans.push((n, text.join("\n")));
    }

    let t = Type::TEXT;
    let ways = [
        Way::new(
            db.connect(false).await?,
            RENEW,
            &[t.clone(), t.clone(), Type::INT8, Type::INT8],
        )
        .await?,
        Way::new(
            db.connect(false).await?,
            RENEW_MANY,
            &[t.clone(), Type::TEXT_ARRAY, Type::INT8_ARRAY, Type::INT8],
        )
        .await?,
        Way::new(
            crate::server::connect(&su_cfg, Some(false)).await?,
            BARE,
            &[t.clone(), Type::TEXT_ARRAY, Type::INT8_ARRAY, Type::INT8],
        )
        .await?,
    ];
    let rounds = plan.renew_many_rounds;
    let seconds = plan.renew_many_seconds;
    let mut runs = Vec::new();
    let mut points = Vec::new();
    for n in HELD {
        eprintln!("  {n} held keys: 3 variants x {rounds} rounds x {seconds} s");
        // Warm-up: a few passes of each (plans, caches, the pages of the rows).
        for (v, way) in ways.iter().enumerate() {
            run_once(v, way, &held, n, 0.2).await?;
        }
        let mut hists: Vec<Histogram<u64>> = (0..3).map(|_| stats::histogram()).collect();
        let mut rate = vec![Vec::new(); 3];
        let mut backend = vec![Vec::new(); 3];
        let mut server = vec![Vec::new(); 3];
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                vec![0, 1, 2]
            } else {
                vec![2, 1, 0]
            };
            let mut this = [f64::NAN; 3];
            let mut this_cpu = [f64::NAN; 3];
            let mut this_server = [f64::NAN; 3];
            for v in order {
                let (mut r, h) = run_once(v, &ways[v], &held, n, seconds).await?;
                r.round = round;
                hists[v].add(&h).expect("same bounds");
                this[v] = r.renewals_per_s;
                this_cpu[v] = r.backend_cpu_us.unwrap_or(f64::NAN);
                this_server[v] = r.server_cpu_us.unwrap_or(f64::NAN);
                runs.push(r);
            }
            for v in 0..3 {
                rate[v].push(this[v]);
                backend[v].push(this_cpu[v]);
                server[v].push(this_server[v]);
            }
        }
        let ratio = |m: &Vec<Vec<f64>>, a: usize, b: usize| {
            Spread::of(
                &m[a]
                    .iter()
                    .zip(&m[b])
                    .map(|(x, y)| x / y)
                    .collect::<Vec<_>>(),
            )
        };
        let point = Point {
            keys: n,
            variants: (0..3)
                .map(|v| VariantSummary {
                    name: NAMES[v].into(),
                    renewals_per_s: Spread::of(&rate[v]),
                    backend_cpu_us: Spread::of(&backend[v]),
                    server_cpu_us: Spread::of(&server[v]),
                    pass: Latency::of(&hists[v]),
                })
                .collect(),
            rate_many_over_per_key: ratio(&rate, 1, 0),
            cpu_many_over_bare: ratio(&backend, 1, 2),
            cpu_per_key_over_bare: ratio(&backend, 0, 2),
            server_cpu_many_over_bare: ratio(&server, 1, 2),
        };
        for s in &point.variants {
            eprintln!(
                "    {:<10} {:>9.0} renewals/s ({:.0}–{:.0})  backend CPU {:>6.2} µs/key ({:.2}–{:.2})  pass p50 {} µs",
                s.name,
                s.renewals_per_s.median,
                s.renewals_per_s.min,
                s.renewals_per_s.max,
                s.backend_cpu_us.median,
                s.backend_cpu_us.min,
                s.backend_cpu_us.max,
                s.pass.p50_us
            );
        }
        eprintln!(
            "    renew-many / per-key renewals/s {}; CPU per key renew-many / bare {}",
            point.rate_many_over_per_key.ratio_text(),
            point.cpu_many_over_bare.ratio_text()
        );
        points.push(point);
    }
    let held_after: i64 = setup
        .query_one(
            "SELECT count(*) FROM lease.list('rm-') WHERE held AND owner = $1",
            &[&OWNER],
        )
        .await?
        .get(0);
    if held_after != max as i64 {
        return Err(err(format!(
            "renew-many: {held_after} of {max} keys held after"
        )));
    }
    let bare_generic_custom = ways[2]
        .client
        .query_opt(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements
              WHERE statement LIKE 'UPDATE lease.leases%'",
            &[],
        )
        .await?
        .map(|r| (r.get(0), r.get(1)));
    let single = match previous {
        Some(p) => Some(single_calls(db, p, plan).await?),
        None => None,
    };
    Ok(Some(RenewManyResult {
        version,
        owner: OWNER.into(),
        ttl_seconds: TTL_US / 1_000_000,
        sync_commit: "off".into(),
        rounds,
        round_seconds: seconds,
        variants: NAMES
            .iter()
            .zip(WHATS)
            .map(|(n, w)| (n.to_string(), w.to_string()))
            .collect(),
        bare_plans,
        bare_generic_custom,
        points,
        runs,
        single,
        load_before,
        load_after: LoadAvg::now(),
    }))
}
