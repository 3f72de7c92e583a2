//! Acquiring, written once for keys and semaphores ([`Target`]): the attempt, and the two ways
//! of making attempts, at once ([`Client::try_acquire_target`]) or waiting between them
//! ([`Client::acquire_target`]).
//!
//! One attempt reserves the target in the client (`reservations.rs`), is admitted by the
//! sharding gate if the client is a shard (`gate.rs`), sends `lease.acquire` or
//! `lease.acquire_slot`, renews at once a grant that has little time left (an owner's retried
//! acquire), and hands the grant to its keepalive (`granted.rs`). From the moment it is sent
//! until its outcome is known, the attempt is an [`InFlight`]: if the answer never comes, or the
//! future is dropped, or the grant cannot be kept, its drop releases in the background whatever
//! the server may have granted.
//!
//! Logs on target `pglease::lease` (`debug`): the target held by another lease of this client or
//! by another owner, an unanswered acquire, a grant already held that lapsed before it could be
//! renewed.

use std::time::Duration;

use deadpool_postgres::Object;
use tokio::time::Instant;
use tracing::Instrument;

use crate::calls;
use crate::client::Client;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::gate::Permit;
use crate::granted::Granted;
use crate::lease::Lease;
use crate::pooled::{self, Connections};
use crate::reservations::Reservation;
use crate::results::Grant;
use crate::target::Target;
use crate::timing::Timing;
use crate::trace;
use crate::wait::{self, Attempt};

/// How long the background clean-up of an unsettled attempt may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server granted to one attempt.
struct Answer {
    /// The key granted: the target's key, or the semaphore's slot key `name#N`.
    key: String,
    /// The slot number, for a semaphore's slot.
    slot: Option<u32>,
    grant: Grant,
    /// The time the server reported left on the grant.
    left: Duration,
}

impl Client {
    /// Acquires `target` for `ttl` (with `data`) if it is free now; `None` if another owner, or
    /// another lease of this client, holds it. The body of [`Client::try_acquire`] and
    /// [`crate::Semaphore::try_acquire`].
    pub(crate) async fn try_acquire_target(
        &self,
        target: &Target,
        ttl: Duration,
        data: Option<&str>,
    ) -> Result<Option<Lease>> {
        let span = self.acquire_span(target.name(), ttl, Deadline::after(Duration::ZERO));
        async {
            let timing = self.prepare(ttl, data)?;
            let Some(reserved) = self.reservations().claim(&target.reservation()) else {
                self.log_held_by_this_client(target);
                return Ok(None);
            };
            self.attempt(target, reserved, timing, data).await
        }
        .instrument(span)
        .await
    }

    /// Acquires `target` for `ttl` (with `data`), waiting until `deadline`: for this client's own
    /// lease on it to end, then for a holder's release or lapse, retrying transient errors. The
    /// body of every waiting acquire ([`Client::acquire`], [`crate::AcquireBuilder::acquire`],
    /// [`crate::Semaphore::acquire`], and through them [`crate::Election::campaign`]).
    pub(crate) async fn acquire_target(
        &self,
        target: &Target,
        ttl: Duration,
        data: Option<&str>,
        deadline: Deadline,
    ) -> Result<Lease> {
        let span = self.acquire_span(target.name(), ttl, deadline);
        async {
            let timing = self.prepare(ttl, data)?;
            let what = &target.what();
            let reservation = &target.reservation();
            let waits = self.waits();
            let attempt = move || async move {
                // Another lease (or acquire) of this client has the target: wait for it to end.
                let reserved = tokio::select! {
                    reserved = self.reservations().claim_by(reservation, deadline) => {
                        reserved.ok_or_else(|| wait::ran_out(what))?
                    }
                    () = waits.closed() => return Err(Error::closed()),
                };
                Ok(match self.attempt(target, reserved, timing, data).await? {
                    Some(lease) => Attempt::Done(lease),
                    None => Attempt::Held,
                })
            };
            waits.retry_until(what, target, deadline, attempt).await
        }
        .instrument(span)
        .await
    }

