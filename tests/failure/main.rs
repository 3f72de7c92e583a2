//! Failure-model suite: what pg_lease guarantees when the server stops, crashes, pauses or comes
//! back on another port, when sessions die or hang, when a TTL is too short, around the clock,
//! purge and DROP EXTENSION, with pooled connections, and across failovers to streaming standbys.
//!
//! docs/FAILURE-MODEL.md states the model and numbers its checks F1…Fn; each test's doc comment
//! names the check it makes, and `docs::every_check_of_the_failure_model_is_a_test` keeps the two
//! in step. Every test owns a private cluster ([`node::Node`]), so stopping, crashing or freezing
//! it disturbs nobody else.
//!
//! Synchronisation: a test never sleeps to wait for a state the server can show. It polls the
//! server (`lease.inspect` for expiry by the server clock, `pg_stat_activity` / `pg_locks` for
//! sessions that are gone, sleeping or blocked, `/proc` for a stopped process). The only plain
//! waits are for time itself to pass while the server cannot be asked (stopped or frozen; its
//! clock is this host's clock) and a holder's deliberately slow "work".

mod clock;
mod docs;
mod downtime;
mod durability;
mod extension;
mod failover;
mod hangs;
mod load;
mod node;
mod pause;
mod pooling;
mod purge;
mod sessions;
mod ttl;
mod waiters;

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Client;

pub use pglease_tests::calls::{
    Inspected, acquire, grant, grant_until, inspect, release, renew, try_acquire,
};
pub use pglease_tests::lapse::{await_lapsed, server_clock_reached};

/// How long any poll of the server may take before the test fails (generous: the machine is shared).
pub const LIMIT: Duration = Duration::from_secs(30);

/// Shorthand for the `inspect` row of a held key.
pub fn held(owner: &str, epoch: i64, expires_at: SystemTime) -> Option<Inspected> {
    Some((true, Some(owner.to_owned()), epoch, Some(expires_at)))
}

/// Shorthand for the `inspect` row of a key that is not held (FREE or LAPSED) with this counter.
pub fn not_held(counter: i64) -> Option<Inspected> {
    Some((false, None, counter, None))
}

/// Polls `pg_stat_activity` until backend `pid` has exited.
pub async fn await_backend_gone(observer: &Client, pid: i32) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let n: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .expect("read pg_stat_activity")
            .get(0);
        if n == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never exited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The `pg_stat_activity.state` of backend `pid` (`idle`, `idle in transaction`, ...).
pub async fn backend_state(observer: &Client, pid: i32) -> Option<String> {
    observer
        .query_one("SELECT state FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("read pg_stat_activity")
        .get(0)
}

/// Polls `/proc` until process `pid` is stopped (state `T`) after a SIGSTOP.
pub fn await_process_stopped(pid: i32) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
        // Fields after the parenthesised command name: state is the first.
        let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
        if state == Some("T") {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} never stopped");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Awaits `fut`, failing the test if it takes longer than [`LIMIT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {LIMIT:?}"))
}

/// The SQLSTATE of a failed call.
pub fn code_of(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_owned())
        .unwrap_or_else(|| panic!("expected a server error, got: {e}"))
}

/// A small deterministic pseudo-random generator (xorshift64*), seeded per test run and printed,
/// so a failing load can be replayed.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from the clock (printed) or from `PGLEASE_FAILURE_SEED`.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("PGLEASE_FAILURE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .expect("clock after 1970")
                    .as_nanos() as u64
            });
        eprintln!("{what}: PGLEASE_FAILURE_SEED={seed}");
        Rng::new(seed)
    }

    /// A generator with this seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}
