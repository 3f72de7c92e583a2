//! Every function works the same under every legal session setting (audit finding 4 of the
//! hardening issue: `lease.list` failed to compile under `standard_conforming_strings = off`).
//!
//! PL/pgSQL compiles a function, and parses its SQL, on its first call in a session, under that
//! session's settings; so each setting gets fresh sessions in which it is set before any call. The
//! settings are those a session may change and that change how SQL is parsed, resolved, planned,
//! executed or printed. Under each, the whole API runs with the same expected results as under the
//! defaults (the search_path suite's exercise).

use pglease_tests::{ADMIN, APP, server};

use crate::search_path::exercise_api;

/// `(setting, value)`: every one a session may set, none of them documented as unsupported.
/// (REPEATABLE READ and SERIALIZABLE are documented as unsupported for a blocking acquire; the
/// settings of the caller's search_path are the search_path suite's.)
const SETTINGS: &[(&str, &str)] = &[
    ("standard_conforming_strings", "off"),
    ("escape_string_warning", "off"),
    ("backslash_quote", "on"),
    ("transform_null_equals", "on"),
    ("quote_all_identifiers", "on"),
    ("array_nulls", "off"),
    ("plpgsql.variable_conflict", "use_variable"),
    ("plpgsql.variable_conflict", "use_column"),
    ("plpgsql.extra_warnings", "all"),
    ("plpgsql.extra_errors", "all"),
    ("plpgsql.print_strict_params", "on"),
    ("plpgsql.check_asserts", "off"),
    ("DateStyle", "SQL, DMY"),
    ("DateStyle", "German"),
    ("IntervalStyle", "sql_standard"),
    ("IntervalStyle", "iso_8601"),
    ("TimeZone", "Pacific/Chatham"),
    ("TimeZone", "America/St_Johns"),
    ("extra_float_digits", "-15"),
    ("bytea_output", "escape"),
    ("xmloption", "document"),
    ("client_min_messages", "debug5"),
    ("default_transaction_read_only", "off"),
    ("default_transaction_deferrable", "on"),
    ("session_replication_role", "replica"),
    ("row_security", "off"),
    ("check_function_bodies", "off"),
    ("plan_cache_mode", "force_generic_plan"),
    ("plan_cache_mode", "force_custom_plan"),
    ("enable_indexscan", "off"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_hashjoin", "off"),
    ("jit", "on"),
    ("jit_above_cost", "0"),
    ("cpu_tuple_cost", "1000"),
    ("random_page_cost", "0.001"),
    ("work_mem", "64kB"),
    ("temp_buffers", "100"),
    ("max_parallel_workers_per_gather", "0"),
    ("parallel_setup_cost", "0"),
    ("debug_parallel_query", "on"),
    ("force_parallel_mode", "on"),
    ("constraint_exclusion", "on"),
    ("cursor_tuple_fraction", "1"),
    ("geqo_threshold", "2"),
    ("from_collapse_limit", "1"),
    ("join_collapse_limit", "1"),
    ("synchronous_commit", "off"),
    ("lock_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("statement_timeout", "0"),
    ("search_path", "pg_catalog"),
    ("search_path", ""),
    ("lc_messages", "C"),
    ("lc_monetary", "C"),
    ("lc_numeric", "C"),
    ("lc_time", "C"),
    ("default_table_access_method", "heap"),
    ("default_toast_compression", "pglz"),
    ("gin_fuzzy_search_limit", "1"),
    ("application_name", "'; DROP TABLE lease.leases; --"),
];

#[tokio::test]
async fn every_function_behaves_the_same_under_every_legal_session_setting() {
    let s = server();
    let db = s.fresh_db_with_extension("settings");
    let mut applied = 0;
    for (i, (name, value)) in SETTINGS.iter().enumerate() {
        let app = s.connect_as(&db, APP).await;
        let admin = s.connect_as(&db, ADMIN).await;
        let set = format!("SET {name} = '{}'", value.replace('\'', "''"));
        let set = if value.is_empty() {
            format!("SET {name} = ''")
        } else {
            set
        };
        match app.batch_execute(&set).await {
            Ok(()) => {}
            // A setting this server version does not have (e.g. debug_parallel_query before 16,
            // force_parallel_mode from 16 on): nothing to test under it here.
            Err(e) if e.code().map(|c| c.code()) == Some("42704") => {
                eprintln!("settings: {name} does not exist on this server; skipped");
                continue;
            }
            // Only a superuser may set it: not a setting an application's session can have.
            Err(e) if e.code().map(|c| c.code()) == Some("42501") => {
                eprintln!("settings: {name} is not settable by an application role; skipped");
                continue;
            }
            Err(e) => panic!("{set}: {e:?}"),
        }
        admin
            .batch_execute(&set)
            .await
            .unwrap_or_else(|e| panic!("{set} (installing role): {e}"));
        applied += 1;
        // A panic names the setting (exercise_api asserts every result).
        let prefix = format!("set{i}-");
        let run = tokio::spawn({
            let prefix = prefix.clone();
            async move { exercise_api(&app, &admin, &prefix).await }
        });
        if let Err(e) = run.await {
            panic!("under {set}: {e}");
        }
    }
    assert!(
        applied > SETTINGS.len() / 2,
        "most settings exist on every version"
    );
}

/// The same for pg_lease_queue: every queue function, under every legal session setting, gives
/// exactly the results it gives under the defaults (`exercise_queue_api` asserts every result).
#[tokio::test]
async fn every_queue_function_behaves_the_same_under_every_legal_session_setting() {
    let s = server();
    let db = s.fresh_db_with_queue("queue_settings");
    let mut applied = 0;
    for (i, (name, value)) in SETTINGS.iter().enumerate() {
        let app = s.connect_as(&db, APP).await;
        let admin = s.connect_as(&db, ADMIN).await;
        let set = if value.is_empty() {
            format!("SET {name} = ''")
        } else {
            format!("SET {name} = '{}'", value.replace('\'', "''"))
        };
        match app.batch_execute(&set).await {
            Ok(()) => {}
            Err(e) if matches!(e.code().map(|c| c.code()), Some("42704" | "42501")) => continue,
            Err(e) => panic!("{set}: {e:?}"),
        }
        admin
            .batch_execute(&set)
            .await
            .unwrap_or_else(|e| panic!("{set} (installing role): {e}"));
        applied += 1;
        let prefix = format!("set{i}-");
        let run =
            tokio::spawn(
                async move { crate::queue::exercise_queue_api(&app, &admin, &prefix).await },
            );
        if let Err(e) = run.await {
            panic!("under {set}: {e}");
        }
    }
    assert!(
        applied > SETTINGS.len() / 2,
        "most settings exist on every version"
    );
}
