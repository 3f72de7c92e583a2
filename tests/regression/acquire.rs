//! lease.acquire: grants, refusals, idempotence and epoch arithmetic.

use std::time::{Duration, SystemTime};

use pglease_tests::{key, server};

use crate::{acquire, grant, inspect, lapse, release};

#[tokio::test]
async fn first_grant_of_a_key_is_epoch_one_expiring_ttl_after_server_now() {
    let c = server().app().await;
    let k = key("first_grant", "k");
    let ok: bool = c
        .query_one(
            "SELECT a.acquired AND a.epoch = 1
                    AND a.expires_at > clock_timestamp() + interval '29 seconds'
                    AND a.expires_at <= clock_timestamp() + interval '30 seconds'
               FROM lease.acquire($1, 'worker-a', interval '30 seconds') AS a",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        ok,
        "first grant: acquired, epoch 1, expires_at = server now + ttl"
    );
}

#[tokio::test]
async fn key_held_by_another_owner_is_refused_without_epoch_or_expiry() {
    let c = server().app().await;
    let k = key("refused", "k");
    grant(&c, &k, "worker-a", "30s").await;
    assert_eq!(
        acquire(&c, &k, "worker-b", "30s", "0").await,
        (false, None, None)
    );
    // The refusal changed nothing: a still holds epoch 1.
    let (held, owner, epoch, _) = inspect(&c, &k).await.unwrap();
    assert!(held);
    assert_eq!(owner.as_deref(), Some("worker-a"));
    assert_eq!(epoch, 1);
}

#[tokio::test]
async fn same_owner_reacquire_returns_same_epoch_and_leaves_expiry_unchanged() {
    let c = server().app().await;
    let k = key("idempotent", "k");
    let first = acquire(&c, &k, "worker-a", "30s", "0").await;
    // A longer ttl on the retry must not extend the lease: acquire is not a renew.
    let again = acquire(&c, &k, "worker-a", "1 hour", "0").await;
    assert!(first.0 && again.0);
    assert_eq!(first.1, again.1, "same epoch");
    assert_eq!(first.2, again.2, "expiry unchanged");
}

#[tokio::test]
async fn release_advances_the_counter_and_the_next_grant_is_counter_plus_one() {
    let c = server().app().await;
    let k = key("release_counter", "k");
    assert_eq!(grant(&c, &k, "worker-a", "30s").await, 1);
    assert_eq!(release(&c, &k, "worker-a", 1).await, "ok");
    assert_eq!(
        inspect(&c, &k).await,
        Some((false, None, 2, None)),
        "released: held=f, epoch 2"
    );
    assert_eq!(grant(&c, &k, "worker-b", "30s").await, 3);
}

#[tokio::test]
async fn lapsed_lease_taken_over_by_another_owner_gets_the_next_epoch() {
    let c = server().app().await;
    let k = key("takeover", "k");
    assert_eq!(lapse(&c, &k, "worker-a").await, 1);
    assert_eq!(grant(&c, &k, "worker-b", "30s").await, 2);
}

#[tokio::test]
async fn owner_reacquiring_its_own_lapsed_lease_gets_a_new_epoch() {
    let c = server().app().await;
    let k = key("own_lapsed", "k");
    assert_eq!(lapse(&c, &k, "worker-a").await, 1);
    assert_eq!(grant(&c, &k, "worker-a", "30s").await, 2);
}

#[tokio::test]
async fn epochs_keep_rising_over_many_grant_cycles() {
    let c = server().app().await;
    let k = key("cycles", "k");
    // grant e, release -> counter e+1, next grant e+2: grants are 1, 3, 5, ...
    let mut last = 0;
    for i in 0..20 {
        let e = grant(&c, &k, &format!("w{i}"), "30s").await;
        assert!(e > last, "epoch {e} after {last}");
        assert_eq!(e, 2 * i + 1);
        assert_eq!(release(&c, &k, &format!("w{i}"), e).await, "ok");
        last = e;
    }
}

#[tokio::test]
async fn distinct_keys_never_interact() {
    let c = server().app().await;
    let (k1, k2) = (key("distinct", "one"), key("distinct", "two"));
    assert_eq!(grant(&c, &k1, "worker-a", "30s").await, 1);
    assert_eq!(grant(&c, &k2, "worker-b", "30s").await, 1);
    assert_eq!(release(&c, &k1, "worker-a", 1).await, "ok");
    assert!(inspect(&c, &k2).await.unwrap().0, "k2 still held");
}

#[tokio::test]
async fn keys_and_owners_are_compared_byte_for_byte() {
    let c = server().app().await;
    let base = key("bytewise", "");
    // Case, trailing space and Unicode normalisation forms are different keys.
    let variants = ["Job", "job", "job ", "caf\u{e9}", "cafe\u{301}"];
    for v in variants {
        assert_eq!(
            grant(&c, &format!("{base}{v}"), "worker-a", "30s").await,
            1,
            "{v:?} is its own key"
        );
    }
    // An owner differing only in case is another owner.
    let k = format!("{base}owner");
    grant(&c, &k, "Worker", "30s").await;
    assert!(!acquire(&c, &k, "worker", "30s", "0").await.0);
}

#[tokio::test]
async fn ttl_is_measured_on_the_server_clock_from_the_grant() {
    let c = server().app().await;
    let k = key("server_clock", "k");
    // The grant's expiry lies between the server's clock just before and just after the call, plus ttl.
    let clock = || async {
        c.query_one("SELECT clock_timestamp()", &[])
            .await
            .unwrap()
            .get::<_, SystemTime>(0)
    };
    let before = clock().await;
    let (_, _, expires_at) = acquire(&c, &k, "w", "5 minutes", "0").await;
    let after = clock().await;
    let ttl = Duration::from_secs(300);
    let expires_at = expires_at.unwrap();
    assert!(expires_at >= before + ttl && expires_at <= after + ttl);
}
