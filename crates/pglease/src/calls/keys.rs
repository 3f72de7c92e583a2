//! Calls on a key's lease: acquire, renew, release, transfer, inspect, list, fence, and the batched
//! renewal.

use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use super::{micros, one_row};
use crate::error::{Error, Result};
use crate::results::{Grant, KeyRenewal, LeaseState, ListedLease, Renewal, Status, Transfer};
use crate::rows;
use crate::trace;

const ACQUIRE: &str = "SELECT acquired, epoch, expires_at FROM lease.acquire($1, $2, \
     $3::bigint * interval '1 microsecond', $4::bigint * interval '1 microsecond')";
const RENEW: &str = "SELECT status, expires_at FROM lease.renew($1, $2, $3, \
     $4::bigint * interval '1 microsecond')";
pub(crate) const RELEASE: &str = "SELECT status FROM lease.release($1, $2, $3)";
pub(crate) const TRANSFER: &str = "SELECT status, epoch, expires_at FROM lease.transfer($1, $2, $3, \
     $4, $5::bigint * interval '1 microsecond')";
const INSPECT: &str = "SELECT held, owner, epoch, expires_at, data FROM lease.inspect($1)";
const LIST: &str = "SELECT key, held, owner, epoch, expires_at, data FROM lease.list($1)";
const FENCE: &str = "SELECT lease.fence($1, $2, $3)";
pub(crate) const RENEW_MANY: &str = "SELECT r.key, r.status, r.expires_at, \
     floor(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint \
     FROM lease.renew_many($1, $2, $3, $4::bigint * interval '1 microsecond') AS r";

/// Grants `key` to `owner` for `ttl` if it is free, lapsed or unknown; `None` if another owner
/// holds it (with `wait` zero).
///
/// A grant carries a new epoch, greater than every earlier epoch of the key. If `owner` already
/// holds the key, returns its current grant unchanged (same epoch, same expiry): a lost answer can
/// be retried safely. With `wait` above zero the server polls (every 50 ms, holding no row lock and
/// keeping the transaction open) until the key becomes grantable or `wait` has passed. Run waiting
/// acquires under READ COMMITTED (the default): under REPEATABLE READ the server reads one snapshot
/// and cannot see the key being freed.
///
/// `ttl` and `wait` are sent as whole microseconds, rounded down (see
/// [`MAX_DURATION`](super::MAX_DURATION)).
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): an empty key or owner, a key or owner over 1024 bytes,
///   `ttl` not in (0, 365 days], `wait` over 365 days; [`Error::detail`] names every violation.
///   Nothing changed. (Text containing a NUL character is rejected by PostgreSQL itself, with
///   SQLSTATE `22021`.)
/// - [`Error::is_wait_timeout`] (`57014`): `wait` passed while another owner held the key.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let ttl = Duration::from_secs(30);
/// match pglease::acquire(client, "job-42", "worker-a1", ttl, Duration::ZERO).await? {
///     Some(grant) => println!("mine at epoch {}", grant.epoch),
///     None => println!("held by another owner"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn acquire<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    ttl: Duration,
    wait: Duration,
) -> Result<Option<Grant>> {
    let (ttl_us, wait_us) = (micros(ttl), micros(wait));
    let rows = client
        .query_typed(
            ACQUIRE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&ttl_us, Type::INT8),
                (&wait_us, Type::INT8),
            ],
        )
        .await?;
    let grant = rows::grant(&one_row(rows, "lease.acquire")?, "lease.acquire")?;
    match &grant {
        Some(grant) => tracing::info!(
            target: trace::CALL,
            key,
            owner,
            epoch = grant.epoch,
            ttl = ?ttl,
            "lease granted"
        ),
        None => tracing::debug!(
            target: trace::CALL,
            key,
            owner,
            wait = ?wait,
            "key held by another owner"
        ),
    }
    Ok(grant)
}

/// Extends `owner`'s lease on `key` at `epoch` to server time + `ttl` (which may shorten it); the
/// epoch never changes.
///
/// Takes effect only if `owner` holds `key` at `epoch` and the lease has not lapsed; otherwise
/// changes nothing and reports why (see [`Status`] for the precedence). A [`Status::Lapsed`] or
/// [`Status::EpochMismatch`] means the caller has lost the lease and must stop acting on it.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]), `ttl` not in
///   (0, 365 days]. Nothing changed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, grant: pglease::Grant) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let ttl = Duration::from_secs(30);
/// let renewal = pglease::renew(client, "job-42", "worker-a1", grant.epoch, ttl).await?;
/// if !renewal.status.is_ok() {
///     eprintln!("lost the lease: {}", renewal.status);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn renew<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: Duration,
) -> Result<Renewal> {
    let ttl = micros(ttl);
    let rows = client
        .query_typed(
            RENEW,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
                (&ttl, Type::INT8),
            ],
        )
        .await?;
    let renewal = rows::renewal(&one_row(rows, "lease.renew")?, "lease.renew")?;
    tracing::debug!(
        target: trace::CALL,
        key,
        owner,
        epoch,
        status = renewal.status.as_str(),
        "lease renewal answered"
    );
    Ok(renewal)
}

