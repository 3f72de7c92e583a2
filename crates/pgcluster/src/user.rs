//! The OS user the server runs as, and how child processes are prepared for it.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::error::{Error, IoContext, Result};

/// An unprivileged user that runs initdb and postgres when we are root.
#[derive(Clone, Debug)]
pub struct ServerUser {
    /// The user's name (`PGCLUSTER_USER`, default `nobody`).
    pub name: String,
    /// Its uid (never 0).
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Whether this process runs with effective uid 0.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Returns `None` when not root (the server runs as us); when root, looks up
/// `$PGCLUSTER_USER` (default `nobody`).
/// The user that PostgreSQL processes must run as: `None` when we are not root (they run as us),
/// else `PGCLUSTER_USER` (default `nobody`), which must exist and must not be root.
///
/// # Errors
///
/// [`Error::UnknownUser`] if that user does not exist or is root.
pub fn server_user() -> Result<Option<ServerUser>> {
    if !is_root() {
        return Ok(None);
    }
    let name = std::env::var("PGCLUSTER_USER")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "nobody".to_string());
    let unknown = || Error::UnknownUser { name: name.clone() };
    let cname = CString::new(name.clone()).map_err(|_| unknown())?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; getpwnam_r fills it in.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call and buf's length is passed.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return Err(unknown());
    }
    if pwd.pw_uid == 0 {
        return Err(unknown());
    }
    Ok(Some(ServerUser {
        name,
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    }))
}

/// Prepares a server-side command (initdb, postgres): runs it as `user` if given (std
/// drops supplementary groups when setting the uid), sets `HOME` and the working directory
/// to `home`, and removes inherited `PG*` variables that could redirect it.
pub(crate) fn prepare_server_command(cmd: &mut Command, user: Option<&ServerUser>, home: &Path) {
    if let Some(user) = user {
        cmd.uid(user.uid).gid(user.gid);
    }
    cmd.env("HOME", home).current_dir(home);
    scrub_pg_env(cmd);
}

/// Removes inherited `PG*` environment variables (except `PGCLUSTER_*`) from `cmd`.
pub(crate) fn scrub_pg_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("PG") && !k.starts_with("PGCLUSTER_") {
            cmd.env_remove(&key);
        }
    }
}

/// Gives `path` to `user` (no-op when `user` is `None`).
pub(crate) fn chown_to(path: &Path, user: Option<&ServerUser>) -> Result<()> {
    if let Some(user) = user {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).ctx("chown", path)?;
    }
    Ok(())
}
