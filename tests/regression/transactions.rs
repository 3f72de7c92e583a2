//! Each call is one atomic statement whose effects commit or roll back with the caller's transaction.

use pglease_tests::{key, server};

use crate::{grant, inspect, renew};

#[tokio::test]
async fn rollback_undoes_an_acquire() {
    let c = server().app().await;
    let k = key("rollback_acquire", "k");
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.acquire('{k}', 'worker-a', '1 hour'); ROLLBACK;"
    ))
    .await
    .unwrap();
    assert_eq!(inspect(&c, &k).await, None, "the grant never happened");
    assert_eq!(
        grant(&c, &k, "worker-b", "1 hour").await,
        1,
        "and used no epoch"
    );
}

#[tokio::test]
async fn rollback_undoes_a_renew() {
    let c = server().app().await;
    let k = key("rollback_renew", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    let before = inspect(&c, &k).await;
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.renew('{k}', 'worker-a', 1, '5 seconds'); ROLLBACK;"
    ))
    .await
    .unwrap();
    assert_eq!(inspect(&c, &k).await, before);
}

#[tokio::test]
async fn rollback_undoes_a_release() {
    let c = server().app().await;
    let k = key("rollback_release", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    let before = inspect(&c, &k).await;
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.release('{k}', 'worker-a', 1); ROLLBACK;"
    ))
    .await
    .unwrap();
    assert_eq!(inspect(&c, &k).await, before, "still held at epoch 1");
    assert_eq!(renew(&c, &k, "worker-a", 1, "1 hour").await.0, "ok");
}

#[tokio::test]
async fn commit_persists_acquire_renew_and_release_for_other_sessions() {
    let s = server();
    let (c, other) = (s.app().await, s.app().await);
    let k = key("commit", "k");
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.acquire('{k}', 'worker-a', '1 hour'); \
         SELECT * FROM lease.renew('{k}', 'worker-a', 1, '2 hours'); COMMIT;"
    ))
    .await
    .unwrap();
    let (held, owner, epoch, _) = inspect(&other, &k).await.unwrap();
    assert_eq!((held, owner.as_deref(), epoch), (true, Some("worker-a"), 1));
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.release('{k}', 'worker-a', 1); COMMIT;"
    ))
    .await
    .unwrap();
    assert_eq!(inspect(&other, &k).await, Some((false, None, 2, None)));
}

#[tokio::test]
async fn an_uncommitted_grant_is_invisible_to_other_sessions() {
    let s = server();
    let (c, other) = (s.app().await, s.app().await);
    let k = key("uncommitted", "k");
    grant(&c, &k, "worker-a", "1 hour").await;
    c.batch_execute(&format!(
        "BEGIN; SELECT * FROM lease.release('{k}', 'worker-a', 1);"
    ))
    .await
    .unwrap();
    // Until the release commits, others still see worker-a holding the key.
    let (held, owner, _, _) = inspect(&other, &k).await.unwrap();
    assert_eq!((held, owner.as_deref()), (true, Some("worker-a")));
    c.batch_execute("COMMIT").await.unwrap();
    assert!(!inspect(&other, &k).await.unwrap().0);
}
