//! Each extension's `make installcheck` smoke suite (PGXS + pg_regress, as packagers run it) passes
//! against a real server holding the extension files: `extensions/<name>/test/sql/*.sql` gives
//! `test/expected/*.out` on every supported version.

use std::path::Path;
use std::process::Command;

use pglease_tests::{repo_root, server};

/// Runs `make installcheck` in `extensions/<name>` against the shared server (its superuser over
/// the unix socket, a database of the suite's own), with pg_regress's output in a temporary
/// directory; panics with pg_regress's diffs if the suite fails.
fn installcheck(name: &str) {
    let cluster = server().cluster();
    let pg_config = cluster.installation().bindir().join("pg_config");
    let pgxs = Command::new(&pg_config)
        .arg("--pgxs")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", pg_config.display()));
    let pgxs = String::from_utf8_lossy(&pgxs.stdout).trim().to_owned();
    assert!(
        Path::new(&pgxs).is_file(),
        "{pgxs} is missing: PGXS is needed for make installcheck (Debian: apt-get install \
         postgresql-server-dev-{}; scripts/test.sh installs it)",
        server().major()
    );
    let out = tempfile::tempdir().expect("temporary directory");
    let run = Command::new("make")
        .arg("-C")
        .arg(repo_root().join("extensions").join(name))
        .arg("installcheck")
        .arg(format!("PG_CONFIG={}", pg_config.display()))
        .arg(format!("REGRESS_OUTPUTDIR={}", out.path().display()))
        .arg(format!("CONTRIB_TESTDB=installcheck_{name}"))
        .env("PGHOST", cluster.socket_dir())
        .env("PGPORT", cluster.port().to_string())
        .env("PGUSER", "postgres")
        .env("PGPASSWORD", cluster.password())
        .env_remove("PGDATABASE")
        .output()
        .unwrap_or_else(|e| panic!("make (needed for make installcheck): {e}"));
    let diffs = std::fs::read_to_string(out.path().join("regression.diffs")).unwrap_or_default();
    assert!(
        run.status.success(),
        "make installcheck of {name} failed ({}):\n{}\n{}\n{diffs}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn pg_lease_passes_its_installcheck_suite() {
    installcheck("pg_lease");
}

#[test]
fn pg_lease_queue_passes_its_installcheck_suite() {
    installcheck("pg_lease_queue");
}
