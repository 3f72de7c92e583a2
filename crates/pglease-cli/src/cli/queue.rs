//! The command line of `pglease queue ...`: the subcommands that operate pg_lease_queue queues.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{ConnArgs, OutputArgs, parse_wait};

/// `pglease queue ...`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue of N partitions (fixed for its life).
    ///
    /// Only the role that installed pg_lease_queue may create queues, unless it granted EXECUTE on
    /// lease_queue.create_queue to others. Exits with 1 if a queue of that name exists (SQLSTATE
    /// 42710).
    Create(QueueCreateArgs),
    /// Drop a queue with its messages and dead letters; its partitions' epochs are kept.
    ///
    /// Asks for confirmation on a terminal (stdin); without one, --yes is required (else exit 2).
    /// An answer other than y or yes drops nothing (exit 1). Waits for producers that sent to it
    /// and for calls in flight on its partitions to end.
    Drop(QueueDropArgs),
    /// Send one message; it is committed when this command returns.
    ///
    /// The payload is JSON, from the argument or (without it, or with -) from stdin. Messages
    /// with a key are delivered in the order they were sent (committed); without --key the
    /// message is unordered.
    Send(QueueSendArgs),
    /// Show every partition of a queue: holder, epoch, open batch, backlog, held-back keys, dead
    /// letters.
    ///
    /// With --watch, print it again every INTERVAL (default 2s) until interrupted.
    Stats(QueueStatsArgs),
    /// List a queue's dead letters, oldest death first.
    DeadLetters(QueueDeadLettersArgs),
    /// Consume a queue: run a command for each message, its payload on stdin.
    ///
    /// Claims partitions (a fair share of the queue, balanced with the other consumers; or
    /// --partition), keeps their leases alive, and runs CMD once per message, in each key's order,
    /// with the JSON payload on stdin and PGLEASE_QUEUE, PGLEASE_PARTITION, PGLEASE_EPOCH,
    /// PGLEASE_MESSAGE_ID, PGLEASE_KEY (unset for an unkeyed message), PGLEASE_ATTEMPTS and
    /// PGLEASE_BATCH_ID in its environment. Exit 0 acks the message; any other exit nacks it, and it
    /// is retried with backoff (its key waits; other keys go on) until it becomes a dead letter
    /// after the queue's max attempts. If a partition's lease is lost while CMD runs, CMD's process
    /// group gets SIGTERM, then SIGKILL after --kill-after, and the message goes to the partition's
    /// next holder (pass PGLEASE_EPOCH to what CMD writes, to fence it). SIGINT, SIGTERM and SIGHUP
    /// are forwarded to a running CMD; consume then stops taking messages, finishes its batch,
    /// releases its partitions and exits with 128 + the signal's number.
    Consume(QueueConsumeArgs),
    /// Put dead letters back at the head of their key, in order, with attempts reset.
    ///
    /// Exactly one of --key, --unkeyed, --all. A key with messages in an open batch is refused
    /// (SQLSTATE 55006, exit 1): redrive after the batch is acked.
    Redrive(QueueRedriveArgs),
    /// Let a database role (and its members) produce to or consume a queue.
    ///
    /// A queue belongs to the roles granted it: a new queue is its creator's; produce lets a role
    /// send, consume lets it claim partitions, receive, ack and nack, and see the holders in
    /// `queue stats`. ROLE is a role name, or public for every role. Only the role that installed
    /// pg_lease_queue may grant, unless it granted EXECUTE on lease_queue.grant_queue to others.
    /// Granting what is granted changes nothing.
    Grant(QueueGrantArgs),
    /// Take back what `queue grant` gave: the role's next send (produce) or consuming call
    /// (consume) is refused with SQLSTATE 42501; a partition it holds stays held until then.
    Revoke(QueueGrantArgs),
}

/// What a role may do with a queue (`queue grant`, `queue revoke`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QueuePrivilege {
    /// Send messages.
    Produce,
    /// Claim partitions, receive, ack and nack.
    Consume,
}

impl QueuePrivilege {
    /// The privilege's name in SQL (`lease_queue.grant_queue`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueuePrivilege::Produce => "produce",
            QueuePrivilege::Consume => "consume",
        }
    }
}

/// Options of `pglease queue grant` and `pglease queue revoke`.
#[derive(Debug, Args)]
pub struct QueueGrantArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// The database role (its members count too), or public for every role.
    #[arg(value_name = "ROLE")]
    pub role: String,
    /// produce or consume.
    #[arg(value_name = "PRIVILEGE", value_enum)]
    pub privilege: QueuePrivilege,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// A queue name (1 to 128 bytes of A-Z a-z 0-9 _ . -).
