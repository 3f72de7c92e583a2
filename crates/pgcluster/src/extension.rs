//! An extension's files (its control file and SQL scripts) held in memory, and the one place that
//! writes extension files into a share directory's `extension/`.
//!
//! The builder's [`extension_dir`](crate::ClusterBuilder::extension_dir) and
//! [`extension_files`](crate::ClusterBuilder::extension_files) read files from disk into an
//! [`ExtensionFiles`] first; programs that embed their extension (`include_str!`) build one
//! directly and hand it to [`ClusterBuilder::extension`](crate::ClusterBuilder::extension) or
//! [`ExtensionFiles::install_into`].

use std::borrow::Cow;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};
use crate::install::Installation;

/// One extension's files: a control file and the SQL scripts that `CREATE EXTENSION` and
/// `ALTER EXTENSION ... UPDATE` run, each a file name (no directory) and its text.
///
/// # Examples
///
/// ```
/// let files = pgcluster::ExtensionFiles::new(
///     "probe.control",
///     "default_version = '1.0'\nrelocatable = true\n",
/// )
/// .script("probe--1.0.sql", "CREATE FUNCTION probe() RETURNS int LANGUAGE sql AS 'SELECT 1';\n");
/// assert_eq!(files.control_name(), "probe.control");
/// assert_eq!(files.files().count(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionFiles {
    control_name: String,
    control: Cow<'static, str>,
    scripts: Vec<(String, Cow<'static, str>)>,
}

impl ExtensionFiles {
    /// An extension whose control file is named `control_name` (e.g. `pg_lease.control`) and
    /// reads `control`; add its scripts with [`script`](Self::script).
    pub fn new(
        control_name: impl Into<String>,
        control: impl Into<Cow<'static, str>>,
    ) -> ExtensionFiles {
        ExtensionFiles {
            control_name: control_name.into(),
            control: control.into(),
            scripts: Vec::new(),
        }
    }

    /// Adds the SQL script `file_name` (e.g. `pg_lease--0.1.0.sql`) with text `text`.
    pub fn script(
        mut self,
        file_name: impl Into<String>,
        text: impl Into<Cow<'static, str>>,
    ) -> ExtensionFiles {
        self.scripts.push((file_name.into(), text.into()));
        self
    }

