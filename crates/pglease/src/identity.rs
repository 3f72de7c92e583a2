//! Owner identities: the host name this process runs on ([`hostname`], also read by the `pglease`
//! command line for its default owner) and the default owner of a [`crate::Client`].

use crate::retry::random_unit;

/// This host's name as `gethostname(2)` reports it; `None` if it cannot be read, is empty or is
/// not UTF-8.
///
/// The default owner identities are built from it: a [`crate::Client`]'s is `host:pid:random`
/// ([`crate::ClientBuilder::owner`]), the `pglease` command's `host-pid`.
///
/// # Examples
///
/// ```
/// let host = pglease::hostname().unwrap_or_else(|| "localhost".to_owned());
/// let owner = format!("{host}-{}", std::process::id());
/// assert!(pglease::limits::is_valid_name(&owner));
/// ```
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes, as gethostname(2) requires.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if !name.is_empty() => Some(name.to_owned()),
        _ => None,
    }
}

/// `host:pid:random`: the host name (`localhost` if unknown), the process id and 32 random bits.
pub(crate) fn default_owner() -> String {
    let random = (random_unit() * f64::from(u32::MAX)) as u32;
    let host = hostname().unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}:{random:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_owner_is_host_pid_random() {
        let owner = default_owner();
        let parts: Vec<&str> = owner.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{owner}");
        assert_eq!(parts[0].len(), 8);
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(!parts[2].is_empty());
        assert_ne!(default_owner(), owner, "two clients get two owners");
    }
}
