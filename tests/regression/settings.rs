//! The installing role's settings (0.7.0, SEMANTICS §8.4–8.5): the ttl cap and failover quarantine
//! (lease.configure, lease.configuration) and the min epoch (lease.raise_min_epoch,
//! lease.high_water). Settings are database-wide, so every test here has its own database.
//! (A quarantine needs a promotion: the failure suite's failover tests cover it.)

use pglease_tests::{ADMIN, APP, expect_error, server, state_of};

use crate::{grant, inspect, lapse, release, renew};

/// A fresh database with pg_lease, and connections as the installing role, the application role and
/// the superuser.
async fn fresh(
    label: &str,
) -> (
    tokio_postgres::Client,
    tokio_postgres::Client,
    tokio_postgres::Client,
) {
    let s = server();
    let db = s.fresh_db_with_extension(label);
    (
        s.connect_as(&db, ADMIN).await,
        s.connect_as(&db, APP).await,
        s.connect_super(&db).await,
    )
}

/// (max_ttl s, failover_quarantine s, timeline, quarantine_until is null, min_epoch).
async fn configuration(c: &tokio_postgres::Client) -> (Option<f64>, Option<f64>, i64, bool, i64) {
    let r = c
        .query_one(
            "SELECT extract(epoch FROM max_ttl)::float8, extract(epoch FROM failover_quarantine)::float8, \
                    timeline, quarantine_until IS NULL, min_epoch FROM lease.configuration()",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

#[tokio::test]
async fn defaults_are_no_cap_no_quarantine_and_the_timeline_band() {
    let (_, app, _) = fresh("settings_defaults").await;
    assert_eq!(configuration(&app).await, (None, None, 1, true, 0));
    // A ttl of a whole year is still allowed.
    grant(&app, "k", "w", "365 days").await;
}

#[tokio::test]
async fn configure_sets_the_cap_and_the_quarantine_and_returns_them() {
    let (admin, app, _) = fresh("settings_configure").await;
    let r = admin
        .query_one(
            "SELECT extract(epoch FROM max_ttl)::float8, extract(epoch FROM failover_quarantine)::float8, \
                    quarantine_until IS NULL FROM lease.configure('30 s', '45 s')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.get::<_, Option<f64>>(0),
            r.get::<_, Option<f64>>(1),
            r.get::<_, bool>(2)
        ),
        (Some(30.0), Some(45.0), true),
        "turning the quarantine on starts none on the current timeline"
    );
    assert_eq!(
        configuration(&app).await,
        (Some(30.0), Some(45.0), 1, true, 0)
    );
    // New grants go on as before: no quarantine without a promotion.
    grant(&app, "k", "w", "30 s").await;
    // Off again ('0': a NULL quarantine would keep it), and no cap.
    admin
        .batch_execute("SELECT lease.configure(NULL, '0')")
        .await
        .unwrap();
    assert_eq!(configuration(&app).await, (None, None, 1, true, 0));
    grant(&app, "long", "w", "300 days").await;
}

/// The audit's reproduction: `configure(max_ttl)` with one argument used to turn the failover
/// quarantine off. An omitted (or NULL) quarantine keeps the current one; only '0' turns it off;
/// removing the cap while a quarantine needs it is refused.
#[tokio::test]
async fn changing_only_the_cap_keeps_the_failover_quarantine() {
    let (admin, app, _) = fresh("settings_keep_quarantine").await;
    admin
        .batch_execute("SELECT lease.configure('10 s', '20 s')")
        .await
        .unwrap();
    for sql in [
        "SELECT lease.configure('15 s')",
        "SELECT lease.configure('12 s', NULL)",
        "SELECT lease.configure(max_ttl => '11 s')",
    ] {
        admin.batch_execute(sql).await.unwrap();
        assert_eq!(
            configuration(&app).await.1,
            Some(20.0),
            "{sql} kept the quarantine"
        );
    }
    // A cap the kept quarantine is shorter than, or no cap at all: refused, nothing changed.
    let before = configuration(&app).await;
    for (sql, violation) in [
        (
            "SELECT lease.configure('30 s')",
            "failover_quarantine must be at least max_ttl",
        ),
        (
            "SELECT lease.configure(NULL)",
            "failover_quarantine needs max_ttl",
        ),
    ] {
        let e = expect_error(&admin, sql).await;
        assert_eq!(e.code, "22023", "{sql}");
        assert!(e.detail.unwrap_or_default().contains(violation), "{sql}");
        assert_eq!(configuration(&app).await, before, "{sql} changed nothing");
    }
    // Off explicitly, then the cap may go too.
    admin
        .batch_execute("SELECT lease.configure('11 s', '0')")
        .await
        .unwrap();
    assert_eq!(configuration(&app).await.1, None);
    admin
        .batch_execute("SELECT lease.configure(NULL)")
        .await
        .unwrap();
    assert_eq!(configuration(&app).await.0, None);
}

#[tokio::test]
async fn invalid_settings_get_22023_naming_each_violation_and_change_nothing() {
    let (admin, app, _) = fresh("settings_invalid").await;
    admin
        .batch_execute("SELECT lease.configure('1 minute', '2 minutes')")
        .await
        .unwrap();
    let before = configuration(&app).await;
    for (sql, violations) in [
        (
            "SELECT lease.configure('0 s')",
            vec!["max_ttl must be positive"],
        ),
        (
            "SELECT lease.configure('366 days')",
            vec!["max_ttl must be at most 365 days"],
        ),
        (
            "SELECT lease.configure(NULL, '1 minute')",
            vec!["failover_quarantine needs max_ttl"],
        ),
        (
            "SELECT lease.configure('1 minute', '59 s')",
            vec!["failover_quarantine must be at least max_ttl"],
        ),
        (
            "SELECT lease.configure('-1 s', '-1 s')",
            vec![
                "max_ttl must be positive",
                "failover_quarantine must be positive",
            ],
        ),
    ] {
        let e = expect_error(&admin, sql).await;
        assert_eq!(e.code, "22023", "{sql}");
        let detail = e.detail.unwrap_or_default();
        for v in violations {
            assert!(detail.contains(v), "{sql}: {detail:?} names {v:?}");
        }
        assert_eq!(configuration(&app).await, before, "{sql} changed nothing");
    }
}

#[tokio::test]
async fn every_call_that_sets_a_ttl_refuses_one_above_the_cap_and_changes_nothing() {
    let (admin, app, su) = fresh("settings_cap").await;
    let epoch = grant(&app, "held", "w", "1 hour").await;
    admin
        .batch_execute("SELECT lease.configure('10 minutes')")
        .await
        .unwrap();
    let before = state_of(&su, "").await;
    for sql in [
        "SELECT lease.acquire('new', 'w', '11 minutes')".to_owned(),
        "SELECT lease.acquire('new', 'w', '11 minutes', '1 s')".to_owned(),
        format!("SELECT lease.renew('held', 'w', {epoch}, '11 minutes')"),
        format!(
            "SELECT * FROM lease.renew_many('w', ARRAY['held'], ARRAY[{epoch}::bigint], '11 minutes')"
        ),
        "SELECT lease.acquire_slot('sem', 'w', '11 minutes', 2)".to_owned(),
        // The same owner's idempotent acquire is refused too: its ttl is checked before anything.
        "SELECT lease.acquire('held', 'w', '11 minutes')".to_owned(),
    ] {
        let e = expect_error(&app, &sql).await;
        assert_eq!(e.code, "22023", "{sql}");
        assert!(
            e.detail
                .as_deref()
                .unwrap_or_default()
                .contains("ttl must be at most max_ttl"),
            "{sql}: {:?}",
            e.detail
        );
        assert_eq!(state_of(&su, "").await, before, "{sql} changed nothing");
    }
    // At the cap is fine, and the lease granted before the cap keeps its longer expiry.
    assert_eq!(renew(&app, "held", "w", epoch, "10 minutes").await.0, "ok");
    grant(&app, "new", "w", "10 minutes").await;
    assert!(inspect(&app, "held").await.unwrap().0);
}

/// Every call that sets a ttl judges it by the settings committed when it runs, in a session that
/// made the same calls before anything was configured (its plans cached, its fast path taken) as in
/// any other: a cap not committed yet does not apply, a committed one does, a cleared one no more.
#[tokio::test]
async fn a_cap_applies_from_the_commit_of_configure_to_sessions_that_ran_before_it() {
    let (admin, app, _) = fresh("settings_cap_commit").await;
    let epoch = grant(&app, "held", "w", "1 hour").await;
    let calls = |ttl: &str| {
        [
            format!("SELECT lease.acquire('new', 'w', '{ttl}')"),
            format!("SELECT lease.acquire('new', 'w', '{ttl}', '1 s')"),
            format!("SELECT lease.renew('held', 'w', {epoch}, '{ttl}')"),
            format!(
                "SELECT * FROM lease.renew_many('w', ARRAY['held'], ARRAY[{epoch}::bigint], '{ttl}')"
            ),
            format!("SELECT lease.acquire_slot('sem', 'w', '{ttl}', 2)"),
        ]
    };
    let all_succeed = |why: &'static str| {
        let app = &app;
        let calls = calls("11 minutes");
        async move {
            for sql in calls {
                if let Err(e) = app.batch_execute(&sql).await {
                    panic!("{why}: {sql}: {e:?}");
                }
            }
        }
    };
    all_succeed("nothing configured").await;
    admin
        .batch_execute("BEGIN; SELECT lease.configure('10 minutes')")
        .await
        .unwrap();
    all_succeed("a cap not committed yet").await;
    admin.batch_execute("COMMIT").await.unwrap();
    for sql in calls("11 minutes") {
        assert_eq!(
            expect_error(&app, &sql).await.code,
            "22023",
            "{sql}: the committed cap"
        );
    }
    admin
        .batch_execute("SELECT lease.configure(NULL)")
        .await
        .unwrap();
    all_succeed("the cap cleared").await;
}

