//! The console section: the operator console (`pglease ui`, the real binary) at scale. A private
//! server is seeded with 100 000 leases and 1 000 000 queued messages (seed.rs), the console is
//! started on it (read-only, one `--election`), and every page and every GET endpoint of its API
//! is requested `requests` times one after another on one keep-alive connection (after
//! `warmup` requests), then `requests` times again from `clients` concurrent connections
//! (`requests / clients` each). For the event stream the time measured is from opening the
//! stream to its first `view` event (a new connection each time). The target (issue: "every page
//! and API answer p95 ≤ 200 ms on this machine") is checked per endpoint and client count.
//!
//! For the reasons behind a slow endpoint, the SQL the console sends is also timed alone
//! (tokio-postgres, same role, `sql_samples` calls each), and a second console with a 5 ms
//! statement timeout checks that a read the timeout cuts short answers 503 and pushes a `notice`
//! event at once instead of hanging.

mod endpoints;
mod http;
mod report;
mod seed;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_postgres::config::Host;

use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{self, Latency, LoadAvg};
use crate::{BoxResult, err};
use endpoints::{Endpoint, Kind, endpoint_list};

pub use report::{markdown, table};
pub use seed::Seeded;

/// The target: every endpoint's p95, at 1 and at `clients` clients.
pub const TARGET_P95_MS: u64 = 200;

/// One endpoint's numbers.
#[derive(Clone, Debug, Serialize)]
pub struct EndpointResult {
    pub name: String,
    pub path: String,
    pub reads: String,
    /// Bytes of the last answer (for events: of nothing; 0).
    pub bytes: usize,
    pub sequential: Latency,
    pub concurrent: Latency,
    /// Requests that failed (HTTP status other than 200, or no answer), per run.
    pub errors_sequential: u64,
    pub errors_concurrent: u64,
    pub first_error: Option<String>,
    pub meets_target: bool,
}

/// The SQL of the console, timed alone.
#[derive(Clone, Debug, Serialize)]
pub struct SqlTiming {
    pub name: String,
    pub sql: String,
    pub latency: Latency,
    pub error: Option<String>,
}

/// The statement-timeout check.
#[derive(Clone, Debug, Serialize)]
pub struct TimeoutCheck {
    pub statement_timeout_ms: u64,
    pub path: String,
    pub status: u16,
    pub error_kind: String,
    pub answered_ms: f64,
    pub event_path: String,
    pub first_event: String,
    pub event_ms: f64,
    pub ok: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConsoleResult {
    pub target_p95_ms: u64,
    pub seeded: Seeded,
    pub pglease: String,
    pub pglease_profile: String,
    pub console_args: Vec<String>,
    pub requests: u32,
    pub warmup: u32,
    pub clients: u32,
    pub endpoints: Vec<EndpointResult>,
    pub sql: Vec<SqlTiming>,
    pub timeout_check: Option<TimeoutCheck>,
    pub all_met: bool,
    pub measure_seconds: f64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

impl ConsoleResult {
    /// What went wrong other than speed: requests that got an error answer, or a statement
    /// timeout that did not answer 503 with a `notice` at once. These fail the run with or without
    /// `--enforce` (a target missed on a busy machine is reported; a broken console is not).
    pub fn faults(&self) -> Vec<String> {
        let mut faults: Vec<String> = self
            .endpoints
            .iter()
            .filter(|e| e.errors_sequential + e.errors_concurrent > 0)
            .map(|e| {
                format!(
                    "{}: {} failed requests (first: {})",
                    e.name,
                    e.errors_sequential + e.errors_concurrent,
                    e.first_error.as_deref().unwrap_or("?")
                )
            })
            .collect();
        match &self.timeout_check {
            Some(t) if t.ok => {}
            Some(t) => faults.push(format!(
                "statement timeout: {} answered {} ({:?}) in {} ms, first event {:?} in {} ms",
                t.path, t.status, t.error_kind, t.answered_ms, t.first_event, t.event_ms
            )),
            None => faults.push("statement timeout: the check did not run to its end".into()),
        }
        faults
    }
}

/// The `pglease` binary: `explicit`, else the one next to this program (same cargo profile).
pub fn pglease_binary(explicit: Option<&Path>) -> BoxResult<PathBuf> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .ok_or_else(|| err("this program has no directory"))?
            .join("pglease"),
    };
    if !path.is_file() {
        return Err(err(format!(
            "no pglease binary at {} (build it: cargo build --release -p pglease-cli, or pass --pglease PATH)",
            path.display()
        )));
    }
    Ok(path)
}

