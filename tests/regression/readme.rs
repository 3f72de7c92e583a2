//! The README and the documents are current and hold together: the versions and counts they state
//! are those of the control files, Cargo and tests/INVARIANTS.md; every relative link (and its
//! `#anchor`) resolves; the README's code blocks are well formed, its SQL quick start runs and
//! answers what its comments say, and its Rust quick start is the example that CI builds.

use std::path::{Path, PathBuf};

use pglease_tests::{ADMIN, repo_root, server};
use tokio_postgres::SimpleQueryMessage;

fn read(path: impl AsRef<Path>) -> String {
    let path = repo_root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `default_version` of extension `name`'s control file.
fn control_version(name: &str) -> String {
    read(format!("extensions/{name}/{name}.control"))
        .lines()
        .find_map(|l| l.strip_prefix("default_version = '"))
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or_else(|| panic!("{name}.control has no default_version"))
        .to_owned()
}

/// A `key = "value"` of the workspace's Cargo.toml (`[workspace.package]`).
fn workspace_value(key: &str) -> String {
    read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("Cargo.toml has no {key}"))
        .to_owned()
}

/// The number of invariants: the `| I<n> ` rows of tests/INVARIANTS.md.
fn invariant_count() -> usize {
    read("tests/INVARIANTS.md")
        .lines()
        .filter(|l| {
            l.strip_prefix("| I")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count()
}

/// Every Markdown document of the repository that a reader follows links in.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    for dir in ["docs", "docs/adr", "tests"] {
        for entry in std::fs::read_dir(repo_root().join(dir)).expect("a docs directory") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path.strip_prefix(repo_root()).unwrap().to_path_buf());
            }
        }
    }
    docs.sort();
    docs
}

