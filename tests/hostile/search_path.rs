//! Malicious `search_path`: a caller puts its own schema `evil` (and `pg_temp`) first, full of objects
//! named like those the SQL uses — functions, aggregates, operators, tables, types — each of which
//! logs its use. Every API function must still use only pg_catalog and lease objects: results are
//! correct and the log stays empty. Positive controls prove the shadows do capture unqualified uses
//! in the caller's own SQL, so an empty log means something.

use pglease_tests::lapse::await_lapsed;
use pglease_tests::{ADMIN, APP, expect_error, server};
use tokio_postgres::Client;

/// Shadowing functions: (name, argument types, result type, what the real one computes).
const FUNCTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "clock_timestamp",
        "",
        "timestamptz",
        "pg_catalog.clock_timestamp()",
    ),
    ("now", "", "timestamptz", "pg_catalog.now()"),
    (
        "octet_length",
        "text",
        "integer",
        "pg_catalog.octet_length($1)",
    ),
    (
        "pg_sleep",
        "double precision",
        "void",
        "pg_catalog.pg_sleep($1)",
    ),
    (
        "date_part",
        "text, interval",
        "double precision",
        "pg_catalog.date_part($1, $2)",
    ),
    ("isfinite", "interval", "boolean", "pg_catalog.isfinite($1)"),
    (
        "array_to_string",
        "text[], text",
        "text",
        "pg_catalog.array_to_string($1, $2)",
    ),
    (
        "array_remove",
        "text[], text",
        "text[]",
        "pg_catalog.array_remove($1, $2)",
    ),
    (
        "replace",
        "text, text, text",
        "text",
        "pg_catalog.replace($1, $2, $3)",
    ),
    (
        "quote_literal",
        "text",
        "text",
        "pg_catalog.quote_literal($1)",
    ),
    (
        "pg_notify",
        "text, text",
        "void",
        "pg_catalog.pg_notify($1, $2)",
    ),
    (
        "starts_with",
        "text, text",
        "boolean",
        "pg_catalog.starts_with($1, $2)",
    ),
    ("left", "text, integer", "text", "pg_catalog.left($1, $2)"),
    (
        "substr",
        "text, integer",
        "text",
        "pg_catalog.substr($1, $2)",
    ),
    ("length", "text", "integer", "pg_catalog.length($1)"),
    (
        "cardinality",
        "text[]",
        "integer",
        "pg_catalog.cardinality($1)",
    ),
    (
        "array_ndims",
        "text[]",
        "integer",
        "pg_catalog.array_ndims($1)",
    ),
    (
        "set_config",
        "text, text, boolean",
        "text",
        "pg_catalog.set_config($1, $2, $3)",
    ),
    (
        "current_setting",
        "text",
        "text",
        "pg_catalog.current_setting($1)",
    ),
    // lease.history's window function, as a plain function: a use of it would log or fail.
    ("lead", "bigint", "bigint", "$1"),
    ("lead", "timestamptz", "timestamptz", "$1"),
    ("lead", "text", "text", "$1"),
];

/// Shadowing operators: (operator, left, right, result, what the real one computes).
const OPERATORS: &[(&str, &str, &str, &str, &str)] = &[
    ("=", "text", "text", "boolean", "pg_catalog.texteq($1, $2)"),
    ("<>", "text", "text", "boolean", "pg_catalog.textne($1, $2)"),
    (
        "=",
        "bigint",
        "bigint",
        "boolean",
        "pg_catalog.int8eq($1, $2)",
    ),
    (
        "<>",
        "bigint",
        "bigint",
        "boolean",
        "pg_catalog.int8ne($1, $2)",
    ),
    (
        ">",
        "bigint",
        "bigint",
        "boolean",
        "pg_catalog.int8gt($1, $2)",
    ),
    (
        "+",
        "bigint",
        "integer",
        "bigint",
        "pg_catalog.int84pl($1, $2)",
    ),
    (
        ">",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4gt($1, $2)",
    ),
    (
        ">",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_gt($1, $2)",
    ),
    (
        ">=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_ge($1, $2)",
    ),
    (
        "<=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_le($1, $2)",
    ),
    (
        "<",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_lt($1, $2)",
    ),
    (
        "+",
        "timestamptz",
        "interval",
        "timestamptz",
        "pg_catalog.timestamptz_pl_interval($1, $2)",
    ),
    (
        "-",
        "timestamptz",
        "interval",
        "timestamptz",
        "pg_catalog.timestamptz_mi_interval($1, $2)",
    ),
    (
        "-",
        "timestamptz",
        "timestamptz",
        "interval",
        "pg_catalog.timestamptz_mi($1, $2)",
    ),
    (
        "<=",
        "interval",
        "interval",
        "boolean",
        "pg_catalog.interval_le($1, $2)",
    ),
    (
        ">",
        "interval",
        "interval",
        "boolean",
        "pg_catalog.interval_gt($1, $2)",
    ),
    (
        "<",
        "interval",
        "interval",
        "boolean",
        "pg_catalog.interval_lt($1, $2)",
    ),
    ("||", "text", "text", "text", "pg_catalog.textcat($1, $2)"),
    (
        "||",
        "text",
        "integer",
        "text",
        "pg_catalog.textcat($1, $2::pg_catalog.text)",
    ),
    (
        "||",
        "text",
        "bigint",
        "text",
        "pg_catalog.textcat($1, $2::pg_catalog.text)",
    ),
    (
        "||",
        "text",
        "timestamptz",
        "text",
        "pg_catalog.textcat($1, $2::pg_catalog.text)",
    ),
    (
        "||",
        "text[]",
        "text[]",
        "text[]",
        "pg_catalog.array_cat($1, $2)",
    ),
    (
        "~~",
        "text",
        "text",
        "boolean",
        "pg_catalog.textlike($1, $2)",
    ),
    (
        "~",
        "text",
        "text",
        "boolean",
        "pg_catalog.textregexeq($1, $2)",
    ),
    ("<", "text", "text", "boolean", "pg_catalog.text_lt($1, $2)"),
    // lease.browse's keyset pagination (key > after) and its duration arithmetic in summary.
    (">", "text", "text", "boolean", "pg_catalog.text_gt($1, $2)"),
    (
        "*",
        "double precision",
        "interval",
        "interval",
        "pg_catalog.mul_d_interval($1, $2)",
    ),
    (
        ">=",
        "text",
        "text",
        "boolean",
        "pg_catalog.text_ge($1, $2)",
    ),
    (
        ">=",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4ge($1, $2)",
    ),
    (
        "<=",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4le($1, $2)",
    ),
    (
        "<",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4lt($1, $2)",
    ),
];

