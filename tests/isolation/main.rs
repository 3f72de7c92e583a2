//! Isolation suite: concurrent calls of the pg_lease API, interleaved step by step, and when blocking
//! acquires wake.
//!
//! `spec` is a small isolation tester in the spirit of PostgreSQL's (`src/test/isolation`): each test
//! of the spec modules states one property of docs/SEMANTICS.md, runs explicit permutations of named
//! steps in named sessions and compares the transcript with the expected one, `<waiting ...>` and
//! `<... completed>` included. `wait_wake` checks by server timestamps that blocking acquires wake at
//! (never before) the release or lapse that frees the key, one grant per release.

mod acquire;
mod blocking;
mod refusals;
mod release;
mod renew;
mod spec;
mod wait_wake;

/// A step that returns once the committed state of key `k` is no longer held (its lease lapsed by the
/// server clock). Used in timer sessions: it polls the server, it does not assume time passed.
pub const AWAIT_LAPSE: &str = "DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP \
                               PERFORM pg_sleep(0.01); END LOOP; END $$";
