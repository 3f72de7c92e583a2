//! pg_lease_queue under attack, as search_path.rs, privileges.rs, installer.rs and settings.rs attack
//! pg_lease:
//!
//! - a caller (an unprivileged role, and the installing role) puts schemas and `pg_temp` objects of
//!   its own first on its `search_path`, named like everything the queue's SQL names (functions,
//!   aggregates, set-returning functions, operators, tables, sequences, types, look-alikes of the
//!   `lease.*` functions), each logging its use; every public queue function must give the
//!   results a correct implementation gives while the log stays empty;
//! - no role but the superuser can create objects in schema `lease_queue`, rename it or change
//!   the extension's objects, and installing into a `lease_queue` schema that holds objects or
//!   grants privileges is refused (55000) before anything planted there can run;
//! - the commit-order trigger stamps the commits of unprivileged producers (also one whose role
//!   changed before the commit), and per-key order stays commit order when a producer makes it
//!   fire at once (`SET CONSTRAINTS ... IMMEDIATE`);
//! - `session_replication_role = replica`, which disables the trigger, makes send refuse (55000).

use std::sync::Arc;
use std::time::Duration;

use pglease_tests::{
    ADMIN, APP, Wait, await_backend_waiting, backend_pid, expect_error, server, sqlstate,
};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use crate::privileges::refused;

/// How long a producer's commit may take to be seen waiting for a key row lock.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------------
// Shadows
// ---------------------------------------------------------------------------------------------------

/// Shadowing functions: (name, argument types, result type, what the real one computes).
const FUNCTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "clock_timestamp",
        "",
        "timestamptz",
        "pg_catalog.clock_timestamp()",
    ),
    ("now", "", "timestamptz", "pg_catalog.now()"),
    ("md5", "text", "text", "pg_catalog.md5($1)"),
    (
        "substr",
        "text, integer, integer",
        "text",
        "pg_catalog.substr($1, $2, $3)",
    ),
    (
        "octet_length",
        "text",
        "integer",
        "pg_catalog.octet_length($1)",
    ),
    (
        "nextval",
        "text",
        "bigint",
        "pg_catalog.nextval($1::pg_catalog.regclass)",
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
        "array_append",
        "bigint[], bigint",
        "bigint[]",
        "pg_catalog.array_append($1, $2)",
    ),
    (
        "cardinality",
        "text[]",
        "integer",
        "pg_catalog.cardinality($1)",
    ),
    (
        "cardinality",
        "bigint[]",
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
        "quote_literal",
        "text",
        "text",
        "pg_catalog.quote_literal($1)",
    ),
    (
        "current_setting",
        "text",
        "text",
        "pg_catalog.current_setting($1)",
    ),
    // Look-alikes of the queue's own functions and of pg_lease's, as if named without a schema
    // (pg_lease's are stubs: they must never be called).
    (
        "partition_of",
        "text, integer",
        "integer",
        "lease_queue.partition_of($1, $2)",
    ),
    (
        "lease_key",
        "text, integer",
        "text",
        "lease_queue.lease_key($1, $2)",
    ),
    ("_valid_name", "text", "boolean", "true"),
    ("acquire", "text, text, interval", "boolean", "true"),
    ("renew", "text, text, bigint, interval", "text", "'ok'"),
    ("release", "text, text, bigint", "text", "'ok'"),
    (
        "fence",
        "text, text, bigint",
        "timestamptz",
        "pg_catalog.clock_timestamp()",
    ),
];

/// Shadowing set-returning functions: (name, argument type, element type).
const SET_FUNCTIONS: &[(&str, &str, &str)] = &[
    ("unnest", "text[]", "text"),
    ("unnest", "bigint[]", "bigint"),
    ("generate_series", "integer, integer", "integer"),
    ("list", "text", "text"),
    ("inspect", "text", "boolean"),
];

/// Shadowing aggregates: (name, argument type, state type, transition expression over $1, $2).
const AGGREGATES: &[(&str, &str, &str, &str)] = &[
    (
        "array_agg",
        "bigint",
        "bigint[]",
        "pg_catalog.array_append($1, $2)",
    ),
    (
        "array_agg",
        "text",
        "text[]",
        "pg_catalog.array_append($1, $2)",
    ),
    (
        "min",
        "bigint",
        "bigint",
        "pg_catalog.int8smaller(coalesce($1, $2), $2)",
    ),
    (
        "min",
        "timestamptz",
        "timestamptz",
        "pg_catalog.timestamptz_smaller(coalesce($1, $2), $2)",
    ),
    (
        "max",
        "bigint",
        "bigint",
        "pg_catalog.int8larger(coalesce($1, $2), $2)",
    ),
    (
        "sum",
        "bigint",
        "numeric",
        "pg_catalog.numeric_add(coalesce($1, 0), $2::pg_catalog.numeric)",
    ),
    (
        "count",
        "text",
        "bigint",
        "pg_catalog.int8pl(coalesce($1, 0), 1)",
    ),
];

/// Shadowing operators: (operator, left, right, result, what the real one computes).
const OPERATORS: &[(&str, &str, &str, &str, &str)] = &[
    ("=", "text", "text", "boolean", "pg_catalog.texteq($1, $2)"),
    ("<>", "text", "text", "boolean", "pg_catalog.textne($1, $2)"),
    (
        "~",
        "text",
        "text",
        "boolean",
        "pg_catalog.textregexeq($1, $2)",
    ),
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
        "<",
        "bigint",
        "bigint",
        "boolean",
        "pg_catalog.int8lt($1, $2)",
    ),
    (
        ">",
        "bigint",
        "bigint",
        "boolean",
        "pg_catalog.int8gt($1, $2)",
    ),
    (
        "-",
        "bigint",
        "bigint",
        "bigint",
        "pg_catalog.int8mi($1, $2)",
    ),
    (
        "+",
        "bigint",
        "bigint",
        "bigint",
        "pg_catalog.int8pl($1, $2)",
    ),
    (
        "%",
        "bigint",
        "bigint",
        "bigint",
        "pg_catalog.int8mod($1, $2)",
    ),
    (
        "=",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4eq($1, $2)",
    ),
    (
        "<",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4lt($1, $2)",
    ),
    (
        ">",
        "integer",
        "integer",
        "boolean",
        "pg_catalog.int4gt($1, $2)",
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
        "+",
        "integer",
        "integer",
        "integer",
        "pg_catalog.int4pl($1, $2)",
    ),
    (
        "-",
        "integer",
        "integer",
        "integer",
        "pg_catalog.int4mi($1, $2)",
    ),
    (
        "<=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_le($1, $2)",
    ),
    (
        ">",
        "timestamptz",
        "timestamptz",
        "boolean",
        "pg_catalog.timestamptz_gt($1, $2)",
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
        "*",
        "double precision",
        "interval",
        "interval",
        "pg_catalog.mul_d_interval($1, $2)",
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
        "text[]",
        "text[]",
        "text[]",
        "pg_catalog.array_cat($1, $2)",
    ),
    (
        "||",
        "bigint[]",
        "bigint",
        "bigint[]",
        "pg_catalog.array_append($1, $2)",
    ),
    (
        "<@",
        "numeric",
        "numrange",
        "boolean",
        "pg_catalog.elem_contained_by_range($1, $2)",
    ),
    (
        "%",
        "numeric",
        "numeric",
        "numeric",
        "pg_catalog.numeric_mod($1, $2)",
    ),
];

/// Tables named like the queue's and pg_lease's (columns enough to be read or written by the
/// queue's SQL, were it to name them without a schema).
const TABLES: &[(&str, &str)] = &[
    (
        "queues",
        "qid bigint, name text, partitions integer, max_attempts integer, created_at timestamptz",
    ),
    (
        "partitions",
        "qid bigint, partition integer, claim_epoch bigint, ttl interval, batch_id bigint, \
         batch_epoch bigint, batch_owner text, batch_opened_at timestamptz, last_batch_id bigint, \
         last_batch_epoch bigint, acked bigint, batch_ids bigint[]",
    ),
    (
        "messages",
        "id bigint, qid bigint, partition integer, key text, seq bigint, payload jsonb, \
         enqueued_at timestamptz, deliver_at timestamptz, attempts integer, retry boolean, \
         reason text, epoch bigint, last_batch_id bigint",
    ),
    (
        "keys",
        "qid bigint, key text, partition integer, ready_at timestamptz, last_seq bigint",
    ),
    (
        "dead_letters",
        "id bigint, qid bigint, queue text, partition integer, key text, seq bigint, \
         payload jsonb, enqueued_at timestamptz, attempts integer, reason text, epoch bigint, \
         batch_id bigint, dead_at timestamptz",
    ),
    (
        "leases",
        "key text, owner text, epoch bigint, expires_at timestamptz, waiting boolean, \
         prior_expires_at timestamptz",
    ),
    ("epoch_floor", "floor bigint, sentinel boolean"),
];

