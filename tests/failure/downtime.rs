//! Downtime never extends ownership: expiry is an absolute server timestamp, so a lease whose
//! expiry passed while the server was down is lapsed the moment the server is back (F6, F7).

use std::time::{Duration, SystemTime};

use crate::node::{Node, blocking};
use crate::{acquire, grant_until, held, inspect, not_held, release, renew, server_clock_reached};

/// How the server goes down.
#[derive(Clone, Copy)]
enum Down {
    Stop,
    Crash,
}

async fn expiry_passes_while_down(down: Down) {
    let mut node = Node::start();
    let app = node.app().await;
    let (e, x) = grant_until(&app, "short", "worker-a", "1 second").await;
    let (e_long, x_long) = grant_until(&app, "long", "worker-a", "1 hour").await;
    drop(app);
    match down {
        Down::Stop => node.stop(),
        Down::Crash => node.crash(),
    }
    // The server is down and cannot be asked; its clock is this host's clock, so let ours pass the
    // expiry (plus a margin) before it comes back.
    let remaining = x
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    blocking(|| std::thread::sleep(remaining + Duration::from_millis(300)));
    node.boot();

    let app = node.app().await;
    assert!(
        server_clock_reached(&app, x).await,
        "the expiry passed during the downtime"
    );
    assert_eq!(
        renew(&app, "short", "worker-a", e, "1 hour").await.0,
        "lapsed",
        "the first call after the restart already finds the lease lapsed"
    );
    assert_eq!(inspect(&app, "short").await, not_held(e));
    let (acquired, epoch, _) = acquire(&app, "short", "worker-b", "1 hour", "0").await;
    assert!(
        acquired,
        "another owner takes it over at once, without waiting"
    );
    assert_eq!(epoch, Some(e + 1));
    assert_eq!(
        renew(&app, "short", "worker-a", e, "1 hour").await.0,
        "not_owner"
    );
    assert_eq!(release(&app, "short", "worker-a", e).await, "not_owner");
    assert_eq!(
        inspect(&app, "long").await,
        held("worker-a", e_long, x_long),
        "a lease still valid keeps its absolute expiry: the downtime counted against it"
    );
}

/// F6: a lease whose expiry passes while the server is cleanly stopped is lapsed at restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downtime_never_extends_ownership() {
    expiry_passes_while_down(Down::Stop).await;
}

/// F7: the same after a crash and crash recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downtime_after_a_crash_never_extends_ownership() {
    expiry_passes_while_down(Down::Crash).await;
}
