//! Failover to a streaming standby (issue 15): what a promotion does to epochs and to grants that
//! the standby never received, with real replication (`pg_basebackup`, streaming, `pg_ctl
//! promote`, the old primary SIGKILLed with every process at one instant).
//!
//! Every test records, client-side, each grant a client saw acknowledged (the call returned
//! `acquired = t`) with the timeline of the node that answered, and checks two properties on that
//! record ([`Ledger::violations`]):
//! - **no epoch goes back**: no grant made on a later timeline has an epoch at or below an epoch
//!   acknowledged for that key on an earlier one, even one the standby never received;
//! - **no epoch is granted twice**: no (key, epoch) was acknowledged to two owners.
//!
//! pg_lease 0.6.0 keeps both by putting every grant on timeline t at or above the band
//! `(t - 1) * 2^40` ([`BAND`]). A companion test runs the same scenario on 0.5.0 and asserts that
//! both properties break there: the scenario really loses acknowledged grants, so the test can fail.
//!
//! The synchronous-replication tests are **characterisation tests**: they assert today's
//! behaviour of two client paths that escape synchronous replication (issue 15, part 2), which
//! part 2 must change; each says what.
//!
//! Determinism: a grant "the standby never received" is made after the standby was cut off
//! ([`Node::stop_streaming`]: its WAL receiver stopped, the primary's walsender gone, both
//! observed). A paused (SIGSTOPped) standby would not do: the walsender's bytes wait in the
//! standby's socket buffer and arrive when it resumes, so whether a grant survives would depend on
//! timing. Waits poll the servers (`pg_stat_activity.wait_event = 'SyncRep'`,
//! `pg_stat_replication`, `pg_stat_wal_receiver`, replay LSNs, `pg_is_in_recovery()`) and are
//! bounded; nothing sleeps to synchronise.
//!
//! The randomised loop runs 3 trials by default; `PGLEASE_FAILOVER_TRIALS=50` runs more.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pglease_tests::{APP, backend_pid};
use tokio_postgres::Client;

use crate::node::Node;
use crate::{Rng, code_of, grant, inspect, not_held, release, renew, try_acquire, within};

/// The band of timeline 2: every grant after the first promotion is at least this (2^40); the
/// band of timeline t is `(t - 1) * BAND`.
const BAND: i64 = 1 << 40;

/// A grant a client saw acknowledged.
#[derive(Debug, Clone)]
struct Grant {
    key: String,
    owner: String,
    epoch: i64,
    /// The timeline of the node that granted it.
    timeline: u32,
}

/// Every acknowledged grant, in the order the acknowledgements arrived.
#[derive(Debug, Default)]
struct Ledger {
    grants: Vec<Grant>,
}

impl Ledger {
    fn note(&mut self, key: &str, owner: &str, epoch: i64, timeline: u32) {
        self.grants.push(Grant {
            key: key.to_owned(),
            owner: owner.to_owned(),
            epoch,
            timeline,
        });
    }

    /// Every breach of the two properties, as readable lines (empty: none):
    /// a (key, epoch) acknowledged to two owners; a grant on a later timeline at or below an
    /// epoch acknowledged for that key on an earlier timeline.
    fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut owners: BTreeMap<(&str, i64), Vec<&str>> = BTreeMap::new();
        for g in &self.grants {
            let o = owners.entry((&g.key, g.epoch)).or_default();
            if !o.contains(&g.owner.as_str()) {
                o.push(&g.owner);
            }
        }
        for ((key, epoch), o) in owners {
            if o.len() > 1 {
                out.push(format!(
                    "{key}: epoch {epoch} granted to {}",
                    o.join(" and ")
                ));
            }
        }
        for later in &self.grants {
            let earlier = self
                .grants
                .iter()
                .filter(|g| g.key == later.key && g.timeline < later.timeline)
                .max_by_key(|g| g.epoch);
            if let Some(g) = earlier
                && g.epoch >= later.epoch
            {
                out.push(format!(
                    "{}: {} granted epoch {} on timeline {}, not above epoch {} acknowledged to {} \
                     on timeline {}",
                    later.key,
                    later.owner,
                    later.epoch,
                    later.timeline,
                    g.epoch,
                    g.owner,
                    g.timeline
                ));
            }
        }
        out
    }

    /// Asserts that, per key, the epochs of successive grants in acknowledgement order strictly
    /// increase (for tests that make one call at a time, where that order is real-time order).
    fn assert_increasing(&self) {
        let mut last: HashMap<&str, &Grant> = HashMap::new();
        for g in &self.grants {
            if let Some(prev) = last.get(g.key.as_str()) {
                assert!(
                    g.epoch > prev.epoch,
                    "{}: epoch {} (timeline {}) after epoch {} (timeline {})",
                    g.key,
                    g.epoch,
                    g.timeline,
                    prev.epoch,
                    prev.timeline
                );
            }
            last.insert(&g.key, g);
        }
    }
}