/// Sequences named like the queue's, starting far above anything the real ones reach here.
const SEQUENCES: &[&str] = &["queue_ids", "message_ids", "batch_ids", "positions"];
/// Where the shadow sequences start: an id at or above it came from a shadow.
const SHADOW_IDS: i64 = 1_000_000_000_000;

/// Prefixes of the queue names each exercise uses (one per search_path tried).
const PREFIXES: &[&str] = &["s0_", "s1_", "s2_"];

/// A function body that logs `what` into `evil.log` and then computes `expr`.
fn logging_body(what: &str, expr: &str) -> String {
    format!("BEGIN INSERT INTO evil.log (what) VALUES ('{what}'); RETURN {expr}; END")
}

/// The shadow schema `schema` (created by the connected role): shadows of everything the queue's
/// SQL names, each logging into `evil.log` (which `evil` creates first, writable by everyone).
fn shadow_schema_sql(schema: &str) -> String {
    let mut sql = format!(
        "SET search_path = pg_catalog;
         CREATE SCHEMA {schema};
         GRANT USAGE ON SCHEMA {schema} TO PUBLIC;\n"
    );
    if schema == "evil" {
        sql += "CREATE TABLE evil.log (what text, who text DEFAULT current_user);
                GRANT INSERT, SELECT ON evil.log TO PUBLIC;
                CREATE SEQUENCE evil.control_seq;
                GRANT ALL ON SEQUENCE evil.control_seq TO PUBLIC;\n";
    }
    for (name, args, ret, expr) in FUNCTIONS {
        sql += &format!(
            "CREATE FUNCTION {schema}.{name}({args}) RETURNS {ret} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;\n",
            logging_body(&format!("{schema}.{name}({args})"), expr)
        );
    }
    for (name, args, elem) in SET_FUNCTIONS {
        sql += &format!(
            "CREATE FUNCTION {schema}.{name}({args}) RETURNS SETOF {elem} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f$BEGIN INSERT INTO evil.log (what) \
             VALUES ('{schema}.{name}({args})'); RETURN; END$f$;\n"
        );
    }
    for (i, (name, arg, state, step)) in AGGREGATES.iter().enumerate() {
        sql += &format!(
            "CREATE FUNCTION {schema}.agg_{i}({state}, {arg}) RETURNS {state} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;
             CREATE AGGREGATE {schema}.{name}({arg}) (sfunc = {schema}.agg_{i}, stype = {state});\n",
            logging_body(&format!("{schema}.{name}({arg})"), step)
        );
    }
    sql += &format!(
        "CREATE FUNCTION {schema}.count_sf(bigint) RETURNS bigint LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE AGGREGATE {schema}.count(*) (sfunc = {schema}.count_sf, stype = bigint, \
                                            initcond = '0');\n",
        logging_body(&format!("{schema}.count(*)"), "$1 OPERATOR(pg_catalog.+) 1")
    );
    for (i, (op, l, r, ret, expr)) in OPERATORS.iter().enumerate() {
        sql += &format!(
            "CREATE FUNCTION {schema}.op_{i}({l}, {r}) RETURNS {ret} LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $f${}$f$;
             CREATE OPERATOR {schema}.{op} (leftarg = {l}, rightarg = {r}, function = {schema}.op_{i});\n",
            logging_body(&format!("{schema}.operator {op}({l}, {r})"), expr)
        );
    }
    // Tables: every write logs (a trigger); rows that would show in a result if read: queues of
    // the exercises' names with 7 partitions, leases of their partitions at epoch 999999.
    sql += &format!(
        "CREATE FUNCTION {schema}.log_write() RETURNS trigger LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f$BEGIN INSERT INTO evil.log (what) \
         VALUES ('{schema}.' || TG_TABLE_NAME || ' ' || TG_OP); RETURN NULL; END$f$;\n"
    );
    for (table, columns) in TABLES {
        sql += &format!(
            "CREATE TABLE {schema}.{table} ({columns});
             GRANT ALL ON {schema}.{table} TO PUBLIC;
             CREATE TRIGGER log_write AFTER INSERT OR UPDATE OR DELETE ON {schema}.{table}
                 FOR EACH STATEMENT EXECUTE FUNCTION {schema}.log_write();\n"
        );
    }
    for (i, p) in PREFIXES.iter().enumerate() {
        for q in ["qa", "qb"] {
            sql += &format!(
                "INSERT INTO {schema}.queues VALUES ({i}, '{p}{q}', 7, 9999, '2000-01-01');
                 INSERT INTO {schema}.leases VALUES ('lease_queue:{p}{q}:0', 'evil', 999999,
                                                     '2999-01-01', false, NULL);\n"
            );
        }
    }
    sql += &format!("INSERT INTO {schema}.epoch_floor VALUES (1000000, true);\n");
    for seq in SEQUENCES {
        sql += &format!(
            "CREATE SEQUENCE {schema}.{seq} START {SHADOW_IDS};
             GRANT ALL ON SEQUENCE {schema}.{seq} TO PUBLIC;\n"
        );
    }
    // Types the SQL spells without a keyword.
    sql += &format!(
        "CREATE DOMAIN {schema}.text AS pg_catalog.varchar(3);
         CREATE DOMAIN {schema}.jsonb AS pg_catalog.int4;
         CREATE DOMAIN {schema}.timestamptz AS pg_catalog.int4;
         CREATE DOMAIN {schema}.numrange AS pg_catalog.int4;
         CREATE DOMAIN {schema}.regclass AS pg_catalog.int4;
         CREATE TYPE {schema}.record AS (x pg_catalog.int4);
         CREATE TYPE {schema}.delivery AS (x pg_catalog.int4);
         CREATE TYPE {schema}.claim_result AS (x pg_catalog.int4);\n"
    );
    sql
}

/// Temporary shadows in the caller's own session: views named like the tables whose every read
/// logs (and which cannot be written), sequences, a function and an operator (functions and
/// operators are never searched in pg_temp unless qualified; relations and types are).
fn temp_objects_sql(who: &str) -> String {
    let mut sql = format!(
        "CREATE FUNCTION pg_temp.spy(what text) RETURNS boolean LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;\n",
        logging_body(&format!("pg_temp({who}).' || what || '"), "true")
    );
    for (table, columns) in TABLES {
        let nulls: Vec<String> = columns
            .split(',')
            .map(|c| {
                let mut parts = c.split_whitespace();
                let name = parts.next().unwrap();
                let ty: Vec<&str> = parts.collect();
                format!("NULL::{} AS {name}", ty.join(" "))
            })
            .collect();
        sql += &format!(
            "CREATE TEMP VIEW {table} AS SELECT {} WHERE pg_temp.spy('{table}');\n",
            nulls.join(", ")
        );
    }
    for seq in SEQUENCES {
        sql += &format!("CREATE TEMP SEQUENCE {seq} START {SHADOW_IDS};\n");
    }
    sql += &format!(
        "CREATE DOMAIN pg_temp.delivery AS pg_catalog.int4;
         CREATE FUNCTION pg_temp.md5(text) RETURNS text LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE FUNCTION pg_temp.op_eq(text, text) RETURNS boolean LANGUAGE plpgsql \
         SET search_path = pg_catalog AS $f${}$f$;
         CREATE OPERATOR pg_temp.= (leftarg = text, rightarg = text, function = pg_temp.op_eq);\n",
        logging_body(&format!("pg_temp({who}).md5"), "pg_catalog.md5($1)"),
        logging_body(
            &format!("pg_temp({who}).operator ="),
            "pg_catalog.texteq($1, $2)"
        ),
    );
    sql
}

/// What the shadows logged, as `what as who`.
async fn logged(su: &Client) -> Vec<String> {
    su.query("SELECT format('%s as %s', what, who) FROM evil.log", &[])
        .await
        .expect("read evil.log")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

// ---------------------------------------------------------------------------------------------------
// The whole API, with the results a correct implementation gives
// ---------------------------------------------------------------------------------------------------

/// Typed parameters of one call, as a vector.
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        vec![$(&$p as &(dyn ToSql + Sync)),*]
    };
}

