//! Plots of a run, as SVG and PNG (plotters; text rendered with a system TrueType font through
//! ab_glyph, so no fontconfig is needed; without any usable font file no plots are written).

use std::path::Path;

use plotters::prelude::*;

use crate::BoxResult;
use crate::interleave::GroupResult;
use crate::report::{Report, TARGETS};

mod bars;
mod chart;
mod hotpath;

use chart::*;

pub struct Plot {
    pub title: String,
    pub svg: String,
    pub png: Option<String>,
}

fn clients_axis(groups: &[&GroupResult]) -> Axis {
    let max = groups.iter().map(|g| g.clients).max().unwrap_or(1) as f64;
    Axis::Log(0.8, max * 1.25)
}

/// Latency percentiles and throughput by clients, one pair of plots per workload and sync mode.
fn group_plots(dir: &Path, wl: &str, groups: &[GroupResult], out: &mut Vec<Plot>) -> BoxResult<()> {
    for sync in ["off", "on"] {
        let gs: Vec<&GroupResult> = groups.iter().filter(|g| g.sync_commit == sync).collect();
        if gs.is_empty() {
            continue;
        }
        let names: Vec<String> = gs[0].variants.iter().map(|v| v.name.clone()).collect();
        let mut lat = Vec::new();
        let mut tput = Vec::new();
        for n in &names {
            let pts = |f: &dyn Fn(&crate::interleave::VariantResult) -> f64| -> Vec<(f64, f64)> {
                gs.iter()
                    .filter_map(|g| g.variant(n).map(|v| (g.clients as f64, f(v))))
                    .collect()
            };
            lat.push(Series {
                label: format!("{n} p50"),
                color: color_of(n),
                lines: vec![pts(&|v| v.latency.p50_us as f64)],
                dashed: false,
                bars: vec![],
            });
            lat.push(Series {
                label: format!("{n} p99"),
                color: color_of(n),
                lines: vec![pts(&|v| v.latency.p99_us as f64)],
                dashed: true,
                bars: vec![],
            });
            tput.push(Series {
                label: n.clone(),
                color: color_of(n),
                lines: vec![pts(&|v| v.tps.median)],
                dashed: false,
                bars: gs
                    .iter()
                    .filter_map(|g| {
                        g.variant(n)
                            .map(|v| (g.clients as f64, v.tps.min, v.tps.max))
                    })
                    .collect(),
            });
        }
        let ys = lat
            .iter()
            .flat_map(|s| s.lines.iter().flatten().map(|p| p.1))
            .collect::<Vec<_>>();
        render(
            dir,
            &format!("{}-latency-sync-{sync}", wl.to_lowercase()),
            &Chart {
                title: format!("{wl} latency by clients (synchronous_commit={sync})"),
                x_desc: "clients".into(),
                y_desc: "latency per transaction, µs (log)".into(),
                x: clients_axis(&gs),
                y: log_bounds(ys.into_iter()),
                series: lat,
                hlines: vec![],
                x_int: true,
                y_int: true,
            },
            out,
        )?;
        let ys = tput
            .iter()
            .flat_map(|s| s.bars.iter().map(|b| b.2))
            .collect::<Vec<_>>();
        render(
            dir,
            &format!("{}-throughput-sync-{sync}", wl.to_lowercase()),
            &Chart {
                title: format!(
                    "{wl} throughput by clients (synchronous_commit={sync}; bars: min–max of rounds)"
                ),
                x_desc: "clients".into(),
                y_desc: "transactions per second".into(),
                x: clients_axis(&gs),
                y: lin_bounds(ys.into_iter(), true),
                series: tput,
                hlines: vec![],
                x_int: true,
                y_int: true,
            },
            out,
        )?;
    }
    Ok(())
}

