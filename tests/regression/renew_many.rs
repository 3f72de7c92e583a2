//! lease.renew_many (0.6.0): one statement renews many grants of one owner, with renew's status per
//! pair, and never waits for a row lock (`busy`).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use pglease_tests::{SHARED_DB, expect_error, key, server};
use tokio_postgres::Client;

use crate::data::{acquire_with, full_state, inspected_data};
use crate::invalid_input::rejects;
use crate::{grant, inspect, lapse, release, renew};

/// `lease.renew_many(owner, keys, epochs, ttl)`: per key, (status, expires_at), in the order of
/// `keys` (the function returns its rows in no particular order); asserts one row per pair.
pub(crate) async fn renew_many(
    c: &Client,
    owner: &str,
    keys: &[String],
    epochs: &[i64],
    ttl: &str,
) -> Vec<(String, Option<SystemTime>)> {
    let rows = c
        .query(
            "SELECT key, status, expires_at FROM lease.renew_many($1, $2, $3, $4::text::interval)",
            &[&owner, &keys, &epochs, &ttl],
        )
        .await
        .unwrap_or_else(|e| panic!("renew_many({owner}, {keys:?}, {epochs:?}): {e}"));
    assert_eq!(rows.len(), keys.len(), "one row per pair");
    let mut by_key: HashMap<String, (String, Option<SystemTime>)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    keys.iter()
        .map(|k| by_key.remove(k).unwrap_or_else(|| panic!("no row for {k}")))
        .collect()
}

