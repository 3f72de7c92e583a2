//! Epochs never regress across crashes: a randomised load of acquire, renew, release (autocommit and
//! in transactions that commit or roll back) and purge, with the server SIGKILLed mid-load again and
//! again (F4).
//!
//! What a client saw as committed (an autocommit call that returned, or a COMMIT that returned) is
//! recorded before each crash; after every recovery the test checks that (a) every key's counter (its
//! row's epoch, or the epoch floor for a purged key) is at least the largest committed epoch seen,
//! (b) the next grant of every key is above every epoch ever returned as committed, and at the end
//! (c) any two grants of a key ordered in real time (one returned before the other was sent) carry
//! increasing epochs, across all crashes.
//!
//! A soak: `PGLEASE_CRASH_CYCLES=100` runs exactly that many cycles, however long they take (by
//! default the test runs 6 to 20 within about 40 s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::node::Node;
use crate::{Rng, within};

const KEYS: usize = 6;
const WORKERS: usize = 4;
const MIN_CYCLES: usize = 6;
const MAX_CYCLES: usize = 20;
/// Cycles stop being started after this long (the suite must stay fast on a busy machine).
const BUDGET: Duration = Duration::from_secs(40);

/// `PGLEASE_CRASH_CYCLES`: the exact number of cycles of a soak run (unset: the default bounds).
fn soak_cycles() -> Option<usize> {
    let v = std::env::var("PGLEASE_CRASH_CYCLES").ok()?;
    match v.trim().parse() {
        Ok(n) if n > 0 => Some(n),
        _ => panic!("PGLEASE_CRASH_CYCLES must be a positive number of cycles, got {v:?}"),
    }
}

fn key(k: usize) -> String {
    format!("load/{k}")
}

/// A grant a client saw committed.
#[derive(Debug, Clone, Copy)]
struct Seen {
    key: usize,
    epoch: i64,
    sent: Instant,
    received: Instant,
}

/// What clients saw committed, over all cycles.
#[derive(Default)]
struct Record {
    grants: Vec<Seen>,
    /// Per key: the largest counter a committed result proves (a grant's epoch; a release's epoch + 1).
    counter: [i64; KEYS],
}

type Shared = Arc<Mutex<Record>>;

fn note_grant(rec: &Shared, seen: Seen) {
    let mut r = rec.lock().unwrap();
    r.counter[seen.key] = r.counter[seen.key].max(seen.epoch);
    r.grants.push(seen);
}

/// One worker: random operations on random keys until its connection dies with the server.
async fn worker(c: Client, owner: String, mut rng: Rng, rec: Shared) {
    let mut held: HashMap<usize, i64> = HashMap::new();
    loop {
        let k = rng.below(KEYS as u64) as usize;
        let step = async {
            if let Some(&e) = held.get(&k) {
                if rng.below(3) == 0 {
                    let status: String = c
                        .query_one(
                            "SELECT status FROM lease.release($1, $2, $3)",
                            &[&key(k), &owner, &e],
                        )
                        .await?
                        .get(0);
                    held.remove(&k);
                    if status == "ok" {
                        let mut r = rec.lock().unwrap();
                        r.counter[k] = r.counter[k].max(e + 1);
                    }
                } else {
                    let ttl = format!("{} milliseconds", 20 + rng.below(280));
                    let status: String = c
                        .query_one(
                            "SELECT status FROM lease.renew($1, $2, $3, $4::text::interval)",
                            &[&key(k), &owner, &e, &ttl],
                        )
                        .await?
                        .get(0);
                    if status != "ok" {
                        held.remove(&k);
                    }
                }
                return Ok(());
            }
            let ttl = format!("{} milliseconds", 20 + rng.below(280));
            let in_transaction = rng.below(4) == 0;
            let sent = Instant::now();
            if in_transaction {
                c.batch_execute("BEGIN").await?;
            }
            let row = c
                .query_one(
                    "SELECT acquired, epoch FROM lease.acquire($1, $2, $3::text::interval)",
                    &[&key(k), &owner, &ttl],
                )
                .await?;
            let (acquired, epoch): (bool, Option<i64>) = (row.get(0), row.get(1));
            if in_transaction {
                if rng.below(3) == 0 {
                    c.batch_execute("ROLLBACK").await?; // never happened
                    return Ok(());
                }
                c.batch_execute("COMMIT").await?;
            }
            if acquired {
                let epoch = epoch.expect("a grant carries an epoch");
                held.insert(k, epoch);
                let received = Instant::now();
                note_grant(
                    &rec,
                    Seen {
                        key: k,
                        epoch,
                        sent,
                        received,
                    },
                );
            }
            Ok::<(), tokio_postgres::Error>(())
        };
        if step.await.is_err() {
            return; // the server went away
        }
    }
}

