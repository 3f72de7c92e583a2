//! Shared harness for pg_lease's integration suites: one private PostgreSQL server per test binary,
//! started by `pgcluster` with the extension files installed, plus helpers that keep tests short.
//!
//! Which server: `PGLEASE_PG_VERSION` (a major version, e.g. `17`) or, unset, PostgreSQL 15.
//! The README's test command runs the suites once per version present (see `scripts/test.sh`).
//!
//! Roles created once per server: `lease_admin` (owns the test databases, installs the extension,
//! a plain non-superuser) and `app` (a plain non-superuser that only calls the API).
//! Every test uses its own keys (`key(...)`) or its own database (`fresh_db(...)`).

pub mod calls;
pub mod lapse;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pgcluster::{Cluster, ClusterBuilder};
use tokio_postgres::{Client, NoTls};

/// The role that owns test databases and installs the extension (no superuser, no CREATEROLE).
pub const ADMIN: &str = "lease_admin";
/// A plain application role: may call the API, nothing more.
pub const APP: &str = "app";
/// A member of [`APP`] (a second login of the same application): may act on `app`'s leases.
pub const APP_MEMBER: &str = "app_worker";
/// Another application's role, in no relation to [`APP`]: may call the API on its own leases only.
pub const OTHER_APP: &str = "reporting";
/// The database shared by tests that only need the extension and their own keys.
pub const SHARED_DB: &str = "regress";
/// The database shared by queue tests: pg_lease_queue (and so pg_lease) created by [`ADMIN`]. Each
/// test uses queues of its own names.
pub const QUEUE_DB: &str = "regress_queue";

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// pg_lease's control file and every versioned script, as `make install` would install them.
pub fn extension_files() -> (PathBuf, Vec<PathBuf>) {
    extension_files_of("pg_lease")
}

/// The control file and every versioned script of our extension `name` (a directory of
/// `extensions/`), as `make install` would install them.
pub fn extension_files_of(name: &str) -> (PathBuf, Vec<PathBuf>) {
    let ext = repo_root().join("extensions").join(name);
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(ext.join("sql"))
        .unwrap_or_else(|e| panic!("extensions/{name}/sql: {e}"))
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "sql")
                && p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with(&format!("{name}--")))
        })
        .collect();
    scripts.sort();
    (ext.join(format!("{name}.control")), scripts)
}

/// Runs the server from a private mirror of its installation in this checkout's `target/`, so
/// the extension files of the code under test never go into the installation itself, where another
/// checkout (or an earlier build) on the same machine would overwrite them under a running test.
pub fn private_files(builder: ClusterBuilder) -> ClusterBuilder {
    builder
        .private_mirror(true)
        .cache_dir(repo_root().join("target").join("pgcluster-mirrors"))
}

/// The PostgreSQL major version this test binary runs against.
pub fn wanted_major() -> u32 {
    match std::env::var("PGLEASE_PG_VERSION") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            panic!("PGLEASE_PG_VERSION must be a major version such as 15, got {v:?}")
        }),
        Err(_) => 15,
    }
}

/// The private server of this test binary (started on first use, killed at process exit).
pub struct Server {
    cluster: Cluster,
    major: u32,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The shared server, started on first use with roles and the shared database ready.
pub fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        let major = wanted_major();
        let installation = pgcluster::ensure(major)
            .unwrap_or_else(|e| panic!("PostgreSQL {major} is not available: {e}"));
        // Commit timestamps: independent evidence of commit order for the queue's history checker.
        let mut builder = private_files(ClusterBuilder::new(installation))
            .setting("track_commit_timestamp", "on");
        for ext in pglease::EXTENSIONS {
            let (control, scripts) = extension_files_of(ext.name);
            builder = builder.extension_files(control, scripts);
        }
        let cluster = builder
            .start()
            .unwrap_or_else(|e| panic!("could not start PostgreSQL {major}: {e}"));
        let server = Server { cluster, major };
        server.psql(
            "postgres",
            &format!(
                "CREATE ROLE {ADMIN} LOGIN; CREATE ROLE {APP} LOGIN; \
                 CREATE ROLE {APP_MEMBER} LOGIN IN ROLE {APP}; CREATE ROLE {OTHER_APP} LOGIN;"
            ),
        );
        server.psql(
            "postgres",
            &format!("CREATE DATABASE {SHARED_DB} OWNER {ADMIN}"),
        );
        server.psql_as(SHARED_DB, ADMIN, "CREATE EXTENSION pg_lease;");
        server
    })
}

static QUEUE: OnceLock<()> = OnceLock::new();

impl Server {
    /// The server's major version.
    pub fn major(&self) -> u32 {
        self.major
    }

    /// The underlying cluster (for crash/stop/restart tests).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// A libpq connection string for `db` as `role`.
    pub fn conninfo(&self, db: &str, role: &str) -> String {
        format!("{} user={role}", self.cluster.connection_string(db))
            .replace("user=postgres user=", "user=")
    }

    /// Connects to `db` as `role` on the current tokio runtime.
    pub async fn connect_as(&self, db: &str, role: &str) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.conninfo(db, role), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {db} as {role}: {e}"));
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Connects to `db` as the superuser.
    pub async fn connect_super(&self, db: &str) -> Client {
        self.connect_as(db, "postgres").await
    }

