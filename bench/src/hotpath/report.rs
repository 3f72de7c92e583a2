//! The hot-path section in summary.md: the targets of issue 26 with verdicts, then each
//! measurement's table.

use std::fmt::Write as _;

use super::latency::TARGET_P50_MS;
use super::writes::CyclePoint;
use super::*;

/// Issue 26's targets.
pub const CONSUME_BATCH_100: f64 = 1.0;
pub const CONSUME_BATCH_1: f64 = 0.8;
pub const TUPLE_WRITES: f64 = 3.0;
pub const WAL_RATIO: f64 = 1.0;
pub const PRODUCE_RATIO: f64 = 1.0;
pub const SCALING: f64 = 2.0;
pub const STORAGE_RATIO: f64 = 1.5;

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The issue measured tuple writes and WAL at batch 100: the batch-1 row is for the record.
fn judged(batch: u32, ok: bool) -> String {
    if batch == 100 {
        verdict(ok).into()
    } else {
        format!(
            "– (for the record: {})",
            if ok { "within" } else { "above" }
        )
    }
}

/// 12 345: digits grouped by threes with a plain space, as the docs write numbers.
pub fn int(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(ch);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

fn spread_int(s: &Spread) -> String {
    if s.values.is_empty() {
        return "–".into();
    }
    format!("{} ({}–{})", int(s.median), int(s.min), int(s.max))
}

fn spread2(s: &Spread) -> String {
    if s.values.is_empty() {
        return "–".into();
    }
    format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max)
}

fn ms(us: f64) -> String {
    format!("{:.1} ms", us / 1000.0)
}

/// The rows of the targets table: (what, ours, pgmq, ratio, target, verdict).
pub fn target_rows(h: &HotpathResult) -> Vec<[String; 6]> {
    let mut rows = Vec::new();
    let pgmq = Contender::Pgmq.name();
    let ours_consumers: Vec<&str> = if h.ack_and_receive {
        vec![Contender::Ours.name(), Contender::OursAar.name()]
    } else {
        vec![Contender::Ours.name()]
    };
    for p in &h.consume {
        let target = if p.batch == 1 {
            CONSUME_BATCH_1
        } else {
            CONSUME_BATCH_100
        };
        for name in &ours_consumers {
            let (Some(o), Some(m), Some(r)) = (p.contender(name), p.contender(pgmq), p.ratio(name))
            else {
                continue;
            };
            rows.push([
                format!(
                    "consume, batch {}, {} consumer{} ({})",
                    p.batch,
                    p.clients,
                    if p.clients == 1 { "" } else { "s" },
                    if *name == Contender::Ours.name() {
                        "receive → ack"
                    } else {
                        "ack_and_receive"
                    }
                ),
                format!("{} msg/s", int(o.per_s.median)),
                format!("{} msg/s", int(m.per_s.median)),
                r.ratio.ratio_text(),
                format!("≥ {target:.1}×"),
                verdict(r.ratio.median >= target).into(),
            ]);
        }
    }
    for w in &h.writes {
        for name in &ours_consumers {
            let (Some(o), Some(m)) = (w.contender(name), w.contender(pgmq)) else {
                continue;
            };
            let r = w.ratios.iter().find(|r| r.contender == *name);
            let suffix = if h.ack_and_receive {
                format!(
                    ", {}",
                    if *name == Contender::Ours.name() {
                        "receive → ack"
                    } else {
                        "ack_and_receive"
                    }
                )
            } else {
                String::new()
            };
            rows.push([
                format!("tuple writes per message, batch {}{suffix}", w.batch),
                format!("{:.2}", o.writes_per_msg.median),
                format!("{:.2}", m.writes_per_msg.median),
                r.map_or("–".into(), |r| r.writes.ratio_text()),
                format!("≤ {TUPLE_WRITES:.0}"),
                judged(w.batch, o.writes_per_msg.median <= TUPLE_WRITES),
            ]);
            rows.push([
                format!("WAL bytes per message, batch {}{suffix}", w.batch),
                int(o.wal_per_msg.median),
                int(m.wal_per_msg.median),
                r.map_or("–".into(), |r| r.wal.ratio_text()),
                format!("≤ {WAL_RATIO:.1}× pgmq"),
                judged(w.batch, r.is_some_and(|r| r.wal.median <= WAL_RATIO)),
            ]);
        }
    }
    for p in &h.produce {
        for name in [Contender::Ours.name(), Contender::OursNotifyOff.name()] {
            let (Some(o), Some(m), Some(r)) = (p.contender(name), p.contender(pgmq), p.ratio(name))
            else {
                continue;
            };
            rows.push([
                format!(
                    "{}{}, {} producer{} (notify {})",
                    p.op,
                    if p.batch > 1 {
                        format!("({})", p.batch)
                    } else {
                        String::new()
                    },
                    p.clients,
                    if p.clients == 1 { "" } else { "s" },
                    if name == Contender::Ours.name() {
                        "on"
                    } else {
                        "off"
                    }
                ),
                format!("{} msg/s", int(o.per_s.median)),
                format!("{} msg/s", int(m.per_s.median)),
                r.ratio.ratio_text(),
                format!("≥ {PRODUCE_RATIO:.1}×"),
                verdict(r.ratio.median >= PRODUCE_RATIO).into(),
            ]);
        }
    }
    for op in ["send", "send_batch"] {
        let get = |name: &str| h.scaling.iter().find(|s| s.op == op && s.contender == name);
        for name in [Contender::Ours.name(), Contender::OursNotifyOff.name()] {
            let (Some(o), Some(m)) = (get(name), get(pgmq)) else {
                continue;
            };
            rows.push([
                format!(
                    "{op} scaling: 4 producers / 1 (notify {})",
                    if name == Contender::Ours.name() {
                        "on"
                    } else {
                        "off"
                    }
                ),
                o.ratio.ratio_text(),
                m.ratio.ratio_text(),
                "–".into(),
                format!("≥ {SCALING:.0}×"),
                verdict(o.ratio.median >= SCALING).into(),
            ]);
        }
    }
    let st = |name: &str| h.storage.iter().find(|s| s.contender == name);
    if let (Some(o), Some(m)) = (st(Contender::Ours.name()), st(pgmq)) {
        let ratio = o.per_message / m.per_message;
        rows.push([
            format!(
                "storage per queued message ({} queued)",
                int(o.messages as f64)
            ),
            format!("{} B", int(o.per_message)),
            format!("{} B", int(m.per_message)),
            format!("{ratio:.2}×"),
            format!("≤ {STORAGE_RATIO:.1}× pgmq"),
            verdict(ratio <= STORAGE_RATIO).into(),
        ]);
    }
    let l = &h.latency;
    if let (Some(o), Some(m)) = (l.p50(Contender::Ours.name()), l.p50(pgmq)) {
        rows.push([
            "send → handler p50 (pgmq: its insert notification)".into(),
            ms(o.median),
            ms(m.median),
            l.ratio_p50.ratio_text(),
            format!("≤ {TARGET_P50_MS:.0} ms"),
            verdict(o.median <= TARGET_P50_MS * 1000.0).into(),
        ]);
    }
    rows.push([
        "no bloat growth over 10 minutes of steady load".into(),
        "not measured here".into(),
        "".into(),
        "".into(),
        "`pglease-bench queue --bloat-seconds 600`".into(),
        "–".into(),
    ]);
    rows
}

