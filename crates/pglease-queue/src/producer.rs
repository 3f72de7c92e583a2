//! Sending: the [`Producer`], which sends [`Message`]s to one queue on any connection or
//! transaction (a transactional outbox) or on a [`pglease::Client`]'s pool.

use std::time::Duration;

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use crate::error::{Error, Result};
use crate::message::Message;
use crate::sql::{self, get, micros, one};
use crate::trace;

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// Whether `queue` is a valid queue name: 1 to 128 bytes of `A-Z a-z 0-9 _ . -`.
pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    let ok = !queue.is_empty()
        && queue.len() <= MAX_QUEUE_NAME_BYTES
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "queue name {queue:?} must be 1 to {MAX_QUEUE_NAME_BYTES} bytes of A-Z a-z 0-9 _ . -"
        )))
    }
}

/// Sends messages to one queue. Cheap to clone; holds no connection.
///
/// Every send is one statement on the connection or transaction you pass, so a message commits
/// or rolls back with your own writes (a **transactional outbox**: no extra table, no relay).
/// Nothing is visible to consumers before the commit, and PostgreSQL notifies waiting consumers
/// at the commit (if the queue notifies).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &mut tokio_postgres::Client) -> pglease_queue::Result<()> {
/// use pglease_queue::{Message, Producer};
///
/// let orders = Producer::new("orders")?;
/// let tx = db.transaction().await?;
/// tx.execute("INSERT INTO orders (id, customer) VALUES (7, 42)", &[]).await?;
/// orders
///     .send(&tx, &Message::json(serde_json::json!({"order": 7})).with_key("customer-42"))
///     .await?;
/// tx.commit().await?; // the row and the message commit together, or neither does
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    queue: String,
    delay: Duration,
}

impl Producer {
    /// A producer for `queue`, sending without delay.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] (no code): the name is not 1 to 128 bytes of
    /// `A-Z a-z 0-9 _ . -`. Whether the queue exists is checked by each send (`LQ001`).
    ///
    /// # Examples
    ///
    /// ```
    /// let p = pglease_queue::Producer::new("orders")?;
    /// assert_eq!(p.queue(), "orders");
    /// # Ok::<(), pglease_queue::Error>(())
    /// ```
    pub fn new(queue: impl Into<String>) -> Result<Producer> {
        let queue = queue.into();
        check_queue_name(&queue)?;
        Ok(Producer {
            queue,
            delay: Duration::ZERO,
        })
    }

    /// This producer with a delay: its messages are due `delay` after the send (server clock),
    /// at most 365 days (checked by the server: `22023`). A delayed message also holds back the
    /// later messages of its key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let later = pglease_queue::Producer::new("reminders")?.with_delay(Duration::from_secs(3600));
    /// assert_eq!(later.delay(), Duration::from_secs(3600));
    /// # Ok::<(), pglease_queue::Error>(())
    /// ```
    pub fn with_delay(mut self, delay: Duration) -> Producer {
        self.delay = delay;
        self
    }

    /// The queue this producer sends to.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease_queue::Producer::new("q")?.queue(), "q");
    /// # Ok::<(), pglease_queue::Error>(())
    /// ```
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The delay of its sends.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(pglease_queue::Producer::new("q")?.delay().is_zero());
    /// # Ok::<(), pglease_queue::Error>(())
    /// ```
    pub fn delay(&self) -> std::time::Duration {
        self.delay
    }

