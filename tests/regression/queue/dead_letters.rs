//! Dead letters: what reaches them, list_dead_letters, redrive and discard_dead_letters.

use pglease_tests::expect_error;

use super::{Fixture, batch_id, code, dead_letters, labels, lapse_partition, nack, try_redrive};

/// Dead-letters the messages `labels` of key `k` (sent first, in that order) through nacks on a
/// queue with max_attempts = 1, leaving what the queue held after them pending. Returns their ids.
async fn bury(f: &Fixture, e: i64, key: Option<&str>, labels: &[&str]) -> Vec<i64> {
    let mut ids = vec![];
    for l in labels {
        ids.push(f.send(key, l).await);
    }
    for id in &ids {
        let b = f.receive(0, "w", e, 1).await;
        assert_eq!(b[0].id, *id);
        let r = (f.q.as_str(), 0, "w", e, batch_id(&b));
        assert_eq!(
            nack(&f.app, r, *id, "0", Some("bad")).await,
            "dead_lettered"
        );
        f.ack(0, "w", e, batch_id(&b)).await;
    }
    ids
}

#[tokio::test]
async fn the_heir_dead_letters_the_messages_of_a_reissued_batch_that_reached_max_attempts() {
    let f = Fixture::new("the_heir_dead_letters_a_reissued_batch", 1, 1).await;
    let k1 = f.send(Some("k"), "k1").await;
    let k2 = f.send(Some("k"), "k2").await;
    let old = f.claim(0, "zombie").await;
    let b1 = f.receive(0, "zombie", old, 100).await;
    assert_eq!(labels(&b1), ["k1", "k2"]);
    f.send(Some("k"), "k3").await;
    lapse_partition(&f, 0, "zombie", old).await;
    let e = f.claim(0, "heir").await;
    let b2 = f.receive(0, "heir", e, 100).await;
    assert_eq!(
        labels(&b2),
        ["k3"],
        "the batch was left empty: closed, and a new one opened"
    );
    assert_ne!(batch_id(&b2), batch_id(&b1));
    assert_eq!(b2[0].attempts, 1);
    let dead = dead_letters(&f.app, &f.q).await;
    assert_eq!(dead.iter().map(|d| d.id).collect::<Vec<_>>(), [k1, k2]);
    for d in &dead {
        assert_eq!(d.attempts, 1);
        assert_eq!(d.reason, None, "no nack gave a reason");
        assert_eq!(
            (d.epoch, d.batch_id),
            (Some(old), Some(batch_id(&b1))),
            "the last delivery's epoch and batch"
        );
    }
}

#[tokio::test]
async fn redrive_puts_a_keys_dead_letters_back_at_its_head_in_their_order_with_attempts_reset() {
    let f = Fixture::new("redrive_puts_dead_letters_back_in_order", 1, 1).await;
    let e = f.claim(0, "w").await;
    let dead = bury(&f, e, Some("k"), &["k1", "k2"]).await;
    let other = bury(&f, e, Some("j"), &["j1"]).await;
    f.send(Some("k"), "k3").await;
    f.send(Some("k"), "k4").await;
    assert_eq!(dead_letters(&f.app, &f.q).await.len(), 3);

    assert_eq!(try_redrive(&f.admin, &f.q, Some("k")).await.unwrap(), 2);
    let left: Vec<i64> = dead_letters(&f.app, &f.q)
        .await
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(left, other, "only key k's dead letters came back");
    let b = f.receive(0, "w", e, 100).await;
    assert_eq!(
        labels(&b),
        ["k1", "k2", "k3", "k4"],
        "ahead of what was pending, in their order"
    );
    assert_eq!(&b[..2].iter().map(|d| d.id).collect::<Vec<_>>(), &dead);
    assert!(
        b.iter().all(|d| d.attempts == 1),
        "attempts reset (with max_attempts 1 they would die again): {b:?}"
    );
    assert_eq!(
        try_redrive(&f.admin, &f.q, Some("nothing-here"))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn redrive_is_refused_with_55006_while_the_key_has_messages_in_an_open_batch() {
    let f = Fixture::new("redrive_refused_with_an_open_batch_55006", 1, 1).await;
    let e = f.claim(0, "w").await;
    bury(&f, e, Some("k"), &["k1"]).await;
    f.send(Some("k"), "k2").await;
    let b = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b), ["k2"]);
    let before = f.snapshot().await;
    assert_eq!(code(try_redrive(&f.admin, &f.q, Some("k")).await), "55006");
    assert_eq!(f.snapshot().await, before);
    f.ack(0, "w", e, batch_id(&b)).await;
    assert_eq!(try_redrive(&f.admin, &f.q, Some("k")).await.unwrap(), 1);
    assert_eq!(labels(&f.receive(0, "w", e, 100).await), ["k1"]);
}

