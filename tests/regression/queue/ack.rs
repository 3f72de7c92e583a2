//! ack: closing the open batch, safely repeatable, and only the batch open at the caller's epoch.

use super::{Fixture, batch_id, code, labels, lapse_partition, message_row, status, try_ack};

#[tokio::test]
async fn ack_closes_the_batch_deleting_its_messages_and_the_next_receive_gives_the_next_ones() {
    let f = Fixture::new("ack_closes_the_batch", 1, 10).await;
    for i in 1..=4 {
        f.send(Some("k"), &format!("k{i}")).await;
    }
    let e = f.claim(0, "w").await;
    let first = f.receive(0, "w", e, 2).await;
    f.ack(0, "w", e, batch_id(&first)).await;
    for d in &first {
        assert_eq!(message_row(&f.su, d.id).await, None, "{} is gone", d.label);
    }
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.batch_id, s.batch_size, s.backlog), (None, 0, 2));
    let second = f.receive(0, "w", e, 2).await;
    assert_eq!(labels(&second), ["k3", "k4"]);
    assert_ne!(batch_id(&second), batch_id(&first), "a new batch");
    assert!(second.iter().all(|d| d.attempts == 1));
}

#[tokio::test]
async fn a_repeated_ack_by_the_same_epoch_succeeds_and_changes_nothing() {
    let f = Fixture::new("a_repeated_ack_succeeds", 1, 10).await;
    for i in 1..=3 {
        f.send(Some("k"), &format!("k{i}")).await;
    }
    let e = f.claim(0, "w").await;
    let b = batch_id(&f.receive(0, "w", e, 1).await);
    f.ack(0, "w", e, b).await;
    let after = f.snapshot().await;
    f.ack(0, "w", e, b).await;
    assert_eq!(f.snapshot().await, after, "a repeat after a lost answer");
    // Also once the next batch is open: it stays open.
    let next = f.receive(0, "w", e, 1).await;
    assert_eq!(labels(&next), ["k2"]);
    let with_next = f.snapshot().await;
    f.ack(0, "w", e, b).await;
    assert_eq!(f.snapshot().await, with_next);
    assert_eq!(f.receive(0, "w", e, 1).await, next, "still the open batch");
}

#[tokio::test]
async fn ack_of_a_batch_that_is_not_the_open_one_is_refused_with_lq002_and_changes_nothing() {
    let f = Fixture::new("ack_of_a_wrong_batch_lq002", 1, 10).await;
    for i in 1..=3 {
        f.send(Some("k"), &format!("k{i}")).await;
    }
    let e = f.claim(0, "w").await;
    // No open batch at all.
    let none = f.snapshot().await;
    assert_eq!(code(try_ack(&f.app, &f.q, 0, "w", e, 1).await), "LQ002");
    assert_eq!(f.snapshot().await, none);

    let b1 = batch_id(&f.receive(0, "w", e, 1).await);
    f.ack(0, "w", e, b1).await;
    let b2 = batch_id(&f.receive(0, "w", e, 1).await);
    let before = f.snapshot().await;
    for wrong in [b2 + 1000, 0, -1] {
        assert_eq!(
            code(try_ack(&f.app, &f.q, 0, "w", e, wrong).await),
            "LQ002",
            "batch {wrong}"
        );
    }
    f.ack(0, "w", e, b2).await;
    let closed = f.snapshot().await;
    assert_eq!(
        code(try_ack(&f.app, &f.q, 0, "w", e, b1).await),
        "LQ002",
        "a closed batch other than the last one acked"
    );
    assert_eq!(f.snapshot().await, closed);
    assert_ne!(before, closed);
}

#[tokio::test]
async fn the_heirs_ack_of_a_batch_issued_to_an_older_epoch_is_lq002_until_it_receives_it() {
    let f = Fixture::new("the_heirs_ack_before_receiving_lq002", 1, 10).await;
    f.send(Some("k"), "m1").await;
    let old = f.claim(0, "zombie").await;
    let batch = f.receive(0, "zombie", old, 10).await;
    lapse_partition(&f, 0, "zombie", old).await;
    let e = f.claim(0, "heir").await;
    let b = batch_id(&batch);
    let before = f.snapshot().await;
    assert_eq!(code(try_ack(&f.app, &f.q, 0, "heir", e, b).await), "LQ002");
    assert_eq!(f.snapshot().await, before);
    let resumed = f.receive(0, "heir", e, 10).await;
    assert_eq!(batch_id(&resumed), b);
    f.ack(0, "heir", e, b).await;
    assert_eq!(message_row(&f.su, batch[0].id).await, None);
}
