//! What a phase (preload, drain) cost: server CPU, the client's CPU and WAL, per message.

use serde::Serialize;
use tokio_postgres::Client;

use crate::stats::{self, round1};

/// Per message of a phase; None where it could not be read (a server elsewhere: no CPU).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cost {
    /// Server CPU (the postmaster and its children, from /proc), µs per message.
    pub server_cpu_us: Option<f64>,
    /// The client's CPU (the harness for ours and pgmq, the node process for the others), µs per
    /// message.
    pub client_cpu_us: Option<f64>,
    /// WAL written (pg_current_wal_lsn before and after), bytes per message.
    pub wal_bytes: Option<f64>,
}

/// Where the client runs: in the harness (its own CPU) or in a child process.
#[derive(Clone, Copy)]
pub(super) enum ClientProc {
    Harness,
    Child(u32),
    Unknown,
}

impl ClientProc {
    fn ticks(self) -> Option<u64> {
        match self {
            ClientProc::Harness => Some(stats::cpu::self_ticks()),
            ClientProc::Child(pid) => stats::cpu::process_ticks(pid),
            ClientProc::Unknown => None,
        }
    }
}

pub(super) struct Meter {
    server: Option<u64>,
    client: Option<u64>,
    wal: Option<i64>,
    proc_: ClientProc,
}

async fn wal_now(c: &Client) -> Option<i64> {
    c.query_one(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8",
        &[],
    )
    .await
    .ok()
    .map(|r| r.get(0))
}

impl Meter {
    pub(super) async fn start(mon: &Client, proc_: ClientProc) -> Meter {
        Meter {
            wal: wal_now(mon).await,
            server: stats::cpu::server_ticks().map(|t| t.0),
            client: proc_.ticks(),
            proc_,
        }
    }

    /// The cost per message of the `n` messages handled since `start`.
    pub(super) async fn finish(self, mon: &Client, n: u64) -> Cost {
        let server = stats::cpu::server_ticks().map(|t| t.0);
        let client = self.proc_.ticks();
        let wal = wal_now(mon).await;
        let per = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if n > 0 && b >= a => {
                Some(round1((b - a) as f64 * stats::cpu::TICK_US / n as f64))
            }
            _ => None,
        };
        Cost {
            server_cpu_us: per(self.server, server),
            client_cpu_us: per(self.client, client),
            wal_bytes: match (self.wal, wal) {
                (Some(a), Some(b)) if n > 0 => Some(round1((b - a) as f64 / n as f64)),
                _ => None,
            },
        }
    }
}
