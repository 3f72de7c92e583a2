//! Regression suite: every row of the pg_lease SQL API against a real PostgreSQL server.
//!
//! Each module covers one part of the contract in docs/SEMANTICS.md; test names state the
//! property. Calls go through SQL (as an application would), as the non-superuser role `app`;
//! assertions compare values, booleans computed by the server, and SQLSTATEs — never message text.

mod acquire;
mod blocking;
mod docs;
mod extension;
mod fence;
mod installer;
mod invalid_input;
mod list;
mod privileges;
mod purge;
mod release;
mod renew;
mod storage;
mod transactions;
mod upgrade;
mod waiters;

use std::time::SystemTime;

pub use pglease_tests::calls::{Inspected, inspect, release, renew};

use tokio_postgres::Client;

/// The outcome of `lease.acquire`: (acquired, epoch, expires_at).
pub type Acquired = (bool, Option<i64>, Option<SystemTime>);

/// `SELECT * FROM lease.acquire(key, owner, ttl, wait)` with intervals given as SQL literals.
pub async fn acquire(c: &Client, key: &str, owner: &str, ttl: &str, wait: &str) -> Acquired {
    let row = c
        .query_one(
            "SELECT acquired, epoch, expires_at FROM lease.acquire($1, $2, $3::text::interval, $4::text::interval)",
            &[&key, &owner, &ttl, &wait],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.acquire({key}, {owner}, {ttl}, {wait}): {e}"));
    (row.get(0), row.get(1), row.get(2))
}

/// Acquire that must be granted; returns the epoch.
pub async fn grant(c: &Client, key: &str, owner: &str, ttl: &str) -> i64 {
    let (acquired, epoch, _) = acquire(c, key, owner, ttl, "0").await;
    assert!(acquired, "{owner} should have been granted {key}");
    epoch.expect("a grant carries an epoch")
}

/// Makes `key`, held by `owner` at epoch 1 with a short ttl, lapse; returns once the server's clock
/// is past its expiry (observed by the server itself via `inspect`, not assumed from a sleep).
pub async fn lapse(c: &Client, key: &str, owner: &str) -> i64 {
    let epoch = grant(c, key, owner, "50 milliseconds").await;
    wait_until_not_held(c, key).await;
    epoch
}

/// Waits until the server reports `key` as not held (its expiry passed on the server clock).
pub async fn wait_until_not_held(c: &Client, key: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let held: bool = c
            .query_one(
                "SELECT coalesce((SELECT held FROM lease.inspect($1)), false)",
                &[&key],
            )
            .await
            .expect("inspect")
            .get(0);
        if !held {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{key} never lapsed");
        // Sleep until the server would have it lapsed; the loop re-checks on the server clock.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
