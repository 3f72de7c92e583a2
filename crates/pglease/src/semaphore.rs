//! Semaphores: [`Semaphore`], at most `max_holders` holders of a named semaphore at once, each
//! holding one slot, an ordinary lease key `name#N` ([`crate::slot_key`]) with its own fencing
//! epoch. A slot is granted by `lease.acquire_slot` and then is a [`Lease`] like any other:
//! renewed by the keepalive, released, fenced, lost, with [`LeaseGuard::slot`] saying which slot.
//!
//! Waiting for a slot goes through the client's one waiting interface (`wait.rs`): subscribe to
//! the releases of the semaphore's slots on the shared `LISTEN` connection, register with
//! `lease.register_slot_waiter` (which marks every held slot so its release notifies, and reports
//! the first lapse), then sleep until a release of one of its slots, that lapse or the deadline,
//! and try again.
//!
//! All leases of a [`Client`] share its owner, and `acquire_slot` is idempotent per owner, so a
//! client holds at most one slot of a semaphore at a time (as it holds at most one lease per
//! key): a second [`Semaphore::try_acquire`] of the same client returns `None`, and
//! [`Semaphore::acquire`] waits for the client's own slot to end. Use one client (owner) per
//! holder.
//!
//! [`LeaseGuard::slot`]: crate::LeaseGuard::slot

use std::time::Duration;

use crate::client::Client;
use crate::deadline::Deadline;
use crate::error::Result;
use crate::lease::Lease;
use crate::results::SlotState;
use crate::target::Target;

/// A named semaphore: at most [`Semaphore::max_holders`] holders at any server-time instant,
/// each holding one slot as a [`Lease`]. Made by [`Client::semaphore`]; cheap to clone.
///
/// The limit is an argument of every acquire, not stored in the database: holders that agree on
/// it never exceed it. Raising it takes effect at once; lowering it refuses new grants until
/// fewer holders than the new limit remain (holders in slots above it keep their grants and may
/// renew them).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let runners = client.semaphore("report-runners", 3, Duration::from_secs(30));
/// let lease = runners.acquire(Duration::from_secs(60)).await?;
/// println!("slot {:?} ({}) at epoch {}", lease.slot(), lease.key(), lease.epoch());
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    name: String,
    max_holders: u32,
    ttl: Duration,
    data: Option<String>,
}

impl Client {
    /// The semaphore `name` with at most `max_holders` holders, each holding its slot for `ttl`
    /// at a time (renewed by the keepalive). Nothing is sent until it is acquired.
    ///
    /// `name` is 1 to [`MAX_SEMAPHORE_BYTES`](crate::limits::MAX_SEMAPHORE_BYTES) bytes and
    /// `max_holders` in 1..=[`MAX_HOLDERS`](crate::limits::MAX_HOLDERS); the server checks both
    /// (`22023`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let runners = client.semaphore("report-runners", 3, std::time::Duration::from_secs(30));
    /// assert_eq!(runners.max_holders(), 3);
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, max_holders: u32, ttl: Duration) -> Semaphore {
        Semaphore {
            client: self.clone(),
            name: name.into(),
            max_holders,
            ttl,
            data: None,
        }
    }
}

impl Semaphore {
    /// The semaphore's name (its slot keys are `name#1`, `name#2`, ...).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let s = client.semaphore("runners", 3, std::time::Duration::from_secs(30));
    /// assert_eq!(s.name(), "runners");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most holders this semaphore admits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(s: &pglease::Semaphore) {
    /// println!("at most {} holders", s.max_holders());
    /// # }
    /// ```
    pub fn max_holders(&self) -> u32 {
        self.max_holders
    }

