//! The report's plots, as SVG text: quality against examples and seconds,
//! rates, bytes, throughput, distributions, consensus. Over six lines a plot
//! gets a panel per algorithm.

use super::{text, Cell, TRAINERS};
use crate::experiment::{Experiment, RunResult};
use crate::{Error, Result};
use plotters::prelude::*;
use shadowsync_actors::stats::HISTOGRAM_BUCKETS;
use shadowsync_actors::ClusterReport;
use toml::Value;

/// The cells at the largest number of trainers, if the grid varies it (the
/// distributions of the others would crowd the plot).
pub(super) fn largest_n<'a>(experiment: &Experiment, cells: &[Cell<'a>]) -> Vec<Cell<'a>> {
    let n = |c: &Cell| c.setting(TRAINERS).and_then(Value::as_integer);
    if !experiment.keys.iter().any(|k| k == TRAINERS) {
        return cells.to_vec();
    }
    let largest = cells.iter().filter_map(n).max();
    cells.iter().filter(|c| n(c) == largest).cloned().collect()
}

/// Width of a plot's data area, and height of one of its panels.
const DATA_WIDTH: u32 = 680;
const PANEL_HEIGHT: u32 = 340;
/// The most lines a panel holds before the plot is split into panels.
const LINES_PER_PANEL: usize = 6;
/// Colours of a panel's lines, told apart at a glance (Tableau's 10).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The legend's width for labels of `chars` characters at most: wide enough
/// that no label is cut (13 px sans-serif is under 8 px a character).
fn legend_width(chars: usize) -> u32 {
    48 + 8 * chars as u32
}

/// A plot's SVG text, `width` wide and `panels` high, drawn by `draw`.
fn svg(
    width: u32,
    panels: usize,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend, plotters::coord::Shift>,
    ) -> std::result::Result<(), String>,
) -> Result<String> {
    let mut text = String::new();
    {
        let size = (width, PANEL_HEIGHT * panels.max(1) as u32);
        let area = SVGBackend::with_string(&mut text, size).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        draw(&area).map_err(|e| Error::config("report", format!("drawing a plot: {e}")))?;
        area.present().map_err(plot_error)?;
    }
    Ok(text)
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::config("report", format!("drawing a plot: {e}"))
}

/// A point of a line: x, the mean of y over the runs it stands for, and their
/// standard deviation (0 for one run).
type Point = (f64, f64, f64);

/// Lines with a legend: (label, points).
type Series = Vec<(String, Vec<Point>)>;

/// The legend labels of `cells`: only the settings that vary among them
/// (a table's keys one by one), each as `name value`, leaving out the
/// `leave_out` key (the plot's axis); where nothing varies (one line), every
/// setting; "all runs" when there is none.
fn legend_labels(cells: &[&Cell], leave_out: &str) -> Vec<String> {
    let flat = |cell: &Cell| -> Vec<(String, String)> {
        let mut settings = Vec::new();
        for (key, value) in cell.settings.iter().filter(|(k, _)| k != leave_out) {
            match value {
                Value::Table(table) => {
                    settings.extend(table.iter().map(|(k, v)| (format!("{key}.{k}"), text(v))))
                }
                other => settings.push((key.clone(), text(other))),
            }
        }
        settings
    };
    let all: Vec<Vec<(String, String)>> = cells.iter().map(|c| flat(c)).collect();
    let value = |settings: &[(String, String)], key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let mut varying: Vec<String> = Vec::new();
    for (key, _) in all.iter().flatten() {
        let first = value(&all[0], key);
        if !varying.contains(key) && all.iter().any(|s| value(s, key) != first) {
            varying.push(key.clone());
        }
    }
    all.iter()
        .map(|settings| {
            let label = varying
                .iter()
                .filter_map(|key| {
                    let name = key.rsplit('.').next().unwrap_or(key);
                    value(settings, key).map(|v| format!("{name} {v}"))
                })
                .collect::<Vec<_>>()
                .join(", ");
            match (label.is_empty(), settings.is_empty()) {
                (false, _) => label,
                // One line, or lines alike: what they all are.
                (true, false) => settings
                    .iter()
                    .map(|(key, v)| format!("{} {v}", key.rsplit('.').next().unwrap_or(key)))
                    .collect::<Vec<_>>()
                    .join(", "),
                (true, true) => "all runs".to_string(),
            }
        })
        .collect()
}

