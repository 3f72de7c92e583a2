//! The installing role as the attacker. Under `CREATE EXTENSION` (a trusted extension) the
//! SECURITY DEFINER functions run as the bootstrap superuser, so nothing they resolve may be
//! creatable, renameable or replaceable by the role that installed the extension (audit finding 1
//! of the hardening issue): not the schema, not a table, a helper, an overload or an operator. That
//! role keeps what an extension owner needs, and no more: it decides who may use the schema, it may
//! dump and restore the state, and it may drop the extension.

use pglease_tests::{ADMIN, APP, expect_error, server};
use tokio_postgres::Client;

use crate::privileges::refused;

/// Whether `role` is a superuser now.
async fn is_superuser(c: &Client, role: &str) -> bool {
    c.query_one("SELECT rolsuper FROM pg_roles WHERE rolname = $1", &[&role])
        .await
        .unwrap()
        .get(0)
}

/// The audit's reproduction, verbatim but for the role names: rename the schema, plant look-alikes
/// of the objects the functions name, call a function of the real schema.
const AUDIT_ATTACK: &str = "
    ALTER SCHEMA lease RENAME TO lease_real; CREATE SCHEMA lease;
    CREATE TABLE lease.leases (key text, owner text, epoch bigint, expires_at timestamptz);
    CREATE FUNCTION lease._text_violations(name text, value text, a boolean, b boolean) RETURNS text[]
      LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; RETURN '{}'; END $$;
    CREATE FUNCTION lease._raise_invalid_input(fn text, v text[]) RETURNS void LANGUAGE plpgsql
      AS $$ BEGIN END $$;
    SELECT * FROM lease_real.inspect('')";

#[tokio::test]
async fn the_installing_role_cannot_rename_the_schema_and_plant_look_alikes() {
    let s = server();
    let db = s.fresh_db_with_extension("audit_rename");
    let admin = s.connect_as(&db, ADMIN).await;
    let su = s.connect_super(&db).await;
    refused(&admin, AUDIT_ATTACK, "42501").await;
    // Step by step: each way in is closed on its own.
    refused(&admin, "ALTER SCHEMA lease RENAME TO lease_real", "42501").await;
    refused(
        &admin,
        "CREATE FUNCTION lease._text_violations(name text, value text, a boolean, b boolean) \
         RETURNS text[] LANGUAGE sql AS $$ SELECT '{}'::text[] $$",
        "42501",
    )
    .await;
    assert!(!is_superuser(&su, ADMIN).await);
    // The API is intact and still raises its own errors.
    assert_eq!(
        expect_error(&admin, "SELECT * FROM lease.inspect('')")
            .await
            .code,
        "22023"
    );
}