    /// The `acquire` span of one acquire call (see docs/CLIENT.md, "Observability").
    pub(crate) fn acquire_span(
        &self,
        key: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> tracing::Span {
        tracing::info_span!(
            target: trace::LEASE,
            "acquire",
            key,
            owner = self.owner(),
            ttl = ?ttl,
            wait = %trace::wait_field(deadline),
        )
    }

    /// The checks made before anything is sent: an open client, a ttl the safety margin allows,
    /// data within its limit.
    fn prepare(&self, ttl: Duration, data: Option<&str>) -> Result<Timing> {
        self.conns().check_open()?;
        let timing = self.timing(ttl)?;
        if let Some(data) = data {
            check_data(data)?;
        }
        Ok(timing)
    }

    /// One attempt with the target reserved: the lease if granted, `None` if another owner holds
    /// the key (or every slot of the semaphore).
    async fn attempt(
        &self,
        target: &Target,
        reserved: Reservation,
        timing: Timing,
        data: Option<&str>,
    ) -> Result<Option<Lease>> {
        let permit = self.admit(target)?;
        let conns = self.conns();
        let conn = conns.get().await?;
        let in_flight = InFlight::new(Cleanup {
            conn: Some(conn),
            reservation: reserved,
            permit,
            conns: conns.clone(),
            target: target.clone(),
            owner: self.owner().to_owned(),
        });
        let sent = Instant::now();
        let answer = match self.send(in_flight.conn(), target, timing.ttl, data).await {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                in_flight.settle();
                self.log_held(target);
                return Ok(None);
            }
            Err(e) if e.is_connection() => {
                tracing::debug!(
                    target: trace::LEASE,
                    key = target.name(),
                    owner = self.owner(),
                    error = %e,
                    "acquire unanswered: whatever it granted is released in the background"
                );
                in_flight.abandon();
                return Err(e);
            }
            Err(e) => {
                in_flight.settle();
                return Err(e);
            }
        };
        let Some((sent, left, expires_at)) = self.keep(&in_flight, &answer, timing, sent).await
        else {
            tracing::debug!(
                target: trace::LEASE,
                key = target.name(),
                owner = self.owner(),
                epoch = answer.grant.epoch,
                "a grant already held had lapsed before it could be renewed"
            );
            // Dropping the attempt unsettled releases the grant in the background.
            return Ok(None);
        };
        let mut reservations = Vec::with_capacity(2);
        if answer.slot.is_some() {
            let Some(key_reserved) = self.reservations().claim(&answer.key) else {
                // This client holds the slot's key as a plain lease: nothing to release here.
                in_flight.settle();
                return Err(Error::invalid_argument(format!(
                    "slot key {:?} is held by another lease of this client",
                    answer.key
                )));
            };
            reservations.push(key_reserved);
        }
        reservations.push(in_flight.settle());
        Ok(Some(self.start_keepalive(Granted {
            reservations,
            key: &answer.key,
            slot: answer.slot,
            grant: Grant {
                epoch: answer.grant.epoch,
                expires_at,
            },
            timing,
            sent,
            left,
            data: data.map(str::to_owned),
        })))
    }

    /// Sends the target's acquire (`lease.acquire` or `lease.acquire_slot`) on `conn`.
    async fn send(
        &self,
        conn: &Object,
        target: &Target,
        ttl: Duration,
        data: Option<&str>,
    ) -> Result<Option<Answer>> {
        let statements = self.conns().statements();
        let owner = self.owner();
        Ok(match target {
            Target::Key(key) => pooled::acquire_timed(conn, statements, key, owner, ttl, data)
                .await?
                .map(|timed| Answer {
                    key: key.clone(),
                    slot: None,
                    grant: timed.grant,
                    left: timed.remaining,
                }),
            Target::Semaphore { name, max_holders } => {
                pooled::acquire_slot_timed(conn, statements, name, owner, ttl, *max_holders, data)
                    .await?
                    .map(|(granted, left)| Answer {
                        key: granted.key,
                        slot: Some(granted.slot),
                        grant: granted.grant,
                        left,
                    })
            }
        })
    }

    /// When the granting call was sent, the time left and the expiry to start the keepalive
    /// with: the answer's own, or, for a grant this owner already held with too little time left
    /// to be worth handing out, those of a renewal sent at once. `None` if that renewal fails.
    async fn keep(
        &self,
        in_flight: &InFlight,
        answer: &Answer,
        timing: Timing,
        sent: Instant,
    ) -> Option<(Instant, Duration, std::time::SystemTime)> {
        if timing.valid_until(sent, answer.left) > sent + timing.margin {
            return Some((sent, answer.left, answer.grant.expires_at));
        }
        let sent = Instant::now();
        let renewed = pooled::renew_timed(
            in_flight.conn(),
            self.conns().statements(),
            &answer.key,
            self.owner(),
            answer.grant.epoch,
            timing.ttl,
            None,
        )
        .await;
        match renewed {
            Ok((renewal, Some(left))) if renewal.status.is_ok() => Some((
                sent,
                left,
                renewal.expires_at.unwrap_or(answer.grant.expires_at),
            )),
            _ => None,
        }
    }

    /// The debug event of a target this client already holds or is acquiring.
    fn log_held_by_this_client(&self, target: &Target) {
        match target {
            Target::Key(key) => tracing::debug!(
                target: trace::LEASE,
                key = key.as_str(),
                owner = self.owner(),
                "key held by another lease of this client"
            ),
            Target::Semaphore { name, .. } => tracing::debug!(
                target: trace::LEASE,
                key = name.as_str(),
                owner = self.owner(),
                "semaphore held by another lease of this client"
            ),
        }
    }

