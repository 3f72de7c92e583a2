//! The environment a run was measured in: machine, kernel, git commit, PostgreSQL and pgbench.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    /// CPUs this process may run on (`available_parallelism`).
    pub cores: usize,
    pub kernel: String,
    pub os: String,
    pub mem_total_gib: f64,
}

impl Machine {
    pub fn capture() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']))
            })
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let os = std::fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .unwrap_or("unknown")
            .trim_matches('"')
            .to_string();
        let mem_total_gib = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
            .map(|kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
            .unwrap_or(f64::NAN);
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            os,
            mem_total_gib,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Git {
    pub commit: String,
    /// Files with uncommitted changes (`git status --porcelain`), 0 for a clean tree.
    pub dirty_files: usize,
}

impl Git {
    pub fn capture(repo: &Path) -> Git {
        let out = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(repo)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        Git {
            commit: out(&["rev-parse", "HEAD"]).map_or("unknown".into(), |s| s.trim().to_string()),
            dirty_files: out(&["status", "--porcelain"]).map_or(0, |s| s.lines().count()),
        }
    }
}

/// `2025-06-01T12:34:56Z` and `20250601T123456Z` (for directory names) for a Unix time.
pub fn utc_stamp(t: SystemTime) -> (String, String) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
        format!("{y:04}{mo:02}{d:02}T{h:02}{m:02}{s:02}Z"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_stamp_known_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_stamp(t).0, "2000-02-29T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(utc_stamp(t).1, "20231114T221320Z");
    }
}
