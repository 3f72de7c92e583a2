//! receive (a live holder's view): opening a batch, max, idempotent repeats, the heartbeat.

use pglease_tests::calls::inspect;

use super::{Fixture, batch_id, claim, labels, message_row, status};

#[tokio::test]
async fn receive_opens_one_batch_of_the_due_messages_each_key_in_order_and_counts_a_delivery() {
    let f = Fixture::new("receive_opens_one_batch", 1, 10).await;
    for label in ["a1", "b1", "a2", "b2", "a3"] {
        f.send(Some(&label[..1]), label).await;
    }
    f.send(None, "u1").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    assert_eq!(batch.len(), 6);
    let b = batch_id(&batch);
    assert!(batch.iter().all(|d| d.attempts == 1), "{batch:?}");
    for (key, want) in [("a", &["a1", "a2", "a3"][..]), ("b", &["b1", "b2"][..])] {
        let of_key: Vec<&str> = batch
            .iter()
            .filter(|d| d.key.as_deref() == Some(key))
            .map(|d| d.label.as_str())
            .collect();
        assert_eq!(of_key, want, "key {key} in its order");
    }
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!(
        (s.batch_id, s.batch_epoch, s.batch_size, s.backlog),
        (Some(b), Some(e), 6, 0)
    );
}

#[tokio::test]
async fn receive_returns_at_most_max_messages_and_leaves_the_rest_for_the_next_batch() {
    let f = Fixture::new("receive_returns_at_most_max", 1, 10).await;
    for i in 1..=5 {
        f.send(Some("k"), &format!("k{i}")).await;
    }
    let e = f.claim(0, "w").await;
    let first = f.receive(0, "w", e, 2).await;
    assert_eq!(labels(&first), ["k1", "k2"]);
    assert_eq!(status(&f.app, &f.q).await[0].backlog, 3);
    f.ack(0, "w", e, batch_id(&first)).await;
    let second = f.receive(0, "w", e, 2).await;
    assert_eq!(labels(&second), ["k3", "k4"]);
    f.ack(0, "w", e, batch_id(&second)).await;
    assert_eq!(labels(&f.receive(0, "w", e, 2).await), ["k5"]);
}

#[tokio::test]
async fn a_repeated_receive_at_the_same_epoch_returns_the_same_batch_and_counts_no_attempt() {
    let f = Fixture::new("a_repeated_receive_is_idempotent", 1, 10).await;
    for i in 1..=3 {
        f.send(Some("k"), &format!("k{i}")).await;
    }
    let e = f.claim(0, "w").await;
    let first = f.receive(0, "w", e, 2).await;
    f.send(Some("j"), "j-later").await;
    for max in [2, 1, 100] {
        let again = f.receive(0, "w", e, max).await;
        assert_eq!(
            again, first,
            "max {max}: the same batch, attempts unchanged"
        );
    }
    for d in &first {
        // The row counts the deliveries that ended; the open one is the batch's (since 0.3.0).
        assert_eq!(message_row(&f.su, d.id).await.unwrap().1, 0);
    }
}

#[tokio::test]
async fn receive_renews_the_lease_with_the_ttl_of_the_claim() {
    let f = Fixture::new("receive_renews_the_lease", 1, 10).await;
    let c = claim(&f.app, &f.q, 0, "w", "10 minutes").await;
    let e = c.epoch.unwrap();
    for round in 0..2 {
        let before = inspect(&f.app, &f.lease_key(0)).await.unwrap().3.unwrap();
        if round == 1 {
            f.send(None, "m").await;
        }
        f.receive(0, "w", e, 10).await;
        let (held, _, epoch, after) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
        assert!(held);
        assert_eq!(epoch, e, "a renewal, not a new grant");
        assert!(
            after.unwrap() > before,
            "round {round}: the expiry moved forward"
        );
        // With the claim's ttl: the new expiry is at most 10 minutes from the server's now.
        let within: bool = f
            .app
            .query_one(
                "SELECT $1 <= clock_timestamp() + interval '10 minutes'",
                &[&after.unwrap()],
            )
            .await
            .unwrap()
            .get(0);
        assert!(within);
    }
}

#[tokio::test]
async fn receive_with_nothing_deliverable_returns_no_rows_and_opens_no_batch() {
    let f = Fixture::new("receive_with_nothing_deliverable", 1, 10).await;
    let e = f.claim(0, "w").await;
    assert!(f.receive(0, "w", e, 10).await.is_empty());
    super::send(&f.app, &f.q, Some("k"), "later", "1 hour").await;
    assert!(f.receive(0, "w", e, 10).await.is_empty());
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.batch_id, s.batch_size, s.backlog), (None, 0, 1));
}

#[tokio::test]
async fn unkeyed_messages_are_delivered_by_due_time_and_never_held_back_by_a_key() {
    let f = Fixture::new("unkeyed_messages_by_due_time", 1, 10).await;
    super::send(&f.app, &f.q, Some("k"), "k-delayed", "1 hour").await;
    f.send(Some("k"), "k-held").await;
    let u1 = f.send(None, "u1").await;
    let u2 = f.send(None, "u2").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(
        batch.iter().map(|d| d.id).collect::<Vec<_>>(),
        [u1, u2],
        "the unkeyed messages, in due order, and nothing of key k"
    );
}

#[tokio::test]
async fn a_repeated_claim_by_the_holder_records_its_ttl_for_the_next_receive() {
    let f = Fixture::new("a_repeated_claim_records_its_ttl", 1, 10).await;
    let e = f.claim(0, "w").await;
    let again = claim(&f.app, &f.q, 0, "w", "10 minutes").await;
    assert_eq!(again.epoch, Some(e));
    f.receive(0, "w", e, 10).await;
    let (_, _, _, expires_at) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    let shortened: bool = f
        .app
        .query_one(
            "SELECT $1 <= clock_timestamp() + interval '10 minutes'",
            &[&expires_at.unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        shortened,
        "renewed with the 10 minutes of the last claim, not the hour"
    );
}
