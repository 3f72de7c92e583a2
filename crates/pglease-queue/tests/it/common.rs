//! Shared helpers: one private server for the whole binary (both extensions installed from the
//! repository's extension directories, `CREATE EXTENSION pg_lease_queue CASCADE` in database
//! `it`), clients, queues of their own per test, spawned consumers, and bounded waits.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pgcluster::{Cluster, ClusterBuilder};
use tokio_postgres::NoTls;

pub const DB: &str = "it";

pub fn major() -> u32 {
    std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15)
}

pub fn cluster() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../extensions");
        // A private mirror of the installation in this checkout's target/: the extension files
        // under test never go into the installation, where another checkout could overwrite them.
        let mirrors = root.join("../target/pgcluster-mirrors");
        let cluster = ClusterBuilder::for_major(major())
            .and_then(|b| {
                b.private_mirror(true)
                    .cache_dir(mirrors)
                    .extension_dir(root.join("pg_lease"))
                    .extension_dir(root.join("pg_lease_queue"))
                    .start()
            })
            .unwrap_or_else(|e| panic!("could not start PostgreSQL {}: {e}", major()));
        cluster
            .psql("postgres", &format!("CREATE DATABASE {DB}"))
            .expect("create database");
        cluster
            .psql(DB, "CREATE EXTENSION pg_lease_queue CASCADE")
            .expect("install the queue");
        cluster
    })
}

/// A connection string for the shared database, tagged with `application_name = app`.
pub fn conninfo(app: &str) -> String {
    format!("{} application_name={app}", cluster().connection_string(DB))
}

/// A name unique to this call: `<test>-<n>` (a valid queue name, owner and application name).
pub fn unique(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A plain superuser connection.
pub async fn superuser() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&conninfo("it_superuser"), NoTls)
        .await
        .expect("connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Creates queue `q` with `partitions` and `max_attempts`.
pub async fn create_queue(
    su: &tokio_postgres::Client,
    q: &str,
    partitions: i32,
    max_attempts: i32,
) {
    su.execute(
        "SELECT lease_queue.create_queue($1, $2, $3)",
        &[&q, &partitions, &max_attempts],
    )
    .await
    .expect("create queue");
}

/// A pglease client whose owner and application name are `app`.
pub async fn client(app: &str) -> pglease::Client {
    pglease::Client::builder()
        .owner(app)
        .connect(&conninfo(app))
        .await
        .unwrap_or_else(|e| panic!("connect {app}: {e}"))
}

/// The pending messages of `q` (the backlog of all its partitions plus open batches).
pub async fn pending(su: &tokio_postgres::Client, q: &str) -> i64 {
    su.query_one(
        "SELECT coalesce(sum(backlog + coalesce(batch_size, 0)), 0)::bigint \
           FROM lease_queue.status($1)",
        &[&q],
    )
    .await
    .expect("status")
    .get(0)
}

/// The holder of each partition of `q` (NULL: free), in partition order.
pub async fn holders(su: &tokio_postgres::Client, q: &str) -> Vec<Option<String>> {
    su.query(
        "SELECT owner FROM lease_queue.status($1) ORDER BY partition",
        &[&q],
    )
    .await
    .expect("status")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Makes partition `p` of `q` lapse at once, server-side, without granting it to anyone.
pub async fn force_lapse(su: &tokio_postgres::Client, q: &str, p: u32) {
    let key = format!("lease_queue:{q}:{p}");
    let n = su
        .execute(
            "UPDATE lease.leases SET expires_at = clock_timestamp() - interval '1 second' \
              WHERE key = $1 AND owner IS NOT NULL",
            &[&key],
        )
        .await
        .expect("force lapse");
    assert_eq!(n, 1, "{key} had a holder to lapse");
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`; panics naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What handlers saw, shared with the test.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<Handled>>>);

/// One handler call.
#[derive(Clone, Debug)]
pub struct Handled {
    pub consumer: String,
    pub id: i64,
    pub key: Option<String>,
    pub payload: serde_json::Value,
    pub attempts: u32,
    pub batch_id: i64,
    pub epoch: i64,
}

impl Seen {
    pub fn push(&self, consumer: &str, d: &pglease_queue::Delivery) {
        self.0.lock().unwrap().push(Handled {
            consumer: consumer.to_owned(),
            id: d.id(),
            key: d.key().map(str::to_owned),
            payload: d.payload().clone(),
            attempts: d.attempts(),
            batch_id: d.batch_id(),
            epoch: d.epoch(),
        });
    }

    pub fn all(&self) -> Vec<Handled> {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Runs `consumer` in a task with a handler that records every delivery as `owner`'s and
    /// succeeds.
    pub fn run(
        &self,
        consumer: &pglease_queue::Consumer,
        owner: &str,
    ) -> tokio::task::JoinHandle<pglease_queue::Result<()>> {
        let (consumer, seen, owner) = (consumer.clone(), self.clone(), owner.to_owned());
        tokio::spawn(async move {
            consumer
                .run(move |d: pglease_queue::Delivery| {
                    let (seen, owner) = (seen.clone(), owner.clone());
                    async move {
                        seen.push(&owner, &d);
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        })
    }

    /// Waits until at least `n` calls were seen.
    pub async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Handled> {
        eventually(&format!("{n} handler calls"), limit, || async {
            let all = self.all();
            (all.len() >= n).then_some(all)
        })
        .await
    }
}
