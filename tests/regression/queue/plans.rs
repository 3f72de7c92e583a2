//! A session keeps the plans of the statements inside the queue's functions; a generic plan is made
//! once, from the tables' size at that moment. Plans made while the tables were nearly empty must
//! still find their rows through the right index once the tables have grown (no ANALYZE in
//! between): a plan that read `lease_queue.messages` or `lease_queue.keys` whole, by a sequential
//! scan or along an index, would make every call cost the size of the queue. (0.3.0's commit
//! trigger, and 0.3.1's generic plans before they were made without sequential scans, scanned the
//! whole messages table at every commit.)

use pglease_tests::server;
use tokio_postgres::Client;

use super::hot_path::try_ack_and_receive;
use super::{batch_id, claim, create_queue, nack, receive, send, send_batch, try_release};

/// Rows of lease_queue.messages and lease_queue.keys read so far in this transaction, by
/// sequential scans and through indexes (with, since PostgreSQL 15, the backend's earlier
/// transactions not yet reported: only differences within one transaction are used).
async fn rows_read(c: &Client) -> i64 {
    c.query_one(
        "SELECT COALESCE(sum(seq_tup_read + idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables
          WHERE relid IN ('lease_queue.messages'::regclass, 'lease_queue.keys'::regclass)",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// A transaction in which the commit trigger fires at the end of each statement (so that its
/// statements are counted too), and the rows read from its start.
struct Counted<'a> {
    c: &'a Client,
    at_start: i64,
}

impl<'a> Counted<'a> {
    async fn begin(c: &'a Client) -> Counted<'a> {
        c.batch_execute("BEGIN; SET CONSTRAINTS lease_queue.commit_order IMMEDIATE")
            .await
            .unwrap();
        let at_start = rows_read(c).await;
        Counted { c, at_start }
    }

    /// Commits; the call must have read at most `bound` rows of messages and keys (the rows it
    /// works on, and its key's few; the tables hold 20 000).
    async fn commit(self, what: &str, bound: i64) {
        let read = rows_read(self.c).await - self.at_start;
        self.c.batch_execute("COMMIT").await.unwrap();
        assert!(
            read <= bound,
            "{what}: {read} rows of messages and keys read (at most {bound} expected)"
        );
    }
}

/// 20 000 messages over 64 keys, a tenth unkeyed, sent to queue `q` in one call.
const GROW: &str = "SELECT count(*) FROM lease_queue.send_batch('q',
     ARRAY(SELECT CASE WHEN i % 10 <> 0 THEN 'g' || (i % 64) END FROM generate_series(1, 20000) AS i),
     ARRAY(SELECT '1'::jsonb FROM generate_series(1, 20000) AS i))";

/// The tables as a new installation has them: never vacuumed nor analyzed.
#[tokio::test]
async fn plans_made_while_the_tables_were_new_still_read_only_the_rows_they_need() {
    plans_outlive_the_tables_size("queue_plans_new", false).await;
}

/// The tables as a queue drained to empty leaves them once vacuumed (autovacuum does it): no rows
/// counted, indexes of the former size. The state every queue passes through between bursts.
#[tokio::test]
async fn plans_made_after_a_drained_queue_was_vacuumed_still_read_only_the_rows_they_need() {
    plans_outlive_the_tables_size("queue_plans_drained", true).await;
}

async fn plans_outlive_the_tables_size(label: &str, drained: bool) {
    let s = server();
    let db = s.fresh_db_with_queue(label);
    // Nothing refreshes the statistics (which would make the sessions plan again).
    s.psql(
        &db,
        "ALTER TABLE lease_queue.messages SET (autovacuum_enabled = false);
         ALTER TABLE lease_queue.keys SET (autovacuum_enabled = false);",
    );
    if drained {
        let c = s.connect_super(&db).await;
        create_queue(&c, "q", 1, 10).await;
        c.execute(GROW, &[]).await.unwrap();
        c.execute("SELECT lease_queue.drop_queue('q')", &[])
            .await
            .unwrap();
        c.batch_execute("VACUUM lease_queue.messages, lease_queue.keys")
            .await
            .unwrap();
    }
    let c = s.connect_super(&db).await;
    create_queue(&c, "q", 1, 10).await;
    let mut e = claim(&c, "q", 0, "w", "1 hour").await.epoch.unwrap();

    // Every call of the hot path, more than five times (a statement's plan is generic from its
    // sixth execution, or its first under force_generic_plan), on nearly empty tables.
    for _ in 0..8 {
        send(&c, "q", Some("k"), "m", "0").await;
        send_batch(&c, "q", &[Some("k"), Some("j"), None], &["a", "b", "c"]).await;
        let batch = receive(&c, "q", 0, "w", e, 2).await;
        nack(
            &c,
            ("q", 0, "w", e, batch_id(&batch)),
            batch[0].id,
            "0",
            None,
        )
        .await;
        let next = try_ack_and_receive(&c, "q", 0, "w", e, Some(batch_id(&batch)), 2)
            .await
            .unwrap();
        let _ = try_ack_and_receive(&c, "q", 0, "w", e, Some(batch_id(&next)), 2)
            .await
            .unwrap();
        c.execute("SELECT lease_queue.next_due('q', 0)", &[])
            .await
            .unwrap();
        try_release(&c, "q", 0, "w", e, true).await.unwrap();
        e = claim(&c, "q", 0, "w", "1 hour").await.epoch.unwrap();
    }

    // The tables grow, from another session.
    s.connect_super(&db).await.execute(GROW, &[]).await.unwrap();

    // The same calls in the first session, each in a transaction of its own.
    let t = Counted::begin(&c).await;
    send(&c, "q", Some("k"), "m", "0").await;
    t.commit("send and its commit", 100).await;

    let t = Counted::begin(&c).await;
    send_batch(&c, "q", &[Some("k"), Some("g1"), None], &["a", "b", "c"]).await;
    t.commit("send_batch and its commit", 100).await;

    let t = Counted::begin(&c).await;
    let batch = receive(&c, "q", 0, "w", e, 2).await;
    t.commit("receive", 100).await;
    assert_eq!(batch.len(), 2);

    let t = Counted::begin(&c).await;
    nack(
        &c,
        ("q", 0, "w", e, batch_id(&batch)),
        batch[0].id,
        "0",
        None,
    )
    .await;
    t.commit("nack", 100).await;

    let t = Counted::begin(&c).await;
    let next = try_ack_and_receive(&c, "q", 0, "w", e, Some(batch_id(&batch)), 2)
        .await
        .unwrap();
    t.commit("ack_and_receive", 100).await;
    assert_eq!(next.len(), 2);

    let t = Counted::begin(&c).await;
    c.execute("SELECT lease_queue.next_due('q', 0)", &[])
        .await
        .unwrap();
    t.commit("next_due", 100).await;

    let t = Counted::begin(&c).await;
    super::ack(&c, "q", 0, "w", e, batch_id(&next)).await;
    t.commit("ack", 100).await;

    let t = Counted::begin(&c).await;
    let _ = receive(&c, "q", 0, "w", e, 2).await;
    try_release(&c, "q", 0, "w", e, true).await.unwrap();
    t.commit("release of an open batch", 100).await;
}
