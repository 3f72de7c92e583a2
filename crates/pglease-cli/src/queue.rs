//! `pglease queue ...`: operating pg_lease_queue queues from the shell (docs/CLI.md, "queue").
//!
//! Each command is one or a few calls of the SQL API (docs/QUEUE.md), each bounded by the request
//! timeout; its errors keep their SQLSTATE (a missing queue is LQ001, exit 1).

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;

use crate::cli::{
    QueueCreateArgs, QueueDeadLettersArgs, QueueDropArgs, QueueRedriveArgs, QueueSendArgs,
    QueueStatsArgs,
};
use crate::connect::Target;
use crate::exit::{self, BoxError};
use crate::{missing, output};

/// Connects, and checks that pg_lease_queue is installed at this pglease's version
/// ([`missing::check`]).
pub(crate) async fn connect(target: &Target) -> Result<tokio_postgres::Client, BoxError> {
    let client = target.connect().await?;
    missing::check(&client, target, &pglease::PG_LEASE_QUEUE).await?;
    Ok(client)
}

/// `pglease queue create`.
pub async fn create(args: QueueCreateArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = connect(target).await?;
    let q = &args.queue.queue;
    target
        .answer(client.execute(
            "SELECT lease_queue.create_queue($1, $2, $3, $4)",
            &[q, &args.partitions, &args.max_attempts, &!args.no_notify],
        ))
        .await?;
    #[derive(Serialize)]
    struct Json<'a> {
        queue: &'a str,
        partitions: i32,
        max_attempts: i32,
        notify: bool,
    }
    if args.output.json {
        output::json(&Json {
            queue: q,
            partitions: args.partitions,
            max_attempts: args.max_attempts,
            notify: !args.no_notify,
        })?;
    } else {
        output::out(&format!(
            "created queue {q}: {} partition{}, max {} attempt{}{}\n",
            args.partitions,
            plural(args.partitions as u64),
            args.max_attempts,
            plural(args.max_attempts as u64),
            if args.no_notify {
                ", no notifications"
            } else {
                ""
            }
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `pglease queue drop`.
///
/// Without `--yes` it asks on the terminal first (the caller checked there is one).
pub async fn drop_queue(args: QueueDropArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let q = &args.queue.queue;
    if !args.yes
        && !confirm(&format!(
            "drop queue {q} with its messages and dead letters?"
        ))
        .await?
    {
        eprintln!("pglease: queue {q} not dropped");
        return Ok(ExitCode::from(exit::EXIT_ERROR));
    }
    let client = connect(target).await?;
    target
        .answer(client.execute("SELECT lease_queue.drop_queue($1)", &[q]))
        .await?;
    if args.output.json {
        output::json(&serde_json::json!({ "dropped": q }))?;
    } else {
        output::out(&format!("dropped queue {q}\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks `question` on stderr and reads the answer from stdin: whether it is y or yes.
async fn confirm(question: &str) -> Result<bool, BoxError> {
    eprint!("pglease: {question} [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await?
    .map_err(|e| exit::context("reading the answer from stdin", e))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// The payload of `send`: the argument, or stdin for `-` or none; it must be JSON.
fn payload(arg: Option<String>) -> Result<Value, BoxError> {
    let text = match arg.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| exit::context("reading the payload from stdin", e))?;
            s
        }
        Some(s) => s.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| {
        exit::usage(format!(
            "the payload is not JSON ({e}); {}",
            crate::cli::JSON_QUOTING_HINT
        ))
    })
}

/// `pglease queue send`.
pub async fn send(args: QueueSendArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let payload = payload(args.payload)?;
    let client = connect(target).await?;
    let q = &args.queue.queue;
    let delay = pg_interval(args.delay);
    let row = target
        .answer(client.query_one(
            "SELECT m.id, p.partitions
               FROM lease_queue.send($1, $2, $3, $4::text::interval) AS m(id),
                    lease_queue.list_queues() AS p
              WHERE p.queue_name = $1",
            &[q, &args.key, &payload, &delay],
        ))
        .await?;
    let id: i64 = row.try_get(0)?;
    let partitions: i32 = row.try_get(1)?;
    let partition = match &args.key {
        Some(k) => target
            .answer(client.query_one("SELECT lease_queue.partition_of($1, $2)", &[k, &partitions]))
            .await?
            .try_get::<_, i32>(0)?,
        None => (id % i64::from(partitions)) as i32,
    };
    #[derive(Serialize)]
    struct Json<'a> {
        queue: &'a str,
        id: i64,
        key: Option<&'a str>,
        partition: i32,
        delay_ms: u64,
    }
    if args.output.json {
        output::json(&Json {
            queue: q,
            id,
            key: args.key.as_deref(),
            partition,
            delay_ms: output::millis(args.delay),
        })?;
    } else {
        output::out(&format!(
            "sent message {id} to {q} partition {partition}{}\n",
            match &args.key {
                Some(k) => format!(" (key {k})"),
                None => String::new(),
            }
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One partition's row of `lease_queue.status`.
#[derive(Debug, Serialize)]
struct PartitionStats {
    queue: String,
    partition: i32,
    owner: Option<String>,
    epoch: Option<i64>,
    #[serde(serialize_with = "opt_time")]
    expires_at: Option<SystemTime>,
    batch_id: Option<i64>,
    batch_epoch: Option<i64>,
    batch_size: i64,
    backlog: i64,
    #[serde(serialize_with = "opt_time")]
    oldest_enqueued_at: Option<SystemTime>,
    held_back_keys: i64,
    dead_letters: i64,
}

fn opt_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&output::timestamp(*t)),
        None => s.serialize_none(),
    }
}

async fn stats_once(
    client: &tokio_postgres::Client,
    target: &Target,
    queue: Option<&str>,
) -> Result<(Vec<PartitionStats>, SystemTime), BoxError> {
    let rows = target
        .answer(client.query(
            "SELECT s.queue_name, s.partition, s.owner, s.epoch, s.expires_at, s.batch_id,
                    s.batch_epoch, s.batch_size, s.backlog, s.oldest_enqueued_at,
                    s.held_back_keys, s.dead_letters, pg_catalog.clock_timestamp()
               FROM lease_queue.status($1) AS s",
            &[&queue],
        ))
        .await?;
    let now = match rows.first() {
        Some(r) => r.try_get(12)?,
        None => target
            .answer(client.query_one("SELECT pg_catalog.clock_timestamp()", &[]))
            .await?
            .try_get(0)?,
    };
    let stats = rows
        .iter()
        .map(|r| {
            Ok(PartitionStats {
                queue: r.try_get(0)?,
                partition: r.try_get(1)?,
                owner: r.try_get(2)?,
                epoch: r.try_get(3)?,
                expires_at: r.try_get(4)?,
                batch_id: r.try_get(5)?,
                batch_epoch: r.try_get(6)?,
                batch_size: r.try_get(7)?,
                backlog: r.try_get(8)?,
                oldest_enqueued_at: r.try_get(9)?,
                held_back_keys: r.try_get(10)?,
                dead_letters: r.try_get(11)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    Ok((stats, now))
}

fn stats_table(stats: &[PartitionStats], now: SystemTime) -> String {
    let rows: Vec<Vec<String>> = stats
        .iter()
        .map(|s| {
            vec![
                s.queue.clone(),
                s.partition.to_string(),
                s.owner.clone().unwrap_or_else(|| "-".into()),
                s.epoch.map_or("-".into(), |e| e.to_string()),
                s.expires_at.map_or("-".into(), |t| output::expiry(t, now)),
                match (s.batch_id, s.batch_epoch) {
                    (Some(b), Some(e)) => format!("{b} ({} at epoch {e})", s.batch_size),
                    _ => "-".into(),
                },
                s.backlog.to_string(),
                s.oldest_enqueued_at.map_or("-".into(), |t| {
                    output::duration(now.duration_since(t).unwrap_or_default())
                }),
                s.held_back_keys.to_string(),
                s.dead_letters.to_string(),
            ]
        })
        .collect();
    output::table(
        &[
            "QUEUE",
            "PARTITION",
            "HOLDER",
            "EPOCH",
            "EXPIRES",
            "OPEN BATCH",
            "BACKLOG",
            "OLDEST",
            "HELD BACK",
            "DEAD",
        ],
        &rows,
    )
}

/// `pglease queue stats`.
pub async fn stats(args: QueueStatsArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = connect(target).await?;
    loop {
        let (stats, now) = stats_once(&client, target, args.queue.as_deref()).await?;
        if args.output.json {
            output::json(&stats)?;
        } else {
            if args.watch.is_some() {
                output::out(&format!("{}\n", output::timestamp(now)))?;
            }
            output::out(&stats_table(&stats, now))?;
        }
        match args.watch {
            Some(every) => tokio::time::sleep(every).await,
            None => return Ok(ExitCode::SUCCESS),
        }
        if !args.output.json {
            output::out("\n")?;
        }
    }
}

/// `pglease queue dead-letters`.
pub async fn dead_letters(
    args: QueueDeadLettersArgs,
    target: &Target,
) -> Result<ExitCode, BoxError> {
    let client = connect(target).await?;
    let rows = target
        .answer(client.query(
            "SELECT id, partition, key, payload, attempts, reason, epoch, batch_id, enqueued_at,
                    dead_at
               FROM lease_queue.list_dead_letters($1, $2)",
            &[&args.queue.queue, &args.max],
        ))
        .await?;
    #[derive(Serialize)]
    struct Dead {
        id: i64,
        partition: i32,
        key: Option<String>,
        payload: Value,
        attempts: i32,
        reason: Option<String>,
        epoch: Option<i64>,
        batch_id: Option<i64>,
        enqueued_at: String,
        dead_at: String,
    }
    let dead = rows
        .iter()
        .map(|r| {
            Ok(Dead {
                id: r.try_get(0)?,
                partition: r.try_get(1)?,
                key: r.try_get(2)?,
                payload: r.try_get(3)?,
                attempts: r.try_get(4)?,
                reason: r.try_get(5)?,
                epoch: r.try_get(6)?,
                batch_id: r.try_get(7)?,
                enqueued_at: output::timestamp(r.try_get(8)?),
                dead_at: output::timestamp(r.try_get(9)?),
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    if args.output.json {
        output::json(&dead)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = dead
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.partition.to_string(),
                d.key.clone().unwrap_or_else(|| "-".into()),
                d.attempts.to_string(),
                d.dead_at.clone(),
                d.reason.clone().unwrap_or_else(|| "-".into()),
                d.payload.to_string(),
            ]
        })
        .collect();
    output::out(&output::table(
        &[
            "ID",
            "PARTITION",
            "KEY",
            "ATTEMPTS",
            "DEAD AT",
            "REASON",
            "PAYLOAD",
        ],
        &rows,
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease queue redrive`.
pub async fn redrive(args: QueueRedriveArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = connect(target).await?;
    let q = &args.queue.queue;
    let redrive_one = async |key: Option<&str>| -> Result<i64, BoxError> {
        Ok(target
            .answer(client.query_one("SELECT lease_queue.redrive($1, $2)", &[q, &key]))
            .await?
            .try_get(0)?)
    };
    let mut total = 0i64;
    if args.all {
        // Key by key (keys are independent), until no dead letter is left.
        loop {
            let keys: Vec<Option<String>> = target
                .answer(client.query(
                    "SELECT DISTINCT key FROM lease_queue.list_dead_letters($1, 10000)",
                    &[q],
                ))
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if keys.is_empty() {
                break;
            }
            for key in &keys {
                total += redrive_one(key.as_deref()).await?;
            }
        }
    } else {
        total = redrive_one(args.key.as_deref()).await?;
    }
    if args.output.json {
        output::json(&serde_json::json!({ "queue": q, "redriven": total }))?;
    } else {
        output::out(&format!(
            "put {total} dead letter{} back into {q}\n",
            plural(total as u64)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A duration as a PostgreSQL interval literal, to the microsecond.
fn pg_interval(d: Duration) -> String {
    format!("{} microseconds", d.as_micros())
}
