//! Why a lease ends: [`LostReason`], what [`Lease::lost`](crate::LeaseGuard::lost) completes with
//! and what [`crate::Error::lost_reason`] reports.

use std::fmt;

/// Why a lease ended; what [`Lease::lost`](crate::LeaseGuard::lost) completes with.
///
/// Every reason means the same thing to the holder: stop acting on the lease now. The first four
/// are losses; the last three are the holder's own doing.
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
    /// This process released the lease ([`crate::Lease::release`], dropping the [`crate::Lease`],
    /// or [`crate::Client::with_lease`] finishing).
    Released,
    /// The client was shut down ([`crate::Client::shutdown`]), which releases its leases.
    Shutdown,
    /// This process handed the lease to another owner ([`crate::Lease::transfer_to`],
    /// [`crate::Election::handover`]): the key is the successor's, at a higher epoch, and this
    /// grant's epoch is fenced.
    Transferred,
}

impl LostReason {
    /// A short lower-case name: `expired`, `not_owner`, `lapsed`, `epoch_mismatch`, `released`,
    /// `shutdown`, `transferred`.
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
            LostReason::Transferred => "transferred",
        }
    }

    /// Whether the lease was lost (taken away), as opposed to ended by this process
    /// ([`LostReason::Released`], [`LostReason::Shutdown`], [`LostReason::Transferred`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use pglease::LostReason;
    /// assert!(LostReason::NotOwner.is_loss());
    /// assert!(!LostReason::Released.is_loss());
    /// ```
    pub const fn is_loss(self) -> bool {
        !matches!(
            self,
            LostReason::Released | LostReason::Shutdown | LostReason::Transferred
        )
    }
}

impl fmt::Display for LostReason {
    /// Writes [`LostReason::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
