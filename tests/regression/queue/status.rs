//! status: the operator's view of each partition, its cost (through indexes, never a read of every
//! message row), and the partitions' acked counters.

use std::time::SystemTime;

use pglease_tests::calls::inspect;
use pglease_tests::{ADMIN, APP, server};

use super::{
    Fixture, LONG, Status, batch_id, claim, key_in, labels, lapse_partition, nack, send, status,
    try_release,
};

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

/// What status must report for each partition of `q`, computed by the superuser from the tables
/// with plain queries: (partition, batch_size, backlog, oldest_enqueued_at, held_back_keys,
/// dead_letters). oldest_enqueued_at as documented: the earlier enqueued of the keyed message first
/// in commit order (lowest position) and the unkeyed message sent first (lowest id).
type Expected = (i32, i64, i64, Option<SystemTime>, i64, i64);

async fn expected(su: &tokio_postgres::Client, q: &str) -> Vec<Expected> {
    su.query(
        "SELECT p.partition,
                (SELECT count(*) FROM lease_queue.messages AS m WHERE m.id = ANY (p.batch_ids)),
                (SELECT count(*) FROM lease_queue.messages AS m
                  WHERE m.qid = p.qid AND m.partition = p.partition
                    AND m.id <> ALL (COALESCE(p.batch_ids, '{}'))),
                LEAST((SELECT m.enqueued_at FROM lease_queue.messages AS m
                        WHERE m.qid = p.qid AND m.partition = p.partition AND m.key IS NOT NULL
                        ORDER BY m.seq, m.key LIMIT 1),
                      (SELECT m.enqueued_at FROM lease_queue.messages AS m
                        WHERE m.qid = p.qid AND m.partition = p.partition AND m.key IS NULL
                        ORDER BY m.id LIMIT 1)),
                (SELECT count(DISTINCT m.key) FROM lease_queue.messages AS m
                  WHERE m.qid = p.qid AND m.partition = p.partition AND m.retry
                    AND m.id <> ALL (COALESCE(p.batch_ids, '{}'))),
                (SELECT count(*) FROM lease_queue.dead_letters AS d
                  WHERE d.qid = p.qid AND d.partition = p.partition)
           FROM lease_queue.partitions AS p JOIN lease_queue.queues AS q ON q.qid = p.qid
          WHERE q.name = $1
          ORDER BY p.partition",
        &[&q],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

/// The columns of `rows` that [`expected`] computes, and the acked counters.
fn observed(rows: &[Status]) -> (Vec<Expected>, Vec<i64>) {
    (
        rows.iter()
            .map(|s| {
                (
                    s.partition,
                    s.batch_size,
                    s.backlog,
                    s.oldest_enqueued_at,
                    s.held_back_keys,
                    s.dead_letters,
                )
            })
            .collect(),
        rows.iter().map(|s| s.acked).collect(),
    )
}

/// The earliest enqueued_at of the pending messages of each partition of `q` (what
/// oldest_enqueued_at meant before 0.2.0).
async fn earliest_enqueued(su: &tokio_postgres::Client, q: &str) -> Vec<Option<SystemTime>> {
    su.query(
        "SELECT (SELECT min(m.enqueued_at) FROM lease_queue.messages AS m
                  WHERE m.qid = p.qid AND m.partition = p.partition)
           FROM lease_queue.partitions AS p JOIN lease_queue.queues AS q ON q.qid = p.qid
          WHERE q.name = $1
          ORDER BY p.partition",
        &[&q],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A small deterministic generator (an LCG), so that a failing sequence can be replayed.
struct Steps(u64);

impl Steps {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// The open batch of partition `p` of `q` as the superuser sees it: (batch_id, batch_epoch) and its
/// messages' ids in batch order.
async fn open_batch(su: &tokio_postgres::Client, q: &str, p: i32) -> Option<(i64, i64, Vec<i64>)> {
    let r = su
        .query_one(
            "SELECT t.batch_id, t.batch_epoch, COALESCE(t.batch_ids, '{}')
               FROM lease_queue.partitions AS t JOIN lease_queue.queues AS q ON q.qid = t.qid
              WHERE q.name = $1 AND t.partition = $2",
            &[&q, &p],
        )
        .await
        .unwrap();
    let batch: Option<i64> = r.get(0);
    batch.map(|b| (b, r.get(1), r.get(2)))
}

#[tokio::test]
async fn status_columns_equal_the_counts_made_from_the_tables_with_every_kind_of_message() {
    let f = Fixture::new("status_equals_independent_counts", 2, 3).await;
    let keys: Vec<String> = (0..6)
        .map(|i| key_in(&format!("k{i}_"), i % 2, 2))
        .collect();
    let mut epochs = [f.claim(0, "w").await, f.claim(1, "w").await];
    let mut acked = [0i64; 2];
    let mut steps = Steps(0x5eed);
    for step in 0..160 {
        let p = i32::try_from(steps.below(2)).unwrap();
        let pi = usize::try_from(p).unwrap();
        let what = steps.below(12);
        match what {
            // Sends: keyed (most), unkeyed, and keyed with a delay (which holds its key back).
            0..=2 => {
                let k = &keys[usize::try_from(steps.below(6)).unwrap()];
                send(&f.app, &f.q, Some(k), &format!("s{step}"), "0").await;
            }
            3 => {
                send(&f.app, &f.q, None, &format!("u{step}"), "0").await;
            }
            4 => {
                let k = &keys[usize::try_from(steps.below(6)).unwrap()];
                send(&f.app, &f.q, Some(k), &format!("d{step}"), "1 hour").await;
            }
            5 | 6 => {
                let max = i32::try_from(1 + steps.below(4)).unwrap();
                f.receive(p, "w", epochs[pi], max).await;
            }
            // A nack (now, or in an hour) of a message of the open batch issued at this epoch.
            7 | 8 => {
                if let Some((b, e, ids)) = open_batch(&f.su, &f.q, p).await
                    && e == epochs[pi]
                    && !ids.is_empty()
                {
                    let id = ids[usize::try_from(steps.below(ids.len() as u64)).unwrap()];
                    let after = if steps.below(2) == 0 { "0" } else { "1 hour" };
                    nack(&f.app, (f.q.as_str(), p, "w", e, b), id, after, None).await;
                }
            }
            // An ack (acked counts what it deletes), then its repeat (which counts nothing).
            9 => {
                if let Some((b, e, ids)) = open_batch(&f.su, &f.q, p).await
                    && e == epochs[pi]
                {
                    f.ack(p, "w", e, b).await;
                    acked[pi] += i64::try_from(ids.len()).unwrap();
                    f.ack(p, "w", e, b).await;
                }
            }
            // A forced release and a new claim: the batch goes back, nothing is acked.
            10 => {
                try_release(&f.app, &f.q, p, "w", epochs[pi], true)
                    .await
                    .unwrap();
                epochs[pi] = f.claim(p, "w").await;
            }
            // A lapse and a new claim: the next receive re-issues the batch (attempts + 1; at
            // max_attempts a message is dead-lettered instead).
            _ => {
                lapse_partition(&f, p, "w", epochs[pi]).await;
                epochs[pi] = f.claim(p, "w").await;
            }
        }
        let rows = status(&f.app, &f.q).await;
        let (got, got_acked) = observed(&rows);
        assert_eq!(got, expected(&f.su, &f.q).await, "step {step} ({what})");
        assert_eq!(got_acked, acked, "step {step} ({what})");
        // One producer, committing each send before the next: commit order is send order, and
        // the documented oldest is the earliest enqueued.
        let oldest: Vec<Option<SystemTime>> = rows.iter().map(|s| s.oldest_enqueued_at).collect();
        assert_eq!(oldest, earliest_enqueued(&f.su, &f.q).await, "step {step}");
    }
    // Whether the random steps above acked on both partitions depends on what each receive
    // found (timing decides which nacked or re-issued messages are due): end with an ack on
    // each partition, of a fresh key's message, so that every run counts acks on both.
    for p in 0..2 {
        let pi = usize::try_from(p).unwrap();
        send(&f.app, &f.q, Some(&key_in("fin_", p, 2)), "fin", "0").await;
        let mut done = false;
        for _ in 0..3 {
            f.receive(p, "w", epochs[pi], 4).await;
            if let Some((b, e, ids)) = open_batch(&f.su, &f.q, p).await
                && e == epochs[pi]
                && !ids.is_empty()
            {
                f.ack(p, "w", e, b).await;
                acked[pi] += i64::try_from(ids.len()).unwrap();
                done = true;
                break;
            }
        }
        assert!(
            done,
            "partition {p}: a fresh message was received and acked"
        );
        let rows = status(&f.app, &f.q).await;
        let (got, got_acked) = observed(&rows);
        assert_eq!(got, expected(&f.su, &f.q).await, "final ack on {p}");
        assert_eq!(got_acked, acked, "final ack on {p}");
    }
    // The run went through every kind of message.
    let kinds: (i64, i64, i64, i64) = {
        let r =
            f.su.query_one(
                "SELECT (SELECT count(*) FROM lease_queue.dead_letters AS d WHERE d.qid = q.qid),
                        (SELECT count(*) FROM lease_queue.messages AS m
                          WHERE m.qid = q.qid AND m.key IS NULL),
                        (SELECT count(*) FROM lease_queue.messages AS m
                          WHERE m.qid = q.qid AND m.deliver_at > clock_timestamp()),
                        (SELECT count(*) FROM lease_queue.messages AS m
                          WHERE m.qid = q.qid AND m.retry)
                   FROM lease_queue.queues AS q WHERE q.name = $1",
                &[&f.q],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert!(
        kinds.0 > 0 && kinds.1 > 0 && kinds.2 > 0 && kinds.3 > 0 && acked.iter().all(|a| *a > 0),
        "dead letters, unkeyed, delayed and retrying messages, acks: {kinds:?} {acked:?}"
    );
}

#[tokio::test]
async fn oldest_enqueued_at_is_the_first_pending_message_in_commit_order_not_the_earliest_sent() {
    let f = Fixture::new("status_oldest_is_first_in_commit_order", 1, 10).await;
    let oldest = || async { status(&f.app, &f.q).await[0].oldest_enqueued_at };
    let su = &f.su;
    let enqueued_at = |id: i64| async move {
        su.query_one(
            "SELECT enqueued_at FROM lease_queue.messages WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get::<_, SystemTime>(0)
    };
    assert_eq!(oldest().await, None, "nothing pending");

    // Keyed: a is sent first but committed after b, a message of the same key, so b is first in
    // commit order (a's commit gives it a position after b's) and oldest_enqueued_at is b's, not
    // the earliest enqueued_at (a's).
    let producer = f.another_app().await;
    producer.batch_execute("BEGIN").await.unwrap();
    let a = send(&producer, &f.q, Some("k"), "a1", "0").await;
    let b = send(&f.app, &f.q, Some("k"), "b1", "0").await;
    producer.batch_execute("COMMIT").await.unwrap();
    let (a_at, b_at) = (enqueued_at(a).await, enqueued_at(b).await);
    assert!(a_at < b_at);
    assert_eq!(oldest().await, Some(b_at));
    assert_eq!(earliest_enqueued(&f.su, &f.q).await, [Some(a_at)]);
    // The open batch's messages are pending too.
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["b1", "a1"], "the key's commit order");
    assert_eq!(oldest().await, Some(b_at), "both in the open batch");
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(oldest().await, None);

    // Unkeyed: the first sent (lowest id), which is the earlier of the two candidates when it was
    // enqueued before the first keyed message in commit order.
    producer.batch_execute("BEGIN").await.unwrap();
    let u = send(&producer, &f.q, None, "u", "0").await;
    let c = send(&f.app, &f.q, Some("c"), "c1", "0").await;
    producer.batch_execute("COMMIT").await.unwrap();
    let (u_at, c_at) = (enqueued_at(u).await, enqueued_at(c).await);
    assert!(u_at < c_at);
    assert_eq!(oldest().await, Some(u_at));
    send(&f.app, &f.q, None, "v", "0").await;
    assert_eq!(oldest().await, Some(u_at), "v was sent after u");
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["u", "c1", "v"]);
    assert_eq!(oldest().await, Some(u_at), "u is in the open batch");
    // u fails and awaits its retry outside the batch; c and v are acked.
    let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
    assert_eq!(nack(&f.app, r, u, "1 hour", None).await, "retrying");
    assert_eq!(oldest().await, Some(u_at));
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(oldest().await, Some(u_at), "u is still pending");
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!((s.backlog, s.held_back_keys, s.acked), (1, 0, 4));
}

/// The partition's acked counter as the superuser reads it from the table, and as status reports it.
async fn acked(f: &Fixture) -> (i64, i64) {
    let in_table: i64 =
        f.su.query_one(
            "SELECT p.acked FROM lease_queue.partitions AS p
               JOIN lease_queue.queues AS q ON q.qid = p.qid
              WHERE q.name = $1 AND p.partition = 0",
            &[&f.q],
        )
        .await
        .unwrap()
        .get(0);
    (in_table, status(&f.app, &f.q).await[0].acked)
}

#[tokio::test]
async fn acked_counts_exactly_the_messages_acked_not_repeats_nacks_dead_letters_or_reissues() {
    let f = Fixture::new("acked_counts_exactly_the_acked", 1, 2).await;
    assert_eq!(acked(&f).await, (0, 0));
    for (k, l) in [
        (Some("k"), "k1"),
        (Some("k"), "k2"),
        (Some("k"), "k3"),
        (Some("j"), "j1"),
        (None, "u1"),
    ] {
        f.send(k, l).await;
    }
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["k1", "k2", "k3", "j1", "u1"]);
    // k2 fails: it and k3 leave the batch; k1, j1 and u1 are acked, once, however often the ack
    // is repeated.
    let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
    assert_eq!(nack(&f.app, r, batch[1].id, "0", None).await, "retrying");
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(acked(&f).await, (3, 3));
    f.ack(0, "w", e, batch_id(&batch)).await;
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(acked(&f).await, (3, 3), "a repeated ack counts nothing");

    // k2 fails again and is dead-lettered (max_attempts 2): its batch is acked empty.
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["k2"]);
    let r = (f.q.as_str(), 0, "w", e, batch_id(&batch));
    assert_eq!(
        nack(&f.app, r, batch[0].id, "0", None).await,
        "dead_lettered"
    );
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(acked(&f).await, (3, 3), "a dead letter is not acked");

    // k3 is delivered, re-issued to the next epoch after a lapse, abandoned by a forced release,
    // and dead-lettered when it would be delivered a third time: never acked.
    let batch = f.receive(0, "w", e, 10).await;
    assert_eq!(labels(&batch), ["k3"]);
    lapse_partition(&f, 0, "w", e).await;
    let e = f.claim(0, "w").await;
    let again = f.receive(0, "w", e, 10).await;
    assert_eq!(
        (batch_id(&again), again[0].attempts),
        (batch_id(&batch), 2),
        "re-issued"
    );
    assert_eq!(acked(&f).await, (3, 3), "a re-issue acks nothing");
    assert_eq!(try_release(&f.app, &f.q, 0, "w", e, true).await.unwrap(), 1);
    assert_eq!(acked(&f).await, (3, 3), "an abandoned batch is not acked");
    let e = f.claim(0, "w").await;
    assert!(f.receive(0, "w", e, 10).await.is_empty(), "k3 died");
    assert_eq!(acked(&f).await, (3, 3));

    // The next batch counts again.
    f.send(Some("k"), "k4").await;
    f.send(None, "u2").await;
    let batch = f.receive(0, "w", e, 10).await;
    f.ack(0, "w", e, batch_id(&batch)).await;
    assert_eq!(acked(&f).await, (5, 5));
}

/// Sequential scans of `table` so far in the current transaction.
async fn seq_scans(c: &tokio_postgres::Client, table: &str) -> i64 {
    c.query_one(
        "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = $1::text::regclass",
        &[&table],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn status_reads_the_messages_only_through_indexes_whatever_the_planner_would_prefer() {
    let f = Fixture::new("status_reads_through_indexes", 4, 2).await;
    // Most of the table is this queue's, the case in which a sequential scan looks cheapest.
    f.su.execute(
        "SELECT count(*) FROM lease_queue.send_batch($1,
             ARRAY(SELECT CASE WHEN i % 10 = 0 THEN NULL ELSE 'k' || (i % 50) END
                     FROM generate_series(1, 20000) AS i),
             ARRAY(SELECT to_jsonb(i) FROM generate_series(1, 20000) AS i))",
        &[&f.q],
    )
    .await
    .unwrap();
    let e = f.claim(1, "w").await;
    let batch = f.receive(1, "w", e, 5).await;
    let r = (f.q.as_str(), 1, "w", e, batch_id(&batch));
    nack(&f.app, r, batch[0].id, "1 hour", None).await;
    f.su.batch_execute("ANALYZE lease_queue.messages")
        .await
        .unwrap();
    // (The transaction's counters also hold what earlier transactions of the session did and
    // have not yet reported: compare before and after, inside one transaction.)
    f.su.batch_execute("BEGIN").await.unwrap();
    let tables = ["lease_queue.messages", "lease_queue.dead_letters"];
    let mut before = Vec::new();
    for table in tables {
        before.push(seq_scans(&f.su, table).await);
    }
    let rows = status(&f.su, &f.q).await;
    assert_eq!(
        rows.iter().map(|s| s.backlog + s.batch_size).sum::<i64>(),
        20000
    );
    f.su.query("SELECT * FROM lease_queue.status()", &[])
        .await
        .unwrap();
    for (table, before) in tables.into_iter().zip(before) {
        assert_eq!(seq_scans(&f.su, table).await, before, "{table}");
    }
    f.su.batch_execute("COMMIT").await.unwrap();
}

/// (updates, HOT updates) of `table` so far in the current transaction.
async fn updates(c: &tokio_postgres::Client, table: &str) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
              WHERE relid = $1::text::regclass",
            &[&table],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// messages_held_back (0.2.0) indexes `retry`, which only nack changes: a re-issue, which changes
/// no indexed column of a message, still updates its rows HOT; ack's update of the partition row,
/// which now adds to `acked`, is HOT too.
#[tokio::test]
async fn a_reissue_and_an_ack_still_update_their_rows_hot() {
    let s = server();
    let db = s.fresh_db_with_queue("queue_hot_updates");
    let admin = s.connect_as(&db, ADMIN).await;
    admin
        .batch_execute(&format!(
            "SELECT lease_queue.create_queue('hot', 1, 10);
             SELECT lease_queue.grant_queue('hot', '{APP}', 'produce'),
                    lease_queue.grant_queue('hot', '{APP}', 'consume');
             SELECT lease_queue.send('hot', 'k', to_jsonb(i)) FROM generate_series(1, 3) AS i;"
        ))
        .await
        .unwrap();
    let app = s.connect_as(&db, APP).await;
    let su = s.connect_super(&db).await;
    let e = claim(&app, "hot", 0, "w", LONG).await.epoch.unwrap();
    let batch = super::receive(&app, "hot", 0, "w", e, 10).await;
    assert_eq!(batch.len(), 3);
    let key = "lease_queue:hot:0";
    let (renewed, _) = pglease_tests::calls::renew(&app, key, "w", e, "1 millisecond").await;
    assert_eq!(renewed, "ok");
    pglease_tests::lapse::await_lapsed(&app, key).await;
    let heir = claim(&su, "hot", 0, "h", LONG).await.epoch.unwrap();

    // (The counters also hold earlier transactions' not yet reported: differences within one.)
    su.batch_execute("BEGIN").await.unwrap();
    let (n0, hot0) = updates(&su, "lease_queue.messages").await;
    let again = super::receive(&su, "hot", 0, "h", heir, 10).await;
    assert_eq!(batch_id(&again), batch_id(&batch), "re-issued");
    let (n, hot) = updates(&su, "lease_queue.messages").await;
    assert_eq!((n - n0, hot - hot0), (3, 3));
    su.batch_execute("COMMIT").await.unwrap();

    su.batch_execute("BEGIN").await.unwrap();
    let (n0, hot0) = updates(&su, "lease_queue.partitions").await;
    super::ack(&su, "hot", 0, "h", heir, batch_id(&again)).await;
    let (n, hot) = updates(&su, "lease_queue.partitions").await;
    let (n, hot) = (n - n0, hot - hot0);
    assert!(n >= 1 && hot == n, "partition rows: {n} updates, {hot} HOT");
    su.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status(&app, "hot").await[0].acked, 3);
}
