//! When blocking acquires wake, by the server's clock: never before the release commits or the lease
//! lapses, and not a sleep-through later (one 50 ms poll plus generous slack; the bounds are about
//! correctness, not speed). Many waiters on one key: one grant per release, increasing epochs, and
//! grants that never overlap (SEMANTICS §3, §5; I1, I2, I6, I10).
//!
//! A grant's server time is `expires_at - ttl` (acquire sets `expires_at = clock_timestamp() + ttl`).
//! Waiting is observed on the server (`PgSleep`), never assumed from elapsed time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pglease_tests::{Wait, await_backend_waiting, backend_pid, key, server, sqlstate};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// How late after the freeing event a waiter may be granted: one poll (50 ms) plus generous slack.
const SLACK: Duration = Duration::from_secs(1);
/// How long to wait for a backend to be seen sleeping, or a waiter to be granted.
const SEEN_WITHIN: Duration = Duration::from_secs(60);

/// A grant: (acquired, epoch, server time of the grant).
type Grant = (bool, Option<i64>, Option<SystemTime>);

/// Starts a blocking acquire of `k` for `owner` (ttl 1 hour, wait 5 minutes) on its own task.
fn spawn_waiter(
    c: Arc<Client>,
    k: &str,
    owner: &str,
) -> JoinHandle<Result<Grant, tokio_postgres::Error>> {
    let (k, owner) = (k.to_owned(), owner.to_owned());
    tokio::spawn(async move {
        let row = c
            .query_one(
                "SELECT acquired, epoch, expires_at - interval '1 hour'
                   FROM lease.acquire($1, $2, interval '1 hour', interval '5 minutes')",
                &[&k, &owner],
            )
            .await?;
        Ok((row.get(0), row.get(1), row.get(2)))
    })
}

/// `later - earlier`, panicking (with `what`) if `later` is before `earlier`.
fn after(later: SystemTime, earlier: SystemTime, what: &str) -> Duration {
    later
        .duration_since(earlier)
        .unwrap_or_else(|e| panic!("{what}: {:?} too early", e.duration()))
}

/// `later - earlier`, or zero if `later` is before `earlier`.
fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

/// The server's clock now, as seen by `c`.
async fn server_now(c: &Client) -> SystemTime {
    c.query_one("SELECT clock_timestamp()", &[])
        .await
        .expect("clock_timestamp")
        .get(0)
}

