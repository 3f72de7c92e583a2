//! The peers section's tables in the summary.

use std::fmt::Write as _;

use super::{PeerRun, PeersResult};

fn opt(x: Option<f64>, unit: &str) -> String {
    x.map_or("–".into(), |v| {
        if v >= 100.0 {
            format!("{v:.0}{unit}")
        } else {
            format!("{v:.1}{unit}")
        }
    })
}

/// `12 345`.
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// The order column: "ok" or the violations, never hidden.
pub(crate) fn order_text(r: &PeerRun) -> String {
    let mut s = if r.order.violations == 0 {
        "ok".to_string()
    } else {
        format!(
            "**{} VIOLATIONS** ({} keys)",
            r.order.violations, r.order.keys_violated
        )
    };
    if r.order.duplicates > 0 {
        s.push_str(&format!(", {} duplicates", r.order.duplicates));
    }
    s
}

pub fn markdown(w: &mut String, p: &PeersResult) {
    let o = &p.options;
    let _ = writeln!(
        w,
        "## Per-key FIFO among the peers: consumed messages/s with per-key order, same server, same run\n"
    );
    let _ = writeln!(
        w,
        "Versions: {}. pgmq installed: {}. Node packages: {}.\n",
        p.versions
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        p.pgmq_installed,
        p.npm
    );
    for (n, what) in &p.systems {
        let _ = writeln!(w, "- `{n}`: {what}");
    }
    let _ = writeln!(
        w,
        "\nEach run: a backlog of {} messages (~100 B JSON, keys round-robin, each carrying its key and per-key sequence number) preloaded in batches of {}, one connection; then the consumers drain it for at most {} s (batch {}). synchronous_commit=off for every connection. consumed/s = messages handled / time until the last one was settled (Node peers: until the last handler returned), or / the drain window if the backlog was not drained. Order: a message handed to a handler while an earlier message of its key was not yet finished counts as a violation. Cells run every system back to back, the order reversed from one cell to the next.\n",
        o.backlog,
        o.preload_batch.map_or(
            format!(
                "min(keys, {}) (no call carries two messages of one key)",
                o.preload_max
            ),
            |b| format!("{b} whatever the keys (a call may carry several messages of one key)")
        ),
        o.seconds,
        o.batch
    );
    let _ = writeln!(
        w,
        "| keys | consumers | system | produced/s | consumed/s | drained | per-key order | server CPU / msg produce · consume | WAL / msg produce · consume | client CPU / msg consume | empty reads | errors | load |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in &p.runs {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} · {} | {} · {} | {} | {} | {} | {:.2}→{:.2} |",
            thousands(f64::from(r.keys)),
            r.consumers,
            r.system,
            thousands(r.produced_per_s),
            thousands(r.consumed_per_s),
            if r.drained {
                "yes".to_string()
            } else {
                format!("no: {} of {}", r.order.distinct, r.backlog)
            },
            order_text(r),
            opt(r.produce.server_cpu_us, " µs"),
            opt(r.consume.server_cpu_us, " µs"),
            opt(r.produce.wal_bytes, " B"),
            opt(r.consume.wal_bytes, " B"),
            opt(r.consume.client_cpu_us, " µs"),
            r.empty_reads,
            r.errors,
            r.load_before.one,
            r.load_after.one
        );
    }
    let _ = writeln!(w);
    for r in p.runs.iter().filter(|r| r.order.example.is_some()) {
        let _ = writeln!(
            w,
            "- {} at {} keys, {} consumer{}, first violation: {}",
            r.system,
            r.keys,
            r.consumers,
            if r.consumers == 1 { "" } else { "s" },
            r.order.example.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(
        w,
        "\nLoad average (1 min): {:.2} before the section, {:.2} after.\n",
        p.load_before.one, p.load_after.one
    );
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(12345.0), "12 345");
        assert_eq!(thousands(1_234_567.0), "1 234 567");
        assert_eq!(thousands(f64::NAN), "–");
    }
}
