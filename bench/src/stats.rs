//! Latency histograms, percentile summaries, spreads of per-round ratios, and load averages.

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency histogram in microseconds (1 µs .. 10 min, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Records `us` microseconds, clamped into the histogram's range.
pub fn record(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.max(1));
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// The median, minimum and maximum of a small sample (e.g. one ratio per round), with the values.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub values: Vec<f64>,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median: round3(median),
            min: round3(v[0]),
            max: round3(v[n - 1]),
            values: values.iter().map(|x| round3(*x)).collect(),
        }
    }

    /// `1.14× (1.10–1.19)`.
    pub fn ratio_text(&self) -> String {
        if self.values.is_empty() {
            return "–".into();
        }
        format!("{:.2}× ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `/proc/loadavg` at one instant.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadAvg {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
    /// runnable/total scheduling entities, as the kernel reports them.
    pub tasks: String,
}

impl LoadAvg {
    pub fn now() -> LoadAvg {
        let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let f: Vec<&str> = text.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
        LoadAvg {
            one: num(0),
            five: num(1),
            fifteen: num(2),
            tasks: f.get(3).map(|s| s.to_string()).unwrap_or_default(),
        }
    }

    pub fn short(&self) -> String {
        format!("{:.2}", self.one)
    }
}

/// A tiny deterministic PRNG (xorshift64*), for jitter in the wake-up measurements.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_even_and_odd() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(Spread::of(&[]).ratio_text(), "–");
    }

    #[test]
    fn latency_percentiles() {
        let mut h = histogram();
        for us in 1..=1000 {
            record(&mut h, us);
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert!((499..=501).contains(&l.p50_us));
        assert!((989..=991).contains(&l.p99_us));
    }
}

/// CPU time (user + system) in clock ticks of 1/100 s, from `/proc`.
pub mod cpu {
    use std::sync::OnceLock;

    /// The postmaster of the private cluster, if the server runs on this machine.
    pub static POSTMASTER: OnceLock<u32> = OnceLock::new();

    /// Linux reports process times in USER_HZ, which is 100 on every architecture.
    pub const TICK_US: f64 = 10_000.0;

    /// (ppid, utime + stime, cutime + cstime) of a process.
    fn stat(pid: &str) -> Option<(u32, u64, u64)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may contain spaces) start at "state".
        let rest = &text[text.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        // rest[0] = state (field 3), so field k is rest[k - 3].
        Some((n(1)? as u32, n(11)? + n(12)?, n(13)? + n(14)?))
    }

    /// The server's CPU so far: the postmaster's own and its reaped children's (exited
    /// backends), plus every live child's. Also returns how many children are alive.
    pub fn server_ticks() -> Option<(u64, usize)> {
        let pm = *POSTMASTER.get()?;
        let (_, own, reaped) = stat(&pm.to_string())?;
        let mut total = own + reaped;
        let mut live = 0;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if let Some((ppid, t, c)) = stat(pid)
                && ppid == pm
            {
                total += t + c;
                live += 1;
            }
        }
        Some((total, live))
    }

    /// utime + stime of one process (e.g. a backend, by its `pg_backend_pid()`).
    pub fn process_ticks(pid: u32) -> Option<u64> {
        stat(&pid.to_string()).map(|(_, t, _)| t)
    }

    /// utime + stime of this process (all its threads).
    pub fn self_ticks() -> u64 {
        stat("self").map_or(0, |(_, t, _)| t)
    }

    /// CPU of this process's reaped children (the pgbench runs).
    pub fn children_ticks() -> u64 {
        stat("self").map_or(0, |(_, _, c)| c)
    }
}
