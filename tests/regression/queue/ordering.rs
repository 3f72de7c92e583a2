//! Order: within a key, delivery follows the producers' commit order, whatever the ids; a late
//! commit is never skipped; nothing waits for other producers' open transactions.

use std::time::Duration;

use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use super::{Fixture, batch_id, labels, send, sorted_labels, status};

#[tokio::test]
async fn a_late_committing_lower_id_is_delivered_after_the_higher_id_was_acked_not_skipped() {
    let f = Fixture::new("a_late_committing_lower_id_is_not_skipped", 1, 10).await;
    let (a, b) = (f.another_app().await, f.another_app().await);
    a.batch_execute("BEGIN").await.unwrap();
    let id_a = send(&a, &f.q, Some("K"), "from-a", "0").await;
    let id_b = send(&b, &f.q, Some("K"), "from-b", "0").await;
    assert!(id_a < id_b, "A's message has the lower id");

    let e = f.claim(0, "consumer").await;
    let first = f.receive(0, "consumer", e, 100).await;
    assert_eq!(
        labels(&first),
        ["from-b"],
        "B's committed message is deliverable at once, A's transaction still open"
    );
    f.ack(0, "consumer", e, batch_id(&first)).await;
    assert!(f.receive(0, "consumer", e, 100).await.is_empty());

    a.batch_execute("COMMIT").await.unwrap();
    let next = f.receive(0, "consumer", e, 100).await;
    assert_eq!(labels(&next), ["from-a"], "delivered next, not skipped");
    assert_eq!(next[0].id, id_a);
    f.ack(0, "consumer", e, batch_id(&next)).await;
    assert_eq!(status(&f.app, &f.q).await[0].backlog, 0);
}

#[tokio::test]
async fn within_a_key_messages_are_delivered_in_commit_order_not_id_order() {
    let f = Fixture::new("within_a_key_commit_order_not_id_order", 1, 10).await;
    let (a, b) = (f.another_app().await, f.another_app().await);
    a.batch_execute("BEGIN").await.unwrap();
    let a1 = send(&a, &f.q, Some("K"), "a1", "0").await;
    b.batch_execute("BEGIN").await.unwrap();
    let b1 = send(&b, &f.q, Some("K"), "b1", "0").await;
    let a2 = send(&a, &f.q, Some("K"), "a2", "0").await;
    let b2 = send(&b, &f.q, Some("K"), "b2", "0").await;
    assert!(a1 < b1 && b1 < a2 && a2 < b2);
    b.batch_execute("COMMIT").await.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    let e = f.claim(0, "consumer").await;
    assert_eq!(
        labels(&f.receive(0, "consumer", e, 100).await),
        ["b1", "b2", "a1", "a2"],
        "B committed first; each transaction's messages in its own order"
    );
}

#[tokio::test]
async fn a_message_committed_while_another_producers_transaction_is_open_is_deliverable_at_once() {
    let f = Fixture::new("a_committed_message_is_deliverable_at_once", 1, 10).await;
    let (open, other) = (f.another_app().await, f.another_app().await);
    open.batch_execute("BEGIN").await.unwrap();
    for key in [Some("K"), Some("J"), None] {
        send(&open, &f.q, key, "still-open", "0").await;
    }
    for (key, label) in [(Some("K"), "k"), (Some("J"), "j"), (None, "u")] {
        send(&other, &f.q, key, label, "0").await;
    }
    let e = f.claim(0, "consumer").await;
    let got = sorted_labels(&f.receive(0, "consumer", e, 100).await);
    assert_eq!(got, ["j", "k", "u"], "of every key, and unkeyed");
    open.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn keys_are_taken_oldest_head_first_each_with_its_messages_in_order() {
    let f = Fixture::new("keys_in_the_order_their_heads_committed", 1, 10).await;
    for (k, l) in [("c", "c1"), ("a", "a1"), ("b", "b1"), ("a", "a2")] {
        f.send(Some(k), l).await;
    }
    let e = f.claim(0, "consumer").await;
    let first = f.receive(0, "consumer", e, 1).await;
    assert_eq!(labels(&first), ["c1"], "the oldest head first");
    f.ack(0, "consumer", e, batch_id(&first)).await;
    assert_eq!(
        labels(&f.receive(0, "consumer", e, 100).await),
        ["a1", "a2", "b1"]
    );
}

#[tokio::test]
async fn a_late_commit_while_its_key_is_in_an_open_batch_is_delivered_after_the_ack() {
    let f = Fixture::new("a_late_commit_while_the_key_is_in_a_batch", 1, 10).await;
    let (a, b) = (f.another_app().await, f.another_app().await);
    a.batch_execute("BEGIN").await.unwrap();
    send(&a, &f.q, Some("K"), "from-a", "0").await;
    send(&b, &f.q, Some("K"), "from-b", "0").await;
    let e = f.claim(0, "consumer").await;
    let first = f.receive(0, "consumer", e, 100).await;
    assert_eq!(labels(&first), ["from-b"]);
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        f.receive(0, "consumer", e, 100).await,
        first,
        "the open batch is unchanged"
    );
    f.ack(0, "consumer", e, batch_id(&first)).await;
    assert_eq!(labels(&f.receive(0, "consumer", e, 100).await), ["from-a"]);
}

#[tokio::test]
async fn a_producer_committing_while_an_ack_transaction_holds_its_key_waits_and_is_then_delivered()
{
    let f = Fixture::new("a_commit_waits_for_an_ack_of_its_key", 1, 10).await;
    let (producer, observer) = (f.another_app().await, f.another_app().await);
    f.send(Some("K"), "first").await;
    let e = f.claim(0, "consumer").await;
    let first = f.receive(0, "consumer", e, 100).await;
    producer.batch_execute("BEGIN").await.unwrap();
    send(&producer, &f.q, Some("K"), "second", "0").await;

    f.app.batch_execute("BEGIN").await.unwrap();
    f.ack(0, "consumer", e, batch_id(&first)).await;
    let pid = backend_pid(&producer).await;
    let commit = tokio::spawn(async move { producer.batch_execute("COMMIT").await });
    await_backend_waiting(&observer, pid, Wait::Lock, Duration::from_secs(10)).await;
    assert!(!commit.is_finished(), "the commit waits for the key's row");
    f.app.batch_execute("COMMIT").await.unwrap();
    commit.await.unwrap().unwrap();
    assert_eq!(labels(&f.receive(0, "consumer", e, 100).await), ["second"]);
}