/// lease / floor time ratio by clients, with min–max of the rounds and the targets.
fn ratio_plot(dir: &Path, r: &Report, out: &mut Vec<Plot>) -> BoxResult<()> {
    let mut series = Vec::new();
    let mut all: Vec<&GroupResult> = Vec::new();
    let sets = [
        ("W1", "off", &r.cycle, true),
        ("W1", "on", &r.cycle, true),
        ("W2", "off", &r.contend, true),
        ("W1", "off", &r.cycle, false),
    ];
    for (i, (wl, sync, groups, mixed)) in sets.iter().enumerate() {
        let Some(groups) = groups else { continue };
        let gs: Vec<&GroupResult> = groups.iter().filter(|g| g.sync_commit == *sync).collect();
        let pts: Vec<(f64, f64, f64, f64)> = gs
            .iter()
            .filter_map(|g| {
                g.ratio("lease", "floor").map(|x| {
                    let s = if *mixed { &x.mixed_mean } else { &x.time };
                    (g.clients as f64, s.median, s.min, s.max)
                })
            })
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .collect();
        if pts.is_empty() {
            continue;
        }
        all.extend(gs);
        series.push(Series {
            label: if *mixed {
                format!("{wl} synchronous_commit={sync}, mixed runs (mean latency)")
            } else {
                format!("{wl} synchronous_commit={sync}, alternating rounds (tps)")
            },
            color: PALETTE[i],
            lines: vec![pts.iter().map(|p| (p.0, p.1)).collect()],
            dashed: !*mixed,
            bars: pts.iter().map(|p| (p.0, p.2, p.3)).collect(),
        });
    }
    if series.is_empty() {
        return Ok(());
    }
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.bars.iter().flat_map(|b| [b.1, b.2]))
        .chain([1.0, 1.35])
        .collect();
    let hlines = TARGETS
        .iter()
        .map(|(c, t)| {
            (
                *t,
                format!(
                    "target at {c} client{}: {t:.2}×",
                    if *c == 1 { "" } else { "s" }
                ),
            )
        })
        .chain([(1.0, "floor (1×)".to_string())])
        .collect();
    render(
        dir,
        "ratio-lease-floor",
        &Chart {
            title: "Lease time per transaction relative to its bare-SQL floor".into(),
            x_desc: "clients".into(),
            y_desc: "lease / floor, time per transaction".into(),
            x: clients_axis(&all),
            y: lin_bounds(ys.into_iter(), false),
            series,
            hlines,
            x_int: true,
            y_int: false,
        },
        out,
    )
}

