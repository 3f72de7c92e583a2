//! Running pgbench with a custom script (`-M prepared`, fixed duration, per-transaction latency
//! log) and turning its log into an HDR histogram. The raw log lives in a temporary directory only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;

use hdrhistogram::Histogram;

use crate::stats::{self, LoadAvg, cpu};
use crate::{BoxResult, err};

/// One pgbench invocation.
pub struct Job<'a> {
    /// One script, or several that pgbench picks from at random per transaction (equal weights).
    pub scripts: Vec<&'a str>,
    pub clients: u32,
    pub seconds: u32,
    pub sync_commit: bool,
    pub conninfo: &'a str,
}

pub struct Outcome {
    /// pgbench's own figure (transactions / duration, without connection time).
    pub tps: f64,
    pub transactions: u64,
    pub failed: u64,
    /// Latency of each transaction, µs.
    pub hist: Histogram<u64>,
    /// The same per script (index as in `Job::scripts`).
    pub per_script: Vec<Histogram<u64>>,
    /// Transactions finished in each whole second of the run (from the log's timestamps).
    pub per_second: Vec<u64>,
    pub threads: u32,
    /// CPU per transaction, µs: the server's (all its processes) and pgbench's. `None` when the
    /// server is not a local private cluster.
    pub server_cpu_per_txn_us: Option<f64>,
    pub client_cpu_per_txn_us: f64,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
}

/// pgbench threads for `clients` on this machine: one per client up to the number of cores.
pub fn threads_for(clients: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    clients.clamp(1, cores.max(1))
}

pub async fn run(pgbench: &Path, job: &Job<'_>) -> BoxResult<Outcome> {
    let dir = tempfile::Builder::new()
        .prefix("pglease-bench-")
        .tempdir()?;
    let mut script_args = Vec::new();
    for (i, text) in job.scripts.iter().enumerate() {
        let path = dir.path().join(format!("script{i}.sql"));
        std::fs::write(&path, text)?;
        script_args.push("--file".into());
        script_args.push(path.into_os_string());
    }
    let prefix = dir.path().join("log");
    let threads = threads_for(job.clients);
    let load_before = LoadAvg::now();
    let server_before = cpu::server_ticks();
    let client_before = cpu::children_ticks();
    let out = tokio::process::Command::new(pgbench)
        .args(["-n", "-M", "prepared", "-l"])
        .arg(format!("--log-prefix={}", prefix.display()))
        .arg(format!("--client={}", job.clients))
        .arg(format!("--jobs={threads}"))
        .arg(format!("--time={}", job.seconds))
        .args(&script_args)
        .arg(job.conninfo)
        .env("PGOPTIONS", crate::server::sync_options(job.sync_commit))
        .env_remove("PGDATABASE")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| err(format!("running {}: {e}", pgbench.display())))?;
    let load_after = LoadAvg::now();
    // The run's backends exit after pgbench does. Sample once the postmaster has reaped them (its
    // live children are back to what they were), never while one is exiting: an exiting child
    // reaped between reading the postmaster and reading the children would be missed.
    let mut server_after = None;
    if let Some((_, live_before)) = server_before {
        for _ in 0..50 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            server_after = cpu::server_ticks();
            if server_after.is_none_or(|(_, live)| live <= live_before) {
                break;
            }
        }
    }
    let client_ticks = cpu::children_ticks().saturating_sub(client_before);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.contains("aborted") {
        return Err(err(format!(
            "pgbench failed ({}):\n{stderr}\n{stdout}\nscript:\n{}",
            out.status,
            job.scripts.join("\n-- next script --\n")
        )));
    }
    let tps = field(&stdout, "tps = ")
        .ok_or_else(|| err(format!("no tps in pgbench output:\n{stdout}")))?;
    let transactions =
        field(&stdout, "number of transactions actually processed: ").unwrap_or(0.0) as u64;
    let failed = field(&stdout, "number of failed transactions: ").unwrap_or(0.0) as u64;

    let mut hist = stats::histogram();
    let mut per_script: Vec<Histogram<u64>> =
        job.scripts.iter().map(|_| stats::histogram()).collect();
    let mut seconds: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last_end: HashMap<u64, u64> = HashMap::new();
    for entry in std::fs::read_dir(dir.path())? {
        let path = entry?.path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log."));
        if !is_log {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        for line in text.lines() {
            // client_id transaction_no time script_no time_epoch time_us ...
            let Some(rec) = parse_line(line) else {
                continue;
            };
            *seconds.entry(rec.end_us / 1_000_000).or_default() += 1;
            // The time of a transaction is the interval between its client's consecutive
            // completions (a closed loop starts the next transaction at once). pgbench's own
            // latency field is not used: on this version it logs 0 µs for some transactions.
            if let Some(prev) = last_end.insert(rec.client, rec.end_us)
                && rec.end_us > prev
            {
                let us = rec.end_us - prev;
                stats::record(&mut hist, us);
                if let Some(h) = per_script.get_mut(rec.script) {
                    stats::record(h, us);
                }
            }
        }
    }
    let per_second = match (seconds.keys().next(), seconds.keys().last()) {
        (Some(&first), Some(&last)) => (first..=last)
            .map(|s| seconds.get(&s).copied().unwrap_or(0))
            .collect(),
        _ => Vec::new(),
    };
    let txns = transactions.max(1) as f64;
    let server_cpu_per_txn_us = match (server_before, server_after) {
        (Some((a, _)), Some((b, _))) => Some(b.saturating_sub(a) as f64 * cpu::TICK_US / txns),
        _ => None,
    };
    Ok(Outcome {
        server_cpu_per_txn_us,
        client_cpu_per_txn_us: client_ticks as f64 * cpu::TICK_US / txns,
        tps,
        transactions,
        failed,
        hist,
        per_script,
        per_second,
        threads,
        load_before,
        load_after,
    })
}

