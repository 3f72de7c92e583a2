//! One test per spec file: `specs/NAME.spec` is parsed, its permutations run in order, and the
//! output must equal `expected/NAME.out`. On a difference the test prints a line diff and writes
//! the whole output under cargo's test temporary directory (the path is in the message), ready to
//! compare or, once judged right, to copy over the expected file.

use std::path::{Path, PathBuf};

use crate::diff::diff;
use crate::spec::Spec;

/// The directory holding `specs/` and `expected/`.
fn isolation_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("isolation")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses `specs/NAME.spec`, panicking with the parse error.
fn load(name: &str) -> Spec {
    let file = format!("tests/isolation/specs/{name}.spec");
    let text = read(&isolation_dir().join("specs").join(format!("{name}.spec")));
    Spec::parse(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs spec `name` and compares its output with `expected/NAME.out`.
async fn check(name: &str) {
    let spec = load(name);
    let expected = read(&isolation_dir().join("expected").join(format!("{name}.out")));
    let got = spec.run().await;
    if got != expected {
        let results = Path::new(env!("CARGO_TARGET_TMPDIR")).join("isolation");
        std::fs::create_dir_all(&results).expect("create the results directory");
        let path = results.join(format!("{name}.out"));
        std::fs::write(&path, &got).expect("write the results");
        let lines = diff(&expected, &got);
        let lines = if lines.is_empty() {
            "(the lines are the same; only the final newline differs)\n".to_owned()
        } else {
            lines
        };
        panic!(
            "spec {name}: the output differs from tests/isolation/expected/{name}.out \
             (- expected, + got; the whole output is in {})\n{lines}",
            path.display()
        );
    }
}

/// Defines one test per spec file, named as the file, and the list of them all.
macro_rules! spec_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                check(stringify!($name)).await;
            }
        )*

        /// Every spec file that has a test.
        const SPEC_FILES: &[&str] = &[$(stringify!($name)),*];
    };
}

spec_tests!(
    acquire_new_key,
    acquire_free_key,
    blocking,
    blocking_vs_grant_new_key,
    blocking_vs_grant_free_key,
    refusals,
    refused_after_waiting,
    refused_after_a_fence,
    release,
    renew,
    commit_order_trap,
    release_vs_receive_same_owner,
    ack_vs_takeover,
    claim_vs_claim,
    producers_same_key_commit,
    slot_race,
    renew_many_vs_takeover,
    release_vs_acquire_slot,
    transfer_vs_takeover,
    transfer_vs_renew_release,
    transfer_vs_transfer,
    history_lapse_at_next_grant,
    ack_and_receive_vs_producer,
);

/// Every file in `specs/` has a test and an expected output, and parses; every expected output
/// belongs to a spec.
#[test]
fn every_spec_file_has_a_test_and_an_expected_output() {
    let names = |dir: &str, ext: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(isolation_dir().join(dir))
            .unwrap_or_else(|e| panic!("tests/isolation/{dir}: {e}"))
            .map(|e| e.expect("readable dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let mut tested: Vec<String> = SPEC_FILES.iter().map(|s| (*s).to_owned()).collect();
    tested.sort();
    assert_eq!(names("specs", "spec"), tested, "spec files vs. spec tests");
    assert_eq!(
        names("expected", "out"),
        tested,
        "expected outputs vs. spec tests"
    );
    for name in SPEC_FILES {
        load(name);
    }
}