/// The SQLSTATE of a statement that must fail.
async fn code_of(c: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    match c.query(sql, params).await {
        Ok(_) => panic!("expected an error from: {sql}"),
        Err(e) => sqlstate(&e).unwrap_or_else(|| panic!("{sql}: no SQLSTATE: {e}")),
    }
}

/// A delivered message: (batch_id, id, key, payload as text, attempts).
type Delivery = (i64, i64, Option<String>, String, i32);

const RECEIVE: &str = "SELECT d.batch_id, d.id, d.key, d.payload::pg_catalog.text, d.attempts \
     FROM lease_queue.receive($1::pg_catalog.text, $2::pg_catalog.int4, $3::pg_catalog.text, \
                              $4::pg_catalog.int8, $5::pg_catalog.int4) AS d";
const ACK_AND_RECEIVE: &str = "SELECT d.batch_id, d.id, d.key, d.payload::pg_catalog.text, \
     d.attempts FROM lease_queue.ack_and_receive($1::pg_catalog.text, $2::pg_catalog.int4, \
     $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int8, $6::pg_catalog.int4) AS d";
const SEND: &str = "SELECT lease_queue.send($1::pg_catalog.text, $2::pg_catalog.text, \
     $3::pg_catalog.text::pg_catalog.jsonb, $4::pg_catalog.text::pg_catalog.interval)";
const ACK: &str = "SELECT lease_queue.ack($1::pg_catalog.text, $2::pg_catalog.int4, \
     $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int8)";
const NACK: &str = "SELECT lease_queue.nack($1::pg_catalog.text, $2::pg_catalog.int4, \
     $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int8, $6::pg_catalog.int8, \
     $7::pg_catalog.text::pg_catalog.interval, $8::pg_catalog.text)";
const RELEASE: &str = "SELECT lease_queue.release($1::pg_catalog.text, $2::pg_catalog.int4, \
     $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.bool)";
const CLAIM: &str = "SELECT c.claimed, c.epoch FROM lease_queue.claim($1::pg_catalog.text, \
     $2::pg_catalog.int4, $3::pg_catalog.text, $4::pg_catalog.text::pg_catalog.interval) AS c";
const CLAIM_ANY: &str = "SELECT c.claimed, c.partition, c.epoch FROM lease_queue.claim_any(\
     $1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text::pg_catalog.interval) AS c";

