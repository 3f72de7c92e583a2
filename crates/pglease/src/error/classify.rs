//! What an [`Error`] is: its predicates (one per kind, and pg_lease's own SQLSTATEs) and the
//! fields of a server error.

use super::{Error, Kind};
use crate::lost::LostReason;
use crate::results::ListedLease;
use crate::sqlstate;

impl Error {
    /// The SQLSTATE of a server error; `None` for every other kind.
    ///
    /// Any code is preserved as the server sent it, pg_lease's own (see [`crate::sqlstate`]) and
    /// PostgreSQL's alike (`42501` for a missing privilege, `40001` for a serialization failure,
    /// ...).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// match e.code() {
    ///     Some(pglease::sqlstate::FENCE_EPOCH_MISMATCH) => println!("stale epoch"),
    ///     Some(code) => println!("server error {code}"),
    ///     None => println!("not a server error: {e}"),
    /// }
    /// # }
    /// ```
    pub fn code(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether an argument was rejected: by the server, SQLSTATE `22023`
    /// ([`sqlstate::INVALID_INPUT`]), or by this library before sending anything (then
    /// [`Error::code`] is `None`; e.g. a ttl too short for
    /// [`crate::ClientBuilder::safety_margin`]).
    ///
    /// For a server error, [`Error::detail`] lists every violated constraint, separated by `"; "`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_invalid_input() {
    ///     println!("fix the call: {}", e.detail().unwrap_or(e.message()));
    /// }
    /// # }
    /// ```
    pub fn is_invalid_input(&self) -> bool {
        self.code() == Some(sqlstate::INVALID_INPUT)
            || matches!(self.0.kind, Kind::InvalidArgument(_))
    }

    /// Whether a waiting acquire reached its deadline: SQLSTATE `57014`
    /// ([`sqlstate::WAIT_TIMEOUT`]) from a server-side wait, or the client-side `timeout` of
    /// [`crate::Client::acquire`] (then [`Error::code`] is `None`).
    ///
    /// PostgreSQL uses the same code for `statement_timeout` and for a cancel request; all of these
    /// mean that the wait was cut short and granted nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_wait_timeout() {
    ///     println!("still busy; try later");
    /// }
    /// # }
    /// ```
    pub fn is_wait_timeout(&self) -> bool {
        self.code() == Some(sqlstate::WAIT_TIMEOUT) || matches!(self.0.kind, Kind::Timeout(_))
    }

    /// Whether a call was refused because the lease belongs to another role: SQLSTATE `42501`
    /// ([`sqlstate::OTHER_ROLE`]). A grant belongs to the login role of the session that made it;
    /// only that role and its members may renew, release or fence it. [`Error::message`] names the
    /// role. (The same code means any missing privilege, e.g. on `lease.force_release`.)
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_other_role() {
    ///     println!("connect as the role that acquired the lease: {}", e.message());
    /// }
    /// # }
    /// ```
    pub fn is_other_role(&self) -> bool {
        self.code() == Some(sqlstate::OTHER_ROLE)
    }

    /// Whether an acquire was refused because the server is in its failover quarantine: SQLSTATE
    /// `LE004` ([`crate::sqlstate::QUARANTINED`]). After a promotion, with the quarantine turned on
    /// (`lease.configure`), no new grant is made for the configured time; nothing was granted.
    /// [`crate::Client::acquire`] waits through a quarantine (within its timeout);
    /// [`crate::Client::try_acquire`] reports it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_quarantined() {
    ///     println!("the database was just promoted; no new grants for a while");
    /// }
    /// # }
    /// ```
    pub fn is_quarantined(&self) -> bool {
        self.code() == Some(sqlstate::QUARANTINED)
    }

    /// Whether `lease.fence` refused the guarded transaction: SQLSTATE `LE001` (not the owner),
    /// `LE002` (lapsed) or `LE003` (another epoch); see [`crate::sqlstate`].
    ///
    /// The transaction is aborted: roll it back, and stop acting on the lease.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_fenced() {
    ///     println!("stale grant ({:?}): roll back and stop", e.code());
    /// }
    /// # }
    /// ```
    pub fn is_fenced(&self) -> bool {
        matches!(
            self.code(),
            Some(
                sqlstate::FENCE_NOT_OWNER | sqlstate::FENCE_LAPSED | sqlstate::FENCE_EPOCH_MISMATCH
            )
        )
    }

    /// Whether the call needed a lease that has ended: lost (expired, taken over, released
    /// elsewhere), released, or ended by [`crate::Client::shutdown`]. [`Error::lost_reason`] says
    /// which.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_lease_lost() {
    ///     println!("stop acting on the lease");
    /// }
    /// # }
    /// ```
    pub fn is_lease_lost(&self) -> bool {
        matches!(self.0.kind, Kind::LeaseLost(_))
    }

    /// Why the lease ended, for [`Error::is_lease_lost`]; `None` for every other kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if let Some(reason) = e.lost_reason() {
    ///     println!("the lease ended: {reason}");
    /// }
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self.0.kind {
            Kind::LeaseLost(reason) => Some(reason),
            _ => None,
        }
    }

    /// Whether a grant was refused because the key's map slot is paused: a slot move is under way
    /// ([`crate::SlotMap::with_paused`], docs/CLIENT.md "Sharding"). Nothing was sent. Leases
    /// already held on the slot's keys are renewed and released as usual; try again once the move
    /// is over (a backoff of seconds fits most moves).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_slot_paused() {
    ///     println!("the key's slot is being moved; try again soon");
    /// }
    /// # }
    /// ```
    pub fn is_slot_paused(&self) -> bool {
        matches!(self.0.kind, Kind::SlotPaused(_))
    }

    /// Whether a grant was refused because it would have been sent to a shard that is not the
    /// key's authority under the slot map in force (the handle was made under an earlier map, or
    /// [`crate::ShardedClient::shard`]'s client was used for another shard's key). Nothing was
    /// sent. Route the key again ([`crate::ShardedClient::client_for`]) and retry.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_wrong_shard() {
    ///     println!("the key lives on another shard now: route it again");
    /// }
    /// # }
    /// ```
    pub fn is_wrong_shard(&self) -> bool {
        matches!(self.0.kind, Kind::WrongShard(_))
    }

    /// Whether a slot move ([`crate::SlotMove::transfer`]) found leases of the slot where there
    /// must be none: the source still held some when the wait ran out, the target held some
    /// before the move, or the source granted one during the transfer. [`Error::holders`] lists
    /// them. Do not deploy the moved map.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_slot_busy() {
    ///     for h in e.holders() {
    ///         eprintln!("{} held by {:?} at epoch {}", h.key, h.state.owner, h.state.epoch);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn is_slot_busy(&self) -> bool {
        matches!(self.0.kind, Kind::SlotBusy { .. })
    }

