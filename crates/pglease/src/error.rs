//! The error type of every fallible call in this crate.
//!
//! [`Error`] is opaque: callers classify it with predicates ([`Error::is_invalid_input`],
//! [`Error::is_wait_timeout`], [`Error::is_connection`], [`Error::is_lease_lost`],
//! [`Error::is_fenced`], ...) and read a server error's fields with [`Error::code`],
//! [`Error::message`], [`Error::detail`] and [`Error::hint`]. The representation is private so that
//! new kinds can be added without breaking callers.

use std::error::Error as StdError;
use std::fmt;

use crate::lost::LostReason;
use crate::results::ListedLease;
use crate::slot_map::SlotMapError;
use crate::sqlstate;

/// A `Result` whose error type defaults to [`Error`].
///
/// # Examples
///
/// ```
/// fn parse(s: &str) -> pglease::Result<pglease::Status> {
///     s.parse()
/// }
/// assert!(parse("ok").is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a pg_lease call, the installer or the version check.
///
/// Every error is one of these kinds, each with its own predicate:
///
/// - a **server error**: PostgreSQL answered with an error; [`Error::code`] is its SQLSTATE (always
///   `Some`), and [`Error::is_invalid_input`] / [`Error::is_wait_timeout`] name pg_lease's own codes
///   (see [`crate::sqlstate`]). The call changed nothing, but the surrounding transaction (if any) is
///   aborted, as for any server error.
/// - a **connection** error ([`Error::is_connection`]): the call did not get an answer (connection
///   closed, I/O or TLS failure, a malformed message). Whether the call took effect is **unknown**.
/// - a **protocol** error ([`Error::is_protocol`]): the server answered with a row that pg_lease's
///   SQL API never returns (wrong shape, unknown status string). Usually a sign that a different
///   version of the SQL API is installed.
/// - an **install** error ([`Error::is_install`]): the installer found a state it will not change.
/// - **not installed** ([`Error::is_not_installed`]) and **version mismatch**
///   ([`Error::is_version_mismatch`]), from [`crate::check_version`] and the installer.
/// - **lease lost** ([`Error::is_lease_lost`]): a [`crate::Lease`] ended before the call could use
///   it; [`Error::lost_reason`] says why.
/// - **fenced** ([`Error::is_fenced`]): `lease.fence` refused a guarded transaction (SQLSTATE
///   `LE001`, `LE002` or `LE003`, a server error, so [`Error::code`] is `Some`).
/// - a **client-side timeout** of [`crate::Client::acquire`] ([`Error::is_wait_timeout`], no code),
///   a **client-side invalid argument** ([`Error::is_invalid_input`], no code) and a **closed**
///   client ([`Error::is_closed`]).
/// - **sharding** refusals, all client-side (no code): a grant of a key whose map slot is paused
///   ([`Error::is_slot_paused`]), a grant sent to a shard that is not the key's authority
///   ([`Error::is_wrong_shard`]), and a slot move that found leases of the slot where there must
///   be none ([`Error::is_slot_busy`], with [`Error::holders`]).
///
/// # Examples
///
/// ```
/// # fn demo(e: pglease::Error) {
/// if e.is_fenced() {
///     println!("stale lease ({:?}): roll back and stop", e.code());
/// } else if e.is_lease_lost() {
///     println!("lease lost: {:?}", e.lost_reason());
/// } else if e.is_connection() {
///     println!("no answer; the outcome is unknown");
/// }
/// # }
/// ```
///
/// No tokio-postgres type appears in this type's API; [`std::error::Error::source`] returns the
/// underlying client error for connection errors only. A server error is described completely by its
/// accessors and `Display`, so its `source()` is `None` (error chains do not repeat the message).
pub struct Error(Box<Inner>);

