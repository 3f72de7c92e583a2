//! lease.watch (0.6.0): observers of a key's holder are notified on channel `pg_lease_changed` of
//! every grant, release and change of data of a watched key, at commit.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use pglease_tests::{ADMIN, APP, SHARED_DB, expect_error, key, server};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::data::{acquire_with, renew_with};
use crate::invalid_input::rejects;
use crate::{await_lapsed, grant, release, renew};

/// A connection to `db` that LISTENs on `channel` and forwards each notification's payload.
pub(crate) async fn listener(db: &str, channel: &str) -> (Client, UnboundedReceiver<String>) {
    let (client, mut connection) = tokio_postgres::connect(&server().conninfo(db, APP), NoTls)
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
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .unwrap();
    (client, rx)
}

/// The next notification about a key starting with `prefix` (tests share databases and channels).
pub(crate) async fn next_note(notes: &mut UnboundedReceiver<String>, prefix: &str) -> String {
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

/// `lease.watch(key)`: (held, owner, epoch, data, whether lapses_in is the time left to expires_at).
type Watched = (
    bool,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<bool>,
);

pub(crate) async fn watch(c: &Client, k: &str) -> Watched {
    let r = c
        .query_one(
            "SELECT held, owner, epoch, data,
                    lapses_in > interval '0' AND expires_at - lapses_in <= clock_timestamp()
                    AND expires_at - lapses_in > clock_timestamp() - interval '1 minute'
               FROM lease.watch($1)",
            &[&k],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.watch({k}): {e}"));
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

#[tokio::test]
async fn watch_reports_the_keys_state_as_inspect_does_with_the_time_left() {
    let c = server().app().await;
    let su = server().connect_super(SHARED_DB).await;
    let k = key("watch_state", "k");
    let floor: i64 = su
        .query_one("SELECT max(floor) FROM lease.epoch_floor", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        watch(&c, &k).await,
        (false, None, Some(floor), None, None),
        "an unknown key: FREE at the epoch floor"
    );
    acquire_with(
        &c,
        &k,
        "holder",
        "300 milliseconds",
        Some("leader at 10.0.0.1"),
    )
    .await;
    assert_eq!(
        watch(&c, &k).await,
        (
            true,
            Some("holder".into()),
            Some(floor + 1),
            Some("leader at 10.0.0.1".into()),
            Some(true)
        )
    );
    await_lapsed(&c, &k).await;
    assert_eq!(
        watch(&c, &k).await,
        (false, None, Some(floor + 1), None, None)
    );
    let e = grant(&c, &k, "next", "1 hour").await;
    assert_eq!(e, floor + 2);
    release(&c, &k, "next", e).await;
    assert_eq!(watch(&c, &k).await, (false, None, Some(e + 1), None, None));
}

/// Notifications arrive in commit order; a marker key's notification after the calls that must not
/// notify proves that they did not.
#[tokio::test]
async fn a_watched_key_notifies_on_grant_release_and_data_change_and_on_nothing_else() {
    let c = server().app().await;
    let (_l, mut notes) = listener(SHARED_DB, "pg_lease_changed").await;
    let p = key("watch_notes", "");
    let k = format!("{p}k");
    let marker = format!("{p}marker");
    watch(&c, &k).await;
    watch(&c, &marker).await;

    assert_eq!(grant(&c, &k, "holder", "1 hour").await, 1);
    assert_eq!(next_note(&mut notes, &p).await, k, "a grant");
    assert_eq!(renew(&c, &k, "holder", 1, "1 hour").await.0, "ok");
    assert_eq!(renew_with(&c, &k, "holder", 1, None).await, "ok");
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 hour", None).await,
        (true, Some(1))
    );
    assert_eq!(
        acquire_with(&c, &k, "rival", "1 hour", Some("x")).await,
        (false, None)
    );
    assert_eq!(renew_with(&c, &k, "rival", 1, Some("x")).await, "not_owner");
    watch(&c, &k).await;
    assert_eq!(renew_with(&c, &k, "holder", 1, Some("v1")).await, "ok");
    assert_eq!(
        next_note(&mut notes, &p).await,
        k,
        "a renew with data (and nothing for the plain renews, the idempotent acquire, the refusals and watch)"
    );
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 hour", Some("v1")).await,
        (true, Some(1))
    );
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 hour", Some("v2")).await,
        (true, Some(1))
    );
    assert_eq!(
        next_note(&mut notes, &p).await,
        k,
        "an idempotent acquire that changes the data (not the one that passes the same data)"
    );
    assert_eq!(release(&c, &k, "holder", 1).await, "ok");
    assert_eq!(next_note(&mut notes, &p).await, k, "a release");
    assert_eq!(release(&c, &k, "holder", 1).await, "not_owner");
    // A rolled back grant notifies nobody.
    c.batch_execute(&format!(
        "BEGIN; SELECT lease.acquire('{k}', 'holder', '1 hour'); ROLLBACK;"
    ))
    .await
    .unwrap();
    // A lapse sends nothing (the watcher knows lapses_in).
    acquire_with(&c, &k, "short", "50 milliseconds", None).await;
    assert_eq!(next_note(&mut notes, &p).await, k, "the short grant");
    await_lapsed(&c, &k).await;
    grant(&c, &marker, "holder", "1 hour").await;
    assert_eq!(
        next_note(&mut notes, &p).await,
        marker,
        "no notification for the rolled back grant, the refused release or the lapse"
    );
    // The takeover of the lapsed grant is a grant.
    grant(&c, &k, "heir", "1 hour").await;
    assert_eq!(next_note(&mut notes, &p).await, k, "a takeover");
}