/// Grants `key` to `owner` (it must be granted), records it in `ledger` with `timeline`, returns
/// the epoch.
async fn granted(
    c: &Client,
    ledger: &mut Ledger,
    timeline: u32,
    key: &str,
    owner: &str,
    ttl: &str,
) -> i64 {
    let epoch = grant(c, key, owner, ttl).await;
    ledger.note(key, owner, epoch, timeline);
    epoch
}

/// The installed release of pg_lease (`lease.version()`).
async fn version_of(node: &Node) -> String {
    node.app()
        .await
        .query_one("SELECT lease.version()", &[])
        .await
        .expect("lease.version()")
        .get(0)
}

/// The scenario of F30 and F31, on the primary's release `version` (None: the current one).
///
/// Timeline 1: `a` is granted to `w1` and released while the standby streams (it has that
/// history). The standby is cut off; then, acknowledged on the primary only: `a` granted to `w2`
/// and released, granted to `w3` (held), and a new key `b` granted to `w4`. The primary is killed
/// (every process at once), the standby promoted (timeline 2), and `a` and `b` granted to `n1`
/// and `n2` there. Asserts that the standby really lacked the four grants; returns the ledger.
async fn grants_lost_in_an_async_failover(version: Option<&str>) -> Ledger {
    let mut primary = match version {
        Some(v) => Node::start_at_version(v),
        None => Node::start(),
    };
    if let Some(v) = version {
        assert_eq!(version_of(&primary).await, v);
    }
    let standby = primary.replica(false);
    let (a, b) = ("failover/async/a", "failover/async/b");
    let mut ledger = Ledger::default();

    let c = primary.app().await;
    assert_eq!(primary.timeline(), 1);
    let e = granted(&c, &mut ledger, 1, a, "w1", "1 hour").await;
    assert_eq!(release(&c, a, "w1", e).await, "ok");
    standby.wait_for_replay(&primary);
    standby.stop_streaming(&primary).await;

    let e = granted(&c, &mut ledger, 1, a, "w2", "1 hour").await;
    assert_eq!(release(&c, a, "w2", e).await, "ok");
    granted(&c, &mut ledger, 1, a, "w3", "1 hour").await;
    granted(&c, &mut ledger, 1, b, "w4", "1 hour").await;
    drop(c);
    primary.kill_all();

    assert_eq!(standby.promote(), 2);
    let s = standby.app().await;
    // The standby has a's history up to w1's release, and never heard of b: the grants to w2, w3
    // and w4 are lost.
    assert_eq!(inspect(&s, a).await, not_held(2));
    assert_eq!(inspect(&s, b).await, None);
    granted(&s, &mut ledger, 2, a, "n1", "1 hour").await;
    granted(&s, &mut ledger, 2, b, "n2", "1 hour").await;
    ledger
}

/// F30: with asynchronous replication, grants acknowledged on the old primary that the promoted
/// standby never received are not handed out again: every grant on the new timeline is in its
/// band (at least 2^40), above every epoch acknowledged on the old timeline, and no (key, epoch)
/// has two owners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_failover_never_grants_an_acknowledged_epoch_again() {
    let ledger = grants_lost_in_an_async_failover(None).await;
    assert_eq!(ledger.violations(), Vec::<String>::new(), "{ledger:#?}");
    for g in ledger.grants.iter().filter(|g| g.timeline == 2) {
        assert!(g.epoch >= BAND, "{g:?} is below the band of timeline 2");
    }
    ledger.assert_increasing();
}

/// F31: the scenario of F30 on pg_lease 0.5.0 (no timeline band) breaks both properties: the
/// promoted standby hands out again epochs acknowledged on the old primary, to other owners. So
/// F30's scenario really loses acknowledged grants, and F30 can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_0_6_0_an_async_failover_granted_an_acknowledged_epoch_again() {
    let ledger = grants_lost_in_an_async_failover(Some("0.5.0")).await;
    let v = ledger.violations();
    eprintln!("0.5.0 after an async failover:\n{}", v.join("\n"));
    for expected in [
        "failover/async/a: epoch 3 granted to w2 and n1",
        "failover/async/b: epoch 1 granted to w4 and n2",
        "failover/async/a: n1 granted epoch 3 on timeline 2, not above epoch 5 acknowledged to w3 \
         on timeline 1",
    ] {
        assert!(
            v.iter().any(|l| l == expected),
            "missing {expected:?} in {v:#?}"
        );
    }
}

