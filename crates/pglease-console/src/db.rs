//! What the console reads and does in the database: every read through the public functions of
//! pg_lease and pg_lease_queue (so a role with USAGE on their schemas suffices), each in a
//! read-only transaction bounded by the console's statement timeout; every action through the
//! function that performs it, bounded the same way.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pglease::deadpool_postgres::{Object, Transaction};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::shared::Shared;
use crate::views::{
    DeadLetter, Election, GrantView, LeaseCounts, LeaseDetail, LeasePage, LeaseRow, PartitionRow,
    QueueRow, SemaphoreRow, millis_until,
};

/// Why a read or an action failed, as the API reports it.
#[derive(Debug, Clone)]
pub enum DbError {
    /// The statement timeout passed first (SQLSTATE 57014): the page shows a notice.
    Timeout(Duration),
    /// The role may not do this (42501, or pg_lease's 42501-class refusals): HTTP 403.
    NotPermitted(String),
    /// Invalid input (22023): HTTP 400.
    Invalid(String),
    /// No such queue (LQ001): HTTP 404.
    NoSuchQueue(String),
    /// Not now (55006: e.g. a redrive of a key in the open batch): HTTP 409.
    Conflict(String),
    /// Anything else: connection lost, the server failing (HTTP 502).
    Other(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Timeout(t) => write!(
                f,
                "the database did not answer within the console's statement timeout ({})",
                humantime::format_duration(*t)
            ),
            DbError::NotPermitted(m)
            | DbError::Invalid(m)
            | DbError::NoSuchQueue(m)
            | DbError::Conflict(m)
            | DbError::Other(m) => f.write_str(m),
        }
    }
}

impl DbError {
    fn from_pg(e: tokio_postgres::Error, timeout: Duration) -> DbError {
        match e.as_db_error() {
            Some(db) if *db.code() == SqlState::QUERY_CANCELED => DbError::Timeout(timeout),
            Some(db) if *db.code() == SqlState::INSUFFICIENT_PRIVILEGE => {
                DbError::NotPermitted(db.message().to_owned())
            }
            Some(db) if *db.code() == SqlState::INVALID_PARAMETER_VALUE => {
                DbError::Invalid(match db.detail() {
                    Some(d) => format!("{} ({d})", db.message()),
                    None => db.message().to_owned(),
                })
            }
            Some(db) if *db.code() == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE => {
                DbError::Conflict(db.message().to_owned())
            }
            Some(db) if db.code().code() == "LQ001" => DbError::NoSuchQueue(db.message().into()),
            Some(db) if *db.code() == SqlState::READ_ONLY_SQL_TRANSACTION => {
                DbError::NotPermitted(format!("{} (the server is a standby)", db.message()))
            }
            Some(db) => DbError::Other(format!("{} (SQLSTATE {})", db.message(), db.code().code())),
            None => DbError::Other(e.to_string()),
        }
    }

    fn from_lease(e: pglease::Error, timeout: Duration) -> DbError {
        match e.code() {
            Some("57014") => DbError::Timeout(timeout),
            Some("42501") => DbError::NotPermitted(e.message().to_owned()),
            Some("22023") => DbError::Invalid(match e.detail() {
                Some(d) => format!("{} ({d})", e.message()),
                None => e.message().to_owned(),
            }),
            _ => DbError::Other(e.to_string()),
        }
    }
}

/// The console's access to the database: the client's pool, and the statement timeout of every
/// statement it sends.
#[derive(Clone)]
pub struct Db {
    client: pglease::Client,
    timeout: Duration,
    /// The semaphores view's read (every key) and the queues' (`lease_queue.status`, every
    /// partition's backlog), each shared by the requests that want it at once (shared.rs).
    semaphores: Arc<Shared<u32, Vec<SemaphoreRow>>>,
    queues: Arc<Shared<(), Vec<QueueRow>>>,
}

/// One statement's bound, as `SET LOCAL statement_timeout` spells it (whole milliseconds, at
/// least 1: 0 would mean no bound).
fn timeout_setting(timeout: Duration) -> String {
    format!(
        "SET LOCAL statement_timeout = {}",
        timeout.as_millis().clamp(1, i32::MAX as u128)
    )
}

