//! Fencing inside the database: a guarded write holds back a takeover until it commits, and a
//! stale grant is refused with LE001 / LE002 / LE003.

use std::time::{Duration, SystemTime};

use pglease::{LostReason, sqlstate};

use crate::common::{self, client, eventually, key, raw, state, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_holds_back_a_takeover_until_it_commits() {
    let k = key("fence-block");
    let table = k.replace('-', "_");
    let c = client(&k).await;
    let su = superuser().await;
    su.batch_execute(&format!(
        "CREATE TABLE {table} (epoch bigint, written_at timestamptz DEFAULT clock_timestamp())"
    ))
    .await
    .unwrap();
    let ttl = Duration::from_secs(1);
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");

    // The guarded transaction: fence, write, and stay open past the lease's lapse.
    let mut writer = raw(&common::conninfo(&format!("{k}-writer"))).await;
    let writer_pid: i32 = writer
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = writer.transaction().await.unwrap();
    lease.fence(&tx).await.expect("the lease is current");
    tx.execute(
        &format!("INSERT INTO {table} (epoch) VALUES ($1)"),
        &[&lease.epoch()],
    )
    .await
    .unwrap();

    // A takeover: waits server-side for the lapse, then must wait for the guarded transaction.
    let intruder = raw(&common::conninfo(&format!("{k}-intruder"))).await;
    let intruder_pid: i32 = intruder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let takeover = {
        let k = k.clone();
        tokio::spawn(async move {
            pglease::acquire(
                &intruder,
                &k,
                "intruder",
                Duration::from_secs(5),
                Duration::from_secs(30),
            )
            .await
        })
    };
    eventually(
        "the takeover waits for the guarded transaction's lock",
        Duration::from_secs(15),
        || {
            let su = &su;
            async move {
                su.query_opt(
                    "SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' \
                   AND ($2 = ANY (pg_blocking_pids($1)) OR EXISTS ( \
                        SELECT FROM unnest(pg_blocking_pids($1)) AS b (pid) \
                         WHERE $2 = ANY (pg_blocking_pids(b.pid))))",
                    &[&intruder_pid, &writer_pid],
                )
                .await
                .ok()
                .flatten()
                .map(drop)
            }
        },
    )
    .await;
    // Meanwhile the holder was told: its renewals are held back by the same lock.
    assert_eq!(lease.lost().await, LostReason::Expired);
    let lost_at = SystemTime::now();
    assert!(!takeover.is_finished());

    tx.commit().await.unwrap();
    let grant = tokio::time::timeout(Duration::from_secs(15), takeover)
        .await
        .expect("the takeover proceeds after the commit")
        .unwrap()
        .unwrap()
        .expect("granted");
    // epoch + 1: the holder's best-effort release, queued behind the same lock since before the
    // lapse, is judged when it gets the row — after the lapse — so it reports lapsed and changes
    // nothing, whichever of the two waiters gets the row first.
    assert_eq!(grant.epoch, lease.epoch() + 1);
    let written_at: SystemTime = su
        .query_one(&format!("SELECT written_at FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    let granted_at = grant.expires_at - Duration::from_secs(5);
    assert!(
        written_at < granted_at,
        "the guarded write precedes the new grant"
    );
    assert!(
        lost_at < granted_at,
        "the holder knew before the successor was granted"
    );

    // The old grant is fenced out now, by the server (LE001: another owner holds the key) and
    // locally (the lease has ended).
    let tx = writer.transaction().await.unwrap();
    let e = lease.fencing_token().check(&tx).await.unwrap_err();
    assert!(
        e.is_fenced() && e.code() == Some(sqlstate::FENCE_NOT_OWNER),
        "{e}"
    );
    tx.rollback().await.unwrap();
    let tx = writer.transaction().await.unwrap();
    let e = lease.fence(&tx).await.unwrap_err();
    assert!(e.is_lease_lost() && !e.is_fenced(), "{e}");
    tx.rollback().await.unwrap();
    su.batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_epoch_of_the_same_owner_is_fenced_with_le003() {
    let k = key("fence-epoch");
    let c = client(&k).await;
    let mut db = raw(&common::conninfo(&format!("{k}-db"))).await;
    let ttl = Duration::from_secs(10);
    let first = c.try_acquire(&k, ttl).await.unwrap().unwrap();
    let stale = first.fencing_token();
    first.release().await.unwrap();
    let second = c.try_acquire(&k, ttl).await.unwrap().unwrap();
    assert_eq!(second.epoch(), stale.epoch() + 2);

    let tx = db.transaction().await.unwrap();
    let e = stale.check(&tx).await.unwrap_err();
    assert!(e.is_fenced(), "{e}");
    assert_eq!(e.code(), Some(sqlstate::FENCE_EPOCH_MISMATCH));
    tx.rollback().await.unwrap();

    let tx = db.transaction().await.unwrap();
    let expires_at = second.fence(&tx).await.expect("the current grant passes");
    assert!(expires_at > SystemTime::UNIX_EPOCH);
    tx.commit().await.unwrap();

    // Released: not the owner any more.
    let current = second.fencing_token();
    second.release().await.unwrap();
    let tx = db.transaction().await.unwrap();
    let e = current.check(&tx).await.unwrap_err();
    assert_eq!(e.code(), Some(sqlstate::FENCE_NOT_OWNER), "{e}");
    tx.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_grant_is_fenced_with_le002() {
    let k = key("fence-lapsed");
    let su = superuser().await;
    let mut db = raw(&common::conninfo(&format!("{k}-db"))).await;
    let grant = pglease::acquire(
        &su,
        &k,
        "sleeper",
        Duration::from_millis(200),
        Duration::ZERO,
    )
    .await
    .unwrap()
    .unwrap();
    eventually("the grant lapses", Duration::from_secs(10), || {
        let (su, k) = (&su, &k);
        async move { state(su, k).await.filter(|s| !s.held).map(drop) }
    })
    .await;
    let tx = db.transaction().await.unwrap();
    let e = pglease::Fence::new(k.clone(), "sleeper", grant.epoch)
        .check(&tx)
        .await
        .unwrap_err();
    assert!(
        e.is_fenced() && e.code() == Some(sqlstate::FENCE_LAPSED),
        "{e}"
    );
    tx.rollback().await.unwrap();
}
