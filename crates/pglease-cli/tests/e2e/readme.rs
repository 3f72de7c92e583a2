//! The README's `pglease` command lines are true: every one parses (its subcommand and flags exist,
//! its values are valid), and the quick start's lease commands give the exit codes and epochs its
//! comments state, run in order against a database of their own. The version the docs name is the
//! one `pglease --version` prints.

use std::path::Path;

use crate::common::{Case, expect_eq};

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A shell command line split into words as `sh` would (quotes removed, `$(...)` kept as text),
/// without its trailing `# comment`; and the comment.
fn shell_words(line: &str) -> (Vec<String>, String) {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    let mut comment = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '"'));
            }
            '#' if !in_word => {
                comment = chars.collect::<String>().trim().to_owned();
                break;
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    (words, comment)
}

/// Every `pglease ...` line of the README's `sh` code blocks: its words after `pglease`, and its
/// comment.
fn readme_commands() -> Vec<(Vec<String>, String)> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in read("README.md").lines() {
        if line.starts_with("```") {
            in_sh = !in_sh && line == "```sh";
            continue;
        }
        if in_sh && line.starts_with("pglease ") {
            let (words, comment) = shell_words(line);
            commands.push((words[1..].to_vec(), comment));
        }
    }
    commands
}

#[test]
fn every_pglease_command_the_readme_shows_parses() {
    let case = Case::new("readme_parse");
    let commands = readme_commands();
    assert!(
        commands.len() >= 5,
        "too few pglease lines found: {commands:?}"
    );
    for (words, _) in commands {
        // `--help` before any `--`: clap checks every flag and value before it, then prints help.
        let mut args = words.clone();
        let at = args.iter().position(|w| w == "--").unwrap_or(args.len());
        args.insert(at, "--help".to_owned());
        let out = case.bare(&args).output();
        assert!(
            out.code() == Some(0),
            "README: `pglease {}` does not parse\n{}",
            words.join(" "),
            out.report()
        );
    }
}

#[test]
fn the_readme_quick_start_gives_the_exit_codes_and_epochs_it_states() {
    let case = Case::new("readme_quick_start");
    let script = case.file("report.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"report at epoch $PGLEASE_EPOCH\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut ran = 0;
    for (words, comment) in readme_commands() {
        // Not run: the local server (this case has its own database), and a campaign, which runs
        // until interrupted.
        if matches!(words[0].as_str(), "local" | "elect" | "install" | "leader") {
            continue;
        }
        let expected = comment
            .strip_prefix("exit ")
            .and_then(|rest| rest.split(':').next())
            .and_then(|code| code.trim().parse().ok())
            .unwrap_or(0);
        let out = case.pglease(&words).expect_code(expected);
        if let Some(epoch) = comment.strip_prefix("epoch ") {
            let epoch = epoch.split([',', ' ']).next().unwrap();
            assert!(
                out.stdout()
                    .lines()
                    .any(|l| l.split_whitespace().eq(["epoch", epoch])),
                "README says `pglease {}` gives epoch {epoch}\n{}",
                words.join(" "),
                out.report()
            );
        }
        ran += 1;
    }
    assert!(ran >= 5, "too few quick-start commands ran: {ran}");
}

#[test]
fn the_version_the_docs_name_is_the_one_pglease_prints() {
    let case = Case::new("readme_version");
    let printed = case.bare(["--version"]).expect_code(0).stdout();
    let printed = printed.trim();
    for doc in ["docs/TESTING.md", "CHANGELOG.md"] {
        let text = read(doc);
        let named = text
            .split('`')
            .find(|s| s.starts_with("pglease ") && s.contains("(pg_lease SQL API "))
            .unwrap_or_else(|| panic!("{doc} names no `pglease --version` output"));
        expect_eq(&format!("{doc}: pglease --version"), printed, named);
    }
}
