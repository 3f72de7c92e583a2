//! The operator console (`pglease ui`, `pglease metrics`, `pglease demo --ui`) in a real browser,
//! against the real binary and a real PostgreSQL: each test makes its state with SQL, starts the
//! console as a child process, and drives headless Chromium through chromedriver (one per test
//! binary, one browser session per test) or speaks HTTP to it. Nothing is mocked; every wait polls
//! a condition, bounded by `harness::WAIT`. Chromium and chromedriver are required (scripts/test.sh
//! installs them): without them the tests fail and say so. Screenshots of every view go to
//! `$CARGO_TARGET_DIR/console-screenshots/` (docs/TESTING.md).

#[path = "../e2e/common.rs"]
#[allow(dead_code)]
mod common;

mod actions;
mod bounded;
mod demo;
mod harness;
mod http;
mod leases;
mod live;
mod metrics;
mod queues;
mod safety;
mod screenshot;
mod security;
mod views;
