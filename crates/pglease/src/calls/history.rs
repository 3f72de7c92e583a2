//! The history of a key's grants (`lease.history`, pg_lease 0.9.0): [`history`] and the options
//! of one read, [`HistoryQuery`].

use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::micros;
use crate::error::{Error, Result};
use crate::limits;
use crate::results::HistoryEntry;
use crate::rows;

/// `since` is a duration back from the server's now (the SQL API takes no instant): from the given
/// instant (clamped to [0, 3650 days]), or the given duration, or NULL (every grant).
const HISTORY: &str = "SELECT h.epoch, h.owner, h.holder_role, h.granted_at, h.expires_at, \
     h.ended_at, h.ended_by, h.data FROM lease.history($1, \
     COALESCE(CASE WHEN $2::timestamptz IS NOT NULL \
                   THEN LEAST(GREATEST(pg_catalog.clock_timestamp() - $2::timestamptz, interval '0'), \
                              interval '3650 days') END, \
              $3::bigint * interval '1 microsecond'), \
     $4, $5) AS h";

/// Which grants of a key [`history`] reads: those still current at a moment or later
/// ([`HistoryQuery::since`], [`HistoryQuery::within`]), those of one owner
/// ([`HistoryQuery::owner`]), at most the latest [`HistoryQuery::limit`] of them (100 by default).
/// The default reads the latest 100 grants of every owner.
///
/// A value, not a builder bound to a connection: one query can be kept and passed to
/// [`history`] and [`Client::history`](crate::Client::history) alike, and its fields grow without
/// breaking callers.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use pglease::HistoryQuery;
///
/// let q = HistoryQuery::new().within(Duration::from_secs(3600)).owner("node-1").limit(20);
/// assert_eq!(q.get_limit(), 20);
/// assert_eq!(HistoryQuery::default().get_limit(), 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HistoryQuery {
    since: Since,
    owner: Option<String>,
    limit: u32,
}

/// Where a history read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Since {
    /// Every recorded grant.
    All,
    /// Grants still current at this server time or later.
    At(SystemTime),
    /// Grants still current this long before the call, by the server clock, or later.
    Within(Duration),
}

impl Default for HistoryQuery {
    fn default() -> HistoryQuery {
        HistoryQuery {
            since: Since::All,
            owner: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// The SQL API's default `max_rows`.
const DEFAULT_LIMIT: u32 = 100;

impl HistoryQuery {
    /// Every owner's grants, the latest 100.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::HistoryQuery::new(), pglease::HistoryQuery::default());
    /// ```
    pub fn new() -> HistoryQuery {
        HistoryQuery::default()
    }

    /// Only grants still current at server time `at` or later: held then, or ended at `at` or
    /// after it (a grant whose end is unknown, [`EndedBy::Unrecorded`](crate::EndedBy::Unrecorded),
    /// when it was granted at `at` or later). The server turns `at` into a duration back from its
    /// own clock (an instant ahead of it reads the current grant only; one more than 3650 days
    /// back, every grant). Replaces [`HistoryQuery::within`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// let q = pglease::HistoryQuery::new().since(SystemTime::now() - Duration::from_secs(60));
    /// ```
    pub fn since(mut self, at: SystemTime) -> HistoryQuery {
        self.since = Since::At(at);
        self
    }

    /// Only grants still current `ago` before the call or later, measured on the server's clock
    /// (as [`HistoryQuery::since`] with the server's now minus `ago`; the local clock plays no
    /// part). Replaces [`HistoryQuery::since`].
    ///
    /// # Examples
    ///
    /// ```
    /// let last_hour = pglease::HistoryQuery::new().within(std::time::Duration::from_secs(3600));
    /// ```
    pub fn within(mut self, ago: Duration) -> HistoryQuery {
        self.since = Since::Within(ago);
        self
    }

    /// Only grants made to `owner`.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = pglease::HistoryQuery::new().owner("node-1");
    /// assert_eq!(q.get_owner(), Some("node-1"));
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> HistoryQuery {
        self.owner = Some(owner.into());
        self
    }

    /// At most the latest `limit` grants (1 to
    /// [`MAX_HISTORY_ROWS`](crate::limits::MAX_HISTORY_ROWS); [`history`] refuses others before
    /// sending anything), still returned in epoch order.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::HistoryQuery::new().limit(5).get_limit(), 5);
    /// ```
    pub fn limit(mut self, limit: u32) -> HistoryQuery {
        self.limit = limit;
        self
    }

    /// The owner filter, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::HistoryQuery::new().get_owner(), None);
    /// ```
    pub fn get_owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The most grants returned.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::HistoryQuery::new().get_limit(), 100);
    /// ```
    pub fn get_limit(&self) -> u32 {
        self.limit
    }

    /// The checks made before anything is sent.
    fn check(&self, key: &str) -> Result<()> {
        let mut violations = Vec::new();
        if !limits::is_valid_name(key) {
            violations.push(format!(
                "key must be 1 to {} bytes (got {})",
                limits::MAX_NAME_BYTES,
                key.len()
            ));
        }
        if let Some(owner) = &self.owner
            && !limits::is_valid_name(owner)
        {
            violations.push(format!(
                "owner must be 1 to {} bytes (got {})",
                limits::MAX_NAME_BYTES,
                owner.len()
            ));
        }
        if !(1..=limits::MAX_HISTORY_ROWS).contains(&self.limit) {
            violations.push(format!(
                "limit must be 1 to {} (got {})",
                limits::MAX_HISTORY_ROWS,
                self.limit
            ));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "history: {}",
                violations.join("; ")
            )))
        }
    }
}

