//! What the clients' backends wait on during a timed run: pg_stat_activity sampled every 20 ms
//! on a connection of its own (the section's database, `state = 'active'` client backends other
//! than the sampler; no wait event = running or runnable, counted as `CPU`). Cheap, and it shows
//! where producers or consumers serialize (e.g. `Lock:transactionid`: waiting for another
//! transaction's row lock to be released at its commit).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::BoxResult;
use crate::server::Db;

const EVERY: Duration = Duration::from_millis(20);

pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<BoxResult<BTreeMap<String, u64>>>,
}

impl Sampler {
    pub async fn start(db: &Db) -> BoxResult<Sampler> {
        let c = db.connect(false).await?;
        let stmt = c
            .prepare(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
                  WHERE datname = current_database() AND backend_type = 'client backend'
                    AND state = 'active' AND pid <> pg_backend_pid()",
            )
            .await?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut counts = BTreeMap::new();
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !flag.load(Ordering::SeqCst) {
                tick.tick().await;
                for r in c.query(&stmt, &[]).await? {
                    *counts.entry(r.get::<_, String>(0)).or_insert(0) += 1;
                }
            }
            BoxResult::Ok(counts)
        });
        Ok(Sampler { stop, task })
    }

    /// The samples per wait event, most frequent first.
    pub async fn finish(self) -> BoxResult<Vec<(String, u64)>> {
        self.stop.store(true, Ordering::SeqCst);
        let mut v: Vec<(String, u64)> = self.task.await??.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(v)
    }
}

/// `Lock:transactionid 62 %, CPU 30 %, ...`: the shares of the `top` most frequent events.
pub fn shares(waits: &[(String, u64)], top: usize) -> String {
    let total: u64 = waits.iter().map(|w| w.1).sum();
    if total == 0 {
        return "–".into();
    }
    waits
        .iter()
        .take(top)
        .map(|(w, n)| format!("{w} {:.0} %", *n as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sum of several runs' samples, most frequent first.
pub fn merge<'a>(runs: impl Iterator<Item = &'a [(String, u64)]>) -> Vec<(String, u64)> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for r in runs {
        for (w, n) in r {
            *m.entry(w.clone()).or_insert(0) += n;
        }
    }
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}
