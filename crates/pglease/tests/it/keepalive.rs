//! The keepalive: keeps leases for many ttls, survives a killed connection, ends with its lease,
//! and sends nothing after a release.

use std::time::Duration;

use crate::common::{self, client, eventually, force_lapse, key, state, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_holds_a_lease_for_many_ttls_at_the_same_epoch() {
    let k = key("keep-many");
    let c = client(&k).await;
    let su = superuser().await;
    let ttl = Duration::from_millis(500);
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");
    let started = tokio::time::Instant::now();
    let mut last_expiry = None;
    let mut renewals_seen = 0;
    // Sample the server's view for 8 ttls: always held by us at the grant's epoch.
    while started.elapsed() < ttl * 8 {
        let s = state(&su, &k).await.expect("the key exists");
        assert!(s.held, "lost after {:?}", started.elapsed());
        assert_eq!(s.owner.as_deref(), Some(c.owner()));
        assert_eq!(s.epoch, lease.epoch());
        if last_expiry.is_some_and(|x| s.expires_at > x) {
            renewals_seen += 1;
        }
        last_expiry = Some(s.expires_at);
        assert_eq!(lease.ended(), None);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        renewals_seen >= 4,
        "the expiry moved only {renewals_seen} times"
    );
    lease.release().await.unwrap();
    let s = state(&su, &k).await.unwrap();
    assert!(!s.held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_recovers_on_a_new_connection_when_its_backend_is_terminated() {
    let app = key("keep-kill");
    let c = client(&app).await;
    let su = superuser().await;
    let ttl = Duration::from_millis(900);
    let lease = c.try_acquire(&app, ttl).await.unwrap().expect("free key");

    for round in 0..2 {
        let before = state(&su, &app).await.unwrap().expires_at;
        let killed: Vec<i32> = su
            .query(
                "WITH victims AS MATERIALIZED ( \
                     SELECT pid FROM pg_stat_activity WHERE application_name = $1) \
                 SELECT pid FROM victims WHERE pg_terminate_backend(pid)",
                &[&app],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            !killed.is_empty(),
            "round {round}: the client had no backend to kill"
        );
        // A renewal arrives on a new backend: the expiry moves on and a new pid serves the app.
        eventually(
            "a renewal on a new connection",
            Duration::from_secs(10),
            || {
                let (su, app, killed) = (&su, &app, &killed);
                async move {
                    let s = state(su, app).await?;
                    let pids: Vec<i32> = su
                        .query(
                            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                            &[app],
                        )
                        .await
                        .ok()?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    let fresh = pids.iter().any(|p| !killed.contains(p));
                    (s.held && s.expires_at > before && fresh).then_some(())
                }
            },
        )
        .await;
    }
    // Hold on for a few more ttls: never lost, same epoch on the server.
    for _ in 0..6 {
        tokio::time::sleep(ttl / 2).await;
        assert_eq!(lease.ended(), None);
        let s = state(&su, &app).await.unwrap();
        assert!(s.held && s.epoch == lease.epoch());
    }
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_tasks_end_on_release_drop_loss_and_shutdown() {
    let k = key("keep-leak");
    let c = pglease::Client::builder()
        .renew_fraction(0.05)
        .connect(&common::conninfo(&k))
        .await
        .unwrap();
    let su = superuser().await;
    let ttl = Duration::from_secs(20);
    let keys: Vec<String> = (0..4).map(|i| format!("{k}/{i}")).collect();
    let mut leases = Vec::new();
    for k in &keys {
        leases.push(c.try_acquire(k, ttl).await.unwrap().expect("free key"));
    }
    assert_eq!(c.live_keepalives(), 4);
    let live = |n: usize| {
        let c = c.clone();
        move || {
            let c = c.clone();
            async move { (c.live_keepalives() == n).then_some(()) }
        }
    };
    let mut leases = leases.into_iter();

    // Release.
    leases.next().unwrap().release().await.unwrap();
    eventually(
        "3 keepalives after a release",
        Duration::from_secs(10),
        live(3),
    )
    .await;

    // Drop: the lease is released in the background.
    drop(leases.next().unwrap());
    eventually(
        "2 keepalives after a drop",
        Duration::from_secs(10),
        live(2),
    )
    .await;
    eventually(
        "the dropped lease is released",
        Duration::from_secs(10),
        || {
            let (su, k) = (&su, &keys[1]);
            async move { state(su, k).await.filter(|s| !s.held).map(drop) }
        },
    )
    .await;

    // Loss: the server refuses the next renewal.
    let lost = leases.next().unwrap();
    force_lapse(&su, &keys[2]).await;
    assert_eq!(lost.lost().await, pglease::LostReason::Lapsed);
    eventually("1 keepalive after a loss", Duration::from_secs(10), live(1)).await;

    // Shutdown: releases the last lease, ends every task.
    let last = leases.next().unwrap();
    c.shutdown().await;
    assert_eq!(c.live_keepalives(), 0);
    assert_eq!(last.lost().await, pglease::LostReason::Shutdown);
    assert!(
        !state(&su, &keys[3]).await.unwrap().held,
        "shutdown released it"
    );
    let e = c.try_acquire(&keys[0], ttl).await.unwrap_err();
    assert!(e.is_closed(), "{e}");
    drop(lost);
}

/// The renewals of `key` that the server logged (for the logging role), by byte offset.
fn logged_renewals(log: &str, key: &str) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut lines = log
        .char_indices()
        .filter(|(_, c)| *c == '\n')
        .map(|(i, _)| i + 1);
    let mut start = 0;
    let mut previous_was_renew = false;
    loop {
        let end = lines.next().unwrap_or(log.len());
        if start >= log.len() {
            break;
        }
        let line = &log[start..end];
        if previous_was_renew
            && line.to_ascii_lowercase().contains("parameters:")
            && line.contains(&format!("$1 = '{key}'"))
        {
            offsets.push(start);
        }
        previous_was_renew = line.contains("lease.renew(");
        start = end;
    }
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_reaches_the_server_after_a_release() {
    let cluster = common::cluster();
    let k = key("keep-quiet");
    let conninfo = format!("{} user={}", common::conninfo(&k), common::PROBE_ROLE)
        .replace("user=postgres ", "");
    let c = pglease::Client::connect(&conninfo).await.unwrap();
    let ttl = Duration::from_millis(600);
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");
    eventually("three logged renewals", Duration::from_secs(15), || {
        let k = &k;
        async move { (logged_renewals(&cluster.log(), k).len() >= 3).then_some(()) }
    })
    .await;
    lease.release().await.unwrap();
    let released_at = cluster.log().len();
    // Watch for 6 renewal intervals: nothing of ours may arrive.
    tokio::time::sleep(ttl * 2).await;
    let log = cluster.log();
    let late: Vec<usize> = logged_renewals(&log, &k)
        .into_iter()
        .filter(|&at| at >= released_at)
        .collect();
    assert!(
        late.is_empty(),
        "renewals after the release: {}",
        &log[released_at..]
    );
    assert_eq!(c.live_keepalives(), 0);
}