#[derive(Debug, Clone, Args)]
pub struct QueueArg {
    /// The queue's name.
    #[arg(value_name = "QUEUE", value_parser = parse_queue_name)]
    pub queue: String,
}

/// Options of `pglease queue create`.
#[derive(Debug, Args)]
pub struct QueueCreateArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// Number of partitions (1 to 1024): at most this many consumers work at once.
    #[arg(long, short = 'p', value_name = "N", value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub partitions: i32,
    /// Deliveries of a message before it becomes a dead letter (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=10000))]
    pub max_attempts: i32,
    /// Do not notify waiting consumers on send (they poll instead): for producer-heavy queues
    /// whose consumers are never idle.
    #[arg(long)]
    pub no_notify: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue drop`.
#[derive(Debug, Args)]
pub struct QueueDropArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// Drop without asking (required when stdin is not a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue send`.
#[derive(Debug, Args)]
pub struct QueueSendArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// The payload, JSON (e.g. '{"order": 42}', or '"text"' for a string: single quotes keep the
    /// shell from eating the double quotes); - or nothing reads it from stdin.
    ///
    /// A payload that is not JSON is a usage error (exit 2), from stdin too.
    #[arg(value_name = "PAYLOAD", value_parser = super::parse_payload)]
    pub payload: Option<String>,
    /// The message's key: messages of one key are delivered in order (1 to 1024 bytes).
    #[arg(long, short = 'k', value_name = "KEY", value_parser = super::parse_name)]
    pub key: Option<String>,
    /// Deliver no earlier than this from now, e.g. 30s, 5m (0 to 365 days).
    #[arg(long, value_name = "DURATION", value_parser = parse_wait, default_value = "0s")]
    pub delay: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue stats`.
#[derive(Debug, Args)]
pub struct QueueStatsArgs {
    /// The queue (every queue without it).
    #[arg(value_name = "QUEUE", value_parser = parse_queue_name)]
    pub queue: Option<String>,
    /// Refresh every INTERVAL until interrupted (default 2s).
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s",
          value_parser = parse_interval)]
    pub watch: Option<Duration>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue consume`.
#[derive(Debug, Args)]
pub struct QueueConsumeArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// Consume only these partitions (repeatable); default: a fair share, balanced.
    #[arg(long = "partition", value_name = "P", value_parser = clap::value_parser!(u32).range(0..1024))]
    pub partitions: Vec<u32>,
    /// Hold at most this many partitions (balanced mode).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_partitions: Option<u32>,
    /// The partitions' lease ttl: how long a crashed consumer keeps its messages from others.
    #[arg(long, short = 't', value_name = "DURATION", default_value = "30s", value_parser = super::parse_run_ttl)]
    pub ttl: Duration,
    /// Messages per batch (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub batch: u32,
    /// Exit 0 after this many runs of CMD that ended (exit 0: acked, or not: nacked); a run
    /// stopped because its lease was lost does not count.
    #[arg(long, value_name = "N")]
    pub max_messages: Option<u64>,
    /// The consumer's owner string; default `<hostname>-<pid>-<nonce>`.
    #[arg(long, value_name = "OWNER", env = "PGLEASE_OWNER", value_parser = super::parse_run_owner)]
    pub owner: Option<String>,
    /// After SIGTERM on a lost lease, wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_wait)]
    pub kill_after: Duration,
    /// The command and its arguments: everything from CMD on goes to it, options included
    /// (`-- CMD --ttl 5` and `CMD --ttl 5` both pass `--ttl 5` to CMD). Give pglease's own options
    /// before CMD; `--` before CMD is optional (needed only when CMD starts with `-`).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue dead-letters`.
#[derive(Debug, Args)]
pub struct QueueDeadLettersArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// At most this many (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(i32).range(1..=10000))]
    pub max: i32,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Options of `pglease queue redrive`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["key", "unkeyed", "all"]))]
pub struct QueueRedriveArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// The dead letters of this key.
    #[arg(long, short = 'k', value_name = "KEY", value_parser = super::parse_name)]
    pub key: Option<String>,
    /// The dead letters without a key.
    #[arg(long)]
    pub unkeyed: bool,
    /// Every dead letter of the queue, key by key.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// A queue name as pg_lease_queue accepts it.
pub fn parse_queue_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 128 {
        return Err("must be 1 to 128 bytes".into());
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err("may contain only A-Z a-z 0-9 _ . -".into());
    }
    Ok(s.to_owned())
}

/// A refresh interval: at least 100ms.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d < Duration::from_millis(100) {
        return Err("must be at least 100ms".into());
    }
    Ok(d)
}