/// The text of `doc` outside its code blocks and inline code spans.
fn prose(doc: &str) -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            let spans: Vec<&str> = line.split('`').collect();
            for (i, part) in spans.iter().enumerate() {
                if i % 2 == 0 || i == spans.len() - 1 {
                    out.push_str(part);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The targets of the inline links and images `](target)` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

/// GitHub's anchor of a heading: lower case, without punctuation but `-` and `_`, spaces as `-`.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of a Markdown document.
fn anchors(doc: &str) -> Vec<String> {
    let mut in_block = false;
    doc.lines()
        .filter(|line| {
            if line.starts_with("```") {
                in_block = !in_block;
            }
            !in_block && line.starts_with('#')
        })
        .map(|line| anchor_of(line.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_in_the_documents_resolves_to_a_file_and_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().unwrap_or(Path::new(""));
        for target in link_targets(&prose(&text)) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            checked += 1;
            if !repo_root().join(&path).exists() {
                broken.push(format!(
                    "{}: {target} (no {})",
                    doc.display(),
                    path.display()
                ));
            } else if let Some(anchor) = anchor
                && path.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&path)).iter().any(|a| a == anchor)
            {
                broken.push(format!("{}: {target} (no such heading)", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links checked");
}

#[test]
fn the_readme_states_the_current_versions_and_counts() {
    let readme = read("README.md");
    let versions = readme
        .lines()
        .skip_while(|l| !l.starts_with("Versions: "))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let expected = format!(
        "Versions: pg_lease **{}**, pg_lease_queue **{}**, Rust crates and `pglease` **{}** (Rust {} or later).",
        control_version("pg_lease"),
        control_version("pg_lease_queue"),
        workspace_value("version"),
        workspace_value("rust-version"),
    );
    assert!(
        versions.starts_with(&expected),
        "README's versions line is stale:\n  README: {versions}\n  wanted: {expected}"
    );
    let count = invariant_count();
    assert!(count >= 25, "INVARIANTS.md lost invariants: {count}");
    assert!(
        readme.contains(&format!("every one of its {count} invariants")),
        "README does not state the {count} invariants of tests/INVARIANTS.md"
    );
    // Wherever a document names the whole range of invariants, it names them all.
    for doc in documents() {
        let text = read(&doc);
        for rest in text.split("invariants I1–I").skip(1) {
            let last: String = rest.chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(
                last,
                count.to_string(),
                "{} names invariants I1–I{last} of {count}",
                doc.display()
            );
        }
    }
    assert!(readme.lines().count() <= 200, "README is over 200 lines");
}

#[test]
fn the_readme_code_blocks_are_well_formed() {
    let readme = read("README.md");
    let mut open: Option<(usize, &str)> = None;
    for (n, line) in readme.lines().enumerate() {
        let n = n + 1;
        match open {
            None if line.contains("```") => {
                let info = line.strip_prefix("```").unwrap_or_else(|| {
                    panic!("README line {n}: a fence not at the start of its line: {line}")
                });
                assert!(
                    info.chars().all(|c| c.is_ascii_alphanumeric()),
                    "README line {n}: an opening fence with text after it: {line}"
                );
                open = Some((n, info));
            }
            Some(_) if line.contains("```") => {
                assert_eq!(
                    line, "```",
                    "README line {n}: a closing fence with text: {line}"
                );
                open = None;
            }
            _ => {}
        }
    }
    assert!(
        open.is_none(),
        "README: the code block opened at {open:?} is never closed"
    );
}

/// The body of the README's code block that follows `heading`.
fn readme_block(heading: &str, lang: &str) -> Vec<String> {
    let readme = read("README.md");
    readme
        .lines()
        .skip_while(|l| *l != heading)
        .skip_while(|l| *l != format!("```{lang}"))
        .skip(1)
        .take_while(|l| *l != "```")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_rust_quick_start_is_the_quickstart_example() {
    let snippet = readme_block("## Quick start: Rust", "rust");
    assert!(snippet.len() >= 5, "no Rust quick start found");
    let example = read("crates/pglease/examples/quickstart.rs");
    let body: Vec<String> = example
        .lines()
        .skip_while(|l| !l.starts_with("async fn run("))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("Ok(())"))
        .map(|l| l.strip_prefix("    ").unwrap_or(l).to_owned())
        .collect();
    assert_eq!(
        snippet, body,
        "README's Rust quick start differs from examples/quickstart.rs"
    );
}

#[tokio::test]
async fn the_readme_sql_quick_start_runs_and_answers_what_its_comments_say() {
    let lines = readme_block("## Quick start: SQL", "sql");
    assert!(lines.len() >= 5, "no SQL quick start found");
    let db = server().fresh_db("readme_sql");
    let client = server().connect_as(&db, ADMIN).await;
    for line in lines {
        let (statement, comment) = match line.rfind(';') {
            Some(end) => (&line[..=end], line[end + 1..].trim()),
            None => panic!("README SQL line without a statement: {line}"),
        };
        let answer = client
            .simple_query(statement)
            .await
            .unwrap_or_else(|e| panic!("README SQL fails: {statement}\n{e:?}"));
        // A comment of values (`t | 1`, `ok`) is the answer's first row; others are prose.
        let Some(expected) = comment.strip_prefix("--").map(str::trim) else {
            continue;
        };
        let values: Vec<&str> = expected.split(" | ").collect();
        if values.iter().any(|v| v.contains(' ') || v.is_empty()) {
            continue;
        }
        let row = answer
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .unwrap_or_else(|| panic!("README SQL returned no row: {statement}"));
        let got: Vec<&str> = (0..row.len())
            .map(|i| row.get(i).unwrap_or("NULL"))
            .collect();
        assert_eq!(got, values, "README SQL: {statement}");
    }
}

/// The string values of `"key": "..."` in a JSON text, in order (enough for META.json's flat use).
fn json_strings(text: &str, key: &str) -> Vec<String> {
    text.split(&format!("\"{key}\": \""))
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn each_extensions_pgxn_metadata_names_its_current_version_and_install_script() {
    for name in ["pg_lease", "pg_lease_queue"] {
        let meta = read(format!("extensions/{name}/META.json"));
        let version = control_version(name);
        assert_eq!(
            json_strings(&meta, "version")[..2],
            [version.clone(), version.clone()],
            "{name}/META.json: the distribution's and the extension's version are the control file's"
        );
        assert_eq!(
            json_strings(&meta, "name"),
            [name],
            "{name}/META.json: name"
        );
        let file = &json_strings(&meta, "file")[0];
        assert_eq!(
            file,
            &format!("sql/{name}--{version}.sql"),
            "{name}/META.json: file"
        );
        assert!(
            repo_root()
                .join("extensions")
                .join(name)
                .join(file)
                .is_file(),
            "{name}/META.json names {file}, which is missing"
        );
        assert_eq!(json_strings(&meta, "license"), ["postgresql"]);
    }
}

#[test]
fn every_path_the_architecture_layout_names_exists() {
    let doc = read("ARCHITECTURE.md");
    let layout: Vec<&str> = doc
        .lines()
        .skip_while(|l| *l != "## Layout")
        .skip_while(|l| *l != "```")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect();
    assert!(layout.len() > 10, "no layout block in ARCHITECTURE.md");
    for line in layout {
        let Some(path) = line
            .split_whitespace()
            .next()
            .filter(|_| !line.starts_with(' '))
        else {
            continue;
        };
        assert!(
            repo_root().join(path).exists(),
            "ARCHITECTURE.md's layout names {path}, which does not exist"
        );
    }
}

#[test]
fn the_changelog_has_an_entry_for_every_version_of_each_extension() {
    let changelog = read("CHANGELOG.md");
    for name in ["pg_lease", "pg_lease_queue"] {
        let section: String = changelog
            .lines()
            .skip_while(|l| *l != format!("## {name}"))
            .skip(1)
            .take_while(|l| !l.starts_with("## "))
            .collect::<Vec<_>>()
            .join("\n");
        let mut versions = vec![control_version(name)];
        for entry in
            std::fs::read_dir(repo_root().join("extensions").join(name).join("sql")).unwrap()
        {
            let file = entry.unwrap().file_name().into_string().unwrap();
            if let Some(rest) = file.strip_prefix(&format!("{name}--")) {
                versions.push(
                    rest.trim_end_matches(".sql")
                        .rsplit("--")
                        .next()
                        .unwrap()
                        .into(),
                );
            }
        }
        for version in versions {
            assert!(
                section.lines().any(|l| l == format!("### {version}")),
                "CHANGELOG.md has no entry for {name} {version}"
            );
        }
    }
}
