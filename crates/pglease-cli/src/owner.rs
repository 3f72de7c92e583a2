//! Who a command acts as when no owner is given: `<hostname>-<pid>-<nonce>`, and for `run`,
//! `elect` and `queue consume` an owner unique to the process (`--owner` with a nonce appended).
//!
//! A unique owner matters because `lease.acquire` returns the current grant unchanged to its owner
//! (the SQL API's idempotence, so a retried call is safe): two runs with one owner string would
//! both be "granted" the key at one epoch, and the server could not tell them apart.

use std::time::Instant;

/// The default owner of `acquire`: `<hostname>-<pid>-<nonce>` (`pglease` if the host name is
/// unknown), where the nonce is 16 random hex digits: processes in different PID namespaces (or
/// containers) with one host name and one pid still get different owners.
pub fn default_owner() -> String {
    let host = pglease::hostname().unwrap_or_else(|| "pglease".to_string());
    format!("{host}-{}-{}", std::process::id(), nonce())
}

/// The owner of a run: `<OWNER>-<nonce>` with `--owner OWNER`, else [`default_owner`]. Always
/// unique to the run (see the module docs).
pub fn unique_owner(given: Option<&str>) -> String {
    match given {
        Some(name) => format!("{name}-{}", nonce()),
        None => default_owner(),
    }
}

/// The length in bytes of what [`unique_owner`] appends to `--owner`.
pub const OWNER_SUFFIX_BYTES: usize = 17;

/// 16 hex digits from the kernel's random generator (getrandom, else /dev/urandom; if both fail,
/// the clocks and the pid, which still differ between two runs started at different instants).
fn nonce() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: a valid buffer of the given length.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(filled).ok() != Some(bytes.len()) {
        use std::io::Read;
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
        if read.is_err() {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mono = Instant::now().elapsed().as_nanos() as u64;
            bytes = (wall ^ mono.rotate_left(32) ^ u64::from(std::process::id())).to_be_bytes();
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_nonce(s: &str) -> bool {
        s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
    }

    #[test]
    fn every_owner_ends_with_a_fresh_nonce() {
        let given = unique_owner(Some("worker"));
        assert!(
            given.strip_prefix("worker-").is_some_and(is_nonce),
            "{given}"
        );
        assert_eq!(given.len(), "worker".len() + OWNER_SUFFIX_BYTES);
        let default = default_owner();
        let (host_pid, nonce) = default.rsplit_once('-').unwrap();
        assert!(is_nonce(nonce), "{default}");
        assert!(
            host_pid.ends_with(&format!("-{}", std::process::id())),
            "{default}"
        );
        // Same process, same name: still different owners.
        assert_ne!(unique_owner(Some("worker")), unique_owner(Some("worker")));
        assert_ne!(default_owner(), default_owner());
    }
}
