//! The queue section's tables in the summary.

use super::QueueResult;
use super::throughput::*;

pub(super) fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

pub(super) fn kib(bytes: i64) -> String {
    if bytes >= 10 * 1024 * 1024 {
        format!("{:.0} MiB", bytes as f64 / 1048576.0)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

pub fn markdown(w: &mut String, q: &QueueResult) {
    use std::fmt::Write as _;
    let _ = writeln!(
        w,
        "## Queue: pg_lease_queue {} and pgmq {} (PyPI package pgmq {}, {}), same server, same run\n",
        q.lease_queue_version, q.pgmq.sql_version, q.pgmq.pypi_version, q.pgmq.installed
    );
    for (n, what) in &q.systems {
        let _ = writeln!(w, "- `{n}`: {what}");
    }
    let _ = writeln!(w);
    if let Some(first) = q.throughput.first() {
        let _ = writeln!(
            w,
            "### Throughput (messages/s; {} producers; consumers = partitions; payload ~100 B; produce phase ≤ {:.0} s, then consume a backlog of {} for ≤ {:.0} s)\n",
            first.producers,
            q.throughput
                .iter()
                .map(|r| r.produce_seconds)
                .fold(0.0, f64::max)
                .ceil(),
            first.backlog,
            q.throughput
                .iter()
                .map(|r| r.consume_seconds)
                .fold(0.0, f64::max)
                .ceil()
        );
        for sync in ["off", "on"] {
            let rs: Vec<&ThroughputRun> = q
                .throughput
                .iter()
                .filter(|r| r.sync_commit == sync)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let _ = writeln!(w, "synchronous_commit={sync}:\n");
            let _ = writeln!(
                w,
                "| partitions | batch | system | produced/s | send call p50 / p99 | server CPU / msg produced | consumed/s | cycle p50 / p99 | server CPU / msg consumed | empty reads | load |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
            );
            for r in rs {
                let cpu = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.0} µs"));
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {:.0} | {} / {} | {} | {:.0} | {} / {} | {} | {} | {:.2}→{:.2} |",
                    r.partitions,
                    r.batch,
                    r.system,
                    r.produced_per_s,
                    ms(r.produce_call.p50_us),
                    ms(r.produce_call.p99_us),
                    cpu(r.produce_cpu_us),
                    r.consumed_per_s,
                    ms(r.consume_cycle.p50_us),
                    ms(r.consume_cycle.p99_us),
                    cpu(r.consume_cpu_us),
                    r.empty_reads,
                    r.load_before.one,
                    r.load_after.one
                );
            }
            let _ = writeln!(w);
        }
    }
    if !q.latency.is_empty() {
        let n = q.latency[0].latency.count + u64::from(q.latency[0].failures);
        let _ = writeln!(
            w,
            "### send → handler, idle waiting consumer ({n} samples per mode; the producer sends one message, autocommit, after a random 5–30 ms pause)\n"
        );
        let _ = writeln!(
            w,
            "| synchronous_commit | mode | p50 | p90 | p99 | max | failures | how |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for m in &q.latency {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                m.sync_commit,
                m.name,
                ms(m.latency.p50_us),
                ms(m.latency.p90_us),
                ms(m.latency.p99_us),
                ms(m.latency.max_us),
                m.failures,
                m.what
            );
        }
        let _ = writeln!(w);
    }
    if !q.takeover.is_empty() {
        let _ = writeln!(
            w,
            "### Takeover after a consumer stops (ttl / visibility timeout {} ms; from the lapse to the heir holding the message)\n",
            q.takeover_ttl_ms
        );
        let _ = writeln!(
            w,
            "| mode | samples | p50 | p90 | max | failures | how |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for m in &q.takeover {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.name,
                m.latency.count,
                ms(m.latency.p50_us),
                ms(m.latency.p90_us),
                ms(m.latency.max_us),
                m.failures,
                m.what
            );
        }
        let _ = writeln!(w);
    }
    if let Some(b) = &q.bloat {
        let _ = writeln!(
            w,
            "### Bloat under steady load ({} s; per system {} messages/s offered in send_batch calls of {}; {} partitions / consumers each, receive or read of up to 100; synchronous_commit={}; autovacuum on, default settings)\n",
            b.seconds, b.rate, b.batch, b.consumers, b.sync_commit
        );
        let _ = writeln!(
            w,
            "Produced / consumed: lease_queue {} / {}, pgmq {} / {}.\n",
            b.produced[0], b.consumed[0], b.produced[1], b.consumed[1]
        );
        let _ = writeln!(
            w,
            "| table | heap start → end (max) | indexes start → end (max) | max live | max dead tuples | dead at end | autovacuums | HOT share of updates |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for t in &b.tables {
            let _ = writeln!(
                w,
                "| {} | {} → {} ({}) | {} → {} ({}) | {} | {} | {} | {} | {} |",
                t.table,
                kib(t.heap_start),
                kib(t.heap_end),
                kib(t.heap_max),
                kib(t.index_start),
                kib(t.index_end),
                kib(t.index_max),
                t.live_max,
                t.dead_max,
                t.dead_end,
                t.autovacuums,
                if t.hot_share.is_finite() {
                    format!("{:.1} %", t.hot_share * 100.0)
                } else {
                    "–".into()
                }
            );
        }
        let _ = writeln!(w);
    }
}
