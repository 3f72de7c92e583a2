//! Clock behaviour: expiry is decided by the live server clock (`clock_timestamp()`), read anew by
//! every call; no client clock, transaction start time or time zone takes part (F21, F22).
//! Stepping the host clock is not tested (it would disturb everything else on the machine);
//! docs/FAILURE-MODEL.md states what a step does.

use std::time::{Duration, SystemTime};

use crate::node::Node;
use crate::{await_lapsed, grant, grant_until, renew};

/// F21: inside one long transaction, whose `now()` is frozen at its start, a lease still lapses on
/// the live clock: the expiry is bracketed by clock readings around the grant_until, and once the clock
/// passes it the lease reads as lapsed and renew says `lapsed`, though `now()` is still before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_follows_the_live_server_clock_even_inside_a_long_transaction() {
    let node = Node::start();
    let c = node.app().await;
    c.batch_execute("BEGIN").await.unwrap();
    let row = c
        .query_one("SELECT now(), clock_timestamp()", &[])
        .await
        .unwrap();
    let (start, before): (SystemTime, SystemTime) = (row.get(0), row.get(1));
    let (e, x) = grant_until(&c, "k", "worker-a", "200 milliseconds").await;
    let after: SystemTime = c
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    let ttl = Duration::from_millis(200);
    assert!(
        before + ttl <= x && x <= after + ttl,
        "expires_at is the server clock at the grant plus the ttl"
    );

    await_lapsed(&c, "k").await;
    let row = c
        .query_one(
            "SELECT now() = $1 AND now() < $2, clock_timestamp() >= $2",
            &[&start, &x],
        )
        .await
        .unwrap();
    let (frozen_before_expiry, clock_past): (bool, bool) = (row.get(0), row.get(1));
    assert!(
        frozen_before_expiry && clock_past,
        "transaction time still before the expiry, live clock past it"
    );
    assert_eq!(renew(&c, "k", "worker-a", e, "1 hour").await.0, "lapsed");
    let e2 = grant(&c, "k", "worker-b", "1 hour").await;
    assert_eq!(
        e2,
        e + 1,
        "lazily lapsed, granted on, within one transaction"
    );
    c.batch_execute("COMMIT").await.unwrap();
}

/// F22: no call accepts a point in time (keys, owners, epochs, limits, data and durations only), and sessions in
/// time zones 26 hours apart see the same expiry instant and the same verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_takes_a_client_time_and_time_zones_do_not_matter() {
    let node = Node::start();
    let su = node.superuser().await;
    let rows = su
        .query(
            "SELECT p.proname::text, \
                    bool_and(ty.typcategory <> 'D' \
                             AND coalesce(el.typcategory, 'X') <> 'D') \
               FROM pg_proc AS p \
               JOIN pg_namespace AS n ON n.oid = p.pronamespace \
               LEFT JOIN LATERAL unnest(p.proargtypes::oid[]) AS t ON true \
               LEFT JOIN pg_type AS ty ON ty.oid = t \
               LEFT JOIN pg_type AS el ON el.oid = ty.typelem AND ty.typelem <> 0 \
              WHERE n.nspname = 'lease' AND p.proname !~ '^_' \
              GROUP BY p.oid, p.proname ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    for core in [
        "acquire", "renew", "release", "inspect", "list", "purge", "fence",
    ] {
        assert!(names.iter().any(|n| n == core), "lease.{core} is public");
    }
    for r in &rows {
        let only_allowed: Option<bool> = r.get(1);
        assert_ne!(
            only_allowed,
            Some(false),
            "lease.{} takes a date or time argument (only durations are allowed)",
            r.get::<_, String>(0)
        );
    }

    let east = node.app().await;
    east.batch_execute("SET TimeZone = 'Pacific/Kiritimati'")
        .await
        .unwrap();
    let west = node.app().await;
    west.batch_execute("SET TimeZone = 'Etc/GMT+12'")
        .await
        .unwrap();
    let (e, x) = grant_until(&east, "k", "worker-a", "1 hour").await;
    assert_eq!(
        crate::inspect(&west, "k").await,
        crate::held("worker-a", e, x),
        "the same instant, whatever the session's time zone"
    );
    assert!(
        !crate::acquire(&west, "k", "worker-b", "1 hour", "0")
            .await
            .0
    );
}
