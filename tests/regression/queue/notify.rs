//! Waiting without polling (docs/QUEUE.md §13): sends notify channel `lease_queue` with
//! `'<queue>:<partition>'` at commit, once per partition per transaction, never on rollback, only
//! while the queue notifies (set_notify); next_due says when the next message outside the open batch
//! becomes deliverable.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use pglease_tests::{APP, server};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use super::{BatchRef, Fixture, code, nack, send, send_batch};

/// A connection of the application role listening on channel `lease_queue`, and the payloads of the
/// notifications it receives, in order.
async fn listener() -> (Client, mpsc::UnboundedReceiver<String>) {
    let s = server();
    let (client, mut connection) = tokio_postgres::connect(&s.conninfo(s.queue_db(), APP), NoTls)
        .await
        .expect("connect the listener");
    let (tx, rx) = mpsc::unbounded_channel();
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message
                && n.channel() == "lease_queue"
            {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client.batch_execute("LISTEN lease_queue").await.unwrap();
    (client, rx)
}

/// Every notification of queue `q` that arrives before `marker`, which this function sends (as a
/// committed notification of its own, after everything the caller committed: PostgreSQL delivers
/// notifications in commit order), counted by payload.
async fn notifications_until_marker(
    c: &Client,
    rx: &mut mpsc::UnboundedReceiver<String>,
    q: &str,
) -> BTreeMap<String, usize> {
    let marker = format!("{q}:marker");
    c.execute("SELECT pg_notify('lease_queue', $1)", &[&marker])
        .await
        .unwrap();
    let mut seen = BTreeMap::new();
    loop {
        let payload = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the marker notification arrives")
            .expect("the listener is alive");
        if payload == marker {
            return seen;
        }
        if payload.starts_with(&format!("{q}:")) {
            *seen.entry(payload).or_default() += 1;
        }
    }
}

async fn partition_of(c: &Client, key: &str, partitions: i32) -> i32 {
    c.query_one(
        "SELECT lease_queue.partition_of($1, $2)",
        &[&key, &partitions],
    )
    .await
    .unwrap()
    .get(0)
}

/// Two keys of different partitions of a queue of `n` partitions.
async fn keys_in_two_partitions(c: &Client, n: i32) -> ((String, i32), (String, i32)) {
    let first = ("k0".to_owned(), partition_of(c, "k0", n).await);
    for i in 1..100 {
        let k = format!("k{i}");
        let p = partition_of(c, &k, n).await;
        if p != first.1 {
            return (first, (k, p));
        }
    }
    panic!("no two partitions among 100 keys");
}

#[tokio::test]
async fn a_transaction_of_sends_notifies_each_partition_it_sent_to_once_at_commit() {
    let f = Fixture::new("notify_once_per_partition", 4, 10).await;
    let (listen, mut rx) = listener().await;
    let ((ka, pa), (kb, pb)) = keys_in_two_partitions(&f.app, 4).await;
    f.app.batch_execute("BEGIN").await.unwrap();
    for i in 0..3 {
        send(&f.app, &f.q, Some(&ka), &format!("a{i}"), "0").await;
    }
    send_batch(
        &f.app,
        &f.q,
        &[Some(&kb), Some(&ka), Some(&kb)],
        &["b0", "a3", "b1"],
    )
    .await;
    // Nothing before the commit.
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        BTreeMap::new()
    );
    f.app.batch_execute("COMMIT").await.unwrap();
    let expected: BTreeMap<String, usize> =
        [(format!("{}:{pa}", f.q), 1), (format!("{}:{pb}", f.q), 1)]
            .into_iter()
            .collect();
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        expected
    );
}

#[tokio::test]
async fn a_rolled_back_send_notifies_nobody() {
    let f = Fixture::new("notify_not_on_rollback", 2, 10).await;
    let (listen, mut rx) = listener().await;
    f.app.batch_execute("BEGIN").await.unwrap();
    f.send(Some("k"), "m").await;
    f.app.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        BTreeMap::new()
    );
}

