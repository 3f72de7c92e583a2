//! A holder that hangs: a stopped process, or an open transaction left idle. Without a row lock the
//! lease simply lapses and is taken over; an uncommitted write to the key's row makes every
//! ownership change of that key wait for its transaction (F12–F17).

use std::time::SystemTime;

use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use crate::node::Node;
use crate::{
    LIMIT, acquire, await_backend_gone, await_lapsed, await_process_stopped, backend_state, grant,
    grant_until, held, inspect, not_held, renew, within,
};

/// The takeover query: a blocking acquire by worker-b, reporting whether it was granted at or after
/// `$2` (the old expiry), judged on the server.
const TAKEOVER: &str = "SELECT a.acquired, a.epoch, a.expires_at - interval '1 hour' >= $2 \
                          FROM lease.acquire($1, 'worker-b', '1 hour', '30 seconds') AS a";

/// F12: a holder whose backend is stopped (SIGSTOP) loses its lease at the expiry: a waiting
/// acquirer takes it over with the next epoch. The heartbeat it sent while hung runs when it
/// resumes, and fails: a late renew never resurrects a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_holder_loses_its_lease_at_expiry_and_its_late_heartbeat_fails() {
    let node = Node::start();
    let holder = node.app().await;
    let pid = backend_pid(&holder).await;
    let (e, x) = grant_until(&holder, "k", "worker-a", "1 second").await;

    node.signal(pid, libc::SIGSTOP);
    await_process_stopped(pid);
    let heartbeat = tokio::spawn(async move { renew(&holder, "k", "worker-a", e, "1 hour").await });

    let taker = node.app().await;
    let row = within("the takeover", taker.query_one(TAKEOVER, &[&"k", &x]))
        .await
        .unwrap();
    let got: (bool, Option<i64>, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(got, (true, Some(e + 1), true), "taken over at the expiry");
    assert!(
        !heartbeat.is_finished(),
        "the hung holder has not run its heartbeat"
    );

    node.signal(pid, libc::SIGCONT);
    let (status, _) = within("the late heartbeat", heartbeat).await.unwrap();
    assert_eq!(status, "not_owner", "the late heartbeat fails");
    let now_held = inspect(&taker, "k").await.unwrap();
    assert_eq!(
        (now_held.1.as_deref(), now_held.2),
        (Some("worker-b"), e + 1)
    );
}

/// F13: a holder idle in an open transaction that only read (no row lock) does not delay the
/// takeover; inside that transaction it then learns it lost the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transaction_that_wrote_nothing_does_not_delay_takeover() {
    let node = Node::start();
    let su = node.superuser().await;
    let holder = node.app().await;
    let pid = backend_pid(&holder).await;
    let (e, x) = grant_until(&holder, "k", "worker-a", "1 second").await;
    holder.batch_execute("BEGIN").await.unwrap();
    assert_eq!(inspect(&holder, "k").await, held("worker-a", e, x));
    assert_eq!(
        backend_state(&su, pid).await.as_deref(),
        Some("idle in transaction")
    );

    let taker = node.app().await;
    let row = within("the takeover", taker.query_one(TAKEOVER, &[&"k", &x]))
        .await
        .unwrap();
    let got: (bool, Option<i64>, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(got, (true, Some(e + 1), true));
    assert_eq!(
        backend_state(&su, pid).await.as_deref(),
        Some("idle in transaction"),
        "taken over while the holder's transaction is still open"
    );
    assert_eq!(
        renew(&holder, "k", "worker-a", e, "1 hour").await.0,
        "not_owner",
        "READ COMMITTED: the holder's next statement sees the takeover"
    );
    holder.batch_execute("COMMIT").await.unwrap();
}

/// A holder with an uncommitted renew, idle, its committed expiry passed, and a takeover blocked on
/// its row lock (observed in pg_locks). Returns (holder, its pid, epoch, the renew's expiry, the
/// observer, the blocked takeover).
async fn takeover_blocked_by_an_uncommitted_renew(
    node: &Node,
    setup: &str,
) -> (
    tokio_postgres::Client,
    i32,
    i64,
    SystemTime,
    tokio_postgres::Client,
    tokio::task::JoinHandle<pglease_tests::calls::Acquired>,
) {
    let observer = node.superuser().await;
    let holder = node.app().await;
    holder.batch_execute(setup).await.unwrap();
    let pid = backend_pid(&holder).await;
    let e = grant(&holder, "k", "worker-a", "1 second").await;
    holder.batch_execute("BEGIN").await.unwrap();
    let (status, renewed) = renew(&holder, "k", "worker-a", e, "1 hour").await;
    assert_eq!(status, "ok", "the renew ran before the expiry");

    // Others see only the committed row: it lapses on schedule.
    await_lapsed(&observer, "k").await;
    assert_eq!(inspect(&observer, "k").await, not_held(e));

    let taker = node.app().await;
    let taker_pid = backend_pid(&taker).await;
    let takeover =
        tokio::spawn(async move { acquire(&taker, "k", "worker-b", "1 hour", "0").await });
    await_backend_waiting(&observer, taker_pid, Wait::Lock, LIMIT).await;
    assert_eq!(
        inspect(&observer, "k").await,
        not_held(e),
        "reported lapsed, yet nobody can take it over"
    );
    (holder, pid, e, renewed.unwrap(), observer, takeover)
}

/// F14: an uncommitted renew holds the key's row lock: once the committed expiry passes, the key
/// reads as lapsed but a takeover waits for the holder's transaction; a rollback lets it through
/// with the next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_renew_blocks_takeover_until_its_transaction_ends() {
    let node = Node::start();
    let (holder, _, e, _, observer, takeover) =
        takeover_blocked_by_an_uncommitted_renew(&node, "SELECT 1").await;
    assert!(!takeover.is_finished());
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (acquired, epoch, _) = within("the takeover", takeover).await.unwrap();
    assert_eq!((acquired, epoch), (true, Some(e + 1)));
    assert_eq!(
        inspect(&observer, "k").await.unwrap().1.as_deref(),
        Some("worker-b")
    );
}

