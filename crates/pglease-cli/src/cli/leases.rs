//! The command line of the commands that operate leases by hand: `acquire`, `renew`, `release`,
//! `transfer`, `force-release`, `inspect`, `history`, `list`, `purge`, and `leader` (who holds an
//! election's key).

use std::time::Duration;

use clap::Args;

use pglease::limits::MAX_HISTORY_ROWS;

use super::{
    ConnArgs, EpochArg, KeyArg, OutputArgs, Since, TtlArg, WaitArg, parse_name, parse_prefix,
    parse_since, parse_wait,
};

/// Options of `pglease acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub ttl: TtlArg,
    #[command(flatten)]
    pub wait: WaitArg,

    /// Who acquires the lease (1 to 1024 bytes). Default: $PGLEASE_OWNER, else
    /// `<hostname>-<pid>-<nonce>` (printed, so you can pass it to renew and release).
    #[arg(short, long, value_name = "OWNER", value_parser = parse_name, env = "PGLEASE_OWNER", help_heading = "Lease")]
    pub owner: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// The owner of an existing grant (renew, release).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct OwnerArg {
    /// The owner the lease was acquired as.
    #[arg(short, long, value_name = "OWNER", value_parser = parse_name, env = "PGLEASE_OWNER")]
    pub owner: String,
}

/// Options of `pglease renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub owner: OwnerArg,
    #[command(flatten)]
    pub epoch: EpochArg,
    #[command(flatten)]
    pub ttl: TtlArg,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub owner: OwnerArg,
    #[command(flatten)]
    pub epoch: EpochArg,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease transfer`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub owner: OwnerArg,
    #[command(flatten)]
    pub epoch: EpochArg,

    /// The successor: the owner string that holds the key after the transfer (1 to 1024 bytes).
    ///
    /// It takes the grant over by acquiring the key as exactly this owner (`pglease elect
    /// --exact-owner`, or a client with this owner) under the same database role or a member of
    /// it; nobody renews it until then.
    #[arg(long, value_name = "OWNER", value_parser = parse_name, help_heading = "Lease")]
    pub to: String,

    #[command(flatten)]
    pub ttl: TtlArg,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The key (1 to 1024 bytes): a plain key, a semaphore's slot key NAME#N, an election's name,
    /// or a queue partition's key lease_queue:QUEUE:P.
    #[arg(value_name = "KEY", value_parser = parse_name)]
    pub key: String,

    /// Only grants still current at this time or later: a duration back from now by the server's
    /// clock (30m, 2h, 7d) or an RFC 3339 time in UTC (2026-12-05T08:00:00Z).
    #[arg(long, value_name = "DURATION_OR_TIME", value_parser = parse_since,
          allow_hyphen_values = true, help_heading = "Filter")]
    pub since: Option<Since>,

    /// Only grants made to this owner.
    #[arg(long, value_name = "OWNER", value_parser = parse_name, help_heading = "Filter")]
    pub owner: Option<String>,

    /// At most the latest N grants (1 to 10000), still shown oldest first.
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HISTORY_ROWS)),
          help_heading = "Filter")]
    pub limit: u32,

    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The key (1 to 1024 bytes); or give it with --key.
    #[arg(value_name = "KEY", value_parser = parse_name, required_unless_present = "key_option",
          conflicts_with = "key_option")]
    pub key: Option<String>,
    /// The key: the name of the resource (1 to 1024 bytes, compared byte for byte).
    #[arg(short = 'k', long = "key", id = "key_option", value_name = "KEY", value_parser = parse_name,
          help_heading = "Lease")]
    pub key_option: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys starting with this prefix (byte for byte).
    #[arg(value_name = "PREFIX", value_parser = parse_prefix)]
    pub prefix: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease force-release`.
#[derive(Debug, Args)]
pub struct ForceReleaseArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Forget keys free or lapsed for longer than this, e.g. 1d, 12h (0 to 365 days).
    #[arg(long, value_name = "DURATION", value_parser = parse_wait, allow_hyphen_values = true)]
    pub older_than: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

impl InspectArgs {
    /// The key, whichever way it was given.
    pub fn key(&self) -> &str {
        self.key
            .as_deref()
            .or(self.key_option.as_deref())
            .unwrap_or_default()
    }
}

/// Options of `pglease leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's name (as given to `pglease elect`).
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,

    /// Keep watching: print the current state, then a line per change, until interrupted.
    ///
    /// With --json, one JSON document per line.
    #[arg(long)]
    pub watch: bool,

    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}