/// The statuses only.
async fn statuses(c: &Client, owner: &str, keys: &[String], epochs: &[i64]) -> Vec<String> {
    renew_many(c, owner, keys, epochs, "1 hour")
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

/// The states a key can be in for the owner `me`, built on `k`; returns the epoch `me` presents.
async fn prepare(c: &Client, k: &str, state: &str) -> i64 {
    match state {
        "unknown" => 1,
        "held" => grant(c, k, "me", "1 hour").await,
        "held_other_epoch" => grant(c, k, "me", "1 hour").await + 5,
        "held_by_other" => grant(c, k, "other", "1 hour").await,
        "lapsed" => lapse(c, k, "me").await,
        "lapsed_other" => lapse(c, k, "other").await,
        "taken_over" => {
            let e = lapse(c, k, "me").await;
            grant(c, k, "other", "1 hour").await;
            e
        }
        "reacquired_old_epoch" => {
            let e = lapse(c, k, "me").await;
            grant(c, k, "me", "1 hour").await;
            e
        }
        "released" => {
            let e = grant(c, k, "me", "1 hour").await;
            release(c, k, "me", e).await;
            e
        }
        "zero_epoch" => {
            grant(c, k, "me", "1 hour").await;
            0
        }
        other => panic!("unknown state {other}"),
    }
}

const STATES: &[&str] = &[
    "unknown",
    "held",
    "held_other_epoch",
    "held_by_other",
    "lapsed",
    "lapsed_other",
    "taken_over",
    "reacquired_old_epoch",
    "released",
    "zero_epoch",
];

#[tokio::test]
async fn renew_many_reports_each_pairs_status_in_renews_precedence() {
    let c = server().app().await;
    let mut keys = Vec::new();
    let mut epochs = Vec::new();
    for state in STATES {
        let k = key("renew_many_mixed", state);
        epochs.push(prepare(&c, &k, state).await);
        keys.push(k);
    }
    assert_eq!(
        statuses(&c, "me", &keys, &epochs).await,
        [
            "not_owner",
            "ok",
            "epoch_mismatch",
            "not_owner",
            "lapsed",
            "not_owner",
            "not_owner",
            "epoch_mismatch",
            "not_owner",
            "epoch_mismatch"
        ]
    );
}

/// Two keys per state, prepared alike: renew_many on one of each pair and renew on the other give
/// the same status, and leave both in the same state (held, owner, epoch).
#[tokio::test]
async fn renew_many_gives_each_key_the_outcome_of_renew() {
    let c = server().app().await;
    let (mut batch, mut single, mut epochs) = (Vec::new(), Vec::new(), Vec::new());
    for state in STATES {
        let a = key("renew_many_equal", &format!("{state}/batch"));
        let b = key("renew_many_equal", &format!("{state}/single"));
        let ea = prepare(&c, &a, state).await;
        let eb = prepare(&c, &b, state).await;
        assert_eq!(ea, eb, "{state}: prepared alike");
        batch.push(a);
        single.push(b);
        epochs.push(ea);
    }
    let t0: SystemTime = c
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    let got = renew_many(&c, "me", &batch, &epochs, "10 minutes").await;
    let t1: SystemTime = c
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    for (i, state) in STATES.iter().enumerate() {
        let (status, expires_at) = renew(&c, &single[i], "me", epochs[i], "10 minutes").await;
        assert_eq!(got[i].0, status, "{state}");
        assert_eq!(got[i].1.is_some(), expires_at.is_some(), "{state}");
        if let Some(x) = got[i].1 {
            let ttl = Duration::from_secs(600);
            assert!(x >= t0 + ttl && x <= t1 + ttl, "{state}: now + ttl");
            assert_eq!(inspect(&c, &batch[i]).await.unwrap().3, Some(x));
        }
        let strip = |i: Option<crate::Inspected>| i.map(|(held, o, e, _)| (held, o, e));
        assert_eq!(
            strip(inspect(&c, &batch[i]).await),
            strip(inspect(&c, &single[i]).await),
            "{state}: the same state after either"
        );
    }
}

#[tokio::test]
async fn renew_many_keeps_the_epochs_and_the_data() {
    let c = server().app().await;
    let a = key("renew_many_keeps", "a");
    let b = key("renew_many_keeps", "b");
    acquire_with(&c, &a, "me", "1 minute", Some("data of a")).await;
    grant(&c, &b, "me", "1 minute").await;
    let got = renew_many(&c, "me", &[a.clone(), b.clone()], &[1, 1], "2 hours").await;
    assert!(got.iter().all(|(s, _)| s == "ok"));
    for (k, data) in [(&a, Some("data of a".to_owned())), (&b, None)] {
        let (held, owner, epoch, x) = inspect(&c, k).await.unwrap();
        assert_eq!((held, owner.as_deref(), epoch), (true, Some("me"), 1));
        let left: bool = c
            .query_one(
                "SELECT $1 > clock_timestamp() + interval '119 minutes'",
                &[&x],
            )
            .await
            .unwrap()
            .get(0);
        assert!(left, "{k}: renewed to now + 2 hours");
        assert_eq!(inspected_data(&c, k).await, Some(data));
    }
}

#[tokio::test]
async fn renew_many_never_renews_a_lapsed_grant() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let p = key("renew_many_lapsed", "");
    let held = format!("{p}held");
    let lapsed = format!("{p}lapsed");
    grant(&c, &held, "me", "1 hour").await;
    lapse(&c, &lapsed, "me").await;
    let before: SystemTime = su
        .query_one(
            "SELECT expires_at FROM lease.leases WHERE key = $1",
            &[&lapsed],
        )
        .await
        .unwrap()
        .get(0);
    let got = renew_many(&c, "me", &[lapsed.clone(), held.clone()], &[1, 1], "1 hour").await;
    assert_eq!(got[0], ("lapsed".to_owned(), None));
    assert_eq!(got[1].0, "ok");
    let after: SystemTime = su
        .query_one(
            "SELECT expires_at FROM lease.leases WHERE key = $1",
            &[&lapsed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, before, "the lapsed grant's expiry is untouched");
    assert!(!inspect(&c, &lapsed).await.unwrap().0);
    // The next grant of the lapsed key is a new grant, at the next epoch.
    assert_eq!(grant(&c, &lapsed, "other", "1 hour").await, 2);
}

#[tokio::test]
async fn renew_many_with_empty_arrays_returns_no_rows_and_changes_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let p = key("renew_many_empty", "");
    grant(&c, &format!("{p}k"), "me", "1 hour").await;
    let before = full_state(&su, &p).await;
    let rows = c
        .query(
            "SELECT * FROM lease.renew_many('me', '{}'::text[], '{}'::bigint[], '1 hour')",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.is_empty());
    assert_eq!(full_state(&su, &p).await, before);
}

/// The key `k` fenced by `owner` at `epoch` in an open transaction of `fencer`.
async fn fence_in_open_transaction(fencer: &Client, k: &str, owner: &str, epoch: i64) {
    fencer
        .batch_execute(&format!(
            "BEGIN; SELECT lease.fence('{k}', '{owner}', {epoch});"
        ))
        .await
        .unwrap();
}

