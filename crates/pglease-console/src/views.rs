//! The JSON the console's API answers with (docs/CONSOLE.md describes every field). Times are
//! relative to the database server's clock when the answer was made: `expires_in_ms` counts
//! down, `*_age_ms` up; the page moves them on with its own clock between answers.

use std::time::SystemTime;

use serde::Serialize;
use tokio_postgres::Row;

/// Milliseconds from `now` until `t` (negative once `t` has passed).
pub fn millis_until(t: SystemTime, now: SystemTime) -> i64 {
    match t.duration_since(now) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

fn unix_ms(t: SystemTime) -> i64 {
    millis_until(t, SystemTime::UNIX_EPOCH)
}

/// A page of `GET /api/leases`.
#[derive(Debug, Serialize)]
pub struct LeasePage {
    pub items: Vec<LeaseRow>,
    /// The `after` of the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
    pub counts: LeaseCounts,
}

/// A key and its state.
#[derive(Debug, Serialize)]
pub struct LeaseRow {
    pub key: String,
    /// `held`, `lapsed` or `free`.
    pub state: &'static str,
    pub owner: Option<String>,
    pub epoch: i64,
    /// Until the expiry (held) or since the lapse (negative); absent when free.
    pub expires_in_ms: Option<i64>,
    pub data: Option<String>,
    /// Someone waits for the key.
    pub waiting: bool,
    /// The holder whose grant lapsed (lapsed keys only).
    pub last_owner: Option<String>,
}

impl LeaseRow {
    pub fn from_browsed(r: &pglease::BrowsedLease, now: SystemTime) -> LeaseRow {
        LeaseRow {
            key: r.key.clone(),
            state: r.state.as_str(),
            owner: r.owner.clone(),
            epoch: r.epoch,
            expires_in_ms: r.expires_at.map(|t| millis_until(t, now)),
            data: r.data.clone(),
            waiting: r.waiting,
            last_owner: r.last_owner.clone(),
        }
    }
}

/// Keys by state (`lease.summary`).
#[derive(Debug, Serialize)]
pub struct LeaseCounts {
    pub held: u64,
    pub lapsed: u64,
    pub free: u64,
    /// Held, lapsing within `expiring_within_ms` unless renewed.
    pub expiring: u64,
    pub expiring_within_ms: u64,
    pub waiting: u64,
}

impl LeaseCounts {
    pub fn new(c: &pglease::LeaseCounts, expiring_within: std::time::Duration) -> LeaseCounts {
        LeaseCounts {
            held: c.held,
            lapsed: c.lapsed,
            free: c.free,
            expiring: c.expiring,
            expiring_within_ms: u64::try_from(expiring_within.as_millis()).unwrap_or(u64::MAX),
            waiting: c.waiting,
        }
    }
}

/// `GET /api/lease?key=`: a key and its latest grants, newest first.
#[derive(Debug, Serialize)]
pub struct LeaseDetail {
    pub lease: LeaseRow,
    pub history: Vec<GrantView>,
}

/// One grant from the history.
#[derive(Debug, Serialize)]
pub struct GrantView {
    pub epoch: i64,
    pub owner: String,
    pub holder_role: Option<String>,
    /// Unix milliseconds; absent for a grant held when the history began.
    pub granted_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// `released`, `lapsed`, `forced`, `transferred`, `unrecorded`; absent while held.
    pub ended_by: Option<String>,
    pub data: Option<String>,
}

impl From<&pglease::HistoryEntry> for GrantView {
    fn from(g: &pglease::HistoryEntry) -> GrantView {
        GrantView {
            epoch: g.epoch,
            owner: g.owner.clone(),
            holder_role: g.holder_role.clone(),
            granted_at: g.granted_at.map(unix_ms),
            ended_at: g.ended_at.map(unix_ms),
            ended_by: g.ended_by.as_ref().map(|e| e.as_str().to_owned()),
            data: g.data.clone(),
        }
    }
}

/// A semaphore: the slot keys `NAME#N`.
#[derive(Debug, Clone, Serialize)]
pub struct SemaphoreRow {
    pub name: String,
    pub holders: u64,
    /// The highest slot that exists (the limit itself is not stored in the database).
    pub slots: u32,
    pub owners: Vec<String>,
}

/// An election's key and its leader.
#[derive(Debug, Serialize)]
pub struct Election {
    pub name: String,
    /// Absent when no one leads.
    pub leader: Option<String>,
    pub term: Option<i64>,
    pub data: Option<String>,
    /// How long the leader has led (absent when unknown: no history of its grant).
    pub leading_for_ms: Option<i64>,
    pub expires_in_ms: Option<i64>,
}

impl Election {
    pub fn new(r: &pglease::BrowsedLease, since: Option<SystemTime>, now: SystemTime) -> Election {
        let held = r.state == pglease::KeyState::Held;
        Election {
            name: r.key.clone(),
            leader: if held { r.owner.clone() } else { None },
            term: held.then_some(r.epoch),
            data: if held { r.data.clone() } else { None },
            leading_for_ms: since.filter(|_| held).map(|t| -millis_until(t, now)),
            expires_in_ms: if held {
                r.expires_at.map(|t| millis_until(t, now))
            } else {
                None
            },
        }
    }

    pub fn unknown(name: &str) -> Election {
        Election {
            name: name.to_owned(),
            leader: None,
            term: None,
            data: None,
            leading_for_ms: None,
            expires_in_ms: None,
        }
    }
}

/// A queue and its partitions (`GET /api/queues`).
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    pub name: String,
    pub partitions: Vec<PartitionRow>,
    pub partition_count: i32,
    pub max_attempts: i32,
    /// Sum over the partitions.
    pub backlog: i64,
    pub dead_letters: i64,
    /// Whether this role sees holders and open batches (it may consume the queue).
    pub holders_visible: bool,
    /// Partitions whose lease no one holds; absent when holders are not visible.
    pub unowned: Option<i64>,
    /// Messages acked per second, sampled by the console while someone watches (oldest first).
    pub consumed_per_s: Vec<f64>,
}

