//! The documentation states the contract: check that it names everything the SQL can answer.

use pglease_tests::repo_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every script of the extension, concatenated.
fn all_sql() -> String {
    pglease::MIGRATIONS
        .iter()
        .map(|m| read(&format!("extension/sql/{}", m.file)))
        .collect()
}

/// Every `ERRCODE = 'xxxxx'` the SQL raises.
fn raised_codes() -> Vec<String> {
    let sql = all_sql();
    let mut codes: Vec<String> = sql
        .split("ERRCODE = '")
        .skip(1)
        .map(|rest| rest[..5].to_owned())
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

#[test]
fn every_sqlstate_the_sql_raises_is_documented_and_in_the_rust_table() {
    let doc = read("docs/SQLSTATES.md");
    let codes = raised_codes();
    assert!(!codes.is_empty());
    for code in &codes {
        assert!(
            doc.contains(&format!("| `{code}` |")),
            "{code} is not in docs/SQLSTATES.md"
        );
        assert!(
            pglease::sqlstate::ALL.iter().any(|(c, _, _)| c == code),
            "{code} is not in pglease::sqlstate::ALL"
        );
    }
    for (code, _, _) in pglease::sqlstate::ALL {
        assert!(
            codes.iter().any(|c| c == code),
            "the Rust table lists {code}, which the SQL never raises"
        );
    }
}

#[test]
fn every_status_and_violation_message_is_documented() {
    let semantics = read("docs/SEMANTICS.md");
    for status in ["ok", "not_owner", "lapsed", "epoch_mismatch"] {
        assert!(
            semantics.contains(&format!("`{status}`")),
            "status {status} undocumented"
        );
    }
    // Every DETAIL fragment the SQL can produce, with the argument name generalised.
    let sql = all_sql();
    for fragment in sql
        .split("name || ' ")
        .skip(1)
        .map(|rest| rest.split('\'').next().unwrap())
    {
        let documented = ["key", "owner", "prefix", "ttl", "wait", "older_than"]
            .iter()
            .any(|arg| {
                semantics.contains(&format!("`{arg} {}", fragment.trim_end_matches(" (got ")))
            });
        assert!(
            documented,
            "violation {fragment:?} is not documented in SEMANTICS.md §6"
        );
    }
}
