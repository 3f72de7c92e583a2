//! The queue section: pg_lease_queue side by side with pgmq, on the same server, in the same run.
//!
//! pgmq is not part of this repository: its SQL is taken at bench time from the PyPI package
//! (`pip download --no-deps pgmq==<version>`, which ships `pgmq/sql/pgmq.sql`), cached under
//! `target/bench-cache/`, and run as the workload role (no extension files). Its version is recorded.
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

use std::future::poll_fn;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Notification, Statement};

use crate::plan::Plan;
use crate::sections::{TableStat, table_stats_of};
use crate::server::{Db, sync_options};
use crate::stats::{self, Latency, LoadAvg, Rng, round1};
use crate::{BoxResult, err};

// ---------------------------------------------------------------------------------------------
// pgmq's SQL, from PyPI at bench time
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct PgmqSource {
    /// The PyPI package version (`pip download --no-deps pgmq==<this>`).
    pub pypi_version: String,
    /// The pgmq extension version its SQL is (the package's `pgmq/sql/VERSION`).
    pub sql_version: String,
    pub wheel: String,
    /// How it was installed.
    pub installed: String,
}

fn python() -> &'static str {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok()
    {
        "python3"
    } else {
        "python"
    }
}

/// Downloads (once) the pgmq wheel into `target/bench-cache/pgmq-<version>/` and returns its SQL.
pub fn fetch_pgmq(repo: &Path, version: &str) -> BoxResult<(String, PgmqSource)> {
    let dir = repo
        .join("target")
        .join("bench-cache")
        .join(format!("pgmq-{version}"));
    std::fs::create_dir_all(&dir)?;
    let find_wheel = || -> Option<std::path::PathBuf> {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "whl")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("pgmq-"))
            })
    };
    if find_wheel().is_none() {
        eprintln!(
            "  pip download --no-deps pgmq=={version} into {}",
            dir.display()
        );
        let out = std::process::Command::new(python())
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(&dir)
            .arg(format!("pgmq=={version}"))
            .output()?;
        if !out.status.success() {
            return Err(err(format!(
                "pip download pgmq=={version} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
    }
    let wheel = find_wheel().ok_or_else(|| err("pip download produced no pgmq wheel"))?;
    let read = |member: &str| -> BoxResult<String> {
        let out = std::process::Command::new(python())
            .args([
                "-c",
                "import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())",
            ])
            .arg(&wheel)
            .arg(member)
            .output()?;
        if !out.status.success() {
            return Err(err(format!(
                "{} has no {member} (this pgmq package does not ship its SQL: use the pgmq crate's SQL instead): {}",
                wheel.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8(out.stdout)?)
    };
    let sql = read("pgmq/sql/pgmq.sql")?;
    let sql_version = read("pgmq/sql/VERSION")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    Ok((
        sql,
        PgmqSource {
            pypi_version: version.into(),
            sql_version,
            wheel: wheel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            installed: String::new(),
        },
    ))
}

async fn install_pgmq(c: &Client, sql: &str, src: &mut PgmqSource) -> BoxResult<()> {
    let have: bool = c
        .query_one("SELECT to_regnamespace('pgmq') IS NOT NULL", &[])
        .await?
        .get(0);
    if have {
        src.installed = "schema pgmq already present: used as it is".into();
        return Ok(());
    }
    c.batch_execute(&format!("BEGIN; {sql}; COMMIT;")).await?;
    src.installed =
        "its pgmq.sql run as the workload role (no extension files), in one transaction".into();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Systems and their statements
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Keyed,
    Unkeyed,
    Pgmq,
    PgmqFifo,
}

pub const SYSTEMS: [System; 4] = [
    System::Keyed,
    System::Unkeyed,
    System::Pgmq,
    System::PgmqFifo,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Keyed => "lq-keyed",
            System::Unkeyed => "lq-unkeyed",
            System::Pgmq => "pgmq",
            System::PgmqFifo => "pgmq-fifo",
        }
    }

    fn what(self) -> &'static str {
        match self {
            System::Keyed => {
                "lease_queue, keyed (per-key commit order): send / send_batch; consumers claim one partition each, receive → ack"
            }
            System::Unkeyed => {
                "lease_queue, NULL keys (no order): send / send_batch; consumers claim one partition each, receive → ack"
            }
            System::Pgmq => {
                "pgmq send / send_batch; consumers read (vt 30 s) → delete(ids) on the one queue, no order"
            }
            System::PgmqFifo => {
                "pgmq send / send_batch with header x-pgmq-group = key (GIN index on headers); consumers read_grouped → delete(ids): per-group order"
            }
        }
    }

    fn code(self) -> &'static str {
        match self {
            System::Keyed => "k",
            System::Unkeyed => "u",
            System::Pgmq => "m",
            System::PgmqFifo => "g",
        }
    }

    fn ours(self) -> bool {
        matches!(self, System::Keyed | System::Unkeyed)
    }
}

const LQ_SEND: &str = "SELECT lease_queue.send($1::text, $2::text, $3::text::jsonb)";
const LQ_SEND_BATCH: &str =
    "SELECT count(*) FROM lease_queue.send_batch($1::text, $2::text[], $3::text[]::jsonb[])";
const LQ_CLAIM: &str = "SELECT claimed, epoch FROM lease_queue.claim($1::text, $2::int, $3::text, \
                        $4::bigint * interval '1 millisecond')";
const LQ_RECEIVE: &str = "SELECT batch_id, id FROM lease_queue.receive($1::text, $2::int, $3::text, \
                          $4::bigint, $5::int)";
const LQ_ACK: &str = "SELECT lease_queue.ack($1::text, $2::int, $3::text, $4::bigint, $5::bigint)";
const LQ_RELEASE: &str =
    "SELECT lease_queue.release($1::text, $2::int, $3::text, $4::bigint, true)";
const PGMQ_SEND: &str = "SELECT count(*) FROM pgmq.send($1::text, $2::text::jsonb)";
const PGMQ_SEND_FIFO: &str =
    "SELECT count(*) FROM pgmq.send($1::text, $2::text::jsonb, $3::text::jsonb)";
const PGMQ_SEND_BATCH: &str = "SELECT count(*) FROM pgmq.send_batch($1::text, $2::text[]::jsonb[])";
const PGMQ_SEND_BATCH_FIFO: &str =
    "SELECT count(*) FROM pgmq.send_batch($1::text, $2::text[]::jsonb[], $3::text[]::jsonb[])";
const PGMQ_READ: &str = "SELECT msg_id FROM pgmq.read($1::text, $2::int, $3::int)";
const PGMQ_READ_GROUPED: &str = "SELECT msg_id FROM pgmq.read_grouped($1::text, $2::int, $3::int)";
const PGMQ_DELETE: &str = "SELECT count(*) FROM pgmq.delete($1::text, $2::bigint[])";

/// A JSON payload of about 100 bytes.
fn payload(producer: u32, n: u64) -> String {
    let head = format!("{{\"producer\": {producer}, \"n\": {n}, \"pad\": \"");
    let pad = 100usize.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

fn group_header(key: &str) -> String {
    format!("{{\"x-pgmq-group\": \"{key}\"}}")
}

async fn create(c: &Client, sys: System, name: &str, partitions: u32) -> BoxResult<()> {
    if sys.ours() {
        c.execute(
            "SELECT lease_queue.create_queue($1::text, $2::int)",
            &[&name, &(partitions as i32)],
        )
        .await?;
    } else {
        c.execute("SELECT pgmq.create($1::text)", &[&name]).await?;
        if sys == System::PgmqFifo {
            c.execute("SELECT pgmq.create_fifo_index($1::text)", &[&name])
                .await?;
        }
    }
    Ok(())
}

async fn drop_queue(c: &Client, sys: System, name: &str) -> BoxResult<()> {
    if sys.ours() {
        c.execute("SELECT lease_queue.drop_queue($1::text)", &[&name])
            .await?;
    } else {
        c.execute("SELECT pgmq.drop_queue($1::text)", &[&name])
            .await?;
    }
    Ok(())
}

/// `per` keys for each of `partitions` partitions (by lease_queue.partition_of), interleaved so
/// that consecutive keys fall in consecutive partitions.
async fn balanced_keys(c: &Client, partitions: u32, per: u32) -> BoxResult<Vec<String>> {
    let rows = c
        .query(
            "SELECT 'key-' || g, lease_queue.partition_of('key-' || g, $1::int)
               FROM generate_series(0, $2::int) AS g ORDER BY g",
            &[&(partitions as i32), &((partitions * per * 8 + 64) as i32)],
        )
        .await?;
    let mut by: Vec<Vec<String>> = vec![Vec::new(); partitions as usize];
    for r in rows {
        let (k, p): (String, i32) = (r.get(0), r.get(1));
        let slot = &mut by[p as usize];
        if slot.len() < per as usize {
            slot.push(k);
        }
    }
    let mut out = Vec::new();
    for i in 0..per as usize {
        for slot in &by {
            let k = slot
                .get(i)
                .ok_or_else(|| err("not enough keys per partition"))?;
            out.push(k.clone());
        }
    }
    Ok(out)
}

/// One producer connection's prepared send statement.
struct Sender {
    sys: System,
    queue: String,
    batch: u32,
    stmt: Statement,
    keys: Arc<Vec<String>>,
    id: u32,
    next: u64,
}

impl Sender {
    async fn new(
        c: &Client,
        sys: System,
        queue: &str,
        batch: u32,
        keys: Arc<Vec<String>>,
        id: u32,
    ) -> BoxResult<Sender> {
        let sql = match (sys, batch > 1) {
            (System::Keyed | System::Unkeyed, false) => LQ_SEND,
            (System::Keyed | System::Unkeyed, true) => LQ_SEND_BATCH,
            (System::Pgmq, false) => PGMQ_SEND,
            (System::Pgmq, true) => PGMQ_SEND_BATCH,
            (System::PgmqFifo, false) => PGMQ_SEND_FIFO,
            (System::PgmqFifo, true) => PGMQ_SEND_BATCH_FIFO,
        };
        Ok(Sender {
            sys,
            queue: queue.into(),
            batch,
            stmt: c.prepare(sql).await?,
            keys,
            id,
            next: u64::from(id) * 7919,
        })
    }

    fn key(&mut self) -> String {
        let k = self.keys[(self.next % self.keys.len() as u64) as usize].clone();
        self.next += 1;
        k
    }

    /// Sends one transaction of `self.batch` messages (autocommit); returns how many.
    async fn send(&mut self, c: &Client) -> BoxResult<u64> {
        let n = self.next;
        if self.batch == 1 {
            let key = self.key();
            let body = payload(self.id, n);
            match self.sys {
                System::Keyed => {
                    c.query_one(&self.stmt, &[&self.queue, &Some(key.as_str()), &body])
                        .await?
                }
                System::Unkeyed => {
                    c.query_one(&self.stmt, &[&self.queue, &None::<&str>, &body])
                        .await?
                }
                System::Pgmq => c.query_one(&self.stmt, &[&self.queue, &body]).await?,
                System::PgmqFifo => {
                    c.query_one(&self.stmt, &[&self.queue, &body, &group_header(&key)])
                        .await?
                }
            };
            return Ok(1);
        }
        let mut keys = Vec::with_capacity(self.batch as usize);
        let mut bodies = Vec::with_capacity(self.batch as usize);
        for i in 0..u64::from(self.batch) {
            keys.push(self.key());
            bodies.push(payload(self.id, n + i));
        }
        let row = match self.sys {
            System::Keyed => {
                let ks: Vec<Option<&str>> = keys.iter().map(|k| Some(k.as_str())).collect();
                c.query_one(&self.stmt, &[&self.queue, &ks, &bodies])
                    .await?
            }
            System::Unkeyed => {
                let ks: Vec<Option<&str>> = vec![None; keys.len()];
                c.query_one(&self.stmt, &[&self.queue, &ks, &bodies])
                    .await?
            }
            System::Pgmq => c.query_one(&self.stmt, &[&self.queue, &bodies]).await?,
            System::PgmqFifo => {
                let hs: Vec<String> = keys.iter().map(|k| group_header(k)).collect();
                c.query_one(&self.stmt, &[&self.queue, &bodies, &hs])
                    .await?
            }
        };
        Ok(row.get::<_, i64>(0) as u64)
    }
}

/// One consumer: ours owns partition `partition` (claimed at start, released at the end); pgmq's
/// reads the one queue.
struct Receiver {
    sys: System,
    queue: String,
    batch: i32,
    partition: i32,
    owner: String,
    epoch: i64,
    read: Statement,
    settle: Statement,
}

impl Receiver {
    async fn new(
        c: &Client,
        sys: System,
        queue: &str,
        batch: u32,
        partition: u32,
    ) -> BoxResult<Receiver> {
        let owner = format!("consumer-{partition}");
        let mut epoch = 0;
        let (read, settle) = if sys.ours() {
            let row = c
                .query_one(
                    LQ_CLAIM,
                    &[&queue, &(partition as i32), &owner, &600_000i64],
                )
                .await?;
            let claimed: bool = row.get(0);
            if !claimed {
                return Err(err(format!("{queue}: partition {partition} not claimed")));
            }
            epoch = row.get(1);
            (c.prepare(LQ_RECEIVE).await?, c.prepare(LQ_ACK).await?)
        } else {
            (
                c.prepare(if sys == System::PgmqFifo {
                    PGMQ_READ_GROUPED
                } else {
                    PGMQ_READ
                })
                .await?,
                c.prepare(PGMQ_DELETE).await?,
            )
        };
        Ok(Receiver {
            sys,
            queue: queue.into(),
            batch: batch as i32,
            partition: partition as i32,
            owner,
            epoch,
            read,
            settle,
        })
    }

    /// One receive → settle cycle; returns the number of messages handled (0: nothing there).
    async fn cycle(&self, c: &Client) -> BoxResult<u64> {
        if self.sys.ours() {
            let rows = c
                .query(
                    &self.read,
                    &[
                        &self.queue,
                        &self.partition,
                        &self.owner,
                        &self.epoch,
                        &self.batch,
                    ],
                )
                .await?;
            let Some(first) = rows.first() else {
                return Ok(0);
            };
            let batch_id: i64 = first.get(0);
            c.execute(
                &self.settle,
                &[
                    &self.queue,
                    &self.partition,
                    &self.owner,
                    &self.epoch,
                    &batch_id,
                ],
            )
            .await?;
            Ok(rows.len() as u64)
        } else {
            let rows = c
                .query(&self.read, &[&self.queue, &30i32, &self.batch])
                .await?;
            if rows.is_empty() {
                return Ok(0);
            }
            let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            c.query_one(&self.settle, &[&self.queue, &ids]).await?;
            Ok(ids.len() as u64)
        }
    }

    async fn finish(&self, c: &Client) -> BoxResult<()> {
        if self.sys.ours() {
            c.execute(
                LQ_RELEASE,
                &[&self.queue, &self.partition, &self.owner, &self.epoch],
            )
            .await?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Throughput
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct ThroughputRun {
    pub system: String,
    pub partitions: u32,
    pub batch: u32,
    pub sync_commit: String,
    pub producers: u32,
    pub consumers: u32,
    pub produced: u64,
    pub produce_seconds: f64,
    pub produced_per_s: f64,
    /// Time per producer transaction (one send / send_batch call, autocommit).
    pub produce_call: Latency,
    /// Server CPU per message produced / consumed (µs), from /proc.
    pub produce_cpu_us: Option<f64>,
    /// Messages waiting when the consume phase started.
    pub backlog: u64,
    pub consumed: u64,
    pub consume_seconds: f64,
    pub consumed_per_s: f64,
    /// Time per consumer cycle (receive + ack, or read + delete).
    pub consume_cycle: Latency,
    pub consume_cpu_us: Option<f64>,
    /// Reads that returned nothing while messages were left (pgmq: all visible heads taken by
    /// other consumers at that moment); the consumer retried after 1 ms.
    pub empty_reads: u64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

fn cpu_now() -> Option<u64> {
    stats::cpu::server_ticks().map(|(t, _)| t)
}

fn cpu_per(before: Option<u64>, after: Option<u64>, n: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if n > 0 => {
            Some(round1((b - a) as f64 * stats::cpu::TICK_US / n as f64))
        }
        _ => None,
    }
}

/// What one producer phase sends: `batch` messages per transaction, until `deadline` or until
/// `cap` messages in all (counted in `count`).
struct Produce<'a> {
    db: &'a Db,
    sync: bool,
    sys: System,
    queue: &'a str,
    batch: u32,
    producers: u32,
    keys: &'a Arc<Vec<String>>,
    cap: u64,
    deadline: Instant,
}

/// Runs the producers; returns the per-call histogram.
async fn produce(job: Produce<'_>, count: &Arc<AtomicU64>) -> BoxResult<Histogram<u64>> {
    let Produce {
        db,
        sync,
        sys,
        queue,
        batch,
        producers,
        keys,
        cap,
        deadline,
    } = job;
    let mut tasks = Vec::new();
    for id in 0..producers {
        let db = db.clone();
        let queue = queue.to_string();
        let keys = keys.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let c = db.connect(sync).await?;
            let mut s = Sender::new(&c, sys, &queue, batch, keys, id).await?;
            let mut h = stats::histogram();
            while Instant::now() < deadline {
                if count.fetch_add(u64::from(batch), Ordering::SeqCst) >= cap {
                    count.fetch_sub(u64::from(batch), Ordering::SeqCst);
                    break;
                }
                let t0 = Instant::now();
                let n = s.send(&c).await?;
                stats::record(&mut h, t0.elapsed().as_micros() as u64);
                if n != u64::from(batch) {
                    return Err(err(format!("{queue}: sent {n} of {batch}")));
                }
            }
            BoxResult::Ok(h)
        }));
    }
    let mut hist = stats::histogram();
    for t in tasks {
        hist.add(&t.await??).expect("same bounds");
    }
    Ok(hist)
}

/// One cell of the throughput matrix.
#[derive(Clone, Copy)]
struct Cell {
    sys: System,
    partitions: u32,
    batch: u32,
    sync: bool,
}

async fn throughput_run(
    db: &Db,
    c: &Client,
    plan: &Plan,
    cell: Cell,
    prefix: &str,
) -> BoxResult<ThroughputRun> {
    let Cell {
        sys,
        partitions,
        batch,
        sync,
    } = cell;
    let load_before = LoadAvg::now();
    let name = format!(
        "{prefix}tp_{}_{partitions}_{batch}_{}",
        sys.code(),
        if sync { "on" } else { "off" }
    );
    create(c, sys, &name, partitions).await?;
    let keys = Arc::new(balanced_keys(c, partitions, 8).await?);
    let seconds = Duration::from_secs(u64::from(plan.queue_seconds));
    let cap = u64::from(plan.queue_backlog);

    // Produce.
    let count = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let produce_call = produce(
        Produce {
            db,
            sync,
            sys,
            queue: &name,
            batch,
            producers: plan.queue_producers,
            keys: &keys,
            cap,
            deadline: t0 + seconds,
        },
        &count,
    )
    .await?;
    let produce_seconds = t0.elapsed().as_secs_f64();
    let produce_cpu = cpu_per(cpu0, cpu_now(), count.load(Ordering::SeqCst));
    let produced = count.load(Ordering::SeqCst);
    // Top up to the backlog (one connection, batches of up to 1000; synchronous_commit=off).
    if produced < cap {
        let tc = db.connect(false).await?;
        let mut s = Sender::new(&tc, sys, &name, 1000, keys.clone(), 99).await?;
        let mut have = produced;
        while have < cap {
            let n = (cap - have).min(1000) as u32;
            if n != s.batch {
                s = Sender::new(&tc, sys, &name, n, keys.clone(), 99).await?;
            }
            have += s.send(&tc).await?;
        }
        count.store(have, Ordering::SeqCst);
    }
    let backlog = count.load(Ordering::SeqCst);

    // Consume.
    let consumed = Arc::new(AtomicU64::new(0));
    let empty = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let deadline = t0 + seconds;
    let mut tasks = Vec::new();
    for p in 0..partitions {
        let db = db.clone();
        let name = name.clone();
        let consumed = consumed.clone();
        let empty = empty.clone();
        tasks.push(tokio::spawn(async move {
            let c = db.connect(sync).await?;
            let r = Receiver::new(&c, sys, &name, batch, p).await?;
            let mut h = stats::histogram();
            let mut end = Instant::now();
            while Instant::now() < deadline && consumed.load(Ordering::SeqCst) < backlog {
                let t = Instant::now();
                let n = r.cycle(&c).await?;
                if n == 0 {
                    if sys.ours() {
                        // The partition is drained (no producer is running).
                        break;
                    }
                    empty.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                stats::record(&mut h, t.elapsed().as_micros() as u64);
                consumed.fetch_add(n, Ordering::SeqCst);
                end = Instant::now();
            }
            r.finish(&c).await?;
            BoxResult::Ok((h, end))
        }));
    }
    let mut consume_cycle = stats::histogram();
    let mut last = t0;
    for t in tasks {
        let (h, end) = t.await??;
        consume_cycle.add(&h).expect("same bounds");
        last = last.max(end);
    }
    let consume_seconds = last.duration_since(t0).as_secs_f64().max(1e-6);
    let consumed = consumed.load(Ordering::SeqCst);
    let consume_cpu = cpu_per(cpu0, cpu_now(), consumed);
    drop_queue(c, sys, &name).await?;
    let run = ThroughputRun {
        system: sys.name().into(),
        partitions,
        batch,
        sync_commit: if sync { "on" } else { "off" }.into(),
        producers: plan.queue_producers,
        consumers: partitions,
        produced,
        produce_seconds: stats::round3(produce_seconds),
        produced_per_s: round1(produced as f64 / produce_seconds),
        produce_call: Latency::of(&produce_call),
        produce_cpu_us: produce_cpu,
        backlog,
        consumed,
        consume_seconds: stats::round3(consume_seconds),
        consumed_per_s: round1(consumed as f64 / consume_seconds),
        consume_cycle: Latency::of(&consume_cycle),
        consume_cpu_us: consume_cpu,
        empty_reads: empty.load(Ordering::SeqCst),
        load_before,
        load_after: LoadAvg::now(),
    };
    eprintln!(
        "    sync {:<3} {:>2} partitions batch {:>3} {:<10} produced {:>7.0}/s  consumed {:>7.0}/s (backlog {}, {} in {:.2} s)",
        run.sync_commit,
        partitions,
        batch,
        run.system,
        run.produced_per_s,
        run.consumed_per_s,
        backlog,
        consumed,
        consume_seconds
    );
    Ok(run)
}

// ---------------------------------------------------------------------------------------------
// Latency: send → handler, and takeover
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct LatencyMode {
    pub name: String,
    pub what: String,
    pub sync_commit: String,
    pub latency: Latency,
    pub failures: u32,
}

/// A connection whose notifications arrive on a channel.
async fn listening(
    db: &Db,
    sync: bool,
) -> BoxResult<(Client, mpsc::UnboundedReceiver<Notification>)> {
    let mut cfg = db.config.clone();
    cfg.options(sync_options(sync));
    let (client, mut connection) = cfg.connect(tokio_postgres::NoTls).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(msg) = poll_fn(|cx| connection.poll_message(cx)).await {
            match msg {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    Ok((client, rx))
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// lease_queue: LISTEN lease_queue, receive on the partition's notification.
    LqListen,
    /// pgmq.read_with_poll with this poll interval (ms).
    PgmqPoll(i32),
    /// pgmq.enable_notify_insert(queue, 0), LISTEN on its channel, read on the notification.
    PgmqNotify,
}

async fn send_latency(
    db: &Db,
    sync: bool,
    wait: Wait,
    n: u32,
    prefix: &str,
) -> BoxResult<LatencyMode> {
    let sys = if wait == Wait::LqListen {
        System::Keyed
    } else {
        System::Pgmq
    };
    let tag = match wait {
        Wait::LqListen => "l".to_string(),
        Wait::PgmqPoll(ms) => format!("p{ms}"),
        Wait::PgmqNotify => "n".to_string(),
    };
    let queue = format!("{prefix}lat_{tag}_{}", if sync { "on" } else { "off" });
    let producer = db.connect(sync).await?;
    create(&producer, sys, &queue, 1).await?;
    let (consumer, mut notes) = listening(db, sync).await?;
    let channel = match wait {
        Wait::LqListen => {
            consumer.batch_execute("LISTEN lease_queue").await?;
            "lease_queue".to_string()
        }
        Wait::PgmqNotify => {
            consumer
                .execute("SELECT pgmq.enable_notify_insert($1::text, 0)", &[&queue])
                .await?;
            let ch = format!("pgmq.q_{queue}.INSERT");
            consumer.batch_execute(&format!("LISTEN \"{ch}\"")).await?;
            ch
        }
        Wait::PgmqPoll(_) => String::new(),
    };
    let want_payload = format!("{queue}:0");
    let send_stmt = producer
        .prepare(if sys.ours() { LQ_SEND } else { PGMQ_SEND })
        .await?;
    let r = Receiver::new(&consumer, sys, &queue, 1, 0).await?;
    let poll = consumer
        .prepare("SELECT msg_id FROM pgmq.read_with_poll($1::text, 30, 1, 5, $2::int)")
        .await?;
    let mut rng = Rng::new(0x9e37_79b9);
    let mut h = stats::histogram();
    let mut failures = 0;
    // The consumer is idle: it found nothing (and, listening, waits).
    r.cycle(&consumer).await?;
    for i in 0..n {
        while notes.try_recv().is_ok() {}
        let delay = Duration::from_millis(rng.range(5, 30));
        let body = payload(0, u64::from(i));
        let consume = async {
            match wait {
                Wait::PgmqPoll(ms) => {
                    let rows = consumer.query(&poll, &[&queue, &ms]).await?;
                    let t = Instant::now();
                    let ids: Vec<i64> = rows.iter().map(|x| x.get(0)).collect();
                    if ids.is_empty() {
                        return BoxResult::Ok(None);
                    }
                    consumer.query_one(PGMQ_DELETE, &[&queue, &ids]).await?;
                    Ok(Some(t))
                }
                Wait::LqListen | Wait::PgmqNotify => {
                    let until = tokio::time::Instant::now() + Duration::from_secs(5);
                    loop {
                        match tokio::time::timeout_at(until, notes.recv()).await {
                            Ok(Some(note)) => {
                                if note.channel() != channel
                                    || (wait == Wait::LqListen && note.payload() != want_payload)
                                {
                                    continue;
                                }
                            }
                            _ => return Ok(None),
                        }
                        // The handler holds the message when the receive (read) returns, just
                        // before the ack (delete): that instant is timed.
                        if let Some(t) = handle_one(&consumer, &r).await? {
                            return Ok(Some(t));
                        }
                    }
                }
            }
        };
        let produce = async {
            tokio::time::sleep(delay).await;
            let t = Instant::now();
            if sys.ours() {
                producer
                    .query_one(&send_stmt, &[&queue, &Some("k"), &body])
                    .await?;
            } else {
                producer.query_one(&send_stmt, &[&queue, &body]).await?;
            }
            BoxResult::Ok(t)
        };
        let (got, sent) = tokio::join!(consume, produce);
        let sent = sent?;
        match got? {
            Some(t) => stats::record(&mut h, us(t.saturating_duration_since(sent))),
            None => failures += 1,
        }
    }
    r.finish(&consumer).await?;
    drop_queue(&producer, sys, &queue).await?;
    let (name, what) = match wait {
        Wait::LqListen => (
            "lease_queue LISTEN".to_string(),
            "consumer holds the partition, LISTEN lease_queue; on its notification receive (→ handler) then ack".to_string(),
        ),
        Wait::PgmqPoll(ms) => (
            format!("pgmq read_with_poll {ms} ms"),
            format!("consumer sits in pgmq.read_with_poll(vt 30, qty 1, 5 s, poll_interval_ms {ms}) (→ handler) then delete"),
        ),
        Wait::PgmqNotify => (
            "pgmq notify_insert LISTEN".to_string(),
            "pgmq.enable_notify_insert(queue, 0) (throttle off), LISTEN on its channel; on a notification read (→ handler) then delete".to_string(),
        ),
    };
    Ok(LatencyMode {
        name,
        what,
        sync_commit: if sync { "on" } else { "off" }.into(),
        latency: Latency::of(&h),
        failures,
    })
}

/// One receive (read) of at most one message; `Some(time it returned)` if it got one, which it
/// then settles.
async fn handle_one(c: &Client, r: &Receiver) -> BoxResult<Option<Instant>> {
    if r.sys.ours() {
        let rows = c
            .query(
                &r.read,
                &[&r.queue, &r.partition, &r.owner, &r.epoch, &r.batch],
            )
            .await?;
        let t = Instant::now();
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let batch_id: i64 = first.get(0);
        c.execute(
            &r.settle,
            &[&r.queue, &r.partition, &r.owner, &r.epoch, &batch_id],
        )
        .await?;
        Ok(Some(t))
    } else {
        let rows = c.query(&r.read, &[&r.queue, &30i32, &r.batch]).await?;
        let t = Instant::now();
        let ids: Vec<i64> = rows.iter().map(|x| x.get(0)).collect();
        if ids.is_empty() {
            return Ok(None);
        }
        c.query_one(&r.settle, &[&r.queue, &ids]).await?;
        Ok(Some(t))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Heir {
    /// lease.register_waiter's lapses_in, sleep, then claim + receive (retry every 1 ms).
    LqTimer,
    /// claim every 100 ms (no timer), then receive.
    LqPoll,
    /// pgmq.read_with_poll (poll interval 100 ms) waiting for the visibility timeout.
    PgmqPoll,
}

const TAKEOVER_TTL_MS: i64 = 1000;

async fn takeover(db: &Db, heir: Heir, n: u32, prefix: &str) -> BoxResult<LatencyMode> {
    let sys = if heir == Heir::PgmqPoll {
        System::Pgmq
    } else {
        System::Keyed
    };
    let tag = match heir {
        Heir::LqTimer => "t",
        Heir::LqPoll => "p",
        Heir::PgmqPoll => "m",
    };
    let queue = format!("{prefix}to_{tag}");
    let a = db.connect(false).await?;
    let b = db.connect(false).await?;
    create(&a, sys, &queue, 1).await?;
    let lease_key = format!("lease_queue:{queue}:0");
    let mut h = stats::histogram();
    let mut failures = 0;
    for i in 0..n {
        let body = payload(0, u64::from(i));
        let got: Option<Duration> = if sys.ours() {
            // The consumer that dies: claims, receives a batch, stops.
            let row = a
                .query_one(LQ_CLAIM, &[&queue, &0i32, &"dying", &TAKEOVER_TTL_MS])
                .await?;
            let epoch: i64 = row.get(1);
            a.query_one(LQ_SEND, &[&queue, &Some("k"), &body]).await?;
            let rows = a
                .query(LQ_RECEIVE, &[&queue, &0i32, &"dying", &epoch, &10i32])
                .await?;
            if rows.is_empty() {
                return Err(err("takeover: the dying consumer received nothing"));
            }
            let expires: SystemTime = a
                .query_one(
                    "SELECT expires_at FROM lease.inspect($1::text)",
                    &[&lease_key],
                )
                .await?
                .get(0);
            // The heir.
            if heir == Heir::LqTimer {
                let lapses_in: Option<i64> = b
                    .query_one(
                        "SELECT ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_waiter($1::text)",
                        &[&lease_key],
                    )
                    .await?
                    .get(0);
                tokio::time::sleep(Duration::from_micros(lapses_in.unwrap_or(0).max(0) as u64))
                    .await;
            }
            let step = if heir == Heir::LqTimer {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(100)
            };
            let give_up = Instant::now() + Duration::from_secs(10);
            let mut got = None;
            while Instant::now() < give_up {
                let row = b
                    .query_one(LQ_CLAIM, &[&queue, &0i32, &"heir", &30_000i64])
                    .await?;
                if row.get::<_, bool>(0) {
                    let epoch: i64 = row.get(1);
                    let rows = b
                        .query(LQ_RECEIVE, &[&queue, &0i32, &"heir", &epoch, &10i32])
                        .await?;
                    let now = SystemTime::now();
                    if let Some(first) = rows.first() {
                        got = Some(now.duration_since(expires).unwrap_or_default());
                        let batch_id: i64 = first.get(0);
                        b.execute(LQ_ACK, &[&queue, &0i32, &"heir", &epoch, &batch_id])
                            .await?;
                    }
                    b.execute(LQ_RELEASE, &[&queue, &0i32, &"heir", &epoch])
                        .await?;
                    break;
                }
                tokio::time::sleep(step).await;
            }
            got
        } else {
            a.query_one(PGMQ_SEND, &[&queue, &body]).await?;
            let row = a
                .query_one(
                    "SELECT msg_id, vt FROM pgmq.read($1::text, $2::int, 1)",
                    &[&queue, &((TAKEOVER_TTL_MS / 1000) as i32)],
                )
                .await?;
            let (id, vt): (i64, SystemTime) = (row.get(0), row.get(1));
            let rows = b
                .query(
                    "SELECT msg_id FROM pgmq.read_with_poll($1::text, 30, 1, 10, 100)",
                    &[&queue],
                )
                .await?;
            let now = SystemTime::now();
            match rows.first() {
                Some(r) if r.get::<_, i64>(0) == id => {
                    b.query_one(PGMQ_DELETE, &[&queue, &vec![id]]).await?;
                    Some(now.duration_since(vt).unwrap_or_default())
                }
                _ => None,
            }
        };
        match got {
            Some(d) => stats::record(&mut h, us(d)),
            None => failures += 1,
        }
    }
    drop_queue(&a, sys, &queue).await?;
    let (name, what) = match heir {
        Heir::LqTimer => (
            "lease_queue heir: timer",
            "the holder receives a batch and stops; the heir sleeps lease.register_waiter's lapses_in, then claim → receive (the re-issued batch), retrying every 1 ms",
        ),
        Heir::LqPoll => (
            "lease_queue heir: claim every 100 ms",
            "as above, but the heir just tries claim every 100 ms (no timer)",
        ),
        Heir::PgmqPoll => (
            "pgmq heir: read_with_poll 100 ms",
            "a consumer reads the message with vt 1 s and stops; the heir sits in read_with_poll (poll_interval_ms 100) until the message is visible again",
        ),
    };
    Ok(LatencyMode {
        name: name.into(),
        what: what.into(),
        sync_commit: "off".into(),
        latency: Latency::of(&h),
        failures,
    })
}

// ---------------------------------------------------------------------------------------------
// Bloat
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct BloatSample {
    pub t: f64,
    /// Messages produced and consumed so far: [lease_queue, pgmq].
    pub produced: [u64; 2],
    pub consumed: [u64; 2],
    pub tables: Vec<TableStat>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BloatTable {
    pub table: String,
    pub heap_start: i64,
    pub heap_end: i64,
    pub heap_max: i64,
    pub index_start: i64,
    pub index_end: i64,
    pub index_max: i64,
    pub live_max: i64,
    pub dead_max: i64,
    pub dead_end: i64,
    pub autovacuums: i64,
    pub hot_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BloatResult {
    pub seconds: u32,
    /// Offered rate per system (messages/s), in send_batch calls of `batch`.
    pub rate: u32,
    pub batch: u32,
    pub partitions: u32,
    pub consumers: u32,
    pub sync_commit: String,
    pub produced: [u64; 2],
    pub consumed: [u64; 2],
    pub tables: Vec<BloatTable>,
    pub samples: Vec<BloatSample>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

async fn bloat(db: &Db, plan: &Plan, prefix: &str) -> BoxResult<BloatResult> {
    let load_before = LoadAvg::now();
    let parts = 4u32;
    let (sys_ours, sys_pgmq) = (System::Keyed, System::Pgmq);
    let q_ours = format!("{prefix}bloat");
    let q_pgmq = format!("{prefix}bloat");
    let c = db.connect(false).await?;
    create(&c, sys_ours, &q_ours, parts).await?;
    create(&c, sys_pgmq, &q_pgmq, parts).await?;
    let keys = Arc::new(balanced_keys(&c, parts, 8).await?);
    let tables = format!(
        "'lease_queue.messages'::regclass, 'lease_queue.keys'::regclass, 'lease_queue.partitions'::regclass, \
         'lease_queue.commit_marks'::regclass, 'lease.leases'::regclass, 'pgmq.q_{q_pgmq}'::regclass"
    );
    let produced = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let consumed = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(plan.queue_bloat_seconds));
    let mut tasks = Vec::new();
    for (i, (sys, q)) in [(sys_ours, &q_ours), (sys_pgmq, &q_pgmq)]
        .into_iter()
        .enumerate()
    {
        // A producer at the offered rate.
        {
            let db = db.clone();
            let q = q.clone();
            let keys = keys.clone();
            let count = produced[i].clone();
            let batch = plan.queue_bloat_batch;
            let every =
                Duration::from_secs_f64(f64::from(batch) / f64::from(plan.queue_bloat_rate));
            tasks.push(tokio::spawn(async move {
                let c = db.connect(false).await?;
                let mut s = Sender::new(&c, sys, &q, batch, keys, 0).await?;
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while Instant::now() < deadline {
                    tick.tick().await;
                    count.fetch_add(s.send(&c).await?, Ordering::SeqCst);
                }
                BoxResult::Ok(())
            }));
        }
        for p in 0..parts {
            let db = db.clone();
            let q = q.clone();
            let count = consumed[i].clone();
            tasks.push(tokio::spawn(async move {
                let c = db.connect(false).await?;
                let r = Receiver::new(&c, sys, &q, 100, p).await?;
                while Instant::now() < deadline {
                    let n = r.cycle(&c).await?;
                    if n == 0 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    count.fetch_add(n, Ordering::SeqCst);
                }
                r.finish(&c).await?;
                BoxResult::Ok(())
            }));
        }
    }
    let mut samples = Vec::new();
    let sc = db.connect(false).await?;
    let snap = |t: f64, tables: Vec<TableStat>| BloatSample {
        t: round1(t),
        produced: [
            produced[0].load(Ordering::SeqCst),
            produced[1].load(Ordering::SeqCst),
        ],
        consumed: [
            consumed[0].load(Ordering::SeqCst),
            consumed[1].load(Ordering::SeqCst),
        ],
        tables,
    };
    samples.push(snap(0.0, table_stats_of(&sc, &tables).await?));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while Instant::now() < deadline {
        tick.tick().await;
        let st = table_stats_of(&sc, &tables).await?;
        samples.push(snap(started.elapsed().as_secs_f64(), st));
    }
    for t in tasks {
        t.await??;
    }
    samples.push(snap(
        started.elapsed().as_secs_f64(),
        table_stats_of(&sc, &tables).await?,
    ));
    let first = samples.first().expect("a sample").tables.clone();
    let last = samples.last().expect("a sample").tables.clone();
    let summary = last
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t0 = &first[i];
            let series = || samples.iter().filter_map(|s| s.tables.get(i));
            let upd = (t.updates - t0.updates) as f64;
            BloatTable {
                table: t.table.clone(),
                heap_start: t0.heap_bytes,
                heap_end: t.heap_bytes,
                heap_max: series().map(|x| x.heap_bytes).max().unwrap_or(0),
                index_start: t0.index_bytes,
                index_end: t.index_bytes,
                index_max: series().map(|x| x.index_bytes).max().unwrap_or(0),
                live_max: series().map(|x| x.live_tuples).max().unwrap_or(0),
                dead_max: series().map(|x| x.dead_tuples).max().unwrap_or(0),
                dead_end: t.dead_tuples,
                autovacuums: t.autovacuums - t0.autovacuums,
                hot_share: if upd > 0.0 {
                    stats::round3((t.hot_updates - t0.hot_updates) as f64 / upd)
                } else {
                    f64::NAN
                },
            }
        })
        .collect();
    drop_queue(&c, sys_ours, &q_ours).await?;
    drop_queue(&c, sys_pgmq, &q_pgmq).await?;
    let end = samples.last().expect("a sample");
    let res = BloatResult {
        seconds: plan.queue_bloat_seconds,
        rate: plan.queue_bloat_rate,
        batch: plan.queue_bloat_batch,
        partitions: parts,
        consumers: parts,
        sync_commit: "off".into(),
        produced: end.produced,
        consumed: end.consumed,
        tables: summary,
        samples: samples.clone(),
        load_before,
        load_after: LoadAvg::now(),
    };
    for t in &res.tables {
        eprintln!(
            "    {:<26} heap {:>6} → {:>6} KiB (max {:>6})  index {:>5} → {:>5} KiB  dead max {:>6}  autovacuums {}",
            t.table,
            t.heap_start / 1024,
            t.heap_end / 1024,
            t.heap_max / 1024,
            t.index_start / 1024,
            t.index_end / 1024,
            t.dead_max,
            t.autovacuums
        );
    }
    Ok(res)
}

// ---------------------------------------------------------------------------------------------
// The section
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

fn kib(bytes: i64) -> String {
    if bytes >= 10 * 1024 * 1024 {
        format!("{:.0} MiB", bytes as f64 / 1048576.0)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

pub fn markdown(w: &mut String, q: &QueueResult) {
    use std::fmt::Write as _;
    let _ = writeln!(
        w,
        "## Queue: pg_lease_queue {} and pgmq {} (PyPI package pgmq {}, {}), same server, same run\n",
        q.lease_queue_version, q.pgmq.sql_version, q.pgmq.pypi_version, q.pgmq.installed
    );
    for (n, what) in &q.systems {
        let _ = writeln!(w, "- `{n}`: {what}");
    }
    let _ = writeln!(w);
    if let Some(first) = q.throughput.first() {
        let _ = writeln!(
            w,
            "### Throughput (messages/s; {} producers; consumers = partitions; payload ~100 B; produce phase ≤ {:.0} s, then consume a backlog of {} for ≤ {:.0} s)\n",
            first.producers,
            q.throughput
                .iter()
                .map(|r| r.produce_seconds)
                .fold(0.0, f64::max)
                .ceil(),
            first.backlog,
            q.throughput
                .iter()
                .map(|r| r.consume_seconds)
                .fold(0.0, f64::max)
                .ceil()
        );
        for sync in ["off", "on"] {
            let rs: Vec<&ThroughputRun> = q
                .throughput
                .iter()
                .filter(|r| r.sync_commit == sync)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let _ = writeln!(w, "synchronous_commit={sync}:\n");
            let _ = writeln!(
                w,
                "| partitions | batch | system | produced/s | send call p50 / p99 | server CPU / msg produced | consumed/s | cycle p50 / p99 | server CPU / msg consumed | empty reads | load |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
            );
            for r in rs {
                let cpu = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.0} µs"));
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {:.0} | {} / {} | {} | {:.0} | {} / {} | {} | {} | {:.2}→{:.2} |",
                    r.partitions,
                    r.batch,
                    r.system,
                    r.produced_per_s,
                    ms(r.produce_call.p50_us),
                    ms(r.produce_call.p99_us),
                    cpu(r.produce_cpu_us),
                    r.consumed_per_s,
                    ms(r.consume_cycle.p50_us),
                    ms(r.consume_cycle.p99_us),
                    cpu(r.consume_cpu_us),
                    r.empty_reads,
                    r.load_before.one,
                    r.load_after.one
                );
            }
            let _ = writeln!(w);
        }
    }
    if !q.latency.is_empty() {
        let n = q.latency[0].latency.count + u64::from(q.latency[0].failures);
        let _ = writeln!(
            w,
            "### send → handler, idle waiting consumer ({n} samples per mode; the producer sends one message, autocommit, after a random 5–30 ms pause)\n"
        );
        let _ = writeln!(
            w,
            "| synchronous_commit | mode | p50 | p90 | p99 | max | failures | how |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for m in &q.latency {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                m.sync_commit,
                m.name,
                ms(m.latency.p50_us),
                ms(m.latency.p90_us),
                ms(m.latency.p99_us),
                ms(m.latency.max_us),
                m.failures,
                m.what
            );
        }
        let _ = writeln!(w);
    }
    if !q.takeover.is_empty() {
        let _ = writeln!(
            w,
            "### Takeover after a consumer stops (ttl / visibility timeout {} ms; from the lapse to the heir holding the message)\n",
            q.takeover_ttl_ms
        );
        let _ = writeln!(
            w,
            "| mode | samples | p50 | p90 | max | failures | how |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for m in &q.takeover {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.name,
                m.latency.count,
                ms(m.latency.p50_us),
                ms(m.latency.p90_us),
                ms(m.latency.max_us),
                m.failures,
                m.what
            );
        }
        let _ = writeln!(w);
    }
    if let Some(b) = &q.bloat {
        let _ = writeln!(
            w,
            "### Bloat under steady load ({} s; per system {} messages/s offered in send_batch calls of {}; {} partitions / consumers each, receive or read of up to 100; synchronous_commit={}; autovacuum on, default settings)\n",
            b.seconds, b.rate, b.batch, b.consumers, b.sync_commit
        );
        let _ = writeln!(
            w,
            "Produced / consumed: lease_queue {} / {}, pgmq {} / {}.\n",
            b.produced[0], b.consumed[0], b.produced[1], b.consumed[1]
        );
        let _ = writeln!(
            w,
            "| table | heap start → end (max) | indexes start → end (max) | max live | max dead tuples | dead at end | autovacuums | HOT share of updates |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for t in &b.tables {
            let _ = writeln!(
                w,
                "| {} | {} → {} ({}) | {} → {} ({}) | {} | {} | {} | {} | {} |",
                t.table,
                kib(t.heap_start),
                kib(t.heap_end),
                kib(t.heap_max),
                kib(t.index_start),
                kib(t.index_end),
                kib(t.index_max),
                t.live_max,
                t.dead_max,
                t.dead_end,
                t.autovacuums,
                if t.hot_share.is_finite() {
                    format!("{:.1} %", t.hot_share * 100.0)
                } else {
                    "–".into()
                }
            );
        }
        let _ = writeln!(w);
    }
}