/// The panels `series` are drawn in: one, or — over [`LINES_PER_PANEL`]
/// lines — one per first setting of their labels (the algorithm, in most
/// grids), each cut to at most that many lines.
fn panels(series: &Series) -> Vec<Series> {
    if series.len() <= LINES_PER_PANEL {
        return vec![series.clone()];
    }
    let mut groups: Vec<(String, Series)> = Vec::new();
    for line in series {
        let first = line.0.split(", ").next().unwrap_or_default().to_string();
        match groups.iter_mut().find(|(g, _)| *g == first) {
            Some((_, group)) => group.push(line.clone()),
            None => groups.push((first, vec![line.clone()])),
        }
    }
    groups
        .into_iter()
        .flat_map(|(_, group)| {
            group
                .chunks(LINES_PER_PANEL)
                .map(<[_]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A log axis's tick label: `1e-6`, `3e-4`, `20`, `0.5`.
fn log_tick(v: &f64) -> String {
    match v.abs() {
        a if a != 0.0 && !(1e-2..1e4).contains(&a) => format!("{v:.0e}"),
        _ => format!("{v}"),
    }
}

/// A log₂ axis's tick label at `v` = log₂ x: x where it is a whole power of
/// two, nothing between.
fn log2_tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", 2f64.powf(v.round()))
    } else {
        String::new()
    }
}

/// How a plot's axes are drawn.
#[derive(Debug, Clone, Copy, Default)]
struct Axes {
    /// A logarithmic y axis.
    log_y: bool,
    /// x values are powers of two (trainers): a log₂ axis with a tick at each.
    log2_x: bool,
    /// The y axis starts at 0 (throughput, ratios), not at the smallest value.
    y_from_zero: bool,
}

/// The range of `series`' points and their spreads, padded; `None` without
/// two finite points.
fn bounds(series: &Series, axes: Axes) -> Option<((f64, f64), (f64, f64))> {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let mut count = 0;
    for &(x, y, sd) in
        points.filter(|(x, y, _)| x.is_finite() && y.is_finite() && (!axes.log_y || *y > 0.0))
    {
        let sd = if sd.is_finite() && !axes.log_y {
            sd
        } else {
            0.0
        };
        (x0, x1) = (x0.min(x), x1.max(x));
        (y0, y1) = (y0.min(y - sd), y1.max(y + sd));
        count += 1;
    }
    if count < 2 {
        return None;
    }
    let pad = |lo: f64, hi: f64| {
        let span = (hi - lo).abs().max(hi.abs() * 1e-3).max(1e-12);
        (lo - 0.05 * span, hi + 0.05 * span)
    };
    // A log axis spans 8 decades at most below the largest value: a run's
    // last sample of replicas made equal (1e-17) would flatten every line.
    let y = match (axes.log_y, axes.y_from_zero) {
        (true, _) => (y0.max(y1 * 1e-8) * 0.8, y1 * 1.25),
        (false, true) => (0.0, pad(0.0, y1).1),
        (false, false) => pad(y0, y1),
    };
    let x = if axes.log2_x {
        (x0 - 0.25, x1 + 0.25)
    } else {
        pad(x0, x1)
    };
    Some((x, y))
}

/// A line plot of `series`, in panels of at most [`LINES_PER_PANEL`] lines
/// that share their axes' ranges, each with its legend right of its data, as
/// wide as its longest label. Where a point stands for several runs, a band
/// of ± one standard deviation shows their spread.
fn line_plot(series: &Series, x_label: &str, y_label: &str, axes: Axes) -> Result<Option<String>> {
    let series: Series = if axes.log2_x {
        series
            .iter()
            .map(|(label, points)| {
                let points = points.iter().filter(|p| p.0 > 0.0);
                (
                    label.clone(),
                    points.map(|&(x, y, sd)| (x.log2(), y, sd)).collect(),
                )
            })
            .collect()
    } else {
        series.clone()
    };
    let Some(((x0, x1), (y0, y1))) = bounds(&series, axes) else {
        return Ok(None);
    };
    let longest = series.iter().map(|(l, _)| l.chars().count()).max();
    let legend = legend_width(longest.unwrap_or(0));
    let panels = panels(&series);
    let svg_text = svg(DATA_WIDTH + legend, panels.len(), |area| {
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        for (lines, area) in panels.iter().zip(area.split_evenly((panels.len(), 1))) {
            let (data, legend_area) = area.split_horizontally(DATA_WIDTH);
            let mut builder = ChartBuilder::on(&data);
            builder
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70);
            macro_rules! finish {
                ($chart:expr $(, $y_ticks:expr)?) => {{
                    let mut chart = $chart;
                    let mut mesh = chart.configure_mesh();
                    mesh.x_desc(x_label).y_desc(y_label);
                    if axes.log2_x {
                        let ticks = (x1 - x0).ceil() as usize + 1;
                        mesh.x_labels(ticks).x_label_formatter(&log2_tick);
                    }
                    $(mesh.y_label_formatter($y_ticks);)?
                    mesh.draw().map_err(draw)?;
                    for (i, (_, pts)) in lines.iter().enumerate() {
                        let colour = COLOURS[i % COLOURS.len()];
                        let finite: Vec<Point> = pts
                            .iter()
                            .copied()
                            .filter(|(_, y, _)| y.is_finite() && (!axes.log_y || *y > 0.0))
                            .collect();
                        if !axes.log_y && finite.iter().any(|p| p.2 > 0.0) {
                            let upper = finite.iter().map(|&(x, y, sd)| (x, y + sd));
                            let lower = finite.iter().rev().map(|&(x, y, sd)| (x, y - sd));
                            let band = upper.chain(lower).collect::<Vec<_>>();
                            chart
                                .draw_series(std::iter::once(Polygon::new(band, colour.mix(0.18))))
                                .map_err(draw)?;
                        }
                        let line = finite.iter().map(|&(x, y, _)| (x, y));
                        chart
                            .draw_series(LineSeries::new(line, colour.stroke_width(2)))
                            .map_err(draw)?;
                    }
                }};
            }
            if axes.log_y {
                let chart = builder
                    .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                    .map_err(draw)?;
                finish!(chart, &log_tick);
            } else {
                let chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(draw)?;
                finish!(chart);
            }
            draw_legend(&legend_area, lines).map_err(draw)?;
        }
        Ok(())
    })?;
    Ok(Some(svg_text))
}

/// The legend of `lines`, in `area` (right of the data): a stroke of each
/// line's colour and its label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    lines: &Series,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    for (i, (label, _)) in lines.iter().enumerate() {
        let y = 24 + 22 * i as i32;
        let colour = COLOURS[i % COLOURS.len()].stroke_width(3);
        area.draw(&PathElement::new(vec![(4, y), (28, y)], colour))?;
        area.draw(&Text::new(label.clone(), (34, y - 7), style.clone()))?;
    }
    Ok(())
}

