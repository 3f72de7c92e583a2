//! Tuple writes, WAL and storage per message, end to end: one producer sends N messages
//! (send_batch of `batch`, or send at batch 1), then one consumer consumes them (batch `batch`)
//! and acks / deletes them, nothing else running in the database.
//!
//! - **Tuple writes**: the sum over the system's tables of `n_tup_ins + n_tup_upd + n_tup_del`
//!   (pg_stat_user_tables; an update counts once whether HOT or not, also one that changes no
//!   value; row locks are not writes) between readings taken before the producer starts, between
//!   the phases and after the consumer ends. Ours: every table of the schemas `lease_queue` and
//!   `lease`; pgmq: the queue's `q_` and `a_` tables and pgmq's own tables (meta, ...).
//! - **WAL**: `pg_current_wal_insert_lsn()` at the same readings (the whole cluster's WAL: nothing
//!   else runs), with pg_stat_wal's records and full-page images. One CHECKPOINT (with a
//!   superuser) before the first cycle and none during them, so a page pays its full-page image
//!   the first time a cycle touches it, not in every cycle; the tables are vacuumed before each
//!   cycle (contenders::vacuum).
//! - **Storage**: `pg_total_relation_size` (heap, indexes, toast) of the same tables after the
//!   produce phase minus before it, per message queued. Only the first run on fresh tables counts
//!   (the section's first: ours' tables are shared by all queues, and space freed by earlier runs
//!   would be reused); pgmq's queue table is new in every run.
//!
//! The counters are read when they have settled, observed rather than slept for: every phase runs
//! on its own connections, which (PostgreSQL 15+) call `pg_stat_force_next_flush()` and then
//! close; a reading waits until those backends have left pg_stat_activity (a backend flushes its
//! counters before it leaves) and then until consecutive readings agree (2 readings 50 ms apart on
//! 15+, where the counters are in shared memory; 4 readings 250 ms apart on 14, whose statistics
//! collector receives them asynchronously and serves a file at most 500 ms old). Set-up (creating
//! the queue, claiming the partition) runs on a connection that is closed before the first
//! reading.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;

use super::contenders::{self, Consumer, Contender};
use super::{KEYS, in_order};
use crate::plan::Plan;
use crate::server::Db;
use crate::stats::{LoadAvg, Spread, round3};
use crate::{BoxResult, err};

/// One table's counters over one phase.
#[derive(Clone, Debug, Serialize)]
pub struct TableDelta {
    pub table: String,
    pub ins: i64,
    pub upd: i64,
    pub hot_upd: i64,
    pub del: i64,
}

