//! Wake-up latency: how long after a release commits (or a lease lapses) a waiter holds the key.
//!
//! - `release→blocking`: the waiter is inside a server-side blocking acquire (`wait` > 0), which
//!   re-reads the key every 50 ms; the holder releases after a random delay.
//! - `release→listen`: the waiter ran `LISTEN pg_lease_released` and `lease.register_waiter`,
//!   sleeps on the connection until the notification for its key arrives, then acquires
//!   (non-blocking).
//! - `release→Client::acquire`: the same through `pglease::Client::acquire` (its waiting loop).
//! - `lapse→blocking`: the holder stops renewing; the waiter's blocking acquire sleeps until
//!   exactly the expiry (the server never sleeps past it) and takes over.
//! - `lapse→timer`: the waiter sleeps `lapses_in` (from register_waiter) on its own monotonic
//!   clock, then acquires, retrying every millisecond if it woke early.
//!
//! Release latencies are measured on the client's monotonic clock from the moment the holder's
//! release returned (its commit is acknowledged) to the moment the waiter's acquire returned a
//! grant. Lapse latencies compare the expiry the server granted with the client's wall clock when
//! the waiter's acquire returned: server and client run on this machine, so they share one clock.

use std::future::poll_fn;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Notification};

use crate::plan::Plan;
use crate::server::{Db, sync_options};
use crate::stats::{self, Latency, LoadAvg, Rng};
use crate::{BoxResult, err};

