//! A frozen server: every process stopped for longer than the TTL, then resumed (F18).

use std::time::{Duration, SystemTime};

use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use crate::node::{Node, blocking};
use crate::{LIMIT, acquire, grant_until, inspect, renew, within};

/// F18: after a pause longer than the TTL the lease has lapsed: a blocking acquirer that was waiting
/// takes it over with the next epoch, and the holder's heartbeat, queued during the pause, is
/// refused (`lapsed` or `not_owner`, whichever runs first) — never two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_lapses_the_lease_and_a_waiting_acquirer_takes_over() {
    let node = Node::start();
    let observer = node.superuser().await;
    let holder = node.app().await;
    let ttl = Duration::from_secs(1);
    let (e, x) = grant_until(&holder, "k", "worker-a", "1 second").await;

    let waiter = node.app().await;
    let waiter_pid = backend_pid(&waiter).await;
    let takeover =
        tokio::spawn(
            async move { acquire(&waiter, "k", "worker-b", "1 hour", "30 seconds").await },
        );
    await_backend_waiting(&observer, waiter_pid, Wait::Sleep, LIMIT).await;

    node.pause();
    let paused_at = SystemTime::now();
    let heartbeat = tokio::spawn(async move { renew(&holder, "k", "worker-a", e, "1 hour").await });
    // A frozen server cannot be asked anything; its clock is this host's clock: wait on ours until
    // both the TTL has elapsed in the pause and the expiry has passed.
    let until = (paused_at + ttl).max(x) + Duration::from_millis(300);
    blocking(|| std::thread::sleep(until.duration_since(SystemTime::now()).unwrap_or_default()));
    node.resume();

    let (acquired, epoch, _) = within("the takeover", takeover).await.unwrap();
    assert_eq!((acquired, epoch), (true, Some(e + 1)));
    let (status, _) = within("the heartbeat", heartbeat).await.unwrap();
    assert!(
        status == "lapsed" || status == "not_owner",
        "a heartbeat after the expiry is refused, got {status}"
    );
    let state = inspect(&observer, "k").await.unwrap();
    assert_eq!((state.1.as_deref(), state.2), (Some("worker-b"), e + 1));
}
