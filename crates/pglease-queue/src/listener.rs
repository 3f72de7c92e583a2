//! The consumer's one listening connection: `LISTEN lease_queue`, woken by the notification
//! `<queue>:<partition>` that sends to a notifying queue emit at commit.
//!
//! Each partition worker subscribes (gets its partition's `Notify`) before its first `receive`,
//! and the connection listens before any worker starts, so a message committed after a `receive`
//! came back empty always wakes it: `Notify::notify_one` keeps a permit for a worker that is not
//! waiting yet. The connection is re-opened after a failure (with backoff); since notifications
//! sent meanwhile are lost, every worker is woken when it is listening again, and while it is down
//! the workers poll (as in pooler mode).
//!
//! Logs on target `pglease_queue::listener`: listening (`debug`), the connection lost and failed
//! attempts to open it (`warn`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, watch};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Socket};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::trace;

/// The channel the queue notifies.
pub(crate) const CHANNEL: &str = "lease_queue";

/// How long opening the listening connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The partitions' wake-ups and the connection's state, shared by the listening task and the
/// workers of one run.
pub(crate) struct Hub {
    queue: String,
    wakeups: Mutex<HashMap<u32, Arc<Notify>>>,
    listening: watch::Sender<bool>,
    /// Notifications for one of our partitions (for tests and diagnostics).
    delivered: Arc<AtomicU64>,
}

impl Hub {
    /// The wake-up of `partition` (made on first use).
    pub(crate) fn subscribe(&self, partition: u32) -> Arc<Notify> {
        let mut map = self.wakeups.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(partition).or_default())
    }

    /// Whether the connection is listening now.
    pub(crate) fn is_listening(&self) -> bool {
        *self.listening.borrow()
    }

    /// Waits until the connection listens, at most `limit`.
    pub(crate) async fn ready(&self, limit: Duration) {
        let mut rx = self.listening.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|l| *l)).await;
    }

    fn wake(&self, payload: &str) {
        let Some((queue, partition)) = payload.rsplit_once(':') else {
            return;
        };
        if queue != self.queue {
            return;
        }
        let Ok(partition) = partition.parse::<u32>() else {
            return;
        };
        let map = self.wakeups.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(notify) = map.get(&partition) {
            self.delivered.fetch_add(1, Ordering::Relaxed);
            notify.notify_one();
        }
    }

    fn wake_all(&self) {
        let map = self.wakeups.lock().unwrap_or_else(PoisonError::into_inner);
        for notify in map.values() {
            notify.notify_one();
        }
    }
}

/// Starts the listening task for `queue`; it runs until `stop` is cancelled.
pub(crate) fn start(
    connect: Connect,
    queue: &str,
    delivered: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Arc<Hub> {
    let hub = Arc::new(Hub {
        queue: queue.to_owned(),
        wakeups: Mutex::default(),
        listening: watch::channel(false).0,
        delivered,
    });
    let task_hub = Arc::clone(&hub);
    tokio::spawn(async move {
        let hub = task_hub;
        let mut failures = 0u32;
        loop {
            let opened = tokio::select! {
                () = stop.cancelled() => return,
                opened = tokio::time::timeout(CONNECT_TIMEOUT, open(&connect)) => opened,
            };
            match opened {
                Ok(Ok((client, mut notifications))) => {
                    failures = 0;
                    hub.listening.send_replace(true);
                    tracing::debug!(target: trace::LISTENER, queue = hub.queue.as_str(), "listening");
                    // Whatever was notified while not listening is lost: look again.
                    hub.wake_all();
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            payload = notifications.recv() => match payload {
                                Some(payload) => hub.wake(&payload),
                                None => break,
                            },
                        }
                    }
                    drop(client);
                    hub.listening.send_replace(false);
                    hub.wake_all();
                    tracing::warn!(
                        target: trace::LISTENER,
                        queue = hub.queue.as_str(),
                        "listening connection lost: polling until it is back"
                    );
                }
                Ok(Err(e)) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(
                        target: trace::LISTENER,
                        queue = hub.queue.as_str(),
                        error = %e,
                        sqlstate = e.code(),
                        failures,
                        "could not open the listening connection"
                    );
                }
                Err(_) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(
                        target: trace::LISTENER,
                        queue = hub.queue.as_str(),
                        failures,
                        "opening the listening connection timed out"
                    );
                }
            }
            let pause = Duration::from_millis(100)
                .saturating_mul(1 << failures.min(6))
                .min(Duration::from_secs(5));
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    });
    hub
}

/// Opens a connection and listens on [`CHANNEL`].
async fn open(connect: &Connect) -> Result<(tokio_postgres::Client, Notifications)> {
    let (client, notifications) = connect().await?;
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    Ok((client, notifications))
}
