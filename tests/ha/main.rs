//! pg_lease under a real HA manager: Patroni 4 with etcd (issue 15, part 4; docs/FAILURE-MODEL.md
//! §2.15, checks H1–H3).
//!
//! Each test starts its own etcd and two Patroni nodes ([`patroni::HaCluster`]), installs pg_lease
//! on the leader with the Rust installer (`pglease::install`: no extension files in the server's
//! installation), and holds leases with a `pglease::Client` whose connection string lists both
//! nodes with `target_session_attrs=read-write`. Then it crashes the leader's whole node (Patroni,
//! the postmaster and every backend, frozen and SIGKILLed at once) and lets Patroni fail over by
//! itself: the replica's Patroni sees the leader key expire in etcd and promotes its server.
//!
//! The tests are `#[ignore]`d: they need etcd and Patroni, which the HA section of the test command
//! installs (`scripts/ha-test.sh`, also `scripts/test.sh --ha-only`) and names in
//! `PGLEASE_HA_ETCD` and `PGLEASE_HA_PATRONI`; it runs them with `--ignored`, one at a time.
//!
//! Synchronisation: nothing sleeps to wait for a state. The tests poll what the systems show:
//! Patroni's REST API (`/primary`, `/replica`, `/sync`), the servers (`pg_is_in_recovery()`,
//! `pg_stat_replication`, replay positions, `/proc` for a stopped process) and the client's own
//! log events (renewals confirmed, failed, the loss), each wait bounded. Bounds are for
//! correctness only; measured times are printed, never asserted against a speed.

mod failover;
mod observe;
mod patroni;
mod procs;
mod rest;

use std::time::Duration;

/// How long an ordinary wait may take before the test fails (generous: the machine is shared).
pub const LIMIT: Duration = Duration::from_secs(30);
