//! A clonable view of a held lease: [`LeaseGuard`], which reads the lease, waits for its end and
//! fences with it, but does not own it (only the [`crate::Lease`] releases).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::fence::Fence;
use crate::lost::LostReason;
use crate::shared::Shared;

/// A clonable view of a lease that does not own it, handed to the closure of
/// [`crate::Client::with_lease`] (and made by [`crate::Lease::guard`]).
///
/// It reads the lease's key, epoch and state, waits for its end ([`LeaseGuard::lost`]) and fences
/// transactions with it; only the owning [`crate::Lease`] (or `with_lease`) releases it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let epoch = client
///     .with_lease("job-42", Duration::from_secs(10), |guard| async move { guard.epoch() })
///     .await?;
/// println!("worked at epoch {epoch}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseGuard {
    shared: Arc<Shared>,
}

impl LeaseGuard {
    pub(crate) fn new(shared: Arc<Shared>) -> LeaseGuard {
        LeaseGuard { shared }
    }

    /// The leased key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// println!("holding {}", lease.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The owner the lease was granted to (the client's [`crate::Client::owner`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// println!("held by {}", lease.owner());
    /// # }
    /// ```
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The fencing epoch of this grant: greater than every earlier epoch of the key.
    ///
    /// Present it to every resource the lease protects; see also [`LeaseGuard::fence`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// let epoch: i64 = lease.epoch();
    /// # }
    /// ```
    pub fn epoch(&self) -> i64 {
        self.shared.epoch
    }

    /// The slot number, for a lease on a semaphore's slot ([`crate::Semaphore`]); `None` for a
    /// plain key. The lease's [`LeaseGuard::key`] is then the slot key `name#slot`
    /// ([`crate::slot_key`]), which renews, releases and fences like any key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// if let Some(slot) = lease.slot() {
    ///     println!("slot {slot} ({})", lease.key());
    /// }
    /// # }
    /// ```
    pub fn slot(&self) -> Option<u32> {
        self.shared.slot
    }

    /// The lease's data as the server last confirmed it: what the acquire set
    /// ([`crate::AcquireBuilder::data`]) or the last [`crate::Lease::set_data`]; `None` if none
    /// was set. Others read it with [`crate::Client::inspect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// println!("advertising {:?}", lease.data());
    /// # }
    /// ```
    pub fn data(&self) -> Option<String> {
        self.shared.data()
    }

    /// The ttl the lease was acquired with; every renewal extends it by this much.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// assert!(lease.ttl() > std::time::Duration::ZERO);
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.shared.timing.ttl
    }

    /// Whether the lease is held now: it has not ended and its validity deadline has not
    /// passed. A `false` is final.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// if !lease.is_held() {
    ///     println!("stop acting on it");
    /// }
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        self.shared.check().is_ok()
    }

    /// The local instant until which the lease is known to be held (moved forward by every
    /// confirmed renewal); `None` once it has ended.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// if let Some(until) = lease.valid_until() {
    ///     println!("safe for another {:?}", until.saturating_duration_since(std::time::Instant::now()));
    /// }
    /// # }
    /// ```
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.shared.valid_until()
    }

    /// The expiry the server last reported (server time): informative only; decisions use
    /// [`LeaseGuard::valid_until`], which never reads the wall clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// println!("server expiry {:?}", lease.expires_at());
    /// # }
    /// ```
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.shared.expires_at()
    }

    /// Why the lease ended, or `None` while it is held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::LeaseGuard) {
    /// if let Some(reason) = lease.ended() {
    ///     println!("ended: {reason}");
    /// }
    /// # }
    /// ```
    pub fn ended(&self) -> Option<LostReason> {
        self.shared.check().err()
    }

    /// Completes with the reason when the lease ends: lost (expired, or a renewal refused),
    /// released, or shut down. Completes at once if it already has.
    ///
    /// Loss by expiry is signalled at the validity deadline, before the server's expiry, so
    /// before anyone else can acquire the key.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing; call it again to wait again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::LeaseGuard) {
    /// # async fn work() {}
    /// tokio::select! {
    ///     reason = lease.lost() => println!("lost: {reason}"),
    ///     () = work() => println!("done in time"),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) -> LostReason {
        self.shared.lost().await
    }

    /// A token that is cancelled when the lease ends (for any reason): hand it to work that
    /// must stop when the lease does.
    ///
    /// It is a child token: cancelling it does not affect the lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::LeaseGuard) {
    /// let token = lease.token();
    /// tokio::spawn(async move {
    ///     token.cancelled().await;
    ///     println!("lease ended: stopping");
    /// });
    /// # }
    /// ```
    pub fn token(&self) -> CancellationToken {
        self.shared.token.child_token()
    }

    /// Guards the caller's transaction with this lease: runs `lease.fence(key, owner,
    /// epoch)` in it, which verifies the lease on the server and locks the key's row until
    /// the transaction ends, so no takeover can commit before the guarded writes do.
    /// Returns the lease's server expiry.
    ///
    /// Call it inside a transaction, before the writes it guards, and keep the transaction
    /// shorter than the time left on the lease: the row lock also holds back this lease's
    /// own renewals until the transaction ends.
    ///
    /// # Errors
    ///
    /// - [`Error::is_lease_lost`](crate::Error::is_lease_lost): the lease has already ended locally
    ///   (nothing sent).
    /// - [`Error::is_fenced`](crate::Error::is_fenced): the server refused (SQLSTATE `LE001`,
    ///   `LE002` or `LE003`); the transaction is aborted.
    /// - any other server error, [`Error::is_connection`](crate::Error::is_connection) or
    ///   [`Error::is_protocol`](crate::Error::is_protocol).
    ///
    /// # Cancel safety
    ///
    /// As [`crate::fence()`]: roll the transaction back if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::LeaseGuard, db: &mut tokio_postgres::Client) -> pglease::Result<()> {
    /// let tx = db.transaction().await?;
    /// lease.fence(&tx).await?;
    /// tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fence<C: GenericClient>(&self, client: &C) -> Result<SystemTime> {
        self.shared.fence(client).await
    }

    /// The lease's key, owner and epoch as a [`Fence`], an owned value that other tasks can
    /// use to guard their transactions (it stays valid exactly as long as the grant).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::LeaseGuard) {
    /// let fence = lease.fencing_token();
    /// assert_eq!(fence.epoch(), lease.epoch());
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Fence {
        self.shared.fencing_token()
    }
}
