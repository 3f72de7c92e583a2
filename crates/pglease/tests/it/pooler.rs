//! Pooler mode through a real PgBouncer in transaction mode: no LISTEN; waits sleep until the
//! server-reported lapse, capped, and still notice a release within one cap.

use std::time::Duration;

use pglease::Client;

use pgcluster::pgbouncer::PgBouncer;

use crate::common::{self, eventually, key, state, superuser, waiter_registered};

async fn pooled_client(bouncer: &PgBouncer, app: &str) -> Client {
    Client::builder()
        .pooler_mode(true)
        .poll_cap(Duration::from_millis(500))
        .connect(&format!(
            "{} application_name={app}",
            bouncer.connection_string(common::DB, "postgres")
        ))
        .await
        .unwrap_or_else(|e| panic!("connect through pgbouncer: {e}\n{}", bouncer.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooler_mode_acquires_waits_and_releases_through_pgbouncer_in_transaction_mode() {
    let bouncer =
        tokio::task::spawn_blocking(|| common::start_pgbouncer(common::cluster(), common::DB))
            .await
            .unwrap();
    let k = key("pooler");
    let holder = pooled_client(&bouncer, &format!("{k}-holder")).await;
    let waiter = pooled_client(&bouncer, &format!("{k}-waiter")).await;
    let su = superuser().await;

    // Statements really go through PgBouncer in transaction mode.
    let show = common::raw(&bouncer.connection_string("pgbouncer", "postgres")).await;
    let modes: Vec<String> = show
        .simple_query("SHOW CONFIG")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => (row.get("key") == Some("pool_mode"))
                .then(|| row.get("value").unwrap_or("").to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(modes, ["transaction"]);

    // The keepalive works through the pooler: held for several ttls.
    let ttl = Duration::from_millis(900);
    let lease = holder
        .try_acquire(&k, ttl)
        .await
        .unwrap()
        .expect("free key");
    for _ in 0..5 {
        tokio::time::sleep(ttl / 2).await;
        let s = state(&su, &k).await.unwrap();
        assert!(s.held && s.epoch == lease.epoch() && lease.ended().is_none());
    }

    // A waiter registers, sleeps (no LISTEN), and notices the release within a cap.
    let task = {
        let (waiter, k) = (waiter.clone(), k.clone());
        tokio::spawn(async move { waiter.acquire(&k, ttl, Duration::from_secs(30)).await })
    };
    eventually("the waiter registered", Duration::from_secs(10), || {
        let (su, k) = (&su, &k);
        async move { waiter_registered(su, k).await.then_some(()) }
    })
    .await;
    let epoch = lease.epoch();
    lease.release().await.unwrap();
    let won = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the waiter got the key")
        .unwrap()
        .unwrap();
    assert_eq!(won.epoch(), epoch + 2);
    assert_eq!(
        waiter.notifications_delivered(),
        0,
        "no LISTEN in pooler mode"
    );
    won.release().await.unwrap();

    // Waking at the lapse, with no release, through the pooler.
    let ghost = pglease::acquire(
        &su,
        &k,
        "ghost",
        Duration::from_millis(1200),
        Duration::ZERO,
    )
    .await
    .unwrap()
    .unwrap();
    let after = waiter
        .acquire(&k, ttl, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(after.epoch(), ghost.epoch + 1);
    after.release().await.unwrap();

    // No connection of the clients is listening.
    let listening: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' \
               AND application_name LIKE $1",
            &[&format!("{k}%")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(listening, 0);
    holder.shutdown().await;
    waiter.shutdown().await;
}
