//! Fencing: receive, ack, nack and release act only for the holder at its epoch (LE001 not the
//! holder, LE002 lapsed, LE003 stale epoch, LQ004 not claimed through the queue), and a refusal
//! changes nothing. The heir of a lapsed holder resumes its batch.

use std::time::Duration;

use pglease_tests::calls::{grant, inspect};
use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use super::{
    Delivery, Fixture, batch_id, code, labels, lapse_partition, message_row, try_ack, try_nack,
    try_receive, try_release,
};

/// A queue of one partition holding `labels` of key `k`, claimed by `owner`, with a batch of all
/// of them received; returns (epoch, the batch).
async fn holding_a_batch(f: &Fixture, owner: &str, labels: &[&str]) -> (i64, Vec<Delivery>) {
    for l in labels {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, owner).await;
    let batch = f.receive(0, owner, e, 100).await;
    assert_eq!(batch.len(), labels.len());
    (e, batch)
}

#[tokio::test]
async fn receive_by_another_owner_is_refused_with_le001_and_changes_nothing() {
    let f = Fixture::new("receive_by_another_owner_le001", 1, 10).await;
    let (e, _) = holding_a_batch(&f, "holder", &["m1"]).await;
    f.send(Some("j"), "m2").await;
    let before = f.snapshot().await;
    for (owner, epoch) in [("rival", e), ("rival", e + 1), ("rival", 1)] {
        assert_eq!(
            code(try_receive(&f.app, &f.q, 0, owner, epoch, 10).await),
            "LE001",
            "{owner} at {epoch}"
        );
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn receive_on_a_partition_no_one_holds_is_refused_with_le001() {
    let f = Fixture::new("receive_on_a_free_partition_le001", 1, 10).await;
    f.send(Some("k"), "m").await;
    let before = f.snapshot().await;
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "w", 1, 10).await),
        "LE001"
    );
    let e = f.claim(0, "w").await;
    assert_eq!(
        super::try_release(&f.app, &f.q, 0, "w", e, false)
            .await
            .unwrap(),
        0
    );
    let after_release = f.snapshot().await;
    assert_ne!(after_release, before);
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "w", e, 10).await),
        "LE001"
    );
    assert_eq!(f.snapshot().await, after_release);
}

#[tokio::test]
async fn receive_after_the_lease_lapsed_is_refused_with_le002_and_changes_nothing() {
    let f = Fixture::new("receive_after_a_lapse_le002", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "holder", &["m1", "m2"]).await;
    lapse_partition(&f, 0, "holder", e).await;
    let before = f.snapshot().await;
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "holder", e, 10).await),
        "LE002"
    );
    assert_eq!(f.snapshot().await, before);
    for d in &batch {
        // The row counts the deliveries that ended; the open one is the batch's (since 0.3.0).
        assert_eq!(
            message_row(&f.su, d.id).await.unwrap().1,
            0,
            "no attempt counted"
        );
    }
}

#[tokio::test]
async fn receive_with_a_stale_epoch_is_refused_with_le003_and_changes_nothing() {
    let f = Fixture::new("receive_with_a_stale_epoch_le003", 1, 10).await;
    let old = f.claim(0, "w").await;
    lapse_partition(&f, 0, "w", old).await;
    let (e, _) = holding_a_batch(&f, "w", &["m1"]).await;
    assert_eq!(e, old + 1);
    let before = f.snapshot().await;
    for epoch in [old, e + 1, 0, -1] {
        assert_eq!(
            code(try_receive(&f.app, &f.q, 0, "w", epoch, 10).await),
            "LE003",
            "epoch {epoch}"
        );
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn receive_on_a_lease_taken_with_lease_acquire_is_refused_with_lq004_and_changes_nothing() {
    let f = Fixture::new("receive_on_a_lease_acquire_lq004", 1, 10).await;
    f.send(Some("k"), "m").await;
    let e = grant(&f.app, &f.lease_key(0), "direct", "1 hour").await;
    let before = f.snapshot().await;
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "direct", e, 10).await),
        "LQ004"
    );
    assert_eq!(f.snapshot().await, before, "not even the lease was renewed");
    // The fence comes first: a stranger is LE001, not LQ004.
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "stranger", e, 10).await),
        "LE001"
    );
}

