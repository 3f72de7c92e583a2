//! The one listening connection of a client (`LISTEN pg_lease_released` and `LISTEN
//! pg_lease_changed`, plus any channel a [`crate::Subscription`] asked for), shared by every wait.
//!
//! A subscription is to a [`Topic`]: the releases of a key (acquire waiters), the releases of any
//! slot of a semaphore (payload `name#N`, semaphore waiters), the changes of a key (observers of
//! `lease.watch`), or one payload of another channel (the public facility, `listening.rs`).
//! Waiters subscribe *before* calling `lease.register_waiter` (or `register_slot_waiter`,
//! `watch`), and only once the connection listens on the topic's channel, so a release or change
//! that commits after the registration is always delivered. The connection is opened on the
//! first subscription and re-opened after a failure (listening again on every channel asked
//! for); since notifications sent while it was down are lost, every subscriber is woken when it
//! goes down (a spurious wake costs one acquire attempt).
//!
//! Logs on target `pglease::listener`: listening (`debug`), the connection lost (`warn`), and each
//! failed attempt to open it, with the error and its SQLSTATE (`warn`).

use std::collections::{BTreeSet, HashMap};
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
    /// A notification on another channel with exactly this payload.
    Notification { channel: String, payload: String },
}

impl Topic {
    /// The channel the connection must listen on for this topic.
    fn channel(&self) -> &str {
        match self {
            Topic::Released(_) | Topic::SlotReleased(_) => CHANNEL,
            Topic::Changed(_) => CHANGED,
            Topic::Notification { channel, .. } => channel,
        }
    }
}

/// `LISTEN` statements for `channels`, each name quoted as an identifier.
fn listen_statements<'a>(channels: impl IntoIterator<Item = &'a String>) -> String {
    channels
        .into_iter()
        .map(|c| format!("LISTEN \"{}\";", c.replace('"', "\"\"")))
        .collect()
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
type Forwarded = mpsc::UnboundedReceiver<(String, String)>;

type ConnectFuture =
    Pin<Box<dyn Future<Output = Result<(tokio_postgres::Client, Forwarded)>> + Send>>;

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
struct Hub {
    subscribers: Mutex<Subscribers>,
    next_id: AtomicU64,
    /// Notifications of pg_lease's own channels that woke at least one subscriber (for tests and
    /// diagnostics).
    delivered: AtomicU64,
    /// The channels the connection listens on now (none while it is down).
    listening: watch::Sender<BTreeSet<String>>,
    /// Every channel a subscription asked for besides pg_lease's own (listened on for good).
    extra: Mutex<BTreeSet<String>>,
    /// Wakes the listening task when `extra` grew.
    asked: Notify,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub {
            subscribers: Mutex::default(),
            next_id: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            listening: watch::channel(BTreeSet::new()).0,
            extra: Mutex::default(),
            asked: Notify::new(),
        }
    }
}

impl Hub {
    /// Whether the connection listens on `channel` now.
    fn listens_on(&self, channel: &str) -> bool {
        self.listening.borrow().contains(channel)
    }

    /// Waits until the connection listens on `channel`, until `ready_by`; whether it does.
    async fn wait_listening(&self, channel: &str, ready_by: Instant) -> bool {
        let mut listening = self.listening.subscribe();
        matches!(
            timeout_at(ready_by, listening.wait_for(|on| on.contains(channel))).await,
            Ok(Ok(_))
        )
    }

    /// Every channel to listen on: pg_lease's own and those asked for.
    fn channels(&self) -> BTreeSet<String> {
        let mut all = self
            .extra
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        all.insert(CHANNEL.to_owned());
        all.insert(CHANGED.to_owned());
        all
    }

    /// Wakes the subscribers of a notification on `channel` with `payload` (a key).
    fn wake(&self, channel: &str, payload: &str) {
        let subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let own = if channel == CHANNEL {
            vec![
                Some(Topic::Released(payload.to_owned())),
                semaphore_of(payload).map(|name| Topic::SlotReleased(name.to_owned())),
            ]
        } else if channel == CHANGED {
            vec![Some(Topic::Changed(payload.to_owned()))]
        } else {
            Vec::new()
        };
        let wake = |topic: &Topic| match subscribers.get(topic) {
            Some(list) => {
                for (_, notify) in list {
                    notify.notify_one();
                }
                true
            }
            None => false,
        };
        // Every topic is woken (no short circuit).
        let woke: Vec<bool> = own.iter().flatten().map(wake).collect();
        let woke_own = woke.contains(&true);
        wake(&Topic::Notification {
            channel: channel.to_owned(),
            payload: payload.to_owned(),
        });
        if woke_own {
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
    connect: Connect,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    started: AtomicBool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("listening", &*self.hub.listening.borrow())
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
            connect,
            shutdown,
            tracker,
            started: AtomicBool::new(false),
        }
    }

