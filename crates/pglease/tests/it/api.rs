//! The client's surface: construction (version check, owner), try_acquire, inspect and list.

use std::time::Duration;

use pglease::Client;

use crate::common::{self, client, key, superuser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_checks_the_schema_version_unless_told_not_to() {
    let cluster = common::cluster();
    let db = key("api_bare").replace('-', "_");
    cluster
        .psql("postgres", &format!("CREATE DATABASE {db}"))
        .unwrap();
    let conninfo = common::conninfo_for(cluster, &db, &db);
    let e = Client::connect(&conninfo).await.unwrap_err();
    assert!(e.is_not_installed(), "{e}");
    let unchecked = Client::builder()
        .check_version(false)
        .connect(&conninfo)
        .await
        .unwrap();
    // Extension-less installation, then the check passes.
    let mut admin = common::raw(&conninfo).await;
    let installed = pglease::install(&mut admin).await.unwrap();
    assert_eq!(installed.via, pglease::Via::Script);
    let checked = Client::connect(&conninfo).await.unwrap();
    let lease = checked
        .try_acquire("k", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("free key");
    assert!(
        unchecked
            .try_acquire("k", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_owner_is_host_pid_random_and_can_be_overridden() {
    let k = key("api-owner");
    let a = client(&k).await;
    let b = client(&k).await;
    let pid = std::process::id().to_string();
    let parts: Vec<&str> = a.owner().rsplitn(3, ':').collect();
    assert_eq!(parts.len(), 3, "{}", a.owner());
    assert_eq!(parts[1], pid);
    assert_ne!(a.owner(), b.owner());
    let named = Client::builder()
        .owner("worker-7")
        .connect(&common::conninfo(&k))
        .await
        .unwrap();
    assert_eq!(named.owner(), "worker-7");
    let lease = named
        .try_acquire(&k, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.owner(), "worker-7");
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_returns_none_while_another_owner_holds_the_key() {
    let k = key("api-busy");
    let a = client(&format!("{k}-a")).await;
    let b = client(&format!("{k}-b")).await;
    let ttl = Duration::from_secs(10);
    let lease = a.try_acquire(&k, ttl).await.unwrap().unwrap();
    assert_eq!(lease.key(), k);
    assert_eq!(lease.ttl(), ttl);
    assert!(lease.is_held() && lease.valid_until().is_some() && lease.expires_at().is_some());
    assert!(b.try_acquire(&k, ttl).await.unwrap().is_none());
    let s = b.inspect(&k).await.unwrap().unwrap();
    assert!(s.held && s.owner.as_deref() == Some(a.owner()) && s.epoch == lease.epoch());
    let listed = b.list(Some(&k)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, k);
    lease.release().await.unwrap();
    let lease = b
        .try_acquire(&k, ttl)
        .await
        .unwrap()
        .expect("free after the release");
    drop(lease);
    let su = superuser().await;
    crate::common::eventually(
        "the dropped lease is released",
        Duration::from_secs(10),
        || {
            let (su, k) = (&su, &k);
            async move { common::state(su, k).await.filter(|s| !s.held).map(drop) }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_rejected_before_anything_is_sent() {
    let k = key("api-invalid");
    let c = client(&k).await;
    let e = c
        .try_acquire(&k, Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    let e = c.try_acquire("", Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(e.code(), Some(pglease::sqlstate::INVALID_INPUT), "{e}");
    let e = Client::builder()
        .renew_fraction(1.5)
        .connect(&common::conninfo(&k))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
}

/// The statements of `lease.*` calls prepared on the client's (only) pooled connection.
async fn prepared_lease_statements(client: &Client) -> Vec<String> {
    let conn = client.pool().get().await.unwrap();
    conn.query(
        "SELECT statement FROM pg_prepared_statements
          WHERE statement LIKE '%FROM lease.%' AND statement NOT LIKE '%pg_prepared_statements%'
          ORDER BY statement",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Outside pooler mode the client prepares each of its calls once per pooled connection (the
/// server parses and plans it once, not on every call); in pooler mode it sends unnamed statements
/// only, which a transaction-mode pooler can route anywhere.
#[tokio::test]
async fn a_direct_client_prepares_each_call_once_per_connection_and_pooler_mode_prepares_none() {
    for pooler in [false, true] {
        let k = key(if pooler { "unnamed" } else { "prepared" });
        let client = Client::builder()
            .max_connections(1)
            .pooler_mode(pooler)
            .connect(&common::conninfo(&k))
            .await
            .unwrap();
        for _ in 0..3 {
            let lease = client
                .try_acquire(&k, Duration::from_secs(30))
                .await
                .unwrap()
                .expect("free key");
            lease.renew().await.unwrap();
            lease.release().await.unwrap();
        }
        let prepared = prepared_lease_statements(&client).await;
        if pooler {
            assert!(prepared.is_empty(), "pooler mode prepared {prepared:?}");
        } else {
            for call in ["lease.acquire(", "lease.renew(", "lease.release("] {
                let n = prepared.iter().filter(|s| s.contains(call)).count();
                assert_eq!(n, 1, "{call} prepared {n} times: {prepared:?}");
            }
        }
        client.shutdown().await;
    }
}