#[tokio::test]
async fn the_heir_of_a_lapsed_holder_gets_the_same_messages_under_the_same_batch_id_with_attempts_counted()
 {
    let f = Fixture::new("the_heir_gets_the_same_batch", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "zombie", &["m1", "m2", "m3"]).await;
    f.send(Some("k"), "m4").await;
    lapse_partition(&f, 0, "zombie", e).await;
    let heir_epoch = f.claim(0, "heir").await;
    assert_eq!(heir_epoch, e + 1);
    let resumed = f.receive(0, "heir", heir_epoch, 100).await;
    assert_eq!(
        labels(&resumed),
        ["m1", "m2", "m3"],
        "not m4: the same batch"
    );
    assert_eq!(batch_id(&resumed), batch_id(&batch));
    for (a, b) in batch.iter().zip(&resumed) {
        assert_eq!(a.id, b.id);
        assert_eq!(b.attempts, a.attempts + 1, "the re-issue counts a delivery");
    }
    let again = f.receive(0, "heir", heir_epoch, 100).await;
    assert_eq!(again, resumed, "and a repeat by the heir counts none");
}

#[tokio::test]
async fn a_zombies_ack_after_a_takeover_is_refused_with_le001_and_changes_nothing() {
    let f = Fixture::new("a_zombies_ack_after_a_takeover_le001", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "zombie", &["m1", "m2"]).await;
    lapse_partition(&f, 0, "zombie", e).await;
    let heir_epoch = f.claim(0, "heir").await;
    let resumed = f.receive(0, "heir", heir_epoch, 100).await;
    let b = batch_id(&batch);
    let before = f.snapshot().await;
    assert_eq!(
        code(try_ack(&f.app, &f.q, 0, "zombie", e, b).await),
        "LE001"
    );
    assert_eq!(
        code(try_nack(&f.app, (&f.q, 0, "zombie", e, b), batch[0].id, "0", None).await),
        "LE001"
    );
    assert_eq!(
        code(try_release(&f.app, &f.q, 0, "zombie", e, true).await),
        "LE001"
    );
    assert_eq!(f.snapshot().await, before);
    // The heir still has the batch and settles it.
    f.ack(0, "heir", heir_epoch, batch_id(&resumed)).await;
    assert!(f.receive(0, "heir", heir_epoch, 100).await.is_empty());
}

