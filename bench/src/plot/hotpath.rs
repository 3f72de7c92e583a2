//! The hot-path section's plot: consumed and produced messages/s by clients, ours against pgmq.

use std::path::Path;

use plotters::prelude::RGBColor;

use super::Plot;
use super::chart::*;
use crate::BoxResult;
use crate::hotpath::{Contender, HotpathResult, RatePoint};

/// One line per (workload, contender): colour by workload, pgmq dashed; ours' ack_and_receive
/// (when measured) in a colour of its own.
pub(super) fn plot(dir: &Path, h: &HotpathResult, out: &mut Vec<Plot>) -> BoxResult<()> {
    let workloads: [(&str, &str, u32, &[RatePoint], RGBColor); 4] = [
        (
            "consume",
            "consume batch 100",
            100,
            &h.consume,
            RGBColor(204, 37, 41),
        ),
        (
            "consume",
            "consume batch 1",
            1,
            &h.consume,
            RGBColor(218, 124, 48),
        ),
        ("send", "send", 1, &h.produce, RGBColor(57, 106, 177)),
        (
            "send_batch",
            "send_batch(100)",
            100,
            &h.produce,
            RGBColor(62, 150, 81),
        ),
    ];
    let mut series = Vec::new();
    for (op, label, batch, points, color) in workloads {
        let mut who = vec![(Contender::Ours, color, false)];
        if op == "consume" && h.ack_and_receive {
            let aar = if batch == 100 {
                RGBColor(107, 76, 154)
            } else {
                RGBColor(128, 128, 128)
            };
            who.push((Contender::OursAar, aar, false));
        }
        who.push((Contender::Pgmq, color, true));
        for (w, col, dashed) in who {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.op == op && p.batch == batch)
                .filter_map(|p| {
                    p.contender(w.name())
                        .map(|c| (p.clients as f64, c.per_s.median))
                })
                .collect();
            let bars = points
                .iter()
                .filter(|p| p.op == op && p.batch == batch)
                .filter_map(|p| {
                    p.contender(w.name())
                        .map(|c| (p.clients as f64, c.per_s.min, c.per_s.max))
                })
                .collect();
            if pts.is_empty() {
                continue;
            }
            series.push(Series {
                label: format!("{label}: {}", w.name()),
                color: col,
                lines: vec![pts],
                dashed,
                bars,
            });
        }
    }
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.lines.iter().flatten().map(|p| p.1))
        .collect();
    render(
        dir,
        "hotpath-throughput",
        &Chart {
            title: format!(
                "Queue hot path: pg_lease_queue {} vs pgmq {} (sync off; pgmq dashed)",
                h.lease_queue_version, h.pgmq.sql_version
            ),
            x_desc: "consumers (consume) or producers (send), log".into(),
            y_desc: "messages per second, median of rounds (log)".into(),
            // Room on the left for the legend (drawn in the upper left corner).
            x: Axis::Log(0.25, 5.0),
            y: log_bounds(ys.into_iter()),
            series,
            hlines: vec![],
            x_int: true,
            y_int: true,
        },
        out,
    )
}
