//! Waiting: an idle consumer is woken by the queue's notification (long before it would wake by
//! itself); without a listening connection it polls; a client and its consumer listen on one
//! connection.

use std::time::{Duration, Instant};

use futures_util::FutureExt;

use pglease_queue::{Consumer, Message, Producer};

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
    let run = seen.run(&consumer, &owner);
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
    let run = seen.run(&consumer, &owner);
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

/// How many backends of application `app` are listening: a listening connection's last
/// statement is a `LISTEN` (the pooled connections run lease and queue calls).
async fn listening_backends(su: &tokio_postgres::Client, app: &str) -> i64 {
    su.query_one(
        "SELECT count(*) FROM pg_stat_activity \
          WHERE application_name = $1 AND query LIKE 'LISTEN%'",
        &[&app],
    )
    .await
    .expect("pg_stat_activity")
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_and_its_consumer_share_one_listening_connection() {
    let q = unique("wait-shared");
    let su = superuser().await;
    create_queue(&su, &q, 2, 5).await;
    let owner = unique("wait-shared-a");
    let client = client(&owner).await;
    // Idle partitions wake by themselves every ttl / 3 = 40 s, and the poll interval is as long.
    let consumer = Consumer::builder(client.clone(), q.as_str())
        .ttl(Duration::from_secs(120))
        .poll_interval(Duration::from_secs(120))
        .listen(conninfo(&owner).parse().unwrap())
        .build()
        .unwrap();
    let seen = Seen::default();
    let run = seen.run(&consumer, &owner);
    eventually(
        "both partitions are held",
        Duration::from_secs(30),
        || async { (consumer.partitions().len() == 2).then_some(()) },
    )
    .await;

    // The consumer is woken by the queue's notification...
    Producer::new(q.as_str())
        .unwrap()
        .send(&su, &Message::new(&1).unwrap())
        .await
        .unwrap();
    seen.wait_for(1, Duration::from_secs(20)).await;
    assert!(consumer.notifications_delivered() >= 1);

    // ...and the client's own wait by the release's, on the same connection.
    let key = unique("wait-shared-key");
    let other = pglease::Client::builder()
        .owner(unique("wait-shared-b"))
        .connect(&conninfo("wait-shared-other"))
        .await
        .unwrap();
    let held = other
        .try_acquire(&key, Duration::from_secs(120))
        .await
        .unwrap()
        .expect("free key");
    let waiter = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move {
            client
                .acquire(&key, Duration::from_secs(30), Duration::from_secs(20))
                .await
        }
    });
    eventually("the client waits", Duration::from_secs(20), || async {
        su.query_opt("SELECT waiting FROM lease.leases WHERE key = $1", &[&key])
            .await
            .ok()?
            .filter(|row| row.get::<_, bool>(0))
            .map(|_| ())
    })
    .await;
    held.release().await.unwrap();
    let lease = waiter.await.unwrap().unwrap();
    assert!(client.notifications_delivered() >= 1);

    assert_eq!(listening_backends(&su, &owner).await, 1);
    lease.release().await.unwrap();
    consumer.stop();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_gets_its_payload_and_is_woken_when_the_connection_is_lost() {
    let su = superuser().await;
    let app = unique("wait-subscribe");
    let client = client(&app).await;
    let mine = client
        .subscribe("it_jobs", "reports")
        .unwrap()
        .expect("a client built with connect listens");
    let other = client.subscribe("it_jobs", "invoices").unwrap().unwrap();
    assert!(mine.listening(Duration::from_secs(20)).await);
    su.batch_execute("NOTIFY it_jobs, 'reports'").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), mine.notified())
        .await
        .expect("the payload's notification");
    // Notifications are dispatched in order: once a later one has reached `mine`, the dispatch
    // of the first is over, so a wake of `other` by it would be there to see, without a wait.
    su.batch_execute("NOTIFY it_jobs, 'reports'").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), mine.notified())
        .await
        .expect("the payload's second notification");
    assert!(
        other.notified().now_or_never().is_none(),
        "another payload does not wake it"
    );

    // The listening backend goes away: every subscription is woken, and it listens again.
    let killed: i64 = su
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    tokio::time::timeout(Duration::from_secs(20), other.notified())
        .await
        .expect("woken by the loss");
    tokio::time::timeout(Duration::from_secs(20), mine.notified())
        .await
        .expect("every subscription is woken by the loss");
    eventually("listening again", Duration::from_secs(30), || async {
        mine.is_listening().then_some(())
    })
    .await;
    su.batch_execute("NOTIFY it_jobs, 'reports'").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), mine.notified())
        .await
        .expect("the payload's notification after the reconnect");

    // A listener of its own delivers the same way.
    let listener = pglease::Listener::new(conninfo(&unique("wait-own")).parse().unwrap());
    let own = listener.subscribe("it_jobs", "reports").unwrap();
    assert!(own.listening(Duration::from_secs(20)).await);
    su.batch_execute("NOTIFY it_jobs, 'reports'").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), own.notified())
        .await
        .expect("the payload's notification on a listener of its own");
    assert!(client.subscribe("", "x").unwrap_err().is_invalid_input());
}
