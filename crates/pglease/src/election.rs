//! Leader election on one key: [`Election`] campaigns (blocks until leader, yielding the
//! leadership as a [`Lease`]), resigns, hands the leadership to a named successor, and observes
//! leader changes as a stream of [`Leader`]s.
//!
//! The leader is whoever holds the key; its epoch numbers the term, so terms strictly increase and
//! a former leader is fenced out by the epoch. A candidate may campaign with data
//! ([`Election::with_data`], e.g. its address), which the leader's [`Leader::data`] carries.
//! Candidates wait like [`Client::acquire`] (no polling). Observers watch the key (`lease.watch`
//! and channel `pg_lease_changed`), so every grant, release and change of data wakes them, and
//! they wake at the leader's lapse time (a lapse notifies nothing); they look again at least every
//! 15 minutes, which keeps the watch mark (it lasts an hour). Without a listening connection
//! (pooler mode) they sleep until the lapse, at most `poll_cap`, and while there is no leader
//! re-check every `min(ttl / 4, 1 s)`.
//!
//! Like etcd's election recipe on its `Session`, a campaign is its client's public acquire
//! ([`Client::acquire_with`], with the candidate's data, waiting without bound) and a resignation
//! is [`Lease::release`]. It reaches inside the client in two places, on purpose: it marks the
//! lease as a leadership, so that the loss of a leadership is logged where, and when, every loss
//! is (`Shared::end`: a task watching [`Lease::lost`] would log it only some time after the loss
//! is signalled); and the observer waits on the client's one listening connection through the
//! waiting interface every wait of the client uses (`wait.rs`: subscribe, `lease.watch`, sleep
//! until a change or the lapse), so that it needs no connection of its own.
//!
//! A handover is [`Lease::transfer_to`]: the successor, campaigning, waits as every acquire does
//! (registered as the key's waiter, listening for its release), so the transfer's notification
//! wakes it and its acquire returns the transferred grant (`wait.rs` tries again at once when the
//! holder it finds is its own owner).
//!
//! Logs on target `pglease::election` (`info`): leader elected (in the `campaign` span), leadership
//! resigned, leadership handed over, and each leader change an observer sees; the loss of a leadership is logged (`warn`)
//! where every loss is, `Shared::end`.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::listener::Subscription;
use crate::retry::{is_transient, waiting_backoff};
use crate::trace;

/// How often an observer looks again even without a notification: keeps its `lease.watch` mark
/// (which lasts an hour and is renewed when less than 30 minutes are left) from running out.
const WATCH_REFRESH: Duration = Duration::from_secs(15 * 60);

/// The holder of an election's key: the leader, its term, and the data it campaigned with.
///
/// # Examples
///
/// ```
/// let leader = pglease::Leader::new("node-1", 7, Some("10.0.0.7:8080".into()));
/// assert_eq!(leader.to_string(), "node-1@7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's owner identity ([`Client::owner`]).
    pub owner: String,
    /// The term: the epoch of the leader's grant, greater than every earlier term.
    pub epoch: i64,
    /// What the leader advertises (e.g. its address): the data it campaigned with
    /// ([`Election::with_data`]) or last set ([`Lease::set_data`]); `None` if it set none.
    pub data: Option<String>,
}

impl Leader {
    /// A leader: `owner` holds the election's key at term `epoch` and advertises `data` (for
    /// comparing with what [`Election::observe`] reports, or caching one).
    pub fn new(owner: impl Into<String>, epoch: i64, data: Option<String>) -> Leader {
        Leader {
            owner: owner.into(),
            epoch,
            data,
        }
    }

    /// The leader of a key in `state`, if it is held.
    fn of(state: crate::results::LeaseState) -> Option<Leader> {
        let epoch = state.epoch;
        let data = state.data;
        state
            .owner
            .filter(|_| state.held)
            .map(|owner| Leader { owner, epoch, data })
    }
}

impl fmt::Display for Leader {
    /// `owner@epoch` (the data is not shown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.owner, self.epoch)
    }
}

