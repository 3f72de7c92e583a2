//! Fencing inside the database: [`Fence`], a lease's (key, owner, epoch) as an owned value that
//! guards transactions with `lease.fence`.
//!
//! A guarded transaction calls `lease.fence(key, owner, epoch)` before its writes. The call checks
//! on the server that the grant is still current and locks the key's row (`FOR SHARE`) until the
//! transaction ends, so no takeover, release or renewal of the key commits before the guarded
//! writes do: writes under a fence are ordered before every later grant of the key. A stale grant
//! is refused with SQLSTATE `LE001` (not the owner), `LE002` (lapsed) or `LE003` (another epoch),
//! all reported by [`crate::Error::is_fenced`].

use std::time::SystemTime;

use tokio_postgres::GenericClient;

use crate::error::Result;

/// A lease's key, owner and epoch: what a transaction presents to `lease.fence`.
///
/// Get one from [`Lease::fencing_token`](crate::LeaseGuard::fencing_token) (or build one with
/// [`Fence::new`]) and move it into the tasks that write on the lease's behalf. It is valid exactly
/// as long as the grant it names; after a release, lapse or takeover, [`Fence::check`] fails with
/// [`crate::Error::is_fenced`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lease: &pglease::Lease, db: &mut tokio_postgres::Client) -> pglease::Result<()> {
/// let fence = lease.fencing_token();
/// let tx = db.transaction().await?;
/// match fence.check(&tx).await {
///     Ok(_) => {
///         tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
///         tx.commit().await?;
///     }
///     Err(e) if e.is_fenced() => println!("stale epoch {}: {:?}", fence.epoch(), e.code()),
///     Err(e) => return Err(e),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    key: String,
    owner: String,
    epoch: i64,
}

impl Fence {
    /// A fence for `owner`'s grant of `key` at `epoch`.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = pglease::Fence::new("job-42", "worker-a1", 7);
    /// assert_eq!((fence.key(), fence.owner(), fence.epoch()), ("job-42", "worker-a1", 7));
    /// ```
    pub fn new(key: impl Into<String>, owner: impl Into<String>, epoch: i64) -> Fence {
        Fence {
            key: key.into(),
            owner: owner.into(),
            epoch,
        }
    }

    /// The key.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::Fence::new("k", "o", 1).key(), "k");
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::Fence::new("k", "o", 1).owner(), "o");
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::Fence::new("k", "o", 1).epoch(), 1);
    /// ```
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Runs `lease.fence(key, owner, epoch)` in the caller's transaction: verifies the grant and
    /// locks the key's row until the transaction ends. Returns the lease's server expiry.
    ///
    /// Unlike [`Lease::fence`](crate::LeaseGuard::fence), it does not consult the local lease
    /// state: the server alone decides.
    ///
    /// # Errors
    ///
    /// - [`crate::Error::is_fenced`]: `LE001` (not the owner), `LE002` (lapsed), `LE003` (another
    ///   epoch); the transaction is aborted.
    /// - any other server error, [`crate::Error::is_connection`] or [`crate::Error::is_protocol`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::fence()`]: roll the transaction back if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: &pglease::Fence, db: &mut tokio_postgres::Client) -> pglease::Result<()> {
    /// let tx = db.transaction().await?;
    /// fence.check(&tx).await?;
    /// tx.execute("INSERT INTO audit (epoch) VALUES ($1)", &[&fence.epoch()]).await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check<C: GenericClient>(&self, client: &C) -> Result<SystemTime> {
        crate::calls::fence(client, &self.key, &self.owner, self.epoch).await
    }
}
