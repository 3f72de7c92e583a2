//! The operator console's calls (SEMANTICS §16, 0.10.0): `lease.browse` returns one page of keys in
//! byte order after a key, under a prefix, in a state or held by an owner, each judged held, lapsed
//! or free by the server clock; `lease.summary` counts the keys in each state in one scan. Lapses
//! are observed by polling the server clock (`await_lapsed`), never by sleeping; counts are
//! compared with what the test made, in a database of its own where whole-database numbers matter.

use std::collections::BTreeSet;
use std::time::SystemTime;

use pglease_tests::calls::grant_until;
use pglease_tests::lapse::await_lapsed;
use pglease_tests::{ADMIN, APP, APP_MEMBER, OTHER_APP, SHARED_DB, expect_error, key, server};
use tokio_postgres::Client;

use crate::invalid_input::rejects;
use crate::{grant, lapse, release};

/// One row of `lease.browse`, every column.
#[derive(Debug, Clone, PartialEq)]
struct Browsed {
    key: String,
    state: String,
    owner: Option<String>,
    epoch: i64,
    expires_at: Option<SystemTime>,
    data: Option<String>,
    waiting: bool,
    last_owner: Option<String>,
}

/// The arguments of one `lease.browse` call (`None`: the SQL default).
#[derive(Debug, Clone, Copy, Default)]
struct Page<'a> {
    prefix: Option<&'a str>,
    after: Option<&'a str>,
    state: Option<&'a str>,
    owner: Option<&'a str>,
    max_rows: Option<i32>,
}

