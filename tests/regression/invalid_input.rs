//! Invalid input: SQLSTATE 22023, a DETAIL naming every violated constraint, and no change.

use pglease_tests::{SHARED_DB, expect_error, key, server, state_of};

use crate::grant;

/// Calls `sql` (which must be rejected) and checks 22023 with exactly the `violations` in DETAIL,
/// and that the test's keys and the epoch floor are unchanged.
pub(crate) async fn rejects(sql: &str, violations: &[&str], prefix: &str) {
    let s = server();
    let c = s.app().await;
    let su = s.connect_super(SHARED_DB).await;
    let before = state_of(&su, prefix).await;
    let e = expect_error(&c, sql).await;
    assert_eq!(e.code, "22023", "{sql}: {e:?}");
    let detail = e
        .detail
        .unwrap_or_else(|| panic!("{sql}: 22023 without DETAIL"));
    let named: Vec<&str> = detail.trim_end_matches('.').split("; ").collect();
    assert_eq!(named, violations, "{sql}");
    assert_eq!(state_of(&su, prefix).await, before, "{sql} changed state");
}

#[tokio::test]
async fn acquire_rejects_each_invalid_argument_naming_all_of_them() {
    let p = key("bad_acquire", "");
    let k = format!("{p}k");
    let c = server().app().await;
    grant(&c, &k, "holder", "1 hour").await;
    let cases: &[(&str, &[&str])] = &[
        ("NULL, 'w', '1s'", &["key must not be NULL"]),
        ("'', 'w', '1s'", &["key must not be empty"]),
        ("$K, NULL, '1s'", &["owner must not be NULL"]),
        ("$K, '', '1s'", &["owner must not be empty"]),
        ("$K, 'w', NULL", &["ttl must not be NULL"]),
        ("$K, 'w', '0'", &["ttl must be positive"]),
        ("$K, 'w', '-1 second'", &["ttl must be positive"]),
        ("$K, 'w', '1 month -30 days'", &["ttl must be positive"]),
        ("$K, 'w', '366 days'", &["ttl must be at most 365 days"]),
        ("$K, 'w', '1s', NULL", &["wait must not be NULL"]),
        ("$K, 'w', '1s', '-1 ms'", &["wait must not be negative"]),
        (
            "$K, 'w', '1s', '400 days'",
            &["wait must be at most 365 days"],
        ),
        (
            "NULL, '', '-5s', NULL",
            &[
                "key must not be NULL",
                "owner must not be empty",
                "ttl must be positive",
                "wait must not be NULL",
            ],
        ),
    ];
    for (args, violations) in cases {
        let sql = format!(
            "SELECT * FROM lease.acquire({})",
            args.replace("$K", &format!("'{k}'"))
        );
        rejects(&sql, violations, &p).await;
    }
}

#[tokio::test]
async fn renew_and_release_reject_a_null_epoch_and_bad_keys() {
    let p = key("bad_renew", "");
    let k = format!("{p}k");
    let c = server().app().await;
    grant(&c, &k, "holder", "1 hour").await;
    rejects(
        &format!("SELECT * FROM lease.renew('{k}', 'holder', NULL, '1s')"),
        &["epoch must not be NULL"],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.release('{k}', 'holder', NULL)"),
        &["epoch must not be NULL"],
        &p,
    )
    .await;
    rejects(
        "SELECT * FROM lease.renew(NULL, NULL, NULL, NULL)",
        &[
            "key must not be NULL",
            "owner must not be NULL",
            "epoch must not be NULL",
            "ttl must not be NULL",
        ],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.renew('{k}', 'holder', 1, '0')"),
        &["ttl must be positive"],
        &p,
    )
    .await;
    rejects(
        "SELECT * FROM lease.release('', '', NULL)",
        &[
            "key must not be empty",
            "owner must not be empty",
            "epoch must not be NULL",
        ],
        &p,
    )
    .await;
}

#[tokio::test]
async fn inspect_list_and_purge_reject_invalid_input() {
    let p = key("bad_other", "");
    rejects(
        "SELECT * FROM lease.inspect(NULL)",
        &["key must not be NULL"],
        &p,
    )
    .await;
    rejects(
        "SELECT * FROM lease.inspect('')",
        &["key must not be empty"],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.list('{}')", "x".repeat(1025)),
        &["prefix must be at most 1024 bytes (got 1025)"],
        &p,
    )
    .await;
    // purge is granted to the extension owner only; the superuser checks its input here.
    let s = server();
    let su = s.connect_super(SHARED_DB).await;
    for (arg, violation) in [
        ("NULL", "older_than must not be NULL"),
        ("'-1 second'", "older_than must not be negative"),
        ("'366 days'", "older_than must be at most 365 days"),
    ] {
        let e = expect_error(&su, &format!("SELECT lease.purge({arg})")).await;
        assert_eq!(e.code, "22023");
        assert_eq!(e.detail.as_deref(), Some(format!("{violation}.").as_str()));
    }
}

#[tokio::test]
async fn keys_and_owners_are_limited_to_1024_bytes_not_characters() {
    let p = key("long", "");
    let c = server().app().await;
    // 'é' is two bytes in UTF-8: 512 of them are exactly 1024 bytes.
    let at_limit = format!("{p}{}", "\u{e9}".repeat((1024 - p.len()) / 2));
    assert!(at_limit.len() <= 1024);
    grant(&c, &at_limit, &"\u{e9}".repeat(512), "1 hour").await;
    let over = "\u{e9}".repeat(513);
    rejects(
        &format!("SELECT * FROM lease.acquire('{over}', '{over}', '1s')"),
        &[
            "key must be at most 1024 bytes (got 1026)",
            "owner must be at most 1024 bytes (got 1026)",
        ],
        &p,
    )
    .await;
    // Far beyond the btree limit: still a clean 22023, never an index row size error.
    let huge = "k".repeat(1_000_000);
    rejects(
        &format!("SELECT * FROM lease.acquire('{huge}', 'w', '1s')"),
        &["key must be at most 1024 bytes (got 1000000)"],
        &p,
    )
    .await;
}

#[tokio::test]
async fn infinite_intervals_are_rejected_where_the_server_has_them() {
    let s = server();
    if s.major() < 17 {
        // interval 'infinity' exists from PostgreSQL 17 on; earlier servers cannot express it.
        eprintln!(
            "skipped infinite_intervals_are_rejected_where_the_server_has_them: PostgreSQL {} has \
             no infinite intervals (they exist from 17 on), so there is nothing to reject",
            s.major()
        );
        return;
    }
    let p = key("infinite", "");
    rejects(
        &format!("SELECT * FROM lease.acquire('{p}k', 'w', 'infinity')"),
        &["ttl must be finite"],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.acquire('{p}k', 'w', '1s', '-infinity')"),
        &["wait must be finite"],
        &p,
    )
    .await;
    rejects(
        &format!("SELECT * FROM lease.renew('{p}k', 'w', 1, 'infinity')"),
        &["ttl must be finite"],
        &p,
    )
    .await;
    rejects(
        "SELECT * FROM lease.summary('infinity')",
        &["expiring_within must be finite"],
        &p,
    )
    .await;
}
