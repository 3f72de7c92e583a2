//! pg_lease_queue 0.3.0's hot path (issue 26): what a send, its commit, a delivery and an ack write,
//! read from the server's own per-transaction counters; `ack_and_receive`, the ack and the next
//! receive in one statement; and the rules that came with them (a position renumbered at commit
//! only when a later-sent message of its key committed first; a transaction's own uncommitted
//! messages are not delivered to it).

use tokio_postgres::Client;

use super::{
    Delivery, Fixture, ServerError, batch_id, code, labels, lapse_partition, server_error, status,
};

/// Rows inserted, updated and deleted in `table` as counted so far by this backend's statistics not
/// yet reported (they include the current transaction's; since PostgreSQL 15 also earlier
/// transactions' not yet flushed, which happens only between transactions: take a difference of two
/// readings within one transaction, [`Writes`]).
async fn counted(c: &Client, table: &str) -> (i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables
              WHERE relid = $1::text::regclass",
            &[&table],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The rows written to a table from the moment it was made, within one transaction.
struct Writes(&'static str, (i64, i64, i64));

impl Writes {
    async fn from_now(c: &Client, table: &'static str) -> Writes {
        Writes(table, counted(c, table).await)
    }

    /// (inserted, updated, deleted) since [`Writes::from_now`].
    async fn since(&self, c: &Client) -> (i64, i64, i64) {
        let now = counted(c, self.0).await;
        (now.0 - self.1.0, now.1 - self.1.1, now.2 - self.1.2)
    }
}

/// `lease_queue.ack_and_receive`; the server's error, if any.
pub(super) async fn try_ack_and_receive(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    epoch: i64,
    batch: Option<i64>,
    max: i32,
) -> Result<Vec<Delivery>, ServerError> {
    c.query(
        "SELECT batch_id, id, key, payload #>> '{}', attempts, enqueued_at \
           FROM lease_queue.ack_and_receive($1, $2, $3, $4, $5, $6)",
        &[&q, &p, &owner, &epoch, &batch, &max],
    )
    .await
    .map(|rows| rows.iter().map(super::delivery_of).collect())
    .map_err(server_error)
}

/// The positions (`seq`) of messages `ids`, in that order, as the superuser reads them.
async fn positions(su: &Client, ids: &[i64]) -> Vec<i64> {
    let mut out = Vec::new();
    for id in ids {
        out.push(
            su.query_one("SELECT seq FROM lease_queue.messages WHERE id = $1", &[id])
                .await
                .unwrap()
                .get(0),
        );
    }
    out
}

#[tokio::test]
async fn a_commit_in_send_order_and_a_delivery_write_no_message_or_key_row_and_an_ack_only_deletes()
{
    let f = Fixture::new("hot_path_row_writes", 1, 10).await;
    let su = &f.su;
    // A batch of keyed and unkeyed messages, its commit order settled at once (the trigger fires
    // at the end of the statement under IMMEDIATE), counted in this transaction.
    su.batch_execute("BEGIN; SET CONSTRAINTS lease_queue.commit_order IMMEDIATE")
        .await
        .unwrap();
    let (messages, keys) = (
        Writes::from_now(su, "lease_queue.messages").await,
        Writes::from_now(su, "lease_queue.keys").await,
    );
    su.execute(
        "SELECT lease_queue.send_batch($1, ARRAY['a', 'b', 'a', NULL, 'c'],
                ARRAY['\"a1\"', '\"b1\"', '\"a2\"', '\"u1\"', '\"c1\"']::jsonb[])",
        &[&f.q],
    )
    .await
    .unwrap();
    assert_eq!(
        messages.since(su).await,
        (5, 0, 0),
        "a commit in send order inserts the messages and rewrites none"
    );
    assert_eq!(keys.since(su).await, (3, 0, 0), "a key row per new key");
    su.batch_execute("COMMIT").await.unwrap();

    let e = f.claim(0, "w").await;
    su.batch_execute("BEGIN").await.unwrap();
    let (messages, keys) = (
        Writes::from_now(su, "lease_queue.messages").await,
        Writes::from_now(su, "lease_queue.keys").await,
    );
    let batch = super::receive(su, &f.q, 0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["a1", "a2", "b1", "c1", "u1"]);
    assert!(batch.iter().all(|d| d.attempts == 1), "{batch:?}");
    assert_eq!(
        messages.since(su).await,
        (0, 0, 0),
        "a delivery writes no message row"
    );
    assert_eq!(
        keys.since(su).await,
        (0, 0, 0),
        "a delivery writes no key row (0.3.1)"
    );
    su.batch_execute("COMMIT").await.unwrap();

    su.batch_execute("BEGIN").await.unwrap();
    let (messages, keys) = (
        Writes::from_now(su, "lease_queue.messages").await,
        Writes::from_now(su, "lease_queue.keys").await,
    );
    super::ack(su, &f.q, 0, "w", e, batch_id(&batch)).await;
    assert_eq!(
        messages.since(su).await,
        (0, 0, 5),
        "an ack deletes the batch's rows and writes nothing else of them"
    );
    assert_eq!(
        keys.since(su).await,
        (0, 0, 3),
        "the keys the batch emptied go; nothing else of them is written"
    );
    su.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status(&f.app, &f.q).await[0].acked, 5);
}