impl<'a> Page<'a> {
    fn under(prefix: &'a str) -> Page<'a> {
        Page {
            prefix: Some(prefix),
            ..Page::default()
        }
    }
}

async fn browse(c: &Client, page: Page<'_>) -> Vec<Browsed> {
    c.query(
        "SELECT key, state, owner, epoch, expires_at, data, waiting, last_owner
           FROM lease.browse($1, $2, $3, $4, coalesce($5, 100))",
        &[
            &page.prefix,
            &page.after,
            &page.state,
            &page.owner,
            &page.max_rows,
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("lease.browse({page:?}): {e}"))
    .iter()
    .map(|r| Browsed {
        key: r.get(0),
        state: r.get(1),
        owner: r.get(2),
        epoch: r.get(3),
        expires_at: r.get(4),
        data: r.get(5),
        waiting: r.get(6),
        last_owner: r.get(7),
    })
    .collect()
}

fn keys(rows: &[Browsed]) -> Vec<String> {
    rows.iter().map(|r| r.key.clone()).collect()
}

/// `keys` sorted as the server sorts them: byte-wise.
fn byte_order(mut keys: Vec<String>) -> Vec<String> {
    keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    keys
}

/// Every key `browse` returns for `page`, walked page by page with `after` = each page's last key;
/// asserts that every page but the last is full and that pages follow each other.
async fn walk(c: &Client, page: Page<'_>, max_rows: i32) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    loop {
        let after = seen.last().cloned();
        let rows = browse(
            c,
            Page {
                after: after.as_deref().or(page.after),
                max_rows: Some(max_rows),
                ..page
            },
        )
        .await;
        assert!(rows.len() <= max_rows as usize, "a page over max_rows");
        if let (Some(last), Some(first)) = (&after, rows.first()) {
            assert!(
                first.key.as_bytes() > last.as_bytes(),
                "page starts at {first:?}, not after {last:?}"
            );
        }
        let full = rows.len() == max_rows as usize;
        seen.extend(keys(&rows));
        if !full {
            return seen;
        }
    }
}

/// `lease.acquire` with data, granted: (epoch, expires_at).
async fn grant_with_data(c: &Client, key: &str, owner: &str, data: &str) -> (i64, SystemTime) {
    let r = c
        .query_one(
            "SELECT epoch, expires_at FROM lease.acquire($1, $2, interval '1 hour', interval '0', $3)",
            &[&key, &owner, &data],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.acquire({key}, {owner}): {e}"));
    (r.get(0), r.get(1))
}

/// Marks `key` as awaited (`lease.register_waiter`); returns whether it was held.
async fn register_waiter(c: &Client, key: &str) -> bool {
    c.query_one("SELECT held FROM lease.register_waiter($1)", &[&key])
        .await
        .unwrap_or_else(|e| panic!("lease.register_waiter({key}): {e}"))
        .get(0)
}

/// Keys under `p` in each state, and the rows `browse` must return for them, in key order:
/// `forced` (free after force_release), `held` (with data), `lapsed`, `released` (free).
async fn keys_in_every_state(c: &Client, p: &str) -> Vec<Browsed> {
    let admin = server().connect_as(SHARED_DB, ADMIN).await;
    let forced = format!("{p}forced");
    let f = grant(c, &forced, "w-forced", "1 hour").await;
    let ended: Option<i64> = admin
        .query_one("SELECT lease.force_release($1)", &[&forced])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, Some(f));
    let held = format!("{p}held");
    let (h, hx) = grant_with_data(c, &held, "w-held", "payload").await;
    let lapsed = format!("{p}lapsed");
    let (l, lx) = grant_until(c, &lapsed, "w-lapsed", "50 milliseconds").await;
    let released = format!("{p}released");
    let r = grant(c, &released, "w-released", "1 hour").await;
    assert_eq!(release(c, &released, "w-released", r).await, "ok");
    await_lapsed(c, &lapsed).await;
    let free = |key: String, epoch: i64| Browsed {
        key,
        state: "free".into(),
        owner: None,
        epoch,
        expires_at: None,
        data: None,
        waiting: false,
        last_owner: None,
    };
    vec![
        free(forced, f + 1),
        Browsed {
            key: held,
            state: "held".into(),
            owner: Some("w-held".into()),
            epoch: h,
            expires_at: Some(hx),
            data: Some("payload".into()),
            waiting: false,
            last_owner: None,
        },
        Browsed {
            key: lapsed,
            state: "lapsed".into(),
            owner: None,
            epoch: l,
            expires_at: Some(lx),
            data: None,
            waiting: false,
            last_owner: Some("w-lapsed".into()),
        },
        free(released, r + 1),
    ]
}

#[tokio::test]
async fn each_key_is_held_lapsed_or_free_as_the_server_clock_judges_it() {
    let c = server().app().await;
    let p = key("browse_states", "");
    let expected = keys_in_every_state(&c, &p).await;
    assert_eq!(browse(&c, Page::under(&p)).await, expected);
    // The same judgement as lease.inspect, key by key.
    for row in &expected {
        let (held, _, epoch, _) = crate::inspect(&c, &row.key).await.unwrap();
        assert_eq!(held, row.state == "held", "{}", row.key);
        assert_eq!(epoch, row.epoch, "{}", row.key);
    }

    // A grant that lapses: held while the server clock is before its expiry, then lapsed with the
    // same expiry and its owner as last_owner, without anyone touching the key.
    let soon = format!("{p}soon");
    let (e, x) = grant_until(&c, &soon, "w-soon", "300 milliseconds").await;
    let r = c
        .query_one(
            "SELECT b.state, b.expires_at > clock_timestamp()
               FROM lease.browse($1) AS b",
            &[&soon],
        )
        .await
        .unwrap();
    let (state, unexpired_after_the_call): (String, bool) = (r.get(0), r.get(1));
    if unexpired_after_the_call {
        assert_eq!(state, "held", "unexpired after the call, so held during it");
    }
    await_lapsed(&c, &soon).await;
    assert_eq!(
        browse(&c, Page::under(&soon)).await,
        [Browsed {
            key: soon.clone(),
            state: "lapsed".into(),
            owner: None,
            epoch: e,
            expires_at: Some(x),
            data: None,
            waiting: false,
            last_owner: Some("w-soon".into()),
        }]
    );
    // Taken over: held by the new owner at the next epoch; no last owner any more.
    let next = grant(&c, &soon, "w-next", "1 hour").await;
    let rows = browse(&c, Page::under(&soon)).await;
    assert_eq!(
        (
            rows[0].state.as_str(),
            rows[0].owner.as_deref(),
            rows[0].epoch,
            rows[0].last_owner.as_deref()
        ),
        ("held", Some("w-next"), e + 1, None)
    );
    assert_eq!(next, e + 1);
}

#[tokio::test]
async fn a_state_filter_returns_exactly_the_keys_in_that_state() {
    let c = server().app().await;
    let p = key("browse_state_filter", "");
    let all = keys_in_every_state(&c, &p).await;
    for state in ["held", "lapsed", "free"] {
        let want: Vec<Browsed> = all.iter().filter(|r| r.state == state).cloned().collect();
        let got = browse(
            &c,
            Page {
                state: Some(state),
                ..Page::under(&p)
            },
        )
        .await;
        assert_eq!(got, want, "state {state}");
        // Across pages of one key each, too.
        let walked = walk(
            &c,
            Page {
                state: Some(state),
                ..Page::under(&p)
            },
            1,
        )
        .await;
        assert_eq!(walked, keys(&want), "state {state}, pages of 1");
    }
}

#[tokio::test]
async fn an_owner_filter_returns_only_the_keys_that_owner_holds() {
    let c = server().app().await;
    let p = key("browse_owner", "");
    grant(&c, &format!("{p}a"), "w1", "1 hour").await;
    grant(&c, &format!("{p}b"), "w2", "1 hour").await;
    grant(&c, &format!("{p}c"), "w1", "1 hour").await;
    lapse(&c, &format!("{p}d"), "w1").await;
    let e = grant(&c, &format!("{p}e"), "w1", "1 hour").await;
    release(&c, &format!("{p}e"), "w1", e).await;
    grant(&c, &format!("{p}f"), "W1", "1 hour").await;
    let owned = |owner: &'static str, state: Option<&'static str>| {
        let (c, p) = (&c, &p);
        async move {
            browse(
                c,
                Page {
                    owner: Some(owner),
                    state,
                    ..Page::under(p)
                },
            )
            .await
        }
    };
    let rows = owned("w1", None).await;
    assert_eq!(keys(&rows), [format!("{p}a"), format!("{p}c")]);
    assert!(
        rows.iter()
            .all(|r| r.state == "held" && r.owner.as_deref() == Some("w1"))
    );
    assert_eq!(keys(&owned("w1", Some("held")).await).len(), 2);
    assert!(
        owned("w1", Some("lapsed")).await.is_empty(),
        "a lapsed key has no holder to match"
    );
    assert!(owned("w1", Some("free")).await.is_empty());
    assert!(owned("w3", None).await.is_empty());
    assert_eq!(
        keys(&owned("W1", None).await),
        [format!("{p}f")],
        "owners compare exactly"
    );
}

#[tokio::test]
async fn pages_after_a_key_walk_every_key_exactly_once_in_byte_order() {
    let c = server().app().await;
    let p = key("browse_pages", "");
    let mut made: Vec<String> = (0..40).map(|i| format!("{p}k{i}")).collect();
    for odd in [
        "Z",
        "a b",
        "a",
        "ab",
        "\u{e4}",
        "\u{65e5}\u{672c}",
        "~",
        "k1 ",
        "K1",
    ] {
        made.push(format!("{p}{odd}"));
    }
    for (i, k) in made.iter().enumerate() {
        match i % 3 {
            0 => {
                grant(&c, k, "w", "1 hour").await;
            }
            1 => {
                let e = grant(&c, k, "w", "1 hour").await;
                release(&c, k, "w", e).await;
            }
            _ => {
                grant(&c, k, "w", "50 milliseconds").await;
            }
        }
    }
    let want = byte_order(made.clone());
    for size in [1, 7, 49, 1000] {
        let walked = walk(&c, Page::under(&p), size).await;
        assert_eq!(walked, want, "pages of {size}");
    }
    // Every key once, also when keys arrive during the walk: one behind the position reached is
    // not returned, one ahead of it is.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut added = false;
    loop {
        let rows = browse(
            &c,
            Page {
                after: after.as_deref(),
                max_rows: Some(10),
                ..Page::under(&p)
            },
        )
        .await;
        seen.extend(keys(&rows));
        if !added {
            grant(&c, &format!("{p}!behind"), "w", "1 hour").await;
            grant(&c, &format!("{p}\u{65e5}\u{672c}z"), "w", "1 hour").await;
            added = true;
        }
        if rows.len() < 10 {
            break;
        }
        after = seen.last().cloned();
    }
    let mut want_now = want.clone();
    want_now.push(format!("{p}\u{65e5}\u{672c}z"));
    assert_eq!(seen, want_now);
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a key returned twice");
    // `after` need not be a key; after the last key there is nothing; '' starts at the first.
    let between = browse(
        &c,
        Page {
            after: Some(&format!("{p}k1!")),
            max_rows: Some(2),
            ..Page::under(&p)
        },
    )
    .await;
    assert_eq!(keys(&between), [format!("{p}k10"), format!("{p}k11")]);
    let last = seen.last().unwrap();
    assert!(
        browse(
            &c,
            Page {
                after: Some(last),
                ..Page::under(&p)
            }
        )
        .await
        .is_empty()
    );
    let from_empty = browse(
        &c,
        Page {
            after: Some(""),
            max_rows: Some(1),
            ..Page::under(&p)
        },
    )
    .await;
    assert_eq!(keys(&from_empty), [format!("{p}!behind")]);
}

#[tokio::test]
async fn a_prefix_matches_its_bytes_with_like_metacharacters_taken_literally() {
    let c = server().app().await;
    let p = key("browse_wild", "");
    for k in ["a_c", "abc", "a%c", "a\\c", "a%", "aXc", "b%"] {
        grant(&c, &format!("{p}{k}"), "w", "1 hour").await;
    }
    let under = |prefix: String| {
        let c = &c;
        async move { keys(&browse(c, Page::under(&prefix)).await) }
    };
    assert_eq!(under(format!("{p}a_")).await, [format!("{p}a_c")]);
    assert_eq!(
        under(format!("{p}a%")).await,
        [format!("{p}a%"), format!("{p}a%c")]
    );
    assert_eq!(under(format!("{p}a\\")).await, [format!("{p}a\\c")]);
    assert_eq!(under(format!("{p}%")).await, Vec::<String>::new());
    assert_eq!(under(format!("{p}a%c")).await, [format!("{p}a%c")]);
    assert_eq!(
        under(format!("{p}a")).await,
        byte_order(
            ["a_c", "abc", "a%c", "a\\c", "a%", "aXc"]
                .iter()
                .map(|k| format!("{p}{k}"))
                .collect()
        )
    );
    // An empty prefix is every key, as NULL is: here, from this test's first key on.
    for prefix in [Some(""), None] {
        let rows = browse(
            &c,
            Page {
                prefix,
                after: Some(&format!("{p}a\\c")),
                max_rows: Some(3),
                ..Page::default()
            },
        )
        .await;
        assert_eq!(
            keys(&rows),
            [format!("{p}a_c"), format!("{p}abc"), format!("{p}b%")],
            "prefix {prefix:?}"
        );
    }
}

#[tokio::test]
async fn max_rows_is_the_page_size_from_1_to_1000() {
    let c = server().app().await;
    let p = key("browse_max_rows", "");
    let made: i64 = c
        .query_one(
            "SELECT count(*) FROM generate_series(1, 1005) AS i,
                    lease.acquire($1 || pg_catalog.lpad(i::text, 4, '0'), 'w', interval '1 hour') AS a
              WHERE a.acquired",
            &[&p],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 1005);
    for (max_rows, len) in [(Some(1), 1), (Some(2), 2), (None, 100), (Some(1000), 1000)] {
        let rows = browse(
            &c,
            Page {
                max_rows,
                ..Page::under(&p)
            },
        )
        .await;
        assert_eq!(rows.len(), len, "max_rows {max_rows:?}");
        assert_eq!(rows[0].key, format!("{p}0001"));
    }
    let default: i64 = c
        .query_one("SELECT count(*) FROM lease.browse($1)", &[&p])
        .await
        .unwrap()
        .get(0);
    assert_eq!(default, 100, "max_rows defaults to 100");
    for (arg, violation) in [
        ("0", "max_rows must be in [1, 1000] (got 0)"),
        ("-1", "max_rows must be in [1, 1000] (got -1)"),
        ("1001", "max_rows must be in [1, 1000] (got 1001)"),
        ("NULL", "max_rows must not be NULL"),
    ] {
        rejects(
            &format!("SELECT * FROM lease.browse('{p}', max_rows => {arg})"),
            &[violation],
            &p,
        )
        .await;
    }
}

#[tokio::test]
async fn browse_and_summary_reject_invalid_input_naming_every_violation() {
    let p = key("browse_invalid", "");
    let long = "x".repeat(1025);
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            format!("SELECT * FROM lease.browse('{long}')"),
            vec!["prefix must be at most 1024 bytes (got 1025)"],
        ),
        (
            format!("SELECT * FROM lease.browse(after => '{long}')"),
            vec!["after must be at most 1024 bytes (got 1025)"],
        ),
        (
            "SELECT * FROM lease.browse(state => 'busy')".into(),
            vec!["state must be held, lapsed or free"],
        ),
        (
            "SELECT * FROM lease.browse(state => 'HELD')".into(),
            vec!["state must be held, lapsed or free"],
        ),
        (
            "SELECT * FROM lease.browse(state => '')".into(),
            vec!["state must be held, lapsed or free"],
        ),
        (
            "SELECT * FROM lease.browse(owner => '')".into(),
            vec!["owner must not be empty"],
        ),
        (
            format!("SELECT * FROM lease.browse(owner => '{long}')"),
            vec!["owner must be at most 1024 bytes (got 1025)"],
        ),
        (
            format!("SELECT * FROM lease.browse('{long}', '{long}', 'none', '', 0)"),
            vec![
                "prefix must be at most 1024 bytes (got 1025)",
                "after must be at most 1024 bytes (got 1025)",
                "state must be held, lapsed or free",
                "owner must not be empty",
                "max_rows must be in [1, 1000] (got 0)",
            ],
        ),
        (
            "SELECT * FROM lease.summary(NULL)".into(),
            vec!["expiring_within must not be NULL"],
        ),
        (
            "SELECT * FROM lease.summary('-1 second')".into(),
            vec!["expiring_within must not be negative"],
        ),
        (
            "SELECT * FROM lease.summary('1 month -31 days')".into(),
            vec!["expiring_within must not be negative"],
        ),
        (
            "SELECT * FROM lease.summary('366 days')".into(),
            vec!["expiring_within must be at most 365 days"],
        ),
        (
            "SELECT * FROM lease.summary('1 year')".into(),
            vec!["expiring_within must be at most 365 days"],
        ),
    ];
    for (sql, violations) in &cases {
        rejects(sql, violations, &p).await;
    }
    // The bounds themselves are accepted; NULL and '' mean "from the start" and "every key".
    let c = server().app().await;
    for sql in [
        "SELECT * FROM lease.browse('', '', NULL, NULL, 1)",
        "SELECT * FROM lease.browse(NULL, NULL, 'held', 'w', 1000)",
        "SELECT * FROM lease.summary('0')",
        "SELECT * FROM lease.summary('365 days')",
    ] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// The `summary` counts of the database `c` is connected to, as `held lapsed free expiring