#[derive(Clone, Debug, Serialize)]
pub struct WakeMode {
    pub name: String,
    pub what: String,
    pub latency: Latency,
    /// `release→listen` only: from sending the release to the notification's arrival (it is
    /// delivered at the commit, so usually before the holder's call returns).
    pub notified: Option<Latency>,
    /// Samples that did not end in a grant within the bound (none expected).
    pub failures: u32,
    /// Waiters that woke before the expiry and had to retry (`lapse→timer`).
    pub retries: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct WakeResult {
    pub samples: u32,
    pub lapse_ttl_ms: u64,
    pub modes: Vec<WakeMode>,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

const TTL: Duration = Duration::from_secs(30);
const LAPSE_TTL: Duration = Duration::from_millis(200);
const WAIT: Duration = Duration::from_secs(10);
const REGISTER: &str = "SELECT held, ceil(extract(epoch FROM lapses_in) * 1000000)::bigint \
                        FROM lease.register_waiter($1)";

/// A connection whose notifications are forwarded to a channel.
async fn connect_listening(db: &Db) -> BoxResult<(Client, mpsc::UnboundedReceiver<Notification>)> {
    let mut cfg = db.config.clone();
    cfg.options(sync_options(false));
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

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

async fn grant(c: &Client, key: &str, owner: &str, ttl: Duration) -> BoxResult<pglease::Grant> {
    pglease::acquire(c, key, owner, ttl, Duration::ZERO)
        .await?
        .ok_or_else(|| err(format!("{key} unexpectedly held")))
}

pub async fn wake(db: &Db, plan: &Plan, stamp: &str) -> BoxResult<WakeResult> {
    let load_before = LoadAvg::now();
    let holder = db.connect(false).await?;
    let waiter = db.connect(false).await?;
    let (listener, mut notes) = connect_listening(db).await?;
    listener.batch_execute("LISTEN pg_lease_released").await?;
    let mut rng = Rng::new(0x5eed_1234);
    let n = plan.wake_samples;
    let mut modes = Vec::new();

    // release → server-side blocking acquire
    {
        let mut h = stats::histogram();
        let mut failures = 0;
        for i in 0..n {
            let key = format!("wake-b-{stamp}-{i}");
            let g = grant(&holder, &key, "holder", TTL).await?;
            let delay = Duration::from_millis(rng.range(20, 120));
            let wait_fut = async {
                let r = pglease::acquire(&waiter, &key, "waiter", TTL, WAIT).await;
                (Instant::now(), r)
            };
            let release_fut = async {
                tokio::time::sleep(delay).await;
                let r = pglease::release(&holder, &key, "holder", g.epoch).await;
                (Instant::now(), r)
            };
            let ((t_acq, acq), (t_rel, rel)) = tokio::join!(wait_fut, release_fut);
            rel?;
            match acq {
                Ok(Some(_)) => {
                    stats::record(&mut h, micros(t_acq.saturating_duration_since(t_rel)))
                }
                _ => failures += 1,
            }
        }
        modes.push(WakeMode {
            name: "release→blocking".into(),
            what: "server-side blocking acquire (wait > 0, polls every 50 ms)".into(),
            latency: Latency::of(&h),
            notified: None,
            failures,
            retries: 0,
        });
    }

    // release → LISTEN/NOTIFY
    {
        let mut h = stats::histogram();
        let mut hn = stats::histogram();
        let mut failures = 0;
        for i in 0..n {
            let key = format!("wake-l-{stamp}-{i}");
            let g = grant(&holder, &key, "holder", TTL).await?;
            let row = listener.query_one(REGISTER, &[&key]).await?;
            if !row.get::<_, bool>(0) {
                return Err(err("register_waiter: key not held"));
            }
            let delay = Duration::from_millis(rng.range(5, 50));
            let wait_fut = async {
                let deadline = tokio::time::Instant::now() + WAIT;
                loop {
                    match tokio::time::timeout_at(deadline, notes.recv()).await {
                        Ok(Some(note)) if note.payload() == key => break,
                        Ok(Some(_)) => continue,
                        _ => return (Instant::now(), Instant::now(), false),
                    }
                }
                let t_note = Instant::now();
                let ok = matches!(
                    pglease::acquire(&listener, &key, "waiter", TTL, Duration::ZERO).await,
                    Ok(Some(_))
                );
                (t_note, Instant::now(), ok)
            };
            let release_fut = async {
                tokio::time::sleep(delay).await;
                let sent = Instant::now();
                let r = pglease::release(&holder, &key, "holder", g.epoch).await;
                (sent, Instant::now(), r)
            };
            let ((t_note, t_acq, ok), (t_sent, t_rel, rel)) = tokio::join!(wait_fut, release_fut);
            rel?;
            if ok {
                stats::record(&mut h, micros(t_acq.saturating_duration_since(t_rel)));
                stats::record(&mut hn, micros(t_note.saturating_duration_since(t_sent)));
            } else {
                failures += 1;
            }
        }
        modes.push(WakeMode {
            name: "release→listen".into(),
            what:
                "LISTEN pg_lease_released + lease.register_waiter, then acquire on the notification"
                    .into(),
            latency: Latency::of(&h),
            notified: Some(Latency::of(&hn)),
            failures,
            retries: 0,
        });
    }

    // release → pglease::Client::acquire (its own LISTEN/register_waiter loop)
    {
        let mut cfg = db.config.clone();
        cfg.options(sync_options(false));
        let lc = pglease::Client::builder()
            .owner("client-waiter")
            .max_connections(2)
            .connect_with(cfg, tokio_postgres::NoTls)
            .await?;
        let mut h = stats::histogram();
        let mut failures = 0;
        for i in 0..n {
            let key = format!("wake-c-{stamp}-{i}");
            let g = grant(&holder, &key, "holder", TTL).await?;
            let delay = Duration::from_millis(rng.range(20, 120));
            let wait_fut = async {
                let r = lc.acquire(&key, TTL, WAIT).await;
                (Instant::now(), r)
            };
            let release_fut = async {
                tokio::time::sleep(delay).await;
                let r = pglease::release(&holder, &key, "holder", g.epoch).await;
                (Instant::now(), r)
            };
            let ((t_acq, acq), (t_rel, rel)) = tokio::join!(wait_fut, release_fut);
            rel?;
            match acq {
                Ok(lease) => {
                    stats::record(&mut h, micros(t_acq.saturating_duration_since(t_rel)));
                    let _ = lease.release().await;
                }
                Err(_) => failures += 1,
            }
        }
        lc.shutdown().await;
        modes.push(WakeMode {
            name: "release→Client::acquire".into(),
            what: "pglease::Client::acquire with a timeout: the client's own LISTEN + register_waiter loop".into(),
            latency: Latency::of(&h),
            notified: None,
            failures,
            retries: 0,
        });
    }

    // lapse → blocking acquire
    {
        let mut h = stats::histogram();
        let mut failures = 0;
        for i in 0..n {
            let key = format!("wake-x-{stamp}-{i}");
            let g = grant(&holder, &key, "holder", LAPSE_TTL).await?;
            match pglease::acquire(&waiter, &key, "waiter", TTL, WAIT).await {
                Ok(Some(_)) => {
                    let late = SystemTime::now()
                        .duration_since(g.expires_at)
                        .unwrap_or_default();
                    stats::record(&mut h, micros(late));
                }
                _ => failures += 1,
            }
        }
        modes.push(WakeMode {
            name: "lapse→blocking".into(),
            what: "holder stops renewing; server-side blocking acquire sleeps until the expiry"
                .into(),
            latency: Latency::of(&h),
            notified: None,
            failures,
            retries: 0,
        });
    }

    // lapse → client timer from register_waiter's lapses_in
    {
        let mut h = stats::histogram();
        let (mut failures, mut retries) = (0, 0);
        for i in 0..n {
            let key = format!("wake-t-{stamp}-{i}");
            let g = grant(&holder, &key, "holder", LAPSE_TTL).await?;
            let row = waiter.query_one(REGISTER, &[&key]).await?;
            let lapses_in: Option<i64> = row.get(1);
            let sleep = Duration::from_micros(lapses_in.unwrap_or(0).max(0) as u64);
            tokio::time::sleep(sleep).await;
            let deadline = Instant::now() + WAIT;
            loop {
                match pglease::acquire(&waiter, &key, "waiter", TTL, Duration::ZERO).await? {
                    Some(_) => {
                        let late = SystemTime::now()
                            .duration_since(g.expires_at)
                            .unwrap_or_default();
                        stats::record(&mut h, micros(late));
                        break;
                    }
                    None if Instant::now() < deadline => {
                        retries += 1;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    None => {
                        failures += 1;
                        break;
                    }
                }
            }
        }
        modes.push(WakeMode {
            name: "lapse→timer".into(),
            what: "waiter sleeps register_waiter's lapses_in on its own clock, then acquires"
                .into(),
            latency: Latency::of(&h),
            notified: None,
            failures,
            retries,
        });
    }
    for m in &modes {
        eprintln!(
            "    {:<18} p50 {:>7} us  p90 {:>7} us  max {:>7} us  failures {}",
            m.name, m.latency.p50_us, m.latency.p90_us, m.latency.max_us, m.failures
        );
    }
    Ok(WakeResult {
        samples: n,
        lapse_ttl_ms: LAPSE_TTL.as_millis() as u64,
        modes,
        load_before,
        load_after: LoadAvg::now(),
    })
}
