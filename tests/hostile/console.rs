//! Property tests of the operator console's calls (0.10.0) with adversarial arguments, as
//! `props.rs` runs the rest of the API: `lease.browse` returns exactly the page that its arguments
//! select from the stored rows, judged as the rows say, and `lease.summary` counts every key once;
//! or either fails with 22023 naming every violation (22021 for NUL text, the cast's SQLSTATE for
//! an unparseable interval). Both only read: the state is the same after every call.
//!
//! The keys each case adds are held for an hour, released, or lapsed before the call, so no
//! judgement can change while a call runs (a case where one did is not compared).

use std::time::SystemTime;

use proptest::prelude::*;

use crate::Db;
use crate::inputs::{self, Text};
use crate::verdicts::*;

/// A stored row as the superuser reads it, and how browse must judge it.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    key: String,
    owner: Option<String>,
    epoch: i64,
    expires_at: SystemTime,
    data: Option<String>,
    waiting: bool,
    state: &'static str,
}

async fn rows(db: &Db) -> Vec<Row> {
    db.su
        .query(
            "SELECT key, owner, epoch, expires_at, data, waiting,
                    CASE WHEN owner IS NULL THEN 'free'
                         WHEN expires_at > clock_timestamp() THEN 'held' ELSE 'lapsed' END
               FROM lease.leases",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|r| Row {
            key: r.get(0),
            owner: r.get(1),
            epoch: r.get(2),
            expires_at: r.get(3),
            data: r.get(4),
            waiting: r.get(5),
            state: match r.get::<_, &str>(6) {
                "free" => "free",
                "held" => "held",
                _ => "lapsed",
            },
        })
        .collect()
}

/// The row browse must return for `r`: (key, state, owner, epoch, expires_at, data, waiting,
/// last_owner).
type Page = (
    String,
    String,
    Option<String>,
    i64,
    Option<SystemTime>,
    Option<String>,
    bool,
    Option<String>,
);

fn judged(r: &Row) -> Page {
    let held = r.state == "held";
    let lapsed = r.state == "lapsed";
    (
        r.key.clone(),
        r.state.to_string(),
        r.owner.clone().filter(|_| held),
        r.epoch,
        Some(r.expires_at).filter(|_| r.state != "free"),
        r.data.clone().filter(|_| held),
        r.waiting && r.state != "free",
        r.owner.clone().filter(|_| lapsed),
    )
}

/// A prefix of `k` cut at the character boundary in its middle.
fn half_of(k: &str) -> String {
    let cut = k
        .char_indices()
        .map(|(i, _)| i)
        .nth(k.chars().count() / 2)
        .unwrap_or(0);
    k[..cut].to_string()
}

