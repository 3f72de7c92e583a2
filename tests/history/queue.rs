//! The queue's history test (docs/QUEUE.md §3): concurrent producers (some of whose transactions roll
//! back) and consumers that crash (drop their connection mid-batch), have their backend terminated,
//! pause past their ttl (their late ack must be fenced), release with force, nack at random, and meet
//! poison messages. Every consumer works in the exactly-once mode: its effects (a row per handled
//! message in `effects`) are written in the transaction that acks the batch.
//!
//! The checker uses evidence independent of the queue's own bookkeeping: the commit order of the
//! producers' and consumers' transactions from `pg_xact_commit_timestamp` (the server runs with
//! `track_commit_timestamp`), and what the clients recorded. It checks:
//! - no committed message is lost: each has exactly one effect, or is a dead letter (poison messages
//!   always are, and have no effect); a rolled-back message has neither;
//! - exactly once: no message has two effects (a zombie's effects never commit);
//! - fencing: on each partition, the epochs of committed acks never go back in commit order;
//! - per-key order: each key's effects, in the order their transactions committed, are that key's
//!   committed messages in their producers' commit order (dead letters removed);
//! - crash/takeover cycles happened (at least `PGLEASE_QUEUE_CYCLES`, default 12; the soak runs 100+).
//!
//! Environment: `PGLEASE_HISTORY_SEED` as for the lease history; `PGLEASE_QUEUE_CYCLES`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use pglease_tests::{ADMIN, APP, server};
use tokio_postgres::{Client, NoTls};

use crate::rng::Rng;

const QUEUE: &str = "hist";
const PARTITIONS: i32 = 4;
const KEYS: u64 = 8;
const MAX_ATTEMPTS: i32 = 8;
const TTL_MS: u64 = 300;

