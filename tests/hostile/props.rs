//! Property tests of every API function with adversarial arguments (see the crate docs). Each test
//! has its own database, so the state snapshot covers every row and the expected statuses follow from
//! the rows read just before the call (nothing else writes there).

use std::collections::BTreeMap;
use std::time::SystemTime;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio_postgres::Row as PgRow;

use crate::Db;
use crate::inputs::{self, Setup, Text};
use crate::verdicts::*;

#[test]
fn acquire_with_hostile_arguments_succeeds_well_formed_or_fails_documented_without_change() {
    let db = Db::new("hostile_acquire");
    let strategy = (
        inputs::text(),
        inputs::text(),
        inputs::interval(),
        inputs::interval(),
        inputs::setup(),
    );
    run("acquire", strategy, |(key, owner, ttl, wait, setup)| {
        db.rt.block_on(async {
            prepare(&db, &key, &owner, setup).await;
            let (ttl_c, wait_c) = (cast(&db, &ttl).await, cast(&db, &wait).await);
            let before = db.state(true).await;
            let row = stored(&db, &key).await;
            let res = db
                .app
                .query_one(
                    "SELECT a.acquired, a.epoch, a.expires_at, a.expires_at > s.t0, \
                            a.expires_at >= s.t0 + make_interval(secs => date_part('epoch', $3::text::interval)), \
                            a.expires_at <= clock_timestamp() + make_interval(secs => date_part('epoch', $3::text::interval)) \
                       FROM (SELECT clock_timestamp() AS t0 OFFSET 0) AS s \
                      CROSS JOIN LATERAL lease.acquire(CASE WHEN s.t0 IS NOT NULL THEN $1::text END, \
                            $2::text, $3::text::interval, $4::text::interval) AS a",
                    &[&key.0, &owner.0, &ttl, &wait],
                )
                .await;
            let after = db.state(true).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    let allowed: &[&str] = if positive(&wait_c) {
                        &["22023", "57014"]
                    } else {
                        &["22023"]
                    };
                    judge_failure(&f, &[&key, &owner], &[&ttl_c, &wait_c], allowed, before == after)?;
                    if f.code == "22023" {
                        let expected =
                            violations(&[key.violation("key", false, false), owner.violation("owner", false, false)]);
                        check_detail(&f, &expected)?;
                    } else if f.code == "57014" {
                        prop_assert!(
                            row.as_ref().is_some_and(|r| r.owner.is_some() && r.owner != owner.0),
                            "57014 although no other owner held the key"
                        );
                    }
                }
                Ok(r) => {
                    accepted_input_was_valid(&[(&key, true), (&owner, true)], &[&ttl_c, &wait_c])?;
                    check_acquired(&r, &row, &owner, before == after, &stored(&db, &key).await)?;
                }
            }
            Ok(())
        })
    });
}

fn check_acquired(
    r: &PgRow,
    before: &Option<Stored>,
    owner: &Text,
    unchanged: bool,
    after: &Option<Stored>,
) -> Result<(), TestCaseError> {
    let acquired: bool = r.get(0);
    let epoch: Option<i64> = r.get(1);
    let x: Option<SystemTime> = r.get(2);
    if !acquired {
        prop_assert!(
            epoch.is_none() && x.is_none(),
            "a refusal carries no epoch or expiry"
        );
        prop_assert!(unchanged, "a refusal changed the state");
        prop_assert!(
            before
                .as_ref()
                .is_some_and(|b| b.owner.is_some() && b.owner != owner.0 && !b.expired),
            "refused although the key was not held by another owner: {before:?}"
        );
        return Ok(());
    }
    let epoch = epoch.ok_or_else(|| TestCaseError::fail("a grant without epoch"))?;
    prop_assert!(
        epoch >= 1 && x.is_some(),
        "grant ({epoch}, {x:?}) is malformed"
    );
    prop_assert!(
        r.get::<_, Option<bool>>(3) == Some(true),
        "granted lease already expired"
    );
    if unchanged {
        // Re-acquire by the holder: its epoch and expiry, nothing written (I5).
        let b = before
            .as_ref()
            .ok_or_else(|| TestCaseError::fail("re-acquire of no row"))?;
        prop_assert_eq!(b.owner.as_ref(), owner.0.as_ref());
        prop_assert_eq!(b.epoch, epoch);
        prop_assert_eq!(Some(b.expires_at), x);
    } else {
        prop_assert!(
            r.get::<_, Option<bool>>(4) == Some(true) && r.get::<_, Option<bool>>(5) == Some(true),
            "a new grant's expiry is not server now + ttl"
        );
        let a = after
            .as_ref()
            .ok_or_else(|| TestCaseError::fail("grant left no row"))?;
        prop_assert_eq!(a.owner.as_ref(), owner.0.as_ref());
        prop_assert_eq!(a.epoch, epoch);
        if let Some(b) = before {
            prop_assert!(
                b.owner.is_none() || b.expired || b.owner == owner.0,
                "granted while another owner held the key"
            );
            prop_assert!(
                epoch > b.epoch,
                "epoch {epoch} not above the counter {}",
                b.epoch
            );
        }
    }
    Ok(())
}