#[tokio::test]
async fn a_restarted_holders_ack_at_its_old_epoch_is_refused_with_le003_and_changes_nothing() {
    let f = Fixture::new("a_restarted_holders_ack_le003", 1, 10).await;
    let (old, batch) = holding_a_batch(&f, "w", &["m1"]).await;
    lapse_partition(&f, 0, "w", old).await;
    let new = f.claim(0, "w").await;
    let resumed = f.receive(0, "w", new, 100).await;
    assert_eq!(resumed[0].attempts, 2);
    let b = batch_id(&batch);
    let before = f.snapshot().await;
    assert_eq!(code(try_ack(&f.app, &f.q, 0, "w", old, b).await), "LE003");
    assert_eq!(
        code(try_nack(&f.app, (&f.q, 0, "w", old, b), batch[0].id, "0", None).await),
        "LE003"
    );
    assert_eq!(
        code(try_release(&f.app, &f.q, 0, "w", old, false).await),
        "LE003"
    );
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn ack_nack_and_release_after_the_lease_lapsed_are_refused_with_le002_and_change_nothing() {
    let f = Fixture::new("ack_nack_release_after_a_lapse_le002", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "w", &["m1", "m2"]).await;
    lapse_partition(&f, 0, "w", e).await;
    let b = batch_id(&batch);
    let before = f.snapshot().await;
    assert_eq!(code(try_ack(&f.app, &f.q, 0, "w", e, b).await), "LE002");
    assert_eq!(
        code(try_nack(&f.app, (&f.q, 0, "w", e, b), batch[0].id, "0", None).await),
        "LE002"
    );
    for force in [false, true] {
        assert_eq!(
            code(try_release(&f.app, &f.q, 0, "w", e, force).await),
            "LE002",
            "force {force}"
        );
    }
    assert_eq!(f.snapshot().await, before);
    let (held, _, epoch, _) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    assert_eq!((held, epoch), (false, e), "lapsed, not released");
}

#[tokio::test]
async fn a_zombies_ack_rolls_back_the_writes_of_its_transaction() {
    let f = Fixture::new("a_zombies_ack_rolls_back_its_writes", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "zombie", &["m1"]).await;
    lapse_partition(&f, 0, "zombie", e).await;
    let heir_epoch = f.claim(0, "heir").await;
    f.app
        .batch_execute("CREATE TEMP TABLE effects (v text)")
        .await
        .unwrap();
    let err = pglease_tests::expect_error(
        &f.app,
        &format!(
            "BEGIN; INSERT INTO effects VALUES ('applied'); \
             SELECT lease_queue.ack('{}', 0, 'zombie', {e}, {}); COMMIT;",
            f.q,
            batch_id(&batch)
        ),
    )
    .await;
    assert_eq!(err.code, "LE001");
    f.app.batch_execute("ROLLBACK").await.unwrap();
    let n: i64 = f
        .app
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the message's effect was not applied");
    let resumed = f.receive(0, "heir", heir_epoch, 10).await;
    assert_eq!(labels(&resumed), ["m1"], "the heir gets the message");
}

#[tokio::test]
async fn a_takeover_waits_for_the_holders_ack_transaction_and_never_sees_the_acked_batch_again() {
    let f = Fixture::new("a_takeover_waits_for_an_ack_in_flight", 1, 10).await;
    let (rival, observer) = (f.another_app().await, f.another_app().await);
    for l in ["m1", "m2"] {
        f.send(Some("k"), l).await;
    }
    let c = super::claim(&f.app, &f.q, 0, "holder", "2 seconds").await;
    let e = c.epoch.unwrap();
    let batch = f.receive(0, "holder", e, 1).await;
    f.app.batch_execute("BEGIN").await.unwrap();
    f.ack(0, "holder", e, batch_id(&batch)).await;
    // The lease lapses while the ack's transaction is still open ...
    pglease_tests::lapse::await_lapsed(&observer, &f.lease_key(0)).await;
    // ... and yet no one can take the partition over until that transaction ends.
    let pid = backend_pid(&rival).await;
    let q = f.q.clone();
    let takeover = tokio::spawn(async move {
        let c = super::claim(&rival, &q, 0, "rival", super::LONG).await;
        (rival, c)
    });
    await_backend_waiting(&observer, pid, Wait::Lock, Duration::from_secs(10)).await;
    assert!(!takeover.is_finished());
    f.app.batch_execute("COMMIT").await.unwrap();
    let (rival, c) = takeover.await.unwrap();
    assert!(c.claimed);
    assert_eq!(c.epoch, Some(e + 1));
    let next = super::receive(&rival, &f.q, 0, "rival", e + 1, 10).await;
    assert_eq!(
        labels(&next),
        ["m2"],
        "the acked batch is not delivered again"
    );
    assert_eq!(next[0].attempts, 1);
}

/// The audit's reproduction: another application's role reads a consumer's owner, epoch and batch
/// id (status() shows them) and acks its open batch — which would delete the messages unprocessed.
/// The partition's lease belongs to the consumer's login role, so every consuming call of another
/// role is refused with 42501 and changes nothing; the consumer then acks its batch itself.
#[tokio::test]
async fn another_role_that_knows_owner_epoch_and_batch_cannot_receive_ack_nack_or_release() {
    let f = Fixture::new("another_role_cannot_settle", 1, 10).await;
    let (e, batch) = holding_a_batch(&f, "holder", &["m1", "m2"]).await;
    let id = batch_id(&batch);
    let s = pglease_tests::server();
    let other = s.connect_as(s.queue_db(), pglease_tests::OTHER_APP).await;
    let before = f.snapshot().await;
    assert_eq!(
        code(try_receive(&other, &f.q, 0, "holder", e, 10).await),
        "42501"
    );
    assert_eq!(
        code(try_ack(&other, &f.q, 0, "holder", e, id).await),
        "42501"
    );
    assert_eq!(
        code(try_nack(&other, (&f.q, 0, "holder", e, id), batch[0].id, "0", None).await),
        "42501"
    );
    for force in [false, true] {
        assert_eq!(
            code(try_release(&other, &f.q, 0, "holder", e, force).await),
            "42501",
            "force = {force}"
        );
    }
    assert_eq!(f.snapshot().await, before, "nothing changed");
    super::ack(&f.app, &f.q, 0, "holder", e, id).await;
}
