//! The error type of every fallible call in this crate.
//!
//! [`Error`] is opaque, like [`pglease::Error`], which it wraps for everything that comes from the
//! server or the connection: classify it with predicates ([`Error::is_fenced`],
//! [`Error::is_connection`], [`Error::is_queue_not_found`], ...) and read a server error's SQLSTATE
//! with [`Error::code`] (the queue's own codes are in [`pglease::sqlstate`]).

use std::error::Error as StdError;
use std::fmt;

use pglease::sqlstate;

/// A `Result` whose error type defaults to [`Error`].
///
/// # Examples
///
/// ```
/// fn message() -> pglease_queue::Result<pglease_queue::Message> {
///     pglease_queue::Message::new(&[1, 2, 3])
/// }
/// assert!(message().is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a producer or consumer call.
///
/// Every error is one of these kinds:
///
/// - a **server error**: [`Error::code`] is its SQLSTATE (always `Some`). The queue's own codes
///   have predicates: [`Error::is_queue_not_found`] (`LQ001`), [`Error::is_batch_not_open`]
///   (`LQ002`), [`Error::is_message_not_in_batch`] (`LQ003`), [`Error::is_not_claimed`] (`LQ004`),
///   [`Error::is_in_use`] (`55006`), [`Error::is_fenced`] (`LE001`/`LE002`/`LE003`: the partition's
///   lease is not the caller's at that epoch) and [`Error::is_invalid_input`] (`22023`). The call
///   changed nothing; a surrounding transaction is aborted.
/// - a **connection** error ([`Error::is_connection`]): no answer; whether the call took effect is
///   unknown (a send may have committed).
/// - a **payload** error ([`Error::is_payload`]): a payload could not be serialized to JSON, or a
///   delivered payload could not be deserialized into the type asked for.
/// - **lease lost** ([`Error::is_lease_lost`]), **closed** ([`Error::is_closed`]), a client-side
///   **invalid argument** ([`Error::is_invalid_input`] with no code) and **protocol**
///   ([`Error::is_protocol`]: an answer the queue's SQL API never gives), as in [`pglease::Error`].
///
/// # Examples
///
/// ```
/// # fn demo(e: pglease_queue::Error) {
/// if e.is_fenced() {
///     println!("the partition is no longer ours ({:?}): stop", e.code());
/// } else if e.is_queue_not_found() {
///     println!("create the queue first");
/// } else if e.is_connection() {
///     println!("no answer; the outcome is unknown");
/// }
/// # }
/// ```
pub struct Error(Box<Kind>);

enum Kind {
    /// Anything pglease classifies: server, connection, closed, lease lost, protocol, ...
    Lease(pglease::Error),
    /// A payload that does not (de)serialize.
    Payload(serde_json::Error),
    /// A client-side argument rejected before anything was sent.
    InvalidArgument(String),
    /// An answer that does not fit the queue's SQL API.
    Protocol(String),
}

impl Error {
    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error(Box::new(Kind::InvalidArgument(message.into())))
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Error {
        Error(Box::new(Kind::Protocol(message.into())))
    }

    pub(crate) fn payload(e: serde_json::Error) -> Error {
        Error(Box::new(Kind::Payload(e)))
    }

    fn lease(&self) -> Option<&pglease::Error> {
        match &*self.0 {
            Kind::Lease(e) => Some(e),
            _ => None,
        }
    }

    /// The SQLSTATE of a server error (custom codes such as `LQ002` preserved); `None` for every
    /// other kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if e.code() == Some(pglease::sqlstate::BATCH_NOT_OPEN) {
    ///     println!("that batch is closed");
    /// }
    /// # }
    /// ```
    pub fn code(&self) -> Option<&str> {
        self.lease().and_then(pglease::Error::code)
    }

    /// Whether a fenced call (`receive`, `ack`, `nack`, `release`) was refused because the caller
    /// does not hold the partition's lease at the epoch it presented: SQLSTATE `LE001` (not the
    /// holder), `LE002` (lapsed) or `LE003` (another epoch). Nothing changed; stop acting on the
    /// partition.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if e.is_fenced() {
    ///     println!("a successor owns the partition");
    /// }
    /// # }
    /// ```
    pub fn is_fenced(&self) -> bool {
        self.lease().is_some_and(pglease::Error::is_fenced)
    }

    /// Whether the call got no answer (closed connection, I/O, a pool timeout); its outcome is
    /// unknown.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if e.is_connection() {
    ///     println!("retry: the outcome is unknown");
    /// }
    /// # }
    /// ```
    pub fn is_connection(&self) -> bool {
        self.lease().is_some_and(pglease::Error::is_connection)
    }

    /// Whether an argument was rejected: by the server (SQLSTATE `22023`, [`Error::detail`] names
    /// every violation) or by this crate before sending anything (no code).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(pglease_queue::Producer::new("no spaces").unwrap_err().is_invalid_input());
    /// ```
    pub fn is_invalid_input(&self) -> bool {
        matches!(&*self.0, Kind::InvalidArgument(_))
            || self.lease().is_some_and(pglease::Error::is_invalid_input)
    }

    /// `LQ001`: there is no queue of that name.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if e.is_queue_not_found() {
    ///     println!("SELECT lease_queue.create_queue('orders', 8)");
    /// }
    /// # }
    /// ```
    pub fn is_queue_not_found(&self) -> bool {
        self.code() == Some(sqlstate::QUEUE_NOT_FOUND)
    }