fn storm_plots(dir: &Path, r: &Report, out: &mut Vec<Plot>) -> BoxResult<()> {
    let Some(s) = &r.storm else { return Ok(()) };
    let mut series = Vec::new();
    for name in ["lease", "floor"] {
        let lines: Vec<Vec<(f64, f64)>> = s
            .segments
            .iter()
            .filter(|seg| seg.run.variant == name)
            .map(|seg| {
                // Drop the partial first and last seconds of each segment.
                let n = seg.per_second.len();
                seg.per_second
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i > 0 && *i + 1 < n)
                    .map(|(i, c)| (seg.start_s + i as f64 + 0.5, *c as f64))
                    .collect()
            })
            .collect();
        series.push(Series {
            label: format!("{name} renews per second"),
            color: color_of(name),
            lines,
            dashed: false,
            bars: vec![],
        });
    }
    let t_end = s.samples.last().map_or(1.0, |x| x.t);
    let ys = series
        .iter()
        .flat_map(|x| x.lines.iter().flatten().map(|p| p.1))
        .collect::<Vec<_>>();
    render(
        dir,
        "storm-throughput",
        &Chart {
            title: format!(
                "Renew storm: {} held keys, {} clients (segments alternate)",
                s.keys, s.clients
            ),
            x_desc: "seconds".into(),
            y_desc: "renews per second".into(),
            x: Axis::Lin(0.0, t_end),
            y: lin_bounds(ys.into_iter(), true),
            series,
            hlines: vec![],
            x_int: true,
            y_int: true,
        },
        out,
    )?;
    let tables: Vec<String> = s.samples.first().map_or(vec![], |x| {
        x.tables.iter().map(|t| t.table.clone()).collect()
    });
    let mut size = Vec::new();
    let mut dead = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let col = if t.starts_with("lease") {
            color_of("lease")
        } else {
            color_of("floor")
        };
        let pts = |f: &dyn Fn(&crate::sections::TableStat) -> f64| -> Vec<(f64, f64)> {
            s.samples
                .iter()
                .filter_map(|x| x.tables.get(i).map(|ts| (x.t, f(ts))))
                .collect()
        };
        size.push(Series {
            label: format!("{t} heap, KiB"),
            color: col,
            lines: vec![pts(&|ts| ts.heap_bytes as f64 / 1024.0)],
            dashed: false,
            bars: vec![],
        });
        size.push(Series {
            label: format!("{t} index, KiB"),
            color: col,
            lines: vec![pts(&|ts| ts.index_bytes as f64 / 1024.0)],
            dashed: true,
            bars: vec![],
        });
        dead.push(Series {
            label: format!("{t} dead tuples"),
            color: col,
            lines: vec![pts(&|ts| ts.dead_tuples as f64)],
            dashed: false,
            bars: vec![],
        });
    }
    for (name, title, ylabel, ser) in [
        (
            "storm-size",
            "Renew storm: table and index size",
            "KiB",
            size,
        ),
        (
            "storm-dead-tuples",
            "Renew storm: dead tuples (pg_stat_user_tables)",
            "n_dead_tup",
            dead,
        ),
    ] {
        let ys = ser
            .iter()
            .flat_map(|x| x.lines.iter().flatten().map(|p| p.1))
            .collect::<Vec<_>>();
        render(
            dir,
            name,
            &Chart {
                title: title.into(),
                x_desc: "seconds".into(),
                y_desc: ylabel.into(),
                x: Axis::Lin(0.0, t_end),
                y: lin_bounds(ys.into_iter(), true),
                series: ser,
                hlines: vec![],
                x_int: true,
                y_int: true,
            },
            out,
        )?;
    }
    Ok(())
}

fn scale_plot(dir: &Path, r: &Report, out: &mut Vec<Plot>) -> BoxResult<()> {
    let Some(points) = &r.scale else {
        return Ok(());
    };
    let mut series = Vec::new();
    for name in ["lease", "floor"] {
        for (p, dashed) in [("p50", false), ("p99", true)] {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|pt| {
                    pt.group.variant(name).map(|v| {
                        (
                            pt.keys as f64,
                            if p == "p50" {
                                v.latency.p50_us
                            } else {
                                v.latency.p99_us
                            } as f64,
                        )
                    })
                })
                .collect();
            series.push(Series {
                label: format!("{name} {p}"),
                color: color_of(name),
                lines: vec![pts],
                dashed,
                bars: vec![],
            });
        }
    }
    let xs: Vec<f64> = points.iter().map(|p| p.keys as f64).collect();
    let ys = series
        .iter()
        .flat_map(|x| x.lines.iter().flatten().map(|p| p.1))
        .collect::<Vec<_>>();
    render(
        dir,
        "scale-acquire-latency",
        &Chart {
            title: "Acquire (grant) latency by number of keys, 1 client".into(),
            x_desc: "keys in the table (log)".into(),
            y_desc: "latency, µs (log)".into(),
            x: log_bounds(xs.into_iter()),
            y: log_bounds(ys.into_iter()),
            series,
            hlines: vec![],
            x_int: true,
            y_int: true,
        },
        out,
    )
}