/// The grants of `key` recorded in its history, in epoch order, as `query` selects them
/// (`lease.history`, pg_lease 0.9.0; docs/SEMANTICS.md §15): who held it, from when to when, and
/// how each grant ended ([`EndedBy`](crate::EndedBy); `None` for the grant held now).
///
/// Advisory, like [`inspect`](crate::inspect): the current grant is judged as of now by the
/// server clock, without a lock; an end read from a later grant or written where it happened is
/// final. Grants are recorded while the history is on ([`configure_history`](crate::configure_history));
/// [`purge`](crate::purge) removes those that ended longer ago than its retention. Semaphore
/// slots (`name#N`) and queue partitions are leases: their keys have a history too.
///
/// # Errors
///
/// - [`Error::is_invalid_input`]: a bad key or owner filter (as for [`acquire`](crate::acquire)),
///   a limit out of 1..=[`MAX_HISTORY_ROWS`](crate::limits::MAX_HISTORY_ROWS) (client-side,
///   nothing sent), or `22023` from the server.
/// - any other server error (`42883` if the installed pg_lease predates 0.9.0),
///   [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
/// use pglease::HistoryQuery;
///
/// let last_day = HistoryQuery::new().within(Duration::from_secs(86_400));
/// for g in pglease::history(client, "scheduler", &last_day).await? {
///     let end = g.ended_by.as_ref().map_or("held", |e| e.as_str());
///     println!("epoch {} {} {end}", g.epoch, g.owner);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn history<C: GenericClient>(
    client: &C,
    key: &str,
    query: &HistoryQuery,
) -> Result<Vec<HistoryEntry>> {
    const CALL: &str = "lease.history";
    query.check(key)?;
    let (at, ago) = match query.since {
        Since::All => (None, None),
        Since::At(at) => (Some(at), None),
        Since::Within(ago) => (None, Some(micros(ago))),
    };
    let limit = i32::try_from(query.limit).unwrap_or(i32::MAX);
    let rows = client
        .query_typed(
            HISTORY,
            &[
                (&key, Type::TEXT),
                (&at, Type::TIMESTAMPTZ),
                (&ago, Type::INT8),
                (&query.owner, Type::TEXT),
                (&limit, Type::INT4),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| rows::history_entry(row, CALL))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_queries_are_refused_before_sending() {
        let ok = HistoryQuery::new();
        assert!(ok.check("k").is_ok());
        for (key, q) in [
            ("", ok.clone()),
            ("k", ok.clone().limit(0)),
            ("k", ok.clone().limit(limits::MAX_HISTORY_ROWS + 1)),
            ("k", ok.clone().owner("")),
            (&"k".repeat(limits::MAX_NAME_BYTES + 1) as &str, ok.clone()),
        ] {
            let e = q.check(key).unwrap_err();
            assert!(e.is_invalid_input(), "{key:?} {q:?}: {e}");
        }
        assert!(ok.limit(limits::MAX_HISTORY_ROWS).check("k").is_ok());
    }
}
