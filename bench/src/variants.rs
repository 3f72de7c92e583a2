//! Where does the lease's overhead over its floor go, and what did the 0.3.0 function bodies gain?
//! Copies of the installed `lease.acquire`, `lease.renew` and `lease.release` (read back with
//! `pg_get_functiondef`, so they are exactly what the extension installed) are created in scratch
//! schemas, each on its own copy of the table and with one thing changed, and run as W1 side by
//! side with the real functions and the floor. Variant `previous` is the previous release's bodies,
//! read back the same way from a database where that release is installed (`CREATE EXTENSION
//! pg_lease VERSION ...`, private cluster only): the before/after comparison of an optimisation.
//!
//! Variants that drop SECURITY DEFINER or the pinned search_path only *measure* what those cost;
//! they are not proposals (safety is not traded for speed).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use tokio_postgres::Client;

use crate::interleave::{Group, GroupResult, run_group};
use crate::plan::Plan;
use crate::scripts::{self, Variant};
use crate::server::{Db, leases_like};
use crate::{BoxResult, err};

/// The functions copied into each scratch schema: the three of the cycle and the internal helpers
/// they call on their error paths (so the copies raise the same errors).
const FUNCTIONS: [&str; 8] = [
    "lease._text_violations(text, text, boolean, boolean)",
    "lease._interval_violations(text, interval, boolean)",
    "lease._data_violations(text)",
    "lease._raise_invalid_input(text, text[])",
    "lease._refusal(text, text, bigint)",
    "lease.acquire(text, text, interval, interval, text)",
    "lease.renew(text, text, bigint, interval, text)",
    "lease.release(text, text, bigint)",
];

const DEFINER: &str = " SECURITY DEFINER\n";

/// An edit of one function definition: (sources, function name, definition) -> new definition.
type Edit = fn(&Sources, &str, &str) -> Result<String, String>;

/// Where edits may take definitions from besides the installed one.
struct Sources {
    /// The previous release's definitions of the functions, by name (`acquire`, ...), or why there
    /// are none.
    previous: Result<Vec<(String, String)>, String>,
}

/// The release before the current one: the version whose bodies variant `previous` runs.
pub fn previous_release() -> &'static str {
    let versions = pglease::PG_LEASE.versions();
    versions[versions.len() - 2]
}

struct Spec {
    name: &'static str,
    what: &'static str,
    edit: Edit,
}

fn replace_once(def: &str, from: &str, to: &str) -> Result<String, String> {
    if def.contains(from) {
        Ok(def.replacen(from, to, 1))
    } else {
        Err(format!("{from:?} not found"))
    }
}

fn edit_none(_: &Sources, _: &str, def: &str) -> Result<String, String> {
    Ok(def.to_string())
}

/// The previous release's definition of `lease.<func>`, in place of the installed one.
fn edit_previous(sources: &Sources, func: &str, _: &str) -> Result<String, String> {
    let previous = sources.previous.as_ref().map_err(Clone::clone)?;
    previous
        .iter()
        .find(|(name, _)| name == func)
        .map(|(_, def)| def.clone())
        .ok_or_else(|| format!("lease.{func} not in pg_lease {}", previous_release()))
}

/// The ` SET search_path TO ...` line of a definition, whatever its value.
fn set_path_line(def: &str) -> Result<&str, String> {
    let start = def
        .find(" SET search_path TO ")
        .ok_or("no SET search_path")?;
    let end = def[start..].find('\n').map_or(def.len(), |e| start + e + 1);
    Ok(&def[start..end])
}

/// `SET search_path TO 'pg_temp'`: PostgreSQL searches pg_catalog first when the path does not name
/// it, so the lookup order is the same as the installed `'pg_catalog', 'pg_temp'`.
fn edit_path_temp(_: &Sources, _: &str, def: &str) -> Result<String, String> {
    replace_once(def, set_path_line(def)?, " SET search_path TO 'pg_temp'\n")
}

fn edit_no_set(_: &Sources, _: &str, def: &str) -> Result<String, String> {
    replace_once(def, set_path_line(def)?, "")
}

fn edit_plain(sources: &Sources, _: &str, def: &str) -> Result<String, String> {
    replace_once(&edit_no_set(sources, "", def)?, DEFINER, "")
}

