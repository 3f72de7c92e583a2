//! Upgrades: every released version updates along a linear chain to the current one, keeping state,
//! and ends with exactly the API a fresh installation has.

use pglease_tests::{ADMIN, APP, expect_error, server};

use crate::{grant, inspect, release, renew};

/// One line per object of pg_lease's schema `lease` and per property that must match after an
/// upgrade: [`api_of_extension`] for pg_lease.
async fn api_of(db: &str) -> Vec<String> {
    api_of_extension(db, &pglease::PG_LEASE).await
}

/// One line per object of the schema of `ext` and per property that must match after an upgrade:
/// functions (signature, result, volatility, security, settings, privileges and the body itself, as
/// `md5(prosrc)`), the columns of tables and row types, constraints, indexes, storage options,
/// privileges and comments of relations, the schema's privileges, and what `pg_dump` keeps
/// (`pg_extension_config_dump`). So the full install script and the upgrade chain cannot drift.
pub(crate) async fn api_of_extension(db: &str, ext: &pglease::Extension) -> Vec<String> {
    let c = server().connect_super(db).await;
    // Privileges compare as sets: the order of an ACL's items depends on the order of the grants.
    c.batch_execute(
        "CREATE FUNCTION pg_temp.sorted_acl(acl aclitem[]) RETURNS text LANGUAGE sql AS
             $$ SELECT array_agg(a::text ORDER BY a::text)::text FROM unnest(acl) AS a $$",
    )
    .await
    .unwrap();
    let sql = format!(
        "SELECT format('%s(%s) -> %s %s secdef=%s config=%s acl=%s body=%s', p.proname,
                      pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                      p.provolatile, p.prosecdef, p.proconfig, pg_temp.sorted_acl(p.proacl), md5(p.prosrc))
           FROM pg_proc p WHERE p.pronamespace = '{schema}'::regnamespace
         UNION ALL
         SELECT format('%s.%s %s notnull=%s default=%s', c.relname, a.attname,
                       format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
           FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
           LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
          WHERE c.relnamespace = '{schema}'::regnamespace AND c.relkind IN ('r', 'c')
         UNION ALL
         SELECT format('%s %s', c.relname, pg_get_indexdef(i.indexrelid))
           FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid
          WHERE c.relnamespace = '{schema}'::regnamespace
         UNION ALL
         SELECT format('%s constraint %s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
           FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid
          WHERE c.relnamespace = '{schema}'::regnamespace
         UNION ALL
         SELECT format('%s kind=%s options=%s acl=%s comment=%s', c.relname, c.relkind, c.reloptions,
                       pg_temp.sorted_acl(c.relacl), obj_description(c.oid, 'pg_class'))
           FROM pg_class c
          WHERE c.relnamespace = '{schema}'::regnamespace
         UNION ALL
         SELECT format('schema {schema} acl=%s', pg_temp.sorted_acl(n.nspacl))
           FROM pg_namespace n WHERE n.nspname = '{schema}'
         UNION ALL
         SELECT format('dumped %s where=%s', cfg.rel::regclass, cfg.cond)
           FROM pg_extension e,
                unnest(e.extconfig::regclass[]::oid[], e.extcondition) AS cfg (rel, cond)
          WHERE e.extname = '{name}'
         ORDER BY 1",
        schema = ext.schema,
        name = ext.name,
    );
    c.query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The released versions of pg_lease, oldest first.
fn versions() -> Vec<&'static str> {
    pglease::PG_LEASE.versions()
}

#[tokio::test]
async fn the_update_chain_of_every_extension_is_linear_from_every_version_to_the_default() {
    let s = server();
    let db = s.fresh_db("update_paths");
    let c = s.connect_super(&db).await;
    for ext in pglease::EXTENSIONS {
        let rows = c
            .query(
                "SELECT source, target, path FROM pg_extension_update_paths($1) WHERE path IS NOT NULL",
                &[&ext.name],
            )
            .await
            .unwrap();
        let versions = ext.versions();
        assert_eq!(versions.last(), Some(&ext.version), "{}", ext.name);
        for (i, from) in versions.iter().enumerate() {
            for (j, to) in versions.iter().enumerate().skip(i + 1) {
                let expected = versions[i..=j].join("--");
                let path: Option<String> = rows
                    .iter()
                    .find(|r| r.get::<_, String>(0) == *from && r.get::<_, String>(1) == *to)
                    .map(|r| r.get(2));
                assert_eq!(
                    path.as_deref(),
                    Some(expected.as_str()),
                    "{}: {from} -> {to}",
                    ext.name
                );
            }
        }
        // Exactly those paths, none going backwards.
        let pairs = versions.len() * (versions.len() - 1) / 2;
        assert_eq!(rows.len(), pairs, "{}: update paths {rows:?}", ext.name);
    }
}

#[tokio::test]
async fn updating_from_every_older_version_keeps_leases_and_ends_with_the_fresh_api() {
    let s = server();
    let fresh = s.fresh_db_with_extension("fresh_api");
    let expected = api_of(&fresh).await;
    for old in versions().into_iter().filter(|v| *v != pglease::VERSION) {
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

        // Renewed by the role that made the grant: from 0.8.0 on, a grant is its login role's.
        assert_eq!(
            renew(&admin, "held", "w", 1, "1 hour").await.0,
            "ok",
            "held lease survives the update"
        );
        let app = s.connect_as(&db, APP).await;
        assert_eq!(inspect(&app, "freed").await, Some((false, None, 2, None)));
        // The console's calls (0.10.0) read the state made under the old version.
        let browsed: Vec<String> = app
            .query(
                "SELECT format('%s %s %s %s', key, state, coalesce(owner, '-'), epoch)
                   FROM lease.browse()",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(browsed, ["freed free - 2", "held held w 1"], "from {old}");
        let counts: String = app
            .query_one(
                "SELECT format('%s %s %s %s %s', held, lapsed, free, expiring, waiting)
                   FROM lease.summary()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(counts, "1 0 1 0 0", "from {old}");
        // The history began with 0.9.0. A database updated from an older version has the grants
        // held at the update (when they were made is not known), and a key released before it has
        // none until its next grant; one created at 0.9.0 or later recorded every grant as made.
        let position = |v: &str| versions().iter().position(|x| *x == v);
        let recorded_from_the_start = position(old) >= position("0.9.0");
        let history = |key: &'static str| {
            let app = &app;
            async move {
                app.query(
                    "SELECT format('%s %s granted_at=%s ended_by=%s', epoch, owner,
                                   granted_at IS NOT NULL, coalesce(ended_by, 'none'))
                       FROM lease.history($1)",
                    &[&key],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
            }
        };
        let (held, mut freed) = if recorded_from_the_start {
            (
                "1 w granted_at=t ended_by=none",
                vec!["1 w granted_at=t ended_by=released".to_string()],
            )
        } else {
            ("1 w granted_at=f ended_by=none", vec![])
        };
        assert_eq!(history("held").await, [held], "from {old}");
        assert_eq!(history("freed").await, freed, "from {old}");
        assert_eq!(grant(&app, "freed", "w2", "1 hour").await, 3);
        freed.push("3 w2 granted_at=t ended_by=none".into());
        assert_eq!(history("freed").await, freed, "from {old}");
    }
}

/// Brings a fresh database to `version` by running the scripts of the chain by hand (the first
/// release's install script, then each upgrade), as an older pglease (installing without the
/// extension files) would have.
async fn script_install_up_to(admin: &tokio_postgres::Client, version: &str) {
    let mut sql = String::from("BEGIN; CREATE SCHEMA lease; SET LOCAL search_path = lease;");
    let first = pglease::PG_LEASE.scripts[0];
    let chain = std::iter::once(&first).chain(
        pglease::PG_LEASE
            .scripts
            .iter()
            .filter(|m| m.from.is_some()),
    );
    for step in chain {
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
            .replace(
                "-- pglease:extension-only\nSELECT pg_catalog.pg_extension_config_dump('lease.settings', '');",
                "",
            )
            .replace(
                "-- pglease:extension-only\nSELECT pg_catalog.pg_extension_config_dump('lease.grant_history', '');",
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
    script_install_up_to(&admin, versions()[0]).await;
    assert_eq!(grant(&admin, "k", "w", "1 hour").await, 1);

    let installed = pglease::install(&mut admin).await.unwrap();
    assert_eq!(installed.version, pglease::VERSION);
    assert_eq!(
        pglease::check_version(&admin).await.unwrap().version,
        pglease::VERSION
    );
    assert_eq!(renew(&admin, "k", "w", 1, "1 hour").await.0, "ok");
}

/// The same as `updating_from_every_older_version_keeps_leases_and_ends_with_the_fresh_api`, for
/// databases without the extension files: a script install of every older version, upgraded by the
/// installer, has exactly the API of a fresh script install (the installer's own bookkeeping table,
/// which the hand-made old installs create differently, aside).
#[tokio::test]
async fn script_installs_upgraded_from_every_older_version_end_with_the_fresh_api() {
    let s = server();
    let fresh = s.fresh_db("fresh_script_api");
    pglease::install(&mut s.connect_as(&fresh, ADMIN).await)
        .await
        .unwrap();
    let api = |lines: Vec<String>| -> Vec<String> {
        lines
            .into_iter()
            .filter(|l| !l.starts_with("schema_migrations"))
            .collect()
    };
    let expected = api(api_of(&fresh).await);
    for old in versions().into_iter().filter(|v| *v != pglease::VERSION) {
        let db = s.fresh_db("script_updated");
        let mut admin = s.connect_as(&db, ADMIN).await;
        script_install_up_to(&admin, old).await;
        pglease::install(&mut admin).await.unwrap();
        assert_eq!(
            api(api_of(&db).await),
            expected,
            "API after the installer upgraded a script install of {old}"
        );
    }
}

/// Who may execute acquire and renew, as (function, grantee, grantable) lines.
async fn execute_grants(c: &tokio_postgres::Client, functions: &[&str]) -> Vec<String> {
    let functions: Vec<String> = functions.iter().map(|f| (*f).to_owned()).collect();
    c.query(
        "SELECT format('%s %s %s', p.proname,
                       CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
                       a.is_grantable)
           FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
          WHERE p.pronamespace = 'lease'::regnamespace AND p.proname = ANY($1)
          ORDER BY 1",
        &[&functions],
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
        let before = execute_grants(&s.connect_super(&db).await, &["acquire", "renew"]).await;
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
        let after = execute_grants(&s.connect_super(&db).await, &["acquire", "renew"]).await;
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

/// The functions 0.6.0 drops and re-creates.
const RECREATED_IN_0_6_0: &[&str] = &["acquire", "renew", "inspect", "list"];

/// 0.6.0 drops and re-creates acquire, renew, inspect and list (a `data` parameter, a `data`
/// column); an administrator's narrowing of who may call them must survive, on both installation
/// paths, and the upgrade must leave no helper behind that anyone could call.
#[tokio::test]
async fn updating_to_0_6_0_keeps_the_execute_privileges_of_the_functions_it_recreates() {
    let s = server();
    for via_script in [false, true] {
        let db = s.fresh_db("upgrade_acl_060");
        let mut admin = s.connect_as(&db, ADMIN).await;
        if via_script {
            script_install_up_to(&admin, "0.5.0").await;
        } else {
            admin
                .batch_execute("CREATE EXTENSION pg_lease VERSION '0.5.0'")
                .await
                .unwrap();
        }
        s.connect_super(&db)
            .await
            .batch_execute(&format!(
                "REVOKE EXECUTE ON FUNCTION lease.acquire(text, text, interval, interval) FROM PUBLIC;
                 GRANT EXECUTE ON FUNCTION lease.acquire(text, text, interval, interval) TO {APP}
                     WITH GRANT OPTION;
                 REVOKE EXECUTE ON FUNCTION lease.renew(text, text, bigint, interval) FROM PUBLIC;
                 REVOKE EXECUTE ON FUNCTION lease.inspect(text) FROM PUBLIC;
                 GRANT EXECUTE ON FUNCTION lease.inspect(text) TO {APP};"
            ))
            .await
            .unwrap();
        let before = execute_grants(&s.connect_super(&db).await, RECREATED_IN_0_6_0).await;
        assert!(
            before.iter().any(|g| g == "list PUBLIC f"),
            "list keeps the default: {before:?}"
        );
        if via_script {
            pglease::install(&mut admin).await.unwrap();
        } else {
            admin
                .batch_execute("ALTER EXTENSION pg_lease UPDATE TO '0.6.0'")
                .await
                .unwrap();
        }
        let su = s.connect_super(&db).await;
        let after = execute_grants(&su, RECREATED_IN_0_6_0).await;
        assert_eq!(
            after, before,
            "privileges after the update (script: {via_script})"
        );
        let leftovers: i64 = su
            .query_one(
                "SELECT count(*) FROM pg_proc
                  WHERE pronamespace = 'lease'::regnamespace AND proname = '_grant_usage_as_installer'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(leftovers, 0, "the update leaves no installer helper behind");

        let app = s.connect_as(&db, APP).await;
        assert_eq!(grant(&app, "k", "w", "1 hour").await, 1);
        assert_eq!(
            inspect(&app, "k").await.map(|i| i.0),
            Some(true),
            "inspect stays open to the application role"
        );
        for closed in [
            "SELECT * FROM lease.renew('k', 'w', 1, interval '1 hour')",
            "SELECT * FROM lease.renew('k', 'w', 1, interval '1 hour', 'data')",
        ] {
            assert_eq!(expect_error(&app, closed).await.code, "42501", "{closed}");
        }
    }
}
