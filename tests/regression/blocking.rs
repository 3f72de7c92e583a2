//! Blocking acquire (wait > 0): the 57014 bound, takeover at lapse, and no row lock while waiting.
//! Timing bounds are generous and only about correctness (never woke early, never slept through).

use std::time::{Duration, Instant, SystemTime};

use pglease_tests::{Wait, await_backend_waiting, backend_pid, expect_error, key, server};

use crate::{acquire, grant, release, renew};

#[tokio::test]
async fn blocking_acquire_raises_57014_once_the_wait_bound_passes() {
    let c = server().app().await;
    let k = key("wait_timeout", "k");
    grant(&c, &k, "holder", "1 hour").await;
    let started = Instant::now();
    let e = expect_error(
        &c,
        &format!("SELECT * FROM lease.acquire('{k}', 'waiter', '1s', '300 milliseconds')"),
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(e.code, "57014");
    assert!(
        waited >= Duration::from_millis(300),
        "gave up after {waited:?}, before the bound"
    );
    assert!(
        waited < Duration::from_secs(10),
        "overslept the bound: {waited:?}"
    );
}

#[tokio::test]
async fn blocked_acquirer_takes_over_when_the_lease_lapses_with_the_next_epoch() {
    let c = server().app().await;
    let waiter = server().app().await;
    let k = key("takeover_at_lapse", "k");
    let (_, _, holder_expiry) = acquire(&c, &k, "holder", "700 milliseconds", "0").await;
    let holder_expiry = holder_expiry.unwrap();
    let row = waiter
        .query_one(
            "SELECT acquired, epoch, expires_at - interval '1 hour' AS granted_at
               FROM lease.acquire($1, 'waiter', interval '1 hour', interval '30 seconds')",
            &[&k],
        )
        .await
        .unwrap();
    let (acquired, epoch, granted_at): (bool, i64, SystemTime) =
        (row.get(0), row.get(1), row.get(2));
    assert!(acquired);
    assert_eq!(epoch, 2);
    // Server timestamps: granted no earlier than the lapse, and not a sleep-through later.
    assert!(
        granted_at >= holder_expiry,
        "granted before the holder's lease lapsed"
    );
    let late = granted_at.duration_since(holder_expiry).unwrap();
    assert!(
        late < Duration::from_secs(2),
        "took over {late:?} after the lapse"
    );
}

#[tokio::test]
async fn waiting_acquirer_holds_no_row_lock_and_wakes_after_a_committed_release() {
    let s = server();
    let (holder, waiter, observer) = (
        s.app().await,
        s.app().await,
        s.connect_super("postgres").await,
    );
    let k = key("no_lock_while_waiting", "k");
    grant(&holder, &k, "holder", "1 hour").await;
    let waiter_pid = backend_pid(&waiter).await;
    let k2 = k.clone();
    let waiting = tokio::spawn(async move {
        let r = acquire(&waiter, &k2, "waiter", "1 hour", "30 seconds").await;
        (r, waiter)
    });
    await_backend_waiting(&observer, waiter_pid, Wait::Sleep, Duration::from_secs(10)).await;
    // The holder's calls must not queue behind the waiter: a lock wait would trip this timeout.
    holder
        .batch_execute("SET statement_timeout = '5s'")
        .await
        .unwrap();
    assert_eq!(renew(&holder, &k, "holder", 1, "1 hour").await.0, "ok");
    assert!(
        !waiting.is_finished(),
        "the waiter must still be waiting while the key is held"
    );
    assert_eq!(release(&holder, &k, "holder", 1).await, "ok");
    let ((acquired, epoch, _), _) = waiting.await.unwrap();
    assert!(acquired);
    assert_eq!(epoch, Some(3));
}

#[tokio::test]
async fn blocking_acquire_of_a_free_key_returns_at_once() {
    let c = server().app().await;
    let k = key("blocking_free", "k");
    let started = Instant::now();
    let (acquired, epoch, _) = acquire(&c, &k, "w", "1 hour", "1 hour").await;
    assert!(acquired);
    assert_eq!(epoch, Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "did not wait for a free key"
    );
}