/// F32: two promotions (timeline 1 → standby A promoted to timeline 2 → A's standby B promoted to
/// timeline 3), each losing grants the new primary never received: epochs keep increasing across
/// both, each timeline's grants are in its band; and a lease renewed on timeline 1 and never
/// released is refused to its holder (renew and release: `not_owner`, fence: LE001) once another
/// owner acquired the key on the new timeline, and stays refused on timeline 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_keep_increasing_across_two_promotions_and_the_old_holder_is_refused() {
    let (k, held) = ("failover/twice/k", "failover/twice/held");
    let mut ledger = Ledger::default();
    let mut primary = Node::start();
    let mut a = primary.replica(false);

    // Timeline 1.
    let c = primary.app().await;
    let old = granted(&c, &mut ledger, 1, held, "holder", "1 second").await;
    assert_eq!(renew(&c, held, "holder", old, "1 second").await.0, "ok");
    let e = granted(&c, &mut ledger, 1, k, "w1", "1 hour").await;
    assert_eq!(release(&c, k, "w1", e).await, "ok");
    a.wait_for_replay(&primary);
    a.stop_streaming(&primary).await;
    let e = granted(&c, &mut ledger, 1, k, "w2", "1 hour").await; // lost
    assert_eq!(release(&c, k, "w2", e).await, "ok");
    granted(&c, &mut ledger, 1, k, "w3", "1 hour").await; // lost
    drop(c);
    primary.kill_all();

    // Timeline 2: the holder's lease came over; once it lapses, a successor takes it.
    assert_eq!(a.promote(), 2);
    let c = a.app().await;
    crate::await_lapsed(&c, held).await;
    let successor = granted(&c, &mut ledger, 2, held, "successor", "1 hour").await;
    assert!(successor >= BAND);
    assert_refused(&c, held, "holder", old).await;
    let e = granted(&c, &mut ledger, 2, k, "x1", "1 hour").await;
    assert!(
        (BAND..2 * BAND).contains(&e),
        "{e} is not in the band of timeline 2"
    );
    assert_eq!(release(&c, k, "x1", e).await, "ok");

    let b = a.replica(false);
    let e = granted(&c, &mut ledger, 2, k, "x2", "1 hour").await;
    assert_eq!(release(&c, k, "x2", e).await, "ok");
    b.wait_for_replay(&a);
    b.stop_streaming(&a).await;
    let e = granted(&c, &mut ledger, 2, k, "x3", "1 hour").await; // lost
    assert_eq!(release(&c, k, "x3", e).await, "ok");
    granted(&c, &mut ledger, 2, k, "x4", "1 hour").await; // lost
    drop(c);
    a.kill_all();

    // Timeline 3.
    assert_eq!(b.promote(), 3);
    let c = b.app().await;
    let e = granted(&c, &mut ledger, 3, k, "y1", "1 hour").await;
    assert!(e >= 2 * BAND, "{e} is not in the band of timeline 3");
    assert_refused(&c, held, "holder", old).await;
    assert_eq!(
        inspect(&c, held).await.map(|(h, o, e, _)| (h, o, e)),
        Some((true, Some("successor".to_owned()), successor))
    );

    assert_eq!(ledger.violations(), Vec::<String>::new(), "{ledger:#?}");
    ledger.assert_increasing();
}

/// `owner`'s grant of `key` at `epoch` is refused: renew and release `not_owner`, fence LE001.
async fn assert_refused(c: &Client, key: &str, owner: &str, epoch: i64) {
    assert_eq!(renew(c, key, owner, epoch, "1 hour").await.0, "not_owner");
    assert_eq!(release(c, key, owner, epoch).await, "not_owner");
    let e = c
        .query_one("SELECT lease.fence($1, $2, $3)", &[&key, &owner, &epoch])
        .await
        .expect_err("fence must refuse the old grant");
    assert_eq!(code_of(&e), "LE001");
}

/// A primary with a synchronous standby, and the standby cut off: from now on every commit on the
/// primary that wrote WAL waits for the standby (wait event `SyncRep`) for ever.
async fn synchronous_pair_cut_off() -> (Node, Node) {
    let primary = Node::start();
    let standby = primary.replica(true);
    // While the standby streams, a grant's commit waits for it and returns.
    let c = primary.app().await;
    let e = within(
        "a grant with the synchronous standby streaming",
        grant(&c, "failover/sync/warmup", "w0", "1 hour"),
    )
    .await;
    standby.wait_for_replay(&primary);
    assert_eq!(
        inspect(&standby.app().await, "failover/sync/warmup")
            .await
            .unwrap()
            .2,
        e
    );
    standby.stop_streaming(&primary).await;
    (primary, standby)
}

