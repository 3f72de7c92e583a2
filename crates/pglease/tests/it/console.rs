//! The operator console's reads (pg_lease 0.10.0): `browse` walks a prefix page by page with
//! `BrowseQuery::next_page`, each key held, lapsed or free with the fields its state has, the
//! filters select by state and owner; `summary` counts the keys in each state (in a database of
//! its own on the shared server: the counts are database-wide); invalid input is a typed error.

use std::time::Duration;

use pglease::{BrowseQuery, BrowsedLease, KeyState, LeaseCounts, sqlstate};

use crate::common::{cluster, conninfo_for, force_lapse, raw};

const HOUR: Duration = Duration::from_secs(3600);

/// A database of its own with pg_lease, on the shared server.
fn console_db() -> &'static str {
    static DB: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DB.get_or_init(|| {
        cluster()
            .psql("postgres", "CREATE DATABASE console")
            .expect("create database console");
        cluster()
            .psql("console", "CREATE EXTENSION pg_lease")
            .expect("install pg_lease in console");
    });
    "console"
}

/// `(key, state)` of each key, for readable assertions.
fn states(page: &[BrowsedLease]) -> Vec<(String, KeyState)> {
    page.iter().map(|k| (k.key.clone(), k.state)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_walks_the_pages_of_a_prefix_and_summary_counts_every_state() {
    let db = console_db();
    let su = raw(&conninfo_for(cluster(), db, "console-setup")).await;
    let client = pglease::Client::builder()
        .owner("console-viewer")
        .connect(&conninfo_for(cluster(), db, "console"))
        .await
        .unwrap();
    // job-00 .. job-11: held (a, b), released (free), lapsed, held and awaited; and another prefix.
    let mut want = Vec::new();
    for i in 0..12 {
        let k = format!("job-{i:02}");
        let owner = if i % 2 == 0 { "worker-a" } else { "worker-b" };
        let grant = pglease::acquire(&su, &k, owner, HOUR, Duration::ZERO)
            .await
            .unwrap()
            .expect("a new key is granted");
        let state = match i % 4 {
            0 | 1 => KeyState::Held,
            2 => {
                assert!(
                    pglease::release(&su, &k, owner, grant.epoch)
                        .await
                        .unwrap()
                        .is_ok()
                );
                KeyState::Free
            }
            _ => {
                force_lapse(&su, &k).await;
                KeyState::Lapsed
            }
        };
        want.push((k, state));
    }
    pglease::acquire(&su, "other-0", "worker-a", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    assert!(pglease::register_waiter(&su, "job-01").await.unwrap().held);

    // Pages of 5: 5 + 5 + 2, in key order, each key once; the free function reads the same.
    let mut query = Some(BrowseQuery::new().prefix("job-").limit(5));
    let mut pages = Vec::new();
    while let Some(q) = query {
        let page = client.browse(&q).await.unwrap();
        assert_eq!(page, pglease::browse(&su, &q).await.unwrap());
        query = q.next_page(&page);
        pages.push(page);
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [5, 5, 2]);
    let all: Vec<BrowsedLease> = pages.concat();
    assert_eq!(states(&all), want);
    for k in &all {
        match k.state {
            KeyState::Held => {
                assert!(k.owner.is_some() && k.expires_at.is_some() && k.last_owner.is_none());
            }
            KeyState::Lapsed => {
                assert!(k.owner.is_none() && k.expires_at.is_some());
                assert!(
                    k.last_owner
                        .as_deref()
                        .is_some_and(|o| o.starts_with("worker-"))
                );
            }
            KeyState::Free => {
                assert!(k.owner.is_none() && k.expires_at.is_none() && !k.waiting);
            }
        }
    }
    let awaited: Vec<&str> = all
        .iter()
        .filter(|k| k.waiting)
        .map(|k| k.key.as_str())
        .collect();
    assert_eq!(awaited, ["job-01"]);

    // Filters.
    let lapsed = client
        .browse(&BrowseQuery::new().state(KeyState::Lapsed))
        .await
        .unwrap();
    assert_eq!(
        states(&lapsed),
        [
            ("job-03".to_string(), KeyState::Lapsed),
            ("job-07".to_string(), KeyState::Lapsed),
            ("job-11".to_string(), KeyState::Lapsed),
        ]
    );
    let by_a = client
        .browse(&BrowseQuery::new().owner("worker-a"))
        .await
        .unwrap();
    let keys: Vec<&str> = by_a.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["job-00", "job-04", "job-08", "other-0"]);
    let after = client
        .browse(&BrowseQuery::new().after("job-10"))
        .await
        .unwrap();
    assert_eq!(states(&after)[0], ("job-11".to_string(), KeyState::Lapsed));

    // The counts of the whole database: 6 + 1 held, 3 lapsed, 3 free; one awaited.
    let counts = client.summary(Duration::from_secs(10)).await.unwrap();
    let mut want = LeaseCounts::default();
    (want.held, want.lapsed, want.free, want.waiting) = (7, 3, 3, 1);
    assert_eq!(counts, want);
    assert_eq!(counts.total(), 13);
    let within_two_hours = pglease::summary(&su, 2 * HOUR).await.unwrap();
    assert_eq!(
        within_two_hours.expiring, 7,
        "every held key lapses within 2 h"
    );

    // Invalid input: refused before sending, or by the server (22023), as a typed error.
    let e = client
        .browse(&BrowseQuery::new().limit(0))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let e = client
        .browse(&BrowseQuery::new().owner(""))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let e = client
        .summary(Duration::from_secs(366 * 86_400))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    assert_eq!(e.code(), Some(sqlstate::INVALID_INPUT));
}