/// Every plot of the report; returns what was written.
pub fn all(r: &Report, dir: &Path) -> BoxResult<Vec<Plot>> {
    ensure_font()?;
    let mut out = Vec::new();
    ratio_plot(dir, r, &mut out)?;
    if let Some(g) = &r.cycle {
        group_plots(dir, "W1", g, &mut out)?;
    }
    if let Some(g) = &r.contend {
        group_plots(dir, "W2", g, &mut out)?;
    }
    storm_plots(dir, r, &mut out)?;
    scale_plot(dir, r, &mut out)?;
    queue_plots(dir, r, &mut out)?;
    if let Some(h) = &r.hotpath {
        hotpath::plot(dir, h, &mut out)?;
    }
    peers_plot(dir, r, &mut out)?;
    Ok(out)
}

fn peers_color(name: &str) -> RGBColor {
    match name {
        "lease_queue" => RGBColor(204, 37, 41),
        "pgmq-fifo" => RGBColor(62, 150, 81),
        "pg-boss" => RGBColor(57, 106, 177),
        "pg-boss-fetch" => RGBColor(140, 170, 220),
        "graphile-worker" => RGBColor(218, 124, 48),
        "graphile-batched" => RGBColor(240, 180, 110),
        _ => RGBColor(83, 81, 84),
    }
}

/// Peers section: consumed messages/s with per-key order, a group of bars per cell (keys ×
/// consumers), one bar per system; a bar whose run broke per-key order is outlined and starred.
fn peers_plot(dir: &Path, r: &Report, out: &mut Vec<Plot>) -> BoxResult<()> {
    let Some(p) = &r.peers else { return Ok(()) };
    let mut cells: Vec<(u32, u32)> = Vec::new();
    let mut systems: Vec<String> = Vec::new();
    for run in &p.runs {
        if !cells.contains(&(run.keys, run.consumers)) {
            cells.push((run.keys, run.consumers));
        }
        if !systems.contains(&run.system) {
            systems.push(run.system.clone());
        }
    }
    if cells.is_empty() {
        return Ok(());
    }
    let find = |sys: &str, cell: (u32, u32)| {
        p.runs
            .iter()
            .find(|x| x.system == sys && (x.keys, x.consumers) == cell)
    };
    let series = systems
        .iter()
        .map(|sys| bars::BarSeries {
            label: sys.clone(),
            color: peers_color(sys),
            values: cells
                .iter()
                .map(|&c| find(sys, c).map(|x| x.consumed_per_s))
                .collect(),
            flagged: cells
                .iter()
                .map(|&c| find(sys, c).is_some_and(|x| x.order.violations > 0))
                .collect(),
        })
        .collect();
    bars::render(
        dir,
        "peers-consumed",
        &bars::BarChart {
            title: format!(
                "Per-key ordered consumption: {} messages, drains of at most {} s",
                p.options.backlog, p.options.seconds
            ),
            y_desc: "messages consumed per second, in per-key order (log)".into(),
            groups: cells
                .iter()
                .map(|&(k, c)| {
                    format!(
                        "{} keys, {c} consumer{}",
                        crate::peers::thousands(f64::from(k)),
                        if c == 1 { "" } else { "s" }
                    )
                })
                .collect(),
            series,
            flag_note: "* broke per-key order in this run (see the table)".into(),
        },
        out,
    )
}

fn system_color(name: &str) -> RGBColor {
    match name {
        "lq-keyed" => RGBColor(204, 37, 41),
        "lq-unkeyed" => RGBColor(218, 124, 48),
        "pgmq" => RGBColor(57, 106, 177),
        "pgmq-fifo" => RGBColor(62, 150, 81),
        _ => RGBColor(83, 81, 84),
    }
}