/// Whether the backend `pid` is idle in an open transaction, as the superuser sees it.
async fn in_open_transaction(su: &Client, pid: i32) -> bool {
    su.query_one(
        "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'",
        &[&pid],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn renew_many_reports_busy_for_a_key_fenced_in_another_open_transaction_and_renews_the_others_without_waiting()
 {
    let s = server();
    let (c, fencer) = (s.app().await, s.app().await);
    let su = s.connect_super(SHARED_DB).await;
    let keys: Vec<String> = ["a", "fenced", "b", "lapsed", "others"]
        .iter()
        .map(|n| key("renew_many_busy", n))
        .collect();
    grant(&c, &keys[0], "me", "1 hour").await;
    grant(&c, &keys[1], "me", "1 hour").await;
    grant(&c, &keys[2], "me", "1 hour").await;
    lapse(&c, &keys[3], "me").await;
    grant(&c, &keys[4], "other", "1 hour").await;
    let before_fenced = inspect(&c, &keys[1]).await.unwrap();
    fence_in_open_transaction(&fencer, &keys[1], "me", 1).await;
    let fencer_pid = pglease_tests::backend_pid(&fencer).await;

    let started = Instant::now();
    let got = renew_many(&c, "me", &keys, &[1, 1, 1, 1, 1], "2 hours").await;
    let took = started.elapsed();
    let statuses: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(statuses, ["ok", "busy", "ok", "lapsed", "not_owner"]);
    assert_eq!(got[1].1, None, "busy: not judged, no expiry");
    // It did not wait for the fencing transaction: that is still open now.
    assert!(
        in_open_transaction(&su, fencer_pid).await,
        "the fencing transaction is still open after renew_many returned (in {took:?})"
    );
    assert_eq!(
        inspect(&c, &keys[1]).await.unwrap(),
        before_fenced,
        "the busy key was not renewed"
    );
    for i in [0, 2] {
        assert_eq!(inspect(&c, &keys[i]).await.unwrap().3, got[i].1);
    }
    fencer.batch_execute("COMMIT").await.unwrap();
    // Once the guarded transaction ended, the key renews (in a batch or alone).
    assert_eq!(
        statuses_of(&c, &keys[1..2]).await,
        ["ok"],
        "renewed after the fence's commit"
    );
}

async fn statuses_of(c: &Client, keys: &[String]) -> Vec<String> {
    statuses(c, "me", keys, &vec![1; keys.len()]).await
}

/// A key whose row another transaction has locked for an update that is still uncommitted (not a
/// fence) is busy too; a rolled back transaction leaves the key to renew.
#[tokio::test]
async fn renew_many_reports_busy_for_a_key_with_an_uncommitted_transition() {
    let s = server();
    let (c, other) = (s.app().await, s.app().await);
    let su = s.connect_super(SHARED_DB).await;
    let a = key("renew_many_uncommitted", "a");
    let b = key("renew_many_uncommitted", "b");
    grant(&c, &a, "me", "1 hour").await;
    grant(&c, &b, "me", "1 hour").await;
    other
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM lease.renew('{a}', 'me', 1, '5 minutes');"
        ))
        .await
        .unwrap();
    let pid = pglease_tests::backend_pid(&other).await;
    assert_eq!(
        statuses_of(&c, &[a.clone(), b.clone()]).await,
        ["busy", "ok"]
    );
    assert!(in_open_transaction(&su, pid).await);
    other.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(statuses_of(&c, &[a.clone(), b.clone()]).await, ["ok", "ok"]);
}

