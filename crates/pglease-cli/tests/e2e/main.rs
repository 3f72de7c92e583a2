//! End-to-end tests of the `pglease` binary: each case drives the built binary as a user would,
//! against a private PostgreSQL server (pgcluster) or the embedded local server, in its own
//! temporary directory and database.

mod bounds;
mod common;
mod demo;
mod exit_codes;
mod first_contact;
mod fleet;
mod handover;
mod json;
mod local;
mod queue;
mod readme;
mod roles;
mod run;
mod run_supervision;
mod terminal;
mod tls;
mod usage;
mod verbose;
