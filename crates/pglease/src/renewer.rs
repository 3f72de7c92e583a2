//! The renewer of one client: sends the renewals of all its leases that are due, together, in one
//! `lease.renew_many` call per ttl, and answers each lease's keepalive on its own.
//!
//! Each lease keeps its keepalive task (`keepalive.rs`), which alone decides about its lease: when
//! a renewal is due, what an answer means (extend, loss, retry with backoff), expiry, release. The
//! keepalive hands its renewal to the renewer as a request (a [`Ticket`]) with the instant it is
//! due; the renewer sleeps until the earliest due request, then takes every queued request that
//! is due within a **coalescing window** (a quarter of its lease's renewal interval) and sends
//! them: one call per distinct ttl, at most [`BATCH_MAX`] pairs each, on a pooled connection of
//! its own. Renewing a lease up to the window early only moves its deadline forward; and since the
//! leases of one call are renewed at one instant, they stay together from then on, so a thousand
//! leases of one ttl settle into one call per interval.
//!
//! The rules of `keepalive.rs` hold per lease, because the answer of a call is split per lease
//! before anyone acts on it:
//!
//! - `sent` is taken before the call is sent and is the same for every lease of it; a lease's
//!   deadline moves only on its own `ok` row: `sent + min(ttl, left) - margin`, `left` read on the
//!   server clock after the call.
//! - A call that fails or gets no answer within the attempt timeout (its connection is then
//!   discarded) is a failure of every lease in it, and each keepalive retries with its own backoff
//!   until its own deadline; a refusal in a row ends that lease alone.
//! - `busy` (the key's row locked by another transaction, e.g. a guarded transaction of the
//!   holder) is not an answer: that keepalive renews its lease on its own with `lease.renew`,
//!   which waits for the lock, bounded by its deadline, while the others are renewed on time.
//! - A request is withdrawn when its keepalive stops waiting for it (release, drop, loss,
//!   shutdown) before it was taken into a call; a request already sent is waited for by a
//!   release, so no renewal of a released lease reaches the server after the release. A lease that
//!   has ended is never put into a call.
//!
//! A call with a single lease is sent as `lease.renew` (the same judgement, and it waits for a
//! row lock the way a lone renewal always did). Logs on target `pglease::lease`: each call of
//! several leases (`debug`, "leases renewed in one call").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::lease_calls::renew_once;
use crate::pooled::{self, Connections, discard};
use crate::results::Status;
use crate::shared::Shared;
use crate::trace;

/// The most pairs sent in one `lease.renew_many` call (the server takes up to 100 000).
pub(crate) const BATCH_MAX: usize = 10_000;

/// The renewal of one lease as the renewer reports it to the keepalive.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The server judged the renewal (sent at `sent`): `ok` with the time left and the expiry,
    /// or a refusal.
    Judged {
        sent: Instant,
        status: Status,
        left: Option<(Duration, SystemTime)>,
    },
    /// The key's row was locked by another transaction: not judged; renew it on its own.
    Busy,
}

/// What a keepalive gets for its request.
pub(crate) type Answer = Result<Outcome>;

/// A queued request.
struct Pending {
    shared: Arc<Shared>,
    due: Instant,
    /// The earliest instant it may be sent: `due` minus the coalescing window.
    earliest: Instant,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Queue {
    pending: Mutex<(u64, HashMap<u64, Pending>)>,
    /// Notified when a request is queued.
    queued: Notify,
}

/// A client's renewer (cheap to clone).
#[derive(Clone)]
pub(crate) struct Renewer {
    queue: Arc<Queue>,
}

impl std::fmt::Debug for Renewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer").finish_non_exhaustive()
    }
}

/// A keepalive's request for one renewal; withdrawn on drop unless already sent.
pub(crate) struct Ticket {
    id: u64,
    queue: Arc<Queue>,
    answer: oneshot::Receiver<Answer>,
}

impl Ticket {
    /// Withdraws the request if it has not been taken into a call yet; `true` if withdrawn (then
    /// nothing of it reaches the server), `false` if it is in flight or answered.
    pub(crate) fn withdraw(&self) -> bool {
        let mut pending = self
            .queue
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.1.remove(&self.id).is_some()
    }

    /// The answer (cancel safe). A request the renewer dropped unsent (its lease had ended, or
    /// the client shut down) answers with a connection error.
    pub(crate) async fn answer(&mut self) -> Answer {
        (&mut self.answer)
            .await
            .unwrap_or_else(|_| Err(Error::connection("the renewal was not sent")))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.withdraw();
    }
}

impl Renewer {
    /// Starts the renewer of a client whose owner is `owner`; it stops at `shutdown`.
    pub(crate) fn start(
        conns: Connections,
        owner: String,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) -> Renewer {
        let queue = Arc::new(Queue::default());
        let task = Task {
            queue: Arc::clone(&queue),
            conns,
            owner: Arc::from(owner),
            shutdown,
            tracker: tracker.clone(),
        };
        tracker.spawn(task.run());
        Renewer { queue }
    }