impl QueueRow {
    pub fn new(
        name: String,
        partition_count: i32,
        max_attempts: i32,
        holders_visible: bool,
        partitions: Vec<PartitionRow>,
    ) -> QueueRow {
        QueueRow {
            backlog: partitions.iter().map(|p| p.backlog).sum(),
            dead_letters: partitions.iter().map(|p| p.dead_letters).sum(),
            holders_visible,
            unowned: holders_visible
                .then(|| partitions.iter().filter(|p| p.owner.is_none()).count() as i64),
            name,
            partitions,
            partition_count,
            max_attempts,
            consumed_per_s: Vec::new(),
        }
    }

    /// Messages acked in the queue so far (the partitions' counters), if the extension counts.
    pub fn acked(&self) -> Option<i64> {
        self.partitions.iter().map(|p| p.acked).sum()
    }
}

/// A partition of a queue (`lease_queue.status`).
#[derive(Debug, Clone, Serialize)]
pub struct PartitionRow {
    pub partition: i32,
    /// Absent when no consumer holds the partition (or the role may not consume the queue).
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    pub expires_in_ms: Option<i64>,
    pub batch_id: Option<i64>,
    /// Messages in the open batch (in flight).
    pub batch_size: i64,
    pub batch_age_ms: Option<i64>,
    /// Messages not yet acked, outside the open batch.
    pub backlog: i64,
    pub oldest_age_ms: Option<i64>,
    pub held_back_keys: i64,
    pub dead_letters: i64,
    /// Messages acked in the partition (absent before pg_lease_queue 0.2.0).
    pub acked: Option<i64>,
}

/// A dead letter (`GET /api/queues/{queue}/dead-letters`).
#[derive(Debug, Serialize)]
pub struct DeadLetter {
    pub id: i64,
    pub partition: i32,
    pub key: Option<String>,
    /// Absent unless the console was started with --show-payloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    pub attempts: i32,
    pub reason: Option<String>,
    pub epoch: Option<i64>,
    pub enqueued_at: i64,
    pub dead_at: i64,
}

impl DeadLetter {
    pub fn from_row(r: &Row, payloads: bool) -> DeadLetter {
        DeadLetter {
            id: r.get(0),
            partition: r.get(1),
            key: r.get(2),
            payload: if payloads { r.get(3) } else { None },
            attempts: r.get(4),
            reason: r.get(5),
            epoch: r.get(6),
            enqueued_at: unix_ms(r.get(7)),
            dead_at: unix_ms(r.get(8)),
        }
    }
}
