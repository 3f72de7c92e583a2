//! The extension-less installer (managed PostgreSQL): the same script, run by the Rust crate.

use pglease::Via;
use pglease_tests::{ADMIN, APP, expect_error, server};

use crate::{grant, inspect, release};

#[tokio::test]
async fn installer_sets_up_a_database_that_has_no_extension_and_it_behaves_the_same() {
    let s = server();
    let db = s.fresh_db("script_install");
    let mut admin = s.connect_as(&db, ADMIN).await;
    let installed = pglease::install(&mut admin).await.unwrap();
    assert_eq!(
        (installed.version.as_str(), installed.via),
        (pglease::VERSION, Via::Script)
    );
    let in_catalog: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_catalog, 0, "no extension object: plain schema objects");

    let app = s.connect_as(&db, APP).await;
    assert_eq!(grant(&app, "k", "w", "1 hour").await, 1);
    assert_eq!(release(&app, "k", "w", 1).await, "ok");
    assert_eq!(inspect(&app, "k").await, Some((false, None, 2, None)));
    assert_eq!(
        expect_error(&app, "SELECT * FROM lease.leases").await.code,
        "42501"
    );
    assert_eq!(
        expect_error(&app, "SELECT * FROM lease.schema_migrations")
            .await
            .code,
        "42501"
    );
}

#[tokio::test]
async fn installing_twice_or_concurrently_applies_the_script_once() {
    let s = server();
    let db = s.fresh_db("script_twice");
    let mut handles = Vec::new();
    for _ in 0..3 {
        let db = db.clone();
        handles.push(tokio::spawn(async move {
            let mut c = server().connect_as(&db, ADMIN).await;
            pglease::install(&mut c).await.map(|i| i.via)
        }));
    }
    for h in handles {
        assert_eq!(h.await.unwrap().unwrap(), Via::Script);
    }
    let mut admin = s.connect_as(&db, ADMIN).await;
    assert_eq!(pglease::install(&mut admin).await.unwrap().via, Via::Script);
    let applied: Vec<String> = admin
        .query("SELECT version FROM lease.schema_migrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        applied,
        [pglease::VERSION],
        "the install script of the current version, applied and recorded once"
    );
}

#[tokio::test]
async fn installer_leaves_a_create_extension_installation_alone() {
    let s = server();
    let db = s.fresh_db_with_extension("script_over_ext");
    let mut admin = s.connect_as(&db, ADMIN).await;
    let installed = pglease::install(&mut admin).await.unwrap();
    assert_eq!(installed.via, Via::Extension);
    let app = s.connect_as(&db, APP).await;
    assert_eq!(
        pglease::check_version(&app).await.unwrap().version,
        pglease::VERSION
    );
}

/// The script path must produce the same API as CREATE EXTENSION: same functions, signatures,
/// results, volatility, SECURITY DEFINER, search_path and PUBLIC access; same tables and indexes.
#[tokio::test]
async fn script_and_extension_installs_define_the_same_api() {
    let s = server();
    let by_script = s.fresh_db("parity_script");
    pglease::install(&mut s.connect_as(&by_script, ADMIN).await)
        .await
        .unwrap();
    let by_extension = s.fresh_db_with_extension("parity_ext");
    let describe = "
        SELECT format('%s(%s) -> %s %s secdef=%s config=%s public_exec=%s',
                      p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                      p.provolatile, p.prosecdef, p.proconfig,
                      has_function_privilege('public', p.oid, 'EXECUTE'))
          FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
        UNION ALL
        SELECT format('%s %s', c.relname, pg_get_indexdef(i.indexrelid))
          FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid
         WHERE c.relnamespace = 'lease'::regnamespace AND c.relname <> 'schema_migrations'
        UNION ALL
        SELECT format('%s.%s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull)
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
         WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind = 'r' AND c.relname <> 'schema_migrations'
        ORDER BY 1";
    let lines = |db: String| async move {
        let c = server().connect_super(&db).await;
        c.query(describe, &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let (a, b) = (lines(by_script).await, lines(by_extension).await);
    assert!(a.len() > 10);
    assert_eq!(a, b);
}
