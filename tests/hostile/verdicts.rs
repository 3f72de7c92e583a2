//! What the property tests share: the seeded runner, and the verdicts on a call — its failure's
//! SQLSTATE and DETAIL, the stored row it acted on, the state it must leave unchanged, the status it
//! must report (`props.rs` holds the properties themselves).

use std::fmt::Debug;
use std::time::SystemTime;

use pglease_tests::lapse::await_lapsed;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::inputs::{Epoch, Setup, Text};
use crate::{Db, cases, seed};

/// SQLSTATEs with which PostgreSQL rejects an interval literal at the `::interval` cast.
pub(crate) const CAST_ERRORS: [&str; 3] = ["22007", "22008", "22015"];

/// Runs `check` on `cases()` generated inputs with a seeded generator; panics with the seed and
/// the (shrunk) failing input.
pub(crate) fn run<S>(test: &str, strategy: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let seed = seed(test);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    if let Err(e) = runner.run(&strategy, check) {
        panic!("{test}: seed {seed} (PGLEASE_HOSTILE_SEED={seed}): {e}");
    }
}

/// A failed call: its SQLSTATE and DETAIL.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) code: String,
    pub(crate) detail: Option<String>,
}

pub(crate) fn failed(e: tokio_postgres::Error) -> Result<Failed, TestCaseError> {
    match e.as_db_error() {
        Some(db) => Ok(Failed {
            code: db.code().code().to_string(),
            detail: db.detail().map(str::to_string),
        }),
        None => Err(TestCaseError::fail(format!("not a server error: {e}"))),
    }
}

/// A lease row as stored, with whether it had expired when read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stored {
    pub(crate) owner: Option<String>,
    pub(crate) epoch: i64,
    pub(crate) expires_at: SystemTime,
    pub(crate) expired: bool,
}

pub(crate) async fn stored(db: &Db, key: &Text) -> Option<Stored> {
    if !key.valid() {
        return None;
    }
    db.su
        .query_opt(
            "SELECT owner, epoch, expires_at, expires_at <= clock_timestamp() \
               FROM lease.leases WHERE key = $1",
            &[&key.0],
        )
        .await
        .expect("read row")
        .map(|r| Stored {
            owner: r.get(0),
            epoch: r.get(1),
            expires_at: r.get(2),
            expired: r.get(3),
        })
}

/// What the server makes of an interval literal: `Ok(None)` for NULL, `Ok(Some((positive,
/// below_1ms)))`, or the SQLSTATE of the cast error.
pub(crate) async fn cast(
    db: &Db,
    literal: &Option<String>,
) -> Result<Option<(bool, bool)>, String> {
    let Some(lit) = literal else {
        return Ok(None);
    };
    match db
        .su
        .query_one(
            "SELECT date_part('epoch', $1::text::interval) > 0, \
                    date_part('epoch', $1::text::interval) < 0.001",
            &[lit],
        )
        .await
    {
        Ok(r) => Ok(Some((r.get(0), r.get(1)))),
        Err(e) => Err(e.code().map_or("?".into(), |c| c.code().to_string())),
    }
}

/// Puts a valid key into the requested state before the call (through the API, as `app`).
pub(crate) async fn prepare(db: &Db, key: &Text, owner: &Text, setup: Setup) {
    if !key.valid() {
        return;
    }
    let caller = if owner.valid() {
        owner.0.clone().expect("valid")
    } else {
        "caller".to_string()
    };
    let acquire = |o: String, ttl: &'static str| async move {
        db.app
            .query_one(
                "SELECT epoch FROM lease.acquire($1, $2, $3::text::interval)",
                &[&key.0, &o, &ttl],
            )
            .await
            .expect("setup acquire")
            .get::<_, Option<i64>>(0)
    };
    match setup {
        Setup::AsIs => {}
        Setup::HeldByOther => {
            acquire("other-owner".into(), "1 hour").await;
        }
        Setup::HeldByCaller => {
            acquire(caller, "1 hour").await;
        }
        Setup::LapsedCaller => {
            // Only a grant made just now lapses (a re-acquire of the caller's own lease keeps its
            // expiry; another owner's lease is refused): wait for that lapse on the server clock.
            let fresh: Option<bool> = db
                .app
                .query_one(
                    "SELECT expires_at <= clock_timestamp() + interval '1 millisecond' \
                       FROM lease.acquire($1, $2, '1 millisecond')",
                    &[&key.0, &caller],
                )
                .await
                .expect("setup acquire")
                .get(0);
            if fresh == Some(true) {
                await_lapsed(&db.app, key.0.as_deref().expect("valid")).await;
            }
        }
        Setup::Released => {
            if let Some(e) = acquire(caller.clone(), "1 hour").await {
                db.app
                    .query_one("SELECT lease.release($1, $2, $3)", &[&key.0, &caller, &e])
                    .await
                    .expect("setup release");
            }
        }
    }
}

pub(crate) async fn epoch_arg(db: &Db, key: &Text, e: Epoch) -> Option<i64> {
    match e {
        Epoch::Null => None,
        Epoch::Fixed(v) => Some(v),
        Epoch::Current(off) => Some(
            stored(db, key)
                .await
                .map_or(1, |s| s.epoch)
                .saturating_add(off),
        ),
    }
}

