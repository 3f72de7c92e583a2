//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use pgcluster::{Cluster, ClusterBuilder, Installation};

/// The PostgreSQL 15 installation used by most tests (Debian's or a cached/fetched one).
pub fn pg15() -> Installation {
    pgcluster::ensure(15).expect("PostgreSQL 15 available")
}

/// Starts a default cluster on PostgreSQL 15.
pub fn start15() -> Cluster {
    ClusterBuilder::new(pg15()).start().expect("cluster starts")
}

/// Whether `pid` no longer runs (absent, or a zombie awaiting its reaper).
pub fn pid_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s[s.rfind(')')? + 1..]
                .split_whitespace()
                .next()
                .map(|st| st == "Z")
        })
        .unwrap_or(true)
}

/// Writes a trusted dummy extension `name` (version 1.0, function `<name>_answer()` = 42)
/// into `dir`; returns (control file, sql file).
pub fn write_probe_extension(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let control = dir.join(format!("{name}.control"));
    std::fs::write(
        &control,
        "comment = 'pgcluster test probe'\ndefault_version = '1.0'\nrelocatable = true\ntrusted = true\n",
    )
    .unwrap();
    let sql_dir = dir.join("sql");
    std::fs::create_dir_all(&sql_dir).unwrap();
    let sql = sql_dir.join(format!("{name}--1.0.sql"));
    std::fs::write(
        &sql,
        format!("CREATE FUNCTION {name}_answer() RETURNS int LANGUAGE sql AS 'SELECT 42';\n"),
    )
    .unwrap();
    (control, sql)
}