struct LogLine {
    client: u64,
    script: usize,
    /// Completion time, µs since the Unix epoch.
    end_us: u64,
}

/// One line of pgbench's per-transaction log; `None` for failed or skipped transactions.
fn parse_line(line: &str) -> Option<LogLine> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 6 {
        return None;
    }
    f[2].parse::<u64>().ok()?;
    let secs: u64 = f[4].parse().ok()?;
    let us: u64 = f[5].parse().ok()?;
    Some(LogLine {
        client: f[0].parse().ok()?,
        script: f[3].parse().ok()?,
        end_us: secs * 1_000_000 + us,
    })
}

/// The number after `label` on the first line that contains it.
fn field(text: &str, label: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(label))?;
    let rest = &line[line.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// `pgbench --version`.
pub async fn version(pgbench: &Path) -> String {
    match tokio::process::Command::new(pgbench)
        .arg("--version")
        .output()
        .await
    {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(e) => format!("unavailable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_log_lines() {
        let l = super::parse_line("3 17 0 1 1795948516 719023").expect("valid line");
        assert_eq!(
            (l.client, l.script, l.end_us),
            (3, 1, 1_795_948_516_719_023)
        );
        assert!(super::parse_line("3 17 failed 1 1795948516 719023").is_none());
        assert!(super::parse_line("garbage").is_none());
    }

    #[test]
    fn parses_pgbench_summary_fields() {
        let out = "number of transactions actually processed: 4848\n\
                   number of failed transactions: 0 (0.000%)\n\
                   tps = 2427.000987 (without initial connection time)\n";
        assert_eq!(super::field(out, "tps = "), Some(2427.000987));
        assert_eq!(
            super::field(out, "number of failed transactions: "),
            Some(0.0)
        );
        assert_eq!(
            super::field(out, "number of transactions actually processed: "),
            Some(4848.0)
        );
    }
}
