//! Consuming: key order, nack with backoff (the key's later messages held back), dead letters,
//! and balancing between consumers.

use std::collections::HashMap;
use std::time::Duration;

use pglease_queue::{Backoff, Consumer, Delivery, Message, Producer};

use crate::common::{Seen, client, conninfo, create_queue, eventually, holders, superuser, unique};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_handles_every_message_once_in_key_order() {
    let q = unique("cons-order");
    let su = superuser().await;
    create_queue(&su, &q, 3, 5).await;
    let producer = Producer::new(q.as_str()).unwrap();
    // Interleaved keys, in three transactions; one unkeyed message.
    let mut sent = 0;
    for round in 0..3 {
        let batch: Vec<Message> = (0..8)
            .map(|i| {
                Message::json(serde_json::json!({"seq": round * 8 + i}))
                    .with_key(format!("k{}", i % 4))
            })
            .collect();
        producer.send_batch(&su, &batch).await.unwrap();
        sent += batch.len();
    }
    producer
        .send(&su, &Message::new("loose").unwrap())
        .await
        .unwrap();
    sent += 1;

    let owner = unique("cons-order-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .batch_size(5)
        .rebalance_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let seen = Seen::default();
    let run = seen.run(&consumer, &owner);
    let all = seen.wait_for(sent, LIMIT).await;
    let mut per_key: HashMap<String, Vec<i64>> = HashMap::new();
    for h in &all {
        assert_eq!(h.attempts, 1, "{h:?}");
        if let Some(k) = &h.key {
            per_key
                .entry(k.clone())
                .or_default()
                .push(h.payload["seq"].as_i64().unwrap());
        }
    }
    assert_eq!(per_key.len(), 4);
    for (k, seqs) in &per_key {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{k}: {seqs:?}");
    }
    assert_eq!(
        consumer.partitions(),
        vec![0, 1, 2],
        "a lone consumer holds all"
    );
    consumer.stop();
    run.await.unwrap().unwrap();
    assert_eq!(seen.len(), sent, "nothing handled twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_message_is_retried_with_backoff_and_holds_back_only_its_key() {
    let q = unique("cons-nack");
    let su = superuser().await;
    create_queue(&su, &q, 1, 10).await;
    let producer = Producer::new(q.as_str()).unwrap();
    let batch = vec![
        Message::json(serde_json::json!({"n": "a1", "fail": 2})).with_key("a"),
        Message::json(serde_json::json!({"n": "a2"})).with_key("a"),
        Message::json(serde_json::json!({"n": "b1"})).with_key("b"),
    ];
    producer.send_batch(&su, &batch).await.unwrap();

    let owner = unique("cons-nack-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .retry_backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(400),
        ))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let seen = Seen::default();
    let run = tokio::spawn({
        let (consumer, seen, owner) = (consumer.clone(), seen.clone(), owner.clone());
        async move {
            consumer
                .run(move |d: Delivery| {
                    let (seen, owner) = (seen.clone(), owner.clone());
                    async move {
                        seen.push(&owner, &d);
                        let fail = d.payload()["fail"].as_u64().unwrap_or(0);
                        if u64::from(d.attempts()) <= fail {
                            return Err(format!("attempt {} fails", d.attempts()));
                        }
                        Ok(())
                    }
                })
                .await
        }
    });
    // a1 fails twice, then a1, a2; b1 once.
    let all = seen.wait_for(5, LIMIT).await;
    let order: Vec<(String, u32)> = all
        .iter()
        .map(|h| (h.payload["n"].as_str().unwrap().to_owned(), h.attempts))
        .collect();
    let a: Vec<&(String, u32)> = order.iter().filter(|(n, _)| n.starts_with('a')).collect();
    assert_eq!(
        a,
        [
            &("a1".to_owned(), 1),
            &("a1".to_owned(), 2),
            &("a1".to_owned(), 3),
            &("a2".to_owned(), 1)
        ],
        "a2 is never handed out before a1 succeeded: {order:?}"
    );
    // b1 is not held back by a1: handled before a1's first retry.
    let b1 = order.iter().position(|(n, _)| n == "b1").unwrap();
    let a1_retry = order
        .iter()
        .position(|x| x == &("a1".to_owned(), 2))
        .unwrap();
    assert!(b1 < a1_retry, "{order:?}");
    consumer.stop();
    run.await.unwrap().unwrap();
    assert_eq!(seen.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_keeps_failing_becomes_a_dead_letter_and_its_key_continues() {
    let q = unique("cons-dead");
    let su = superuser().await;
    create_queue(&su, &q, 1, 2).await;
    let producer = Producer::new(q.as_str()).unwrap();
    producer
        .send_batch(
            &su,
            &[
                Message::json(serde_json::json!({"poison": true})).with_key("k"),
                Message::json(serde_json::json!({"n": 2})).with_key("k"),
            ],
        )
        .await
        .unwrap();

    let owner = unique("cons-dead-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .retry_backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(50),
        ))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let seen = Seen::default();
    let run = tokio::spawn({
        let (consumer, seen, owner) = (consumer.clone(), seen.clone(), owner.clone());
        async move {
            consumer
                .run(move |d: Delivery| {
                    let (seen, owner) = (seen.clone(), owner.clone());
                    async move {
                        seen.push(&owner, &d);
                        if d.payload()["poison"] == true {
                            return Err("cannot digest this");
                        }
                        Ok(())
                    }
                })
                .await
        }
    });
    let all = seen.wait_for(3, LIMIT).await;
    let attempts: Vec<(bool, u32)> = all
        .iter()
        .map(|h| (h.payload["poison"] == true, h.attempts))
        .collect();
    assert_eq!(attempts, [(true, 1), (true, 2), (false, 1)]);
    let row = su
        .query_one(
            "SELECT count(*), min(reason), min(attempts) FROM lease_queue.list_dead_letters($1)",
            &[&q],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some("cannot digest this")
    );
    assert_eq!(row.get::<_, i32>(2), 2);
    consumer.stop();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_consumer_gets_its_share_without_the_first_crashing() {
    let q = unique("cons-balance");
    let su = superuser().await;
    create_queue(&su, &q, 4, 5).await;
    let start = |owner: String| {
        let q = q.clone();
        async move {
            let consumer = Consumer::builder(client(&owner).await, q.as_str())
                .ttl(Duration::from_secs(10))
                .rebalance_interval(Duration::from_millis(200))
                .listen(conninfo(&owner).parse().unwrap())
                .build()
                .unwrap();
            let run = tokio::spawn({
                let consumer = consumer.clone();
                async move {
                    consumer
                        .run(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
                        .await
                }
            });
            (consumer, run)
        }
    };
    let (a, run_a) = start(unique("bal-a")).await;
    eventually("the first consumer holds all four", LIMIT, || async {
        (a.partitions().len() == 4).then_some(())
    })
    .await;
    let (b, run_b) = start(unique("bal-b")).await;
    eventually("two each", LIMIT, || async {
        (a.partitions().len() == 2 && b.partitions().len() == 2).then_some(())
    })
    .await;
    // The server agrees: two holders, two partitions each.
    let owners = holders(&su, &q).await;
    for who in [a.owner(), b.owner()] {
        assert_eq!(
            owners.iter().filter(|o| o.as_deref() == Some(who)).count(),
            2,
            "{owners:?}"
        );
    }
    assert!(!run_a.is_finished(), "the first consumer is still running");
    // Messages to every partition are handled by one of them.
    let producer = Producer::new(q.as_str()).unwrap();
    for i in 0..8 {
        producer
            .send(&su, &Message::new(&i).unwrap().with_key(format!("key-{i}")))
            .await
            .unwrap();
    }
    eventually("everything handled", LIMIT, || async {
        (crate::common::pending(&su, &q).await == 0).then_some(())
    })
    .await;
    a.stop();
    b.stop();
    run_a.await.unwrap().unwrap();
    run_b.await.unwrap().unwrap();
}

/// A worker that goes on settles each batch with `lease_queue.ack_and_receive` (pg_lease_queue
/// 0.3.0): the ack and the next batch in one statement. Counted by the server
/// (`track_functions = pl` on the consumer's connections only), once its statistics are reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_worker_acks_and_receives_the_next_batch_in_one_call() {
    let q = unique("cons-ack-and-receive");
    let su = superuser().await;
    create_queue(&su, &q, 1, 5).await;
    let producer = Producer::new(q.as_str()).unwrap();
    let batch: Vec<Message> = (0..5)
        .map(|i| Message::json(serde_json::json!({"seq": i})).with_key("k"))
        .collect();
    producer.send_batch(&su, &batch).await.unwrap();

    let owner = unique("cons-ack-and-receive-a");
    let counted = pglease::Client::builder()
        .owner(owner.as_str())
        .connect(&format!(
            "{} options='-c track_functions=pl'",
            conninfo(&owner)
        ))
        .await
        .unwrap();
    let consumer = Consumer::builder(counted, q.as_str())
        .batch_size(1)
        .build()
        .unwrap();
    let seen = Seen::default();
    let run = seen.run(&consumer, &owner);
    let all = seen.wait_for(5, LIMIT).await;
    let seqs: Vec<i64> = all
        .iter()
        .map(|h| h.payload["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4], "one batch each, in order");
    // Five batches of one: the first received, each later one opened by the previous one's settling
    // call (and the fifth's settling call opens none).
    let calls = eventually("ack_and_receive calls reported", LIMIT, || async {
        let n: i64 = su
            .query_one(
                "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions
                  WHERE schemaname = 'lease_queue' AND funcname = 'ack_and_receive'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (n >= 5).then_some(n)
    })
    .await;
    assert!(calls >= 5, "{calls}");
    consumer.stop();
    run.await.unwrap().unwrap();
}