#[test]
fn renew_with_hostile_arguments_reports_a_status_or_fails_documented_without_change() {
    let db = Db::new("hostile_renew");
    let strategy = (
        inputs::text(),
        inputs::text(),
        inputs::epoch(),
        inputs::interval(),
        inputs::setup(),
    );
    run("renew", strategy, |(key, owner, epoch, ttl, setup)| {
        db.rt.block_on(async {
            prepare(&db, &key, &owner, setup).await;
            let epoch = epoch_arg(&db, &key, epoch).await;
            let ttl_c = cast(&db, &ttl).await;
            let before = db.state(true).await;
            let row = stored(&db, &key).await;
            let res = db
                .app
                .query_one(
                    "SELECT r.status, r.expires_at, r.expires_at >= s.t0 + make_interval(secs => date_part('epoch', $4::text::interval)), \
                            r.expires_at <= clock_timestamp() + make_interval(secs => date_part('epoch', $4::text::interval)) \
                       FROM (SELECT clock_timestamp() AS t0 OFFSET 0) AS s \
                      CROSS JOIN LATERAL lease.renew(CASE WHEN s.t0 IS NOT NULL THEN $1::text END, \
                            $2::text, $3::bigint, $4::text::interval) AS r",
                    &[&key.0, &owner.0, &epoch, &ttl],
                )
                .await;
            let after = db.state(true).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[&key, &owner], &[&ttl_c], &["22023"], before == after)?;
                    if f.code == "22023" {
                        let mut expected = violations(&[
                            key.violation("key", false, false),
                            owner.violation("owner", false, false),
                        ]);
                        if epoch.is_none() {
                            expected.push("epoch must not be NULL".into());
                        }
                        check_detail(&f, &expected)?;
                    }
                }
                Ok(r) => {
                    accepted_input_was_valid(&[(&key, true), (&owner, true)], &[&ttl_c])?;
                    let epoch = epoch.ok_or_else(|| TestCaseError::fail("NULL epoch accepted"))?;
                    let status: String = r.get(0);
                    let x: Option<SystemTime> = r.get(1);
                    let owner = owner.0.as_deref().unwrap_or("");
                    let (want, may_lapse) = expected_status(&row, owner, epoch);
                    prop_assert!(
                        status == want || (may_lapse && status == "lapsed"),
                        "renew status {status}, expected {want} for {row:?}"
                    );
                    if status == "ok" {
                        prop_assert!(
                            r.get::<_, Option<bool>>(2) == Some(true)
                                && r.get::<_, Option<bool>>(3) == Some(true),
                            "renewed expiry is not server now + ttl"
                        );
                        let a = stored(&db, &key).await.expect("row");
                        prop_assert_eq!(a.epoch, epoch, "renew changed the epoch");
                        prop_assert_eq!(Some(a.expires_at), x);
                    } else {
                        prop_assert!(
                            x.is_none() && before == after,
                            "refused renew changed state"
                        );
                    }
                }
            }
            Ok(())
        })
    });
}

