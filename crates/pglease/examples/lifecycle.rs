//! The whole life of a lease with `pglease`: connect, acquire, keep alive, fence a write, wait for a
//! key without polling, lose a lease, get fenced out, `with_lease`, a leader election, shutdown.
//!
//! ```text
//! cargo run -p pglease --example lifecycle                  # pglease's local server
//! DATABASE_URL=postgresql://app@db/app cargo run -p pglease --example lifecycle
//! ```
//!
//! Without `DATABASE_URL` it uses the local server the `pglease` command uses without a database
//! URL (`pglease local`; started with PostgreSQL `PGLEASE_PG_VERSION`, default 15, if it is not
//! running). It installs pg_lease with the script installer if needed (the role needs `CREATE` on
//! the database). It prints plain text: no colour codes.

use std::error::Error;
use std::time::Duration;

use futures_util::StreamExt;
use pglease::{Client, LostReason};
use tokio_postgres::NoTls;

fn main() -> Result<(), Box<dyn Error>> {
    let conninfo = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => local_server()?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&conninfo))
}

/// The connection string of pglease's local server (the one `pglease` uses without a database
/// URL: `pglease local`), started if it is not running; it keeps running afterwards.
fn local_server() -> Result<String, Box<dyn Error>> {
    let local = pgcluster::PersistentCluster::pglease_local()
        .ok_or("set DATABASE_URL, or PGLEASE_LOCAL_DIR (or HOME) for the local server")?;
    let major = std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15);
    let started = local.start(major)?;
    eprintln!(
        "no DATABASE_URL: using pglease's local server in {}",
        local.root().display()
    );
    Ok(started.server.connection_string("postgres"))
}

/// A plain connection, for the example's own statements.
async fn connect(conninfo: &str) -> Result<tokio_postgres::Client, Box<dyn Error>> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn run(conninfo: &str) -> Result<(), Box<dyn Error>> {
    // 0. Installation: a no-op where CREATE EXTENSION (or an earlier install) already ran.
    let mut db = connect(conninfo).await?;
    let installed = pglease::install(&mut db).await?;
    println!("pg_lease {} (via {:?})", installed.version, installed.via);

    // 1. A client: a pool, a default owner id (host:pid:random), the version checked on connect.
    let client = Client::connect(conninfo).await?;
    let other = Client::connect(conninfo).await?;
    println!("client owner: {}", client.owner());

    // 2. Acquire; the keepalive renews every ttl/3 from now on.
    let ttl = Duration::from_secs(3);
    let key = format!("lifecycle/{}", std::process::id());
    let lease = client
        .try_acquire(&key, ttl)
        .await?
        .ok_or("the key is busy")?;
    println!("acquired {} at epoch {}", lease.key(), lease.epoch());
    assert!(other.try_acquire(&key, ttl).await?.is_none());
    tokio::time::sleep(ttl * 2).await; // two ttls: the keepalive holds it
    let state = other.inspect(&key).await?.ok_or("the key exists")?;
    println!(
        "after two ttls: held={} by {:?} at epoch {}",
        state.held, state.owner, state.epoch
    );
    for listed in other.list(Some("lifecycle/")).await? {
        println!("  listed {} held={}", listed.key, listed.state.held);
    }

    // 3. A guarded write: fence() locks the key's row until commit, so no takeover commits first.
    db.batch_execute("CREATE TEMP TABLE jobs (id int, done_at_epoch bigint)")
        .await?;
    let tx = db.transaction().await?;
    lease.fence(&tx).await?;
    tx.execute("INSERT INTO jobs VALUES (42, $1)", &[&lease.epoch()])
        .await?;
    tx.commit().await?;
    println!("guarded write committed at epoch {}", lease.epoch());

    // 4. Waiting without polling: `other` registers as a waiter and sleeps on its LISTEN
    //    connection; our release wakes it at once (not at the 3 s lapse).
    let waiting = {
        let (other, key) = (other.clone(), key.clone());
        tokio::spawn(async move { other.acquire(&key, ttl, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // let it register (for the demo)
    let released_epoch = lease.epoch();
    let released = std::time::Instant::now();
    lease.release().await?;
    let theirs = waiting.await??;
    println!(
        "the waiter got it {:?} after the release, at epoch {} (> {released_epoch})",
        released.elapsed(),
        theirs.epoch()
    );
    theirs.release().await?;

    // 5. The lost path: a lease ends when the server refuses a renewal. Here another process that
    //    (wrongly) shares our owner id releases our key: the next renewal says not_owner.
    let lease = client
        .try_acquire(&key, ttl)
        .await?
        .ok_or("the key is busy")?;
    let stale = lease.fencing_token();
    pglease::release(&db, &key, client.owner(), lease.epoch()).await?;
    let reason = lease.lost().await;
    println!("lost() fired: {reason}");
    assert_eq!(reason, LostReason::NotOwner);
    let err = lease.renew().await.expect_err("the lease is gone");
    assert!(err.is_lease_lost());

    // 6. The fenced path: a write guarded with a stale grant is refused inside the database.
    let tx = db.transaction().await?;
    match stale.check(&tx).await {
        Err(e) if e.is_fenced() => println!("stale write refused: SQLSTATE {:?}", e.code()),
        other => return Err(format!("expected a fence error, got {other:?}").into()),
    }
    tx.rollback().await?;
    let fresh = client
        .try_acquire(&key, ttl)
        .await?
        .ok_or("the key is busy")?;
    let tx = db.transaction().await?;
    match stale.check(&tx).await {
        Err(e) if e.is_fenced() => println!(
            "same owner, old epoch {} vs {}: SQLSTATE {:?}",
            stale.epoch(),
            fresh.epoch(),
            e.code()
        ),
        other => return Err(format!("expected a fence error, got {other:?}").into()),
    }
    tx.rollback().await?;
    drop(fresh); // dropping releases it in the background
    drop(lease);

    // 7. with_lease: acquire, run, release; the future is cancelled if the lease is lost.
    let report = client
        .with_lease(&format!("{key}/report"), ttl, |guard| async move {
            format!("report written at epoch {}", guard.epoch())
        })
        .await?;
    println!("{report}");

    // 8. Leader election: two candidates, one observer.
    let election_key = format!("{key}/leader");
    let mut changes = other.election(election_key.clone(), ttl).observe();
    let first = client
        .election(election_key.clone(), ttl)
        .campaign()
        .await?;
    println!("leader: {} (term {})", first.owner(), first.epoch());
    let second = {
        let (other, election_key) = (other.clone(), election_key.clone());
        tokio::spawn(async move { other.election(election_key, ttl).campaign().await })
    };
    observe_until(&mut changes, first.epoch()).await?;
    client
        .election(election_key.clone(), ttl)
        .resign(first)
        .await?;
    let second = second.await??;
    println!("new leader: {} (term {})", second.owner(), second.epoch());
    observe_until(&mut changes, second.epoch()).await?;
    drop(second);

    // 9. Shutdown: releases every lease, ends every background task.
    client.shutdown().await;
    other.shutdown().await;
    println!("done");
    Ok(())
}

/// Prints the observed leader changes until the leader of `term` shows up.
async fn observe_until(
    changes: &mut pglease::LeaderStream,
    term: i64,
) -> Result<(), Box<dyn Error>> {
    while let Some(change) = changes.next().await {
        match change? {
            Some(leader) => {
                println!("observer: leader {leader}");
                if leader.epoch >= term {
                    return Ok(());
                }
            }
            None => println!("observer: no leader"),
        }
    }
    Err("the observer stopped".into())
}