struct Inner {
    kind: Kind,
    cause: Option<Box<dyn StdError + Send + Sync>>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// The server reported an error.
    Db {
        code: String,
        severity: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
    /// No answer: connection closed, I/O, TLS or a malformed message.
    Connection,
    /// An answer that does not fit pg_lease's SQL API.
    Protocol(String),
    /// The installer refuses to change the database.
    Install(String),
    /// pg_lease is not installed in the database.
    NotInstalled,
    /// pg_lease is installed, at a version other than this library's.
    VersionMismatch { expected: String, found: String },
    /// The lease ended (lost, released or shut down) before or during the call.
    LeaseLost(LostReason),
    /// A client-side deadline passed (`Client::acquire`'s timeout).
    Timeout(String),
    /// A client-side argument was rejected before anything was sent.
    InvalidArgument(String),
    /// The client was shut down.
    Closed,
    /// A grant of a key whose map slot is paused (a slot move is under way).
    SlotPaused(String),
    /// A grant sent to a shard that is not the key's authority under the map in force.
    WrongShard(String),
    /// A slot move found leases of the slot where there must be none.
    SlotBusy {
        message: String,
        holders: Vec<ListedLease>,
    },
}

impl Error {
    fn new(kind: Kind, cause: Option<Box<dyn StdError + Send + Sync>>) -> Error {
        Error(Box::new(Inner { kind, cause }))
    }