/// waiting`.
async fn summary(c: &Client, expiring_within: &str) -> [i64; 5] {
    let r = c
        .query_one(
            "SELECT held, lapsed, free, expiring, waiting FROM lease.summary($1::text::interval)",
            &[&expiring_within],
        )
        .await
        .unwrap_or_else(|e| panic!("lease.summary({expiring_within}): {e}"));
    [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)]
}

#[tokio::test]
async fn summary_counts_the_keys_in_each_state_as_the_test_made_them() {
    let s = server();
    let db = s.fresh_db_with_extension("browse_summary");
    let c = s.connect_as(&db, APP).await;
    let watcher = s.connect_as(&db, APP_MEMBER).await;
    assert_eq!(summary(&c, "10 seconds").await, [0; 5], "an empty database");
    // Held: three for an hour (one awaited), two for two minutes.
    for k in ["h1", "h2", "h3"] {
        grant(&c, k, "w", "1 hour").await;
    }
    for k in ["m1", "m2"] {
        grant(&c, k, "w", "2 minutes").await;
    }
    assert!(register_waiter(&watcher, "h1").await);
    // Lapsed: three, one of them awaited before it lapsed.
    lapse(&c, "l1", "w").await;
    lapse(&c, "l2", "w").await;
    grant(&c, "l3", "w", "1 second").await;
    assert!(register_waiter(&watcher, "l3").await);
    await_lapsed(&c, "l3").await;
    // Free: two released, one forced, one released while awaited (its mark is no waiter now).
    for k in ["f1", "f2", "f3"] {
        let e = grant(&c, k, "w", "1 hour").await;
        assert_eq!(release(&c, k, "w", e).await, "ok");
    }
    grant(&c, "f4", "w", "1 hour").await;
    s.connect_as(&db, ADMIN)
        .await
        .query_one("SELECT lease.force_release('f4')", &[])
        .await
        .unwrap();
    // A free key whose last grant was awaited: its mark stays in the row, but nobody waits.
    let e = grant(&c, "f2", "w", "1 hour").await;
    assert!(register_waiter(&watcher, "f2").await);
    assert_eq!(release(&c, "f2", "w", e).await, "ok");
    let stored_mark: bool = s
        .connect_super(&db)
        .await
        .query_one("SELECT waiting FROM lease.leases WHERE key = 'f2'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        stored_mark,
        "the released key keeps its mark until its next grant"
    );

    // held, lapsed, free, expiring, waiting.
    assert_eq!(summary(&c, "10 seconds").await, [5, 3, 4, 0, 2]);
    assert_eq!(summary(&c, "0").await, [5, 3, 4, 0, 2]);
    assert_eq!(summary(&c, "30 minutes").await, [5, 3, 4, 2, 2]);
    assert_eq!(summary(&c, "2 hours").await, [5, 3, 4, 5, 2]);
    let default: [i64; 5] = {
        let r = c
            .query_one(
                "SELECT held, lapsed, free, expiring, waiting FROM lease.summary()",
                &[],
            )
            .await
            .unwrap();
        [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)]
    };
    assert_eq!(default, [5, 3, 4, 0, 2], "expiring_within defaults to 10 s");

    // The same numbers from browse, page by page over the whole database.
    let all = {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let rows = browse(
                &c,
                Page {
                    after: after.as_deref(),
                    max_rows: Some(4),
                    ..Page::default()
                },
            )
            .await;
            let n = rows.len();
            after = rows.last().map(|r| r.key.clone());
            all.extend(rows);
            if n < 4 {
                break all;
            }
        }
    };
    let count = |f: &dyn Fn(&Browsed) -> bool| all.iter().filter(|r| f(r)).count() as i64;
    assert_eq!(
        [
            count(&|r| r.state == "held"),
            count(&|r| r.state == "lapsed"),
            count(&|r| r.state == "free"),
            count(&|r| r.waiting),
        ],
        [5, 3, 4, 2]
    );
    assert_eq!(
        all.iter()
            .filter(|r| r.waiting)
            .map(|r| (r.key.as_str(), r.state.as_str()))
            .collect::<Vec<_>>(),
        [("h1", "held"), ("l3", "lapsed")]
    );

    // A grant clears the mark; a lapse moves a key from held to lapsed in the counts.
    grant(&c, "l3", "w2", "1 hour").await;
    assert_eq!(summary(&c, "10 seconds").await, [6, 2, 4, 0, 1]);
    grant(&c, "s1", "w", "200 milliseconds").await;
    let [held, ..] = summary(&c, "10 seconds").await;
    assert!(held == 7 || held == 6, "held {held}");
    await_lapsed(&c, "s1").await;
    assert_eq!(summary(&c, "10 seconds").await, [6, 3, 4, 0, 1]);
}