#[tokio::test]
async fn the_installing_role_can_create_rename_or_replace_nothing_in_schema_lease() {
    let s = server();
    let db = s.fresh_db_with_extension("installer_no_create");
    let admin = s.connect_as(&db, ADMIN).await;
    for sql in [
        "CREATE TABLE lease.t (x int)",
        "CREATE VIEW lease.v AS SELECT 1 AS x",
        "CREATE SEQUENCE lease.s",
        "CREATE TYPE lease.t AS (x int)",
        "CREATE DOMAIN lease.d AS int",
        "CREATE FUNCTION lease.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        // Overloads that would capture, or make ambiguous, other roles' calls and the blocking
        // acquire's own inner call.
        "CREATE FUNCTION lease.acquire(text, text, interval) RETURNS lease.acquire_result \
         LANGUAGE sql AS $$ SELECT true, 1::bigint, now() $$",
        "CREATE FUNCTION lease.renew(text, text, bigint, interval, int DEFAULT 0) \
         RETURNS lease.renew_result LANGUAGE sql AS $$ SELECT 'ok', now() $$",
        "CREATE FUNCTION lease._refusal(text, text, numeric) RETURNS text LANGUAGE sql AS $$ SELECT 'ok' $$",
        "CREATE OPERATOR lease.|| (leftarg = text, rightarg = integer, function = pg_catalog.textanycat)",
        "CREATE OPERATOR lease.= (leftarg = text, rightarg = text, function = pg_catalog.texteq)",
        "CREATE OR REPLACE FUNCTION lease.version() RETURNS text LANGUAGE sql AS $$SELECT 'x'$$",
        "CREATE OR REPLACE FUNCTION lease._refusal(key text, owner text, epoch bigint) RETURNS text \
         LANGUAGE sql AS $$ SELECT 'ok' $$",
        "CREATE INDEX ON lease.leases (owner)",
        "CREATE TRIGGER t BEFORE UPDATE ON lease.leases FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()",
        "CREATE POLICY p ON lease.leases USING (true)",
        "CREATE RULE r AS ON UPDATE TO lease.leases DO INSTEAD NOTHING",
        "CREATE STATISTICS lease.st ON key, owner FROM lease.leases",
        "ALTER TABLE lease.leases ADD COLUMN x int",
        "ALTER TABLE lease.leases RENAME TO leases_real",
        "ALTER TABLE lease.epoch_floor OWNER TO lease_admin",
        "ALTER TYPE lease.acquire_result RENAME TO acquire_result_real",
        "ALTER FUNCTION lease._text_violations(text, text, boolean, boolean) RENAME TO x",
        "ALTER FUNCTION lease.acquire(text, text, interval, interval, text) SECURITY INVOKER",
        "ALTER FUNCTION lease.acquire(text, text, interval, interval, text) SET search_path = public",
        "ALTER FUNCTION lease.purge(interval) OWNER TO lease_admin",
        "ALTER SCHEMA lease RENAME TO lease2",
        "ALTER SCHEMA lease OWNER TO lease_admin",
        "ALTER EXTENSION pg_lease DROP FUNCTION lease._refusal(text, text, text, bigint)",
        "DROP FUNCTION lease.version()",
        "DROP TABLE lease.leases",
        "DROP SCHEMA lease",
        "UPDATE lease.leases SET epoch = 0",
        "DELETE FROM lease.epoch_floor",
        "TRUNCATE lease.leases",
        "SELECT * FROM lease.epoch_floor FOR KEY SHARE",
        // The grant history: the installing role may read and append it (dump and restore), never
        // rewrite or shorten it but through the API (lease.purge and its retention).
        "UPDATE lease.grant_history SET ended_by = 'released'",
        "DELETE FROM lease.grant_history",
        "TRUNCATE lease.grant_history",
        "ALTER TABLE lease.grant_history ADD COLUMN x int",
        "CREATE TRIGGER t BEFORE INSERT ON lease.grant_history FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()",
        "CREATE FUNCTION lease.history(text, interval) RETURNS SETOF lease.history_entry \
         LANGUAGE sql AS $$ SELECT NULL::lease.history_entry $$",
        "ALTER FUNCTION lease.transfer(text, text, bigint, text, interval) SECURITY INVOKER",
        "ALTER FUNCTION lease.history(text, interval, text, integer) SET search_path = public",
        // The operator console's reads (0.10.0): an overload that would capture a short call, or a
        // change of how they run.
        "CREATE FUNCTION lease.browse(text) RETURNS SETOF lease.browse_entry \
         LANGUAGE sql AS $$ SELECT NULL::lease.browse_entry $$",
        "CREATE FUNCTION lease.summary() RETURNS TABLE (held bigint) LANGUAGE sql AS $$ SELECT 0::bigint $$",
        "ALTER FUNCTION lease.browse(text, text, text, text, integer) RESET plan_cache_mode",
        "ALTER FUNCTION lease.summary(interval) SECURITY INVOKER",
        "ALTER TYPE lease.browse_entry RENAME ATTRIBUTE state TO status",
    ] {
        refused(&admin, sql, "42501").await;
    }
    // Granting oneself CREATE grants nothing (a warning, or an error): creating stays refused.
    if let Err(e) = admin
        .batch_execute("GRANT CREATE ON SCHEMA lease TO lease_admin")
        .await
    {
        assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{e}");
    }
    refused(&admin, "CREATE TABLE lease.t (x int)", "42501").await;
    let foreign: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_depend d
              WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = 'lease'::regnamespace
                AND d.classid <> 'pg_extension'::regclass
                AND NOT EXISTS (SELECT FROM pg_depend m WHERE m.classid = d.classid
                                   AND m.objid = d.objid AND m.deptype = 'e')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        foreign, 0,
        "schema lease holds only the extension's objects"
    );
    // What an extension owner keeps: who may use the schema, dumping the state, dropping it all.
    admin
        .batch_execute(&format!(
            "REVOKE USAGE ON SCHEMA lease FROM PUBLIC; GRANT USAGE ON SCHEMA lease TO {APP}"
        ))
        .await
        .unwrap();
    admin
        .batch_execute("SELECT * FROM lease.leases, lease.epoch_floor")
        .await
        .unwrap();
    admin
        .batch_execute("DROP EXTENSION pg_lease")
        .await
        .unwrap();
}