#[test]
fn release_and_fence_with_hostile_arguments_act_only_for_the_holder() {
    let db = Db::new("hostile_release");
    let strategy = (
        inputs::text(),
        inputs::text(),
        inputs::epoch(),
        inputs::setup(),
        any::<bool>(),
    );
    run(
        "release/fence",
        strategy,
        |(key, owner, epoch, setup, fence)| {
            db.rt.block_on(async {
                prepare(&db, &key, &owner, setup).await;
                let epoch = epoch_arg(&db, &key, epoch).await;
                let before = db.state(true).await;
                let row = stored(&db, &key).await;
                let sql = if fence {
                    "SELECT lease.fence($1::text, $2::text, $3::bigint)"
                } else {
                    "SELECT status FROM lease.release($1::text, $2::text, $3::bigint) AS r(status)"
                };
                let res = db.app.query_one(sql, &[&key.0, &owner.0, &epoch]).await;
                let after = db.state(true).await;
                let owner_s = owner.0.as_deref().unwrap_or("");
                let want = epoch.map(|e| expected_status(&row, owner_s, e));
                match res {
                    Err(e) => {
                        let f = failed(e)?;
                        let allowed: &[&str] = if fence {
                            &["22023", "LE001", "LE002", "LE003"]
                        } else {
                            &["22023"]
                        };
                        judge_failure(&f, &[&key, &owner], &[], allowed, before == after)?;
                        if key.has_nul() || owner.has_nul() {
                            return Ok(());
                        }
                        if f.code == "22023" {
                            let mut expected = violations(&[
                                key.violation("key", false, false),
                                owner.violation("owner", false, false),
                            ]);
                            if epoch.is_none() {
                                expected.push("epoch must not be NULL".into());
                            }
                            prop_assert!(
                                !expected.is_empty(),
                                "22023 for valid input ({:?})",
                                f.detail
                            );
                            check_detail(&f, &expected)?;
                        } else if let Some((want, may_lapse)) = want {
                            // fence: LE001/LE002/LE003 follow renew's statuses.
                            let code = match want {
                                "not_owner" => "LE001",
                                "lapsed" => "LE002",
                                "epoch_mismatch" => "LE003",
                                _ => "none",
                            };
                            prop_assert!(
                                f.code == code || (may_lapse && f.code == "LE002"),
                                "fence failed with {}, expected {code} for {row:?}",
                                f.code
                            );
                        }
                    }
                    Ok(r) => {
                        accepted_input_was_valid(&[(&key, true), (&owner, true)], &[])?;
                        let epoch =
                            epoch.ok_or_else(|| TestCaseError::fail("NULL epoch accepted"))?;
                        let (want, may_lapse) = want.expect("epoch given");
                        let stored_row = row.as_ref();
                        if fence {
                            prop_assert!(want == "ok", "fence passed for {row:?}");
                            prop_assert!(before == after, "fence changed the state");
                            let x: SystemTime = r.get(0);
                            prop_assert!(
                                stored_row.is_some_and(|s| s.epoch == epoch && s.expires_at == x),
                                "fence returned {x:?} for {row:?}"
                            );
                        } else {
                            let status: String = r.get(0);
                            prop_assert!(
                                status == want || (may_lapse && status == "lapsed"),
                                "release status {status}, expected {want} for {row:?}"
                            );
                            if status == "ok" {
                                let a = stored(&db, &key).await.expect("row");
                                prop_assert!(a.owner.is_none(), "released key still has an owner");
                                prop_assert_eq!(
                                    a.epoch,
                                    epoch + 1,
                                    "release must advance the counter"
                                );
                            } else {
                                prop_assert!(before == after, "refused release changed the state");
                            }
                        }
                    }
                }
                Ok(())
            })
        },
    );
}