const SPECS: &[Spec] = &[
    Spec {
        name: "copy",
        what: "verbatim copy of the installed functions (control: should match `lease`)",
        edit: edit_none,
    },
    Spec {
        name: "previous",
        what: "the previous release's function bodies (as installed by that release), same table",
        edit: edit_previous,
    },
    Spec {
        name: "path-temp",
        what: "SET search_path TO 'pg_temp' (the same lookup order: pg_catalog is searched first when not named); measured, not adopted",
        edit: edit_path_temp,
    },
    Spec {
        name: "no-set",
        what: "measurement only: without SET search_path (unsafe for SECURITY DEFINER)",
        edit: edit_no_set,
    },
    Spec {
        name: "plain",
        what: "measurement only: neither SECURITY DEFINER nor SET (the whole cost of running as the extension owner)",
        edit: edit_plain,
    },
];

#[derive(Clone, Debug, Serialize)]
pub struct VariantsResult {
    pub variants: Vec<(String, String)>,
    /// Variants whose edit did not apply to the installed functions (and why).
    pub skipped: Vec<String>,
    /// Contract checks of each variant: what failed (empty: passed).
    pub checks: Vec<(String, Vec<String>)>,
    pub groups: Vec<GroupResult>,
}

fn schema_of(name: &str) -> String {
    let ident: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("pglease_scratch_{ident}")
}

async fn create_variant(
    c: &Client,
    defs: &[String],
    sources: &Sources,
    spec: &Spec,
) -> BoxResult<()> {
    let s = schema_of(spec.name);
    c.batch_execute(&format!(
        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s};"
    ))
    .await?;
    // The copy's primary key is named leases_pkey like the original's (acquire names it).
    let mut sql = leases_like(c, &format!("{s}.leases")).await?;
    sql.push_str(&format!(
        "CREATE TABLE {s}.epoch_floor (floor bigint NOT NULL, sentinel boolean NOT NULL DEFAULT false);
         INSERT INTO {s}.epoch_floor (floor, sentinel) VALUES (0, true);\n"
    ));
    for def in defs {
        let func = def
            .split_once("FUNCTION lease.")
            .and_then(|(_, rest)| rest.split_once('('))
            .map(|(name, _)| name.to_string())
            .unwrap_or_default();
        let edited = if func.starts_with('_') {
            def.clone()
        } else {
            (spec.edit)(sources, &func, def)
                .map_err(|e| err(format!("variant {}: {e}", spec.name)))?
        };
        let d = edited
            .replacen(
                "CREATE OR REPLACE FUNCTION lease.",
                &format!("CREATE OR REPLACE FUNCTION {s}."),
                1,
            )
            .replace("lease.leases", &format!("{s}.leases"))
            .replace("lease._", &format!("{s}._"))
            .replace("lease.epoch_floor", &format!("{s}.epoch_floor"));
        sql.push_str(&d);
        sql.push_str(";\n");
    }
    c.batch_execute(&sql).await.map_err(|e| {
        let detail = e
            .as_db_error()
            .map(|d| format!("{}: {}", d.code().code(), d.message()))
            .unwrap_or_else(|| e.to_string());
        err(format!("creating variant {}: {detail}", spec.name))
    })?;
    Ok(())
}

