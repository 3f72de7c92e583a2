//! The extension files this binary carries (embedded in the pglease crate), in the form pgcluster
//! installs. The one place that turns pglease's extension descriptors into pgcluster's input: the
//! local server and the demo both install what [`extension_files`] returns.

use pgcluster::ExtensionFiles;

/// The control file and every SQL script of each of our extensions ([`pglease::EXTENSIONS`], in
/// dependency order), as the pglease crate embeds them from `extensions/<name>/`.
pub fn extension_files() -> Vec<ExtensionFiles> {
    pglease::EXTENSIONS
        .iter()
        .map(|ext| {
            ext.scripts.iter().fold(
                ExtensionFiles::new(ext.control_file(), ext.control),
                |files, script| files.script(script.file, script.script),
            )
        })
        .collect()
}