#[tokio::test]
async fn a_transaction_that_sent_first_and_commits_last_is_renumbered_after_the_committed_one() {
    let f = Fixture::new("hot_path_renumbered", 1, 10).await;
    let early = f.another_app().await;
    early
        .batch_execute("BEGIN; SET CONSTRAINTS lease_queue.commit_order DEFERRED")
        .await
        .unwrap();
    let messages = Writes::from_now(&early, "lease_queue.messages").await;
    let a = super::send(&early, &f.q, Some("k"), "a", "0").await;
    let a_other = super::send(&early, &f.q, Some("other"), "o", "0").await;
    let b = f.send(Some("k"), "b").await;
    assert!(a < b);
    assert_eq!(
        positions(&f.su, &[b]).await,
        [b],
        "b committed in send order"
    );
    early
        .batch_execute("SET CONSTRAINTS lease_queue.commit_order IMMEDIATE")
        .await
        .unwrap();
    // Of the early transaction's keys, only k saw a later-sent message commit first.
    assert_eq!(
        messages.since(&early).await,
        (2, 1, 0),
        "one message renumbered, the other kept its id"
    );
    early.batch_execute("COMMIT").await.unwrap();
    let (pa, po) = {
        let p = positions(&f.su, &[a, a_other]).await;
        (p[0], p[1])
    };
    assert!(pa > b, "a's position {pa} is after b's {b}");
    assert_eq!(po, a_other, "other kept its id as its position");
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    let k: Vec<&str> = batch
        .iter()
        .filter(|d| d.key.as_deref() == Some("k"))
        .map(|d| d.label.as_str())
        .collect();
    assert_eq!(k, ["b", "a"], "k in commit order");
}

#[tokio::test]
async fn a_transactions_own_uncommitted_messages_are_not_delivered_to_it() {
    let f = Fixture::new("hot_path_own_uncommitted", 1, 10).await;
    f.send(Some("k"), "k1").await;
    let e = f.claim(0, "w").await;
    let c = &f.app;
    c.batch_execute("BEGIN").await.unwrap();
    super::send(c, &f.q, Some("k"), "k2", "0").await;
    super::send(c, &f.q, Some("j"), "j1", "0").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["k1"], "only what had committed");
    super::ack(c, &f.q, 0, "w", e, batch_id(&batch)).await;
    assert!(f.receive(0, "w", e, 10).await.is_empty());
    c.batch_execute("COMMIT").await.unwrap();
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["k2", "j1"], "delivered once committed");
}

#[tokio::test]
async fn ack_and_receive_acks_then_returns_the_next_batch_and_a_repeat_returns_it_again() {
    let f = Fixture::new("hot_path_ack_and_receive", 1, 10).await;
    for l in ["k1", "k2", "k3"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let first = try_ack_and_receive(&f.app, &f.q, 0, "w", e, None, 2)
        .await
        .unwrap();
    assert_eq!(labels(&first), ["k1", "k2"], "NULL acks nothing: a receive");
    let next = try_ack_and_receive(&f.app, &f.q, 0, "w", e, Some(batch_id(&first)), 2)
        .await
        .unwrap();
    assert_eq!(labels(&next), ["k3"]);
    assert_eq!(status(&f.app, &f.q).await[0].acked, 2);
    // The answer was lost: the same call acks nothing more and returns the batch it opened.
    let again = try_ack_and_receive(&f.app, &f.q, 0, "w", e, Some(batch_id(&first)), 2)
        .await
        .unwrap();
    assert_eq!(again, next);
    assert_eq!(status(&f.app, &f.q).await[0].acked, 2);
    let last = try_ack_and_receive(&f.app, &f.q, 0, "w", e, Some(batch_id(&next)), 2)
        .await
        .unwrap();
    assert!(last.is_empty(), "nothing left: no batch opened");
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.batch_id, s.acked), (None, 3));
}

#[tokio::test]
async fn ack_and_receive_refused_by_the_fence_or_for_another_batch_changes_nothing() {
    let f = Fixture::new("hot_path_ack_and_receive_refused", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 1).await;
    let before = f.snapshot().await;
    let cases: [(&str, i64, Option<i64>, &str); 3] = [
        (
            "not the open batch",
            e,
            Some(batch_id(&batch) + 1000),
            "LQ002",
        ),
        (
            "another owner's epoch",
            e + 1,
            Some(batch_id(&batch)),
            "LE003",
        ),
        ("max out of range", e, Some(batch_id(&batch)), "22023"),
    ];
    for (what, epoch, b, expected) in cases {
        let max = if expected == "22023" { 0 } else { 10 };
        let got = code(try_ack_and_receive(&f.app, &f.q, 0, "w", epoch, b, max).await);
        assert_eq!(got, expected, "{what}");
        assert_eq!(f.snapshot().await, before, "{what}: nothing changed");
    }
    assert_eq!(
        code(try_ack_and_receive(&f.app, &f.q, 0, "other", e, Some(batch_id(&batch)), 10).await),
        "LE001"
    );
    assert_eq!(f.snapshot().await, before);
    lapse_partition(&f, 0, "w", e).await;
    let lapsed = f.snapshot().await;
    assert_eq!(
        code(try_ack_and_receive(&f.app, &f.q, 0, "w", e, Some(batch_id(&batch)), 10).await),
        "LE002"
    );
    assert_eq!(f.snapshot().await, lapsed);
}

