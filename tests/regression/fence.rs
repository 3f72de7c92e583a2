//! lease.fence (0.2.0): guarded writes in the caller's transaction.

use std::time::Duration;

use pglease_tests::{Wait, await_backend_waiting, backend_pid, expect_error, key, server};

use crate::{grant, inspect, lapse, release};

#[tokio::test]
async fn fence_passes_for_the_current_holder_and_returns_its_expiry() {
    let c = server().app().await;
    let k = key("fence_ok", "k");
    grant(&c, &k, "holder", "1 hour").await;
    let ok: bool = c
        .query_one(
            "SELECT lease.fence($1, 'holder', 1) = (SELECT expires_at FROM lease.inspect($1))",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok);
}

#[tokio::test]
async fn fence_refusals_have_one_sqlstate_per_cause_in_precedence_order() {
    let c = server().app().await;
    let k = key("fence_refusals", "k");
    let fence = |owner: &str, epoch: i64| format!("SELECT lease.fence('{k}', '{owner}', {epoch})");
    assert_eq!(
        expect_error(&c, &fence("holder", 1)).await.code,
        "LE001",
        "unknown key"
    );
    lapse(&c, &k, "holder").await;
    assert_eq!(
        expect_error(&c, &fence("stranger", 9)).await.code,
        "LE001",
        "another owner first"
    );
    assert_eq!(
        expect_error(&c, &fence("holder", 9)).await.code,
        "LE002",
        "then lapsed"
    );
    assert_eq!(grant(&c, &k, "holder", "1 hour").await, 2);
    assert_eq!(
        expect_error(&c, &fence("holder", 1)).await.code,
        "LE003",
        "then a stale epoch"
    );
    release(&c, &k, "holder", 2).await;
    assert_eq!(
        expect_error(&c, &fence("holder", 2)).await.code,
        "LE001",
        "a FREE key has no owner"
    );
    assert_eq!(
        expect_error(&c, &format!("SELECT lease.fence('{k}', NULL, NULL)"))
            .await
            .code,
        "22023"
    );
}

#[tokio::test]
async fn a_fenced_transaction_holds_off_takeover_release_and_renew_until_it_commits() {
    let s = server();
    let (holder, rival, observer) = (
        s.app().await,
        s.app().await,
        s.connect_super("postgres").await,
    );
    let k = key("fence_blocks", "k");
    holder
        .batch_execute(&format!(
            "SELECT * FROM lease.acquire('{k}', 'holder', '400 milliseconds')"
        ))
        .await
        .unwrap();
    holder
        .batch_execute(&format!("BEGIN; SELECT lease.fence('{k}', 'holder', 1);"))
        .await
        .unwrap();
    // The lease lapses while the guarded transaction is still open ...
    let su = s.connect_super(pglease_tests::SHARED_DB).await;
    crate::await_lapsed(&su, &k).await;
    // ... and yet a takeover cannot happen until the guarded writes commit.
    let rival_pid = backend_pid(&rival).await;
    let k2 = k.clone();
    let takeover = tokio::spawn(async move { grant(&rival, &k2, "rival", "1 hour").await });
    await_backend_waiting(&observer, rival_pid, Wait::Lock, Duration::from_secs(10)).await;
    assert!(!takeover.is_finished());
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        takeover.await.unwrap(),
        2,
        "the takeover proceeds after the guarded commit"
    );
    let (held, owner, _, _) = inspect(&su, &k).await.unwrap();
    assert!(held);
    assert_eq!(owner.as_deref(), Some("rival"));
}

#[tokio::test]
async fn a_zombie_guarded_write_is_rejected_after_a_takeover() {
    let s = server();
    let c = s.app().await;
    let k = key("fence_zombie", "k");
    lapse(&c, &k, "zombie").await;
    assert_eq!(grant(&c, &k, "successor", "1 hour").await, 2);
    c.batch_execute("CREATE TEMP TABLE guarded (v text)")
        .await
        .unwrap();
    let e = expect_error(
        &c,
        &format!("BEGIN; SELECT lease.fence('{k}', 'zombie', 1); INSERT INTO guarded VALUES ('late'); COMMIT;"),
    )
    .await;
    assert_eq!(e.code, "LE001");
    c.batch_execute("ROLLBACK").await.unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM guarded", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the guarded write never happened");
}

/// A renew or release that waits for the row behind a guarded transaction is judged when it gets
/// the row: if the lease lapsed meanwhile, it reports `lapsed` and changes nothing (a lapsed epoch
/// never comes back), even though PostgreSQL computed its update before the wait.
#[tokio::test]
async fn renew_and_release_queued_behind_a_fence_report_a_lapse_that_happened_while_they_waited() {
    let s = server();
    let observer = s.connect_super("postgres").await;
    let su = s.connect_super(pglease_tests::SHARED_DB).await;
    for call in ["renew", "release"] {
        let (fenced, queued) = (s.app().await, s.app().await);
        let k = key("queued_behind_fence", call);
        grant(&fenced, &k, "holder", "400 milliseconds").await;
        fenced
            .batch_execute(&format!("BEGIN; SELECT lease.fence('{k}', 'holder', 1);"))
            .await
            .unwrap();
        let queued_pid = backend_pid(&queued).await;
        let sql = match call {
            "renew" => format!("SELECT status FROM lease.renew('{k}', 'holder', 1, '1 hour')"),
            _ => format!("SELECT status FROM lease.release('{k}', 'holder', 1)"),
        };
        let waiting = tokio::spawn(async move {
            queued
                .query_one(&sql, &[])
                .await
                .unwrap()
                .get::<_, String>(0)
        });
        await_backend_waiting(&observer, queued_pid, Wait::Lock, Duration::from_secs(10)).await;
        crate::await_lapsed(&su, &k).await;
        fenced.batch_execute("COMMIT").await.unwrap();
        assert_eq!(
            waiting.await.unwrap(),
            "lapsed",
            "{call} after the lease lapsed in the queue"
        );
        assert_eq!(
            inspect(&su, &k).await,
            Some((false, None, 1, None)),
            "{call} changed nothing"
        );
        assert_eq!(
            grant(&su, &k, "successor", "1 hour").await,
            2,
            "the counter stayed at 1"
        );
    }
}
