//! A held lease: the [`Lease`] handle, its cheap observer [`LeaseGuard`], and why a lease ends
//! ([`LostReason`]).
//!
//! A lease is *held* from its grant until its **validity deadline**, a local monotonic instant:
//! `sent + min(ttl, left) - margin`, where `sent` is taken before the acquire or renew that
//! confirmed it was sent, `left` is the time the server reported left on the lease after the call,
//! and `margin` is `ttl / 1000` plus [`crate::ClientBuilder::safety_margin`]. The keepalive moves
//! the deadline forward with each confirmed renewal; if none is confirmed in time, the lease ends
//! with [`LostReason::Expired`] at the deadline, which is before the server's own expiry and hence
//! before anyone else can be granted the key (see `docs/CLIENT.md`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

use crate::calls::Status;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::Fence;

/// Why a lease ended; what [`Lease::lost`] completes with.
///
/// Every reason means the same thing to the holder: stop acting on the lease now. The first four are
/// losses; the last two are the holder's own doing.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lease: &pglease::Lease) {
/// use pglease::LostReason;
/// match lease.lost().await {
///     LostReason::Expired => println!("no renewal in time"),
///     reason if reason.is_loss() => println!("taken away: {reason}"),
///     reason => println!("ended here: {reason}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// No renewal was confirmed before the validity deadline (the server was unreachable, paused
    /// or too slow). Signalled before the server lets a successor in.
    Expired,
    /// A renewal answered `not_owner`: the key was taken over after a lapse, or released by
    /// another session of the same owner, or purged.
    NotOwner,
    /// A renewal answered `lapsed`: the server judged the lease expired.
    Lapsed,
    /// A renewal answered `epoch_mismatch`: the same owner holds the key at another epoch.
    EpochMismatch,
    /// This process released the lease ([`Lease::release`], dropping the [`Lease`], or
    /// [`crate::Client::with_lease`] finishing).
    Released,
    /// The client was shut down ([`crate::Client::shutdown`]), which releases its leases.
    Shutdown,
}

impl LostReason {
    /// A short lower-case name: `expired`, `not_owner`, `lapsed`, `epoch_mismatch`, `released`,
    /// `shutdown`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::LostReason::Expired.as_str(), "expired");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::NotOwner => "not_owner",
            LostReason::Lapsed => "lapsed",
            LostReason::EpochMismatch => "epoch_mismatch",
            LostReason::Released => "released",
            LostReason::Shutdown => "shutdown",
        }
    }

    /// Whether the lease was lost (taken away), as opposed to ended by this process
    /// ([`LostReason::Released`], [`LostReason::Shutdown`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use pglease::LostReason;
    /// assert!(LostReason::NotOwner.is_loss());
    /// assert!(!LostReason::Released.is_loss());
    /// ```
    pub const fn is_loss(self) -> bool {
        !matches!(self, LostReason::Released | LostReason::Shutdown)
    }

    /// The reason a refused renew or release reports (`None` for [`Status::Ok`]).
    pub(crate) fn from_status(status: Status) -> Option<LostReason> {
        match status {
            Status::Ok => None,
            Status::NotOwner => Some(LostReason::NotOwner),
            Status::Lapsed => Some(LostReason::Lapsed),
            Status::EpochMismatch => Some(LostReason::EpochMismatch),
        }
    }
}

impl fmt::Display for LostReason {
    /// Writes [`LostReason::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a lease stands, as this process knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Held until `valid_until` (local, monotonic); the server last reported `expires_at`.
    Held {
        valid_until: Instant,
        expires_at: SystemTime,
    },
    /// Ended, for good.
    Ended(LostReason),
}

/// The state one lease's handle, guards and keepalive task share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) epoch: i64,
    pub(crate) ttl: Duration,
    /// How the renewals and the release send their statements.
    pub(crate) statements: crate::calls::Statements,
    health: watch::Sender<Health>,
    /// Cancelled when the lease ends, for any reason.
    pub(crate) token: CancellationToken,
}

