//! Stopping: the consumer finishes its open batch (or abandons it) and releases its partitions,
//! so that another consumer can claim them at once.

use std::sync::Arc;
use std::time::Duration;

use pglease_queue::{Consumer, Delivery, Message, OnShutdown, Producer};
use tokio::sync::Notify;

use crate::common::{Seen, client, create_queue, eventually, holders, superuser, unique};

const LIMIT: Duration = Duration::from_secs(30);

/// Claims partition `p` of `q` for `owner` through the queue; whether it was granted.
async fn claim_now(su: &tokio_postgres::Client, q: &str, p: i32, owner: &str) -> bool {
    su.query_one(
        "SELECT claimed FROM lease_queue.claim($1, $2, $3, interval '10 seconds')",
        &[&q, &p, &owner],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_finishes_the_open_batch_and_releases_every_partition_at_once() {
    let q = unique("stop-finish");
    let su = superuser().await;
    create_queue(&su, &q, 2, 5).await;
    let owner = unique("stop-finish-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let seen = Seen::default();
    let entered = Arc::new(Notify::new());
    let resume = Arc::new(Notify::new());
    let run = tokio::spawn({
        let (consumer, seen, owner, entered, resume) = (
            consumer.clone(),
            seen.clone(),
            owner.clone(),
            entered.clone(),
            resume.clone(),
        );
        async move {
            consumer
                .run(move |d: Delivery| {
                    let (seen, owner, entered, resume) =
                        (seen.clone(), owner.clone(), entered.clone(), resume.clone());
                    async move {
                        entered.notify_one();
                        resume.notified().await;
                        seen.push(&owner, &d);
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        }
    });
    eventually("both partitions held", LIMIT, || async {
        (consumer.partitions().len() == 2).then_some(())
    })
    .await;
    Producer::new(q.as_str())
        .unwrap()
        .send(&su, &Message::new(&1).unwrap())
        .await
        .unwrap();
    entered.notified().await;
    consumer.stop();
    // The batch in progress is finished, not abandoned.
    resume.notify_one();
    run.await.unwrap().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        crate::common::pending(&su, &q).await,
        0,
        "acked before release"
    );
    assert_eq!(holders(&su, &q).await, vec![None, None], "released");
    for p in 0..2 {
        assert!(
            claim_now(&su, &q, p, "successor").await,
            "partition {p} free at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_with_abandon_puts_the_open_batch_back_for_the_next_holder() {
    let q = unique("stop-abandon");
    let su = superuser().await;
    create_queue(&su, &q, 1, 5).await;
    let id = Producer::new(q.as_str())
        .unwrap()
        .send(&su, &Message::new(&1).unwrap().with_key("k"))
        .await
        .unwrap();
    let owner = unique("stop-abandon-a");
    let consumer = Consumer::builder(client(&owner).await, q.as_str())
        .ttl(Duration::from_secs(60))
        .on_shutdown(OnShutdown::Abandon)
        .build()
        .unwrap();
    let entered = Arc::new(Notify::new());
    let run = tokio::spawn({
        let (consumer, entered) = (consumer.clone(), entered.clone());
        async move {
            consumer
                .run(move |_d: Delivery| {
                    let entered = entered.clone();
                    async move {
                        entered.notify_one();
                        std::future::pending::<()>().await;
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        }
    });
    entered.notified().await;
    consumer.stop();
    run.await.unwrap().unwrap();
    assert_eq!(holders(&su, &q).await, vec![None], "released");
    // The next holder gets the message again, with the abandoned delivery counted.
    assert!(claim_now(&su, &q, 0, "successor").await);
    let row = su
        .query_one(
            "SELECT r.id, r.attempts FROM lease_queue.claim($1, 0, 'successor', interval '10 seconds') AS c, \
                    lease_queue.receive($1, 0, 'successor', c.epoch, 10) AS r",
            &[&q],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), id);
    assert_eq!(row.get::<_, i32>(1), 2);
}
