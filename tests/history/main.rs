//! History suite: a randomized, concurrent workload against pg_lease, recorded call by call and then
//! checked against the invariants of docs/SEMANTICS.md §9 (see `checker.rs` for what each check
//! assumes and how unknown commit outcomes are handled).
//!
//! The workload (`driver.rs`): 12 clients (by default), each with its own connection as one of two
//! login roles (`app` and `reporting`, alternating; each role with its own owner strings), on 5
//! hot keys and 4 owners (so two clients often act as the same owner), with ttls of 15–300 ms, blocking and
//! non-blocking acquires, renew/release/transfer/fence with current, stale and guessed epochs (a
//! transfer hands the key to another owner of the client's role, with the next epoch), inspect and
//! register_waiter; about 40 % of the steps run in explicit transactions (1–3 calls, a fence followed
//! by a guarded write) that commit or roll back; an admin connection purges now and then (so the
//! suite uses a fresh database per run) and another, as the installing role, force-releases random
//! keys; a superuser connection terminates random clients' backends (they reconnect), and random
//! clients' backends are paused (SIGSTOP, 10–400 ms, then SIGCONT). Transactions whose COMMIT answer
//! was lost are resolved with `pg_xact_status`, and every transaction's fate is checked against what
//! its client saw. Then every key's `lease.history` is read and must tell exactly what the log says
//! (`recorded.rs`: every acknowledged grant once, nothing that rolled back, each end as it happened).
//!
//! Environment:
//! - `PGLEASE_HISTORY_SEED`: the seed (decimal, or hex with `0x`). Unset: a random seed. The seed is
//!   always printed on stderr (past the test harness's capture) and in every failure message. A seed
//!   fixes each client's sequence of choices; the interleaving still depends on timing, so a rerun
//!   with the same seed replays the same workload, not necessarily the same history.
//! - `PGLEASE_HISTORY_SECS`: how long the workload runs, in seconds (default 12, unless
//!   `PGLEASE_HISTORY_OPS` is set).
//! - `PGLEASE_HISTORY_OPS`: run until this many calls were recorded (with `PGLEASE_HISTORY_SECS`
//!   too: whichever comes first).
//! - `PGLEASE_HISTORY_CLIENTS`, `PGLEASE_HISTORY_KEYS`, `PGLEASE_HISTORY_OWNERS`: the workload's
//!   shape (defaults 12, 5, 4; the server's `max_connections` of 100 allows up to 88 clients).
//! - The soak (tests/INVARIANTS.md records a run), a million calls by 32 clients:
//!   `PGLEASE_HISTORY_OPS=1000000 PGLEASE_HISTORY_CLIENTS=32 PGLEASE_HISTORY_KEYS=16 PGLEASE_HISTORY_OWNERS=8 cargo test -p pglease-tests --test history -- concurrent`.
//!   The checker's time grows like n log n in the number of calls (see `checker::check`).
//! - `PGLEASE_PG_VERSION`: the PostgreSQL major version, as for every suite.
//!
//! The checker itself is tested on synthetic histories that break each invariant (`selftest.rs`), so
//! it is known to be able to fail.
//!
//! `queue.rs` is the queue's history test (crash/takeover cycles of consumers in the exactly-once
//! mode, checked with commit timestamps); `PGLEASE_QUEUE_CYCLES` sets how many cycles it runs.

mod checker;
mod driver;
mod model;
mod queue;
mod recorded;
mod rng;
mod selftest;
mod semaphore;
mod synthetic;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use pglease_tests::server;

use crate::checker::{Report, Violation};
use crate::driver::{Config, Run};
use crate::model::{Micros, Op, Show};

fn seed() -> u64 {
    match std::env::var("PGLEASE_HISTORY_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("PGLEASE_HISTORY_SEED must be a u64, got {v:?}"))
        }
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_nanos() as u64;
            rng::Rng::new(t ^ (u64::from(std::process::id()) << 32)).next_u64()
        }
    }
}

fn duration() -> Option<Duration> {
    std::env::var("PGLEASE_HISTORY_SECS").ok().map(|v| {
        Duration::from_secs_f64(v.trim().parse().unwrap_or_else(|_| {
            panic!("PGLEASE_HISTORY_SECS must be a number of seconds, got {v:?}")
        }))
    })
}

/// A positive count from `var`, or `default` when unset.
fn count(var: &str, default: Option<usize>) -> Option<usize> {
    match std::env::var(var) {
        Ok(v) => match v.trim().parse() {
            Ok(n) if n > 0 => Some(n),
            _ => panic!("{var} must be a positive whole number, got {v:?}"),
        },
        Err(_) => default,
    }
}

