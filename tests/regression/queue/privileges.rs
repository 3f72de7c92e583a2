//! Privileges: the functions are the only way to the queue's state; administration is the
//! installing role's; internal helpers are no one's but the owner's.

use pglease_tests::{ADMIN, APP, expect_error, server};

use super::{Fixture, code, dead_letters, try_drop_queue, try_redrive};

const TABLES: [&str; 5] = ["queues", "partitions", "messages", "keys", "dead_letters"];
const SEQUENCES: [&str; 4] = ["queue_ids", "message_ids", "batch_ids", "positions"];

#[tokio::test]
async fn the_application_role_cannot_read_or_write_any_queue_table() {
    let f = Fixture::new("app_cannot_touch_the_tables", 1, 10).await;
    f.send(Some("k"), "m").await;
    let before = f.snapshot().await;
    for t in TABLES {
        for sql in [
            format!("SELECT * FROM lease_queue.{t}"),
            format!("SELECT count(*) FROM lease_queue.{t}"),
            format!("INSERT INTO lease_queue.{t} SELECT * FROM lease_queue.{t}"),
            format!("INSERT INTO lease_queue.{t} DEFAULT VALUES"),
            format!("UPDATE lease_queue.{t} SET qid = qid"),
            format!("DELETE FROM lease_queue.{t}"),
            format!("TRUNCATE lease_queue.{t}"),
            format!("COPY lease_queue.{t} TO STDOUT"),
        ] {
            assert_eq!(expect_error(&f.app, &sql).await.code, "42501", "{sql}");
        }
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn the_application_role_cannot_use_the_queue_sequences() {
    let c = Fixture::connect("app_cannot_use_the_sequences").await.app;
    for s in SEQUENCES {
        for sql in [
            format!("SELECT nextval('lease_queue.{s}')"),
            format!("SELECT setval('lease_queue.{s}', 1)"),
            format!("SELECT * FROM lease_queue.{s}"),
            format!("SELECT currval('lease_queue.{s}')"),
            format!("ALTER SEQUENCE lease_queue.{s} RESTART"),
        ] {
            assert_eq!(expect_error(&c, &sql).await.code, "42501", "{sql}");
        }
    }
}

#[tokio::test]
async fn the_application_role_cannot_call_the_administration_functions() {
    let f = Fixture::new("app_cannot_administer", 1, 1).await;
    let e = f.claim(0, "w").await;
    f.send(Some("k"), "m").await;
    let b = f.receive(0, "w", e, 10).await;
    let r = (f.q.as_str(), 0, "w", e, b[0].batch_id);
    super::nack(&f.app, r, b[0].id, "0", None).await;
    f.ack(0, "w", e, b[0].batch_id).await;
    assert_eq!(
        dead_letters(&f.app, &f.q).await.len(),
        1,
        "app may list them"
    );
    let before = f.snapshot().await;
    let new_q = format!("{}.new", f.q);
    assert_eq!(
        expect_error(
            &f.app,
            &format!("SELECT lease_queue.create_queue('{new_q}', 1)")
        )
        .await
        .code,
        "42501"
    );
    assert_eq!(code(try_drop_queue(&f.app, &f.q).await), "42501");
    assert_eq!(code(try_redrive(&f.app, &f.q, Some("k")).await), "42501");
    assert_eq!(code(try_redrive(&f.app, &f.q, None).await), "42501");
    assert_eq!(
        expect_error(
            &f.app,
            &format!("SELECT lease_queue.discard_dead_letters('{}')", f.q)
        )
        .await
        .code,
        "42501"
    );
    assert_eq!(f.snapshot().await, before);
    let n: i64 =
        f.su.query_one(
            "SELECT count(*) FROM lease_queue.queues WHERE name = $1",
            &[&new_q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn no_internal_helper_is_executable_by_the_application_role_or_public() {
    let f = Fixture::connect("internal_helpers_are_private").await;
    let rows =
        f.su.query(
            "SELECT p.oid::regprocedure::text,
                    has_function_privilege($1, p.oid, 'EXECUTE'),
                    has_function_privilege('public', p.oid, 'EXECUTE')
               FROM pg_proc AS p
              WHERE p.pronamespace = 'lease_queue'::regnamespace AND left(p.proname, 1) = '_'
              ORDER BY 1",
            &[&APP],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 16, "the helpers are there: {}", rows.len());
    for r in &rows {
        let name: String = r.get(0);
        assert!(!r.get::<_, bool>(1), "{APP} may execute {name}");
        assert!(!r.get::<_, bool>(2), "PUBLIC may execute {name}");
    }
    for sql in [
        "SELECT lease_queue._valid_name('q')",
        "SELECT lease_queue._queue('f', 'q')",
        "SELECT lease_queue._raise_invalid_input('f', ARRAY['x'])",
        "SELECT lease_queue._refresh_keys(1, 0, ARRAY['k'])",
        "SELECT * FROM lease_queue._open_batch(NULL::lease_queue.partitions, 1, 'w', 1, 1, false)",
        "SELECT * FROM lease_queue._close_batch('f', 'q', NULL::lease_queue.partitions, 1, 1, false)",
        "SELECT lease_queue._heartbeat('f', NULL::lease_queue.partitions, 'k', 'w', 1)",
        "SELECT lease_queue._bury(ARRAY[1::bigint], 'r')",
        "SELECT * FROM lease_queue._lock_partition('f', 'q', 0, NULL)",
        "SELECT * FROM lease_queue._queue_for('f', 'q', 'consume')",
        "SELECT lease_queue._may(1, 'consume')",
        "SELECT lease_queue._raise_not_granted('f', 'q', 'consume')",
        "SELECT lease_queue._check_grant_args('f', 'q', 'app', 'consume')",
    ] {
        assert_eq!(expect_error(&f.app, sql).await.code, "42501", "{sql}");
    }
}

#[tokio::test]
async fn every_public_function_is_callable_by_the_application_role_with_a_pinned_search_path() {
    let f = Fixture::connect("public_functions_are_pinned").await;
    let rows =
        f.su.query(
            "SELECT p.proname::text, p.prosecdef, p.proconfig,
                    has_function_privilege($1, p.oid, 'EXECUTE')
               FROM pg_proc AS p
              WHERE p.pronamespace = 'lease_queue'::regnamespace AND left(p.proname, 1) <> '_'
              ORDER BY 1",
            &[&APP],
        )
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        names,
        [
            "ack",
            "ack_and_receive",
            "claim",
            "claim_any",
            "create_queue",
            "discard_dead_letters",
            "drop_queue",
            "grant_queue",
            "lease_key",
            "list_dead_letters",
            "list_queues",
            "nack",
            "next_due",
            "partition_of",
            "privileges",
            "receive",
            "redrive",
            "release",
            "revoke_queue",
            "send",
            "send_batch",
            "set_notify",
            "status",
            "version"
        ]
    );
    let admin_only = [
        "create_queue",
        "discard_dead_letters",
        "drop_queue",
        "grant_queue",
        "redrive",
        "revoke_queue",
        "set_notify",
    ];
    let pure = ["lease_key", "partition_of", "version"];
    for r in rows {
        let name: String = r.get(0);
        let config: Vec<String> = r.get(2);
        // status also plans its counts as index-only scans (a sequential or bitmap heap scan
        // would read every message row), without JIT compilation; the calls of the hot path that
        // read messages themselves plan without sequential scans (tests/regression/queue/plans.rs).
        let planner: &[&str] = match name.as_str() {
            "status" => &["enable_seqscan=off", "enable_bitmapscan=off", "jit=off"],
            "nack" | "release" | "redrive" | "next_due" => &["enable_seqscan=off"],
            _ => &[],
        };
        assert_eq!(
            config,
            [&["search_path=pg_catalog, pg_temp"][..], planner].concat(),
            "{name} pins its search_path"
        );
        assert_eq!(
            r.get::<_, bool>(1),
            !pure.contains(&name.as_str()),
            "{name}: SECURITY DEFINER exactly when it touches the state"
        );
        assert_eq!(
            r.get::<_, bool>(3),
            !admin_only.contains(&name.as_str()),
            "{name}: executable by {APP}"
        );
    }
}

#[tokio::test]
async fn the_installing_role_may_read_and_append_the_tables_but_not_change_them() {
    let f = Fixture::new("admin_may_read_and_append", 1, 10).await;
    f.send(Some("k"), "m").await;
    let before = f.snapshot().await;
    for t in TABLES {
        f.admin
            .batch_execute(&format!("SELECT * FROM lease_queue.{t} LIMIT 1"))
            .await
            .unwrap();
        for sql in [
            format!("UPDATE lease_queue.{t} SET qid = qid"),
            format!("DELETE FROM lease_queue.{t}"),
            format!("TRUNCATE lease_queue.{t}"),
        ] {
            assert_eq!(expect_error(&f.admin, &sql).await.code, "42501", "{sql}");
        }
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn the_installing_role_may_grant_administration_on_to_another_role() {
    let s = server();
    let db = s.fresh_db_with_queue("queue_grant_admin");
    let admin = s.connect_as(&db, ADMIN).await;
    let app = s.connect_as(&db, APP).await;
    assert_eq!(
        expect_error(&app, "SELECT lease_queue.create_queue('granted', 1)")
            .await
            .code,
        "42501"
    );
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION lease_queue.create_queue(text, integer, integer, boolean), \
                                       lease_queue.drop_queue(text) TO {APP}"
        ))
        .await
        .unwrap();
    // The creator's queue is its own to use, without a grant.
    app.batch_execute("SELECT lease_queue.create_queue('granted', 2, 10)")
        .await
        .unwrap();
    app.batch_execute("SELECT lease_queue.send('granted', 'k', '1')")
        .await
        .unwrap();
    try_drop_queue(&app, "granted").await.unwrap();
}

/// A queue belongs to the roles granted it (QUEUE.md §9): without a grant a role neither produces
/// nor consumes (42501, nothing changed) and sees only counts in status(); a grant to a role counts
/// for its members; revoking takes it back; granting needs the admin right.
#[tokio::test]
async fn a_queue_is_used_only_by_the_roles_granted_it_and_their_members() {
    use pglease_tests::{APP_MEMBER, OTHER_APP};
    let s = server();
    let db = s.fresh_db_with_queue("queue_grants");
    let admin = s.connect_as(&db, ADMIN).await;
    let app = s.connect_as(&db, APP).await;
    let member = s.connect_as(&db, APP_MEMBER).await;
    let other = s.connect_as(&db, OTHER_APP).await;
    let su = s.connect_super(&db).await;
    admin
        .batch_execute("SELECT lease_queue.create_queue('private', 1)")
        .await
        .unwrap();
    let produce = "SELECT lease_queue.send('private', 'k', '1')";
    let consuming = [
        "SELECT lease_queue.claim('private', 0, 'c', '1 hour')",
        "SELECT lease_queue.claim_any('private', 'c', '1 hour')",
        "SELECT lease_queue.receive('private', 0, 'c', 1, 10)",
        "SELECT lease_queue.ack('private', 0, 'c', 1, 1)",
        "SELECT lease_queue.nack('private', 0, 'c', 1, 1, 1)",
        "SELECT lease_queue.release('private', 0, 'c', 1)",
        "SELECT lease_queue.next_due('private', 0)",
        "SELECT * FROM lease_queue.list_dead_letters('private')",
    ];
    // The creator's: nobody else's yet.
    let before = super::snapshot(&su, "private").await;
    for c in [&app, &member, &other] {
        assert_eq!(expect_error(c, produce).await.code, "42501");
        for sql in consuming {
            assert_eq!(expect_error(c, sql).await.code, "42501", "{sql}");
        }
    }
    assert_eq!(
        super::snapshot(&su, "private").await,
        before,
        "nothing changed"
    );
    admin.batch_execute(produce).await.unwrap();

    // Granted to app: app and its member may; the other application may not.
    admin
        .batch_execute(
            "SELECT lease_queue.grant_queue('private', 'app', 'produce'), \
                    lease_queue.grant_queue('private', 'app', 'consume'), \
                    lease_queue.grant_queue('private', 'app', 'consume')",
        )
        .await
        .unwrap();
    app.batch_execute(produce).await.unwrap();
    member.batch_execute(produce).await.unwrap();
    assert_eq!(expect_error(&other, produce).await.code, "42501");
    let claimed = super::claim(&member, "private", 0, "c", "1 hour").await;
    assert!(claimed.claimed);
    let epoch = claimed.epoch.unwrap();
    let first = super::receive(&member, "private", 0, "c", epoch, 1).await;
    super::ack(&member, "private", 0, "c", epoch, super::batch_id(&first)).await;
    // status(): counts for everyone (the acked counter too), holders and batches for consumers
    // only.
    let status = "SELECT owner, epoch, backlog, acked FROM lease_queue.status('private')";
    let row = other.query_one(status, &[]).await.unwrap();
    assert_eq!(
        (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<i64>>(1),
            row.get::<_, i64>(2),
            row.get::<_, i64>(3)
        ),
        (None, None, 2, 1)
    );
    let row = app.query_one(status, &[]).await.unwrap();
    assert_eq!(
        (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<i64>>(1)
        ),
        (Some("c".to_owned()), claimed.epoch)
    );

    // What each role may do, as the roles see it themselves.
    assert_eq!(may(&member, "private").await, (true, true));
    assert_eq!(may(&other, "private").await, (false, false));
    assert_eq!(
        expect_error(&other, "SELECT * FROM lease_queue.privileges('missing')")
            .await
            .code,
        "LQ001"
    );

    // Revoked: refused again; PUBLIC: everyone.
    admin
        .batch_execute("SELECT lease_queue.revoke_queue('private', 'app', 'produce')")
        .await
        .unwrap();
    assert_eq!(expect_error(&member, produce).await.code, "42501");
    admin
        .batch_execute("SELECT lease_queue.grant_queue('private', 'public', 'produce')")
        .await
        .unwrap();
    other.batch_execute(produce).await.unwrap();

    // Granting is the admin right; its arguments are checked.
    assert_eq!(
        expect_error(
            &app,
            "SELECT lease_queue.grant_queue('private', 'app', 'produce')"
        )
        .await
        .code,
        "42501"
    );
    for (sql, code) in [
        (
            "SELECT lease_queue.grant_queue('private', 'no_such_role', 'produce')",
            "22023",
        ),
        (
            "SELECT lease_queue.grant_queue('private', 'app', 'read')",
            "22023",
        ),
        (
            "SELECT lease_queue.revoke_queue('private', NULL, 'produce')",
            "22023",
        ),
        (
            "SELECT lease_queue.grant_queue('missing', 'app', 'produce')",
            "LQ001",
        ),
    ] {
        assert_eq!(expect_error(&admin, sql).await.code, code, "{sql}");
    }
}

/// The update from 0.1.0 grants both privileges on every existing queue to PUBLIC: what worked
/// before it works after it, for every role.
#[tokio::test]
async fn the_update_keeps_existing_queues_open_to_every_role() {
    let s = server();
    let db = s.fresh_db("queue_update_grants");
    s.psql_as(
        &db,
        ADMIN,
        "CREATE EXTENSION pg_lease; CREATE EXTENSION pg_lease_queue VERSION '0.1.0'; \
         SELECT lease_queue.create_queue('old', 1);",
    );
    s.psql_as(&db, ADMIN, "ALTER EXTENSION pg_lease_queue UPDATE;");
    let other = s.connect_as(&db, pglease_tests::OTHER_APP).await;
    other
        .batch_execute("SELECT lease_queue.send('old', 'k', '1')")
        .await
        .unwrap();
    let claimed = super::claim(&other, "old", 0, "c", "1 hour").await;
    assert!(claimed.claimed);
    // A queue created after the update is its creator's.
    s.psql_as(&db, ADMIN, "SELECT lease_queue.create_queue('new', 1);");
    assert_eq!(
        expect_error(&other, "SELECT lease_queue.send('new', 'k', '1')")
            .await
            .code,
        "42501"
    );
}

/// (produce, consume) of the session on queue `q`, as lease_queue.privileges reports it.
async fn may(c: &tokio_postgres::Client, q: &str) -> (bool, bool) {
    let r = c
        .query_one(
            "SELECT produce, consume FROM lease_queue.privileges($1)",
            &[&q],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}