#[tokio::test]
async fn an_unwatched_key_notifies_nobody() {
    let c = server().app().await;
    let (_l, mut notes) = listener(SHARED_DB, "pg_lease_changed").await;
    let p = key("watch_none", "");
    let quiet = format!("{p}quiet");
    let marker = format!("{p}marker");
    let e = grant(&c, &quiet, "holder", "1 hour").await;
    renew_with(&c, &quiet, "holder", e, Some("data")).await;
    release(&c, &quiet, "holder", e).await;
    watch(&c, &marker).await;
    grant(&c, &marker, "holder", "1 hour").await;
    assert_eq!(next_note(&mut notes, &p).await, marker);
}

/// watch creates a FREE row at the epoch floor for a key that has none: the first grant gets the
/// epoch that acquire alone would have given (floor + 1), also after a purge raised the floor.
#[tokio::test]
async fn watching_an_unknown_key_leaves_its_first_epoch_as_acquire_alone_gives_it() {
    let s = server();
    let db = s.fresh_db_with_extension("watch_floor");
    let c = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    for round in 0..2 {
        let old = format!("old{round}");
        let e = grant(&c, &old, "w", "1 hour").await;
        release(&c, &old, "w", e).await;
        let purged: i64 = admin
            .query_one("SELECT lease.purge('0')", &[])
            .await
            .unwrap()
            .get(0);
        assert!(purged >= 1);
        let floor = e + 1;
        let watched = format!("watched{round}");
        let plain = format!("plain{round}");
        assert_eq!(watch(&c, &watched).await.2, Some(floor), "the counter");
        assert_eq!(grant(&c, &watched, "w", "1 hour").await, floor + 1);
        assert_eq!(grant(&c, &plain, "w", "1 hour").await, floor + 1);
        release(&c, &watched, "w", floor + 1).await;
        release(&c, &plain, "w", floor + 1).await;
    }
}

/// Defect report: purge deletes a watched key's FREE (or LAPSED) row, mark included, so the
/// watcher, who was told the key is watched for an hour, misses the key's next grant. (purge judges
/// only owner and expiry; watched_until is not consulted.)
#[tokio::test]
async fn purge_keeps_a_watched_keys_mark_so_its_next_grant_is_notified() {
    let s = server();
    let db = s.fresh_db_with_extension("watch_purge");
    let c = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    let (_l, mut notes) = listener(&db, "pg_lease_changed").await;
    watch(&c, "k").await;
    watch(&c, "marker").await;
    admin
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap();
    grant(&c, "k", "holder", "1 hour").await;
    grant(&c, "marker", "holder", "1 hour").await;
    assert_eq!(
        next_note(&mut notes, "").await,
        "k",
        "the grant of the watched key is notified after a purge"
    );
}

#[tokio::test]
async fn watch_rejects_invalid_keys() {
    let p = key("watch_bad", "");
    rejects(
        "SELECT * FROM lease.watch(NULL)",
        &["key must not be NULL"],
        &p,
    )
    .await;
    rejects(
        "SELECT * FROM lease.watch('')",
        &["key must not be empty"],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.watch('{}')", "k".repeat(1025)),
        &["key must be at most 1024 bytes (got 1025)"],
        &p,
    )
    .await;
    let c = server().app().await;
    assert_eq!(
        expect_error(&c, "SELECT * FROM lease.watch(repeat('é', 513))")
            .await
            .code,
        "22023"
    );
}
