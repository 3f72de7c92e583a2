//! The error type of every fallible call in this crate.
//!
//! [`Error`] is opaque: callers classify it with predicates ([`Error::is_invalid_input`],
//! [`Error::is_wait_timeout`], [`Error::is_connection`], ...) and read a server error's fields with
//! [`Error::code`], [`Error::message`], [`Error::detail`] and [`Error::hint`]. The representation is
//! private so that new kinds can be added without breaking callers.

use std::error::Error as StdError;
use std::fmt;

use crate::sqlstate;

/// A `Result` whose error type defaults to [`Error`].
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
///
/// No tokio-postgres type appears in this type's API; [`std::error::Error::source`] returns the
/// underlying client error for connection errors only. A server error is described completely by its
/// accessors and `Display`, so its `source()` is `None` (error chains do not repeat the message).
pub struct Error(Box<Inner>);

struct Inner {
    kind: Kind,
    cause: Option<Box<dyn StdError + Send + Sync>>,
}

#[derive(Debug)]
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
}

impl Error {
    fn new(kind: Kind, cause: Option<Box<dyn StdError + Send + Sync>>) -> Error {
        Error(Box::new(Inner { kind, cause }))
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
    pub fn code(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the server rejected an argument: SQLSTATE `22023` ([`sqlstate::INVALID_INPUT`]).
    ///
    /// [`Error::detail`] then lists every violated constraint, separated by `"; "`.
    pub fn is_invalid_input(&self) -> bool {
        self.code() == Some(sqlstate::INVALID_INPUT)
    }

    /// Whether a waiting acquire reached its deadline: SQLSTATE `57014` ([`sqlstate::WAIT_TIMEOUT`]).
    ///
    /// PostgreSQL uses the same code for `statement_timeout` and for a cancel request; all three
    /// mean that the statement was cut short and granted nothing.
    pub fn is_wait_timeout(&self) -> bool {
        self.code() == Some(sqlstate::WAIT_TIMEOUT)
    }

    /// Whether the call got no answer (closed connection, I/O or TLS failure, malformed message).
    ///
    /// The outcome of such a call is unknown: an acquire may have been granted, a release may have
    /// freed the key. Reconnect and [`crate::inspect`] the key, or retry (acquire is idempotent for
    /// the same owner).
    pub fn is_connection(&self) -> bool {
        matches!(self.0.kind, Kind::Connection)
    }

    /// Whether the server answered in a shape pg_lease's SQL API never produces.
    pub fn is_protocol(&self) -> bool {
        matches!(self.0.kind, Kind::Protocol(_))
    }

    /// Whether the installer refused to change the database (see [`crate::install()`]).
    pub fn is_install(&self) -> bool {
        matches!(self.0.kind, Kind::Install(_))
    }

    /// Whether pg_lease was found not to be installed in the database.
    pub fn is_not_installed(&self) -> bool {
        matches!(self.0.kind, Kind::NotInstalled)
    }

    /// Whether pg_lease is installed at a version other than this library's [`crate::VERSION`].
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self.0.kind, Kind::VersionMismatch { .. })
    }

    /// The primary message: the server's for a server error, else this crate's description.
    pub fn message(&self) -> &str {
        match &self.0.kind {
            Kind::Db { message, .. } => message,
            Kind::Connection => "no answer from the server",
            Kind::Protocol(message) | Kind::Install(message) => message,
            Kind::NotInstalled => "pg_lease is not installed in this database",
            Kind::VersionMismatch { .. } => "pg_lease is installed at another version",
        }
    }

    /// The DETAIL of a server error, if it has one; `None` for every other kind.
    ///
    /// For [`Error::is_invalid_input`] it names every violated constraint, separated by `"; "`.
    pub fn detail(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { detail, .. } => detail.as_deref(),
            _ => None,
        }
    }

    /// The HINT of a server error, if it has one; `None` for every other kind.
    pub fn hint(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::Db { hint, .. } => hint.as_deref(),
            _ => None,
        }
    }

    /// The version found installed, for a version mismatch; `None` for every other kind.
    ///
    /// The expected version is this library's [`crate::VERSION`].
    pub fn found_version(&self) -> Option<&str> {
        match &self.0.kind {
            Kind::VersionMismatch { found, .. } => Some(found),
            _ => None,
        }
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
        ] {
            assert_eq!(e.code(), None);
            assert!(!e.is_invalid_input() && !e.is_wait_timeout() && !e.is_connection());
            assert!(e.detail().is_none() && e.hint().is_none());
            assert!(e.source().is_none());
            assert!(!e.to_string().is_empty());
        }
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
