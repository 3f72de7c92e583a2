//! Durability: committed lease state survives a clean stop, a crash and a restart on another port;
//! uncommitted changes vanish in a crash (F1, F2, F3, F5).

use std::net::TcpListener;
use std::time::SystemTime;

use crate::node::Node;
use crate::{acquire, await_lapsed, grant, grant_until, held, inspect, not_held, release, renew};

/// Keys in every state the table can hold, and what each must look like afterwards.
struct Populated {
    /// HELD by worker-a: (epoch, expires_at after a renew).
    held: (i64, SystemTime),
    /// FREE: its counter.
    free: i64,
    /// LAPSED, last held by worker-c: its epoch.
    lapsed: i64,
    /// The epoch floor left by purging key `purged`.
    floor: i64,
}

/// Commits keys in every state: `purged` (granted and released three times, then purged: the floor
/// remembers it), `held` (granted, released, granted again, renewed), `free` and `lapsed`.
async fn populate(node: &Node) -> Populated {
    let app = node.app().await;
    for _ in 0..3 {
        let e = grant(&app, "purged", "worker-p", "1 hour").await;
        assert_eq!(release(&app, "purged", "worker-p", e).await, "ok");
    }
    let purged: i64 = node
        .admin()
        .await
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .expect("purge")
        .get(0);
    assert_eq!(purged, 1);
    let floor = 6;

    let e = grant(&app, "held", "worker-a", "1 hour").await;
    assert_eq!(release(&app, "held", "worker-a", e).await, "ok");
    let e = grant(&app, "held", "worker-a", "1 hour").await;
    let (status, x) = renew(&app, "held", "worker-a", e, "2 hours").await;
    assert_eq!(status, "ok");

    let f = grant(&app, "free", "worker-b", "1 hour").await;
    assert_eq!(release(&app, "free", "worker-b", f).await, "ok");

    let l = grant(&app, "lapsed", "worker-c", "100 milliseconds").await;
    await_lapsed(&app, "lapsed").await;

    Populated {
        held: (e, x.expect("renew ok carries the expiry")),
        free: f + 1,
        lapsed: l,
        floor,
    }
}

/// After the event, every key answers through the API exactly as before it.
async fn check_populated(node: &Node, p: &Populated) {
    let app = node.app().await;
    let (e, x) = p.held;
    assert_eq!(
        inspect(&app, "held").await,
        held("worker-a", e, x),
        "holder, epoch and expiry unchanged"
    );
    assert!(
        !acquire(&app, "held", "worker-x", "1 hour", "0").await.0,
        "still held: another owner is refused"
    );
    assert_eq!(renew(&app, "held", "worker-a", e, "1 hour").await.0, "ok");

    assert_eq!(inspect(&app, "free").await, not_held(p.free));
    assert_eq!(
        grant_until(&app, "free", "worker-x", "1 hour").await.0,
        p.free + 1
    );

    assert_eq!(
        renew(&app, "lapsed", "worker-c", p.lapsed, "1 hour")
            .await
            .0,
        "lapsed"
    );
    assert_eq!(
        grant_until(&app, "lapsed", "worker-x", "1 hour").await.0,
        p.lapsed + 1
    );

    assert_eq!(inspect(&app, "purged").await, None, "the purge stands");
    assert_eq!(
        grant_until(&app, "purged", "worker-x", "1 hour").await.0,
        p.floor + 1,
        "the floor survived: the purged key comes back above its old epochs"
    );
}

/// F1: holder, epoch, expiry, counters and the epoch floor survive a clean stop and start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_state_survives_a_clean_stop_and_start() {
    let mut node = Node::start();
    let p = populate(&node).await;
    let before = node.state().await;
    node.stop();
    node.boot();
    assert_eq!(
        node.state().await,
        before,
        "every row and the floor, exactly"
    );
    check_populated(&node, &p).await;
}

