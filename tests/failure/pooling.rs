//! Pooled connections: a lease is identified by (owner, epoch), never by a session, and the API keeps
//! no session state, so any pooled connection may carry any call and pool resets change nothing
//! (F28); the same through a real PgBouncer in transaction mode (F29).

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pglease_tests::APP;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use crate::node::{DB, Node, blocking};
use crate::{LIMIT, await_backend_gone, grant, held, inspect, not_held, release, renew};

/// F28: grant on one connection, renew on another, release on a third; a pool's reset (`DISCARD
/// ALL`), closing a connection, and rolling back a transaction left open on a returned connection
/// change nothing about the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_belong_to_owners_not_connections_so_pool_resets_change_nothing() {
    let node = Node::start();
    let pool = [node.app().await, node.app().await, node.app().await];

    let e = grant(&pool[0], "k", "worker-a", "1 hour").await;
    let (status, x) = renew(&pool[1], "k", "worker-a", e, "2 hours").await;
    assert_eq!(status, "ok");
    let x = x.unwrap();
    let state = node.state().await;

    pool[0].batch_execute("DISCARD ALL").await.unwrap();
    assert_eq!(node.state().await, state, "a pool reset releases nothing");

    // A connection handed back with a transaction still open: the pool rolls it back.
    pool[2].batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        renew(&pool[2], "k", "worker-a", e, "1 second").await.0,
        "ok"
    );
    pool[2].batch_execute("ROLLBACK").await.unwrap();
    pool[2].batch_execute("DISCARD ALL").await.unwrap();
    assert_eq!(
        node.state().await,
        state,
        "the rolled-back renew never happened"
    );

    let [first, second, third] = pool;
    drop(first);
    let fresh = node.app().await;
    assert_eq!(
        inspect(&fresh, "k").await,
        held("worker-a", e, x),
        "closing the connection that acquired it releases nothing"
    );
    assert_eq!(release(&third, "k", "worker-a", e).await, "ok");
    assert_eq!(inspect(&second, "k").await, not_held(e + 1));
}

/// A PgBouncer in transaction mode with one server connection, in front of a node: every client
/// transaction runs on the same server session, and a client that leaves inside a transaction
/// makes PgBouncer close that session.
struct Bouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Bouncer {
    fn start(node: &Node) -> Bouncer {
        let exe = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("PgBouncer is not installed (scripts/test.sh installs it)");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!(
            "pglease-failure-pgbouncer-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let users = dir.join("users.txt");
        std::fs::write(&users, format!("\"{APP}\" \"\"\n")).unwrap();
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 {DB} = host={socket} port={pg_port} dbname={DB}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 default_pool_size = 1\n\
                 max_client_conn = 20\n\
                 ignore_startup_parameters = extra_float_digits\n",
                socket = node.cluster().socket_dir().display(),
                pg_port = node.cluster().port(),
                users = users.display(),
            ),
        )
        .unwrap();
        for f in [&users, &ini] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let log = std::fs::File::create(dir.join("pgbouncer.log")).unwrap();
        let mut cmd = Command::new(exe);
        // PgBouncer refuses to run as root; it switches to an unprivileged user itself.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "nobody"]);
        }
        let child = cmd
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start PgBouncer");
        let bouncer = Bouncer { child, dir, port };
        let deadline = Instant::now() + LIMIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "PgBouncer did not listen: {}",
                std::fs::read_to_string(bouncer.dir.join("pgbouncer.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        bouncer
    }

    /// A client connection through PgBouncer. Calls use the simple query protocol: PgBouncer 1.18
    /// in transaction mode cannot carry named prepared statements across transactions.
    async fn connect(&self) -> Client {
        let mut config = Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user(APP)
            .dbname(DB);
        let (client, connection) = config
            .connect(NoTls)
            .await
            .expect("connect through PgBouncer");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first row of a simple query, as text.
async fn one_row(c: &Client, sql: &str) -> Vec<Option<String>> {
    let messages = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let row = messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no row"));
    (0..row.len())
        .map(|i| row.get(i).map(str::to_owned))
        .collect()
}

/// F29: through a transaction-mode PgBouncer whose clients all share one server session, leases
/// still belong to owners: the other owner on the same server session is refused, and closing the
/// client that acquired releases nothing. A client that vanishes inside a transaction (holding an
/// uncommitted renew) makes PgBouncer close the server session, so the renew rolls back and no row
/// lock lingers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_shares_a_server_session_but_never_a_lease() {
    let node = Node::start();
    let su = node.superuser().await;
    let bouncer = blocking(|| Bouncer::start(&node));
    let (a, b) = (bouncer.connect().await, bouncer.connect().await);
    let pid = one_row(&a, "SELECT pg_backend_pid()").await;
    assert_eq!(
        one_row(&b, "SELECT pg_backend_pid()").await,
        pid,
        "one server session serves both clients"
    );

    let granted = one_row(
        &a,
        "SELECT acquired, epoch FROM lease.acquire('k', 'worker-a', '1 hour')",
    )
    .await;
    assert_eq!(granted[0].as_deref(), Some("t"));
    let e = granted[1].clone().unwrap();
    assert_eq!(
        one_row(
            &b,
            "SELECT acquired FROM lease.acquire('k', 'worker-b', '1 hour')"
        )
        .await,
        [Some("f".to_owned())],
        "same server session, another owner: refused"
    );
    let state = node.state().await;

    let c = bouncer.connect().await;
    c.simple_query("BEGIN").await.unwrap();
    assert_eq!(
        one_row(
            &c,
            &format!("SELECT status FROM lease.renew('k', 'worker-a', {e}, '1 second')")
        )
        .await,
        [Some("ok".to_owned())]
    );
    drop(c);
    let server_pid: i32 = pid[0].as_deref().unwrap().parse().unwrap();
    await_backend_gone(&su, server_pid).await;
    assert_eq!(node.state().await, state, "the abandoned renew rolled back");

    drop(a);
    let d = bouncer.connect().await;
    assert_ne!(
        one_row(&d, "SELECT pg_backend_pid()").await,
        pid,
        "a new server session"
    );
    assert_eq!(
        one_row(
            &d,
            "SELECT held, owner, epoch::text FROM lease.inspect('k')"
        )
        .await,
        [
            Some("t".to_owned()),
            Some("worker-a".to_owned()),
            Some(e.clone())
        ],
        "closing the client that acquired released nothing"
    );
    assert_eq!(
        one_row(&d, &format!("SELECT lease.release('k', 'worker-a', {e})")).await,
        [Some("ok".to_owned())],
        "any client may act for the owner with its epoch"
    );
    drop(b);
}
