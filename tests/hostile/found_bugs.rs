//! Deterministic reproducers of bugs this suite found in the SQL, each stating the documented
//! behaviour it contradicted. All were fixed in 0.2.0; they stay as regression tests (each failed on
//! the SQL before the fix).

use std::time::{Duration, Instant};

use pglease_tests::lapse::await_lapsed;
use pglease_tests::{ADMIN, APP, Wait, backend_pid, expect_error, is_backend_waiting, server};

/// SEMANTICS §6 / I8: invalid input raises 22023 naming every violation; a valid ttl is accepted.
/// Bug: acquire and renew test `clock_timestamp() + ttl <= clock_timestamp()` with two clock
/// readings, so a 1 µs ttl is rejected whenever the clock ticks between them, with DETAIL "." (no
/// violation named), while `_interval_violations` (one reading) finds nothing wrong.
#[tokio::test]
async fn a_one_microsecond_ttl_is_judged_with_one_clock_reading() {
    let c = server().app().await;
    c.batch_execute(
        "CREATE FUNCTION pg_temp.try_acquire(k text) RETURNS text LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM lease.acquire(k, 'o', interval '1 microsecond');
             RETURN 'ok';
         EXCEPTION WHEN invalid_parameter_value THEN
             RETURN 'DETAIL';
         END $$",
    )
    .await
    .unwrap();
    let rejected: i64 = c
        .query_one(
            "SELECT count(*) FROM generate_series(1, 2000) AS i \
              WHERE pg_temp.try_acquire('hostile_tiny/' || i) <> 'ok'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rejected, 0,
        "a 1 µs ttl (valid: positive, finite, ≤ 365 days) was rejected"
    );
}

/// SEMANTICS §6: "365 days bounds the arithmetic (no timestamp overflow)"; every error is
/// documented. Bug: an interval whose parts cancel out (compared as ≤ 365 days) but whose calendar
/// part alone overflows makes `clock_timestamp() ± interval` raise 22008 inside acquire (ttl and
/// wait), renew and purge.
#[tokio::test]
async fn intervals_whose_parts_cancel_out_never_overflow_the_arithmetic() {
    let s = server();
    let app = s.app().await;
    let admin = s.connect_as(pglease_tests::SHARED_DB, ADMIN).await;
    let big = "5000000 years -1799999990 days"; // compares as +10 days
    for (c, sql) in [
        (
            &app,
            format!("SELECT * FROM lease.acquire('hostile_ovf/k', 'o', '{big}')"),
        ),
        (
            &app,
            format!("SELECT * FROM lease.acquire('hostile_ovf/k', 'o', '1 s', '{big}')"),
        ),
        (
            &app,
            format!("SELECT * FROM lease.renew('hostile_ovf/k', 'o', 1, '{big}')"),
        ),
        (&admin, format!("SELECT lease.purge('{big}')")),
    ] {
        let e = expect_error(c, &sql).await;
        assert_eq!(e.code, "22023", "{sql}: {e:?}");
    }
}