/// A leader election: one key, held by the leader with a keepalive. Made by [`Client::election`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let election = client.election("scheduler", Duration::from_secs(10));
/// let leadership = election.campaign().await?;
/// tokio::select! {
///     reason = leadership.lost() => println!("deposed: {reason}"),
///     () = async { /* lead */ } => election.resign(leadership).await?,
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    key: String,
    ttl: Duration,
    data: Option<String>,
}

impl Client {
    /// A leader election on key `name`, whose leader holds it for `ttl` at a time (renewed by
    /// the keepalive).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let election = client.election("scheduler-leader", Duration::from_secs(10));
    /// let leadership = election.campaign().await?;
    /// println!("leading at epoch {}", leadership.epoch());
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: impl Into<String>, ttl: Duration) -> Election {
        Election {
            client: self.clone(),
            key: name.into(),
            ttl,
            data: None,
        }
    }
}

impl Election {
    /// The same election, campaigning with `data`: what this candidate advertises once it leads
    /// (e.g. its address), read by observers as [`Leader::data`]. At most
    /// [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes ([`Election::campaign`] fails
    /// with [`Error::is_invalid_input`] otherwise). The leader changes it with
    /// [`Lease::set_data`] on its leadership.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let election = client.election("scheduler", Duration::from_secs(10)).with_data("10.0.0.7:8080");
    /// let leadership = election.campaign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_data(mut self, data: impl Into<String>) -> Election {
        self.data = Some(data.into());
        self
    }

    /// The data this candidate campaigns with, if any ([`Election::with_data`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let election = client.election("scheduler", std::time::Duration::from_secs(10));
    /// assert_eq!(election.data(), None);
    /// # }
    /// ```
    pub fn data(&self) -> Option<&str> {
        self.data.as_deref()
    }

    /// The election's key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let election = client.election("scheduler", std::time::Duration::from_secs(10));
    /// assert_eq!(election.key(), "scheduler");
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until this client is the leader and returns the leadership, a [`Lease`] on the key
    /// whose epoch is the term. Waits without polling and without bound (wrap it in
    /// `tokio::time::timeout` to bound it).
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`], except that there is no timeout; [`Error::is_invalid_input`] for
    /// data over [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (as [`Client::acquire`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: &pglease::Election) -> pglease::Result<()> {
    /// let leadership = election.campaign().await?;
    /// println!("leader for term {}", leadership.epoch());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self) -> Result<Lease> {
        let span = tracing::info_span!(
            target: trace::ELECTION,
            "campaign",
            key = self.key.as_str(),
            owner = self.client.owner(),
        );
        async {
            let mut request = self.client.acquire_with(self.key.as_str(), self.ttl);
            if let Some(data) = &self.data {
                request = request.data(data.as_str());
            }
            let leadership = request.acquire(Duration::MAX).await?;
            leadership.shared().mark_leadership();
            tracing::info!(
                target: trace::ELECTION,
                key = self.key.as_str(),
                owner = leadership.owner(),
                epoch = leadership.epoch(),
                "leader elected"
            );
            Ok(leadership)
        }
        .instrument(span)
        .await
    }

    /// Gives up the leadership: releases the key, so a waiting candidate takes over at once.
    ///
    /// # Errors
    ///
    /// As [`Lease::release`]; also [`Error::is_invalid_input`] if `leadership` is not a lease on
    /// this election's key (it is then released anyway).
    ///
    /// # Cancel safety
    ///
    /// As [`Lease::release`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: &pglease::Election) -> pglease::Result<()> {
    /// let leadership = election.campaign().await?;
    /// election.resign(leadership).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(&self, leadership: Lease) -> Result<()> {
        let ours = leadership.key() == self.key;
        let (owner, epoch) = (leadership.owner().to_owned(), leadership.epoch());
        leadership.release().await?;
        if ours {
            tracing::info!(
                target: trace::ELECTION,
                key = self.key.as_str(),
                owner,
                epoch,
                "leadership resigned"
            );
        }
        if ours {
            Ok(())
        } else {
            Err(Error::invalid_argument(
                "resign: the lease is not on this election's key",
            ))
        }
    }

    /// Hands the leadership to the candidate `to` (its [`Client::owner`]): the key is transferred
    /// to it in one step ([`Lease::transfer_to`] with the election's ttl), so there is no moment
    /// without a leader, the successor's term (epoch) is higher than this one's, and this term is
    /// fenced from then on.
    ///
    /// A successor already campaigning ([`Election::campaign`], by a client whose owner is `to`,
    /// under the same login role or a member of it) is woken by the transfer — it waits as a
    /// registered waiter listening for the key's release — and its campaign returns the
    /// transferred leadership without polling. A successor that campaigns later gets it at once. If
    /// no candidate with that owner campaigns within the election's ttl, the grant lapses and the
    /// other candidates compete as after a crash. The transfer names an owner, campaigning or not.
    ///
    /// # Errors
    ///
    /// As [`Lease::transfer_to`] (the leadership is consumed in every case); also
    /// [`Error::is_invalid_input`] if `leadership` is not a lease on this election's key (it is
    /// then released, as by [`Election::resign`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Lease::transfer_to`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: &pglease::Election) -> pglease::Result<()> {
    /// let leadership = election.campaign().await?;
    /// // ... lead, then step down in favour of node-2 (campaigning with its own client) ...
    /// let handover = election.handover(leadership, "node-2").await?;
    /// println!("node-2 leads from term {}", handover.epoch);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn handover(&self, leadership: Lease, to: &str) -> Result<crate::Handover> {
        if leadership.key() != self.key {
            let _ = leadership.release().await;
            return Err(Error::invalid_argument(
                "handover: the lease is not on this election's key",
            ));
        }
        let handover = leadership.transfer_to(to, self.ttl).await?;
        tracing::info!(
            target: trace::ELECTION,
            key = self.key.as_str(),
            owner = handover.from_owner.as_str(),
            epoch = handover.from_epoch,
            to_owner = handover.to_owner.as_str(),
            to_epoch = handover.epoch,
            "leadership handed over"
        );
        Ok(handover)
    }

    /// The current leader, by the server clock; `None` if there is none.
    ///
    /// # Errors
    ///
    /// As [`Client::inspect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: &pglease::Election) -> pglease::Result<()> {
    /// match election.leader().await? {
    ///     Some(leader) => println!("led by {leader}"),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.client.inspect(&self.key).await?.and_then(Leader::of))
    }

    /// A stream of leader changes: the current leader first (`None`: no leader), then every
    /// change as it is observed.
    ///
    /// A change is a new leader, no leader, or new data of the same leader. The observer watches
    /// the key (`lease.watch`) on the client's shared `LISTEN` connection, so every grant,
    /// release and change of data wakes it at once (a new leader after no leader too), and it
    /// wakes at the leader's lapse time (a lapse notifies nothing); it never polls. Without a
    /// listening connection ([pooler mode](crate::ClientBuilder::pooler_mode)) it sleeps until
    /// the lapse, at most [`poll_cap`](crate::ClientBuilder::poll_cap), and while there is no
    /// leader looks again every `min(ttl / 4, 1 s)`. Terms only increase; a leader that comes and
    /// goes between two observations may be skipped. Errors are yielded and then retried with
    /// backoff; the stream ends when the client shuts down. It does its work only while polled,
    /// and holds no pooled connection between polls.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: &pglease::Election) {
    /// use futures_util::StreamExt;
    ///
    /// let mut changes = election.observe();
    /// while let Some(change) = changes.next().await {
    ///     match change {
    ///         Ok(Some(leader)) => println!("leader: {leader}"),
    ///         Ok(None) => println!("no leader"),
    ///         Err(e) => eprintln!("observer: {e}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn observe(&self) -> LeaderStream {
        let state = Observer {
            client: self.client.clone(),
            key: self.key.clone(),
            leaderless_poll: (self.ttl / 4)
                .clamp(Duration::from_millis(10), Duration::from_secs(1)),
            last: None,
            wait: Wait::None,
            failures: 0,
        };
        LeaderStream {
            inner: Box::pin(futures_util::stream::unfold(
                state,
                |mut state| async move {
                    let item = state.next().await?;
                    Some((item, state))
                },
            )),
        }
    }
}

