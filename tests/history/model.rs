//! The recorded history: one [`Op`] per call a client made, with its arguments, its result (or
//! SQLSTATE), the server clock around it and whether it committed.

use std::fmt;

/// A server timestamp in microseconds since the Unix epoch (`clock_timestamp()` resolution).
pub type Micros = i64;

/// What a client asked for. Intervals are whole milliseconds, so `expires_at - ttl` is exact.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `lease.acquire(key, owner, ttl, wait)`.
    Acquire {
        key: String,
        owner: String,
        ttl_ms: i64,
        wait_ms: i64,
    },
    /// `lease.renew(key, owner, epoch, ttl)`.
    Renew {
        key: String,
        owner: String,
        epoch: i64,
        ttl_ms: i64,
    },
    /// `lease.release(key, owner, epoch)`.
    Release {
        key: String,
        owner: String,
        epoch: i64,
    },
    /// `lease.transfer(key, owner, epoch, to_owner, ttl)`: ends the grant (key, owner, epoch) and
    /// grants the key to `to_owner` with the next epoch, in one step.
    Transfer {
        key: String,
        owner: String,
        epoch: i64,
        to_owner: String,
        ttl_ms: i64,
    },
    /// `lease.fence(key, owner, epoch)` followed by a guarded write, in an explicit transaction.
    Fence {
        key: String,
        owner: String,
        epoch: i64,
    },
    /// `lease.force_release(key)` by the installing role: ends whatever grant of the key is held.
    ForceRelease { key: String },
    /// `lease.inspect(key)`.
    Inspect { key: String },
    /// `lease.register_waiter(key)`.
    RegisterWaiter { key: String },
    /// `lease.purge(older_than)` (database-wide).
    Purge { older_than_ms: i64 },
}

impl Call {
    /// The key the call is about (none for purge).
    pub fn key(&self) -> Option<&str> {
        match self {
            Call::Acquire { key, .. }
            | Call::Renew { key, .. }
            | Call::Release { key, .. }
            | Call::Transfer { key, .. }
            | Call::Fence { key, .. }
            | Call::ForceRelease { key }
            | Call::Inspect { key }
            | Call::RegisterWaiter { key } => Some(key),
            Call::Purge { .. } => None,
        }
    }

    /// The owner the call acts as (none for inspect, register_waiter and purge); for a transfer,
    /// the holder that hands the key over.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Call::Acquire { owner, .. }
            | Call::Renew { owner, .. }
            | Call::Release { owner, .. }
            | Call::Transfer { owner, .. }
            | Call::Fence { owner, .. } => Some(owner),
            _ => None,
        }
    }

    /// The owner a grant made by the call goes to: acquire's owner, transfer's `to_owner`.
    pub fn grantee(&self) -> Option<&str> {
        match self {
            Call::Acquire { owner, .. } => Some(owner),
            Call::Transfer { to_owner, .. } => Some(to_owner),
            _ => None,
        }
    }

    /// True for the calls that may make a grant (acquire, transfer).
    pub fn grants(&self) -> bool {
        matches!(self, Call::Acquire { .. } | Call::Transfer { .. })
    }

    /// The epoch the call presents (renew, release, transfer, fence).
    pub fn epoch(&self) -> Option<i64> {
        match self {
            Call::Renew { epoch, .. }
            | Call::Release { epoch, .. }
            | Call::Transfer { epoch, .. }
            | Call::Fence { epoch, .. } => Some(*epoch),
            _ => None,
        }
    }

    /// The ttl in microseconds (acquire, renew, transfer).
    pub fn ttl_us(&self) -> Option<Micros> {
        match self {
            Call::Acquire { ttl_ms, .. }
            | Call::Renew { ttl_ms, .. }
            | Call::Transfer { ttl_ms, .. } => Some(ttl_ms * 1000),
            _ => None,
        }
    }

    /// True for calls that may change lease state (and so matter when their commit is unknown).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Call::Acquire { .. }
                | Call::Renew { .. }
                | Call::Release { .. }
                | Call::Transfer { .. }
                | Call::ForceRelease { .. }
        )
    }
}

/// A lease as `inspect` or `register_waiter` reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub held: bool,
    pub owner: Option<String>,
    /// The epoch (held) or the counter (not held); `None` only from register_waiter when not held.
    pub epoch: Option<i64>,
    pub expires_at: Option<Micros>,
    /// register_waiter only: `expires_at - lapses_in`, the server's `now` as the call saw it.
    pub now: Option<Micros>,
}

