//! The statements this crate sends: one per SQL function of `lease_queue` it uses, each sent with
//! explicit parameter types as an unnamed statement (`query_typed`), so that they work the same on
//! a plain connection, in a transaction and through a transaction-mode pooler.
//!
//! Durations are sent as whole microseconds (`$n::bigint * interval '1 microsecond'`), rounded
//! down, at most [`pglease::MAX_DURATION`] (which the server rejects as too long, `22023`).
//! Payloads travel as JSON text (`$n::text::jsonb`, `payload::text`), so no JSON feature of
//! tokio-postgres is needed.

use std::time::Duration;

use tokio_postgres::GenericClient;
use tokio_postgres::types::{ToSql, Type};

use crate::error::{Error, Result};

pub(crate) const SEND: &str = "SELECT lease_queue.send($1, $2, $3::text::jsonb, \
     $4::bigint * interval '1 microsecond')";

pub(crate) const SEND_BATCH: &str = "SELECT s.id FROM lease_queue.send_batch($1, $2, \
     $3::text[]::jsonb[], $4::bigint * interval '1 microsecond') WITH ORDINALITY AS s(id, n) \
     ORDER BY s.n";

/// `claim`, plus the time the server reports left on the grant (for `Client::adopt`).
pub(crate) const CLAIM: &str = "SELECT c.claimed, c.epoch, c.expires_at, \
     floor(extract(epoch FROM c.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease_queue.claim($1, $2, $3, $4::bigint * interval '1 microsecond') AS c";

/// `claim_any`, plus the time left (as CLAIM).
pub(crate) const CLAIM_ANY: &str = "SELECT c.claimed, c.partition, c.epoch, c.expires_at, \
     floor(extract(epoch FROM c.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease_queue.claim_any($1, $2, $3::bigint * interval '1 microsecond') AS c";

pub(crate) const RECEIVE: &str = "SELECT d.batch_id, d.id, d.key, d.payload::text, d.attempts, \
     d.enqueued_at FROM lease_queue.receive($1, $2, $3, $4, $5) AS d";

pub(crate) const ACK: &str = "SELECT lease_queue.ack($1, $2, $3, $4, $5)";

/// `ack` of a batch and the next `receive`, in one statement (pg_lease_queue 0.3.0).
pub(crate) const ACK_AND_RECEIVE: &str = "SELECT d.batch_id, d.id, d.key, d.payload::text, \
     d.attempts, d.enqueued_at FROM lease_queue.ack_and_receive($1, $2, $3, $4, $5, $6) AS d";

pub(crate) const NACK: &str = "SELECT lease_queue.nack($1, $2, $3, $4, $5, $6, \
     $7::bigint * interval '1 microsecond', $8)";

pub(crate) const RELEASE: &str = "SELECT lease_queue.release($1, $2, $3, $4, $5)";

/// How long until the next message outside the open batch is due, in milliseconds (negative: due
/// now); NULL when nothing is pending.
pub(crate) const NEXT_DUE: &str = "SELECT floor(extract(epoch FROM \
     lease_queue.next_due($1, $2) - clock_timestamp()) * 1000)::bigint";

/// Raises `LQ001` if the queue does not exist (partition 0 exists in every queue).
pub(crate) const QUEUE_EXISTS: &str = "SELECT lease_queue.next_due($1, 0)";

pub(crate) const PARTITIONS: &str =
    "SELECT q.partitions FROM lease_queue.list_queues() AS q WHERE q.queue_name = $1";

/// `d` in whole microseconds, at most [`pglease::MAX_DURATION`].
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.min(pglease::MAX_DURATION).as_micros()).unwrap_or(i64::MAX)
}

/// A duration the server reported in microseconds (negative: none).
pub(crate) fn from_micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// Runs `sql` with typed parameters on `db`.
pub(crate) async fn query<C: GenericClient>(
    db: &C,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<tokio_postgres::Row>> {
    Ok(db.query_typed(sql, params).await?)
}

/// The one row a statement must return.
pub(crate) fn one(rows: Vec<tokio_postgres::Row>, call: &str) -> Result<tokio_postgres::Row> {
    let n = rows.len();
    let mut rows = rows.into_iter();
    match (rows.next(), n) {
        (Some(row), 1) => Ok(row),
        _ => Err(Error::protocol(format!(
            "{call} returned {n} rows, expected one"
        ))),
    }
}

/// Column `i` of `row` as `T`, or a protocol error naming `call`.
pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    i: usize,
    call: &str,
) -> Result<T> {
    row.try_get(i)
        .map_err(|e| Error::protocol(format!("{call}: column {i}: {e}")))
}