/// A function body that logs `what` into `log` and then computes `expr` (or performs it, for void).
fn logging_body(log: &str, what: &str, ret: &str, expr: &str) -> String {
    let tail = if ret == "void" {
        format!("PERFORM {expr}; RETURN;")
    } else {
        format!("RETURN {expr};")
    };
    format!("BEGIN INSERT INTO {log} (what) VALUES ('{what}'); {tail} END")
}

/// The `evil` schema: a log table, then shadows of everything the API's SQL names.
fn evil_schema_sql() -> String {
    let mut sql = String::from(
        "SET search_path = pg_catalog;
         CREATE SCHEMA evil;
         GRANT USAGE ON SCHEMA evil TO PUBLIC;
         CREATE TABLE evil.log (what text, who text DEFAULT current_user);
         GRANT INSERT, SELECT ON evil.log TO PUBLIC;
         CREATE TABLE evil.leases (key text, owner text, epoch bigint, expires_at timestamptz,
                                   waiting boolean DEFAULT false);
         INSERT INTO evil.leases VALUES ('s0/k', 'evil', 999999, '2999-01-01');
         CREATE TABLE evil.epoch_floor (floor bigint, sentinel boolean);
         INSERT INTO evil.epoch_floor VALUES (1000000, true);
         CREATE TABLE evil.grant_history (key text, epoch bigint, owner text, holder_role text,
                                          granted_at timestamptz, data text, prior_epoch bigint,
                                          prior_ended_at timestamptz, prior_expires_at timestamptz,
                                          prior_ended_by text, ended_by text, ended_at timestamptz,
                                          final_expires_at timestamptz);
         INSERT INTO evil.grant_history (key, epoch, owner)
              SELECT 's' || i || '/handed', 999999, 'evil' FROM generate_series(0, 2) AS i;
         CREATE TABLE evil.settings (singleton boolean, max_ttl interval,
                                     failover_quarantine interval, min_epoch bigint,
                                     min_epoch_timeline bigint, history boolean,
                                     history_retention interval);
         INSERT INTO evil.settings VALUES (true, '1 second', NULL, 5000000, 1, false, '1 second');
         GRANT ALL ON evil.leases, evil.epoch_floor, evil.grant_history, evil.settings TO PUBLIC;\n",
    );
    for (name, args, ret, expr) in FUNCTIONS {
        sql += &format!(
            "CREATE FUNCTION evil.{name}({args}) RETURNS {ret} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;\n",
            logging_body("evil.log", name, ret, expr)
        );
    }
    sql += &format!(
        "CREATE FUNCTION evil.max_sf(bigint, bigint) RETURNS bigint LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE AGGREGATE evil.max(bigint) (sfunc = evil.max_sf, stype = bigint);
         CREATE FUNCTION evil.count_sf(bigint) RETURNS bigint LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE AGGREGATE evil.count(*) (sfunc = evil.count_sf, stype = bigint, initcond = '0');\n",
        logging_body(
            "evil.log",
            "max",
            "bigint",
            "pg_catalog.int8larger(coalesce($1, $2), $2)"
        ),
        logging_body("evil.log", "count", "bigint", "$1 OPERATOR(pg_catalog.+) 1"),
    );
    for (i, (op, l, r, ret, expr)) in OPERATORS.iter().enumerate() {
        sql += &format!(
            "CREATE FUNCTION evil.op_{i}({l}, {r}) RETURNS {ret} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;
             CREATE OPERATOR evil.{op} (leftarg = {l}, rightarg = {r}, function = evil.op_{i});\n",
            logging_body("evil.log", &format!("operator {op}({l}, {r})"), ret, expr)
        );
    }
    // Types named like those the SQL spells without a keyword.
    sql += "CREATE DOMAIN evil.text AS pg_catalog.varchar(3);
            CREATE TYPE evil.timestamptz AS (x pg_catalog.int4);
            CREATE DOMAIN evil.record AS pg_catalog.int4;\n";
    sql
}

