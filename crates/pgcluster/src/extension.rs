//! Installing extension files (`*.control`, `*.sql`) into an installation's share directory.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

/// Collects the extension files of a directory: `*.control` and `*.sql` directly in it and
/// `*.sql` in its `sql/` subdirectory (the pg_lease layout is `extensions/pg_lease/pg_lease.control`
/// plus `extensions/pg_lease/sql/pg_lease--0.1.0.sql`). Fails if there is no control file.
pub(crate) fn files_in_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut has_control = false;
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
                has_control |= ext == "control";
                files.push(path);
            }
        }
    }
    if !has_control {
        return Err(Error::io(
            "no *.control file in extension directory",
            dir,
            std::io::ErrorKind::NotFound.into(),
        ));
    }
    files.sort();
    Ok(files)
}

/// Whether we may create files in `dir` (`access(W_OK)`; false for read-only file systems).
pub(crate) fn dir_writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Copies `files` into `ext_dir` atomically (temporary name, mode 0644, rename), skipping
/// files whose content is already identical.
pub(crate) fn install(files: &[PathBuf], ext_dir: &Path) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    for src in files {
        let name = src.file_name().ok_or_else(|| {
            Error::io(
                "extension file has no name",
                src,
                std::io::ErrorKind::InvalidInput.into(),
            )
        })?;
        let content = fs::read(src).ctx("reading extension file", src)?;
        let dst = ext_dir.join(name);
        if fs::read(&dst).is_ok_and(|old| old == content) {
            continue;
        }
        let tmp = ext_dir.join(format!(
            ".{}.pgcluster-{}-{}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let result = fs::write(&tmp, &content)
            .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)))
            .and_then(|()| fs::rename(&tmp, &dst));
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io("installing extension file", &dst, e));
        }
    }
    Ok(())
}