#[tokio::test]
async fn redrive_of_a_null_key_puts_the_unkeyed_dead_letters_back() {
    let f = Fixture::new("redrive_of_the_unkeyed_dead_letters", 1, 1).await;
    let e = f.claim(0, "w").await;
    let unkeyed = bury(&f, e, None, &["u1", "u2"]).await;
    let keyed = bury(&f, e, Some("k"), &["k1"]).await;
    assert_eq!(try_redrive(&f.admin, &f.q, None).await.unwrap(), 2);
    let left: Vec<i64> = dead_letters(&f.app, &f.q)
        .await
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(left, keyed);
    let b = f.receive(0, "w", e, 100).await;
    let mut ids: Vec<i64> = b.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, unkeyed);
    assert!(b.iter().all(|d| d.attempts == 1 && d.key.is_none()));
}

#[tokio::test]
async fn discard_dead_letters_deletes_those_dead_longer_than_older_than_and_returns_how_many() {
    let f = Fixture::new("discard_dead_letters_older_than", 1, 1).await;
    let e = f.claim(0, "w").await;
    bury(&f, e, Some("k"), &["k1", "k2"]).await;
    bury(&f, e, None, &["u1"]).await;
    let n: i64 = f
        .admin
        .query_one(
            "SELECT lease_queue.discard_dead_letters($1, '1 hour')",
            &[&f.q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "none died an hour ago");
    assert_eq!(dead_letters(&f.app, &f.q).await.len(), 3);
    let n: i64 = f
        .admin
        .query_one("SELECT lease_queue.discard_dead_letters($1)", &[&f.q])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
    assert!(dead_letters(&f.app, &f.q).await.is_empty());
    assert_eq!(try_redrive(&f.admin, &f.q, Some("k")).await.unwrap(), 0);
}

#[tokio::test]
async fn list_dead_letters_returns_at_most_max_oldest_death_first() {
    let f = Fixture::new("list_dead_letters_max", 1, 1).await;
    let e = f.claim(0, "w").await;
    let ids = bury(&f, e, Some("k"), &["k1", "k2", "k3"]).await;
    let first_two: Vec<i64> = f
        .app
        .query(
            "SELECT id FROM lease_queue.list_dead_letters($1, 2)",
            &[&f.q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(first_two, ids[..2]);
    let e = expect_error(
        &f.app,
        &format!("SELECT * FROM lease_queue.list_dead_letters('{}', 0)", f.q),
    )
    .await;
    assert_eq!(e.code, "22023");
}

#[tokio::test]
async fn a_message_abandoned_on_its_last_attempt_is_dead_lettered_by_the_next_receive() {
    let f = Fixture::new("abandoned_on_its_last_attempt", 1, 1).await;
    let k1 = f.send(Some("k"), "k1").await;
    let u1 = f.send(None, "u1").await;
    let old = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", old, 100).await;
    assert_eq!(b1.len(), 2);
    f.send(Some("k"), "k2").await;
    assert_eq!(
        super::try_release(&f.app, &f.q, 0, "w", old, true)
            .await
            .unwrap(),
        2
    );
    let e = f.claim(0, "next").await;
    let b2 = f.receive(0, "next", e, 100).await;
    assert_eq!(labels(&b2), ["k2"], "the key continues after its dead head");
    assert_eq!(b2[0].attempts, 1);
    let mut dead: Vec<(i64, i32, Option<i64>)> = dead_letters(&f.app, &f.q)
        .await
        .iter()
        .map(|d| (d.id, d.attempts, d.batch_id))
        .collect();
    dead.sort_unstable();
    let b = batch_id(&b1);
    assert_eq!(dead, [(k1, 1, Some(b)), (u1, 1, Some(b))]);
}
