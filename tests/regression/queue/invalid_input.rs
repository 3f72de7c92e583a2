//! Invalid input: every function raises 22023 with a DETAIL naming each violated argument (in
//! argument order), and nothing changes.

use pglease_tests::expect_error;
use tokio_postgres::Client;

use super::{Fixture, batch_id};

/// Runs `sql` (`$Q` standing for the fixture's queue, quoted) as `c`: it must fail with 22023 and a
/// DETAIL whose violations name exactly `names`, in that order; the queue must be unchanged.
async fn rejects(f: &Fixture, c: &Client, sql: &str, names: &[&str]) {
    let sql = sql.replace("$Q", &format!("'{}'", f.q));
    let before = f.snapshot().await;
    let e = expect_error(c, &sql).await;
    assert_eq!(e.code, "22023", "{sql}: {e:?}");
    let detail = e
        .detail
        .unwrap_or_else(|| panic!("{sql}: 22023 without DETAIL"));
    let named: Vec<&str> = detail
        .trim_end_matches('.')
        .split("; ")
        .map(|v| v.split([' ', '[']).next().unwrap_or_default())
        .collect();
    assert_eq!(named, names, "{sql}: {detail}");
    assert_eq!(f.snapshot().await, before, "{sql} changed the queue");
}

/// A queue of two partitions with partition 0 claimed by `w` and a batch open on it.
async fn busy_queue(name: &str) -> (Fixture, i64, i64) {
    let f = Fixture::new(name, 2, 10).await;
    let k = super::key_in("k", 0, 2);
    f.send(Some(&k), "m1").await;
    f.send(Some(&k), "m2").await;
    let e = f.claim(0, "w").await;
    let b = batch_id(&f.receive(0, "w", e, 1).await);
    (f, e, b)
}

#[tokio::test]
async fn create_queue_and_drop_queue_reject_invalid_input_naming_every_violation() {
    let f = Fixture::new("create_and_drop_reject_invalid_input", 1, 10).await;
    let a = &f.admin;
    for (args, names) in [
        (
            "NULL, NULL, NULL",
            &["queue", "partitions", "max_attempts"][..],
        ),
        ("'', 0, 0", &["queue", "partitions", "max_attempts"]),
        (
            "'bad name', 1025, 10001",
            &["queue", "partitions", "max_attempts"],
        ),
        ("'a:b', -1", &["queue", "partitions"]),
        ("'x' || repeat('y', 128), 1, 1", &["queue"]),
        ("'ok.name', 1, 0", &["max_attempts"]),
        ("'ok.name', NULL", &["partitions"]),
    ] {
        rejects(
            &f,
            a,
            &format!("SELECT lease_queue.create_queue({args})"),
            names,
        )
        .await;
    }
    let n: i64 =
        f.su.query_one(
            "SELECT count(*) FROM lease_queue.queues WHERE name IN ('ok.name', 'a:b', '')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing was created");
    for arg in ["NULL", "''", "'a/b'", "repeat('q', 129)"] {
        rejects(
            &f,
            a,
            &format!("SELECT lease_queue.drop_queue({arg})"),
            &["queue"],
        )
        .await;
    }
}

#[tokio::test]
async fn send_and_send_batch_reject_invalid_input_naming_every_violation() {
    let (f, _, _) = busy_queue("send_rejects_invalid_input").await;
    let c = &f.app;
    for (args, names) in [
        (
            "NULL, '', NULL, NULL",
            &["queue", "key", "payload", "delay"][..],
        ),
        ("$Q, repeat('k', 1025), '1', '-1 second'", &["key", "delay"]),
        ("$Q, 'k', '1', '366 days'", &["delay"]),
        ("$Q, 'k', NULL", &["payload"]),
        ("'no queue!', NULL, '1'", &["queue"]),
    ] {
        rejects(&f, c, &format!("SELECT lease_queue.send({args})"), names).await;
    }
    for (args, names) in [
        (
            "NULL, NULL, NULL, NULL",
            &["queue", "keys", "payloads", "delay"][..],
        ),
        ("$Q, ARRAY['a', 'b'], ARRAY['1'::jsonb]", &["keys"]),
        (
            "$Q, ARRAY['', 'ok', NULL, repeat('k', 1025)], ARRAY['1', NULL, '2', '3']::jsonb[]",
            &["keys", "payloads", "keys"],
        ),
        ("$Q, ARRAY[['a']], ARRAY[['1'::jsonb]]", &["keys"]),
        ("$Q, ARRAY['a'], ARRAY['1'::jsonb], '-1 second'", &["delay"]),
    ] {
        rejects(
            &f,
            c,
            &format!("SELECT * FROM lease_queue.send_batch({args})"),
            names,
        )
        .await;
    }
}