#[tokio::test]
async fn installing_into_a_schema_with_planted_objects_is_refused_before_they_can_run() {
    let s = server();
    let db = s.fresh_db("planted_before_install");
    let admin = s.connect_as(&db, ADMIN).await;
    let su = s.connect_super(&db).await;
    admin
        .batch_execute(
            "CREATE SCHEMA lease;
             CREATE FUNCTION lease._refusal(key text, owner text, epoch numeric) RETURNS text
               LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; RETURN 'ok'; END $$;
             CREATE FUNCTION lease.\"=\"(oid, pg_catalog.regclass) RETURNS boolean
               LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; RETURN false; END $$;
             CREATE OPERATOR lease.= (leftarg = oid, rightarg = pg_catalog.regclass,
                                      function = lease.\"=\")",
        )
        .await
        .unwrap();
    assert_eq!(
        expect_error(&admin, "CREATE EXTENSION pg_lease").await.code,
        "55000",
        "the script refuses a schema that is not empty"
    );
    assert!(!is_superuser(&su, ADMIN).await, "no planted object ran");
    let installed: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(installed, 0);
}

#[tokio::test]
async fn updating_refuses_a_schema_with_foreign_objects_and_a_renamed_schema() {
    let s = server();
    let su_db = s.fresh_db("update_planted");
    let admin = s.connect_as(&su_db, ADMIN).await;
    let su = s.connect_super(&su_db).await;
    admin
        .batch_execute("CREATE EXTENSION pg_lease VERSION '0.3.0'")
        .await
        .unwrap();
    // 0.3.0 left the schema to the installing role: it could plant objects, before updating.
    admin
        .batch_execute(
            "CREATE FUNCTION lease._check_grant_args(fn text, key text, owner text, epoch numeric)
               RETURNS void LANGUAGE plpgsql
               AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; END $$",
        )
        .await
        .unwrap();
    let err = expect_error(&admin, "ALTER EXTENSION pg_lease UPDATE").await;
    assert_eq!(err.code, "55000", "{}", err.message);
    assert!(
        err.detail
            .as_deref()
            .is_some_and(|d| d.contains("_check_grant_args")),
        "the DETAIL names what was found: {:?}",
        err.detail
    );
    admin
        .batch_execute(
            "DROP FUNCTION lease._check_grant_args(text, text, text, numeric);
             ALTER SCHEMA lease RENAME TO lease_real; CREATE SCHEMA lease",
        )
        .await
        .unwrap();
    assert_eq!(
        expect_error(&admin, "ALTER EXTENSION pg_lease UPDATE")
            .await
            .code,
        "55000",
        "a renamed schema is refused"
    );
    assert!(!is_superuser(&su, ADMIN).await);
    let version: String = su
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "0.3.0", "nothing changed");
    // Undone, the update goes through and the schema passes to the superuser.
    admin
        .batch_execute(
            "DROP SCHEMA lease; ALTER SCHEMA lease_real RENAME TO lease; ALTER EXTENSION pg_lease UPDATE",
        )
        .await
        .unwrap();
    let owner: String = su
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'lease'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(owner, ADMIN);
}

