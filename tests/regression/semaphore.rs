//! Semaphores (0.6.0): lease.acquire_slot grants at most max_holders slots of a semaphore, each an
//! ordinary lease key (lease.slot_key) that its holder renews, releases and fences with the lease
//! functions.

use std::time::Duration;

use pglease_tests::{
    ADMIN, APP, SHARED_DB, Wait, await_backend_waiting, backend_pid, expect_error, key, server,
};
use tokio_postgres::Client;

use crate::data::inspected_data;
use crate::invalid_input::rejects;
use crate::watch::{listener, next_note};
use crate::{await_lapsed, grant, inspect, release, renew};

/// An acquire_slot result: (acquired, slot, key, epoch).
pub(crate) type Slot = (bool, Option<i32>, Option<String>, Option<i64>);

/// `lease.acquire_slot(semaphore, owner, ttl, max_holders, wait, data)`; the server's error, if any.
pub(crate) async fn try_acquire_slot(
    c: &Client,
    sem: &str,
    owner: &str,
    ttl: &str,
    max: i32,
    wait: &str,
    data: Option<&str>,
) -> Result<Slot, tokio_postgres::Error> {
    let r = c
        .query_one(
            "SELECT acquired, slot, key, epoch FROM lease.acquire_slot($1, $2, $3::text::interval, \
             $4, $5::text::interval, $6)",
            &[&sem, &owner, &ttl, &max, &wait, &data],
        )
        .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// A non-blocking acquire_slot without data, which must not fail.
pub(crate) async fn acquire_slot(c: &Client, sem: &str, owner: &str, ttl: &str, max: i32) -> Slot {
    try_acquire_slot(c, sem, owner, ttl, max, "0", None)
        .await
        .unwrap_or_else(|e| panic!("acquire_slot({sem}, {owner}, {max}): {e}"))
}

/// A granted slot: (slot, epoch).
async fn granted(c: &Client, sem: &str, owner: &str, ttl: &str, max: i32) -> (i32, i64) {
    match acquire_slot(c, sem, owner, ttl, max).await {
        (true, Some(slot), Some(k), Some(epoch)) => {
            assert_eq!(k, format!("{sem}#{slot}"));
            (slot, epoch)
        }
        other => panic!("{owner} should have been granted a slot of {sem}, got {other:?}"),
    }
}

const REFUSED: Slot = (false, None, None, None);

/// `lease.list_slots(semaphore)` as (slot, held, owner, epoch).
async fn slots(c: &Client, sem: &str) -> Vec<(i32, bool, Option<String>, i64)> {
    c.query(
        "SELECT slot, held, owner, epoch FROM lease.list_slots($1)",
        &[&sem],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn slot_key(sem: &str, slot: i32) -> String {
    format!("{sem}#{slot}")
}

#[tokio::test]
async fn acquire_slot_grants_max_holders_slots_lowest_first_then_refuses() {
    let c = server().app().await;
    let sem = key("sem_fill", "s");
    for (i, owner) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(
            granted(&c, &sem, owner, "1 hour", 3).await,
            (i as i32 + 1, 1),
            "{owner}"
        );
    }
    assert_eq!(acquire_slot(&c, &sem, "d", "1 hour", 3).await, REFUSED);
    assert_eq!(
        slots(&c, &sem).await,
        vec![
            (1, true, Some("a".into()), 1),
            (2, true, Some("b".into()), 1),
            (3, true, Some("c".into()), 1)
        ]
    );
    // A freed slot in the middle is the lowest free one.
    assert_eq!(release(&c, &slot_key(&sem, 2), "b", 1).await, "ok");
    assert_eq!(granted(&c, &sem, "d", "1 hour", 3).await, (2, 3));
    assert_eq!(acquire_slot(&c, &sem, "e", "1 hour", 3).await, REFUSED);
}

#[tokio::test]
async fn acquire_slot_by_a_holder_returns_its_slot_unchanged() {
    let c = server().app().await;
    let sem = key("sem_idempotent", "s");
    granted(&c, &sem, "a", "1 hour", 2).await;
    assert_eq!(
        try_acquire_slot(&c, &sem, "b", "1 hour", 2, "0", Some("b's"))
            .await
            .unwrap(),
        (true, Some(2), Some(slot_key(&sem, 2)), Some(1))
    );
    let before = inspect(&c, &slot_key(&sem, 2)).await;
    // Even when the semaphore is full, and with another max_holders: its own slot, same epoch and
    // expiry; data replaced when given.
    for max in [2, 1, 5] {
        assert_eq!(granted(&c, &sem, "b", "1 minute", max).await, (2, 1));
    }
    assert_eq!(
        try_acquire_slot(&c, &sem, "b", "1 minute", 2, "0", Some("new"))
            .await
            .unwrap(),
        (true, Some(2), Some(slot_key(&sem, 2)), Some(1))
    );
    assert_eq!(inspect(&c, &slot_key(&sem, 2)).await, before);
    assert_eq!(
        inspected_data(&c, &slot_key(&sem, 2)).await,
        Some(Some("new".into()))
    );
}

#[tokio::test]
async fn a_released_or_lapsed_slot_is_granted_again_with_a_higher_epoch() {
    let c = server().app().await;
    let sem = key("sem_free", "s");
    granted(&c, &sem, "a", "1 hour", 2).await;
    granted(&c, &sem, "b", "200 milliseconds", 2).await;
    assert_eq!(acquire_slot(&c, &sem, "c", "1 hour", 2).await, REFUSED);
    await_lapsed(&c, &slot_key(&sem, 2)).await;
    assert_eq!(
        granted(&c, &sem, "c", "1 hour", 2).await,
        (2, 2),
        "the lapsed slot, at its next epoch"
    );
    assert_eq!(release(&c, &slot_key(&sem, 1), "a", 1).await, "ok");
    assert_eq!(
        granted(&c, &sem, "d", "1 hour", 2).await,
        (1, 3),
        "the released slot, above its released counter"
    );
    // The lapsed holder hears what a lapsed lease holder hears.
    assert_eq!(
        renew(&c, &slot_key(&sem, 2), "b", 1, "1 hour").await.0,
        "not_owner"
    );
}

#[tokio::test]
async fn raising_max_holders_grants_more_slots_at_once() {
    let c = server().app().await;
    let sem = key("sem_raise", "s");
    granted(&c, &sem, "a", "1 hour", 1).await;
    assert_eq!(acquire_slot(&c, &sem, "b", "1 hour", 1).await, REFUSED);
    assert_eq!(granted(&c, &sem, "b", "1 hour", 3).await, (2, 1));
    assert_eq!(granted(&c, &sem, "c", "1 hour", 3).await, (3, 1));
    assert_eq!(acquire_slot(&c, &sem, "d", "1 hour", 3).await, REFUSED);
}

#[tokio::test]
async fn lowering_max_holders_revokes_nobody_and_refuses_until_fewer_hold_than_the_new_limit() {
    let c = server().app().await;
    let sem = key("sem_lower", "s");
    for owner in ["a", "b", "c"] {
        granted(&c, &sem, owner, "1 hour", 3).await;
    }
    // Limit 2 with 3 holders: nobody is revoked, the excess holder in slot 3 renews as before.
    assert_eq!(acquire_slot(&c, &sem, "d", "1 hour", 2).await, REFUSED);
    assert_eq!(
        renew(&c, &slot_key(&sem, 3), "c", 1, "1 hour").await.0,
        "ok"
    );
    assert_eq!(granted(&c, &sem, "c", "1 hour", 2).await, (3, 1));
    // One release leaves 2 holders: still not fewer than 2.
    release(&c, &slot_key(&sem, 1), "a", 1).await;
    assert_eq!(acquire_slot(&c, &sem, "d", "1 hour", 2).await, REFUSED);
    // Another leaves 1: the next grant is slot 1 (within the new limit), not a slot above it.
    release(&c, &slot_key(&sem, 3), "c", 1).await;
    assert_eq!(granted(&c, &sem, "d", "1 hour", 2).await, (1, 3));
    assert_eq!(acquire_slot(&c, &sem, "e", "1 hour", 2).await, REFUSED);
    // Grants are only ever made in slots 1..max_holders: with slot 2 held and limit 1, nothing.
    release(&c, &slot_key(&sem, 1), "d", 3).await;
    assert_eq!(acquire_slot(&c, &sem, "e", "1 hour", 1).await, REFUSED);
    assert_eq!(granted(&c, &sem, "e", "1 hour", 2).await, (1, 5));
}

#[tokio::test]
async fn a_slot_is_fenced_with_its_key_and_epoch_like_any_lease() {
    let s = server();
    let (holder, rival) = (s.app().await, s.app().await);
    let observer = s.connect_super("postgres").await;
    let sem = key("sem_fence", "s");
    let (slot, epoch) = granted(&holder, &sem, "a", "300 milliseconds", 1).await;
    let k = slot_key(&sem, slot);
    let slot_key_sql: String = holder
        .query_one("SELECT lease.slot_key($1, $2)", &[&sem, &slot])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slot_key_sql, k);
    for (owner, e, code) in [("b", epoch, "LE001"), ("a", epoch + 1, "LE003")] {
        assert_eq!(
            expect_error(
                &holder,
                &format!("SELECT lease.fence(lease.slot_key('{sem}', {slot}), '{owner}', {e})")
            )
            .await
            .code,
            code
        );
    }
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT lease.fence(lease.slot_key('{sem}', {slot}), 'a', {epoch});"
        ))
        .await
        .unwrap();
    await_lapsed(&rival, &k).await;
    // The slot lapsed, but the guarded transaction is open: a takeover of the slot waits for it.
    let pid = backend_pid(&rival).await;
    let sem2 = sem.clone();
    let takeover = tokio::spawn(async move { acquire_slot(&rival, &sem2, "b", "1 hour", 1).await });
    await_backend_waiting(&observer, pid, Wait::Lock, Duration::from_secs(10)).await;
    assert!(!takeover.is_finished());
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        takeover.await.unwrap(),
        (true, Some(1), Some(k.clone()), Some(epoch + 1))
    );
    assert_eq!(
        expect_error(&holder, &format!("SELECT lease.fence('{k}', 'a', {epoch})"))
            .await
            .code,
        "LE001",
        "the old holder's token is fenced"
    );
}

