//! send / send_batch / partition_of: where a message goes, and that it commits with its producer.

use std::collections::BTreeMap;

use super::{
    Fixture, code, hex, labels, md5, message_row, partition_of, send, send_batch, status, try_send,
};

#[test]
fn the_tests_md5_matches_the_rfc_1321_test_vectors() {
    for (input, digest) in [
        ("", "d41d8cd98f00b204e9800998ecf8427e"),
        ("a", "0cc175b9c0f1b6a831c399e269772661"),
        ("abc", "900150983cd24fb0d6963f7d28e17f72"),
        ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
        (
            "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
            "57edf4a22be3c955ac49da2e2107b67a",
        ),
    ] {
        assert_eq!(hex(&md5(input.as_bytes())), digest, "md5({input:?})");
    }
}

/// Keys of many shapes: ASCII, multi-byte UTF-8, long, and enough of them that some digests have
/// the top bit set (a negative bigint in SQL).
fn sample_keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..200).map(|i| format!("key-{i}")).collect();
    keys.extend(
        ["é", "日本語のキー", "a b c", "'quoted'", "x"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    keys.push("k".repeat(1024));
    keys
}

#[tokio::test]
async fn partition_of_is_the_first_8_bytes_of_md5_big_endian_modulo_the_partitions() {
    let f = Fixture::connect("partition_of_is_md5").await;
    let keys = sample_keys();
    assert!(
        keys.iter().any(|k| md5(k.as_bytes())[0] & 0x80 != 0),
        "the sample exercises digests above i64::MAX"
    );
    for k in &keys {
        let server_md5: String = f
            .app
            .query_one("SELECT md5($1)", &[k])
            .await
            .unwrap()
            .get(0);
        assert_eq!(server_md5, hex(&md5(k.as_bytes())), "md5 of {k:?}");
    }
    for n in [1i32, 2, 3, 7, 16, 1000, 1023, 1024] {
        let rows = f
            .app
            .query(
                "SELECT k, lease_queue.partition_of(k, $2) FROM unnest($1::text[]) AS k",
                &[&keys, &n],
            )
            .await
            .unwrap();
        for r in rows {
            let (k, p): (String, i32) = (r.get(0), r.get(1));
            assert_eq!(p, partition_of(&k, n as u64), "partition_of({k:?}, {n})");
        }
    }
    let null: Option<i32> = f
        .app
        .query_one("SELECT lease_queue.partition_of(NULL, 4)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(null, None, "a NULL key has no partition of its own");
}

#[tokio::test]
async fn a_keyed_message_goes_to_the_partition_of_its_key_and_is_received_only_there() {
    let f = Fixture::new("a_keyed_message_goes_to_its_partition", 4, 10).await;
    let mut expected: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut last_id = 0;
    for i in 0..24 {
        let k = format!("k{i}");
        let id = f.send(Some(&k), &k).await;
        assert!(id > last_id, "ids increase");
        last_id = id;
        let p = partition_of(&k, 4);
        assert_eq!(message_row(&f.su, id).await.unwrap().0, p, "{k}");
        expected.entry(p).or_default().push(k);
    }
    assert_eq!(expected.len(), 4, "the sample covers every partition");
    for p in 0..4 {
        let e = f.claim(p, "w").await;
        let mut got: Vec<String> = f
            .receive(p, "w", e, 100)
            .await
            .into_iter()
            .map(|d| d.label)
            .collect();
        got.sort();
        let mut want = expected[&p].clone();
        want.sort();
        assert_eq!(got, want, "partition {p}");
    }
}

#[tokio::test]
async fn an_unkeyed_message_goes_to_partition_id_modulo_the_partitions() {
    let f = Fixture::new("an_unkeyed_message_goes_to_id_mod_n", 3, 10).await;
    let mut expected: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for i in 0..9 {
        let id = f.send(None, &format!("u{i}")).await;
        let p = i32::try_from(id % 3).unwrap();
        assert_eq!(message_row(&f.su, id).await.unwrap().0, p);
        expected.entry(p).or_default().push(id);
    }
    for p in 0..3 {
        let e = f.claim(p, "w").await;
        let batch = f.receive(p, "w", e, 100).await;
        assert!(batch.iter().all(|d| d.key.is_none()));
        let mut got: Vec<i64> = batch.iter().map(|d| d.id).collect();
        got.sort_unstable();
        assert_eq!(&got, expected.get(&p).unwrap_or(&vec![]), "partition {p}");
    }
}

#[tokio::test]
async fn send_batch_returns_the_ids_in_array_order_and_keeps_the_array_order_within_a_key() {
    let f = Fixture::new("send_batch_keeps_array_order", 1, 10).await;
    let ids = send_batch(
        &f.app,
        &f.q,
        &[Some("k"), None, Some("j"), Some("k"), Some("k")],
        &["k1", "u1", "j1", "k2", "k3"],
    )
    .await;
    assert_eq!(ids.len(), 5);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{ids:?} in array order"
    );
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    let by_id: BTreeMap<i64, &str> = batch.iter().map(|d| (d.id, d.label.as_str())).collect();
    assert_eq!(
        ids.iter().map(|id| by_id[id]).collect::<Vec<_>>(),
        ["k1", "u1", "j1", "k2", "k3"],
        "each id is the message at its array position"
    );
    let ks: Vec<&str> = batch
        .iter()
        .filter(|d| d.key.as_deref() == Some("k"))
        .map(|d| d.label.as_str())
        .collect();
    assert_eq!(ks, ["k1", "k2", "k3"]);
    // An empty batch sends nothing.
    assert!(send_batch(&f.app, &f.q, &[], &[]).await.is_empty());
}

#[tokio::test]
async fn a_rolled_back_send_is_never_delivered() {
    let f = Fixture::new("a_rolled_back_send", 1, 10).await;
    f.app.batch_execute("BEGIN").await.unwrap();
    send(&f.app, &f.q, Some("k"), "rolled-back", "0").await;
    send(&f.app, &f.q, None, "rolled-back-unkeyed", "0").await;
    send_batch(&f.app, &f.q, &[Some("k")], &["rolled-back-batch"]).await;
    f.app.batch_execute("ROLLBACK").await.unwrap();
    f.send(Some("k"), "committed").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&batch), ["committed"]);
    f.ack(0, "w", e, batch[0].batch_id).await;
    assert!(f.receive(0, "w", e, 100).await.is_empty());
}