async fn receive(c: &Client, q: &str, partition: i32, owner: &str, epoch: i64) -> Vec<Delivery> {
    c.query(RECEIVE, &[&q, &partition, &owner, &epoch, &100i32])
        .await
        .unwrap_or_else(|e| panic!("receive({q}, {partition}, {owner}, {epoch}): {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

async fn ack_and_receive(
    c: &Client,
    q: &str,
    partition: i32,
    owner: &str,
    epoch: i64,
    batch: i64,
) -> Vec<Delivery> {
    c.query(
        ACK_AND_RECEIVE,
        &[&q, &partition, &owner, &epoch, &batch, &100i32],
    )
    .await
    .unwrap_or_else(|e| panic!("ack_and_receive({q}, {partition}, {owner}, {epoch}, {batch}): {e}"))
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

async fn send(c: &Client, q: &str, key: Option<&str>, payload: &str, delay: &str) -> i64 {
    c.query_one(SEND, &[&q, &key, &payload, &delay])
        .await
        .unwrap_or_else(|e| panic!("send({q}, {key:?}, {payload}): {e}"))
        .get(0)
}

async fn ack(c: &Client, q: &str, partition: i32, owner: &str, epoch: i64, batch: i64) {
    c.query(ACK, &[&q, &partition, &owner, &epoch, &batch])
        .await
        .unwrap_or_else(|e| panic!("ack({q}, {partition}, {owner}, {epoch}, {batch}): {e}"));
}

async fn nack(c: &Client, q: &str, epoch: i64, batch: i64, id: i64, reason: &str) -> String {
    c.query_one(NACK, &[&q, &0i32, &"c", &epoch, &batch, &id, &"0", &reason])
        .await
        .unwrap_or_else(|e| panic!("nack({q}, {batch}, {id}): {e}"))
        .get(0)
}

async fn claim(c: &Client, q: &str, partition: i32, owner: &str) -> (bool, Option<i64>) {
    let r = c
        .query_one(CLAIM, &[&q, &partition, &owner, &"1 hour"])
        .await
        .unwrap_or_else(|e| panic!("claim({q}, {partition}, {owner}): {e}"));
    (r.get(0), r.get(1))
}

/// The payloads and attempts of a batch, and its one batch id.
fn payloads(batch: &[Delivery]) -> (Vec<(String, i32)>, i64) {
    let id = batch.first().map_or(0, |d| d.0);
    assert!(batch.iter().all(|d| d.0 == id), "one batch id: {batch:?}");
    (batch.iter().map(|d| (d.3.clone(), d.4)).collect(), id)
}

/// Expected payloads and attempts.
fn delivered(v: &[(&str, i32)]) -> Vec<(String, i32)> {
    v.iter().map(|(p, a)| ((*p).to_owned(), *a)).collect()
}

/// Every public queue function, as `app` and (for the administrative ones) the installing role,
/// on queues `<p>qa` (1 partition, max_attempts 2) and `<p>qb` (2 partitions), in a database where
/// nothing else happened to them; asserts every result.
pub(crate) async fn exercise_queue_api(app: &Client, admin: &Client, p: &str) {
    let qa = format!("{p}qa");
    let qb = format!("{p}qb");
    let nosuch = format!("{p}nosuch");
    let create = "SELECT lease_queue.create_queue($1::pg_catalog.text, $2::pg_catalog.int4, \
                  $3::pg_catalog.int4)";
    admin.query(create, &[&qa, &1i32, &2i32]).await.unwrap();
    assert_eq!(code_of(admin, create, &[&qa, &1i32, &2i32]).await, "42710");
    admin
        .query(
            "SELECT lease_queue.create_queue($1::pg_catalog.text, $2::pg_catalog.int4)",
            &[&qb, &2i32],
        )
        .await
        .unwrap();
    assert_eq!(code_of(admin, create, &[&"", &0i32, &0i32]).await, "22023");
    // A new queue is its creator's: the application role is granted both (under the same hostile
    // settings).
    for q in [&qa, &qb] {
        for privilege in ["produce", "consume"] {
            admin
                .query(
                    "SELECT lease_queue.grant_queue($1::pg_catalog.text, 'app'::pg_catalog.text, \
                     $2::pg_catalog.text)",
                    &[q, &privilege],
                )
                .await
                .unwrap();
        }
    }
    // What the application role may do, as it sees it; a revoke shows, and refuses its send.
    let privileges = "SELECT produce, consume FROM lease_queue.privileges($1::pg_catalog.text)";
    let r = app.query_one(privileges, &[&qb]).await.unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, bool>(1)), (true, true));
    let revoke_grant = |verb: &'static str| {
        format!(
            "SELECT lease_queue.{verb}_queue($1::pg_catalog.text, 'app'::pg_catalog.text, \
             'produce'::pg_catalog.text)"
        )
    };
    admin.query(&revoke_grant("revoke"), &[&qb]).await.unwrap();
    let r = app.query_one(privileges, &[&qb]).await.unwrap();
    assert_eq!((r.get::<_, bool>(0), r.get::<_, bool>(1)), (false, true));
    assert_eq!(
        code_of(
            app,
            "SELECT lease_queue.send($1::pg_catalog.text, 'k'::pg_catalog.text, '1'::pg_catalog.jsonb)",
            &[&qb]
        )
        .await,
        "42501"
    );
    admin.query(&revoke_grant("grant"), &[&qb]).await.unwrap();
    assert_eq!(
        code_of(app, create, &[&nosuch, &1i32, &1i32]).await,
        "42501"
    );

    let queues: Vec<(String, i32, i32)> = app
        .query(
            "SELECT queue_name, partitions, max_attempts FROM lease_queue.list_queues()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .filter(|(n, ..): &(String, i32, i32)| n.starts_with(p))
        .collect();
    assert_eq!(queues, [(qa.clone(), 1, 2), (qb.clone(), 2, 10)]);
    let partition_of = "SELECT lease_queue.partition_of($1::pg_catalog.text, $2::pg_catalog.int4)";
    for (key, n, want) in [("a1", 2, 1), ("a2", 2, 0), ("w1", 2, 1), ("w2", 2, 1)] {
        let got: i32 = app
            .query_one(partition_of, &[&key, &n])
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want, "partition_of({key}, {n})");
    }
    let none: Option<i32> = app
        .query_one(partition_of, &[&None::<&str>, &2i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(none, None);
    let lease_key: String = app
        .query_one(
            "SELECT lease_queue.lease_key($1::pg_catalog.text, $2::pg_catalog.int4)",
            &[&qa, &0i32],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(lease_key, format!("lease_queue:{qa}:0"));

    // Producing: keyed, unkeyed, a batch (k2 then k1), a delayed one.
    let id1 = send(app, &qa, Some("k1"), "1", "0").await;
    let id2 = send(app, &qa, Some("k1"), "2", "0").await;
    let id3 = send(app, &qa, None, "3", "0").await;
    let batch_ids: Vec<i64> = app
        .query(
            "SELECT lease_queue.send_batch($1::pg_catalog.text, $2::pg_catalog.text[], \
             $3::pg_catalog.text[]::pg_catalog.jsonb[])",
            &[&qa, &vec!["k2", "k1"], &vec!["4", "5"]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (id4, id5) = (batch_ids[0], batch_ids[1]);
    let id6 = send(app, &qa, Some("k3"), "6", "1 hour").await;
    let ids = [id1, id2, id3, id4, id5, id6];
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]) && id6 < SHADOW_IDS,
        "ids from the queue's own sequence, in order: {ids:?}"
    );

    // Consuming.
    assert_eq!(claim(app, &qa, 0, "c").await, (true, Some(1)));
    assert_eq!(claim(app, &qa, 0, "other").await, (false, None));
    let first = receive(app, &qa, 0, "c", 1).await;
    let (got, b1) = payloads(&first);
    assert_eq!(
        got,
        delivered(&[("1", 1), ("2", 1), ("5", 1), ("3", 1), ("4", 1)])
    );
    let got_ids: Vec<i64> = first.iter().map(|d| d.1).collect();
    assert_eq!(got_ids, [id1, id2, id5, id3, id4]);
    assert!(b1 < SHADOW_IDS);
    assert_eq!(receive(app, &qa, 0, "c", 1).await, first, "received again");
    assert_eq!(nack(app, &qa, 1, b1, id2, "boom").await, "retrying");
    assert_eq!(nack(app, &qa, 1, b1, id2, "boom").await, "retrying");
    assert_eq!(nack(app, &qa, 1, b1, id5, "boom").await, "retrying");
    assert_eq!(
        code_of(
            app,
            NACK,
            &[&qa, &0i32, &"c", &1i64, &b1, &(id6 + 1000), &"0", &"x"]
        )
        .await,
        "LQ003"
    );
    assert_eq!(
        code_of(app, ACK, &[&qa, &0i32, &"c", &1i64, &(b1 + 1000)]).await,
        "LQ002"
    );
    ack(app, &qa, 0, "c", 1, b1).await;
    ack(app, &qa, 0, "c", 1, b1).await;
    // ack_and_receive (0.3.0), a third ack of the same batch: acks nothing more and opens the
    // next batch, which receive then returns again.
    let next = ack_and_receive(app, &qa, 0, "c", 1, b1).await;
    let again = receive(app, &qa, 0, "c", 1).await;
    assert_eq!(
        again, next,
        "ack_and_receive opened the batch receive returns"
    );
    let (got, b2) = payloads(&again);
    assert_eq!(
        got,
        delivered(&[("2", 2)]),
        "the retry alone: it holds its key back"
    );
    assert_ne!(b2, b1);
    assert_eq!(nack(app, &qa, 1, b2, id2, "boom2").await, "dead_lettered");
    ack(app, &qa, 0, "c", 1, b2).await;
    let (got, b3) = payloads(&receive(app, &qa, 0, "c", 1).await);
    assert_eq!(got, delivered(&[("5", 1)]), "the key continues");
    ack(app, &qa, 0, "c", 1, b3).await;
    assert!(receive(app, &qa, 0, "c", 1).await.is_empty());

    /// (id, partition, key, payload, attempts, reason, epoch, batch_id)
    type DeadLetter = (
        i64,
        i32,
        Option<String>,
        String,
        i32,
        Option<String>,
        i64,
        i64,
    );
    let dead: Vec<DeadLetter> = app
        .query(
            "SELECT id, partition, key, payload::pg_catalog.text, attempts, reason, epoch, batch_id \
               FROM lease_queue.list_dead_letters($1::pg_catalog.text)",
            &[&qa],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
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
        .collect();
    assert_eq!(
        dead,
        [(
            id2,
            0,
            Some("k1".into()),
            "2".into(),
            2,
            Some("boom2".into()),
            1,
            b2
        )]
    );
    let status = "SELECT queue_name, partition, owner, epoch, batch_id, batch_size, backlog, \
                         held_back_keys, dead_letters, acked \
                    FROM lease_queue.status($1::pg_catalog.text)";
    type Status = (
        String,
        i32,
        Option<String>,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        i64,
        i64,
        i64,
    );
    let read_status = |q: Option<String>| async move {
        app.query(status, &[&q])
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                    r.get(7),
                    r.get(8),
                    r.get(9),
                )
            })
            .filter(|s: &Status| s.0.starts_with(p))
            .collect::<Vec<Status>>()
    };
    // Acked: 1, 3 and 4 (the first batch, acked twice), then 5 (the third); the dead letter not.
    assert_eq!(
        read_status(Some(qa.clone())).await,
        [(
            qa.clone(),
            0,
            Some("c".into()),
            Some(1),
            None,
            0,
            1,
            0,
            1,
            4
        )]
    );
    let all: Vec<(String, i32)> = read_status(None)
        .await
        .into_iter()
        .map(|s| (s.0, s.1))
        .collect();
    assert_eq!(all, [(qa.clone(), 0), (qb.clone(), 0), (qb.clone(), 1)]);

    // Releasing, and the fences.
    let released: i32 = app
        .query_one(RELEASE, &[&qa, &0i32, &"c", &1i64, &false])
        .await
        .unwrap()
        .get(0);
    assert_eq!(released, 0);
    assert_eq!(
        code_of(app, RELEASE, &[&qa, &0i32, &"c", &1i64, &false]).await,
        "LE001"
    );
    assert_eq!(
        code_of(app, RECEIVE, &[&qa, &0i32, &"c", &1i64, &10i32]).await,
        "LE001"
    );
    // A lease taken around the queue: its epoch was not claimed through lease_queue.claim.
    let epoch: i64 = app
        .query_one(
            "SELECT epoch FROM lease.acquire($1::pg_catalog.text, 'x', '1 hour')",
            &[&lease_key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 3);
    assert_eq!(
        code_of(app, RECEIVE, &[&qa, &0i32, &"x", &3i64, &10i32]).await,
        "LQ004"
    );
    app.query(
        "SELECT lease.release($1::pg_catalog.text, 'x', 3)",
        &[&lease_key],
    )
    .await
    .unwrap();

    // claim_any: w1 and w2 both start at partition 1; w3 finds none free.
    let any = |owner: &'static str| {
        let qb = qb.clone();
        async move {
            let r = app
                .query_one(CLAIM_ANY, &[&qb, &owner, &"1 hour"])
                .await
                .unwrap();
            (
                r.get::<_, bool>(0),
                r.get::<_, Option<i32>>(1),
                r.get::<_, Option<i64>>(2),
            )
        }
    };
    assert_eq!(any("w1").await, (true, Some(1), Some(1)));
    assert_eq!(any("w2").await, (true, Some(0), Some(1)));
    assert_eq!(any("w3").await, (false, None, None));
    // release with an open batch: refused unless forced; the next holder gets it again.
    send(app, &qb, Some("a2"), "7", "0").await;
    let (got, _) = payloads(&receive(app, &qb, 0, "w2", 1).await);
    assert_eq!(got, delivered(&[("7", 1)]));
    assert_eq!(
        code_of(app, RELEASE, &[&qb, &0i32, &"w2", &1i64, &false]).await,
        "55006"
    );
    let abandoned: i32 = app
        .query_one(RELEASE, &[&qb, &0i32, &"w2", &1i64, &true])
        .await
        .unwrap()
        .get(0);
    assert_eq!(abandoned, 1);
    assert_eq!(claim(app, &qb, 0, "w2").await, (true, Some(3)));
    let (got, b) = payloads(&receive(app, &qb, 0, "w2", 3).await);
    assert_eq!(got, delivered(&[("7", 2)]));
    ack(app, &qb, 0, "w2", 3, b).await;

    // Invalid input (22023), and queues that do not exist (LQ001).
    let (no_text, no_int8, no_bool) = (None::<&str>, None::<i64>, None::<bool>);
    for (sql, params) in [
        (SEND, params!["", no_text, no_text, "-1 s"]),
        (CLAIM, params![qa, 5i32, "c", "1 hour"]),
        (CLAIM, params![qa, 5000i32, "", "0"]),
        (CLAIM_ANY, params![qb, "", "-1 s"]),
        (RECEIVE, params![qa, -1i32, "c", no_int8, 0i32]),
        (ACK, params![qa, 0i32, "c", no_int8, no_int8]),
        (RELEASE, params![qa, 0i32, "c", 1i64, no_bool]),
    ] {
        assert_eq!(code_of(app, sql, &params).await, "22023", "{sql}");
    }
    let long_reason = "r".repeat(9000);
    assert_eq!(
        code_of(
            app,
            NACK,
            &[&qa, &0i32, &"c", &1i64, &1i64, &1i64, &"-1 s", &long_reason]
        )
        .await,
        "22023"
    );
    let send_batch = "SELECT lease_queue.send_batch($1::pg_catalog.text, $2::pg_catalog.text[], \
                      $3::pg_catalog.text[]::pg_catalog.jsonb[])";
    let empty: Vec<&str> = Vec::new();
    assert_eq!(
        code_of(app, send_batch, &[&qa, &vec!["k"], &empty]).await,
        "22023"
    );
    for (sql, param) in [
        (
            "SELECT * FROM lease_queue.status($1::pg_catalog.text)",
            "bad name!",
        ),
        (
            "SELECT * FROM lease_queue.list_dead_letters($1::pg_catalog.text, 0)",
            qa.as_str(),
        ),
    ] {
        assert_eq!(code_of(app, sql, &[&param]).await, "22023", "{sql}");
    }
    let (one_key, one_payload) = (vec!["k"], vec!["1"]);
    for (sql, params) in [
        (SEND, params![nosuch, "k", "1", "0"]),
        (send_batch, params![nosuch, one_key, one_payload]),
        (CLAIM, params![nosuch, 0i32, "c", "1 hour"]),
        (CLAIM_ANY, params![nosuch, "c", "1 hour"]),
        (RECEIVE, params![nosuch, 0i32, "c", 1i64, 1i32]),
        (ACK, params![nosuch, 0i32, "c", 1i64, 1i64]),
        (RELEASE, params![nosuch, 0i32, "c", 1i64, false]),
        (
            "SELECT * FROM lease_queue.status($1::pg_catalog.text)",
            params![nosuch],
        ),
        (
            "SELECT * FROM lease_queue.list_dead_letters($1::pg_catalog.text)",
            params![nosuch],
        ),
    ] {
        assert_eq!(code_of(app, sql, &params).await, "LQ001", "{sql}");
    }

    // Administration.
    let redrive = "SELECT lease_queue.redrive($1::pg_catalog.text, $2::pg_catalog.text)";
    let discard = "SELECT lease_queue.discard_dead_letters($1::pg_catalog.text, \
                   $2::pg_catalog.text::pg_catalog.interval)";
    let drop = "SELECT lease_queue.drop_queue($1::pg_catalog.text)";
    assert_eq!(code_of(app, redrive, &[&qa, &"k1"]).await, "42501");
    assert_eq!(code_of(app, discard, &[&qa, &"0"]).await, "42501");
    assert_eq!(code_of(app, drop, &[&qa]).await, "42501");
    assert_eq!(
        code_of(admin, redrive, &[&"bad!", &None::<&str>]).await,
        "22023"
    );
    assert_eq!(code_of(admin, discard, &[&qa, &"-1 s"]).await, "22023");
    assert_eq!(code_of(admin, drop, &[&""]).await, "22023");
    assert_eq!(code_of(admin, redrive, &[&nosuch, &"k"]).await, "LQ001");
    assert_eq!(code_of(admin, discard, &[&nosuch, &"0"]).await, "LQ001");
    assert_eq!(code_of(admin, drop, &[&nosuch]).await, "LQ001");
    let n: i64 = admin
        .query_one(redrive, &[&qa, &"k1"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1, "k1's dead letter is back");
    let n: i64 = admin
        .query_one(redrive, &[&qa, &None::<&str>])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let n: i64 = admin.query_one(discard, &[&qa, &"0"]).await.unwrap().get(0);
    assert_eq!(n, 0);
    assert_eq!(claim(app, &qa, 0, "c").await, (true, Some(5)));
    let (got, b) = payloads(&receive(app, &qa, 0, "c", 5).await);
    assert_eq!(
        got,
        delivered(&[("2", 1)]),
        "the redriven message, attempts reset"
    );
    ack(app, &qa, 0, "c", 5, b).await;
    admin.query(drop, &[&qa]).await.unwrap();
    admin.query(drop, &[&qb]).await.unwrap();
    assert_eq!(code_of(admin, drop, &[&qa]).await, "LQ001");
    assert_eq!(code_of(app, SEND, &[&qa, &"k", &"1", &"0"]).await, "LQ001");
    let version: String = app
        .query_one("SELECT lease_queue.version()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, pglease::PG_LEASE_QUEUE.version);
}

#[tokio::test]
async fn shadowing_objects_first_on_the_callers_search_path_are_never_used_by_the_queue() {
    let s = server();
    let db = s.fresh_db_with_queue("queue_shadow");
    s.psql(&db, &format!("GRANT CREATE ON DATABASE {db} TO {APP}"));
    let su = s.connect_super(&db).await;
    let app = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    app.batch_execute(&shadow_schema_sql("evil"))
        .await
        .expect("create the evil schema");
    admin
        .batch_execute(&shadow_schema_sql("evil_admin"))
        .await
        .expect("create the installing role's shadow schema");
    app.batch_execute(&temp_objects_sql("app"))
        .await
        .expect("create app's temp shadows");
    admin
        .batch_execute(&temp_objects_sql("admin"))
        .await
        .expect("create the installing role's temp shadows");

    // Positive controls: with the shadows first, the caller's own unqualified SQL does hit them.
    app.batch_execute("SET search_path = evil, pg_catalog, pg_temp")
        .await
        .unwrap();
    for probe in [
        "SELECT md5('x')",
        "SELECT nextval('evil.control_seq')",
        "SELECT 'a'::pg_catalog.text = 'a'::pg_catalog.text",
        "SELECT 1::pg_catalog.int8 = 1::pg_catalog.int8",
        "SELECT 'a'::pg_catalog.text || 1::pg_catalog.int8",
        "SELECT count(*) FROM (VALUES (1)) AS v(x)",
        "SELECT array_agg(x) FROM (VALUES (1::pg_catalog.int8)) AS v(x)",
        "SELECT * FROM unnest(ARRAY['a']::pg_catalog.text[])",
        "SELECT clock_timestamp()",
        "SELECT fence('k'::pg_catalog.text, 'o'::pg_catalog.text, 1::pg_catalog.int8)",
        "INSERT INTO messages (id) VALUES (1)",
        "SELECT pg_temp.md5('x')",
    ] {
        su.batch_execute("TRUNCATE evil.log").await.unwrap();
        app.batch_execute(probe)
            .await
            .unwrap_or_else(|e| panic!("{probe}: {e}"));
        assert!(
            !logged(&su).await.is_empty(),
            "control {probe} did not reach its shadow"
        );
    }
    app.batch_execute("SET search_path = pg_temp, evil, pg_catalog")
        .await
        .unwrap();
    su.batch_execute("TRUNCATE evil.log").await.unwrap();
    app.batch_execute("SELECT * FROM messages").await.unwrap();
    assert_eq!(
        logged(&su).await,
        ["pg_temp(app).messages as app"],
        "control: pg_temp first gives the temp view"
    );
    su.batch_execute("TRUNCATE evil.log").await.unwrap();

    for (path, p) in [
        "evil, pg_catalog, pg_temp, public",
        "pg_temp, evil, pg_catalog",
        "evil, pg_temp, lease_queue, lease, pg_catalog",
    ]
    .iter()
    .zip(PREFIXES)
    {
        app.batch_execute(&format!("SET search_path = {path}"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("SET search_path = evil_admin, {path}"))
            .await
            .unwrap();
        exercise_queue_api(&app, &admin, p).await;
        let used = logged(&su).await;
        assert!(
            used.is_empty(),
            "with search_path {path} the queue used shadows: {used:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// Schema lease_queue: no role can plant anything there
// ---------------------------------------------------------------------------------------------------

/// What neither PUBLIC nor the installing role may do to schema lease_queue and its objects.
const REFUSED_IN_SCHEMA: &[&str] = &[
    "CREATE TABLE lease_queue.t (x int)",
    "CREATE VIEW lease_queue.v AS SELECT 1 AS x",
    "CREATE SEQUENCE lease_queue.s",
    "CREATE TYPE lease_queue.t AS (x int)",
    "CREATE DOMAIN lease_queue.d AS int",
    "CREATE FUNCTION lease_queue.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    // Overloads that would be a better match for calls the functions make (an integer literal
    // where the helper takes bigint; a varchar where it takes text).
    "CREATE FUNCTION lease_queue._check_partition_args(text, text, integer, text, integer, text[]) \
     RETURNS void LANGUAGE sql AS ''",
    "CREATE FUNCTION lease_queue.partition_of(varchar, integer) RETURNS integer \
     LANGUAGE sql AS 'SELECT 0'",
    "CREATE OPERATOR lease_queue.= (leftarg = text, rightarg = text, function = pg_catalog.texteq)",
    "CREATE OR REPLACE FUNCTION lease_queue.version() RETURNS text LANGUAGE sql AS $$SELECT 'x'$$",
    "CREATE OR REPLACE FUNCTION lease_queue._valid_name(value text) RETURNS boolean \
     LANGUAGE sql AS 'SELECT true'",
    "CREATE INDEX ON lease_queue.messages (key)",
    "CREATE TRIGGER t BEFORE INSERT ON lease_queue.messages FOR EACH ROW \
     EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()",
    "CREATE POLICY p ON lease_queue.messages USING (true)",
    "CREATE RULE r AS ON INSERT TO lease_queue.messages DO INSTEAD NOTHING",
    "CREATE STATISTICS lease_queue.st ON qid, key FROM lease_queue.messages",
    "ALTER TABLE lease_queue.commit_marks DISABLE TRIGGER commit_order",
    "ALTER TABLE lease_queue.messages DISABLE TRIGGER ALL",
    "ALTER TABLE lease_queue.messages ADD COLUMN x int",
    "ALTER TABLE lease_queue.keys RENAME TO keys_real",
    "ALTER TABLE lease_queue.partitions OWNER TO lease_admin",
    "ALTER TYPE lease_queue.delivery RENAME TO delivery_real",
    "ALTER FUNCTION lease_queue._queue(text, text) RENAME TO x",
    "ALTER FUNCTION lease_queue.send(text, text, jsonb, interval) SECURITY INVOKER",
    "ALTER FUNCTION lease_queue._stamp_commit_order() SET search_path = public",
    "ALTER FUNCTION lease_queue._stamp_commit_order() OWNER TO lease_admin",
    "ALTER SEQUENCE lease_queue.positions RESTART",
    "ALTER SCHEMA lease_queue RENAME TO lease_queue_real",
    "ALTER SCHEMA lease_queue OWNER TO lease_admin",
    "ALTER EXTENSION pg_lease_queue DROP FUNCTION lease_queue._queue(text, text)",
    "DROP TRIGGER commit_order ON lease_queue.commit_marks",
    "DROP FUNCTION lease_queue.version()",
    "DROP TABLE lease_queue.messages",
    "DROP SCHEMA lease_queue",
    "UPDATE lease_queue.messages SET seq = 0",
    "DELETE FROM lease_queue.keys",
    "TRUNCATE lease_queue.messages",
    "SELECT * FROM lease_queue.partitions FOR UPDATE",
    "UPDATE lease_queue.partitions SET acked = 0",
    "DROP INDEX lease_queue.messages_held_back",
    "SELECT lease_queue._queue('f', 'q')",
    "SELECT lease_queue._refresh_keys(1, 0, ARRAY['k'])",
    "SELECT * FROM lease_queue._open_batch(NULL::lease_queue.partitions, 1, 'w', 1, 1, false)",
    "SELECT * FROM lease_queue._close_batch('f', 'q', NULL::lease_queue.partitions, 1, 1, false)",
    "SELECT lease_queue._heartbeat('f', NULL::lease_queue.partitions, 'k', 'w', 1)",
    "UPDATE lease_queue.keys SET last_seq = 0",
    "UPDATE lease_queue.partitions SET batch_ids = '{}'",
];

#[tokio::test]
async fn neither_public_nor_the_installing_role_can_create_in_rename_or_change_schema_lease_queue()
{
    let s = server();
    let db = s.fresh_db_with_queue("queue_no_create");
    let app = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    for sql in REFUSED_IN_SCHEMA {
        refused(&app, sql, "42501").await;
        refused(&admin, sql, "42501").await;
    }
    for sql in [
        "SELECT * FROM lease_queue.messages",
        "SELECT lease_queue.create_queue('q', 1)",
        "SELECT lease_queue.drop_queue('q')",
        "SELECT lease_queue.redrive('q', NULL)",
        "SELECT lease_queue.discard_dead_letters('q')",
        "ALTER EXTENSION pg_lease_queue UPDATE",
        "SELECT pg_catalog.setval('lease_queue.positions', 1)",
        "DROP EXTENSION pg_lease_queue",
    ] {
        refused(&app, sql, "42501").await;
    }
    // Granting oneself what one lacks fails or grants nothing (a warning): nothing changes.
    for (c, role) in [(&app, APP), (&admin, ADMIN)] {
        for sql in [
            format!("GRANT CREATE ON SCHEMA lease_queue TO {role}"),
            "GRANT CREATE ON SCHEMA lease_queue TO PUBLIC".to_owned(),
            format!("GRANT ALL ON lease_queue.messages TO {role}"),
            format!("GRANT EXECUTE ON FUNCTION lease_queue._stamp_commit_order() TO {role}"),
        ] {
            if let Err(e) = c.batch_execute(&sql).await {
                assert_eq!(sqlstate(&e).as_deref(), Some("42501"), "{sql}: {e}");
            }
        }
        refused(c, "CREATE TABLE lease_queue.t (x int)", "42501").await;
        refused(c, "UPDATE lease_queue.messages SET seq = 0", "42501").await;
    }
    let foreign: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_depend d
              WHERE d.refclassid = 'pg_namespace'::regclass
                AND d.refobjid = 'lease_queue'::regnamespace
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
        "schema lease_queue holds only the extension's objects"
    );
    let owner: String = admin
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'lease_queue'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(owner, ADMIN, "the schema is the superuser's");
}

/// Objects the installing role plants in a `lease_queue` schema it created, each of which would
/// make that role a superuser if the install script called it.
const PLANTS: &[&str] = &[
    "CREATE FUNCTION lease_queue._valid_name(value text) RETURNS boolean LANGUAGE plpgsql
       AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; RETURN true; END $$",
    "CREATE FUNCTION lease_queue.\"=\"(oid, pg_catalog.regclass) RETURNS boolean
       LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'ALTER ROLE lease_admin SUPERUSER'; RETURN false; END $$;
     CREATE OPERATOR lease_queue.= (leftarg = oid, rightarg = pg_catalog.regclass,
                                    function = lease_queue.\"=\")",
    "CREATE TABLE lease_queue.messages (id bigint)",
    "CREATE SEQUENCE lease_queue.positions",
    "CREATE TYPE lease_queue.delivery AS (x int)",
    "CREATE DOMAIN lease_queue.d AS int",
    "CREATE VIEW lease_queue.v AS SELECT 1 AS x",
];

#[tokio::test]
async fn installing_into_a_lease_queue_schema_with_objects_is_refused_before_they_can_run() {
    let s = server();
    let db = s.fresh_db_with_extension("queue_planted");
    let admin = s.connect_as(&db, ADMIN).await;
    let su = s.connect_super(&db).await;
    for plant in PLANTS {
        admin
            .batch_execute(&format!("CREATE SCHEMA lease_queue; {plant}"))
            .await
            .unwrap_or_else(|e| panic!("{plant}: {e}"));
        assert_eq!(
            expect_error(&admin, "CREATE EXTENSION pg_lease_queue")
                .await
                .code,
            "55000",
            "the script refuses a schema holding: {plant}"
        );
        admin
            .batch_execute("DROP SCHEMA lease_queue CASCADE")
            .await
            .unwrap();
    }
    let (superuser, installed): (bool, i64) = {
        let r = su
            .query_one(
                "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = $1), \
                        (SELECT count(*) FROM pg_extension WHERE extname = 'pg_lease_queue')",
                &[&ADMIN],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(!superuser, "no planted object ran");
    assert_eq!(installed, 0);
    // With CASCADE in a database without pg_lease: refused too, and pg_lease is not left behind.
    let bare = s.fresh_db("queue_planted_cascade");
    let admin = s.connect_as(&bare, ADMIN).await;
    admin
        .batch_execute(&format!("CREATE SCHEMA lease_queue; {}", PLANTS[0]))
        .await
        .unwrap();
    assert_eq!(
        expect_error(&admin, "CREATE EXTENSION pg_lease_queue CASCADE")
            .await
            .code,
        "55000"
    );
    let n: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_extension WHERE extname LIKE 'pg_lease%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // An empty schema of the installing role's is taken over.
    admin
        .batch_execute("DROP SCHEMA lease_queue CASCADE; CREATE SCHEMA lease_queue")
        .await
        .unwrap();
    admin
        .batch_execute("CREATE EXTENSION pg_lease_queue CASCADE")
        .await
        .unwrap();
    refused(&admin, "CREATE TABLE lease_queue.t (x int)", "42501").await;
    refused(&admin, "ALTER SCHEMA lease_queue RENAME TO x", "42501").await;
}

/// The installing role creates an empty `lease_queue` schema and grants CREATE on it to PUBLIC
/// before installing. The script takes the schema over (ALTER SCHEMA ... OWNER), which keeps the
/// schema's ACL: unless the script refuses such a schema or revokes what was granted, every role
/// can afterwards create objects in schema lease_queue, e.g. an overload of a helper that the
/// SECURITY DEFINER functions (running as the bootstrap superuser) then call.
#[tokio::test]
async fn privileges_granted_on_a_pre_existing_lease_queue_schema_do_not_survive_installation() {
    let s = server();
    let db = s.fresh_db_with_extension("queue_pregranted");
    let admin = s.connect_as(&db, ADMIN).await;
    let app = s.connect_as(&db, APP).await;
    admin
        .batch_execute(
            "CREATE SCHEMA lease_queue;
             GRANT USAGE, CREATE ON SCHEMA lease_queue TO PUBLIC",
        )
        .await
        .unwrap();
    match admin.batch_execute("CREATE EXTENSION pg_lease_queue").await {
        // Refusing such a schema is one correct answer.
        Err(e) if sqlstate(&e).as_deref() == Some("55000") => return,
        Err(e) => panic!("CREATE EXTENSION: {e}"),
        Ok(()) => {}
    }
    // The other: nothing granted before survives. The plant raises ZZ001 naming the role it runs
    // as: claim's invalid-input path calls it (an integer literal where the real helper takes
    // bigint), as the bootstrap superuser.
    let plant = "CREATE FUNCTION lease_queue._check_partition_args(
                     fn text, queue text, partition integer, owner text, epoch integer, more text[])
                 RETURNS void LANGUAGE plpgsql AS $$ BEGIN
                     RAISE EXCEPTION USING ERRCODE = 'ZZ001', MESSAGE = 'planted code ran as '
                         || current_user || ' (superuser: ' || (SELECT rolsuper FROM pg_catalog.pg_roles
                                                                  WHERE rolname = current_user) || ')';
                 END $$";
    for (c, role) in [(&app, APP), (&admin, ADMIN)] {
        match c.batch_execute(plant).await {
            Ok(()) => {
                let ran = expect_error(c, "SELECT lease_queue.claim('', 0, 'o', '1 hour')").await;
                panic!(
                    "{role} could create a function in schema lease_queue after installing into a \
                     schema with CREATE granted to PUBLIC; lease_queue.claim then raised {}: {}",
                    ran.code, ran.message
                );
            }
            Err(e) => assert_eq!(sqlstate(&e).as_deref(), Some("42501"), "{role}: {e}"),
        }
    }
    let acl: Option<String> = admin
        .query_one(
            "SELECT nspacl::text FROM pg_namespace WHERE nspname = 'lease_queue'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // Only the owner may create: every other item of the ACL (PUBLIC's is "=..."; a role's
    // "role=...") has no C.
    let owner: String = admin
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'lease_queue'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let acl = acl.unwrap_or_default();
    for item in acl.trim_matches(|c| c == '{' || c == '}').split(',') {
        let (grantee, rest) = item.split_once('=').expect("an ACL item");
        let privileges = rest.split('/').next().unwrap();
        if grantee != owner {
            assert!(
                !privileges.contains('C'),
                "{grantee:?} keeps CREATE on lease_queue: {acl}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The commit-order trigger
// ---------------------------------------------------------------------------------------------------

/// A database with the queue, queue `q` of one partition, and connections.
struct QueueDb {
    name: String,
    su: Client,
    consumer: Client,
    epoch: i64,
}

impl QueueDb {
    async fn new(label: &str) -> QueueDb {
        let s = server();
        let name = s.fresh_db_with_queue(label);
        let admin = s.connect_as(&name, ADMIN).await;
        admin
            .batch_execute(
                "SELECT lease_queue.create_queue('q', 1); \
                 SELECT lease_queue.grant_queue('q', 'public', 'produce'), \
                        lease_queue.grant_queue('q', 'public', 'consume')",
            )
            .await
            .unwrap();
        let consumer = s.connect_as(&name, APP).await;
        let (claimed, epoch) = claim(&consumer, "q", 0, "c").await;
        assert!(claimed);
        QueueDb {
            su: s.connect_super(&name).await,
            name,
            consumer,
            epoch: epoch.unwrap(),
        }
    }

    async fn connect(&self, role: &str) -> Client {
        server().connect_as(&self.name, role).await
    }

    /// Receives everything deliverable and acks it; returns the (key, payload)s in delivery order.
    async fn drain(&self) -> Vec<(String, String)> {
        let batch = receive(&self.consumer, "q", 0, "c", self.epoch).await;
        if let Some(d) = batch.first() {
            ack(&self.consumer, "q", 0, "c", self.epoch, d.0).await;
        }
        batch
            .into_iter()
            .map(|d| (d.2.unwrap_or_default(), d.3))
            .collect()
    }
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, p)| ((*k).to_owned(), format!("\"{p}\"")))
        .collect()
}

#[tokio::test]
async fn the_commit_trigger_stamps_the_commits_of_unprivileged_producers() {
    let db = QueueDb::new("queue_unprivileged_commit").await;
    let p1 = db.connect(APP).await;
    let p2 = db.connect(APP).await;
    refused(&p1, "SELECT * FROM lease_queue.messages", "42501").await;
    refused(&p1, "SELECT * FROM lease_queue.keys", "42501").await;
    // p1 sends first (the lower ids), p2 commits first: delivered in commit order.
    p1.batch_execute("BEGIN; SELECT lease_queue.send('q', 'K', '\"p1a\"'); SELECT lease_queue.send('q', 'K', '\"p1b\"')")
        .await
        .unwrap();
    p2.batch_execute("BEGIN; SELECT lease_queue.send('q', 'K', '\"p2\"'); COMMIT")
        .await
        .unwrap();
    p1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        db.drain().await,
        pairs(&[("K", "p2"), ("K", "p1a"), ("K", "p1b")])
    );

    // A session whose role changes before the commit, to one without USAGE on lease_queue: the
    // deferred trigger (SECURITY DEFINER) still stamps the messages at the commit.
    db.su
        .batch_execute(&format!(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'lq_no_usage') THEN
                     CREATE ROLE lq_no_usage;
                 END IF;
             END $$;
             SET ROLE {ADMIN};
             REVOKE USAGE ON SCHEMA lease_queue FROM PUBLIC;
             GRANT USAGE ON SCHEMA lease_queue TO {APP};
             RESET ROLE"
        ))
        .await
        .unwrap();
    db.su
        .batch_execute(&format!(
            "BEGIN;
             SET LOCAL ROLE {APP};
             SELECT lease_queue.send('q', 'K', '\"switched\"');
             SELECT lease_queue.send('q', 'L', '\"switched\"');
             SET LOCAL ROLE lq_no_usage;
             COMMIT"
        ))
        .await
        .unwrap_or_else(|e| panic!("a commit as a role without USAGE: {e}"));
    assert_eq!(
        db.drain().await,
        pairs(&[("K", "switched"), ("L", "switched")])
    );
    // The commit trigger ran (it deletes the transaction's commit mark).
    let unordered: i64 = db
        .su
        .query_one("SELECT count(*) FROM lease_queue.commit_marks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(unordered, 0);
}

/// Starts `COMMIT` on `c` in a task and waits until it is seen waiting for a lock.
async fn commit_seen_waiting(
    observer: &Client,
    c: Arc<Client>,
) -> tokio::task::JoinHandle<Result<(), tokio_postgres::Error>> {
    let pid = backend_pid(&c).await;
    let handle = tokio::spawn(async move { c.batch_execute("COMMIT").await });
    await_backend_waiting(observer, pid, Wait::Lock, WAIT_LIMIT).await;
    handle
}

#[tokio::test]
async fn per_key_order_is_commit_order_also_when_a_producer_sets_its_constraints_immediate() {
    let db = QueueDb::new("queue_immediate").await;
    let a = Arc::new(db.connect(APP).await);
    let b = Arc::new(db.connect(APP).await);

    // a stamps at each send (and holds K's row from its first send); b, deferred, waits at its
    // commit until a has committed: a's messages first.
    a.batch_execute(
        "BEGIN; SET CONSTRAINTS ALL IMMEDIATE; SELECT lease_queue.send('q', 'K', '\"a1\"')",
    )
    .await
    .unwrap();
    b.batch_execute("BEGIN; SELECT lease_queue.send('q', 'K', '\"b1\"')")
        .await
        .unwrap();
    let b_commit = commit_seen_waiting(&db.su, Arc::clone(&b)).await;
    a.batch_execute("SELECT lease_queue.send('q', 'K', '\"a2\"'); COMMIT")
        .await
        .unwrap();
    b_commit.await.unwrap().unwrap();
    assert_eq!(
        db.drain().await,
        pairs(&[("K", "a1"), ("K", "a2"), ("K", "b1")])
    );

    // The named constraint: b (higher id) stamps at its send; a (deferred, lower id) waits at its
    // commit for b's: b's message first.
    a.batch_execute("BEGIN; SELECT lease_queue.send('q', 'K', '\"a\"')")
        .await
        .unwrap();
    b.batch_execute(
        "BEGIN; SET CONSTRAINTS lease_queue.commit_order IMMEDIATE;
         SELECT lease_queue.send('q', 'K', '\"b\"')",
    )
    .await
    .unwrap();
    let a_commit = commit_seen_waiting(&db.su, Arc::clone(&a)).await;
    b.batch_execute("COMMIT").await.unwrap();
    a_commit.await.unwrap().unwrap();
    assert_eq!(db.drain().await, pairs(&[("K", "b"), ("K", "a")]));

    // SET CONSTRAINTS ... IMMEDIATE after the sends stamps them there: a later producer of the key
    // waits for this transaction, and comes after it.
    a.batch_execute(
        "BEGIN; SELECT lease_queue.send('q', 'K', '\"a1\"');
         SELECT lease_queue.send('q', 'L', '\"a\"');
         SELECT lease_queue.send('q', 'K', '\"a2\"');
         SET CONSTRAINTS ALL IMMEDIATE",
    )
    .await
    .unwrap();
    b.batch_execute("BEGIN; SELECT lease_queue.send('q', 'K', '\"b\"')")
        .await
        .unwrap();
    let b_commit = commit_seen_waiting(&db.su, Arc::clone(&b)).await;
    a.batch_execute("COMMIT").await.unwrap();
    b_commit.await.unwrap().unwrap();
    assert_eq!(
        db.drain().await,
        pairs(&[("K", "a1"), ("K", "a2"), ("K", "b"), ("L", "a")])
    );
}

#[tokio::test]
async fn send_refuses_when_triggers_are_disabled_by_session_replication_role() {
    let db = QueueDb::new("queue_replica").await;
    let app = db.connect(APP).await;
    assert_eq!(
        expect_error(&app, "SET session_replication_role = replica")
            .await
            .code,
        "42501",
        "an application role cannot disable triggers"
    );
    db.su
        .batch_execute("SET session_replication_role = replica")
        .await
        .unwrap();
    for sql in [
        "SELECT lease_queue.send('q', 'K', '1')",
        "SELECT lease_queue.send('q', NULL, '1')",
        "SELECT lease_queue.send_batch('q', ARRAY['K', NULL], ARRAY['1', '2']::jsonb[])",
    ] {
        assert_eq!(expect_error(&db.su, sql).await.code, "55000", "{sql}");
    }
    let n: i64 = db
        .su
        .query_one("SELECT count(*) FROM lease_queue.messages", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing was sent");
    // `local` fires the trigger (it is an ORIGIN trigger); so does a commit under `replica` of a
    // message sent before the switch (the trigger's event was queued when it was inserted).
    db.su
        .batch_execute(
            "SET session_replication_role = local;
             SELECT lease_queue.send('q', 'K', '\"local\"')",
        )
        .await
        .unwrap();
    db.su
        .batch_execute("RESET session_replication_role")
        .await
        .unwrap();
    db.su
        .batch_execute(
            "BEGIN;
             SELECT lease_queue.send('q', 'K', '\"switched\"');
             SET LOCAL session_replication_role = replica;
             COMMIT",
        )
        .await
        .unwrap();
    assert_eq!(
        db.drain().await,
        pairs(&[("K", "local"), ("K", "switched")])
    );
}

// ---------------------------------------------------------------------------------------------------
// Defects found by this suite (each fails on the SQL that has it)
// ---------------------------------------------------------------------------------------------------

/// QUEUE.md / the contract of lease_queue.redrive: "Puts the dead letters of `key` ... back into the
/// queue, at the head of their key, in their original order". Bug: redrive with a key always fails
/// with 42702 (column reference "key" is ambiguous): its `INSERT INTO lease_queue.keys ... ON
/// CONFLICT (qid, key)` names the conflict column `key`, which PL/pgSQL also resolves to the
/// function's parameter `key` (plpgsql.variable_conflict = error, the default).
#[tokio::test]
async fn redrive_of_a_key_puts_its_dead_letters_back_at_the_head_of_the_key() {
    let s = server();
    let name = s.fresh_db_with_queue("queue_redrive_key");
    let admin = s.connect_as(&name, ADMIN).await;
    let app = s.connect_as(&name, APP).await;
    admin
        .batch_execute(
            "SELECT lease_queue.create_queue('q', 1, 1); \
             SELECT lease_queue.grant_queue('q', 'public', 'produce'), \
                    lease_queue.grant_queue('q', 'public', 'consume')",
        )
        .await
        .unwrap();
    let m1 = send(&app, "q", Some("K"), "1", "0").await;
    send(&app, "q", Some("K"), "2", "0").await;
    assert_eq!(claim(&app, "q", 0, "c").await, (true, Some(1)));
    let (got, b) = payloads(&receive(&app, "q", 0, "c", 1).await);
    assert_eq!(got, delivered(&[("1", 1), ("2", 1)]));
    assert_eq!(nack(&app, "q", 1, b, m1, "poison").await, "dead_lettered");
    ack(&app, "q", 0, "c", 1, b).await;
    send(&app, "q", Some("K"), "3", "0").await;
    let redriven = admin
        .query_one("SELECT lease_queue.redrive('q', 'K')", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .map_err(|e| sqlstate(&e));
    assert_eq!(redriven, Ok(1), "redrive('q', 'K')");
    let (got, _) = payloads(&receive(&app, "q", 0, "c", 1).await);
    assert_eq!(
        got,
        delivered(&[("1", 1), ("2", 1), ("3", 1)]),
        "the dead letter first, ahead of what was pending for its key"
    );
}

/// The install scripts' last statement: the check that nothing in the extension's schema belongs to
/// another role (the block after the script's "Last:" comment).
fn final_ownership_check(script: &str) -> &str {
    let at = script
        .rfind("-- Last: nothing in the schema belongs to another role.")
        .expect("the install script ends with the ownership check");
    let block = &script[at..];
    let start = block.find("DO $$").expect("a DO block");
    &block[start..]
}

#[tokio::test]
async fn the_install_scripts_last_check_refuses_a_schema_holding_an_object_of_another_role() {
    let s = server();
    for ext in pglease::EXTENSIONS {
        let check = final_ownership_check(ext.install_script().script);
        // A clean installation passes it, as the superuser (the script's role under CREATE EXTENSION).
        let db = s.fresh_db_with_queue(&format!("final_check_{}", ext.schema));
        let su = s.connect_super(&db).await;
        su.batch_execute(check)
            .await
            .unwrap_or_else(|e| panic!("{}: the check refuses a clean install: {e}", ext.name));
        // An object of another role in the schema (planted as the superuser for the test, then
        // given to that role) makes it fail with 55000.
        su.batch_execute(&format!(
            "CREATE FUNCTION {schema}.planted() RETURNS int LANGUAGE sql AS 'SELECT 1';
             ALTER FUNCTION {schema}.planted() OWNER TO {APP};",
            schema = ext.schema
        ))
        .await
        .unwrap();
        let e = su
            .batch_execute(check)
            .await
            .expect_err("a foreign object is refused");
        assert_eq!(sqlstate(&e).as_deref(), Some("55000"), "{}: {e}", ext.name);
    }
}
