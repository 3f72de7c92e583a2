//! How a listening consumer waits for new messages: each partition worker subscribes to the
//! notification `<queue>:<partition>` on channel `lease_queue` (which sends to a notifying queue
//! emit at commit) through pglease's listening facility, on the client's one listening
//! connection when it has one, else on a connection of the consumer's own.
//!
//! A worker subscribes before its first `receive`, and a notification that arrives while it is
//! busy is kept for its next idle sleep, so a message committed after a `receive` came back empty
//! always wakes it, provided the connection listened at that `receive`. While it does not (not
//! yet open, or lost and being opened again: pglease then wakes every subscriber), the workers
//! poll, as in pooler mode.

use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::Socket;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

/// The channel the queue notifies.
const CHANNEL: &str = "lease_queue";

/// A listening consumer's way to its notifications.
pub(crate) struct Listening {
    /// The connection of its own, used only if its client has no listening connection (one in
    /// pooler mode, or built from a pool without one). It connects on its first subscription.
    own: pglease::Listener,
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening").finish_non_exhaustive()
    }
}

impl Listening {
    /// Listening with `config` and `tls` for a client that has no listening connection.
    pub(crate) fn with_tls<T>(config: Config, tls: T) -> Listening
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        Listening {
            own: pglease::Listener::with_tls(config, tls),
        }
    }

    /// The notifications of `partition` of `queue`.
    pub(crate) fn subscribe(
        &self,
        client: &pglease::Client,
        queue: &str,
        partition: u32,
    ) -> Option<pglease::Subscription> {
        self.subscribe_to(client, &format!("{queue}:{partition}"))
    }

    /// Waits until the connection listens on the queue's channel, at most `within` (so the
    /// first receives already count on notifications).
    pub(crate) async fn ready(&self, client: &pglease::Client, within: Duration) {
        if let Some(probe) = self.subscribe_to(client, "") {
            probe.listening(within).await;
        }
    }

    fn subscribe_to(
        &self,
        client: &pglease::Client,
        payload: &str,
    ) -> Option<pglease::Subscription> {
        // The channel's name is valid, so neither call fails.
        match client.subscribe(CHANNEL, payload) {
            Ok(Some(subscription)) => Some(subscription),
            Ok(None) => self.own.subscribe(CHANNEL, payload).ok(),
            Err(_) => None,
        }
    }
}