    /// Queues the renewal of `shared`'s lease, due at `due`; it may be sent up to a quarter of
    /// the lease's renewal interval earlier, together with others.
    pub(crate) fn submit(&self, shared: Arc<Shared>, due: Instant) -> Ticket {
        let window = shared.timing.interval / 4;
        let earliest = due.checked_sub(window).unwrap_or(due);
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut pending = self
                .queue
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let id = pending.0;
            pending.0 += 1;
            pending.1.insert(
                id,
                Pending {
                    shared,
                    due,
                    earliest,
                    reply,
                },
            );
            id
        };
        self.queue.queued.notify_one();
        Ticket {
            id,
            queue: Arc::clone(&self.queue),
            answer,
        }
    }
}

/// The renewer's task.
struct Task {
    queue: Arc<Queue>,
    conns: Connections,
    owner: Arc<str>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Task {
    async fn run(self) {
        loop {
            let queued = self.queue.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            let next = {
                let pending = self
                    .queue
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                pending.1.values().map(|p| p.due).min()
            };
            let sleep = async {
                match next {
                    Some(at) => sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                () = sleep => {}
                () = queued => continue,
            }
            for (ttl, batch) in self.take_due() {
                let call = Call {
                    conns: self.conns.clone(),
                    owner: Arc::clone(&self.owner),
                    shutdown: self.shutdown.clone(),
                    ttl,
                    batch,
                };
                self.tracker.spawn(call.send());
            }
        }
    }

    /// Takes every request that may be sent now (its `earliest` has come), grouped by ttl and
    /// cut into calls of at most [`BATCH_MAX`]; requests of leases that have ended are dropped.
    fn take_due(&self) -> Vec<(Duration, Vec<Pending>)> {
        let now = Instant::now();
        let mut by_ttl: BTreeMap<Duration, Vec<Pending>> = BTreeMap::new();
        {
            let mut pending = self
                .queue
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let ids: Vec<u64> = pending
                .1
                .iter()
                .filter(|(_, p)| p.earliest <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                if let Some(p) = pending.1.remove(&id)
                    && p.shared.check().is_ok()
                {
                    by_ttl.entry(p.shared.timing.ttl).or_default().push(p);
                }
            }
        }
        let mut calls = Vec::new();
        for (ttl, mut batch) in by_ttl {
            while batch.len() > BATCH_MAX {
                let rest = batch.split_off(BATCH_MAX);
                calls.push((ttl, batch));
                batch = rest;
            }
            calls.push((ttl, batch));
        }
        calls
    }
}

/// One call: the renewals of `batch`, all with ttl `ttl`.
struct Call {
    conns: Connections,
    owner: Arc<str>,
    shutdown: CancellationToken,
    ttl: Duration,
    batch: Vec<Pending>,
}

impl Call {
    async fn send(self) {
        let Call {
            conns,
            owner,
            shutdown,
            ttl,
            batch,
        } = self;
        let Some(first) = batch.first() else { return };
        let timing = first.shared.timing;
        let sent = Instant::now();
        let deadline = sent + timing.attempt_timeout();
        if batch.len() == 1 {
            let p = batch.into_iter().next().expect("one");
            let answer = tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                answer = renew_once(&conns, &p.shared, deadline) => answer,
            };
            let _ =
                p.reply
                    .send(answer.map(|(status, left)| Outcome::Judged { sent, status, left }));
            return;
        }
        let keys: Vec<&str> = batch.iter().map(|p| p.shared.key.as_str()).collect();
        let epochs: Vec<i64> = batch.iter().map(|p| p.shared.epoch).collect();
        let answer = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            answer = renew_many_once(&conns, &owner, &keys, &epochs, ttl, deadline) => answer,
        };
        let rows = match answer {
            Ok(rows) => rows,
            Err(e) => {
                for p in batch {
                    let _ = p.reply.send(Err(e.share()));
                }
                return;
            }
        };
        let mut by_key: HashMap<String, _> = rows.into_iter().collect();
        let (mut busy, mut refused) = (0usize, 0usize);
        let n = batch.len();
        for p in batch {
            let answer = match by_key.remove(&p.shared.key) {
                Some(Some((renewal, left))) => {
                    if !renewal.status.is_ok() {
                        refused += 1;
                    }
                    Ok(Outcome::Judged {
                        sent,
                        status: renewal.status,
                        left: left.zip(renewal.expires_at),
                    })
                }
                Some(None) => {
                    busy += 1;
                    Ok(Outcome::Busy)
                }
                None => Err(Error::protocol(format!(
                    "lease.renew_many returned no row for key {:?}",
                    p.shared.key
                ))),
            };
            let _ = p.reply.send(answer);
        }
        tracing::debug!(
            target: trace::LEASE,
            owner = &*owner,
            ttl = ?ttl,
            leases = n,
            busy,
            refused,
            "leases renewed in one call"
        );
    }
}

/// One `lease.renew_many` call on a pooled connection, bounded by `deadline`; a connection that
/// gave no answer in time (or broke) is discarded.
async fn renew_many_once(
    conns: &Connections,
    owner: &str,
    keys: &[&str],
    epochs: &[i64],
    ttl: Duration,
    deadline: Instant,
) -> Result<Vec<pooled::TimedKeyRenewal>> {
    let conn = conns.checkout(deadline).await?;
    let answer = timeout_at(
        deadline,
        pooled::renew_many_timed(&conn, conns.statements(), owner, keys, epochs, ttl),
    )
    .await;
    match answer {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the renewals in time"))
        }
        Ok(Err(e)) => {
            if e.is_connection() {
                discard(conn);
            }
            Err(e)
        }
        Ok(Ok(rows)) => Ok(rows),
    }
}
