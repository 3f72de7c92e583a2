//! The history of grants and the handover of a lease (SEMANTICS §15, 0.9.0): every committed grant
//! has one history row, and `lease.history` tells how each ended — released, lapsed (seen as soon
//! as the server clock passes its expiry, whether or not anyone took the key), forced, transferred
//! — or that it is current. `lease.transfer` hands a key to a named successor with the next epoch,
//! fencing the old one at once. Values are compared as the server computes them (booleans over its
//! timestamps), never by reading the wall clock here.

use pglease_tests::{ADMIN, APP, SHARED_DB, expect_error, key, server, state_of};
use tokio_postgres::Client;

use crate::semaphore::acquire_slot;
use crate::{grant, lapse, release};

/// One history row as `epoch owner ended_by` (`held` while current), in epoch order.
async fn ends(c: &Client, key: &str) -> Vec<String> {
    c.query(
        "SELECT format('%s %s %s', epoch, owner, coalesce(ended_by, 'held'))
           FROM lease.history($1)",
        &[&key],
    )
    .await
    .unwrap_or_else(|e| panic!("lease.history({key}): {e}"))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// `lease.transfer(key, owner, epoch, to_owner, ttl)` as (status, epoch).
async fn transfer(
    c: &Client,
    key: &str,
    owner: &str,
    epoch: i64,
    to: &str,
    ttl: &str,
) -> (String, Option<i64>) {
    let r = c
        .query_one(
            "SELECT status, epoch FROM lease.transfer($1, $2, $3, $4, $5::text::interval)",
            &[&key, &owner, &epoch, &to, &ttl],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.transfer({key}, {owner}, {epoch}, {to}): {e}"));
    (r.get(0), r.get(1))
}

/// The history rows of `key` (every column, as text) read by the superuser: for "nothing changed".
async fn recorded(su: &Client, key: &str) -> String {
    su.query(
        "SELECT format('%s', h) FROM lease.grant_history AS h WHERE h.key = $1 ORDER BY h.epoch",
        &[&key],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<_, String>(0) + "\n")
    .collect()
}

#[tokio::test]
async fn a_release_is_recorded_with_its_time_and_the_expiry_the_grant_had() {
    let c = server().app().await;
    let k = key("history_release", "k");
    let e = grant(&c, &k, "worker-a", "1 hour").await;
    assert_eq!(ends(&c, &k).await, [format!("{e} worker-a held")]);
    let released_at: std::time::SystemTime = c
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(release(&c, &k, "worker-a", e).await, "ok");
    // Ended by the release: at the moment of the release, with the expiry it still had then (an
    // hour away), and the grant's start before both. Shown before anyone takes the key again.
    let ok: bool = c
        .query_one(
            "SELECT ended_by = 'released' AND ended_at >= $2 AND ended_at < clock_timestamp()
                    AND expires_at > ended_at + interval '50 minutes' AND granted_at <= $2
                    AND holder_role = $3
               FROM lease.history($1)",
            &[&k, &released_at, &APP],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok, "{:?}", ends(&c, &k).await);
    // The next grant does not change how the previous one is told.
    let next = grant(&c, &k, "worker-b", "1 hour").await;
    assert_eq!(
        ends(&c, &k).await,
        [
            format!("{e} worker-a released"),
            format!("{next} worker-b held")
        ]
    );
}

#[tokio::test]
async fn a_lapse_shows_as_soon_as_the_expiry_passes_and_stays_the_same_after_a_takeover() {
    let c = server().app().await;
    let k = key("history_lapse", "k");
    let e = lapse(&c, &k, "worker-a").await;
    // Nobody took the key: the history reads the lapse from the key's row, ended at its expiry.
    let row_lapse: String = c
        .query_one(
            "SELECT format('%s %s %s', ended_by, ended_at = expires_at, ended_at <= clock_timestamp())
               FROM lease.history($1)",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(row_lapse, "lapsed t t");
    let ended_at: std::time::SystemTime = c
        .query_one("SELECT ended_at FROM lease.history($1)", &[&k])
        .await
        .unwrap()
        .get(0);
    // Taken over: the takeover's grant carries how the lapsed one ended, to the microsecond.
    let next = grant(&c, &k, "worker-b", "1 hour").await;
    assert_eq!(next, e + 1);
    assert_eq!(
        ends(&c, &k).await,
        [
            format!("{e} worker-a lapsed"),
            format!("{next} worker-b held")
        ]
    );
    let same: bool = c
        .query_one(
            "SELECT ended_at = $2 AND ended_at = expires_at FROM lease.history($1) WHERE epoch = $3",
            &[&k, &ended_at, &e],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        same,
        "the lapse is told the same before and after the takeover"
    );
}

#[tokio::test]
async fn a_forced_release_is_recorded_as_forced_and_the_next_grant_does_not_retell_it() {
    let s = server();
    let c = s.app().await;
    let admin = s.connect_as(SHARED_DB, ADMIN).await;
    let k = key("history_forced", "k");
    let e = grant(&c, &k, "worker-a", "1 hour").await;
    let forced: Option<i64> = admin
        .query_one("SELECT lease.force_release($1)", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(forced, Some(e));
    assert_eq!(ends(&c, &k).await, [format!("{e} worker-a forced")]);
    let next = grant(&c, &k, "worker-b", "1 hour").await;
    assert_eq!(
        ends(&c, &k).await,
        [
            format!("{e} worker-a forced"),
            format!("{next} worker-b held")
        ]
    );
}

#[tokio::test]
async fn a_transfer_hands_the_key_over_with_the_next_epoch_and_fences_the_old_one_at_once() {
    let c = server().app().await;
    let k = key("history_transfer", "k");
    let e = grant(&c, &k, "leader-a", "1 hour").await;
    let (status, to_epoch) = transfer(&c, &k, "leader-a", e, "leader-b", "30 seconds").await;
    assert_eq!(status, "ok");
    assert_eq!(to_epoch, Some(e + 1), "the successor's epoch is the next");
    // The successor holds it (its own acquire returns the grant), for the ttl the transfer gave.
    let held: String = c
        .query_one(
            "SELECT format('%s %s %s', held, owner, expires_at - clock_timestamp() <= interval '30 seconds')
               FROM lease.inspect($1)",
            &[&k],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, "t leader-b t");
    let (acquired, epoch, _) = crate::acquire(&c, &k, "leader-b", "1 minute", "0").await;
    assert_eq!((acquired, epoch), (true, to_epoch));
    // The old epoch is fenced, and its holder's renew and release say it is no longer the owner.
    let fenced = expect_error(
        &c,
        &format!("BEGIN; SELECT lease.fence('{k}', 'leader-a', {e}); COMMIT"),
    )
    .await;
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(fenced.code, "LE001");
    assert_eq!(
        crate::renew(&c, &k, "leader-a", e, "1 hour").await.0,
        "not_owner"
    );
    // The history: the old grant ended by the transfer at the moment the successor's began.
    assert_eq!(
        ends(&c, &k).await,
        [
            format!("{e} leader-a transferred"),
            format!("{} leader-b held", e + 1)
        ]
    );
    let seamless: bool = c
        .query_one(
            "SELECT (SELECT ended_at FROM lease.history($1) WHERE epoch = $2)
                  = (SELECT granted_at FROM lease.history($1) WHERE epoch = $2 + 1)",
            &[&k, &e],
        )
        .await
        .unwrap()
        .get(0);
    assert!(seamless, "no gap between the two grants");
}

#[tokio::test]
async fn a_refused_transfer_reports_renews_status_and_changes_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("history_transfer_refused", "k");
    let never = key("history_transfer_refused", "never");
    assert_eq!(
        transfer(&c, &never, "a", 1, "b", "1 minute").await,
        ("not_owner".to_owned(), None)
    );
    let e = grant(&c, &k, "a", "1 hour").await;
    let before = (state_of(&su, &k).await, recorded(&su, &k).await);
    for (owner, epoch, status) in [
        ("b", e, "not_owner"),
        ("a", e + 1, "epoch_mismatch"),
        ("a", e - 1, "epoch_mismatch"),
    ] {
        assert_eq!(
            transfer(&c, &k, owner, epoch, "c", "1 minute").await,
            (status.to_owned(), None),
            "{owner} {epoch}"
        );
        assert_eq!(
            (state_of(&su, &k).await, recorded(&su, &k).await),
            before,
            "{status} changed nothing"
        );
    }
    // A lapsed grant cannot be handed over: its key is anyone's.
    let l = key("history_transfer_refused", "lapsed");
    let le = lapse(&c, &l, "a").await;
    let before = (state_of(&su, &l).await, recorded(&su, &l).await);
    assert_eq!(
        transfer(&c, &l, "a", le, "c", "1 minute").await,
        ("lapsed".to_owned(), None)
    );
    assert_eq!((state_of(&su, &l).await, recorded(&su, &l).await), before);
}

#[tokio::test]
async fn invalid_transfer_and_history_arguments_are_22023_naming_each_and_change_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("history_invalid", "k");
    let e = grant(&c, &k, "a", "1 hour").await;
    let before = (state_of(&su, &k).await, recorded(&su, &k).await);
    let long = "x".repeat(1025);
    for (sql, named) in [
        (
            format!("SELECT lease.transfer('{k}', 'a', {e}, '', '1 minute')"),
            vec!["to_owner"],
        ),
        (
            format!("SELECT lease.transfer('{k}', 'a', {e}, NULL, '0')"),
            vec!["to_owner", "ttl"],
        ),
        (
            format!("SELECT lease.transfer('{k}', 'a', {e}, '{long}', '-1 second')"),
            vec!["to_owner", "ttl"],
        ),
        (
            format!("SELECT lease.transfer('{k}', '', NULL, 'b', '1 minute')"),
            vec!["owner", "epoch"],
        ),
        (
            format!("SELECT lease.transfer('', 'a', {e}, 'b', '366 days')"),
            vec!["key", "ttl"],
        ),
        ("SELECT * FROM lease.history('')".to_owned(), vec!["key"]),
        (
            format!("SELECT * FROM lease.history('{k}', NULL, '', 0)"),
            vec!["owner", "max_rows"],
        ),
        (
            format!("SELECT * FROM lease.history('{k}', NULL, NULL, 10001)"),
            vec!["max_rows"],
        ),
        (
            format!("SELECT * FROM lease.history('{k}', '-1 second')"),
            vec!["since"],
        ),
        (
            format!("SELECT * FROM lease.history('{k}', '3651 days', '', -1)"),
            vec!["since", "owner", "max_rows"],
        ),
        (
            "SELECT * FROM lease.history(NULL, NULL, NULL, NULL)".to_owned(),
            vec!["key", "max_rows"],
        ),
    ] {
        let err = expect_error(&c, &sql).await;
        assert_eq!(err.code, "22023", "{sql}");
        let detail = err.detail.unwrap_or_default();
        for name in named {
            assert!(
                detail.contains(name),
                "{sql}: DETAIL {detail:?} names {name}"
            );
        }
        assert_eq!(
            (state_of(&su, &k).await, recorded(&su, &k).await),
            before,
            "{sql}"
        );
    }
}

#[tokio::test]
async fn history_filters_by_owner_and_since_and_returns_the_latest_max_rows_in_epoch_order() {
    let c = server().app().await;
    let k = key("history_filters", "k");
    let mut epochs = Vec::new();
    for owner in ["a", "b", "a", "b", "a"] {
        if epochs.len() == 2 {
            // A second of the server clock between the second grant's end and the third grant,
            // for `since` below to fall between them whatever the machine's pace.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !c
                .query_one(
                    "SELECT clock_timestamp() > ended_at + interval '1 second'
                       FROM lease.history($1) WHERE epoch = $2",
                    &[&k, &epochs[1]],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
            {
                assert!(std::time::Instant::now() < deadline, "server clock stuck");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        let e = grant(&c, &k, owner, "1 hour").await;
        assert_eq!(release(&c, &k, owner, e).await, "ok");
        epochs.push(e);
    }
    let epochs_of = |sql: &'static str| {
        let c = &c;
        let k = k.clone();
        async move {
            c.query(sql, &[&k])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        epochs_of("SELECT epoch FROM lease.history($1)").await,
        epochs
    );
    assert_eq!(
        epochs_of("SELECT epoch FROM lease.history($1, max_rows => 2)").await,
        epochs[3..]
    );
    assert_eq!(
        epochs_of("SELECT epoch FROM lease.history($1, owner => 'a')").await,
        [epochs[0], epochs[2], epochs[4]]
    );
    assert_eq!(
        epochs_of("SELECT epoch FROM lease.history($1, owner => 'a', max_rows => 1)").await,
        [epochs[4]]
    );
    // since: the grants that ended at most that long ago by the server clock (here: back to half
    // a second after the second grant's end, so the third and later ones).
    let since: Vec<i64> = c
        .query(
            "SELECT epoch FROM lease.history($1, since => clock_timestamp()
                        - (SELECT ended_at + interval '500 milliseconds'
                             FROM lease.history($1) WHERE epoch = $2))",
            &[&k, &epochs[1]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(since, epochs[2..]);
    assert!(ends(&c, &key("history_filters", "never")).await.is_empty());
}

#[tokio::test]
async fn a_rolled_back_grant_leaves_no_history_and_the_data_at_grant_is_kept() {
    let c = server().app().await;
    let k = key("history_rollback", "k");
    c.batch_execute(&format!(
        "BEGIN; SELECT lease.acquire('{k}', 'a', '1 hour'); ROLLBACK"
    ))
    .await
    .unwrap();
    assert!(ends(&c, &k).await.is_empty(), "rolled back: no row");
    c.query_one(
        "SELECT lease.acquire($1, 'a', '1 hour', data => 'host-1:8080')",
        &[&k],
    )
    .await
    .unwrap();
    // Renewing with other data changes the lease's data, not what the history says it began with.
    c.query_one(
        "SELECT lease.renew($1, 'a', epoch, '1 hour', 'host-2:8080') FROM lease.inspect($1)",
        &[&k],
    )
    .await
    .unwrap();
    let data: Option<String> = c
        .query_one("SELECT data FROM lease.history($1)", &[&k])
        .await
        .unwrap()
        .get(0);
    assert_eq!(data.as_deref(), Some("host-1:8080"));
}

#[tokio::test]
async fn semaphore_slots_have_the_history_of_their_lease_keys() {
    let c = server().app().await;
    let sem = key("history_semaphore", "s");
    let (_, slot_a, key_a, epoch_a) = acquire_slot(&c, &sem, "a", "1 hour", 2).await;
    let (_, slot_b, _, epoch_b) = acquire_slot(&c, &sem, "b", "1 hour", 2).await;
    assert_eq!((slot_a, slot_b), (Some(1), Some(2)));
    let key_a = key_a.unwrap();
    assert_eq!(release(&c, &key_a, "a", epoch_a.unwrap()).await, "ok");
    let (_, slot_c, _, epoch_c) = acquire_slot(&c, &sem, "c", "1 hour", 2).await;
    assert_eq!(slot_c, Some(1));
    assert_eq!(
        ends(&c, &key_a).await,
        [
            format!("{} a released", epoch_a.unwrap()),
            format!("{} c held", epoch_c.unwrap())
        ]
    );
    assert_eq!(
        ends(&c, &format!("{sem}#2")).await,
        [format!("{} b held", epoch_b.unwrap())]
    );
}

#[tokio::test]
async fn a_queue_partition_shows_who_consumed_it_and_a_dropped_queue_ends_its_holder_as_forced() {
    let s = server();
    let db = s.fresh_db_with_queue("history_queue");
    let app = s.connect_as(&db, APP).await;
    let admin = s.connect_as(&db, ADMIN).await;
    admin
        .batch_execute(
            "SELECT lease_queue.create_queue('orders', 2);
             SELECT lease_queue.grant_queue('orders', 'app', 'consume')",
        )
        .await
        .unwrap();
    let claim = |owner: &'static str| {
        let app = &app;
        async move {
            app.query_one(
                "SELECT epoch FROM lease_queue.claim('orders', 0, $1, '1 hour')",
                &[&owner],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    let first = claim("consumer-1").await;
    app.query_one(
        "SELECT lease_queue.release('orders', 0, 'consumer-1', $1)",
        &[&first],
    )
    .await
    .unwrap();
    let second = claim("consumer-2").await;
    let partition_key: String = app
        .query_one("SELECT lease_queue.lease_key('orders', 0)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        ends(&app, &partition_key).await,
        [
            format!("{first} consumer-1 released"),
            format!("{second} consumer-2 held")
        ]
    );
    admin
        .batch_execute("SELECT lease_queue.drop_queue('orders')")
        .await
        .unwrap();
    assert_eq!(
        ends(&app, &partition_key).await,
        [
            format!("{first} consumer-1 released"),
            format!("{second} consumer-2 forced")
        ]
    );
}

/// The rows of `lease.settings`, as text.
async fn settings(su: &Client) -> Vec<String> {
    su.query("SELECT format('%s', s) FROM lease.settings AS s", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

/// A database of its own: the history's settings are database-wide.
async fn own_database(label: &str) -> (Client, Client, Client) {
    let s = server();
    let db = s.fresh_db_with_extension(label);
    (
        s.connect_as(&db, APP).await,
        s.connect_as(&db, ADMIN).await,
        s.connect_super(&db).await,
    )
}

#[tokio::test]
async fn with_the_history_off_no_grant_is_recorded_and_an_end_it_hides_is_unrecorded() {
    let (c, admin, _su) = own_database("history_off").await;
    let on: String = c
        .query_one(
            "SELECT format('%s %s', history, history_retention) FROM lease.configuration()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(on, "t 30 days", "on by default");
    let first = grant(&c, "k", "a", "1 hour").await;
    let off: bool = admin
        .query_one("SELECT history FROM lease.configure_history(false)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!off);
    // The end of a recorded grant is still told while the history is off...
    assert_eq!(release(&c, "k", "a", first).await, "ok");
    assert_eq!(ends(&c, "k").await, [format!("{first} a released")]);
    // ...until a grant nobody recorded comes after it: then it cannot be told, and says so.
    let unseen = grant(&c, "k", "b", "1 hour").await;
    assert_eq!(release(&c, "k", "b", unseen).await, "ok");
    let row: String = c
        .query_one(
            "SELECT format('%s %s', ended_by, ended_at IS NULL) FROM lease.history('k')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(row, "unrecorded t");
    grant(&c, "other", "b", "1 hour").await;
    assert!(ends(&c, "other").await.is_empty(), "not recorded while off");
    // On again (the retention kept): the next grant is recorded.
    let retention: String = admin
        .query_one(
            "SELECT format('%s %s', history, history_retention) FROM lease.configure_history(true)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(retention, "t 30 days");
    let later = grant(&c, "k", "c", "1 hour").await;
    assert_eq!(
        ends(&c, "k").await,
        [format!("{first} a unrecorded"), format!("{later} c held")]
    );
}

#[tokio::test]
async fn configure_history_is_the_installing_roles_and_refuses_a_retention_out_of_range() {
    let (c, admin, su) = own_database("history_configure").await;
    assert_eq!(
        expect_error(&c, "SELECT lease.configure_history(false)")
            .await
            .code,
        "42501"
    );
    assert!(
        settings(&su).await.is_empty(),
        "nothing configured, no settings row"
    );
    for bad in ["0", "-1 day", "3651 days", "999 milliseconds"] {
        let e = expect_error(
            &admin,
            &format!("SELECT lease.configure_history(retention => '{bad}')"),
        )
        .await;
        assert_eq!(e.code, "22023", "{bad}");
        assert!(
            e.detail.unwrap_or_default().contains("retention"),
            "{bad}: DETAIL names retention"
        );
        assert!(settings(&su).await.is_empty(), "{bad} changed nothing");
    }
    // Nothing to change — no argument, or "on" when it is on by default — writes no settings row
    // (acquire's short path needs none).
    admin
        .batch_execute(
            "SELECT lease.configure_history(); SELECT lease.configure_history(enabled => true)",
        )
        .await
        .unwrap();
    assert!(settings(&su).await.is_empty());
    let retention: String = admin
        .query_one(
            "SELECT history_retention::text FROM lease.configure_history(retention => '7 days')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(retention, "7 days");
    // The table itself is nobody's to read but through lease.history.
    assert_eq!(
        expect_error(&c, "SELECT * FROM lease.grant_history")
            .await
            .code,
        "42501"
    );
}

#[tokio::test]
async fn purge_keeps_a_purged_keys_last_end_and_removes_history_older_than_the_retention() {
    let (c, admin, su) = own_database("history_purge").await;
    let old = grant(&c, "old", "a", "1 hour").await;
    assert_eq!(release(&c, "old", "a", old).await, "ok");
    let lapsed = lapse(&c, "lapsed", "a").await;
    let kept = grant(&c, "kept", "a", "1 hour").await;
    // Idle keys go (older_than '0'); the end of their last grant stays in the history.
    let purged: i64 = admin
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(purged, 2, "old and lapsed");
    assert_eq!(ends(&c, "old").await, [format!("{old} a released")]);
    assert_eq!(ends(&c, "lapsed").await, [format!("{lapsed} a lapsed")]);
    // A key created again starts above the purged epochs, and its history continues.
    let again = grant(&c, "old", "b", "1 hour").await;
    assert!(again > old);
    assert_eq!(
        ends(&c, "old").await,
        [format!("{old} a released"), format!("{again} b held")]
    );
    // Retention of one second: once the server clock is a second past those ends, purge removes
    // the ended grants' rows and keeps the current grants'.
    admin
        .batch_execute("SELECT lease.configure_history(retention => '1 second')")
        .await
        .unwrap();
    let last_end: std::time::SystemTime = su
        .query_one(
            "SELECT max(ended_at) FROM lease.grant_history WHERE ended_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !c
        .query_one(
            "SELECT clock_timestamp() > $1::timestamptz + interval '1 second'",
            &[&last_end],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(std::time::Instant::now() < deadline, "server clock stuck");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    admin
        .query_one("SELECT lease.purge('1 hour')", &[])
        .await
        .unwrap();
    assert!(ends(&c, "lapsed").await.is_empty());
    assert_eq!(ends(&c, "old").await, [format!("{again} b held")]);
    assert_eq!(ends(&c, "kept").await, [format!("{kept} a held")]);
}
