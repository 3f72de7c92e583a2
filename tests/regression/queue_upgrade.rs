//! pg_lease_queue's upgrades: every released version updates, with the extension files and without
//! them, to exactly the API of a fresh installation, with the messages in flight at the update (an
//! open batch, a message awaiting its retry, a dead letter) delivered and acked afterwards and the
//! acked counters (0.2.0) counting from the update; 0.2.0 re-creates status() and keeps who may
//! execute it.

use pglease_tests::{ADMIN, APP, OTHER_APP, expect_error, server};
use tokio_postgres::Client;

use crate::queue::key_in;
use crate::upgrade::api_of_extension;

/// The released versions of pg_lease_queue older than the current one, oldest first.
fn older_versions() -> Vec<&'static str> {
    let ext = &pglease::PG_LEASE_QUEUE;
    ext.versions()
        .into_iter()
        .filter(|v| *v != ext.version)
        .collect()
}

/// `script` as the script installer runs it (as `Extension::transform` does): `\echo` lines and
/// the statement after each `-- pglease:extension-only` line dropped, `@extowner@` substituted.
fn as_the_installer_runs_it(script: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in script.lines() {
        if skipping {
            skipping = !line.trim_end().ends_with(';');
        } else if line.trim() == "-- pglease:extension-only" {
            skipping = true;
        } else if !line.starts_with("\\echo") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.replace("@extowner@", ADMIN)
}

/// Brings a database with pg_lease (script-installed) to pg_lease_queue `version` by running the
/// scripts of the chain by hand, as an older pglease would have (without the extension files).
async fn script_install_queue_up_to(admin: &Client, version: &str) {
    let ext = &pglease::PG_LEASE_QUEUE;
    let first = ext.scripts[0];
    let chain = std::iter::once(&first).chain(ext.scripts.iter().filter(|m| m.from.is_some()));
    let mut sql = String::from(
        "BEGIN; CREATE SCHEMA lease_queue; SET LOCAL search_path = lease_queue, pg_temp;",
    );
    let mut applied = Vec::new();
    for step in chain {
        sql.push_str(&as_the_installer_runs_it(step.script));
        sql.push(';');
        applied.push(step.to);
        if step.to == version {
            break;
        }
    }
    sql.push_str(
        "CREATE TABLE lease_queue.schema_migrations (version text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
             applied_by name NOT NULL DEFAULT current_user);
         REVOKE ALL ON TABLE lease_queue.schema_migrations FROM PUBLIC;",
    );
    for v in applied {
        sql.push_str(&format!(
            "INSERT INTO lease_queue.schema_migrations (version) VALUES ('{v}');"
        ));
    }
    sql.push_str("COMMIT;");
    admin.batch_execute(&sql).await.unwrap();
}

/// `api_of_extension` of pg_lease_queue without the script installer's bookkeeping table.
async fn queue_api(db: &str) -> Vec<String> {
    api_of_extension(db, &pglease::PG_LEASE_QUEUE)
        .await
        .into_iter()
        .filter(|l| !l.starts_with("schema_migrations"))
        .collect()
}

/// `got` equals the fresh installation's API `expected`; a difference is shown as the lines only
/// one of them has.
fn assert_same_api(got: &[String], expected: &[String], how: &str) {
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|l| !b.contains(l)).cloned().collect()
    };
    assert!(
        got == expected,
        "API {how}: only in the updated one: {:#?}\nonly in the fresh one: {:#?}",
        only(got, expected),
        only(expected, got)
    );
}