/// This session's reads of `lease.leases` as the statistics count them: (sequential scans, index
/// scans, rows fetched through an index).
async fn reads(c: &Client) -> (i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT seq_scan, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
               FROM pg_stat_xact_user_tables WHERE relid = 'lease.leases'::regclass",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn a_prefix_page_reads_a_range_of_the_key_index_among_100000_keys() {
    let s = server();
    let db = s.fresh_db_with_extension("browse_index");
    // 100 000 keys k000000 .. k099999, written directly (this is about the reads).
    let su = s.connect_super(&db).await;
    su.batch_execute(
        "INSERT INTO lease.leases (key, owner, epoch, expires_at)
         SELECT 'k' || pg_catalog.lpad(i::text, 6, '0'), CASE WHEN i % 2 = 0 THEN 'w' END, i,
                clock_timestamp() + interval '1 hour'
           FROM generate_series(0, 99999) AS i;
         ANALYZE lease.leases;",
    )
    .await
    .unwrap();
    let c = s.connect_as(&db, APP).await;
    // A session that asks for generic plans: browse plans its query with the arguments anyway.
    c.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    for (page, len, at_most_fetched) in [
        (Page::under("k0500"), 100, 100),
        (
            Page {
                after: Some("k050090"),
                ..Page::under("k0500")
            },
            9,
            9,
        ),
        (
            Page {
                state: Some("free"),
                max_rows: Some(5),
                ..Page::under("k0700")
            },
            5,
            10,
        ),
        (
            Page {
                after: Some("k099990"),
                ..Page::default()
            },
            9,
            9,
        ),
    ] {
        // The session's counters also hold earlier transactions' reads until they are flushed:
        // the call's own reads are the difference.
        c.batch_execute("BEGIN").await.unwrap();
        let before = reads(&c).await;
        let rows = browse(&c, page).await;
        let after = reads(&c).await;
        c.batch_execute("COMMIT").await.unwrap();
        let (seq, idx, fetched) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        assert_eq!(rows.len(), len, "{page:?}");
        assert_eq!(seq, 0, "{page:?}: no sequential scan");
        assert!(idx >= 1, "{page:?}: read through the index");
        // Only the rows of the range are fetched (the planner's own probes of the index ends
        // fetch a few more at most), not the keys before the prefix.
        assert!(
            fetched <= at_most_fetched + 4,
            "{page:?}: {fetched} rows fetched through the index"
        );
    }
}

