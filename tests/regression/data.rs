//! Lease data (0.6.0): a value of at most 8192 bytes of text that the holder attaches at acquire and
//! may replace on renew; readable through inspect and list only while the grant is held; cleared by
//! release; never part of the lease's logic.

use pglease_tests::{SHARED_DB, expect_error, key, server};
use tokio_postgres::Client;

use crate::invalid_input::rejects;
use crate::{await_lapsed, grant, inspect, release, renew};

/// `lease.acquire(key, owner, ttl, '0', data)`: (acquired, epoch).
pub(crate) async fn acquire_with(
    c: &Client,
    k: &str,
    owner: &str,
    ttl: &str,
    data: Option<&str>,
) -> (bool, Option<i64>) {
    let r = c
        .query_one(
            "SELECT acquired, epoch FROM lease.acquire($1, $2, $3::text::interval, '0', $4)",
            &[&k, &owner, &ttl, &data],
        )
        .await
        .unwrap_or_else(|e| panic!("acquire({k}, {owner}, data {data:?}): {e}"));
    (r.get(0), r.get(1))
}

/// `lease.renew(key, owner, epoch, ttl, data)`: the status.
pub(crate) async fn renew_with(
    c: &Client,
    k: &str,
    owner: &str,
    epoch: i64,
    data: Option<&str>,
) -> String {
    c.query_one(
        "SELECT status FROM lease.renew($1, $2, $3, '1 hour', $4)",
        &[&k, &owner, &epoch, &data],
    )
    .await
    .unwrap_or_else(|e| panic!("renew({k}, {owner}, {epoch}, data {data:?}): {e}"))
    .get(0)
}