#[tokio::test]
async fn a_message_sent_in_an_open_transaction_is_invisible_to_receive_until_it_commits() {
    let f = Fixture::new("a_message_in_an_open_transaction", 1, 10).await;
    let producer = f.another_app().await;
    producer.batch_execute("BEGIN").await.unwrap();
    send(&producer, &f.q, Some("k"), "keyed", "0").await;
    send(&producer, &f.q, None, "unkeyed", "0").await;
    let e = f.claim(0, "w").await;
    assert!(f.receive(0, "w", e, 100).await.is_empty());
    assert_eq!(status(&f.app, &f.q).await[0].backlog, 0);
    producer.batch_execute("COMMIT").await.unwrap();
    let mut got = labels(&f.receive(0, "w", e, 100).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    got.sort();
    assert_eq!(got, ["keyed", "unkeyed"]);
}

#[tokio::test]
async fn a_delayed_message_is_not_delivered_before_it_is_due_and_holds_back_only_its_key() {
    let f = Fixture::new("a_delayed_message_holds_back_its_key", 1, 10).await;
    send(&f.app, &f.q, Some("k"), "k-delayed", "1 hour").await;
    f.send(Some("k"), "k-after").await;
    send(&f.app, &f.q, None, "u-delayed", "1 hour").await;
    f.send(Some("j"), "j-now").await;
    f.send(None, "u-now").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    let mut got = labels(&batch);
    got.sort_unstable();
    assert_eq!(got, ["j-now", "u-now"], "only what is due, and not k-after");
    f.ack(0, "w", e, batch[0].batch_id).await;
    assert!(f.receive(0, "w", e, 100).await.is_empty());
    assert_eq!(status(&f.app, &f.q).await[0].backlog, 3);
}

#[tokio::test]
async fn a_delayed_message_behind_a_due_head_stops_its_key_at_the_delayed_message() {
    let f = Fixture::new("a_delayed_message_behind_a_due_head", 1, 10).await;
    f.send(Some("k"), "k1").await;
    send(&f.app, &f.q, Some("k"), "k2-delayed", "1 hour").await;
    f.send(Some("k"), "k3").await;
    let e = f.claim(0, "w").await;
    let batch = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&batch), ["k1"]);
    f.ack(0, "w", e, batch[0].batch_id).await;
    assert!(
        f.receive(0, "w", e, 100).await.is_empty(),
        "k3 waits behind k2"
    );
}

