//! [`Backoff`]: how long a failed message waits before it is delivered again.

use std::time::Duration;

/// The retry delay of a message whose handler failed: exponential in its attempts, capped.
///
/// The delay after the `n`-th delivery failed is `initial × 2^(n-1)`, at most `max`. Attempts are
/// counted by the queue, so the delay keeps growing across consumers and takeovers. Default:
/// 1 s, capped at 5 minutes.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use pglease_queue::Backoff;
///
/// let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(b.delay(1), Duration::from_millis(100));
/// assert_eq!(b.delay(3), Duration::from_millis(400));
/// assert_eq!(b.delay(30), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    /// A backoff from `initial`, doubling per failed delivery, capped at `max` (at least
    /// `initial`). The queue accepts retry delays up to 365 days.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let none = pglease_queue::Backoff::new(Duration::ZERO, Duration::ZERO);
    /// assert_eq!(none.delay(5), Duration::ZERO);
    /// ```
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
        }
    }

    /// The retry delay after the delivery numbered `attempts` (1 the first time) failed.
    ///
    /// # Examples
    ///
    /// ```
    /// let b = pglease_queue::Backoff::default();
    /// assert_eq!(b.delay(2), std::time::Duration::from_secs(2));
    /// ```
    pub fn delay(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(32);
        self.initial
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.max)
            .min(self.max)
    }
}