    /// Reads an extension directory: its one `*.control` file, the `*.sql` files next to it and
    /// those in its `sql/` subdirectory (the layout of `extensions/pg_lease/`:
    /// `pg_lease.control` and `sql/pg_lease--0.1.0.sql`).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the directory or a file cannot be read (or is not UTF-8), or if the
    /// directory holds no `*.control` file or more than one.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<ExtensionFiles> {
        let dir = dir.as_ref();
        let mut controls = Vec::new();
        let mut scripts = Vec::new();
        for (sub, exts) in [
            (dir.to_path_buf(), &["control", "sql"][..]),
            (dir.join("sql"), &["sql"][..]),
        ] {
            let entries = match fs::read_dir(&sub) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && sub != dir => continue,
                Err(e) => return Err(Error::io("reading extension directory", &sub, e)),
            };
            for entry in entries {
                let path = entry.ctx("reading extension directory", &sub)?.path();
                let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
                    continue;
                };
                if path.is_file() && exts.contains(&ext) {
                    if ext == "control" {
                        controls.push(path);
                    } else {
                        scripts.push(path);
                    }
                }
            }
        }
        let control = match <[PathBuf; 1]>::try_from(controls) {
            Ok([control]) => control,
            Err(controls) => {
                let what = if controls.is_empty() {
                    "no *.control file in extension directory"
                } else {
                    "more than one *.control file (one extension per directory) in"
                };
                return Err(Error::io(
                    what,
                    dir,
                    std::io::ErrorKind::InvalidInput.into(),
                ));
            }
        };
        scripts.sort();
        ExtensionFiles::from_paths(&control, &scripts)
    }

    /// Reads the control file `control` and the scripts `scripts` from disk.
    pub(crate) fn from_paths(control: &Path, scripts: &[PathBuf]) -> Result<ExtensionFiles> {
        let read = |path: &Path| -> Result<(String, String)> {
            let name = plain_name(path)?;
            let text = fs::read_to_string(path).ctx("reading extension file", path)?;
            Ok((name, text))
        };
        let (name, text) = read(control)?;
        let mut files = ExtensionFiles::new(name, text);
        for path in scripts {
            let (name, text) = read(path)?;
            files = files.script(name, text);
        }
        Ok(files)
    }

    /// The control file's name, e.g. `pg_lease.control`.
    pub fn control_name(&self) -> &str {
        &self.control_name
    }

    /// Every file (name, text): the control file first, then the scripts in the order added.
    pub fn files(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once((self.control_name.as_str(), &*self.control)).chain(
            self.scripts
                .iter()
                .map(|(name, text)| (name.as_str(), &**text)),
        )
    }

    /// Writes the files into `ext_dir` (a share directory's `extension/`), each atomically
    /// (temporary name, mode 0644, rename), leaving files whose content is already identical
    /// alone, so concurrent installers of the same files never expose a partial file. Scripts of
    /// the same extension (`<name>--*.sql`) that are not among the files are removed: an install
    /// script of a version that later became a chain of upgrades (or any leftover of an earlier
    /// checkout) would otherwise be what `CREATE EXTENSION ... VERSION` runs.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a file name is not a plain file name or a file cannot be written
    /// (e.g. `PermissionDenied` for a system installation's directory).
    pub fn install(&self, ext_dir: &Path) -> Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for (name, text) in self.files() {
            if name.is_empty() || name.starts_with('.') || name.contains('/') {
                return Err(Error::io(
                    "extension file names must be plain file names:",
                    name,
                    std::io::ErrorKind::InvalidInput.into(),
                ));
            }
            let dst = ext_dir.join(name);
            if fs::read(&dst).is_ok_and(|old| old == text.as_bytes()) {
                continue;
            }
            let tmp = ext_dir.join(format!(
                ".{name}.pgcluster-{}-{}.tmp",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let result = fs::write(&tmp, text)
                .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)))
                .and_then(|()| fs::rename(&tmp, &dst));
            if let Err(e) = result {
                let _ = fs::remove_file(&tmp);
                return Err(Error::io("installing extension file", &dst, e));
            }
        }
        self.remove_stale_scripts(ext_dir)
    }

    /// Removes the scripts of this extension in `ext_dir` that are not among its files.
    fn remove_stale_scripts(&self, ext_dir: &Path) -> Result<()> {
        let Some(name) = self.control_name.strip_suffix(".control") else {
            return Ok(());
        };
        let prefix = format!("{name}--");
        let entries = fs::read_dir(ext_dir).map_err(|e| Error::io("reading", ext_dir, e))?;
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(file) = file.to_str() else { continue };
            // (Another extension whose name extends this one's, pg_lease_queue--*.sql for
            // pg_lease, does not match: its name goes on where this one's `--` is.)
            let ours = file.starts_with(&prefix) && file.ends_with(".sql");
            if ours && !self.scripts.iter().any(|(n, _)| n == file) {
                match fs::remove_file(entry.path()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::io(
                            "removing stale extension script",
                            entry.path(),
                            e,
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// [`install`](Self::install)s the files into `installation`'s `<sharedir>/extension/`.
    ///
    /// # Errors
    ///
    /// As for [`install`](Self::install).
    pub fn install_into(&self, installation: &Installation) -> Result<()> {
        self.install(&installation.sharedir().join("extension"))
    }
}

/// The file name of `path`, as UTF-8.
fn plain_name(path: &Path) -> Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            Error::io(
                "extension file has no UTF-8 file name",
                path,
                std::io::ErrorKind::InvalidInput.into(),
            )
        })
}

/// Whether we may create files in `dir` (`access(W_OK)`; false for read-only file systems).
pub(crate) fn dir_writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_removes_the_extensions_stale_scripts_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ext = dir.path();
        for stale in [
            "probe--0.1.0.sql",
            "probe--0.1.0--0.2.0.sql",
            "probe_extra--1.0.sql",
            "other--1.0.sql",
        ] {
            fs::write(ext.join(stale), "-- old").unwrap();
        }
        ExtensionFiles::new("probe.control", "default_version = '0.3.0'")
            .script("probe--0.3.0.sql", "SELECT 1;")
            .script("probe--0.1.0--0.2.0.sql", "SELECT 2;")
            .install(ext)
            .unwrap();
        let mut names: Vec<String> = fs::read_dir(ext)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "other--1.0.sql",
                "probe--0.1.0--0.2.0.sql",
                "probe--0.3.0.sql",
                "probe.control",
                "probe_extra--1.0.sql"
            ]
        );
        assert_eq!(
            fs::read_to_string(ext.join("probe--0.1.0--0.2.0.sql")).unwrap(),
            "SELECT 2;"
        );
    }
}
