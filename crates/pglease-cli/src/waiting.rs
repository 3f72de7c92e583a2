//! Waiting for a key: the live progress line on a terminal (who holds the key, when its lease
//! lapses unless renewed, how long we have waited) and a clean stop on SIGINT/SIGTERM, for the
//! waits of `acquire`, `run` (of a key) and `elect` ([`while_waiting`]); the key's state for the
//! message when the wait runs out ([`holder`]); and the `acquire` command's acquisition itself
//! ([`acquire`]).
//!
//! `acquire` sends one blocking `lease.acquire(..., wait)` statement, which keeps running on the
//! server after its client is gone and could still grant the key to a process that no longer
//! exists. So a caught signal cancels the statement (the protocol's cancel request) before pglease
//! exits, a grant that slipped in before the cancel is released, and for a wait the session sets
//! `client_connection_check_interval` so that the server notices a client that died without
//! cancelling. `run` and `elect` wait through the client library instead, which gives back what it
//! was granted when its wait is dropped.

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
/// How long cancelling an interrupted blocking acquire (and releasing a grant that slipped in) may
/// take before pglease exits anyway.
const CLEANUP_WITHIN: Duration = Duration::from_secs(5);

/// The outcome of an acquisition: [`acquire`]'s, or `run`'s (with a kept-alive lease as `G`).
#[derive(Debug)]
pub enum Outcome<G = pglease::Grant> {
    /// The key is ours.
    Granted(G),
    /// Another owner held the key (for a semaphore: every slot) when `wait` ran out; the key's
    /// state, if it still has one (none for a semaphore, whose holders are many).
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
    let progress = async {
        if wait.is_zero() {
            std::future::pending().await
        } else {
            show_progress(target, key, wait).await
        }
    };
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
    // One bound and one select for everything sent, so that a signal ends any step.
    let acquiring = target.answer_after(wait, async {
        // Best effort: PostgreSQL 14+ then ends the statement soon after this client vanishes.
        if !wait.is_zero() {
            let _ = client
                .batch_execute("SET client_connection_check_interval = '1s'")
                .await;
        }
        match pglease::acquire(client, key, owner, ttl, wait).await {
            Ok(grant) => Ok(grant),
            Err(e) if e.is_wait_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    });
    match while_waiting(target, key, wait, signals, acquiring).await {
        Waited::Done(Ok(Some(grant))) => Ok(Outcome::Granted(grant)),
        Waited::Done(Ok(None)) => {
            let state = target.answer(holder(client, key));
            tokio::select! {
                state = state => Ok(Outcome::Held(state?)),
                sig = signals.recv_terminating() => Ok(Outcome::Interrupted(sig)),
            }
        }
        Waited::Done(Err(e)) => Err(e),
        Waited::Interrupted(sig) => {
            // The statement still runs on the server: cancel it, and give back a grant that won
            // the race with the cancel (the next statement runs after the acquire has ended).
            // Bounded as a whole, and a second signal ends it: a hung server must not keep pglease
            // from exiting (the server then ends the statement on its own, see the module docs).
            let cleanup = async {
                let _ = client.cancel_token().cancel_query(target.tls()).await;
                if let Ok(Some(h)) = holder(client, key).await
                    && h.state.owner.as_deref() == Some(owner)
                {
                    let _ = pglease::release(client, key, owner, h.state.epoch).await;
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(CLEANUP_WITHIN, cleanup) => {}
                _ = signals.recv_terminating() => {}
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
        let state = match target.answer(holder(&observer, key)).await {
            Ok(Some(h)) if h.state.held => match (&h.state.owner, h.left()) {
                (Some(owner), Some(left)) => Seen::Held {
                    owner: owner.clone(),
                    epoch: h.state.epoch,
                    left,
                },
                _ => Seen::Unknown,
            },
            Ok(_) => Seen::Free,
            Err(_) => Seen::Unknown,
        };
        line.set(&progress_text(
            key,
            &state,
            started.elapsed(),
            wait,
            line.width(),
        ));
        tokio::time::sleep(PROGRESS_EVERY).await;
    }
}

/// What the progress line last saw of the key.
#[derive(Debug)]
enum Seen {
    Held {
        owner: String,
        epoch: i64,
        left: Duration,
    },
    Free,
    Unknown,
}

/// The progress line, fitted into `width` columns without losing its useful parts: first
/// `unless renewed` goes, then the key and the owner are shortened in the middle, so the holder's
/// epoch, when its lease lapses and how long we have waited stay visible.
fn progress_text(key: &str, seen: &Seen, waited: Duration, wait: Duration, width: usize) -> String {
    let waited = if wait >= pglease::limits::MAX_INTERVAL {
        format!("waited {} (forever)", output::duration(waited))
    } else {
        format!(
            "waited {} of {}",
            output::duration(waited),
            output::duration(wait)
        )
    };
    // Tiers: complete; without "unless renewed"; then also without "waiting for".
    let render = |key: &str, owner: &str, tier: u8| {
        let prefix = if tier < 2 { "waiting for " } else { "" };
        match seen {
            Seen::Held { epoch, left, .. } => format!(
                "{prefix}{key}: held by {owner} (epoch {epoch}), lapses in {}{}; {waited}",
                output::duration(*left),
                if tier == 0 { " unless renewed" } else { "" }
            ),
            Seen::Free => format!("{prefix}{key}: free, acquiring; {waited}"),
            Seen::Unknown => format!("{prefix}{key}; {waited}"),
        }
    };
    let owner = match seen {
        Seen::Held { owner, .. } => owner.as_str(),
        _ => "",
    };
    let columns = |s: &str| s.chars().count();
    for tier in 0..2 {
        let text = render(key, owner, tier);
        if columns(&text) <= width {
            return text;
        }
    }
    // Share what is left for the key and the owner between them (at least 5 columns each),
    // dropping "waiting for" too where even that does not fit.
    let tier = if columns(&render("", "", 1)) + 10 <= width {
        1
    } else {
        2
    };
    let short = render(key, owner, tier);
    let fixed = columns(&short) - columns(key) - columns(owner);
    let room = width.saturating_sub(fixed);
    let (key_room, owner_room) = if owner.is_empty() {
        (room, 0)
    } else {
        let half = room / 2;
        let key_room = half.max(room.saturating_sub(columns(owner)));
        (key_room, room.saturating_sub(key_room))
    };
    render(
        &elide(key, key_room.max(5)),
        &elide(owner, owner_room.max(5)),
        tier,
    )
}

/// `s` shortened to `room` columns by an ellipsis in the middle (unchanged if it fits).
fn elide(s: &str, room: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= room {
        return s.to_owned();
    }
    let keep = room.saturating_sub(1);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('\u{2026}');
    out.extend(&chars[chars.len() - tail..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str) -> Seen {
        Seen::Held {
            owner: owner.into(),
            epoch: 7,
            left: Duration::from_millis(12_300),
        }
    }

    #[test]
    fn a_line_that_fits_is_complete() {
        let text = progress_text(
            "k",
            &held("w"),
            Duration::from_secs(3),
            Duration::from_secs(60),
            200,
        );
        assert_eq!(
            text,
            "waiting for k: held by w (epoch 7), lapses in 12.3s unless renewed; waited 3.0s of 1m00s"
        );
    }

    #[test]
    fn a_long_key_and_owner_are_shortened_not_the_end_of_the_line() {
        let key = "nightly-report-for-the-accounting-department-of-the-eu-region";
        let owner = "build-host-with-a-very-long-name.example.internal-123456";
        for width in [70, 80, 100] {
            let text = progress_text(
                key,
                &held(owner),
                Duration::from_secs(3),
                Duration::from_secs(60),
                width,
            );
            assert!(text.chars().count() <= width, "{width}: {text}");
            assert!(text.ends_with("waited 3.0s of 1m00s"), "{width}: {text}");
            assert!(
                text.contains("(epoch 7), lapses in 12.3s"),
                "{width}: {text}"
            );
            assert!(text.contains("ni"), "{width}: {text}");
            assert!(text.contains('\u{2026}'), "{width}: {text}");
            if width >= 100 {
                assert!(text.starts_with("waiting for nigh"), "{width}: {text}");
            }
        }
    }

    #[test]
    fn waiting_forever_says_so() {
        let text = progress_text(
            "k",
            &Seen::Free,
            Duration::from_secs(3),
            pglease::limits::MAX_INTERVAL,
            80,
        );
        assert_eq!(
            text,
            "waiting for k: free, acquiring; waited 3.0s (forever)"
        );
    }

    #[test]
    fn elision_keeps_both_ends() {
        assert_eq!(elide("abcdefghij", 5), "ab\u{2026}ij");
        assert_eq!(elide("abc", 5), "abc");
    }
}