/// What the call returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Acquired {
        acquired: bool,
        epoch: Option<i64>,
        expires_at: Option<Micros>,
    },
    Renewed {
        status: String,
        expires_at: Option<Micros>,
    },
    Released {
        status: String,
    },
    /// transfer: `ok` with the successor's epoch and expiry, or a refusal with neither.
    Transferred {
        status: String,
        epoch: Option<i64>,
        expires_at: Option<Micros>,
    },
    /// fence passed, returning the lease's expiry; `pre_commit` is the server clock read just
    /// before the transaction's COMMIT, `commit_sent` the client clock when COMMIT was sent (both
    /// set when the transaction ends, if it tried to commit).
    Fenced {
        expires_at: Micros,
        pre_commit: Option<Micros>,
        commit_sent: Option<u64>,
    },
    /// inspect: zero rows (`None`) or one.
    /// force_release: the epoch it ended, or `None` (nothing held, nothing changed).
    Forced(Option<i64>),
    Inspected(Option<View>),
    Registered(View),
    Purged(i64),
    /// The statement failed with this SQLSTATE (the transaction did not commit).
    Failed(String),
    /// The connection died while the call was in flight: its result is unknown.
    Lost,
}

/// Whether the call's effects became visible to others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Committed (autocommit statement returned, or COMMIT returned, or the xid is committed).
    Committed,
    /// Rolled back, aborted by an error, or the connection died before COMMIT was sent.
    NotCommitted,
    /// Unknown (the connection died during the statement or the COMMIT): possibly committed.
    Ambiguous,
    /// Inside an explicit transaction that has not ended yet (never seen by the checker).
    Pending,
}

/// One call in the history.
#[derive(Debug, Clone)]
pub struct Op {
    /// Index in the history.
    pub id: usize,
    /// Which client made it (the purger is client `usize::MAX`).
    pub client: usize,
    /// The explicit transaction it ran in (`None`: autocommit).
    pub tx: Option<usize>,
    pub call: Call,
    pub outcome: Outcome,
    /// Server clock read by the same statement just before and just after the call.
    pub t0: Option<Micros>,
    pub t1: Option<Micros>,
    /// A server time the call certainly ran after (t0 if known, else the client's last reading).
    pub lo: Micros,
    /// Client monotonic clock (ns since the run started) when the call was sent / answered.
    pub sent: u64,
    pub done: u64,
    pub commit: Commit,
    /// Client monotonic clock when the commit was confirmed (autocommit: `done`; else COMMIT's answer).
    pub visible_at: Option<u64>,
}

impl Op {
    /// For a new grant (by acquire or transfer) or an ok renew: the server instant that wrote the
    /// expiry (expires_at - ttl).
    pub fn write_time(&self) -> Option<Micros> {
        let x = match &self.outcome {
            Outcome::Acquired {
                acquired: true,
                expires_at: Some(x),
                ..
            } => *x,
            Outcome::Transferred {
                status,
                expires_at: Some(x),
                ..
            } if status == "ok" => *x,
            Outcome::Renewed {
                status,
                expires_at: Some(x),
            } if status == "ok" => *x,
            _ => return None,
        };
        Some(x - self.call.ttl_us()?)
    }

    /// `(epoch, expires_at)` of a granted acquire, or of the successor's grant of an ok transfer
    /// (granted to [`Call::grantee`]).
    pub fn granted(&self) -> Option<(i64, Micros)> {
        match &self.outcome {
            Outcome::Acquired {
                acquired: true,
                epoch: Some(e),
                expires_at: Some(x),
            } => Some((*e, *x)),
            Outcome::Transferred {
                status,
                epoch: Some(e),
                expires_at: Some(x),
            } if status == "ok" => Some((*e, *x)),
            _ => None,
        }
    }

    /// The epoch a force_release ended, if it ended one.
    pub fn forced(&self) -> Option<i64> {
        match &self.outcome {
            Outcome::Forced(e) => *e,
            _ => None,
        }
    }

    /// True for an ok transfer (which ended the grant it presented).
    pub fn transferred(&self) -> bool {
        matches!(&self.outcome, Outcome::Transferred { status, .. } if status == "ok")
    }

