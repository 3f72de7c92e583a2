//! A throw-away Patroni cluster for one test: one etcd member and two Patroni nodes, each running
//! a PostgreSQL server, all on this machine.
//!
//! - **Where**: a fresh directory `$TMPDIR/pglease-ha-*` (mode 0755, so the server account can reach
//!   its parts), with `etcd/` and `node1/`, `node2/` inside (mode 0700, owned by the server account).
//!   A node's directory holds its Patroni configuration (0600: it holds passwords), its data
//!   directory, its unix socket directory `s/`, its `pgpass`, PostgreSQL's log `pglog/postgresql.log`
//!   and Patroni's own output `patroni.log`.
//! - **Who**: as root, etcd, Patroni and PostgreSQL run as pgcluster's server account (`nobody`, or
//!   `PGCLUSTER_USER`); otherwise as us.
//! - **Network**: loopback only, every port a free one of 127.0.0.1: etcd's client and peer URLs,
//!   each node's REST API and PostgreSQL port.
//! - **Who may connect**: etcd requires its root user and a generated password (auth enabled before
//!   Patroni starts); Patroni's REST API requires a generated password for anything but reads;
//!   PostgreSQL admits over TCP only [`OWNER`] (to [`DB`]) and the replication role, each with its
//!   generated password (scram-sha-256). Its unix socket, in a directory only the server account
//!   can enter, trusts every role: Patroni and the test's superuser sessions use it.
//! - **Clean-up**: dropping the cluster (also while a test panics) SIGKILLs every process of every
//!   node and etcd, then removes the directory (kept, with its path printed, if `PGLEASE_HA_KEEP`
//!   is set). A panicking test first prints the tail of every log. Directories left by a test
//!   binary that was itself killed are swept at the next start (their processes killed).
//!
//! Patroni's timing: `ttl` 20 s (the least Patroni 4.1 accepts: it raises a smaller one to 20),
//! `loop_wait` 1 s, `retry_timeout` 5 s. A leader that dies unannounced keeps the leader key until
//! its etcd lease expires, at most `ttl` after its last refresh; the replica takes over within a
//! `loop_wait` after that.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgcluster::{Installation, ServerUser, Source};
use tokio_postgres::{Client, Config, NoTls};

use crate::{LIMIT, procs, rest};

/// The role that owns [`DB`] and pg_lease in it (installed with `pglease::install`), the only
/// role admitted to [`DB`] over TCP.
pub const OWNER: &str = "lease_owner";
/// The database pg_lease is installed in.
pub const DB: &str = "leases";
/// Patroni's replication role.
const REPLICATOR: &str = "replicator";
/// The Patroni cluster name (`scope`).
const SCOPE: &str = "pglease-ha";
/// Name prefix of every cluster directory (for the sweep).
const DIR_PREFIX: &str = "pglease-ha-";

/// How the cluster replicates.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Patroni's `synchronous_mode`: the leader names the replica its synchronous standby, so a
    /// commit on the leader returns only once the replica has it.
    pub synchronous: bool,
}

/// The etcd and Patroni executables, from the HA section of the test command.
struct Tools {
    etcd: PathBuf,
    patroni: PathBuf,
}

fn tools() -> Tools {
    let get = |var: &str| {
        let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
            panic!(
                "{var} is not set: the HA tests need etcd and Patroni, which scripts/ha-test.sh \
                 installs and passes in (run scripts/ha-test.sh, or scripts/test.sh --ha-only)"
            )
        });
        assert!(path.is_file(), "{var}={} does not exist", path.display());
        path
    };
    Tools {
        etcd: get("PGLEASE_HA_ETCD"),
        patroni: get("PGLEASE_HA_PATRONI"),
    }
}

/// The PostgreSQL major version the cluster runs: `PGLEASE_HA_PG_VERSION`, default 15.
pub fn major() -> u32 {
    std::env::var("PGLEASE_HA_PG_VERSION")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("PGLEASE_HA_PG_VERSION={v:?} is not a major version"))
        })
        .unwrap_or(15)
}