    /// The leases of the slot found by a refused slot move ([`Error::is_slot_busy`]), as
    /// `lease.list` reported them; empty for every other kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// println!("{} leases in the way", e.holders().len());
    /// # }
    /// ```
    pub fn holders(&self) -> &[ListedLease] {
        match &self.0.kind {
            Kind::SlotBusy { holders, .. } => holders,
            _ => &[],
        }
    }

    /// Whether the [`crate::Client`] was shut down ([`crate::Client::shutdown`]) or its pool
    /// closed.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_closed() {
    ///     println!("the client was shut down");
    /// }
    /// # }
    /// ```
    pub fn is_closed(&self) -> bool {
        matches!(self.0.kind, Kind::Closed)
    }

    /// Whether the call got no answer (closed connection, I/O or TLS failure, malformed message).
    ///
    /// The outcome of such a call is unknown: an acquire may have been granted, a release may have
    /// freed the key. Reconnect and [`crate::inspect`] the key, or retry (acquire is idempotent for
    /// the same owner).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_connection() {
    ///     println!("no answer: the outcome is unknown; inspect the key or retry");
    /// }
    /// # }
    /// ```
    pub fn is_connection(&self) -> bool {
        matches!(self.0.kind, Kind::Connection)
    }

    /// Whether the server answered in a shape pg_lease's SQL API never produces.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_protocol() {
    ///     println!("unexpected answer; is another pg_lease version installed? {e}");
    /// }
    /// # }
    /// ```
    pub fn is_protocol(&self) -> bool {
        matches!(self.0.kind, Kind::Protocol(_))
    }

    /// Whether the installer refused to change the database (see [`crate::install()`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_install() {
    ///     println!("the installer refused: {}", e.message());
    /// }
    /// # }
    /// ```
    pub fn is_install(&self) -> bool {
        matches!(self.0.kind, Kind::Install(_))
    }

    /// Whether pg_lease was found not to be installed in the database.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_not_installed() {
    ///     println!("run pglease::install first");
    /// }
    /// # }
    /// ```
    pub fn is_not_installed(&self) -> bool {
        matches!(self.0.kind, Kind::NotInstalled)
    }

    /// Whether pg_lease is installed at a version other than this library's [`crate::VERSION`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if e.is_version_mismatch() {
    ///     println!("found pg_lease {:?}", e.found_version());
    /// }
    /// # }
    /// ```
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self.0.kind, Kind::VersionMismatch { .. })
    }

    /// The primary message: the server's for a server error, else this crate's description.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// eprintln!("pg_lease: {}", e.message());
    /// # }
    /// ```
    pub fn message(&self) -> &str {
        match &self.0.kind {
            Kind::Db { message, .. } => message,
            Kind::Connection => "no answer from the server",
            Kind::Protocol(message) | Kind::Install(message) => message,
            Kind::NotInstalled => "pg_lease is not installed in this database",
            Kind::VersionMismatch { .. } => "pg_lease is installed at another version",
            Kind::LeaseLost(reason) => reason.as_str(),
            Kind::Timeout(message) | Kind::InvalidArgument(message) => message,
            Kind::Closed => "the client is shut down",
            Kind::SlotPaused(message) | Kind::WrongShard(message) => message,
            Kind::SlotBusy { message, .. } => message,
        }
    }

    /// The DETAIL of a server error, if it has one; `None` for every other kind.
    ///
    /// For [`Error::is_invalid_input`] it names every violated constraint, separated by `"; "`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// for violation in e.detail().unwrap_or("").split("; ") {
    ///     eprintln!("- {violation}");
    /// }
    /// # }
    /// ```
    pub fn detail(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { detail, .. } => detail.as_deref(),
            _ => None,
        }
    }

    /// The HINT of a server error, if it has one; `None` for every other kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if let Some(hint) = e.hint() {
    ///     eprintln!("hint: {hint}");
    /// }
    /// # }
    /// ```
    pub fn hint(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { hint, .. } => hint.as_deref(),
            _ => None,
        }
    }

    /// The version found installed, for a version mismatch; `None` for every other kind.
    ///
    /// The expected version is this library's [`crate::VERSION`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease::Error) {
    /// if let Some(found) = e.found_version() {
    ///     eprintln!("installed: {found}, expected: {}", pglease::VERSION);
    /// }
    /// # }
    /// ```
    pub fn found_version(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::VersionMismatch { found, .. } => Some(found),
            _ => None,
        }
    }
}
