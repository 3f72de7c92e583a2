//! The pg_lease extension files this binary carries (embedded in the pglease crate), in the form
//! pgcluster installs. The one place that turns pglease's files into pgcluster's input: the local
//! server and the demo both install what [`extension_files`] returns.

use pgcluster::ExtensionFiles;

/// pg_lease's control file and every SQL script (base and upgrades), as the pglease crate embeds
/// them from `extensions/pg_lease/`.
pub fn extension_files() -> ExtensionFiles {
    pglease::MIGRATIONS.iter().fold(
        ExtensionFiles::new("pg_lease.control", pglease::CONTROL),
        |files, migration| files.script(migration.file, migration.script),
    )
}