/// The purger: purges everything idle, sometimes holding its transaction open a little, until its
/// connection dies with the server.
async fn purger(c: Client, mut rng: Rng) {
    loop {
        let step = async {
            if rng.below(2) == 0 {
                c.batch_execute("SELECT lease.purge('0')").await?;
            } else {
                c.batch_execute("BEGIN; SELECT lease.purge('0')").await?;
                tokio::time::sleep(Duration::from_millis(rng.below(10))).await;
                c.batch_execute("COMMIT").await?;
            }
            tokio::time::sleep(Duration::from_millis(10 + rng.below(20))).await; // pacing
            Ok::<(), tokio_postgres::Error>(())
        };
        if step.await.is_err() {
            return;
        }
    }
}

/// After recovery: (a) counters at least what was seen committed; (b) the next grant of every key is
/// above every committed epoch seen (then released again, which is recorded too).
async fn check_recovered(node: &Node, rec: &Shared, cycle: usize) {
    let su = node.superuser().await;
    let floor: i64 = su
        .query_one("SELECT max(floor) FROM lease.epoch_floor", &[])
        .await
        .unwrap()
        .get(0);
    let rows: HashMap<String, i64> = su
        .query("SELECT key, epoch FROM lease.leases", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let checker = node.app().await;
    let owner = format!("checker-{cycle}");
    for k in 0..KEYS {
        let counter = rows.get(&key(k)).copied().unwrap_or(floor);
        let seen = rec.lock().unwrap().counter[k];
        assert!(
            counter >= seen,
            "cycle {cycle}: {} regressed: counter {counter} after recovery, {seen} seen committed",
            key(k)
        );
        let sent = Instant::now();
        // Pre-crash leases live at most 300 ms: wait for them (the server sleeps, polling).
        let row = within(
            "the checker's grant",
            checker.query_one(
                "SELECT acquired, epoch FROM lease.acquire($1, $2, '1 hour', '20 seconds')",
                &[&key(k), &owner],
            ),
        )
        .await
        .unwrap();
        let (acquired, epoch): (bool, i64) = (row.get(0), row.get(1));
        assert!(acquired);
        assert!(
            epoch > seen,
            "cycle {cycle}: {} granted at {epoch}, not above the committed {seen}",
            key(k)
        );
        note_grant(
            rec,
            Seen {
                key: k,
                epoch,
                sent,
                received: Instant::now(),
            },
        );
        let status: String = checker
            .query_one(
                "SELECT lease.release($1, $2, $3)",
                &[&key(k), &owner, &epoch],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(status, "ok");
        let mut r = rec.lock().unwrap();
        r.counter[k] = r.counter[k].max(epoch + 1);
    }
}

/// (c): for every key, a grant sent after another was received has the higher epoch.
fn check_real_time_order(grants: &[Seen]) {
    for k in 0..KEYS {
        let mut by_received: Vec<Seen> = grants.iter().filter(|s| s.key == k).copied().collect();
        by_received.sort_by_key(|s| s.received);
        // prefix_max[i]: the largest epoch among the first i grants to return.
        let mut prefix_max = vec![i64::MIN];
        for s in &by_received {
            prefix_max.push((*prefix_max.last().unwrap()).max(s.epoch));
        }
        for b in &by_received {
            let before = by_received.partition_point(|a| a.received < b.sent);
            assert!(
                prefix_max[before] < b.epoch,
                "{}: grant at epoch {} was sent after a grant at epoch {} had returned",
                key(k),
                b.epoch,
                prefix_max[before]
            );
        }
    }
}

/// F4: epochs never regress, and no epoch seen committed is handed out again, across repeated
/// crashes (SIGKILL) in the middle of a concurrent load that includes purges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_never_regress_across_repeated_crashes_under_load() {
    let mut node = Node::start();
    let mut rng = Rng::from_env("epochs_never_regress_across_repeated_crashes_under_load");
    let rec: Shared = Arc::default();
    let started = Instant::now();
    let mut cycles = 0;
    let soak = soak_cycles();
    let more = |cycles: usize| match soak {
        Some(n) => cycles < n,
        None => cycles < MAX_CYCLES && (cycles < MIN_CYCLES || started.elapsed() < BUDGET),
    };
    while more(cycles) {
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            let c = node.app().await;
            let seed = rng.below(u64::MAX);
            tasks.push(tokio::spawn(worker(
                c,
                format!("c{cycles}-w{w}"),
                Rng::new(seed),
                rec.clone(),
            )));
        }
        tasks.push(tokio::spawn(purger(
            node.admin().await,
            Rng::new(rng.below(u64::MAX)),
        )));
        // Let the load run for a random while (pacing), then kill the server under it.
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        node.crash();
        for t in tasks {
            within("a load task to notice the crash", t).await.unwrap();
        }
        node.boot();
        check_recovered(&node, &rec, cycles).await;
        cycles += 1;
    }
    let r = rec.lock().unwrap();
    let checker_grants = cycles * KEYS;
    assert!(
        r.grants.len() > checker_grants + cycles,
        "the load committed too little to mean anything: {} grants",
        r.grants.len()
    );
    check_real_time_order(&r.grants);
    eprintln!(
        "{cycles} crash cycles, {} committed grants, in {:?}",
        r.grants.len(),
        started.elapsed()
    );
}
