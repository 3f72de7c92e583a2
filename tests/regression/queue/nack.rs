//! nack: a failed message is retried later and alone, holding back only its own key, until it
//! succeeds or is dead-lettered after max_attempts deliveries.

use std::time::SystemTime;

use super::{
    BatchRef, Delivery, Fixture, batch_id, code, create_queue, dead_letters, labels, message_row,
    nack, send, sorted_labels, status, try_nack,
};

fn by_label<'a>(batch: &'a [Delivery], label: &str) -> &'a Delivery {
    batch
        .iter()
        .find(|d| d.label == label)
        .unwrap_or_else(|| panic!("{label} is in {batch:?}"))
}

async fn server_now(f: &Fixture) -> SystemTime {
    f.app
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_nack_holds_back_only_its_key_while_other_keys_of_the_partition_keep_flowing() {
    let f = Fixture::new("a_nack_holds_back_only_its_key", 1, 10).await;
    for (k, l) in [("k", "k1"), ("k", "k2"), ("j", "j1")] {
        f.send(Some(k), l).await;
    }
    f.send(None, "u1").await;
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    let b = batch_id(&b1);
    let r: BatchRef = (&f.q, 0, "w", e, b);
    assert_eq!(
        nack(&f.app, r, by_label(&b1, "k1").id, "1 hour", Some("boom")).await,
        "retrying"
    );
    let rest = sorted_labels(&f.receive(0, "w", e, 100).await);
    assert_eq!(
        rest,
        ["j1", "u1"],
        "the batch keeps the other keys; k2 left it"
    );
    f.ack(0, "w", e, b).await;
    assert_eq!(status(&f.app, &f.q).await[0].held_back_keys, 1);

    for round in 2..=3 {
        f.send(Some("j"), &format!("j{round}")).await;
        f.send(Some("i"), &format!("i{round}")).await;
        let next = f.receive(0, "w", e, 100).await;
        let mut got = labels(&next);
        got.sort_unstable();
        assert_eq!(
            got,
            [format!("i{round}"), format!("j{round}")],
            "other keys flow, k does not"
        );
        f.ack(0, "w", e, batch_id(&next)).await;
    }
    assert!(f.receive(0, "w", e, 100).await.is_empty());
}

#[tokio::test]
async fn a_nack_sends_the_later_messages_of_its_key_back_undelivered_and_keeps_the_earlier_ones() {
    let f = Fixture::new("a_nack_sends_later_messages_back", 1, 10).await;
    for l in ["k1", "k2", "k3"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    let (k2, k3) = (by_label(&b1, "k2").id, by_label(&b1, "k3").id);
    assert_eq!(
        nack(&f.app, (&f.q, 0, "w", e, batch_id(&b1)), k2, "0", None).await,
        "retrying"
    );
    assert_eq!(
        labels(&f.receive(0, "w", e, 100).await),
        ["k1"],
        "k1 stays in the batch"
    );
    assert_eq!(
        message_row(&f.su, k2).await.unwrap().1,
        1,
        "k2's delivery counted"
    );
    assert_eq!(
        message_row(&f.su, k3).await.unwrap().1,
        0,
        "k3's not: it was never handled"
    );
    f.ack(0, "w", e, batch_id(&b1)).await;

    let b2 = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b2), ["k2"], "the retry, alone");
    assert_eq!(b2[0].attempts, 2);
    f.ack(0, "w", e, batch_id(&b2)).await;
    let b3 = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b3), ["k3"]);
    assert_eq!(b3[0].attempts, 1);
}

