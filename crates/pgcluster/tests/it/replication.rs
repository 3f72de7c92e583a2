//! Streaming standbys: replay, synchronous commit, promotion after the primary's hard crash.
//!
//! Server version: `PGLEASE_PG_VERSION` (default 15). Servers run from a private mirror in this
//! checkout's `target/`, as the suites that install extensions do.

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use pgcluster::{Cluster, ClusterBuilder, Error};

use crate::common::pid_gone;

/// How long any one wait of these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// The PostgreSQL major version under test: `PGLEASE_PG_VERSION`, else 15.
fn major() -> u32 {
    std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15)
}

/// Starts a primary on the version under test.
fn start_primary() -> Cluster {
    let mirrors = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pgcluster-mirrors");
    ClusterBuilder::for_major(major())
        .and_then(|b| b.private_mirror(true).cache_dir(mirrors).start())
        .unwrap_or_else(|e| panic!("could not start PostgreSQL {}: {e}", major()))
}

/// Polls `check` every 10 ms until it is true; panics after [`WAIT`].
async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_standby_replays_a_write_and_refuses_its_own() {
    let primary = start_primary();
    let standby = primary
        .replica()
        .application_name("replay_probe")
        .start()
        .unwrap();
    assert_eq!(standby.application_name(), Some("replay_probe"));
    assert_ne!(standby.port(), primary.port());
    assert_ne!(standby.data_dir(), primary.data_dir());
    assert!(standby.is_in_recovery().unwrap());
    assert!(!primary.is_in_recovery().unwrap());
    assert_eq!(primary.timeline().unwrap(), 1);
    assert_eq!(standby.timeline().unwrap(), 1);

    let client = primary.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE TABLE t(v int); INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap();
    standby.wait_for_replay(&primary, WAIT).unwrap();
    let reader = standby.connect("postgres").await.unwrap();
    let sum: i64 = reader
        .query_one("SELECT sum(v) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sum, 3);
    let refused = reader.batch_execute("INSERT INTO t VALUES (3)").await;
    assert_eq!(
        refused.unwrap_err().code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    // Not a standby: nothing to replay, nothing to promote.
    assert!(matches!(
        primary.wait_for_replay(&primary, WAIT),
        Err(Error::Replication { .. })
    ));
    assert!(matches!(primary.promote(), Err(Error::Replication { .. })));
}

#[tokio::test]
async fn a_synchronous_commit_waits_while_the_standby_is_paused() {
    let primary = start_primary();
    let standby = primary
        .replica()
        .synchronous(true)
        .application_name("sync_probe")
        .start()
        .unwrap();
    assert_eq!(
        primary
            .psql("postgres", "SHOW synchronous_standby_names")
            .unwrap()
            .trim(),
        "\"sync_probe\""
    );
    let control = primary.connect("postgres").await.unwrap();
    control
        .batch_execute("CREATE TABLE t(v int)")
        .await
        .unwrap();
    let writer = primary.connect("postgres").await.unwrap();
    let pid: i32 = writer
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);

    standby.pause();
    let insert = tokio::spawn(async move {
        writer.batch_execute("INSERT INTO t VALUES (1)").await?;
        Ok::<_, tokio_postgres::Error>(writer)
    });
    wait_for("the commit to wait for the standby (SyncRep)", || async {
        control
            .query_one(
                "SELECT coalesce(wait_event = 'SyncRep', false) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0)
    })
    .await;
    assert!(
        !insert.is_finished(),
        "the commit returned while the standby was paused"
    );
    // Committed locally, yet not visible before the standby confirms it.
    let visible: i64 = control
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 0);

    standby.resume();
    tokio::time::timeout(WAIT, insert)
        .await
        .expect("the commit returns once the standby runs again")
        .unwrap()
        .unwrap();
    let visible: i64 = control
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 1);
}

#[tokio::test]
async fn promotion_after_kill_all_moves_to_timeline_2_and_accepts_writes() {
    let mut primary = start_primary();
    let standby = primary.replica().synchronous(true).start().unwrap();
    let client = primary.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE TABLE t(v int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    standby.wait_for_replay(&primary, WAIT).unwrap();
    assert_eq!(standby.timeline().unwrap(), 1);

    primary.kill_all().unwrap();
    assert!(!primary.is_running());
    standby.promote().unwrap();
    assert!(!standby.is_in_recovery().unwrap());
    assert_eq!(standby.timeline().unwrap(), 2);

    // The promoted standby waits for no standby of its own.
    let promoted = standby.connect("postgres").await.unwrap();
    tokio::time::timeout(WAIT, promoted.batch_execute("INSERT INTO t VALUES (2)"))
        .await
        .expect("a write on the promoted standby returns")
        .unwrap();
    let sum: i64 = promoted
        .query_one("SELECT sum(v) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sum, 3);
    assert!(matches!(standby.promote(), Err(Error::Replication { .. })));
}

#[tokio::test]
async fn kill_all_leaves_no_process_of_the_server() {
    let mut primary = start_primary();
    let standby = primary.replica().start().unwrap();
    let client = primary.connect("postgres").await.unwrap();
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let walsender: i32 = client
        .query_one(
            "SELECT pid FROM pg_stat_replication WHERE application_name = $1",
            &[&standby.application_name().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    let pids = primary.processes();
    let postmaster = primary.postmaster_pid().unwrap();
    assert_eq!(pids[0], postmaster);
    for pid in [backend, walsender] {
        assert!(pids.contains(&(pid as u32)), "{pid} not among {pids:?}");
    }

    primary.kill_all().unwrap();
    assert!(!primary.is_running());
    assert!(primary.processes().is_empty());
    let alive: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|&p| !pid_gone(p as i32))
        .collect();
    assert!(
        alive.is_empty(),
        "processes of the killed server alive: {alive:?}"
    );
    assert!(client.simple_query("SELECT 1").await.is_err());
    primary.kill_all().unwrap(); // a no-op when not running

    primary.start().unwrap();
    assert!(primary.log().contains("not properly shut down"));
}

#[test]
fn replication_connections_are_only_for_postgres_on_the_socket() {
    let primary = start_primary();
    primary
        .psql("postgres", "CREATE ROLE repl_probe LOGIN REPLICATION")
        .unwrap();
    let socket = primary.socket_dir().display().to_string();
    let port = primary.port().to_string();
    let identify = |conninfo: String, password: Option<&str>| {
        let mut cmd = Command::new(primary.installation().bin("psql"));
        cmd.args(["-X", "-A", "-t", "-c", "IDENTIFY_SYSTEM", &conninfo]);
        for (k, _) in std::env::vars() {
            if k.starts_with("PG") && !k.starts_with("PGCLUSTER_") {
                cmd.env_remove(k);
            }
        }
        if let Some(password) = password {
            cmd.env("PGPASSWORD", password);
        }
        cmd.output().unwrap()
    };
    let owner = identify(
        format!("host={socket} port={port} user=postgres replication=true"),
        None,
    );
    assert!(
        owner.status.success(),
        "{}",
        String::from_utf8_lossy(&owner.stderr)
    );

    let other = identify(
        format!("host={socket} port={port} user=repl_probe replication=true"),
        None,
    );
    let tcp = identify(
        format!("host=127.0.0.1 port={port} user=postgres replication=true"),
        Some(primary.password()),
    );
    for refused in [other, tcp] {
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("no pg_hba.conf entry for replication connection"),
            "{stderr}"
        );
    }
}