#[test]
fn inspect_and_register_waiter_with_hostile_keys_report_the_stored_row() {
    let db = Db::new("hostile_inspect");
    let strategy = (inputs::text(), inputs::setup(), any::<bool>());
    run(
        "inspect/register_waiter",
        strategy,
        |(key, setup, register)| {
            db.rt.block_on(async {
            prepare(&db, &key, &Text(Some("reader".into())), setup).await;
            let before = db.state(false).await;
            let row = stored(&db, &key).await;
            let sql = if register {
                "SELECT held, owner, epoch, expires_at, coalesce(lapses_in > interval '0', true) \
                   FROM lease.register_waiter($1::text)"
            } else {
                "SELECT held, owner, epoch, expires_at, true FROM lease.inspect($1::text)"
            };
            let res = db.app.query(sql, &[&key.0]).await;
            let after = db.state(false).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[&key], &[], &["22023"], before == after)?;
                    if f.code == "22023" {
                        let expected = violations(&[key.violation("key", false, false)]);
                        prop_assert!(!expected.is_empty(), "22023 for a valid key");
                        check_detail(&f, &expected)?;
                    }
                }
                Ok(rows) => {
                    accepted_input_was_valid(&[(&key, true)], &[])?;
                    prop_assert!(before == after, "a read changed the lease state");
                    prop_assert!(rows.len() <= 1);
                    let Some(r) = rows.first() else {
                        prop_assert!(!register, "register_waiter always returns a row");
                        prop_assert!(row.is_none(), "inspect returned no row for {row:?}");
                        return Ok(());
                    };
                    let held: bool = r.get(0);
                    prop_assert!(r.get::<_, bool>(4), "lapses_in must be positive");
                    match &row {
                        None => prop_assert!(!held, "held without a row"),
                        Some(s) => {
                            if held {
                                prop_assert_eq!(r.get::<_, Option<String>>(1), s.owner.clone());
                                prop_assert_eq!(r.get::<_, Option<i64>>(2), Some(s.epoch));
                                prop_assert_eq!(r.get::<_, Option<SystemTime>>(3), Some(s.expires_at));
                            } else {
                                prop_assert!(s.owner.is_none() || s.expired, "reported not held: {s:?}");
                                if !register {
                                    prop_assert_eq!(r.get::<_, Option<i64>>(2), Some(s.epoch));
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        })
        },
    );
}

#[test]
fn list_with_hostile_prefixes_returns_exactly_the_keys_starting_with_its_bytes() {
    let db = Db::new("hostile_list");
    // Keys worth finding: wildcards, escapes, multibyte characters, near-limit lengths.
    let strategy = (
        proptest::collection::vec(inputs::text(), 0..4),
        inputs::text(),
        any::<prop::sample::Index>(),
    );
    run("list", strategy, |(keys, prefix, pick)| {
        db.rt.block_on(async {
            for k in keys.iter().filter(|k| k.valid()) {
                prepare(&db, k, &Text(Some("lister".into())), Setup::HeldByCaller).await;
            }
            // Half the time, the prefix is a prefix of a stored key (cut at a character boundary).
            let all: Vec<String> = db
                .su
                .query("SELECT key FROM lease.leases", &[])
                .await
                .expect("keys")
                .iter()
                .map(|r| r.get(0))
                .collect();
            let prefix = match (&prefix.0, all.is_empty()) {
                (Some(p), false) if p.len() % 2 == 0 => {
                    let k = &all[pick.index(all.len())];
                    let cut = k
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(k.chars().count() / 2)
                        .unwrap_or(0);
                    Text(Some(k[..cut].to_string()))
                }
                _ => prefix,
            };
            let before = db.state(true).await;
            let res = db
                .app
                .query(
                    "SELECT key, held, owner, epoch, expires_at FROM lease.list($1::text)",
                    &[&prefix.0],
                )
                .await;
            let after = db.state(true).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[&prefix], &[], &["22023"], before == after)?;
                    if f.code == "22023" {
                        let expected = violations(&[prefix.violation("prefix", true, true)]);
                        prop_assert!(!expected.is_empty(), "22023 for a valid prefix");
                        check_detail(&f, &expected)?;
                    }
                }
                Ok(rows) => {
                    accepted_input_was_valid(&[(&prefix, false)], &[])?;
                    prop_assert!(
                        prefix.violation("prefix", true, true).is_none(),
                        "oversize prefix accepted"
                    );
                    prop_assert!(before == after, "list changed the state");
                    let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                    let p = prefix.0.as_deref().unwrap_or("").as_bytes();
                    let mut want: Vec<String> = all
                        .iter()
                        .filter(|k| k.as_bytes().starts_with(p))
                        .cloned()
                        .collect();
                    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                    prop_assert_eq!(got, want, "list({:?})", prefix);
                    for r in &rows {
                        let held: bool = r.get(1);
                        prop_assert_eq!(held, r.get::<_, Option<String>>(2).is_some());
                        prop_assert_eq!(held, r.get::<_, Option<SystemTime>>(4).is_some());
                    }
                }
            }
            Ok(())
        })
    });
}

type PurgeRow = (Option<String>, i64, SystemTime);

async fn purge_rows(db: &Db) -> BTreeMap<String, PurgeRow> {
    db.su
        .query(
            "SELECT key, owner, epoch, expires_at FROM lease.leases",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.get::<_, String>(0), (r.get(1), r.get(2), r.get(3))))
        .collect()
}