#[tokio::test]
async fn set_notify_turns_a_queues_notifications_off_and_on_and_is_the_installers() {
    let f = Fixture::new("notify_switch", 1, 10).await;
    let (listen, mut rx) = listener().await;
    f.admin
        .execute("SELECT lease_queue.set_notify($1, false)", &[&f.q])
        .await
        .unwrap();
    let notify: bool = f
        .app
        .query_one(
            "SELECT notify FROM lease_queue.list_queues() WHERE queue_name = $1",
            &[&f.q],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!notify);
    f.send(Some("k"), "silent").await;
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        BTreeMap::new()
    );
    f.admin
        .execute("SELECT lease_queue.set_notify($1, true)", &[&f.q])
        .await
        .unwrap();
    f.send(Some("k"), "loud").await;
    let expected: BTreeMap<String, usize> = [(format!("{}:0", f.q), 1)].into_iter().collect();
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        expected
    );

    for (client, sql, expected) in [
        (&f.app, "SELECT lease_queue.set_notify($1, false)", "42501"),
        (
            &f.admin,
            "SELECT lease_queue.set_notify($1 || '-missing', false)",
            "LQ001",
        ),
        (&f.admin, "SELECT lease_queue.set_notify($1, NULL)", "22023"),
    ] {
        let got = client
            .execute(sql, &[&f.q])
            .await
            .map(|_| ())
            .map_err(super::server_error);
        assert_eq!(code(got), expected, "{sql}");
    }
}

#[tokio::test]
async fn a_queue_created_without_notify_never_notifies() {
    let f = Fixture::connect("notify_off_at_creation").await;
    f.admin
        .execute(
            "SELECT lease_queue.create_queue($1, 1, 10, notify => false)",
            &[&f.q],
        )
        .await
        .unwrap();
    super::grant_to_app(&f.admin, &f.q).await;
    let (listen, mut rx) = listener().await;
    f.send(Some("k"), "m").await;
    send_batch(&f.app, &f.q, &[None, Some("j")], &["x", "y"]).await;
    assert_eq!(
        notifications_until_marker(&listen, &mut rx, &f.q).await,
        BTreeMap::new()
    );
}

async fn next_due(c: &Client, q: &str, p: i32) -> Option<SystemTime> {
    c.query_one("SELECT lease_queue.next_due($1, $2)", &[&q, &p])
        .await
        .unwrap()
        .get(0)
}

async fn server_now(c: &Client) -> SystemTime {
    c.query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn next_due_is_the_earliest_deliverable_time_outside_the_open_batch() {
    let f = Fixture::new("next_due_times", 1, 10).await;
    assert_eq!(next_due(&f.app, &f.q, 0).await, None, "empty partition");

    // A delayed message: due in an hour.
    send(&f.app, &f.q, Some("later"), "l", "1 hour").await;
    let due = next_due(&f.app, &f.q, 0).await.expect("one pending");
    let now = server_now(&f.app).await;
    let ahead = due.duration_since(now).expect("in the future");
    assert!(
        ahead > Duration::from_secs(3500) && ahead <= Duration::from_secs(3600),
        "{ahead:?}"
    );

    // A message due now (keyed, then unkeyed): next_due is not in the future.
    f.send(Some("now"), "n").await;
    assert!(next_due(&f.app, &f.q, 0).await.unwrap() <= server_now(&f.app).await);

    // Received: in the open batch, no longer counted; the delayed one is next again.
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(batch.len(), 1);
    assert_eq!(next_due(&f.app, &f.q, 0).await, Some(due));

    // Nacked with a retry in ten minutes: once the batch is acked, that retry is next.
    let b: BatchRef<'_> = (&f.q, 0, "w", e, batch[0].batch_id);
    assert_eq!(
        nack(&f.app, b, batch[0].id, "10 minutes", None).await,
        "retrying"
    );
    assert_eq!(
        next_due(&f.app, &f.q, 0).await,
        Some(due),
        "the batch's keys count again when it closes"
    );
    f.ack(0, "w", e, batch[0].batch_id).await;
    let retry = next_due(&f.app, &f.q, 0).await.unwrap();
    let ahead = retry.duration_since(server_now(&f.app).await).unwrap();
    assert!(
        ahead > Duration::from_secs(500) && ahead <= Duration::from_secs(600),
        "{ahead:?}"
    );

    // An unkeyed message due now comes first.
    f.send(None, "u").await;
    assert!(next_due(&f.app, &f.q, 0).await.unwrap() <= server_now(&f.app).await);
}

#[tokio::test]
async fn next_due_refuses_a_missing_queue_and_a_partition_out_of_range() {
    let f = Fixture::new("next_due_errors", 2, 10).await;
    for (sql, expected) in [
        ("SELECT lease_queue.next_due($1 || '-missing', 0)", "LQ001"),
        ("SELECT lease_queue.next_due($1, 2)", "22023"),
        ("SELECT lease_queue.next_due($1, -1)", "22023"),
        ("SELECT lease_queue.next_due($1, NULL)", "22023"),
    ] {
        let got = f
            .app
            .execute(sql, &[&f.q])
            .await
            .map(|_| ())
            .map_err(super::server_error);
        assert_eq!(code(got), expected, "{sql}");
    }
}
