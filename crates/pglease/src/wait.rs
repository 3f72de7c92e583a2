//! Waiting for a key without polling and without holding a pooled connection: [`Waits`], the one
//! interface through which the client's blocking calls wait ([`crate::Client::acquire`],
//! [`crate::Semaphore::acquire`], the observer of [`crate::Election::observe`], and whatever else
//! waits for a key's release or change).
//!
//! A wait for a key ([`Target::Key`]) subscribes to the key's releases on the client's shared
//! `LISTEN` connection first, then registers as a waiter (`lease.register_waiter`, which also
//! reports the holder's lapse time as the server measures it), and sleeps until the release
//! notification, the lapse, or its [`Deadline`]. A wait for a semaphore's slot
//! ([`Target::Semaphore`]) does the same with the releases of any of its slots and
//! `lease.register_slot_waiter` (the first lapse among the holders). Without a listening connection
//! (pooler mode, or while it is down) it sleeps until the lapse, at most `poll_cap` at a time.
//! Transient errors are retried with backoff until the deadline.
//!
//! Each wait for a turn runs in a `wait` span and logs on target `pglease::wait`: the holder it
//! waits for and what woke it (`debug`), and each retry after a transient error, with the error
//! and its SQLSTATE (`warn`).

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::calls;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::listener::{Listener, Subscription, Topic};
use crate::pooled::Connections;
use crate::results::{Waiter, Watched};
use crate::retry;
use crate::target::Target;
use crate::trace;

/// How long a wait gives the listening connection to come up before it sleeps without it.
const LISTEN_READY_TIMEOUT: Duration = Duration::from_secs(2);
/// Slack added to a server-reported lapse time, so the retry comes after the lapse.
const LAPSE_SLACK: Duration = Duration::from_millis(2);

/// The timeout error of a wait for `what` (e.g. "acquire of key \"k\"").
pub(crate) fn ran_out(what: &str) -> Error {
    Error::timeout(format!("{what}: the wait ran out"))
}

/// One attempt of a call that waits its turn: done, or refused because another owner holds the
/// key (then [`Waits::retry_until`] waits for the key's release or lapse, and tries again).
pub(crate) enum Attempt<T> {
    /// The call succeeded: its value is the waiting call's result.
    Done(T),
    /// Another owner holds the key: wait for its turn, then try again.
    Held,
}

/// What a client's waits need: its pooled connections (to register as a waiter), its listening
/// connection (if any), the cap on one sleep without it, and its shutdown, which ends every wait
/// with [`Error::is_closed`].
pub(crate) struct Waits {
    /// The client's owner identity (the `owner` field of every event).
    owner: String,
    conns: Connections,
    listener: Option<Listener>,
    poll_cap: Duration,
    shutdown: CancellationToken,
}

impl Waits {
    pub(crate) fn new(
        owner: String,
        conns: Connections,
        listener: Option<Listener>,
        poll_cap: Duration,
        shutdown: CancellationToken,
    ) -> Waits {
        Waits {
            owner,
            conns,
            listener,
            poll_cap,
            shutdown,
        }
    }

    /// The listening connection, if this client waits with `LISTEN`.
    pub(crate) fn listener(&self) -> Option<&Listener> {
        self.listener.as_ref()
    }

