//! The contenders of the hot-path section, and how each one produces and consumes. The statements
//! are the queue section's (bench/src/queue/system.rs), plus `lease_queue.ack_and_receive` when the
//! installed pg_lease_queue has it.

use std::sync::Arc;

use serde::Serialize;
use tokio_postgres::{Client, Statement};

use crate::BoxResult;
use crate::queue::system::{self as qs, Receiver, Sender, System};
use crate::server::Db;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Contender {
    /// pg_lease_queue, keyed messages; consumers receive → ack (two calls).
    Ours,
    /// The same messages; consumers call `ack_and_receive` (one call per batch).
    OursAar,
    /// pg_lease_queue with the queue's notify off (`lease_queue.set_notify`): producers only.
    OursNotifyOff,
    /// pgmq: send / send_batch; read → delete, unordered.
    Pgmq,
}

/// The signature whose presence (`to_regprocedure`) adds [`Contender::OursAar`].
pub const AAR_SIGNATURE: &str =
    "lease_queue.ack_and_receive(text,integer,text,bigint,bigint,integer)";
const LQ_ACK_AND_RECEIVE: &str = "SELECT batch_id, id FROM lease_queue.ack_and_receive($1::text, \
     $2::int, $3::text, $4::bigint, $5::bigint, $6::int)";

impl Contender {
    pub fn name(self) -> &'static str {
        match self {
            Contender::Ours => "lease_queue",
            Contender::OursAar => "lease_queue ack_and_receive",
            Contender::OursNotifyOff => "lease_queue notify off",
            Contender::Pgmq => "pgmq",
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            Contender::Ours => {
                "pg_lease_queue, keyed (per-key commit order), the queue's notify on (its default): send / send_batch; each consumer claims its own partition and loops receive → ack (two autocommit calls, fenced)"
            }
            Contender::OursAar => {
                "pg_lease_queue as above, each consumer looping ack_and_receive(previous batch_id, max) (one call: acks the previous batch, opens and returns the next), the last batch acked with ack"
            }
            Contender::OursNotifyOff => {
                "pg_lease_queue as above with the queue's notify off (lease_queue.set_notify(queue, false)): producers only"
            }
            Contender::Pgmq => {
                "pgmq send / send_batch; consumers read(queue, vt 30 s, qty) → delete(queue, ids[]) on the one queue table: no order, no fencing"
            }
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Contender::Ours => "l",
            Contender::OursAar => "a",
            Contender::OursNotifyOff => "n",
            Contender::Pgmq => "m",
        }
    }

    pub fn ours(self) -> bool {
        self != Contender::Pgmq
    }

    pub fn system(self) -> System {
        if self.ours() {
            System::Keyed
        } else {
            System::Pgmq
        }
    }
}

/// Whether the installed pg_lease_queue has `ack_and_receive` (with the expected arguments).
pub async fn has_ack_and_receive(c: &Client) -> BoxResult<bool> {
    Ok(
        c.query_one("SELECT to_regprocedure($1) IS NOT NULL", &[&AAR_SIGNATURE])
            .await?
            .get(0),
    )
}

/// Creates the contender's queue (`partitions`: ours only; pgmq has one table).
pub async fn create(c: &Client, who: Contender, name: &str, partitions: u32) -> BoxResult<()> {
    qs::create(c, who.system(), name, partitions).await?;
    if who == Contender::OursNotifyOff {
        c.execute("SELECT lease_queue.set_notify($1::text, false)", &[&name])
            .await?;
    }
    Ok(())
}

pub async fn drop_queue(c: &Client, who: Contender, name: &str) -> BoxResult<()> {
    qs::drop_queue(c, who.system(), name).await
}

/// 64 keys (or `n`), equally many in each of `partitions` partitions (lease_queue.partition_of).
pub async fn keys(c: &Client, partitions: u32, n: u32) -> BoxResult<Arc<Vec<String>>> {
    Ok(Arc::new(
        qs::balanced_keys(c, partitions, n / partitions).await?,
    ))
}

