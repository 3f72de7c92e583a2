//! Private mirrors of an installation, for installing extension files without write access
//! to its share directory.
//!
//! PostgreSQL finds its share directory and pkglibdir *relative to the real path of its own
//! executable*, using the compile-time relative paths between bindir, sharedir and pkglibdir.
//! A mirror therefore reproduces the absolute layout under a private root:
//!
//! - `<root>/<bindir>/`: real copies of `postgres` and `initdb` (symlinks would be resolved
//!   back to the original location);
//! - `<root>/<sharedir>/`: a symlink to every entry of the real sharedir except `extension/`,
//!   which is a real directory of symlinks to the real extension files, plus our own files;
//! - `<root>/<pkglibdir>` (and `<root>/<libdir>`): symlinks to the real directories.
//!
//! Mirrors live in the cache as `mirror-<version>-<hash of bindir>/` and are reused.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::cache;
use crate::error::{Error, IoContext, Result};
use crate::install::Installation;

/// Returns an installation running from a (possibly newly built) private mirror of `inst`
/// under `cache`.
pub(crate) fn mirror(inst: &Installation, cache_root: &Path) -> Result<Installation> {
    let root = cache_root.join(format!(
        "mirror-{}-{:016x}",
        inst.version(),
        fnv1a(inst.bindir().as_os_str().as_encoded_bytes())
    ));
    let complete = root.join(".complete");
    let _lock = cache::lock(cache_root)?;
    if !complete.exists() {
        cache::remove_stale_temps(cache_root);
        let stage = tempfile::Builder::new()
            .prefix(".tmp-mirror-")
            .tempdir_in(cache_root)
            .ctx("creating temporary directory in", cache_root)?;
        build(inst, stage.path())?;
        fs::write(stage.path().join(".complete"), b"").ctx("writing", stage.path())?;
        cache::make_world_readable(stage.path())?;
        if root.exists() {
            fs::remove_dir_all(&root).ctx("removing incomplete mirror", &root)?;
        }
        let staged = stage.keep();
        fs::rename(&staged, &root).ctx("moving mirror into place at", &root)?;
    }
    let mirrored = Installation {
        version: inst.version,
        bindir: under(&root, &inst.bindir),
        sharedir: under(&root, &inst.sharedir),
        pkglibdir: under(&root, &inst.pkglibdir),
        libdir: inst.libdir.as_ref().map(|l| under(&root, l)),
        source: inst.source,
    };
    refresh_extension_links(
        &inst.sharedir.join("extension"),
        &mirrored.sharedir.join("extension"),
    );
    Ok(mirrored)
}

/// `root` joined with absolute path `abs` (its leading `/` dropped).
fn under(root: &Path, abs: &Path) -> PathBuf {
    root.join(abs.strip_prefix("/").unwrap_or(abs))
}

fn build(inst: &Installation, root: &Path) -> Result<()> {
    let bindir = under(root, &inst.bindir);
    fs::create_dir_all(&bindir).ctx("creating", &bindir)?;
    for exe in ["postgres", "initdb"] {
        let dst = bindir.join(exe);
        fs::copy(inst.bin(exe), &dst).ctx("copying executable to", &dst)?;
    }

    let sharedir = under(root, &inst.sharedir);
    fs::create_dir_all(&sharedir).ctx("creating", &sharedir)?;
    for entry in fs::read_dir(&inst.sharedir).ctx("reading", &inst.sharedir)? {
        let entry = entry.ctx("reading", &inst.sharedir)?;
        let dst = sharedir.join(entry.file_name());
        if entry.file_name() == "extension" {
            fs::create_dir(&dst).ctx("creating", &dst)?;
        } else {
            symlink(entry.path(), &dst).ctx("creating symlink", &dst)?;
        }
    }
    fs::create_dir_all(sharedir.join("extension")).ctx("creating", &sharedir)?;
    refresh_extension_links(
        &inst.sharedir.join("extension"),
        &sharedir.join("extension"),
    );

    let pkglibdir = under(root, &inst.pkglibdir);
    if fs::symlink_metadata(&pkglibdir).is_ok() {
        return Err(Error::InvalidInstallation {
            path: inst.pkglibdir.clone(),
            reason: "pkglibdir overlaps bindir or sharedir; cannot build a private mirror".into(),
        });
    }
    link_dir(&inst.pkglibdir, &pkglibdir)?;
    if let Some(libdir) = &inst.libdir {
        let dst = under(root, libdir);
        // Best effort: only when it does not collide with what is already mirrored.
        if fs::symlink_metadata(&dst).is_err() && !ancestor_is_link(root, &dst) {
            link_dir(libdir, &dst)?;
        }
    }
    Ok(())
}

fn link_dir(real: &Path, dst: &Path) -> Result<()> {
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).ctx("creating", parent)?;
    }
    symlink(real, dst).ctx("creating symlink", dst)
}

/// Whether some directory between `root` and `path` is a symlink (into the real tree).
fn ancestor_is_link(root: &Path, path: &Path) -> bool {
    path.ancestors()
        .take_while(|a| *a != root)
        .skip(1)
        .any(|a| fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
}

/// Adds a symlink in `mirror_ext` for each real extension file it lacks. Best effort.
fn refresh_extension_links(real_ext: &Path, mirror_ext: &Path) {
    let Ok(entries) = fs::read_dir(real_ext) else {
        return;
    };
    for entry in entries.flatten() {
        let dst = mirror_ext.join(entry.file_name());
        if fs::symlink_metadata(&dst).is_err() {
            let _ = symlink(entry.path(), &dst);
        }
    }
}

/// 64-bit FNV-1a hash (stable across runs, unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