#[test]
fn purge_with_hostile_bounds_deletes_only_idle_rows_and_raises_the_floor() {
    let db = Db::new("hostile_purge");
    let strategy = (inputs::interval(), 0u8..4);
    run("purge", strategy, |(older_than, population)| {
        db.rt.block_on(async {
            for i in 0..population {
                let held = Text(Some(format!("held/{i}")));
                prepare(&db, &held, &Text(Some("p".into())), Setup::HeldByCaller).await;
                let lapsed = Text(Some(format!("lapsed/{i}")));
                prepare(&db, &lapsed, &Text(Some("p".into())), Setup::LapsedCaller).await;
                let free = Text(Some(format!("free/{i}")));
                prepare(&db, &free, &Text(Some("p".into())), Setup::Released).await;
            }
            let c = cast(&db, &older_than).await;
            // Only the installing role may purge; app is refused whatever the argument.
            let app = db.app.query_one("SELECT lease.purge($1::text::interval)", &[&older_than]).await;
            if let Err(e) = app {
                let code = failed(e)?.code;
                prop_assert!(code == "42501" || c.is_err(), "app purge failed with {code}");
            } else {
                prop_assert!(false, "app may not purge");
            }
            let before_state = db.state(true).await;
            let before = purge_rows(&db).await;
            let res = db
                .admin
                .query_one(
                    "SELECT p.n, clock_timestamp() FROM (SELECT clock_timestamp() AS t0 OFFSET 0) AS s \
                     CROSS JOIN LATERAL lease.purge(CASE WHEN s.t0 IS NOT NULL THEN $1::text::interval END) \
                     AS p(n)",
                    &[&older_than],
                )
                .await;
            let after_state = db.state(true).await;
            let after = purge_rows(&db).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[], &[&c], &["22023"], before_state == after_state)?;
                }
                Ok(r) => {
                    accepted_input_was_valid(&[], &[&c])?;
                    let n: i64 = r.get(0);
                    let t1: SystemTime = r.get(1);
                    let deleted: Vec<_> = before.iter().filter(|(k, _)| !after.contains_key(*k)).collect();
                    prop_assert_eq!(n, deleted.len() as i64, "purge's count");
                    for (k, v) in &after {
                        prop_assert_eq!(Some(v), before.get(k), "purge changed a row it kept");
                    }
                    for (k, (owner, _, x)) in &deleted {
                        prop_assert!(owner.is_none() || *x <= t1, "purge deleted the held key {k}");
                        prop_assert!(*x < t1, "purge deleted {k}, idle only since after it ran");
                    }
                    if let Some(max) = deleted.iter().map(|(_, v)| v.1).max() {
                        let floor: i64 = db
                            .su
                            .query_one("SELECT max(floor) FROM lease.epoch_floor", &[])
                            .await
                            .expect("floor")
                            .get(0);
                        prop_assert!(floor >= max, "floor {floor} below a purged epoch {max} (I11)");
                    }
                }
            }
            Ok(())
        })
    });
}

/// The length in seconds the API judges an interval by (`date_part('epoch', ...)`); `None` for
/// NULL or an unparseable literal.
async fn seconds(db: &Db, literal: &Option<String>) -> Option<f64> {
    let lit = literal.as_ref()?;
    db.su
        .query_one("SELECT date_part('epoch', $1::text::interval)", &[lit])
        .await
        .ok()
        .map(|r| r.get(0))
}

/// A ttl the API accepts: in (0, 365 days].
fn valid_ttl(s: Option<f64>) -> bool {
    s.is_some_and(|s| s > 0.0 && s <= 31_536_000.0)
}

