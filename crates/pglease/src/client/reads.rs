//! [`Client`]'s reads: what a key's lease is now ([`Client::inspect`]), its grants
//! ([`Client::history`]), the leases under a prefix ([`Client::list`], [`Client::browse`]), their
//! counts ([`Client::summary`]) and the epoch high-water mark ([`Client::high_water`]). Each is one
//! statement on a pooled connection; none changes anything.

use std::time::Duration;

use super::Client;
use crate::calls;
use crate::error::Result;
use crate::results::{LeaseState, ListedLease};

impl Client {
    /// The state of `key` now, by the server clock ([`crate::inspect`] on a pooled connection).
    ///
    /// # Errors
    ///
    /// As [`crate::inspect`], plus pool errors ([`Error::is_connection`](crate::Error::is_connection), [`Error::is_closed`](crate::Error::is_closed)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// if let Some(state) = client.inspect("job-42").await? {
    ///     println!("held={} owner={:?} epoch={}", state.held, state.owner, state.epoch);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Option<LeaseState>> {
        let conn = self.inner.conns.get().await?;
        calls::inspect(&**conn, key).await
    }

    /// The grants of `key` recorded in its history, in epoch order, as `query` selects them
    /// ([`crate::history`] on a pooled connection): who held it, from when to when, and how each
    /// grant ended.
    ///
    /// # Errors
    ///
    /// As [`crate::history`], plus pool errors ([`Error::is_connection`](crate::Error::is_connection), [`Error::is_closed`](crate::Error::is_closed)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// let last_five = pglease::HistoryQuery::new().limit(5);
    /// for g in client.history("scheduler", &last_five).await? {
    ///     println!("epoch {} {} ended by {:?}", g.epoch, g.owner, g.ended_by);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn history(
        &self,
        key: &str,
        query: &crate::HistoryQuery,
    ) -> Result<Vec<crate::HistoryEntry>> {
        let conn = self.inner.conns.get().await?;
        calls::history(&**conn, key, query).await
    }

    /// Every key starting with `prefix` (all keys for `None`), with its state
    /// ([`crate::list`] on a pooled connection).
    ///
    /// # Errors
    ///
    /// As [`crate::list`], plus pool errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// for lease in client.list(Some("job-")).await? {
    ///     println!("{}: held={}", lease.key, lease.state.held);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<ListedLease>> {
        let conn = self.inner.conns.get().await?;
        calls::list(&**conn, prefix).await
    }

    /// One page of keys as `query` selects them, each with its state ([`crate::browse`] on a
    /// pooled connection): an operator console's view. Walk the pages with
    /// [`BrowseQuery::next_page`](crate::BrowseQuery::next_page).
    ///
    /// # Errors
    ///
    /// As [`crate::browse`], plus pool errors ([`Error::is_connection`](crate::Error::is_connection), [`Error::is_closed`](crate::Error::is_closed)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use pglease::{BrowseQuery, KeyState};
    ///
    /// let mine = BrowseQuery::new().owner(client.owner()).state(KeyState::Held);
    /// for k in client.browse(&mine).await? {
    ///     println!("{} until {:?}", k.key, k.expires_at);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn browse(&self, query: &crate::BrowseQuery) -> Result<Vec<crate::BrowsedLease>> {
        let conn = self.inner.conns.get().await?;
        calls::browse(&**conn, query).await
    }

    /// How many keys are held, lapsed and free, how many held ones lapse within
    /// `expiring_within`, and how many someone waits for ([`crate::summary`] on a pooled
    /// connection).
    ///
    /// # Errors
    ///
    /// As [`crate::summary`], plus pool errors ([`Error::is_connection`](crate::Error::is_connection), [`Error::is_closed`](crate::Error::is_closed)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// let c = client.summary(std::time::Duration::from_secs(10)).await?;
    /// println!("{} held, {} lapse within 10 s", c.held, c.expiring);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn summary(&self, expiring_within: Duration) -> Result<crate::LeaseCounts> {
        let conn = self.inner.conns.get().await?;
        calls::summary(&**conn, expiring_within).await
    }

    /// The database's high-water epoch ([`crate::high_water`] on a pooled connection): no epoch
    /// above it was ever granted or reserved there.
    ///
    /// # Errors
    ///
    /// As [`crate::high_water`], plus pool errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// println!("high water: {}", client.high_water().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn high_water(&self) -> Result<i64> {
        let conn = self.inner.conns.get().await?;
        calls::high_water(&**conn).await
    }
}
