//! create_queue / drop_queue / list_queues: a queue's life, its bounds, and epochs that outlive it.

use std::time::Duration;

use pglease_tests::calls::inspect;
use pglease_tests::{Wait, await_backend_waiting, backend_pid, expect_error};

use super::{
    Fixture, LONG, claim, code, create_queue, labels, send, status, try_ack, try_claim,
    try_drop_queue, try_receive, try_release, try_send,
};

async fn listed(f: &Fixture, q: &str) -> Option<(i32, i32)> {
    f.app
        .query_opt(
            "SELECT partitions, max_attempts FROM lease_queue.list_queues() WHERE queue_name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

#[tokio::test]
async fn create_queue_makes_a_queue_of_that_many_partitions_with_ten_attempts_by_default() {
    let q = "create_queue_makes_a_queue_of_that_many_partitions";
    let f = Fixture::connect(q).await;
    f.admin
        .execute("SELECT lease_queue.create_queue($1, 3)", &[&q])
        .await
        .unwrap();
    assert_eq!(listed(&f, q).await, Some((3, 10)));
    let parts: Vec<i32> = status(&f.app, q)
        .await
        .iter()
        .map(|s| s.partition)
        .collect();
    assert_eq!(parts, [0, 1, 2], "one status row per partition");

    let q2 = format!("{q}.2");
    create_queue(&f.admin, &q2, 1, 7).await;
    assert_eq!(listed(&f, &q2).await, Some((1, 7)));
}

#[tokio::test]
async fn the_bounds_of_partitions_and_max_attempts_are_inclusive_and_beyond_them_is_22023() {
    let q = "bounds_of_partitions_and_max_attempts";
    let f = Fixture::connect(q).await;
    for (suffix, partitions, max_attempts) in [("lo", 1, 1), ("hi", 1024, 10000)] {
        let name = format!("{q}.{suffix}");
        create_queue(&f.admin, &name, partitions, max_attempts).await;
        assert_eq!(listed(&f, &name).await, Some((partitions, max_attempts)));
        assert_eq!(status(&f.app, &name).await.len(), partitions as usize);
    }
    for (partitions, max_attempts) in [(0, 1), (1025, 1), (-1, 1), (1, 0), (1, 10001), (1, -5)] {
        let name = format!("{q}.bad");
        let e = expect_error(
            &f.admin,
            &format!("SELECT lease_queue.create_queue('{name}', {partitions}, {max_attempts})"),
        )
        .await;
        assert_eq!(e.code, "22023", "({partitions}, {max_attempts})");
        assert_eq!(listed(&f, &name).await, None, "nothing was created");
    }
}

#[tokio::test]
async fn creating_a_queue_that_exists_is_refused_with_42710_and_changes_nothing() {
    let f = Fixture::new("creating_a_queue_that_exists", 2, 3).await;
    f.send(Some("k"), "m").await;
    let before = f.snapshot().await;
    for sql in [
        format!("SELECT lease_queue.create_queue('{}', 2, 3)", f.q),
        format!("SELECT lease_queue.create_queue('{}', 5)", f.q),
    ] {
        assert_eq!(expect_error(&f.admin, &sql).await.code, "42710", "{sql}");
    }
    assert_eq!(f.snapshot().await, before);
    assert_eq!(listed(&f, &f.q).await, Some((2, 3)));
}

#[tokio::test]
async fn every_call_on_a_queue_that_does_not_exist_is_lq001() {
    let f = Fixture::connect("every_call_on_a_missing_queue").await;
    let q = f.q.as_str();
    assert_eq!(code(try_drop_queue(&f.admin, q).await), "LQ001");
    assert_eq!(
        code(try_send(&f.app, q, Some("k"), "m", "0").await),
        "LQ001"
    );
    assert_eq!(code(try_send(&f.app, q, None, "m", "0").await), "LQ001");
    assert_eq!(code(try_claim(&f.app, q, 0, "w", LONG).await), "LQ001");
    assert_eq!(code(try_receive(&f.app, q, 0, "w", 1, 10).await), "LQ001");
    assert_eq!(code(try_ack(&f.app, q, 0, "w", 1, 1).await), "LQ001");
    assert_eq!(
        code(try_release(&f.app, q, 0, "w", 1, false).await),
        "LQ001"
    );
    for (client, sql) in [
        (
            &f.app,
            format!("SELECT * FROM lease_queue.send_batch('{q}', ARRAY['k'], ARRAY['1'::jsonb])"),
        ),
        (
            &f.app,
            format!("SELECT * FROM lease_queue.claim_any('{q}', 'w', '1 hour')"),
        ),
        (
            &f.app,
            format!("SELECT lease_queue.nack('{q}', 0, 'w', 1, 1, 1)"),
        ),
        (
            &f.app,
            format!("SELECT * FROM lease_queue.list_dead_letters('{q}')"),
        ),
        (&f.app, format!("SELECT * FROM lease_queue.status('{q}')")),
        (&f.admin, format!("SELECT lease_queue.redrive('{q}', 'k')")),
        (&f.admin, format!("SELECT lease_queue.redrive('{q}', NULL)")),
        (
            &f.admin,
            format!("SELECT lease_queue.discard_dead_letters('{q}')"),
        ),
    ] {
        assert_eq!(expect_error(client, &sql).await.code, "LQ001", "{sql}");
    }
    assert_eq!(listed(&f, q).await, None, "no call created the queue");
}

#[tokio::test]
async fn drop_queue_removes_the_queue_its_messages_batches_keys_and_dead_letters() {
    let f = Fixture::new("drop_queue_removes_everything", 2, 1).await;
    for i in 0..6 {
        f.send(Some(&format!("k{i}")), &format!("m{i}")).await;
        f.send(None, &format!("u{i}")).await;
    }
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 2).await;
    assert_eq!(batch.len(), 2);
    let nacked = batch[0].id;
    super::nack(
        &f.app,
        (&f.q, 0, "w", e, batch[0].batch_id),
        nacked,
        "0",
        None,
    )
    .await;
    assert_eq!(super::dead_letters(&f.app, &f.q).await.len(), 1);

    try_drop_queue(&f.admin, &f.q).await.unwrap();
    assert_eq!(listed(&f, &f.q).await, None);
    let left = f.snapshot().await;
    assert!(
        left.lines().all(|l| l.starts_with("lease ")),
        "only the partitions' lease rows stay:\n{left}"
    );
    let n: i64 =
        f.su.query_one(
            "SELECT (SELECT count(*) FROM lease_queue.messages WHERE id = ANY ($1))
                  + (SELECT count(*) FROM lease_queue.dead_letters WHERE id = ANY ($1))",
            &[&vec![nacked, batch[1].id]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn drop_queue_releases_the_held_partition_leases_and_their_holders_next_calls_are_lq001() {
    let f = Fixture::new("drop_queue_releases_held_leases", 3, 10).await;
    let e0 = f.claim(0, "w0").await;
    let e1 = f.claim(1, "w1").await;
    f.send(Some(&super::key_in("k", 0, 3)), "m").await;
    let batch = f.receive(0, "w0", e0, 10).await;
    assert_eq!(labels(&batch), ["m"]);

    try_drop_queue(&f.admin, &f.q).await.unwrap();
    for (p, e) in [(0, e0), (1, e1)] {
        assert_eq!(
            inspect(&f.app, &f.lease_key(p)).await,
            Some((false, None, e + 1, None)),
            "partition {p}: released (the counter is the epoch + 1)"
        );
    }
    assert_eq!(
        inspect(&f.app, &f.lease_key(2)).await,
        None,
        "a partition never claimed has no lease row"
    );
    assert_eq!(
        code(try_receive(&f.app, &f.q, 0, "w0", e0, 10).await),
        "LQ001"
    );
    assert_eq!(
        code(try_ack(&f.app, &f.q, 0, "w0", e0, batch[0].batch_id).await),
        "LQ001"
    );
    assert_eq!(
        code(try_release(&f.app, &f.q, 1, "w1", e1, false).await),
        "LQ001"
    );
}

#[tokio::test]
async fn a_queue_dropped_and_created_again_grants_epochs_above_every_epoch_of_the_old_one() {
    let f = Fixture::new("dropped_and_created_again", 3, 10).await;
    // Partition 0: claimed and released twice, then held at the drop; partition 1: claimed once and
    // lapsed; partition 2: never claimed.
    let mut max_before = [0i64; 3];
    for _ in 0..2 {
        let e = f.claim(0, "w").await;
        assert_eq!(
            try_release(&f.app, &f.q, 0, "w", e, false).await.unwrap(),
            0
        );
        max_before[0] = e;
    }
    max_before[0] = f.claim(0, "w").await;
    max_before[1] = f.claim(1, "w").await;
    super::lapse_partition(&f, 1, "w", max_before[1]).await;

    try_drop_queue(&f.admin, &f.q).await.unwrap();
    create_queue(&f.admin, &f.q, 3, 10).await;
    for (p, before) in max_before.iter().enumerate() {
        let p = i32::try_from(p).unwrap();
        let c = claim(&f.app, &f.q, p, "w", LONG).await;
        assert!(c.claimed);
        assert!(
            c.epoch.unwrap() > *before,
            "partition {p}: epoch {:?} after the re-create must exceed {before}",
            c.epoch
        );
    }
}

#[tokio::test]
async fn drop_queue_waits_for_a_producer_transaction_that_sent_to_it_then_drops_its_message() {
    let f = Fixture::new("drop_queue_waits_for_a_producer", 1, 10).await;
    let producer = f.another_app().await;
    let observer = f.another_app().await;
    producer.batch_execute("BEGIN").await.unwrap();
    let id = send(&producer, &f.q, Some("k"), "late", "0").await;

    let dropper = f.another_app().await;
    let admin_pid = backend_pid(&f.admin).await;
    let q = f.q.clone();
    let admin = f.admin;
    let drop = tokio::spawn(async move { try_drop_queue(&admin, &q).await });
    await_backend_waiting(&observer, admin_pid, Wait::Lock, Duration::from_secs(10)).await;
    assert!(!drop.is_finished(), "the drop waits for the producer");
    producer.batch_execute("COMMIT").await.unwrap();
    drop.await.unwrap().unwrap();

    let n: i64 =
        f.su.query_one(
            "SELECT count(*) FROM lease_queue.messages WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n, 0,
        "the message committed before the drop went with the queue"
    );
    assert_eq!(
        code(try_send(&dropper, &f.q, None, "m", "0").await),
        "LQ001"
    );
}

#[tokio::test]
async fn version_is_the_control_files_default_version() {
    let f = Fixture::connect("version_is_the_default_version").await;
    let row = f
        .app
        .query_one(
            "SELECT lease_queue.version(), \
                    (SELECT extversion FROM pg_extension WHERE extname = 'pg_lease_queue')",
            &[],
        )
        .await
        .unwrap();
    let (sql_version, ext_version): (String, String) = (row.get(0), row.get(1));
    let control = std::fs::read_to_string(
        pglease_tests::repo_root().join("extensions/pg_lease_queue/pg_lease_queue.control"),
    )
    .unwrap();
    assert!(control.contains(&format!("default_version = '{ext_version}'")));
    assert_eq!(sql_version, ext_version);
}