/// F2: holder, epoch, expiry, counters and the epoch floor survive a crash (SIGKILL of every server
/// process, no shutdown checkpoint: the state comes back by WAL replay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_state_survives_a_crash() {
    let mut node = Node::start();
    let p = populate(&node).await;
    let before = node.state().await;
    node.crash();
    node.boot();
    assert_eq!(
        node.state().await,
        before,
        "every row and the floor, exactly"
    );
    check_populated(&node, &p).await;
}

/// F3: grants, renews and releases whose transactions are open at the crash never happened: the
/// recovered state is the committed one, and an uncommitted grant consumed no epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_changes_vanish_in_a_crash() {
    let mut node = Node::start();
    let app = node.app().await;
    let (e_renewed, x_renewed) = grant_until(&app, "renewed", "worker-a", "1 hour").await;
    let (e_released, x_released) = grant_until(&app, "released", "worker-a", "1 hour").await;
    let e_lapsed = grant(&app, "lapsed", "worker-a", "100 milliseconds").await;
    await_lapsed(&app, "lapsed").await;
    let committed = node.state().await;

    // Four sessions, each with an open transaction that changed one key.
    let s1 = node.app().await;
    s1.batch_execute("BEGIN").await.unwrap();
    let e_created = grant(&s1, "created", "worker-b", "1 hour").await;
    let s2 = node.app().await;
    s2.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        renew(&s2, "renewed", "worker-a", e_renewed, "10 hours")
            .await
            .0,
        "ok"
    );
    let s3 = node.app().await;
    s3.batch_execute("BEGIN").await.unwrap();
    assert_eq!(release(&s3, "released", "worker-a", e_released).await, "ok");
    let s4 = node.app().await;
    s4.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        grant_until(&s4, "lapsed", "worker-b", "1 hour").await.0,
        e_lapsed + 1
    );
    assert_eq!(node.state().await, committed, "none of it is visible yet");

    node.crash();
    node.boot();
    assert_eq!(
        node.state().await,
        committed,
        "recovery restores the committed state"
    );
    let app = node.app().await;
    assert_eq!(
        inspect(&app, "created").await,
        None,
        "the grant never happened"
    );
    assert_eq!(
        grant_until(&app, "created", "worker-c", "1 hour").await.0,
        e_created,
        "and consumed no epoch"
    );
    assert_eq!(
        inspect(&app, "renewed").await,
        held("worker-a", e_renewed, x_renewed),
        "the renew never happened"
    );
    assert_eq!(
        inspect(&app, "released").await,
        held("worker-a", e_released, x_released),
        "the release never happened"
    );
    assert_eq!(
        renew(&app, "lapsed", "worker-a", e_lapsed, "1 hour")
            .await
            .0,
        "lapsed",
        "the takeover never happened"
    );
    assert_eq!(
        grant_until(&app, "lapsed", "worker-c", "1 hour").await.0,
        e_lapsed + 1
    );
    drop((s1, s2, s3, s4));
}

/// F5: a restart that comes back on another port (hence another unix socket) keeps the state: it
/// lives in the data directory, not in the address clients use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_another_port_and_socket_keeps_the_state() {
    let mut node = Node::start();
    let p = populate(&node).await;
    let before = node.state().await;
    let old_port = node.cluster().port();
    let old_socket = node
        .cluster()
        .socket_dir()
        .join(format!(".s.PGSQL.{old_port}"));
    node.stop();
    // Occupy the old port so that the server must come back elsewhere.
    let squatter = TcpListener::bind(("127.0.0.1", old_port)).expect("bind the old port");
    node.boot();
    drop(squatter);
    let new_port = node.cluster().port();
    assert_ne!(new_port, old_port, "the server moved to another port");
    assert!(!old_socket.exists(), "and its old socket is gone");
    assert_eq!(
        node.state().await,
        before,
        "every row and the floor, exactly"
    );
    check_populated(&node, &p).await;
}