#[tokio::test]
async fn renew_many_rejects_invalid_input_naming_every_violation_and_renews_nothing() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let p = key("renew_many_bad", "");
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    grant(&c, &a, "me", "1 minute").await;
    grant(&c, &b, "me", "1 minute").await;
    let arr = |ks: &[&str]| {
        format!(
            "ARRAY[{}]::text[]",
            ks.iter()
                .map(|k| if *k == "NULL" {
                    "NULL".to_owned()
                } else {
                    format!("'{k}'")
                })
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let long = "x".repeat(1025);
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            format!("'me', {}, ARRAY[1, 1], '1 hour'", arr(&[&a, &a])),
            vec![format!("keys must be distinct ('{a}' appears more than once)")],
        ),
        (
            format!("'me', {}, ARRAY[1, 1, 1], '1 hour'", arr(&[&a, &b, &a])),
            vec![format!("keys must be distinct ('{a}' appears more than once)")],
        ),
        (
            format!("'me', {}, ARRAY[1], '1 hour'", arr(&[&a, &b])),
            vec!["keys and epochs must have the same length (got 2 and 1)".to_owned()],
        ),
        (
            "'me', NULL, NULL, '1 hour'".to_owned(),
            vec![
                "keys must not be NULL".to_owned(),
                "epochs must not be NULL".to_owned(),
            ],
        ),
        (
            format!("'me', {}, ARRAY[1, NULL], '1 hour'", arr(&[&a, &b])),
            vec!["epochs[2] must not be NULL".to_owned()],
        ),
        (
            format!("'me', {}, ARRAY[1, 1, 1], '1 hour'", arr(&[&a, "NULL", ""])),
            vec!["keys[2] must not be NULL".to_owned()],
        ),
        (
            format!("'me', {}, ARRAY[1, 1], '1 hour'", arr(&[&a, &long])),
            vec!["keys[2] must be at most 1024 bytes (got 1025)".to_owned()],
        ),
        (
            format!("'me', ARRAY[['{a}'], ['{b}']], ARRAY[[1], [1]], '1 hour'"),
            vec!["keys and epochs must be one-dimensional arrays".to_owned()],
        ),
        (
            format!("NULL, {}, ARRAY[1], '1 hour'", arr(&[&a])),
            vec!["owner must not be NULL".to_owned()],
        ),
        (
            format!("'', {}, ARRAY[1], '0'", arr(&[&a])),
            vec![
                "owner must not be empty".to_owned(),
                "ttl must be positive".to_owned(),
            ],
        ),
        (
            format!("'me', {}, ARRAY[1], NULL", arr(&[&a])),
            vec!["ttl must not be NULL".to_owned()],
        ),
        (
            format!("'me', {}, ARRAY[1], '366 days'", arr(&[&a])),
            vec!["ttl must be at most 365 days".to_owned()],
        ),
        (
            format!(
                "'', {}, ARRAY[1, NULL, 1], '-1 s'",
                arr(&[&a, "", &a])
            ),
            vec![
                "owner must not be empty".to_owned(),
                "ttl must be positive".to_owned(),
                "keys[2] must not be empty".to_owned(),
                "epochs[2] must not be NULL".to_owned(),
                format!("keys must be distinct ('{a}' appears more than once)"),
            ],
        ),
        (
            "'me', array_fill('k'::text, ARRAY[100001]), array_fill(1::bigint, ARRAY[100001]), '1 hour'"
                .to_owned(),
            vec![
                "at most 100000 keys (got 100001)".to_owned(),
                "keys must be distinct ('k' appears more than once)".to_owned(),
            ],
        ),
    ];
    for (args, violations) in &cases {
        let before = full_state(&su, &p).await;
        let v: Vec<&str> = violations.iter().map(String::as_str).collect();
        rejects(&format!("SELECT * FROM lease.renew_many({args})"), &v, &p).await;
        assert_eq!(full_state(&su, &p).await, before, "renew_many({args})");
    }
    // 100000 distinct pairs are accepted.
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM lease.renew_many('me',
                 ARRAY(SELECT 'renew_many_bad/many/' || i FROM generate_series(1, 100000) i),
                 array_fill(1::bigint, ARRAY[100000]), '1 hour')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 100_000);
    let e = expect_error(
        &c,
        &format!(
            "SELECT * FROM lease.renew_many('me', ARRAY['{a}', '{a}'], ARRAY[1, 2], '1 hour')"
        ),
    )
    .await;
    assert_eq!(e.code, "22023", "duplicates with different epochs too");
}

/// The fast path (every pair renewed in one statement) and the careful one (some pair refused) agree
/// for a key given twice: 22023, and the renewal of the other keys is undone.
#[tokio::test]
async fn a_duplicate_key_undoes_the_renewal_of_every_other_key() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let p = key("renew_many_dup", "");
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    grant(&c, &a, "me", "1 minute").await;
    grant(&c, &b, "me", "1 minute").await;
    let before = full_state(&su, &p).await;
    for epochs in ["ARRAY[1, 1, 1]", "ARRAY[1, 1, 9]", "ARRAY[9, 1, 1]"] {
        let e = expect_error(
            &c,
            &format!(
                "SELECT * FROM lease.renew_many('me', ARRAY['{a}', '{b}', '{a}'], {epochs}, '1 hour')"
            ),
        )
        .await;
        assert_eq!(e.code, "22023", "{epochs}");
        assert_eq!(full_state(&su, &p).await, before, "{epochs}");
    }
}