#[tokio::test]
async fn the_cap_names_itself_alongside_other_violations() {
    let (admin, app, _) = fresh("settings_cap_detail").await;
    admin
        .batch_execute("SELECT lease.configure('10 s')")
        .await
        .unwrap();
    let e = expect_error(&app, "SELECT lease.acquire('k', '', '11 s')").await;
    assert_eq!(e.code, "22023");
    let detail = e.detail.unwrap();
    assert!(detail.contains("owner must not be empty"), "{detail}");
    assert!(detail.contains("ttl must be at most max_ttl"), "{detail}");
    let e = expect_error(&app, "SELECT lease.renew('', 'w', 1, '11 s')").await;
    let detail = e.detail.unwrap();
    assert!(detail.contains("key must not be empty"), "{detail}");
    assert!(detail.contains("ttl must be at most max_ttl"), "{detail}");
}

#[tokio::test]
async fn only_the_installing_role_may_configure_or_raise_the_min_epoch() {
    let (_, app, _) = fresh("settings_privileges").await;
    for sql in [
        "SELECT lease.configure('1 minute')",
        "SELECT lease.raise_min_epoch(100)",
    ] {
        assert_eq!(expect_error(&app, sql).await.code, "42501", "{sql}");
    }
    // Reading is for everyone.
    app.batch_execute("SELECT lease.configuration(); SELECT lease.high_water()")
        .await
        .unwrap();
}

