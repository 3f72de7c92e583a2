//! The semaphore's history test: many sessions loop acquire_slot / renew / release with short ttls
//! on one semaphore (some blocking, some letting their grants lapse), each recording the server-time
//! interval of every grant it got; the checker then asserts that at no server instant more than
//! max_holders grants were live, that every slot is in 1..max_holders, and that each slot's epochs
//! strictly increase in the order of its grants.
//!
//! A grant's interval is a subset of the time it really held its slot, so an overlap is a real one:
//! it starts at `expires_at - ttl` (acquire_slot's clock reading at the grant: the expiry is that
//! reading plus the ttl), and ends at its last known expiry (extended by each `ok` renew) or, for a
//! release, at a clock reading taken just before the release statement.
//!
//! Environment: `PGLEASE_SEMAPHORE_SECS` (default 8), `PGLEASE_SEMAPHORE_CLIENTS` (default 10),
//! `PGLEASE_SEMAPHORE_MAX` (max_holders, default 3); the seed is `PGLEASE_HISTORY_SEED`'s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pglease_tests::{APP, server, sqlstate};
use tokio_postgres::Client;

use crate::rng::Rng;

/// Microseconds since the Unix epoch on the server's clock.
type Micros = i64;

fn micros(t: SystemTime) -> Micros {
    t.duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as Micros
}

/// One grant, as its holder saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub client: usize,
    pub slot: i32,
    pub epoch: i64,
    /// The server instant of the grant.
    pub start: Micros,
    /// The last server instant it surely held (its last expiry, or just before its release).
    pub end: Micros,
}

/// What the checker found.
#[derive(Debug, PartialEq)]
pub enum Violation {
    /// More than max_holders grants live at `at`.
    TooManyHolders { at: Micros, live: Vec<Grant> },
    /// A slot outside 1..max_holders.
    SlotOutOfRange(Grant),
    /// A grant of a slot with an epoch not above the one granted before it.
    EpochNotIncreasing { earlier: Grant, later: Grant },
}

/// Checks `grants` against max_holders `max`.
pub fn check(grants: &[Grant], max: usize) -> Vec<Violation> {
    let mut violations = Vec::new();
    for g in grants {
        if g.slot < 1 || g.slot as usize > max {
            violations.push(Violation::SlotOutOfRange(g.clone()));
        }
    }
    // A sweep over [start, end) intervals: ends before starts at the same instant.
    let mut events: Vec<(Micros, bool, usize)> = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        if g.end > g.start {
            events.push((g.start, true, i));
            events.push((g.end, false, i));
        }
    }
    events.sort_by_key(|&(t, is_start, i)| (t, is_start, i));
    let mut live: BTreeMap<usize, ()> = BTreeMap::new();
    for (t, is_start, i) in events {
        if is_start {
            live.insert(i, ());
            if live.len() > max {
                violations.push(Violation::TooManyHolders {
                    at: t,
                    live: live.keys().map(|&j| grants[j].clone()).collect(),
                });
            }
        } else {
            live.remove(&i);
        }
    }
    let mut by_slot: BTreeMap<i32, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        by_slot.entry(g.slot).or_default().push(g);
    }
    for list in by_slot.values_mut() {
        list.sort_by_key(|g| (g.start, g.epoch));
        for w in list.windows(2) {
            if w[1].epoch <= w[0].epoch {
                violations.push(Violation::EpochNotIncreasing {
                    earlier: w[0].clone(),
                    later: w[1].clone(),
                });
            }
        }
    }
    violations
}

fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{var} must be a number, got {v:?}"))
        })
        .unwrap_or(default)
}

/// What one client recorded.
#[derive(Default)]
struct Log {
    grants: Vec<Grant>,
    refusals: usize,
    timeouts: usize,
    renewals: usize,
    releases: usize,
    lapses: usize,
    idempotent: usize,
}

/// The grant a client holds: its index in the log and its current expiry.
struct Held {
    index: usize,
    slot: i32,
    epoch: i64,
}

async fn server_now(c: &Client) -> Micros {
    micros(
        c.query_one("SELECT clock_timestamp()", &[])
            .await
            .expect("clock")
            .get(0),
    )
}