    /// The ttl of each slot's lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(s: &pglease::Semaphore) {
    /// assert!(s.ttl() > std::time::Duration::ZERO);
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The same semaphore, acquiring slots with `data` (at most
    /// [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes), which [`Semaphore::holders`]
    /// and [`Client::inspect`] of the slot key report.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let s = client.semaphore("runners", 3, std::time::Duration::from_secs(30)).with_data("host-a");
    /// # }
    /// ```
    pub fn with_data(mut self, data: impl Into<String>) -> Semaphore {
        self.data = Some(data.into());
        self
    }

    /// Takes a slot if fewer than [`Semaphore::max_holders`] are held (the lowest free or
    /// lapsed one); `None` if they all are, or if this client already holds a slot of it.
    ///
    /// The returned [`Lease`] is on the slot key (`name#N`), says its slot
    /// ([`LeaseGuard::slot`](crate::LeaseGuard::slot)), and is kept alive, released and fenced
    /// like any lease.
    ///
    /// # Errors
    ///
    /// - [`crate::Error::is_invalid_input`]: a bad name, `max_holders` or ttl (server, `22023`),
    ///   data too large or a ttl too short for the safety margin (client, nothing sent).
    /// - [`crate::Error::is_connection`]: no answer. A slot may have been granted; the client then
    ///   releases it in the background.
    /// - [`crate::Error::is_slot_paused`], [`crate::Error::is_wrong_shard`] (client-side, nothing
    ///   sent): the client is a shard of a [`crate::ShardedClient`] whose map in force pauses the
    ///   semaphore's slot or gives it to another shard.
    /// - [`crate::Error::is_closed`] after [`Client::shutdown`]; any other server error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Client::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(s: &pglease::Semaphore) -> pglease::Result<()> {
    /// match s.try_acquire().await? {
    ///     Some(lease) => println!("slot {:?}", lease.slot()),
    ///     None => println!("all {} slots taken", s.max_holders()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        self.client
            .try_acquire_target(&self.target(), self.ttl, self.data.as_deref())
            .await
    }

    /// Takes a slot, waiting up to `timeout` while [`Semaphore::max_holders`] are held (or while
    /// this client holds one).
    ///
    /// The wait holds no pooled connection and does not poll: it registers with
    /// `lease.register_slot_waiter`, listens on the client's shared `LISTEN` connection, and
    /// tries again when a holder releases its slot or when the first holder's lease lapses by
    /// the server's reckoning. In [pooler mode](crate::ClientBuilder::pooler_mode) it sleeps
    /// until that lapse, at most [`poll_cap`](crate::ClientBuilder::poll_cap) at a time. Waiters
    /// are not queued. A `timeout` of [`Duration::MAX`] waits without bound.
    ///
    /// # Errors
    ///
    /// - [`crate::Error::is_wait_timeout`] (client-side, no SQLSTATE): `timeout` passed.
    /// - as [`Semaphore::try_acquire`], except that connection errors are retried until
    ///   `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Client::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(s: &pglease::Semaphore) -> pglease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lease = s.acquire(Duration::from_secs(60)).await?;
    /// println!("slot {:?} at epoch {}", lease.slot(), lease.epoch());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, timeout: Duration) -> Result<Lease> {
        self.client
            .acquire_target(
                &self.target(),
                self.ttl,
                self.data.as_deref(),
                Deadline::after(timeout),
            )
            .await
    }

    /// The slots held now, ordered by slot: each with its key, holder, epoch, expiry and data
    /// (`lease.list_slots`, advisory). Free and lapsed slots are left out
    /// ([`crate::list_slots`] reports them too).
    ///
    /// # Errors
    ///
    /// As [`crate::list_slots`], plus pool errors ([`crate::Error::is_connection`],
    /// [`crate::Error::is_closed`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(s: &pglease::Semaphore) -> pglease::Result<()> {
    /// for holder in s.holders().await? {
    ///     println!("slot {}: {:?} at epoch {}", holder.slot, holder.state.owner, holder.state.epoch);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn holders(&self) -> Result<Vec<SlotState>> {
        let conn = self.client.conns().get().await?;
        let mut slots = crate::calls::list_slots(&**conn, &self.name).await?;
        slots.retain(|s| s.state.held);
        Ok(slots)
    }

    /// What an acquire of this semaphore asks for.
    fn target(&self) -> Target {
        Target::Semaphore {
            name: self.name.clone(),
            max_holders: self.max_holders,
        }
    }
}