    /// Sends `message` on `db` (a connection, or a transaction: then it commits with it) and
    /// returns its id.
    ///
    /// # Errors
    ///
    /// - [`Error::is_queue_not_found`] (`LQ001`), [`Error::is_invalid_input`] (`22023`: a bad key,
    ///   a delay over 365 days); SQLSTATE `55000` under `session_replication_role = replica`.
    /// - [`Error::is_connection`]: no answer; outside a transaction the message may have been
    ///   sent.
    ///
    /// # Cancel safety
    ///
    /// Once sent, the statement runs whether or not the future is polled to completion; inside a
    /// transaction, roll it back to be sure.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: &tokio_postgres::Client) -> pglease_queue::Result<()> {
    /// let id = pglease_queue::Producer::new("orders")?
    ///     .send(db, &pglease_queue::Message::new(&"hello")?)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send<C: GenericClient>(&self, db: &C, message: &Message) -> Result<i64> {
        let delay = micros(self.delay);
        let key = message.key();
        let payload = message.payload_json();
        let rows = sql::query(
            db,
            sql::SEND,
            &[
                (&self.queue, Type::TEXT),
                (&key, Type::TEXT),
                (&payload, Type::TEXT),
                (&delay, Type::INT8),
            ],
        )
        .await?;
        let id: i64 = get(&one(rows, "lease_queue.send")?, 0, "lease_queue.send")?;
        tracing::debug!(target: trace::PRODUCER, queue = self.queue.as_str(), id, key, "message sent");
        Ok(id)
    }

    /// Sends `messages`, in order, in one statement on `db`, and returns their ids in the same
    /// order. Messages of one key keep their order. An empty slice sends nothing.
    ///
    /// # Errors
    ///
    /// As [`Producer::send`]; also `22023` for more than 100 000 messages.
    ///
    /// # Cancel safety
    ///
    /// As [`Producer::send`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: &tokio_postgres::Client) -> pglease_queue::Result<()> {
    /// use pglease_queue::{Message, Producer};
    /// let batch: Vec<Message> = (0..3)
    ///     .map(|i| Message::json(serde_json::json!({"step": i})).with_key("job-1"))
    ///     .collect();
    /// let ids = Producer::new("jobs")?.send_batch(db, &batch).await?;
    /// assert_eq!(ids.len(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_batch<C: GenericClient>(
        &self,
        db: &C,
        messages: &[Message],
    ) -> Result<Vec<i64>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let delay = micros(self.delay);
        let keys: Vec<Option<&str>> = messages.iter().map(Message::key).collect();
        let payloads: Vec<&str> = messages.iter().map(Message::payload_json).collect();
        let rows = sql::query(
            db,
            sql::SEND_BATCH,
            &[
                (&self.queue, Type::TEXT),
                (&keys, Type::TEXT_ARRAY),
                (&payloads, Type::TEXT_ARRAY),
                (&delay, Type::INT8),
            ],
        )
        .await?;
        if rows.len() != messages.len() {
            return Err(Error::protocol(format!(
                "lease_queue.send_batch returned {} ids for {} messages",
                rows.len(),
                messages.len()
            )));
        }
        let ids = rows
            .iter()
            .map(|row| get(row, 0, "lease_queue.send_batch"))
            .collect::<Result<Vec<i64>>>()?;
        tracing::debug!(
            target: trace::PRODUCER,
            queue = self.queue.as_str(),
            messages = ids.len(),
            "messages sent"
        );
        Ok(ids)
    }

    /// [`Producer::send`] on a connection of `client`'s pool (autocommit: the message is
    /// committed when this returns).
    ///
    /// # Errors
    ///
    /// As [`Producer::send`], plus pool errors ([`Error::is_connection`], [`Error::is_closed`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Producer::send`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease_queue::Result<()> {
    /// let producer = pglease_queue::Producer::new("orders")?;
    /// producer.send_pooled(client, &pglease_queue::Message::new(&42)?).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_pooled(&self, client: &pglease::Client, message: &Message) -> Result<i64> {
        let conn = client.pool().get().await?;
        self.send(&**conn, message).await
    }

    /// [`Producer::send_batch`] on a connection of `client`'s pool (autocommit).
    ///
    /// # Errors
    ///
    /// As [`Producer::send_batch`], plus pool errors.
    ///
    /// # Cancel safety
    ///
    /// As [`Producer::send`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease_queue::Result<()> {
    /// let producer = pglease_queue::Producer::new("orders")?;
    /// let ids = producer
    ///     .send_batch_pooled(client, &[pglease_queue::Message::new(&1)?, pglease_queue::Message::new(&2)?])
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_batch_pooled(
        &self,
        client: &pglease::Client,
        messages: &[Message],
    ) -> Result<Vec<i64>> {
        let conn = client.pool().get().await?;
        self.send_batch(&**conn, messages).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_checked_before_sending() {
        for bad in ["", "a b", "x:y", &"q".repeat(129), "é"] {
            let e = Producer::new(bad).unwrap_err();
            assert!(e.is_invalid_input() && e.code().is_none(), "{bad:?}");
        }
        for good in ["q", "orders.v2", "A-Z_09", &"q".repeat(128)] {
            assert!(Producer::new(good).is_ok(), "{good:?}");
        }
    }
}
