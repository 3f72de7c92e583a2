//! Privileges: the functions are the only way in; the extension is trusted.

use pglease_tests::{ADMIN, APP, SHARED_DB, expect_error, server};

use crate::grant;

#[tokio::test]
async fn application_role_cannot_read_or_write_the_lease_tables() {
    let c = server().app().await;
    for sql in [
        "SELECT * FROM lease.leases",
        "INSERT INTO lease.leases VALUES ('x', 'me', 1000, now() + interval '1 year')",
        "UPDATE lease.leases SET epoch = 1",
        "DELETE FROM lease.leases",
        "SELECT * FROM lease.epoch_floor",
        "UPDATE lease.epoch_floor SET floor = 0",
        "TRUNCATE lease.leases",
    ] {
        assert_eq!(expect_error(&c, sql).await.code, "42501", "{sql}");
    }
}

/// Every `lease._*` function of the installed version, not only those named above, is closed to the
/// application role and to PUBLIC.
#[tokio::test]
async fn no_internal_helper_of_pg_lease_is_executable_by_the_application_role() {
    let su = server().connect_super(SHARED_DB).await;
    let open: Vec<String> = su
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = 'lease'::regnamespace AND left(p.proname, 1) = '_'
                AND (has_function_privilege($1, p.oid, 'EXECUTE')
                     OR has_function_privilege('public', p.oid, 'EXECUTE'))
              ORDER BY 1",
            &[&APP],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(open.is_empty(), "executable helpers: {open:?}");
    let helpers: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_proc
              WHERE pronamespace = 'lease'::regnamespace AND left(proname, 1) = '_'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(helpers >= 10, "the helpers are there to check: {helpers}");
}

#[tokio::test]
async fn application_role_cannot_call_internal_helpers() {
    let c = server().app().await;
    for sql in [
        "SELECT lease._refusal('f', 'k', 'o', 1)",
        "SELECT lease._may_act_for('r')",
        "SELECT lease._raise_other_role('f', 'k', 'r')",
        "SELECT lease._ttl_cap_seconds()",
        "SELECT lease._pause_in_quarantine('f', 'k', now())",
        "SELECT lease._raise_invalid_input('x', ARRAY['y'])",
        "SELECT lease._text_violations('k', NULL, false, false)",
        "SELECT lease._interval_violations('ttl', NULL, true)",
        "SELECT lease._data_violations('x')",
        "SELECT lease._semaphore_violations('s')",
        "SELECT lease._slot_count_violations('slot', 0)",
        "SELECT lease._check_renew_many_args('o', '{}', '{}', '1 s')",
        "SELECT lease._renew_many_recheck()",
        "SELECT lease._renew_many_refusal('k', 'o', 1)",
        "SELECT lease._check_grant_args('f', 'k', 'o', 1, '1 s')",
        "SELECT lease._max_ttl_violations('1 s', '1 s')",
        "SELECT lease._timeline()",
        "SELECT lease._quarantine_end(1, '1 s', true)",
        "SELECT lease._raise_quarantined('f', 'k', 1, now())",
    ] {
        assert_eq!(expect_error(&c, sql).await.code, "42501", "{sql}");
    }
}

#[tokio::test]
async fn installing_role_is_not_a_superuser_and_may_only_read_and_append_the_tables() {
    let s = server();
    let admin = s.connect_as(SHARED_DB, ADMIN).await;
    let is_super: bool = admin
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!is_super);
    // Reading (pg_dump) and appending (restoring a dump) are the installing role's; changing or
    // removing what is there is nobody's but the functions'.
    for (table, column) in [
        ("lease.leases", "epoch"),
        ("lease.epoch_floor", "floor"),
        ("lease.settings", "min_epoch"),
    ] {
        admin
            .batch_execute(&format!("SELECT * FROM {table} LIMIT 1"))
            .await
            .unwrap();
        for change in [
            format!("UPDATE {table} SET {column} = {column}"),
            format!("DELETE FROM {table}"),
            format!("TRUNCATE {table}"),
        ] {
            assert_eq!(
                expect_error(&admin, &change).await.code,
                "42501",
                "{change}"
            );
        }
    }
}

#[tokio::test]
async fn non_superuser_with_create_on_the_database_installs_and_uses_the_extension() {
    let s = server();
    let db = s.fresh_db("trusted_install");
    let admin = s.connect_as(&db, ADMIN).await;
    admin
        .batch_execute("CREATE EXTENSION pg_lease")
        .await
        .unwrap();
    let owner: String = admin
        .query_one(
            "SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, ADMIN);
    let app = s.connect_as(&db, APP).await;
    assert_eq!(grant(&app, "k", "w", "1 minute").await, 1);
}

#[tokio::test]
async fn role_without_create_on_the_database_cannot_install() {
    let s = server();
    // PUBLIC has only CONNECT and TEMPORARY on a new database; app owns nothing here.
    let db = s.fresh_db("untrusted_install");
    let app = s.connect_as(&db, APP).await;
    assert_eq!(
        expect_error(&app, "CREATE EXTENSION pg_lease").await.code,
        "42501"
    );
}

#[tokio::test]
async fn every_api_function_is_security_definer_with_a_pinned_search_path() {
    let c = server().connect_super(SHARED_DB).await;
    let rows = c
        .query(
            "SELECT p.proname, p.prosecdef, p.proconfig
               FROM pg_proc p
              WHERE p.pronamespace = 'lease'::regnamespace AND left(p.proname, 1) <> '_' AND p.proname <> 'version'
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        names,
        [
            "acquire",
            "acquire_slot",
            "browse",
            "configuration",
            "configure",
            "configure_history",
            "fence",
            "force_release",
            "high_water",
            "history",
            "inspect",
            "list",
            "list_slots",
            "purge",
            "raise_min_epoch",
            "register_slot_waiter",
            "register_waiter",
            "release",
            "renew",
            "renew_many",
            "slot_key",
            "summary",
            "transfer",
            "watch"
        ]
    );
    for r in rows {
        let name: String = r.get(0);
        assert!(r.get::<_, bool>(1), "{name} is SECURITY DEFINER");
        let config: Vec<String> = r.get(2);
        let mut expected = vec!["search_path=pg_catalog, pg_temp".to_string()];
        if name == "renew_many" || name == "browse" {
            expected.push("plan_cache_mode=force_custom_plan".to_string());
        }
        assert_eq!(config, expected, "{name}");
    }
}