impl Db {
    pub fn new(client: pglease::Client, timeout: Duration) -> Db {
        Db {
            client,
            timeout,
            semaphores: Arc::default(),
            queues: Arc::default(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn conn(&self) -> Result<Object, DbError> {
        match tokio::time::timeout(self.timeout, self.client.pool().get()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(DbError::Other(format!(
                "no connection to the database: {e}"
            ))),
            Err(_) => Err(DbError::Timeout(self.timeout)),
        }
    }

    /// Runs `f` in a transaction (read-only unless `write`) whose statements are bounded by the
    /// console's statement timeout; the whole call is also bounded on this side (twice the
    /// timeout), should the server not answer at all.
    async fn within<T, F>(&self, write: bool, f: F) -> Result<T, DbError>
    where
        F: AsyncFnOnce(&Transaction<'_>) -> Result<T, DbError>,
    {
        let timeout = self.timeout;
        let work = async {
            let mut conn = self.conn().await?;
            let tx = conn
                .build_transaction()
                .read_only(!write)
                .start()
                .await
                .map_err(|e| DbError::from_pg(e, timeout))?;
            tx.batch_execute(&timeout_setting(timeout))
                .await
                .map_err(|e| DbError::from_pg(e, timeout))?;
            let out = f(&tx).await?;
            tx.commit()
                .await
                .map_err(|e| DbError::from_pg(e, timeout))?;
            Ok(out)
        };
        match tokio::time::timeout(timeout * 2, work).await {
            Ok(out) => out,
            Err(_) => Err(DbError::Timeout(timeout)),
        }
    }

    /// Whether the server is a standby (every action is refused on one).
    pub async fn is_standby(&self) -> Result<bool, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let row = tx
                .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            Ok(row.get(0))
        })
        .await
    }

    /// One page of leases (`lease.browse`) and the counts of every state (`lease.summary`, held
    /// leases lapsing within `expiring_within` counted as expiring).
    pub async fn leases(
        &self,
        q: &pglease::BrowseQuery,
        expiring_within: Duration,
    ) -> Result<LeasePage, DbError> {
        let t = self.timeout;
        let limit = q.get_limit() as usize;
        self.within(false, async |tx| {
            let rows = pglease::browse(&**tx, q)
                .await
                .map_err(|e| DbError::from_lease(e, t))?;
            let counts = pglease::summary(&**tx, expiring_within)
                .await
                .map_err(|e| DbError::from_lease(e, t))?;
            let now = db_now(tx, t).await?;
            let next_after = if rows.len() == limit {
                rows.last().map(|r| r.key.clone())
            } else {
                None
            };
            Ok(LeasePage {
                items: rows
                    .iter()
                    .map(|r| LeaseRow::from_browsed(r, now))
                    .collect(),
                next_after,
                counts: LeaseCounts::new(&counts, expiring_within),
            })
        })
        .await
    }

    /// Counts of leases by state, `expiring` being those held that lapse within `within`.
    pub async fn counts(&self, within: Duration) -> Result<pglease::LeaseCounts, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            pglease::summary(&**tx, within)
                .await
                .map_err(|e| DbError::from_lease(e, t))
        })
        .await
    }

    /// How many grants the history has recorded in this database since its statistics were
    /// reset (the rows inserted into `lease.grant_history`, as the cumulative statistics count
    /// them: a grant rolled back is counted too). Readable by every role.
    pub async fn grants_recorded(&self) -> Result<i64, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let row = tx
                .query_one(
                    "SELECT pg_catalog.pg_stat_get_tuples_inserted(
                            pg_catalog.to_regclass('lease.grant_history'))",
                    &[],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            Ok(row.get::<_, Option<i64>>(0).unwrap_or(0))
        })
        .await
    }

    /// A key's state and its latest grants from the history.
    pub async fn lease(&self, key: &str, grants: u32) -> Result<Option<LeaseDetail>, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let page = pglease::browse(&**tx, &pglease::BrowseQuery::new().prefix(key).limit(1))
                .await
                .map_err(|e| DbError::from_lease(e, t))?;
            let Some(found) = page.into_iter().find(|r| r.key == key) else {
                return Ok(None);
            };
            let history = pglease::history(&**tx, key, &pglease::HistoryQuery::new().limit(grants))
                .await
                .map_err(|e| DbError::from_lease(e, t))?;
            let now = db_now(tx, t).await?;
            Ok(Some(LeaseDetail {
                lease: LeaseRow::from_browsed(&found, now),
                history: history.iter().rev().map(GrantView::from).collect(),
            }))
        })
        .await
    }

    /// Semaphores: the keys `NAME#N` that `lease.slot_key` makes, grouped by NAME. The limit is
    /// not stored in the database (every caller passes its own `max_holders`): a semaphore shows
    /// its holders and the slots that exist (the highest slot ever granted).
    ///
    /// This reads every key (`lease.list`; about 100 ms at 100 000 keys): requests that want it
    /// while a read is in flight take that read's result (shared.rs) instead of scanning again.
    pub async fn semaphores(&self, max: u32) -> Result<Vec<SemaphoreRow>, DbError> {
        self.semaphores
            .read(max, || self.read_semaphores(max))
            .await
    }

    async fn read_semaphores(&self, max: u32) -> Result<Vec<SemaphoreRow>, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let rows = tx
                .query(
                    "SELECT pg_catalog.substring(l.key, '^(.*)#[0-9]+$') AS name,
                            pg_catalog.count(*) FILTER (WHERE l.held) AS holders,
                            pg_catalog.max(pg_catalog.substring(l.key, '#([0-9]+)$')::integer)
                                AS slots,
                            pg_catalog.array_agg(l.owner ORDER BY l.key) FILTER (WHERE l.held)
                                AS owners
                       FROM lease.list(NULL) AS l
                      WHERE l.key ~ '#[0-9]+$'
                      GROUP BY 1
                      ORDER BY 1
                      LIMIT $1",
                    &[&i64::from(max)],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            Ok(rows
                .iter()
                .map(|r| SemaphoreRow {
                    name: r.get(0),
                    holders: r.get::<_, i64>(1) as u64,
                    slots: r.get::<_, i32>(2) as u32,
                    owners: r.get::<_, Option<Vec<String>>>(3).unwrap_or_default(),
                })
                .collect())
        })
        .await
    }

    /// Elections: for each name (exact) or prefix (`name*`) the console was given, the keys
    /// matching it with their leader, its data and since when it leads (the grant's start, from
    /// the history).
    pub async fn elections(&self, names: &[String], max: u32) -> Result<Vec<Election>, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let now = db_now(tx, t).await?;
            let mut out = Vec::new();
            for name in names {
                let (prefix, exact) = match name.strip_suffix('*') {
                    Some(p) => (p, false),
                    None => (name.as_str(), true),
                };
                let q = pglease::BrowseQuery::new().prefix(prefix).limit(max);
                let rows = pglease::browse(&**tx, &q)
                    .await
                    .map_err(|e| DbError::from_lease(e, t))?;
                for r in rows.iter().filter(|r| !exact || r.key == *name) {
                    let since = if r.state == pglease::KeyState::Held {
                        pglease::history(&**tx, &r.key, &pglease::HistoryQuery::new().limit(1))
                            .await
                            .map_err(|e| DbError::from_lease(e, t))?
                            .into_iter()
                            .find(|g| g.epoch == r.epoch)
                            .and_then(|g| g.granted_at)
                    } else {
                        None
                    };
                    out.push(Election::new(r, since, now));
                }
                if exact && !rows.iter().any(|r| r.key == *name) {
                    out.push(Election::unknown(name));
                }
            }
            Ok(out)
        })
        .await
    }

    /// Every queue with its partitions (`lease_queue.status`); none where pg_lease_queue is not
    /// installed.
    ///
    /// `lease_queue.status` counts every partition's backlog (about 115 ms at 1 000 000 messages
    /// with pg_lease_queue 0.2.0): requests that want it while a read is in flight take that
    /// read's result (shared.rs).
    pub async fn queues(&self) -> Result<Vec<QueueRow>, DbError> {
        self.queues.read((), || self.read_queues()).await
    }

    async fn read_queues(&self) -> Result<Vec<QueueRow>, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let installed: bool = tx
                .query_one(
                    "SELECT pg_catalog.to_regprocedure('lease_queue.status(text)') IS NOT NULL",
                    &[],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?
                .get(0);
            if !installed {
                return Ok(Vec::new());
            }
            let queues = tx
                .query(
                    "SELECT queue_name, partitions, max_attempts, notify, created_at
                       FROM lease_queue.list_queues()",
                    &[],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            let parts = tx
                .query(
                    // `acked` came with pg_lease_queue 0.2.0: read by name through a row
                    // value, so that an older queue extension shows no rate, not an error.
                    "SELECT s.queue_name, s.partition, s.owner, s.epoch, s.expires_at, s.batch_id,
                            s.batch_size, s.batch_opened_at, s.backlog, s.oldest_enqueued_at,
                            s.held_back_keys, s.dead_letters,
                            (pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'acked')::bigint
                       FROM lease_queue.status(NULL) AS s",
                    &[],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            // Holders and open batches are shown to roles that may consume the queue.
            let may = tx
                .query(
                    "SELECT queue_name FROM lease_queue.privileges(NULL) WHERE consume",
                    &[],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            let now = db_now(tx, t).await?;
            Ok(queues
                .iter()
                .map(|q| {
                    let name: String = q.get(0);
                    let partitions = parts
                        .iter()
                        .filter(|p| p.get::<_, String>(0) == name)
                        .map(|p| partition_row(p, now))
                        .collect();
                    let visible = may.iter().any(|m| m.get::<_, String>(0) == name);
                    QueueRow::new(name, q.get(1), q.get(2), visible, partitions)
                })
                .collect())
        })
        .await
    }

    /// The oldest `max` dead letters of `queue`; payloads only if `payloads`.
    pub async fn dead_letters(
        &self,
        queue: &str,
        max: i32,
        payloads: bool,
    ) -> Result<Vec<DeadLetter>, DbError> {
        let t = self.timeout;
        self.within(false, async |tx| {
            let rows = tx
                .query(
                    "SELECT id, partition, key, payload, attempts, reason, epoch, enqueued_at,
                            dead_at
                       FROM lease_queue.list_dead_letters($1, $2)",
                    &[&queue, &max],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            Ok(rows
                .iter()
                .map(|r| DeadLetter::from_row(r, payloads))
                .collect())
        })
        .await
    }

    /// Puts the dead letters of `key` (of every key if `None`) back into `queue`; how many.
    pub async fn redrive(&self, queue: &str, key: Option<&str>) -> Result<i64, DbError> {
        let t = self.timeout;
        self.within(true, async |tx| {
            let keys: Vec<Option<String>> = match key {
                Some(k) => vec![Some(k.to_owned())],
                None => tx
                    .query(
                        "SELECT DISTINCT key FROM lease_queue.list_dead_letters($1, 10000)",
                        &[&queue],
                    )
                    .await
                    .map_err(|e| DbError::from_pg(e, t))?
                    .iter()
                    .map(|r| r.get(0))
                    .collect(),
            };
            let mut moved = 0;
            for k in &keys {
                let row = tx
                    .query_one("SELECT lease_queue.redrive($1, $2)", &[&queue, k])
                    .await
                    .map_err(|e| DbError::from_pg(e, t))?;
                moved += row.get::<_, i64>(0);
            }
            Ok(moved)
        })
        .await
    }

    /// Ends whatever grant of the queue partition's lease is held (`lease.force_release`): its
    /// holder is fenced from then on; the epoch that was ended, if it was held.
    pub async fn force_release_partition(
        &self,
        queue: &str,
        partition: i32,
    ) -> Result<Option<i64>, DbError> {
        let t = self.timeout;
        self.within(true, async |tx| {
            let row = tx
                .query_one(
                    "SELECT lease.force_release(lease_queue.lease_key($1, $2))",
                    &[&queue, &partition],
                )
                .await
                .map_err(|e| DbError::from_pg(e, t))?;
            Ok(row.get(0))
        })
        .await
    }

    /// Forgets the keys free or lapsed for longer than `older_than` (`lease.purge`); how many.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, DbError> {
        let t = self.timeout;
        self.within(true, async |tx| {
            pglease::purge(&**tx, older_than)
                .await
                .map_err(|e| DbError::from_lease(e, t))
        })
        .await
    }
}

/// The server's clock now: every "expires in" and "age" the console shows is measured against the
/// database's clock, which judges the leases, not against the console's.
async fn db_now(tx: &Transaction<'_>, t: Duration) -> Result<SystemTime, DbError> {
    let row = tx
        .query_one("SELECT pg_catalog.clock_timestamp()", &[])
        .await
        .map_err(|e| DbError::from_pg(e, t))?;
    Ok(row.get(0))
}

fn partition_row(p: &Row, now: SystemTime) -> PartitionRow {
    let expires_at: Option<SystemTime> = p.get(4);
    PartitionRow {
        partition: p.get(1),
        owner: p.get(2),
        epoch: p.get(3),
        expires_in_ms: expires_at.map(|e| millis_until(e, now)),
        batch_id: p.get(5),
        batch_size: p.get::<_, Option<i64>>(6).unwrap_or(0),
        batch_age_ms: p
            .get::<_, Option<SystemTime>>(7)
            .map(|t| -millis_until(t, now)),
        backlog: p.get(8),
        oldest_age_ms: p
            .get::<_, Option<SystemTime>>(9)
            .map(|t| -millis_until(t, now)),
        held_back_keys: p.get(10),
        dead_letters: p.get(11),
        acked: p.get(12),
    }
}
