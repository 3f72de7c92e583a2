//! Isolation suite: concurrent calls of the pg_lease API, interleaved step by step, and when blocking
//! acquires wake.
//!
//! The interleavings are data: each file `specs/NAME.spec` (the format: `parse.rs`) defines sessions
//! with named steps and explicit permutations of them, each permutation named for the property of
//! docs/SEMANTICS.md its transcript shows; `expected/NAME.out` holds the transcripts, `<waiting ...>`
//! and `<... completed>` included. `spec` runs them in the spirit of PostgreSQL's isolation tester
//! (`src/test/isolation`), and `specs` has one test per spec file. `acquire` races sessions released
//! at once by a barrier; `wait_wake` checks by server timestamps that blocking acquires wake at
//! (never before) the release or lapse that frees the key, one grant per release.

mod acquire;
mod diff;
mod parse;
mod spec;
mod specs;
mod wait_wake;

/// A statement that returns once the committed state of key `k` is no longer held (its lease lapsed
/// by the server clock): it polls the server, it does not assume time passed. The spec files' timer
/// steps (`t_await_lapse`) run the same SQL.
pub const AWAIT_LAPSE: &str = "DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP \
                               PERFORM pg_sleep(0.01); END LOOP; END $$";
