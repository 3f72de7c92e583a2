//! Waiting for a key: woken by the release notification on the shared LISTEN connection, or at the
//! holder's lapse time; bounded by the timeout; one lease per key per client; cancel safety.

use std::time::Duration;

use crate::common::{self, client, eventually, key, state, superuser, waiter_registered};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_through_listen() {
    let k = key("wait-release");
    let holder = client(&format!("{k}-holder")).await;
    let waiter = client(&format!("{k}-waiter")).await;
    let su = superuser().await;
    // The holder's lease would not lapse for 60 s: only the release can wake the waiter in time.
    let lease = holder
        .try_acquire(&k, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free key");
    let task = {
        let (waiter, k) = (waiter.clone(), k.clone());
        tokio::spawn(async move {
            waiter
                .acquire(&k, Duration::from_secs(5), Duration::from_secs(50))
                .await
        })
    };
    eventually("the waiter registered", Duration::from_secs(10), || {
        let (su, k) = (&su, &k);
        async move { waiter_registered(su, k).await.then_some(()) }
    })
    .await;
    let epoch = lease.epoch();
    let released = tokio::time::Instant::now();
    lease.release().await.unwrap();
    let won = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("woken well before the 60 s lapse")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(20));
    assert_eq!(won.epoch(), epoch + 2, "granted after the release");
    assert!(
        waiter.notifications_delivered() >= 1,
        "woken by a notification"
    );
    won.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_at_the_lapse_without_any_release() {
    let k = key("wait-lapse");
    let waiter = client(&k).await;
    let su = superuser().await;
    // A holder that never renews nor releases (a crashed process).
    let ghost_ttl = Duration::from_millis(1500);
    let ghost = pglease::acquire(&su, &k, "ghost", ghost_ttl, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let ttl = Duration::from_secs(5);
    let lease = waiter
        .acquire(&k, ttl, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(lease.epoch(), ghost.epoch + 1);
    let granted_at = state(&su, &k).await.unwrap();
    assert!(granted_at.held && granted_at.owner.as_deref() == Some(waiter.owner()));
    let grant_time = lease.expires_at().unwrap() - ttl;
    assert!(
        grant_time >= ghost.expires_at,
        "granted only after the lapse"
    );
    assert_eq!(
        waiter.notifications_delivered(),
        0,
        "no release was notified"
    );
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_gives_up_with_a_wait_timeout_while_the_key_stays_held() {
    let k = key("wait-timeout");
    let holder = client(&format!("{k}-holder")).await;
    let waiter = client(&format!("{k}-waiter")).await;
    let lease = holder
        .try_acquire(&k, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert!(
        waiter
            .try_acquire(&k, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    let e = waiter
        .acquire(&k, Duration::from_secs(5), Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(e.is_wait_timeout() && e.code().is_none(), "{e}");
    assert_eq!(lease.ended(), None);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A client holds a key at most once; an acquire started while it is held (it may or may not have
/// begun waiting by the time of the release: nothing observable tells) gets the key afterwards.
async fn one_client_holds_a_key_once_and_a_concurrent_acquire_gets_it_after_the_release() {
    let k = key("wait-local");
    let c = client(&k).await;
    let ttl = Duration::from_secs(10);
    let first = c.try_acquire(&k, ttl).await.unwrap().unwrap();
    assert!(
        c.try_acquire(&k, ttl).await.unwrap().is_none(),
        "one lease per key per client"
    );
    let task = {
        let (c, k) = (c.clone(), k.clone());
        tokio::spawn(async move { c.acquire(&k, ttl, Duration::from_secs(20)).await })
    };
    let epoch = first.epoch();
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("granted after the release")
        .unwrap()
        .unwrap();
    assert_eq!(second.epoch(), epoch + 2);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_releases_whatever_the_server_granted() {
    let app = key("wait-cancel");
    let c = client(&app).await;
    let su = superuser().await;
    let locker = common::raw(&common::conninfo(&format!("{app}-locker"))).await;
    // A free row for the key, then a transaction that locks it: the acquire blocks on the lock.
    let setup = pglease::acquire(&su, &app, "setup", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    pglease::release(&su, &app, "setup", setup.epoch)
        .await
        .unwrap();
    locker.batch_execute("BEGIN").await.unwrap();
    locker
        .execute(
            "SELECT FROM lease.leases WHERE key = $1 FOR UPDATE",
            &[&app],
        )
        .await
        .unwrap();
    {
        let acquire = c.try_acquire(&app, Duration::from_secs(30));
        tokio::pin!(acquire);
        tokio::select! {
            _ = &mut acquire => panic!("the acquire should block on the row lock"),
            () = eventually("the acquire waits for the lock", Duration::from_secs(10), || {
                let (su, app) = (&su, &app);
                async move {
                    let row = su
                        .query_opt(
                            "SELECT FROM pg_stat_activity WHERE application_name = $1 \
                               AND wait_event_type = 'Lock'",
                            &[app],
                        )
                        .await
                        .ok()?;
                    row.map(drop)
                }
            }) => {}
        }
        // Dropping the future here abandons the acquire mid-flight.
    }
    locker.batch_execute("COMMIT").await.unwrap();
    // The server grants it (epoch + 2), then the client's cleanup releases it (counter + 3).
    let s = eventually(
        "the abandoned grant is released",
        Duration::from_secs(10),
        || {
            let (su, app) = (&su, &app);
            async move {
                state(su, app)
                    .await
                    .filter(|s| !s.held && s.epoch == setup.epoch + 3)
            }
        },
    )
    .await;
    assert!(!s.held);
    // And the key is this client's to take again.
    let lease = eventually(
        "the key is free for the client again",
        Duration::from_secs(10),
        || {
            let (c, app) = (&c, &app);
            async move { c.try_acquire(app, Duration::from_secs(5)).await.unwrap() }
        },
    )
    .await;
    lease.release().await.unwrap();
}
