//! The error type of every fallible call in this crate.
//!
//! [`Error`] is opaque: callers classify it with predicates ([`Error::is_invalid_input`],
//! [`Error::is_wait_timeout`], [`Error::is_connection`], [`Error::is_lease_lost`],
//! [`Error::is_fenced`], ...) and read a server error's fields with [`Error::code`],
//! [`Error::message`], [`Error::detail`] and [`Error::hint`]. The representation is private so that
//! new kinds can be added without breaking callers.
//!
//! This file holds the type, its kinds and their constructors; the public predicates and
//! accessors are in `classify.rs`.

use std::error::Error as StdError;
use std::fmt;

use crate::lost::LostReason;
use crate::results::ListedLease;
use crate::slot_map::SlotMapError;

mod classify;

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
///   `Some`), and [`Error::is_invalid_input`] / [`Error::is_wait_timeout`] name pg_lease's own
///   codes (see [`crate::sqlstate`]). The call changed nothing, but the surrounding transaction (if
///   any) is aborted, as for any server error.
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
/// underlying client error for connection errors only. A server error is described completely by
/// its accessors and `Display`, so its `source()` is `None` (error chains do not repeat the
/// message).
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