/// Every grant of every slot, over many cycles of release, lapse and purge, has an epoch above every
/// earlier one of that slot.
#[tokio::test]
async fn each_slots_epochs_strictly_increase_across_release_lapse_and_purge() {
    let s = server();
    let db = s.fresh_db_with_extension("sem_epochs");
    let c = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    let mut last = [0i64; 3];
    for round in 0..12 {
        let mut held = Vec::new();
        for i in 0..3 {
            let ttl = if (round + i) % 3 == 0 {
                "40 milliseconds"
            } else {
                "1 hour"
            };
            let (slot, epoch) = granted(&c, "s", &format!("o{round}.{i}"), ttl, 3).await;
            let idx = (slot - 1) as usize;
            assert!(
                epoch > last[idx],
                "slot {slot}: {epoch} after {}",
                last[idx]
            );
            last[idx] = epoch;
            held.push((slot, epoch, format!("o{round}.{i}"), ttl));
        }
        for (slot, epoch, owner, ttl) in held {
            let k = slot_key("s", slot);
            if ttl == "1 hour" {
                assert_eq!(release(&c, &k, &owner, epoch).await, "ok");
            } else {
                await_grant_ended(&c, &k, &owner, epoch).await;
            }
        }
        if round % 4 == 3 {
            admin
                .query_one("SELECT lease.purge('0')", &[])
                .await
                .unwrap();
        }
    }
}

