//! Secrets of the servers we start: generated passwords, and files only their owner can read.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{IoContext, Result};

/// A new random password: 24 bytes from `/dev/urandom`, as 48 hex digits (no quoting needed in
/// SQL, libpq conninfo or URLs).
pub(crate) fn random_password() -> Result<String> {
    let mut bytes = [0u8; 24];
    File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .ctx("reading", Path::new("/dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` to a new file `path` with mode 0600 (replacing any file there).
pub(crate) fn write_private(path: &Path, text: &str) -> Result<()> {
    let _ = fs::remove_file(path);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .ctx("creating", path)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).ctx("writing", path)
}
