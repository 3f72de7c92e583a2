//! Batched renewal: the leases of one client are renewed together (`lease.renew_many`), far fewer
//! calls than leases per interval, while each lease's loss is decided on its own: a refused lease
//! ends alone, and a busy one (its row locked by a guarded transaction elsewhere) is renewed on its
//! own while the others are renewed on time. Calls are counted by the server
//! (`pg_stat_user_functions` with `track_functions = all`) in a database of the test's own.

use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use pglease::{Client, Lease};

use crate::common::{cluster, conninfo_for, eventually, key, raw};

/// A fresh database with pg_lease whose sessions count function calls; returns its name.
async fn counting_database(test: &str) -> String {
    let db = key(test).replace('-', "_");
    let c = cluster();
    c.psql("postgres", &format!("CREATE DATABASE {db}"))
        .expect("create database");
    c.psql(
        &db,
        &format!("CREATE EXTENSION pg_lease; ALTER DATABASE {db} SET track_functions = 'all';"),
    )
    .expect("set up the database");
    db
}

/// Calls of `lease.<name>` so far, as the server counts them.
async fn calls(su: &tokio_postgres::Client, name: &str) -> i64 {
    su.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions \
          WHERE schemaname = 'lease' AND funcname = $1",
        &[&name],
    )
    .await
    .expect("read function stats")
    .get(0)
}

async fn acquire_all(c: &Client, prefix: &str, n: usize, ttl: Duration) -> Vec<Lease> {
    let mut leases = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let got = join_all(chunk.iter().map(|i| {
            let k = format!("{prefix}-{i}");
            async move { c.try_acquire(&k, ttl).await.unwrap().expect("free key") }
        }))
        .await;
        leases.extend(got);
    }
    leases
}

