//! A lease held by this process: the [`Lease`] handle, which owns the lease (renew, release,
//! release on drop) and reads and fences with it. Its state is shared with its guards and its
//! keepalive task (`shared.rs`); why it ends is a [`LostReason`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::guard::LeaseGuard;
use crate::lost::LostReason;
use crate::pooled::{self, Connections};
use crate::shared::{Command, Shared};
use crate::trace;

/// A lease held by this process, kept alive by a background keepalive task until it is released,
/// dropped or lost.
///
/// Behaves like a `Transaction`: [`Lease::release`] consumes it; dropping it stops the keepalive
/// and releases the lease in the background (best effort: if that fails, the lease lapses after its
/// ttl). Watch for loss with [`Lease::lost`] or [`Lease::token`], and guard writes with
/// [`Lease::fence`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// if let Some(lease) = client.try_acquire("job-42", Duration::from_secs(10)).await? {
///     println!("{} holds {} at epoch {}", lease.owner(), lease.key(), lease.epoch());
///     lease.release().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    /// The client's pooled connections, for [`Lease::renew`] and a release without the keepalive.
    conns: Connections,
    /// Keeps the client (and so its keepalive tasks) alive as long as the lease.
    _client: Client,
    control: Option<mpsc::UnboundedSender<Command>>,
}

impl Lease {
    pub(crate) fn new(
        shared: Arc<Shared>,
        conns: Connections,
        client: Client,
        control: mpsc::UnboundedSender<Command>,
    ) -> Lease {
        Lease {
            shared,
            conns,
            _client: client,
            control: Some(control),
        }
    }

    /// The state shared with the lease's guards and keepalive.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The leased key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::Lease) {
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
    /// # fn demo(lease: &pglease::Lease) {
    /// println!("held by {}", lease.owner());
    /// # }
    /// ```
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The fencing epoch of this grant: greater than every earlier epoch of the key.
    ///
    /// Present it to every resource the lease protects; see also [`Lease::fence`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::Lease) {
    /// let epoch: i64 = lease.epoch();
    /// # }
    /// ```
    pub fn epoch(&self) -> i64 {
        self.shared.epoch
    }