#[tokio::test]
async fn a_nacked_message_is_retried_no_earlier_than_retry_after_and_without_the_rest_of_its_key() {
    let f = Fixture::new("a_nacked_message_is_retried_after", 1, 10).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    f.send(Some("j"), "j1").await;
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    let k1 = by_label(&b1, "k1").id;
    let before_nack = server_now(&f).await;
    nack(
        &f.app,
        (&f.q, 0, "w", e, batch_id(&b1)),
        k1,
        "1 second",
        None,
    )
    .await;
    let (_, _, due) = message_row(&f.su, k1).await.unwrap();
    assert!(
        due >= before_nack + std::time::Duration::from_secs(1),
        "due no earlier than retry_after from the nack"
    );
    f.ack(0, "w", e, batch_id(&b1)).await;

    f.send(Some("j"), "j2").await;
    let early = f.receive(0, "w", e, 100).await;
    let checked_at = server_now(&f).await;
    let retry = if early.iter().any(|d| d.id == k1) {
        // The machine was slow: k1 may be in this batch only if it was due by then.
        assert!(checked_at >= due, "k1 delivered before it was due");
        early
    } else {
        assert_eq!(labels(&early), ["j2"], "before k1 is due, nothing of key k");
        f.ack(0, "w", e, batch_id(&early)).await;
        super::await_server_clock(&f.app, due).await;
        f.send(Some("j"), "j3").await;
        f.receive(0, "w", e, 100).await
    };
    let of_k: Vec<&str> = retry
        .iter()
        .filter(|d| d.key.as_deref() == Some("k"))
        .map(|d| d.label.as_str())
        .collect();
    assert_eq!(of_k, ["k1"], "k1 without k2: {retry:?}");
    assert_eq!(retry.len(), 2, "with the other key's message");
    assert_eq!(by_label(&retry, "k1").attempts, 2);
    f.ack(0, "w", e, batch_id(&retry)).await;
    let after = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&after), ["k2"]);
    assert_eq!(after[0].attempts, 1);
}

#[tokio::test]
async fn until_a_retried_message_is_acked_no_later_message_of_its_key_is_delivered() {
    let f = Fixture::new("until_a_retry_is_acked_its_key_waits", 1, 10).await;
    for l in ["k1", "k2", "k3"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let b = f.receive(0, "w", e, 100).await;
    nack(&f.app, (&f.q, 0, "w", e, batch_id(&b)), b[0].id, "0", None).await;
    f.ack(0, "w", e, batch_id(&b)).await;
    for attempt in 2..=4 {
        let retry = f.receive(0, "w", e, 100).await;
        assert_eq!(labels(&retry), ["k1"], "attempt {attempt}: k1 alone");
        assert_eq!(retry[0].attempts, attempt);
        if attempt < 4 {
            let r = (f.q.as_str(), 0, "w", e, batch_id(&retry));
            assert_eq!(nack(&f.app, r, retry[0].id, "0", None).await, "retrying");
        }
        f.ack(0, "w", e, batch_id(&retry)).await;
    }
    assert_eq!(labels(&f.receive(0, "w", e, 100).await), ["k2", "k3"]);
}

#[tokio::test]
async fn after_max_attempts_deliveries_a_nacked_message_is_dead_lettered_and_its_key_continues() {
    let f = Fixture::new("after_max_attempts_a_nack_dead_letters", 1, 2).await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    f.send(Some("j"), "j1").await;
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    let k1 = by_label(&b1, "k1").id;
    let r1 = (f.q.as_str(), 0, "w", e, batch_id(&b1));
    assert_eq!(nack(&f.app, r1, k1, "0", Some("first")).await, "retrying");
    f.ack(0, "w", e, batch_id(&b1)).await;

    let b2 = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b2), ["k1"]);
    assert_eq!(b2[0].attempts, 2);
    let r2 = (f.q.as_str(), 0, "w", e, batch_id(&b2));
    assert_eq!(
        nack(&f.app, r2, k1, "0", Some("second")).await,
        "dead_lettered"
    );
    assert_eq!(message_row(&f.su, k1).await, None);
    let dead = dead_letters(&f.app, &f.q).await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(
        (d.id, d.partition, d.key.as_deref(), d.label.as_str()),
        (k1, 0, Some("k"), "k1")
    );
    assert_eq!(d.attempts, 2);
    assert_eq!(
        d.reason.as_deref(),
        Some("second"),
        "the last nack's reason"
    );
    assert_eq!((d.epoch, d.batch_id), (Some(e), Some(batch_id(&b2))));

    assert!(
        f.receive(0, "w", e, 100).await.is_empty(),
        "the open batch is now empty"
    );
    f.ack(0, "w", e, batch_id(&b2)).await;
    let b3 = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b3), ["k2"], "the key continues");
    assert_eq!(b3[0].attempts, 1);
}

