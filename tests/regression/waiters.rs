//! Waiting without polling (0.2.0): lease.register_waiter and the release notification.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use pglease_tests::{key, server};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::{grant, release};

/// A connection that LISTENs on the release channel and forwards each notification's payload.
async fn listener() -> (Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let s = server();
    let (client, mut connection) = tokio_postgres::connect(
        &s.conninfo(pglease_tests::SHARED_DB, pglease_tests::APP),
        NoTls,
    )
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute("LISTEN pg_lease_released")
        .await
        .unwrap();
    (client, rx)
}

/// The next notification about one of this test's keys (tests share the database and the channel,
/// so notifications about other tests' keys are skipped).
async fn next_note(
    notes: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    prefix: &str,
) -> String {
    loop {
        let note = tokio::time::timeout(Duration::from_secs(30), notes.recv())
            .await
            .expect("a notification within 30 s")
            .expect("the listener is alive");
        if note.starts_with(prefix) {
            return note;
        }
    }
}

type Registered = (bool, Option<String>, Option<i64>, Option<bool>);

async fn register(c: &Client, k: &str) -> Registered {
    let r = c
        .query_one(
            "SELECT held, owner, epoch,
                    lapses_in > interval '0' AND expires_at - lapses_in <= clock_timestamp()
               FROM lease.register_waiter($1)",
            &[&k],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

#[tokio::test]
async fn register_waiter_reports_the_holder_and_the_time_left_on_the_server_clock() {
    let c = server().app().await;
    let k = key("register", "k");
    assert_eq!(
        register(&c, &k).await,
        (false, None, None, None),
        "unknown key: acquire now"
    );
    grant(&c, &k, "holder", "1 hour").await;
    assert_eq!(
        register(&c, &k).await,
        (true, Some("holder".into()), Some(1), Some(true))
    );
    assert_eq!(
        register(&c, &k).await,
        (true, Some("holder".into()), Some(1), Some(true)),
        "idempotent"
    );
    release(&c, &k, "holder", 1).await;
    assert_eq!(
        register(&c, &k).await,
        (false, None, None, None),
        "free key: acquire now"
    );
}

/// Notifications arrive in commit order, so if the uncontended release had notified, its payload
/// would arrive before the contended one's.
#[tokio::test]
async fn release_notifies_only_when_a_waiter_registered() {
    let c = server().app().await;
    let (_listening, mut notes) = listener().await;
    let quiet = key("notify", "uncontended");
    let awaited = key("notify", "awaited");
    grant(&c, &quiet, "holder", "1 hour").await;
    grant(&c, &awaited, "holder", "1 hour").await;
    assert!(register(&c, &awaited).await.0);

    assert_eq!(release(&c, &quiet, "holder", 1).await, "ok");
    assert_eq!(release(&c, &awaited, "holder", 1).await, "ok");
    assert_eq!(next_note(&mut notes, &key("notify", "")).await, awaited);
}

#[tokio::test]
async fn a_new_grant_clears_the_waiter_mark() {
    let c = server().app().await;
    let (_listening, mut notes) = listener().await;
    let k = key("mark_cleared", "k");
    let marker = key("mark_cleared", "marker");
    grant(&c, &k, "holder", "1 hour").await;
    assert!(register(&c, &k).await.0);
    release(&c, &k, "holder", 1).await;
    assert_eq!(next_note(&mut notes, &key("mark_cleared", "")).await, k);
    // The next holder's release notifies nobody: the waiters of the old grant are gone.
    assert_eq!(grant(&c, &k, "next", "1 hour").await, 3);
    release(&c, &k, "next", 3).await;
    grant(&c, &marker, "holder", "1 hour").await;
    register(&c, &marker).await;
    release(&c, &marker, "holder", 1).await;
    assert_eq!(
        next_note(&mut notes, &key("mark_cleared", "")).await,
        marker,
        "no notification for the unawaited release"
    );
}

#[tokio::test]
async fn a_rolled_back_release_notifies_nobody() {
    let c = server().app().await;
    let (_listening, mut notes) = listener().await;
    let k = key("rollback_notify", "k");
    let marker = key("rollback_notify", "marker");
    grant(&c, &k, "holder", "1 hour").await;
    register(&c, &k).await;
    c.batch_execute(&format!(
        "BEGIN; SELECT lease.release('{k}', 'holder', 1); ROLLBACK;"
    ))
    .await
    .unwrap();
    grant(&c, &marker, "holder", "1 hour").await;
    register(&c, &marker).await;
    release(&c, &marker, "holder", 1).await;
    assert_eq!(
        next_note(&mut notes, &key("rollback_notify", "")).await,
        marker
    );
}

/// An operator's force_release ends the grant as a release does: a registered waiter is woken.
#[tokio::test]
async fn a_force_release_notifies_a_registered_waiter() {
    let s = server();
    let (_listening, mut notes) = listener().await;
    let holder = s.app().await;
    let waiter = s.app().await;
    let admin = s
        .connect_as(pglease_tests::SHARED_DB, pglease_tests::ADMIN)
        .await;
    let k = key("force_notify", "k");
    let epoch = grant(&holder, &k, "w", "1 hour").await;
    assert!(register(&waiter, &k).await.0, "the key is held");
    let ended: Option<i64> = admin
        .query_one("SELECT lease.force_release($1)", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, Some(epoch));
    assert_eq!(next_note(&mut notes, &key("force_notify", "")).await, k);
}