/// The grant history of `key` as stored, read as the superuser: (epoch, owner, holder_role, data,
/// prior_ended_by, ended_by), by epoch.
type HistoryRow = (
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

async fn stored_history(db: &Db, key: &Text) -> Vec<HistoryRow> {
    db.su
        .query(
            "SELECT epoch, owner, holder_role, data, prior_ended_by, ended_by \
               FROM lease.grant_history WHERE key = $1 ORDER BY epoch",
            &[&key.0],
        )
        .await
        .expect("read lease.grant_history")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

#[test]
fn transfer_with_hostile_arguments_hands_over_only_the_holders_grant_or_fails_documented_without_change()
 {
    let db = Db::new("hostile_transfer");
    let strategy = (
        inputs::text(),
        inputs::text(),
        inputs::epoch(),
        inputs::text(),
        inputs::interval(),
        inputs::setup(),
        prop::bool::weighted(0.4),
        any::<bool>(),
    );
    run(
        "transfer",
        strategy,
        |(key, owner, epoch, to_owner, ttl, setup, theirs, plain)| {
            db.rt.block_on(async {
                prepare(&db, &key, &owner, setup).await;
                if theirs && key.valid() && owner.valid() {
                    // The installing role takes the key for the caller's owner string, if it can:
                    // a grant of another role, which the caller may not hand over (42501).
                    db.admin
                        .query_one(
                            "SELECT acquired FROM lease.acquire($1, $2, '1 hour')",
                            &[&key.0, &owner.0],
                        )
                        .await
                        .expect("the installing role's acquire");
                }
                let other_role = key.valid()
                    && db
                        .su
                        .query_opt("SELECT holder_role FROM lease.leases WHERE key = $1", &[&key.0])
                        .await
                        .expect("holder_role")
                        .and_then(|r| r.get::<_, Option<String>>(0))
                        .is_some_and(|r| r != pglease_tests::APP);
                // Against another role's grant, present its current epoch: the one call that
                // would succeed for its own role.
                let epoch = if theirs && other_role {
                    epoch_arg(&db, &key, inputs::Epoch::Current(0)).await
                } else {
                    epoch_arg(&db, &key, epoch).await
                };
                // ... and half the time a plain successor and ttl, so that only the role is wrong.
                let (to_owner, ttl) = if theirs && other_role && plain {
                    (Text(Some("heir".into())), Some("1 hour".to_string()))
                } else {
                    (to_owner, ttl)
                };
                let ttl_c = cast(&db, &ttl).await;
                let ttl_ok = valid_ttl(seconds(&db, &ttl).await);
                let before = db.state(true).await;
                let row = stored(&db, &key).await;
                let res = db
                    .app
                    .query_one(
                        "SELECT t.status, t.epoch, t.expires_at, \
                                t.expires_at >= s.t0 + make_interval(secs => date_part('epoch', $5::text::interval)), \
                                t.expires_at <= clock_timestamp() + make_interval(secs => date_part('epoch', $5::text::interval)) \
                           FROM (SELECT clock_timestamp() AS t0 OFFSET 0) AS s \
                          CROSS JOIN LATERAL lease.transfer(CASE WHEN s.t0 IS NOT NULL THEN $1::text END, \
                                $2::text, $3::bigint, $4::text, $5::text::interval) AS t",
                        &[&key.0, &owner.0, &epoch, &to_owner.0, &ttl],
                    )
                    .await;
                let after = db.state(true).await;
                match res {
                    Err(e) => {
                        let f = failed(e)?;
                        let allowed: &[&str] = if other_role {
                            &["22023", "42501"]
                        } else {
                            &["22023"]
                        };
                        judge_failure(
                            &f,
                            &[&key, &owner, &to_owner],
                            &[&ttl_c],
                            allowed,
                            before == after,
                        )?;
                        if f.code == "42501" {
                            // Only the current grant itself, of another role, is refused so.
                            let owner_s = owner.0.as_deref().unwrap_or("");
                            let want = epoch.map(|e| expected_status(&row, owner_s, e).0);
                            prop_assert_eq!(want, Some("ok"), "42501 for {:?}", row);
                        }
                        if f.code == "22023" {
                            let mut expected = violations(&[
                                key.violation("key", false, false),
                                owner.violation("owner", false, false),
                            ]);
                            if epoch.is_none() {
                                expected.push("epoch must not be NULL".into());
                            }
                            expected.extend(to_owner.violation("to_owner", false, false));
                            prop_assert!(
                                !expected.is_empty() || !ttl_ok,
                                "22023 for valid input ({:?})",
                                f.detail
                            );
                            // Every violation named (I8), whichever arguments they are in.
                            check_detail(&f, &expected)?;
                        }
                    }
                    Ok(r) => {
                        accepted_input_was_valid(
                            &[(&key, true), (&owner, true), (&to_owner, true)],
                            &[&ttl_c],
                        )?;
                        prop_assert!(ttl_ok, "transfer accepted the ttl {ttl:?}");
                        let epoch =
                            epoch.ok_or_else(|| TestCaseError::fail("NULL epoch accepted"))?;
                        let status: String = r.get(0);
                        let (new_epoch, x): (Option<i64>, Option<SystemTime>) = (r.get(1), r.get(2));
                        let owner_s = owner.0.as_deref().unwrap_or("");
                        let (want, may_lapse) = expected_status(&row, owner_s, epoch);
                        prop_assert!(
                            !(other_role && status == "ok"),
                            "transferred a grant of another role: {row:?}"
                        );
                        prop_assert!(
                            status == want || (may_lapse && status == "lapsed"),
                            "transfer status {status}, expected {want} for {row:?}"
                        );
                        if status != "ok" {
                            prop_assert!(
                                new_epoch.is_none() && x.is_none(),
                                "a refused transfer carries no epoch or expiry"
                            );
                            prop_assert!(before == after, "a refused transfer changed the state");
                            return Ok(());
                        }
                        prop_assert!(
                            r.get::<_, Option<bool>>(3) == Some(true)
                                && r.get::<_, Option<bool>>(4) == Some(true),
                            "the successor's expiry is not server now + ttl"
                        );
                        let a = stored(&db, &key).await.expect("row");
                        prop_assert_eq!(a.owner.as_ref(), to_owner.0.as_ref());
                        prop_assert_eq!(Some(a.epoch), new_epoch);
                        prop_assert_eq!(Some(a.epoch), Some(epoch + 1), "the next epoch");
                        prop_assert_eq!(Some(a.expires_at), x);
                        // Recorded: the successor's grant, and the end of the one it replaced.
                        let h = stored_history(&db, &key).await;
                        let succ = h.iter().find(|g| Some(g.0) == new_epoch);
                        prop_assert!(
                            succ.is_some_and(|g| Some(&g.1) == to_owner.0.as_ref()
                                && g.2.as_deref() == Some(pglease_tests::APP)
                                && g.3.is_none()
                                && g.4.as_deref() == Some("transferred")),
                            "the successor's history row: {succ:?}"
                        );
                        if let Some(old) = h.iter().find(|g| g.0 == epoch) {
                            prop_assert_eq!(old.5.as_deref(), Some("transferred"));
                        }
                    }
                }
                Ok(())
            })
        },
    );
}

#[test]
fn history_with_hostile_arguments_returns_exactly_the_recorded_grants_it_selects() {
    let db = Db::new("hostile_history");
    // `since` is a duration back from the server's now: none, none at all (only current grants),
    // far enough to include every grant of a test, and out of range on both sides.
    let since = prop::sample::select(
        &[
            None,
            Some("0"),
            Some("1 day"),
            Some("3650 days"),
            Some("-1 second"),
            Some("3651 days"),
        ][..],
    );
    let max_rows = prop_oneof![
        1 => Just(None),
        4 => prop::sample::select(
            &[0i32, -1, 1, 2, 3, 100, 10_000, 10_001, i32::MIN, i32::MAX][..]
        )
        .prop_map(Some),
    ];
    let strategy = (
        inputs::text(),
        inputs::text(),
        since,
        max_rows,
        inputs::setup(),
        any::<bool>(),
    );
    run(
        "history",
        strategy,
        |(key, owner, since, max_rows, setup, hand_over)| {
            db.rt.block_on(async {
                // The key's history: the setup's grants, and half the time a transfer of the
                // caller's grant to "heir" (so that owners differ and some grants are ended).
                let caller = Text(Some(owner.0.clone().filter(|_| owner.valid()).unwrap_or_else(|| "caller".into())));
                prepare(&db, &key, &caller, setup).await;
                if hand_over && key.valid() {
                    let _ = db
                        .app
                        .query_one(
                            "SELECT lease.transfer($1, $2, (SELECT epoch FROM lease.inspect($1)), 'heir', '1 hour')",
                            &[&key.0, &caller.0],
                        )
                        .await;
                }
                let before = db.state(true).await;
                let res = db
                    .app
                    .query(
                        "SELECT epoch, owner, holder_role, ended_by, data \
                           FROM lease.history($1::text, $2::text::interval, $3::text, $4::int4)",
                        &[&key.0, &since, &owner.0, &max_rows],
                    )
                    .await;
                let after = db.state(true).await;
                match res {
                    Err(e) => {
                        let f = failed(e)?;
                        judge_failure(&f, &[&key, &owner], &[], &["22023"], before == after)?;
                        if f.code == "22023" {
                            let mut expected = violations(&[
                                key.violation("key", false, false),
                                owner.violation("owner", true, false),
                            ]);
                            if let Some(s @ ("-1 second" | "3651 days")) = since {
                                let got: String = db
                                    .su
                                    .query_one("SELECT $1::text::interval::text", &[&s])
                                    .await
                                    .expect("the interval's text")
                                    .get(0);
                                expected.push(format!("since must be in [0, 3650 days] (got {got})"));
                            }
                            match max_rows {
                                None => expected.push("max_rows must not be NULL".into()),
                                Some(n) if !(1..=10_000).contains(&n) => expected
                                    .push(format!("max_rows must be in [1, 10000] (got {n})")),
                                Some(_) => {}
                            }
                            prop_assert!(!expected.is_empty(), "22023 for valid input");
                            check_detail(&f, &expected)?;
                        }
                    }
                    Ok(rows) => {
                        accepted_input_was_valid(&[(&key, true), (&owner, false)], &[])?;
                        prop_assert!(
                            owner.violation("owner", true, false).is_none(),
                            "history accepted the owner {owner:?}"
                        );
                        let n = max_rows.ok_or_else(|| TestCaseError::fail("NULL max_rows accepted"))?;
                        prop_assert!((1..=10_000).contains(&n), "history accepted max_rows {n}");
                        prop_assert!(before == after, "a read changed the state");
                        // Every recorded grant of the key, as the superuser sees them through the
                        // function, must be the stored rows; the filters select from them.
                        let all = db
                            .su
                            .query(
                                "SELECT epoch, owner, holder_role, ended_by, data, \
                                        ended_by IS NULL \
                                        OR ended_at >= clock_timestamp() - $2::text::interval \
                                        OR (ended_at IS NULL \
                                            AND granted_at >= clock_timestamp() - $2::text::interval) \
                                   FROM lease.history($1::text, max_rows => 10000)",
                                &[&key.0, &since.unwrap_or("0")],
                            )
                            .await
                            .expect("the whole history");
                        let stored: Vec<(i64, String, Option<String>, Option<String>)> =
                            stored_history(&db, &key)
                                .await
                                .into_iter()
                                .map(|h| (h.0, h.1, h.2, h.3))
                                .collect();
                        let seen: Vec<(i64, String, Option<String>, Option<String>)> = all
                            .iter()
                            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(4)))
                            .collect();
                        prop_assert_eq!(&seen, &stored, "lease.history vs lease.grant_history");
                        type Entry = (i64, String, Option<String>, Option<String>, Option<String>);
                        let entry = |r: &PgRow| -> Entry {
                            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
                        };
                        let mut want: Vec<Entry> = all
                            .iter()
                            .filter(|r| owner.0.is_none() || r.get::<_, String>(1) == owner.0.clone().unwrap_or_default())
                            .filter(|r| since.is_none() || r.get::<_, bool>(5))
                            .map(entry)
                            .collect();
                        let skip = want.len().saturating_sub(n as usize);
                        want.drain(..skip);
                        let got: Vec<Entry> = rows.iter().map(entry).collect();
                        prop_assert_eq!(got, want, "history({:?}, {:?}, {:?}, {:?})", key, since, owner, max_rows);
                    }
                }
                Ok(())
            })
        },
    );
}

