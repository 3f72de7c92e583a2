//! A lease belongs to the database role that acquired it (pg_lease 0.8.0): another role's renew
//! and release are refused and the CLI says what to do; `status` shows the role and what it may do;
//! `force-release` is the operator's way out.

use serde_json::Value;

use crate::common::{Case, cluster, expect_eq, run_sql};

/// A login role unrelated to the cases' superuser, and the case's URL as that role.
fn other_role_url(case: &Case) -> String {
    run_sql(
        &case.url,
        "DO $$ BEGIN CREATE ROLE e2e_other LOGIN PASSWORD 'e2e-other';
         EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    );
    let prefix = format!("postgresql://postgres:{}@", cluster().password());
    assert!(case.url.starts_with(&prefix), "{}", case.url);
    case.url
        .replacen(&prefix, "postgresql://e2e_other:e2e-other@", 1)
}

#[test]
fn another_role_cannot_renew_or_release_and_an_operator_force_releases() {
    let case = Case::new("roles_force_release");
    let other = other_role_url(&case);
    let acquired = case
        .pglease(["acquire", "-k", "k", "-o", "w", "-t", "1h", "--json"])
        .expect_code(0)
        .json();
    let epoch = acquired["epoch"].as_i64().unwrap().to_string();

    for verb in ["renew", "release"] {
        let mut args = vec![verb, "-k", "k", "-o", "w", "-e", &epoch];
        if verb == "renew" {
            args.extend(["-t", "1h"]);
        }
        let out = case.pglease(args).env("DATABASE_URL", &other).output();
        out.expect_code(1);
        assert!(
            out.stderr().contains("SQLSTATE 42501") && out.stderr().contains("force-release"),
            "{verb}: {}",
            out.report()
        );
    }

    // The other role's status names it, and it may use leases but not end others' grants.
    let status = case
        .pglease(["status", "--json"])
        .env("DATABASE_URL", &other)
        .expect_code(0)
        .json();
    expect_eq(
        "status.role.name",
        &Value::from("e2e_other"),
        &status["role"]["name"],
    );
    let may: Vec<&str> = status["role"]["may"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        may.contains(&"leases") && !may.contains(&"force-release"),
        "{may:?}"
    );
    let refused = case
        .pglease(["force-release", "-k", "k"])
        .env("DATABASE_URL", &other)
        .output();
    refused.expect_code(1);
    assert!(
        refused.stderr().contains("SQLSTATE 42501"),
        "{}",
        refused.report()
    );

    // The installing role (here the superuser) ends the grant; the holder is refused afterwards.
    let ended = case
        .pglease(["force-release", "-k", "k", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "force-release.ended_epoch",
        &Value::from(epoch.parse::<i64>().unwrap()),
        &ended["ended_epoch"],
    );
    case.pglease(["renew", "-k", "k", "-o", "w", "-e", &epoch, "-t", "1h"])
        .expect_code(4);
    let again = case
        .pglease(["force-release", "-k", "k", "--json"])
        .expect_code(0)
        .json();
    expect_eq("nothing left to end", &Value::Null, &again["ended_epoch"]);
}

#[test]
fn a_queue_is_used_by_the_roles_granted_it_with_queue_grant_and_revoke() {
    let case = Case::new("roles_queue_grant");
    case.pglease(["install", "pg_lease_queue"]).expect_code(0);
    let other = other_role_url(&case);
    case.pglease(["queue", "create", "jobs", "--partitions", "1"])
        .expect_code(0);
    let send = ["queue", "send", "jobs", "--key", "k", "{}"];
    let refused = case.pglease(send).env("DATABASE_URL", &other).output();
    refused.expect_code(1);
    assert!(
        refused.stderr().contains("SQLSTATE 42501") && refused.stderr().contains("queue grant"),
        "{}",
        refused.report()
    );
    let granted = case
        .pglease(["queue", "grant", "jobs", "e2e_other", "produce", "--json"])
        .expect_code(0)
        .json();
    expect_eq("grant.granted", &Value::Bool(true), &granted["granted"]);
    case.pglease(send)
        .env("DATABASE_URL", &other)
        .expect_code(0);
    // Granting is the installing role's.
    case.pglease(["queue", "grant", "jobs", "e2e_other", "consume"])
        .env("DATABASE_URL", &other)
        .expect_code(1);
    case.pglease(["queue", "revoke", "jobs", "e2e_other", "produce"])
        .expect_code(0);
    case.pglease(send)
        .env("DATABASE_URL", &other)
        .expect_code(1);
    // An unknown role or privilege is refused before anything.
    case.pglease(["queue", "grant", "jobs", "no_such_role", "produce"])
        .expect_code(1);
    case.pglease(["queue", "grant", "jobs", "e2e_other", "read"])
        .expect_code(2);
}