pub fn markdown(w: &mut String, h: &HotpathResult) {
    let _ = writeln!(
        w,
        "## Queue hot path (issue 26): pg_lease_queue {} against pgmq {}\n",
        h.lease_queue_version, h.pgmq.sql_version
    );
    let _ = writeln!(
        w,
        "PostgreSQL {}, pg_lease_queue {} ({}), pgmq {} (the SQL of the PyPI package pgmq {}, {}). Every workload session runs with synchronous_commit={}; payloads ~{} bytes of JSON over {} keys (equally many per partition, by lease_queue.partition_of). {} interleaved rounds (contenders A B C, then C B A, ...), timed runs of {} s; a value is the median (min–max) of the rounds, a ratio the median (min–max) of the per-round ratios ours / pgmq. Load average (1 min) {:.2} before, {:.2} after; section time {:.0} s.\n",
        h.postgres_version,
        h.lease_queue_version,
        if h.ack_and_receive {
            "with ack_and_receive"
        } else {
            "no ack_and_receive"
        },
        h.pgmq.sql_version,
        h.pgmq.pypi_version,
        h.pgmq.installed,
        h.sync_commit,
        h.payload_bytes,
        h.keys,
        h.rounds,
        h.seconds,
        h.load_before.one,
        h.load_after.one,
        h.section_seconds
    );
    for (n, what) in &h.contenders {
        let _ = writeln!(w, "- `{n}`: {what}");
    }
    let _ = writeln!(
        w,
        "\n### Targets (issue 26, item 1)\n\n| target | ours | pgmq | ours / pgmq | issue's target | verdict |\n| --- | --- | --- | --- | --- | --- |"
    );
    for r in target_rows(h) {
        let _ = writeln!(w, "| {} |", r.join(" | "));
    }
    rate_tables(w, "Consume", "consumers", &h.consume);
    rate_tables(w, "Produce", "producers", &h.produce);
    let _ = writeln!(
        w,
        "\nProducer scaling, 4-producer rate / 1-producer rate of the same round:\n"
    );
    for s in &h.scaling {
        let _ = writeln!(w, "- {} {}: {}", s.contender, s.op, s.ratio.ratio_text());
    }
    let _ = writeln!(w);
    for p in &h.writes {
        writes_tables(w, p);
    }
    let _ = writeln!(
        w,
        "### Storage per queued message (first run on fresh tables)\n\n| contender | messages queued | before | after | per message | tables that grew (before → after, bytes) |\n| --- | --- | --- | --- | --- | --- |"
    );
    for s in &h.storage {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} B | {} |",
            s.contender,
            int(s.messages as f64),
            int(s.before_bytes as f64),
            int(s.after_bytes as f64),
            int(s.per_message),
            s.tables
                .iter()
                .map(|(t, a, b)| format!("{t} {} → {}", int(*a as f64), int(*b as f64)))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let l = &h.latency;
    let _ = writeln!(
        w,
        "\n### send → handler ({} samples per round)\n\n| contender | how it waits | p50 | p99 |\n| --- | --- | --- | --- |",
        l.samples_per_round
    );
    for (n, what) in &l.modes {
        let _ = writeln!(
            w,
            "| {n} | {what} | {} | {} |",
            l.p50(n).map_or("–".into(), |s| format!(
                "{} ({}–{})",
                ms(s.median),
                ms(s.min),
                ms(s.max)
            )),
            l.p99(n).map_or("–".into(), |s| format!(
                "{} ({}–{})",
                ms(s.median),
                ms(s.min),
                ms(s.max)
            ))
        );
    }
    let _ = writeln!(w);
}

