//! `pglease demo --ui`: after the story, workers keep running on the private server and the
//! operator console shows them, so a newcomer watches leases change hands live:
//!
//! - three workers take turns on the keys `job/report`, `job/billing`, `job/cleanup`; one in four
//!   holds stalls (stops renewing) and its lease lapses, and a waiting worker takes over with the
//!   next epoch;
//! - three candidates campaign for `scheduler` (data: their address); a leader leads for a while,
//!   then hands over to another candidate (`lease.transfer`) or steps down;
//! - four backup workers share the semaphore `backups` (two slots);
//! - a producer sends ~20 orders a second over 50 customers to the queue `orders` (4 partitions),
//!   two consumers handle them; every 40th order is declined three times and dead-lettered.
//!
//! Everything runs until Ctrl-C; the console allows actions (redrive the declined orders).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pglease_queue::{Backoff, Consumer, Delivery};
use tokio_postgres::{Client, NoTls};

use crate::exit::BoxError;

const JOBS: [&str; 3] = ["job/report", "job/billing", "job/cleanup"];

/// A small xorshift generator: the demo's pauses need variety, not quality.
struct Dice(u64);

impl Dice {
    fn new(salt: u64) -> Dice {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Dice((t ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A duration in [lo, hi).
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = (hi - lo).as_millis().max(1) as u64;
        lo + Duration::from_millis(self.next() % span)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

async fn connect(conninfo: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}

/// Holds `key` as `owner` for `hold`, renewing every ttl/3; returns the epoch, or None if it
/// stalled on purpose (stopped renewing: the lease lapses).
async fn hold(
    c: &Client,
    key: &str,
    owner: &str,
    epoch: i64,
    ttl: Duration,
    hold: Duration,
) -> Result<(), BoxError> {
    let until = tokio::time::Instant::now() + hold;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(ttl / 3).await;
        let r = pglease::renew(c, key, owner, epoch, ttl).await?;
        if r.status != pglease::Status::Ok {
            return Ok(());
        }
    }
    Ok(())
}

async fn job_worker(conninfo: String, owner: String, ttl: Duration) -> Result<(), BoxError> {
    let c = connect(&conninfo).await?;
    let mut dice = Dice::new(owner.len() as u64 + owner.as_bytes()[owner.len() - 1] as u64);
    loop {
        let key = JOBS[(dice.next() % JOBS.len() as u64) as usize];
        let grant = match pglease::acquire(&c, key, &owner, ttl, ttl * 4).await {
            Ok(Some(grant)) => grant,
            Ok(None) => continue,
            Err(e) if e.is_wait_timeout() => continue,
            Err(e) => return Err(e.into()),
        };
        if dice.one_in(4) {
            // A stall: no renewal, no release; the lease lapses and a waiter takes over.
            tokio::time::sleep(ttl * 2 + dice.between(Duration::ZERO, ttl)).await;
            continue;
        }
        hold(
            &c,
            key,
            &owner,
            grant.epoch,
            ttl,
            dice.between(ttl, ttl * 4),
        )
        .await?;
        pglease::release(&c, key, &owner, grant.epoch).await?;
        tokio::time::sleep(dice.between(Duration::from_millis(200), ttl)).await;
    }
}

async fn candidate(
    conninfo: String,
    me: String,
    others: Vec<String>,
    ttl: Duration,
) -> Result<(), BoxError> {
    let c = connect(&conninfo).await?;
    let mut dice = Dice::new(me.len() as u64 * 31 + me.as_bytes()[me.len() - 1] as u64);
    let data = format!("{me}.internal:8080");
    loop {
        let row = c
            .query_one(
                "SELECT (r).epoch FROM (SELECT lease.acquire('scheduler', $1, $2::text::interval,
                        $3::text::interval, $4) AS r) s",
                &[&me, &interval(ttl), &interval(ttl * 10), &data],
            )
            .await;
        let epoch = match row {
            Ok(row) => match row.get::<_, Option<i64>>(0) {
                Some(epoch) => epoch,
                None => continue,
            },
            // The wait ran out (57014): campaign again.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) => {
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // Lead for a while, renewing; then hand over or step down.
        hold(
            &c,
            "scheduler",
            &me,
            epoch,
            ttl,
            dice.between(ttl * 3, ttl * 8),
        )
        .await?;
        if dice.one_in(2) {
            let to = &others[(dice.next() % others.len() as u64) as usize];
            pglease::transfer(&c, "scheduler", &me, epoch, to, ttl).await?;
        } else {
            pglease::release(&c, "scheduler", &me, epoch).await?;
        }
        tokio::time::sleep(dice.between(ttl, ttl * 2)).await;
    }
}

async fn backup_worker(conninfo: String, owner: String, ttl: Duration) -> Result<(), BoxError> {
    let c = connect(&conninfo).await?;
    let mut dice = Dice::new(owner.as_bytes()[owner.len() - 1] as u64 * 7);
    loop {
        match pglease::acquire_slot(&c, "backups", &owner, ttl, 2, None).await? {
            Some(slot) => {
                hold(
                    &c,
                    &slot.key,
                    &owner,
                    slot.grant.epoch,
                    ttl,
                    dice.between(ttl, ttl * 3),
                )
                .await?;
                pglease::release(&c, &slot.key, &owner, slot.grant.epoch).await?;
                tokio::time::sleep(dice.between(ttl / 2, ttl * 2)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn producer(conninfo: String) -> Result<(), BoxError> {
    let c = connect(&conninfo).await?;
    let mut dice = Dice::new(99);
    for n in 1u64.. {
        let customer = format!("customer-{}", dice.next() % 50);
        let payload = if n.is_multiple_of(40) {
            serde_json::json!({ "order": n, "card": "expired" })
        } else {
            serde_json::json!({ "order": n, "amount": dice.next() % 500 })
        };
        c.execute(
            "SELECT lease_queue.send('orders', $1, $2)",
            &[&customer, &payload],
        )
        .await?;
        tokio::time::sleep(dice.between(Duration::from_millis(20), Duration::from_millis(80)))
            .await;
    }
    Ok(())
}

async fn consumer(conninfo: String, owner: String, ttl: Duration) -> Result<(), BoxError> {
    let client = pglease::Client::builder()
        .owner(owner)
        .connect(&conninfo)
        .await?;
    let consumer = Consumer::builder(client, "orders")
        .ttl(ttl * 2)
        .batch_size(20)
        .retry_backoff(Backoff::new(
            Duration::from_millis(300),
            Duration::from_secs(1),
        ))
        .listen(conninfo.parse()?)
        .build()?;
    consumer
        .run(|d: Delivery| async move {
            tokio::time::sleep(Duration::from_millis(15)).await;
            if d.payload().get("card").is_some() {
                Err("card declined".to_owned())
            } else {
                Ok(())
            }
        })
        .await?;
    Ok(())
}

/// Runs the workload and the console on `listen` until the process is stopped.
pub async fn run(
    conninfo: &str,
    setup: &Client,
    listen: SocketAddr,
    ttl: Duration,
) -> Result<ExitCode, BoxError> {
    setup
        .batch_execute(
            "CREATE EXTENSION IF NOT EXISTS pg_lease_queue;
             SELECT lease_queue.create_queue('orders', 4, 3, true)
              WHERE NOT EXISTS (SELECT FROM lease_queue.list_queues() WHERE queue_name = 'orders');",
        )
        .await?;
    let mut tasks = tokio::task::JoinSet::new();
    for w in ["worker-a", "worker-b", "worker-c"] {
        tasks.spawn(job_worker(conninfo.to_owned(), w.to_owned(), ttl));
    }
    let candidates = ["sched-a", "sched-b", "sched-c"];
    for me in candidates {
        let others = candidates
            .iter()
            .filter(|c| **c != me)
            .map(|c| c.to_string())
            .collect();
        tasks.spawn(candidate(conninfo.to_owned(), me.to_owned(), others, ttl));
    }
    for b in ["backup-1", "backup-2", "backup-3", "backup-4"] {
        tasks.spawn(backup_worker(conninfo.to_owned(), b.to_owned(), ttl));
    }
    tasks.spawn(producer(conninfo.to_owned()));
    for c in ["consumer-1", "consumer-2"] {
        tasks.spawn(consumer(conninfo.to_owned(), c.to_owned(), ttl));
    }

    let client = pglease::Client::builder()
        .owner("pglease-console@demo")
        .connect(conninfo)
        .await?;
    let console = Arc::new(
        pglease_console::Console::builder(client)
            .allow_actions(true)
            .election("scheduler")
            .build(),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let url = format!("http://{}/", listener.local_addr()?);
    println!();
    println!("The workers keep running. Open the console: {url}");
    println!("(leases change hands, the scheduler's leader hands over, orders flow; Ctrl-C ends)");
    let serving = {
        let console = Arc::clone(&console);
        async move { console.serve(listener, std::future::pending()).await }
    };
    tokio::select! {
        served = serving => served?,
        Some(ended) = tasks.join_next() => {
            ended??;
            return Err("a demo worker stopped".into());
        }
    }
    Ok(ExitCode::SUCCESS)
}
