//! `/metrics`: OpenMetrics text that a Prometheus parser reads whole, with the values SQL gives;
//! `pglease metrics` serves nothing else.

use std::collections::HashMap;

use crate::common::{Case, run_sql};
use crate::harness::{Ui, epoch_of, until_lapsed};

/// Samples by name and labels (sorted `k=v` pairs).
pub type Samples = HashMap<(String, Vec<(String, String)>), f64>;

/// The console's `/metrics`, see [`scrape_at`].
pub fn scrape(ui: &Ui) -> Samples {
    scrape_at(&ui.addr(), &ui.path("metrics"))
}

/// The samples of `GET path` on `addr`, after checking that it is OpenMetrics text and that the
/// parser read every sample line (prometheus-parse skips lines it cannot read).
pub fn scrape_at(addr: &str, path: &str) -> Samples {
    let r = crate::http::get(addr, path);
    r.expect(200);
    let kind = r.header("content-type").unwrap_or_default().to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(
        r.body.ends_with("# EOF\n"),
        "OpenMetrics ends with # EOF: {}",
        r.body
    );
    let lines: Vec<std::io::Result<String>> = r.body.lines().map(|l| Ok(l.to_owned())).collect();
    let parsed = prometheus_parse::Scrape::parse(lines.into_iter()).expect("the metrics parse");
    let sample_lines = r
        .body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(
        parsed.samples.len(),
        sample_lines,
        "the parser read every sample line of\n{}",
        r.body
    );
    parsed
        .samples
        .into_iter()
        .map(|s| {
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.sort();
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                other => panic!("{}: an unexpected value {other:?}", s.metric),
            };
            ((s.metric, labels), value)
        })
        .collect()
}

/// The value of `name{labels}` in `samples`; panics naming what there is.
pub fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.sort();
    *samples.get(&(name.to_owned(), l)).unwrap_or_else(|| {
        let mut names: Vec<_> = samples.keys().collect();
        names.sort();
        panic!("no sample {name}{labels:?} among {names:#?}")
    })
}

#[test]
fn the_lease_metrics_equal_what_sql_counts() {
    let case = Case::new("console_metrics");
    for k in ["m/a", "m/b", "m/c"] {
        epoch_of(&case, &format!("lease.acquire('{k}', 'w', '1 day')"));
    }
    epoch_of(&case, "lease.acquire('m/lapsed', 'w', '200 milliseconds')");
    let e = epoch_of(&case, "lease.acquire('m/free', 'w', '1 hour')");
    run_sql(
        &case.url,
        &format!("SELECT lease.release('m/free', 'w', {e})"),
    );
    epoch_of(&case, "lease.acquire('m/soon', 'w', '30 minutes')");
    epoch_of(&case, "lease.acquire_slot('pool', 'w1', '1 day', 4)");
    epoch_of(&case, "lease.acquire_slot('pool', 'w2', '1 day', 4)");
    let leader = epoch_of(&case, "lease.acquire('leader', 'n1', '1 day')");
    futures_block(until_lapsed(&case, "m/lapsed"));
    let ui = Ui::start(
        &case,
        &[
            "--election",
            "leader",
            "--election",
            "vacant",
            "--metrics-key-prefix",
            "m/",
            "--expiring-within",
            "1h",
        ],
    );
    let m = scrape(&ui);
    // Counted by the test's own SQL, on the table, as the superuser.
    let counts = run_sql(
        &case.url,
        "SELECT count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > now()),
                count(*) FILTER (WHERE owner IS NOT NULL AND expires_at <= now()),
                count(*) FILTER (WHERE owner IS NULL)
           FROM lease.leases",
    );
    assert_eq!(counts.trim(), "7|1|1", "the state made");
    assert_eq!(value(&m, "pglease_leases_held", &[]), 7.0);
    assert_eq!(value(&m, "pglease_leases_lapsed", &[]), 1.0);
    assert_eq!(value(&m, "pglease_leases_free", &[]), 1.0);
    assert_eq!(value(&m, "pglease_leases_expiring", &[]), 1.0, "m/soon");
    assert_eq!(
        value(&m, "pglease_semaphore_holders", &[("semaphore", "pool")]),
        2.0
    );
    assert_eq!(
        value(&m, "pglease_semaphore_slots", &[("semaphore", "pool")]),
        2.0
    );
    assert_eq!(
        value(&m, "pglease_election_has_leader", &[("election", "leader")]),
        1.0
    );
    assert_eq!(
        value(&m, "pglease_election_has_leader", &[("election", "vacant")]),
        0.0
    );
    assert_eq!(
        value(&m, "pglease_election_term", &[("election", "leader")]),
        leader as f64
    );
    assert_eq!(value(&m, "pglease_lease_epoch", &[("key", "m/a")]), 1.0);
    let left = value(&m, "pglease_lease_expires_in_seconds", &[("key", "m/a")]);
    assert!(left > 86000.0 && left <= 86400.0, "{left}");

    // Grants since the first scrape: two more.
    epoch_of(&case, "lease.acquire('m/d', 'w', '1 day')");
    epoch_of(&case, "lease.acquire('m/e', 'w', '1 day')");
    let m = scrape(&ui);
    assert_eq!(value(&m, "pglease_lease_grants_total", &[]), 2.0);
    assert_eq!(value(&m, "pglease_leases_held", &[]), 9.0);
}

/// Runs a future to completion on a small runtime (for the synchronous tests).
pub fn futures_block<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn pglease_metrics_serves_the_metrics_and_nothing_else() {
    let case = Case::new("console_metrics_only");
    epoch_of(&case, "lease.acquire('only', 'w', '1 hour')");
    let ui = Ui::command(&case, "metrics", &[], &[]);
    assert!(ui.url.ends_with("/metrics"), "{}", ui.url);
    let addr = ui.addr();
    let m = scrape_at(&addr, "/metrics");
    assert_eq!(value(&m, "pglease_leases_held", &[]), 1.0);
    for path in ["/api/leases", "/api/info", "/", "/leases"] {
        crate::http::get(&addr, path).expect(404);
    }
}
