//! The client's pooled connections and the calls it makes on them: [`Connections`] (the pool, how
//! statements are sent on it, and the client's shutdown), the acquire and renew that also report
//! the time left (for the validity deadline), and the release of the keepalive and the handle.
//!
//! Outside pooler mode the client prepares each statement once per pooled connection (the pool's
//! statement cache); in pooler mode it sends unnamed statements, which work through a
//! transaction-mode pooler. The public calls (`calls.rs`) always send unnamed statements.

use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object, Pool};
use tokio::time::{Instant, timeout_at};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};
use tokio_util::sync::CancellationToken;

use crate::calls::{ACQUIRE_SLOT, RELEASE, RENEW_MANY, micros};
use crate::error::{Error, Result};
use crate::results::{Renewal, SlotGrant, Status};
use crate::rows::{self, TimedGrant, one_row};

/// As ACQUIRE, plus the time left until the returned expiry, read on the server clock *after* the
/// call ran (so it never overstates what is left).
const ACQUIRE_TIMED: &str = "SELECT a.acquired, a.epoch, a.expires_at, \
     floor(extract(epoch FROM a.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.acquire($1, $2, $3::bigint * interval '1 microsecond', interval '0', $4) AS a";
/// As RENEW, plus the time left (see ACQUIRE_TIMED).
const RENEW_TIMED: &str = "SELECT r.status, r.expires_at, \
     floor(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.renew($1, $2, $3, $4::bigint * interval '1 microsecond', $5) AS r";

/// How the pooled connections of a [`Client`](crate::Client) send the library's statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statements {
    /// Unnamed statements, parsed and planned by the server on every call: they work through a
    /// transaction-mode pooler ([pooler mode](crate::ClientBuilder::pooler_mode)).
    Unnamed,
    /// Prepared once per connection (the pool's statement cache), then executed by name: saves the
    /// parse and plan of every call.
    Prepared,
}

/// A client's connection pool, how its connections send statements, and the client's shutdown:
/// after shutdown, [`Connections::get`] fails with [`Error::is_closed`]. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connections {
    pool: Pool,
    statements: Statements,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("statements", &self.statements)
            .field("closed", &self.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Connections {
    pub(crate) fn new(pool: Pool, statements: Statements, shutdown: CancellationToken) -> Self {
        Connections {
            pool,
            statements,
            shutdown,
        }
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// How these connections send the library's statements.
    pub(crate) fn statements(&self) -> Statements {
        self.statements
    }

    /// `Ok` until the client shuts down, then [`Error::closed`].
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::closed())
        } else {
            Ok(())
        }
    }

    /// A pooled connection, unless the client has shut down.
    pub(crate) async fn get(&self) -> Result<Object> {
        self.check_open()?;
        self.pool.get().await.map_err(Error::pool)
    }

    /// A pooled connection, or an error if none could be had by `deadline`. Works after shutdown
    /// too (until the pool closes), for the releases that shutdown makes.
    pub(crate) async fn checkout(&self, deadline: Instant) -> Result<Object> {
        match timeout_at(deadline, self.pool.get()).await {
            Ok(result) => result.map_err(Error::pool),
            Err(_) => Err(Error::connection("no connection in time")),
        }
    }
}

/// Takes a connection out of the pool and closes it (it may be hung or broken).
pub(crate) fn discard(conn: Object) {
    drop(Object::take(conn));
}

/// Runs one of the library's statements on a pooled connection, as `how` says.
async fn query(
    conn: &ClientWrapper,
    how: Statements,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>> {
    match how {
        Statements::Unnamed => Ok(conn.query_typed(sql, params).await?),
        Statements::Prepared => {
            let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
            let statement = conn.prepare_typed_cached(sql, &types).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            Ok(conn.query(&statement, &values).await?)
        }
    }
}

/// [`crate::release`] on a pooled connection.
pub(crate) async fn release(
    conn: &ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<Status> {
    const CALL: &str = "lease.release";
    let rows = query(
        conn,
        how,
        RELEASE,
        &[
            (&key, Type::TEXT),
            (&owner, Type::TEXT),
            (&epoch, Type::INT8),
        ],
    )
    .await?;
    rows::status(&one_row(rows, CALL)?, CALL)
}

/// [`crate::acquire`] without waiting, with `data` (`None`: none), also reporting the time left on
/// the grant (for a fresh grant about `ttl`; for a grant the owner already held, what is left of
/// it).
pub(crate) async fn acquire_timed(
    conn: &ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    ttl: Duration,
    data: Option<&str>,
) -> Result<Option<TimedGrant>> {
    const CALL: &str = "lease.acquire";
    let ttl = micros(ttl);
    let rows = query(
        conn,
        how,
        ACQUIRE_TIMED,
        &[
            (&key, Type::TEXT),
            (&owner, Type::TEXT),
            (&ttl, Type::INT8),
            (&data, Type::TEXT),
        ],
    )
    .await?;
    rows::timed_grant(&one_row(rows, CALL)?, CALL)
}

/// [`crate::renew`], replacing the data with `data` (`None` keeps it), also reporting the time left
/// on the renewed lease (`None` unless `ok`).
pub(crate) async fn renew_timed(
    conn: &ClientWrapper,
    how: Statements,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: Duration,
    data: Option<&str>,
) -> Result<(Renewal, Option<Duration>)> {
    const CALL: &str = "lease.renew";
    let ttl = micros(ttl);
    let rows = query(
        conn,
        how,
        RENEW_TIMED,
        &[
            (&key, Type::TEXT),
            (&owner, Type::TEXT),
            (&epoch, Type::INT8),
            (&ttl, Type::INT8),
            (&data, Type::TEXT),
        ],
    )
    .await?;
    rows::timed_renewal(&one_row(rows, CALL)?, CALL)
}

/// [`crate::acquire_slot`] on a pooled connection, also reporting the time left on the grant.
pub(crate) async fn acquire_slot_timed(
    conn: &ClientWrapper,
    how: Statements,
    semaphore: &str,
    owner: &str,
    ttl: Duration,
    max_holders: u32,
    data: Option<&str>,
) -> Result<Option<(SlotGrant, Duration)>> {
    const CALL: &str = "lease.acquire_slot";
    let ttl = micros(ttl);
    let max = i32::try_from(max_holders).unwrap_or(i32::MAX);
    let rows = query(
        conn,
        how,
        ACQUIRE_SLOT,
        &[
            (&semaphore, Type::TEXT),
            (&owner, Type::TEXT),
            (&ttl, Type::INT8),
            (&max, Type::INT4),
            (&data, Type::TEXT),
        ],
    )
    .await?;
    rows::timed_slot_grant(&one_row(rows, CALL)?, CALL)
}

pub(crate) use crate::rows::TimedKeyRenewal;

/// [`crate::renew_many`] on a pooled connection, also reporting the time left on each renewed
/// lease.
pub(crate) async fn renew_many_timed(
    conn: &ClientWrapper,
    how: Statements,
    owner: &str,
    keys: &[&str],
    epochs: &[i64],
    ttl: Duration,
) -> Result<Vec<TimedKeyRenewal>> {
    const CALL: &str = "lease.renew_many";
    let ttl = micros(ttl);
    let rows = query(
        conn,
        how,
        RENEW_MANY,
        &[
            (&owner, Type::TEXT),
            (&keys, Type::TEXT_ARRAY),
            (&epochs, Type::INT8_ARRAY),
            (&ttl, Type::INT8),
        ],
    )
    .await?;
    rows.iter()
        .map(|row| rows::timed_key_renewal(row, CALL))
        .collect()
}
