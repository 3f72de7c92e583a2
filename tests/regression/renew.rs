//! lease.renew: heartbeat statuses, precedence, and what a renew may change.

use pglease_tests::{SHARED_DB, key, server, state_of};

use crate::{grant, inspect, lapse, release, renew};

#[tokio::test]
async fn renew_sets_expiry_to_server_now_plus_ttl_and_keeps_the_epoch() {
    let c = server().app().await;
    let k = key("renew_extends", "k");
    grant(&c, &k, "worker-a", "10s").await;
    let ok: bool = c
        .query_one(
            "SELECT r.status = 'ok'
                    AND r.expires_at > clock_timestamp() + interval '59 minutes'
                    AND r.expires_at <= clock_timestamp() + interval '1 hour'
               FROM lease.renew($1, 'worker-a', 1, interval '1 hour') AS r",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok, "renew extends to now + ttl");
    let (held, owner, epoch, _) = inspect(&c, &k).await.unwrap();
    assert!(held);
    assert_eq!(
        (owner.as_deref(), epoch),
        (Some("worker-a"), 1),
        "renew never changes the epoch"
    );
}

#[tokio::test]
async fn renew_with_a_shorter_ttl_shortens_the_lease() {
    let c = server().app().await;
    let k = key("renew_shortens", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    let (status, expires_at) = renew(&c, &k, "worker-a", 1, "5 seconds").await;
    assert_eq!(status, "ok");
    let (_, _, _, now_expiry) = inspect(&c, &k).await.unwrap();
    assert_eq!(now_expiry, expires_at);
    let shorter: bool = c
        .query_one(
            "SELECT $1::timestamptz < clock_timestamp() + interval '6 seconds'",
            &[&expires_at.unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(shorter);
}

#[tokio::test]
async fn renew_of_an_unknown_key_is_not_owner() {
    let c = server().app().await;
    assert_eq!(
        renew(&c, &key("renew_unknown", "never"), "worker-a", 1, "10s").await,
        ("not_owner".into(), None)
    );
}

#[tokio::test]
async fn renew_of_a_free_key_is_not_owner() {
    let c = server().app().await;
    let k = key("renew_free", "k");
    grant(&c, &k, "worker-a", "10s").await;
    release(&c, &k, "worker-a", 1).await;
    assert_eq!(renew(&c, &k, "worker-a", 1, "10s").await.0, "not_owner");
}

#[tokio::test]
async fn renew_by_another_owner_is_not_owner() {
    let c = server().app().await;
    let k = key("renew_other", "k");
    grant(&c, &k, "worker-a", "10s").await;
    assert_eq!(
        renew(&c, &k, "worker-b", 1, "10s").await,
        ("not_owner".into(), None)
    );
}

#[tokio::test]
async fn renew_after_expiry_is_lapsed() {
    let c = server().app().await;
    let k = key("renew_lapsed", "k");
    lapse(&c, &k, "worker-a").await;
    assert_eq!(
        renew(&c, &k, "worker-a", 1, "10s").await,
        ("lapsed".into(), None)
    );
    // A lapsed renew does not revive the lease.
    assert!(!inspect(&c, &k).await.unwrap().0);
}

#[tokio::test]
async fn renew_with_a_stale_epoch_is_epoch_mismatch() {
    let c = server().app().await;
    let k = key("renew_stale", "k");
    lapse(&c, &k, "worker-a").await;
    assert_eq!(grant(&c, &k, "worker-a", "10s").await, 2);
    assert_eq!(
        renew(&c, &k, "worker-a", 1, "10s").await,
        ("epoch_mismatch".into(), None)
    );
}

#[tokio::test]
async fn lapsed_holder_cannot_renew_after_takeover() {
    let c = server().app().await;
    let k = key("zombie_renew", "k");
    lapse(&c, &k, "worker-a").await;
    assert_eq!(grant(&c, &k, "worker-b", "10s").await, 2);
    // The key now belongs to b: the holder check comes first, so the zombie hears not_owner.
    assert_eq!(renew(&c, &k, "worker-a", 1, "10s").await.0, "not_owner");
    let (_, owner, epoch, _) = inspect(&c, &k).await.unwrap();
    assert_eq!((owner.as_deref(), epoch), (Some("worker-b"), 2));
}

/// Every combination of (owner matches, lapsed, epoch matches) yields the status of the first
/// failed check in the documented order: not_owner, lapsed, epoch_mismatch; else ok.
#[tokio::test]
async fn renew_and_release_report_the_first_failed_check_in_precedence_order() {
    let c = server().app().await;
    for same_owner in [true, false] {
        for lapsed in [true, false] {
            for same_epoch in [true, false] {
                let k = key("precedence", &format!("{same_owner}-{lapsed}-{same_epoch}"));
                // Build a row held by "holder" at epoch 2 (lapsed or not).
                lapse(&c, &k, "holder").await;
                let ttl = if lapsed { "50 milliseconds" } else { "1 hour" };
                assert_eq!(grant(&c, &k, "holder", ttl).await, 2);
                if lapsed {
                    crate::await_lapsed(&c, &k).await;
                }
                let owner = if same_owner { "holder" } else { "stranger" };
                let epoch = if same_epoch { 2 } else { 1 };
                let expected = if !same_owner {
                    "not_owner"
                } else if lapsed {
                    "lapsed"
                } else if !same_epoch {
                    "epoch_mismatch"
                } else {
                    "ok"
                };
                assert_eq!(
                    renew(&c, &k, owner, epoch, "1 hour").await.0,
                    expected,
                    "renew {k}"
                );
                assert_eq!(release(&c, &k, owner, epoch).await, expected, "release {k}");
            }
        }
    }
}

#[tokio::test]
async fn refused_renew_changes_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("renew_refused_noop", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    let before = state_of(&su, &k).await;
    for (owner, epoch) in [("worker-b", 1), ("worker-a", 7)] {
        assert_ne!(renew(&c, &k, owner, epoch, "1 second").await.0, "ok");
    }
    assert_eq!(state_of(&su, &k).await, before);
}