/// Polls `pg_stat_activity` until backend `pid` waits for synchronous replication.
async fn await_sync_rep_wait(observer: &Client, pid: i32) {
    let deadline = Instant::now() + crate::LIMIT;
    loop {
        let n: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'",
                &[&pid],
            )
            .await
            .expect("read pg_stat_activity")
            .get(0);
        if n == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "backend {pid} never waited for SyncRep"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// After the primary is gone: promotes the standby and shows that `key`, acknowledged to
/// `holder` at `epoch` on the old primary, is granted to another owner at once (the grant was
/// lost: mutual exclusion broken), at an epoch in the new band (fencing holds).
async fn lost_on_promotion(standby: &Node, key: &str, holder_epoch: i64) {
    assert_eq!(standby.promote(), 2);
    let s = standby.app().await;
    let e = grant(&s, key, "other", "1 hour").await;
    assert!(
        e >= BAND && e > holder_epoch,
        "the successor's epoch {e} must be above the lost grant's {holder_epoch}"
    );
}

/// F33: what the server does (the reason for F37): with synchronous replication, a grant whose
/// commit is waiting for the standby and is cancelled (`pg_cancel_backend`) is answered
/// **acquired**, with only a WARNING (SQLSTATE 01000): the commit is local, the standby never got
/// it. A plain tokio-postgres connection hands that answer over; after a failover the key goes to
/// another owner while the first believes it holds it (its epoch is below the successor's, so a
/// guard still rejects it). `pglease::Client` withholds such an answer (F37).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn characterisation_a_cancelled_sync_rep_wait_reports_the_grant_with_a_warning() {
    let key = "failover/sync/cancelled";
    let (mut primary, standby) = synchronous_pair_cut_off().await;
    let (x, mut notices) = primary.connect_noticing(APP).await;
    let pid = backend_pid(&x).await;
    let call = tokio::spawn(async move { try_acquire(&x, key, "x", "1 hour", "0").await });
    let observer = primary.superuser().await;
    await_sync_rep_wait(&observer, pid).await;
    let cancelled: bool = observer
        .query_one("SELECT pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(cancelled);

    let (acquired, epoch, _) = within("the cancelled grant", call)
        .await
        .unwrap()
        .expect("a cancelled sync-rep wait is not an error");
    assert!(acquired, "today the client is told it acquired the key");
    let warning = within("the sync-rep warning", notices.recv())
        .await
        .expect("a notice");
    assert_eq!(
        (warning.severity(), warning.code().code()),
        ("WARNING", "01000"),
        "{warning:?}"
    );
    let epoch = epoch.unwrap();
    assert_eq!(
        inspect(&observer, key).await.map(|(h, o, e, _)| (h, o, e)),
        Some((true, Some("x".to_owned()), epoch)),
        "committed locally on the primary"
    );

    drop(observer);
    primary.kill_all();
    lost_on_promotion(&standby, key, epoch).await;
}

/// F34: with synchronous replication, a grant whose backend is terminated (`pg_terminate_backend`)
/// while its commit waits for the standby fails on the client (connection lost, outcome unknown)
/// but is committed locally. The same owner's retry goes through the idempotent "already yours"
/// path, which since 0.6.0 writes the row (a no-op update), so its commit waits for the standby as
/// well: the retry is not told "acquired" before the grant is on the standby. (Before, it returned
/// at once; taking a transaction id alone was not enough: PostgreSQL commits a transaction that
/// wrote no WAL asynchronously.) After a failover the unreplicated grant is gone, and the owner
/// never heard that it had it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_terminated_sync_rep_wait_waits_for_the_standby_too() {
    let key = "failover/sync/terminated";
    let (mut primary, standby) = synchronous_pair_cut_off().await;
    let (x, mut notices) = primary.connect_noticing(APP).await;
    let pid = backend_pid(&x).await;
    let call = tokio::spawn(async move { try_acquire(&x, key, "x", "1 hour", "0").await });
    let observer = primary.superuser().await;
    await_sync_rep_wait(&observer, pid).await;
    let terminated: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    let outcome = within("the terminated grant", call).await.unwrap();
    let e = outcome.expect_err("the client never hears the terminated call's result");
    assert!(e.is_closed(), "the connection just closes: {e:?}");
    // Seen here before the close: a WARNING with SQLSTATE 57P01 ("canceling the wait for
    // synchronous replication and terminating connection"); not asserted, the server need not
    // flush it before it exits.
    let mut seen = Vec::new();
    while let Ok(n) = notices.try_recv() {
        seen.push((n.severity().to_owned(), n.code().code().to_owned()));
    }
    eprintln!("notices before the connection closed: {seen:?}");
    crate::await_backend_gone(&observer, pid).await;
    let (held, owner, epoch, _) = inspect(&observer, key).await.expect("committed locally");
    assert_eq!((held, owner.as_deref()), (true, Some("x")));

    // The same owner's retry waits for the (cut-off) standby, as any write does: no answer yet.
    let retry = primary.app().await;
    let retry_pid = backend_pid(&retry).await;
    let retried = tokio::spawn(async move { try_acquire(&retry, key, "x", "1 hour", "0").await });
    await_sync_rep_wait(&observer, retry_pid).await;
    assert!(
        !retried.is_finished(),
        "the retry answered before its commit reached the standby"
    );

    drop(observer);
    primary.kill_all();
    let answer = within("the retry to end with its server", retried)
        .await
        .unwrap();
    assert!(
        answer.is_err(),
        "the retry never heard \"acquired\" for a grant the standby did not have: {answer:?}"
    );
    lost_on_promotion(&standby, key, epoch).await;
}