#[tokio::test]
async fn blocking_acquire_woken_by_a_release_is_granted_after_its_commit_within_a_poll() {
    let s = server();
    let (holder, waiter, observer) = (
        s.app().await,
        s.app().await,
        s.connect_super("postgres").await,
    );
    let k = key("wake_on_release", "k");
    holder
        .execute("SELECT lease.acquire($1, 'holder', '1 hour')", &[&k])
        .await
        .unwrap();
    let pid = backend_pid(&waiter).await;
    let waiting = spawn_waiter(Arc::new(waiter), &k, "waiter");
    await_backend_waiting(&observer, pid, Wait::Sleep, SEEN_WITHIN).await;

    // Release, and keep it uncommitted for several of the waiter's polls: it must not see it.
    holder.batch_execute("BEGIN").await.unwrap();
    let status: String = holder
        .query_one("SELECT status FROM lease.release($1, 'holder', 1)", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "ok");
    let before_commit: SystemTime = holder
        .query_one("SELECT clock_timestamp() FROM pg_sleep(0.2)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!waiting.is_finished(), "woke before the release committed");
    holder.batch_execute("COMMIT").await.unwrap();
    let committed_by = server_now(&holder).await;

    let (acquired, epoch, granted_at) = waiting.await.unwrap().unwrap();
    assert!(acquired);
    assert_eq!(epoch, Some(3), "the release left the counter at 2");
    let granted_at = granted_at.unwrap();
    after(
        granted_at,
        before_commit,
        "granted before the release committed",
    );
    let late = since(granted_at, committed_by);
    assert!(late < SLACK, "granted {late:?} after the release committed");
}

#[tokio::test]
async fn blocking_acquire_woken_by_a_lapse_is_granted_at_the_expiry_within_a_poll() {
    let s = server();
    let (holder, waiter) = (s.app().await, s.app().await);
    let k = key("wake_on_lapse", "k");
    let expiry: SystemTime = holder
        .query_one(
            "SELECT expires_at FROM lease.acquire($1, 'holder', '2 seconds')",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    let (acquired, epoch, granted_at) = spawn_waiter(Arc::new(waiter), &k, "waiter")
        .await
        .unwrap()
        .unwrap();
    assert!(acquired);
    assert_eq!(epoch, Some(2));
    let late = after(
        granted_at.unwrap(),
        expiry,
        "granted before the lease lapsed",
    );
    assert!(late < SLACK, "granted {late:?} after the lapse");
}

#[tokio::test]
async fn repeatable_read_waiter_keeps_waiting_after_a_release_and_fails_40001_at_the_old_expiry() {
    // SEMANTICS §5: a release committed after the waiter's snapshot is not seen; the waiter waits
    // for the old expiry, then fails with a serialization error when it tries to take the row.
    let s = server();
    let (holder, waiter, observer) = (
        s.app().await,
        s.app().await,
        s.connect_super("postgres").await,
    );
    let k = key("repeatable_read_waiter", "k");
    let expiry: SystemTime = holder
        .query_one(
            "SELECT expires_at FROM lease.acquire($1, 'holder', '2 seconds')",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    let pid = backend_pid(&waiter).await;
    waiter
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let waiter = Arc::new(waiter);
    let waiting = spawn_waiter(Arc::clone(&waiter), &k, "waiter");
    await_backend_waiting(&observer, pid, Wait::Sleep, SEEN_WITHIN).await;
    let status: String = holder
        .query_one("SELECT status FROM lease.release($1, 'holder', 1)", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "ok");
    let released_by = server_now(&holder).await;
    assert!(
        released_by < expiry,
        "inconclusive: the release committed after the lease lapsed"
    );

    // Watch the waiter from the server: the last server time it was seen sleeping (a lower bound:
    // the statement's start precedes the look at pg_stat_activity), and when it stopped.
    let mut last_asleep = None;
    let deadline = Instant::now() + SEEN_WITHIN;
    let stopped_at: SystemTime = loop {
        assert!(Instant::now() < deadline, "the waiter never stopped");
        let row = observer
            .query_one(
                "SELECT state, wait_event IS NOT DISTINCT FROM 'PgSleep', statement_timestamp(),
                        state_change
                   FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap();
        let (state, asleep): (String, bool) = (row.get(0), row.get(1));
        if asleep {
            last_asleep = Some(row.get::<_, SystemTime>(2));
        } else if state != "active" {
            assert_eq!(state, "idle in transaction (aborted)");
            break row.get(3);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let e = waiting
        .await
        .unwrap()
        .expect_err("the waiter cannot take the row");
    assert_eq!(sqlstate(&e).as_deref(), Some("40001"));
    let last_asleep = last_asleep.expect("seen asleep");
    assert!(
        last_asleep > released_by,
        "stopped waiting at the release, which it must not see"
    );
    let early = since(expiry, last_asleep);
    assert!(
        early < SLACK,
        "last seen waiting {early:?} before the old expiry"
    );
    let late = after(stopped_at, expiry, "stopped before the old expiry");
    assert!(late < SLACK, "failed {late:?} after the old expiry");

    // Nothing was acquired: after the rollback the key is simply free.
    waiter.batch_execute("ROLLBACK").await.unwrap();
    let row = waiter
        .query_one(
            "SELECT acquired, epoch FROM lease.acquire($1, 'waiter', '1 hour')",
            &[&k],
        )
        .await
        .unwrap();
    assert_eq!((row.get(0), row.get(1)), (true, 3_i64));
}

#[tokio::test]
async fn many_waiters_get_one_grant_per_release_with_increasing_epochs_and_no_overlap() {
    const WAITERS: usize = 8;
    let s = server();
    let (driver, observer) = (s.app().await, s.connect_super("postgres").await);
    // Sleeping waiters hold no row lock (I9): the holder's release must never wait for one.
    driver
        .batch_execute("SET lock_timeout = '10s'")
        .await
        .unwrap();
    let k = key("many_waiters", "k");
    let first: SystemTime = driver
        .query_one(
            "SELECT expires_at - interval '1 hour' FROM lease.acquire($1, 'holder', '1 hour')",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);

    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiting: HashMap<String, i32> = HashMap::new();
    for i in 0..WAITERS {
        let c = s.app().await;
        let owner = format!("w{i}");
        waiting.insert(owner.clone(), backend_pid(&c).await);
        let (tx, handle) = (tx.clone(), spawn_waiter(Arc::new(c), &k, &owner));
        tokio::spawn(async move {
            let grant = handle.await.unwrap().expect("waiter");
            tx.send((owner, grant)).unwrap();
        });
    }

    // (owner, epoch, granted at, released at) of every grant, in order.
    let mut holds: Vec<(String, i64, SystemTime, SystemTime)> = Vec::new();
    let (mut owner, mut epoch, mut granted_at) = ("holder".to_owned(), 1_i64, first);
    let release = "SELECT status, clock_timestamp() FROM lease.release($1, $2, $3)";
    for round in 0..WAITERS {
        for &pid in waiting.values() {
            await_backend_waiting(&observer, pid, Wait::Sleep, SEEN_WITHIN).await;
        }
        assert!(
            rx.try_recv().is_err(),
            "round {round}: a waiter was granted while {owner} held the key"
        );
        let row = driver
            .query_one(release, &[&k, &owner, &epoch])
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: the holder's release failed with {:?} \
                     (55P03: it waited 10 s for a row lock that a sleeping waiter holds)",
                    sqlstate(&e)
                )
            });
        assert_eq!(row.get::<_, String>(0), "ok", "round {round}");
        let released_at: SystemTime = row.get(1);
        let committed_by = server_now(&driver).await;
        holds.push((owner.clone(), epoch, granted_at, released_at));

        let (winner, (acquired, won, at)) = tokio::time::timeout(SEEN_WITHIN, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no waiter was granted the released key"))
            .expect("waiters report");
        assert!(
            acquired && waiting.remove(&winner).is_some(),
            "round {round}: {winner}"
        );
        assert_eq!(won, Some(epoch + 2), "round {round}: release then grant");
        let at = at.unwrap();
        after(at, released_at, "granted before the release");
        let late = since(at, committed_by);
        assert!(
            late < SLACK,
            "round {round}: granted {late:?} after the release"
        );
        (owner, epoch, granted_at) = (winner, epoch + 2, at);
    }
    assert!(waiting.is_empty());
    assert!(rx.try_recv().is_err(), "a grant too many");
    let row = driver
        .query_one(release, &[&k, &owner, &epoch])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ok");
    holds.push((owner, epoch, granted_at, row.get(1)));

    // Every hold ends before the next begins, by the server clock; epochs strictly increase.
    for pair in holds.windows(2) {
        let ((o1, e1, _, released), (o2, e2, granted, _)) = (&pair[0], &pair[1]);
        assert!(e2 > e1, "epochs increase: {o1}@{e1} then {o2}@{e2}");
        assert!(
            granted > released,
            "{o2}@{e2} granted before {o1}@{e1} was released"
        );
    }
    assert_eq!(
        holds.len(),
        1 + WAITERS,
        "the first holder and one grant per waiter"
    );
    assert_eq!(epoch, 1 + 2 * WAITERS as i64);
}