/// Frees `key` if `owner` holds it at `epoch`, advancing its fencing counter; otherwise changes
/// nothing and reports why.
///
/// After an `ok` release the key's counter is `epoch + 1`, so the next grant gets `epoch + 2` and
/// every guard that records epochs rejects `epoch`. A lapsed lease cannot be released
/// ([`Status::Lapsed`]); it is already free to take over.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]). Nothing changed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, grant: pglease::Grant) -> pglease::Result<()> {
/// let status = pglease::release(client, "job-42", "worker-a1", grant.epoch).await?;
/// println!("release: {status}");
/// # Ok(())
/// # }
/// ```
pub async fn release<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<Status> {
    let rows = client
        .query_typed(
            RELEASE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
            ],
        )
        .await?;
    let status = rows::status(&one_row(rows, "lease.release")?, "lease.release")?;
    if status.is_ok() {
        tracing::info!(target: trace::CALL, key, owner, epoch, "lease released");
    } else {
        tracing::debug!(
            target: trace::CALL,
            key,
            owner,
            epoch,
            status = status.as_str(),
            "lease release refused"
        );
    }
    Ok(status)
}

/// Hands `key`, held by `owner` at `epoch`, to `to_owner` in one step (`lease.transfer`, pg_lease
/// 0.9.0): `to_owner` holds it at the next epoch until server time + `ttl`, granted to this
/// session's login role, without data, and `epoch` is fenced from that instant. The key is never
/// free in between.
///
/// Otherwise changes nothing and reports why, in renew's precedence ([`Status`]). The successor
/// takes the grant over by acquiring the key as `to_owner` (an acquire by the holder returns its
/// grant), under the same login role or a member of it; a successor that campaigns or waits with
/// a registered waiter is woken by the transfer (`pg_lease_released`). Until then nobody renews
/// it: it lapses at its expiry. Recorded in the history as `transferred`. `ttl` is sent as whole
/// microseconds, rounded down; it is within the ttl cap like a renewal's.
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): a bad key, owner or `to_owner` (as for [`acquire`]),
///   `ttl` not in (0, 365 days] or above the cap. Nothing changed.
/// - [`Error::is_other_role`] (`42501`): the grant was made by a role this session's login role is
///   neither nor a member of. Nothing changed.
/// - any other server error (`42883` if the installed pg_lease predates 0.9.0),
///   [`Error::is_connection`] (outcome unknown: [`inspect`] tells) or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client, grant: pglease::Grant) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let ttl = Duration::from_secs(10);
/// let t = pglease::transfer(client, "scheduler", "node-1", grant.epoch, "node-2", ttl).await?;
/// match t.grant {
///     Some(successor) => assert!(successor.epoch > grant.epoch),
///     None => eprintln!("not ours to hand over: {}", t.status),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn transfer<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
    to_owner: &str,
    ttl: Duration,
) -> Result<Transfer> {
    const CALL: &str = "lease.transfer";
    let ttl_us = micros(ttl);
    let rows = client
        .query_typed(
            TRANSFER,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
                (&to_owner, Type::TEXT),
                (&ttl_us, Type::INT8),
            ],
        )
        .await?;
    let transfer = rows::transfer(&one_row(rows, CALL)?, CALL)?;
    match transfer.grant {
        Some(grant) => tracing::info!(
            target: trace::CALL,
            key,
            owner,
            epoch,
            to_owner,
            to_epoch = grant.epoch,
            ttl = ?ttl,
            "lease transferred"
        ),
        None => tracing::debug!(
            target: trace::CALL,
            key,
            owner,
            epoch,
            to_owner,
            status = transfer.status.as_str(),
            "lease transfer refused"
        ),
    }
    Ok(transfer)
}

/// The state of `key` as of now by the server clock; `None` if the key was never leased (or was
/// purged).
///
/// Advisory: it takes no lock, so the state may change right after. A key that is known but not
/// held (free or lapsed) reports its fencing counter in [`LeaseState::epoch`].
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): empty key, or a key over 1024 bytes.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// match pglease::inspect(client, "job-42").await? {
///     Some(state) if state.held => println!("held by {:?}", state.owner),
///     Some(state) => println!("free; epochs <= {} are stale", state.epoch),
///     None => println!("never leased"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn inspect<C: GenericClient>(client: &C, key: &str) -> Result<Option<LeaseState>> {
    let rows = client.query_typed(INSPECT, &[(&key, Type::TEXT)]).await?;
    match rows.as_slice() {
        [] => Ok(None),
        [row] => rows::lease_state(row, 0, "lease.inspect").map(Some),
        rows => Err(Error::protocol(format!(
            "lease.inspect returned {} rows, expected at most 1",
            rows.len()
        ))),
    }
}

