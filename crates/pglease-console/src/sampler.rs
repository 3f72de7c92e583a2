//! Consumed messages per second, per queue: the console samples each queue's acked counter
//! (`lease_queue.status`'s `acked`, summed over partitions) whenever it reads the queues (every
//! `refresh` while a queues page is open) and keeps the rates of the last [`POINTS`] intervals.
//! Nothing is sampled while no one watches; a queue that disappears is forgotten.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many rates a queue's chart shows.
pub const POINTS: usize = 120;

/// Samples closer together than this are not taken (several pages open at once read the queues
/// several times per refresh).
const MIN_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct Sampler {
    queues: Mutex<HashMap<String, Series>>,
}

struct Series {
    last: (Instant, i64),
    rates: VecDeque<f64>,
}

impl Sampler {
    /// Records the acked counters read at `at` and returns every queue's rates (oldest first).
    pub fn record(&self, at: Instant, acked: &[(String, i64)]) -> HashMap<String, Vec<f64>> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.retain(|name, _| acked.iter().any(|(q, _)| q == name));
        for (name, count) in acked {
            match queues.get_mut(name) {
                None => {
                    queues.insert(
                        name.clone(),
                        Series {
                            last: (at, *count),
                            rates: VecDeque::new(),
                        },
                    );
                }
                Some(series) => {
                    let elapsed = at.saturating_duration_since(series.last.0);
                    if elapsed < MIN_INTERVAL {
                        continue;
                    }
                    // A counter that went down was reset (the queue was dropped and created
                    // again): start over from it.
                    let delta = (count - series.last.1).max(0);
                    series.rates.push_back(delta as f64 / elapsed.as_secs_f64());
                    while series.rates.len() > POINTS {
                        series.rates.pop_front();
                    }
                    series.last = (at, *count);
                }
            }
        }
        queues
            .iter()
            .map(|(name, s)| (name.clone(), s.rates.iter().copied().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_acked_messages_per_second_between_samples() {
        let s = Sampler::default();
        let t0 = Instant::now();
        let r = s.record(t0, &[("q".into(), 100)]);
        assert_eq!(r["q"], Vec::<f64>::new(), "one sample is no rate yet");
        let r = s.record(t0 + Duration::from_secs(2), &[("q".into(), 300)]);
        assert_eq!(r["q"], vec![100.0]);
        let r = s.record(t0 + Duration::from_millis(2100), &[("q".into(), 900)]);
        assert_eq!(r["q"], vec![100.0], "a sample 100 ms later is skipped");
        let r = s.record(t0 + Duration::from_secs(3), &[("q".into(), 350)]);
        assert_eq!(r["q"], vec![100.0, 50.0]);
    }

    #[test]
    fn a_dropped_queue_is_forgotten_and_a_reset_counter_is_no_negative_rate() {
        let s = Sampler::default();
        let t0 = Instant::now();
        s.record(t0, &[("a".into(), 5), ("b".into(), 7)]);
        let r = s.record(t0 + Duration::from_secs(1), &[("a".into(), 1)]);
        assert!(!r.contains_key("b"));
        assert_eq!(r["a"], vec![0.0]);
    }

    #[test]
    fn at_most_points_rates_are_kept() {
        let s = Sampler::default();
        let t0 = Instant::now();
        let mut r = HashMap::new();
        for i in 0..(POINTS as u64 + 10) {
            r = s.record(t0 + Duration::from_secs(i), &[("q".into(), i as i64)]);
        }
        assert_eq!(r["q"].len(), POINTS);
    }
}
