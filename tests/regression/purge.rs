//! lease.purge: removing idle rows without ever letting an epoch go back.
//! Purge affects a whole database, so every test here has its own.

use std::time::Duration;

use pglease_tests::{ADMIN, APP, Wait, await_backend_waiting, backend_pid, server};

use crate::{grant, inspect, lapse, release};

async fn purge(c: &tokio_postgres::Client, older_than: &str) -> i64 {
    c.query_one("SELECT lease.purge($1::text::interval)", &[&older_than])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn purge_removes_only_free_and_lapsed_rows_idle_longer_than_the_bound() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_scope");
    let (admin, app) = (s.connect_as(&db, ADMIN).await, s.connect_as(&db, APP).await);
    grant(&app, "held", "w", "1 hour").await;
    grant(&app, "released", "w", "1 hour").await;
    release(&app, "released", "w", 1).await;
    lapse(&app, "lapsed", "w").await;

    assert_eq!(
        purge(&admin, "1 hour").await,
        0,
        "nothing has been idle for an hour"
    );
    assert_eq!(
        purge(&admin, "0").await,
        2,
        "the released and the lapsed row go"
    );
    assert_eq!(inspect(&app, "released").await, None);
    assert_eq!(inspect(&app, "lapsed").await, None);
    assert!(
        inspect(&app, "held").await.unwrap().0,
        "a held lease is never purged"
    );
}

#[tokio::test]
async fn purged_key_is_recreated_above_every_epoch_it_had() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_epoch");
    let (admin, app) = (s.connect_as(&db, ADMIN).await, s.connect_as(&db, APP).await);
    // Drive "k" to counter 10 (5 grant/release cycles), and "small" to 2.
    for i in 0..5 {
        let e = grant(&app, "k", "w", "1 hour").await;
        assert_eq!(e, 2 * i + 1);
        release(&app, "k", "w", e).await;
    }
    grant(&app, "small", "w", "1 hour").await;
    release(&app, "small", "w", 1).await;
    assert_eq!(inspect(&app, "k").await.unwrap().2, 10);

    assert_eq!(purge(&admin, "0").await, 2);
    // Re-created keys start above the largest purged epoch: never back to 1, never reused.
    assert_eq!(grant(&app, "k", "w", "1 hour").await, 11);
    assert_eq!(grant(&app, "small", "w", "1 hour").await, 11);
    assert_eq!(grant(&app, "brand-new", "w", "1 hour").await, 11);
    // A later purge of lower epochs never lowers the floor.
    release(&app, "small", "w", 11).await;
    assert_eq!(purge(&admin, "0").await, 1);
    assert_eq!(grant(&app, "small", "w", "1 hour").await, 13);
}

#[tokio::test]
async fn acquire_racing_an_uncommitted_purge_waits_and_gets_an_epoch_above_the_purged_one() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_race");
    let (admin, app) = (s.connect_as(&db, ADMIN).await, s.connect_as(&db, APP).await);
    let observer = s.connect_super("postgres").await;
    for _ in 0..3 {
        let e = grant(&app, "k", "w", "1 hour").await;
        release(&app, "k", "w", e).await;
    }
    assert_eq!(inspect(&app, "k").await.unwrap().2, 6);
    admin
        .batch_execute("BEGIN; SELECT lease.purge('0');")
        .await
        .unwrap();

    let app_pid = backend_pid(&app).await;
    let racing = tokio::spawn(async move { grant(&app, "k", "w2", "1 hour").await });
    // The acquire must wait for the purge's transaction (a lock wait), not slip past it.
    await_backend_waiting(&observer, app_pid, Wait::Lock, Duration::from_secs(10)).await;
    admin.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        racing.await.unwrap(),
        7,
        "created anew above the purged counter 6"
    );
}

#[tokio::test]
async fn purge_is_for_the_extension_owner_unless_granted() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_grant");
    let app = s.connect_as(&db, APP).await;
    let e = pglease_tests::expect_error(&app, "SELECT lease.purge('1 hour')").await;
    assert_eq!(e.code, "42501", "insufficient_privilege");
    let admin = s.connect_as(&db, ADMIN).await;
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION lease.purge(interval) TO {APP}"
        ))
        .await
        .unwrap();
    assert_eq!(purge(&app, "1 hour").await, 0);
}

/// Audit finding 5 of the hardening issue: a release that waited for the key's row lock (behind a
/// fence) counted the key as free from the start of its wait, so a purge right after it deleted the
/// row. The key is free from the moment the release took effect.
#[tokio::test]
async fn a_release_that_waited_behind_a_fence_frees_the_key_from_the_end_of_its_wait() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_after_fenced_release");
    let holder = s.connect_as(&db, APP).await;
    let guard = s.connect_as(&db, APP).await;
    let observer = s.connect_super(&db).await;
    let admin = s.connect_as(&db, ADMIN).await;
    let e = grant(&holder, "k", "w", "1 hour").await;
    guard
        .batch_execute(&format!("BEGIN; SELECT lease.fence('k', 'w', {e})"))
        .await
        .unwrap();
    let pid = backend_pid(&holder).await;
    let released = tokio::spawn(async move { release(&holder, "k", "w", e).await });
    await_backend_waiting(&observer, pid, Wait::Lock, Duration::from_secs(30)).await;
    // The release waits behind the fence for longer than the purge bound below (time passing, not
    // synchronisation: the wait itself was observed).
    tokio::time::sleep(Duration::from_millis(3000)).await;
    guard.batch_execute("COMMIT").await.unwrap();
    assert_eq!(released.await.unwrap(), "ok");
    assert_eq!(
        purge(&admin, "2 seconds").await,
        0,
        "the key has been free for much less than the 3 s its release waited"
    );
    assert_eq!(inspect(&admin, "k").await, Some((false, None, e + 1, None)));
}