/// F15: if the blocking transaction commits instead, its renew (made before the expiry) stands:
/// the holder keeps the lease at the same epoch and the waiting takeover is refused. At no instant
/// did anyone else hold the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_committed_late_keeps_the_lease_and_nobody_else_got_it() {
    let node = Node::start();
    let (holder, _, e, renewed, observer, takeover) =
        takeover_blocked_by_an_uncommitted_renew(&node, "SELECT 1").await;
    holder.batch_execute("COMMIT").await.unwrap();
    let got = within("the takeover", takeover).await.unwrap();
    assert_eq!(
        got,
        (false, None, None),
        "refused: the renewed lease is held"
    );
    assert_eq!(inspect(&observer, "k").await, held("worker-a", e, renewed));
}

/// F16: `idle_in_transaction_session_timeout` bounds how long an idle holder can block a takeover:
/// the server ends the holder's session, its transaction rolls back, and the waiting takeover is
/// granted with the next epoch without anyone intervening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_session_timeout_unblocks_a_takeover() {
    let node = Node::start();
    let (holder, pid, e, _, observer, takeover) = takeover_blocked_by_an_uncommitted_renew(
        &node,
        "SET idle_in_transaction_session_timeout = '4s'",
    )
    .await;
    let (acquired, epoch, _) = within("the takeover", takeover).await.unwrap();
    assert_eq!((acquired, epoch), (true, Some(e + 1)));
    await_backend_gone(&observer, pid).await;
    assert!(
        holder.batch_execute("COMMIT").await.is_err(),
        "the holder's session was ended by the server"
    );
}

/// A holder whose lease (1 s) lapsed while it hangs inside a transaction guarded by `lease.fence`,
/// with a guarded write done, and a takeover blocked on the fence's row lock (observed in pg_locks).
/// Returns (holder, epoch, observer, the blocked takeover → (acquired, epoch, expires_at - 1 hour)).
async fn takeover_blocked_by_a_hung_fence(
    node: &Node,
) -> (
    tokio_postgres::Client,
    i64,
    tokio_postgres::Client,
    tokio::task::JoinHandle<(bool, Option<i64>, Option<SystemTime>)>,
) {
    node.psql(
        crate::node::DB,
        "CREATE TABLE guarded (id int PRIMARY KEY, note text); \
         INSERT INTO guarded VALUES (1, ''); GRANT SELECT, UPDATE ON guarded TO app;",
    );
    let observer = node.superuser().await;
    let holder = node.app().await;
    let (e, x) = grant_until(&holder, "k", "worker-a", "1 second").await;
    holder.batch_execute("BEGIN").await.unwrap();
    let fenced: SystemTime = holder
        .query_one("SELECT lease.fence('k', 'worker-a', $1)", &[&e])
        .await
        .unwrap()
        .get(0);
    assert_eq!(fenced, x, "fence returns the lease's expiry");
    holder
        .batch_execute("UPDATE guarded SET note = 'guarded write' WHERE id = 1")
        .await
        .unwrap();

    // The holder hangs past its expiry; a takeover waits for its transaction.
    await_lapsed(&observer, "k").await;
    let taker = node.app().await;
    let taker_pid = backend_pid(&taker).await;
    let takeover = tokio::spawn(async move {
        let row = taker
            .query_one(
                "SELECT a.acquired, a.epoch, a.expires_at - interval '1 hour' \
                   FROM lease.acquire('k', 'worker-b', '1 hour') AS a",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    });
    await_backend_waiting(&observer, taker_pid, Wait::Lock, LIMIT).await;
    assert_eq!(
        inspect(&observer, "k").await,
        not_held(e),
        "lapsed, yet not takeable"
    );
    (holder, e, observer, takeover)
}

/// F17: a holder that hangs inside a transaction guarded by `lease.fence` keeps every takeover
/// waiting on the fence's row lock, even after its expiry (I13); once it commits, its guarded write
/// is in and the successor is granted the next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_fenced_transaction_delays_takeover_and_its_writes_commit_first() {
    let node = Node::start();
    let (holder, e, observer, takeover) = takeover_blocked_by_a_hung_fence(&node).await;
    assert!(!takeover.is_finished());
    holder.batch_execute("COMMIT").await.unwrap();
    let (acquired, epoch, _) = within("the takeover", takeover).await.unwrap();
    assert_eq!((acquired, epoch), (true, Some(e + 1)));
    let note: String = observer
        .query_one("SELECT note FROM guarded WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(note, "guarded write", "the guarded write committed first");
}

/// A successor that waited for a fenced transaction has its expiry counted from the moment it got
/// the row, after the guarded transaction ended — not from when it began to wait. (PostgreSQL
/// computes an UPDATE's new row before waiting for the row lock and keeps it when the locker changed
/// nothing; acquire re-reads the clock after the wait. This was deviation D1, fixed in 0.2.0.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_that_waited_on_a_row_lock_gets_its_expiry_counted_from_the_grant() {
    let node = Node::start();
    let (holder, _, _, takeover) = takeover_blocked_by_a_hung_fence(&node).await;
    let committing: SystemTime = holder
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    holder.batch_execute("COMMIT").await.unwrap();
    let (_, _, granted_at) = within("the takeover", takeover).await.unwrap();
    assert!(
        granted_at.unwrap() >= committing,
        "the successor's ttl counts from its grant_until, after the guarded transaction ended"
    );
}
