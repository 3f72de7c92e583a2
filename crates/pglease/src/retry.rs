//! Retrying: which errors are transient (worth sending the same call again), and the jittered
//! exponential backoff between attempts, for the keepalive, the waiting calls and the listening
//! connection alike.

use std::time::Duration;

use crate::error::Error;

/// The first delay of [`waiting_backoff`].
const WAITING_BASE: Duration = Duration::from_millis(50);
/// The longest delay of [`waiting_backoff`].
const WAITING_CAP: Duration = Duration::from_secs(2);

/// Whether retrying the same call may succeed: no answer, or a server error that says nothing
/// about the lease (connection exceptions, shutdown, resource limits, serialization, cancels).
pub(crate) fn is_transient(e: &Error) -> bool {
    if e.is_connection() {
        return true;
    }
    match e.code() {
        Some(code) => {
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || matches!(code, "40001" | "40P01" | "57014")
                // A failover quarantine: no grant now, but one once it ends.
                || code == crate::sqlstate::QUARANTINED
        }
        None => false,
    }
}

/// Exponential backoff from `base`, capped at `cap`, with "equal jitter" (half fixed, half random).
pub(crate) fn backoff(base: Duration, cap: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let delay = base.saturating_mul(1 << exp).min(cap.max(base));
    let half = delay / 2;
    half + half.mul_f64(random_unit())
}

/// The delay before retry number `failures` (1-based) of a call that waits (an acquire's wait, an
/// election observer) or of the listening connection: [`backoff`] from 50 ms, capped at 2 s.
pub(crate) fn waiting_backoff(failures: u32) -> Duration {
    backoff(WAITING_BASE, WAITING_CAP, failures)
}

/// A pseudo-random number in [0, 1), good enough for jitter.
pub(crate) fn random_unit() -> f64 {
    use std::hash::BuildHasher;
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_connection_errors_and_operational_codes() {
        assert!(is_transient(&Error::connection("gone")));
        assert!(!is_transient(&Error::invalid_argument("ttl")));
        assert!(!is_transient(&Error::closed()));
    }

    #[test]
    fn backoff_grows_and_stays_capped_with_jitter() {
        let base = Duration::from_millis(10);
        let cap = Duration::from_millis(300);
        for failures in 1..40 {
            let d = backoff(base, cap, failures);
            let full = base.saturating_mul(1 << (failures - 1).min(16)).min(cap);
            assert!(d >= full / 2 && d <= full, "{failures}: {d:?} vs {full:?}");
        }
    }
}
