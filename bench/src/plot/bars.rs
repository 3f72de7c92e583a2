//! Grouped bar charts on a log axis (one group per cell, one bar per system), for the peers
//! section.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Plot;
use super::chart::{Axis, log_bounds, num};
use crate::{BoxResult, err};

pub(super) struct BarSeries {
    pub(super) label: String,
    pub(super) color: RGBColor,
    /// One value per group (None: not measured there).
    pub(super) values: Vec<Option<f64>>,
    /// Groups where the bar is flagged (drawn outlined, its value marked with `*`).
    pub(super) flagged: Vec<bool>,
}

pub(super) struct BarChart {
    pub(super) title: String,
    pub(super) y_desc: String,
    pub(super) groups: Vec<String>,
    pub(super) series: Vec<BarSeries>,
    /// What a flagged bar means (shown under the legend), if any bar is flagged.
    pub(super) flag_note: String,
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> BoxResult<()> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| err(format!("plotting {}: {e:?}", c.title));
    root.fill(&WHITE).map_err(e)?;
    let (lo, hi) = match log_bounds(
        c.series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied()),
    ) {
        // Headroom above the tallest bar for the legend (about 1.5 decades).
        Axis::Log(a, b) | Axis::Lin(a, b) => (a, b * 25.0),
    };
    let n = c.groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, (lo..hi).log_scale())
        .map_err(e)?;
    let fmt = |v: &f64| num(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(c.y_desc.as_str())
        .y_label_formatter(&fmt)
        .label_style(("sans-serif", 13))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    let k = c.series.len().max(1) as f64;
    let width = 0.8 / k;
    let mut any_flag = false;
    for (si, s) in c.series.iter().enumerate() {
        // (left edge, value, flagged); a value of 0 (nothing consumed) gets no bar, only its label.
        let bars: Vec<(f64, f64, bool)> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| {
                v.map(|v| {
                    let x0 = g as f64 + 0.1 + si as f64 * width;
                    (x0, v, s.flagged.get(g).copied().unwrap_or(false))
                })
            })
            .collect();
        let color = s.color;
        chart
            .draw_series(bars.iter().filter(|b| b.1 > lo).map(|&(x0, v, _)| {
                Rectangle::new([(x0, lo), (x0 + width * 0.92, v)], color.filled())
            }))
            .map_err(e)?
            .label(s.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().filter(|b| b.2 && b.1 > lo).map(|&(x0, v, _)| {
                Rectangle::new(
                    [(x0, lo), (x0 + width * 0.92, v)],
                    ShapeStyle::from(BLACK).stroke_width(2),
                )
            }))
            .map_err(e)?;
        let style = TextStyle::from(("sans-serif", 11).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series(bars.iter().map(|&(x0, v, flag)| {
                any_flag |= flag;
                Text::new(
                    format!("{}{}", num(v), if flag { "*" } else { "" }),
                    (x0 + width * 0.46, v.max(lo) * 1.08),
                    style.clone(),
                )
            }))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    let label =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (g, name) in c.groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64 + 0.5, lo));
        root.draw(&Text::new(name.clone(), (px, py + 8), label.clone()))
            .map_err(e)?;
    }
    if any_flag && !c.flag_note.is_empty() {
        let (px, py) = chart.backend_coord(&(0.0, hi));
        root.draw(&Text::new(
            c.flag_note.clone(),
            (px + 8, py + 6),
            TextStyle::from(("sans-serif", 12).into_font()),
        ))
        .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `<name>.svg` and `<name>.png` into `dir`.
pub(super) fn render(dir: &Path, name: &str, c: &BarChart, out: &mut Vec<Plot>) -> BoxResult<()> {
    const SIZE: (u32, u32) = (1000, 560);
    let svg = format!("{name}.svg");
    let png = format!("{name}.png");
    {
        let path = dir.join(&svg);
        let root = SVGBackend::new(&path, SIZE).into_drawing_area();
        draw(&root, c)?;
    }
    let png_ok = {
        let path = dir.join(&png);
        let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
        draw(&root, c).is_ok()
    };
    out.push(Plot {
        title: c.title.clone(),
        svg,
        png: png_ok.then_some(png),
    });
    Ok(())
}
