//! `--json` output parses, with the documented fields, for every command that prints data.

use serde_json::Value;

use crate::common::{Case, expect_eq};

#[test]
fn every_data_command_prints_one_json_document() {
    let case = Case::new("json");
    let acquired = case
        .pglease(["acquire", "-k", "j", "-o", "me", "-t", "1m", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "acquire.acquired",
        &Value::Bool(true),
        &acquired["acquired"],
    );
    expect_eq("acquire.epoch", &Value::from(1), &acquired["epoch"]);
    assert!(acquired["expires_at"].is_string(), "{acquired}");

    let refused = case
        .pglease(["acquire", "-k", "j", "-o", "you", "-t", "1m", "--json"])
        .expect_code(3)
        .json();
    expect_eq(
        "refused.acquired",
        &Value::Bool(false),
        &refused["acquired"],
    );
    expect_eq(
        "refused.holder.owner",
        &Value::from("me"),
        &refused["holder"]["owner"],
    );

    let renewed = case
        .pglease([
            "renew", "-k", "j", "-o", "me", "-e", "1", "-t", "1m", "--json",
        ])
        .expect_code(0)
        .json();
    expect_eq("renew.status", &Value::from("ok"), &renewed["status"]);

    let inspected = case
        .pglease(["inspect", "-k", "j", "--json"])
        .expect_code(0)
        .json();
    expect_eq("inspect.state", &Value::from("held"), &inspected["state"]);
    expect_eq("inspect.owner", &Value::from("me"), &inspected["owner"]);
    let unknown = case
        .pglease(["inspect", "-k", "never", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "inspect(unknown).state",
        &Value::from("unknown"),
        &unknown["state"],
    );

    let listed = case.pglease(["list", "--json"]).expect_code(0).json();
    expect_eq("list length", 1, listed.as_array().map_or(0, Vec::len));
    expect_eq("list[0].key", &Value::from("j"), &listed[0]["key"]);
    let none = case
        .pglease(["list", "zzz", "--json"])
        .expect_code(0)
        .json();
    expect_eq("list(zzz)", &Value::Array(vec![]), &none);

    let released = case
        .pglease(["release", "-k", "j", "-o", "me", "-e", "1", "--json"])
        .expect_code(0)
        .json();
    expect_eq("release.status", &Value::from("ok"), &released["status"]);

    let purged = case
        .pglease(["purge", "--older-than", "0s", "--json"])
        .expect_code(0)
        .json();
    expect_eq("purge.purged", &Value::from(1), &purged["purged"]);

    let installed = case.pglease(["install", "--json"]).expect_code(0).json();
    expect_eq(
        "install.extension",
        &Value::from("pg_lease"),
        &installed["extension"],
    );
    expect_eq("install.via", &Value::from("extension"), &installed["via"]);
    expect_eq(
        "install.changed",
        &Value::Bool(false),
        &installed["changed"],
    );

    let status = case.pglease(["status", "--json"]).expect_code(0).json();
    expect_eq(
        "status.pg_lease.version",
        &Value::from(pglease::VERSION),
        &status["pg_lease"]["version"],
    );
    expect_eq(
        "status.leases.total",
        &Value::from(0),
        &status["leases"]["total"],
    );
    assert!(status["server_version"].is_string(), "{status}");
}

#[test]
fn status_counts_held_lapsed_and_free_leases() {
    let case = Case::new("counts");
    case.pglease(["acquire", "-k", "held", "-o", "me", "-t", "1m"])
        .expect_code(0);
    case.pglease(["acquire", "-k", "lapsed", "-o", "me", "-t", "1ms"])
        .expect_code(0);
    case.pglease(["acquire", "-k", "free", "-o", "me", "-t", "1m"])
        .expect_code(0);
    case.pglease(["release", "-k", "free", "-o", "me", "-e", "1"])
        .expect_code(0);
    let status = case.pglease(["status", "--json"]).expect_code(0).json();
    let leases = &status["leases"];
    expect_eq(
        "status.leases",
        (Some(3), Some(1), Some(1), Some(1)),
        (
            leases["total"].as_i64(),
            leases["held"].as_i64(),
            leases["lapsed"].as_i64(),
            leases["free"].as_i64(),
        ),
    );
}

#[test]
fn install_schema_only_installs_the_queue_after_pg_lease_without_extension_files() {
    let cluster = crate::common::cluster();
    let db = "schema_only_queue";
    cluster.create_database(db).unwrap();
    let case = Case::new("schema_only_queue");
    let url = cluster.url(db);
    let out = case
        .bare([
            "install",
            "pg_lease_queue",
            "--schema-only",
            "--json",
            "--database-url",
            &url,
        ])
        .expect_code(0)
        .json();
    expect_eq(
        "install.extension",
        &Value::from("pg_lease_queue"),
        &out["extension"],
    );
    expect_eq("install.via", &Value::from("script"), &out["via"]);
    // pg_lease came first, by script too: the lease commands work on that database.
    case.bare(["acquire", "-k", "s", "-t", "1m", "--database-url", &url])
        .expect_code(0);
    let status = case
        .bare(["status", "--json", "--database-url", &url])
        .expect_code(0)
        .json();
    expect_eq(
        "status.pg_lease.via",
        &Value::from("script"),
        &status["pg_lease"]["via"],
    );
}

#[test]
fn install_schema_only_installs_without_the_extension() {
    let cluster = crate::common::cluster();
    let db = "schema_only_target";
    cluster.create_database(db).unwrap();
    let case = Case::new("schema_only");
    let url = cluster.url(db);
    let out = case
        .bare(["install", "--schema-only", "--json", "--database-url", &url])
        .expect_code(0)
        .json();
    expect_eq("install.via", &Value::from("script"), &out["via"]);
    expect_eq("install.changed", &Value::Bool(true), &out["changed"]);
    case.bare(["acquire", "-k", "s", "-t", "1m", "--database-url", &url])
        .expect_code(0);
}
