//! lease.release: freeing a key, its statuses, and the fencing counter.

use pglease_tests::{SHARED_DB, key, server, state_of};

use crate::{grant, inspect, lapse, release};

#[tokio::test]
async fn release_frees_the_key_for_anyone() {
    let c = server().app().await;
    let k = key("release_frees", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    assert_eq!(release(&c, &k, "worker-a", 1).await, "ok");
    assert_eq!(grant(&c, &k, "worker-b", "1 hour").await, 3);
}

#[tokio::test]
async fn release_of_a_lapsed_lease_is_lapsed_and_keeps_the_counter() {
    let c = server().app().await;
    let k = key("release_lapsed", "k");
    lapse(&c, &k, "worker-a").await;
    assert_eq!(release(&c, &k, "worker-a", 1).await, "lapsed");
    assert_eq!(inspect(&c, &k).await, Some((false, None, 1, None)));
    // The counter was not advanced by the refused release: the takeover gets 2.
    assert_eq!(grant(&c, &k, "worker-b", "1 hour").await, 2);
}

#[tokio::test]
async fn release_statuses_match_renew() {
    let c = server().app().await;
    let k = key("release_statuses", "k");
    assert_eq!(
        release(&c, &key("release_statuses", "never"), "worker-a", 1).await,
        "not_owner"
    );
    grant(&c, &k, "worker-a", "1 hour").await;
    assert_eq!(release(&c, &k, "worker-b", 1).await, "not_owner");
    assert_eq!(release(&c, &k, "worker-a", 2).await, "epoch_mismatch");
    assert_eq!(release(&c, &k, "worker-a", 1).await, "ok");
    assert_eq!(
        release(&c, &k, "worker-a", 1).await,
        "not_owner",
        "a FREE key has no owner"
    );
}

#[tokio::test]
async fn refused_release_changes_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("release_refused_noop", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    let before = state_of(&su, &k).await;
    assert_eq!(release(&c, &k, "worker-b", 1).await, "not_owner");
    assert_eq!(release(&c, &k, "worker-a", 0).await, "epoch_mismatch");
    assert_eq!(release(&c, &k, "worker-a", -5).await, "epoch_mismatch");
    assert_eq!(state_of(&su, &k).await, before);
}

#[tokio::test]
async fn inspect_distinguishes_never_leased_held_lapsed_and_released_keys() {
    let c = server().app().await;
    let never = key("inspect", "never");
    let held = key("inspect", "held");
    let lapsed = key("inspect", "lapsed");
    let released = key("inspect", "released");

    assert_eq!(inspect(&c, &never).await, None, "never leased: zero rows");

    grant(&c, &held, "worker-a", "1 hour").await;
    let ok: bool = c
        .query_one(
            "SELECT held AND owner = 'worker-a' AND epoch = 1 AND expires_at > clock_timestamp()
               FROM lease.inspect($1)",
            &[&held],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok, "held: owner, epoch and a future expiry");

    lapse(&c, &lapsed, "worker-a").await;
    assert_eq!(
        inspect(&c, &lapsed).await,
        Some((false, None, 1, None)),
        "lapsed: not held, owner hidden"
    );

    grant(&c, &released, "worker-a", "1 hour").await;
    release(&c, &released, "worker-a", 1).await;
    assert_eq!(
        inspect(&c, &released).await,
        Some((false, None, 2, None)),
        "released: counter = epoch + 1"
    );
}
