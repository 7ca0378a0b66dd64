//! PNG charts for the compare report (plotters, bitmap backend). Text is drawn with
//! DejaVu Sans from the system (Debian's `fonts-dejavu-core`); without it the charts
//! are skipped and the CSV files remain.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers the font once; an error says why charts cannot be drawn.
pub fn init() -> Result<()> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT).map_err(|e| format!("reading {FONT}: {e}"))?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT} is not a usable font"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Series colours, distinct up to 16 series (the policy studies draw 13).
const COLORS: [RGBColor; 16] = [
    RGBColor(200, 60, 50),
    RGBColor(40, 110, 190),
    RGBColor(60, 160, 80),
    RGBColor(150, 90, 170),
    RGBColor(240, 150, 40),
    RGBColor(30, 170, 170),
    RGBColor(130, 90, 50),
    RGBColor(110, 110, 110),
    RGBColor(230, 120, 190),
    RGBColor(170, 190, 40),
    RGBColor(20, 40, 110),
    RGBColor(250, 200, 120),
    RGBColor(120, 200, 240),
    RGBColor(100, 20, 40),
    RGBColor(0, 0, 0),
    RGBColor(160, 220, 150),
];

/// Grouped bars: one group per category, one bar per series.
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<()> {
    init()?;
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = categories.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
    let cats = categories.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < cats.len() {
                cats[i].clone()
            } else {
                String::new()
            }
        })
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (s, (name, values)) in series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        chart
            .draw_series(values.iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 + 0.1 + s as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, *v)], color.filled())
            }))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Lines over a numeric x axis (logarithmic when `log_x`).
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> Result<()> {
    init()?;
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let pts = || series.iter().flat_map(|(_, v)| v.iter());
    let x_max = pts().map(|p| p.0).fold(1.0f64, f64::max);
    let x_min = pts()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .max(if log_x { 1.0 } else { 0.0 });
    let y_max = pts().map(|p| p.1).fold(1e-9f64, f64::max) * 1.1;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()?;
            for (s, (name, v)) in series.iter().enumerate() {
                let color = COLORS[s % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(v.iter().copied(), color.stroke_width(2)))?
                    .label(name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log_x {
        draw!(
            builder
                .build_cartesian_2d((x_min.min(x_max)..x_max * 1.05).log_scale(), 0f64..y_max)?
        );
    } else {
        draw!(builder.build_cartesian_2d(x_min.min(x_max)..x_max, 0f64..y_max)?);
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// One line of a [`timeline`]: its name, (second, ops/s) and (second, p99 ms).
pub type TimelineSeries = (String, Vec<(f64, f64)>, Vec<(f64, f64)>);

/// A per-second timeline: throughput above, p99 latency below, one line per series,
/// and a dashed vertical line at each marked second (a failure, a migration).
/// `series`: (name, [(second, ops/s)], [(second, p99 ms)]).
pub fn timeline(
    path: &Path,
    title: &str,
    series: &[TimelineSeries],
    marks: &[(f64, String)],
) -> Result<()> {
    init()?;
    let root = BitMapBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 24))?;
    let (top, bottom) = root.split_vertically(400);
    let x_max = series
        .iter()
        .flat_map(|(_, a, b)| a.iter().chain(b.iter()).map(|p| p.0))
        .fold(1.0f64, f64::max);
    let panels = [
        (&top, "ops/s", 0usize),
        (&bottom, "p99 latency (ms)", 1usize),
    ];
    for (area, y_label, which) in panels {
        let pick = |s: &TimelineSeries| -> Vec<(f64, f64)> {
            if which == 0 { s.1.clone() } else { s.2.clone() }
        };
        let y_max = series
            .iter()
            .flat_map(|s| pick(s).into_iter().map(|p| p.1))
            .fold(1e-9f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("second")
            .y_desc(y_label)
            .draw()?;
        for (k, (at, label)) in marks.iter().enumerate() {
            let color = RGBColor(90, 90, 90);
            chart.draw_series(DashedLineSeries::new(
                vec![(*at, 0.0), (*at, y_max)],
                6,
                4,
                color.stroke_width(1),
            ))?;
            if which == 0 {
                let y = y_max * (0.95 - 0.07 * (k % 4) as f64);
                chart.draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*at + x_max * 0.005, y),
                    ("sans-serif", 15),
                )))?;
            }
        }
        for (s, entry) in series.iter().enumerate() {
            let color = COLORS[s % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pick(entry), color.stroke_width(2)))?
                .label(entry.0.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