async fn one_i64(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// A queue `orders` (2 partitions, max_attempts 2) in flight, made by the installing role under
/// whatever version is installed: in partition 0 an open batch (key `a`: a1, a2) and a3 pending
/// behind it; in partition 1 a dead letter (key `d`, nacked twice) and a message awaiting its retry
/// (key `r`, nacked once, due at once). Returns the epochs of partitions 0 and 1 and the open
/// batch's id.
async fn make_in_flight(admin: &Client) -> (i64, i64, i64) {
    let (a, d, r) = (key_in("a", 0, 2), key_in("d", 1, 2), key_in("r", 1, 2));
    admin
        .batch_execute("SELECT lease_queue.create_queue('orders', 2, 2)")
        .await
        .unwrap();
    let send = |key: &str, label: &str| {
        format!("SELECT lease_queue.send('orders', '{key}', to_jsonb('{label}'::text));")
    };
    let claim = "SELECT epoch FROM lease_queue.claim('orders', $1, 'w', '1 hour') WHERE claimed";
    let receive =
        "SELECT batch_id, id, payload #>> '{}' FROM lease_queue.receive('orders', $1, 'w', $2, 10)";
    let e1: i64 = admin.query_one(claim, &[&1i32]).await.unwrap().get(0);
    let cycle = |label: &'static str, outcome: &'static str| async move {
        let rows = admin.query(receive, &[&1i32, &e1]).await.unwrap();
        assert_eq!(rows.len(), 1);
        let (batch, id, got): (i64, i64, String) = (rows[0].get(0), rows[0].get(1), rows[0].get(2));
        assert_eq!(got, label);
        let state: String = admin
            .query_one(
                "SELECT lease_queue.nack('orders', 1, 'w', $1, $2, $3)",
                &[&e1, &batch, &id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(state, outcome, "{label}");
        admin
            .execute(
                "SELECT lease_queue.ack('orders', 1, 'w', $1, $2)",
                &[&e1, &batch],
            )
            .await
            .unwrap();
    };
    admin.batch_execute(&send(&d, "d1")).await.unwrap();
    cycle("d1", "retrying").await;
    cycle("d1", "dead_lettered").await;
    admin.batch_execute(&send(&r, "r1")).await.unwrap();
    cycle("r1", "retrying").await;

    for label in ["a1", "a2"] {
        admin.batch_execute(&send(&a, label)).await.unwrap();
    }
    let e0: i64 = admin.query_one(claim, &[&0i32]).await.unwrap().get(0);
    let rows = admin.query(receive, &[&0i32, &e0]).await.unwrap();
    let labels: Vec<String> = rows.iter().map(|r| r.get(2)).collect();
    assert_eq!(labels, ["a1", "a2"]);
    admin.batch_execute(&send(&a, "a3")).await.unwrap();
    (e0, e1, rows[0].get(0))
}

/// After the update: what status() reports of `orders`, then the messages in flight delivered and
/// acked by the holders of before the update, and the acked counters.
async fn finish_in_flight(admin: &Client, (e0, e1, open): (i64, i64, i64), how: &str) {
    let status = || async {
        admin
            .query(
                "SELECT partition, batch_size, backlog, held_back_keys, dead_letters, acked \
                   FROM lease_queue.status('orders')",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect::<Vec<(i32, i64, i64, i64, i64, i64)>>()
    };
    assert_eq!(
        status().await,
        [(0, 2, 1, 0, 0, 0), (1, 0, 1, 1, 1, 0)],
        "{how}: in flight, nothing acked since the update"
    );
    admin
        .execute(
            "SELECT lease_queue.ack('orders', 0, 'w', $1, $2)",
            &[&e0, &open],
        )
        .await
        .unwrap_or_else(|e| panic!("{how}: ack of the batch open at the update: {e}"));
    let receive =
        "SELECT batch_id, payload #>> '{}' FROM lease_queue.receive('orders', $1, 'w', $2, 10)";
    for (p, e, expected) in [(0, e0, "a3"), (1, e1, "r1")] {
        let rows = admin.query(receive, &[&p, &e]).await.unwrap();
        let labels: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
        assert_eq!(labels, [expected], "{how}: partition {p}");
        let batch: i64 = rows[0].get(0);
        admin
            .execute(
                "SELECT lease_queue.ack('orders', $1, 'w', $2, $3)",
                &[&p, &e, &batch],
            )
            .await
            .unwrap();
    }
    assert_eq!(
        status().await,
        [(0, 0, 0, 0, 0, 3), (1, 0, 0, 0, 1, 1)],
        "{how}: acked after the update"
    );
    let dead: String = admin
        .query_one(
            "SELECT payload #>> '{}' FROM lease_queue.list_dead_letters('orders')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dead, "d1", "{how}");
}

#[tokio::test]
async fn updating_the_queue_from_every_older_version_keeps_messages_in_flight_and_the_fresh_api() {
    let s = server();
    let fresh = s.fresh_db_with_queue("queue_fresh_api");
    let expected = queue_api(&fresh).await;
    for old in older_versions() {
        let db = s.fresh_db("queue_updated");
        let admin = s.connect_as(&db, ADMIN).await;
        admin
            .batch_execute(&format!(
                "CREATE EXTENSION pg_lease; CREATE EXTENSION pg_lease_queue VERSION '{old}'"
            ))
            .await
            .unwrap();
        let in_flight = make_in_flight(&admin).await;
        admin
            .batch_execute("ALTER EXTENSION pg_lease_queue UPDATE")
            .await
            .unwrap();
        assert_same_api(
            &queue_api(&db).await,
            &expected,
            &format!("after updating from {old}"),
        );
        finish_in_flight(&admin, in_flight, &format!("updated from {old}")).await;
    }
}

#[tokio::test]
async fn script_installs_of_the_queue_updated_from_every_older_version_end_with_the_fresh_api() {
    let s = server();
    let fresh = s.fresh_db("queue_fresh_script_api");
    pglease::PG_LEASE_QUEUE
        .install(&mut s.connect_as(&fresh, ADMIN).await)
        .await
        .unwrap();
    let expected = queue_api(&fresh).await;
    for old in older_versions() {
        let db = s.fresh_db("queue_script_updated");
        let mut admin = s.connect_as(&db, ADMIN).await;
        pglease::PG_LEASE.install(&mut admin).await.unwrap();
        script_install_queue_up_to(&admin, old).await;
        let in_flight = make_in_flight(&admin).await;
        let installed = pglease::PG_LEASE_QUEUE.install(&mut admin).await.unwrap();
        assert_eq!(
            (installed.version.as_str(), installed.via),
            (pglease::PG_LEASE_QUEUE.version, pglease::Via::Script)
        );
        assert_same_api(
            &queue_api(&db).await,
            &expected,
            &format!("after the installer updated a script install of {old}"),
        );
        finish_in_flight(&admin, in_flight, &format!("script install of {old}")).await;
    }
}

/// Who may execute status, as (grantee, grantable) lines.
async fn status_grants(su: &Client) -> Vec<String> {
    su.query(
        "SELECT format('%s %s', CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
                       a.is_grantable)
           FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
          WHERE p.oid = 'lease_queue.status(text)'::regprocedure AND a.grantee <> p.proowner
          ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// 0.2.0 drops and re-creates status (a new result column): an administrator's narrowing of who may
/// call it survives the update, on both installation paths; so do the defaults (everyone).
#[tokio::test]
async fn updating_the_queue_to_0_2_0_keeps_the_execute_privileges_of_status() {
    let s = server();
    for (via_script, narrowed) in [(false, true), (true, true), (false, false), (true, false)] {
        let db = s.fresh_db("queue_upgrade_acl");
        let mut admin = s.connect_as(&db, ADMIN).await;
        if via_script {
            pglease::PG_LEASE.install(&mut admin).await.unwrap();
            script_install_queue_up_to(&admin, "0.1.1").await;
        } else {
            admin
                .batch_execute(
                    "CREATE EXTENSION pg_lease; CREATE EXTENSION pg_lease_queue VERSION '0.1.1'",
                )
                .await
                .unwrap();
        }
        let su = s.connect_super(&db).await;
        if narrowed {
            su.batch_execute(&format!(
                "REVOKE EXECUTE ON FUNCTION lease_queue.status(text) FROM PUBLIC;
                 GRANT EXECUTE ON FUNCTION lease_queue.status(text) TO {APP} WITH GRANT OPTION;"
            ))
            .await
            .unwrap();
        }
        let before = status_grants(&su).await;
        if via_script {
            pglease::PG_LEASE_QUEUE.install(&mut admin).await.unwrap();
        } else {
            admin
                .batch_execute("ALTER EXTENSION pg_lease_queue UPDATE TO '0.2.0'")
                .await
                .unwrap();
        }
        let how = format!("script: {via_script}, narrowed: {narrowed}");
        assert_eq!(status_grants(&su).await, before, "{how}");
        assert_eq!(
            one_i64(
                &su,
                "SELECT count(*) FROM pg_proc WHERE proname = 'status' \
                           AND pronamespace = 'lease_queue'::regnamespace"
            )
            .await,
            1,
            "{how}"
        );
        admin
            .batch_execute("SELECT lease_queue.create_queue('q', 1)")
            .await
            .unwrap();
        let app = s.connect_as(&db, APP).await;
        assert_eq!(
            one_i64(&app, "SELECT count(acked) FROM lease_queue.status('q')").await,
            1,
            "{how}"
        );
        let other = s.connect_as(&db, OTHER_APP).await;
        let call = "SELECT * FROM lease_queue.status('q')";
        if narrowed {
            assert_eq!(expect_error(&other, call).await.code, "42501", "{how}");
        } else {
            other.batch_execute(call).await.unwrap();
        }
    }
}
