//! `Client::adopt`: a lease granted by another call (here a plain `lease.acquire`, as
//! `lease_queue.claim` makes one) is renewed, watched and released like an acquired one, and its
//! validity deadline counts from the granting call's send time.

use std::time::{Duration, Instant};

use pglease::LostReason;

use crate::common::{client, eventually, force_lapse, key, state, superuser};

/// Grants `k` to `c`'s owner with a plain call, as another API would; returns the grant, when the
/// call was sent and the time left the server reported.
async fn grant_elsewhere(
    c: &pglease::Client,
    k: &str,
    ttl: Duration,
) -> (pglease::Grant, Instant, Duration) {
    let db = c.pool().get().await.unwrap();
    let sent_at = Instant::now();
    let row = db
        .query_one(
            "SELECT a.epoch, a.expires_at, \
                    extract(epoch FROM a.expires_at - clock_timestamp())::float8 \
               FROM lease.acquire($1, $2, $3::float8 * interval '1 second') AS a WHERE a.acquired",
            &[&k, &c.owner(), &ttl.as_secs_f64()],
        )
        .await
        .unwrap();
    let grant = pglease::Grant::new(row.get(0), row.get(1));
    (
        grant,
        sent_at,
        Duration::from_secs_f64(row.get::<_, f64>(2).max(0.0)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_lease_is_kept_alive_and_released() {
    let k = key("adopt-keep");
    let c = client(&k).await;
    let su = superuser().await;
    let ttl = Duration::from_millis(600);
    let (grant, sent_at, remaining) = grant_elsewhere(&c, &k, ttl).await;
    let lease = c.adopt(&k, grant, ttl, sent_at, remaining).unwrap();
    assert_eq!(lease.epoch(), grant.epoch);
    assert_eq!(c.live_keepalives(), 1);
    // Held by us at the grant's epoch for several ttls: the keepalive renews it.
    let started = Instant::now();
    while started.elapsed() < ttl * 4 {
        let s = state(&su, &k).await.expect("the key exists");
        assert!(s.held, "lapsed after {:?}", started.elapsed());
        assert_eq!(s.epoch, grant.epoch);
        assert!(lease.is_held());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One lease per key per client.
    let (g2, s2, r2) = (grant, Instant::now(), ttl);
    let e = c.adopt(&k, g2, ttl, s2, r2).unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    lease.release().await.unwrap();
    assert!(!state(&su, &k).await.unwrap().held);
    eventually("the keepalive ends", Duration::from_secs(5), || async {
        (c.live_keepalives() == 0).then_some(())
    })
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_lease_signals_loss_when_taken_away() {
    let k = key("adopt-loss");
    let c = pglease::Client::builder()
        .renew_fraction(0.2)
        .connect(&crate::common::conninfo(&k))
        .await
        .unwrap();
    let su = superuser().await;
    let ttl = Duration::from_secs(2);
    let (grant, sent_at, remaining) = grant_elsewhere(&c, &k, ttl).await;
    let lease = c.adopt(&k, grant, ttl, sent_at, remaining).unwrap();
    force_lapse(&su, &k).await;
    let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("the next renewal is refused");
    assert!(reason.is_loss(), "{reason}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_lease_counts_its_deadline_from_the_send_time() {
    let k = key("adopt-deadline");
    let c = client(&k).await;
    let ttl = Duration::from_secs(1);
    let (grant, _, remaining) = grant_elsewhere(&c, &k, ttl).await;
    // Sent (as far as the client is told) longer ago than the ttl: no validity left.
    let long_ago = Instant::now() - ttl * 2;
    let lease = c.adopt(&k, grant, ttl, long_ago, remaining).unwrap();
    assert_eq!(lease.ended(), Some(LostReason::Expired));
    // With little time left on the grant (an owner's own grant returned unchanged), the
    // deadline is `sent + remaining - margin`, not `sent + ttl`.
    drop(lease);
    let k2 = key("adopt-remaining");
    let ttl = Duration::from_secs(10);
    let (grant, sent_at, _) = grant_elsewhere(&c, &k2, ttl).await;
    let lease = c
        .adopt(&k2, grant, ttl, sent_at, Duration::from_secs(2))
        .unwrap();
    // Read at once: the first renewal is due only after half of those 2 s.
    let until = lease.valid_until().expect("held");
    assert!(until <= sent_at + Duration::from_secs(2), "{until:?}");
    assert!(until > sent_at + Duration::from_secs(1), "{until:?}");
    drop(lease);
    c.shutdown().await;
}
