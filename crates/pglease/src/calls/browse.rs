//! The operator console's reads (pg_lease 0.10.0): [`browse`], one page of keys chosen by a
//! [`BrowseQuery`], and [`summary`], the number of keys in each state.

use std::time::Duration;

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::{micros, one_row};
use crate::browse_results::{BrowsedLease, KeyState, LeaseCounts};
use crate::error::{Error, Result};
use crate::limits;
use crate::rows;

const BROWSE: &str = "SELECT b.key, b.state, b.owner, b.epoch, b.expires_at, b.data, b.waiting, \
     b.last_owner FROM lease.browse($1, $2, $3, $4, $5) AS b";
const SUMMARY: &str = "SELECT s.held, s.lapsed, s.free, s.expiring, s.waiting \
     FROM lease.summary($1::bigint * interval '1 microsecond') AS s";

/// Which keys [`browse`] returns: those after a key ([`BrowseQuery::after`], for the next page),
/// starting with a prefix ([`BrowseQuery::prefix`]), in one state ([`BrowseQuery::state`]) or
/// held by one owner ([`BrowseQuery::owner`]), at most [`BrowseQuery::limit`] of them (100 by
/// default). The default is the first 100 keys of the database.
///
/// A value, not a builder bound to a connection: a console keeps one per view and moves it along
/// with [`BrowseQuery::next_page`]; it is passed to [`browse`] and
/// [`Client::browse`](crate::Client::browse) alike, and its fields grow without breaking callers.
///
/// # Examples
///
/// ```
/// use pglease::{BrowseQuery, KeyState};
///
/// let q = BrowseQuery::new().prefix("job-").state(KeyState::Lapsed).limit(50);
/// assert_eq!(q.get_prefix(), Some("job-"));
/// assert_eq!(q.get_state(), Some(KeyState::Lapsed));
/// assert_eq!(q.get_limit(), 50);
/// assert_eq!(BrowseQuery::default().get_limit(), 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrowseQuery {
    prefix: Option<String>,
    after: Option<String>,
    state: Option<KeyState>,
    owner: Option<String>,
    limit: u32,
}

/// The SQL API's default `max_rows`.
const DEFAULT_LIMIT: u32 = 100;

