//! Pooled connections: a lease is identified by (owner, epoch), never by a session, and the API keeps
//! no session state, so any pooled connection may carry any call and pool resets change nothing
//! (F28); the same through a real PgBouncer in transaction mode (F29).

use pgcluster::pgbouncer::PgBouncer;
use pglease_tests::APP;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::node::{DB, Node, blocking};
use crate::{await_backend_gone, grant, held, inspect, not_held, release, renew};

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
fn start_bouncer(node: &Node) -> PgBouncer {
    PgBouncer::builder(node.cluster())
        .database(DB)
        .user(APP)
        .pool_size(1)
        .max_client_conn(20)
        .start()
        .unwrap_or_else(|e| panic!("start PgBouncer (scripts/test.sh installs it): {e}"))
}

/// A client connection through PgBouncer. Calls use the simple query protocol: PgBouncer 1.18 in
/// transaction mode cannot carry named prepared statements across transactions.
async fn connect(bouncer: &PgBouncer) -> Client {
    let conninfo = bouncer.connection_string(DB, APP);
    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect through PgBouncer: {e}\n{}", bouncer.log()));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
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
    let bouncer = blocking(|| start_bouncer(&node));
    let (a, b) = (connect(&bouncer).await, connect(&bouncer).await);
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

    let c = connect(&bouncer).await;
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
    let d = connect(&bouncer).await;
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
