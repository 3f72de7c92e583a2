//! Acquiring a key for `acquire` and `run`, waiting for it when asked: one blocking
//! `lease.acquire(..., wait)` on the server, a live progress line on a terminal (who holds the key,
//! when its lease lapses unless renewed, how long we have waited), and a clean stop on SIGINT/SIGTERM.
//!
//! The blocking acquire keeps running on the server after its client is gone, and could still grant
//! the key to a process that no longer exists. So a caught signal cancels the statement
//! (`pg_cancel_backend` through the protocol's cancel request) before pglease exits, a grant that
//! slipped in before the cancel is released, and the session sets
//! `client_connection_check_interval` so that the server notices a client that died without
//! cancelling.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Client;

use crate::connect::Target;
use crate::exit::BoxError;
use crate::output;
use crate::progress::ProgressLine;
use crate::signals::Signals;

/// How often the progress line is refreshed from the server.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The outcome of an acquisition: [`acquire`]'s, or `run`'s (with a kept-alive lease as `G`).
#[derive(Debug)]
pub enum Outcome<G = pglease::Grant> {
    /// The key is ours.
    Granted(G),
    /// Another owner held the key (when `wait` ran out); its state, if it still has one.
    Held(Option<Holder>),
    /// A signal ended the wait; nothing is held.
    Interrupted(i32),
}

/// A key's state, with the time left by the server's clock.
#[derive(Debug, Clone)]
pub struct Holder {
    /// The state as `lease.inspect` reports it.
    pub state: pglease::LeaseState,
    /// The server's clock when it was read.
    pub now: SystemTime,
}

impl Holder {
    /// Time left until the holder's lease lapses, by the server's clock.
    pub fn left(&self) -> Option<Duration> {
        self.state
            .expires_at
            .map(|x| x.duration_since(self.now).unwrap_or_default())
    }

    /// `held by worker-b (epoch 3), lapses in 12.3s unless renewed`, or `not held (counter 4)`.
    pub fn describe(&self) -> String {
        match (&self.state.owner, self.left()) {
            (Some(owner), Some(left)) if self.state.held => format!(
                "held by {owner} (epoch {}), lapses in {} unless renewed",
                self.state.epoch,
                output::duration(left)
            ),
            _ => format!("not held (epoch counter {})", self.state.epoch),
        }
    }
}

/// The server's clock (`clock_timestamp()`).
pub async fn server_now(client: &Client) -> Result<SystemTime, BoxError> {
    let row = client
        .query_one("SELECT pg_catalog.clock_timestamp()", &[])
        .await?;
    Ok(row.try_get(0)?)
}

/// `key`'s state and the server's clock; `None` for a key never leased (or purged).
pub async fn holder(client: &Client, key: &str) -> Result<Option<Holder>, BoxError> {
    let Some(state) = pglease::inspect(client, key).await? else {
        return Ok(None);
    };
    let now = server_now(client).await?;
    Ok(Some(Holder { state, now }))
}

/// How a wait ended.
#[derive(Debug)]
pub enum Waited<T> {
    /// The awaited future completed.
    Done(T),
    /// A terminating signal came first; the future was dropped.
    Interrupted(i32),
}

/// Awaits `fut` (a wait of up to `wait` for `key`) with the progress line on a terminal, giving up
/// on a terminating signal (dropping `fut`). The line is erased when this returns.
pub async fn while_waiting<T>(
    target: &Target,
    key: &str,
    wait: Duration,
    signals: &mut Signals,
    fut: impl Future<Output = T>,
) -> Waited<T> {
    let progress = show_progress(target, key, wait);
    tokio::pin!(progress);
    tokio::pin!(fut);
    loop {
        tokio::select! {
            done = &mut fut => return Waited::Done(done),
            sig = signals.recv_terminating() => return Waited::Interrupted(sig),
            () = &mut progress => {}
        }
    }
}

/// Acquires `key` for `owner` with one `lease.acquire(..., wait)` statement (no keepalive: for the
/// `acquire` command), showing progress on a terminal and giving up on a terminating signal.
pub async fn acquire(
    target: &Target,
    client: &Client,
    key: &str,
    owner: &str,
    ttl: Duration,
    wait: Duration,
    signals: &mut Signals,
) -> Result<Outcome, BoxError> {
    if wait.is_zero() {
        return match pglease::acquire(client, key, owner, ttl, Duration::ZERO).await? {
            Some(grant) => Ok(Outcome::Granted(grant)),
            None => Ok(Outcome::Held(holder(client, key).await?)),
        };
    }
    // Best effort: PostgreSQL 14+ then ends the statement soon after this client vanishes.
    let _ = client
        .batch_execute("SET client_connection_check_interval = '1s'")
        .await;
    let acquiring = pglease::acquire(client, key, owner, ttl, wait);
    match while_waiting(target, key, wait, signals, acquiring).await {
        Waited::Done(Ok(Some(grant))) => Ok(Outcome::Granted(grant)),
        Waited::Done(Ok(None)) => Ok(Outcome::Held(holder(client, key).await?)),
        Waited::Done(Err(e)) if e.is_wait_timeout() => {
            Ok(Outcome::Held(holder(client, key).await?))
        }
        Waited::Done(Err(e)) => Err(e.into()),
        Waited::Interrupted(sig) => {
            // The statement still runs on the server: cancel it, and give back a grant that won
            // the race with the cancel (the next statement runs after the acquire has ended).
            let _ = client
                .cancel_token()
                .cancel_query(tokio_postgres::NoTls)
                .await;
            if let Ok(Some(h)) = holder(client, key).await
                && h.state.owner.as_deref() == Some(owner)
            {
                let _ = pglease::release(client, key, owner, h.state.epoch).await;
            }
            Ok(Outcome::Interrupted(sig))
        }
    }
}

/// Redraws the progress line from a second connection until dropped (which erases it); never
/// draws when stderr is not a terminal or the second connection fails.
async fn show_progress(target: &Target, key: &str, wait: Duration) {
    let mut line = ProgressLine::new();
    if !line.enabled() {
        return std::future::pending().await;
    }
    let started = Instant::now();
    let Ok(observer) = target.connect().await else {
        return std::future::pending().await;
    };
    loop {
        let waited = format!(
            "waited {} of {}",
            output::duration(started.elapsed()),
            output::duration(wait)
        );
        let text = match holder(&observer, key).await {
            Ok(Some(h)) if h.state.held => format!("waiting for {key}: {}; {waited}", h.describe()),
            Ok(_) => format!("waiting for {key}: free, acquiring; {waited}"),
            Err(_) => format!("waiting for {key}; {waited}"),
        };
        line.set(&text);
        tokio::time::sleep(PROGRESS_EVERY).await;
    }
}