#[tokio::test]
async fn a_send_rolled_back_to_a_savepoint_is_never_delivered() {
    let f = Fixture::new("a_send_rolled_back_to_a_savepoint", 1, 10).await;
    f.app.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    send(&f.app, &f.q, Some("k"), "undone", "0").await;
    send(&f.app, &f.q, None, "undone-unkeyed", "0").await;
    f.app
        .batch_execute("ROLLBACK TO SAVEPOINT s")
        .await
        .unwrap();
    send(&f.app, &f.q, Some("k"), "kept", "0").await;
    f.app.batch_execute("COMMIT").await.unwrap();
    let e = f.claim(0, "w").await;
    assert_eq!(labels(&f.receive(0, "w", e, 100).await), ["kept"]);
}

#[tokio::test]
async fn a_delayed_message_is_delivered_once_the_server_clock_reaches_its_due_time() {
    let f = Fixture::new("a_delayed_message_is_delivered_when_due", 1, 10).await;
    let id = send(&f.app, &f.q, Some("k"), "k1", "200 milliseconds").await;
    f.send(Some("k"), "k2").await;
    let (_, _, due) = message_row(&f.su, id).await.unwrap();
    let e = f.claim(0, "w").await;
    super::await_server_clock(&f.app, due).await;
    let batch = f.receive(0, "w", e, 100).await;
    assert_eq!(
        labels(&batch),
        ["k1", "k2"],
        "in order, the later one with it"
    );
}

#[tokio::test]
async fn send_is_refused_with_55000_while_session_replication_role_is_replica() {
    let f = Fixture::new("send_refused_under_replica_role", 1, 10).await;
    f.send(Some("k"), "before").await;
    let before = f.snapshot().await;
    // Only a superuser may set session_replication_role.
    f.su.batch_execute("SET session_replication_role = replica")
        .await
        .unwrap();
    assert_eq!(
        code(try_send(&f.su, &f.q, Some("k"), "m", "0").await),
        "55000"
    );
    assert_eq!(code(try_send(&f.su, &f.q, None, "m", "0").await), "55000");
    let e = pglease_tests::expect_error(
        &f.su,
        &format!(
            "SELECT * FROM lease_queue.send_batch('{}', ARRAY['k'], ARRAY['1'::jsonb])",
            f.q
        ),
    )
    .await;
    assert_eq!(e.code, "55000");
    f.su.batch_execute("RESET session_replication_role")
        .await
        .unwrap();
    assert_eq!(f.snapshot().await, before);
    assert!(try_send(&f.su, &f.q, Some("k"), "after", "0").await.is_ok());
}

/// Empty arrays are a batch of nothing: no row, no message, no change (QUEUE.md §2).
#[tokio::test]
async fn send_batch_of_empty_arrays_sends_nothing_and_returns_no_row() {
    let f = super::Fixture::new("send_batch_empty_arrays", 2, 10).await;
    let before = f.snapshot().await;
    let rows = f
        .app
        .query(
            "SELECT * FROM lease_queue.send_batch($1, '{}'::text[], '{}'::jsonb[])",
            &[&f.q],
        )
        .await
        .unwrap();
    assert!(rows.is_empty());
    assert_eq!(f.snapshot().await, before);
}