fn rate_tables(w: &mut String, title: &str, clients: &str, points: &[RatePoint]) {
    let _ = writeln!(
        w,
        "\n### {title}, messages/s\n\n| op | batch | {clients} | contender | msg/s | server CPU / msg | call p50 / p99 | ours / pgmq | backends (pg_stat_activity samples) | notes |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for p in points {
        for c in &p.contenders {
            let dry = c.runs.iter().filter(|r| r.ran_dry).count();
            let empty: u64 = c.runs.iter().map(|r| r.empty_reads).sum();
            let mut notes = Vec::new();
            if dry > 0 {
                notes.push(format!("ran dry in {dry} of {} runs", c.runs.len()));
            }
            if empty > 0 {
                notes.push(format!("{empty} empty reads"));
            }
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} µs | {} / {} µs | {} | {} | {} |",
                p.op,
                p.batch,
                p.clients,
                c.contender,
                spread_int(&c.per_s),
                if c.server_cpu_us.values.is_empty() {
                    "–".into()
                } else {
                    format!("{:.1}", c.server_cpu_us.median)
                },
                int(c.call_p50_us.median),
                int(c.call_p99_us.median),
                p.ratio(&c.contender)
                    .map_or("–".into(), |r| r.ratio.ratio_text()),
                super::waits::shares(
                    &super::waits::merge(c.runs.iter().map(|r| r.waits.as_slice())),
                    3
                ),
                notes.join("; ")
            );
        }
    }
}

fn writes_tables(w: &mut String, p: &CyclePoint) {
    let _ = writeln!(
        w,
        "### Tuple writes and WAL per message: batch {}, {} messages (one producer, then one consumer)\n\n| contender | tuple writes / msg (produce + consume) | WAL bytes / msg (produce + consume) | full-page images per cycle | ours / pgmq: writes, WAL |\n| --- | --- | --- | --- | --- |",
        p.batch,
        int(p.messages as f64)
    );
    for c in &p.contenders {
        let r = p.ratios.iter().find(|r| r.contender == c.contender);
        let _ = writeln!(
            w,
            "| {} | {:.2} ({:.2} + {:.2}) | {} ({} + {}) | {} | {} |",
            c.contender,
            c.writes_per_msg.median,
            c.produce_writes_per_msg.median,
            c.consume_writes_per_msg.median,
            int(c.wal_per_msg.median),
            int(c.produce_wal_per_msg.median),
            int(c.consume_wal_per_msg.median),
            spread_int(&c.fpi),
            r.map_or("–".into(), |r| format!(
                "{}, {}",
                r.writes.ratio_text(),
                r.wal.ratio_text()
            ))
        );
    }
    let _ = writeln!(
        w,
        "\nPer table and phase, per message (median of the rounds; upd includes HOT updates, of which hot):\n\n| contender | phase | table | ins | upd (hot) | del | writes |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for c in &p.contenders {
        for t in &c.tables {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.3} | {:.3} ({:.3}) | {:.3} | {:.3} |",
                c.contender,
                t.phase,
                t.table,
                t.ins,
                t.upd,
                t.hot_upd,
                t.del,
                t.ins + t.upd + t.del
            );
        }
    }
    let autovac: i64 = p
        .contenders
        .iter()
        .flat_map(|c| c.runs.iter())
        .map(|r| r.produce.autovacuums + r.consume.autovacuums)
        .sum();
    let _ = writeln!(
        w,
        "\nSpread of the rounds: {}. Autovacuum / autoanalyze runs that ended inside a measured phase: {autovac}.\n",
        p.contenders
            .iter()
            .map(|c| format!(
                "{} writes {} / WAL {}",
                c.contender,
                spread2(&c.writes_per_msg),
                spread_int(&c.wal_per_msg)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[cfg(test)]
mod tests {
    use super::int;

    #[test]
    fn numbers_grouped_by_threes() {
        assert_eq!(int(7.0), "7");
        assert_eq!(int(1498.4), "1 498");
        assert_eq!(int(113_448.0), "113 448");
        assert_eq!(int(1_234_567.0), "1 234 567");
        assert_eq!(int(-2500.0), "-2 500");
        assert_eq!(int(f64::NAN), "–");
    }
}