/// Temporary shadows in the caller's own session (tables are searched in pg_temp; functions and
/// operators are never searched there unless qualified).
fn temp_objects_sql() -> String {
    let mut sql = String::from(
        "CREATE TEMP TABLE leases (key text, owner text, epoch bigint, expires_at timestamptz,
                                   waiting boolean DEFAULT false);
         INSERT INTO pg_temp.leases VALUES ('s1/k', 'temp', 888888, '2999-01-01');
         CREATE TEMP TABLE epoch_floor (floor bigint, sentinel boolean);
         INSERT INTO pg_temp.epoch_floor VALUES (2000000, true);
         CREATE TEMP TABLE grant_history (key text, epoch bigint, owner text, holder_role text,
                                          granted_at timestamptz, data text, prior_epoch bigint,
                                          prior_ended_at timestamptz, prior_expires_at timestamptz,
                                          prior_ended_by text, ended_by text, ended_at timestamptz,
                                          final_expires_at timestamptz);
         INSERT INTO pg_temp.grant_history (key, epoch, owner)
              SELECT 's' || i || '/handed', 888888, 'temp' FROM generate_series(0, 2) AS i;\n",
    );
    for (name, args, ret, expr) in &FUNCTIONS[..3] {
        sql += &format!(
            "CREATE FUNCTION pg_temp.{name}({args}) RETURNS {ret} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;\n",
            logging_body("evil.log", &format!("pg_temp.{name}"), ret, expr)
        );
    }
    sql += &format!(
        "CREATE FUNCTION pg_temp.op_eq(text, text) RETURNS boolean LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE OPERATOR pg_temp.= (leftarg = text, rightarg = text, function = pg_temp.op_eq);\n",
        logging_body(
            "evil.log",
            "pg_temp operator =",
            "boolean",
            "pg_catalog.texteq($1, $2)"
        )
    );
    sql
}

async fn log_count(su: &Client) -> i64 {
    su.query_one("SELECT count(*) FROM evil.log", &[])
        .await
        .expect("read evil.log")
        .get(0)
}

