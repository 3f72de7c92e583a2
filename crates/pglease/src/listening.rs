//! Listening for the application's own notifications (`NOTIFY channel, 'payload'`, `pg_notify`)
//! on the client's one listening connection ([`Client::subscribe`]), or on a connection opened
//! for the purpose ([`Listener`]) when the client has none.
//!
//! A [`Subscription`] is to one payload of one channel. It gives the guarantee the client's own
//! waits rely on: once [`Subscription::listening`] returned `true`, every notification of that
//! payload that commits is delivered ([`Subscription::notified`] completes), or the loss of the
//! connection is (every subscription is then woken, since notifications sent while it was down
//! are lost). So subscribe *before* looking at the state the notification announces, and look
//! again after every wake-up.

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::listener::{self, Topic};

/// The longest channel name PostgreSQL keeps (`NAMEDATALEN - 1`); a longer one would be cut.
const MAX_CHANNEL_BYTES: usize = 63;

impl Client {
    /// Subscribes to the notifications of `channel` whose payload is `payload`, on this client's
    /// listening connection (opened on the first subscription, re-opened after a failure); `None`
    /// if the client has none (built in [`pooler_mode`](crate::ClientBuilder::pooler_mode), or
    /// [`from_pool`](crate::ClientBuilder::from_pool) without
    /// [`listen_with`](crate::ClientBuilder::listen_with)). One process, one listening
    /// connection: the client's waits and every subscription share it.
    ///
    /// Call it inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`]: an empty channel name, one longer than 63 bytes, or one
    /// with a NUL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// if let Some(jobs) = client.subscribe("jobs", "reports")? {
    ///     // Listening before looking, so nothing sent after the look is missed.
    ///     jobs.listening(Duration::from_secs(5)).await;
    ///     loop {
    ///         // ... take the pending jobs (SELECT ... FOR UPDATE SKIP LOCKED) ...
    ///         tokio::select! {
    ///             () = jobs.notified() => {}
    ///             () = tokio::time::sleep(Duration::from_secs(30)) => {}
    ///         }
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self, channel: &str, payload: &str) -> Result<Option<Subscription>> {
        let topic = topic(channel, payload)?;
        Ok(self
            .waits()
            .listener()
            .map(|listener| Subscription(listener.subscribe_now(topic))))
    }
}

/// A listening connection of its own, for a process whose [`Client`] has none (a client in
/// [`pooler_mode`](crate::ClientBuilder::pooler_mode) whose listening connection bypasses the
/// pooler). Prefer [`Client::subscribe`]: a client that has a listening connection needs no
/// second one.
///
/// The connection is opened on the first subscription and re-opened after a failure, and closed
/// when the listener is dropped (its subscriptions then see no more notifications).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = pglease::Listener::new("host=db.example user=app dbname=app".parse()?);
/// let orders = listener.subscribe("lease_queue", "orders:0")?;
/// orders.listening(std::time::Duration::from_secs(5)).await;
/// orders.notified().await;
/// # Ok(())
/// # }
/// ```
pub struct Listener {
    listener: listener::Listener,
    _close: DropGuard,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Listener").field(&self.listener).finish()
    }
}

impl Listener {
    /// A listener that connects with `config`, without TLS. It connects nothing yet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), tokio_postgres::Error> {
    /// let listener = pglease::Listener::new("host=db.example user=app dbname=app".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(config: Config) -> Listener {
        Listener::with_tls(config, NoTls)
    }

    /// A listener that connects as `options` say (TLS included). It connects nothing yet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> pglease::Result<()> {
    /// let options = pglease::ConnectOptions::parse("host=db.example user=app sslmode=require")?;
    /// let listener = pglease::Listener::from_options(&options);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_options(options: &crate::ConnectOptions) -> Listener {
        Listener::with_tls(options.config().clone(), options.tls())
    }

    /// A listener that connects with `config` and the TLS connector `tls`. It connects nothing
    /// yet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(config: tokio_postgres::Config) {
    /// let listener = pglease::Listener::with_tls(config, tokio_postgres::NoTls);
    /// # }
    /// ```
    pub fn with_tls<T>(config: Config, tls: T) -> Listener
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let close = CancellationToken::new();
        Listener {
            listener: listener::Listener::new(
                listener::connector(config, tls),
                close.clone(),
                TaskTracker::new(),
            ),
            _close: close.drop_guard(),
        }
    }

    /// Subscribes to the notifications of `channel` whose payload is `payload`, as
    /// [`Client::subscribe`]. Call it inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`Client::subscribe`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(listener: &pglease::Listener) -> pglease::Result<()> {
    /// let subscription = listener.subscribe("jobs", "reports")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self, channel: &str, payload: &str) -> Result<Subscription> {
        Ok(Subscription(
            self.listener.subscribe_now(topic(channel, payload)?),
        ))
    }
}

/// Interest in one payload of one channel; unsubscribes on drop.
pub struct Subscription(listener::Subscription);

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("listening", &self.is_listening())
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// Completes on the first notification of the payload since subscribing (or since the last
    /// completion), or when the connection was lost (notifications may have been lost with it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a notification that arrives while nobody waits is kept for the next call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(subscription: pglease::Subscription) {
    /// subscription.notified().await;
    /// # }
    /// ```
    pub async fn notified(&self) {
        self.0.released().await;
    }

    /// Whether the connection listens on the channel now (while it does not, poll).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(subscription: &pglease::Subscription) {
    /// let poll = !subscription.is_listening();
    /// # }
    /// ```
    pub fn is_listening(&self) -> bool {
        self.0.is_listening()
    }

    /// Waits until the connection listens on the channel, at most `within`; whether it does.
    /// From then on every notification of the payload is delivered, or the connection's loss.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(subscription: &pglease::Subscription) {
    /// if !subscription.listening(std::time::Duration::from_secs(5)).await {
    ///     // Not listening yet: poll meanwhile.
    /// }
    /// # }
    /// ```
    pub async fn listening(&self, within: Duration) -> bool {
        self.0.listening_by(Instant::now() + within).await
    }
}

/// The topic of `payload` on `channel`, if the channel name is one PostgreSQL keeps as is.
fn topic(channel: &str, payload: &str) -> Result<Topic> {
    if channel.is_empty() || channel.len() > MAX_CHANNEL_BYTES || channel.contains('\0') {
        return Err(Error::invalid_argument(format!(
            "channel names are 1 to {MAX_CHANNEL_BYTES} bytes without NUL, got {channel:?}"
        )));
    }
    Ok(Topic::Notification {
        channel: channel.to_owned(),
        payload: payload.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_are_checked() {
        assert!(topic("lease_queue", "orders:0").is_ok());
        assert!(topic(&"c".repeat(63), "").is_ok());
        for bad in [String::new(), "c".repeat(64), "a\0b".to_owned()] {
            assert!(topic(&bad, "x").unwrap_err().is_invalid_input(), "{bad:?}");
        }
    }
}