async fn client_loop(
    c: Client,
    client: usize,
    mut rng: Rng,
    max: i32,
    until: Instant,
) -> Result<Log, String> {
    let owner = format!("c{client}");
    let mut log = Log::default();
    let mut held: Option<Held> = None;
    while Instant::now() < until {
        match &held {
            None => {
                let ttl_us = rng.range(20_000, 150_000);
                let wait_ms = if rng.chance(30) { rng.range(1, 120) } else { 0 };
                let r = c
                    .query_one(
                        "SELECT acquired, slot, epoch, expires_at FROM lease.acquire_slot('s', $1, \
                         $2 * interval '1 microsecond', $3, $4 * interval '1 millisecond')",
                        &[&owner, &(ttl_us as f64), &max, &(wait_ms as f64)],
                    )
                    .await;
                match r {
                    Ok(r) if r.get::<_, bool>(0) => {
                        let expires_at: SystemTime = r.get(3);
                        let end = micros(expires_at);
                        let g = Grant {
                            client,
                            slot: r.get(1),
                            epoch: r.get(2),
                            start: end - ttl_us,
                            end,
                        };
                        held = Some(Held {
                            index: log.grants.len(),
                            slot: g.slot,
                            epoch: g.epoch,
                        });
                        log.grants.push(g);
                    }
                    Ok(_) => log.refusals += 1,
                    Err(e) if sqlstate(&e).as_deref() == Some("57014") => log.timeouts += 1,
                    Err(e) => return Err(format!("{owner}: acquire_slot: {e:?}")),
                }
            }
            Some(h) => {
                let key = format!("s#{}", h.slot);
                let pick = rng.below(100);
                if pick < 45 {
                    let ttl_us = rng.range(20_000, 150_000);
                    let r = c
                        .query_one(
                            "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
                             $4 * interval '1 microsecond')",
                            &[&key, &owner, &h.epoch, &(ttl_us as f64)],
                        )
                        .await
                        .map_err(|e| format!("{owner}: renew: {e:?}"))?;
                    if r.get::<_, String>(0) == "ok" {
                        log.grants[h.index].end = micros(r.get::<_, SystemTime>(1));
                        log.renewals += 1;
                    } else {
                        log.lapses += 1;
                        held = None;
                    }
                } else if pick < 70 {
                    let before = server_now(&c).await;
                    let status: String = c
                        .query_one(
                            "SELECT status FROM lease.release($1, $2, $3)",
                            &[&key, &owner, &h.epoch],
                        )
                        .await
                        .map_err(|e| format!("{owner}: release: {e:?}"))?
                        .get(0);
                    if status == "ok" {
                        let g = &mut log.grants[h.index];
                        g.end = g.end.min(before);
                        log.releases += 1;
                    } else {
                        log.lapses += 1;
                    }
                    held = None;
                } else if pick < 80 {
                    // Idempotent while held (or a new grant if it lapsed meanwhile).
                    let r = c
                        .query_one(
                            "SELECT acquired, slot, epoch, expires_at FROM lease.acquire_slot('s', $1, \
                             '1 second', $2)",
                            &[&owner, &max],
                        )
                        .await
                        .map_err(|e| format!("{owner}: acquire_slot again: {e:?}"))?;
                    let acquired: bool = r.get(0);
                    let (slot, epoch): (Option<i32>, Option<i64>) = (r.get(1), r.get(2));
                    if acquired && slot == Some(h.slot) && epoch == Some(h.epoch) {
                        log.idempotent += 1;
                        let end = micros(r.get::<_, SystemTime>(3));
                        if end != log.grants[h.index].end {
                            return Err(format!(
                                "{owner}: an idempotent acquire_slot changed the expiry of \
                                 {key}@{}",
                                h.epoch
                            ));
                        }
                    } else {
                        // The grant lapsed before the call: a new grant (1 second) or a refusal.
                        log.lapses += 1;
                        held = None;
                        if acquired {
                            let end = micros(r.get::<_, SystemTime>(3));
                            let g = Grant {
                                client,
                                slot: slot.expect("slot"),
                                epoch: epoch.expect("epoch"),
                                start: end - 1_000_000,
                                end,
                            };
                            // Give it back at once (a second is long in this workload).
                            let before = server_now(&c).await;
                            let status: String = c
                                .query_one(
                                    "SELECT status FROM lease.release($1, $2, $3)",
                                    &[&format!("s#{}", g.slot), &owner, &g.epoch],
                                )
                                .await
                                .map_err(|e| format!("{owner}: release: {e:?}"))?
                                .get(0);
                            let mut g = g;
                            if status == "ok" {
                                g.end = g.end.min(before);
                            }
                            log.grants.push(g);
                        }
                    }
                } else {
                    // Stall past the expiry: the grant lapses (another client may take the slot).
                    tokio::time::sleep(Duration::from_millis(rng.range(20, 160) as u64)).await;
                }
            }
        }
        if rng.chance(20) {
            tokio::time::sleep(Duration::from_millis(rng.range(0, 30) as u64)).await;
        }
    }
    Ok(log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_than_max_holders_under_races_and_lapses() {
    let seed = crate::seed();
    let secs = env_or("PGLEASE_SEMAPHORE_SECS", 8);
    let clients = env_or("PGLEASE_SEMAPHORE_CLIENTS", 10) as usize;
    let max = env_or("PGLEASE_SEMAPHORE_MAX", 3) as usize;
    crate::say(&format!(
        "semaphore history: seed {seed} (PGLEASE_HISTORY_SEED={seed}), {secs} s, {clients} clients, \
         max_holders {max}, PostgreSQL {}",
        server().major()
    ));
    let s = server();
    let db = s.fresh_db_with_extension("semaphore_history");
    let root = Rng::new(seed);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let c = s.connect_as(&db, APP).await;
        let rng = root.fork(i as u64);
        tasks.push(tokio::spawn(client_loop(c, i, rng, max as i32, until)));
    }
    let mut grants = Vec::new();
    let (mut refusals, mut timeouts, mut renewals, mut releases, mut lapses, mut idempotent) =
        (0, 0, 0, 0, 0, 0);
    for t in tasks {
        let log = t
            .await
            .expect("client task")
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        grants.extend(log.grants);
        refusals += log.refusals;
        timeouts += log.timeouts;
        renewals += log.renewals;
        releases += log.releases;
        lapses += log.lapses;
        idempotent += log.idempotent;
    }
    let stats = format!(
        "{} grants, {refusals} refusals, {timeouts} waits run out (57014), {renewals} renewals, \
         {releases} releases, {lapses} lapses, {idempotent} idempotent re-acquires",
        grants.len()
    );
    crate::say(&format!("semaphore history: seed {seed}: {stats}"));
    let violations = check(&grants, max);
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations ({stats}), the first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(3)]
    );
    // The workload exercised what it claims to: contention, lapses and every slot.
    for (what, n) in [
        ("grants", grants.len()),
        ("refusals", refusals),
        ("renewals", renewals),
        ("releases", releases),
        ("lapses", lapses),
    ] {
        assert!(n > 0, "seed {seed}: no {what} ({stats})");
    }
    let mut peak = 0;
    let mut events: Vec<(Micros, i32)> = grants
        .iter()
        .flat_map(|g| [(g.start, 1), (g.end, -1)])
        .collect();
    events.sort();
    let mut live = 0;
    for (_, d) in events {
        live += d;
        peak = peak.max(live);
    }
    assert_eq!(
        peak as usize, max,
        "seed {seed}: the semaphore was full at some instant ({stats})"
    );
}