    /// `LQ002`: the batch is not the partition's open batch at the caller's epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let stale = e.is_batch_not_open();
    /// # }
    /// ```
    pub fn is_batch_not_open(&self) -> bool {
        self.code() == Some(sqlstate::BATCH_NOT_OPEN)
    }

    /// `LQ003`: the message is not in the open batch (`nack`).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let gone = e.is_message_not_in_batch();
    /// # }
    /// ```
    pub fn is_message_not_in_batch(&self) -> bool {
        self.code() == Some(sqlstate::MESSAGE_NOT_IN_BATCH)
    }

    /// `LQ004`: the partition's lease at this epoch was taken with `lease.acquire`, not claimed
    /// through the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let foreign = e.is_not_claimed();
    /// # }
    /// ```
    pub fn is_not_claimed(&self) -> bool {
        self.code() == Some(sqlstate::NOT_CLAIMED)
    }

    /// `55006` (`object_in_use`): `release` without force while the partition has an open batch.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let busy = e.is_in_use();
    /// # }
    /// ```
    pub fn is_in_use(&self) -> bool {
        self.code() == Some(sqlstate::BATCH_OPEN)
    }

    /// Whether a payload could not be serialized to JSON or deserialized from it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// match d.payload_as::<u64>() {
    ///     Err(e) if e.is_payload() => println!("not a number: {e}"),
    ///     _ => {}
    /// }
    /// # }
    /// ```
    pub fn is_payload(&self) -> bool {
        matches!(&*self.0, Kind::Payload(_))
    }

    /// Whether a lease this call needed had ended ([`pglease::Error::is_lease_lost`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if e.is_lease_lost() {
    ///     println!("lost: {:?}", e.lost_reason());
    /// }
    /// # }
    /// ```
    pub fn is_lease_lost(&self) -> bool {
        self.lease().is_some_and(pglease::Error::is_lease_lost)
    }

    /// Why the lease ended, for [`Error::is_lease_lost`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let reason: Option<pglease::LostReason> = e.lost_reason();
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<pglease::LostReason> {
        self.lease().and_then(pglease::Error::lost_reason)
    }

    /// Whether the [`pglease::Client`] was shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let closed = e.is_closed();
    /// # }
    /// ```
    pub fn is_closed(&self) -> bool {
        self.lease().is_some_and(pglease::Error::is_closed)
    }

    /// Whether the server answered in a shape the queue's SQL API never produces.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// let odd = e.is_protocol();
    /// # }
    /// ```
    pub fn is_protocol(&self) -> bool {
        matches!(&*self.0, Kind::Protocol(_))
            || self.lease().is_some_and(pglease::Error::is_protocol)
    }

    /// The primary message: the server's for a server error, else a description.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// eprintln!("queue: {}", e.message());
    /// # }
    /// ```
    pub fn message(&self) -> String {
        match &*self.0 {
            Kind::Lease(e) => e.message().to_owned(),
            Kind::Payload(e) => e.to_string(),
            Kind::InvalidArgument(m) | Kind::Protocol(m) => m.clone(),
        }
    }

    /// The DETAIL of a server error, if any (for `22023`, every violation, separated by `"; "`).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(e: &pglease_queue::Error) {
    /// if let Some(detail) = e.detail() { eprintln!("{detail}"); }
    /// # }
    /// ```
    pub fn detail(&self) -> Option<&str> {
        self.lease().and_then(pglease::Error::detail)
    }
}

impl From<pglease::Error> for Error {
    fn from(e: pglease::Error) -> Error {
        Error(Box::new(Kind::Lease(e)))
    }
}

impl From<tokio_postgres::Error> for Error {
    /// Classifies a client error as [`pglease::Error`] does: a server error keeps its SQLSTATE.
    fn from(e: tokio_postgres::Error) -> Error {
        Error::from(pglease::Error::from(e))
    }
}

impl From<pglease::deadpool_postgres::PoolError> for Error {
    fn from(e: pglease::deadpool_postgres::PoolError) -> Error {
        Error::from(pglease::Error::from(e))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Kind::Lease(e) => f.debug_tuple("Error").field(e).finish(),
            Kind::Payload(e) => f.debug_tuple("Error::Payload").field(e).finish(),
            Kind::InvalidArgument(m) => f.debug_tuple("Error::InvalidArgument").field(m).finish(),
            Kind::Protocol(m) => f.debug_tuple("Error::Protocol").field(m).finish(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Kind::Lease(e) => fmt::Display::fmt(e, f),
            Kind::Payload(e) => write!(f, "payload is not the expected JSON: {e}"),
            Kind::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Kind::Protocol(m) => write!(f, "unexpected answer from the server: {m}"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &*self.0 {
            Kind::Lease(e) => e.source(),
            Kind::Payload(e) => Some(e),
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
    fn client_side_kinds_have_no_code() {
        let invalid = Error::invalid_argument("queue");
        assert!(invalid.is_invalid_input() && invalid.code().is_none());
        assert!(!invalid.is_fenced() && !invalid.is_connection() && !invalid.is_payload());
        let payload = Error::payload(serde_json::from_str::<u8>("x").unwrap_err());
        assert!(payload.is_payload() && payload.code().is_none());
        assert!(Error::protocol("shape").is_protocol());
    }
}
