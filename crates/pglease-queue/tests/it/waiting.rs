//! Waiting: an idle consumer is woken by the queue's notification (long before it would wake by
//! itself); without a listening connection it polls.

use std::time::{Duration, Instant};

use pglease_queue::{Consumer, Delivery, Message, Producer};

use crate::common::{Seen, client, conninfo, create_queue, eventually, superuser, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_listening_consumer_is_woken_by_a_notification() {
    let q = unique("wait-notify");
    let su = superuser().await;
    create_queue(&su, &q, 1, 5).await;
    let owner = unique("wait-notify-a");
    // Idle partitions wake by themselves every ttl / 3 = 40 s, and the poll interval is as long.
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .ttl(Duration::from_secs(120))
        .poll_interval(Duration::from_secs(120))
        .listen(conninfo(&owner).parse().unwrap())
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
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        }
    });
    eventually("the partition is held", Duration::from_secs(30), || async {
        (!consumer.partitions().is_empty()).then_some(())
    })
    .await;
    let producer = Producer::new(q.as_str()).unwrap();
    for n in 1..=2 {
        let sent = Instant::now();
        producer
            .send(&su, &Message::new(&n).unwrap())
            .await
            .unwrap();
        seen.wait_for(n, Duration::from_secs(20)).await;
        let took = sent.elapsed();
        assert!(took < Duration::from_secs(20), "handled after {took:?}");
    }
    assert!(consumer.notifications_delivered() >= 2);
    consumer.stop();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listening_a_consumer_polls() {
    let q = unique("wait-poll");
    let su = superuser().await;
    create_queue(&su, &q, 1, 5).await;
    let owner = unique("wait-poll-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .poll_interval(Duration::from_millis(100))
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
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        }
    });
    eventually("the partition is held", Duration::from_secs(30), || async {
        (!consumer.partitions().is_empty()).then_some(())
    })
    .await;
    Producer::new(q.as_str())
        .unwrap()
        .send(&su, &Message::new(&1).unwrap())
        .await
        .unwrap();
    seen.wait_for(1, Duration::from_secs(30)).await;
    assert_eq!(consumer.notifications_delivered(), 0);
    consumer.stop();
    run.await.unwrap().unwrap();
}