/// Prints past the test harness's output capture (so the seed is always visible).
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The operations that show `v`, plus the other operations on its key around them, in server time.
fn slice(run: &Run, v: &Violation, out: &mut String) {
    let involved: BTreeSet<usize> = v.ops.iter().copied().collect();
    let times = |o: &Op| (o.t0.unwrap_or(o.lo), o.t1.unwrap_or(o.lo));
    let (lo, hi) = involved
        .iter()
        .fold((Micros::MAX, Micros::MIN), |(lo, hi), &id| {
            let (a, b) = times(&run.ops[id]);
            (lo.min(a), hi.max(b))
        });
    let margin = 20_000;
    let mut shown: Vec<&Op> = run
        .ops
        .iter()
        .filter(|o| {
            involved.contains(&o.id)
                || (!v.key.is_empty()
                    && o.call.key() == Some(v.key.as_str())
                    && times(o).1 >= lo - margin
                    && times(o).0 <= hi + margin)
        })
        .collect();
    shown.sort_by_key(|o| (times(o).0, o.id));
    if shown.len() > 40 {
        shown.retain(|o| involved.contains(&o.id));
    }
    for o in shown {
        let mark = if involved.contains(&o.id) { "=>" } else { "  " };
        let _ = writeln!(out, "    {mark} {}", Show(o, run.base));
    }
}

fn render(seed: u64, run: &Run, violations: &[Violation]) -> String {
    let mut out = format!(
        "history check failed: seed {seed} (rerun with PGLEASE_HISTORY_SEED={seed}); {} violation(s)\n\
         times are server clock relative to the first call; => marks the operations that show it\n",
        violations.len()
    );
    for v in violations.iter().take(12) {
        let _ = writeln!(out, "[{}] key {:?}: {}", v.invariant, v.key, v.what);
        slice(run, v, &mut out);
    }
    if violations.len() > 12 {
        let _ = writeln!(out, "... and {} more", violations.len() - 12);
    }
    out
}

fn stats_line(
    cfg: &Config,
    run: &Run,
    report: &Report,
    recorded: &recorded::Report,
    (checked_in, recorded_in): (Duration, Duration),
) -> String {
    let s = &report.stats;
    let committed_tx = run
        .txs
        .iter()
        .filter(|t| t.end == model::Commit::Committed)
        .count();
    format!(
        "{} ops in {:.1?} by {} clients on {} keys as {} owners, {} transactions ({} committed, {} \
         resolved by xid), {} backends terminated, {} paused; committed: {} grants, {} re-acquires, \
         {} renews ok, {} releases ok, {} transfers ok, {} fences; {} reads, {} refusals; {} \
         uncommitted writes ignored; {} ambiguous writes, {} failed checks excused by them; \
         {} force_releases ended a grant; lease.history: {} grants recorded ({} released, {} \
         forced, {} transferred, {} lapsed, {} held), {} \
         allowed by calls of unknown outcome; checked in {:.1?} (lease.history compared in {:.1?}): \
         {} violations",
        run.ops.len(),
        run.elapsed,
        cfg.clients,
        cfg.keys,
        cfg.owners,
        run.txs.len(),
        committed_tx,
        run.resolved,
        run.kills,
        run.pauses,
        s.committed_grants,
        s.reacquires,
        s.ok_renews,
        s.ok_releases,
        s.ok_transfers,
        s.fences,
        s.reads,
        s.refusals,
        s.ignored_uncommitted,
        s.ambiguous,
        report.excused.len(),
        s.forced,
        recorded.rows,
        recorded.released,
        recorded.forced,
        recorded.transferred,
        recorded.lapsed,
        recorded.held,
        recorded.allowed,
        checked_in,
        recorded_in,
        report.violations.len() + run.tx_violations.len() + recorded.violations.len(),
    )
}

