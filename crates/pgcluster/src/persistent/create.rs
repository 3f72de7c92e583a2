//! Creating a persistent cluster's directory and securing it: `initdb` as the server's account,
//! the generated password, and a `pg_hba.conf` that admits only SCRAM authentication.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{PersistentCluster, create_dir};
use crate::discover::ensure;
use crate::error::{Error, IoContext, Result};
use crate::secret::write_private;
use crate::user::{self, ServerUser};

impl PersistentCluster {
    /// Creates the data directory with `initdb` of PostgreSQL `major` (into a temporary name,
    /// renamed when complete) and records the bin directory.
    pub(super) fn initdb(&self, major: u32, user: Option<&ServerUser>) -> Result<()> {
        let installation = ensure(major)?;
        let staging = self.root.join(format!("data.init-{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        create_dir(&staging, 0o700)?;
        user::chown_to(&staging, user)?;
        let password = self.ensure_password()?;
        // initdb (as the server's account) reads the password from a file of its own, removed
        // right after.
        let pwfile = self
            .root
            .join(format!("pwfile.init-{}", std::process::id()));
        write_private(&pwfile, &format!("{password}\n"))?;
        user::chown_to(&pwfile, user)?;
        let mut cmd = Command::new(installation.bin("initdb"));
        cmd.arg("-D")
            .arg(&staging)
            .args([
                "-U",
                "postgres",
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", pwfile.display()));
        let ran = self.run_as_server(cmd, user);
        let _ = fs::remove_file(&pwfile);
        if let Err((status, output)) = ran? {
            let _ = fs::remove_dir_all(&staging);
            return Err(Error::Initdb {
                data_dir: staging,
                status,
                output,
            });
        }
        let bindir = self.bindir_file();
        fs::write(
            &bindir,
            format!("{}\n", installation.bindir().to_string_lossy()),
        )
        .ctx("writing", &bindir)?;
        fs::rename(&staging, self.data_dir()).ctx("moving into place", &staging)?;
        Ok(())
    }

    /// The password of role `postgres`, generated and written to
    /// [`password_path`](Self::password_path) (mode 0600) if there is none yet.
    pub(super) fn ensure_password(&self) -> Result<String> {
        if let Some(password) = self.password() {
            return Ok(password);
        }
        let path = self.password_path();
        let password = crate::secret::random_password()?;
        write_private(&path, &format!("{password}\n"))?;
        Ok(password)
    }

    /// Whether the data directory has its password and `pg_hba.conf` trusts no one.
    pub(super) fn is_secure(&self) -> bool {
        let hba = fs::read_to_string(self.data_dir().join("pg_hba.conf")).unwrap_or_default();
        let trusting = hba.lines().any(|l| {
            !l.trim_start().starts_with('#') && l.split_whitespace().any(|w| w == "trust")
        });
        self.password().is_some() && !trusting
    }

    /// Converts a data directory made with trust authentication (by an older version): sets the
    /// password of `postgres` in single-user mode and rewrites `pg_hba.conf`. The server must not
    /// run. A no-op when the password file exists and `pg_hba.conf` trusts no one.
    pub(super) fn secure(&self, bindir: &Path, user: Option<&ServerUser>) -> Result<()> {
        if self.is_secure() {
            return Ok(());
        }
        let hba = self.data_dir().join("pg_hba.conf");
        let password = self.ensure_password()?;
        let mut cmd = Command::new(bindir.join("postgres"));
        cmd.arg("--single")
            .arg("-D")
            .arg(self.data_dir())
            .arg("postgres");
        user::prepare_server_command(&mut cmd, user, &self.root);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ctx("running", &bindir.join("postgres"))?;
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(
                &mut stdin,
                format!("ALTER ROLE postgres PASSWORD '{password}'\n").as_bytes(),
            )
            .ctx("writing to", &bindir.join("postgres"))?;
        }
        let out = child
            .wait_with_output()
            .ctx("running", &bindir.join("postgres"))?;
        if !out.status.success() {
            return Err(Error::Command {
                program: "postgres --single".into(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim_end().to_owned(),
            });
        }
        fs::write(&hba, HBA).ctx("writing", &hba)?;
        Ok(())
    }
}

/// The `pg_hba.conf` of a persistent cluster: password (SCRAM) authentication for everyone.
const HBA: &str = "\
# Written by pgcluster: every connection authenticates with scram-sha-256.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
";

/// Fails with a clear message if `user` cannot traverse every ancestor of `dir` (we made it,
/// but the server runs as `user`).
pub(super) fn check_reachable(dir: &Path, user: &ServerUser) -> Result<()> {
    for ancestor in dir.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(ancestor) else {
            continue;
        };
        let mode = meta.mode();
        let can = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !can {
            return Err(Error::Directory {
                path: ancestor.to_path_buf(),
                reason: format!(
                    "the server runs as {:?}, which cannot enter this directory (mode {:o}); \
                     choose another directory or make this one searchable (chmod o+x)",
                    user.name,
                    mode & 0o7777
                ),
            });
        }
    }
    Ok(())
}