#[tokio::test]
async fn an_heir_gets_the_batch_again_with_its_attempt_counted_when_the_delivery_ended() {
    let f = Fixture::new("hot_path_heir_attempts", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert!(batch.iter().all(|d| d.attempts == 1));
    lapse_partition(&f, 0, "w", e).await;
    let heir = f.claim(0, "h").await;
    let again = f.receive(0, "h", heir, 10).await;
    assert_eq!(batch_id(&again), batch_id(&batch));
    assert_eq!(labels(&again), ["k1", "k2"]);
    assert!(again.iter().all(|d| d.attempts == 2), "{again:?}");
    // The row counts the delivery that ended, and records it as the last.
    for d in &again {
        let r =
            f.su.query_one(
                "SELECT attempts, epoch, last_batch_id FROM lease_queue.messages WHERE id = $1",
                &[&d.id],
            )
            .await
            .unwrap();
        let got: (i32, i64, i64) = (r.get(0), r.get(1), r.get(2));
        assert_eq!(got, (1, e, batch_id(&batch)));
    }
}

/// The commit trigger looks up each key's lowest position of the transaction by queue and key:
/// the same key in two queues, and keys that contain spaces, are told apart. Only the key of the
/// queue where a later-sent message committed first is renumbered.
#[tokio::test]
async fn the_commit_order_of_a_key_is_settled_per_queue_and_key_whatever_the_keys_characters() {
    let f = Fixture::new("hot_path_per_queue_key", 1, 10).await;
    let g = Fixture::new("hot_path_per_queue_key_2", 1, 10).await;
    let keys = [
        (&f.q, "k"),
        (&g.q, "k"),
        (&f.q, "k k"),
        (&f.q, "1 k"),
        (&g.q, "k k"),
    ];
    // Every key has a message already: each commit below updates an existing key row.
    for (q, key) in keys {
        super::send(&f.app, q, Some(key), &format!("first {key}"), "0").await;
    }
    let early = f.another_app().await;
    early.batch_execute("BEGIN").await.unwrap();
    let mut sent = Vec::new();
    for (q, key) in keys {
        sent.push(super::send(&early, q, Some(key), &format!("early {key}"), "0").await);
    }
    // Committed first, sent later: key "k k" of the first queue only.
    let later = f.send(Some("k k"), "later k k").await;
    early.batch_execute("COMMIT").await.unwrap();
    let p = positions(&f.su, &sent).await;
    assert_eq!(
        [p[0], p[1], p[3], p[4]],
        [sent[0], sent[1], sent[3], sent[4]],
        "the keys nothing overtook keep their ids as positions"
    );
    assert!(
        p[2] > later,
        "'k k' of the first queue renumbered after the later commit"
    );

    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    let kk: Vec<&str> = batch
        .iter()
        .filter(|d| d.key.as_deref() == Some("k k"))
        .map(|d| d.label.as_str())
        .collect();
    assert_eq!(kk, ["first k k", "later k k", "early k k"], "commit order");
    let e = g.claim(0, "w").await;
    assert_eq!(
        labels(&g.receive(0, "w", e, 10).await),
        ["first k", "early k", "first k k", "early k k"],
        "the second queue's keys, in send order"
    );
}

/// ack_and_receive writes the partition's row once, whether it opens the next batch or only closes
/// the one acked (0.3.1; it wrote it twice).
#[tokio::test]
async fn ack_and_receive_writes_the_partition_row_once_whether_or_not_a_batch_opens() {
    let f = Fixture::new("hot_path_partition_row_once", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let su = &f.su;
    let mut batch = super::receive(su, &f.q, 0, "w", e, 1).await;
    for (expected, what) in [
        (&["k2"][..], "acks k1 and opens k2"),
        (&[][..], "acks k2 and only closes"),
    ] {
        su.batch_execute("BEGIN").await.unwrap();
        let partitions = Writes::from_now(su, "lease_queue.partitions").await;
        let next = try_ack_and_receive(su, &f.q, 0, "w", e, Some(batch_id(&batch)), 1)
            .await
            .unwrap();
        assert_eq!(labels(&next), expected, "{what}");
        assert_eq!(
            partitions.since(su).await,
            (0, 1, 0),
            "{what}: one update of the partition's row"
        );
        su.batch_execute("COMMIT").await.unwrap();
        batch = next;
    }
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.batch_id, s.acked, s.backlog), (None, 2, 0));
}