#[tokio::test]
async fn the_installing_role_decides_who_may_call_the_api_also_after_an_update() {
    let s = server();
    for from in [None, Some("0.3.0")] {
        let db = s.fresh_db("installer_usage");
        let admin = s.connect_as(&db, ADMIN).await;
        match from {
            None => admin.batch_execute("CREATE EXTENSION pg_lease").await,
            Some(v) => {
                admin
                    .batch_execute(&format!(
                        "CREATE EXTENSION pg_lease VERSION '{v}';
                         REVOKE USAGE ON SCHEMA lease FROM PUBLIC;
                         GRANT USAGE ON SCHEMA lease TO {APP};
                         ALTER EXTENSION pg_lease UPDATE"
                    ))
                    .await
            }
        }
        .unwrap();
        // Reads of the state, of the grant history and of the console's views stand for every
        // call.
        let reads = [
            "SELECT * FROM lease.inspect('k')",
            "SELECT * FROM lease.history('k')",
            "SELECT * FROM lease.browse()",
            "SELECT * FROM lease.summary()",
        ];
        let app = s.connect_as(&db, APP).await;
        for sql in reads {
            app.batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("from {from:?}: {sql}: {e}"));
        }
        admin
            .batch_execute(&format!("REVOKE USAGE ON SCHEMA lease FROM PUBLIC, {APP}"))
            .await
            .unwrap();
        let app = s.connect_as(&db, APP).await;
        for sql in reads {
            assert_eq!(
                expect_error(&app, sql).await.code,
                "42501",
                "from {from:?}: {sql}: revoked by the installing role"
            );
        }
        admin
            .batch_execute(&format!("GRANT USAGE ON SCHEMA lease TO {APP}"))
            .await
            .unwrap();
        let app = s.connect_as(&db, APP).await;
        for sql in reads {
            app.batch_execute(sql).await.unwrap();
        }
    }
}

/// Whether `c` may create a function in schema `schema`: Ok, or the SQLSTATE of the refusal.
async fn can_create_in(c: &Client, schema: &str) -> Result<(), String> {
    let r = c
        .batch_execute(&format!(
            "CREATE FUNCTION {schema}.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'"
        ))
        .await;
    match r {
        Ok(()) => {
            c.batch_execute(&format!("DROP FUNCTION {schema}.planted()"))
                .await
                .unwrap();
            Ok(())
        }
        Err(e) => Err(pglease_tests::sqlstate(&e).unwrap_or_default()),
    }
}

/// Found by the queue's hostile suite: CREATE granted on a pre-created schema `lease` survived the
/// installation (ALTER SCHEMA ... OWNER keeps grants), so its grantee could plant objects the
/// functions resolve as the bootstrap superuser. 0.5.0 revokes such grants at installation, and
/// its update revokes CREATE from everyone but the owner, keeping who may use the API.
#[tokio::test]
async fn create_granted_on_a_pre_created_schema_does_not_survive_installation_or_the_update() {
    let s = server();
    let pregrant = "CREATE SCHEMA lease; GRANT USAGE, CREATE ON SCHEMA lease TO PUBLIC";

    // A fresh installation of the current version.
    let db = s.fresh_db("pregranted_fresh");
    let admin = s.connect_as(&db, ADMIN).await;
    let app = s.connect_as(&db, APP).await;
    admin.batch_execute(pregrant).await.unwrap();
    admin
        .batch_execute("CREATE EXTENSION pg_lease")
        .await
        .unwrap();
    assert_eq!(can_create_in(&app, "lease").await, Err("42501".into()));
    assert_eq!(can_create_in(&admin, "lease").await, Err("42501".into()));
    app.batch_execute("SELECT * FROM lease.inspect('k')")
        .await
        .unwrap();

    // 0.4.0's install script kept the grant; the update to the current version takes it away and
    // keeps USAGE. (0.4.0 is installed here through 0.1.0 and the upgrades — its own install
    // script is gone, ADR 0003 — which is why the state it left is made by hand: CREATE for PUBLIC
    // on the schema it took over.)
    let db = s.fresh_db("pregranted_update");
    let admin = s.connect_as(&db, ADMIN).await;
    let app = s.connect_as(&db, APP).await;
    admin.batch_execute(pregrant).await.unwrap();
    admin
        .batch_execute("CREATE EXTENSION pg_lease VERSION '0.4.0'")
        .await
        .unwrap();
    s.connect_super(&db)
        .await
        .batch_execute("GRANT CREATE ON SCHEMA lease TO PUBLIC")
        .await
        .unwrap();
    assert_eq!(can_create_in(&app, "lease").await, Ok(()), "the 0.4.0 hole");
    admin
        .batch_execute("ALTER EXTENSION pg_lease UPDATE")
        .await
        .unwrap();
    assert_eq!(can_create_in(&app, "lease").await, Err("42501".into()));
    app.batch_execute("SELECT * FROM lease.inspect('k')")
        .await
        .unwrap();
}