#[tokio::test]
async fn browse_and_summary_are_callable_by_exactly_the_roles_that_may_call_list() {
    let s = server();
    let db = s.fresh_db_with_extension("browse_roles");
    let su = s.connect_super(&db).await;
    // The same EXECUTE privileges as list (the default: PUBLIC), for every role.
    let acl = |f: &'static str| {
        let su = &su;
        async move {
            su.query_one(
                "SELECT coalesce(proacl::text, 'default') FROM pg_proc WHERE oid = $1::text::regprocedure",
                &[&f],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
        }
    };
    let list_acl = acl("lease.list(text)").await;
    assert_eq!(
        acl("lease.browse(text, text, text, text, integer)").await,
        list_acl
    );
    assert_eq!(acl("lease.summary(interval)").await, list_acl);
    // Who may call is decided by USAGE on the schema, as for list.
    let admin = s.connect_as(&db, ADMIN).await;
    admin
        .batch_execute(&format!(
            "REVOKE USAGE ON SCHEMA lease FROM PUBLIC; GRANT USAGE ON SCHEMA lease TO {APP}"
        ))
        .await
        .unwrap();
    let calls = [
        "SELECT * FROM lease.list()",
        "SELECT * FROM lease.browse()",
        "SELECT * FROM lease.summary()",
    ];
    for role in [APP, APP_MEMBER, ADMIN] {
        let c = s.connect_as(&db, role).await;
        for sql in calls {
            c.batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{role}: {sql}: {e}"));
        }
    }
    let other = s.connect_as(&db, OTHER_APP).await;
    for sql in calls {
        assert_eq!(expect_error(&other, sql).await.code, "42501", "{sql}");
    }
}