    /// Connects to the shared database as the application role.
    pub async fn app(&self) -> Client {
        self.connect_as(SHARED_DB, APP).await
    }

    /// The shared queue database [`QUEUE_DB`], created on first use; returns its name.
    pub fn queue_db(&self) -> &'static str {
        QUEUE.get_or_init(|| {
            self.psql(
                "postgres",
                &format!("CREATE DATABASE {QUEUE_DB} OWNER {ADMIN}"),
            );
            self.psql_as(QUEUE_DB, ADMIN, "CREATE EXTENSION pg_lease_queue CASCADE;");
        });
        QUEUE_DB
    }

    /// Creates a new database owned by [`ADMIN`] with `CREATE EXTENSION pg_lease_queue CASCADE`
    /// (pg_lease first) run by [`ADMIN`].
    pub fn fresh_db_with_queue(&self, label: &str) -> String {
        let name = self.fresh_db(label);
        self.psql_as(&name, ADMIN, "CREATE EXTENSION pg_lease_queue CASCADE;");
        name
    }

    /// Runs SQL through psql as the superuser; panics with psql's error on failure.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        self.cluster
            .psql(db, sql)
            .unwrap_or_else(|e| panic!("psql in {db} failed: {e}\nSQL: {sql}"))
    }

    /// Runs SQL through psql as `role`.
    pub fn psql_as(&self, db: &str, role: &str, sql: &str) -> String {
        self.psql(db, &format!("SET ROLE {role}; {sql}"))
    }

    /// Creates a new empty database owned by [`ADMIN`] (without the extension) and returns its name.
    pub fn fresh_db(&self, label: &str) -> String {
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let name = format!("{label}_{n}");
        self.psql("postgres", &format!("CREATE DATABASE {name} OWNER {ADMIN}"));
        name
    }

    /// Creates a new database owned by [`ADMIN`] with `CREATE EXTENSION pg_lease` run by [`ADMIN`].
    pub fn fresh_db_with_extension(&self, label: &str) -> String {
        let name = self.fresh_db(label);
        self.psql_as(&name, ADMIN, "CREATE EXTENSION pg_lease;");
        name
    }
}

/// A key unique to one test (and readable in failure output).
pub fn key(test: &str, name: &str) -> String {
    format!("{test}/{name}")
}

/// The SQLSTATE of a failed statement, if the server sent one.
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.code().map(|c| c.code().to_owned())
}

/// A server error, flattened for assertions.
#[derive(Debug, Clone)]
pub struct ServerError {
    /// The SQLSTATE.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The DETAIL line, if any.
    pub detail: Option<String>,
}

/// Runs `sql`, which must fail with a server error; returns that error.
pub async fn expect_error(client: &Client, sql: &str) -> ServerError {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("expected an error from: {sql}"),
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("expected a server error from {sql}, got: {e}"));
            ServerError {
                code: db.code().code().to_owned(),
                message: db.message().to_owned(),
                detail: db.detail().map(str::to_owned),
            }
        }
    }
}

/// The rows of `lease.leases` whose key starts with `prefix`, and the epoch floor, as text: for
/// "nothing changed" checks. Tests share a database, so each snapshots only its own keys.
pub async fn state_of(superuser: &Client, prefix: &str) -> String {
    let rows = superuser
        .query(
            "SELECT format('%s|%s|%s|%s', key, owner, epoch, expires_at) FROM lease.leases \
              WHERE starts_with(key, $1) \
             UNION ALL SELECT format('floor|%s|%s', floor, sentinel) FROM lease.epoch_floor \
             ORDER BY 1",
            &[&prefix],
        )
        .await
        .expect("read lease state");
    rows.iter().map(|r| r.get::<_, String>(0) + "\n").collect()
}

/// The backend pid of a connection.
pub async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid")
        .get(0)
}

/// Waits until the backend `pid` is observed in `wait_event` (e.g. `PgSleep`) or waiting on a
/// heavyweight lock (`wait_event_type = 'Lock'`), as seen from `observer`; panics after `limit`.
/// This observes the server's own state; it never assumes a step is blocked because time passed.
pub async fn await_backend_waiting(observer: &Client, pid: i32, wait: Wait, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !is_backend_waiting(observer, pid, wait).await {
        assert!(
            Instant::now() < deadline,
            "backend {pid} was not seen waiting ({wait:?}) within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the backend `pid` is, at this moment, sleeping in `pg_sleep` ([`Wait::Sleep`]) or
/// waiting for a heavyweight lock ([`Wait::Lock`]), as seen from `observer`.
pub async fn is_backend_waiting(observer: &Client, pid: i32, wait: Wait) -> bool {
    let sql = match wait {
        Wait::Sleep => {
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'"
        }
        Wait::Lock => "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted",
    };
    let n: i64 = observer
        .query_one(sql, &[&pid])
        .await
        .expect("observe pg_stat_activity/pg_locks")
        .get(0);
    n > 0
}

/// What a backend is expected to be waiting on.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// Sleeping in `pg_sleep` (the blocking acquire between polls).
    Sleep,
    /// Waiting for a heavyweight lock (a row lock wait shows up as a transactionid/tuple lock).
    Lock,
}