/// A `pglease::Client` of the application role on `node`'s database, with its own pool (so its
/// connections are driven by `pglease::drive_connection`).
async fn lease_client(node: &Node, owner: &str) -> pglease::Client {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(node.cluster().socket_dir())
        .port(node.cluster().port())
        .user(APP)
        .dbname(crate::node::DB);
    pglease::Client::builder()
        .owner(owner)
        .connect_with(config, tokio_postgres::NoTls)
        .await
        .expect("connect a pglease client")
}

/// Polls `pg_stat_activity` until a backend of the application role waits for synchronous
/// replication; returns its pid.
async fn await_app_sync_rep_wait(observer: &Client) -> i32 {
    let deadline = Instant::now() + crate::LIMIT;
    loop {
        let pid: Option<i32> = observer
            .query_one(
                "SELECT min(pid) FROM pg_stat_activity WHERE usename = $1 AND wait_event = 'SyncRep'",
                &[&APP],
            )
            .await
            .expect("read pg_stat_activity")
            .get(0);
        if let Some(pid) = pid {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no backend of {APP} waited for SyncRep"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// F37: the Rust client never reports a grant whose commit the synchronous standby did not
/// confirm. The scenario of F33 through `pglease::Client::try_acquire`: the cancelled wait's answer
/// (acquired, with the sync-rep WARNING) is withheld — the connection is closed before the answer is
/// handed over — so the call fails as a lost connection (outcome unknown) instead of returning a
/// lease. After the failover another owner gets the key, and nobody was ever told it had it before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_never_reports_a_grant_whose_sync_rep_wait_was_cancelled() {
    let key = "failover/sync/client-cancelled";
    let (mut primary, standby) = synchronous_pair_cut_off().await;
    let client = lease_client(&primary, "x").await;
    let observer = primary.superuser().await;
    let call = tokio::spawn(async move {
        let answer = client.try_acquire(key, Duration::from_secs(3600)).await;
        (answer, client)
    });
    let pid = await_app_sync_rep_wait(&observer).await;
    let cancelled: bool = observer
        .query_one("SELECT pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(cancelled);
    let (answer, client) = within("the cancelled grant", call).await.unwrap();
    let e = answer.expect_err("the client must not report the unconfirmed grant");
    assert!(
        e.is_connection() || e.is_closed(),
        "reported as a lost connection (outcome unknown): {e:?}"
    );
    // The server did grant it, locally. (The client closed the connection at the warning, which
    // the backend sends before it makes its commit visible: once the backend is gone, it is.)
    crate::await_backend_gone(&observer, pid).await;
    let (held, owner, epoch, _) = inspect(&observer, key).await.expect("committed locally");
    assert_eq!((held, owner.as_deref()), (true, Some("x")));

    drop(client);
    drop(observer);
    primary.kill_all();
    lost_on_promotion(&standby, key, epoch).await;
}

/// F38: the opt-in failover quarantine (SEMANTICS §8.4). With asynchronous replication a grant the
/// standby never received (to `w2`) is lost in the failover; its holder may act until its ttl runs
/// out. With `lease.configure(max_ttl => 8 s, failover_quarantine => 10 s)`, the promoted node makes
/// no new grant (LE004) for 10 s from the first acquire on the new timeline, which is longer than any
/// lost grant can run; its own visible grants are still renewed and returned to their holder; a
/// rolled-back call does not restart the quarantine; a blocking acquire waits through it; after it,
/// grants resume above the lost epochs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_promotion_the_quarantine_refuses_new_grants_until_every_lost_grant_has_run_out() {
    let (lost, kept, other) = (
        "failover/quarantine/lost",
        "failover/quarantine/kept",
        "failover/quarantine/other",
    );
    let mut primary = Node::start();
    let standby = primary.replica(false);
    primary
        .admin()
        .await
        .batch_execute("SELECT lease.configure('8 s', '10 s')")
        .await
        .unwrap();
    let c = primary.app().await;
    // Visible to the standby: a lease of `holder` on `kept`.
    let kept_epoch = grant(&c, kept, "holder", "8 s").await;
    standby.wait_for_replay(&primary);
    standby.stop_streaming(&primary).await;
    // Lost: `w2`'s grant of `lost`.
    let lost_epoch = grant(&c, lost, "w2", "8 s").await;
    drop(c);
    primary.kill_all();

    assert_eq!(standby.promote(), 2);
    let s = standby.app().await;
    assert_eq!(
        inspect(&s, lost).await,
        None,
        "the standby never had w2's grant"
    );
    // The visible holder renews and gets its own grant back: neither is a new grant.
    assert_eq!(renew(&s, kept, "holder", kept_epoch, "8 s").await.0, "ok");
    // The first acquire on the new timeline starts the quarantine and is refused.
    let refused = try_acquire_code(&s, lost, "n1", "8 s", "0").await;
    assert_eq!(refused.as_deref(), Some("LE004"));
    let until: std::time::SystemTime = s
        .query_one("SELECT quarantine_until FROM lease.configuration()", &[])
        .await
        .unwrap()
        .get(0);
    let (got, epoch, _) = try_acquire(&s, kept, "holder", "8 s", "0").await.unwrap();
    assert_eq!(
        (got, epoch),
        (true, Some(kept_epoch)),
        "the holder's own grant comes back"
    );
    for key in [lost, other] {
        assert_eq!(
            try_acquire_code(&s, key, "n1", "8 s", "0").await.as_deref(),
            Some("LE004"),
            "{key}: no new grant during the quarantine"
        );
    }
    // A refused call inside a transaction that rolls back does not move the quarantine's end.
    s.batch_execute("BEGIN").await.unwrap();
    assert!(
        try_acquire_code(&s, other, "n1", "8 s", "0")
            .await
            .is_some()
    );
    s.batch_execute("ROLLBACK").await.unwrap();
    let until_after: std::time::SystemTime = s
        .query_one("SELECT quarantine_until FROM lease.configuration()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(until_after, until);
    // A blocking acquire, of a key or of a semaphore's slot, whose wait runs out during the
    // quarantine is refused with LE004, as a non-blocking one. The wait is a quarter of what is
    // left of the quarantine by the server clock (at most 300 ms), so it runs out inside it however
    // slowly the test got here; LE004 itself says the call ended during the quarantine.
    let left_ms: f64 = s
        .query_one(
            "SELECT extract(epoch FROM quarantine_until - clock_timestamp())::float8 * 1000 \
               FROM lease.configuration()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let wait = format!("{} ms", (left_ms / 4.0).clamp(1.0, 300.0).floor());
    assert_eq!(
        try_acquire_code(&s, other, "n1", "8 s", &wait)
            .await
            .as_deref(),
        Some("LE004"),
        "a blocking acquire whose wait ({wait}) ends in the quarantine"
    );
    assert_eq!(
        try_acquire_slot_code(&s, "failover/quarantine/sem", "n1", &wait)
            .await
            .as_deref(),
        Some("LE004"),
        "a blocking acquire_slot whose wait ({wait}) ends in the quarantine"
    );
    // A blocking acquire waits through the quarantine and is granted after it, above the lost epoch;
    // so does a blocking acquire_slot, at the same time.
    let s2 = standby.app().await;
    let (key_grant, slot_grant) = within("blocking acquires through the quarantine", async {
        tokio::join!(
            try_acquire(&s, lost, "n1", "8 s", "20 s"),
            try_acquire_slot_code(&s2, "failover/quarantine/sem", "n1", "20 s"),
        )
    })
    .await;
    let (got, epoch, _) = key_grant.unwrap();
    assert!(got);
    let epoch = epoch.unwrap();
    assert!(epoch > lost_epoch && epoch >= BAND, "{epoch}");
    assert_eq!(slot_grant, None, "the slot is granted after the quarantine");
    assert!(
        crate::server_clock_reached(&s, until).await,
        "granted only once the quarantine was over"
    );
    assert_eq!(
        try_acquire_code(&s, other, "n2", "8 s", "0").await,
        None,
        "after the quarantine new grants resume"
    );
}

/// `lease.acquire`'s SQLSTATE if it failed, `None` if it answered (granted or not).
async fn try_acquire_code(
    c: &Client,
    key: &str,
    owner: &str,
    ttl: &str,
    wait: &str,
) -> Option<String> {
    c.query_one(
        "SELECT acquired FROM lease.acquire($1, $2, $3::text::interval, $4::text::interval)",
        &[&key, &owner, &ttl, &wait],
    )
    .await
    .err()
    .map(|e| code_of(&e))
}

/// `lease.acquire_slot`'s SQLSTATE (a semaphore of two slots, ttl 8 s) if it failed, `None` if it
/// was granted; panics if it answered without a grant.
async fn try_acquire_slot_code(
    c: &Client,
    semaphore: &str,
    owner: &str,
    wait: &str,
) -> Option<String> {
    match c
        .query_one(
            "SELECT acquired FROM lease.acquire_slot($1, $2, '8 s', 2, $3::text::interval)",
            &[&semaphore, &owner, &wait],
        )
        .await
    {
        Ok(row) => {
            assert!(
                row.get::<_, bool>(0),
                "{semaphore}: a free slot was not granted"
            );
            None
        }
        Err(e) => Some(code_of(&e)),
    }
}

/// F39: a min epoch raised on one timeline (a slot moved in, SEMANTICS §8.5) stays above what that
/// timeline granted after a promotion: grants on the new timeline are at least the min epoch plus
/// 2^40, so even a lost grant made above the min epoch is not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_min_epoch_carries_its_band_across_a_promotion() {
    let key = "failover/min-epoch/k";
    let floor = 5 * BAND + 7;
    let mut primary = Node::start();
    let standby = primary.replica(false);
    let raised: i64 = primary
        .admin()
        .await
        .query_one("SELECT lease.raise_min_epoch($1)", &[&floor])
        .await
        .unwrap()
        .get(0);
    assert_eq!(raised, floor);
    let c = primary.app().await;
    let e = grant(&c, key, "w1", "1 hour").await;
    assert_eq!(e, floor);
    assert_eq!(release(&c, key, "w1", e).await, "ok");
    standby.wait_for_replay(&primary);
    standby.stop_streaming(&primary).await;
    let mut lost = 0;
    for i in 0..3 {
        let owner = format!("lost{i}");
        lost = grant(&c, key, &owner, "1 hour").await;
        assert_eq!(release(&c, key, &owner, lost).await, "ok");
    }
    drop(c);
    primary.kill_all();
    assert_eq!(standby.promote(), 2);
    let s = standby.app().await;
    let e = grant(&s, key, "n1", "1 hour").await;
    assert!(e > lost, "{e} must be above the lost grant {lost}");
    assert!(
        e >= floor + BAND,
        "{e} is in the min epoch's band of timeline 2"
    );
    let fresh = grant(&s, "failover/min-epoch/new", "n1", "1 hour").await;
    assert!(fresh >= floor + BAND, "a new key too: {fresh}");
}

/// Seconds from `expires_at` of `key` to the clock of the server `c` is connected to.
async fn seconds_left(c: &Client, key: &str) -> f64 {
    c.query_one(
        "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM lease.inspect($1)",
        &[&key],
    )
    .await
    .expect("inspect the key")
    .get(0)
}

/// The clock of the server `c` is connected to, in seconds since the epoch.
async fn server_clock(c: &Client) -> f64 {
    c.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .expect("read the clock")
        .get(0)
}

/// Seconds `b`'s clock is ahead of `a`'s (one reading each, taken one after the other).
async fn clock_ahead(a: &Client, b: &Client) -> f64 {
    let ta = server_clock(a).await;
    server_clock(b).await - ta
}

/// F36: characterisation of the clock assumption between nodes. A promoted standby judges expiry
/// by its own clock against `expires_at` written by the old primary's clock. With the standby's
/// clock 20 s ahead, a 30 s grant made on the primary has about 10 s left on the promoted node,
/// and another owner can be granted the key then — while its holder, by its own monotonic clock,
/// still counts on about 30 s. A clock behind lengthens leases the same way. Node clocks must
/// agree far better than the ttls in use (NTP); SEMANTICS.md §8, FAILURE-MODEL.md §2.14.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_with_a_clock_ahead_shortens_every_lease_by_the_skew() {
    let key = "failover/clock/ahead";
    let mut primary = Node::start();
    let mut standby = primary.replica(false);
    standby.skew_clock("+20s");
    let skew = clock_ahead(&primary.superuser().await, &standby.superuser().await).await;
    assert!(
        (15.0..25.0).contains(&skew),
        "the standby runs about 20 s ahead (measured {skew:.1} s)"
    );

    let c = primary.app().await;
    grant(&c, key, "x", "30 seconds").await;
    let left_on_primary = seconds_left(&c, key).await;
    standby.wait_for_replay(&primary);
    drop(c);
    primary.kill_all();
    assert_eq!(standby.promote(), 2);
    let s = standby.app().await;
    let left_on_promoted = seconds_left(&s, key).await;
    let lost = left_on_primary - left_on_promoted;
    assert!(
        (15.0..25.0).contains(&lost),
        "the promoted node cut the lease by about the skew: {left_on_primary:.1} s left on the \
         primary, {left_on_promoted:.1} s on the promoted standby"
    );
}

const KEYS: usize = 4;
const WORKERS: usize = 4;
/// Random operations each worker makes on the promoted standby.
const OPS_AFTER: usize = 40;

/// `PGLEASE_FAILOVER_TRIALS`: the number of trials of the randomised loop (default 3).
fn trials() -> usize {
    match std::env::var("PGLEASE_FAILOVER_TRIALS") {
        Err(_) => 3,
        Ok(v) => match v.trim().parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("PGLEASE_FAILOVER_TRIALS must be a positive number, got {v:?}"),
        },
    }
}

fn trial_key(k: usize) -> String {
    format!("failover/trial/{k}")
}

/// One worker: random acquire (no wait), renew and release on [`KEYS`] keys as `owner`, each
/// grant recorded in `ledger` with `timeline` and counted in `acks`, until a call fails (`Err`:
/// the server went away) or `ops` operations were made.
async fn trial_worker(
    c: Client,
    owner: String,
    timeline: u32,
    mut rng: Rng,
    ledger: Arc<Mutex<Ledger>>,
    acks: Arc<AtomicUsize>,
    ops: usize,
) -> Result<(), tokio_postgres::Error> {
    let mut held: HashMap<usize, i64> = HashMap::new();
    for _ in 0..ops {
        let k = rng.below(KEYS as u64) as usize;
        let key = trial_key(k);
        let ttl = format!("{} milliseconds", 50 + rng.below(450));
        if let Some(&e) = held.get(&k) {
            let status: String = if rng.below(3) == 0 {
                held.remove(&k);
                c.query_one(
                    "SELECT status FROM lease.release($1, $2, $3)",
                    &[&key, &owner, &e],
                )
                .await?
                .get(0)
            } else {
                c.query_one(
                    "SELECT status FROM lease.renew($1, $2, $3, $4::text::interval)",
                    &[&key, &owner, &e, &ttl],
                )
                .await?
                .get(0)
            };
            if status != "ok" {
                held.remove(&k);
            }
            acks.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        let (acquired, epoch, _) = try_acquire(&c, &key, &owner, &ttl, "0").await?;
        if acquired {
            let epoch = epoch.expect("a grant has an epoch");
            held.insert(k, epoch);
            ledger.lock().unwrap().note(&key, &owner, epoch, timeline);
        }
        acks.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// F35: randomised trials with asynchronous replication: workers acquire, renew and release 4
/// keys on the primary, which is killed (every process at once) after a random number of
/// acknowledged calls (in half the trials the standby is cut off half-way there, as a lagging
/// standby); the standby is promoted and the workers (as new owners) go on there, and
/// each key is granted once more by a checker that waits for the key. Across every trial: no grant
/// on the new timeline at or below an epoch acknowledged for its key on the old one, no (key,
/// epoch) granted to two owners. `PGLEASE_FAILOVER_TRIALS` sets the number of trials (default 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomised_async_failovers_never_regress_an_acknowledged_epoch() {
    let mut rng = Rng::from_env("randomised_async_failovers_never_regress_an_acknowledged_epoch");
    let trials = trials();
    let started = Instant::now();
    let mut lost_keys = 0;
    for trial in 0..trials {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let mut primary = Node::start();
        let standby = primary.replica(false);

        let acks = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            tasks.push(tokio::spawn(trial_worker(
                primary.app().await,
                format!("t{trial}-w{w}"),
                1,
                Rng::new(rng.below(u64::MAX)),
                ledger.clone(),
                acks.clone(),
                usize::MAX,
            )));
        }
        // The random moment: after this many acknowledged calls. In half the trials the standby
        // is also cut off half-way there, as a lagging standby: on loopback an async standby is
        // rarely behind when the primary dies, and the trial should see lost grants too.
        let kill_after = 5 + rng.below(200) as usize;
        let cut_after = (rng.below(2) == 0).then_some(kill_after / 2);
        let await_acks = |n: usize| {
            let acks = acks.clone();
            async move {
                let deadline = Instant::now() + crate::LIMIT;
                while acks.load(Ordering::SeqCst) < n {
                    assert!(Instant::now() < deadline, "the load made too few calls");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        if let Some(n) = cut_after {
            await_acks(n).await;
            standby.stop_streaming(&primary).await;
        }
        await_acks(kill_after).await;
        primary.kill_all();
        for t in tasks {
            let r = within("a worker to notice the kill", t).await.unwrap();
            assert!(
                r.is_err(),
                "a worker of the killed primary ran out of operations"
            );
        }

        assert_eq!(standby.promote(), 2);
        // How many keys' newest acknowledged epoch the standby lacked (for the record).
        let su = standby.superuser().await;
        for k in 0..KEYS {
            let key = trial_key(k);
            let counter: Option<i64> = su
                .query_opt("SELECT epoch FROM lease.leases WHERE key = $1", &[&key])
                .await
                .unwrap()
                .map(|r| r.get(0));
            let acked = ledger
                .lock()
                .unwrap()
                .grants
                .iter()
                .filter(|g| g.key == key)
                .map(|g| g.epoch)
                .max();
            if acked.is_some_and(|a| counter.is_none_or(|c| c < a)) {
                lost_keys += 1;
            }
        }
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            tasks.push(tokio::spawn(trial_worker(
                standby.app().await,
                format!("t{trial}-w{w}-after"),
                2,
                Rng::new(rng.below(u64::MAX)),
                ledger.clone(),
                acks.clone(),
                OPS_AFTER,
            )));
        }
        for t in tasks {
            within("a worker on the promoted standby", t)
                .await
                .unwrap()
                .expect("the promoted standby answers");
        }
        let checker = standby.app().await;
        for k in 0..KEYS {
            let key = trial_key(k);
            let (acquired, epoch, _) = within(
                "the checker's grant",
                try_acquire(&checker, &key, "checker", "1 hour", "10 seconds"),
            )
            .await
            .expect("the checker's acquire");
            assert!(acquired);
            ledger
                .lock()
                .unwrap()
                .note(&key, "checker", epoch.unwrap(), 2);
        }

        let ledger = ledger.lock().unwrap();
        assert_eq!(
            ledger.violations(),
            Vec::<String>::new(),
            "trial {trial} (killed after {kill_after} calls, standby cut off after {cut_after:?})"
        );
        for g in ledger.grants.iter().filter(|g| g.timeline == 2) {
            assert!(g.epoch >= BAND, "trial {trial}: {g:?} below the band");
        }
    }
    eprintln!(
        "{trials} async failover trials in {:?}; in {lost_keys} of {} keys the standby lacked \
         the newest acknowledged grant",
        started.elapsed(),
        trials * KEYS
    );
}
