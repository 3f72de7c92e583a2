//! Client and session death: a lease belongs to an (owner, epoch), not to a session, so a session
//! that dies neither frees it nor takes it along; it lapses at its expiry (F8–F11).

use std::time::Duration;

use pglease_tests::backend_pid;

use crate::node::Node;
use crate::{
    LIMIT, await_backend_gone, grant, grant_until, held, inspect, not_held, release, renew, within,
};

/// How the holder's session dies.
#[derive(Clone, Copy)]
enum Death {
    /// `pg_terminate_backend` from another session (an operator, or a connection reaper).
    Terminated,
    /// The client closes its connection (process exit, dropped pool connection).
    Disconnected,
}

async fn dead_session_keeps_its_lease_until_expiry(death: Death) {
    let node = Node::start();
    let su = node.superuser().await;
    let other = node.app().await;
    let holder = node.app().await;
    let pid = backend_pid(&holder).await;
    let (e, x) = grant_until(&holder, "k", "worker-a", "3 seconds").await;

    match death {
        Death::Terminated => {
            let done: bool = su
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap()
                .get(0);
            assert!(done);
        }
        Death::Disconnected => drop(holder),
    }
    await_backend_gone(&su, pid).await;

    // Judged by the server before the expiry: the lease is still held, another owner is refused.
    let row = other
        .query_one(
            "SELECT a.acquired, clock_timestamp() < $2 \
               FROM lease.acquire($1, 'worker-b', '1 hour') AS a",
            &[&"k", &x],
        )
        .await
        .unwrap();
    let (acquired, before_expiry): (bool, bool) = (row.get(0), row.get(1));
    assert!(
        before_expiry,
        "the check ran after the expiry (machine too slow for this TTL)"
    );
    assert!(!acquired, "a dead session does not free its lease");
    assert_eq!(inspect(&other, "k").await, held("worker-a", e, x));

    // At the expiry a waiting acquirer takes it over with the next epoch, not a moment earlier.
    let row = within(
        "the takeover",
        other.query_one(
            "SELECT a.acquired, a.epoch, a.expires_at - interval '1 hour' >= $2 \
               FROM lease.acquire($1, 'worker-b', '1 hour', '30 seconds') AS a",
            &[&"k", &x],
        ),
    )
    .await
    .unwrap();
    let got: (bool, Option<i64>, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        got,
        (true, Some(e + 1), true),
        "granted at or after the expiry"
    );
    assert_eq!(
        renew(&other, "k", "worker-a", e, "1 hour").await.0,
        "not_owner"
    );
}

/// F8: a holder whose backend is terminated keeps its lease until the expiry; then it is taken
/// over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_keeps_its_lease_until_expiry() {
    dead_session_keeps_its_lease_until_expiry(Death::Terminated).await;
}

/// F9: a holder that drops its connection keeps its lease until the expiry; then it is taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_keeps_its_lease_until_expiry() {
    dead_session_keeps_its_lease_until_expiry(Death::Disconnected).await;
}

/// F10: the lease of a dead session is still the owner's: the same owner, presenting the epoch,
/// renews and releases it from a new session (how a restarted worker cleans up after itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_sessions_lease_can_be_renewed_and_released_by_its_owner_elsewhere() {
    let node = Node::start();
    let su = node.superuser().await;
    let holder = node.app().await;
    let pid = backend_pid(&holder).await;
    let e = grant(&holder, "k", "worker-a", "1 hour").await;
    su.execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    await_backend_gone(&su, pid).await;
    assert!(
        holder.batch_execute("SELECT 1").await.is_err(),
        "the old session is dead"
    );

    let again = node.app().await;
    let (status, x) = renew(&again, "k", "worker-a", e, "2 hours").await;
    assert_eq!(status, "ok");
    assert_eq!(inspect(&again, "k").await, held("worker-a", e, x.unwrap()));
    assert_eq!(release(&again, "k", "worker-a", e).await, "ok");
    assert_eq!(inspect(&again, "k").await, not_held(e + 1));
    assert_eq!(
        grant_until(&again, "k", "worker-b", "1 hour").await.0,
        e + 2
    );
}

/// F11: a backend killed with SIGKILL makes the postmaster end every session and reinitialise
/// (PostgreSQL treats it as a crash): committed leases survive unchanged, open transactions are
/// rolled back, and the killed session's lease stays held until its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_resets_every_session_but_keeps_committed_state() {
    let node = Node::start();
    let holder = node.app().await;
    let pid = backend_pid(&holder).await;
    let (e, x) = grant_until(&holder, "k", "worker-a", "1 hour").await;
    let bystander = node.app().await;
    bystander.batch_execute("BEGIN").await.unwrap();
    grant_until(&bystander, "uncommitted", "worker-b", "1 hour").await;
    let committed = node.state().await;

    node.signal(pid, libc::SIGKILL);
    // The postmaster ends the bystander's session too.
    let deadline = std::time::Instant::now() + LIMIT;
    while !bystander.is_closed() {
        assert!(
            std::time::Instant::now() < deadline,
            "the bystander's session was not ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let app = node.connect_when_ready(pglease_tests::APP).await;
    assert_eq!(node.state().await, committed, "exactly the committed state");
    assert_eq!(inspect(&app, "k").await, held("worker-a", e, x));
    assert_eq!(inspect(&app, "uncommitted").await, None);
    assert!(
        !crate::acquire(&app, "k", "worker-c", "1 hour", "0").await.0,
        "still held"
    );
}