impl TableDelta {
    pub fn writes(&self) -> i64 {
        self.ins + self.upd + self.del
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// `produce` or `consume` (consume + ack / read + delete).
    pub phase: String,
    pub seconds: f64,
    /// Tables with any write in the phase.
    pub tables: Vec<TableDelta>,
    pub tuple_writes: i64,
    pub wal_bytes: i64,
    pub wal_records: Option<i64>,
    pub wal_fpi: Option<i64>,
    /// autovacuum and autoanalyze runs (any table of the database) that ended during the phase.
    pub autovacuums: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Storage {
    pub contender: String,
    pub messages: u64,
    pub before_bytes: i64,
    pub after_bytes: i64,
    pub per_message: f64,
    /// (table, bytes before, bytes after), tables that grew.
    pub tables: Vec<(String, i64, i64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CycleRun {
    pub contender: String,
    pub round: u32,
    pub batch: u32,
    pub messages: u64,
    pub produce: Phase,
    pub consume: Phase,
    pub storage: Storage,
    pub load_after: f64,
}

/// One table in one phase, per message: the median over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TableRate {
    pub table: String,
    pub phase: String,
    pub ins: f64,
    pub upd: f64,
    pub hot_upd: f64,
    pub del: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CycleContender {
    pub contender: String,
    pub writes_per_msg: Spread,
    pub produce_writes_per_msg: Spread,
    pub consume_writes_per_msg: Spread,
    pub wal_per_msg: Spread,
    pub produce_wal_per_msg: Spread,
    pub consume_wal_per_msg: Spread,
    pub fpi: Spread,
    pub tables: Vec<TableRate>,
    pub runs: Vec<CycleRun>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CycleRatio {
    pub contender: String,
    pub vs: String,
    pub writes: Spread,
    pub wal: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct CyclePoint {
    pub batch: u32,
    pub messages: u64,
    pub contenders: Vec<CycleContender>,
    pub ratios: Vec<CycleRatio>,
}

impl CyclePoint {
    pub fn contender(&self, name: &str) -> Option<&CycleContender> {
        self.contenders.iter().find(|c| c.contender == name)
    }
}

/// Both batch sizes, every contender, in rounds; and the storage of the first runs.
pub async fn run(
    db: &Db,
    plan: &Plan,
    who: &[Contender],
    prefix: &str,
) -> BoxResult<(Vec<CyclePoint>, Vec<Storage>)> {
    let obs = db.connect(false).await?;
    let su = db.connect_superuser().await?;
    let v: i32 = obs
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .get(0);
    let pg15 = v >= 150_000;
    // One checkpoint before the first cycle, none during them (the section's first minute, well
    // within checkpoint_timeout): a page pays a full-page image the first time any cycle touches
    // it, as in a steady state where checkpoints are minutes apart.
    if let Some(su) = &su {
        su.batch_execute("CHECKPOINT").await?;
    }
    let mut points = Vec::new();
    let mut storage: Vec<Storage> = Vec::new();
    for (batch, n) in [
        (100u32, plan.hotpath_cycle_messages),
        (1, plan.hotpath_cycle_messages_single),
    ] {
        let mut runs = Vec::new();
        for round in 0..plan.hotpath_cycle_rounds {
            for w in in_order(who, round) {
                let ctx = Ctx {
                    db,
                    obs: &obs,
                    pg15,
                };
                let r = cycle(&ctx, w, batch, n, round, prefix).await?;
                eprintln!(
                    "    batch {batch:>3} round {round} {:<28} tuple writes/msg {:.2} ({:.2} + {:.2})  WAL/msg {:.0} B ({:.0} + {:.0}; fpi {}+{})  storage/msg {:.0} B",
                    r.contender,
                    (r.produce.tuple_writes + r.consume.tuple_writes) as f64 / n as f64,
                    r.produce.tuple_writes as f64 / n as f64,
                    r.consume.tuple_writes as f64 / n as f64,
                    (r.produce.wal_bytes + r.consume.wal_bytes) as f64 / n as f64,
                    r.produce.wal_bytes as f64 / n as f64,
                    r.consume.wal_bytes as f64 / n as f64,
                    r.produce.wal_fpi.unwrap_or(-1),
                    r.consume.wal_fpi.unwrap_or(-1),
                    r.storage.per_message
                );
                // The first run of each contender's produce path on fresh tables: ours' first
                // run of the section, and every pgmq run (a new table each time).
                let produce_path = if w == Contender::OursAar {
                    Contender::Ours
                } else {
                    w
                };
                if batch == 100
                    && round == 0
                    && w != Contender::OursAar
                    && !storage.iter().any(|s| s.contender == produce_path.name())
                {
                    storage.push(r.storage.clone());
                }
                runs.push(r);
            }
        }
        points.push(point(batch, n, who, runs));
    }
    Ok((points, storage))
}

struct Ctx<'a> {
    db: &'a Db,
    obs: &'a Client,
    pg15: bool,
}

/// A reading of the system's tables and the WAL.
#[derive(Clone, Debug)]
struct Snap {
    /// table → [ins, upd, hot_upd, del]
    counts: BTreeMap<String, [i64; 4]>,
    sizes: BTreeMap<String, i64>,
    lsn: u64,
    wal: Option<(i64, i64)>,
    autovacuums: i64,
    at: Instant,
}

async fn snap(c: &Client, who: Contender, queue: &str) -> BoxResult<Snap> {
    c.batch_execute("SELECT pg_stat_clear_snapshot()").await?;
    let filter = if who.ours() {
        "s.schemaname IN ('lease_queue', 'lease')"
    } else {
        "s.schemaname = 'pgmq' AND (s.relname IN ('q_' || lower($1), 'a_' || lower($1)) \
         OR (s.relname NOT LIKE 'q\\_%' AND s.relname NOT LIKE 'a\\_%'))"
    };
    let sql = format!(
        "SELECT s.schemaname || '.' || s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd,
                s.n_tup_del, pg_total_relation_size(s.relid)
           FROM pg_stat_user_tables AS s WHERE {filter} AND $1::text IS NOT NULL"
    );
    let rows = c.query(&sql, &[&queue]).await?;
    let mut counts = BTreeMap::new();
    let mut sizes = BTreeMap::new();
    // pgmq's tables are named after the queue, a new one per run: one name for all runs.
    let (q, a) = (
        format!("pgmq.q_{}", queue.to_lowercase()),
        format!("pgmq.a_{}", queue.to_lowercase()),
    );
    for r in rows {
        let mut t: String = r.get(0);
        if t == q {
            t = "pgmq.q_{queue}".into();
        } else if t == a {
            t = "pgmq.a_{queue}".into();
        }
        counts.insert(t.clone(), [r.get(1), r.get(2), r.get(3), r.get(4)]);
        sizes.insert(t, r.get(5));
    }
    let lsn: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0);
    let wal = match c
        .query_opt(
            "SELECT wal_records::bigint, wal_fpi::bigint FROM pg_stat_wal",
            &[],
        )
        .await
    {
        Ok(Some(r)) => Some((r.get(0), r.get(1))),
        _ => None,
    };
    let autovacuums: i64 = c
        .query_one(
            "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables",
            &[],
        )
        .await?
        .get(0);
    Ok(Snap {
        counts,
        sizes,
        lsn: parse_lsn(&lsn)?,
        wal,
        autovacuums,
        at: Instant::now(),
    })
}

fn parse_lsn(s: &str) -> BoxResult<u64> {
    let (hi, lo) = s
        .split_once('/')
        .ok_or_else(|| err(format!("not an LSN: {s}")))?;
    Ok((u64::from_str_radix(hi, 16)? << 32) | u64::from_str_radix(lo, 16)?)
}

/// Waits until the backends `pids` have gone and the counters agree over consecutive readings.
async fn settled(ctx: &Ctx<'_>, who: Contender, queue: &str, pids: &[i32]) -> BoxResult<Snap> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let left: i64 = ctx
            .obs
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                &[&pids],
            )
            .await?
            .get(0);
        if left == 0 {
            break;
        }
        if Instant::now() > give_up {
            return Err(err("hotpath: a phase's backends did not exit within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (need, every) = if ctx.pg15 {
        (2, Duration::from_millis(50))
    } else {
        (4, Duration::from_millis(250))
    };
    let mut last = snap(ctx.obs, who, queue).await?;
    let mut same = 1;
    while same < need {
        if Instant::now() > give_up {
            return Err(err("hotpath: table statistics did not settle within 60 s"));
        }
        tokio::time::sleep(every).await;
        let s = snap(ctx.obs, who, queue).await?;
        if s.counts == last.counts {
            same += 1;
        } else {
            same = 1;
        }
        last = s;
    }
    Ok(last)
}

async fn pid(c: &Client) -> BoxResult<i32> {
    Ok(c.query_one("SELECT pg_backend_pid()", &[]).await?.get(0))
}

/// Ends a phase's connection: its counters flushed (15+) and the backend gone.
async fn close(ctx: &Ctx<'_>, c: Client) -> BoxResult<()> {
    if ctx.pg15 {
        c.batch_execute("SELECT pg_stat_force_next_flush()").await?;
    }
    drop(c);
    Ok(())
}

fn phase(name: &str, a: &Snap, b: &Snap) -> Phase {
    let mut tables = Vec::new();
    for (t, after) in &b.counts {
        let before = a.counts.get(t).copied().unwrap_or([0; 4]);
        let d = TableDelta {
            table: t.clone(),
            ins: after[0] - before[0],
            upd: after[1] - before[1],
            hot_upd: after[2] - before[2],
            del: after[3] - before[3],
        };
        if d.writes() != 0 {
            tables.push(d);
        }
    }
    let tuple_writes = tables.iter().map(TableDelta::writes).sum();
    let d = |f: fn(&(i64, i64)) -> i64| match (&a.wal, &b.wal) {
        (Some(x), Some(y)) => Some(f(y) - f(x)),
        _ => None,
    };
    Phase {
        phase: name.into(),
        seconds: round3(b.at.duration_since(a.at).as_secs_f64()),
        tables,
        tuple_writes,
        wal_bytes: b.lsn.saturating_sub(a.lsn) as i64,
        wal_records: d(|w| w.0),
        wal_fpi: d(|w| w.1),
        autovacuums: b.autovacuums - a.autovacuums,
    }
}

async fn cycle(
    ctx: &Ctx<'_>,
    who: Contender,
    batch: u32,
    n: u64,
    round: u32,
    prefix: &str,
) -> BoxResult<CycleRun> {
    let queue = format!("{prefix}hp_w{batch}_{}_{round}", who.code());
    // Set-up on its own connection: the queue, the keys, ours' claim of partition 0.
    let setup = ctx.db.connect(false).await?;
    contenders::create(&setup, who, &queue, 1).await?;
    let keys = contenders::keys(&setup, 1, KEYS).await?;
    let epoch = if who.ours() {
        Some(contenders::claim(&setup, &queue, 0).await?)
    } else {
        None
    };
    let setup_pid = pid(&setup).await?;
    close(ctx, setup).await?;
    let producer = ctx.db.connect(false).await?;
    let producer_pid = pid(&producer).await?;
    let mut sender = contenders::sender(&producer, who, &queue, batch, keys, 0).await?;
    contenders::vacuum(ctx.db).await?;
    let s0 = settled(ctx, who, &queue, &[setup_pid]).await?;

    // Produce.
    let mut sent = 0;
    while sent < n {
        sent += sender.send(&producer).await?;
    }
    close(ctx, producer).await?;
    let s1 = settled(ctx, who, &queue, &[producer_pid]).await?;

    // Consume and ack (delete).
    let consumer = ctx.db.connect(false).await?;
    let consumer_pid = pid(&consumer).await?;
    let mut cons = Consumer::with_epoch(&consumer, who, &queue, batch, 0, epoch).await?;
    let mut got = 0;
    loop {
        let k = cons.step(&consumer).await?;
        if k == 0 {
            break;
        }
        got += k;
    }
    cons.settle(&consumer).await?;
    close(ctx, consumer).await?;
    let s2 = settled(ctx, who, &queue, &[consumer_pid]).await?;
    if got != n {
        return Err(err(format!(
            "{queue}: consumed {got} of the {n} messages sent"
        )));
    }
    // Tear-down on a connection of its own, gone before the next cycle's first reading.
    let teardown = ctx.db.connect(false).await?;
    let teardown_pid = pid(&teardown).await?;
    cons.finish(&teardown).await?;
    contenders::drop_queue(&teardown, who, &queue).await?;
    close(ctx, teardown).await?;
    settled(ctx, who, &queue, &[teardown_pid]).await?;

    let before: i64 = s0.sizes.values().sum();
    let after: i64 = s1.sizes.values().sum();
    let storage = Storage {
        contender: who.name().into(),
        messages: n,
        before_bytes: before,
        after_bytes: after,
        per_message: round3((after - before) as f64 / n as f64),
        tables: s1
            .sizes
            .iter()
            .map(|(t, b)| (t.clone(), s0.sizes.get(t).copied().unwrap_or(0), *b))
            .filter(|(_, a, b)| a != b)
            .collect(),
    };
    Ok(CycleRun {
        contender: who.name().into(),
        round,
        batch,
        messages: n,
        produce: phase("produce", &s0, &s1),
        consume: phase("consume", &s1, &s2),
        storage,
        load_after: LoadAvg::now().one,
    })
}

fn point(batch: u32, n: u64, who: &[Contender], runs: Vec<CycleRun>) -> CyclePoint {
    let per = |x: i64| x as f64 / n as f64;
    let contenders: Vec<CycleContender> = who
        .iter()
        .map(|w| {
            let mine: Vec<CycleRun> = runs
                .iter()
                .filter(|r| r.contender == w.name())
                .cloned()
                .collect();
            let f =
                |g: &dyn Fn(&CycleRun) -> f64| Spread::of(&mine.iter().map(g).collect::<Vec<_>>());
            let mut keys: Vec<(String, String)> = Vec::new();
            for r in &mine {
                for p in [&r.produce, &r.consume] {
                    for t in &p.tables {
                        let k = (p.phase.clone(), t.table.clone());
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                    }
                }
            }
            let tables = keys
                .into_iter()
                .map(|(ph, t)| {
                    let m = |g: fn(&TableDelta) -> i64| {
                        f(&|r: &CycleRun| {
                            let p = if ph == "produce" {
                                &r.produce
                            } else {
                                &r.consume
                            };
                            per(p.tables.iter().find(|x| x.table == t).map_or(0, g))
                        })
                        .median
                    };
                    TableRate {
                        ins: m(|x| x.ins),
                        upd: m(|x| x.upd),
                        hot_upd: m(|x| x.hot_upd),
                        del: m(|x| x.del),
                        table: t,
                        phase: ph,
                    }
                })
                .collect();
            CycleContender {
                contender: w.name().into(),
                writes_per_msg: f(&|r| per(r.produce.tuple_writes + r.consume.tuple_writes)),
                produce_writes_per_msg: f(&|r| per(r.produce.tuple_writes)),
                consume_writes_per_msg: f(&|r| per(r.consume.tuple_writes)),
                wal_per_msg: f(&|r| per(r.produce.wal_bytes + r.consume.wal_bytes)),
                produce_wal_per_msg: f(&|r| per(r.produce.wal_bytes)),
                consume_wal_per_msg: f(&|r| per(r.consume.wal_bytes)),
                fpi: f(&|r| {
                    (r.produce.wal_fpi.unwrap_or(0) + r.consume.wal_fpi.unwrap_or(0)) as f64
                }),
                tables,
                runs: mine,
            }
        })
        .collect();
    let pgmq = Contender::Pgmq.name();
    let ratio = |a: &str, g: fn(&CycleRun) -> i64| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.contender == a)
            .filter_map(|r| {
                let m = runs
                    .iter()
                    .find(|x| x.contender == pgmq && x.round == r.round)?;
                (g(m) > 0).then(|| g(r) as f64 / g(m) as f64)
            })
            .collect();
        Spread::of(&v)
    };
    let ratios = who
        .iter()
        .filter(|w| w.ours())
        .map(|w| CycleRatio {
            contender: w.name().into(),
            vs: pgmq.into(),
            writes: ratio(w.name(), |r| {
                r.produce.tuple_writes + r.consume.tuple_writes
            }),
            wal: ratio(w.name(), |r| r.produce.wal_bytes + r.consume.wal_bytes),
        })
        .collect();
    CyclePoint {
        batch,
        messages: n,
        contenders,
        ratios,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_lsn;

    #[test]
    fn lsn_text_to_bytes() {
        assert_eq!(parse_lsn("0/16B3748").unwrap(), 0x16B_3748);
        assert_eq!(parse_lsn("1/0").unwrap(), 1 << 32);
        assert!(parse_lsn("16B3748").is_err());
    }
}