    /// Subscribes to `topic`, returning once the connection is listening; `None` if it is not
    /// listening by `ready_by` (the caller then falls back to sleeping until the lapse).
    pub(crate) async fn subscribe(&self, topic: Topic, ready_by: Instant) -> Option<Subscription> {
        let subscription = self.subscribe_now(topic);
        subscription
            .listening_by(ready_by)
            .await
            .then_some(subscription)
    }

    /// Subscribes to `topic` at once, whether or not the connection listens yet (see
    /// [`Subscription::listening_by`]); a channel not listened on yet is listened on from now on.
    pub(crate) fn subscribe_now(&self, topic: Topic) -> Subscription {
        let channel = topic.channel();
        if channel != CHANNEL && channel != CHANGED {
            let added = self
                .hub
                .extra
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(channel.to_owned());
            if added {
                self.hub.asked.notify_one();
            }
        }
        self.start();
        Subscription::new(Arc::clone(&self.hub), topic)
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
            connect: Arc::clone(&self.connect),
            shutdown: self.shutdown.clone(),
        };
        self.tracker.spawn(task.run());
    }
}

/// The listening task.
struct Task {
    hub: Arc<Hub>,
    connect: Connect,
    shutdown: CancellationToken,
}

impl Task {
    async fn run(self) {
        self.listen_until_shutdown().await;
        self.hub.listening.send_replace(BTreeSet::new());
    }

    async fn listen_until_shutdown(&self) {
        let mut failures = 0u32;
        while !self.shutdown.is_cancelled() {
            let connected = tokio::select! {
                () = self.shutdown.cancelled() => return,
                connected = self.listen() => connected,
            };
            match connected {
                Ok((client, mut notifications, channels)) => {
                    failures = 0;
                    self.hub.listening.send_replace(channels);
                    tracing::debug!(target: trace::LISTENER, channel = CHANNEL, "listening for releases");
                    loop {
                        tokio::select! {
                            () = self.shutdown.cancelled() => return,
                            notification = notifications.recv() => match notification {
                                Some((channel, key)) => self.hub.wake(&channel, &key),
                                None => break,
                            },
                            () = self.hub.asked.notified() => {
                                if !self.listen_on_new_channels(&client).await {
                                    break;
                                }
                            }
                        }
                    }
                    drop(client);
                    self.hub.listening.send_replace(BTreeSet::new());
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

    /// Opens a connection and runs `LISTEN` on it, for every channel; returns them.
    async fn listen(&self) -> Result<(tokio_postgres::Client, Forwarded, BTreeSet<String>)> {
        let (client, notifications) = timeout(CONNECT_TIMEOUT, (self.connect)())
            .await
            .map_err(|_| Error::connection("listening connection: no answer in time"))??;
        let channels = self.hub.channels();
        timeout(
            CONNECT_TIMEOUT,
            client.batch_execute(&listen_statements(&channels)),
        )
        .await
        .map_err(|_| Error::connection("LISTEN: no answer in time"))??;
        Ok((client, notifications, channels))
    }

    /// Listens on the channels asked for since the connection was opened; false if the
    /// connection failed (it is then opened again, listening on every channel).
    async fn listen_on_new_channels(&self, client: &tokio_postgres::Client) -> bool {
        let wanted = self.hub.channels();
        let new: Vec<&String> = {
            let listening = self.hub.listening.borrow();
            wanted.iter().filter(|c| !listening.contains(*c)).collect()
        };
        if new.is_empty() {
            return true;
        }
        let answered = timeout(
            CONNECT_TIMEOUT,
            client.batch_execute(&listen_statements(new)),
        )
        .await;
        match answered {
            Ok(Ok(())) => {
                self.hub.listening.send_replace(wanted);
                true
            }
            Ok(Err(e)) => {
                let e = Error::from(e);
                tracing::warn!(
                    target: trace::LISTENER,
                    error = %e,
                    sqlstate = trace::sqlstate(&e),
                    "LISTEN on a new channel failed: the connection is opened again"
                );
                false
            }
            Err(_) => {
                tracing::warn!(
                    target: trace::LISTENER,
                    "LISTEN on a new channel: no answer in time; the connection is opened again"
                );
                false
            }
        }
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

    /// Whether the connection listens on the topic's channel now.
    pub(crate) fn is_listening(&self) -> bool {
        self.hub.listens_on(self.topic.channel())
    }

    /// Waits until the connection listens on the topic's channel, until `ready_by`: from then on
    /// every notification of the topic is delivered (or the connection's loss reported).
    pub(crate) async fn listening_by(&self, ready_by: Instant) -> bool {
        self.hub
            .wait_listening(self.topic.channel(), ready_by)
            .await
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