impl Shared {
    pub(crate) fn new(
        key: String,
        owner: String,
        epoch: i64,
        ttl: Duration,
        valid_until: Instant,
        expires_at: SystemTime,
        token: CancellationToken,
    ) -> Shared {
        let (health, _) = watch::channel(Health::Held {
            valid_until,
            expires_at,
        });
        Shared {
            key,
            owner,
            epoch,
            ttl,
            statements: crate::calls::Statements::Unnamed,
            health,
            token,
        }
    }

    /// How the renewals and the release send their statements (default: unnamed).
    pub(crate) fn with_statements(mut self, statements: crate::calls::Statements) -> Shared {
        self.statements = statements;
        self
    }

    pub(crate) fn health(&self) -> Health {
        *self.health.borrow()
    }

    /// Moves the validity deadline forward (never back) after a confirmed renewal.
    pub(crate) fn extend(&self, valid_until: Instant, expires_at: SystemTime) {
        self.health.send_if_modified(|h| match h {
            Health::Held {
                valid_until: v,
                expires_at: x,
            } if valid_until > *v => {
                *v = valid_until;
                *x = expires_at;
                true
            }
            _ => false,
        });
    }

    /// Ends the lease with `reason` unless it already ended; returns whether this call ended it.
    /// Cancels the lease's token either way.
    pub(crate) fn end(&self, reason: LostReason) -> bool {
        let ended = self.health.send_if_modified(|h| match h {
            Health::Held { .. } => {
                *h = Health::Ended(reason);
                true
            }
            Health::Ended(_) => false,
        });
        self.token.cancel();
        ended
    }

    /// `Ok` while the lease is held and its validity deadline has not passed; otherwise the
    /// reason it ended (a passed deadline ends it as [`LostReason::Expired`] here and now).
    pub(crate) fn check(&self) -> std::result::Result<(), LostReason> {
        match self.health() {
            Health::Held { valid_until, .. } if Instant::now() < valid_until => Ok(()),
            Health::Held { .. } => {
                self.end(LostReason::Expired);
                match self.health() {
                    Health::Ended(reason) => Err(reason),
                    Health::Held { .. } => Err(LostReason::Expired),
                }
            }
            Health::Ended(reason) => Err(reason),
        }
    }

    pub(crate) async fn lost(&self) -> LostReason {
        let mut rx = self.health.subscribe();
        match rx.wait_for(|h| matches!(h, Health::Ended(_))).await {
            Ok(h) => match *h {
                Health::Ended(reason) => reason,
                Health::Held { .. } => unreachable!("wait_for returned a held state"),
            },
            // The sender lives in `self`, so it cannot be gone while we borrow it.
            Err(_) => LostReason::Released,
        }
    }

    pub(crate) fn fencing_token(&self) -> Fence {
        Fence::new(self.key.clone(), self.owner.clone(), self.epoch)
    }

    pub(crate) async fn fence<C: GenericClient>(&self, client: &C) -> Result<SystemTime> {
        self.check().map_err(Error::lease_lost)?;
        crate::calls::fence(client, &self.key, &self.owner, self.epoch).await
    }
}

/// What a lease's handle asks of its keepalive task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Stop renewing, release the lease, and report the outcome.
    Release(oneshot::Sender<Result<()>>),
}