/// The stream of [`Election::observe`]: `Ok(Some(leader))` or `Ok(None)` (no leader) per change.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(election: &pglease::Election) {
/// use futures_util::StreamExt;
///
/// let first = election.observe().next().await;
/// # }
/// ```
pub struct LeaderStream {
    inner: Pin<Box<dyn Stream<Item = Result<Option<Leader>>> + Send>>,
}

impl fmt::Debug for LeaderStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderStream").finish_non_exhaustive()
    }
}

impl Stream for LeaderStream {
    type Item = Result<Option<Leader>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// What the observer waits for before looking again.
enum Wait {
    /// Nothing: look now.
    None,
    /// A change of the key (if subscribed), or `wake_in` (the leader's lapse, or the refresh of
    /// the watch mark).
    Change {
        subscription: Option<Subscription>,
        wake_in: Duration,
    },
    /// Look again at this instant (no leader and no listening connection, or a backoff).
    Until(Instant),
}

struct Observer {
    client: Client,
    key: String,
    leaderless_poll: Duration,
    last: Option<Option<Leader>>,
    wait: Wait,
    failures: u32,
}

impl Observer {
    /// The next change; `None` once the client is shut down.
    async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        loop {
            let waits = self.client.waits();
            if waits.is_closed() {
                return None;
            }
            match std::mem::replace(&mut self.wait, Wait::None) {
                Wait::None => {}
                Wait::Change {
                    subscription,
                    wake_in,
                } => {
                    if waits
                        .sleep_until_released(
                            &self.key,
                            subscription.as_ref(),
                            wake_in,
                            Deadline::NEVER,
                        )
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
                Wait::Until(at) => {
                    if waits.sleep_until(at).await.is_err() {
                        return None;
                    }
                }
            }
            match self.look().await {
                Ok((current, wait)) => {
                    self.failures = 0;
                    self.wait = wait;
                    if self.last.as_ref() != Some(&current) {
                        match &current {
                            Some(leader) => tracing::info!(
                                target: trace::ELECTION,
                                key = self.key.as_str(),
                                owner = self.client.owner(),
                                leader = leader.owner.as_str(),
                                epoch = leader.epoch,
                                data = leader.data.as_deref(),
                                "leader observed"
                            ),
                            None => tracing::info!(
                                target: trace::ELECTION,
                                key = self.key.as_str(),
                                owner = self.client.owner(),
                                "no leader observed"
                            ),
                        }
                        self.last = Some(current.clone());
                        return Some(Ok(current));
                    }
                }
                Err(e) => {
                    if self.client.waits().is_closed() {
                        return None;
                    }
                    self.failures = self.failures.saturating_add(1);
                    let delay = waiting_backoff(self.failures);
                    tracing::warn!(
                        target: trace::ELECTION,
                        key = self.key.as_str(),
                        owner = self.client.owner(),
                        error = %e,
                        sqlstate = trace::sqlstate(&e),
                        failures = self.failures,
                        retry_in = ?trace::ms(delay),
                        "observer failed, retrying"
                    );
                    self.wait = Wait::Until(Instant::now() + delay);
                    if !is_transient(&e) || self.failures == 1 {
                        return Some(Err(e));
                    }
                }
            }
        }
    }

    /// The current leader, and what to wait for before looking again.
    async fn look(&self) -> Result<(Option<Leader>, Wait)> {
        let (subscription, watched) = self
            .client
            .waits()
            .watch_changes(&self.key, Deadline::NEVER)
            .await?;
        let leader = Leader::of(watched.state);
        let wait = match (watched.lapses_in.filter(|_| leader.is_some()), subscription) {
            (Some(lapses_in), subscription) => Wait::Change {
                subscription,
                wake_in: lapses_in.min(WATCH_REFRESH),
            },
            (None, Some(subscription)) => Wait::Change {
                subscription: Some(subscription),
                wake_in: WATCH_REFRESH,
            },
            (None, None) => Wait::Until(Instant::now() + self.leaderless_poll),
        };
        Ok((leader, wait))
    }
}
