//! The command line of the commands that run a command under a lease: `run` (a key, or a slot of a
//! semaphore with `--limit`) and `elect` (an election's leadership). Both take the supervision
//! flags of [`SupervisionArgs`], defined once; which lease is held is decided by the command parsed
//! ([`Holding`]).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use pglease::limits::MAX_HOLDERS;

use super::{
    ConnArgs, KeyArg, RunTtlArg, WaitArg, parse_data, parse_name, parse_run_owner, parse_run_ttl,
    parse_wait, parse_wait_arg,
};

/// Options of `pglease run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub key: KeyArg,
    #[command(flatten)]
    pub ttl: RunTtlArg,
    #[command(flatten)]
    pub wait: WaitArg,

    /// Hold one of N slots of the semaphore KEY instead of KEY itself: at most N runs at once.
    ///
    /// Slot i is the lease key KEY#i: the command gets PGLEASE_SLOT=i, PGLEASE_SEMAPHORE=KEY and
    /// PGLEASE_KEY=KEY#i, the key its epoch fences. --wait waits for a slot. Every run of the job
    /// should pass the same N: a lower N revokes no running slot, it only refuses new ones until
    /// fewer are held (docs/SEMANTICS.md §12). KEY is then at most 1018 bytes; N is 1 to 10000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HOLDERS)),
          help_heading = "Lease")]
    pub limit: Option<u32>,

    #[command(flatten)]
    pub data: DataArg,

    #[command(flatten)]
    pub supervision: SupervisionArgs,
}

impl RunArgs {
    /// What the run holds: KEY itself, or a slot of the semaphore KEY with `--limit`.
    pub fn holding(&self) -> Holding {
        match self.limit {
            Some(n) => Holding::SemaphoreSlot(n),
            None => Holding::Key,
        }
    }
}

/// Options of `pglease elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name: the lease key its leader holds (1 to 1024 bytes).
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,

    /// How long the leadership lasts unless renewed, e.g. 10s (41ms to 365 days).
    ///
    /// A crashed leader is replaced within about this long; it is renewed every third of it.
    #[arg(short, long, value_name = "DURATION", default_value = "10s", value_parser = parse_run_ttl,
          allow_hyphen_values = true, help_heading = "Lease")]
    pub ttl: Duration,

    /// Give up the campaign after this long (exit 3), e.g. 10m; default: wait forever.
    #[arg(short, long, value_name = "DURATION", default_value = "forever", value_parser = parse_wait_arg,
          allow_hyphen_values = true, help_heading = "Lease")]
    pub wait: Duration,

    #[command(flatten)]
    pub data: DataArg,

    /// When this leader steps down gracefully (its command exited, or pglease got SIGTERM or
    /// SIGINT and the command has exited), hand the leadership to OWNER instead of releasing it.
    ///
    /// OWNER is the exact owner string of the successor: a candidate started with `--exact-owner
    /// OWNER` (under the same database role). The transfer names an owner whether or not anyone
    /// campaigns as it: a waiting candidate with that owner takes over at once; otherwise the
    /// grant lapses after --ttl, and then any candidate can win. A leadership that was lost is not
    /// handed over; a failed handover falls back to releasing.
    #[arg(long, value_name = "OWNER", value_parser = parse_name, help_heading = "Lease")]
    pub handover_to: Option<String>,

    /// Campaign as exactly OWNER, without the nonce every run's owner gets (see --owner), so that
    /// another leader's --handover-to OWNER names this candidate.
    ///
    /// Give each candidate its own: two processes campaigning as one exact owner would both be
    /// the leader (an acquire returns a key's grant to the owner that holds it), and a restarted
    /// candidate resumes its predecessor's term if that has not lapsed.
    #[arg(long, value_name = "OWNER", value_parser = parse_name, conflicts_with = "owner",
          help_heading = "Lease")]
    pub exact_owner: Option<String>,

    #[command(flatten)]
    pub supervision: SupervisionArgs,
}

/// What `run` or `elect` holds while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// The key itself (`run`).
    Key,
    /// One of N slots of the semaphore named by the key (`run --limit N`).
    SemaphoreSlot(u32),
    /// The key as an election's leadership (`elect`).
    Leadership,
}