#[test]
fn configure_history_with_hostile_arguments_is_the_installers_and_changes_only_what_it_names() {
    let db = Db::new("hostile_configure_history");
    let enabled = prop_oneof![Just(None), Just(Some(true)), Just(Some(false))];
    let strategy = (enabled, inputs::interval());
    run("configure_history", strategy, |(enabled, retention)| {
        db.rt.block_on(async {
            let c = cast(&db, &retention).await;
            let secs = seconds(&db, &retention).await;
            let sql = "SELECT history, date_part('epoch', history_retention) \
                         FROM lease.configure_history($1::bool, $2::text::interval)";
            // The application role may not: 42501 whatever the arguments (once they parse).
            let before = db.state(true).await;
            let app = db.app.query_one(sql, &[&enabled, &retention]).await;
            match app {
                Ok(_) => prop_assert!(false, "the application role configured the history"),
                Err(e) => {
                    // (EXECUTE is checked before the arguments are cast: 42501 also for a literal
                    // that does not parse.)
                    let f = failed(e)?;
                    prop_assert!(
                        f.code == "42501" || (c.is_err() && CAST_ERRORS.contains(&f.code.as_str())),
                        "the application role's configure_history failed with {}",
                        f.code
                    );
                    prop_assert!(
                        before == db.state(true).await,
                        "a refused call changed the state"
                    );
                }
            }
            let config =
                "SELECT history, date_part('epoch', history_retention) FROM lease.configuration()";
            let was = db.su.query_one(config, &[]).await.expect("configuration");
            let (was_on, was_kept): (bool, f64) = (was.get(0), was.get(1));
            let res = db.admin.query_one(sql, &[&enabled, &retention]).await;
            let after = db.state(true).await;
            match res {
                Err(e) => {
                    let f = failed(e)?;
                    judge_failure(&f, &[], &[&c], &["22023"], before == after)?;
                    if f.code == "22023" {
                        check_detail(&f, &[])?;
                        prop_assert!(
                            secs.is_some_and(|s| !(1.0..=315_360_000.0).contains(&s)),
                            "22023 for the valid retention {retention:?}"
                        );
                    }
                }
                Ok(r) => {
                    accepted_input_was_valid(&[], &[&c])?;
                    if retention.is_some() {
                        prop_assert!(
                            secs.is_some_and(|s| (1.0..=315_360_000.0).contains(&s)),
                            "configure_history accepted the retention {retention:?}"
                        );
                    }
                    let (on, kept): (bool, f64) = (r.get(0), r.get(1));
                    prop_assert_eq!(on, enabled.unwrap_or(was_on), "history on");
                    prop_assert_eq!(kept, secs.unwrap_or(was_kept), "retention");
                    let now = db.su.query_one(config, &[]).await.expect("configuration");
                    prop_assert_eq!((now.get::<_, bool>(0), now.get::<_, f64>(1)), (on, kept));
                    // Only the settings changed.
                    let unrelated = |s: &[String]| -> Vec<String> {
                        s.iter()
                            .filter(|l| !l.starts_with("settings "))
                            .cloned()
                            .collect()
                    };
                    prop_assert_eq!(unrelated(&before), unrelated(&after));
                    // A grant is recorded exactly when the history is on.
                    static NEXT: std::sync::atomic::AtomicUsize =
                        std::sync::atomic::AtomicUsize::new(0);
                    let k = format!(
                        "configured/{}",
                        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    );
                    let e: i64 = db
                        .app
                        .query_one("SELECT epoch FROM lease.acquire($1, 'o', '1 hour')", &[&k])
                        .await
                        .expect("acquire")
                        .get(0);
                    let recorded = stored_history(&db, &Text(Some(k))).await;
                    prop_assert_eq!(recorded.iter().any(|h| h.0 == e), on, "recorded while on");
                }
            }
            Ok(())
        })
    });
}