/// The cargo profile a binary was built in, from its path (`.../release/pglease`).
fn profile_of(path: &Path) -> String {
    path.parent()
        .and_then(|d| d.file_name())
        .map_or("unknown".into(), |n| n.to_string_lossy().into_owned())
}

/// A running `pglease ui` (killed when dropped).
struct Console {
    child: Child,
    addr: SocketAddr,
}

impl Console {
    async fn start(
        pglease: &Path,
        db: &Db,
        extra: &[&str],
        log_dir: &Path,
        name: &str,
    ) -> BoxResult<(Console, Vec<String>)> {
        let mut args: Vec<String> = vec![
            "ui".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--election".into(),
            seed::ELECTION.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let stderr_log = log_dir.join(format!("{name}.stderr"));
        let mut cmd = Command::new(pglease);
        cmd.args(&args)
            .env_remove("DATABASE_URL")
            .env_remove("PGSERVICE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&stderr_log)?))
            .kill_on_drop(true);
        for (k, v) in libpq_env(db) {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let url = match line {
            Ok(Ok(Some(l))) => l,
            _ => {
                let _ = child.start_kill();
                let log = std::fs::read_to_string(&stderr_log).unwrap_or_default();
                return Err(err(format!(
                    "pglease ui did not print its URL: {}",
                    log.trim()
                )));
            }
        };
        let hostport = url
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .ok_or_else(|| err(format!("pglease ui printed {url:?}, not a URL")))?;
        let addr: SocketAddr = hostport.parse()?;
        // Keep reading its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((Console { child, addr }, args))
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// PGHOST, PGPORT, PGUSER, PGDATABASE (and PGPASSWORD) for the database `db`.
fn libpq_env(db: &Db) -> Vec<(&'static str, String)> {
    let cfg = &db.config;
    let mut env = Vec::new();
    if let Some(h) = cfg.get_hosts().first() {
        env.push((
            "PGHOST",
            match h {
                Host::Tcp(h) => h.clone(),
                Host::Unix(p) => p.to_string_lossy().into_owned(),
            },
        ));
    }
    if let Some(p) = cfg.get_ports().first() {
        env.push(("PGPORT", p.to_string()));
    }
    if let Some(u) = cfg.get_user() {
        env.push(("PGUSER", u.to_owned()));
    }
    if let Some(d) = cfg.get_dbname() {
        env.push(("PGDATABASE", d.to_owned()));
    }
    if let Some(pw) = cfg.get_password() {
        env.push(("PGPASSWORD", String::from_utf8_lossy(pw).into_owned()));
    }
    env
}

/// One request of `ep`: its time and the answer's size, or why it failed.
async fn one(client: &mut http::Client, ep: &Endpoint) -> (Duration, Result<usize, String>) {
    let t = Instant::now();
    let out = match ep.kind {
        Kind::Page | Kind::Api => match client.get(&ep.path).await {
            Ok(a) if a.status == 200 => Ok(a.body.len()),
            Ok(a) => Err(format!("HTTP {}: {}", a.status, a.excerpt())),
            Err(e) => Err(e.to_string()),
        },
        Kind::Events => match client.first_event(&ep.path).await {
            Ok((_, name)) if name == "view" => Ok(0),
            Ok((_, name)) => Err(format!("first event was {name:?}, not \"view\"")),
            Err(e) => Err(e.to_string()),
        },
    };
    (t.elapsed(), out)
}

struct Run {
    latency: Latency,
    errors: u64,
    first_error: Option<String>,
    bytes: usize,
}

/// `n` requests of `ep` from `clients` connections at once (`n / clients` each, after `warmup`
/// each untimed).
async fn measure(
    addr: SocketAddr,
    ep: &Arc<Endpoint>,
    n: u32,
    clients: u32,
    warmup: u32,
) -> BoxResult<Run> {
    let per = n.div_ceil(clients);
    let tasks = (0..clients).map(|_| {
        let ep = ep.clone();
        tokio::spawn(async move {
            let mut client = http::Client::new(addr, Duration::from_secs(60));
            let mut h = stats::histogram();
            let mut errors = 0u64;
            let mut first_error = None;
            let mut bytes = 0;
            for _ in 0..warmup {
                let _ = one(&mut client, &ep).await;
            }
            for _ in 0..per {
                let (d, out) = one(&mut client, &ep).await;
                match out {
                    Ok(b) => {
                        bytes = b;
                        stats::record(&mut h, d.as_micros() as u64);
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (h, errors, first_error, bytes)
        })
    });
    let mut all = stats::histogram();
    let mut run = Run {
        latency: Latency::default(),
        errors: 0,
        first_error: None,
        bytes: 0,
    };
    for r in join_all(tasks).await {
        let (h, e, fe, b) = r?;
        all.add(&h).expect("same bounds");
        run.errors += e;
        if run.first_error.is_none() {
            run.first_error = fe;
        }
        run.bytes = run.bytes.max(b);
    }
    run.latency = Latency::of(&all);
    Ok(run)
}

/// The statements the console sends for its reads (db.rs), with the seeded data's arguments.
fn console_sql() -> Vec<(&'static str, String)> {
    vec![
        (
            "lease.browse, first page (50)",
            "SELECT * FROM lease.browse(NULL, NULL, NULL, NULL, 50)".into(),
        ),
        (
            "lease.browse, owner holding 1 key",
            format!(
                "SELECT * FROM lease.browse(NULL, NULL, NULL, '{}', 50)",
                seed::ELECTION_OWNER
            ),
        ),
        (
            "lease.summary",
            "SELECT * FROM lease.summary(interval '10 seconds')".into(),
        ),
        (
            "lease.history (50)",
            format!(
                "SELECT * FROM lease.history('{}', max_rows => 50)",
                seed::DETAIL_KEY
            ),
        ),
        (
            "semaphores query (lease.list over every key)",
            "SELECT pg_catalog.substring(l.key, '^(.*)#[0-9]+$') AS name,
                    pg_catalog.count(*) FILTER (WHERE l.held) AS holders,
                    pg_catalog.max(pg_catalog.substring(l.key, '#([0-9]+)$')::integer) AS slots,
                    pg_catalog.array_agg(l.owner ORDER BY l.key) FILTER (WHERE l.held) AS owners
               FROM lease.list(NULL) AS l
              WHERE l.key ~ '#[0-9]+$'
              GROUP BY 1 ORDER BY 1 LIMIT 1000"
                .into(),
        ),
        (
            "lease_queue.status(NULL)",
            "SELECT * FROM lease_queue.status(NULL)".into(),
        ),
        (
            "lease_queue.list_dead_letters (100)",
            format!(
                "SELECT * FROM lease_queue.list_dead_letters('{}', 100)",
                seed::QUEUE
            ),
        ),
    ]
}

async fn time_sql(db: &Db, samples: u32) -> BoxResult<Vec<SqlTiming>> {
    let c = db.connect(false).await?;
    let mut out = Vec::new();
    for (name, sql) in console_sql() {
        let mut h = stats::histogram();
        let mut error = None;
        // One untimed call first (plan caches, buffers).
        if let Err(e) = c.simple_query(&sql).await {
            error = Some(
                e.as_db_error()
                    .map_or(e.to_string(), |d| d.message().into()),
            );
        }
        if error.is_none() {
            for _ in 0..samples {
                let t = Instant::now();
                c.simple_query(&sql).await?;
                stats::record(&mut h, t.elapsed().as_micros() as u64);
            }
        }
        let latency = Latency::of(&h);
        eprintln!(
            "    {name:<46} p50 {:>8} us  p95 {:>8} us{}",
            latency.p50_us,
            latency.p95_us,
            error
                .as_deref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default()
        );
        out.push(SqlTiming {
            name: name.into(),
            sql: sql.split_whitespace().collect::<Vec<_>>().join(" "),
            latency,
            error,
        });
    }
    Ok(out)
}

/// A console whose statement timeout is far below what the reads take: its API must answer 503
/// and its event stream push a notice, both at once.
async fn timeout_check(pglease: &Path, db: &Db, log_dir: &Path) -> BoxResult<TimeoutCheck> {
    let ms = 5;
    let (console, _) = Console::start(
        pglease,
        db,
        &["--statement-timeout", &format!("{ms}ms")],
        log_dir,
        "console-timeout",
    )
    .await?;
    let mut client = http::Client::new(console.addr, Duration::from_secs(30));
    // A cheap request first: the console's pool has its connection then.
    client.get("/api/info").await?;
    let path = "/api/semaphores".to_string();
    let t = Instant::now();
    let a = client.get(&path).await?;
    let answered_ms = stats::round1(t.elapsed().as_secs_f64() * 1000.0);
    let kind = serde_json::from_slice::<serde_json::Value>(&a.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let event_path = "/api/events?view=semaphores".to_string();
    let t = Instant::now();
    let (_, first_event) = client.first_event(&event_path).await?;
    let event_ms = stats::round1(t.elapsed().as_secs_f64() * 1000.0);
    console.stop().await;
    let ok = a.status == 503
        && kind == "statement_timeout"
        && first_event == "notice"
        && answered_ms < 1000.0
        && event_ms < 1000.0;
    Ok(TimeoutCheck {
        statement_timeout_ms: ms,
        path,
        status: a.status,
        error_kind: kind,
        answered_ms,
        event_path,
        first_event,
        event_ms,
        ok,
    })
}

pub async fn run(db: &Db, plan: &Plan, pglease: &Path, log_dir: &Path) -> BoxResult<ConsoleResult> {
    let load_before = LoadAvg::now();
    let seeded = seed::seed(db).await?;
    // For looking into a slow read (EXPLAIN on the seeded data): PGLEASE_BENCH_HOLD=FILE keeps
    // the seeded server waiting while FILE exists.
    if let Some(flag) = std::env::var_os("PGLEASE_BENCH_HOLD") {
        let env: Vec<String> = libpq_env(db)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!(
            "  holding the seeded server while {} exists: {} psql",
            Path::new(&flag).display(),
            env.join(" ")
        );
        while Path::new(&flag).exists() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    eprintln!(
        "  the console's SQL alone ({} calls each)",
        plan.console_sql_samples
    );
    let sql = time_sql(db, plan.console_sql_samples).await?;

    let (console, console_args) = Console::start(pglease, db, &[], log_dir, "console").await?;
    eprintln!(
        "  pglease ui ({}) on http://{}: {} requests per endpoint, 1 then {} clients",
        profile_of(pglease),
        console.addr,
        plan.console_requests,
        plan.console_clients
    );
    let t0 = Instant::now();
    let mut endpoints = Vec::new();
    for ep in endpoint_list() {
        let ep = Arc::new(ep);
        let seq = measure(
            console.addr,
            &ep,
            plan.console_requests,
            1,
            plan.console_warmup,
        )
        .await?;
        let conc = measure(
            console.addr,
            &ep,
            plan.console_requests,
            plan.console_clients,
            2,
        )
        .await?;
        let target_us = TARGET_P95_MS * 1000;
        let meets = seq.errors == 0
            && conc.errors == 0
            && seq.latency.p95_us <= target_us
            && conc.latency.p95_us <= target_us;
        eprintln!(
            "    {:<36} p95 {:>8.1} ms (1) {:>8.1} ms ({}){}{}",
            ep.name,
            seq.latency.p95_us as f64 / 1000.0,
            conc.latency.p95_us as f64 / 1000.0,
            plan.console_clients,
            if seq.errors + conc.errors > 0 {
                format!("  {} errors", seq.errors + conc.errors)
            } else {
                String::new()
            },
            if meets { "" } else { "  MISSED" }
        );
        endpoints.push(EndpointResult {
            name: ep.name.into(),
            path: ep.path.clone(),
            reads: ep.reads.into(),
            bytes: seq.bytes.max(conc.bytes),
            sequential: seq.latency,
            concurrent: conc.latency,
            errors_sequential: seq.errors,
            errors_concurrent: conc.errors,
            first_error: seq.first_error.or(conc.first_error),
            meets_target: meets,
        });
    }
    let measure_seconds = stats::round1(t0.elapsed().as_secs_f64());
    console.stop().await;

    eprintln!("  statement timeout: a console with a 5 ms bound");
    let timeout_check = match timeout_check(pglease, db, log_dir).await {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("    timeout check failed: {e}");
            None
        }
    };
    let all_met = endpoints.iter().all(|e| e.meets_target);
    Ok(ConsoleResult {
        target_p95_ms: TARGET_P95_MS,
        seeded,
        pglease: pglease.display().to_string(),
        pglease_profile: profile_of(pglease),
        console_args,
        requests: plan.console_requests,
        warmup: plan.console_warmup,
        clients: plan.console_clients,
        endpoints,
        sql,
        timeout_check,
        all_met,
        measure_seconds,
        load_before,
        load_after: LoadAvg::now(),
    })
}
