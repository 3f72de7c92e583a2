//! The documentation states the contract: check that it names everything the SQL can answer.

use pglease_tests::repo_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The extension's current API: its one current source.
fn all_sql() -> String {
    read("extensions/pg_lease/sql/pg_lease.sql")
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
            pglease::sqlstate::ALL.iter().any(|(c, _, _)| c == code)
                || pglease::sqlstate::INTERNAL.contains(&code.as_str()),
            "{code} is not in pglease::sqlstate::ALL (nor INTERNAL)"
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
fn every_sqlstate_of_the_queue_is_documented_in_both_documents_and_the_rust_table() {
    let sql = read("extensions/pg_lease_queue/sql/pg_lease_queue.sql");
    let sqlstates = read("docs/SQLSTATES.md");
    let queue_doc = read("docs/QUEUE.md");
    let queue_section = sqlstates
        .split("## Raised by pg_lease_queue")
        .nth(1)
        .expect("SQLSTATES.md has a pg_lease_queue section");
    let mut raised: Vec<String> = sql
        .split("ERRCODE = '")
        .skip(1)
        .map(|rest| rest[..5].to_owned())
        .collect();
    // Fencing codes chosen by a CASE (lease_queue._raise_fenced) or raised by lease.fence.
    raised.extend(["LE001", "LE002", "LE003"].map(String::from));
    raised.sort();
    raised.dedup();
    for code in &raised {
        assert!(
            pglease::sqlstate::QUEUE.iter().any(|(c, _, _)| c == code),
            "{code} is not in pglease::sqlstate::QUEUE"
        );
        assert!(
            queue_doc.contains(&format!("| `{code}` |")),
            "{code} is not in docs/QUEUE.md §8"
        );
    }
    for (code, _, _) in pglease::sqlstate::QUEUE {
        assert!(
            raised.iter().any(|c| c == code),
            "QUEUE lists {code}, never raised"
        );
        let documented = queue_section.contains(&format!("| `{code}` |"))
            || code.starts_with("LE") && sqlstates.contains(&format!("| `{code}` |"));
        assert!(
            documented,
            "{code} is not in the queue section of docs/SQLSTATES.md"
        );
    }
}

#[test]
fn every_queue_function_and_violation_is_documented() {
    let sql = read("extensions/pg_lease_queue/sql/pg_lease_queue.sql");
    let doc = read("docs/QUEUE.md");
    // Every public function (no leading underscore) is in the function table.
    for rest in sql.split("CREATE FUNCTION lease_queue.").skip(1) {
        let name = rest.split('(').next().unwrap();
        if !name.starts_with('_') {
            assert!(
                doc.contains(&format!("`{name}(")),
                "{name} is not in docs/QUEUE.md §2"
            );
        }
    }
    // Every argument a violation can name is in the table of arguments.
    for rest in sql.split("_violations('").skip(1) {
        let arg = rest.split('\'').next().unwrap();
        let arg = arg.split('[').next().unwrap();
        if arg != "name" {
            assert!(
                doc.contains(&format!("`{arg}`")),
                "argument {arg} is not in docs/QUEUE.md §7"
            );
        }
    }
}

#[test]
fn every_status_and_violation_message_is_documented() {
    let semantics = read("docs/SEMANTICS.md");
    for status in ["ok", "not_owner", "lapsed", "epoch_mismatch", "busy"] {
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
        let documented = [
            "key",
            "owner",
            "prefix",
            "ttl",
            "wait",
            "older_than",
            "max_holders",
            "slot",
        ]
        .iter()
        .any(|arg| semantics.contains(&format!("`{arg} {}", fragment.trim_end_matches(" (got "))));
        assert!(
            documented,
            "violation {fragment:?} is not documented in SEMANTICS.md §6"
        );
    }
}

/// Every `async fn` / `fn` test name in a directory of test sources.
fn test_names(dir: &str) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(repo_root().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let sub = path
                .strip_prefix(repo_root())
                .unwrap()
                .display()
                .to_string();
            names.extend(test_names(&sub));
            continue;
        }
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if !line.trim_start().starts_with("#[tokio::test") && line.trim() != "#[test]" {
                continue;
            }
            // The fn line follows the attribute (perhaps after more attributes).
            for next in lines.by_ref() {
                if let Some(rest) = next
                    .trim_start()
                    .strip_prefix("async fn ")
                    .or_else(|| next.trim_start().strip_prefix("fn "))
                {
                    names.push(rest.split('(').next().unwrap().to_owned());
                    break;
                }
            }
        }
    }
    names
}

