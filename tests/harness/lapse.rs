//! Waiting for a lease to lapse by the server's clock: every wait here polls the server (which
//! reads its own clock anew in each statement) and never assumes that time passed because the test
//! slept.

use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Client;

use crate::calls::{grant, inspect};

/// How long a lapse may take to be observed before the test fails (generous: the machine is shared).
const LIMIT: Duration = Duration::from_secs(30);

/// Polls `inspect` until the server reports `key` as not held: its expiry passed on the server
/// clock. Works inside an open transaction too (each statement reads the clock anew).
pub async fn await_lapsed(c: &Client, key: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        if !inspect(c, key).await.is_some_and(|(held, ..)| held) {
            return;
        }
        assert!(Instant::now() < deadline, "{key} never lapsed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Grants `key` to `owner` with a short ttl and waits until it has lapsed; returns its epoch.
pub async fn lapse(c: &Client, key: &str, owner: &str) -> i64 {
    let epoch = grant(c, key, owner, "50 milliseconds").await;
    await_lapsed(c, key).await;
    epoch
}

/// Whether the server clock has reached `t`.
pub async fn server_clock_reached(c: &Client, t: SystemTime) -> bool {
    c.query_one("SELECT clock_timestamp() >= $1", &[&t])
        .await
        .expect("read the server clock")
        .get(0)
}
