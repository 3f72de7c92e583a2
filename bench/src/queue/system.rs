//! The systems compared (pg_lease_queue keyed and unkeyed, pgmq plain and FIFO), their
//! statements, and the sender and receiver every measurement drives them through.

use std::sync::Arc;

use tokio_postgres::{Client, Statement};

use crate::{BoxResult, err};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Keyed,
    Unkeyed,
    Pgmq,
    PgmqFifo,
}

pub const SYSTEMS: [System; 4] = [
    System::Keyed,
    System::Unkeyed,
    System::Pgmq,
    System::PgmqFifo,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Keyed => "lq-keyed",
            System::Unkeyed => "lq-unkeyed",
            System::Pgmq => "pgmq",
            System::PgmqFifo => "pgmq-fifo",
        }
    }

    pub(crate) fn what(self) -> &'static str {
        match self {
            System::Keyed => {
                "lease_queue, keyed (per-key commit order): send / send_batch; consumers claim one partition each, receive → ack"
            }
            System::Unkeyed => {
                "lease_queue, NULL keys (no order): send / send_batch; consumers claim one partition each, receive → ack"
            }
            System::Pgmq => {
                "pgmq send / send_batch; consumers read (vt 30 s) → delete(ids) on the one queue, no order"
            }
            System::PgmqFifo => {
                "pgmq send / send_batch with header x-pgmq-group = key (GIN index on headers); consumers read_grouped → delete(ids): per-group order"
            }
        }
    }

    pub(crate) fn code(self) -> &'static str {
        match self {
            System::Keyed => "k",
            System::Unkeyed => "u",
            System::Pgmq => "m",
            System::PgmqFifo => "g",
        }
    }

    pub(crate) fn ours(self) -> bool {
        matches!(self, System::Keyed | System::Unkeyed)
    }
}

pub(crate) const LQ_SEND: &str = "SELECT lease_queue.send($1::text, $2::text, $3::text::jsonb)";
pub(crate) const LQ_SEND_BATCH: &str =
    "SELECT count(*) FROM lease_queue.send_batch($1::text, $2::text[], $3::text[]::jsonb[])";
pub(crate) const LQ_CLAIM: &str = "SELECT claimed, epoch FROM lease_queue.claim($1::text, $2::int, $3::text, \
                        $4::bigint * interval '1 millisecond')";
pub(crate) const LQ_RECEIVE: &str = "SELECT batch_id, id FROM lease_queue.receive($1::text, $2::int, $3::text, \
                          $4::bigint, $5::int)";
pub(crate) const LQ_ACK: &str =
    "SELECT lease_queue.ack($1::text, $2::int, $3::text, $4::bigint, $5::bigint)";
pub(crate) const LQ_RELEASE: &str =
    "SELECT lease_queue.release($1::text, $2::int, $3::text, $4::bigint, true)";
pub(crate) const PGMQ_SEND: &str = "SELECT count(*) FROM pgmq.send($1::text, $2::text::jsonb)";
pub(crate) const PGMQ_SEND_FIFO: &str =
    "SELECT count(*) FROM pgmq.send($1::text, $2::text::jsonb, $3::text::jsonb)";
pub(crate) const PGMQ_SEND_BATCH: &str =
    "SELECT count(*) FROM pgmq.send_batch($1::text, $2::text[]::jsonb[])";
pub(crate) const PGMQ_SEND_BATCH_FIFO: &str =
    "SELECT count(*) FROM pgmq.send_batch($1::text, $2::text[]::jsonb[], $3::text[]::jsonb[])";
pub(crate) const PGMQ_READ: &str = "SELECT msg_id FROM pgmq.read($1::text, $2::int, $3::int)";
pub(crate) const PGMQ_READ_GROUPED: &str =
    "SELECT msg_id FROM pgmq.read_grouped($1::text, $2::int, $3::int)";
pub(crate) const PGMQ_DELETE: &str = "SELECT count(*) FROM pgmq.delete($1::text, $2::bigint[])";

