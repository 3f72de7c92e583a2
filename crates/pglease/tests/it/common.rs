//! Shared helpers: one private PostgreSQL server for the whole test binary (plus private ones for
//! tests that freeze their server), clients, keys, a PgBouncer (pgcluster's), and bounded waits for
//! observable states.
//!
//! Server version: `PGLEASE_PG_VERSION` (default 15).

use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pgcluster::pgbouncer::PgBouncer;
use pgcluster::{Cluster, ClusterBuilder};
use pglease::Client;
use tokio_postgres::NoTls;

/// The database of the shared server, with `CREATE EXTENSION pg_lease` done.
pub const DB: &str = "it";
/// A login role whose statements the server logs (`log_statement = 'all'`).
pub const PROBE_ROLE: &str = "renew_probe";

/// The PostgreSQL major version under test.
pub fn major() -> u32 {
    match std::env::var("PGLEASE_PG_VERSION") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("PGLEASE_PG_VERSION must be a major version, got {v:?}")),
        Err(_) => 15,
    }
}

/// Starts a new private server with the extension files installed.
pub fn start_cluster() -> Cluster {
    let ext = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../extensions/pg_lease");
    // A private mirror of the installation in this checkout's target/: the extension files under
    // test never go into the installation, where another checkout could overwrite them.
    let mirrors = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pgcluster-mirrors");
    ClusterBuilder::for_major(major())
        .and_then(|b| {
            b.private_mirror(true)
                .cache_dir(mirrors)
                .extension_dir(ext)
                .start()
        })
        .unwrap_or_else(|e| panic!("could not start PostgreSQL {}: {e}", major()))
}

/// The shared server (started on first use).
pub fn cluster() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = start_cluster();
        cluster
            .psql("postgres", &format!("CREATE DATABASE {DB}"))
            .expect("create database");
        cluster
            .psql(
                DB,
                &format!(
                    "CREATE EXTENSION pg_lease; CREATE ROLE {PROBE_ROLE} LOGIN; \
                     ALTER ROLE {PROBE_ROLE} SET log_statement = 'all';"
                ),
            )
            .expect("set up the shared database");
        cluster
    })
}

/// A connection string for the shared database, tagged with `application_name = app`.
pub fn conninfo(app: &str) -> String {
    conninfo_for(cluster(), DB, app)
}

/// A connection string for `db` on `cluster`, tagged with `application_name = app`.
pub fn conninfo_for(cluster: &Cluster, db: &str, app: &str) -> String {
    format!("{} application_name={app}", cluster.connection_string(db))
}

/// A client of the shared database with default settings.
pub async fn client(app: &str) -> Client {
    Client::builder()
        .connect(&conninfo(app))
        .await
        .unwrap_or_else(|e| panic!("connect {app}: {e}"))
}

/// A plain superuser connection to `conninfo`.
pub async fn raw(conninfo: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A plain superuser connection to the shared database.
pub async fn superuser() -> tokio_postgres::Client {
    raw(&conninfo("it_superuser")).await
}

/// A key (and application name) unique to this call: `<test>-<n>`.
pub fn key(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
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

/// Makes `key`'s lease lapse at once, server-side (superuser), without granting it to anyone.
pub async fn force_lapse(su: &tokio_postgres::Client, key: &str) {
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

/// Whether `key`'s waiter mark is set (a waiter registered for the current grant).
pub async fn waiter_registered(su: &tokio_postgres::Client, key: &str) -> bool {
    su.query_opt("SELECT waiting FROM lease.leases WHERE key = $1", &[&key])
        .await
        .expect("read the waiter mark")
        .is_some_and(|row| row.get::<_, bool>(0))
}

/// The server's state of `key`, read as superuser.
pub async fn state(su: &tokio_postgres::Client, key: &str) -> Option<pglease::LeaseState> {
    pglease::inspect(su, key).await.expect("inspect")
}

/// A PgBouncer in transaction mode in front of `cluster` for database `db`, with `postgres` as
/// its user and admin. Panics (naming the Debian package) if it cannot start.
pub fn start_pgbouncer(cluster: &Cluster, db: &str) -> PgBouncer {
    PgBouncer::builder(cluster)
        .database(db)
        .admin_user("postgres")
        .start()
        .unwrap_or_else(|e| {
            panic!(
                "pgbouncer could not start: {e}\nthe pooler tests need it; install the Debian \
                 package with `apt-get update && apt-get install -y pgbouncer`"
            )
        })
}