/// Queue section: messages/s by partitions (one plot per synchronous_commit and batch size:
/// consumed solid, produced dashed), and the bloat run's table sizes and dead tuples over time.
fn queue_plots(dir: &Path, r: &Report, out: &mut Vec<Plot>) -> BoxResult<()> {
    let Some(q) = &r.queue else { return Ok(()) };
    let mut batches: Vec<u32> = q.throughput.iter().map(|t| t.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let systems: Vec<String> = q.systems.iter().map(|s| s.0.clone()).collect();
    for sync in ["off", "on"] {
        for &b in &batches {
            let runs: Vec<_> = q
                .throughput
                .iter()
                .filter(|t| t.sync_commit == sync && t.batch == b)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let mut series = Vec::new();
            for sys in &systems {
                let pts = |f: &dyn Fn(&crate::queue::ThroughputRun) -> f64| -> Vec<(f64, f64)> {
                    runs.iter()
                        .filter(|t| &t.system == sys)
                        .map(|t| (t.partitions as f64, f(t)))
                        .collect()
                };
                series.push(Series {
                    label: format!("{sys} consumed"),
                    color: system_color(sys),
                    lines: vec![pts(&|t| t.consumed_per_s)],
                    dashed: false,
                    bars: vec![],
                });
                series.push(Series {
                    label: format!("{sys} produced"),
                    color: system_color(sys),
                    lines: vec![pts(&|t| t.produced_per_s)],
                    dashed: true,
                    bars: vec![],
                });
            }
            let ys: Vec<f64> = series
                .iter()
                .flat_map(|s| s.lines.iter().flatten().map(|p| p.1))
                .collect();
            let maxp = runs.iter().map(|t| t.partitions).max().unwrap_or(1) as f64;
            render(
                dir,
                &format!("queue-throughput-batch-{b}-sync-{sync}"),
                &Chart {
                    title: format!(
                        "Queue throughput, batch {b}, synchronous_commit={sync} (consumers = partitions)"
                    ),
                    x_desc: "partitions (pgmq: consumers)".into(),
                    y_desc: "messages per second (log)".into(),
                    x: Axis::Log(0.8, maxp * 1.25),
                    y: log_bounds(ys.into_iter()),
                    series,
                    hlines: vec![],
                    x_int: true,
                    y_int: true,
                },
                out,
            )?;
        }
    }
    let Some(b) = &q.bloat else { return Ok(()) };
    let tables: Vec<String> = b.tables.iter().map(|t| t.table.clone()).collect();
    let t_end = b.samples.last().map_or(1.0, |x| x.t);
    let mut size = Vec::new();
    let mut dead = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let pts = |f: &dyn Fn(&crate::sections::TableStat) -> f64| -> Vec<(f64, f64)> {
            b.samples
                .iter()
                .filter_map(|x| x.tables.get(i).map(|ts| (x.t, f(ts))))
                .collect()
        };
        size.push(Series {
            label: format!("{t} heap, KiB"),
            color: col,
            lines: vec![pts(&|ts| ts.heap_bytes as f64 / 1024.0)],
            dashed: false,
            bars: vec![],
        });
        size.push(Series {
            label: format!("{t} indexes, KiB"),
            color: col,
            lines: vec![pts(&|ts| ts.index_bytes as f64 / 1024.0)],
            dashed: true,
            bars: vec![],
        });
        dead.push(Series {
            label: format!("{t} dead tuples"),
            color: col,
            lines: vec![pts(&|ts| ts.dead_tuples as f64)],
            dashed: false,
            bars: vec![],
        });
    }
    for (name, title, ylabel, ser) in [
        (
            "queue-bloat-size",
            format!(
                "Queue bloat: table and index size under {} msg/s per system",
                b.rate
            ),
            "KiB",
            size,
        ),
        (
            "queue-bloat-dead-tuples",
            "Queue bloat: dead tuples (pg_stat_user_tables)".to_string(),
            "n_dead_tup",
            dead,
        ),
    ] {
        let ys = ser
            .iter()
            .flat_map(|x| x.lines.iter().flatten().map(|p| p.1))
            .collect::<Vec<_>>();
        render(
            dir,
            name,
            &Chart {
                title,
                x_desc: "seconds".into(),
                y_desc: ylabel.into(),
                x: Axis::Lin(0.0, t_end),
                y: lin_bounds(ys.into_iter(), true),
                series: ser,
                hlines: vec![],
                x_int: true,
                y_int: true,
            },
            out,
        )?;
    }
    Ok(())
}
