//! Q8: a consumer reads only its partition's rows, through indexes — never a scan of the whole
//! messages or keys table, whatever the backlog of other partitions and queues.

use super::{Fixture, LONG, claim};

/// Sequential and index scans of `table` counted so far and not yet reported: the current
/// transaction's, and (PostgreSQL 15 on) earlier transactions' of the session not yet flushed, which
/// happens only between transactions: compare two readings inside one transaction.
async fn scans(c: &tokio_postgres::Client, table: &str) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_xact_user_tables
              WHERE relid = $1::text::regclass",
            &[&table],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

#[tokio::test]
async fn receive_and_ack_read_the_messages_and_keys_tables_only_through_indexes() {
    let f = Fixture::new("index_reads", 16, 10).await;
    // A backlog spread over every partition: 20 000 messages of 10 000 keys.
    f.su.execute(
        "SELECT count(*) FROM lease_queue.send_batch($1,
             ARRAY(SELECT 'k' || (i % 10000) FROM generate_series(1, 20000) AS i),
             ARRAY(SELECT to_jsonb(i) FROM generate_series(1, 20000) AS i))",
        &[&f.q],
    )
    .await
    .unwrap();
    f.su.batch_execute("ANALYZE lease_queue.messages; ANALYZE lease_queue.keys")
        .await
        .unwrap();
    let grant = claim(&f.su, &f.q, 5, "w", LONG).await;
    let epoch = grant.epoch.unwrap();

    f.su.batch_execute("BEGIN").await.unwrap();
    let mut before = Vec::new();
    for table in ["lease_queue.messages", "lease_queue.keys"] {
        before.push(scans(&f.su, table).await);
    }
    let rows =
        f.su.query(
            "SELECT batch_id FROM lease_queue.receive($1, 5, 'w', $2, 50)",
            &[&f.q, &epoch],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 50);
    let batch: i64 = rows[0].get(0);
    f.su.execute(
        "SELECT lease_queue.ack($1, 5, 'w', $2, $3)",
        &[&f.q, &epoch, &batch],
    )
    .await
    .unwrap();
    for (table, (seq0, idx0)) in ["lease_queue.messages", "lease_queue.keys"]
        .into_iter()
        .zip(before)
    {
        let (seq, idx) = scans(&f.su, table).await;
        let (seq, idx) = (seq - seq0, idx - idx0);
        assert_eq!(seq, 0, "{table}: sequential scans in receive + ack");
        assert!(idx > 0, "{table}: read through its indexes");
    }
    f.su.batch_execute("COMMIT").await.unwrap();
}
