//! The timing of one lease: its validity deadline (`sent + min(ttl, left) - margin`, with the
//! safety margin `ttl / 1000 + safety_margin`), when to renew, how long one renewal attempt may
//! take, and the backoff between failed renewals. Pure arithmetic on monotonic instants; see
//! `docs/CLIENT.md` for the reasoning.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::retry::backoff;

/// The clock-rate term of the safety margin: 1/1000 of the ttl (1000 ppm), twice the 500 ppm that
/// the Linux kernel lets NTP slew a clock, so it covers the client's and the server's clocks
/// drifting apart at the largest rate either may be slewed.
pub(crate) const DRIFT_DIVISOR: u32 = 1000;

/// The timing of one lease, derived from its ttl and the client's options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) ttl: Duration,
    /// Time between regular renewals: `ttl × renew_fraction`.
    pub(crate) interval: Duration,
    /// Subtracted from every validity span: `ttl / 1000 + safety_margin`.
    pub(crate) margin: Duration,
    /// The first retry delay; doubles per failure, up to `interval`.
    pub(crate) backoff_base: Duration,
}

impl Timing {
    /// The timing for `ttl`, or an invalid-argument error if `ttl` is too short for the margin.
    pub(crate) fn new(
        ttl: Duration,
        renew_fraction: f64,
        safety_margin: Duration,
    ) -> Result<Timing> {
        let margin = ttl / DRIFT_DIVISOR + safety_margin;
        if ttl <= margin * 2 {
            return Err(Error::invalid_argument(format!(
                "ttl {ttl:?} is too short: it must exceed twice the safety margin ({margin:?} = \
                 ttl/{DRIFT_DIVISOR} + {safety_margin:?})"
            )));
        }
        let interval = ttl.mul_f64(renew_fraction).max(Duration::from_millis(1));
        let backoff_base = (ttl / 100).clamp(Duration::from_millis(10), Duration::from_millis(100));
        Ok(Timing {
            ttl,
            interval,
            margin,
            backoff_base,
        })
    }

    /// The validity deadline proved by a call sent at `sent` that reported `left` on the lease.
    pub(crate) fn valid_until(&self, sent: Instant, left: Duration) -> Instant {
        sent + self.ttl.min(left).saturating_sub(self.margin)
    }

    /// When to renew next after a confirmed call sent at `sent` with deadline `valid_until`:
    /// after one interval, but never later than halfway to the deadline.
    pub(crate) fn next_renewal(&self, sent: Instant, valid_until: Instant) -> Instant {
        let half = valid_until.saturating_duration_since(sent) / 2;
        sent + self.interval.min(half)
    }

    /// How long one renewal attempt may wait for an answer before the connection is abandoned and
    /// the renewal is sent again on another one.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.interval.max(Duration::from_millis(50))
    }

    /// The delay before retry number `failures` (1-based): exponential from `backoff_base`, capped
    /// at the renewal interval, with jitter (between half and all of it).
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        backoff(self.backoff_base, self.interval, failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_a_thousandth_of_the_ttl_plus_the_constant() {
        let t = Timing::new(
            Duration::from_secs(10),
            1.0 / 3.0,
            Duration::from_millis(20),
        )
        .unwrap();
        assert_eq!(t.margin, Duration::from_millis(30));
        let now = Instant::now();
        assert_eq!(
            t.valid_until(now, Duration::from_secs(10)),
            now + Duration::from_millis(9970)
        );
        // A grant with less left than the ttl (an idempotent re-acquire) counts only what is left.
        assert_eq!(
            t.valid_until(now, Duration::from_secs(1)),
            now + Duration::from_millis(970)
        );
        assert_eq!(t.valid_until(now, Duration::ZERO), now);
    }

    #[test]
    fn ttl_must_exceed_twice_the_margin() {
        let e = Timing::new(Duration::from_millis(40), 0.3, Duration::from_millis(20)).unwrap_err();
        assert!(e.is_invalid_input() && e.code().is_none());
        assert!(Timing::new(Duration::from_millis(100), 0.3, Duration::from_millis(20)).is_ok());
    }

    #[test]
    fn renewals_come_before_half_the_validity_span() {
        let t = Timing::new(Duration::from_secs(3), 0.9, Duration::from_millis(20)).unwrap();
        let now = Instant::now();
        let valid_until = t.valid_until(now, Duration::from_secs(3));
        assert!(t.next_renewal(now, valid_until) <= now + (valid_until - now) / 2);
        let t = Timing::new(Duration::from_secs(3), 0.2, Duration::from_millis(20)).unwrap();
        assert_eq!(
            t.next_renewal(now, valid_until),
            now + Duration::from_millis(600)
        );
    }
}