/// Every key, or every key starting with `prefix` (compared byte-wise), ordered by key, with its
/// state as [`inspect`] reports it.
///
/// Meant for operators: it reads the whole matching range without locks, so it is advisory like
/// [`inspect`].
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): `prefix` over 1024 bytes.
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// for lease in pglease::list(client, Some("job-")).await? {
///     println!("{} held={} epoch={}", lease.key, lease.state.held, lease.state.epoch);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn list<C: GenericClient>(client: &C, prefix: Option<&str>) -> Result<Vec<ListedLease>> {
    let rows = client.query_typed(LIST, &[(&prefix, Type::TEXT)]).await?;
    rows.iter()
        .map(|row| rows::listed(row, "lease.list"))
        .collect()
}

/// Guards the writes of the caller's transaction: checks that `owner` holds `key` at `epoch` now
/// and locks the key's row (`FOR SHARE`) until the transaction ends, so no takeover, release or
/// renew of the key can commit before the guarded writes do; returns the lease's expiry.
///
/// Call it inside a transaction, before the writes it guards.
/// [`Lease::fence`](crate::LeaseGuard::fence) and [`crate::Fence::check`] call it with a lease's
/// own key, owner and epoch.
///
/// # Errors
///
/// - [`Error::is_fenced`]: SQLSTATE `LE001` (`owner` does not hold `key`), `LE002` (its lease
///   lapsed) or `LE003` (it holds `key` at another epoch). The transaction is aborted: roll it
///   back and stop acting on the lease.
/// - [`Error::is_invalid_input`] (`22023`): bad key or owner (as for [`acquire`]).
/// - any other server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Cancel safety
///
/// Dropping the future after the statement was sent leaves the transaction in an unknown state;
/// roll it back (dropping a `Transaction` does).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client, epoch: i64) -> pglease::Result<()> {
/// let tx = client.transaction().await?;
/// pglease::fence(&tx, "job-42", "worker-a1", epoch).await?;
/// tx.execute("UPDATE jobs SET done = true WHERE id = 42", &[]).await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub async fn fence<C: GenericClient>(
    client: &C,
    key: &str,
    owner: &str,
    epoch: i64,
) -> Result<SystemTime> {
    const CALL: &str = "lease.fence";
    let rows = client
        .query_typed(
            FENCE,
            &[
                (&key, Type::TEXT),
                (&owner, Type::TEXT),
                (&epoch, Type::INT8),
            ],
        )
        .await?;
    rows::expiry(&one_row(rows, CALL)?, CALL)
}

/// Renews many grants of `owner` in one statement (`lease.renew_many`): for each `(key, epoch)`
/// pair the judgement [`renew`] would give, extending every held one to server time + `ttl`, and
/// one [`KeyRenewal`] per pair (in no particular order). A key whose row another transaction holds
/// locked (a [`fence()`] in progress, a concurrent call) is not waited for: it comes back busy
/// (`renewal: None`), unjudged and unrenewed; renew it on its own with [`renew`]. Data is left as
/// it is.
///
/// The keys must be distinct; at most [`MAX_RENEW_MANY`](crate::limits::MAX_RENEW_MANY) pairs.
/// [`crate::Client`] renews its leases this way (docs/CLIENT.md, "Batched renewal").
///
/// # Errors
///
/// - [`Error::is_invalid_input`] (`22023`): a bad owner, key or ttl, duplicate keys, or too many
///   pairs; nothing was renewed.
/// - any other server error, [`Error::is_connection`] (outcome unknown) or
///   [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let pairs = [("job-1", 7), ("job-2", 9)];
/// for r in pglease::renew_many(client, "worker-a1", &pairs, Duration::from_secs(30)).await? {
///     match r.renewal {
///         Some(renewal) if renewal.status.is_ok() => {}
///         Some(renewal) => eprintln!("lost {}: {}", r.key, renewal.status),
///         None => { /* busy: pglease::renew(client, &r.key, ...) */ }
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub async fn renew_many<C: GenericClient>(
    client: &C,
    owner: &str,
    pairs: &[(&str, i64)],
    ttl: Duration,
) -> Result<Vec<KeyRenewal>> {
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
    let epochs: Vec<i64> = pairs.iter().map(|(_, e)| *e).collect();
    let ttl_us = micros(ttl);
    let rows = client
        .query_typed(
            RENEW_MANY,
            &[
                (&owner, Type::TEXT),
                (&keys, Type::TEXT_ARRAY),
                (&epochs, Type::INT8_ARRAY),
                (&ttl_us, Type::INT8),
            ],
        )
        .await?;
    let answers = rows
        .iter()
        .map(|row| {
            let (key, judged) = rows::timed_key_renewal(row, "lease.renew_many")?;
            Ok(KeyRenewal {
                key,
                renewal: judged.map(|(renewal, _)| renewal),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    tracing::debug!(
        target: trace::CALL,
        owner,
        leases = answers.len(),
        "lease renewals answered"
    );
    Ok(answers)
}
