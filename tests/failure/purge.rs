//! Crashes around purge: a purge that has not committed leaves rows and floor intact; a committed
//! purge's floor is durable, so re-created keys start above every purged epoch (F23, F24).

use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use crate::node::Node;
use crate::{LIMIT, await_lapsed, grant, grant_until, inspect, not_held, release};

/// A FREE key `old` at counter 2 and a LAPSED key `lapsed` at epoch 1.
async fn idle_keys(node: &Node) {
    let app = node.app().await;
    let e = grant(&app, "old", "worker-a", "1 hour").await;
    assert_eq!(release(&app, "old", "worker-a", e).await, "ok");
    grant_until(&app, "lapsed", "worker-a", "100 milliseconds").await;
    await_lapsed(&app, "lapsed").await;
}

/// F23: a crash while purges are in progress — one finished but uncommitted, one blocked inside
/// its statement behind it — keeps every row and the floor as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_purge_keeps_rows_and_floor() {
    let mut node = Node::start();
    idle_keys(&node).await;
    let before = node.state().await;
    let observer = node.superuser().await;

    let first = node.admin().await;
    first.batch_execute("BEGIN").await.unwrap();
    let n: i64 = first
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2, "deleted both rows and raised the floor, uncommitted");
    let second = node.admin().await;
    let second_pid = backend_pid(&second).await;
    let blocked = tokio::spawn(async move {
        second
            .query_one("SELECT lease.purge('0')", &[])
            .await
            .map(|_| ())
    });
    await_backend_waiting(&observer, second_pid, Wait::Lock, LIMIT).await;

    node.crash();
    assert!(
        blocked.await.unwrap().is_err(),
        "the blocked purge died with the server"
    );
    node.boot();
    assert_eq!(node.state().await, before, "rows and floor intact");
    let app = node.app().await;
    assert_eq!(inspect(&app, "old").await, not_held(2));
    assert_eq!(inspect(&app, "lapsed").await, not_held(1));
    assert_eq!(grant_until(&app, "old", "worker-b", "1 hour").await.0, 3);
    assert_eq!(grant_until(&app, "lapsed", "worker-b", "1 hour").await.0, 2);
    assert_eq!(
        grant_until(&app, "new", "worker-b", "1 hour").await.0,
        1,
        "the floor is still 0"
    );
    drop(first);
}

/// F24: a committed purge survives a crash: the rows stay deleted, the floor stays raised, and
/// purged or brand-new keys start above every purged epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_purge_survives_a_crash_and_recreated_keys_start_above() {
    let mut node = Node::start();
    idle_keys(&node).await;
    let n: i64 = node
        .admin()
        .await
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    let purged = node.state().await;
    assert!(purged.starts_with("\nfloor:"), "no rows left: {purged:?}");
    assert!(purged.contains("2/f"), "floor raised to 2: {purged:?}");

    node.crash();
    node.boot();
    assert_eq!(node.state().await, purged, "the purge and its floor stand");
    let app = node.app().await;
    assert_eq!(inspect(&app, "old").await, None);
    for k in ["old", "lapsed", "new"] {
        assert_eq!(
            grant_until(&app, k, "worker-b", "1 hour").await.0,
            3,
            "{k} starts above the floor"
        );
    }
}
