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
use tokio_postgres::error::DbError;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Notification};

use crate::LIMIT;

/// Debian's libfaketime (package `libfaketime`), preloaded to skew one server's clock.
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

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
        Node::start_with(None)
    }

    /// As [`start`](Self::start), but installs release `version` of pg_lease (`CREATE EXTENSION
    /// pg_lease VERSION '...'`, from the same extension files): to show that a scenario fails on a
    /// release older than the fix it checks.
    pub fn start_at_version(version: &str) -> Node {
        Node::start_with(Some(version))
    }

    fn start_with(version: Option<&str>) -> Node {
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
            let version = version
                .map(|v| format!(" VERSION '{v}'"))
                .unwrap_or_default();
            node.psql(
                DB,
                &format!("SET ROLE {ADMIN}; CREATE EXTENSION pg_lease{version}"),
            );
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

    /// A streaming standby of this node (`pg_basebackup`: the same roles, database, extension
    /// and leases), streaming asynchronously or, if `synchronous`, as the node's synchronous
    /// standby (commits on this node then wait for it). Returns once it streams.
    pub fn replica(&self, synchronous: bool) -> Node {
        let cluster = blocking(|| self.cluster.replica().synchronous(synchronous).start())
            .unwrap_or_else(|e| panic!("could not start a standby: {e}"));
        Node { cluster }
    }

    /// Restarts this server on a clock `offset` from the machine's (libfaketime's `FAKETIME`
    /// syntax, e.g. `+20s`), through `LD_PRELOAD` of Debian's libfaketime (installed by the test
    /// command). A standby keeps streaming after the restart.
    pub fn skew_clock(&mut self, offset: &str) {
        let lib = FAKETIME_LIB;
        assert!(
            std::path::Path::new(lib).exists(),
            "{lib} is missing: install Debian's libfaketime (scripts/test.sh does)"
        );
        self.cluster.set_server_env("LD_PRELOAD", lib);
        self.cluster.set_server_env("FAKETIME", offset);
        blocking(|| self.cluster.restart()).expect("restart on a skewed clock");
    }

    /// The hard crash of the whole node: every process frozen, then SIGKILLed (no walsender sends
    /// another byte once the first process died).
    pub fn kill_all(&mut self) {
        blocking(|| self.cluster.kill_all()).expect("kill the whole server");
    }

    /// Promotes this standby and waits until it accepts writes; returns its new timeline.
    pub fn promote(&self) -> u32 {
        blocking(|| self.cluster.promote()).expect("promote the standby");
        self.timeline()
    }

    /// The server's current WAL timeline (1 until its first promotion).
    pub fn timeline(&self) -> u32 {
        blocking(|| self.cluster.timeline()).expect("read the timeline")
    }

    /// Waits until this standby has replayed everything `primary` has written so far.
    pub fn wait_for_replay(&self, primary: &Node) {
        blocking(|| self.cluster.wait_for_replay(&primary.cluster, LIMIT))
            .expect("the standby to replay the primary's WAL");
    }

    /// Cuts this standby off from `primary`: an empty `primary_conninfo` (`ALTER SYSTEM`, reload)
    /// stops its WAL receiver, and the primary's walsender for it exits. Returns once the standby
    /// has no WAL receiver and the primary no longer lists it in `pg_stat_replication`: from then
    /// on nothing the primary writes reaches the standby (unlike a paused standby, whose socket
    /// still buffers what the walsender sends), and a synchronous primary's commits wait.
    pub async fn stop_streaming(&self, primary: &Node) {
        let name = self
            .cluster
            .application_name()
            .expect("a standby has an application name")
            .to_owned();
        let standby = self.superuser().await;
        // Two statements: ALTER SYSTEM cannot run in the implicit transaction of a batch.
        for sql in [
            "ALTER SYSTEM SET primary_conninfo = ''",
            "SELECT pg_reload_conf()",
        ] {
            standby
                .batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql} on the standby: {e}"));
        }
        let primary = primary.superuser().await;
        let deadline = Instant::now() + LIMIT;
        loop {
            let receivers: i64 = standby
                .query_one("SELECT count(*) FROM pg_stat_wal_receiver", &[])
                .await
                .expect("read pg_stat_wal_receiver")
                .get(0);
            let senders: i64 = primary
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1",
                    &[&name],
                )
                .await
                .expect("read pg_stat_replication")
                .get(0);
            if receivers == 0 && senders == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "standby {name} still streams after {LIMIT:?} \
                 ({receivers} WAL receiver, {senders} walsender)"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Connects as `role` and forwards the notices the server sends the session (warnings
    /// included) to a channel.
    pub async fn connect_noticing(&self, role: &str) -> (Client, UnboundedReceiver<DbError>) {
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
                if let AsyncMessage::Notice(n) = message {
                    let _ = tx.send(n);
                }
            }
        });
        (client, rx)
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
