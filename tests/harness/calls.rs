//! The SQL API called as an application would (through SQL, typed results), for the suites.

use std::time::SystemTime;

use tokio_postgres::Client;

/// `lease.renew`: (status, expires_at).
pub async fn renew(
    c: &Client,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: &str,
) -> (String, Option<SystemTime>) {
    let row = c
        .query_one(
            "SELECT status, expires_at FROM lease.renew($1, $2, $3, $4::text::interval)",
            &[&key, &owner, &epoch, &ttl],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.renew({key}, {owner}, {epoch}, {ttl}): {e}"));
    (row.get(0), row.get(1))
}

/// `lease.release`: status.
pub async fn release(c: &Client, key: &str, owner: &str, epoch: i64) -> String {
    c.query_one(
        "SELECT status FROM lease.release($1, $2, $3)",
        &[&key, &owner, &epoch],
    )
    .await
    .unwrap_or_else(|e| panic!("lease.release({key}, {owner}, {epoch}): {e}"))
    .get(0)
}

/// `lease.inspect` as (held, owner, epoch, expires_at).
pub type Inspected = (bool, Option<String>, i64, Option<SystemTime>);

/// `lease.inspect(key)`; asserts at most one row.
pub async fn inspect(c: &Client, key: &str) -> Option<Inspected> {
    let rows = c
        .query(
            "SELECT held, owner, epoch, expires_at FROM lease.inspect($1)",
            &[&key],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.inspect({key}): {e}"));
    assert!(rows.len() <= 1, "inspect returns at most one row");
    rows.first()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}