/// Test NE against `x` of each evaluation, mean and spread over a cell's
/// seeds (their evaluations are at the same points).
pub(super) fn quality_plot(
    cells: &[Cell],
    x: impl Fn(&crate::metrics::EvalPoint) -> f64,
    x_label: &str,
) -> Result<Option<String>> {
    let series = history_series(cells, 0, |cell, i| {
        let (ne, sd) = cell.stat(|r| r.report.history[i].metrics.ne);
        (cell.stat(|r| x(&r.report.history[i])).0, ne, sd)
    });
    line_plot(
        &series,
        x_label,
        "test NE (band: ± sd over seeds)",
        Axes::default(),
    )
}

/// A line per cell whose runs all have two evaluations or more: `point`
/// of each evaluation from `first` on (up to the fewest any run has).
fn history_series(
    cells: &[Cell],
    first: usize,
    point: impl Fn(&Cell, usize) -> (f64, f64, f64),
) -> Series {
    let plotted: Vec<(&Cell, usize)> = cells
        .iter()
        .filter_map(|cell| {
            let len = cell.runs.iter().map(|r| r.report.history.len()).min()?;
            (len >= 2).then_some((cell, len))
        })
        .collect();
    let labels = legend_labels(&plotted.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    plotted
        .iter()
        .zip(labels)
        .map(|((cell, len), label)| (label, (first..*len).map(|i| point(cell, i)).collect()))
        .collect()
}

/// Examples/s between two consecutive evaluations, at the later one's
/// training seconds (mean ± sd over seeds): how fast each cell trained as
/// it went; only for an experiment whose trainers join and leave
/// (`[[elastic]]`), where the pace changes within a run.
pub(super) fn rate_plot(cells: &[Cell]) -> Result<Option<String>> {
    let mut runs = cells.iter().flat_map(|cell| &cell.runs);
    if !runs.any(|r| !r.report.config.elastic.is_empty()) {
        return Ok(None);
    }
    let series = history_series(cells, 1, |cell, i| {
        let rate = |r: &RunResult| {
            let (a, b) = (&r.report.history[i - 1], &r.report.history[i]);
            (b.examples - a.examples) as f64 / (b.train_seconds - a.train_seconds).max(1e-9)
        };
        let (mean, sd) = cell.stat(rate);
        (cell.stat(|r| r.report.history[i].train_seconds).0, mean, sd)
    });
    line_plot(
        &series,
        "training seconds",
        "examples/s since the last evaluation (band: ± sd over seeds)",
        Axes::default(),
    )
}

/// Test NE against the dense sync's bytes sent per example (a log axis),
/// one point per cell that synced, with bars of ± sd over seeds; only for
/// an experiment that compresses its payloads (what each codec saves and
/// costs).
pub(super) fn bytes_plot(cells: &[Cell]) -> Result<Option<String>> {
    let compressed = |c: &&Cell| {
        let shrunk =
            |cluster: &ClusterReport| cluster.bytes_before_compression > cluster.bytes_sent;
        c.runs.iter().any(|r| shrunk(&r.report.cluster))
    };
    if !cells.iter().any(|c| compressed(&c)) {
        return Ok(None);
    }
    let synced: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.runs.iter().all(|r| r.report.cluster.bytes_sent > 0))
        .collect();
    let per_example = |r: &RunResult| r.report.cluster.per_example(r.report.cluster.bytes_sent);
    let points: Vec<(String, Point)> = legend_labels(&synced, "")
        .into_iter()
        .zip(&synced)
        .map(|(label, cell)| {
            let (ne, sd) = cell.stat(|r| r.report.final_metrics.ne);
            (label, (cell.stat(per_example).0, ne, sd))
        })
        .filter(|(_, (x, y, _))| *x > 0.0 && y.is_finite())
        .collect();
    let series: Series = points.iter().map(|(l, p)| (l.clone(), vec![*p])).collect();
    let Some((_, (y0, y1))) = bounds(&series, Axes::default()) else {
        return Ok(None);
    };
    let xs = points.iter().map(|(_, (x, _, _))| *x);
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let longest = points.iter().map(|(l, _)| l.chars().count()).max();
    let legend = legend_width(longest.unwrap_or(0));
    let text = svg(DATA_WIDTH + legend, 1, |area| {
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        let (data, legend_area) = area.split_horizontally(DATA_WIDTH);
        let (x0, x1) = (x0 * 0.7, x1 * 1.4);
        let mut chart = ChartBuilder::on(&data)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("dense sync bytes sent per example (log)")
            .y_desc("test NE (bar: ± sd over seeds)")
            .x_label_formatter(&log_tick)
            .draw()
            .map_err(draw)?;
        for (i, (_, (x, y, sd))) in points.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let bar = vec![(*x, y - sd), (*x, y + sd)];
            chart
                .draw_series(std::iter::once(PathElement::new(bar, colour)))
                .map_err(draw)?;
            chart
                .draw_series(std::iter::once(Circle::new((*x, *y), 5, colour.filled())))
                .map_err(draw)?;
        }
        draw_legend(&legend_area, &series).map_err(draw)
    })?;
    Ok(Some(text))
}