/// The permutation names of the isolation spec files in a directory (each is cited as a test, as
/// the spec's test runs it); `NAME/variant` counts as `NAME` too.
fn permutation_names(dir: &str) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(repo_root().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "spec") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            if let Some(name) = line
                .trim_start()
                .strip_prefix("permutation ")
                .and_then(|rest| rest.split_whitespace().next())
            {
                names.push(name.to_owned());
                if let Some((base, _)) = name.split_once('/') {
                    names.push(base.to_owned());
                }
            }
        }
    }
    names
}

#[test]
fn every_test_named_in_invariants_md_exists_and_every_invariant_has_one() {
    let map = read("tests/INVARIANTS.md");
    let suites = [
        ("regression", "tests/regression"),
        ("isolation", "tests/isolation"),
        ("failure", "tests/failure"),
        ("history", "tests/history"),
        ("hostile", "tests/hostile"),
        ("ha", "tests/ha"),
        ("client", "crates/pglease/tests/it"),
    ];
    let mut cited = 0;
    for (suite, dir) in suites {
        let mut names = test_names(dir);
        if suite == "isolation" {
            names.extend(permutation_names("tests/isolation/specs"));
        }
        for cite in map.split(&format!("`{suite}::")).skip(1) {
            let name = cite.split('`').next().unwrap();
            assert!(
                names.iter().any(|n| n == name),
                "INVARIANTS.md cites {suite}::{name}, which is no test"
            );
            cited += 1;
        }
    }
    assert!(cited > 50, "only {cited} tests cited");
    let queue = read("docs/QUEUE.md");
    for i in 1..=8 {
        let row = map
            .lines()
            .find(|l| l.starts_with(&format!("| Q{i} ")))
            .unwrap_or_else(|| panic!("Q{i} has no row in INVARIANTS.md"));
        assert!(row.contains("::"), "Q{i} names no test");
        assert!(
            queue.contains(&format!("Q{i} **")),
            "Q{i} is not in QUEUE.md §3"
        );
    }
    for i in 1..=25 {
        let row = map
            .lines()
            .find(|l| l.starts_with(&format!("| I{i} ")))
            .unwrap_or_else(|| panic!("I{i} has no row in INVARIANTS.md"));
        assert!(row.contains("::"), "I{i} names no test");
        let semantics = read("docs/SEMANTICS.md");
        assert!(
            semantics.contains(&format!("**I{i} ")),
            "I{i} is not in SEMANTICS.md §9"
        );
    }
}

/// The SQL examples of docs/QUEUE.md §9 run as written, as the installing role (against roles
/// created for them), so a signature they name exists.
#[tokio::test]
async fn the_privilege_examples_of_queue_md_run_as_written() {
    let doc = read("docs/QUEUE.md");
    let section = doc
        .split("## 9. Privileges")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("QUEUE.md has §9");
    let blocks: Vec<&str> = section
        .split("```sql\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 2, "§9's examples: {blocks:?}");
    let s = pglease_tests::server();
    let db = s.fresh_db_with_queue("queue_md_examples");
    s.psql(
        "postgres",
        "DO $$ BEGIN
             CREATE ROLE producers; CREATE ROLE consumers; CREATE ROLE ops;
         EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
    );
    let admin = s.connect_as(&db, pglease_tests::ADMIN).await;
    for block in blocks {
        admin
            .batch_execute(block)
            .await
            .unwrap_or_else(|e| panic!("QUEUE.md §9 example failed: {block}: {e:?}"));
    }
}