/// The data `inspect` reports for `k` (None: no row, Some(None): a row without data).
pub(crate) async fn inspected_data(c: &Client, k: &str) -> Option<Option<String>> {
    c.query_opt("SELECT data FROM lease.inspect($1)", &[&k])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// The data `list` reports for `k`.
async fn listed_data(c: &Client, k: &str) -> Option<Option<String>> {
    c.query_opt("SELECT data FROM lease.list($1) WHERE key = $1", &[&k])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// The data stored in `k`'s row, as the superuser reads the table.
async fn stored_data(su: &Client, k: &str) -> Option<String> {
    su.query_one("SELECT data FROM lease.leases WHERE key = $1", &[&k])
        .await
        .unwrap()
        .get(0)
}

/// Every column of the rows of keys starting with `prefix`, data and marks included.
pub(crate) async fn full_state(su: &Client, prefix: &str) -> Vec<String> {
    su.query(
        "SELECT format('%s', l) FROM lease.leases l WHERE starts_with(key, $1)
         UNION ALL SELECT format('floor %s', f) FROM lease.epoch_floor f ORDER BY 1",
        &[&prefix],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn data_is_visible_to_inspect_and_list_only_while_the_grant_is_held() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("data_visible", "k");
    let d = Some("addr=10.0.0.7:5432".to_owned());
    assert_eq!(
        acquire_with(&c, &k, "holder", "300 milliseconds", d.as_deref()).await,
        (true, Some(1))
    );
    assert_eq!(inspected_data(&c, &k).await, Some(d.clone()));
    assert_eq!(listed_data(&c, &k).await, Some(d.clone()));
    await_lapsed(&c, &k).await;
    // Lapsed: nobody holds the key, so nobody's data is shown (the row still has it).
    assert_eq!(inspected_data(&c, &k).await, Some(None));
    assert_eq!(listed_data(&c, &k).await, Some(None));
    assert_eq!(stored_data(&su, &k).await, d);
    // A takeover without data: the lapsed holder's data is gone, not inherited.
    assert_eq!(
        acquire_with(&c, &k, "heir", "1 hour", None).await,
        (true, Some(2))
    );
    assert_eq!(inspected_data(&c, &k).await, Some(None));
    assert_eq!(stored_data(&su, &k).await, None);
}

#[tokio::test]
async fn release_clears_the_data_and_the_next_grant_starts_without_any() {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let k = key("data_release", "k");
    acquire_with(&c, &k, "holder", "1 hour", Some("v1")).await;
    assert_eq!(release(&c, &k, "holder", 1).await, "ok");
    assert_eq!(stored_data(&su, &k).await, None, "cleared in the row");
    assert_eq!(inspected_data(&c, &k).await, Some(None));
    assert_eq!(grant(&c, &k, "next", "1 hour").await, 3);
    assert_eq!(inspected_data(&c, &k).await, Some(None));
    // A refused release (another owner, a stale epoch) clears nothing.
    assert_eq!(renew_with(&c, &k, "next", 3, Some("v3")).await, "ok");
    assert_eq!(release(&c, &k, "holder", 1).await, "not_owner");
    assert_eq!(release(&c, &k, "next", 1).await, "epoch_mismatch");
    assert_eq!(inspected_data(&c, &k).await, Some(Some("v3".into())));
}

#[tokio::test]
async fn a_takeover_with_data_replaces_the_data_of_the_lapsed_grant() {
    let c = server().app().await;
    let k = key("data_takeover", "k");
    acquire_with(&c, &k, "old", "50 milliseconds", Some("old data")).await;
    await_lapsed(&c, &k).await;
    assert_eq!(
        acquire_with(&c, &k, "new", "1 hour", Some("new data")).await,
        (true, Some(2))
    );
    assert_eq!(inspected_data(&c, &k).await, Some(Some("new data".into())));
    // The lapsed owner re-acquiring its own lapsed lease is a new grant too.
    let k2 = key("data_takeover", "own");
    acquire_with(&c, &k2, "me", "50 milliseconds", Some("first")).await;
    await_lapsed(&c, &k2).await;
    assert_eq!(
        acquire_with(&c, &k2, "me", "1 hour", None).await,
        (true, Some(2))
    );
    assert_eq!(inspected_data(&c, &k2).await, Some(None));
}

#[tokio::test]
async fn renew_without_data_keeps_it_and_renew_with_data_replaces_it() {
    let c = server().app().await;
    let k = key("data_renew", "k");
    acquire_with(&c, &k, "holder", "1 hour", Some("v1")).await;
    assert_eq!(renew_with(&c, &k, "holder", 1, None).await, "ok");
    assert_eq!(inspected_data(&c, &k).await, Some(Some("v1".into())));
    assert_eq!(renew(&c, &k, "holder", 1, "1 hour").await.0, "ok");
    assert_eq!(
        inspected_data(&c, &k).await,
        Some(Some("v1".into())),
        "the 4-argument renew keeps it too"
    );
    assert_eq!(renew_with(&c, &k, "holder", 1, Some("v2")).await, "ok");
    assert_eq!(inspected_data(&c, &k).await, Some(Some("v2".into())));
    assert_eq!(
        renew_with(&c, &k, "holder", 1, Some("")).await,
        "ok",
        "empty text is data, not the absence of data"
    );
    assert_eq!(inspected_data(&c, &k).await, Some(Some(String::new())));
    // Refused renewals write no data.
    for (owner, epoch, status) in [("other", 1, "not_owner"), ("holder", 7, "epoch_mismatch")] {
        assert_eq!(
            renew_with(&c, &k, owner, epoch, Some("intruder")).await,
            status
        );
    }
    assert_eq!(inspected_data(&c, &k).await, Some(Some(String::new())));
    let lapsing = key("data_renew", "lapsing");
    acquire_with(&c, &lapsing, "holder", "50 milliseconds", Some("v1")).await;
    await_lapsed(&c, &lapsing).await;
    assert_eq!(
        renew_with(&c, &lapsing, "holder", 1, Some("late")).await,
        "lapsed"
    );
    let su = server().connect_super(SHARED_DB).await;
    assert_eq!(stored_data(&su, &lapsing).await.as_deref(), Some("v1"));
}

#[tokio::test]
async fn an_idempotent_acquire_with_data_replaces_only_the_data() {
    let c = server().app().await;
    let k = key("data_idempotent", "k");
    acquire_with(&c, &k, "holder", "1 hour", Some("v1")).await;
    let before = inspect(&c, &k).await.unwrap();
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 minute", Some("v2")).await,
        (true, Some(1))
    );
    assert_eq!(
        inspect(&c, &k).await.unwrap(),
        before,
        "epoch and expiry unchanged"
    );
    assert_eq!(inspected_data(&c, &k).await, Some(Some("v2".into())));
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 minute", None).await,
        (true, Some(1))
    );
    assert_eq!(
        inspected_data(&c, &k).await,
        Some(Some("v2".into())),
        "an idempotent acquire without data keeps it"
    );
    // Another owner's refused acquire leaves the holder's data alone.
    assert_eq!(
        acquire_with(&c, &k, "rival", "1 hour", Some("rival's")).await,
        (false, None)
    );
    assert_eq!(inspected_data(&c, &k).await, Some(Some("v2".into())));
}

/// The same sequence of calls on two keys, one with data on every call and one without, gives the
/// same results and the same lease state (owner, epoch, held) at every step.
#[tokio::test]
async fn data_never_changes_a_leases_state() {
    let c = server().app().await;
    let with = key("data_neutral", "with");
    let without = key("data_neutral", "without");
    type Step = (&'static str, &'static str, i64);
    let steps: &[Step] = &[
        ("acquire", "a", 0),
        ("acquire", "b", 0),
        ("renew", "a", 1),
        ("renew", "a", 2),
        ("renew", "b", 1),
        ("acquire", "a", 0),
        ("release", "a", 1),
        ("acquire", "b", 0),
        ("renew", "b", 3),
        ("release", "a", 3),
        ("acquire", "a", 0),
    ];
    for (i, (op, owner, epoch)) in steps.iter().enumerate() {
        let mut results = Vec::new();
        for (k, data) in [(&with, Some(format!("d{i}"))), (&without, None)] {
            let r = match *op {
                "acquire" => format!(
                    "{:?}",
                    acquire_with(&c, k, owner, "1 hour", data.as_deref()).await
                ),
                "renew" => renew_with(&c, k, owner, *epoch, data.as_deref()).await,
                _ => release(&c, k, owner, *epoch).await,
            };
            let state = inspect(&c, k).await.map(|(held, o, e, _)| (held, o, e));
            results.push((r, state));
        }
        assert_eq!(
            results[0], results[1],
            "step {i}: {op} by {owner} at {epoch}"
        );
    }
}

#[tokio::test]
async fn data_is_limited_to_8192_bytes_not_characters() {
    let p = key("data_limit", "");
    let k = format!("{p}k");
    let c = server().app().await;
    let at_limit = "\u{e9}".repeat(4096);
    assert_eq!(at_limit.len(), 8192);
    assert_eq!(
        acquire_with(&c, &k, "holder", "1 hour", Some(&at_limit)).await,
        (true, Some(1))
    );
    assert_eq!(inspected_data(&c, &k).await, Some(Some(at_limit.clone())));
    let over = format!("{at_limit}x");
    let huge = "x".repeat(1_000_000);
    for (sql, violations) in [
        (
            format!("SELECT * FROM lease.acquire('{k}', 'holder', '1 hour', '0', '{over}')"),
            vec!["data must be at most 8192 bytes (got 8193)".to_owned()],
        ),
        (
            format!("SELECT * FROM lease.acquire('{k}', 'other', '1 hour', '1 second', '{over}')"),
            vec!["data must be at most 8192 bytes (got 8193)".to_owned()],
        ),
        (
            format!("SELECT * FROM lease.renew('{k}', 'holder', 1, '1 hour', '{huge}')"),
            vec!["data must be at most 8192 bytes (got 1000000)".to_owned()],
        ),
        (
            format!("SELECT * FROM lease.acquire('', NULL, '0', '-1 s', '{over}')"),
            vec![
                "key must not be empty".to_owned(),
                "owner must not be NULL".to_owned(),
                "ttl must be positive".to_owned(),
                "wait must not be negative".to_owned(),
                "data must be at most 8192 bytes (got 8193)".to_owned(),
            ],
        ),
        (
            format!("SELECT * FROM lease.renew(NULL, '', NULL, NULL, '{over}')"),
            vec![
                "key must not be NULL".to_owned(),
                "owner must not be empty".to_owned(),
                "epoch must not be NULL".to_owned(),
                "ttl must not be NULL".to_owned(),
                "data must be at most 8192 bytes (got 8193)".to_owned(),
            ],
        ),
    ] {
        let v: Vec<&str> = violations.iter().map(String::as_str).collect();
        rejects(&sql, &v, &p).await;
    }
    // Nothing changed: the data at the limit is still there.
    assert_eq!(inspected_data(&c, &k).await, Some(Some(at_limit)));
    let su = server().connect_super(SHARED_DB).await;
    let before = full_state(&su, &p).await;
    let e = expect_error(
        &c,
        &format!("SELECT * FROM lease.renew('{k}', 'holder', 1, '1 hour', '{over}')"),
    )
    .await;
    assert_eq!(e.code, "22023");
    assert_eq!(
        full_state(&su, &p).await,
        before,
        "the expiry was not renewed"
    );
}