/// Examples/s against trainers (a log₂ axis, y from 0), one line per setting
/// of the other keys, bands of ± sd over seeds.
pub(super) fn throughput_plot(experiment: &Experiment, cells: &[Cell]) -> Result<Option<String>> {
    if !experiment.keys.iter().any(|k| k == TRAINERS) {
        return Ok(None);
    }
    let with_n: Vec<(&Cell, i64)> = cells
        .iter()
        .filter_map(|c| Some((c, c.setting(TRAINERS).and_then(Value::as_integer)?)))
        .collect();
    let labels = legend_labels(
        &with_n.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        TRAINERS,
    );
    let mut series: Series = Vec::new();
    for ((cell, n), label) in with_n.iter().zip(labels) {
        let (mean, sd) = cell.stat(|r| r.report.examples_per_sec);
        let point = (*n as f64, mean, sd);
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, points)) => points.push(point),
            None => series.push((label, vec![point])),
        }
    }
    for (_, points) in &mut series {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let axes = Axes {
        log2_x: true,
        y_from_zero: true,
        ..Axes::default()
    };
    line_plot(&series, "trainers", "examples/s, all trainers (± sd)", axes)
}

/// The share of each bucket of a histogram summed over a cell's trainers and
/// runs, one line per cell that synced.
pub(super) fn histogram_plot(
    cells: &[Cell],
    x_label: &str,
    histogram: impl Fn(&shadowsync_actors::stats::TrainerStats) -> [u64; HISTOGRAM_BUCKETS],
) -> Result<Option<String>> {
    let shares: Vec<(&Cell, Vec<Point>)> = cells
        .iter()
        .filter_map(|cell| {
            let mut counts = [0u64; HISTOGRAM_BUCKETS];
            for stats in cell
                .runs
                .iter()
                .flat_map(|r| &r.report.cluster.trainer_stats)
            {
                for (total, c) in counts.iter_mut().zip(histogram(stats)) {
                    *total += c;
                }
            }
            let total: u64 = counts.iter().sum();
            (total > 0).then(|| {
                // Bucket k ≥ 1 holds [2^(k−1), 2^k): at the log2 of its
                // lower end; bucket 0 (no steps) at −1.
                let points = counts
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| (k as f64 - 1.0, c as f64 / total as f64, 0.0))
                    .collect();
                (cell, points)
            })
        })
        .collect();
    let labels = legend_labels(&shares.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    let series: Series = labels
        .into_iter()
        .zip(shares.into_iter().map(|s| s.1))
        .collect();
    let axes = Axes {
        y_from_zero: true,
        ..Axes::default()
    };
    line_plot(
        &series,
        &format!("{x_label}: log2 of the bucket's lower end (−1: none)"),
        "share of syncs",
        axes,
    )
}

