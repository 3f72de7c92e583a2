//! The console section's tables: in the summary, and printed on stdout by `pglease-bench console`.

use std::fmt::Write as _;

use super::{ConsoleResult, TARGET_P95_MS};

fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn mib(bytes: i64) -> String {
    format!("{:.0} MiB", bytes as f64 / 1048576.0)
}

/// The table of every endpoint: p50/p95/p99/max at 1 and at N clients (ms) and the verdict.
pub fn table(r: &ConsoleResult) -> String {
    let mut w = String::new();
    let _ = writeln!(
        w,
        "| endpoint | reads | 1 client p50 | p95 | p99 | max | {n} clients p50 | p95 | p99 | max | errors | p95 ≤ {TARGET_P95_MS} ms |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        n = r.clients
    );
    for e in &r.endpoints {
        let (s, c) = (&e.sequential, &e.concurrent);
        let _ = writeln!(
            w,
            "| {} | {} | {} | **{}** | {} | {} | {} | **{}** | {} | {} | {} | {} |",
            e.name,
            e.reads,
            ms(s.p50_us),
            ms(s.p95_us),
            ms(s.p99_us),
            ms(s.max_us),
            ms(c.p50_us),
            ms(c.p95_us),
            ms(c.p99_us),
            ms(c.max_us),
            e.errors_sequential + e.errors_concurrent,
            if e.meets_target { "met" } else { "**missed**" }
        );
    }
    let missed: Vec<&str> = r
        .endpoints
        .iter()
        .filter(|e| !e.meets_target)
        .map(|e| e.name.as_str())
        .collect();
    let _ = writeln!(
        w,
        "\nTimes in ms. {}",
        if missed.is_empty() {
            format!(
                "Every endpoint met p95 ≤ {TARGET_P95_MS} ms at 1 and at {} clients.",
                r.clients
            )
        } else {
            format!(
                "Missed p95 ≤ {TARGET_P95_MS} ms (at 1 or {} clients, or with errors): {}.",
                r.clients,
                missed.join(", ")
            )
        }
    );
    for e in r.endpoints.iter().filter(|e| e.first_error.is_some()) {
        let _ = writeln!(
            w,
            "- {}: first error: {}",
            e.name,
            e.first_error.as_deref().unwrap_or_default()
        );
    }
    w
}

pub fn markdown(w: &mut String, r: &ConsoleResult) {
    let s = &r.seeded;
    let _ = writeln!(
        w,
        "## Console at scale: {} leases, {} queued messages (target: p95 ≤ {TARGET_P95_MS} ms)\n",
        s.leases, s.messages
    );
    let _ = writeln!(
        w,
        "- data (seeded in {:.0} s through the extensions' calls, then VACUUM (ANALYZE)): pg_lease {}, pg_lease_queue {}; {} held, {} lapsed, {} free ({} semaphore slots, 1 election, 8 queue partitions); {} history rows; {} messages on {} keys in 8 partitions, {} in an open batch, {} dead letters; lease.leases {}, lease.grant_history {}, lease_queue.messages {}",
        s.seconds,
        s.pg_lease_version,
        s.lease_queue_version,
        s.held,
        s.lapsed,
        s.free,
        s.semaphore_slots,
        s.history_rows,
        s.messages,
        s.message_keys,
        s.open_batch,
        s.dead_letters,
        mib(s.leases_bytes),
        mib(s.history_bytes),
        mib(s.messages_bytes)
    );
    let _ = writeln!(
        w,
        "- console: `pglease {}` ({} build: {}), connected as the workload role over the server's Unix socket",
        r.console_args.join(" "),
        r.pglease_profile,
        r.pglease
    );
    let _ = writeln!(
        w,
        "- method: per endpoint, {} untimed requests, then {} requests one after another on one keep-alive HTTP/1.1 connection, then {} requests from {} connections at once ({} each, after 2 untimed each); time = request written → whole answer read (events: stream opened on a new connection → first `view` event read); HdrHistogram; {:.0} s in all",
        r.warmup,
        r.requests,
        r.requests,
        r.clients,
        r.requests.div_ceil(r.clients),
        r.measure_seconds
    );
    let _ = writeln!(
        w,
        "- load average (1 min): {:.2} before, {:.2} after\n",
        r.load_before.one, r.load_after.one
    );
    w.push_str(&table(r));
    let _ = writeln!(w);
    if !r.sql.is_empty() {
        let _ = writeln!(
            w,
            "The console's SQL alone (tokio-postgres, same role, simple protocol, one connection):\n"
        );
        let _ = writeln!(
            w,
            "| statement | p50 | p95 | max | |\n| --- | --- | --- | --- | --- |"
        );
        for q in &r.sql {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} |",
                q.name,
                ms(q.latency.p50_us),
                ms(q.latency.p95_us),
                ms(q.latency.max_us),
                q.error.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(w);
    }
    if let Some(t) = &r.timeout_check {
        let _ = writeln!(
            w,
            "Statement timeout: a console started with `--statement-timeout {}ms` answered `{}` with HTTP {} (`{}`) in {:.1} ms, and `{}` pushed a `{}` event first, after {:.1} ms: {}.\n",
            t.statement_timeout_ms,
            t.path,
            t.status,
            t.error_kind,
            t.answered_ms,
            t.event_path,
            t.first_event,
            t.event_ms,
            if t.ok {
                "as it should"
            } else {
                "NOT as it should"
            }
        );
    }
}
