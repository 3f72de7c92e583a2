//! Discovery of installed (or cached) PostgreSQL versions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cache::cache_dir;
use crate::error::{Error, Result};
use crate::fetch;
use crate::install::{Installation, Source, run_stdout};

/// Finds every usable installation, one per major version, sorted by major.
///
/// Sources in priority order (the first that has a major wins): `PGCLUSTER_PG_BIN`
/// (one bin directory; an invalid value is an error), the cache ([`crate::cache_dir`]),
/// Debian's `/usr/lib/postgresql/*/bin`, and `pg_config --bindir` of the `pg_config` on `PATH`.
pub fn discover() -> Result<Vec<Installation>> {
    let mut found: BTreeMap<u32, Installation> = BTreeMap::new();
    let mut add = |inst: Installation| {
        found.entry(inst.major()).or_insert(inst);
    };

    if let Some(bin) = env_bin() {
        add(Installation::inspect(&bin, Source::EnvVar)?);
    }
    for inst in fetch::cached_installations(&cache_dir()) {
        add(inst);
    }
    for bindir in debian_bindirs() {
        if let Ok(inst) = Installation::inspect(&bindir, Source::Debian) {
            add(inst);
        }
    }
    if let Some(bindir) = pg_config_bindir()
        && let Ok(inst) = Installation::inspect(&bindir, Source::PgConfig)
    {
        add(inst);
    }
    Ok(found.into_values().collect())
}

/// Returns the installation of `major` that [`discover`] would pick, if any.
pub fn find(major: u32) -> Result<Option<Installation>> {
    Ok(discover()?.into_iter().find(|i| i.major() == major))
}

/// Returns an installation of `major`: found by [`find`], else fetched from PyPI with
/// [`crate::fetch`] unless `PGCLUSTER_NO_FETCH` is set to a non-empty value other than `0`.
pub fn ensure(major: u32) -> Result<Installation> {
    if let Some(inst) = find(major)? {
        return Ok(inst);
    }
    let no_fetch = std::env::var("PGCLUSTER_NO_FETCH").is_ok_and(|v| !v.is_empty() && v != "0");
    if no_fetch {
        return Err(Error::NotFound {
            wanted: major.to_string(),
            searched: searched_description(),
        });
    }
    fetch::fetch(major)
}

/// Describes the places [`discover`] looks in, for error messages.
pub(crate) fn searched_description() -> String {
    let env = match env_bin() {
        Some(p) => format!("PGCLUSTER_PG_BIN={}", p.display()),
        None => "PGCLUSTER_PG_BIN (unset)".to_string(),
    };
    format!(
        "{env}, cache {}, /usr/lib/postgresql/*/bin, pg_config on PATH",
        cache_dir().display()
    )
}

fn env_bin() -> Option<PathBuf> {
    std::env::var_os("PGCLUSTER_PG_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn debian_bindirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("postgres").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn pg_config_bindir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let pg_config = std::env::split_paths(&path)
        .map(|d| d.join("pg_config"))
        .find(|p| is_executable(p))?;
    let out = run_stdout(Command::new(pg_config).arg("--bindir")).ok()?;
    let line = out.lines().next()?.trim();
    (!line.is_empty()).then(|| PathBuf::from(line))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
