//! The command line of the commands that administer a database: `configure`, `install`, `status`.

use std::time::Duration;

use clap::Args;

use super::{ConnArgs, OutputArgs, parse_history_retention, parse_ttl};

/// Options of `pglease configure`.
#[derive(Debug, Args)]
pub struct ConfigureArgs {
    /// Cap every ttl at this, e.g. 60s (at most 365 days).
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl, conflicts_with = "no_max_ttl")]
    pub max_ttl: Option<Duration>,
    /// Remove the ttl cap (and so the quarantine, which needs it).
    #[arg(long)]
    pub no_max_ttl: bool,
    /// After a promotion, refuse new grants for this long, e.g. 70s (at least the cap).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_ttl,
        conflicts_with = "no_failover_quarantine"
    )]
    pub failover_quarantine: Option<Duration>,
    /// Turn the failover quarantine off.
    #[arg(long)]
    pub no_failover_quarantine: bool,
    /// Record every grant in the history (`on`, the default) or not (`off`: grants already
    /// recorded are kept; `pglease history` shows those that ended meanwhile as unrecorded).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub history: Option<bool>,
    /// How long `pglease purge` keeps the history of a grant after it ended, e.g. 7d (1s to 3650
    /// days; 30 days by default).
    #[arg(long, value_name = "DURATION", value_parser = parse_history_retention)]
    pub history_retention: Option<Duration>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

impl ConfigureArgs {
    /// Whether the ttl cap or the quarantine is to change.
    pub fn changes(&self) -> bool {
        self.max_ttl.is_some()
            || self.no_max_ttl
            || self.failover_quarantine.is_some()
            || self.no_failover_quarantine
    }

    /// Whether the history's settings are to change.
    pub fn history_changes(&self) -> bool {
        self.history.is_some() || self.history_retention.is_some()
    }
}

/// Parses `on` or `off`.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

/// Options of `pglease install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Which of our extensions to install (with every extension it requires, first).
    #[arg(value_name = "EXTENSION", default_value = "pg_lease", value_parser = parse_extension)]
    pub extension: &'static pglease::Extension,

    /// Install by running the extension's SQL script (recorded in `<schema>.schema_migrations`)
    /// instead of CREATE EXTENSION: for servers without the extension files.
    #[arg(long)]
    pub schema_only: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// One of [`pglease::EXTENSIONS`], by name.
fn parse_extension(name: &str) -> Result<&'static pglease::Extension, String> {
    pglease::EXTENSIONS
        .iter()
        .copied()
        .find(|e| e.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = pglease::EXTENSIONS.iter().map(|e| e.name).collect();
            format!(
                "no extension {name:?} (this pglease installs: {})",
                known.join(", ")
            )
        })
}