/// Vacuums every table of the schemas `lease_queue`, `lease` and `pgmq` (as a superuser), so
/// that each run starts from the same state whatever ran before it: ours' tables are shared by
/// every queue, and the rows earlier runs left dead would otherwise weigh on later runs (pgmq's
/// queue table is new in every run). Without a superuser (--database-url) nothing is vacuumed:
/// returns whether it was.
pub async fn vacuum(db: &Db) -> BoxResult<bool> {
    let Some(su) = db.connect_superuser().await? else {
        return Ok(false);
    };
    let tables: Vec<String> = su
        .query(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
              WHERE schemaname IN ('lease_queue', 'lease', 'pgmq') ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !tables.is_empty() {
        su.batch_execute(&format!("VACUUM {}", tables.join(", ")))
            .await?;
    }
    let pid = backend_pid(&su).await?;
    drop(su);
    gone(&[pid]).await;
    Ok(true)
}

pub async fn backend_pid(c: &Client) -> BoxResult<i32> {
    Ok(c.query_one("SELECT pg_backend_pid()", &[]).await?.get(0))
}

/// Waits (at most 5 s) until the backends `pids` of a local server have exited and been reaped:
/// the server's CPU (stats::cpu) counts a backend while it lives and then in the postmaster's
/// reaped children's time, but misses one that exits while it is being read.
pub async fn gone(pids: &[i32]) {
    if crate::stats::cpu::POSTMASTER.get().is_none() {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pids
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        && std::time::Instant::now() < until
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// One producer connection: `batch` messages per autocommit call (1: send, else send_batch).
pub async fn sender(
    c: &Client,
    who: Contender,
    queue: &str,
    batch: u32,
    keys: Arc<Vec<String>>,
    id: u32,
) -> BoxResult<Sender> {
    Sender::new(c, who.system(), queue, batch, keys, id).await
}

/// Sends `n` messages (send_batch of up to 1000, one connection, synchronous_commit=off): the
/// untimed backlog of a consume run. A new connection every 5 calls keeps PL/pgSQL on custom plans.
pub async fn preload(
    db: &Db,
    who: Contender,
    queue: &str,
    keys: &Arc<Vec<String>>,
    n: u64,
) -> BoxResult<()> {
    let mut have = 0u64;
    let mut pids = Vec::new();
    while have < n {
        let c = db.connect(false).await?;
        pids.push(backend_pid(&c).await?);
        for _ in 0..5 {
            if have >= n {
                break;
            }
            let batch = (n - have).min(1000) as u32;
            let mut s = sender(&c, who, queue, batch, keys.clone(), 90).await?;
            s.next = have;
            have += s.send(&c).await?;
        }
    }
    gone(&pids).await;
    Ok(())
}

/// The owner [`Receiver::new`] claims partition `partition` as.
fn owner(partition: u32) -> String {
    format!("consumer-{partition}")
}

/// Claims ours' `partition` as [`owner`] (ttl 10 min); its epoch.
pub async fn claim(c: &Client, queue: &str, partition: u32) -> BoxResult<i64> {
    let row = c
        .query_one(
            qs::LQ_CLAIM,
            &[&queue, &(partition as i32), &owner(partition), &600_000i64],
        )
        .await?;
    if !row.get::<_, bool>(0) {
        return Err(crate::err(format!(
            "{queue}: partition {partition} not claimed"
        )));
    }
    Ok(row.get(1))
}

/// One consumer of one contender: ours claims `partition` (ttl 10 min) and keeps its epoch.
pub struct Consumer {
    pub inner: Receiver,
    aar: Option<Statement>,
    /// ack_and_receive: the batch received and not yet acked.
    open: Option<i64>,
}

impl Consumer {
    pub async fn new(
        c: &Client,
        who: Contender,
        queue: &str,
        batch: u32,
        partition: u32,
    ) -> BoxResult<Consumer> {
        let inner = Receiver::new(c, who.system(), queue, batch, partition).await?;
        let aar = if who == Contender::OursAar {
            Some(c.prepare(LQ_ACK_AND_RECEIVE).await?)
        } else {
            None
        };
        Ok(Consumer {
            inner,
            aar,
            open: None,
        })
    }

    /// A consumer of a partition claimed elsewhere ([`claim`]) at `epoch` (ours); it writes
    /// nothing before its first step. pgmq: as [`Consumer::new`].
    pub async fn with_epoch(
        c: &Client,
        who: Contender,
        queue: &str,
        batch: u32,
        partition: u32,
        epoch: Option<i64>,
    ) -> BoxResult<Consumer> {
        let Some(epoch) = epoch.filter(|_| who.ours()) else {
            return Consumer::new(c, who, queue, batch, partition).await;
        };
        let inner = Receiver {
            sys: who.system(),
            queue: queue.into(),
            batch: batch as i32,
            partition: partition as i32,
            owner: owner(partition),
            epoch,
            read: c.prepare(qs::LQ_RECEIVE).await?,
            settle: c.prepare(qs::LQ_ACK).await?,
        };
        let aar = if who == Contender::OursAar {
            Some(c.prepare(LQ_ACK_AND_RECEIVE).await?)
        } else {
            None
        };
        Ok(Consumer {
            inner,
            aar,
            open: None,
        })
    }

    /// One step: receive → ack, read → delete, or one ack_and_receive (which acks the previous
    /// step's batch). Returns the messages it received (0: nothing there).
    pub async fn step(&mut self, c: &Client) -> BoxResult<u64> {
        let Some(aar) = &self.aar else {
            return self.inner.cycle(c).await;
        };
        let r = &self.inner;
        let rows = c
            .query(
                aar,
                &[
                    &r.queue,
                    &r.partition,
                    &r.owner,
                    &r.epoch,
                    &self.open,
                    &r.batch,
                ],
            )
            .await?;
        self.open = rows.first().map(|row| row.get(0));
        Ok(rows.len() as u64)
    }

    /// Acks what ack_and_receive left open (nothing for the others: their steps settle).
    pub async fn settle(&mut self, c: &Client) -> BoxResult<()> {
        if let Some(batch_id) = self.open.take() {
            let r = &self.inner;
            c.execute(
                &r.settle,
                &[&r.queue, &r.partition, &r.owner, &r.epoch, &batch_id],
            )
            .await?;
        }
        Ok(())
    }

    /// Releases ours' partition (on any connection).
    pub async fn finish(&self, c: &Client) -> BoxResult<()> {
        self.inner.finish(c).await
    }
}
