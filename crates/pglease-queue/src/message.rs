//! What travels through the queue: a [`Message`] to send (optional key, JSON payload) and a
//! [`Delivery`] received by a consumer (the message with its id, attempts and the partition, epoch
//! and batch it was delivered under).

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The longest key the queue accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// A message to send: a JSON payload and an optional key.
///
/// Messages of one key are delivered in the order their producers' transactions committed (for
/// one transaction, in the order it sent them), and a failing message holds back only its own key.
/// A message without a key is ordered against nothing.
///
/// # Examples
///
/// ```
/// use pglease_queue::Message;
///
/// #[derive(serde::Serialize)]
/// struct Order { id: u64, total_cents: u64 }
///
/// let m = Message::new(&Order { id: 7, total_cents: 1250 })?.with_key("customer-42");
/// assert_eq!(m.key(), Some("customer-42"));
/// assert_eq!(m.payload_json(), r#"{"id":7,"total_cents":1250}"#);
///
/// let unkeyed = Message::json(serde_json::json!({"ping": true}));
/// assert_eq!(unkeyed.key(), None);
/// # Ok::<(), pglease_queue::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    key: Option<String>,
    /// The payload as JSON text (always valid JSON: it was serialized by serde_json).
    payload: String,
}

impl Message {
    /// A message whose payload is `payload` serialized to JSON, without a key.
    ///
    /// # Errors
    ///
    /// [`Error::is_payload`]: `payload` cannot be serialized (e.g. a map with non-string keys).
    ///
    /// # Examples
    ///
    /// ```
    /// let m = pglease_queue::Message::new(&vec![1, 2, 3])?;
    /// assert_eq!(m.payload_json(), "[1,2,3]");
    /// # Ok::<(), pglease_queue::Error>(())
    /// ```
    pub fn new<T: Serialize + ?Sized>(payload: &T) -> Result<Message> {
        Ok(Message {
            key: None,
            payload: serde_json::to_string(payload).map_err(Error::payload)?,
        })
    }

    /// A message with the JSON value `payload`, without a key.
    ///
    /// # Examples
    ///
    /// ```
    /// let m = pglease_queue::Message::json(serde_json::json!({"n": 1}));
    /// assert_eq!(m.payload_json(), r#"{"n":1}"#);
    /// ```
    pub fn json(payload: serde_json::Value) -> Message {
        Message {
            key: None,
            payload: payload.to_string(),
        }
    }

    /// This message with `key`: it is ordered after every earlier message of the key. A key must
    /// be 1 to [`MAX_KEY_BYTES`] bytes (checked by the server: `22023`).
    ///
    /// # Examples
    ///
    /// ```
    /// let m = pglease_queue::Message::json(serde_json::Value::Null).with_key("account-1");
    /// assert_eq!(m.key(), Some("account-1"));
    /// ```
    pub fn with_key(mut self, key: impl Into<String>) -> Message {
        self.key = Some(key.into());
        self
    }

    /// The key, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease_queue::Message::json(1.into()).key(), None);
    /// ```
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The payload as JSON text.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease_queue::Message::json(true.into()).payload_json(), "true");
    /// ```
    pub fn payload_json(&self) -> &str {
        &self.payload
    }
}

/// A message delivered to a consumer's handler: its id, key, payload and attempts, and the
/// partition, epoch and batch it was delivered under.
///
/// # Examples
///
/// ```no_run
/// # fn demo(d: &pglease_queue::Delivery) -> pglease_queue::Result<()> {
/// #[derive(serde::Deserialize)]
/// struct Order { id: u64 }
///
/// let order: Order = d.payload_as()?;
/// if d.is_redelivery() {
///     println!("order {} again (attempt {}): apply it idempotently", order.id, d.attempts());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Delivery {
    pub(crate) queue: Arc<str>,
    pub(crate) partition: u32,
    pub(crate) epoch: i64,
    pub(crate) batch_id: i64,
    pub(crate) id: i64,
    pub(crate) key: Option<String>,
    pub(crate) payload: serde_json::Value,
    pub(crate) attempts: u32,
    pub(crate) enqueued_at: SystemTime,
}

impl Delivery {
    /// The message's id (unique across all queues of the database).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("message {}", d.id());
    /// # }
    /// ```
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The message's key, if it has one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("key {:?}", d.key());
    /// # }
    /// ```
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The payload.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// let total = d.payload()["total_cents"].as_u64();
    /// # }
    /// ```
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }

    /// The payload deserialized into `T`.
    ///
    /// # Errors
    ///
    /// [`Error::is_payload`]: the payload does not fit `T`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) -> pglease_queue::Result<()> {
    /// let ids: Vec<u64> = d.payload_as()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&self.payload).map_err(Error::payload)
    }

    /// How many times the message has been delivered, this delivery included (1 the first time).
    /// Deliveries that ended in a crash, a lost lease or a forced release count.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// assert!(d.attempts() >= 1);
    /// # }
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the message was delivered before (`attempts() > 1`): its effects may already have
    /// been applied (outside the database, or by a consumer that lost its partition).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// if d.is_redelivery() { println!("check whether it was already done"); }
    /// # }
    /// ```
    pub fn is_redelivery(&self) -> bool {
        self.attempts > 1
    }

    /// When the message was enqueued (server time).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("enqueued at {:?}", d.enqueued_at());
    /// # }
    /// ```
    pub fn enqueued_at(&self) -> SystemTime {
        self.enqueued_at
    }

    /// The queue it came from.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("from {}", d.queue());
    /// # }
    /// ```
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The partition it was delivered from.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("partition {}", d.partition());
    /// # }
    /// ```
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The fencing epoch of the partition's lease it was delivered under. Pass it to external
    /// systems that reject epochs lower than the highest they have seen for this partition: that
    /// fences a former holder's late writes outside the database.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// let fencing_token = (d.queue().to_owned(), d.partition(), d.epoch());
    /// # }
    /// ```
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The batch it was delivered in (a batch re-issued to an heir keeps its id).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(d: &pglease_queue::Delivery) {
    /// println!("batch {}", d.batch_id());
    /// # }
    /// ```
    pub fn batch_id(&self) -> i64 {
        self.batch_id
    }
}