/// SEMANTICS §6: a ttl is a duration of date_part('epoch', ttl) seconds (1 year = 365.25 days), in
/// (0, 365 days]. So '1 year 5 days' (370.25 days) is over the bound, and '1 year -364 days'
/// (1.25 days) is a positive ttl. (Found when the bound used 30-day-month interval comparison.)
#[tokio::test]
async fn the_ttl_bound_is_judged_by_the_expiry_it_produces() {
    let c = server().app().await;
    let e = expect_error(
        &c,
        "SELECT * FROM lease.acquire('hostile_year/a', 'o', '1 year 5 days')",
    )
    .await;
    assert_eq!(
        e.code, "22023",
        "an expiry ~370 days out must be over the 365-day bound"
    );
    let ok: bool = c
        .query_one(
            "SELECT acquired FROM lease.acquire('hostile_year/b', 'o', '1 year -364 days')",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or(false);
    assert!(ok, "an expiry a day in the future is a positive ttl by §6");
}

/// SEMANTICS §6/§7 and SQLSTATES: purge waits only for transactions creating keys, and 40P01 comes
/// from the caller's own lock ordering. Bug: purge's DELETE also waits for the row lock of an idle
/// row that an open transaction just granted; if that transaction then creates a new key, it waits
/// for purge's lock on the floor sentinel: deadlock, and the plain autocommit purge gets 40P01.
#[tokio::test]
async fn purge_never_deadlocks_with_a_transaction_that_grants_then_creates_keys() {
    let s = server();
    let db = s.fresh_db_with_extension("purge_deadlock");
    let t1 = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    let observer = s.connect_super(&db).await;
    t1.query_one("SELECT lease.acquire('idle', 'o', '1 millisecond')", &[])
        .await
        .unwrap();
    await_lapsed(&t1, "idle").await;
    t1.batch_execute("BEGIN").await.unwrap();
    t1.query_one("SELECT lease.acquire('idle', 'o', '1 hour')", &[])
        .await
        .unwrap();
    let purge_pid = backend_pid(&admin).await;
    let purge = tokio::spawn(async move {
        admin
            .query_one("SELECT lease.purge('0')", &[])
            .await
            .map(|r| r.get::<_, i64>(0))
            .map_err(|e| e.code().map(|c| c.code().to_string()))
    });
    // The deadlock needs purge to hold the floor sentinel before t1 creates a key (otherwise t1
    // takes the sentinel first and purge just waits for it). Purge takes the sentinel first thing,
    // then its row locks: with the bug it then waits on the row lock of 'idle' (seen in pg_locks);
    // fixed, it skips that row and finishes. Either is observed, never assumed from elapsed time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !purge.is_finished() && !is_backend_waiting(&observer, purge_pid, Wait::Lock).await {
        assert!(
            Instant::now() < deadline,
            "purge neither finished nor waited on a lock within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let created = t1
        .query_one("SELECT lease.acquire('new', 'o', '1 hour')", &[])
        .await
        .map_err(|e| e.code().map(|c| c.code().to_string()));
    let _ = t1.batch_execute("COMMIT").await;
    let purged = purge.await.unwrap();
    assert!(created.is_ok(), "key creation failed: {created:?}");
    assert!(purged.is_ok(), "purge failed: {purged:?}");
}

/// The installer role owns schema lease (CREATE EXTENSION creates it for the caller), and every
/// function runs SECURITY DEFINER as the bootstrap superuser. When their search_path was
/// `pg_catalog, lease, pg_temp`, PostgreSQL picked an exact-match operator in lease over
/// pg_catalog's polymorphic one, so an operator the installer created there — here
/// `||(text, integer)`, used by the 22023 path — ran as the superuser (privilege escalation, e.g.
/// COPY ... TO PROGRAM). The path is now `pg_catalog, pg_temp` (ADR 0001); this test keeps it so.
#[tokio::test]
async fn the_installer_cannot_run_code_as_the_function_owner_through_schema_lease() {
    let s = server();
    let db = s.fresh_db_with_extension("hijack");
    let admin = s.connect_as(&db, ADMIN).await;
    let created = admin
        .batch_execute(
            "CREATE FUNCTION lease.hijack(a text, b integer) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN
                 RAISE EXCEPTION USING ERRCODE = 'EV001', MESSAGE = 'ran as ' || current_user;
             END $$;
             CREATE OPERATOR lease.|| (leftarg = text, rightarg = integer, function = lease.hijack);",
        )
        .await;
    if let Err(e) = created {
        // The installer cannot create objects in lease: nothing to hijack, which is also safe.
        eprintln!(
            "the_installer_cannot_run_code_as_the_function_owner_through_schema_lease: the \
             installer could not create an operator in schema lease ({e}), so there is nothing \
             to hijack; the rest of the check does not apply"
        );
        return;
    }
    let app = s.connect_as(&db, APP).await;
    let e = expect_error(
        &app,
        "SELECT * FROM lease.acquire(repeat('k', 2000), 'o', '1 second')",
    )
    .await;
    assert_eq!(
        e.code, "22023",
        "the installer's operator ran inside the API: {e:?}"
    );
}

/// SEMANTICS.md §12 (lease.transfer): `ok` means that `to_owner` now holds the key with the next
/// epoch; otherwise nothing changed and the status is a refusal. Bug (0.9.0 before the fix): a
/// transfer that found no row for the key (unknown, or purged) judged its refusal in a later
/// statement, which took a new snapshot; a grant of the key to the presented owner at the presented
/// epoch, committed in between, made that judgement `ok`, and the transfer returned
/// `('ok', NULL, NULL)` having handed nothing over. Between the two statements the backend may be
/// descheduled or paused for any time; here that pause is made certain: the superuser re-creates
/// lease.transfer, in this database only, with a 1 s sleep right after its locked read (an
/// assignment, which leaves FOUND as the read set it).
#[tokio::test]
async fn a_transfer_racing_the_creation_of_its_key_never_reports_ok_without_handing_it_over() {
    let s = server();
    let db = s.fresh_db_with_extension("hostile_transfer_new_key");
    s.psql(
        &db,
        "DO $$ DECLARE d text := pg_get_functiondef(
                 'lease.transfer(text,text,bigint,text,interval)'::regprocedure);
         BEGIN
             IF d NOT LIKE '%FOR NO KEY UPDATE;%' THEN RAISE 'no locked read in lease.transfer'; END IF;
             EXECUTE regexp_replace(d, 'FOR NO KEY UPDATE;',
                 'FOR NO KEY UPDATE; v_now := (SELECT pg_catalog.clock_timestamp() FROM pg_catalog.pg_sleep(1) AS z);');
         END $$",
    );
    let observer = s.connect_super(&db).await;
    let transferring = s.connect_as(&db, APP).await;
    let pid = backend_pid(&transferring).await;
    let creator = s.connect_as(&db, APP).await;
    let transfer = tokio::spawn(async move {
        transferring
            .query_one(
                "SELECT status, epoch, expires_at IS NOT NULL \
                   FROM lease.transfer('k', 'o1', 1, 'o2', '1 hour')",
                &[],
            )
            .await
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    r.get::<_, Option<i64>>(1),
                    r.get::<_, bool>(2),
                )
            })
    });
    // The transfer found no row and is paused before judging its refusal; the key is created
    // meanwhile.
    pglease_tests::await_backend_waiting(&observer, pid, Wait::Sleep, Duration::from_secs(10))
        .await;
    let epoch: i64 = creator
        .query_one("SELECT epoch FROM lease.acquire('k', 'o1', '1 hour')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 1, "the key's first grant");
    let (status, new_epoch, expires) = transfer.await.unwrap().unwrap();
    let held: (String, i64) = creator
        .query_one("SELECT owner, epoch FROM lease.inspect('k')", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    match status.as_str() {
        // Judged again on the row it now finds: the transfer happened.
        "ok" => {
            assert_eq!(
                (new_epoch, expires),
                (Some(2), true),
                "ok names the successor's grant"
            );
            assert_eq!(held, ("o2".to_string(), 2));
        }
        // Judged on the state it read: there was no grant to hand over.
        "not_owner" => {
            assert_eq!((new_epoch, expires), (None, false));
            assert_eq!(held, ("o1".to_string(), 1));
        }
        other => panic!("transfer reported {other} for a key it found without a row"),
    }
}
