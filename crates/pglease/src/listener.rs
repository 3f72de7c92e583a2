//! The one `LISTEN pg_lease_released` connection of a client, shared by every wait.
//!
//! Waiters subscribe to a key *before* calling `lease.register_waiter`, and only once the
//! connection is listening, so a release that commits after the registration is always
//! delivered. The connection is opened on the first subscription and re-opened after a failure;
//! since notifications sent while it was down are lost, every subscriber is woken when it goes
//! down (a spurious wake costs one acquire attempt).
//!
//! Logs on target `pglease::listener`: listening (`debug`), the connection lost (`warn`), and each
//! failed attempt to open it, with the error and its SQLSTATE (`warn`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::{Instant, sleep, timeout, timeout_at};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Socket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::retry::waiting_backoff;
use crate::trace;

/// The channel `lease.release` notifies (payload: the key) when a waiter registered.
pub(crate) const CHANNEL: &str = "pg_lease_released";

/// How long opening the listening connection may take before it is retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's notifications; `None` when it has closed.
type Notifications = mpsc::UnboundedReceiver<String>;

type ConnectFuture =
    Pin<Box<dyn Future<Output = Result<(tokio_postgres::Client, Notifications)>> + Send>>;

/// Opens a new connection whose notifications are forwarded to a channel.
pub(crate) type Connect = Arc<dyn Fn() -> ConnectFuture + Send + Sync>;

/// A [`Connect`] for `config` and `tls`.
pub(crate) fn connector<T>(config: Config, tls: T) -> Connect
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + Sync,
    T::TlsConnect: Send + Sync,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    Arc::new(move || {
        let (config, tls) = (config.clone(), tls.clone());
        Box::pin(async move {
            let (client, mut connection) = config.connect(tls).await?;
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(async move {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(n) = message
                        && tx.send(n.payload().to_owned()).is_err()
                    {
                        break;
                    }
                }
            });
            Ok((client, rx))
        })
    })
}

/// The subscribers of each key: (subscription id, its wake-up).
type Subscribers = HashMap<String, Vec<(u64, Arc<Notify>)>>;

/// The subscribers and the connection state, shared with the listening task.
#[derive(Default)]
struct Hub {
    subscribers: Mutex<Subscribers>,
    next_id: AtomicU64,
    /// Notifications that woke at least one subscriber (for tests and diagnostics).
    delivered: AtomicU64,
}

impl Hub {
    fn wake(&self, key: &str) {
        let subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = subscribers.get(key) {
            self.delivered.fetch_add(1, Ordering::Relaxed);
            for (_, notify) in list {
                notify.notify_one();
            }
        }
    }

    fn wake_all(&self) {
        let subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, notify) in subscribers.values().flatten() {
            notify.notify_one();
        }
    }
}

/// A client's listening connection (opened lazily).
pub(crate) struct Listener {
    hub: Arc<Hub>,
    ready: watch::Sender<bool>,
    connect: Connect,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    started: AtomicBool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("ready", &*self.ready.borrow())
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl Listener {
    pub(crate) fn new(
        connect: Connect,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Listener {
        Listener {
            hub: Arc::default(),
            ready: watch::channel(false).0,
            connect,
            shutdown,
            tracker,
            started: AtomicBool::new(false),
        }
    }

    /// Subscribes to releases of `key`, returning once the connection is listening; `None` if it
    /// is not listening by `ready_by` (the caller then falls back to sleeping until the lapse).
    pub(crate) async fn subscribe(&self, key: &str, ready_by: Instant) -> Option<Subscription> {
        self.start();
        let subscription = Subscription::new(Arc::clone(&self.hub), key);
        let mut ready = self.ready.subscribe();
        match timeout_at(ready_by, ready.wait_for(|listening| *listening)).await {
            Ok(Ok(_)) => Some(subscription),
            _ => None,
        }
    }

    /// How many notifications woke at least one subscriber.
    pub(crate) fn delivered(&self) -> u64 {
        self.hub.delivered.load(Ordering::Relaxed)
    }

    fn start(&self) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let task = Task {
            hub: Arc::clone(&self.hub),
            ready: self.ready.clone(),
            connect: Arc::clone(&self.connect),
            shutdown: self.shutdown.clone(),
        };
        self.tracker.spawn(task.run());
    }
}

/// The listening task.
struct Task {
    hub: Arc<Hub>,
    ready: watch::Sender<bool>,
    connect: Connect,
    shutdown: CancellationToken,
}

impl Task {
    async fn run(self) {
        let mut failures = 0u32;
        while !self.shutdown.is_cancelled() {
            let connected = tokio::select! {
                () = self.shutdown.cancelled() => return,
                connected = self.listen() => connected,
            };
            match connected {
                Ok((client, mut notifications)) => {
                    failures = 0;
                    self.ready.send_replace(true);
                    tracing::debug!(target: trace::LISTENER, channel = CHANNEL, "listening for releases");
                    loop {
                        tokio::select! {
                            () = self.shutdown.cancelled() => return,
                            key = notifications.recv() => match key {
                                Some(key) => self.hub.wake(&key),
                                None => break,
                            },
                        }
                    }
                    drop(client);
                    self.ready.send_replace(false);
                    tracing::warn!(
                        target: trace::LISTENER,
                        channel = CHANNEL,
                        "listening connection lost: waiters are woken and it is opened again"
                    );
                    // Notifications may have been lost while the connection went down.
                    self.hub.wake_all();
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let delay = waiting_backoff(failures);
                    tracing::warn!(
                        target: trace::LISTENER,
                        channel = CHANNEL,
                        error = %e,
                        sqlstate = trace::sqlstate(&e),
                        failures,
                        retry_in = ?trace::ms(delay),
                        "listening connection failed, retrying"
                    );
                    tokio::select! {
                        () = self.shutdown.cancelled() => return,
                        () = sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Opens a connection and runs `LISTEN` on it.
    async fn listen(&self) -> Result<(tokio_postgres::Client, Notifications)> {
        let (client, notifications) = timeout(CONNECT_TIMEOUT, (self.connect)())
            .await
            .map_err(|_| Error::connection("listening connection: no answer in time"))??;
        timeout(
            CONNECT_TIMEOUT,
            client.batch_execute(&format!("LISTEN {CHANNEL}")),
        )
        .await
        .map_err(|_| Error::connection("LISTEN: no answer in time"))??;
        Ok((client, notifications))
    }
}

/// Interest in the releases of one key; unsubscribes on drop.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    key: String,
    id: u64,
    notify: Arc<Notify>,
}

impl Subscription {
    fn new(hub: Arc<Hub>, key: &str) -> Subscription {
        let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        hub.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .push((id, Arc::clone(&notify)));
        Subscription {
            hub,
            key: key.to_owned(),
            id,
            notify,
        }
    }

    /// Completes on the first release of the key (or loss of the connection) since subscribing,
    /// or since the last completion.
    pub(crate) async fn released(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut subscribers = self
            .hub
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = subscribers.get_mut(&self.key) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                subscribers.remove(&self.key);
            }
        }
    }
}
