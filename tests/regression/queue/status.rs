//! status: the operator's view of each partition.

use pglease_tests::calls::inspect;

use super::{Fixture, batch_id, key_in, labels, lapse_partition, nack, send, status, try_release};

#[tokio::test]
async fn status_reports_holder_epoch_expiry_open_batch_backlog_held_back_keys_and_dead_letters() {
    let f = Fixture::new("status_reports_every_column", 2, 2).await;
    let [d, h, a, b] = ["d", "h", "a", "b"].map(|p| key_in(p, 0, 2));
    let x = key_in("x", 1, 2);
    let e = f.claim(0, "w").await;

    // A dead letter: key d, delivered twice and nacked twice.
    f.send(Some(&d), "d1").await;
    for outcome in ["retrying", "dead_lettered"] {
        let batch = f.receive(0, "w", e, 1).await;
        assert_eq!(labels(&batch), ["d1"]);
        let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
        assert_eq!(nack(&f.app, r, batch[0].id, "0", None).await, outcome);
        f.ack(0, "w", e, batch_id(&batch)).await;
    }
    // A held-back key: h's message awaits its retry in an hour.
    f.send(Some(&h), "h1").await;
    let batch = f.receive(0, "w", e, 1).await;
    let h1_enqueued = batch[0].enqueued_at;
    let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
    nack(&f.app, r, batch[0].id, "1 hour", None).await;
    f.ack(0, "w", e, batch_id(&batch)).await;
    // An open batch of two, and one more message pending.
    for (k, l) in [(&a, "a1"), (&a, "a2"), (&b, "b1")] {
        f.send(Some(k), l).await;
    }
    let open = f.receive(0, "w", e, 2).await;
    assert_eq!(labels(&open), ["a1", "a2"]);
    // Partition 1: one message, never claimed.
    let x1 = f.send(Some(&x), "x1").await;

    let rows = status(&f.app, &f.q).await;
    assert_eq!(rows.len(), 2);
    let (p0, p1) = (&rows[0], &rows[1]);
    let (_, _, _, expires_at) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    assert_eq!(p0.partition, 0);
    assert_eq!(
        (p0.owner.as_deref(), p0.epoch, p0.expires_at),
        (Some("w"), Some(e), expires_at)
    );
    assert_eq!(
        (p0.batch_id, p0.batch_epoch, p0.batch_size),
        (Some(batch_id(&open)), Some(e), 2)
    );
    assert!(p0.batch_opened_at.is_some_and(|t| t >= open[0].enqueued_at));
    assert_eq!(p0.backlog, 2, "h1 and b1");
    assert_eq!(p0.oldest_enqueued_at, Some(h1_enqueued));
    assert_eq!((p0.held_back_keys, p0.dead_letters), (1, 1));

    assert_eq!(p1.partition, 1);
    assert_eq!(
        (p1.owner.as_deref(), p1.epoch, p1.expires_at),
        (None, None, None)
    );
    assert_eq!(
        (p1.batch_id, p1.batch_epoch, p1.batch_size),
        (None, None, 0)
    );
    assert_eq!(p1.batch_opened_at, None);
    assert_eq!(p1.backlog, 1);
    let x1_at: std::time::SystemTime =
        f.su.query_one(
            "SELECT enqueued_at FROM lease_queue.messages WHERE id = $1",
            &[&x1],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(p1.oldest_enqueued_at, Some(x1_at));
    assert_eq!((p1.held_back_keys, p1.dead_letters), (0, 0));
}

#[tokio::test]
async fn status_of_a_lapsed_or_released_partition_shows_no_holder_and_the_fencing_counter() {
    let f = Fixture::new("status_of_lapsed_and_released", 2, 10).await;
    let e0 = f.claim(0, "w").await;
    let e1 = f.claim(1, "w").await;
    f.send(Some(&key_in("k", 0, 2)), "m").await;
    let open = f.receive(0, "w", e0, 10).await;
    lapse_partition(&f, 0, "w", e0).await;
    assert_eq!(
        try_release(&f.app, &f.q, 1, "w", e1, false).await.unwrap(),
        0
    );
    let rows = status(&f.app, &f.q).await;
    assert_eq!(
        (rows[0].owner.as_deref(), rows[0].epoch, rows[0].expires_at),
        (None, Some(e0), None),
        "lapsed"
    );
    assert_eq!(
        (rows[0].batch_id, rows[0].batch_epoch, rows[0].batch_size),
        (Some(batch_id(&open)), Some(e0), 1),
        "the lapsed holder's batch is still open"
    );
    assert_eq!(
        (rows[1].owner.as_deref(), rows[1].epoch, rows[1].expires_at),
        (None, Some(e1 + 1), None),
        "released"
    );
}

#[tokio::test]
async fn status_without_a_queue_lists_every_queues_partitions_and_counts_no_uncommitted_message() {
    let f = Fixture::new("status_of_every_queue", 3, 10).await;
    let producer = f.another_app().await;
    producer.batch_execute("BEGIN").await.unwrap();
    send(&producer, &f.q, Some("k"), "uncommitted", "0").await;
    send(&producer, &f.q, None, "uncommitted", "0").await;
    let rows: Vec<(i32, i64)> = f
        .app
        .query(
            "SELECT partition, backlog FROM lease_queue.status() WHERE queue_name = $1",
            &[&f.q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(0, 0), (1, 0), (2, 0)]);
    producer.batch_execute("COMMIT").await.unwrap();
    let total: i64 = status(&f.app, &f.q).await.iter().map(|s| s.backlog).sum();
    assert_eq!(total, 2);
}

#[tokio::test]
async fn status_counts_a_key_held_back_by_two_failed_messages_once() {
    let f = Fixture::new("status_counts_held_back_keys_not_messages", 1, 10).await;
    for l in ["k1", "k2", "k3"] {
        f.send(Some("k"), l).await;
    }
    f.send(Some("j"), "j1").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
    let id = |l: &str| batch.iter().find(|d| d.label == l).unwrap().id;
    // k2 fails first (k3 goes back with it), then k1: both await their retry, one key held back.
    assert_eq!(nack(&f.app, r, id("k2"), "1 hour", None).await, "retrying");
    assert_eq!(nack(&f.app, r, id("k1"), "1 hour", None).await, "retrying");
    assert_eq!(nack(&f.app, r, id("j1"), "1 hour", None).await, "retrying");
    f.ack(0, "w", e, batch_id(&batch)).await;
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.held_back_keys, s.backlog), (2, 4), "keys k and j");
}
