//! Semaphores: at most N holders, each a lease on its slot key with its own epoch; waiting for a
//! slot is woken by a release notification or at the first lapse; one slot per client.

use std::time::Duration;

use crate::common::{client, force_lapse, key, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_holders_and_a_waiter_is_woken_by_a_release() {
    let name = key("sem");
    let ttl = Duration::from_secs(30);
    let (a, b, c) = (
        client(&format!("{name}-a")).await,
        client(&format!("{name}-b")).await,
        client(&format!("{name}-c")).await,
    );
    let first = a
        .semaphore(&name, 2, ttl)
        .with_data("host-a")
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    assert_eq!(first.slot(), Some(1));
    assert_eq!(first.key(), pglease::slot_key(&name, 1));
    assert_eq!(first.data().as_deref(), Some("host-a"));
    // One slot per client (one owner): a second try of the same client gets nothing.
    assert!(
        a.semaphore(&name, 2, ttl)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let second = b
        .semaphore(&name, 2, ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    assert_eq!(second.slot(), Some(2));
    assert!(second.epoch() > 0);
    let sem = c.semaphore(&name, 2, ttl);
    assert!(
        sem.try_acquire().await.unwrap().is_none(),
        "the limit holds"
    );
    let holders = sem.holders().await.unwrap();
    assert_eq!(
        holders
            .iter()
            .map(|h| (h.slot, h.state.owner.clone().unwrap()))
            .collect::<Vec<_>>(),
        [(1, a.owner().to_owned()), (2, b.owner().to_owned())]
    );
    assert_eq!(holders[0].state.data.as_deref(), Some("host-a"));

    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire(Duration::from_secs(20)).await }
    });
    // Give the waiter time to register, then free slot 1: the notification wakes it.
    let su = superuser().await;
    crate::common::eventually("the waiter registered", Duration::from_secs(10), || {
        let su = &su;
        let k = first.key().to_owned();
        async move { crate::common::waiter_registered(su, &k).await.then_some(()) }
    })
    .await;
    let old_epoch = first.epoch();
    first.release().await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken well before the 30 s lapse")
        .unwrap()
        .unwrap();
    assert_eq!(third.slot(), Some(1));
    assert!(
        third.epoch() > old_epoch,
        "a new grant of the slot fences the old one"
    );
    assert!(c.notifications_delivered() >= 1);
    // The slot lease fences like any lease.
    let mut db = c.pool().get().await.unwrap();
    let tx = db.transaction().await.unwrap();
    third.fence(&*tx).await.unwrap();
    tx.commit().await.unwrap();
    drop(db);
    third.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_waiter_takes_over_at_the_first_lapse() {
    let name = key("sem-lapse");
    let ttl = Duration::from_secs(30);
    let (a, c) = (
        client(&format!("{name}-a")).await,
        client(&format!("{name}-c")).await,
    );
    let held = a
        .semaphore(&name, 1, ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    let su = superuser().await;
    let waiter = tokio::spawn({
        let sem = c.semaphore(&name, 1, ttl);
        async move { sem.acquire(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    force_lapse(&su, held.key()).await;
    // The waiter slept until the (old) lapse time 30 s away; the holder's next renewal is refused
    // and ends its lease, and a semaphore's slot is only granted after its holder is gone.
    assert_eq!(held.lost().await, pglease::LostReason::Lapsed);
    let lease = c.semaphore(&name, 1, ttl).try_acquire().await;
    // Either the waiter or this try gets the lapsed slot; the client holds one at most.
    match lease.unwrap() {
        Some(lease) => {
            assert_eq!(lease.slot(), Some(1));
            waiter.abort();
        }
        None => {
            let lease = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!(lease.slot(), Some(1));
        }
    }
}
