//! release: giving a partition up, refused while a batch is open unless forced.

use pglease_tests::calls::inspect;

use super::{Fixture, LONG, batch_id, claim, code, labels, status, try_receive, try_release};

/// The partition's lease row and partition row and the batch's message rows, every column, as the
/// superuser reads them.
async fn rows(f: &Fixture, batch: i64) -> String {
    let rows =
        f.su.query(
            "SELECT 'lease ' || l::text FROM lease.leases AS l WHERE l.key = $1
             UNION ALL
             SELECT 'partition ' || p::text FROM lease_queue.partitions AS p
               JOIN lease_queue.queues AS q USING (qid) WHERE q.name = $2
             UNION ALL
             SELECT 'message ' || m::text FROM lease_queue.messages AS m
               JOIN lease_queue.partitions AS p ON m.id = ANY (p.batch_ids)
              WHERE p.batch_id = $3
             ORDER BY 1",
            &[&f.lease_key(0), &f.q, &batch],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get::<_, String>(0) + "\n").collect()
}

#[tokio::test]
async fn release_with_an_open_batch_is_refused_with_55006_and_changes_no_column_of_lease_or_batch()
{
    let f = Fixture::new("release_with_an_open_batch_55006", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    f.send(None, "u1").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    let b = batch_id(&batch);
    let (lease_before, rows_before, all_before) = (
        inspect(&f.app, &f.lease_key(0)).await,
        rows(&f, b).await,
        f.snapshot().await,
    );
    assert_eq!(rows_before.lines().count(), 2 + 3, "{rows_before}");
    assert_eq!(
        code(try_release(&f.app, &f.q, 0, "w", e, false).await),
        "55006"
    );
    assert_eq!(inspect(&f.app, &f.lease_key(0)).await, lease_before);
    assert_eq!(rows(&f, b).await, rows_before);
    assert_eq!(f.snapshot().await, all_before);
    // The holder still holds it and settles the batch.
    assert_eq!(f.receive(0, "w", e, 100).await, batch);
    f.ack(0, "w", e, b).await;
}

#[tokio::test]
async fn release_after_the_ack_succeeds_and_a_successor_claims_at_once() {
    let f = Fixture::new("release_after_the_ack", 1, 10).await;
    f.send(Some("k"), "k1").await;
    f.send(Some("k"), "k2").await;
    let e = f.claim(0, "w").await;
    let b = f.receive(0, "w", e, 1).await;
    f.ack(0, "w", e, batch_id(&b)).await;
    assert_eq!(
        try_release(&f.app, &f.q, 0, "w", e, false).await.unwrap(),
        0
    );
    assert_eq!(
        inspect(&f.app, &f.lease_key(0)).await,
        Some((false, None, e + 1, None))
    );
    let c = claim(&f.app, &f.q, 0, "successor", LONG).await;
    assert!(c.claimed);
    assert_eq!(c.epoch, Some(e + 2));
    let next = f.receive(0, "successor", e + 2, 10).await;
    assert_eq!(labels(&next), ["k2"]);
    assert_eq!(next[0].attempts, 1);
    // The released epoch is fenced off.
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "w", e, 10).await),
        "LE001"
    );
}

#[tokio::test]
async fn a_forced_release_abandons_the_batch_and_the_next_holder_gets_its_messages_again() {
    let f = Fixture::new("a_forced_release_abandons_the_batch", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    f.send(None, "u1").await;
    let e = f.claim(0, "w").await;
    let abandoned = f.receive(0, "w", e, 100).await;
    assert_eq!(
        try_release(&f.app, &f.q, 0, "w", e, true).await.unwrap(),
        3,
        "the number of messages abandoned"
    );
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.owner.as_deref(), s.batch_id, s.backlog), (None, None, 3));

    let c = claim(&f.app, &f.q, 0, "next", LONG).await;
    assert!(c.claimed);
    let again = f.receive(0, "next", c.epoch.unwrap(), 100).await;
    let mut ids: Vec<i64> = again.iter().map(|d| d.id).collect();
    let mut want: Vec<i64> = abandoned.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    want.sort_unstable();
    assert_eq!(ids, want, "the same messages");
    assert!(
        again.iter().all(|d| d.attempts >= 2),
        "the abandoned delivery counted: {again:?}"
    );
    let ks: Vec<&str> = again
        .iter()
        .filter(|d| d.key.is_some())
        .map(|d| d.label.as_str())
        .collect();
    assert_eq!(ks, ["k1", "k2"], "in their key's order");
}

#[tokio::test]
async fn a_forced_release_without_a_batch_is_a_plain_release_returning_zero() {
    let f = Fixture::new("a_forced_release_without_a_batch", 1, 10).await;
    let e = f.claim(0, "w").await;
    assert_eq!(try_release(&f.app, &f.q, 0, "w", e, true).await.unwrap(), 0);
    assert_eq!(
        inspect(&f.app, &f.lease_key(0)).await,
        Some((false, None, e + 1, None))
    );
}
