//! A throw-away PostgreSQL server for `pglease demo`: started with `pgcluster`, with the pg_lease
//! extension files (embedded in this binary) installed into it, and removed when dropped.

use std::path::PathBuf;

use pgcluster::{Cluster, ClusterBuilder};

/// Writes the embedded extension files into a fresh directory laid out like `extensions/pg_lease/`.
fn extension_dir() -> std::io::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new().prefix("pglease-ext-").tempdir()?;
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("sql"))?;
    std::fs::write(root.join("pg_lease.control"), pglease::CONTROL)?;
    for migration in pglease::MIGRATIONS {
        std::fs::write(root.join("sql").join(migration.file), migration.script)?;
    }
    Ok((dir, root))
}

/// Starts a throw-away server of `major` with the extension files installed.
pub fn start_throwaway(major: u32) -> Result<Cluster, crate::BoxError> {
    let (_guard, dir) = extension_dir()?;
    let cluster = ClusterBuilder::for_major(major)?
        .extension_dir(&dir)
        .start()?;
    Ok(cluster)
}
