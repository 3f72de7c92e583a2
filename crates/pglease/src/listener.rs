//! The one listening connection of a client (`LISTEN pg_lease_released` and `LISTEN
//! pg_lease_changed`), shared by every wait.
//!
//! A subscription is to a [`Topic`]: the releases of a key (acquire waiters), the releases of any
//! slot of a semaphore (payload `name#N`, semaphore waiters), or the changes of a key (observers
//! of `lease.watch`). Waiters subscribe *before* calling `lease.register_waiter` (or
//! `register_slot_waiter`, `watch`), and only once the connection is listening, so a release or
//! change that commits after the registration is always delivered. The connection is opened on the first subscription and re-opened after a failure;
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
/// The channel every grant, release and change of data of a watched key notifies (payload: the
/// key; `lease.watch`).
pub(crate) const CHANGED: &str = "pg_lease_changed";

/// What a subscription is woken by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Topic {
    /// A release of this key (channel `pg_lease_released`).
    Released(String),
    /// A release of any slot `name#N` of this semaphore (channel `pg_lease_released`).
    SlotReleased(String),
    /// A grant, release or change of data of this watched key (channel `pg_lease_changed`).
    Changed(String),
}

/// The semaphore whose slot `key` is (`name#N`, N in 1..=10000 without leading zeros), if any.
pub(crate) fn semaphore_of(key: &str) -> Option<&str> {
    let (name, slot) = key.rsplit_once('#')?;
    let valid = !name.is_empty()
        && (1..=5).contains(&slot.len())
        && !slot.starts_with('0')
        && slot.bytes().all(|b| b.is_ascii_digit());
    valid.then_some(name)
}

/// How long opening the listening connection may take before it is retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's notifications, as (channel, payload); `None` when it has closed.
type Notifications = mpsc::UnboundedReceiver<(String, String)>;

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
                        && tx
                            .send((n.channel().to_owned(), n.payload().to_owned()))
                            .is_err()
                    {
                        break;
                    }
                }
            });
            Ok((client, rx))
        })
    })
}

/// The subscribers of each topic: (subscription id, its wake-up).
type Subscribers = HashMap<Topic, Vec<(u64, Arc<Notify>)>>;

/// The subscribers and the connection state, shared with the listening task.
#[derive(Default)]
struct Hub {
    subscribers: Mutex<Subscribers>,
    next_id: AtomicU64,
    /// Notifications that woke at least one subscriber (for tests and diagnostics).
    delivered: AtomicU64,
}

impl Hub {
    /// Wakes the subscribers of a notification on `channel` with `payload` (a key).
    fn wake(&self, channel: &str, payload: &str) {
        let subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let topics = if channel == CHANNEL {
            vec![
                Some(Topic::Released(payload.to_owned())),
                semaphore_of(payload).map(|name| Topic::SlotReleased(name.to_owned())),
            ]
        } else if channel == CHANGED {
            vec![Some(Topic::Changed(payload.to_owned()))]
        } else {
            Vec::new()
        };
        let mut woke = false;
        for topic in topics.into_iter().flatten() {
            if let Some(list) = subscribers.get(&topic) {
                woke = true;
                for (_, notify) in list {
                    notify.notify_one();
                }
            }
        }
        if woke {
            self.delivered.fetch_add(1, Ordering::Relaxed);
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

    /// Subscribes to `topic`, returning once the connection is listening; `None` if it is not
    /// listening by `ready_by` (the caller then falls back to sleeping until the lapse).
    pub(crate) async fn subscribe(&self, topic: Topic, ready_by: Instant) -> Option<Subscription> {
        self.start();
        let subscription = Subscription::new(Arc::clone(&self.hub), topic);
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
                            notification = notifications.recv() => match notification {
                                Some((channel, key)) => self.hub.wake(&channel, &key),
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

    /// Opens a connection and runs `LISTEN` on it, for both channels.
    async fn listen(&self) -> Result<(tokio_postgres::Client, Notifications)> {
        let (client, notifications) = timeout(CONNECT_TIMEOUT, (self.connect)())
            .await
            .map_err(|_| Error::connection("listening connection: no answer in time"))??;
        timeout(
            CONNECT_TIMEOUT,
            client.batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {CHANGED}")),
        )
        .await
        .map_err(|_| Error::connection("LISTEN: no answer in time"))??;
        Ok((client, notifications))
    }
}

/// Interest in one [`Topic`]; unsubscribes on drop.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    topic: Topic,
    id: u64,
    notify: Arc<Notify>,
}

impl Subscription {
    fn new(hub: Arc<Hub>, topic: Topic) -> Subscription {
        let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        hub.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(topic.clone())
            .or_default()
            .push((id, Arc::clone(&notify)));
        Subscription {
            hub,
            topic,
            id,
            notify,
        }
    }

    /// Completes on the first notification of the topic (or loss of the connection) since
    /// subscribing, or since the last completion.
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
        if let Some(list) = subscribers.get_mut(&self.topic) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                subscribers.remove(&self.topic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_name_their_semaphore() {
        assert_eq!(semaphore_of("runners#1"), Some("runners"));
        assert_eq!(semaphore_of("a#b#10000"), Some("a#b"));
        for not_a_slot in [
            "runners",
            "runners#",
            "runners#0",
            "runners#01",
            "#3",
            "r#123456",
            "r#1a",
        ] {
            assert_eq!(semaphore_of(not_a_slot), None, "{not_a_slot}");
        }
    }

    #[test]
    fn a_slot_release_wakes_its_key_and_its_semaphore_and_a_change_only_the_watchers() {
        let hub = Arc::new(Hub::default());
        let key = Subscription::new(Arc::clone(&hub), Topic::Released("s#2".into()));
        let semaphore = Subscription::new(Arc::clone(&hub), Topic::SlotReleased("s".into()));
        let changed = Subscription::new(Arc::clone(&hub), Topic::Changed("s#2".into()));
        let pending = |s: &Subscription| {
            use futures_util::FutureExt;
            s.released().now_or_never().is_some()
        };
        hub.wake(CHANNEL, "s#2");
        assert!(pending(&key) && pending(&semaphore) && !pending(&changed));
        hub.wake(CHANGED, "s#2");
        assert!(!pending(&key) && !pending(&semaphore) && pending(&changed));
    }
}