    /// Whether the client has shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Runs `attempt` until it is done: after [`Attempt::Held`], waits for the turn of `key`
    /// ([`Waits::wait_for_turn`]); after a transient error (of the attempt or of the wait),
    /// backs off. Fails with a timeout naming `what` once `deadline` passes, with
    /// [`Error::is_closed`] on shutdown, and with any other error of the attempt at once.
    pub(crate) async fn retry_until<T, F, Fut>(
        &self,
        what: &str,
        target: &Target,
        deadline: Deadline,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>>>,
    {
        let key = target.name();
        let mut failures = 0u32;
        // The epoch of a grant to this client's own owner that a wait found (a transfer to it):
        // tried at once, once per grant.
        let mut own_grant: Option<i64> = None;
        loop {
            self.conns.check_open()?;
            let result = match attempt().await {
                Ok(Attempt::Done(done)) => return Ok(done),
                Ok(Attempt::Held) => {
                    if deadline.passed() {
                        return Err(self.ran_out(what, key));
                    }
                    match target {
                        Target::Key(key) => self.wait_for_turn(key, deadline, &mut own_grant).await,
                        Target::Semaphore { name, max_holders } => {
                            self.wait_for_slot(name, *max_holders, deadline).await
                        }
                    }
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => failures = 0,
                Err(e) if retry::is_transient(&e) => {
                    failures = failures.saturating_add(1);
                    let delay = retry::waiting_backoff(failures);
                    tracing::warn!(
                        target: trace::WAIT,
                        key,
                        owner = self.owner.as_str(),
                        error = %e,
                        sqlstate = trace::sqlstate(&e),
                        failures,
                        retry_in = ?trace::ms(delay),
                        "transient error while waiting, retrying"
                    );
                    self.sleep_until(deadline.cap(Instant::now() + delay))
                        .await?;
                    if deadline.passed() {
                        return Err(self.ran_out(what, key));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits (without a pooled connection) until `key` may be free: released, lapsed, or the
    /// deadline. Returns at once if the key is not held, or if it is held by this client's own
    /// owner at an epoch not seen before (`own_grant`): the holder transferred it to us between
    /// the refused attempt and the registration, so the next attempt's acquire returns it. (The
    /// same grant seen again is another role's, which the acquire refuses: then wait as for any
    /// holder.)
    pub(crate) async fn wait_for_turn(
        &self,
        key: &str,
        deadline: Deadline,
        own_grant: &mut Option<i64>,
    ) -> Result<()> {
        let span = tracing::debug_span!(
            target: trace::WAIT,
            "wait",
            key,
            owner = self.owner.as_str(),
        );
        async {
            let (subscription, waiter) = self.watch(key, deadline).await?;
            let Some(lapses_in) = waiter.lapses_in.filter(|_| waiter.held) else {
                tracing::debug!(
                    target: trace::WAIT,
                    key,
                    owner = self.owner.as_str(),
                    "key no longer held: trying again"
                );
                return Ok(());
            };
            if waiter.owner.as_deref() == Some(self.owner.as_str()) && *own_grant != waiter.epoch {
                *own_grant = waiter.epoch;
                tracing::debug!(
                    target: trace::WAIT,
                    key,
                    owner = self.owner.as_str(),
                    holder_epoch = waiter.epoch,
                    "key held by this owner (handed over to it): trying again"
                );
                return Ok(());
            }
            tracing::debug!(
                target: trace::WAIT,
                key,
                owner = self.owner.as_str(),
                holder = waiter.owner.as_deref(),
                holder_epoch = waiter.epoch,
                lapses_in = ?trace::ms(lapses_in),
                listening = subscription.is_some(),
                "waiting for the holder"
            );
            self.sleep_until_released(key, subscription.as_ref(), lapses_in, deadline)
                .await
        }
        .instrument(span)
        .await
    }

    /// Waits (without a pooled connection) until a slot of semaphore `name` may be free: a
    /// holder released, the first holder's lapse, or the deadline. Returns at once if fewer than
    /// `max_holders` slots are held.
    pub(crate) async fn wait_for_slot(
        &self,
        name: &str,
        max_holders: u32,
        deadline: Deadline,
    ) -> Result<()> {
        let span = tracing::debug_span!(
            target: trace::WAIT,
            "wait",
            key = name,
            owner = self.owner.as_str(),
        );
        async {
            let subscription = self
                .subscribe(Topic::SlotReleased(name.to_owned()), deadline)
                .await;
            let conn = self.conns.get().await?;
            let waiter = calls::register_slot_waiter(&**conn, name).await?;
            drop(conn);
            let lapses_in = match waiter.lapses_in {
                Some(lapses_in) if waiter.holders >= max_holders => lapses_in,
                _ => {
                    tracing::debug!(
                        target: trace::WAIT,
                        key = name,
                        owner = self.owner.as_str(),
                        holders = waiter.holders,
                        "a slot is free: trying again"
                    );
                    return Ok(());
                }
            };
            tracing::debug!(
                target: trace::WAIT,
                key = name,
                owner = self.owner.as_str(),
                holders = waiter.holders,
                lapses_in = ?trace::ms(lapses_in),
                listening = subscription.is_some(),
                "waiting for a slot"
            );
            self.sleep_until_released(name, subscription.as_ref(), lapses_in, deadline)
                .await
        }
        .instrument(span)
        .await
    }

    /// Subscribes to the changes of `key` (if the listening connection comes up in time), then
    /// watches it (`lease.watch`): its state now, and when its holder lapses.
    pub(crate) async fn watch_changes(
        &self,
        key: &str,
        deadline: Deadline,
    ) -> Result<(Option<Subscription>, Watched)> {
        let subscription = self
            .subscribe(Topic::Changed(key.to_owned()), deadline)
            .await;
        let conn = self.conns.get().await?;
        let watched = calls::watch(&**conn, key).await?;
        Ok((subscription, watched))
    }

    /// [`ran_out`], logged.
    fn ran_out(&self, what: &str, key: &str) -> Error {
        tracing::debug!(
            target: trace::WAIT,
            key,
            owner = self.owner.as_str(),
            "the wait ran out"
        );
        ran_out(what)
    }

    /// Subscribes to the releases of `key` (if the listening connection comes up in time), then
    /// registers as its waiter: the holder, and when its lease lapses.
    pub(crate) async fn watch(
        &self,
        key: &str,
        deadline: Deadline,
    ) -> Result<(Option<Subscription>, Waiter)> {
        let subscription = self
            .subscribe(Topic::Released(key.to_owned()), deadline)
            .await;
        let conn = self.conns.get().await?;
        let waiter = calls::register_waiter(&**conn, key).await?;
        Ok((subscription, waiter))
    }

    /// Subscribes to `topic` on the listening connection, if this client has one and it comes up
    /// in time.
    async fn subscribe(&self, topic: Topic, deadline: Deadline) -> Option<Subscription> {
        let listener = self.listener.as_ref()?;
        let ready_by = deadline.cap(Instant::now() + LISTEN_READY_TIMEOUT);
        listener.subscribe(topic, ready_by).await
    }

    /// Sleeps until `subscription` reports a release, `lapses_in` (server-measured) has passed,
    /// or the deadline; without a subscription, at most [`crate::ClientBuilder::poll_cap`].
    pub(crate) async fn sleep_until_released(
        &self,
        key: &str,
        subscription: Option<&Subscription>,
        lapses_in: Duration,
        deadline: Deadline,
    ) -> Result<()> {
        let now = Instant::now();
        let (mut wake, mut by) = (now + lapses_in + LAPSE_SLACK, "lapse");
        if subscription.is_none() && now + self.poll_cap < wake {
            (wake, by) = (now + self.poll_cap, "poll");
        }
        let capped = deadline.cap(wake);
        if capped < wake {
            (wake, by) = (capped, "deadline");
        }
        let woken = |by: &str| {
            tracing::debug!(
                target: trace::WAIT,
                key,
                owner = self.owner.as_str(),
                by,
                "woken"
            );
        };
        let released = async {
            match subscription {
                Some(s) => s.released().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = released => {
                woken("release");
                Ok(())
            }
            () = sleep_until(wake) => {
                woken(by);
                Ok(())
            }
            () = self.shutdown.cancelled() => Err(Error::closed()),
        }
    }

    /// Sleeps until `at`, or fails with [`Error::is_closed`] when the client shuts down first.
    pub(crate) async fn sleep_until(&self, at: Instant) -> Result<()> {
        tokio::select! {
            () = sleep_until(at) => Ok(()),
            () = self.shutdown.cancelled() => Err(Error::closed()),
        }
    }

    /// Completes when the client shuts down.
    pub(crate) async fn closed(&self) {
        self.shutdown.cancelled().await;
    }
}