/// A JSON payload of about 100 bytes.
pub(crate) fn payload(producer: u32, n: u64) -> String {
    let head = format!("{{\"producer\": {producer}, \"n\": {n}, \"pad\": \"");
    let pad = 100usize.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

pub(crate) fn group_header(key: &str) -> String {
    format!("{{\"x-pgmq-group\": \"{key}\"}}")
}

pub(crate) async fn create(c: &Client, sys: System, name: &str, partitions: u32) -> BoxResult<()> {
    if sys.ours() {
        c.execute(
            "SELECT lease_queue.create_queue($1::text, $2::int)",
            &[&name, &(partitions as i32)],
        )
        .await?;
    } else {
        c.execute("SELECT pgmq.create($1::text)", &[&name]).await?;
        if sys == System::PgmqFifo {
            c.execute("SELECT pgmq.create_fifo_index($1::text)", &[&name])
                .await?;
        }
    }
    Ok(())
}

pub(crate) async fn drop_queue(c: &Client, sys: System, name: &str) -> BoxResult<()> {
    if sys.ours() {
        c.execute("SELECT lease_queue.drop_queue($1::text)", &[&name])
            .await?;
    } else {
        c.execute("SELECT pgmq.drop_queue($1::text)", &[&name])
            .await?;
    }
    Ok(())
}

/// `per` keys for each of `partitions` partitions (by lease_queue.partition_of), interleaved so
/// that consecutive keys fall in consecutive partitions.
pub(crate) async fn balanced_keys(c: &Client, partitions: u32, per: u32) -> BoxResult<Vec<String>> {
    let rows = c
        .query(
            "SELECT 'key-' || g, lease_queue.partition_of('key-' || g, $1::int)
               FROM generate_series(0, $2::int) AS g ORDER BY g",
            &[&(partitions as i32), &((partitions * per * 8 + 64) as i32)],
        )
        .await?;
    let mut by: Vec<Vec<String>> = vec![Vec::new(); partitions as usize];
    for r in rows {
        let (k, p): (String, i32) = (r.get(0), r.get(1));
        let slot = &mut by[p as usize];
        if slot.len() < per as usize {
            slot.push(k);
        }
    }
    let mut out = Vec::new();
    for i in 0..per as usize {
        for slot in &by {
            let k = slot
                .get(i)
                .ok_or_else(|| err("not enough keys per partition"))?;
            out.push(k.clone());
        }
    }
    Ok(out)
}

/// One producer connection's prepared send statement.
pub(crate) struct Sender {
    pub(crate) sys: System,
    pub(crate) queue: String,
    pub(crate) batch: u32,
    pub(crate) stmt: Statement,
    pub(crate) keys: Arc<Vec<String>>,
    pub(crate) id: u32,
    pub(crate) next: u64,
}

impl Sender {
    pub(crate) async fn new(
        c: &Client,
        sys: System,
        queue: &str,
        batch: u32,
        keys: Arc<Vec<String>>,
        id: u32,
    ) -> BoxResult<Sender> {
        let sql = match (sys, batch > 1) {
            (System::Keyed | System::Unkeyed, false) => LQ_SEND,
            (System::Keyed | System::Unkeyed, true) => LQ_SEND_BATCH,
            (System::Pgmq, false) => PGMQ_SEND,
            (System::Pgmq, true) => PGMQ_SEND_BATCH,
            (System::PgmqFifo, false) => PGMQ_SEND_FIFO,
            (System::PgmqFifo, true) => PGMQ_SEND_BATCH_FIFO,
        };
        Ok(Sender {
            sys,
            queue: queue.into(),
            batch,
            stmt: c.prepare(sql).await?,
            keys,
            id,
            next: u64::from(id) * 7919,
        })
    }

    pub(crate) fn key(&mut self) -> String {
        let k = self.keys[(self.next % self.keys.len() as u64) as usize].clone();
        self.next += 1;
        k
    }

    /// Sends one transaction of `self.batch` messages (autocommit); returns how many.
    pub(crate) async fn send(&mut self, c: &Client) -> BoxResult<u64> {
        let n = self.next;
        if self.batch == 1 {
            let key = self.key();
            let body = payload(self.id, n);
            match self.sys {
                System::Keyed => {
                    c.query_one(&self.stmt, &[&self.queue, &Some(key.as_str()), &body])
                        .await?
                }
                System::Unkeyed => {
                    c.query_one(&self.stmt, &[&self.queue, &None::<&str>, &body])
                        .await?
                }
                System::Pgmq => c.query_one(&self.stmt, &[&self.queue, &body]).await?,
                System::PgmqFifo => {
                    c.query_one(&self.stmt, &[&self.queue, &body, &group_header(&key)])
                        .await?
                }
            };
            return Ok(1);
        }
        let mut keys = Vec::with_capacity(self.batch as usize);
        let mut bodies = Vec::with_capacity(self.batch as usize);
        for i in 0..u64::from(self.batch) {
            keys.push(self.key());
            bodies.push(payload(self.id, n + i));
        }
        let row = match self.sys {
            System::Keyed => {
                let ks: Vec<Option<&str>> = keys.iter().map(|k| Some(k.as_str())).collect();
                c.query_one(&self.stmt, &[&self.queue, &ks, &bodies])
                    .await?
            }
            System::Unkeyed => {
                let ks: Vec<Option<&str>> = vec![None; keys.len()];
                c.query_one(&self.stmt, &[&self.queue, &ks, &bodies])
                    .await?
            }
            System::Pgmq => c.query_one(&self.stmt, &[&self.queue, &bodies]).await?,
            System::PgmqFifo => {
                let hs: Vec<String> = keys.iter().map(|k| group_header(k)).collect();
                c.query_one(&self.stmt, &[&self.queue, &bodies, &hs])
                    .await?
            }
        };
        Ok(row.get::<_, i64>(0) as u64)
    }
}

/// One consumer: ours owns partition `partition` (claimed at start, released at the end); pgmq's
/// reads the one queue.
pub(crate) struct Receiver {
    pub(crate) sys: System,
    pub(crate) queue: String,
    pub(crate) batch: i32,
    pub(crate) partition: i32,
    pub(crate) owner: String,
    pub(crate) epoch: i64,
    pub(crate) read: Statement,
    pub(crate) settle: Statement,
}

impl Receiver {
    pub(crate) async fn new(
        c: &Client,
        sys: System,
        queue: &str,
        batch: u32,
        partition: u32,
    ) -> BoxResult<Receiver> {
        let owner = format!("consumer-{partition}");
        let mut epoch = 0;
        let (read, settle) = if sys.ours() {
            let row = c
                .query_one(
                    LQ_CLAIM,
                    &[&queue, &(partition as i32), &owner, &600_000i64],
                )
                .await?;
            let claimed: bool = row.get(0);
            if !claimed {
                return Err(err(format!("{queue}: partition {partition} not claimed")));
            }
            epoch = row.get(1);
            (c.prepare(LQ_RECEIVE).await?, c.prepare(LQ_ACK).await?)
        } else {
            (
                c.prepare(if sys == System::PgmqFifo {
                    PGMQ_READ_GROUPED
                } else {
                    PGMQ_READ
                })
                .await?,
                c.prepare(PGMQ_DELETE).await?,
            )
        };
        Ok(Receiver {
            sys,
            queue: queue.into(),
            batch: batch as i32,
            partition: partition as i32,
            owner,
            epoch,
            read,
            settle,
        })
    }

    /// One receive → settle cycle; returns the number of messages handled (0: nothing there).
    pub(crate) async fn cycle(&self, c: &Client) -> BoxResult<u64> {
        if self.sys.ours() {
            let rows = c
                .query(
                    &self.read,
                    &[
                        &self.queue,
                        &self.partition,
                        &self.owner,
                        &self.epoch,
                        &self.batch,
                    ],
                )
                .await?;
            let Some(first) = rows.first() else {
                return Ok(0);
            };
            let batch_id: i64 = first.get(0);
            c.execute(
                &self.settle,
                &[
                    &self.queue,
                    &self.partition,
                    &self.owner,
                    &self.epoch,
                    &batch_id,
                ],
            )
            .await?;
            Ok(rows.len() as u64)
        } else {
            let rows = c
                .query(&self.read, &[&self.queue, &30i32, &self.batch])
                .await?;
            if rows.is_empty() {
                return Ok(0);
            }
            let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            c.query_one(&self.settle, &[&self.queue, &ids]).await?;
            Ok(ids.len() as u64)
        }
    }

    pub(crate) async fn finish(&self, c: &Client) -> BoxResult<()> {
        if self.sys.ours() {
            c.execute(
                LQ_RELEASE,
                &[&self.queue, &self.partition, &self.owner, &self.epoch],
            )
            .await?;
        }
        Ok(())
    }
}