    /// The debug event of a target another owner holds.
    fn log_held(&self, target: &Target) {
        match target {
            Target::Key(key) => tracing::debug!(
                target: trace::LEASE,
                key = key.as_str(),
                owner = self.owner(),
                "key held by another owner"
            ),
            Target::Semaphore { name, .. } => tracing::debug!(
                target: trace::LEASE,
                key = name.as_str(),
                owner = self.owner(),
                "every slot held by another owner"
            ),
        }
    }
}

/// Fails with [`Error::is_invalid_input`] (client-side, no code) if `data` is over
/// [`limits::MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes; the server checks it again
/// (`22023`).
pub(crate) fn check_data(data: &str) -> Result<()> {
    if crate::limits::is_valid_data(data) {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "data is {} bytes: at most {} bytes are allowed",
            data.len(),
            crate::limits::MAX_DATA_BYTES
        )))
    }
}

/// An acquire that was sent and whose outcome is not settled yet. Dropping it unsettled (the
/// answer never came, the future was dropped, the grant could not be kept) releases in the
/// background whatever the server may have granted to the owner; [`InFlight::settle`] says the
/// outcome is known and there is nothing to release.
pub(crate) struct InFlight {
    /// What the clean-up needs; taken by [`InFlight::settle`] or by the drop.
    cleanup: Option<Cleanup>,
}

/// What releasing an unsettled attempt's possible grant needs.
pub(crate) struct Cleanup {
    /// The attempt's connection, while it may still work: the clean-up then runs after the
    /// acquire on the server. `None` once it failed (the clean-up checks out another).
    pub(crate) conn: Option<Object>,
    /// The target's reservation, freed only once the clean-up is done.
    pub(crate) reservation: Reservation,
    /// The sharded client's admission of the attempt, held until its outcome is settled.
    pub(crate) permit: Option<Permit>,
    pub(crate) conns: Connections,
    pub(crate) target: Target,
    pub(crate) owner: String,
}

impl InFlight {
    pub(crate) fn new(cleanup: Cleanup) -> InFlight {
        InFlight {
            cleanup: Some(cleanup),
        }
    }

    /// The attempt's connection.
    ///
    /// # Panics
    ///
    /// Never: the connection is taken only by [`InFlight::abandon`], which consumes the attempt.
    fn conn(&self) -> &Object {
        self.cleanup
            .as_ref()
            .and_then(|cleanup| cleanup.conn.as_ref())
            .expect("an attempt in flight keeps its connection until abandoned")
    }

    /// The outcome is known and nothing needs releasing: returns the reservation (which the
    /// lease keeps, if one was granted) and returns the connection to the pool.
    ///
    /// # Panics
    ///
    /// Never: only this and the drop take the clean-up, and both consume the attempt.
    pub(crate) fn settle(mut self) -> Reservation {
        self.cleanup
            .take()
            .map(|cleanup| cleanup.reservation)
            .expect("an unsettled attempt has its clean-up")
    }

    /// The attempt's connection failed with the answer unknown: drops the connection from the
    /// pool and releases whatever was granted on another one, in the background.
    fn abandon(mut self) {
        if let Some(conn) = self.cleanup.as_mut().and_then(|c| c.conn.take()) {
            pooled::discard(conn);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(cleanup.run());
    }
}

impl Cleanup {
    /// Releases every grant the target has for the owner (bounded by [`CLEANUP_TIMEOUT`]), then
    /// frees the reservation and the permit.
    async fn run(self) {
        let Cleanup {
            conn,
            reservation,
            permit,
            conns,
            target,
            owner,
        } = self;
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        let release = async {
            let conn = match conn {
                Some(conn) if !conn.is_closed() => conn,
                _ => conns.checkout(deadline).await?,
            };
            let held: Vec<(String, crate::results::LeaseState)> = match &target {
                Target::Key(key) => calls::inspect(&**conn, key)
                    .await?
                    .map(|state| (key.clone(), state))
                    .into_iter()
                    .collect(),
                Target::Semaphore { name, .. } => calls::list_slots(&**conn, name)
                    .await?
                    .into_iter()
                    .map(|s| (s.key, s.state))
                    .collect(),
            };
            for (key, state) in held {
                if state.held && state.owner.as_deref() == Some(owner.as_str()) {
                    // Logged by the call (target pglease::call, "lease released").
                    calls::release(&**conn, &key, &owner, state.epoch).await?;
                }
            }
            Ok::<(), Error>(())
        };
        let _ = tokio::time::timeout_at(deadline, release).await;
        drop(reservation);
        drop(permit);
    }
}