#[test]
fn browse_with_hostile_arguments_returns_exactly_the_page_it_selects() {
    let db = Db::new("hostile_browse");
    let state = prop::sample::select(
        &[
            None,
            Some("held"),
            Some("lapsed"),
            Some("free"),
            Some("HELD"),
            Some(""),
            Some("held "),
            Some("expired"),
        ][..],
    );
    let max_rows = prop_oneof![
        1 => Just(None),
        4 => prop::sample::select(&[0i32, -1, 1, 2, 3, 100, 1000, 1001, i32::MIN, i32::MAX][..])
            .prop_map(Some),
    ];
    // Where prefix, after and owner come from: generated, or (to make matches likely) a stored
    // key cut in half, a stored key, an owner that holds keys.
    let strategy = (
        proptest::collection::vec((inputs::text(), inputs::setup()), 0..4),
        (inputs::text(), any::<bool>()),
        (inputs::text(), any::<bool>()),
        (inputs::text(), 0u8..3),
        state,
        max_rows,
        any::<prop::sample::Index>(),
    );
    run(
        "browse",
        strategy,
        |(
            keys,
            (prefix, cut),
            (after, stored_after),
            (owner, known_owner),
            state,
            max_rows,
            pick,
        )| {
            db.rt.block_on(async {
                for (k, setup) in &keys {
                    prepare(&db, k, &Text(Some("lister".into())), *setup).await;
                }
                let all = rows(&db).await;
                let picked = (!all.is_empty()).then(|| all[pick.index(all.len())].key.clone());
                let prefix = match (&picked, cut) {
                    (Some(k), true) => Text(Some(half_of(k))),
                    _ => prefix,
                };
                let after = match (&picked, stored_after) {
                    (Some(k), true) => Text(Some(k.clone())),
                    _ => after,
                };
                let owner = match known_owner {
                    1 => Text(Some("lister".into())),
                    2 => Text(Some("other-owner".into())),
                    _ => owner,
                };
                let before = db.state(true).await;
                let res = db
                    .app
                    .query(
                        "SELECT key, state, owner, epoch, expires_at, data, waiting, last_owner \
                           FROM lease.browse($1::text, $2::text, $3::text, $4::text, $5::int4)",
                        &[&prefix.0, &after.0, &state, &owner.0, &max_rows],
                    )
                    .await;
                let after_call = db.state(true).await;
                let bad_state = state.is_some_and(|s| !["held", "lapsed", "free"].contains(&s));
                let bad_rows = max_rows.is_none_or(|n| !(1..=1000).contains(&n));
                match res {
                    Err(e) => {
                        let f = failed(e)?;
                        judge_failure(
                            &f,
                            &[&prefix, &after, &owner],
                            &[],
                            &["22023"],
                            before == after_call,
                        )?;
                        if f.code == "22023" {
                            let mut expected = violations(&[
                                prefix.violation("prefix", true, true),
                                after.violation("after", true, true),
                            ]);
                            if bad_state {
                                expected.push("state must be held, lapsed or free".into());
                            }
                            expected.extend(owner.violation("owner", true, false));
                            match max_rows {
                                None => expected.push("max_rows must not be NULL".into()),
                                Some(n) if bad_rows => expected
                                    .push(format!("max_rows must be in [1, 1000] (got {n})")),
                                Some(_) => {}
                            }
                            prop_assert!(!expected.is_empty(), "22023 for valid input");
                            check_detail(&f, &expected)?;
                        }
                    }
                    Ok(got) => {
                        accepted_input_was_valid(
                            &[(&prefix, false), (&after, false), (&owner, false)],
                            &[],
                        )?;
                        for (t, name, may_be_empty) in [
                            (&prefix, "prefix", true),
                            (&after, "after", true),
                            (&owner, "owner", false),
                        ] {
                            prop_assert!(
                                t.violation(name, true, may_be_empty).is_none(),
                                "browse accepted the {name} {t:?}"
                            );
                        }
                        prop_assert!(!bad_state, "browse accepted the state {state:?}");
                        prop_assert!(!bad_rows, "browse accepted max_rows {max_rows:?}");
                        prop_assert!(before == after_call, "a read changed the state");
                        if rows(&db).await != all {
                            // A judgement changed while the call ran (not expected: see above).
                            return Ok(());
                        }
                        let p = prefix.0.as_deref().unwrap_or("").as_bytes();
                        let mut want: Vec<Page> = all
                            .iter()
                            .filter(|r| r.key.as_bytes().starts_with(p))
                            .filter(|r| {
                                after
                                    .0
                                    .as_ref()
                                    .is_none_or(|a| r.key.as_bytes() > a.as_bytes())
                            })
                            .filter(|r| state.is_none_or(|s| r.state == s))
                            .filter(|r| {
                                owner.0.as_ref().is_none_or(|o| {
                                    r.state == "held" && r.owner.as_ref() == Some(o)
                                })
                            })
                            .map(judged)
                            .collect();
                        want.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                        want.truncate(max_rows.unwrap_or(0) as usize);
                        let got: Vec<Page> = got
                            .iter()
                            .map(|r| {
                                (
                                    r.get(0),
                                    r.get(1),
                                    r.get(2),
                                    r.get(3),
                                    r.get(4),
                                    r.get(5),
                                    r.get(6),
                                    r.get(7),
                                )
                            })
                            .collect();
                        prop_assert_eq!(
                            got,
                            want,
                            "browse({:?}, {:?}, {:?}, {:?}, {:?})",
                            prefix,
                            after,
                            state,
                            owner,
                            max_rows
                        );
                    }
                }
                Ok(())
            })
        },
    );
}