#[tokio::test]
async fn a_repeated_nack_changes_nothing_and_reports_the_messages_state() {
    let f = Fixture::new("a_repeated_nack_is_a_no_op", 1, 2).await;
    for l in ["k1", "k2", "k3"] {
        f.send(Some("k"), l).await;
    }
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    let (k2, k3) = (by_label(&b1, "k2").id, by_label(&b1, "k3").id);
    let r1 = (f.q.as_str(), 0, "w", e, batch_id(&b1));
    assert_eq!(nack(&f.app, r1, k2, "0", Some("r")).await, "retrying");
    let after_first = f.snapshot().await;
    assert_eq!(
        nack(&f.app, r1, k2, "1 hour", Some("other")).await,
        "retrying"
    );
    assert_eq!(
        nack(&f.app, r1, k3, "0", None).await,
        "retrying",
        "k3 was sent back by this batch"
    );
    assert_eq!(f.snapshot().await, after_first);
    f.ack(0, "w", e, batch_id(&b1)).await;

    let b2 = f.receive(0, "w", e, 100).await;
    assert_eq!(labels(&b2), ["k2"]);
    let r2 = (f.q.as_str(), 0, "w", e, batch_id(&b2));
    assert_eq!(nack(&f.app, r2, k2, "0", None).await, "dead_lettered");
    let after_death = f.snapshot().await;
    assert_eq!(
        nack(&f.app, r2, k2, "0", Some("again")).await,
        "dead_lettered"
    );
    assert_eq!(f.snapshot().await, after_death);
}

#[tokio::test]
async fn nack_of_a_message_not_in_the_open_batch_is_refused_with_lq003_and_changes_nothing() {
    let f = Fixture::new("nack_of_a_message_not_in_the_batch_lq003", 1, 10).await;
    let other_q = format!("{}.other", f.q);
    create_queue(&f.admin, &other_q, 1, 10).await;
    let elsewhere = send(&f.app, &other_q, Some("k"), "elsewhere", "0").await;
    for l in ["k1", "k2"] {
        f.send(Some("k"), l).await;
    }
    let j1 = f.send(Some("j"), "j1").await;
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 1).await;
    assert_eq!(labels(&b1), ["k1"]);
    f.ack(0, "w", e, batch_id(&b1)).await;
    let b2 = f.receive(0, "w", e, 1).await;
    assert_eq!(labels(&b2), ["k2"]);
    let r = (f.q.as_str(), 0, "w", e, batch_id(&b2));
    let before = f.snapshot().await;
    for (id, what) in [
        (j1, "a pending message"),
        (b1[0].id, "an acked message"),
        (elsewhere, "a message of another queue"),
        (0, "no message"),
        (-1, "no message"),
    ] {
        assert_eq!(
            code(try_nack(&f.app, r, id, "0", None).await),
            "LQ003",
            "{what}"
        );
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn nack_of_a_batch_that_is_not_the_open_one_is_refused_with_lq002_and_changes_nothing() {
    let f = Fixture::new("nack_of_a_wrong_batch_lq002", 1, 10).await;
    f.send(Some("k"), "k1").await;
    let old = f.claim(0, "zombie").await;
    let b = f.receive(0, "zombie", old, 10).await;
    let before = f.snapshot().await;
    for wrong in [batch_id(&b) + 1000, 0] {
        let r = (f.q.as_str(), 0, "zombie", old, wrong);
        assert_eq!(code(try_nack(&f.app, r, b[0].id, "0", None).await), "LQ002");
    }
    assert_eq!(f.snapshot().await, before);
    super::lapse_partition(&f, 0, "zombie", old).await;
    let e = f.claim(0, "heir").await;
    let before = f.snapshot().await;
    let r = (f.q.as_str(), 0, "heir", e, batch_id(&b));
    assert_eq!(
        code(try_nack(&f.app, r, b[0].id, "0", None).await),
        "LQ002",
        "the batch was issued to the older epoch"
    );
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn a_nacked_unkeyed_message_is_retried_later_and_holds_back_nothing() {
    let f = Fixture::new("a_nacked_unkeyed_message", 1, 10).await;
    let u1 = f.send(None, "u1").await;
    f.send(None, "u2").await;
    let e = f.claim(0, "w").await;
    let b1 = f.receive(0, "w", e, 100).await;
    nack(&f.app, (&f.q, 0, "w", e, batch_id(&b1)), u1, "1 hour", None).await;
    assert_eq!(labels(&f.receive(0, "w", e, 100).await), ["u2"]);
    f.ack(0, "w", e, batch_id(&b1)).await;
    f.send(None, "u3").await;
    f.send(Some("k"), "k1").await;
    let got = sorted_labels(&f.receive(0, "w", e, 100).await);
    assert_eq!(got, ["k1", "u3"]);
    let s = &status(&f.app, &f.q).await[0];
    assert_eq!(s.held_back_keys, 0, "an unkeyed message holds back no key");
    assert_eq!(s.backlog, 1, "u1 awaits its retry");
}