    /// A copy of this error, for each lease of a batched renewal that failed as a whole (the
    /// cause, if any, is kept as its text).
    pub(crate) fn share(&self) -> Error {
        Error::new(
            self.0.kind.clone(),
            self.0.cause.as_ref().map(|cause| cause.to_string().into()),
        )
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Error {
        Error::new(Kind::Protocol(message.into()), None)
    }

    pub(crate) fn install(message: impl Into<String>) -> Error {
        Error::new(Kind::Install(message.into()), None)
    }

    pub(crate) fn not_installed() -> Error {
        Error::new(Kind::NotInstalled, None)
    }

    pub(crate) fn lease_lost(reason: LostReason) -> Error {
        Error::new(Kind::LeaseLost(reason), None)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Error {
        Error::new(Kind::Timeout(message.into()), None)
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Kind::InvalidArgument(message.into()), None)
    }

    pub(crate) fn slot_paused(message: impl Into<String>) -> Error {
        Error::new(Kind::SlotPaused(message.into()), None)
    }

    pub(crate) fn wrong_shard(message: impl Into<String>) -> Error {
        Error::new(Kind::WrongShard(message.into()), None)
    }

    pub(crate) fn slot_busy(message: impl Into<String>, holders: Vec<ListedLease>) -> Error {
        Error::new(
            Kind::SlotBusy {
                message: message.into(),
                holders,
            },
            None,
        )
    }

    pub(crate) fn closed() -> Error {
        Error::new(Kind::Closed, None)
    }

    pub(crate) fn connection(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Error {
        Error::new(Kind::Connection, Some(cause.into()))
    }

    /// A pool error: backend errors keep their classification; anything else (a pool timeout, a
    /// closed pool, a hook failure) is a connection error.
    pub(crate) fn pool(e: deadpool_postgres::PoolError) -> Error {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Error::from(e),
            deadpool_postgres::PoolError::Closed => Error::closed(),
            other => Error::connection(other.to_string()),
        }
    }

    pub(crate) fn version_mismatch(expected: &str, found: &str) -> Error {
        Error::new(
            Kind::VersionMismatch {
                expected: expected.to_owned(),
                found: found.to_owned(),
            },
            None,
        )
    }

    /// The SQLSTATE of a server error; `None` for every other kind.
    ///
    /// Any code is preserved as the server sent it, pg_lease's own (see [`crate::sqlstate`]) and
    /// PostgreSQL's alike (`42501` for a missing privilege, `40001` for a serialization failure, ...).
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
    /// [`Error::code`] is `None`; e.g. a ttl too short for [`crate::ClientBuilder::safety_margin`]).
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

    /// Whether a waiting acquire reached its deadline: SQLSTATE `57014` ([`sqlstate::WAIT_TIMEOUT`])
    /// from a server-side wait, or the client-side `timeout` of [`crate::Client::acquire`] (then
    /// [`Error::code`] is `None`).
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

    /// Whether the [`crate::Client`] was shut down ([`crate::Client::shutdown`]) or its pool closed.
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

impl From<SlotMapError> for Error {
    /// A slot map that could not be made or was refused: [`Error::is_invalid_input`], no code.
    fn from(e: SlotMapError) -> Error {
        Error::invalid_argument(e.to_string())
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    /// Classifies a pool error: a backend error as [`From<tokio_postgres::Error>`] does, a closed
    /// pool as [`Error::is_closed`], anything else (a timeout, a hook) as a connection error.
    fn from(e: deadpool_postgres::PoolError) -> Error {
        Error::pool(e)
    }
}

impl From<tokio_postgres::Error> for Error {
    /// Classifies a client error: a server error keeps its SQLSTATE and fields; anything else is a
    /// connection error with the client error as its source.
    fn from(e: tokio_postgres::Error) -> Error {
        match e.as_db_error() {
            Some(db) => Error::new(
                Kind::Db {
                    code: db.code().code().to_owned(),
                    severity: db.severity().to_owned(),
                    message: db.message().to_owned(),
                    detail: db.detail().map(str::to_owned),
                    hint: db.hint().map(str::to_owned),
                },
                Some(Box::new(e)),
            ),
            None => Error::new(Kind::Connection, Some(Box::new(e))),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("cause", &self.0.cause)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.kind {
            Kind::Db {
                code,
                severity,
                message,
                detail,
                ..
            } => {
                write!(f, "{severity}: {message}")?;
                if let Some(detail) = detail {
                    write!(f, ": {}", detail.trim_end_matches('.'))?;
                }
                write!(f, " (SQLSTATE {code})")
            }
            Kind::Connection => f.write_str("no answer from the server, outcome unknown"),
            Kind::Protocol(message) => write!(f, "unexpected answer from the server: {message}"),
            Kind::Install(message) => write!(f, "cannot install pg_lease: {message}"),
            Kind::NotInstalled => f.write_str("pg_lease is not installed in this database"),
            Kind::VersionMismatch { expected, found } => write!(
                f,
                "pg_lease {found} is installed, but this library speaks version {expected}"
            ),
            Kind::LeaseLost(reason) => write!(f, "the lease has ended: {reason}"),
            Kind::Timeout(message) => write!(f, "timed out: {message}"),
            Kind::InvalidArgument(message) => write!(f, "invalid argument: {message}"),
            Kind::Closed => f.write_str("the client is shut down"),
            Kind::SlotPaused(message) => write!(f, "slot paused: {message}"),
            Kind::WrongShard(message) => write!(f, "wrong shard: {message}"),
            Kind::SlotBusy { message, .. } => write!(f, "slot busy: {message}"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self.0.kind {
            Kind::Connection => self.0.cause.as_deref().map(|e| e as _),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }

    #[test]
    fn non_server_kinds_have_no_code() {
        for e in [
            Error::protocol("x"),
            Error::install("y"),
            Error::not_installed(),
            Error::version_mismatch("0.1.0", "0.2.0"),
            Error::lease_lost(LostReason::Expired),
            Error::closed(),
            Error::slot_paused("p"),
            Error::wrong_shard("w"),
            Error::slot_busy("b", Vec::new()),
        ] {
            assert_eq!(e.code(), None);
            assert!(!e.is_invalid_input() && !e.is_wait_timeout() && !e.is_connection());
            assert!(!e.is_fenced());
            assert!(e.detail().is_none() && e.hint().is_none());
            assert!(e.source().is_none());
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn client_side_kinds_share_the_server_predicates() {
        let timeout = Error::timeout("acquire");
        assert!(timeout.is_wait_timeout() && timeout.code().is_none());
        let invalid = Error::invalid_argument("ttl");
        assert!(invalid.is_invalid_input() && invalid.code().is_none());
        let lost = Error::lease_lost(LostReason::NotOwner);
        assert!(lost.is_lease_lost());
        assert_eq!(lost.lost_reason(), Some(LostReason::NotOwner));
        assert!(Error::closed().is_closed());
        assert!(Error::slot_paused("p").is_slot_paused());
        assert!(Error::wrong_shard("w").is_wrong_shard());
        let busy = Error::slot_busy("b", Vec::new());
        assert!(busy.is_slot_busy() && busy.holders().is_empty());
        assert!(Error::closed().holders().is_empty());
    }

    #[test]
    fn version_mismatch_reports_both_versions() {
        let e = Error::version_mismatch("0.1.0", "0.2.0");
        assert!(e.is_version_mismatch());
        assert_eq!(e.found_version(), Some("0.2.0"));
        assert_eq!(
            e.to_string(),
            "pg_lease 0.2.0 is installed, but this library speaks version 0.1.0"
        );
    }
}