/// Waits until `owner`'s grant of `k` at `epoch` is over by the server clock (lapsed, or the slot
/// already taken over by a later grant).
async fn await_grant_ended(c: &Client, k: &str, owner: &str, epoch: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while inspect(c, k)
        .await
        .is_some_and(|(held, o, e, _)| held && o.as_deref() == Some(owner) && e == epoch)
    {
        assert!(std::time::Instant::now() < deadline, "{k} never lapsed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn keys_that_only_look_like_slots_are_not_slots() {
    let c = server().app().await;
    let sem = key("sem_lookalike", "s");
    for k in [
        format!("{sem}#0"),
        format!("{sem}#01"),
        format!("{sem}#1x"),
        format!("{sem}#1#2"),
        format!("{sem}#"),
        format!("{sem}#100000"),
        format!("{sem}-1"),
        format!("{sem}x#1"),
    ] {
        grant(&c, &k, "other", "1 hour").await;
    }
    assert!(slots(&c, &sem).await.is_empty());
    assert_eq!(granted(&c, &sem, "a", "1 hour", 1).await, (1, 1));
    let n: i32 = c
        .query_one(
            "SELECT holders FROM lease.register_slot_waiter($1)",
            &[&sem],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    // A semaphore whose name is a prefix of another's: their slots stay apart.
    // (`{sem}#1#2`, granted above, is slot 2 of the semaphore `{sem}#1`.)
    let nested = format!("{sem}#1");
    assert_eq!(acquire_slot(&c, &nested, "b", "1 hour", 1).await, REFUSED);
    assert_eq!(granted(&c, &nested, "b", "1 hour", 2).await, (1, 1));
    assert_eq!(slots(&c, &sem).await.len(), 1);
}

#[tokio::test]
async fn a_blocking_acquire_slot_is_granted_a_slot_released_while_it_waits() {
    let s = server();
    let (c, waiter) = (s.app().await, s.app().await);
    let observer = s.connect_super(SHARED_DB).await;
    let sem = key("sem_wait", "s");
    granted(&c, &sem, "a", "1 hour", 2).await;
    granted(&c, &sem, "b", "1 hour", 2).await;
    let pid = backend_pid(&waiter).await;
    let sem2 = sem.clone();
    let wait = tokio::spawn(async move {
        try_acquire_slot(&waiter, &sem2, "c", "1 hour", 2, "1 minute", Some("c's"))
            .await
            .unwrap()
    });
    await_backend_waiting(&observer, pid, Wait::Sleep, Duration::from_secs(10)).await;
    assert!(!wait.is_finished());
    // It holds no row lock while it sleeps: the holders renew and release at once.
    assert_eq!(
        renew(&c, &slot_key(&sem, 1), "a", 1, "1 hour").await.0,
        "ok"
    );
    assert_eq!(release(&c, &slot_key(&sem, 2), "b", 1).await, "ok");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("granted within a poll of the release")
            .unwrap(),
        (true, Some(2), Some(slot_key(&sem, 2)), Some(3))
    );
    assert_eq!(
        inspected_data(&c, &slot_key(&sem, 2)).await,
        Some(Some("c's".into()))
    );
}

#[tokio::test]
async fn a_blocking_acquire_slot_raises_57014_at_its_deadline_and_acquires_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let sem = key("sem_deadline", "s");
    granted(&c, &sem, "a", "1 hour", 1).await;
    let before = crate::data::full_state(&su, &sem).await;
    let started = std::time::Instant::now();
    let e = try_acquire_slot(&c, &sem, "b", "1 hour", 1, "300 milliseconds", None)
        .await
        .unwrap_err();
    assert_eq!(pglease_tests::sqlstate(&e).as_deref(), Some("57014"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(crate::data::full_state(&su, &sem).await, before);
    // A slot that lapses while it waits is granted instead.
    let sem = key("sem_deadline", "lapsing");
    granted(&c, &sem, "a", "300 milliseconds", 1).await;
    assert_eq!(
        try_acquire_slot(&c, &sem, "b", "1 hour", 1, "1 minute", None)
            .await
            .unwrap(),
        (true, Some(1), Some(slot_key(&sem, 1)), Some(2))
    );
}

#[tokio::test]
async fn register_slot_waiter_marks_every_held_slot_and_their_release_notifies_pg_lease_released() {
    let c = server().app().await;
    let (_l, mut notes) = listener(SHARED_DB, "pg_lease_released").await;
    let sem = key("sem_waiter", "s");
    let free = key("sem_waiter", "free");
    let r = c
        .query_one(
            "SELECT holders, lapses_in IS NULL FROM lease.register_slot_waiter($1)",
            &[&free],
        )
        .await
        .unwrap();
    assert_eq!((r.get::<_, i32>(0), r.get::<_, bool>(1)), (0, true));
    granted(&c, &sem, "a", "1 hour", 2).await;
    granted(&c, &sem, "b", "10 minutes", 2).await;
    let r = c
        .query_one(
            "SELECT holders, lapses_in > interval '9 minutes' AND lapses_in <= interval '10 minutes'
               FROM lease.register_slot_waiter($1)",
            &[&sem],
        )
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, i32>(0), r.get::<_, bool>(1)),
        (2, true),
        "lapses_in: the time until the first of them lapses"
    );
    assert_eq!(release(&c, &slot_key(&sem, 2), "b", 1).await, "ok");
    assert_eq!(next_note(&mut notes, &sem).await, slot_key(&sem, 2));
    // The grant of slot 2 clears its mark; slot 1 is still awaited.
    granted(&c, &sem, "c", "1 hour", 2).await;
    release(&c, &slot_key(&sem, 2), "c", 3).await;
    release(&c, &slot_key(&sem, 1), "a", 1).await;
    assert_eq!(
        next_note(&mut notes, &sem).await,
        slot_key(&sem, 1),
        "no notification for the unawaited grant of slot 2"
    );
}

#[tokio::test]
async fn semaphore_functions_reject_invalid_input_naming_every_violation() {
    let p = key("sem_bad", "");
    let sem = format!("{p}s");
    let c = server().app().await;
    granted(&c, &sem, "a", "1 hour", 1).await;
    let long = "s".repeat(1019);
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            "SELECT * FROM lease.acquire_slot(NULL, 'o', '1 hour', 1)".into(),
            vec!["semaphore must not be NULL".into()],
        ),
        (
            "SELECT * FROM lease.acquire_slot('', 'o', '1 hour', 1)".into(),
            vec!["semaphore must not be empty".into()],
        ),
        (
            format!("SELECT * FROM lease.acquire_slot('{long}', 'o', '1 hour', 1)"),
            vec!["semaphore must be at most 1018 bytes (got 1019)".into()],
        ),
        (
            format!("SELECT * FROM lease.acquire_slot('{sem}', 'o', '1 hour', 0)"),
            vec!["max_holders must be in [1, 10000] (got 0)".into()],
        ),
        (
            format!("SELECT * FROM lease.acquire_slot('{sem}', 'o', '1 hour', 10001)"),
            vec!["max_holders must be in [1, 10000] (got 10001)".into()],
        ),
        (
            format!("SELECT * FROM lease.acquire_slot('{sem}', 'o', '1 hour', NULL)"),
            vec!["max_holders must not be NULL".into()],
        ),
        (
            format!(
                "SELECT * FROM lease.acquire_slot('{sem}', 'o', '1 hour', 1, '1 s', repeat('d', 8193))"
            ),
            vec!["data must be at most 8192 bytes (got 8193)".into()],
        ),
        (
            "SELECT * FROM lease.acquire_slot('', '', '0', -1, NULL, repeat('d', 9000))".into(),
            vec![
                "semaphore must not be empty".into(),
                "owner must not be empty".into(),
                "ttl must be positive".into(),
                "max_holders must be in [1, 10000] (got -1)".into(),
                "wait must not be NULL".into(),
                "data must be at most 8192 bytes (got 9000)".into(),
            ],
        ),
        (
            format!("SELECT * FROM lease.acquire_slot('{sem}', NULL, NULL, 1, '400 days')"),
            vec![
                "owner must not be NULL".into(),
                "ttl must not be NULL".into(),
                "wait must be at most 365 days".into(),
            ],
        ),
        (
            "SELECT lease.slot_key(NULL, NULL)".into(),
            vec![
                "semaphore must not be NULL".into(),
                "slot must not be NULL".into(),
            ],
        ),
        (
            format!("SELECT lease.slot_key('{sem}', 0)"),
            vec!["slot must be in [1, 10000] (got 0)".into()],
        ),
        (
            "SELECT * FROM lease.list_slots('')".into(),
            vec!["semaphore must not be empty".into()],
        ),
        (
            format!("SELECT * FROM lease.register_slot_waiter('{long}')"),
            vec!["semaphore must be at most 1018 bytes (got 1019)".into()],
        ),
        (
            "SELECT * FROM lease.register_slot_waiter(NULL)".into(),
            vec!["semaphore must not be NULL".into()],
        ),
    ];
    for (sql, violations) in &cases {
        let v: Vec<&str> = violations.iter().map(String::as_str).collect();
        rejects(sql, &v, &p).await;
    }
    // The longest semaphore name's highest slot key is a valid lease key.
    let longest = "s".repeat(1018);
    let k: String = c
        .query_one("SELECT lease.slot_key($1, 10000)", &[&longest])
        .await
        .unwrap()
        .get(0);
    assert!(k.len() <= 1024);
    assert_eq!(grant(&c, &k, "o", "1 hour").await, 1);
}
