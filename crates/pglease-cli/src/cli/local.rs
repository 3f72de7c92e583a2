//! The command line of `pglease local ...` (the embedded local server) and `pglease demo`.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{OutputArgs, parse_run_ttl};

/// `pglease local ...`.
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Start the local server (creating it on first use) and install pg_lease; a no-op if running.
    Start(LocalStartArgs),
    /// Stop the local server (fast shutdown); its data stays for the next start.
    Stop,
    /// Say whether the local server runs, and its version, directory and URL.
    Status(LocalStatusArgs),
    /// Print a connection URL for the local server (starting it if needed), e.g. for psql.
    Url(LocalUrlArgs),
}

/// The PostgreSQL version of a new local server.
#[derive(Debug, Clone, Copy, Args)]
pub struct PgVersionArg {
    /// PostgreSQL major version for a new local server (14 to 18); an existing one keeps its own.
    #[arg(long, value_name = "MAJOR", env = "PGLEASE_LOCAL_PG_VERSION", default_value_t = 15,
          value_parser = clap::value_parser!(u32).range(14..=18))]
    pub pg_version: u32,
}

/// Options of `pglease local start`.
#[derive(Debug, Args)]
pub struct LocalStartArgs {
    #[command(flatten)]
    pub pg: PgVersionArg,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Options of `pglease local status`.
#[derive(Debug, Args)]
pub struct LocalStatusArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Options of `pglease local url`.
#[derive(Debug, Args)]
pub struct LocalUrlArgs {
    #[command(flatten)]
    pub pg: PgVersionArg,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Options of `pglease demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// PostgreSQL major version to run (14 to 18).
    #[arg(long, value_name = "MAJOR", default_value_t = 15, value_parser = clap::value_parser!(u32).range(14..=18))]
    pub pg_version: u32,

    /// Lease time-to-live used by the workers (e.g. 2s, 1500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_run_ttl,
          allow_hyphen_values = true)]
    pub ttl: Duration,

    /// After the story, keep the server running with workers on it (jobs that lapse and are taken
    /// over, an election that hands over, a semaphore, a queue with dead letters) and serve the
    /// operator console on them (`pglease ui`, actions allowed) until Ctrl-C.
    #[arg(long)]
    pub ui: bool,

    /// Where the console listens with --ui (IP:PORT; loopback only: the demo has no token).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", requires = "ui",
          value_parser = parse_loopback)]
    pub listen: std::net::SocketAddr,
}

/// A loopback IP:PORT.
fn parse_loopback(s: &str) -> Result<std::net::SocketAddr, String> {
    let addr: std::net::SocketAddr = s
        .parse()
        .map_err(|e| format!("{e} (e.g. 127.0.0.1:8080)"))?;
    if !addr.ip().is_loopback() {
        return Err("must be a loopback address (the demo's console has no token)".into());
    }
    Ok(addr)
}