/// One Patroni node: Patroni, and the PostgreSQL server it runs.
pub struct Node {
    /// The Patroni member name (`node1`, …), also the standby's `application_name`.
    pub name: String,
    dir: PathBuf,
    /// Patroni's REST API port on 127.0.0.1.
    pub rest_port: u16,
    /// PostgreSQL's port on 127.0.0.1 (and of its unix socket).
    pub pg_port: u16,
    patroni: Option<Child>,
}

impl Node {
    /// The directory of the node's unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("s")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("patroni.yml")
    }

    fn patroni_log(&self) -> PathBuf {
        self.dir.join("patroni.log")
    }

    fn pg_log(&self) -> PathBuf {
        self.dir.join("pglog").join("postgresql.log")
    }

    /// The status code of `GET path` on the node's REST API (`None`: nothing answered).
    pub fn rest(&self, path: &str) -> Option<u16> {
        rest::status(self.rest_port, path)
    }

    /// Whether Patroni says this node is the leader running as primary (`GET /primary` is 200).
    pub fn is_primary(&self) -> bool {
        self.rest("/primary") == Some(200)
    }

    /// The postmaster's pid, from `postmaster.pid`, if it runs.
    pub fn postmaster_pid(&self) -> Option<i32> {
        postmaster_of(&self.data_dir())
    }

    /// Patroni's pid while it runs.
    fn patroni_pid(&mut self) -> Option<i32> {
        let child = self.patroni.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id() as i32)
    }

    /// A superuser session on [`DB`] (or `db`) over the node's unix socket.
    pub async fn try_superuser(&self, db: &str) -> Result<Client, tokio_postgres::Error> {
        let mut config = Config::new();
        config
            .host_path(self.socket_dir())
            .port(self.pg_port)
            .user("postgres")
            .dbname(db)
            .connect_timeout(Duration::from_secs(2));
        connect(config).await
    }

    /// As [`try_superuser`](Self::try_superuser), panicking on failure.
    pub async fn superuser(&self, db: &str) -> Client {
        self.try_superuser(db)
            .await
            .unwrap_or_else(|e| panic!("superuser session on {}: {e}", self.name))
    }
}