impl Default for BrowseQuery {
    fn default() -> BrowseQuery {
        BrowseQuery {
            prefix: None,
            after: None,
            state: None,
            owner: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl BrowseQuery {
    /// Every key, from the first, 100 per page.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new(), pglease::BrowseQuery::default());
    /// ```
    pub fn new() -> BrowseQuery {
        BrowseQuery::default()
    }

    /// Only keys whose bytes start with `prefix`'s (`%`, `_` and `\` are ordinary characters;
    /// at most [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES) bytes; empty: every key). The
    /// server reads them as a range of its key index.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = pglease::BrowseQuery::new().prefix("tenant-7/");
    /// assert_eq!(q.get_prefix(), Some("tenant-7/"));
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> BrowseQuery {
        self.prefix = Some(prefix.into());
        self
    }

    /// Only keys after `key`, compared byte-wise (keyset pagination: the last key of the page
    /// before; it need not exist any more; empty: from the first key). See
    /// [`BrowseQuery::next_page`].
    ///
    /// # Examples
    ///
    /// ```
    /// let q = pglease::BrowseQuery::new().after("job-0099");
    /// assert_eq!(q.get_after(), Some("job-0099"));
    /// ```
    pub fn after(mut self, key: impl Into<String>) -> BrowseQuery {
        self.after = Some(key.into());
        self
    }

    /// Only keys in `state`.
    ///
    /// # Examples
    ///
    /// ```
    /// use pglease::KeyState;
    /// assert_eq!(pglease::BrowseQuery::new().state(KeyState::Held).get_state(), Some(KeyState::Held));
    /// ```
    pub fn state(mut self, state: KeyState) -> BrowseQuery {
        self.state = Some(state);
        self
    }

    /// Only keys that `owner` holds now (compared exactly; a lapsed or free key has no holder,
    /// so this implies [`KeyState::Held`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let q = pglease::BrowseQuery::new().owner("worker-a1");
    /// assert_eq!(q.get_owner(), Some("worker-a1"));
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> BrowseQuery {
        self.owner = Some(owner.into());
        self
    }

    /// At most `limit` keys per page (1 to [`MAX_BROWSE_ROWS`](crate::limits::MAX_BROWSE_ROWS);
    /// [`browse`] refuses others before sending anything).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().limit(25).get_limit(), 25);
    /// ```
    pub fn limit(mut self, limit: u32) -> BrowseQuery {
        self.limit = limit;
        self
    }

    /// The query for the page after `page`, which this query returned: the same filters, after
    /// its last key. `None` when `page` was not full, so there is no next page (as of that call:
    /// keys created since behind its last key are not in later pages, keys created ahead are).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
    /// let mut query = Some(pglease::BrowseQuery::new().prefix("job-").limit(500));
    /// while let Some(q) = query {
    ///     let page = pglease::browse(db, &q).await?;
    ///     for k in &page {
    ///         println!("{} {}", k.key, k.state);
    ///     }
    ///     query = q.next_page(&page);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_page(&self, page: &[BrowsedLease]) -> Option<BrowseQuery> {
        let last = page.last()?;
        (page.len() >= self.limit as usize).then(|| self.clone().after(last.key.clone()))
    }

    /// The prefix, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().get_prefix(), None);
    /// ```
    pub fn get_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// The key the page starts after, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().get_after(), None);
    /// ```
    pub fn get_after(&self) -> Option<&str> {
        self.after.as_deref()
    }

    /// The state filter, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().get_state(), None);
    /// ```
    pub fn get_state(&self) -> Option<KeyState> {
        self.state
    }

    /// The owner filter, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().get_owner(), None);
    /// ```
    pub fn get_owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The most keys per page.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::BrowseQuery::new().get_limit(), 100);
    /// ```
    pub fn get_limit(&self) -> u32 {
        self.limit
    }

    /// The checks made before anything is sent (the server makes the same ones).
    fn check(&self) -> Result<()> {
        let mut violations = Vec::new();
        for (name, value) in [("prefix", &self.prefix), ("after", &self.after)] {
            if let Some(v) = value
                && v.len() > limits::MAX_NAME_BYTES
            {
                violations.push(format!(
                    "{name} must be at most {} bytes (got {})",
                    limits::MAX_NAME_BYTES,
                    v.len()
                ));
            }
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
        if !(1..=limits::MAX_BROWSE_ROWS).contains(&self.limit) {
            violations.push(format!(
                "limit must be 1 to {} (got {})",
                limits::MAX_BROWSE_ROWS,
                self.limit
            ));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "browse: {}",
                violations.join("; ")
            )))
        }
    }
}

/// One page of keys as `query` selects them, in key order (byte-wise), each with its state judged
/// at one reading of the server clock (`lease.browse`, pg_lease 0.10.0; docs/SEMANTICS.md §16):
/// the view of an operator console. Walk the pages with [`BrowseQuery::next_page`].
///
/// Advisory, like [`list`](crate::list): it takes no lock, and a key may change state as soon as
/// the page is read. Unlike `list` it reads one bounded page: the prefix and the position are a
/// range of the server's key index, read until the page is full (a state or owner filter may read
/// more keys than it returns).
///
/// # Errors
///
/// - [`Error::is_invalid_input`]: a prefix or position over
///   [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES), an empty or oversized owner filter, a limit
///   out of 1..=[`MAX_BROWSE_ROWS`](crate::limits::MAX_BROWSE_ROWS) (client-side, nothing sent),
///   or `22023` from the server.
/// - any other server error (`42883` if the installed pg_lease predates 0.10.0; `42501` without
///   USAGE on schema `lease`), [`Error::is_connection`] or [`Error::is_protocol`] (a row whose
///   columns do not fit its state).
///
/// # Cancel safety
///
/// Cancel safe: it only reads, so dropping the future changes nothing (the server may still run
/// the statement to its end).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use pglease::{BrowseQuery, KeyState};
///
/// let lapsed = BrowseQuery::new().state(KeyState::Lapsed).limit(20);
/// for k in pglease::browse(client, &lapsed).await? {
///     println!("{} lapsed at {:?}, last held by {:?}", k.key, k.expires_at, k.last_owner);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn browse<C: GenericClient>(
    client: &C,
    query: &BrowseQuery,
) -> Result<Vec<BrowsedLease>> {
    const CALL: &str = "lease.browse";
    query.check()?;
    let state = query.state.map(KeyState::as_str);
    let limit = i32::try_from(query.limit).unwrap_or(i32::MAX);
    let rows = client
        .query_typed(
            BROWSE,
            &[
                (&query.prefix, Type::TEXT),
                (&query.after, Type::TEXT),
                (&state, Type::TEXT),
                (&query.owner, Type::TEXT),
                (&limit, Type::INT4),
            ],
        )
        .await?;
    rows.iter().map(|row| rows::browsed(row, CALL)).collect()
}