#[tokio::test]
async fn send_batch_rejects_more_than_100000_messages_and_sends_none() {
    let f = Fixture::new("send_batch_rejects_too_many", 1, 10).await;
    let before = f.snapshot().await;
    let e = expect_error(
        &f.app,
        &format!(
            "SELECT * FROM lease_queue.send_batch('{}', array_fill('k'::text, ARRAY[100001]), \
                                                  array_fill('1'::jsonb, ARRAY[100001]))",
            f.q
        ),
    )
    .await;
    assert_eq!(e.code, "22023");
    assert!(
        e.detail.is_some_and(|d| d.contains("100000")),
        "the DETAIL names the limit"
    );
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn claim_and_claim_any_reject_invalid_input_naming_every_violation() {
    let (f, _, _) = busy_queue("claim_rejects_invalid_input").await;
    let c = &f.app;
    for (args, names) in [
        (
            "NULL, NULL, NULL, NULL",
            &["queue", "partition", "owner", "ttl"][..],
        ),
        ("$Q, -1, '', '0'", &["partition", "owner", "ttl"]),
        (
            "$Q, 1024, repeat('w', 1025), '366 days'",
            &["partition", "owner", "ttl"],
        ),
        ("$Q, 1, 'w', '-1 second'", &["ttl"]),
        ("$Q, 2, 'w', '1 hour'", &["partition"]),
    ] {
        rejects(
            &f,
            c,
            &format!("SELECT * FROM lease_queue.claim({args})"),
            names,
        )
        .await;
    }
    for (args, names) in [
        ("NULL, NULL, NULL", &["queue", "owner", "ttl"][..]),
        ("$Q, '', '0'", &["owner", "ttl"]),
        ("'a b', 'w', '1 hour'", &["queue"]),
    ] {
        rejects(
            &f,
            c,
            &format!("SELECT * FROM lease_queue.claim_any({args})"),
            names,
        )
        .await;
    }
}

#[tokio::test]
async fn receive_ack_nack_and_release_reject_invalid_input_naming_every_violation() {
    let (f, e, b) = busy_queue("consumer_calls_reject_invalid_input").await;
    let c = &f.app;
    let cases: Vec<(String, &[&str])> = vec![
        (
            "receive(NULL, NULL, NULL, NULL, NULL)".into(),
            &["queue", "partition", "owner", "epoch", "max"],
        ),
        (format!("receive($Q, 0, 'w', {e}, 0)"), &["max"]),
        (format!("receive($Q, 0, 'w', {e}, 10001)"), &["max"]),
        ("receive($Q, 0, 'w', NULL, 10)".into(), &["epoch"]),
        (format!("receive($Q, 2, 'w', {e}, 10)"), &["partition"]),
        (
            "ack(NULL, NULL, NULL, NULL, NULL)".into(),
            &["queue", "partition", "owner", "epoch", "batch_id"],
        ),
        (format!("ack($Q, 0, '', {e}, {b})"), &["owner"]),
        (format!("ack($Q, 2, 'w', {e}, {b})"), &["partition"]),
        (
            "nack(NULL, NULL, NULL, NULL, NULL, NULL, NULL, repeat('r', 8193))".into(),
            &[
                "queue",
                "partition",
                "owner",
                "epoch",
                "batch_id",
                "id",
                "retry_after",
                "reason",
            ],
        ),
        (
            format!("nack($Q, 0, 'w', {e}, {b}, 1, '-1 second')"),
            &["retry_after"],
        ),
        (
            format!("nack($Q, 0, 'w', {e}, {b}, 1, '366 days')"),
            &["retry_after"],
        ),
        (format!("nack($Q, 0, 'w', {e}, {b}, NULL)"), &["id"]),
        (format!("nack($Q, 1024, 'w', {e}, {b}, 1)"), &["partition"]),
        (format!("nack($Q, 2, 'w', {e}, {b}, 1)"), &["partition"]),
        (
            "release(NULL, NULL, NULL, NULL, NULL)".into(),
            &["queue", "partition", "owner", "epoch", "force"],
        ),
        (format!("release($Q, 0, 'w', {e}, NULL)"), &["force"]),
        (format!("release($Q, 2, 'w', {e})"), &["partition"]),
    ];
    for (call, names) in cases {
        rejects(&f, c, &format!("SELECT * FROM lease_queue.{call}"), names).await;
    }
}

#[tokio::test]
async fn redrive_discard_list_dead_letters_and_status_reject_invalid_input() {
    let (f, _, _) = busy_queue("admin_and_read_calls_reject_invalid_input").await;
    let a = &f.admin;
    for (call, names) in [
        ("redrive(NULL, '')", &["queue", "key"][..]),
        ("redrive($Q, repeat('k', 1025))", &["key"]),
        ("discard_dead_letters(NULL, NULL)", &["queue", "older_than"]),
        ("discard_dead_letters($Q, '-1 second')", &["older_than"]),
        ("discard_dead_letters($Q, '366 days')", &["older_than"]),
        ("list_dead_letters(NULL, 0)", &["queue", "max"]),
        ("list_dead_letters($Q, 10001)", &["max"]),
        ("list_dead_letters($Q, NULL)", &["max"]),
        ("status('')", &["queue"]),
        ("status('a b')", &["queue"]),
    ] {
        rejects(&f, a, &format!("SELECT * FROM lease_queue.{call}"), names).await;
    }
    // The application role gets the same 22023 from the functions it may call.
    rejects(
        &f,
        &f.app,
        "SELECT * FROM lease_queue.list_dead_letters($Q, 0)",
        &["max"],
    )
    .await;
}

#[tokio::test]
async fn infinite_intervals_are_rejected_where_the_server_has_them() {
    let s = pglease_tests::server();
    if s.major() < 17 {
        eprintln!(
            "skipped: PostgreSQL {} has no infinite intervals (they exist from 17 on)",
            s.major()
        );
        return;
    }
    let (f, e, b) = busy_queue("queue_rejects_infinite_intervals").await;
    for (c, call, names) in [
        (
            &f.app,
            "send($Q, 'k', '1', 'infinity')".to_owned(),
            &["delay"][..],
        ),
        (&f.app, "claim($Q, 1, 'w', 'infinity')".to_owned(), &["ttl"]),
        (
            &f.app,
            "claim_any($Q, 'w', '-infinity')".to_owned(),
            &["ttl"],
        ),
        (
            &f.app,
            format!("nack($Q, 0, 'w', {e}, {b}, 1, 'infinity')"),
            &["retry_after"],
        ),
        (
            &f.admin,
            "discard_dead_letters($Q, 'infinity')".to_owned(),
            &["older_than"],
        ),
    ] {
        rejects(&f, c, &format!("SELECT * FROM lease_queue.{call}"), names).await;
    }
}

/// The audit's reproduction: `lease_key` and `partition_of` validated nothing (NULLs gave NULL, a
/// negative partition gave a key, `partition_of(key, 0)` raised 22012). Both raise 22023 naming each
/// violation, as §7 promises; a NULL key is still the unkeyed NULL.
#[tokio::test]
async fn lease_key_and_partition_of_refuse_arguments_outside_the_limits_with_22023() {
    let f = super::Fixture::connect("lease_key_partition_of_limits").await;
    for (sql, violations) in [
        (
            "SELECT lease_queue.lease_key(NULL, 0)",
            vec!["queue must not be NULL"],
        ),
        (
            "SELECT lease_queue.lease_key('q', NULL)",
            vec!["partition must not be NULL"],
        ),
        (
            "SELECT lease_queue.lease_key('q', -1)",
            vec!["partition must be in [0, 1023]"],
        ),
        (
            "SELECT lease_queue.lease_key('q', 1024)",
            vec!["partition must be in [0, 1023]"],
        ),
        (
            "SELECT lease_queue.lease_key('a:b', -1)",
            vec!["queue must consist of", "partition must be in [0, 1023]"],
        ),
        (
            "SELECT lease_queue.lease_key('', 0)",
            vec!["queue must not be empty"],
        ),
        (
            "SELECT lease_queue.partition_of('k', 0)",
            vec!["partitions must be in [1, 1024]"],
        ),
        (
            "SELECT lease_queue.partition_of('k', NULL)",
            vec!["partitions must not be NULL"],
        ),
        (
            "SELECT lease_queue.partition_of('k', 1025)",
            vec!["partitions must be in [1, 1024]"],
        ),
        (
            "SELECT lease_queue.partition_of('', -1)",
            vec!["key must not be empty", "partitions must be in [1, 1024]"],
        ),
    ] {
        let e = pglease_tests::expect_error(&f.app, sql).await;
        assert_eq!(e.code, "22023", "{sql}");
        let detail = e.detail.unwrap_or_default();
        for v in violations {
            assert!(detail.contains(v), "{sql}: {detail:?} names {v:?}");
        }
    }
    let row = f
        .app
        .query_one(
            "SELECT lease_queue.lease_key('q', 3), lease_queue.partition_of(NULL, 4), \
                    lease_queue.partition_of('k', 1) = 0",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "lease_queue:q:3");
    assert_eq!(row.get::<_, Option<i32>>(1), None);
    assert!(row.get::<_, bool>(2));
}
