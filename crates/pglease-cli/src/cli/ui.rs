//! The command line of `pglease ui` (the operator console) and `pglease metrics` (its
//! Prometheus metrics alone).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ConnArgs, parse_ttl};

/// Options both `ui` and `metrics` take.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Console")]
pub struct ConsoleArgs {
    /// Read the access token from this file (its first line; the file must not be readable by
    /// group or others). Every request must then carry it: the login page asks for it; scripts
    /// and Prometheus send it as `Authorization: Bearer TOKEN` or as the password of Basic auth.
    /// PGLEASE_UI_TOKEN gives it too (the token is never a command-line value: `ps` shows those).
    /// Required for a --listen address that is not loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Show this election in the elections view and the metrics: an exact key, or every key
    /// starting with a prefix written `PREFIX*` (repeatable). The database does not know which
    /// keys are elections.
    #[arg(long = "election", value_name = "NAME")]
    pub elections: Vec<String>,

    /// A held lease counts as expiring (pglease_leases_expiring) when it lapses within this
    /// unless renewed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_ttl)]
    pub expiring_within: Duration,

    /// Export per-key metrics (pglease_lease_expires_in_seconds{key}, pglease_lease_epoch{key})
    /// for the keys starting with PREFIX, at most 1000 each (repeatable). Off by default: a
    /// label per key is a series per key.
    #[arg(long = "metrics-key-prefix", value_name = "PREFIX")]
    pub metric_key_prefixes: Vec<String>,

    /// Bound every statement the console sends: a slower one is cancelled by the server, and the
    /// page shows a notice instead of hanging.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_ttl)]
    pub statement_timeout: Duration,

    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease ui`.
#[derive(Debug, Clone, Args)]
pub struct UiArgs {
    /// Listen on this address (IP:PORT; port 0 picks a free one; the URL is printed on stdout).
    /// Off loopback, --token-file or PGLEASE_UI_TOKEN is required.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Offer the actions: redrive dead letters, force-release a queue partition, purge (each
    /// asks for confirmation and is logged). Without it the console is read-only and refuses
    /// every action with HTTP 403; it is always read-only on a standby.
    #[arg(long)]
    pub allow_actions: bool,

    /// Show message payloads (of dead letters). Hidden by default: they may hold personal data.
    #[arg(long)]
    pub show_payloads: bool,

    /// Serve under this path, e.g. /pglease behind a reverse proxy that forwards that prefix.
    #[arg(long, value_name = "PATH", default_value = "")]
    pub base_path: String,

    /// How often an open page gets its view pushed.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_ttl)]
    pub refresh: Duration,

    #[command(flatten)]
    pub console: ConsoleArgs,
}

/// Options of `pglease metrics`.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Listen on this address (IP:PORT) and serve /metrics there. Off loopback, --token-file or
    /// PGLEASE_UI_TOKEN is required.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9187")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub console: ConsoleArgs,
}