/// Every API call, with the results a correct implementation gives (keys under `p`, in a database
/// where nothing else happened to them).
pub(crate) async fn exercise_api(app: &Client, admin: &Client, p: &str) {
    let k = format!("{p}k");
    let q = |sql: &'static str| sql;
    let acquire = q(
        "SELECT acquired, epoch, expires_at FROM lease.acquire($1::pg_catalog.text, \
                     $2::pg_catalog.text, $3::pg_catalog.text::interval, $4::pg_catalog.text::interval)",
    );
    let r = app
        .query_one(acquire, &[&k, &"o1", &"1 hour", &"0"])
        .await
        .unwrap();
    let (got, epoch, x): (bool, Option<i64>, Option<std::time::SystemTime>) =
        (r.get(0), r.get(1), r.get(2));
    assert!(got);
    let e = epoch.unwrap();
    assert!(e < 1000, "epoch {e}: a shadow epoch floor was read");
    let r = app
        .query_one(acquire, &[&k, &"o1", &"1 hour", &"0"])
        .await
        .unwrap();
    assert_eq!(
        (
            r.get::<_, bool>(0),
            r.get::<_, Option<i64>>(1),
            r.get::<_, Option<std::time::SystemTime>>(2)
        ),
        (true, Some(e), x)
    );
    let r = app
        .query_one(acquire, &[&k, &"o2", &"1 hour", &"0"])
        .await
        .unwrap();
    assert!(!r.get::<_, bool>(0));
    // The blocking path: sleep, date_part, LEAST, quote_literal, timestamp arithmetic.
    let err = app
        .query_one(acquire, &[&k, &"o2", &"1 hour", &"60 milliseconds"])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "57014");

    let renew = q(
        "SELECT status FROM lease.renew($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8, $4::pg_catalog.text::interval)",
    );
    for (owner, ep, want) in [
        ("o1", e, "ok"),
        ("o1", e + 7, "epoch_mismatch"),
        ("o2", e, "not_owner"),
    ] {
        let got: String = app
            .query_one(renew, &[&k, &owner, &ep, &"1 hour"])
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want, "renew({owner}, {ep})");
    }
    let r = app
        .query_one(
            "SELECT held, owner, epoch FROM lease.inspect($1::pg_catalog.text)",
            &[&k],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.get::<_, bool>(0),
            r.get::<_, Option<String>>(1),
            r.get::<_, i64>(2)
        ),
        (true, Some("o1".into()), e)
    );
    let listed = |prefix: String| async move {
        app.query(
            "SELECT key FROM lease.list($1::pg_catalog.text)",
            &[&prefix],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
    };
    assert_eq!(listed(p.to_string()).await, vec![k.clone()]);
    assert!(listed(format!("{p}%_\\")).await.is_empty());
    let r = app
        .query_one(
            "SELECT held, epoch FROM lease.register_waiter($1::pg_catalog.text)",
            &[&k],
        )
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, bool>(0), r.get::<_, Option<i64>>(1)),
        (true, Some(e))
    );
    let fence =
        q("SELECT lease.fence($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)");
    app.query_one(fence, &[&k, &"o1", &e]).await.unwrap();
    for (owner, ep, code) in [("o1", e + 1, "LE003"), ("o2", e, "LE001")] {
        let err = app.query_one(fence, &[&k, &owner, &ep]).await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), code);
    }
    let release = q(
        "SELECT status FROM lease.release($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8) AS r(status)",
    );
    for want in ["ok", "not_owner"] {
        let got: String = app
            .query_one(release, &[&k, &"o1", &e])
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want);
    }
    let r = app
        .query_one(acquire, &[&k, &"o2", &"1 hour", &"0"])
        .await
        .unwrap();
    assert_eq!(r.get::<_, Option<i64>>(1), Some(e + 2));
    // Error paths: every violation named (array helpers, octet_length, isfinite, concatenations).
    let err = expect_error(
        app,
        "SELECT * FROM lease.acquire(pg_catalog.repeat('k', 2000), '', '-1 second', NULL)",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some(
            "key must be at most 1024 bytes (got 2000); owner must not be empty; ttl must be positive; wait must not be NULL."
        )
    );
    let err = expect_error(
        app,
        &format!("SELECT * FROM lease.acquire('{p}x', 'o', '1 month -30 days')"),
    )
    .await;
    assert_eq!(err.code, "22023");
    exercise_0_6_0_api(app, p).await;
    exercise_0_7_0_api(app, admin, p, e).await;
    exercise_0_8_0_api(app, admin, p).await;
    exercise_0_9_0_api(app, admin, p).await;
    exercise_0_10_0_api(app, admin, p).await;
    let version: String = app
        .query_one("SELECT lease.version()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, pglease::VERSION);
    let purged: i64 = admin
        .query_one("SELECT lease.purge('0'::pg_catalog.text::interval)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(purged >= 0);
}

/// The calls 0.7.0 added (the installing role's settings, the min epoch), with the results a correct
/// implementation gives; `e` is an epoch granted under `p` before. Leaves the settings as it found
/// them (none).
async fn exercise_0_7_0_api(app: &Client, admin: &Client, p: &str, e: i64) {
    let settings = "SELECT extract(epoch FROM max_ttl)::pg_catalog.float8, \
                    extract(epoch FROM failover_quarantine)::pg_catalog.float8, timeline, \
                    quarantine_until IS NULL, min_epoch";
    let r = admin
        .query_one(
            &format!("{settings} FROM lease.configure('1 day'::pg_catalog.text::interval, '2 days'::pg_catalog.text::interval)"),
            &[],
        )
        .await
        .unwrap();
    let read = |r: &tokio_postgres::Row| {
        (
            r.get::<_, Option<f64>>(0),
            r.get::<_, Option<f64>>(1),
            r.get::<_, i64>(2),
            r.get::<_, bool>(3),
            r.get::<_, i64>(4),
        )
    };
    // The min epoch is 0, or 1 once an earlier run in this database raised it (below).
    let (max_ttl, quarantine, timeline, none_running, min_epoch) = read(&r);
    assert_eq!(
        (max_ttl, quarantine, timeline, none_running),
        (Some(86_400.0), Some(172_800.0), 1, true)
    );
    assert!((0..=1).contains(&min_epoch), "min epoch {min_epoch}");
    let r = app
        .query_one(&format!("{settings} FROM lease.configuration()"), &[])
        .await
        .unwrap();
    assert_eq!(
        read(&r),
        (max_ttl, quarantine, timeline, none_running, min_epoch)
    );
    // The cap is the real one: a shadow settings table would not refuse this.
    let err = expect_error(
        app,
        &format!("SELECT * FROM lease.acquire('{p}cap', 'o', '25 hours')"),
    )
    .await;
    assert_eq!(err.code, "22023");
    // A grant under a quarantine that is configured but not running.
    let got: bool = app
        .query_one(
            "SELECT acquired FROM lease.acquire($1::pg_catalog.text, 'o1'::pg_catalog.text, '1 hour'::pg_catalog.text::interval)",
            &[&format!("{p}q")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(got);
    let floor: i64 = admin
        .query_one("SELECT lease.raise_min_epoch(1::pg_catalog.int8)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(floor >= 1);
    let high: i64 = app
        .query_one("SELECT lease.high_water()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(high >= e, "high water {high} below the epoch {e} granted");
    assert!(
        high < 1_000_000,
        "high water {high}: a shadow table was read"
    );
    admin
        .batch_execute(
            "SELECT lease.configure(NULL::pg_catalog.interval, '0'::pg_catalog.text::interval)",
        )
        .await
        .unwrap();
}

/// The call 0.8.0 added (an operator's end of another role's grant), with the results a correct
/// implementation gives.
async fn exercise_0_8_0_api(app: &Client, admin: &Client, p: &str) {
    let k = format!("{p}forced");
    let epoch: i64 = app
        .query_one(
            "SELECT epoch FROM lease.acquire($1::pg_catalog.text, 'o1'::pg_catalog.text, '1 hour'::pg_catalog.text::interval)",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    for want in [Some(epoch), None] {
        let ended: Option<i64> = admin
            .query_one("SELECT lease.force_release($1::pg_catalog.text)", &[&k])
            .await
            .unwrap()
            .get(0);
        assert_eq!(ended, want);
    }
    let status: String = app
        .query_one(
            "SELECT status FROM lease.renew($1::pg_catalog.text, 'o1'::pg_catalog.text, $2::pg_catalog.int8, '1 hour'::pg_catalog.text::interval)",
            &[&k, &epoch],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "not_owner");
    // A grant of another role (the installing role's) is refused to the application role, by the
    // refusal path of renew and release and by fence (42501), whatever the session settings.
    let theirs = format!("{p}theirs");
    let epoch: i64 = admin
        .query_one(
            "SELECT epoch FROM lease.acquire($1::pg_catalog.text, 'o1'::pg_catalog.text, '1 hour'::pg_catalog.text::interval)",
            &[&theirs],
        )
        .await
        .unwrap()
        .get(0);
    for sql in [
        format!(
            "SELECT lease.renew('{theirs}'::pg_catalog.text, 'o1'::pg_catalog.text, {epoch}::pg_catalog.int8, '1 hour'::pg_catalog.text::interval)"
        ),
        format!(
            "SELECT lease.release('{theirs}'::pg_catalog.text, 'o1'::pg_catalog.text, {epoch}::pg_catalog.int8)"
        ),
        format!(
            "SELECT lease.fence('{theirs}'::pg_catalog.text, 'o1'::pg_catalog.text, {epoch}::pg_catalog.int8)"
        ),
    ] {
        assert_eq!(expect_error(app, &sql).await.code, "42501", "{sql}");
    }
    let ended: Option<i64> = admin
        .query_one(
            "SELECT lease.force_release($1::pg_catalog.text)",
            &[&theirs],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, Some(epoch));
}

/// The calls 0.9.0 added (lease.transfer, lease.history, lease.configure_history), with the results a
/// correct implementation gives, and their privileges: the history is readable by every role that
/// may use the schema, its table by none but through the functions, a transfer of another role's
/// grant is refused (42501) and changes nothing, and only the installing role configures the
/// history. Leaves the history on, as it found it.
async fn exercise_0_9_0_api(app: &Client, admin: &Client, p: &str) {
    let k = format!("{p}handed");
    let transfer = "SELECT status, epoch FROM lease.transfer($1::pg_catalog.text, $2::pg_catalog.text, \
                    $3::pg_catalog.int8, $4::pg_catalog.text, $5::pg_catalog.text::interval)";
    let acquire = "SELECT epoch FROM lease.acquire($1::pg_catalog.text, 'o1'::pg_catalog.text, \
                   '1 hour'::pg_catalog.text::interval)";
    let e: i64 = app.query_one(acquire, &[&k]).await.unwrap().get(0);
    let r = app
        .query_one(transfer, &[&k, &"o1", &e, &"o2", &"1 hour"])
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, String>(0), r.get::<_, Option<i64>>(1)),
        ("ok".to_string(), Some(e + 1))
    );
    for (owner, ep, want) in [("o1", e, "not_owner"), ("o2", e, "epoch_mismatch")] {
        let r = app
            .query_one(transfer, &[&k, &owner, &ep, &"o3", &"1 hour"])
            .await
            .unwrap();
        assert_eq!(
            (r.get::<_, String>(0), r.get::<_, Option<i64>>(1)),
            (want.to_string(), None),
            "transfer({owner}, {ep})"
        );
    }
    // The history: the transferred grant and its successor, as the application role reads it.
    type Entry = (
        i64,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        bool,
    );
    let history = |key: String, owner: Option<&'static str>, max_rows: i32| async move {
        app.query(
            "SELECT epoch, owner, holder_role, ended_by, data, granted_at IS NOT NULL \
               FROM lease.history($1::pg_catalog.text, NULL::pg_catalog.interval, \
                                  $2::pg_catalog.text, $3::pg_catalog.int4)",
            &[&key, &owner, &max_rows],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| -> Entry { (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)) })
        .collect::<Vec<Entry>>()
    };
    let first: Entry = (
        e,
        "o1".into(),
        Some(APP.into()),
        Some("transferred".into()),
        None,
        true,
    );
    let second: Entry = (e + 1, "o2".into(), Some(APP.into()), None, None, true);
    assert_eq!(
        history(k.clone(), None, 100).await,
        vec![first, second.clone()]
    );
    assert_eq!(
        history(k.clone(), Some("o2"), 100).await,
        vec![second.clone()]
    );
    assert_eq!(history(k.clone(), None, 1).await, vec![second]);
    // Every role that may use the schema reads the same history (here the installing role).
    let by_admin: Vec<(i64, String, Option<String>)> = admin
        .query(
            "SELECT epoch, owner, ended_by FROM lease.history($1::pg_catalog.text)",
            &[&k],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        by_admin,
        vec![
            (e, "o1".to_string(), Some("transferred".to_string())),
            (e + 1, "o2".to_string(), None)
        ]
    );
    // Invalid input: 22023 naming every violation, whichever argument it is in.
    let err = expect_error(
        app,
        "SELECT * FROM lease.transfer('', '', NULL, '', '-1 second')",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some(
            "key must not be empty; owner must not be empty; epoch must not be NULL; to_owner must not be empty; ttl must be positive."
        )
    );
    let err = expect_error(app, "SELECT * FROM lease.history('', NULL, '', 0)").await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some(
            "key must not be empty; owner must not be empty; max_rows must be in [1, 10000] (got 0)."
        )
    );

    // Another role's grant: its transfer is refused (42501) and changes nothing.
    let theirs = format!("{p}theirs_handed");
    let epoch: i64 = admin.query_one(acquire, &[&theirs]).await.unwrap().get(0);
    let before = history(theirs.clone(), None, 100).await;
    assert_eq!(
        before,
        vec![(epoch, "o1".into(), Some(ADMIN.into()), None, None, true)],
        "the installing role's grant, as the application role reads it"
    );
    let sql = format!(
        "SELECT * FROM lease.transfer('{theirs}'::pg_catalog.text, 'o1'::pg_catalog.text, \
         {epoch}::pg_catalog.int8, 'o2'::pg_catalog.text, '1 hour'::pg_catalog.text::interval)"
    );
    assert_eq!(expect_error(app, &sql).await.code, "42501", "{sql}");
    assert_eq!(history(theirs.clone(), None, 100).await, before);
    let held: (String, i64) = app
        .query_one(
            "SELECT owner, epoch FROM lease.inspect($1::pg_catalog.text)",
            &[&theirs],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(held, ("o1".to_string(), epoch));

    // The table is reached only through the functions: the application role can neither read nor
    // write it, the installing role may only read and append it (to dump and restore).
    for sql in [
        "SELECT * FROM lease.grant_history".to_string(),
        format!("INSERT INTO lease.grant_history (key, epoch, owner) VALUES ('{p}forged', 1, 'x')"),
        "UPDATE lease.grant_history SET ended_by = 'released'".into(),
        "DELETE FROM lease.grant_history".into(),
        "TRUNCATE lease.grant_history".into(),
    ] {
        assert_eq!(expect_error(app, &sql).await.code, "42501", "{sql}");
    }
    for sql in [
        "UPDATE lease.grant_history SET ended_by = 'released'",
        "DELETE FROM lease.grant_history",
        "TRUNCATE lease.grant_history",
    ] {
        assert_eq!(
            expect_error(admin, sql).await.code,
            "42501",
            "{sql} (installing role)"
        );
    }

    // Only the installing role configures the history.
    let configure = "SELECT history, extract(epoch FROM history_retention)::pg_catalog.float8 \
                     FROM lease.configure_history($1::pg_catalog.bool, $2::pg_catalog.text::interval)";
    let err = expect_error(app, "SELECT lease.configure_history(false)").await;
    assert_eq!(err.code, "42501");
    let err = expect_error(
        admin,
        "SELECT lease.configure_history(NULL, '0'::pg_catalog.text::interval)",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert!(
        err.detail
            .as_deref()
            .is_some_and(|d| d.starts_with("retention must be in [1 second, 3650 days] (got ")),
        "{:?}",
        err.detail
    );
    let r = admin
        .query_one(configure, &[&Some(false), &Some("2 days")])
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, bool>(0), r.get::<_, f64>(1)),
        (false, 172_800.0)
    );
    let r = app
        .query_one(
            "SELECT history, extract(epoch FROM history_retention)::pg_catalog.float8 \
               FROM lease.configuration()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, bool>(0), r.get::<_, f64>(1)),
        (false, 172_800.0)
    );
    let off = format!("{p}unrecorded");
    app.query_one(acquire, &[&off]).await.unwrap();
    assert!(
        history(off, None, 100).await.is_empty(),
        "a grant made while the history is off is not recorded"
    );
    let r = admin
        .query_one(configure, &[&Some(true), &None::<&str>])
        .await
        .unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, f64>(1)), (true, 172_800.0));
    let r = admin
        .query_one(configure, &[&None::<bool>, &Some("30 days")])
        .await
        .unwrap();
    assert_eq!(
        (r.get::<_, bool>(0), r.get::<_, f64>(1)),
        (true, 2_592_000.0)
    );
}

