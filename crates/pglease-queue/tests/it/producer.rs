//! Producing: a send commits or rolls back with the caller's transaction; batches keep their
//! order; errors carry the queue's SQLSTATEs.

use std::time::Duration;

use pglease_queue::{Message, Producer};

use crate::common::{client, create_queue, pending, superuser, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_sends_nothing_and_a_committed_one_sends_everything() {
    let q = unique("prod-tx");
    let su = superuser().await;
    create_queue(&su, &q, 2, 5).await;
    let c = client(&q).await;
    let producer = Producer::new(q.as_str()).unwrap();
    let mut db = c.pool().get().await.unwrap();

    let tx = db.transaction().await.unwrap();
    producer
        .send(
            &*tx,
            &Message::json(serde_json::json!({"n": 1})).with_key("k"),
        )
        .await
        .unwrap();
    let batch = vec![
        Message::new(&2).unwrap(),
        Message::new(&3).unwrap().with_key("k"),
    ];
    assert_eq!(producer.send_batch(&*tx, &batch).await.unwrap().len(), 2);
    tx.rollback().await.unwrap();
    assert_eq!(pending(&su, &q).await, 0, "a rollback sends nothing");

    let tx = db.transaction().await.unwrap();
    let first = producer
        .send(&*tx, &Message::new(&1).unwrap().with_key("k"))
        .await
        .unwrap();
    let ids = producer.send_batch(&*tx, &batch).await.unwrap();
    assert!(
        ids[0] > first && ids[1] > ids[0],
        "ids in send order: {first} {ids:?}"
    );
    assert_eq!(
        pending(&su, &q).await,
        0,
        "nothing visible before the commit"
    );
    tx.commit().await.unwrap();
    assert_eq!(pending(&su, &q).await, 3);

    // On the client's pool (autocommit), with a delay.
    producer
        .clone()
        .with_delay(Duration::from_secs(3600))
        .send_pooled(&c, &Message::new("later").unwrap())
        .await
        .unwrap();
    assert!(
        producer
            .send_batch_pooled(&c, &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(pending(&su, &q).await, 4);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_errors_keep_the_queue_sqlstates() {
    let c = client(&unique("prod-err")).await;
    let e = Producer::new("no-such-queue-anywhere")
        .unwrap()
        .send_pooled(&c, &Message::new(&1).unwrap())
        .await
        .unwrap_err();
    assert!(e.is_queue_not_found(), "{e}");
    assert_eq!(e.code(), Some(pglease::sqlstate::QUEUE_NOT_FOUND));

    let q = unique("prod-err");
    create_queue(&superuser().await, &q, 1, 5).await;
    let e = Producer::new(q.as_str())
        .unwrap()
        .send_pooled(&c, &Message::new(&1).unwrap().with_key(""))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input() && e.code() == Some("22023"), "{e}");
    c.shutdown().await;
}
