//! Upgrades: every released version updates along a linear chain to the current one, keeping state,
//! and ends with exactly the API a fresh installation has.

use pglease_tests::{ADMIN, APP, expect_error, server};

use crate::{grant, inspect, release, renew};

/// One line per function, table column and index of schema `lease` (what must match after upgrade).
async fn api_of(db: &str) -> Vec<String> {
    let c = server().connect_super(db).await;
    c.query(
        "SELECT format('%s(%s) -> %s %s secdef=%s config=%s acl=%s', p.proname,
                      pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                      p.provolatile, p.prosecdef, p.proconfig, p.proacl)
           FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
         UNION ALL
         SELECT format('%s.%s %s notnull=%s default=%s', c.relname, a.attname,
                       format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
           FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
           LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
          WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind = 'r'
         UNION ALL
         SELECT format('%s %s', c.relname, pg_get_indexdef(i.indexrelid))
           FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid
          WHERE c.relnamespace = 'lease'::regnamespace
         ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn the_update_chain_is_linear_from_every_version_to_the_default() {
    let s = server();
    let db = s.fresh_db("update_paths");
    let c = s.connect_super(&db).await;
    let rows = c
        .query(
            "SELECT source, target, path FROM pg_extension_update_paths('pg_lease') WHERE path IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    let versions: Vec<&str> = pglease::MIGRATIONS.iter().map(|m| m.to).collect();
    for (i, from) in versions.iter().enumerate() {
        for (j, to) in versions.iter().enumerate().skip(i + 1) {
            let expected = versions[i..=j].join("--");
            let path: Option<String> = rows
                .iter()
                .find(|r| r.get::<_, String>(0) == *from && r.get::<_, String>(1) == *to)
                .map(|r| r.get(2));
            assert_eq!(path.as_deref(), Some(expected.as_str()), "{from} -> {to}");
        }
    }
    // No path goes backwards.
    assert!(rows.iter().all(|r| {
        let (a, b): (String, String) = (r.get(0), r.get(1));
        versions.iter().position(|v| *v == a) < versions.iter().position(|v| *v == b)
    }));
}

#[tokio::test]
async fn updating_from_every_older_version_keeps_leases_and_ends_with_the_fresh_api() {
    let s = server();
    let fresh = s.fresh_db_with_extension("fresh_api");
    let expected = api_of(&fresh).await;
    for old in pglease::MIGRATIONS
        .iter()
        .map(|m| m.to)
        .filter(|v| *v != pglease::VERSION)
    {
        let db = s.fresh_db("updated");
        let admin = s.connect_as(&db, ADMIN).await;
        admin
            .batch_execute(&format!("CREATE EXTENSION pg_lease VERSION '{old}'"))
            .await
            .unwrap();
        // State made under the old version: a held key and a released one.
        assert_eq!(grant(&admin, "held", "w", "1 hour").await, 1);
        assert_eq!(grant(&admin, "freed", "w", "1 hour").await, 1);
        assert_eq!(release(&admin, "freed", "w", 1).await, "ok");

        admin
            .batch_execute("ALTER EXTENSION pg_lease UPDATE")
            .await
            .unwrap();
        assert_eq!(api_of(&db).await, expected, "API after updating from {old}");

        let app = s.connect_as(&db, APP).await;
        assert_eq!(
            renew(&app, "held", "w", 1, "1 hour").await.0,
            "ok",
            "held lease survives the update"
        );
        assert_eq!(inspect(&app, "freed").await, Some((false, None, 2, None)));
        assert_eq!(grant(&app, "freed", "w2", "1 hour").await, 3);
    }
}

/// Brings a fresh database to `version` by running the scripts of the chain by hand, as an older
/// pglease (installing without the extension files) would have.
async fn script_install_up_to(admin: &tokio_postgres::Client, version: &str) {
    let mut sql = String::from("BEGIN; CREATE SCHEMA lease; SET LOCAL search_path = lease;");
    for step in pglease::MIGRATIONS {
        let script: String = step
            .script
            .lines()
            .filter(|l| !l.starts_with("\\echo"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("-- pglease:extension-only\nSELECT pg_catalog.pg_extension_config_dump('lease.leases', '');", "")
            .replace(
                "-- pglease:extension-only\nSELECT pg_catalog.pg_extension_config_dump('lease.epoch_floor', 'WHERE NOT sentinel');",
                "",
            )
            .replace("@extowner@", ADMIN);
        sql.push_str(&script);
        sql.push(';');
        if step.to == version {
            break;
        }
    }
    sql.push_str(&format!(
        "CREATE TABLE lease.schema_migrations (version text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
             applied_by name NOT NULL DEFAULT current_user);
         INSERT INTO lease.schema_migrations (version) VALUES ('{version}'); COMMIT;"
    ));
    admin.batch_execute(&sql).await.unwrap();
}

#[tokio::test]
async fn script_installs_upgrade_through_the_same_chain() {
    let s = server();
    let db = s.fresh_db("script_upgrade");
    let mut admin = s.connect_as(&db, ADMIN).await;
    script_install_up_to(&admin, pglease::MIGRATIONS[0].to).await;
    assert_eq!(grant(&admin, "k", "w", "1 hour").await, 1);

    let installed = pglease::install(&mut admin).await.unwrap();
    assert_eq!(installed.version, pglease::VERSION);
    assert_eq!(
        pglease::check_version(&admin).await.unwrap().version,
        pglease::VERSION
    );
    assert_eq!(renew(&admin, "k", "w", 1, "1 hour").await.0, "ok");
}

/// Who may execute acquire and renew, as (function, grantee, grantable) lines.
async fn execute_grants(c: &tokio_postgres::Client) -> Vec<String> {
    c.query(
        "SELECT format('%s %s %s', p.proname,
                       CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
                       a.is_grantable)
           FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
          WHERE p.pronamespace = 'lease'::regnamespace AND p.proname IN ('acquire', 'renew')
          ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// 0.3.0 drops and re-creates acquire and renew (their return types changed); an administrator's
/// narrowing of who may call them must survive, on both installation paths.
#[tokio::test]
async fn updating_to_0_3_0_keeps_the_execute_privileges_of_acquire_and_renew() {
    let s = server();
    for via_script in [false, true] {
        let db = s.fresh_db("upgrade_acl");
        let mut admin = s.connect_as(&db, ADMIN).await;
        if via_script {
            script_install_up_to(&admin, "0.2.0").await;
        } else {
            admin
                .batch_execute("CREATE EXTENSION pg_lease VERSION '0.2.0'")
                .await
                .unwrap();
        }
        // acquire: only the application role, which may pass the grant on; renew: nobody but the
        // owner. (As a superuser: with the extension, the functions belong to the bootstrap superuser.)
        s.connect_super(&db)
            .await
            .batch_execute(&format!(
                "REVOKE EXECUTE ON FUNCTION lease.acquire(text, text, interval, interval) FROM PUBLIC;
                 GRANT EXECUTE ON FUNCTION lease.acquire(text, text, interval, interval) TO {APP}
                     WITH GRANT OPTION;
                 REVOKE EXECUTE ON FUNCTION lease.renew(text, text, bigint, interval) FROM PUBLIC;"
            ))
            .await
            .unwrap();
        let before = execute_grants(&s.connect_super(&db).await).await;
        assert!(
            !before.iter().any(|g| g.starts_with("renew PUBLIC")),
            "the narrowing took effect: {before:?}"
        );

        if via_script {
            pglease::install(&mut admin).await.unwrap();
        } else {
            admin
                .batch_execute("ALTER EXTENSION pg_lease UPDATE TO '0.3.0'")
                .await
                .unwrap();
        }
        let after = execute_grants(&s.connect_super(&db).await).await;
        assert_eq!(
            after, before,
            "privileges after the update (script: {via_script})"
        );

        let app = s.connect_as(&db, APP).await;
        assert_eq!(grant(&app, "k", "w", "1 hour").await, 1);
        let err = expect_error(
            &app,
            "SELECT * FROM lease.renew('k', 'w', 1, interval '1 hour')",
        )
        .await;
        assert_eq!(
            err.code, "42501",
            "renew stays closed to the application role"
        );
    }
}
