//! A private PostgreSQL server per test, with roles `lease_admin` and `app` and pg_lease installed
//! in database `leases`: for tests that stop, crash, freeze or signal the server, which the
//! harness's shared server must never be.
//!
//! The cluster's lifecycle calls block (they wait for processes), so they run in
//! `block_in_place`: every test of this suite uses the multi-threaded runtime.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::poll_fn;
use pgcluster::{Cluster, ClusterBuilder};
use pglease_tests::{ADMIN, APP, extension_files, wanted_major};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Notification};

use crate::LIMIT;

/// The database every node installs pg_lease into.
pub const DB: &str = "leases";

/// A private server with pg_lease installed in [`DB`]; dropped with the test (server killed, files
/// removed).
pub struct Node {
    cluster: Cluster,
}

/// Runs a blocking cluster operation without stalling the runtime's other tasks.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

impl Node {
    /// initdb, start, create the roles and the database, and `CREATE EXTENSION pg_lease` as
    /// [`ADMIN`] (the extension is trusted: no superuser needed).
    pub fn start() -> Node {
        blocking(|| {
            let major = wanted_major();
            let (control, scripts) = extension_files();
            let builder = ClusterBuilder::for_major(major)
                .unwrap_or_else(|e| panic!("PostgreSQL {major} is not available: {e}"));
            let cluster = pglease_tests::private_files(builder)
                .extension_files(control, scripts)
                .setting("shared_buffers", "32MB")
                .start()
                .unwrap_or_else(|e| panic!("could not start PostgreSQL {major}: {e}"));
            let node = Node { cluster };
            node.psql("postgres", &format!("CREATE ROLE {ADMIN} LOGIN"));
            node.psql("postgres", &format!("CREATE ROLE {APP} LOGIN"));
            node.psql("postgres", &format!("CREATE DATABASE {DB} OWNER {ADMIN}"));
            node.psql(DB, &format!("SET ROLE {ADMIN}; CREATE EXTENSION pg_lease"));
            node
        })
    }

    /// The cluster (port, socket directory, signals).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Runs SQL through psql as the superuser.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        self.cluster
            .psql(db, sql)
            .unwrap_or_else(|e| panic!("psql in {db} failed: {e}\nSQL: {sql}"))
    }

    /// Clean (fast) shutdown.
    pub fn stop(&mut self) {
        blocking(|| self.cluster.stop()).expect("stop the server");
    }

    /// SIGKILL of the postmaster and every backend: no shutdown checkpoint, recovery on start.
    pub fn crash(&mut self) {
        blocking(|| self.cluster.crash()).expect("crash the server");
    }

    /// Starts the stopped or crashed server again (running crash recovery if needed).
    pub fn boot(&mut self) {
        blocking(|| self.cluster.start()).expect("start the server again");
    }

    /// Freezes the whole server (SIGSTOP to every process).
    pub fn pause(&self) {
        blocking(|| self.cluster.pause());
    }

    /// Unfreezes a paused server.
    pub fn resume(&self) {
        self.cluster.resume();
    }

    /// Sends `sig` to a process of this server (a backend pid).
    pub fn signal(&self, pid: i32, sig: i32) {
        self.cluster
            .signal_backend(pid, sig)
            .unwrap_or_else(|e| panic!("signal {sig} to backend {pid}: {e}"));
    }

    /// Connects to [`DB`] as `role` over the server's unix socket (re-read on every call: the port
    /// may change across restarts).
    pub async fn try_connect(&self, role: &str) -> Result<Client, tokio_postgres::Error> {
        let mut config = Config::new();
        config
            .host_path(self.cluster.socket_dir())
            .port(self.cluster.port())
            .user(role)
            .dbname(DB);
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Connects as `role` and forwards the session's notifications (LISTEN/NOTIFY) to a channel.
    pub async fn listen(&self, role: &str) -> (Client, UnboundedReceiver<Notification>) {
        let mut config = Config::new();
        config
            .host_path(self.cluster.socket_dir())
            .port(self.cluster.port())
            .user(role)
            .dbname(DB);
        let (client, mut connection) = config
            .connect(NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {DB} as {role}: {e}"));
        let (tx, rx) = unbounded_channel();
        tokio::spawn(async move {
            let mut messages = poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message {
                    let _ = tx.send(n);
                }
            }
        });
        (client, rx)
    }

    /// Connects as `role`; panics on failure.
    pub async fn connect(&self, role: &str) -> Client {
        self.try_connect(role)
            .await
            .unwrap_or_else(|e| panic!("connect to {DB} as {role}: {e}"))
    }

    /// Connects as `role`, retrying while the server is still recovering (after a backend crash the
    /// postmaster reinitialises by itself and refuses connections meanwhile).
    pub async fn connect_when_ready(&self, role: &str) -> Client {
        let deadline = Instant::now() + LIMIT;
        loop {
            match self.try_connect(role).await {
                Ok(c) => return c,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "server did not accept connections within {LIMIT:?}: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A session of the application role.
    pub async fn app(&self) -> Client {
        self.connect(APP).await
    }

    /// A session of the role that installed the extension (may purge, drop and create it).
    pub async fn admin(&self) -> Client {
        self.connect(ADMIN).await
    }

    /// A superuser session (reads the tables, terminates backends).
    pub async fn superuser(&self) -> Client {
        self.connect("postgres").await
    }

    /// Every committed row of the lease tables, as text (exact timestamps included): equal before
    /// and after an event means the event changed nothing.
    pub async fn state(&self) -> String {
        let su = self.superuser().await;
        su.query_one(
            "SELECT coalesce((SELECT string_agg(format('%s|%s|%s|%s|%s', key, owner, epoch, \
                                                       expires_at, waiting), E'\\n' ORDER BY key) \
                                FROM lease.leases), '') \
                    || E'\\nfloor:' || (SELECT string_agg(format('%s/%s', floor, sentinel), ',' \
                                                          ORDER BY floor, sentinel) \
                                          FROM lease.epoch_floor)",
            &[],
        )
        .await
        .expect("read the lease tables")
        .get(0)
    }
}
