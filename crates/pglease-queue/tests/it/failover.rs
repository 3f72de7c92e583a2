//! Losing a partition: the consumer stops handling it at once, another consumer takes over and
//! gets the same batch again; in transactional mode the former holder's writes never commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pglease_queue::{Consumer, Delivery, Message, Producer};
use tokio::sync::Notify;

use crate::common::{Seen, client, create_queue, eventually, force_lapse, superuser, unique};

const LIMIT: Duration = Duration::from_secs(30);

/// Sets its flag when dropped: shows that a handler's future was dropped (cancelled).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_loses_its_partition_stops_and_the_next_one_gets_the_batch_again() {
    let q = unique("fail-lost");
    let su = superuser().await;
    create_queue(&su, &q, 1, 10).await;
    Producer::new(q.as_str())
        .unwrap()
        .send_batch(
            &su,
            &[
                Message::new(&1).unwrap().with_key("k"),
                Message::new(&2).unwrap().with_key("k"),
            ],
        )
        .await
        .unwrap();

    // A takes the batch and wedges in its handler.
    let a_owner = unique("fail-lost-a");
    let a = Consumer::builder(client(&a_owner).await, q.as_str())
        .partitions([0])
        .ttl(Duration::from_secs(2))
        // No second claim of the partition by A during the test.
        .rebalance_interval(Duration::from_secs(600))
        .build()
        .unwrap();
    let seen = Seen::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let run_a = tokio::spawn({
        let (a, seen, owner, dropped) = (a.clone(), seen.clone(), a_owner.clone(), dropped.clone());
        async move {
            a.run(move |d: Delivery| {
                let (seen, owner, flag) = (seen.clone(), owner.clone(), DropFlag(dropped.clone()));
                async move {
                    seen.push(&owner, &d);
                    let _flag = flag;
                    std::future::pending::<()>().await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        }
    });
    let first = seen.wait_for(1, LIMIT).await[0].clone();
    assert_eq!(first.attempts, 1);

    // The server takes the partition away; A's keepalive finds out at its next renewal.
    force_lapse(&su, &q, 0).await;
    eventually("A stops handling the partition", LIMIT, || async {
        (dropped.load(Ordering::SeqCst) && a.partitions().is_empty()).then_some(())
    })
    .await;

    // B takes over and gets the same batch, the delivery counted.
    let b_owner = unique("fail-lost-b");
    let b = Consumer::builder(client(&b_owner).await, q.as_str())
        .partitions([0])
        .rebalance_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let run_b = tokio::spawn({
        let (b, seen, owner) = (b.clone(), seen.clone(), b_owner.clone());
        async move {
            b.run(move |d: Delivery| {
                let (seen, owner) = (seen.clone(), owner.clone());
                async move {
                    seen.push(&owner, &d);
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        }
    });
    let all = eventually("B handles both messages", LIMIT, || async {
        let all = seen.all();
        (all.iter().filter(|h| h.consumer == b_owner).count() >= 2).then_some(all)
    })
    .await;
    let by_b: Vec<_> = all.iter().filter(|h| h.consumer == b_owner).collect();
    assert_eq!(by_b[0].id, first.id, "the same message first");
    assert_eq!(
        by_b[0].batch_id, first.batch_id,
        "the same batch, re-issued"
    );
    assert_eq!(by_b[0].attempts, 2);
    assert!(by_b[0].epoch > first.epoch);
    assert_eq!(
        all.iter().filter(|h| h.consumer == a_owner).count(),
        1,
        "A handled nothing after its loss"
    );
    a.stop();
    b.stop();
    run_a.await.unwrap().unwrap();
    run_b.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_transactional_mode_a_former_holders_writes_never_commit() {
    let q = unique("fail-tx");
    let table = q.replace('-', "_");
    let su = superuser().await;
    create_queue(&su, &q, 1, 10).await;
    su.batch_execute(&format!(
        "CREATE TABLE {table} (consumer text NOT NULL, message_id bigint NOT NULL)"
    ))
    .await
    .unwrap();
    let id = Producer::new(q.as_str())
        .unwrap()
        .send(&su, &Message::new(&"pay 10").unwrap().with_key("acct"))
        .await
        .unwrap();

    // A writes its effect in the batch's transaction, then wedges before the ack.
    let a_owner = unique("fail-tx-a");
    let a = Consumer::builder(client(&a_owner).await, q.as_str())
        .partitions([0])
        .ttl(Duration::from_secs(2))
        // No second claim of the partition by A during the test.
        .rebalance_interval(Duration::from_secs(600))
        .build()
        .unwrap();
    let written = Arc::new(Notify::new());
    let resume = Arc::new(Notify::new());
    let insert = format!("INSERT INTO {table} VALUES ($1, $2)");
    let run_a = tokio::spawn({
        let (a, owner, written, resume, insert) = (
            a.clone(),
            a_owner.clone(),
            written.clone(),
            resume.clone(),
            insert.clone(),
        );
        async move {
            a.run_transactional(move |tx, d| {
                let (owner, written, resume, insert) = (
                    owner.clone(),
                    written.clone(),
                    resume.clone(),
                    insert.clone(),
                );
                Box::pin(async move {
                    tx.execute(&insert, &[&owner, &d.id()]).await?;
                    written.notify_one();
                    resume.notified().await;
                    Ok::<(), tokio_postgres::Error>(())
                })
            })
            .await
        }
    });
    written.notified().await;

    // A's lease lapses and B takes over.
    force_lapse(&su, &q, 0).await;
    let b_owner = unique("fail-tx-b");
    let b = Consumer::builder(client(&b_owner).await, q.as_str())
        .partitions([0])
        .rebalance_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let run_b = tokio::spawn({
        let (b, owner, insert) = (b.clone(), b_owner.clone(), insert.clone());
        async move {
            b.run_transactional(move |tx, d| {
                let (owner, insert) = (owner.clone(), insert.clone());
                Box::pin(async move {
                    tx.execute(&insert, &[&owner, &d.id()]).await?;
                    Ok::<(), tokio_postgres::Error>(())
                })
            })
            .await
        }
    });
    let count = format!("SELECT consumer FROM {table} WHERE message_id = $1");
    eventually("B's effect committed", LIMIT, || async {
        let rows = su.query(&count, &[&id]).await.unwrap();
        (!rows.is_empty()).then_some(())
    })
    .await;
    // Let A go on, if it still can: its ack is fenced, its transaction rolls back.
    resume.notify_waiters();
    resume.notify_one();
    a.stop();
    run_a.await.unwrap().unwrap();
    b.stop();
    run_b.await.unwrap().unwrap();
    let rows: Vec<String> = su
        .query(&count, &[&id])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, vec![b_owner], "exactly one effect, the heir's");
    assert_eq!(crate::common::pending(&su, &q).await, 0);
}
