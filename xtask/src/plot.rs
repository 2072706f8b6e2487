//! The benchmarks' SVG plots (docs/plots/*.svg, linked from
//! docs/BENCHMARKS.md): pure functions from measured data to an SVG file,
//! drawn with `plotters`' SVG backend (no fonts, no bitmaps).
//!
//! Logarithmic axes are drawn on the logarithm of the value with labels in
//! the value's own units ([`Scale`]), so every chart is one linear mesh.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// log2 of a byte count, labelled `4 KiB`, `1 MiB`, ...
    Log2Bytes,
    /// log10, labelled with the value (`0.1`, `10`, `1000`).
    Log10,
}

impl Scale {
    fn to_axis(self, v: f64) -> f64 {
        if !v.is_finite() {
            return f64::NAN;
        }
        match self {
            Scale::Linear => v,
            Scale::Log2Bytes => v.max(1.0).log2(),
            Scale::Log10 => v.max(1e-12).log10(),
        }
    }

    fn label(self, axis: f64) -> String {
        match self {
            Scale::Linear => trim(axis),
            Scale::Log2Bytes => human_bytes(2f64.powf(axis).round() as u64),
            Scale::Log10 => trim(10f64.powf(axis)),
        }
    }
}

fn trim(v: f64) -> String {
    if v == 0.0 || (v.abs() >= 0.01 && v.abs() < 1e5) {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.0e}")
    }
}

/// `4 KiB`, `16 MiB`: binary units as the benches print sizes.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// One measured line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    /// (x, y) in the data's own units; drawn in this order.
    pub points: Vec<(f64, f64)>,
}

/// A horizontal reference line (a link limit, a target).
#[derive(Clone, Debug)]
pub struct Limit {
    pub name: String,
    pub y: f64,
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    pub series: Vec<Series>,
    pub limits: Vec<Limit>,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws `chart` into the SVG file `path` (its directory is created).
pub fn render(chart: &Chart, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    draw(chart, path).map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

fn draw(chart: &Chart, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let xs = |v: f64| chart.x_scale.to_axis(v);
    let ys = |v: f64| chart.y_scale.to_axis(v);
    let points: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (xs(x), ys(y))))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if points.is_empty() {
        return Err("no finite points to draw".into());
    }
    let span = |vals: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = vals.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
        (lo - pad)..(hi + pad)
    };
    let x_range = span(&mut points.iter().map(|p| p.0));
    let limits = chart
        .limits
        .iter()
        .map(|l| ys(l.y))
        .filter(|y| y.is_finite());
    let mut y_range = span(&mut points.iter().map(|p| p.1).chain(limits));
    if chart.y_scale == Scale::Linear && y_range.start > 0.0 && points.iter().all(|p| p.1 >= 0.0) {
        y_range.start = 0.0;
    }

    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range.clone(), y_range)?;
    let x_label = |v: &f64| chart.x_scale.label(*v);
    let y_label = |v: &f64| chart.y_scale.label(*v);
    c.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(x, y)| (xs(x), ys(y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        if pts.len() <= 24 {
            c.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
    }
    for l in &chart.limits {
        let y = ys(l.y);
        let style = BLACK.mix(0.6).stroke_width(1);
        c.draw_series(LineSeries::new(
            vec![(x_range.start, y), (x_range.end, y)],
            style,
        ))?
        .label(l.name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Where the benches put their plots: docs/plots/ beside docs/BENCHMARKS.md.
pub fn plots_dir() -> PathBuf {
    crate::cmd::root().join("docs/plots")
}

/// The empirical CDF of `samples`: (value, fraction of samples ≤ value),
/// sorted by value; at most `max_points` points (evenly thinned).
pub fn cdf(samples: &[f64], max_points: usize) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 || max_points == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(max_points).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if out.last().map(|p| p.1) != Some(1.0) {
        out.push((v[n - 1], 1.0));
    }
    out
}

/// Rates between successive samples of a byte counter: from
/// (seconds, cumulative bytes) to (midpoint seconds, Mbit/s). A counter that
/// went backwards (reset) yields no point for that interval.
pub fn rates_mbit(samples: &[(f64, u64)]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter_map(|w| {
            let ((t0, b0), (t1, b1)) = (w[0], w[1]);
            let dt = t1 - t0;
            (dt > 0.0 && b1 >= b0).then(|| ((t0 + t1) / 2.0, (b1 - b0) as f64 * 8.0 / dt / 1e6))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in a directory of its own (each test removes its directory).
    fn temp_svg(name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("xtask-plot-{}-{name}", std::process::id()))
            .join(name)
    }

    #[test]
    fn a_rendered_chart_has_every_series_and_limit_in_its_legend() {
        let path = temp_svg("busbw.svg");
        let chart = Chart {
            title: "allreduce busbw".into(),
            x_label: "message size".into(),
            y_label: "busbw Mbit/s".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series: vec![
                Series {
                    name: "causeway".into(),
                    points: vec![(4096.0, 1.0), (1048576.0, 180.0), (67108864.0, 260.0)],
                },
                Series {
                    name: "gloo".into(),
                    points: vec![(4096.0, 0.1), (1048576.0, 40.0), (67108864.0, 170.0)],
                },
            ],
            limits: vec![Limit {
                name: "WAN limit".into(),
                y: 300.0,
            }],
        };
        render(&chart, &path).expect("render");
        let svg = std::fs::read_to_string(&path).expect("svg written");
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for text in ["causeway", "gloo", "WAN limit", "allreduce busbw", "1 MiB"] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        // Two series, one limit line (plus the legend's three short lines).
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        // Three markers per series.
        assert!(svg.matches("<circle").count() >= 6);
    }

    #[test]
    fn a_chart_without_finite_points_is_an_error_not_an_empty_file() {
        let path = temp_svg("empty.svg");
        let chart = Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_scale: Scale::Log10,
            y_scale: Scale::Linear,
            series: vec![Series {
                name: "nan".into(),
                points: vec![(f64::NAN, 1.0)],
            }],
            limits: vec![],
        };
        assert!(render(&chart, &path).is_err());
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn the_cdf_rises_to_one_at_the_largest_sample_and_is_thinned() {
        let samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let c = cdf(&samples, 100);
        assert!(c.len() <= 101 && c.len() >= 100, "{}", c.len());
        assert_eq!(c.first(), Some(&(1.0, 0.001)));
        assert_eq!(c.last(), Some(&(1000.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert!(cdf(&[], 10).is_empty());
        assert_eq!(cdf(&[5.0, f64::NAN], 10), vec![(5.0, 1.0)]);
    }

    #[test]
    fn rates_come_from_counter_deltas_and_skip_resets() {
        let r = rates_mbit(&[(0.0, 0), (0.5, 6_250_000), (1.0, 12_500_000), (1.5, 0)]);
        assert_eq!(r, vec![(0.25, 100.0), (0.75, 100.0)]);
    }

    #[test]
    fn log_axes_label_in_the_values_units() {
        assert_eq!(
            Scale::Log2Bytes.label(Scale::Log2Bytes.to_axis(65536.0)),
            "64 KiB"
        );
        assert_eq!(Scale::Log10.label(Scale::Log10.to_axis(100.0)), "100");
        assert_eq!(Scale::Log10.label(Scale::Log10.to_axis(0.1)), "0.1");
    }
}
