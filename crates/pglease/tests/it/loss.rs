//! Loss: signalled before anyone else can acquire (a frozen server), at once on a refused
//! renewal, and `with_lease` cancelling its future.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use pglease::LostReason;

use crate::common::{self, client, eventually, force_lapse, key, raw, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_makes_the_lease_expire_before_a_successor_is_granted() {
    let cluster = tokio::task::spawn_blocking(common::start_cluster)
        .await
        .unwrap();
    cluster
        .psql("postgres", "CREATE EXTENSION pg_lease")
        .expect("create extension");
    let k = key("loss-pause");
    let conninfo = common::conninfo_for(&cluster, "postgres", &k);
    let holder = pglease::Client::connect(&conninfo).await.unwrap();
    let successor = raw(&conninfo).await;
    let ttl = Duration::from_secs(1);
    let lease = holder
        .try_acquire(&k, ttl)
        .await
        .unwrap()
        .expect("free key");

    cluster.pause();
    let paused_at = tokio::time::Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("lost() fires while the server is frozen");
    let lost_at = SystemTime::now();
    assert_eq!(reason, LostReason::Expired);
    assert!(!lease.is_held());
    // Keep the server frozen for longer than the ttl, then let a successor in.
    tokio::time::sleep_until(paused_at + ttl * 3 / 2).await;
    cluster.resume();

    let grant = pglease::acquire(&successor, &k, "successor", ttl, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("granted within the wait");
    assert!(grant.epoch > lease.epoch());
    let granted_at = grant.expires_at - ttl;
    assert!(
        lost_at < granted_at,
        "lost() at {lost_at:?}, successor granted at {granted_at:?}"
    );
    drop(lease);
    holder.shutdown().await;
}

/// A client that renews every second with a 20 s ttl: a loss it reports within a few seconds was
/// signalled by a refused renewal, not by expiry.
async fn slow_ttl_client(app: &str) -> pglease::Client {
    pglease::Client::builder()
        .renew_fraction(0.05)
        .connect(&common::conninfo(app))
        .await
        .unwrap()
}

const LONG_TTL: Duration = Duration::from_secs(20);
const PROMPTLY: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_after_a_lapse_fires_lost_not_owner_at_once() {
    let k = key("loss-takeover");
    let c = slow_ttl_client(&k).await;
    let su = superuser().await;
    let lease = c.try_acquire(&k, LONG_TTL).await.unwrap().unwrap();
    force_lapse(&su, &k).await;
    let intruder = pglease::acquire(&su, &k, "intruder", LONG_TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lapsed key is free");
    assert_eq!(intruder.epoch, lease.epoch() + 1);
    let reason = tokio::time::timeout(PROMPTLY, lease.lost())
        .await
        .expect("prompt");
    assert_eq!(reason, LostReason::NotOwner);
    let e = lease.renew().await.unwrap_err();
    assert!(
        e.is_lease_lost() && e.lost_reason() == Some(LostReason::NotOwner),
        "{e}"
    );
    let e = lease.release().await.unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_another_session_of_the_same_owner_fires_lost_at_once() {
    let k = key("loss-release");
    let c = slow_ttl_client(&k).await;
    let su = superuser().await;
    let lease = c.try_acquire(&k, LONG_TTL).await.unwrap().unwrap();
    let status = pglease::release(&su, &k, c.owner(), lease.epoch())
        .await
        .unwrap();
    assert!(status.is_ok());
    // A manual renewal learns it at once...
    let e = lease.renew().await.unwrap_err();
    assert_eq!(e.lost_reason(), Some(LostReason::NotOwner), "{e}");
    // ...and lost() has fired.
    assert_eq!(lease.lost().await, LostReason::NotOwner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapse_on_the_server_fires_lost_lapsed_at_once() {
    let k = key("loss-lapsed");
    let c = slow_ttl_client(&k).await;
    let su = superuser().await;
    let lease = c.try_acquire(&k, LONG_TTL).await.unwrap().unwrap();
    force_lapse(&su, &k).await;
    let reason = tokio::time::timeout(PROMPTLY, lease.lost())
        .await
        .expect("prompt");
    assert_eq!(reason, LostReason::Lapsed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_epoch_for_the_same_owner_fires_lost_epoch_mismatch_at_once() {
    let k = key("loss-epoch");
    let c = slow_ttl_client(&k).await;
    let su = superuser().await;
    let lease = c.try_acquire(&k, LONG_TTL).await.unwrap().unwrap();
    force_lapse(&su, &k).await;
    let again = pglease::acquire(&su, &k, c.owner(), LONG_TTL, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(again.epoch > lease.epoch());
    let reason = tokio::time::timeout(PROMPTLY, lease.lost())
        .await
        .expect("prompt");
    assert_eq!(reason, LostReason::EpochMismatch);
}

/// Sets its flag when dropped: shows that a future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_cancels_the_future_when_the_lease_is_lost() {
    let k = key("loss-with");
    let c = slow_ttl_client(&k).await;
    let su = superuser().await;
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let task = {
        let (c, k, dropped) = (c.clone(), k.clone(), Arc::clone(&dropped));
        tokio::spawn(async move {
            c.with_lease(&k, LONG_TTL, |guard| async move {
                let _flag = DropFlag(dropped);
                let _ = started_tx.send(guard.epoch());
                std::future::pending::<()>().await;
            })
            .await
        })
    };
    let epoch = started_rx.await.expect("the future started");
    assert!(!dropped.load(Ordering::SeqCst));
    force_lapse(&su, &k).await;
    pglease::acquire(&su, &k, "intruder", LONG_TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("taken over");
    let result = tokio::time::timeout(PROMPTLY, task)
        .await
        .expect("prompt")
        .unwrap();
    let e = result.unwrap_err();
    assert_eq!(e.lost_reason(), Some(LostReason::NotOwner), "{e}");
    assert!(dropped.load(Ordering::SeqCst), "the future was dropped");
    let s = common::state(&su, &k).await.unwrap();
    assert!(s.held && s.owner.as_deref() == Some("intruder") && s.epoch == epoch + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_releases_the_key_after_the_future_completes() {
    let k = key("loss-with-done");
    let c = client(&k).await;
    let su = superuser().await;
    let epoch = c
        .with_lease(&k, Duration::from_secs(10), |guard| {
            let su = &su;
            async move {
                let s = common::state(su, guard.key()).await.unwrap();
                assert!(s.held && s.epoch == guard.epoch());
                assert!(guard.is_held());
                guard.epoch()
            }
        })
        .await
        .unwrap();
    let s = common::state(&su, &k).await.unwrap();
    assert!(!s.held, "released, not left to lapse");
    assert_eq!(s.epoch, epoch + 1, "a release advances the counter");
    eventually("the keepalive ended", Duration::from_secs(10), || {
        let c = &c;
        async move { (c.live_keepalives() == 0).then_some(()) }
    })
    .await;
}
