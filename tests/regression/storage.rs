//! Storage: renewals are HOT updates (no index churn, no bloat from heartbeats).

use std::time::{Duration, Instant};

use pglease_tests::{SHARED_DB, key, server};

use crate::grant;

#[tokio::test]
async fn only_the_key_is_indexed_and_the_table_leaves_room_for_updates() {
    let c = server().connect_super(SHARED_DB).await;
    let row = c
        .query_one(
            "SELECT (SELECT array_agg(indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'lease.leases'::regclass),
                    (SELECT reloptions FROM pg_class WHERE oid = 'lease.leases'::regclass)",
            &[],
        )
        .await
        .unwrap();
    let (indexes, options): (Vec<String>, Vec<String>) = (row.get(0), row.get(1));
    assert_eq!(indexes, vec!["lease.leases_pkey".to_string()]);
    assert_eq!(options, vec!["fillfactor=70".to_string()]);
}

#[tokio::test]
async fn renewals_are_hot_updates() {
    let s = server();
    let db = s.fresh_db_with_extension("hot");
    let c = s.connect_super(&db).await;
    let k = key("hot", "k");
    grant(&c, &k, "w", "1 hour").await;
    let renewals = 500_i64;
    for _ in 0..renewals {
        c.execute("SELECT lease.renew($1, 'w', 1, interval '1 hour')", &[&k])
            .await
            .unwrap();
    }
    // Statistics reach the shared view asynchronously; wait for the counts to arrive, then judge.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (updates, hot) = loop {
        let _ = c.batch_execute("SELECT pg_stat_force_next_flush()").await; // PostgreSQL 15+
        c.batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        let row = c
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'lease.leases'::regclass",
                &[],
            )
            .await
            .unwrap();
        let (updates, hot): (i64, i64) = (row.get(0), row.get(1));
        if updates >= renewals || Instant::now() > deadline {
            break (updates, hot);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        updates >= renewals,
        "statistics never arrived: {updates} updates"
    );
    assert!(
        hot * 100 >= updates * 95,
        "only {hot} of {updates} renewals were HOT"
    );
}