/// Connects with `config` and drives the connection on the runtime.
pub async fn connect(config: Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The pid in `<data>/postmaster.pid`, if that process is alive and is a postgres.
fn postmaster_of(data: &Path) -> Option<i32> {
    let text = fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    (procs::is_alive(pid) && procs::cmdline(pid).contains("postgres")).then_some(pid)
}

/// etcd, Patroni nodes, and the secrets they were set up with.
pub struct HaCluster {
    base: PathBuf,
    keep: bool,
    etcd: Option<Child>,
    etcd_port: u16,
    /// The nodes, in start order: `nodes[0]` bootstrapped the cluster.
    pub nodes: Vec<Node>,
    owner_password: String,
}

impl HaCluster {
    /// Starts etcd, then `node1` (which bootstraps the cluster and becomes the leader), creates
    /// [`OWNER`] and [`DB`] on it, then starts `node2` (a replica cloned with `pg_basebackup`), and
    /// returns once the replica streams — and, with `synchronous`, once Patroni has made it the
    /// synchronous standby (in etcd and in `synchronous_standby_names`).
    pub async fn start(options: Options) -> HaCluster {
        let tools = tools();
        let installation = tokio::task::block_in_place(|| pgcluster::ensure(major()))
            .unwrap_or_else(|e| panic!("PostgreSQL {} is not available: {e}", major()));
        let user = pgcluster::server_user().expect("the server account");
        tokio::task::block_in_place(sweep_stale);

        let tmp = std::env::temp_dir();
        let base = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(&tmp)
            .expect("a cluster directory")
            .keep();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).expect("chmod");
        fs::write(base.join("owner.pid"), std::process::id().to_string()).expect("owner.pid");
        let keep = std::env::var_os("PGLEASE_HA_KEEP").is_some_and(|v| !v.is_empty() && v != "0");

        let mut cluster = HaCluster {
            base,
            keep,
            etcd: None,
            etcd_port: 0,
            nodes: Vec::new(),
            owner_password: secret(),
        };
        let etcd_password = secret();
        tokio::task::block_in_place(|| {
            cluster.start_etcd(&tools.etcd, user.as_ref(), &etcd_password)
        });
        let secrets = Secrets {
            etcd: etcd_password,
            superuser: secret(),
            replicator: secret(),
            rest: secret(),
        };
        for i in 1..=2 {
            let node = tokio::task::block_in_place(|| {
                cluster.start_node(i, &tools, &installation, user.as_ref(), &secrets, options)
            });
            cluster.nodes.push(node);
            if i == 1 {
                cluster.await_leader(0).await;
                cluster.create_owner().await;
            }
        }
        cluster.await_replica(0, 1, options.synchronous).await;
        cluster
    }

    /// A node.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// A libpq connection string for [`OWNER`] on [`DB`] over TCP listing every node
    /// (`host=127.0.0.1,127.0.0.1 port=P1,P2`), with `target_session_attrs=read-write`: a
    /// connection goes to whichever node accepts writes.
    pub fn conninfo(&self) -> String {
        let hosts: Vec<&str> = self.nodes.iter().map(|_| "127.0.0.1").collect();
        let ports: Vec<String> = self.nodes.iter().map(|n| n.pg_port.to_string()).collect();
        format!(
            "host={} port={} user={OWNER} password={} dbname={DB} \
             target_session_attrs=read-write connect_timeout=2",
            hosts.join(","),
            ports.join(","),
            self.owner_password
        )
    }

    /// A connection string for [`OWNER`] on [`DB`] of node `i` alone (any role: a standby too).
    pub fn conninfo_of(&self, i: usize) -> String {
        format!(
            "host=127.0.0.1 port={} user={OWNER} password={} dbname={DB} connect_timeout=2",
            self.nodes[i].pg_port, self.owner_password
        )
    }

    /// A session of [`OWNER`] on [`DB`] of node `i` over TCP.
    pub async fn owner_session(&self, i: usize) -> Client {
        let config: Config = self.conninfo_of(i).parse().expect("a valid conninfo");
        connect(config)
            .await
            .unwrap_or_else(|e| panic!("{OWNER} session on {}: {e}", self.nodes[i].name))
    }

    /// The hard crash of node `i`: Patroni, the postmaster and every process either started,
    /// frozen (SIGSTOP) and then SIGKILLed, as a machine that loses power. Returns the instant the
    /// last SIGKILL was sent; returns once every one of them is gone.
    pub fn kill_node(&mut self, i: usize) -> Instant {
        let node = &mut self.nodes[i];
        let roots: Vec<i32> = node
            .patroni_pid()
            .into_iter()
            .chain(node.postmaster_pid())
            .collect();
        assert!(!roots.is_empty(), "{} runs no process", node.name);
        let killed = procs::freeze_and_kill(&roots);
        let at = Instant::now();
        if let Some(mut child) = node.patroni.take() {
            let _ = child.wait();
        }
        assert!(
            procs::wait_gone(&killed, LIMIT),
            "processes of {} still alive {LIMIT:?} after SIGKILL",
            node.name
        );
        at
    }

    /// Waits (at most 90 s) until Patroni reports node `i` as the leader running as primary
    /// (`GET /primary` is 200) and its server accepts writes (`pg_is_in_recovery()` is false and
    /// it can assign a transaction id). Returns when each was first seen, in that order.
    pub async fn await_leader(&self, i: usize) -> (Instant, Instant) {
        let node = &self.nodes[i];
        let deadline = Instant::now() + Duration::from_secs(90);
        let (mut primary, mut writable) = (None, None);
        let mut session: Option<Client> = None;
        loop {
            if primary.is_none() && tokio::task::block_in_place(|| node.is_primary()) {
                primary = Some(Instant::now());
            }
            if writable.is_none() {
                if session.as_ref().is_none_or(Client::is_closed) {
                    session = node.try_superuser("postgres").await.ok();
                }
                if let Some(s) = &session
                    && let Ok(row) = s
                        .query_one("SELECT NOT pg_is_in_recovery() AND txid_current() > 0", &[])
                        .await
                    && row.get::<_, bool>(0)
                {
                    writable = Some(Instant::now());
                }
            }
            if let (Some(p), Some(w)) = (primary, writable) {
                return (p, w);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not become a writable leader within 90 s (Patroni primary: {}, \
                 writable: {})",
                node.name,
                primary.is_some(),
                writable.is_some()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The WAL timeline node `i`'s server is on (a primary's; 1 until the first promotion).
    pub async fn timeline(&self, i: usize) -> u32 {
        let s = self.nodes[i].superuser("postgres").await;
        let tl: i64 = s
            .query_one(
                "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint",
                &[],
            )
            .await
            .expect("read the timeline")
            .get(0);
        u32::try_from(tl).expect("a timeline fits u32")
    }

    /// Waits until node `replica` has replayed everything node `primary` has written so far.
    pub async fn await_replay(&self, primary: usize, replica: usize) {
        let p = self.nodes[primary].superuser("postgres").await;
        let lsn: String = p
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .expect("pg_current_wal_lsn")
            .get(0);
        let r = self.nodes[replica].superuser("postgres").await;
        poll(
            &format!("{} to replay up to {lsn}", self.nodes[replica].name),
            || async {
                r.query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )
                .await
                .expect("pg_last_wal_replay_lsn")
                .get::<_, bool>(0)
            },
        )
        .await;
    }

    /// The pid of the walsender that streams to node `replica` from node `primary`.
    pub async fn walsender_pid(&self, primary: usize, replica: usize) -> i32 {
        let p = self.nodes[primary].superuser("postgres").await;
        p.query_one(
            "SELECT pid FROM pg_stat_replication WHERE application_name = $1",
            &[&self.nodes[replica].name],
        )
        .await
        .unwrap_or_else(|e| panic!("no walsender for {}: {e}", self.nodes[replica].name))
        .get(0)
    }

    /// Waits until node `replica` streams from node `primary`, as PostgreSQL and Patroni see it
    /// (`GET /replica` is 200); with `synchronous`, until the primary's `pg_stat_replication`
    /// says `sync` for it and Patroni lists it as the synchronous standby (`GET /sync` is 200:
    /// only such a node may be promoted in synchronous mode).
    async fn await_replica(&self, primary: usize, replica: usize, synchronous: bool) {
        let name = self.nodes[replica].name.clone();
        let p = self.nodes[primary].superuser("postgres").await;
        let wanted = if synchronous { "sync" } else { "async" };
        let node = &self.nodes[replica];
        poll_for(
            &format!("{name} to stream ({wanted})"),
            Duration::from_secs(120),
            || async {
                let streams = p
                    .query_opt(
                        "SELECT 1 FROM pg_stat_replication \
                          WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2",
                        &[&name, &wanted],
                    )
                    .await
                    .expect("read pg_stat_replication")
                    .is_some();
                streams
                    && tokio::task::block_in_place(|| {
                        node.rest("/replica") == Some(200)
                            && (!synchronous || node.rest("/sync") == Some(200))
                    })
            },
        )
        .await;
    }

    /// Creates [`OWNER`] (LOGIN, its generated password) and [`DB`], owned by it, on node 1.
    async fn create_owner(&self) {
        let s = self.nodes[0].superuser("postgres").await;
        s.batch_execute(&format!(
            "CREATE ROLE {OWNER} LOGIN PASSWORD '{}'",
            self.owner_password
        ))
        .await
        .expect("create the owner role");
        s.batch_execute(&format!("CREATE DATABASE {DB} OWNER {OWNER}"))
            .await
            .expect("create the database");
    }

    /// Starts etcd on two free loopback ports, waits until it is healthy, and turns
    /// authentication on (user `root`, `password`).
    fn start_etcd(&mut self, etcd: &Path, user: Option<&ServerUser>, password: &str) {
        let dir = self.base.join("etcd");
        private_dir(&dir, user);
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = log_file(&self.base.join("etcd.log"));
        let mut cmd = Command::new(etcd);
        cmd.args(["--name", "etcd1", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .arg("--initial-cluster")
            .arg(format!("etcd1={peer_url}"))
            .args(["--initial-cluster-state", "new"]);
        let child = spawn(cmd, user, &dir, log);
        fs::write(self.base.join("etcd.pid"), child.id().to_string()).expect("etcd.pid");
        self.etcd = Some(child);
        self.etcd_port = client;
        let deadline = Instant::now() + LIMIT;
        while !rest::get(client, "/health").is_some_and(|(c, b)| c == 200 && b.contains("true")) {
            if let Some(status) = self.etcd.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "etcd exited ({status}):\n{}",
                    tail(&self.base.join("etcd.log"), 30)
                );
            }
            assert!(
                Instant::now() < deadline,
                "etcd not healthy within {LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        for (path, body) in [
            ("/v3/auth/role/add", r#"{"name":"root"}"#.to_owned()),
            (
                "/v3/auth/user/add",
                format!(r#"{{"name":"root","password":"{password}"}}"#),
            ),
            (
                "/v3/auth/user/grant",
                r#"{"user":"root","role":"root"}"#.to_owned(),
            ),
            ("/v3/auth/enable", "{}".to_owned()),
        ] {
            let answer = rest::post(client, path, &body);
            assert!(
                answer.as_ref().is_some_and(|(c, _)| *c == 200),
                "etcd {path}: {answer:?}"
            );
        }
        // Anonymous requests are refused from now on.
        let anonymous = rest::post(client, "/v3/kv/range", r#"{"key":"Lw=="}"#);
        assert!(
            anonymous.as_ref().is_some_and(|(c, _)| *c != 200),
            "etcd still answers anonymous reads: {anonymous:?}"
        );
    }

    /// Writes node `i`'s Patroni configuration and starts Patroni.
    fn start_node(
        &self,
        i: usize,
        tools: &Tools,
        installation: &Installation,
        user: Option<&ServerUser>,
        secrets: &Secrets,
        options: Options,
    ) -> Node {
        let name = format!("node{i}");
        let dir = self.base.join(&name);
        private_dir(&dir, user);
        let mut node = Node {
            name,
            dir,
            rest_port: free_port(),
            pg_port: free_port(),
            patroni: None,
        };
        private_dir(&node.socket_dir(), user);
        private_dir(&node.dir.join("pglog"), user);
        let config = patroni_config(&node, self.etcd_port, installation, secrets, options);
        write_private(&node.config_path(), &config, user);
        let mut cmd = Command::new(&tools.patroni);
        cmd.arg(node.config_path());
        if installation.source() != Source::Debian {
            // PyPI builds look for libpq (the walreceiver's) under their build machine's path.
            if let Some(prefix) = installation.bindir().parent() {
                cmd.env("LD_LIBRARY_PATH", prefix.join("lib"));
            }
        }
        let log = log_file(&node.patroni_log());
        let child = spawn(cmd, user, &node.dir, log);
        fs::write(node.dir.join("patroni.pid"), child.id().to_string()).expect("patroni.pid");
        node.patroni = Some(child);
        node
    }

    /// Prints the tail of every log (for a failing test).
    fn print_logs(&self) {
        eprintln!(
            "--- etcd.log (tail)\n{}",
            tail(&self.base.join("etcd.log"), 20)
        );
        for node in &self.nodes {
            eprintln!(
                "--- {} patroni.log (tail, without 'no action' lines)\n{}",
                node.name,
                tail(&node.patroni_log(), 40)
            );
            eprintln!(
                "--- {} postgresql.log (tail)\n{}",
                node.name,
                tail(&node.pg_log(), 40)
            );
        }
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_logs();
        }
        let mut killed = Vec::new();
        for node in &mut self.nodes {
            let roots: Vec<i32> = node
                .patroni_pid()
                .into_iter()
                .chain(node.postmaster_pid())
                .collect();
            killed.extend(procs::freeze_and_kill(&roots));
            if let Some(mut child) = node.patroni.take() {
                let _ = child.wait();
            }
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
        procs::wait_gone(&killed, LIMIT);
        if self.keep {
            eprintln!("pglease-ha: keeping {}", self.base.display());
        } else {
            let _ = fs::remove_dir_all(&self.base);
        }
    }
}

/// The generated secrets of one cluster.
struct Secrets {
    etcd: String,
    superuser: String,
    replicator: String,
    rest: String,
}

/// Node `node`'s Patroni configuration (YAML; every value is a plain path, port, name or hex
/// secret, so nothing needs quoting beyond what is quoted here).
fn patroni_config(
    node: &Node,
    etcd_port: u16,
    installation: &Installation,
    secrets: &Secrets,
    options: Options,
) -> String {
    let dir = node.dir.display();
    let name = &node.name;
    let (rest, pg) = (node.rest_port, node.pg_port);
    let bin = installation.bindir().display();
    let sync = options.synchronous;
    let Secrets {
        etcd,
        superuser,
        replicator,
        rest: rest_password,
    } = secrets;
    format!(
        "\
scope: {SCOPE}
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
  authentication:
    username: patroni
    password: '{rest_password}'
etcd3:
  hosts: 127.0.0.1:{etcd_port}
  username: root
  password: '{etcd}'
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 104857600
    synchronous_mode: {sync}
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: replica
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 128MB
  initdb:
    - encoding: UTF8
    - locale: C
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/data
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: postgres
      password: '{superuser}'
    replication:
      username: {REPLICATOR}
      password: '{replicator}'
  parameters:
    unix_socket_directories: {dir}/s
    shared_buffers: 32MB
    max_connections: 50
    logging_collector: 'on'
    log_directory: {dir}/pglog
    log_filename: postgresql.log
    log_min_messages: warning
  basebackup:
    - checkpoint: fast
  pg_hba:
    - local all all trust
    - host replication {REPLICATOR} 127.0.0.1/32 scram-sha-256
    - host {DB} {OWNER} 127.0.0.1/32 scram-sha-256
watchdog:
  mode: 'off'
"
    )
}

/// Spawns `cmd` as the server account (if any) in its own process group, with a clean environment
/// (PATH, HOME = `home`, a UTF-8 C locale, plus what `cmd` already sets), stdout and stderr to
/// `log`.
fn spawn(mut cmd: Command, user: Option<&ServerUser>, home: &Path, log: fs::File) -> Child {
    let extra: Vec<(std::ffi::OsString, std::ffi::OsString)> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .envs(extra)
        .current_dir(home)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup the log"))
        .stderr(log)
        .process_group(0);
    if let Some(user) = user {
        cmd.uid(user.uid).gid(user.gid);
    }
    let program = cmd.get_program().to_owned();
    cmd.spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", Path::new(&program).display()))
}

/// A directory only the server account (and root) may enter.
fn private_dir(path: &Path, user: Option<&ServerUser>) {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
    chown(path, user);
}

/// Writes `text` to a new file only the server account may read.
fn write_private(path: &Path, text: &str, user: Option<&ServerUser>) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
    chown(path, user);
}

fn chown(path: &Path, user: Option<&ServerUser>) {
    if let Some(u) = user {
        std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    }
}

fn log_file(path: &Path) -> fs::File {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// The last `n` lines of a log, without Patroni's once-a-second "no action" lines.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("INFO: no action."))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A free TCP port on 127.0.0.1 (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A new random secret: 24 bytes of `/dev/urandom` as 48 hex digits.
fn secret() -> String {
    let mut bytes = [0u8; 24];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Kills what earlier test binaries, killed before they could clean up, left behind: for each
/// `$TMPDIR/pglease-ha-*` whose `owner.pid` process is gone, its etcd and Patroni processes and
/// postmasters (each checked to be what its pid file says), then the directory.
fn sweep_stale() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for dir in entries.flatten().map(|e| e.path()) {
        let named = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(DIR_PREFIX));
        let owner = fs::read_to_string(dir.join("owner.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        let Some(owner) = owner.filter(|_| named) else {
            continue;
        };
        if procs::is_alive(owner) {
            continue;
        }
        let pid_in = |file: PathBuf, program: &str| {
            fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .filter(|&p| procs::is_alive(p) && procs::cmdline(p).contains(program))
        };
        let mut roots: Vec<i32> = pid_in(dir.join("etcd.pid"), "etcd").into_iter().collect();
        for node in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let node = node.path();
            roots.extend(pid_in(node.join("patroni.pid"), "patroni"));
            roots.extend(postmaster_of(&node.join("data")));
        }
        let killed = procs::freeze_and_kill(&roots);
        procs::wait_gone(&killed, LIMIT);
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Polls `check` every 25 ms until it is true; fails the test after [`LIMIT`].
pub async fn poll<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    poll_for(what, LIMIT, check).await;
}

/// As [`poll`], with its own bound.
pub async fn poll_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