async fn expiry(su: &tokio_postgres::Client, key: &str) -> SystemTime {
    pglease::inspect(su, key)
        .await
        .unwrap()
        .and_then(|s| s.expires_at)
        .expect("held")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_leases_are_renewed_with_far_fewer_calls_than_leases() {
    let db = counting_database("batch-500").await;
    let conninfo = conninfo_for(cluster(), &db, "batch-500");
    let c = Client::connect(&conninfo).await.unwrap();
    let su = raw(&conninfo_for(cluster(), &db, "batch-500-su")).await;
    let ttl = Duration::from_secs(3);
    let leases = acquire_all(&c, "job", 500, ttl).await;
    // Let the first round coalesce the leases, and the stats reach the server.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = std::time::Instant::now();
    let (many0, one0) = (calls(&su, "renew_many").await, calls(&su, "renew").await);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // A backend reports its counts with a delay (up to about 10 s when idle): wait until some
    // batched renewals have arrived.
    let (many, one) = eventually("batched renewals counted", Duration::from_secs(20), || {
        let su = &su;
        async move {
            let (many, one) = (
                calls(su, "renew_many").await - many0,
                calls(su, "renew").await - one0,
            );
            (many >= 2).then_some((many, one))
        }
    })
    .await;
    // One call per key would be 500 per 1 s interval. Allow 25 calls per second, over the time
    // measured plus 10 s for the reporting delay.
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("500 leases: {many} renew_many and {one} renew calls counted in {elapsed:.1}s");
    let bound = (25.0 * (elapsed + 10.0)) as i64;
    assert!(
        many + one <= bound,
        "{many} renew_many and {one} renew calls in {elapsed:.1}s for 500 leases (ttl {ttl:?}); \
         one call per key would be {}",
        (500.0 * elapsed) as i64
    );
    for lease in &leases {
        assert_eq!(lease.ended(), None, "{}", lease.key());
    }
    let s = pglease::list(&su, Some("job-")).await.unwrap();
    assert_eq!(s.iter().filter(|l| l.state.held).count(), 500);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_refused_in_a_batch_is_lost_alone_and_the_others_keep_renewing() {
    let db = counting_database("batch-refused").await;
    let conninfo = conninfo_for(cluster(), &db, "batch-refused");
    let c = Client::connect(&conninfo).await.unwrap();
    let su = raw(&conninfo_for(cluster(), &db, "batch-refused-su")).await;
    let ttl = Duration::from_secs(2);
    let leases = acquire_all(&c, "part", 20, ttl).await;
    let victim = &leases[7];
    // Released behind the client's back, then taken by another owner.
    let status = pglease::release(&su, victim.key(), c.owner(), victim.epoch())
        .await
        .unwrap();
    assert!(status.is_ok());
    pglease::acquire(
        &su,
        victim.key(),
        "intruder",
        Duration::from_secs(60),
        Duration::ZERO,
    )
    .await
    .unwrap()
    .expect("free after the release");
    let reason = tokio::time::timeout(ttl * 2, victim.lost())
        .await
        .expect("the next renewal is refused");
    assert_eq!(reason, pglease::LostReason::NotOwner);
    let before: Vec<SystemTime> = join_all(
        leases
            .iter()
            .filter(|l| l.key() != victim.key())
            .map(|l| expiry(&su, l.key())),
    )
    .await;
    tokio::time::sleep(ttl * 2).await;
    let after: Vec<SystemTime> = join_all(
        leases
            .iter()
            .filter(|l| l.key() != victim.key())
            .map(|l| expiry(&su, l.key())),
    )
    .await;
    for (i, lease) in leases
        .iter()
        .filter(|l| l.key() != victim.key())
        .enumerate()
    {
        assert_eq!(lease.ended(), None, "{}", lease.key());
        assert!(after[i] > before[i], "{} was renewed", lease.key());
    }
    let s = pglease::inspect(&su, victim.key()).await.unwrap().unwrap();
    assert_eq!(s.owner.as_deref(), Some("intruder"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lease_is_renewed_on_its_own_while_the_others_are_renewed_on_time() {
    let db = counting_database("batch-busy").await;
    let conninfo = conninfo_for(cluster(), &db, "batch-busy");
    let c = Client::connect(&conninfo).await.unwrap();
    let su = raw(&conninfo_for(cluster(), &db, "batch-busy-su")).await;
    let ttl = Duration::from_secs(3);
    let leases = acquire_all(&c, "busy", 20, ttl).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fenced = &leases[3];
    // Another session holds the key's row in an open guarded transaction.
    let mut guard = raw(&conninfo_for(cluster(), &db, "batch-busy-fence")).await;
    let tx = guard.transaction().await.unwrap();
    pglease::fence(&tx, fenced.key(), c.owner(), fenced.epoch())
        .await
        .unwrap();
    let fenced_before = expiry(&su, fenced.key()).await;
    let others_before: Vec<SystemTime> =
        join_all(leases.iter().skip(4).map(|l| expiry(&su, l.key()))).await;
    // Longer than the renewal interval (1 s), shorter than the validity span (about 3 s).
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let others_during: Vec<SystemTime> =
        join_all(leases.iter().skip(4).map(|l| expiry(&su, l.key()))).await;
    for (i, lease) in leases.iter().skip(4).enumerate() {
        assert!(
            others_during[i] > others_before[i],
            "{} was renewed on time while {} was fenced",
            lease.key(),
            fenced.key()
        );
    }
    assert_eq!(
        expiry(&su, fenced.key()).await,
        fenced_before,
        "the fenced key cannot be renewed while its row is locked"
    );
    tx.commit().await.unwrap();
    eventually(
        "the fenced lease renewed on its own",
        Duration::from_secs(3),
        || {
            let (su, k) = (&su, fenced.key().to_owned());
            async move { (expiry(su, &k).await > fenced_before).then_some(()) }
        },
    )
    .await;
    for lease in &leases {
        assert_eq!(lease.ended(), None, "{}", lease.key());
    }
    c.shutdown().await;
}
