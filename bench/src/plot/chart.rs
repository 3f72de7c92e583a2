//! The chart machinery: a chart as data (axes, series), its drawing on an SVG or bitmap
//! backend, axis bounds, number labels, colours, and the font.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::Plot;
use crate::{BoxResult, err};

pub(super) const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

pub(super) fn ensure_font() -> BoxResult<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font found (looked for {})",
            FONT_PATHS.join(", ")
        ))
    })
    .clone()
    .map_err(err)
}

#[derive(Clone, Copy)]
pub(super) enum Axis {
    Lin(f64, f64),
    Log(f64, f64),
}

pub(super) struct Series {
    pub(super) label: String,
    pub(super) color: RGBColor,
    /// Polylines (several when the series has gaps); the label is drawn once.
    pub(super) lines: Vec<Vec<(f64, f64)>>,
    pub(super) dashed: bool,
    /// Vertical bars (x, low, high), e.g. the min–max of per-round ratios.
    pub(super) bars: Vec<(f64, f64, f64)>,
}

pub(super) struct Chart {
    pub(super) title: String,
    pub(super) x_desc: String,
    pub(super) y_desc: String,
    pub(super) x: Axis,
    pub(super) y: Axis,
    pub(super) series: Vec<Series>,
    /// Horizontal reference lines (y, label).
    pub(super) hlines: Vec<(f64, String)>,
    /// Label the axes with whole numbers (1k, 1M).
    pub(super) x_int: bool,
    pub(super) y_int: bool,
}

/// 3, 40, 500, 6k, 70k, 1M.
pub(super) fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

pub(super) fn color_of(name: &str) -> RGBColor {
    match name {
        "lease" => RGBColor(204, 37, 41),
        "floor" => RGBColor(57, 106, 177),
        "rowver" => RGBColor(62, 150, 81),
        "advisory" => RGBColor(218, 124, 48),
        "select1" | "select1-txn" => RGBColor(128, 128, 128),
        "typed" => RGBColor(107, 76, 154),
        _ => RGBColor(83, 81, 84),
    }
}

pub(super) const PALETTE: [RGBColor; 6] = [
    RGBColor(204, 37, 41),
    RGBColor(57, 106, 177),
    RGBColor(62, 150, 81),
    RGBColor(218, 124, 48),
    RGBColor(107, 76, 154),
    RGBColor(128, 128, 128),
];

pub(super) fn draw_on<DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    c: &Chart,
    x: X,
    y: Y,
) -> BoxResult<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| err(format!("plotting {}: {e:?}", c.title));
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    let fmt = |v: &f64| num(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .label_style(("sans-serif", 13))
        .light_line_style(RGBColor(235, 235, 235));
    if c.x_int {
        mesh.x_label_formatter(&fmt);
    }
    if c.y_int {
        mesh.y_label_formatter(&fmt);
    }
    mesh.draw().map_err(e)?;
    for s in &c.series {
        let style = ShapeStyle::from(s.color).stroke_width(2);
        let mut labelled = false;
        for line in &s.lines {
            if line.is_empty() {
                continue;
            }
            chart
                .draw_series(line.iter().map(|&p| Circle::new(p, 3, s.color.filled())))
                .map_err(e)?;
            let anno = if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(line.iter().copied(), 6, 4, style))
                    .map_err(e)?
            } else {
                chart
                    .draw_series(LineSeries::new(line.iter().copied(), style))
                    .map_err(e)?
            };
            if !labelled {
                let color = s.color;
                let dashed = s.dashed;
                anno.label(s.label.as_str()).legend(move |(x, y)| {
                    let st = ShapeStyle::from(color).stroke_width(2);
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 7, y)], st)
                    } else {
                        PathElement::new(vec![(x, y), (x + 18, y)], st)
                    }
                });
                labelled = true;
            }
        }
        for &(x, lo, hi) in &s.bars {
            chart
                .draw_series(LineSeries::new(
                    vec![(x, lo), (x, hi)],
                    ShapeStyle::from(s.color).stroke_width(1),
                ))
                .map_err(e)?;
        }
    }
    for (yv, label) in &c.hlines {
        let (x0, x1) = match c.x {
            Axis::Lin(a, b) | Axis::Log(a, b) => (a, b),
        };
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x0, *yv), (x1, *yv)],
                4,
                4,
                ShapeStyle::from(grey),
            ))
            .map_err(e)?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], ShapeStyle::from(grey))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

pub(super) fn draw_any<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &Chart,
) -> BoxResult<()> {
    let lin = |a: f64, b: f64| -> Range<f64> { a..b };
    match (c.x, c.y) {
        (Axis::Lin(a, b), Axis::Lin(p, q)) => draw_on(root, c, lin(a, b), lin(p, q)),
        (Axis::Log(a, b), Axis::Lin(p, q)) => draw_on(root, c, lin(a, b).log_scale(), lin(p, q)),
        (Axis::Lin(a, b), Axis::Log(p, q)) => draw_on(root, c, lin(a, b), lin(p, q).log_scale()),
        (Axis::Log(a, b), Axis::Log(p, q)) => {
            draw_on(root, c, lin(a, b).log_scale(), lin(p, q).log_scale())
        }
    }
}

/// Writes `<name>.svg` and `<name>.png` into `dir`.
pub(super) fn render(dir: &Path, name: &str, c: &Chart, out: &mut Vec<Plot>) -> BoxResult<()> {
    const SIZE: (u32, u32) = (900, 540);
    let svg = format!("{name}.svg");
    let png = format!("{name}.png");
    {
        let path = dir.join(&svg);
        let root = SVGBackend::new(&path, SIZE).into_drawing_area();
        draw_any(&root, c)?;
    }
    let png_ok = {
        let path = dir.join(&png);
        let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
        draw_any(&root, c).is_ok()
    };
    out.push(Plot {
        title: c.title.clone(),
        svg,
        png: png_ok.then_some(png),
    });
    Ok(())
}

/// Bounds of a log axis around the values (a little margin, whole decades not required).
pub(super) fn log_bounds(values: impl Iterator<Item = f64>) -> Axis {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return Axis::Log(1.0, 10.0);
    }
    Axis::Log(lo / 1.5, hi * 1.5)
}

pub(super) fn lin_bounds(values: impl Iterator<Item = f64>, from_zero: bool) -> Axis {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return Axis::Lin(0.0, 1.0);
    }
    if from_zero {
        lo = 0.0;
    }
    let pad = ((hi - lo) * 0.08).max(1e-9);
    Axis::Lin(if from_zero { 0.0 } else { lo - pad }, hi + pad)
}