/// I1, I2, I3, I4, I5, I6, I7, I11, I12, I13 over a randomized concurrent history with aborted
/// transactions, killed connections, purges, transfers and an operator's force_release; at the end, every key's `lease.history`
/// must tell exactly what the workload did (`recorded.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_random_histories_keep_exclusion_fencing_and_monotonic_epochs() {
    let seed = seed();
    let ops = count("PGLEASE_HISTORY_OPS", None);
    let duration = duration().or(ops.is_none().then_some(Duration::from_secs(12)));
    let cfg = Config {
        seed,
        duration,
        ops,
        clients: count("PGLEASE_HISTORY_CLIENTS", Some(12)).expect("a default"),
        keys: count("PGLEASE_HISTORY_KEYS", Some(5)).expect("a default"),
        owners: count("PGLEASE_HISTORY_OWNERS", Some(4)).expect("a default"),
    };
    say(&format!(
        "history: seed {seed} (PGLEASE_HISTORY_SEED={seed}), for {duration:?} or {ops:?} ops, {} \
         clients, {} keys, {} owners, PostgreSQL {}",
        cfg.clients,
        cfg.keys,
        cfg.owners,
        server().major()
    ));
    let run = driver::run(&cfg).await;
    let checking = std::time::Instant::now();
    let report = checker::check(&run.ops);
    let checked_in = checking.elapsed();
    // The recorded lease.history of every key against the workload's log.
    let comparing = std::time::Instant::now();
    let recorded = recorded::check(&run.ops, &run.recorded, driver::role_of);
    let recorded_in = comparing.elapsed();
    let checked_in = (checked_in, recorded_in);
    let stats_line =
        |run: &Run, report: &Report| stats_line(&cfg, run, report, &recorded, checked_in);
    say(&format!(
        "history: seed {seed}: {}",
        stats_line(&run, &report)
    ));
    assert!(
        run.unexpected.is_empty(),
        "seed {seed}: unexpected errors: {:#?}",
        run.unexpected
    );
    let mut violations = run.tx_violations.clone();
    violations.extend(report.violations.iter().cloned());
    violations.extend(recorded.violations.iter().cloned());
    assert!(violations.is_empty(), "{}", render(seed, &run, &violations));

    // The workload must actually have exercised what it claims to.
    let s = &report.stats;
    let exercised = [
        ("committed grants", s.committed_grants),
        ("ok renews", s.ok_renews),
        ("ok releases", s.ok_releases),
        ("ok transfers", s.ok_transfers),
        ("force_releases that ended a grant", s.forced),
        ("grants recorded as released", recorded.released),
        ("grants recorded as forced", recorded.forced),
        ("grants recorded as transferred", recorded.transferred),
        ("grants recorded as lapsed", recorded.lapsed),
        ("passed fences", s.fences),
        ("re-acquires", s.reacquires),
        ("refusals", s.refusals),
        ("reads", s.reads),
        ("uncommitted writes", s.ignored_uncommitted),
        ("terminated backends", run.kills),
        ("paused backends", run.pauses),
    ];
    let (even, odd, handovers) = grants_by_role(&run.ops);
    let exercised = exercised.into_iter().chain([
        ("grants to the first role (app)", even),
        ("grants to the second role (reporting)", odd),
        ("keys passing from one role to the other", handovers),
    ]);
    for (what, n) in exercised {
        assert!(
            n > 0,
            "seed {seed}: the run had no {what}: {}",
            stats_line(&run, &report)
        );
    }
}

/// Committed grants by the clients of each role (even clients `app`, odd ones `reporting`), and how
/// often a key's next grant, in epoch order, went to the other role.
fn grants_by_role(ops: &[model::Op]) -> (usize, usize, usize) {
    let mut grants: Vec<(&str, i64, usize)> = ops
        .iter()
        .filter(|op| op.commit == model::Commit::Committed && op.client != usize::MAX)
        .filter_map(|op| Some((op.call.key()?, op.granted()?.0, op.client % 2)))
        .collect();
    grants.sort();
    grants.dedup();
    let even = grants.iter().filter(|g| g.2 == 0).count();
    let handovers = grants
        .windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[0].2 != w[1].2)
        .count();
    (even, grants.len() - even, handovers)
}

/// SEMANTICS.md §3 (fence): a successor that waited for a fenced transaction counts its expiry from
/// the moment it is granted. (Found a bug: acquire and renew kept the clock reading taken before
/// waiting for the fence's row lock, so the grant could be returned already expired; fixed in 0.2.0.)
#[tokio::test]
async fn a_grant_that_waited_for_a_fenced_transaction_expires_ttl_after_the_grant() {
    let s = server();
    let holder = s.app().await;
    let taker = s.app().await;
    let k = pglease_tests::key("history_fence_wait", "k");
    let epoch: i64 = holder
        .query_one(
            "SELECT epoch FROM lease.acquire($1, 'holder', '300 milliseconds')",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .query_one("SELECT lease.fence($1, 'holder', $2)", &[&k, &epoch])
        .await
        .unwrap();
    let grant = tokio::spawn(async move {
        taker
            .query_one(
                "SELECT a.acquired, a.expires_at > clock_timestamp() \
                   FROM lease.acquire($1, 'taker', '200 milliseconds', '10 seconds') AS a",
                &[&k],
            )
            .await
            .map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1)))
    });
    // Keep the fenced transaction open well past both the holder's and the taker's ttl.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    holder.batch_execute("COMMIT").await.unwrap();
    let (acquired, unexpired) = grant.await.unwrap().unwrap();
    assert!(acquired);
    assert!(
        unexpired,
        "the grant returned after the fenced commit must not have expired already"
    );
}