/// True if `f` is one of the DETAIL fragments SEMANTICS.md §6 documents.
pub(crate) fn documented(f: &str) -> bool {
    for n in ["key", "owner", "prefix", "to_owner", "after"] {
        if f == format!("{n} must not be NULL") || f == format!("{n} must not be empty") {
            return true;
        }
        if let Some(rest) = f.strip_prefix(&format!("{n} must be at most 1024 bytes (got "))
            && rest
                .strip_suffix(')')
                .is_some_and(|d| d.parse::<u64>().is_ok())
        {
            return true;
        }
    }
    if f == "epoch must not be NULL"
        || f == "max_rows must not be NULL"
        || f == "state must be held, lapsed or free"
    {
        return true;
    }
    if let Some(rest) = f.strip_prefix("max_rows must be in [1, 1000] (got ")
        && rest
            .strip_suffix(')')
            .is_some_and(|d| d.parse::<i64>().is_ok())
    {
        return true;
    }
    if let Some(rest) = f.strip_prefix("max_rows must be in [1, 10000] (got ")
        && rest
            .strip_suffix(')')
            .is_some_and(|d| d.parse::<i64>().is_ok())
    {
        return true;
    }
    if (f.starts_with("retention must be in [1 second, 3650 days] (got ")
        || f.starts_with("since must be in [0, 3650 days] (got "))
        && f.ends_with(')')
    {
        return true;
    }
    ["ttl", "wait", "older_than", "expiring_within"]
        .iter()
        .any(|n| {
            [
                "must not be NULL",
                "must be finite",
                "must be positive",
                "must be at most 365 days",
                "must not be negative",
            ]
            .iter()
            .any(|s| f == format!("{n} {s}"))
        })
}

/// A 22023's DETAIL: only documented fragments, including every `expected` one, and never empty.
pub(crate) fn check_detail(f: &Failed, expected: &[String]) -> Result<(), TestCaseError> {
    let detail = f.detail.clone().unwrap_or_default();
    let body = detail.strip_suffix('.').unwrap_or(&detail);
    let named: Vec<&str> = body.split("; ").collect();
    for n in &named {
        prop_assert!(
            documented(n),
            "undocumented DETAIL fragment {n:?} in {detail:?}"
        );
    }
    for e in expected {
        prop_assert!(
            named.contains(&e.as_str()),
            "DETAIL {detail:?} does not name {e:?}"
        );
    }
    Ok(())
}

/// The common verdict on a failed call: NUL text and unparseable intervals fail before the function
/// runs; otherwise the SQLSTATE must be one of `allowed`. In every case the state is unchanged.
pub(crate) fn judge_failure(
    f: &Failed,
    texts: &[&Text],
    casts: &[&Result<Option<(bool, bool)>, String>],
    allowed: &[&str],
    unchanged: bool,
) -> Result<(), TestCaseError> {
    prop_assert!(
        unchanged,
        "state changed by a call that failed with {}",
        f.code
    );
    if texts.iter().any(|t| t.has_nul()) {
        prop_assert_eq!(&f.code, "22021", "text with NUL must fail when received");
        return Ok(());
    }
    let cast_errors: Vec<&String> = casts.iter().filter_map(|c| c.as_ref().err()).collect();
    if !cast_errors.is_empty() {
        prop_assert!(
            CAST_ERRORS.contains(&f.code.as_str()) && cast_errors.contains(&&f.code),
            "an unparseable interval must fail at the cast with its SQLSTATE {cast_errors:?}, got {}",
            f.code
        );
        return Ok(());
    }
    prop_assert!(
        allowed.contains(&f.code.as_str()),
        "undocumented SQLSTATE {} ({:?})",
        f.code,
        f.detail
    );
    Ok(())
}

/// A successful call must not have been given input the API rejects.
pub(crate) fn accepted_input_was_valid(
    texts: &[(&Text, bool)],
    casts: &[&Result<Option<(bool, bool)>, String>],
) -> Result<(), TestCaseError> {
    for (t, must_be_valid) in texts {
        prop_assert!(!t.has_nul(), "text with NUL was accepted");
        if *must_be_valid {
            prop_assert!(t.valid(), "invalid text {t:?} was accepted");
        }
    }
    for c in casts {
        prop_assert!(c.is_ok(), "an unparseable interval was accepted");
    }
    Ok(())
}

pub(crate) fn positive(c: &Result<Option<(bool, bool)>, String>) -> bool {
    matches!(c, Ok(Some((true, _))))
}

pub(crate) fn violations(parts: &[Option<String>]) -> Vec<String> {
    parts.iter().flatten().cloned().collect()
}

/// The status renew/release must report for `stored`, given the caller and epoch; `None` when the
/// lease may lapse between the read and the call (then `lapsed` is also correct).
pub(crate) fn expected_status(s: &Option<Stored>, owner: &str, epoch: i64) -> (&'static str, bool) {
    match s {
        None => ("not_owner", false),
        Some(s) if s.owner.as_deref() != Some(owner) => ("not_owner", false),
        Some(s) if s.expired => ("lapsed", false),
        Some(s) if s.epoch != epoch => ("epoch_mismatch", true),
        Some(_) => ("ok", true),
    }
}
