//! The named pauses of a partition worker between tries of a call that failed: doubling per
//! failure from a first pause, capped.

use std::time::Duration;

/// A pause of `base × 2^min(failures, doublings)`, at most `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pause {
    base: Duration,
    doublings: u32,
    max: Duration,
}

/// After a failed `receive` or batch (the batch stays open and is received again): 100 ms
/// doubling to 5 s.
pub(crate) const FAILED_CALL: Pause = Pause {
    base: Duration::from_millis(50),
    doublings: 7,
    max: Duration::from_secs(5),
};

/// After an `ack` or `nack` that got no answer (it is sent again): 100 ms doubling to 2 s.
pub(crate) const UNANSWERED_SETTLE: Pause = Pause {
    base: Duration::from_millis(50),
    doublings: 6,
    max: Duration::from_secs(2),
};

impl Pause {
    /// The pause after the `failures`-th failure in a row (1 the first time).
    pub(crate) fn after(&self, failures: u32) -> Duration {
        self.base
            .saturating_mul(1 << failures.min(self.doublings))
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_their_first_and_stop_at_their_cap() {
        assert_eq!(FAILED_CALL.after(1), Duration::from_millis(100));
        assert_eq!(FAILED_CALL.after(3), Duration::from_millis(400));
        assert_eq!(FAILED_CALL.after(40), Duration::from_secs(5));
        assert_eq!(UNANSWERED_SETTLE.after(1), Duration::from_millis(100));
        assert_eq!(UNANSWERED_SETTLE.after(40), Duration::from_secs(2));
    }
}
