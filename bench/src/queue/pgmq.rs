//! pgmq's SQL, from PyPI at bench time, and its installation as the workload role.

use std::path::Path;

use serde::Serialize;
use tokio_postgres::Client;

use crate::{BoxResult, err};

#[derive(Clone, Debug, Serialize)]
pub struct PgmqSource {
    /// The PyPI package version (`pip download --no-deps pgmq==<this>`).
    pub pypi_version: String,
    /// The pgmq extension version its SQL is (the package's `pgmq/sql/VERSION`).
    pub sql_version: String,
    pub wheel: String,
    /// How it was installed.
    pub installed: String,
}

pub(super) fn python() -> &'static str {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok()
    {
        "python3"
    } else {
        "python"
    }
}

/// Downloads (once) the pgmq wheel into `target/bench-cache/pgmq-<version>/` and returns its SQL.
pub fn fetch_pgmq(repo: &Path, version: &str) -> BoxResult<(String, PgmqSource)> {
    let dir = repo
        .join("target")
        .join("bench-cache")
        .join(format!("pgmq-{version}"));
    std::fs::create_dir_all(&dir)?;
    let find_wheel = || -> Option<std::path::PathBuf> {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "whl")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("pgmq-"))
            })
    };
    if find_wheel().is_none() {
        eprintln!(
            "  pip download --no-deps pgmq=={version} into {}",
            dir.display()
        );
        let out = std::process::Command::new(python())
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(&dir)
            .arg(format!("pgmq=={version}"))
            .output()?;
        if !out.status.success() {
            return Err(err(format!(
                "pip download pgmq=={version} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
    }
    let wheel = find_wheel().ok_or_else(|| err("pip download produced no pgmq wheel"))?;
    let read = |member: &str| -> BoxResult<String> {
        let out = std::process::Command::new(python())
            .args([
                "-c",
                "import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())",
            ])
            .arg(&wheel)
            .arg(member)
            .output()?;
        if !out.status.success() {
            return Err(err(format!(
                "{} has no {member} (this pgmq package does not ship its SQL: use the pgmq crate's SQL instead): {}",
                wheel.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8(out.stdout)?)
    };
    let sql = read("pgmq/sql/pgmq.sql")?;
    let sql_version = read("pgmq/sql/VERSION")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    Ok((
        sql,
        PgmqSource {
            pypi_version: version.into(),
            sql_version,
            wheel: wheel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            installed: String::new(),
        },
    ))
}

pub(crate) async fn install_pgmq(c: &Client, sql: &str, src: &mut PgmqSource) -> BoxResult<()> {
    let have: bool = c
        .query_one("SELECT to_regnamespace('pgmq') IS NOT NULL", &[])
        .await?
        .get(0);
    if have {
        src.installed = "schema pgmq already present: used as it is".into();
        return Ok(());
    }
    c.batch_execute(&format!("BEGIN; {sql}; COMMIT;")).await?;
    src.installed =
        "its pgmq.sql run as the workload role (no extension files), in one transaction".into();
    Ok(())
}
