//! Privilege boundaries beyond tests/regression/privileges.rs: a role without privileges on schema
//! lease can neither create objects there nor change or take over the extension's objects, not even
//! by granting itself; and a role that may only CREATE in a database it does not own can install and
//! use the extension.

use pglease_tests::lapse::await_lapsed;
use pglease_tests::{ADMIN, APP, server};
use tokio_postgres::Client;

/// Runs `sql` as one transaction that must fail with `code`; rolls back afterwards.
pub async fn refused(c: &Client, sql: &str, code: &str) {
    let res = c.batch_execute(&format!("BEGIN; {sql}; COMMIT")).await;
    let _ = c.batch_execute("ROLLBACK").await;
    match res {
        Ok(()) => panic!("{sql} was allowed"),
        Err(e) => assert_eq!(
            e.code().map(|c| c.code().to_string()).as_deref(),
            Some(code),
            "{sql}: {e}"
        ),
    }
}

#[tokio::test]
async fn role_without_privileges_on_schema_lease_cannot_create_alter_or_take_over_anything() {
    let s = server();
    let db = s.fresh_db_with_extension("no_create_in_lease");
    let app = s.connect_as(&db, APP).await;
    for sql in [
        "CREATE TABLE lease.t (x int)",
        "CREATE VIEW lease.v AS SELECT 1 AS x",
        "CREATE SEQUENCE lease.s",
        "CREATE TYPE lease.t AS (x int)",
        "CREATE DOMAIN lease.d AS int",
        "CREATE FUNCTION lease.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE FUNCTION lease.cat(text, integer) RETURNS text LANGUAGE sql AS 'SELECT $1'",
        "CREATE OPERATOR lease.|| (leftarg = text, rightarg = integer, function = pg_catalog.textanycat)",
        "CREATE OR REPLACE FUNCTION lease.version() RETURNS text LANGUAGE sql AS $$SELECT 'x'$$",
        "CREATE INDEX ON lease.leases (owner)",
        "CREATE TRIGGER t BEFORE UPDATE ON lease.leases FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()",
        "CREATE POLICY p ON lease.leases USING (true)",
        "CREATE RULE r AS ON UPDATE TO lease.leases DO INSTEAD NOTHING",
        "ALTER TABLE lease.leases ADD COLUMN x int",
        "ALTER TABLE lease.leases DISABLE TRIGGER ALL",
        "ALTER TABLE lease.epoch_floor OWNER TO app",
        "ALTER FUNCTION lease.acquire(text, text, interval, interval, text) SECURITY INVOKER",
        "ALTER FUNCTION lease.acquire(text, text, interval, interval, text) SET search_path = public",
        "ALTER FUNCTION lease.purge(interval) OWNER TO app",
        "ALTER SCHEMA lease RENAME TO lease2",
        "ALTER SCHEMA lease OWNER TO app",
        "ALTER EXTENSION pg_lease UPDATE",
        "DROP FUNCTION lease.version()",
        "DROP TABLE lease.leases",
        "DROP SCHEMA lease CASCADE",
        "DROP EXTENSION pg_lease",
        "COMMENT ON TABLE lease.leases IS 'x'",
        "LOCK TABLE lease.leases IN ACCESS EXCLUSIVE MODE",
        "LOCK TABLE lease.epoch_floor IN SHARE MODE",
        "COPY lease.leases TO STDOUT",
        "SELECT * FROM lease.epoch_floor FOR KEY SHARE",
        "SELECT lease.purge('0')",
        // The grant history (0.9.0): read only through lease.history, written only by the API.
        "SELECT * FROM lease.grant_history",
        "INSERT INTO lease.grant_history (key, epoch, owner) VALUES ('k', 1, 'forged')",
        "UPDATE lease.grant_history SET ended_by = 'released'",
        "DELETE FROM lease.grant_history",
        "TRUNCATE lease.grant_history",
        "COPY lease.grant_history TO STDOUT",
        "ALTER TABLE lease.grant_history ADD COLUMN x int",
        "CREATE TRIGGER t BEFORE INSERT ON lease.grant_history FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()",
        "SELECT lease.configure_history(false)",
        "SELECT lease.configure_history(NULL, '1 day')",
        "ALTER FUNCTION lease.transfer(text, text, bigint, text, interval) SECURITY INVOKER",
        "ALTER FUNCTION lease.history(text, interval, text, integer) SET search_path = public",
        "ALTER FUNCTION lease.configure_history(boolean, interval) OWNER TO app",
        // The operator console's reads (0.10.0): no role may change how they run or what they read.
        "ALTER FUNCTION lease.browse(text, text, text, text, integer) SECURITY INVOKER",
        "ALTER FUNCTION lease.browse(text, text, text, text, integer) RESET plan_cache_mode",
        "ALTER FUNCTION lease.summary(interval) SET search_path = public",
        "ALTER TYPE lease.browse_entry ADD ATTRIBUTE x int",
        "CREATE OR REPLACE FUNCTION lease.summary(expiring_within interval DEFAULT '10 s') \
         RETURNS TABLE (held bigint, lapsed bigint, free bigint, expiring bigint, waiting bigint) \
         LANGUAGE sql AS $$ SELECT 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint $$",
    ] {
        refused(&app, sql, "42501").await;
    }
    // Granting oneself what one lacks fails or grants nothing (a warning); nothing changes.
    for sql in [
        "GRANT SELECT, UPDATE ON lease.leases TO app",
        "GRANT EXECUTE ON FUNCTION lease.purge(interval) TO app",
        "GRANT EXECUTE ON FUNCTION lease._refusal(text, text, text, bigint) TO app",
        "GRANT CREATE ON SCHEMA lease TO app",
        "GRANT SELECT, INSERT, UPDATE ON lease.grant_history TO app",
        "GRANT EXECUTE ON FUNCTION lease.configure_history(boolean, interval) TO app",
    ] {
        if let Err(e) = app.batch_execute(sql).await {
            assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{sql}: {e}");
        }
    }
    refused(&app, "SELECT * FROM lease.leases", "42501").await;
    refused(&app, "SELECT lease.purge('0')", "42501").await;
    refused(&app, "CREATE TABLE lease.t (x int)", "42501").await;
    refused(&app, "SELECT * FROM lease.grant_history", "42501").await;
    refused(&app, "SELECT lease.configure_history(false)", "42501").await;
    let n: i64 = app
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'lease'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(n >= 3, "the extension's relations are all still there");
}