/// How many keys are held, lapsed and free, how many held ones lapse within `expiring_within`
/// unless renewed, and how many held or lapsed ones someone waits for, all judged at one reading
/// of the server clock and counted in one scan (`lease.summary`, pg_lease 0.10.0;
/// docs/SEMANTICS.md §16). `expiring_within` is sent as whole microseconds, rounded down.
///
/// Advisory, like [`browse`]. It reads every key's row: meant for a console's refresh, not a hot
/// path.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): `expiring_within` over 365 days
///   ([`MAX_INTERVAL`](crate::limits::MAX_INTERVAL)).
/// - any other server error (`42883` if the installed pg_lease predates 0.10.0; `42501` without
///   USAGE on schema `lease`), [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let counts = pglease::summary(client, Duration::from_secs(30)).await?;
/// if counts.expiring > 0 {
///     println!("{} leases lapse within 30 s unless renewed", counts.expiring);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn summary<C: GenericClient>(
    client: &C,
    expiring_within: Duration,
) -> Result<LeaseCounts> {
    const CALL: &str = "lease.summary";
    let within = micros(expiring_within);
    let rows = client
        .query_typed(SUMMARY, &[(&within, Type::INT8)])
        .await?;
    rows::lease_counts(&one_row(rows, CALL)?, CALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_queries_are_refused_before_sending() {
        let ok = BrowseQuery::new();
        assert!(ok.check().is_ok());
        let long = "k".repeat(limits::MAX_NAME_BYTES + 1);
        for q in [
            ok.clone().limit(0),
            ok.clone().limit(limits::MAX_BROWSE_ROWS + 1),
            ok.clone().owner(""),
            ok.clone().owner(long.clone()),
            ok.clone().prefix(long.clone()),
            ok.clone().after(long),
        ] {
            let e = q.check().unwrap_err();
            assert!(e.is_invalid_input(), "{q:?}: {e}");
        }
        let edge = "k".repeat(limits::MAX_NAME_BYTES);
        assert!(
            ok.clone()
                .prefix("")
                .after("")
                .prefix(edge.clone())
                .after(edge.clone())
                .owner(edge)
                .limit(limits::MAX_BROWSE_ROWS)
                .check()
                .is_ok()
        );
        assert!(ok.limit(1).check().is_ok());
    }

    #[test]
    fn the_next_page_starts_after_a_full_page_and_keeps_the_filters() {
        let key = |k: &str| BrowsedLease {
            key: k.into(),
            state: KeyState::Free,
            owner: None,
            epoch: 1,
            expires_at: None,
            data: None,
            waiting: false,
            last_owner: None,
        };
        let q = BrowseQuery::new()
            .prefix("p")
            .state(KeyState::Free)
            .limit(2);
        let next = q.next_page(&[key("p1"), key("p2")]).unwrap();
        assert_eq!(next, q.clone().after("p2"));
        assert_eq!(next.get_state(), Some(KeyState::Free));
        assert_eq!(q.next_page(&[key("p1")]), None, "a short page is the last");
        assert_eq!(q.next_page(&[]), None);
    }
}
