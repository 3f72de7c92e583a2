//! Regression suite: every row of the pg_lease SQL API against a real PostgreSQL server.
//!
//! Each module covers one part of the contract in docs/SEMANTICS.md; test names state the
//! property. Calls go through SQL (as an application would), as the non-superuser role `app`;
//! assertions compare values, booleans computed by the server, and SQLSTATEs — never message text.

mod acquire;
mod blocking;
mod browse;
mod data;
mod docs;
mod extension;
mod fence;
mod history;
mod installcheck;
mod installer;
mod invalid_input;
mod list;
mod privileges;
mod purge;
mod queue;
mod queue_install;
mod queue_upgrade;
mod readme;
mod release;
mod renew;
mod renew_many;
mod roles;
mod semaphore;
mod settings;
mod storage;
mod transactions;
mod upgrade;
mod waiters;
mod watch;

pub use pglease_tests::calls::{Inspected, acquire, grant, inspect, release, renew};
pub use pglease_tests::lapse::{await_lapsed, lapse};
