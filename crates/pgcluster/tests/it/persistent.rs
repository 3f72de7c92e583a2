//! Persistent clusters: a data directory that outlives its handles, a server started detached and
//! attached to again, and starters that take turns on the directory's lock.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use pgcluster::PersistentCluster;

use crate::common::pid_gone;

/// A private directory for one test (reachable by the server user when we are root), whose
/// server is stopped however the test ends.
struct Dir {
    _tmp: tempfile::TempDir,
    cluster: PersistentCluster,
}

impl Dir {
    fn new() -> Dir {
        let tmp = tempfile::Builder::new()
            .prefix("pgcluster-it-persistent-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cluster = PersistentCluster::new(tmp.path().join("pg"));
        Dir { _tmp: tmp, cluster }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = self.cluster.stop();
    }
}

/// Polls `done` every 10 ms for at most 30 s.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// How many `flock` requests on `path` are blocked, from `/proc/locks` (`N: -> FLOCK ...`).
fn blocked_flocks(path: &Path) -> usize {
    let inode = format!(":{}", std::fs::metadata(path).unwrap().ino());
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| l.contains("->") && l.contains("FLOCK"))
        .filter(|l| l.split_whitespace().any(|w| w.ends_with(&inode)))
        .count()
}

#[tokio::test]
async fn a_detached_server_outlives_its_handle_and_is_attached_again() {
    let dir = Dir::new();
    assert!(dir.cluster.attach().is_none());
    assert!(!dir.cluster.is_created());

    let started = dir.cluster.start(15).unwrap();
    assert!(started.created && started.started, "{started:?}");
    let pid = started.server.pid();
    assert_ne!(
        parent_of(pid),
        Some(std::process::id()),
        "the server is detached, not our child"
    );
    assert_eq!(dir.cluster.major(), Some(15));
    assert_eq!(dir.cluster.version().map(|v| v.major), Some(15));
    let client = started.server.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE TABLE t(v text); INSERT INTO t VALUES ('kept')")
        .await
        .unwrap();
    drop(client);
    drop(started);

    // A fresh handle on the same directory finds the same server.
    let again = PersistentCluster::new(dir.cluster.root());
    let server = again.attach().expect("the server still runs");
    assert_eq!(server.pid(), pid);
    let (by_string, conn) =
        tokio_postgres::connect(&server.connection_string("postgres"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    let v: String = by_string
        .query_one("SELECT v FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, "kept");
    drop(by_string);
    let noop = again.start(15).unwrap();
    assert!(!noop.created && !noop.started, "{noop:?}");
    assert_eq!(noop.server.pid(), pid);

    assert!(again.stop().unwrap(), "it was running");
    assert!(again.attach().is_none());
    wait_until("the postmaster to exit", || pid_gone(pid as i32));
    assert!(
        !again.stop().unwrap(),
        "stopping a stopped server is a no-op"
    );

    // The data directory persists: the next start runs it again with its data.
    let restarted = again.start(15).unwrap();
    assert!(!restarted.created && restarted.started, "{restarted:?}");
    let client = restarted.server.connect("postgres").await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[test]
fn concurrent_starters_take_turns_on_the_lock() {
    let dir = Dir::new();
    let lock = dir.cluster.lock().unwrap();
    let lock_file = dir.cluster.root().join("lock");
    let starters: Vec<_> = (0..2)
        .map(|_| {
            let cluster = dir.cluster.clone();
            std::thread::spawn(move || cluster.start(15).unwrap())
        })
        .collect();
    wait_until("both starters to block on the lock", || {
        blocked_flocks(&lock_file) == 2
    });
    assert!(!dir.cluster.is_created(), "no starter got past the lock");

    let first = lock.start(15).unwrap();
    assert!(first.created && first.started, "{first:?}");
    drop(lock);
    for starter in starters {
        let later = starter.join().unwrap();
        assert!(!later.created && !later.started, "{later:?}");
        assert_eq!(later.server.pid(), first.server.pid());
    }
    assert_eq!(blocked_flocks(&lock_file), 0);
}

#[test]
fn stopping_a_directory_never_created_creates_nothing() {
    let dir = Dir::new();
    assert!(!dir.cluster.stop().unwrap());
    assert!(!dir.cluster.root().exists());
}

/// Environment variable that turns [`persistent_starter_child`] into a real helper process: the
/// directory to start a persistent cluster in.
const STARTER_CHILD_ENV: &str = "PGCLUSTER_TEST_PERSISTENT_DIR";

/// Helper run in a child process by [`a_detached_server_outlives_the_process_that_started_it`]:
/// starts the persistent cluster, reports its pid on stdout, and returns, so the process exits
/// normally (running pgcluster's exit-time clean-up).
#[test]
#[ignore = "helper process for a_detached_server_outlives_the_process_that_started_it"]
fn persistent_starter_child() {
    let Some(dir) = std::env::var_os(STARTER_CHILD_ENV) else {
        return;
    };
    let started = PersistentCluster::new(dir).start(15).unwrap();
    println!("STARTED {}", started.server.pid());
}

#[tokio::test]
async fn a_detached_server_outlives_the_process_that_started_it() {
    let dir = Dir::new();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "persistent::persistent_starter_child",
            "--ignored",
            "--nocapture",
        ])
        .env(STARTER_CHILD_ENV, dir.cluster.root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "the helper failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("STARTED "))
        .expect("the helper reports its server")
        .trim()
        .parse()
        .unwrap();

    let server = dir
        .cluster
        .attach()
        .expect("the server outlives its starter");
    assert_eq!(server.pid(), pid);
    let client = server.connect("postgres").await.unwrap();
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    drop(client);
    assert!(dir.cluster.stop().unwrap());
    wait_until("the postmaster to exit", || pid_gone(pid as i32));
}

/// The PostgreSQL major version of the tests below: `PGLEASE_PG_VERSION`, else 15.
fn major() -> u32 {
    std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15)
}

/// Connects to `server`'s socket as `postgres` with `password` (none: no password).
async fn connect_with(
    server: &pgcluster::DetachedServer,
    password: Option<&str>,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(server.socket_dir())
        .port(server.port())
        .user("postgres")
        .dbname("postgres");
    if let Some(password) = password {
        config.password(password);
    }
    let (client, conn) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn only_the_creator_can_connect_with_the_generated_password() {
    let dir = Dir::new();
    let started = dir.cluster.start(major()).unwrap();
    let password = dir.cluster.password().expect("a password once created");
    assert_eq!(mode(&dir.cluster.password_path()), 0o600);
    assert_eq!(mode(&dir.cluster.socket_dir()), 0o700);
    if unsafe { libc::geteuid() } == 0 {
        // The server's account owns the socket directory; the creator (root) keeps the password.
        let server_uid = std::fs::metadata(dir.cluster.data_dir()).unwrap().uid();
        assert_eq!(
            std::fs::metadata(dir.cluster.socket_dir()).unwrap().uid(),
            server_uid
        );
        assert_eq!(
            std::fs::metadata(dir.cluster.password_path())
                .unwrap()
                .uid(),
            0
        );
    }
    let server = &started.server;
    assert_eq!(server.password(), Some(password.as_str()));
    let client = server.connect("postgres").await.unwrap();
    let listen: String = client
        .query_one("SHOW listen_addresses", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(listen, "", "no TCP listener");
    let err = connect_with(server, None).await.expect_err("refused");
    // The server asked for a password (tokio-postgres: "invalid configuration: password missing").
    assert!(format!("{err:?}").contains("password"), "{err:?}");
    let err = connect_with(server, Some("guess"))
        .await
        .expect_err("refused");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD),
        "{err}"
    );
}

/// Makes `dir` look like one created by an older version: trust authentication, no password.
fn make_trusting(dir: &Dir) {
    std::fs::remove_file(dir.cluster.password_path()).unwrap();
    std::fs::write(
        dir.cluster.data_dir().join("pg_hba.conf"),
        "local all all trust\n",
    )
    .unwrap();
}

#[tokio::test]
async fn a_trusting_directory_of_an_older_version_is_converted_on_start() {
    let dir = Dir::new();
    dir.cluster.start(major()).unwrap();
    assert!(dir.cluster.stop().unwrap());

    // Stopped: converted before it starts.
    make_trusting(&dir);
    let started = dir.cluster.start(major()).unwrap();
    assert!(started.started);
    let password = dir.cluster.password().expect("a new password");
    assert!(connect_with(&started.server, None).await.is_err());
    connect_with(&started.server, Some(&password))
        .await
        .unwrap();

    // Running with trust: restarted converted.
    make_trusting(&dir);
    let client = started.server.connect("postgres").await;
    drop(client);
    let admin = connect_with(&started.server, Some(&password))
        .await
        .unwrap();
    admin.simple_query("SELECT pg_reload_conf()").await.unwrap();
    drop(admin);
    let old_pid = started.server.pid();
    let again = dir.cluster.start(major()).unwrap();
    assert!(again.started, "{again:?}");
    assert_ne!(again.server.pid(), old_pid);
    let password = dir.cluster.password().expect("a new password");
    assert!(connect_with(&again.server, None).await.is_err());
    connect_with(&again.server, Some(&password)).await.unwrap();
}

#[test]
fn a_start_after_the_postmaster_was_killed_recovers_the_server() {
    let dir = Dir::new();
    let first = dir.cluster.start(15).unwrap().server;
    let pid = first.pid() as i32;
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_until("the postmaster to die", || pid_gone(pid));
    // Its lock files stay behind (and the pid may stay a zombie nobody reaps).
    assert!(dir.cluster.data_dir().join("postmaster.pid").exists());
    let again = dir.cluster.start(15).unwrap();
    assert!(again.started && again.server.pid() != first.pid());
}

#[test]
fn a_stale_lock_file_is_kept_while_its_shared_memory_is_attached() {
    let dir = Dir::new();
    dir.cluster.start(15).unwrap();
    dir.cluster.stop().unwrap();
    // A postmaster.pid naming a dead pid, with a segment this test keeps attached: what orphaned
    // backends of a crashed server look like. PostgreSQL must not start beside them.
    // SAFETY: plain System V calls with valid arguments; the segment is removed below.
    let shmid = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
    assert!(shmid >= 0, "shmget: {}", std::io::Error::last_os_error());
    // SAFETY: attaching the segment just made.
    let addr = unsafe { libc::shmat(shmid, std::ptr::null(), 0) };
    assert_ne!(addr as isize, -1);
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let pid_file = dir.cluster.data_dir().join("postmaster.pid");
    let data = dir.cluster.data_dir();
    std::fs::write(
        &pid_file,
        format!(
            "{dead_pid}\n{}\n1\n5432\n{}\n\n  1234 {shmid}\nready\n",
            data.display(),
            dir.cluster.socket_dir().display()
        ),
    )
    .unwrap();
    let err = dir
        .cluster
        .start(15)
        .expect_err("orphaned backends still attached");
    // SAFETY: detaching and removing the segment made above.
    unsafe {
        libc::shmdt(addr);
        libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut());
    }
    assert!(
        matches!(&err, pgcluster::Error::Start { message, .. } if message.contains("still attached")),
        "{err}"
    );
    assert!(
        pid_file.exists(),
        "the lock file must stay while its memory is attached"
    );
    // Once nothing is attached, it is stale: the next start goes ahead.
    dir.cluster.start(15).unwrap();
}
