//! A lease held by this process: the [`Lease`] handle, which owns the lease (renew, release,
//! transfer to another owner, release on drop) and reads and fences with it. Its state is shared with its guards and its
//! keepalive task (`shared.rs`); why it ends is a [`LostReason`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::lease_calls::{handover, transfer_once};
use crate::lost::LostReason;
use crate::pooled::{self, Connections};
use crate::results::Handover;
use crate::shared::{Command, Shared};
use crate::trace;

/// A lease held by this process, kept alive by a background keepalive task until it is released,
/// dropped or lost.
///
/// Behaves like a `Transaction`: [`Lease::release`] (or [`Lease::transfer_to`], which hands it to
/// another owner) consumes it; dropping it stops the keepalive
/// and releases the lease in the background (best effort: if that fails, the lease lapses after its
/// ttl). It dereferences to its [`LeaseGuard`], which reads it (key, owner, epoch, expiry), watches
/// for its end ([`LeaseGuard::lost`], [`LeaseGuard::token`]) and guards writes
/// ([`LeaseGuard::fence`]): every guard method is a method of the lease.
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
    /// What the lease shares with its guards: key, epoch, state, `lost`, fencing. [`Lease`]
    /// dereferences to it, so those methods are the same on both.
    view: LeaseGuard,
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
            view: LeaseGuard::new(Arc::clone(&shared)),
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

    /// Renews the lease now (the keepalive also does, at a fraction of the ttl), moving its
    /// validity deadline forward.
    ///
    /// # Errors
    ///
    /// - [`Error::is_lease_lost`]: the lease had already ended, or the server refused the renewal
    ///   (`not_owner`, `lapsed`, `epoch_mismatch`), which ends it and fires
    ///   [`Lease::lost`](crate::LeaseGuard::lost).
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
        self.renew_with(None).await
    }

    /// Replaces the lease's data with `data` (what [`Client::inspect`], [`Client::list`] and an
    /// election's observers read), renewing the lease in the same call (`lease.renew` with data).
    /// On success [`LeaseGuard::data`](crate::LeaseGuard::data) returns it.
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`]: `data` is over
    ///   [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes (client-side, nothing sent), or
    ///   the server refused it (`22023`).
    /// - as [`Lease::renew`]: [`Error::is_lease_lost`] if the lease had ended or the server refused
    ///   the renewal; [`Error::is_connection`] if the outcome is unknown (the data may or may not
    ///   have been set; the lease is not lost for it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense of [`Lease::renew`]; whether the data was set is then unknown.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lease: &pglease::Lease) -> pglease::Result<()> {
    /// lease.set_data("10.0.0.7:8080").await?;
    /// assert_eq!(lease.data().as_deref(), Some("10.0.0.7:8080"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_data(&self, data: impl Into<String>) -> Result<()> {
        let data = data.into();
        crate::attempt::check_data(&data)?;
        self.renew_with(Some(data)).await
    }

    /// [`Lease::renew`], replacing the data when `data` is `Some`.
    async fn renew_with(&self, data: Option<String>) -> Result<()> {
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
            data.as_deref(),
        )
        .await?;
        match (renewal.status.lost_reason(), renewal.expires_at) {
            (None, Some(expires_at)) => {
                let remaining = remaining.unwrap_or(Duration::ZERO);
                self.shared
                    .extend(timing.valid_until(sent, remaining), expires_at);
                if let Some(data) = data {
                    self.shared.set_data(data);
                }
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

impl Lease {
    /// Hands the lease to `to_owner` in one step (`lease.transfer`): stops the keepalive, waits for
    /// a renewal in flight, then makes `to_owner` the holder at the key's next epoch until server
    /// time + `ttl`. The key is never free in between, and this lease's epoch is fenced from the
    /// transfer on (renew, release and [`fence`](crate::LeaseGuard::fence) with it are refused);
    /// its guards see [`LostReason::Transferred`].
    ///
    /// The successor takes the grant over by acquiring the key with owner `to_owner` under the
    /// same login role (or a member of it): its acquire returns the transferred grant. A successor
    /// already waiting for the key ([`Client::acquire`], [`crate::Election::campaign`]) is woken by
    /// the transfer and gets it at once. If nobody acquires it as `to_owner`, nobody renews it and
    /// it lapses after `ttl`; a transfer to an owner nobody uses holds the key that long.
    ///
    /// The lease is consumed, and not released on drop: whatever happens, this process stops
    /// holding it.
    ///
    /// # Errors
    ///
    /// - [`Error::is_invalid_input`]: `to_owner` empty or over
    ///   [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES) bytes, or `ttl` not in (0, 365 days]
    ///   (client-side, nothing transferred: the lease is released as on drop), or `22023` from the
    ///   server (a ttl above the installing role's cap: the lease is then released).
    /// - [`Error::is_lease_lost`]: the lease had already ended, or the server refused the transfer
    ///   (`not_owner`, `lapsed`, `epoch_mismatch`: it was lost meanwhile); nothing changed on the
    ///   server.
    /// - [`Error::is_connection`] or another server error: the outcome is unknown; the lease is
    ///   then released (a release after a transfer that did take effect is refused and changes
    ///   nothing), so the key is either the successor's or free.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once called, the transfer goes ahead in the background even if this future is
    /// dropped (its outcome is then unknown to the caller: [`Client::inspect`] tells).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let ttl = Duration::from_secs(10);
    /// let lease = client.acquire("scheduler", ttl, Duration::from_secs(60)).await?;
    /// let old = lease.epoch();
    /// let handover = lease.transfer_to("node-2", ttl).await?;
    /// assert!(handover.epoch > old); // node-2's acquire of "scheduler" now returns this grant
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transfer_to(
        mut self,
        to_owner: &str,
        ttl: std::time::Duration,
    ) -> Result<Handover> {
        if !crate::limits::is_valid_name(to_owner) {
            return Err(Error::invalid_argument(format!(
                "transfer_to: to_owner must be 1 to {} bytes (got {}); the lease is released",
                crate::limits::MAX_NAME_BYTES,
                to_owner.len()
            )));
        }
        if ttl.is_zero() || ttl > crate::limits::MAX_INTERVAL {
            return Err(Error::invalid_argument(format!(
                "transfer_to: ttl must be in (0, 365 days] (got {ttl:?}); the lease is released"
            )));
        }
        let Some(control) = self.control.take() else {
            return Err(Error::lease_lost(LostReason::Released));
        };
        let (reply, answer) = oneshot::channel();
        let command = Command::Transfer {
            to_owner: to_owner.to_owned(),
            ttl,
            reply,
        };
        if control.send(command).is_ok()
            && let Ok(result) = answer.await
        {
            return result;
        }
        // The keepalive task is gone: the lease ended (lost, or the runtime is shutting down).
        drop(control);
        self.shared.check().map_err(Error::lease_lost)?;
        let transfer = transfer_once(&self.conns, &self.shared, to_owner, ttl).await;
        match transfer {
            Ok(transfer) => match (transfer.status.lost_reason(), transfer.grant) {
                (None, Some(grant)) => {
                    self.shared.end(LostReason::Transferred);
                    Ok(handover(&self.shared, to_owner, grant))
                }
                (reason, _) => {
                    let reason = reason.unwrap_or(LostReason::Lapsed);
                    self.shared.end(reason);
                    Err(Error::lease_lost(reason))
                }
            },
            Err(e) => {
                self.shared.end(LostReason::Released);
                Err(e)
            }
        }
    }
}

impl std::ops::Deref for Lease {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        &self.view
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