fn g(client: usize, slot: i32, epoch: i64, start: Micros, end: Micros) -> Grant {
    Grant {
        client,
        slot,
        epoch,
        start,
        end,
    }
}

#[test]
fn semaphore_checker_accepts_back_to_back_grants_up_to_the_limit() {
    let grants = [
        g(0, 1, 1, 0, 100),
        g(1, 2, 1, 10, 50),
        g(2, 2, 2, 50, 90),
        g(3, 1, 2, 100, 200),
    ];
    assert_eq!(check(&grants, 2), vec![]);
}

#[test]
fn semaphore_checker_reports_more_than_max_holders_at_an_instant() {
    let grants = [g(0, 1, 1, 0, 100), g(1, 2, 1, 10, 50), g(2, 3, 1, 49, 60)];
    let v = check(&grants, 2);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(matches!(&v[0], Violation::SlotOutOfRange(x) if x.slot == 3));
    assert!(matches!(&v[1], Violation::TooManyHolders { at: 49, live } if live.len() == 3));
    // Two grants of one slot that overlap are two holders too.
    let v = check(&[g(0, 1, 1, 0, 100), g(1, 1, 2, 99, 150)], 1);
    assert!(
        matches!(&v[..], [Violation::TooManyHolders { at: 99, .. }]),
        "{v:?}"
    );
}

#[test]
fn semaphore_checker_reports_a_slot_epoch_that_does_not_increase() {
    let v = check(
        &[g(0, 1, 5, 0, 10), g(1, 1, 5, 20, 30), g(2, 1, 4, 40, 50)],
        1,
    );
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v.iter()
            .all(|x| matches!(x, Violation::EpochNotIncreasing { .. }))
    );
}
