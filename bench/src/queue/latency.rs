//! Latency: send → handler with an idle waiting consumer, and takeover after a consumer stops.

use std::future::poll_fn;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Notification};

use super::system::*;
use crate::server::{Db, sync_options};
use crate::stats::{self, Latency, Rng};
use crate::{BoxResult, err};

#[derive(Clone, Debug, Serialize)]
pub struct LatencyMode {
    pub name: String,
    pub what: String,
    pub sync_commit: String,
    pub latency: Latency,
    pub failures: u32,
}

/// A connection whose notifications arrive on a channel.
pub(super) async fn listening(
    db: &Db,
    sync: bool,
) -> BoxResult<(Client, mpsc::UnboundedReceiver<Notification>)> {
    let mut cfg = db.config.clone();
    cfg.options(sync_options(sync));
    let (client, mut connection) = cfg.connect(tokio_postgres::NoTls).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(msg) = poll_fn(|cx| connection.poll_message(cx)).await {
            match msg {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    Ok((client, rx))
}

pub(super) fn us(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// lease_queue: LISTEN lease_queue, receive on the partition's notification.
    LqListen,
    /// pgmq.read_with_poll with this poll interval (ms).
    PgmqPoll(i32),
    /// pgmq.enable_notify_insert(queue, 0), LISTEN on its channel, read on the notification.
    PgmqNotify,
}

pub(crate) async fn send_latency(
    db: &Db,
    sync: bool,
    wait: Wait,
    n: u32,
    prefix: &str,
) -> BoxResult<LatencyMode> {
    let sys = if wait == Wait::LqListen {
        System::Keyed
    } else {
        System::Pgmq
    };
    let tag = match wait {
        Wait::LqListen => "l".to_string(),
        Wait::PgmqPoll(ms) => format!("p{ms}"),
        Wait::PgmqNotify => "n".to_string(),
    };
    let queue = format!("{prefix}lat_{tag}_{}", if sync { "on" } else { "off" });
    let producer = db.connect(sync).await?;
    create(&producer, sys, &queue, 1).await?;
    let (consumer, mut notes) = listening(db, sync).await?;
    let channel = match wait {
        Wait::LqListen => {
            consumer.batch_execute("LISTEN lease_queue").await?;
            "lease_queue".to_string()
        }
        Wait::PgmqNotify => {
            consumer
                .execute("SELECT pgmq.enable_notify_insert($1::text, 0)", &[&queue])
                .await?;
            let ch = format!("pgmq.q_{queue}.INSERT");
            consumer.batch_execute(&format!("LISTEN \"{ch}\"")).await?;
            ch
        }
        Wait::PgmqPoll(_) => String::new(),
    };
    let want_payload = format!("{queue}:0");
    let send_stmt = producer
        .prepare(if sys.ours() { LQ_SEND } else { PGMQ_SEND })
        .await?;
    let r = Receiver::new(&consumer, sys, &queue, 1, 0).await?;
    let poll = consumer
        .prepare("SELECT msg_id FROM pgmq.read_with_poll($1::text, 30, 1, 5, $2::int)")
        .await?;
    let mut rng = Rng::new(0x9e37_79b9);
    let mut h = stats::histogram();
    let mut failures = 0;
    // The consumer is idle: it found nothing (and, listening, waits).
    r.cycle(&consumer).await?;
    for i in 0..n {
        while notes.try_recv().is_ok() {}
        let delay = Duration::from_millis(rng.range(5, 30));
        let body = payload(0, u64::from(i));
        let consume = async {
            match wait {
                Wait::PgmqPoll(ms) => {
                    let rows = consumer.query(&poll, &[&queue, &ms]).await?;
                    let t = Instant::now();
                    let ids: Vec<i64> = rows.iter().map(|x| x.get(0)).collect();
                    if ids.is_empty() {
                        return BoxResult::Ok(None);
                    }
                    consumer.query_one(PGMQ_DELETE, &[&queue, &ids]).await?;
                    Ok(Some(t))
                }
                Wait::LqListen | Wait::PgmqNotify => {
                    let until = tokio::time::Instant::now() + Duration::from_secs(5);
                    loop {
                        match tokio::time::timeout_at(until, notes.recv()).await {
                            Ok(Some(note)) => {
                                if note.channel() != channel
                                    || (wait == Wait::LqListen && note.payload() != want_payload)
                                {
                                    continue;
                                }
                            }
                            _ => return Ok(None),
                        }
                        // The handler holds the message when the receive (read) returns, just
                        // before the ack (delete): that instant is timed.
                        if let Some(t) = handle_one(&consumer, &r).await? {
                            return Ok(Some(t));
                        }
                    }
                }
            }
        };
        let produce = async {
            tokio::time::sleep(delay).await;
            let t = Instant::now();
            if sys.ours() {
                producer
                    .query_one(&send_stmt, &[&queue, &Some("k"), &body])
                    .await?;
            } else {
                producer.query_one(&send_stmt, &[&queue, &body]).await?;
            }
            BoxResult::Ok(t)
        };
        let (got, sent) = tokio::join!(consume, produce);
        let sent = sent?;
        match got? {
            Some(t) => stats::record(&mut h, us(t.saturating_duration_since(sent))),
            None => failures += 1,
        }
    }
    r.finish(&consumer).await?;
    drop_queue(&producer, sys, &queue).await?;
    let (name, what) = match wait {
        Wait::LqListen => (
            "lease_queue LISTEN".to_string(),
            "consumer holds the partition, LISTEN lease_queue; on its notification receive (→ handler) then ack".to_string(),
        ),
        Wait::PgmqPoll(ms) => (
            format!("pgmq read_with_poll {ms} ms"),
            format!("consumer sits in pgmq.read_with_poll(vt 30, qty 1, 5 s, poll_interval_ms {ms}) (→ handler) then delete"),
        ),
        Wait::PgmqNotify => (
            "pgmq notify_insert LISTEN".to_string(),
            "pgmq.enable_notify_insert(queue, 0) (throttle off), LISTEN on its channel; on a notification read (→ handler) then delete".to_string(),
        ),
    };
    Ok(LatencyMode {
        name,
        what,
        sync_commit: if sync { "on" } else { "off" }.into(),
        latency: Latency::of(&h),
        failures,
    })
}

/// One receive (read) of at most one message; `Some(time it returned)` if it got one, which it
/// then settles.
pub(super) async fn handle_one(c: &Client, r: &Receiver) -> BoxResult<Option<Instant>> {
    if r.sys.ours() {
        let rows = c
            .query(
                &r.read,
                &[&r.queue, &r.partition, &r.owner, &r.epoch, &r.batch],
            )
            .await?;
        let t = Instant::now();
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let batch_id: i64 = first.get(0);
        c.execute(
            &r.settle,
            &[&r.queue, &r.partition, &r.owner, &r.epoch, &batch_id],
        )
        .await?;
        Ok(Some(t))
    } else {
        let rows = c.query(&r.read, &[&r.queue, &30i32, &r.batch]).await?;
        let t = Instant::now();
        let ids: Vec<i64> = rows.iter().map(|x| x.get(0)).collect();
        if ids.is_empty() {
            return Ok(None);
        }
        c.query_one(&r.settle, &[&r.queue, &ids]).await?;
        Ok(Some(t))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Heir {
    /// lease.register_waiter's lapses_in, sleep, then claim + receive (retry every 1 ms).
    LqTimer,
    /// claim every 100 ms (no timer), then receive.
    LqPoll,
    /// pgmq.read_with_poll (poll interval 100 ms) waiting for the visibility timeout.
    PgmqPoll,
}

pub(super) const TAKEOVER_TTL_MS: i64 = 1000;

pub(super) async fn takeover(db: &Db, heir: Heir, n: u32, prefix: &str) -> BoxResult<LatencyMode> {
    let sys = if heir == Heir::PgmqPoll {
        System::Pgmq
    } else {
        System::Keyed
    };
    let tag = match heir {
        Heir::LqTimer => "t",
        Heir::LqPoll => "p",
        Heir::PgmqPoll => "m",
    };
    let queue = format!("{prefix}to_{tag}");
    let a = db.connect(false).await?;
    let b = db.connect(false).await?;
    create(&a, sys, &queue, 1).await?;
    let lease_key = format!("lease_queue:{queue}:0");
    let mut h = stats::histogram();
    let mut failures = 0;
    for i in 0..n {
        let body = payload(0, u64::from(i));
        let got: Option<Duration> = if sys.ours() {
            // The consumer that dies: claims, receives a batch, stops.
            let row = a
                .query_one(LQ_CLAIM, &[&queue, &0i32, &"dying", &TAKEOVER_TTL_MS])
                .await?;
            let epoch: i64 = row.get(1);
            a.query_one(LQ_SEND, &[&queue, &Some("k"), &body]).await?;
            let rows = a
                .query(LQ_RECEIVE, &[&queue, &0i32, &"dying", &epoch, &10i32])
                .await?;
            if rows.is_empty() {
                return Err(err("takeover: the dying consumer received nothing"));
            }
            let expires: SystemTime = a
                .query_one(
                    "SELECT expires_at FROM lease.inspect($1::text)",
                    &[&lease_key],
                )
                .await?
                .get(0);
            // The heir.
            if heir == Heir::LqTimer {
                let lapses_in: Option<i64> = b
                    .query_one(
                        "SELECT ceil(extract(epoch FROM lapses_in) * 1000000)::bigint FROM lease.register_waiter($1::text)",
                        &[&lease_key],
                    )
                    .await?
                    .get(0);
                tokio::time::sleep(Duration::from_micros(lapses_in.unwrap_or(0).max(0) as u64))
                    .await;
            }
            let step = if heir == Heir::LqTimer {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(100)
            };
            let give_up = Instant::now() + Duration::from_secs(10);
            let mut got = None;
            while Instant::now() < give_up {
                let row = b
                    .query_one(LQ_CLAIM, &[&queue, &0i32, &"heir", &30_000i64])
                    .await?;
                if row.get::<_, bool>(0) {
                    let epoch: i64 = row.get(1);
                    let rows = b
                        .query(LQ_RECEIVE, &[&queue, &0i32, &"heir", &epoch, &10i32])
                        .await?;
                    let now = SystemTime::now();
                    if let Some(first) = rows.first() {
                        got = Some(now.duration_since(expires).unwrap_or_default());
                        let batch_id: i64 = first.get(0);
                        b.execute(LQ_ACK, &[&queue, &0i32, &"heir", &epoch, &batch_id])
                            .await?;
                    }
                    b.execute(LQ_RELEASE, &[&queue, &0i32, &"heir", &epoch])
                        .await?;
                    break;
                }
                tokio::time::sleep(step).await;
            }
            got
        } else {
            a.query_one(PGMQ_SEND, &[&queue, &body]).await?;
            let row = a
                .query_one(
                    "SELECT msg_id, vt FROM pgmq.read($1::text, $2::int, 1)",
                    &[&queue, &((TAKEOVER_TTL_MS / 1000) as i32)],
                )
                .await?;
            let (id, vt): (i64, SystemTime) = (row.get(0), row.get(1));
            let rows = b
                .query(
                    "SELECT msg_id FROM pgmq.read_with_poll($1::text, 30, 1, 10, 100)",
                    &[&queue],
                )
                .await?;
            let now = SystemTime::now();
            match rows.first() {
                Some(r) if r.get::<_, i64>(0) == id => {
                    b.query_one(PGMQ_DELETE, &[&queue, &vec![id]]).await?;
                    Some(now.duration_since(vt).unwrap_or_default())
                }
                _ => None,
            }
        };
        match got {
            Some(d) => stats::record(&mut h, us(d)),
            None => failures += 1,
        }
    }
    drop_queue(&a, sys, &queue).await?;
    let (name, what) = match heir {
        Heir::LqTimer => (
            "lease_queue heir: timer",
            "the holder receives a batch and stops; the heir sleeps lease.register_waiter's lapses_in, then claim → receive (the re-issued batch), retrying every 1 ms",
        ),
        Heir::LqPoll => (
            "lease_queue heir: claim every 100 ms",
            "as above, but the heir just tries claim every 100 ms (no timer)",
        ),
        Heir::PgmqPoll => (
            "pgmq heir: read_with_poll 100 ms",
            "a consumer reads the message with vt 1 s and stops; the heir sits in read_with_poll (poll_interval_ms 100) until the message is visible again",
        ),
    };
    Ok(LatencyMode {
        name: name.into(),
        what: what.into(),
        sync_commit: "off".into(),
        latency: Latency::of(&h),
        failures,
    })
}
