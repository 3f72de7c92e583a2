//! Waiting without polling across a crash: LISTEN registrations and undelivered notifications die
//! with the sessions, but the waiting protocol (LISTEN, then register_waiter, then wait for a
//! notification or `lapses_in`) loses no release once the waiter has reconnected (F25).

use pglease_tests::APP;
use tokio_postgres::Client;

use crate::node::Node;
use crate::{grant, release, within};

/// `lease.register_waiter(key)`: (held, epoch, lapses_in > 0).
async fn register(c: &Client, key: &str) -> (bool, Option<i64>, Option<bool>) {
    let row = c
        .query_one(
            "SELECT held, epoch, lapses_in > interval '0' FROM lease.register_waiter($1)",
            &[&key],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// F25: a waiter registered before a crash reconnects, LISTENs and registers again: a key released
/// while it was away answers `held = f` (acquire now), and the release of the key still held after
/// recovery wakes it with a notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_reconnects_after_a_crash_misses_no_release() {
    let mut node = Node::start();
    let holder = node.app().await;
    let e = grant(&holder, "k", "worker-a", "1 hour").await;
    let e2 = grant(&holder, "k2", "worker-a", "1 hour").await;
    let waiter = node.app().await;
    waiter
        .batch_execute("LISTEN pg_lease_released")
        .await
        .unwrap();
    assert_eq!(register(&waiter, "k").await, (true, Some(e), Some(true)));
    assert_eq!(register(&waiter, "k2").await, (true, Some(e2), Some(true)));

    node.crash();
    node.boot();

    // The holder's process restarts too and cleans up k2 before the waiter is back.
    let holder = node.app().await;
    assert_eq!(release(&holder, "k2", "worker-a", e2).await, "ok");

    let (waiter, mut notifications) = node.listen(APP).await;
    waiter
        .batch_execute("LISTEN pg_lease_released")
        .await
        .unwrap();
    assert_eq!(
        register(&waiter, "k2").await,
        (false, None, None),
        "released while the waiter was away: acquire now"
    );
    assert_eq!(
        register(&waiter, "k").await,
        (true, Some(e), Some(true)),
        "the lease survived the crash"
    );
    assert_eq!(release(&holder, "k", "worker-a", e).await, "ok");
    let n = within("the release notification", notifications.recv())
        .await
        .expect("a notification");
    assert_eq!((n.channel(), n.payload()), ("pg_lease_released", "k"));
}