#[tokio::test]
async fn raise_min_epoch_lifts_every_later_grant_new_free_and_lapsed_keys_alike() {
    let (admin, app, _) = fresh("settings_min_epoch").await;
    let e = grant(&app, "free", "w", "1 hour").await;
    release(&app, "free", "w", e).await;
    lapse(&app, "lapsed", "w").await;
    let held = grant(&app, "held", "w", "1 hour").await;
    let floor: i64 = admin
        .query_one("SELECT lease.raise_min_epoch(1000)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(floor, 1000);
    assert_eq!(configuration(&app).await.4, 1000);
    // The held grant keeps its epoch; renewals of it go on.
    assert_eq!(inspect(&app, "held").await.unwrap().2, held);
    assert_eq!(renew(&app, "held", "w", held, "1 hour").await.0, "ok");
    assert_eq!(grant(&app, "free", "v", "1 hour").await, 1000);
    assert_eq!(grant(&app, "new", "v", "1 hour").await, 1000);
    assert_eq!(grant(&app, "lapsed", "v", "1 hour").await, 1000);
    // After that, epochs count on as usual.
    release(&app, "new", "v", 1000).await;
    assert_eq!(grant(&app, "new", "u", "1 hour").await, 1002);
}

#[tokio::test]
async fn raise_min_epoch_never_lowers_and_refuses_invalid_values() {
    let (admin, app, su) = fresh("settings_min_epoch_down").await;
    let one = |sql: &'static str| {
        let admin = &admin;
        async move { admin.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(one("SELECT lease.raise_min_epoch(500)").await, 500);
    assert_eq!(
        one("SELECT lease.raise_min_epoch(10)").await,
        500,
        "never lowers"
    );
    let before = state_of(&su, "").await;
    for sql in [
        "SELECT lease.raise_min_epoch(NULL)",
        "SELECT lease.raise_min_epoch(-1)",
        "SELECT lease.raise_min_epoch(4611686018427387905)",
    ] {
        assert_eq!(expect_error(&admin, sql).await.code, "22023", "{sql}");
    }
    assert_eq!(state_of(&su, "").await, before);
    assert_eq!(configuration(&app).await.4, 500);
}

#[tokio::test]
async fn high_water_is_at_least_every_epoch_granted_released_or_purged() {
    let (admin, app, _) = fresh("settings_high_water").await;
    let high_water = async |c: &tokio_postgres::Client| -> i64 {
        c.query_one("SELECT lease.high_water()", &[])
            .await
            .unwrap()
            .get(0)
    };
    assert_eq!(high_water(&app).await, 0, "nothing granted yet");
    let mut top = 0;
    for _ in 0..3 {
        top = grant(&app, "cycled", "w", "1 hour").await;
        release(&app, "cycled", "w", top).await;
    }
    assert!(
        high_water(&app).await > top,
        "a released key's next epoch counts"
    );
    // Purged: its epochs survive in the purge floor.
    let purged: i64 = admin
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(purged, 1);
    assert!(high_water(&app).await > top);
    // The min epoch counts as reserved.
    admin
        .batch_execute("SELECT lease.raise_min_epoch(7000)")
        .await
        .unwrap();
    assert_eq!(high_water(&app).await, 6999);
    let e = grant(&app, "after", "w", "1 hour").await;
    assert_eq!(high_water(&app).await, e);
}

/// The quarantine's error never degrades into another one when its end is unknown (a NULL in a
/// RAISE option is PL/pgSQL's 22004, the defect class of FAILURE-MODEL.md D3).
#[tokio::test]
async fn the_quarantine_error_is_le004_even_without_a_known_end() {
    let (_, _, su) = fresh("settings_quarantine_error").await;
    let e = expect_error(
        &su,
        "SELECT lease._raise_quarantined('lease.acquire', 'k', 2, NULL)",
    )
    .await;
    assert_eq!(e.code, "LE004");
    assert!(e.detail.is_some());
}
