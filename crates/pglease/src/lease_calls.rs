//! The calls on one lease that are sent on their own rather than in the renewer's batch, each on a
//! pooled connection and bounded in time: a renewal (`lease.renew`: a batch of one, or a lease the
//! batch found busy), the release, and the transfer to another owner. A connection that gave no answer in time is discarded, since
//! the call may still be running on it.

use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use crate::error::{Error, Result};
use crate::pooled::{self, Connections, discard};
use crate::results::{Grant, Handover, Status, Transfer};
use crate::shared::Shared;

/// The longest a best-effort release (on drop, loss by expiry or shutdown) may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// One renewal (`lease.renew`) on a pooled connection, bounded by `deadline`. Returns the status
/// and, for `ok`, the time left and the server expiry. A connection that gave no answer in time is
/// discarded.
pub(crate) async fn renew_once(
    conns: &Connections,
    shared: &Shared,
    deadline: Instant,
) -> Result<(Status, Option<(Duration, std::time::SystemTime)>)> {
    let conn = conns.checkout(deadline).await?;
    let answer = timeout_at(
        deadline,
        pooled::renew_timed(
            &conn,
            conns.statements(),
            &shared.key,
            &shared.owner,
            shared.epoch,
            shared.timing.ttl,
            None,
        ),
    )
    .await;
    match answer {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the renewal in time"))
        }
        Ok(Err(e)) => {
            if e.is_connection() {
                discard(conn);
            }
            Err(e)
        }
        Ok(Ok((renewal, left))) => Ok((renewal.status, left.zip(renewal.expires_at))),
    }
}

/// How long a release or a transfer may take: [`RELEASE_TIMEOUT`], or the ttl if shorter but at
/// least a second (past it the lease lapses by itself).
fn end_bound(shared: &Shared) -> Duration {
    shared
        .timing
        .ttl
        .clamp(Duration::from_secs(1), RELEASE_TIMEOUT)
}

/// One transfer of the lease to `to_owner` for `ttl` (`lease.transfer`) on a pooled connection,
/// bounded as a release is. A connection that gave no answer in time is discarded (the outcome is
/// then unknown: an error that [`Error::is_connection`]).
pub(crate) async fn transfer_once(
    conns: &Connections,
    shared: &Shared,
    to_owner: &str,
    ttl: Duration,
) -> Result<Transfer> {
    let deadline = Instant::now() + end_bound(shared);
    let conn = conns.checkout(deadline).await?;
    match timeout_at(
        deadline,
        crate::calls::transfer(
            &**conn,
            &shared.key,
            &shared.owner,
            shared.epoch,
            to_owner,
            ttl,
        ),
    )
    .await
    {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the transfer in time"))
        }
        Ok(result) => {
            if result.as_ref().is_err_and(Error::is_connection) {
                discard(conn);
            }
            result
        }
    }
}

/// What a transfer of `shared`'s lease to `to_owner` that the server granted as `grant` reports.
pub(crate) fn handover(shared: &Shared, to_owner: &str, grant: Grant) -> Handover {
    Handover {
        key: shared.key.clone(),
        from_owner: shared.owner.clone(),
        from_epoch: shared.epoch,
        to_owner: to_owner.to_owned(),
        epoch: grant.epoch,
        expires_at: grant.expires_at,
    }
}

/// One release on a pooled connection, bounded by [`RELEASE_TIMEOUT`] (or the ttl, if shorter
/// but at least a second: past it the lease lapses by itself).
pub(crate) async fn release_once(conns: &Connections, shared: &Shared) -> Result<Status> {
    let deadline = Instant::now() + end_bound(shared);
    let conn = conns.checkout(deadline).await?;
    match timeout_at(
        deadline,
        pooled::release(
            &conn,
            conns.statements(),
            &shared.key,
            &shared.owner,
            shared.epoch,
        ),
    )
    .await
    {
        Err(_) => {
            discard(conn);
            Err(Error::connection("no answer to the release in time"))
        }
        Ok(result) => {
            if result.as_ref().is_err_and(Error::is_connection) {
                discard(conn);
            }
            result
        }
    }
}