    /// The ttl the lease was acquired with; every renewal extends it by this much.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::Lease) {
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
    /// # fn demo(lease: &pglease::Lease) {
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
    /// # fn demo(lease: &pglease::Lease) {
    /// if let Some(until) = lease.valid_until() {
    ///     println!("safe for another {:?}", until.saturating_duration_since(std::time::Instant::now()));
    /// }
    /// # }
    /// ```
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.shared.valid_until()
    }

    /// The expiry the server last reported (server time): informative only; decisions use
    /// [`Lease::valid_until`], which never reads the wall clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lease: &pglease::Lease) {
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
    /// # fn demo(lease: &pglease::Lease) {
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
    /// # async fn demo(lease: &pglease::Lease) {
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
    /// # async fn demo(lease: &pglease::Lease) {
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
    /// - [`Error::is_lease_lost`]: the lease has already ended locally (nothing sent).
    /// - [`Error::is_fenced`]: the server refused (SQLSTATE `LE001`, `LE002` or `LE003`);
    ///   the transaction is aborted.
    /// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::fence()`]: roll the transaction back if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::Lease, db: &mut tokio_postgres::Client) -> pglease::Result<()> {
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
    /// # async fn demo(lease: &pglease::Lease) {
    /// let fence = lease.fencing_token();
    /// assert_eq!(fence.epoch(), lease.epoch());
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Fence {
        self.shared.fencing_token()
    }

    /// A cheap, clonable view of this lease (key, epoch, [`LeaseGuard::lost`], fencing) that does
    /// not own it: the lease stays alive as long as this handle does.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::Lease) {
    /// let guard = lease.guard();
    /// tokio::spawn(async move { println!("ended: {}", guard.lost().await) });
    /// # }
    /// ```
    pub fn guard(&self) -> LeaseGuard {
        LeaseGuard::new(Arc::clone(&self.shared))
    }

    /// Renews the lease now (the keepalive also does, at a fraction of the ttl), moving its validity
    /// deadline forward.
    ///
    /// # Errors
    ///
    /// - [`Error::is_lease_lost`]: the lease had already ended, or the server refused the renewal
    ///   (`not_owner`, `lapsed`, `epoch_mismatch`), which ends it and fires [`Lease::lost`].
    /// - [`Error::is_connection`] or another server error: the renewal's outcome is unknown, and
    ///   the lease is **not** lost for it; the keepalive keeps trying until the validity deadline.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: renewal is idempotent for the same owner and epoch, and an unconfirmed renewal
    /// is never counted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::Lease) -> pglease::Result<()> {
    /// lease.renew().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn renew(&self) -> Result<()> {
        self.shared.check().map_err(Error::lease_lost)?;
        let timing = self.shared.timing;
        let conn = self.conns.get().await?;
        let sent = Instant::now();
        let (renewal, remaining) = pooled::renew_timed(
            &conn,
            self.conns.statements(),
            &self.shared.key,
            &self.shared.owner,
            self.shared.epoch,
            timing.ttl,
        )
        .await?;
        match (renewal.status.lost_reason(), renewal.expires_at) {
            (None, Some(expires_at)) => {
                let remaining = remaining.unwrap_or(Duration::ZERO);
                self.shared
                    .extend(timing.valid_until(sent, remaining), expires_at);
                tracing::debug!(
                    target: trace::LEASE,
                    key = self.key(),
                    owner = self.owner(),
                    epoch = self.epoch(),
                    "lease renewed by hand"
                );
                self.shared.check().map_err(Error::lease_lost)
            }
            (Some(reason), _) => {
                self.shared.end(reason);
                Err(Error::lease_lost(
                    self.shared.check().err().unwrap_or(reason),
                ))
            }
            (None, None) => Err(Error::protocol("lease.renew returned ok without an expiry")),
        }
    }

    /// Releases the lease: stops the keepalive, waits for a renewal in flight, then frees the key
    /// on the server (advancing its fencing counter), so a waiter can take it at once.
    ///
    /// # Errors
    ///
    /// - [`Error::is_lease_lost`]: the lease had already ended (lost or shut down), or the server
    ///   refused the release (it was lost meanwhile); nothing more to do.
    /// - [`Error::is_connection`] or another server error: the release's outcome is unknown; the
    ///   lease is no longer renewed and lapses after its ttl at the latest.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once called, the release goes ahead in the background even if this future is
    /// dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: pglease::Lease) -> pglease::Result<()> {
    /// lease.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let Some(control) = self.control.take() else {
            return Err(Error::lease_lost(LostReason::Released));
        };
        let (reply, answer) = oneshot::channel();
        if control.send(Command::Release(reply)).is_ok()
            && let Ok(result) = answer.await
        {
            return result;
        }
        // The keepalive task is gone: the lease ended (lost, or the runtime is shutting down).
        drop(control);
        match self.shared.check() {
            Err(reason) => Err(Error::lease_lost(reason)),
            Ok(()) => {
                self.shared.end(LostReason::Released);
                let conn = self.conns.get().await?;
                let status = pooled::release(
                    &conn,
                    self.conns.statements(),
                    &self.shared.key,
                    &self.shared.owner,
                    self.shared.epoch,
                )
                .await?;
                match status.lost_reason() {
                    None => {
                        tracing::info!(
                            target: trace::LEASE,
                            key = self.key(),
                            owner = self.owner(),
                            epoch = self.epoch(),
                            reason = LostReason::Released.as_str(),
                            "lease released"
                        );
                        Ok(())
                    }
                    Some(reason) => Err(Error::lease_lost(reason)),
                }
            }
        }
    }
}

impl Drop for Lease {
    /// Stops the keepalive and releases the lease in the background (best effort). Does nothing
    /// after [`Lease::release`].
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            // The keepalive task sees the lease end as Released and releases it on the server.
            self.shared.end(LostReason::Released);
            drop(control);
        }
    }
}
