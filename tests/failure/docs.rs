//! docs/FAILURE-MODEL.md and this suite agree: every check F1…Fn it lists is the test whose doc
//! comment names that check, and every test of the suite is listed.

use std::collections::BTreeMap;

use pglease_tests::repo_root;

/// `n → test name` from the suite's sources: a `/// F<n>: ...` doc comment and the next `fn`.
fn checks_in_sources() -> BTreeMap<u32, String> {
    let dir = repo_root().join("tests/failure");
    let mut checks = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("tests/failure") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut pending: Option<u32> = None;
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("/// F")
                && let Some((n, _)) = rest.split_once(':')
                && let Ok(n) = n.parse::<u32>()
            {
                pending = Some(n);
            } else if let Some(n) = pending
                && let Some(rest) = line.strip_prefix("async fn ")
            {
                let name = rest.split('(').next().unwrap().to_owned();
                assert!(
                    checks.insert(n, name).is_none(),
                    "F{n} is claimed by two tests"
                );
                pending = None;
            }
        }
    }
    checks
}

/// `n → test name` from the document's table rows: `| F<n> | `name` | ...`.
fn checks_in_doc() -> BTreeMap<u32, String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/FAILURE-MODEL.md"))
        .expect("docs/FAILURE-MODEL.md");
    let mut checks = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 {
            continue;
        }
        let (Some(n), Some(name)) = (
            cells[1]
                .strip_prefix('F')
                .and_then(|n| n.parse::<u32>().ok()),
            cells[2].strip_prefix('`').and_then(|s| s.strip_suffix('`')),
        ) else {
            continue;
        };
        assert!(
            checks.insert(n, name.to_owned()).is_none(),
            "F{n} is listed twice"
        );
    }
    checks
}

#[test]
fn every_check_of_the_failure_model_is_a_test() {
    let sources = checks_in_sources();
    let doc = checks_in_doc();
    assert!(sources.len() >= 15, "at least the reference's 15 checks");
    assert_eq!(
        sources.keys().copied().collect::<Vec<_>>(),
        (1..=sources.len() as u32).collect::<Vec<_>>(),
        "checks are numbered F1…Fn without gaps"
    );
    assert_eq!(
        doc, sources,
        "docs/FAILURE-MODEL.md lists exactly the suite's checks"
    );
}