/// The counts summary must report over the stored rows, for a call that read the clock between
/// `t0` and `t1` with `expiring_within` `secs` seconds: the (least, greatest) of each of held,
/// lapsed, free, expiring and waiting.
async fn summary_bounds(db: &Db, t0: SystemTime, t1: SystemTime, secs: f64) -> [(i64, i64); 5] {
    let r = db
        .su
        .query_one(
            "SELECT count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > $2),
                    count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > $1),
                    count(*) FILTER (WHERE owner IS NOT NULL AND expires_at <= $1),
                    count(*) FILTER (WHERE owner IS NOT NULL AND expires_at <= $2),
                    count(*) FILTER (WHERE owner IS NULL),
                    count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > $2
                                       AND expires_at <= $1 + $3::float8 * interval '1 second'),
                    count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > $1
                                       AND expires_at <= $2 + $3::float8 * interval '1 second'),
                    count(*) FILTER (WHERE owner IS NOT NULL AND waiting)
               FROM lease.leases",
            &[&t0, &t1, &secs],
        )
        .await
        .expect("counts");
    let n = |i: usize| r.get::<_, i64>(i);
    [
        (n(0), n(1)),
        (n(2), n(3)),
        (n(4), n(4)),
        (n(5), n(6)),
        (n(7), n(7)),
    ]
}

#[test]
fn summary_with_hostile_durations_counts_every_key_once_or_fails_documented() {
    let db = Db::new("hostile_summary");
    let strategy = (
        proptest::collection::vec((inputs::text(), inputs::setup()), 0..3),
        inputs::interval(),
        any::<bool>(),
    );
    run("summary", strategy, |(keys, within, awaited)| {
        db.rt.block_on(async {
            for (k, setup) in &keys {
                prepare(&db, k, &Text(Some("counter".into())), *setup).await;
                if awaited && k.valid() {
                    db.app
                        .query_one("SELECT lease.register_waiter($1)", &[&k.0])
                        .await
                        .expect("register_waiter");
                }
            }
            let c = cast(&db, &within).await;
            let secs: Option<f64> = match &within {
                Some(lit) if c.is_ok() => db
                    .su
                    .query_one("SELECT date_part('epoch', $1::text::interval)", &[lit])
                    .await
                    .ok()
                    .map(|r| r.get(0)),
                _ => None,
            };
            let before = db.state(true).await;
            let t0: SystemTime = db
                .su
                .query_one("SELECT clock_timestamp()", &[])
                .await
                .expect("clock")
                .get(0);
            let res = db
                .app
                .query_one(
                    "SELECT held, lapsed, free, expiring, waiting FROM lease.summary($1::text::interval)",
                    &[&within],
                )
                .await;
            let t1: SystemTime = db
                .su
                .query_one("SELECT clock_timestamp()", &[])
                .await
                .expect("clock")
                .get(0);
            let after = db.state(true).await;
            let expected_violation = match (&within, secs) {
                (None, _) => Some("expiring_within must not be NULL"),
                (Some(_), Some(s)) if !s.is_finite() => Some("expiring_within must be finite"),
                (Some(_), Some(s)) if s > 31_536_000.0 => Some("expiring_within must be at most 365 days"),
                (Some(_), Some(s)) if s < 0.0 => Some("expiring_within must not be negative"),
                _ => None,
            };
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[], &[&c], &["22023"], before == after)?;
                    if f.code == "22023" {
                        let expected: Vec<String> = expected_violation.iter().map(|v| v.to_string()).collect();
                        prop_assert!(!expected.is_empty(), "22023 for a valid duration {within:?}");
                        check_detail(&f, &expected)?;
                    }
                }
                Ok(r) => {
                    accepted_input_was_valid(&[], &[&c])?;
                    prop_assert!(
                        expected_violation.is_none(),
                        "summary accepted {within:?} ({expected_violation:?})"
                    );
                    prop_assert!(before == after, "a read changed the state");
                    let got: [i64; 5] = [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)];
                    let bounds = summary_bounds(&db, t0, t1, secs.unwrap_or(0.0)).await;
                    for (i, name) in ["held", "lapsed", "free", "expiring", "waiting"].iter().enumerate() {
                        let (lo, hi) = bounds[i];
                        prop_assert!(
                            lo <= got[i] && got[i] <= hi,
                            "{name} = {} not in [{lo}, {hi}] (summary({within:?}))",
                            got[i]
                        );
                    }
                    let total: i64 = db
                        .su
                        .query_one("SELECT count(*) FROM lease.leases", &[])
                        .await
                        .expect("count")
                        .get(0);
                    prop_assert_eq!(got[0] + got[1] + got[2], total, "every key in one state");
                }
            }
            Ok(())
        })
    });
}