#[tokio::test]
async fn extension_installs_for_a_role_with_create_on_a_database_it_does_not_own() {
    let s = server();
    let n = std::process::id();
    let db = format!("not_owned_{n}");
    s.psql("postgres", &format!("CREATE DATABASE {db}"));
    s.psql(
        "postgres",
        &format!("GRANT CREATE ON DATABASE {db} TO {ADMIN}"),
    );
    let admin = s.connect_as(&db, ADMIN).await;
    let owner: String = admin
        .query_one(
            "SELECT datdba::regrole::text FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        owner, "postgres",
        "the installer does not own this database"
    );
    admin
        .batch_execute("CREATE EXTENSION pg_lease")
        .await
        .unwrap();
    let r = admin
        .query_one(
            "SELECT extowner::regrole::text, extversion FROM pg_extension WHERE extname = 'pg_lease'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, String>(0), ADMIN);
    assert_eq!(r.get::<_, String>(1), pglease::VERSION);

    let app = s.connect_as(&db, APP).await;
    let epoch: i64 = app
        .query_one(
            "SELECT epoch FROM lease.acquire('k', 'w', '50 milliseconds')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 1);
    refused(&app, "SELECT lease.purge('0')", "42501").await;
    await_lapsed(&app, "k").await;
    let purged: i64 = admin
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(purged, 1);
    // The installer holds the grant option and can pass purge on.
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION lease.purge(interval) TO {APP}"
        ))
        .await
        .unwrap();
    let n: i64 = app
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let epoch: i64 = app
        .query_one("SELECT epoch FROM lease.acquire('k', 'w', '1 hour')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 2, "re-created above the purged epoch");
}