/// How the command of `run` and `elect` is started, stopped and reported: its owner, its stop on a
/// loss, the processes it leaves behind, pglease's own exit codes, the command itself and where the
/// lease is kept.
#[derive(Debug, Args)]
pub struct SupervisionArgs {
    /// The readable part of the owner (1 to 1007 bytes): the lease is held as `OWNER-<nonce>`.
    ///
    /// A run's owner is always unique to the run, so that it can never be handed a grant that is
    /// not its own (acquire returns a key's grant to an owner that already holds it). The nonce is
    /// 16 random hex digits; the whole owner is in PGLEASE_OWNER. Default:
    /// `<hostname>-<pid>-<nonce>`.
    #[arg(short, long, value_name = "OWNER", value_parser = parse_run_owner, help_heading = "Lease")]
    pub owner: Option<String>,

    /// After the lease (or leadership) is lost, how long the command has between SIGTERM and
    /// SIGKILL.
    ///
    /// SIGKILL comes sooner if the lease's local deadline does: the command never runs past it.
    /// If renewals are not getting through, pglease gives the lease up (SIGTERM) when less than
    /// the smaller of this and a third of the ttl is left.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_wait,
          allow_hyphen_values = true, help_heading = "Command")]
    pub kill_after: Duration,

    /// What to do with processes the command leaves running when it exits (`sh -c 'job &'`).
    ///
    /// wait: keep the lease (and the watchdog) until every one has exited, then release; kill:
    /// stop them (SIGTERM, SIGKILL after --kill-after), then release. Either way none of them runs
    /// unprotected after the key is released. While they keep the lease, a signal (Ctrl-C) is
    /// passed on to them and a second one kills them (SIGKILL).
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = Descendants::Wait, help_heading = "Command")]
    pub descendants: Descendants,

    /// Exit with this code (0 to 255) instead of 3 when the key is not acquired (elect: not
    /// elected within --wait).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        help_heading = "Exit codes"
    )]
    pub conflict_exit_code: u8,

    /// Exit with this code (0 to 255) instead of 4 when the lease (elect: the leadership) is lost
    /// while the command runs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Exit codes"
    )]
    pub lost_exit_code: u8,

    /// Exit with this code (0 to 255) on pglease's own errors (connecting, SQL) instead of 1, and
    /// instead of 5 when pg_lease is not installed.
    ///
    /// Pick codes the command never exits with, and every other code is the command's own.
    #[arg(long, value_name = "N", help_heading = "Exit codes")]
    pub error_exit_code: Option<u8>,

    /// Run SCRIPT with `sh -c` instead of a command: `--shell 'make && make install'`.
    #[arg(
        long,
        value_name = "SCRIPT",
        conflicts_with = "command",
        help_heading = "Command"
    )]
    pub shell: Option<OsString>,

    /// The command and its arguments: everything from COMMAND on goes to it, options included
    /// (`-- COMMAND --ttl 5` and `COMMAND --ttl 5` both pass `--ttl 5` to COMMAND). Give
    /// pglease's own options before COMMAND; `--` before COMMAND is optional (needed only when
    /// COMMAND starts with `-`).
    #[arg(required_unless_present = "shell", num_args = 1.., trailing_var_arg = true,
          value_name = "COMMAND", help_heading = "Command")]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub conn: ConnArgs,
}

impl SupervisionArgs {
    /// The command line to start: `sh -c SCRIPT` for `--shell SCRIPT`, else the command as given.
    pub fn argv(&self) -> Vec<OsString> {
        match &self.shell {
            Some(script) => vec!["sh".into(), "-c".into(), script.clone()],
            None => self.command.clone(),
        }
    }
}

/// The value a grant carries (`run --data`, `elect --data`).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Lease")]
pub struct DataArg {
    /// A small value the lease carries while held (at most 8192 bytes of text, e.g. an address or
    /// JSON), shown to anyone who may inspect the key (`pglease inspect`, `list`, `leader`).
    ///
    /// Not a secret: every role that may call the API can read it. Cleared when the lease ends.
    #[arg(long, value_name = "VALUE", value_parser = parse_data)]
    pub data: Option<String>,
}
/// What `run` does with the processes a command leaves running when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Descendants {
    /// Keep the lease until they have all exited.
    Wait,
    /// Stop them (SIGTERM, then SIGKILL after --kill-after).
    Kill,
}