fn cycles_wanted() -> u64 {
    std::env::var("PGLEASE_QUEUE_CYCLES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(12)
}

/// A message a producer sent, in a transaction of id `xid`, as the `pos`-th send of it.
#[derive(Debug, Clone)]
struct Sent {
    id: i64,
    key: String,
    poison: bool,
    xid: i64,
    pos: usize,
}

/// What the producers and consumers saw.
#[derive(Debug, Default)]
struct Record {
    /// Messages of transactions whose COMMIT returned.
    committed: Vec<Sent>,
    /// Messages of transactions rolled back.
    rolled_back: Vec<i64>,
    /// Acks (in a transaction) whose COMMIT returned, and acks refused by the fence.
    acks: u64,
    fenced: u64,
    /// Crash/takeover cycles: a consumer died (dropped, terminated, paused past its ttl) holding a
    /// batch, and another incarnation later received it again.
    deaths: u64,
}

async fn connect(db: &str, role: &str) -> Client {
    let s = server();
    let (client, connection) = tokio_postgres::connect(&s.conninfo(db, role), NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect as {role}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn producer(
    db: String,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    record: Arc<std::sync::Mutex<Record>>,
) {
    let c = connect(&db, APP).await;
    while !stop.load(Ordering::Relaxed) {
        c.batch_execute("BEGIN").await.unwrap();
        let xid: i64 = c
            .query_one("SELECT txid_current()", &[])
            .await
            .unwrap()
            .get(0);
        let mut sent = Vec::new();
        for pos in 0..rng.range(1, 4) as usize {
            let key = format!("k{}", rng.below(KEYS));
            let poison = rng.chance(3);
            let payload = format!("{{\"poison\": {poison}}}");
            let id: i64 = c
                .query_one(
                    "SELECT lease_queue.send($1, $2, $3::text::jsonb)",
                    &[&QUEUE, &key, &payload],
                )
                .await
                .unwrap()
                .get(0);
            sent.push(Sent {
                id,
                key,
                poison,
                xid,
                pos,
            });
        }
        if rng.chance(20) {
            c.batch_execute("ROLLBACK").await.unwrap();
            record
                .lock()
                .unwrap()
                .rolled_back
                .extend(sent.iter().map(|s| s.id));
        } else {
            c.batch_execute("COMMIT").await.unwrap();
            record.lock().unwrap().committed.extend(sent);
        }
        tokio::time::sleep(Duration::from_millis(rng.range(0, 8) as u64)).await;
    }
}

/// What a consumer incarnation decided to do with a batch.
enum Fate {
    Settle,
    Crash,
    Terminated,
    Pause,
    ForceRelease,
}

/// One consumer "process": incarnations one after another (a new owner name each), each claiming a
/// partition and working it until it dies or the run stops.
async fn consumer(
    db: String,
    index: usize,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    record: Arc<std::sync::Mutex<Record>>,
    incarnations: Arc<AtomicU64>,
) {
    let su = connect(&db, "postgres").await;
    while !stop.load(Ordering::Relaxed) {
        let owner = format!("c{index}-{}", incarnations.fetch_add(1, Ordering::Relaxed));
        let c = connect(&db, APP).await;
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let ttl = format!("{TTL_MS} milliseconds");
        'incarnation: while !stop.load(Ordering::Relaxed) {
            let row = c
                .query_one(
                    "SELECT claimed, partition, epoch FROM lease_queue.claim_any($1, $2, $3::text::interval)",
                    &[&QUEUE, &owner, &ttl],
                )
                .await
                .unwrap();
            if !row.get::<_, bool>(0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let (p, epoch): (i32, i64) = (row.get(1), row.get(2));
            loop {
                if stop.load(Ordering::Relaxed) {
                    break 'incarnation;
                }
                let batch = match c
                    .query(
                        "SELECT batch_id, id, key, payload->>'poison' = 'true' FROM lease_queue.receive($1, $2, $3, $4, 5)",
                        &[&QUEUE, &p, &owner, &epoch],
                    )
                    .await
                {
                    Ok(rows) => rows,
                    // Lost the partition (lapsed after a slow step, or taken over): claim another.
                    Err(e) if e.code().is_some_and(|c| c.code().starts_with("LE")) => continue 'incarnation,
                    Err(e) => panic!("receive: {e}"),
                };
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let batch_id: i64 = batch[0].get(0);
                let fate = match rng.below(100) {
                    0..=3 => Fate::Crash,
                    4..=6 => Fate::Terminated,
                    7..=9 => Fate::Pause,
                    10..=11 => Fate::ForceRelease,
                    _ => Fate::Settle,
                };
                match fate {
                    Fate::Crash => {
                        // The process dies holding the batch: its connection goes away.
                        record.lock().unwrap().deaths += 1;
                        drop(c);
                        break 'incarnation;
                    }
                    Fate::Terminated => {
                        record.lock().unwrap().deaths += 1;
                        su.execute("SELECT pg_terminate_backend($1)", &[&pid])
                            .await
                            .unwrap();
                        break 'incarnation;
                    }
                    Fate::ForceRelease => {
                        c.execute(
                            "SELECT lease_queue.release($1, $2, $3, $4, true)",
                            &[&QUEUE, &p, &owner, &epoch],
                        )
                        .await
                        .unwrap();
                        continue 'incarnation;
                    }
                    Fate::Pause | Fate::Settle => {}
                }
                let paused = matches!(fate, Fate::Pause);
                if paused {
                    // Past the ttl: by the ack, the lease lapsed (and maybe another took over).
                    tokio::time::sleep(Duration::from_millis(TTL_MS * 2 + 50)).await;
                }
                // Handle in order, in the transaction that acks: effects, nacks, the ack.
                let result: Result<(), tokio_postgres::Error> = async {
                    c.batch_execute("BEGIN").await?;
                    let mut failed_keys = BTreeSet::new();
                    for m in &batch {
                        let (id, key, poison): (i64, Option<String>, Option<bool>) =
                            (m.get(1), m.get(2), m.get(3));
                        let key = key.expect("the workload sends keyed messages");
                        if failed_keys.contains(&key) {
                            continue; // sent back undelivered by the nack of an earlier one
                        }
                        if poison == Some(true) || rng.chance(4) {
                            c.query_one(
                                "SELECT lease_queue.nack($1, $2, $3, $4, $5, $6)",
                                &[&QUEUE, &p, &owner, &epoch, &batch_id, &id],
                            )
                            .await?;
                            failed_keys.insert(key);
                            continue;
                        }
                        c.execute(
                            "INSERT INTO effects (id, key, partition, epoch) VALUES ($1, $2, $3, $4)",
                            &[&id, &key, &p, &epoch],
                        )
                        .await?;
                    }
                    c.execute(
                        "SELECT lease_queue.ack($1, $2, $3, $4, $5)",
                        &[&QUEUE, &p, &owner, &epoch, &batch_id],
                    )
                    .await?;
                    c.batch_execute("COMMIT").await
                }
                .await;
                match result {
                    Ok(()) => {
                        // The lease lapsed during the pause: the fence must have refused the ack.
                        assert!(
                            !paused,
                            "{owner}: an ack after a pause past the ttl committed"
                        );
                        record.lock().unwrap().acks += 1;
                    }
                    Err(e) if e.code().is_some_and(|c| c.code().starts_with("LE")) => {
                        c.batch_execute("ROLLBACK").await.unwrap();
                        let mut r = record.lock().unwrap();
                        r.fenced += 1;
                        if paused {
                            r.deaths += 1;
                        }
                        continue 'incarnation;
                    }
                    Err(e) => panic!("settling batch {batch_id}: {e}"),
                }
            }
        }
    }
}

/// Handles what is left with one well-behaved consumer, so every committed message is settled.
async fn drain(db: &str) {
    let c = connect(db, APP).await;
    for p in 0..PARTITIONS {
        // Former holders' leases lapse within the ttl; claim until granted.
        let epoch = loop {
            let row = c
                .query_one(
                    "SELECT claimed, epoch FROM lease_queue.claim($1, $2, 'drain', '1 hour')",
                    &[&QUEUE, &p],
                )
                .await
                .unwrap();
            if row.get::<_, bool>(0) {
                break row.get::<_, i64>(1);
            }
            tokio::time::sleep(Duration::from_millis(TTL_MS / 3)).await;
        };
        loop {
            let batch = c
                .query(
                    "SELECT batch_id, id, key, payload->>'poison' = 'true' FROM lease_queue.receive($1, $2, 'drain', $3, 50)",
                    &[&QUEUE, &p, &epoch],
                )
                .await
                .unwrap();
            if batch.is_empty() {
                let due: Option<std::time::SystemTime> = c
                    .query_one("SELECT lease_queue.next_due($1, $2)", &[&QUEUE, &p])
                    .await
                    .unwrap()
                    .get(0);
                if due.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            let batch_id: i64 = batch[0].get(0);
            c.batch_execute("BEGIN").await.unwrap();
            let mut failed_keys = BTreeSet::new();
            for m in &batch {
                let (id, key, poison): (i64, String, Option<bool>) = (m.get(1), m.get(2), m.get(3));
                if failed_keys.contains(&key) {
                    continue;
                }
                if poison == Some(true) {
                    c.query_one(
                        "SELECT lease_queue.nack($1, $2, 'drain', $3, $4, $5)",
                        &[&QUEUE, &p, &epoch, &batch_id, &id],
                    )
                    .await
                    .unwrap();
                    failed_keys.insert(key);
                    continue;
                }
                c.execute(
                    "INSERT INTO effects (id, key, partition, epoch) VALUES ($1, $2, $3, $4)",
                    &[&id, &key, &p, &epoch],
                )
                .await
                .unwrap();
            }
            c.execute(
                "SELECT lease_queue.ack($1, $2, 'drain', $3, $4)",
                &[&QUEUE, &p, &epoch, &batch_id],
            )
            .await
            .unwrap();
            c.batch_execute("COMMIT").await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_histories_lose_nothing_apply_effects_once_fence_zombies_and_keep_key_order() {
    let seed = crate::seed();
    eprintln!("queue history seed: {seed:#x}");
    let s = server();
    let db = s.fresh_db_with_queue("queue_history");
    let admin = connect(&db, ADMIN).await;
    admin
        .batch_execute(&format!(
            "SELECT lease_queue.create_queue('{QUEUE}', {PARTITIONS}, {MAX_ATTEMPTS});
             SELECT lease_queue.grant_queue('{QUEUE}', '{APP}', 'produce'),
                    lease_queue.grant_queue('{QUEUE}', '{APP}', 'consume');
             CREATE TABLE effects (id bigint NOT NULL, key text NOT NULL, partition int NOT NULL,
                                   epoch bigint NOT NULL, xid bigint NOT NULL DEFAULT txid_current(),
                                   seq bigserial);
             GRANT INSERT, SELECT ON effects TO {APP}; GRANT USAGE ON SEQUENCE effects_seq_seq TO {APP};"
        ))
        .await
        .unwrap();
    let on: String = admin
        .query_one("SHOW track_commit_timestamp", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(on, "on", "the test servers track commit timestamps");

    let rng = Rng::new(seed);
    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(std::sync::Mutex::new(Record::default()));
    let incarnations = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(tokio::spawn(producer(
            db.clone(),
            rng.fork(i),
            Arc::clone(&stop),
            Arc::clone(&record),
        )));
    }
    for i in 0..4 {
        tasks.push(tokio::spawn(consumer(
            db.clone(),
            i,
            rng.fork(100 + i as u64),
            Arc::clone(&stop),
            Arc::clone(&record),
            Arc::clone(&incarnations),
        )));
    }
    // Run until enough crash/takeover cycles happened (bounded: the test fails if they do not),
    let wanted = cycles_wanted();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60 + wanted * 2);
    // Also until a zombie's ack was fenced at least once (pauses are a few percent of the batches).
    let done = |r: &Record| r.deaths >= wanted && r.fenced > 0;
    while !done(&record.lock().unwrap()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a worker panicked");
    }
    drain(&db).await;
    let record = Arc::try_unwrap(record).unwrap().into_inner().unwrap();
    check(&db, &record, wanted).await;
}

async fn check(db: &str, record: &Record, wanted: u64) {
    let su = connect(db, "postgres").await;
    let context = format!(
        "{} committed, {} rolled back, {} acks, {} fenced, {} deaths",
        record.committed.len(),
        record.rolled_back.len(),
        record.acks,
        record.fenced,
        record.deaths
    );
    assert!(
        record.deaths >= wanted,
        "too few crash/takeover cycles: {context}"
    );
    assert!(record.fenced > 0, "no zombie was fenced: {context}");

    // Effects, in the commit order of their transactions (then in write order).
    let effects: Vec<(i64, String, i32, i64)> = su
        .query(
            "SELECT id, key, partition, epoch FROM effects
              ORDER BY pg_xact_commit_timestamp(xid::text::xid), xid, seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let dead: BTreeSet<i64> = su
        .query("SELECT id FROM lease_queue.dead_letters", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut effect_count: BTreeMap<i64, usize> = BTreeMap::new();
    for (id, ..) in &effects {
        *effect_count.entry(*id).or_default() += 1;
    }
    // Exactly once, no loss, poison dead.
    for m in &record.committed {
        let n = effect_count.get(&m.id).copied().unwrap_or(0);
        if m.poison {
            assert!(
                n == 0 && dead.contains(&m.id),
                "poison {} : {n} effects, dead {}; {context}",
                m.id,
                dead.contains(&m.id)
            );
        } else {
            assert!(
                n == 1 && !dead.contains(&m.id) || n == 0 && dead.contains(&m.id),
                "message {}: {n} effects, dead {}; {context}",
                m.id,
                dead.contains(&m.id)
            );
        }
    }
    for id in &record.rolled_back {
        assert!(
            !effect_count.contains_key(id) && !dead.contains(id),
            "rolled-back message {id} was handled; {context}"
        );
    }
    let pending: i64 = su
        .query_one("SELECT count(*) FROM lease_queue.messages", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 0, "messages left after the drain; {context}");

    // Fencing: per partition, the epochs of committed effects never go back in commit order.
    let mut last_epoch: BTreeMap<i32, i64> = BTreeMap::new();
    for (id, _, p, epoch) in &effects {
        let last = last_epoch.entry(*p).or_insert(*epoch);
        assert!(
            epoch >= last,
            "partition {p}: effect of {id} at epoch {epoch} committed after epoch {last}; {context}"
        );
        *last = *epoch;
    }

    // Per-key order: the producers' commit order (commit timestamps), dead letters removed.
    let xids: Vec<i64> = record
        .committed
        .iter()
        .map(|m| m.xid)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let commit_ts: BTreeMap<i64, std::time::SystemTime> = su
        .query(
            "SELECT x, pg_xact_commit_timestamp(x::text::xid) FROM unnest($1::bigint[]) AS x",
            &[&xids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut expected: BTreeMap<&str, Vec<(std::time::SystemTime, i64, usize, i64)>> =
        BTreeMap::new();
    for m in record.committed.iter().filter(|m| !dead.contains(&m.id)) {
        expected
            .entry(&m.key)
            .or_default()
            .push((commit_ts[&m.xid], m.xid, m.pos, m.id));
    }
    for (key, msgs) in &mut expected {
        msgs.sort();
        let want: Vec<i64> = msgs.iter().map(|m| m.3).collect();
        let got: Vec<i64> = effects
            .iter()
            .filter(|e| e.1 == *key)
            .map(|e| e.0)
            .collect();
        assert_eq!(
            got, want,
            "key {key}: effects out of commit order; {context}"
        );
    }
    eprintln!("queue history: {context}, {} dead letters", dead.len());
}