/// Checks that a variant still behaves as the contract says on the paths the edit touched:
/// the cycle works, invalid input raises 22023 naming every violation, refusals keep their
/// statuses. Returns what failed.
async fn sanity(c: &Client, s: &str) -> Vec<String> {
    let mut failed = Vec::new();
    let q = |sql: String| async move { c.simple_query(&sql).await };
    let expect_22023 =
        |r: Result<Vec<tokio_postgres::SimpleQueryMessage>, tokio_postgres::Error>,
         detail: &str,
         what: &str,
         failed: &mut Vec<String>| {
            match r {
                Err(e) => match e.as_db_error() {
                    Some(db)
                        if db.code().code() == "22023"
                            && db.detail().is_some_and(|d| d.contains(detail)) => {}
                    Some(db) => failed.push(format!(
                        "{what}: {} {} {:?}",
                        db.code().code(),
                        db.message(),
                        db.detail()
                    )),
                    None => failed.push(format!("{what}: {e}")),
                },
                Ok(_) => failed.push(format!("{what}: no error")),
            }
        };
    let one = |r: Result<Vec<tokio_postgres::SimpleQueryMessage>, tokio_postgres::Error>| -> Option<String> {
        r.ok()?.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
    };
    let epoch = one(q(format!(
        "SELECT epoch FROM {s}.acquire('sanity', 'o', interval '1 minute')"
    ))
    .await);
    let Some(epoch) = epoch else {
        return vec!["acquire did not grant".into()];
    };
    let checks = [
        (
            format!("SELECT status FROM {s}.renew('sanity', 'o', {epoch}, interval '1 minute')"),
            "ok",
        ),
        (
            format!("SELECT status FROM {s}.renew('sanity', 'x', {epoch}, interval '1 minute')"),
            "not_owner",
        ),
        (
            format!(
                "SELECT status FROM {s}.renew('sanity', 'o', {epoch} + 1, interval '1 minute')"
            ),
            "epoch_mismatch",
        ),
        (
            format!("SELECT status FROM {s}.release('sanity', 'o', {epoch} + 1)"),
            "epoch_mismatch",
        ),
        (
            format!("SELECT status FROM {s}.release('nope', 'o', 1)"),
            "not_owner",
        ),
        (
            format!("SELECT status FROM {s}.release('sanity', 'o', {epoch})"),
            "ok",
        ),
    ];
    for (sql, want) in checks {
        let got = one(q(sql.clone()).await);
        if got.as_deref() != Some(want) {
            failed.push(format!("{sql}: {got:?}, want {want}"));
        }
    }
    let long = "x".repeat(1025);
    expect_22023(
        q(format!("SELECT {s}.release('', NULL, NULL)")).await,
        "key must not be empty; owner must not be NULL; epoch must not be NULL",
        "release invalid",
        &mut failed,
    );
    expect_22023(
        q(format!("SELECT {s}.release('sanity', '{long}', 1)")).await,
        "owner must be at most 1024 bytes (got 1025)",
        "release long owner",
        &mut failed,
    );
    expect_22023(
        q(format!("SELECT {s}.renew('', 'o', 1, interval '1 minute')")).await,
        "key must not be empty",
        "renew empty key",
        &mut failed,
    );
    expect_22023(
        q(format!("SELECT {s}.renew('sanity', 'o', 1, interval '0')")).await,
        "ttl must be positive",
        "renew zero ttl",
        &mut failed,
    );
    expect_22023(
        q(format!(
            "SELECT {s}.renew(NULL, '', NULL, interval '400 days')"
        ))
        .await,
        "key must not be NULL; owner must not be empty; epoch must not be NULL; ttl must be at most 365 days",
        "renew all invalid",
        &mut failed,
    );
    failed
}

fn w1_script(schema: &str, name: &'static str, what: &'static str) -> Variant {
    let base = scripts::w1_lease();
    Variant {
        name,
        what,
        script: base.script.replace("lease.", &format!("{schema}.")),
    }
}

/// The definitions of [`FUNCTIONS`] as installed in the database `c` is connected to.
async fn installed_definitions(c: &Client) -> BoxResult<Vec<String>> {
    let mut defs = Vec::new();
    for f in FUNCTIONS {
        let row = c
            .query_one(
                &format!("SELECT pg_get_functiondef('{f}'::regprocedure)"),
                &[],
            )
            .await?;
        defs.push(row.get::<_, String>(0));
    }
    Ok(defs)
}

/// The previous release's definitions of the public functions of the cycle, by name, from
/// `previous` (a database where that release is installed).
async fn previous_definitions(previous: Option<&Db>) -> Result<Vec<(String, String)>, String> {
    let db = previous.ok_or_else(|| {
        format!(
            "pg_lease {} is installed only in a private cluster",
            previous_release()
        )
    })?;
    let c = db.connect(false).await.map_err(|e| e.to_string())?;
    let defs = installed_definitions(&c).await.map_err(|e| e.to_string())?;
    Ok(defs
        .into_iter()
        .filter_map(|def| {
            let name = def
                .split_once("FUNCTION lease.")
                .and_then(|(_, rest)| rest.split_once('('))
                .map(|(name, _)| name.to_string())?;
            (!name.starts_with('_')).then_some((name, def))
        })
        .collect())
}