/// Consensus distance over time, of each cell's first run.
pub(super) fn consensus_plot(cells: &[Cell]) -> Result<Option<String>> {
    let sampled: Vec<(&Cell, Vec<Point>)> = cells
        .iter()
        .filter_map(|cell| {
            let run = cell.runs.first()?;
            let points: Vec<Point> = run
                .report
                .cluster
                .consensus
                .iter()
                .map(|p| (p.seconds, p.distance, 0.0))
                .collect();
            points
                .iter()
                .any(|(_, d, _)| *d > 0.0)
                .then_some((cell, points))
        })
        .collect();
    let labels = legend_labels(&sampled.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    let series: Series = labels
        .into_iter()
        .zip(sampled.into_iter().map(|s| s.1))
        .collect();
    let axes = Axes {
        log_y: true,
        ..Axes::default()
    };
    line_plot(&series, "seconds", "consensus distance (log)", axes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_six_lines_a_plot_has_a_panel_per_algorithm() {
        let line = |label: &str| (label.to_string(), vec![(0.0, 1.0, 0.0), (1.0, 2.0, 0.0)]);
        let few: Series = ["none, 2", "shadow-ma, 2"].map(line).to_vec();
        assert_eq!(panels(&few).len(), 1);
        let algorithms = ["none", "shadow-ma", "shadow-easgd", "shadow-bmuf"];
        let many: Series = algorithms
            .iter()
            .flat_map(|a| [2, 4, 8, 16].map(|n| line(&format!("{a}, {n}"))))
            .collect();
        let split = panels(&many);
        assert_eq!(split.len(), 4);
        for (panel, algorithm) in split.iter().zip(algorithms) {
            assert_eq!(panel.len(), 4);
            assert!(panel.iter().all(|(l, _)| l.starts_with(algorithm)));
        }
        // One algorithm with more lines than a panel holds: cut.
        let one: Series = (0..8).map(|n| line(&format!("none, {n}"))).collect();
        assert_eq!(
            panels(&one).iter().map(Vec::len).collect::<Vec<_>>(),
            [6, 2]
        );
    }

    #[test]
    fn legends_name_only_what_varies_each_table_key_apart() {
        let results: Vec<RunResult> = Vec::new();
        let cell = |algorithm: &str, trainers: i64, schedule: &str| Cell {
            settings: vec![
                ("train.trainers".into(), Value::Integer(trainers)),
                (
                    "sync".into(),
                    Value::Table(toml::toml! {
                        algorithm = algorithm
                        group_size = 2
                        schedule = schedule
                    }),
                ),
            ],
            runs: results.iter().collect(),
        };
        let cells = [
            cell("fr-ma:1", 8, "alternating"),
            cell("fr-ma:1", 8, "random"),
            cell("sync-sgd", 8, "random"),
        ];
        let refs: Vec<&Cell> = cells.iter().collect();
        assert_eq!(
            legend_labels(&refs, ""),
            [
                "algorithm fr-ma:1, schedule alternating",
                "algorithm fr-ma:1, schedule random",
                "algorithm sync-sgd, schedule random"
            ]
        );
        assert_eq!(
            legend_labels(&refs[..1], TRAINERS),
            ["algorithm fr-ma:1, group_size 2, schedule alternating"]
        );
        let by_n = [cell("none", 2, "global"), cell("none", 4, "global")];
        let refs: Vec<&Cell> = by_n.iter().collect();
        let alike = "algorithm none, group_size 2, schedule global";
        assert_eq!(legend_labels(&refs, TRAINERS), [alike, alike]);
    }

    #[test]
    fn log2_ticks_are_whole_powers_of_two() {
        assert_eq!(log2_tick(&0.0), "1");
        assert_eq!(log2_tick(&4.0), "16");
        assert_eq!(log2_tick(&2.5), "");
        assert!(legend_width(40) > 40 * 7);
    }

    #[test]
    fn log_axis_ticks_read_as_numbers() {
        assert_eq!(log_tick(&2e-6), "2e-6");
        assert_eq!(log_tick(&0.001), "1e-3");
        assert_eq!(log_tick(&0.5), "0.5");
        assert_eq!(log_tick(&20.0), "20");
        assert_eq!(log_tick(&1e5), "1e5");
    }
}