    /// Expiry set by an ok renew.
    pub fn renewed(&self) -> Option<Micros> {
        match &self.outcome {
            Outcome::Renewed {
                status,
                expires_at: Some(x),
            } if status == "ok" => Some(*x),
            _ => None,
        }
    }

    /// True for an ok release.
    pub fn released(&self) -> bool {
        matches!(&self.outcome, Outcome::Released { status } if status == "ok")
    }

    /// True if the call may have written something whose commit is unknown (see the checker).
    pub fn maybe_wrote(&self) -> bool {
        self.call.writes()
            && match &self.outcome {
                Outcome::Lost => true,
                Outcome::Acquired { acquired, .. } => *acquired,
                Outcome::Forced(e) => e.is_some(),
                Outcome::Renewed { status, .. }
                | Outcome::Released { status }
                | Outcome::Transferred { status, .. } => status == "ok",
                _ => false,
            }
    }
}

/// Formats a server time relative to `base` in milliseconds (µs precision).
pub fn rel(t: Micros, base: Micros) -> String {
    format!("{:+.3}ms", (t - base) as f64 / 1000.0)
}

/// A one-line rendering of an op, with times relative to `base`.
pub struct Show<'a>(pub &'a Op, pub Micros);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, base) = (self.0, self.1);
        let t = |t: Option<Micros>| t.map_or("?".to_string(), |t| rel(t, base));
        write!(f, "#{} c{}", op.id, op.client)?;
        if let Some(tx) = op.tx {
            write!(f, " tx{tx}")?;
        }
        match &op.call {
            Call::Acquire {
                key,
                owner,
                ttl_ms,
                wait_ms,
            } => write!(f, " acquire({key}, {owner}, {ttl_ms}ms, wait {wait_ms}ms)")?,
            Call::Renew {
                key,
                owner,
                epoch,
                ttl_ms,
            } => write!(f, " renew({key}, {owner}, {epoch}, {ttl_ms}ms)")?,
            Call::Release { key, owner, epoch } => write!(f, " release({key}, {owner}, {epoch})")?,
            Call::Transfer {
                key,
                owner,
                epoch,
                to_owner,
                ttl_ms,
            } => write!(
                f,
                " transfer({key}, {owner}, {epoch}, to {to_owner}, {ttl_ms}ms)"
            )?,
            Call::Fence { key, owner, epoch } => write!(f, " fence({key}, {owner}, {epoch})")?,
            Call::ForceRelease { key } => write!(f, " force_release({key})")?,
            Call::Inspect { key } => write!(f, " inspect({key})")?,
            Call::RegisterWaiter { key } => write!(f, " register_waiter({key})")?,
            Call::Purge { older_than_ms } => write!(f, " purge({older_than_ms}ms)")?,
        }
        let x = |x: &Option<Micros>| t(*x);
        match &op.outcome {
            Outcome::Acquired {
                acquired,
                epoch,
                expires_at,
            } => write!(f, " -> ({acquired}, {epoch:?}, {})", x(expires_at))?,
            Outcome::Renewed { status, expires_at } => {
                write!(f, " -> ({status}, {})", x(expires_at))?
            }
            Outcome::Released { status } => write!(f, " -> {status}")?,
            Outcome::Transferred {
                status,
                epoch,
                expires_at,
            } => write!(f, " -> ({status}, {epoch:?}, {})", x(expires_at))?,
            Outcome::Fenced {
                expires_at,
                pre_commit,
                ..
            } => write!(
                f,
                " -> {} (pre-commit {})",
                rel(*expires_at, base),
                x(pre_commit)
            )?,
            Outcome::Forced(e) => write!(f, " -> {e:?}")?,
            Outcome::Inspected(None) => write!(f, " -> no row")?,
            Outcome::Inspected(Some(v)) | Outcome::Registered(v) => write!(
                f,
                " -> (held {}, {:?}, {:?}, {})",
                v.held,
                v.owner,
                v.epoch,
                x(&v.expires_at)
            )?,
            Outcome::Purged(n) => write!(f, " -> {n}")?,
            Outcome::Failed(code) => write!(f, " -> ERROR {code}")?,
            Outcome::Lost => write!(f, " -> connection lost")?,
        }
        write!(f, " [{} .. {}] {:?}", t(op.t0), t(op.t1), op.commit)?;
        if op.t0.is_none() {
            write!(f, " (ran after {})", rel(op.lo, base))?;
        }
        Ok(())
    }
}
