//! The SQL API called as an application would (through SQL, typed results), for the suites.
//!
//! Intervals are given as SQL literals (`'1 hour'`, `'50 milliseconds'`); each call panics with the
//! server's error unless its name says it returns one (`try_acquire`).

use std::time::SystemTime;

use tokio_postgres::Client;

/// The outcome of `lease.acquire`: (acquired, epoch, expires_at).
pub type Acquired = (bool, Option<i64>, Option<SystemTime>);

/// `lease.acquire(key, owner, ttl, wait)`; the server's error, if any.
pub async fn try_acquire(
    c: &Client,
    key: &str,
    owner: &str,
    ttl: &str,
    wait: &str,
) -> Result<Acquired, tokio_postgres::Error> {
    let row = c
        .query_one(
            "SELECT acquired, epoch, expires_at \
               FROM lease.acquire($1, $2, $3::text::interval, $4::text::interval)",
            &[&key, &owner, &ttl, &wait],
        )
        .await?;
    Ok((row.get(0), row.get(1), row.get(2)))
}

/// `lease.acquire(key, owner, ttl, wait)`, which must not fail.
pub async fn acquire(c: &Client, key: &str, owner: &str, ttl: &str, wait: &str) -> Acquired {
    try_acquire(c, key, owner, ttl, wait)
        .await
        .unwrap_or_else(|e| panic!("lease.acquire({key}, {owner}, {ttl}, {wait}): {e}"))
}

/// An acquire without waiting that must be granted; returns (epoch, expires_at).
pub async fn grant_until(c: &Client, key: &str, owner: &str, ttl: &str) -> (i64, SystemTime) {
    match acquire(c, key, owner, ttl, "0").await {
        (true, Some(epoch), Some(expires_at)) => (epoch, expires_at),
        other => panic!("{owner} should have been granted {key}, got {other:?}"),
    }
}

/// An acquire without waiting that must be granted; returns the epoch.
pub async fn grant(c: &Client, key: &str, owner: &str, ttl: &str) -> i64 {
    grant_until(c, key, owner, ttl).await.0
}

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
