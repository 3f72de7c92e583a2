//! Lease data: set at acquire, read by inspect and list, replaced by `set_data`, cleared by the
//! release, limited to 8192 bytes (client-side first); an election's leader advertises it, and
//! observers are woken by notifications (`lease.watch`), not by polling.

use std::time::Duration;

use futures_util::StreamExt;
use pglease::limits::MAX_DATA_BYTES;

use crate::common::{client, eventually, key, state, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_set_at_acquire_replaced_by_set_data_and_cleared_by_release() {
    let k = key("data");
    let c = client(&k).await;
    let su = superuser().await;
    let ttl = Duration::from_secs(10);
    let lease = c
        .acquire_with(&k, ttl)
        .data("10.0.0.7:8080")
        .try_acquire()
        .await
        .unwrap()
        .expect("free key");
    assert_eq!(lease.data().as_deref(), Some("10.0.0.7:8080"));
    assert_eq!(
        state(&su, &k).await.unwrap().data.as_deref(),
        Some("10.0.0.7:8080")
    );
    let listed = c.list(Some(&k)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state.data.as_deref(), Some("10.0.0.7:8080"));

    lease.set_data(r#"{"port":9090}"#).await.unwrap();
    assert_eq!(lease.data().as_deref(), Some(r#"{"port":9090}"#));
    let s = c.inspect(&k).await.unwrap().unwrap();
    assert_eq!(s.data.as_deref(), Some(r#"{"port":9090}"#));
    assert_eq!(s.epoch, lease.epoch(), "data never changes the epoch");
    // A renewal without data keeps it.
    lease.renew().await.unwrap();
    assert_eq!(
        c.inspect(&k).await.unwrap().unwrap().data.as_deref(),
        Some(r#"{"port":9090}"#)
    );

    lease.release().await.unwrap();
    let s = c.inspect(&k).await.unwrap().unwrap();
    assert!(!s.held && s.data.is_none(), "{s:?}");

    // A plain acquire carries no data.
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");
    assert_eq!(lease.data(), None);
    assert_eq!(c.inspect(&k).await.unwrap().unwrap().data, None);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_over_8192_bytes_is_refused_before_sending_and_by_the_server() {
    let k = key("data-big");
    let c = client(&k).await;
    let ttl = Duration::from_secs(10);
    let most = "é".repeat(MAX_DATA_BYTES / 2);
    let lease = c
        .acquire_with(&k, ttl)
        .data(most.clone())
        .try_acquire()
        .await
        .unwrap()
        .expect("8192 bytes are fine");
    let too_big = format!("{most}x");
    let e = lease.set_data(too_big.clone()).await.unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    assert!(lease.is_held());
    let e = c
        .acquire_with(key("data-big"), ttl)
        .data(too_big.clone())
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    let e = c
        .election(key("data-big"), ttl)
        .with_data(too_big.clone())
        .campaign()
        .await
        .unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    // The server is the authority: 22023 for the same value sent by hand.
    let su = superuser().await;
    let e = su
        .query(
            "SELECT * FROM lease.renew($1, $2, $3, interval '10 seconds', $4)",
            &[&k, &c.owner(), &lease.epoch(), &too_big],
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.code().map(|c| c.code()),
        Some(pglease::sqlstate::INVALID_INPUT)
    );
    assert_eq!(c.inspect(&k).await.unwrap().unwrap().data, Some(most));
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_the_leaders_data_and_are_woken_by_notifications() {
    let name = key("elect-data");
    let observer = client(&format!("{name}-obs")).await;
    // A long ttl: a leaderless observer that polled would look again only after a second.
    let ttl = Duration::from_secs(30);
    let mut changes = observer.election(&name, ttl).observe();
    assert_eq!(changes.next().await.unwrap().unwrap(), None);

    let candidate = client(&format!("{name}-a")).await;
    let election = candidate.election(&name, ttl).with_data("10.0.0.7:8080");
    let leadership = election.campaign().await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("a new leader after no leader is observed")
        .unwrap()
        .unwrap()
        .expect("a leader");
    assert_eq!(seen.owner, candidate.owner());
    assert_eq!(seen.epoch, leadership.epoch());
    assert_eq!(seen.data.as_deref(), Some("10.0.0.7:8080"));
    assert_eq!(election.leader().await.unwrap(), Some(seen.clone()));

    // A change of data is a change.
    leadership.set_data("10.0.0.8:8080").await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the new data is observed")
        .unwrap()
        .unwrap()
        .expect("a leader");
    assert_eq!(seen.data.as_deref(), Some("10.0.0.8:8080"));

    election.resign(leadership).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the resignation is observed")
        .unwrap()
        .unwrap();
    assert_eq!(seen, None);
    eventually(
        "three wake-ups by notification",
        Duration::from_secs(5),
        || {
            let n = observer.notifications_delivered();
            async move { (n >= 3).then_some(()) }
        },
    )
    .await;
}