/// Generates the accessors that [`Lease`] and [`LeaseGuard`] share.
macro_rules! shared_accessors {
    ($ty:ident, $var:literal) => {
        impl $ty {
            /// The leased key.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("println!(\"holding {}\", ", $var, ".key());")]
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
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("println!(\"held by {}\", ", $var, ".owner());")]
            /// # }
            /// ```
            pub fn owner(&self) -> &str {
                &self.shared.owner
            }

            /// The fencing epoch of this grant: greater than every earlier epoch of the key.
            ///
            /// Present it to every resource the lease protects; see also
            #[doc = concat!("[`", stringify!($ty), "::fence`].")]
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("let epoch: i64 = ", $var, ".epoch();")]
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
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("assert!(", $var, ".ttl() > std::time::Duration::ZERO);")]
            /// # }
            /// ```
            pub fn ttl(&self) -> Duration {
                self.shared.ttl
            }

            /// Whether the lease is held now: it has not ended and its validity deadline has not
            /// passed. A `false` is final.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("if !", $var, ".is_held() {")]
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
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("if let Some(until) = ", $var, ".valid_until() {")]
            ///     println!("safe for another {:?}", until.saturating_duration_since(std::time::Instant::now()));
            /// }
            /// # }
            /// ```
            pub fn valid_until(&self) -> Option<std::time::Instant> {
                match self.shared.health() {
                    Health::Held { valid_until, .. } => Some(valid_until.into_std()),
                    Health::Ended(_) => None,
                }
            }

            /// The expiry the server last reported (server time): informative only; decisions use
            #[doc = concat!("[`", stringify!($ty), "::valid_until`], which never reads the wall clock.")]
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("println!(\"server expiry {:?}\", ", $var, ".expires_at());")]
            /// # }
            /// ```
            pub fn expires_at(&self) -> Option<SystemTime> {
                match self.shared.health() {
                    Health::Held { expires_at, .. } => Some(expires_at),
                    Health::Ended(_) => None,
                }
            }

            /// Why the lease ended, or `None` while it is held.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("if let Some(reason) = ", $var, ".ended() {")]
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
            #[doc = concat!("# async fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            /// # async fn work() {}
            /// tokio::select! {
            #[doc = concat!("    reason = ", $var, ".lost() => println!(\"lost: {reason}\"),")]
            ///     () = work() => println!("done in time"),
            /// }
            /// # }
            /// ```
            pub async fn lost(&self) -> LostReason {
                if let Err(reason) = self.shared.check() {
                    return reason;
                }
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
            #[doc = concat!("# async fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("let token = ", $var, ".token();")]
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
            #[doc = concat!("# async fn demo(", $var, ": &pglease::", stringify!($ty), ", db: &mut tokio_postgres::Client) -> pglease::Result<()> {")]
            /// let tx = db.transaction().await?;
            #[doc = concat!($var, ".fence(&tx).await?;")]
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
            #[doc = concat!("# async fn demo(", $var, ": &pglease::", stringify!($ty), ") {")]
            #[doc = concat!("let fence = ", $var, ".fencing_token();")]
            /// assert_eq!(fence.epoch(), lease.epoch());
            /// # }
            /// ```
            pub fn fencing_token(&self) -> Fence {
                self.shared.fencing_token()
            }
        }
    };
}

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
    client: Client,
    control: Option<mpsc::UnboundedSender<Command>>,
}

shared_accessors!(Lease, "lease");

impl Lease {
    pub(crate) fn new(
        shared: Arc<Shared>,
        client: Client,
        control: mpsc::UnboundedSender<Command>,
    ) -> Lease {
        Lease {
            shared,
            client,
            control: Some(control),
        }
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
        LeaseGuard {
            shared: Arc::clone(&self.shared),
        }
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
        let timing = self.client.timing(self.shared.ttl)?;
        let conn = self.client.get().await?;
        let sent = Instant::now();
        let (renewal, remaining) = crate::calls::renew_timed(
            &conn,
            self.shared.statements,
            &self.shared.key,
            &self.shared.owner,
            self.shared.epoch,
            self.shared.ttl,
        )
        .await?;
        match (LostReason::from_status(renewal.status), renewal.expires_at) {
            (None, Some(expires_at)) => {
                let remaining = remaining.unwrap_or(Duration::ZERO);
                self.shared
                    .extend(timing.valid_until(sent, remaining), expires_at);
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
                let conn = self.client.get().await?;
                let status = crate::calls::release_pooled(
                    &conn,
                    self.shared.statements,
                    &self.shared.key,
                    &self.shared.owner,
                    self.shared.epoch,
                )
                .await?;
                match LostReason::from_status(status) {
                    None => Ok(()),
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

/// A clonable view of a lease that does not own it, handed to the closure of
/// [`crate::Client::with_lease`] (and made by [`Lease::guard`]).
///
/// It reads the lease's key, epoch and state, waits for its end ([`LeaseGuard::lost`]) and fences
/// transactions with it; only the owning [`Lease`] (or `with_lease`) releases it.
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

shared_accessors!(LeaseGuard, "lease");
