//! The per-machine cache directory (fetched binaries, private mirrors) and its lock.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Returns the cache directory: `$PGCLUSTER_CACHE`, else `/var/cache/pgcluster` when running
/// as root, else `$XDG_CACHE_HOME/pgcluster` or `$HOME/.cache/pgcluster`.
///
/// As root the cache lives outside `/root` (mode 700) so the unprivileged user the server
/// runs as can reach the binaries in it.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGCLUSTER_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/cache/pgcluster");
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(xdg).join("pgcluster");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("pgcluster"),
        None => std::env::temp_dir().join("pgcluster-cache"),
    }
}

/// Creates `dir` (and parents) if missing and makes `dir` itself mode 0755.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .ctx("creating cache directory", dir)?;
    let meta = fs::metadata(dir).ctx("inspecting cache directory", dir)?;
    if meta.permissions().mode() & 0o755 != 0o755 {
        // Best effort: a directory we do not own keeps its mode.
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    }
    Ok(())
}

/// An exclusive `flock` on `<cache>/.lock`, released when dropped.
pub(crate) struct CacheLock {
    _file: File,
}

/// Takes the cache lock, blocking until other processes (or threads) release it.
pub(crate) fn lock(cache: &Path) -> Result<CacheLock> {
    ensure_dir(cache)?;
    let path = cache.join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .ctx("opening lock file", &path)?;
    loop {
        // SAFETY: the descriptor is valid for the lifetime of `file`.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(CacheLock { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("locking", &path, err));
        }
    }
}

/// Removes leftover `.tmp-*` entries of interrupted fetches; call only while holding the lock.
pub(crate) fn remove_stale_temps(cache: &Path) {
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Makes every file under `root` world-readable and every directory world-traversable
/// (executables stay executable); symlinks are left alone.
pub(crate) fn make_world_readable(root: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(root).ctx("inspecting", root)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    let wanted = if meta.is_dir() {
        mode | 0o755
    } else if mode & 0o111 != 0 {
        mode | 0o555
    } else {
        mode | 0o444
    };
    if wanted != mode {
        fs::set_permissions(root, fs::Permissions::from_mode(wanted)).ctx("chmod", root)?;
    }
    if meta.is_dir() {
        for entry in fs::read_dir(root).ctx("reading directory", root)? {
            let entry = entry.ctx("reading directory", root)?;
            make_world_readable(&entry.path())?;
        }
    }
    Ok(())
}
