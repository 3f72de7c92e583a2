//! `pglease demo`: the README's story, told against a private PostgreSQL server (a throw-away
//! pgcluster server with the embedded extension files installed, removed at the end).
//!
//! Two workers compete for one key. worker-a wins (epoch 1) and writes through a fencing guard;
//! worker-b is refused, then waits; worker-a stalls past its TTL; worker-b takes over at the lapse
//! with epoch 2; the stalled worker-a wakes up, learns it lost the lease, and its late write is
//! rejected by the guard because its epoch is stale.

use std::time::{Duration, Instant, SystemTime};

use pglease::Status;
use tokio_postgres::{Client, NoTls};

use crate::cli::DemoArgs;
use crate::embedded;
use crate::exit::BoxError;

const KEY: &str = "nightly-report";

/// Narrates with the time since the demo began.
struct Narrator {
    started: Instant,
}

impl Narrator {
    fn say(&self, who: &str, what: impl AsRef<str>) {
        let t = self.started.elapsed().as_secs_f64();
        println!("[{t:6.2}s] {who:<9} {}", what.as_ref());
    }

    fn explain(&self, what: impl AsRef<str>) {
        println!("           {:<9} \u{2502} {}", "", what.as_ref());
    }
}

/// Runs the demo; returns the process exit code.
pub async fn run(args: DemoArgs) -> Result<std::process::ExitCode, BoxError> {
    let n = Narrator {
        started: Instant::now(),
    };
    let ttl = args.ttl;
    n.say(
        "setup",
        format!("starting a private PostgreSQL {} server", args.pg_version),
    );
    let cluster = tokio::task::spawn_blocking(move || start_throwaway(args.pg_version))
        .await?
        .map_err(|e| format!("could not start PostgreSQL: {e}"))?;
    n.say(
        "setup",
        format!(
            "PostgreSQL {} up on port {} (data in {})",
            cluster.version(),
            cluster.port(),
            cluster.data_dir().display()
        ),
    );

    // A non-superuser installs the trusted extension and owns the guarded table.
    cluster.psql("postgres", "CREATE ROLE demo_admin LOGIN")?;
    cluster.psql("postgres", "CREATE DATABASE demo OWNER demo_admin")?;
    let connect = |cluster: &pgcluster::Cluster| {
        format!("{} user=demo_admin", cluster.connection_string("demo"))
            .replace("user=postgres user=", "user=")
    };
    let conninfo = connect(&cluster);
    let setup = connect_to(&conninfo).await?;
    setup
        .batch_execute(
            "CREATE EXTENSION pg_lease;
             CREATE TABLE report (id int PRIMARY KEY, body text NOT NULL, written_by text NOT NULL, epoch bigint NOT NULL);
             -- The fencing guard: the highest epoch the resource has accepted. A write passes only if
             -- its epoch is at least that high, and raises the mark in the same transaction.
             CREATE TABLE fence (resource text PRIMARY KEY, max_epoch bigint NOT NULL);
             INSERT INTO fence VALUES ('report', 0);",
        )
        .await?;
    n.say(
        "setup",
        "CREATE EXTENSION pg_lease as a non-superuser; a table `report` guarded by a fence",
    );

    let a = connect_to(&conninfo).await?;
    let b = connect_to(&conninfo).await?;

    // 1. worker-a acquires.
    let grant_a = pglease::acquire(&a, KEY, "worker-a", ttl, Duration::ZERO)
        .await?
        .ok_or("worker-a should get the free key")?;
    n.say(
        "worker-a",
        format!(
            "acquire({KEY:?}, ttl {}) -> granted, epoch {}",
            fmt(ttl),
            grant_a.epoch
        ),
    );
    guarded_write(&n, &a, "worker-a", grant_a.epoch, "first draft").await?;

    // 2. worker-b is refused while a holds it.
    let refused = pglease::acquire(&b, KEY, "worker-b", ttl, Duration::ZERO).await?;
    assert!(refused.is_none(), "the key is held");
    let state = pglease::inspect(&b, KEY).await?.ok_or("the key exists")?;
    n.say(
        "worker-b",
        format!(
            "acquire -> refused: held by {} (epoch {}) for another {}",
            state.owner.as_deref().unwrap_or("?"),
            state.epoch,
            fmt(remaining(state.expires_at))
        ),
    );

    // 3. worker-a renews: same epoch, later expiry.
    let renewal = pglease::renew(&a, KEY, "worker-a", grant_a.epoch, ttl).await?;
    n.say(
        "worker-a",
        format!(
            "renew(epoch {}) -> {} (the epoch never changes on renew)",
            grant_a.epoch, renewal.status
        ),
    );

    // 4. worker-a stalls (a GC pause, a partition, a stopped VM) and stops renewing.
    n.say(
        "worker-a",
        "stalls: no more renewals (think: long GC pause, network partition)",
    );
    n.explain("nobody has to notice the stall: expiry is judged by the server clock at each call");

    // 5. worker-b waits for the key, inside the database, without holding any lock.
    n.say(
        "worker-b",
        format!("acquire with wait up to {} ...", fmt(ttl * 5)),
    );
    let waited = Instant::now();
    let grant_b = pglease::acquire(&b, KEY, "worker-b", ttl * 3, ttl * 5)
        .await?
        .ok_or("worker-b should take over after the lapse")?;
    n.say(
        "worker-b",
        format!(
            "-> granted after {}: the old lease lapsed; new epoch {}",
            fmt(waited.elapsed()),
            grant_b.epoch
        ),
    );
    guarded_write(&n, &b, "worker-b", grant_b.epoch, "final report").await?;

    // 6. worker-a wakes up and tries to carry on.
    n.say("worker-a", "wakes up and tries to carry on with epoch 1");
    let late = pglease::renew(&a, KEY, "worker-a", grant_a.epoch, ttl).await?;
    n.say(
        "worker-a",
        format!(
            "renew(epoch {}) -> {}: it no longer owns the key",
            grant_a.epoch, late.status
        ),
    );
    if late.status != Status::Ok {
        n.explain("a correct worker stops here; a buggy one might still write...");
    }
    guarded_write(&n, &a, "worker-a", grant_a.epoch, "stale overwrite").await?;
    // The same guard inside the database: lease.fence checks the lease in the writing transaction.
    a.batch_execute("BEGIN").await?;
    let fenced = a
        .query_one(
            "SELECT lease.fence($1, 'worker-a', $2)",
            &[&KEY, &grant_a.epoch],
        )
        .await;
    a.batch_execute("ROLLBACK").await?;
    match fenced {
        Err(e) => n.say(
            "worker-a",
            format!(
                "lease.fence({KEY:?}, epoch {}) -> refused with SQLSTATE {}: no write can follow",
                grant_a.epoch,
                e.code().map_or("?", |c| c.code())
            ),
        ),
        Ok(_) => n.say(
            "worker-a",
            "lease.fence passed (unexpected: the lease was taken over)",
        ),
    }

    // 7. worker-b finishes and releases.
    let released = pglease::release(&b, KEY, "worker-b", grant_b.epoch).await?;
    let after = pglease::inspect(&b, KEY).await?.ok_or("the key exists")?;
    n.say(
        "worker-b",
        format!(
            "release -> {released}; inspect: held={}, epoch counter {} (the next grant gets {})",
            after.held,
            after.epoch,
            after.epoch + 1
        ),
    );

    let rows = setup
        .query(
            "SELECT written_by, epoch, body FROM report ORDER BY id",
            &[],
        )
        .await?;
    n.say(
        "result",
        "the report table holds only writes made under a current epoch:",
    );
    for r in rows {
        let (who, epoch, body): (String, i64, String) = (r.get(0), r.get(1), r.get(2));
        n.explain(format!("{who} (epoch {epoch}): {body:?}"));
    }
    drop((a, b));
    if args.ui {
        n.say(
            "setup",
            "keeping the server: workers and the operator console start now",
        );
        return crate::demo_live::run(&conninfo, &setup, args.listen, ttl).await;
    }
    drop(setup);
    n.say("setup", "stopping the private server and removing its data");
    tokio::task::spawn_blocking(move || drop(cluster)).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Starts a throw-away server of `major` with the extension files installed.
fn start_throwaway(major: u32) -> Result<pgcluster::Cluster, BoxError> {
    let cluster = embedded::extension_files()
        .into_iter()
        .fold(pgcluster::ClusterBuilder::for_major(major)?, |b, files| {
            b.extension(files)
        })
        .start()?;
    Ok(cluster)
}

/// Writes through the fence: accepted only if `epoch` is at least the highest epoch seen.
async fn guarded_write(
    n: &Narrator,
    c: &Client,
    who: &str,
    epoch: i64,
    body: &str,
) -> Result<(), BoxError> {
    c.batch_execute("BEGIN").await?;
    let passed = c
        .execute(
            "UPDATE fence SET max_epoch = $1 WHERE resource = 'report' AND max_epoch <= $1",
            &[&epoch],
        )
        .await?;
    if passed == 1 {
        c.execute(
            "INSERT INTO report VALUES (1, $1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, written_by = EXCLUDED.written_by, epoch = EXCLUDED.epoch",
            &[&body, &who, &epoch],
        )
        .await?;
        c.batch_execute("COMMIT").await?;
        n.say(
            who,
            format!("write {body:?} with epoch {epoch} -> accepted by the fence"),
        );
    } else {
        c.batch_execute("ROLLBACK").await?;
        n.say(
            who,
            format!(
                "write {body:?} with epoch {epoch} -> REJECTED: the fence has seen a newer epoch"
            ),
        );
    }
    Ok(())
}

async fn connect_to(conninfo: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn remaining(expires_at: Option<SystemTime>) -> Duration {
    expires_at
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .unwrap_or_default()
}

fn fmt(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}