/// Runs the variants. `previous`: a database with the previous release installed, if any.
pub async fn run(
    pgbench: &Path,
    db: &Db,
    previous: Option<&Db>,
    plan: &Plan,
) -> BoxResult<VariantsResult> {
    let c = db.connect(false).await?;
    let defs = installed_definitions(&c).await?;
    let sources = Sources {
        previous: previous_definitions(previous).await,
    };
    let mut variants = vec![scripts::w1_lease()];
    let mut skipped = Vec::new();
    let mut checks = Vec::new();
    for spec in SPECS {
        match create_variant(&c, &defs, &sources, spec).await {
            Ok(()) => {
                let problems = sanity(&c, &schema_of(spec.name)).await;
                if !problems.is_empty() {
                    eprintln!(
                        "  variant {}: contract check failed: {problems:?}",
                        spec.name
                    );
                }
                checks.push((spec.name.to_string(), problems));
                variants.push(w1_script(&schema_of(spec.name), spec.name, spec.what));
            }
            Err(e) => {
                eprintln!("  variant {} skipped: {e}", spec.name);
                skipped.push(format!("{}: {e}", spec.name));
            }
        }
    }
    variants.push(scripts::w1_floor());
    let mut groups = Vec::new();
    for &clients in plan
        .clients
        .iter()
        .filter(|&&c| c <= if plan.quick { 1 } else { 4 })
    {
        let g = Group {
            workload: "W1-variants".into(),
            sync_commit: false,
            clients,
            variants: variants.clone(),
            baseline: "floor",
            rounds: plan.variant_rounds,
            mixed_rounds: plan.variant_mixed_rounds,
            seconds: plan.variant_seconds,
            warmup_seconds: plan.warmup_seconds,
        };
        groups.push(run_group(pgbench, &db.conninfo(), &g).await?);
    }
    Ok(VariantsResult {
        variants: variants
            .iter()
            .map(|v| (v.name.to_string(), v.what.to_string()))
            .collect(),
        skipped,
        checks,
        groups,
    })
}

pub fn markdown(w: &mut String, v: &VariantsResult) {
    let _ = writeln!(
        w,
        "## Function-body variants (W1, synchronous_commit=off; scratch schemas, each on its own copy of the table)\n"
    );
    for (name, what) in &v.variants {
        let _ = writeln!(w, "- `{name}`: {what}");
    }
    for (name, problems) in &v.checks {
        if !problems.is_empty() {
            let _ = writeln!(
                w,
                "- `{name}` fails the contract checks ({} of them), as expected for a measurement-only variant",
                problems.len()
            );
        }
    }
    for s in &v.skipped {
        let _ = writeln!(w, "- skipped: {s}");
    }
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "Mixed runs (all variants in one pgbench run, picked per transaction); mean transaction time and ratios per run, median (min–max):\n"
    );
    let _ = writeln!(
        w,
        "| clients | variant | mean | p50 | ratio to floor | ratio to lease | contract checks |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for g in &v.groups {
        for var in &g.variants {
            let to_floor = if var.name == "floor" {
                "1".to_string()
            } else {
                g.ratio(&var.name, "floor")
                    .map_or("–".into(), |r| r.mixed_mean.ratio_text())
            };
            let to_lease = if var.name == "lease" {
                "1".to_string()
            } else {
                // ratios are stored as lease / x; invert for x / lease.
                g.ratio("lease", &var.name).map_or("–".into(), |r| {
                    let inv: Vec<f64> = r.mixed_mean.values.iter().map(|x| 1.0 / x).collect();
                    crate::stats::Spread::of(&inv).ratio_text()
                })
            };
            let check = match v.checks.iter().find(|(n, _)| *n == var.name) {
                Some((_, p)) if p.is_empty() => "pass",
                Some(_) => "fail",
                None => "",
            };
            let (mean, p50) = var
                .mixed_latency
                .as_ref()
                .map_or((f64::NAN, 0), |l| (l.mean_us, l.p50_us));
            let _ = writeln!(
                w,
                "| {} | {} | {:.0} µs | {} µs | {} | {} | {} |",
                g.clients, var.name, mean, p50, to_floor, to_lease, check
            );
        }
    }
    let _ = writeln!(w);
}
