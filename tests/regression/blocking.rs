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

/// Audit finding 2 of the hardening issue: against a holder that takes and frees the key every few
/// milliseconds, a blocking acquire whose wait ran out sometimes raised 22004 ("RAISE statement
/// option cannot be null": the holder had released between the refused attempt and the read of its
/// expiry) and gave up on a key that was free. Every call must end in a grant or in 57014 with its
/// DETAIL, and the waiters must get the key now and then (it is free between the holder's turns).
#[tokio::test]
async fn a_wait_that_runs_out_against_a_churning_holder_raises_57014_never_another_code() {
    let s = server();
    let k = key("churn_57014", "probe");
    let holder = s.app().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = tokio::spawn({
        let (k, stop) = (k.clone(), stop.clone());
        async move {
            let mut cycles = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (got, epoch, _) = acquire(&holder, &k, "holder", "1 hour", "0").await;
                if let (true, Some(e)) = (got, epoch) {
                    // Held for 0-3 ms, then free for a moment.
                    let ms = cycles % 4;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    release(&holder, &k, "holder", e).await;
                }
                cycles += 1;
            }
            cycles
        }
    });
    let mut waiters = Vec::new();
    for w in 0..2 {
        let k = k.clone();
        waiters.push(tokio::spawn(async move {
            let c = server().app().await;
            let owner = format!("waiter{w}");
            let (mut granted, mut timed_out) = (0u32, 0u32);
            for _ in 0..600 {
                match c
                    .query_one(
                        "SELECT epoch FROM lease.acquire($1, $2, interval '1 hour', interval '1 ms')",
                        &[&k, &owner],
                    )
                    .await
                {
                    Ok(row) => {
                        granted += 1;
                        release(&c, &k, &owner, row.get(0)).await;
                    }
                    Err(e) => {
                        let db = e.as_db_error().unwrap_or_else(|| panic!("{e}"));
                        assert_eq!(db.code().code(), "57014", "{db:?}");
                        assert!(db.detail().is_some(), "57014 names the holder's expiry");
                        timed_out += 1;
                    }
                }
            }
            (granted, timed_out)
        }));
    }
    let (mut granted, mut timed_out) = (0, 0);
    for w in waiters {
        let (g, t) = w.await.unwrap();
        granted += g;
        timed_out += t;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cycles = churn.await.unwrap();
    assert!(
        cycles > 0 && granted > 0,
        "the key changed hands ({cycles} holder cycles)"
    );
    eprintln!("churn: {granted} grants, {timed_out} waits ran out, {cycles} holder cycles");
}