/// One row of lease.browse as (key, state, owner, epoch, waiting, last_owner, data, has an expiry).
type Browsed = (
    String,
    String,
    Option<String>,
    i64,
    bool,
    Option<String>,
    Option<String>,
    bool,
);

/// The calls 0.10.0 added (lease.browse, lease.summary), with the results a correct implementation
/// gives: a page of the keys under `p` in every state, its filters and pagination, LIKE wildcards
/// taken literally, the summary's counts against the rows as the installing role reads them, and
/// 22023 naming every violation.
async fn exercise_0_10_0_api(app: &Client, admin: &Client, p: &str) {
    let b = format!("{p}console/");
    let acquire = "SELECT epoch FROM lease.acquire($1::pg_catalog.text, $2::pg_catalog.text, \
                   $3::pg_catalog.text::interval, '0'::pg_catalog.text::interval, $4::pg_catalog.text)";
    let grant = |key: String, ttl: &'static str, data: Option<&'static str>| async move {
        app.query_one(acquire, &[&key, &"o1", &ttl, &data])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let free = grant(format!("{b}free"), "1 hour", None).await;
    let status: String = app
        .query_one(
            "SELECT status FROM lease.release($1::pg_catalog.text, 'o1'::pg_catalog.text, $2::pg_catalog.int8)",
            &[&format!("{b}free"), &free],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "ok");
    let held = grant(format!("{b}held"), "1 hour", Some("d")).await;
    let awaited: bool = admin
        .query_one(
            "SELECT held FROM lease.register_waiter($1::pg_catalog.text)",
            &[&format!("{b}held")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(awaited);
    let lapsed = grant(format!("{b}lapsed"), "1 millisecond", None).await;
    await_lapsed(app, &format!("{b}lapsed")).await;

    let browse = |prefix: Option<String>,
                  after: Option<String>,
                  state: Option<&'static str>,
                  owner: Option<&'static str>,
                  max_rows: i32| async move {
        app.query(
            "SELECT key, state, owner, epoch, waiting, last_owner, data, expires_at IS NOT NULL \
               FROM lease.browse($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, \
                                 $4::pg_catalog.text, $5::pg_catalog.int4)",
            &[&prefix, &after, &state, &owner, &max_rows],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| -> Browsed {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            )
        })
        .collect::<Vec<Browsed>>()
    };
    let rows: [Browsed; 3] = [
        (
            format!("{b}free"),
            "free".into(),
            None,
            free + 1,
            false,
            None,
            None,
            false,
        ),
        (
            format!("{b}held"),
            "held".into(),
            Some("o1".into()),
            held,
            true,
            None,
            Some("d".into()),
            true,
        ),
        (
            format!("{b}lapsed"),
            "lapsed".into(),
            None,
            lapsed,
            false,
            Some("o1".into()),
            None,
            true,
        ),
    ];
    assert_eq!(browse(Some(b.clone()), None, None, None, 100).await, rows);
    assert_eq!(
        browse(Some(b.clone()), Some(format!("{b}free")), None, None, 1).await,
        rows[1..2]
    );
    assert_eq!(
        browse(Some(b.clone()), None, Some("lapsed"), None, 100).await,
        rows[2..]
    );
    assert_eq!(
        browse(Some(b.clone()), None, None, Some("o1"), 100).await,
        rows[1..2]
    );
    assert_eq!(
        browse(Some(format!("{b}h")), None, None, None, 100).await,
        rows[1..2]
    );
    assert!(
        browse(Some(format!("{b}%")), None, None, None, 100)
            .await
            .is_empty()
    );
    assert!(
        browse(Some(format!("{b}_eld")), None, None, None, 100)
            .await
            .is_empty()
    );
    let err = expect_error(
        app,
        "SELECT * FROM lease.browse(pg_catalog.repeat('p', 1025), NULL, 'x', '', 0)",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some(
            "prefix must be at most 1024 bytes (got 1025); state must be held, lapsed or free; owner must not be empty; max_rows must be in [1, 1000] (got 0)."
        )
    );

    // The summary: every key in one state, the awaited held or lapsed ones, none expiring within 0.
    let summary = |within: &'static str| async move {
        let r = app
            .query_one(
                "SELECT held, lapsed, free, expiring, waiting \
                   FROM lease.summary($1::pg_catalog.text::interval)",
                &[&within],
            )
            .await
            .unwrap();
        [0, 1, 2, 3, 4].map(|i| r.get::<_, i64>(i))
    };
    let [held_n, lapsed_n, free_n, expiring, waiting] = summary("0").await;
    let r = admin
        .query_one(
            "SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE owner IS NOT NULL AND waiting) \
               FROM lease.leases",
            &[],
        )
        .await
        .unwrap();
    let (total, awaited): (i64, i64) = (r.get(0), r.get(1));
    assert_eq!(held_n + lapsed_n + free_n, total);
    assert!(held_n >= 1 && lapsed_n >= 1 && free_n >= 1);
    assert_eq!(expiring, 0);
    assert_eq!(waiting, awaited);
    assert!(waiting >= 1);
    let [.., expiring_2h, _] = summary("2 hours").await;
    assert!(
        expiring_2h >= 1,
        "the key held for an hour lapses within 2 hours"
    );
    let err = expect_error(
        app,
        "SELECT * FROM lease.summary('-1 second'::pg_catalog.text::interval)",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some("expiring_within must not be negative.")
    );
}

/// The calls 0.6.0 added (lease data, renew_many, watch, semaphores), with the results a correct
/// implementation gives (keys under `p`, in a database where nothing else happened to them).
async fn exercise_0_6_0_api(app: &Client, p: &str) {
    let d = format!("{p}d");
    let r = app
        .query_one(
            "SELECT acquired, epoch FROM lease.acquire($1::pg_catalog.text, 'o1'::pg_catalog.text, '1 hour'::pg_catalog.text::interval, '0'::pg_catalog.text::interval, 'd1'::pg_catalog.text)",
            &[&d],
        )
        .await
        .unwrap();
    assert!(r.get::<_, bool>(0));
    let ed: i64 = r.get(1);
    assert!(ed < 1000, "epoch {ed}: a shadow epoch floor was read");
    let status: String = app
        .query_one(
            "SELECT status FROM lease.renew($1::pg_catalog.text, 'o1'::pg_catalog.text, $2::pg_catalog.int8, '1 hour'::pg_catalog.text::interval, 'd2'::pg_catalog.text)",
            &[&d, &ed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "ok");
    let r = app
        .query_one(
            "SELECT held, epoch, data FROM lease.inspect($1::pg_catalog.text)",
            &[&d],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            r.get::<_, bool>(0),
            r.get::<_, i64>(1),
            r.get::<_, Option<String>>(2)
        ),
        (true, ed, Some("d2".to_owned()))
    );
    let listed: Option<String> = app
        .query_one("SELECT data FROM lease.list($1::pg_catalog.text)", &[&d])
        .await
        .unwrap()
        .get(0);
    assert_eq!(listed.as_deref(), Some("d2"));
    // renew_many: the fast path (every pair renewed), the careful one (a refusal), invalid input.
    let unknown = format!("{p}unknown");
    for (keys, epochs, want) in [
        (vec![d.clone()], vec![ed], vec!["ok"]),
        (
            vec![d.clone(), unknown.clone()],
            vec![ed + 1, 1],
            vec!["epoch_mismatch", "not_owner"],
        ),
    ] {
        let mut got: Vec<(String, String)> = app
            .query(
                "SELECT key, status FROM lease.renew_many('o1'::pg_catalog.text, $1::pg_catalog.text[], $2::pg_catalog.int8[], '1 hour'::pg_catalog.text::interval)",
                &[&keys, &epochs],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        got.sort();
        let mut expected: Vec<(String, String)> = keys
            .iter()
            .cloned()
            .zip(want.iter().map(|s| (*s).to_owned()))
            .collect();
        expected.sort();
        assert_eq!(got, expected);
    }
    let err = expect_error(
        app,
        &format!(
            "SELECT * FROM lease.renew_many('', ARRAY['{d}', '', '{d}'], ARRAY[1, NULL], '-1 s')"
        ),
    )
    .await;
    assert_eq!(err.code, "22023");
    assert!(
        err.detail.as_deref().is_some_and(|x| x.starts_with(
            "owner must not be empty; ttl must be positive; keys and epochs must have the same length (got 3 and 2); keys[2] must not be empty; epochs[2] must not be NULL; keys must be distinct ("
        )),
        "{err:?}"
    );
    // watch: an unknown key is FREE at the (real) epoch floor.
    let r = app
        .query_one(
            "SELECT held, epoch FROM lease.watch($1::pg_catalog.text)",
            &[&format!("{p}w")],
        )
        .await
        .unwrap();
    assert!(!r.get::<_, bool>(0));
    assert!(r.get::<_, i64>(1) < 1000, "a shadow epoch floor was read");
    // Semaphores.
    let sem = format!("{p}s");
    let slot = "SELECT acquired, slot, key, epoch FROM lease.acquire_slot($1::pg_catalog.text, $2::pg_catalog.text, '1 hour'::pg_catalog.text::interval, 1::pg_catalog.int4, $3::pg_catalog.text::interval)";
    let r = app.query_one(slot, &[&sem, &"o1", &"0"]).await.unwrap();
    assert_eq!(
        (
            r.get::<_, bool>(0),
            r.get::<_, Option<i32>>(1),
            r.get::<_, Option<String>>(2)
        ),
        (true, Some(1), Some(format!("{sem}#1")))
    );
    let es: i64 = r.get(3);
    assert!(es < 1000, "epoch {es}: a shadow epoch floor was read");
    let r = app.query_one(slot, &[&sem, &"o2", &"0"]).await.unwrap();
    assert!(!r.get::<_, bool>(0));
    let err = app
        .query_one(slot, &[&sem, &"o2", &"60 milliseconds"])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "57014");
    let k: String = app
        .query_one(
            "SELECT lease.slot_key($1::pg_catalog.text, 1::pg_catalog.int4)",
            &[&sem],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(k, format!("{sem}#1"));
    let rows = app
        .query(
            "SELECT slot, held, owner, epoch FROM lease.list_slots($1::pg_catalog.text)",
            &[&sem],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].get::<_, i32>(0),
            rows[0].get::<_, bool>(1),
            rows[0].get::<_, Option<String>>(2),
            rows[0].get::<_, i64>(3)
        ),
        (1, true, Some("o1".to_owned()), es)
    );
    let holders: i32 = app
        .query_one(
            "SELECT holders FROM lease.register_slot_waiter($1::pg_catalog.text)",
            &[&sem],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(holders, 1);
    let status: String = app
        .query_one(
            "SELECT status FROM lease.release($1::pg_catalog.text, 'o1'::pg_catalog.text, $2::pg_catalog.int8) AS r(status)",
            &[&k, &es],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "ok");
    let r = app.query_one(slot, &[&sem, &"o2", &"0"]).await.unwrap();
    assert_eq!(r.get::<_, Option<i64>>(3), Some(es + 2));
    let err = expect_error(
        app,
        "SELECT * FROM lease.acquire_slot('', '', '0', 0, NULL, pg_catalog.repeat('d', 9000))",
    )
    .await;
    assert_eq!(err.code, "22023");
    assert_eq!(
        err.detail.as_deref(),
        Some(
            "semaphore must not be empty; owner must not be empty; ttl must be positive; max_holders must be in [1, 10000] (got 0); wait must not be NULL; data must be at most 8192 bytes (got 9000)."
        )
    );
    let err = expect_error(app, "SELECT lease.slot_key(NULL, 0)").await;
    assert_eq!(err.code, "22023");
}

#[tokio::test]
async fn shadowing_objects_first_on_the_callers_search_path_are_never_used() {
    let s = server();
    let db = s.fresh_db_with_extension("shadow");
    s.psql(&db, &format!("GRANT CREATE ON DATABASE {db} TO {APP}"));
    let su = s.connect_super(&db).await;
    let app = s.connect_as(&db, APP).await;
    app.batch_execute(&evil_schema_sql())
        .await
        .expect("create the evil schema");
    app.batch_execute(&temp_objects_sql())
        .await
        .expect("create temp shadows");
    let admin = s.connect_as(&db, ADMIN).await;

    // Positive controls: with evil first, the caller's own unqualified SQL does hit the shadows.
    app.batch_execute("SET search_path = evil, pg_catalog, pg_temp")
        .await
        .unwrap();
    for probe in [
        "SELECT clock_timestamp()",
        "SELECT octet_length('x'::pg_catalog.text)",
        "SELECT 'a'::pg_catalog.text = 'a'::pg_catalog.text",
        "SELECT 'a'::pg_catalog.text || 1",
        "SELECT ARRAY['a']::pg_catalog.text[] || ARRAY['b']::pg_catalog.text[]",
        "SELECT max(x) FROM (VALUES (1::pg_catalog.int8)) AS v(x)",
        "SELECT count(*) FROM (VALUES (1)) AS v(x)",
        "SELECT pg_catalog.now() + interval '1 second'",
        "SELECT pg_temp.clock_timestamp()",
    ] {
        let before = log_count(&su).await;
        app.batch_execute(probe)
            .await
            .unwrap_or_else(|e| panic!("{probe}: {e}"));
        assert!(
            log_count(&su).await > before,
            "control {probe} did not reach its shadow"
        );
    }
    let shadow_epoch: i64 = app
        .query_one("SELECT epoch FROM leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        shadow_epoch, 999_999,
        "control: the caller's unqualified table is evil.leases"
    );
    app.batch_execute("SET search_path = pg_temp, evil, pg_catalog")
        .await
        .unwrap();
    let temp_epoch: i64 = app
        .query_one("SELECT epoch FROM leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        temp_epoch, 888_888,
        "control: pg_temp first gives the temp table"
    );
    su.batch_execute("TRUNCATE evil.log").await.unwrap();

    for (i, path) in [
        "evil, pg_catalog, pg_temp, public",
        "pg_temp, evil, pg_catalog",
        "evil, pg_temp, lease, pg_catalog",
    ]
    .iter()
    .enumerate()
    {
        app.batch_execute(&format!("SET search_path = {path}"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("SET search_path = {path}"))
            .await
            .unwrap();
        exercise_api(&app, &admin, &format!("s{i}/")).await;
        let used: Vec<String> = su
            .query("SELECT format('%s as %s', what, who) FROM evil.log", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            used.is_empty(),
            "with search_path {path} the API used shadows: {used:?}"
        );
    }
}
