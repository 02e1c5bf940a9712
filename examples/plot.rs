//! `consumer_heartbeat --plot FILE.svg`: one chart of a run.
//!
//! Four panels over the run's [`Recording`]: alive members, heartbeats per
//! second and evictions per second over simulated time, and a histogram of
//! the detection delays with the session timeout marked. Drawn with
//! plotters' SVG backend, whose text is plain SVG `<text>` (no font files,
//! no system library).

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use broker::simulation::{Recording, Summary};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::cli::UsageError;

/// Chart size in pixels.
pub const SIZE: (u32, u32) = (1200, 760);

/// The most histogram bars; wider delay ranges get wider bins.
const MAX_BINS: u64 = 60;

const TITLE_FONT: (&str, u32) = ("sans-serif", 22);
const CAPTION_FONT: (&str, u32) = ("sans-serif", 17);
const LABEL_FONT: (&str, u32) = ("sans-serif", 13);

/// Checks a `--plot` value: a path ending in `.svg` whose directory exists.
pub fn svg_path(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    let refuse = || "must be a file name ending in .svg, in an existing directory".to_string();
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(refuse());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(refuse());
    }
    Ok(path)
}

/// Creates (or truncates) the `--plot` file before the run, so that a path
/// that cannot be written (a directory, a read-only place) is refused
/// before the run rather than after it.
pub fn create_svg(path: &Path) -> Result<File, UsageError> {
    File::create(path).map_err(|err| {
        UsageError(format!(
            "--plot {}: cannot write to this file: {err}",
            path.display()
        ))
    })
}

/// Writes the chart of a run to `file` (see the module docs).
pub fn write_svg(file: &mut File, summary: &Summary, recording: &Recording) -> Result<(), String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, summary, recording).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    file.write_all(svg.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| e.to_string())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(root: &Area<'_>, summary: &Summary, recording: &Recording) -> DrawResult {
    root.fill(&WHITE)?;
    let c = &summary.config;
    let mode = if c.virtual_time {
        "virtual time"
    } else {
        "real time"
    };
    let title = format!(
        "consumer_heartbeat: {} consumers in {} groups, session timeout {} ms, {} s in {mode} (seed {})",
        c.consumers,
        c.groups,
        c.session_timeout_ms,
        c.duration_ms as f64 / 1000.0,
        c.seed
    );
    let root = root.titled(&title, TITLE_FONT)?;
    let panels = root.split_evenly((2, 2));
    let end_s = c.duration_ms as f64 / 1000.0;
    let alive: Vec<(f64, f64)> = recording
        .samples
        .iter()
        .map(|s| (s.t_ms as f64 / 1000.0, s.alive as f64))
        .collect();
    time_series(
        &panels[0],
        "alive members",
        "members",
        &alive,
        end_s,
        &BLUE,
        false,
    )?;
    time_series(
        &panels[1],
        &format!(
            "heartbeats per second (run average {:.0})",
            summary.heartbeats_per_s
        ),
        "heartbeats/s",
        &recording.heartbeats_per_s(),
        end_s,
        &RGBColor(0, 140, 0),
        true,
    )?;
    let evictions = recording.evictions_per_s();
    time_series(
        &panels[2],
        &format!(
            "evictions per second ({} detected failures, {} false)",
            summary.detected_failures, summary.false_evictions
        ),
        "evictions/s",
        &evictions,
        end_s,
        &RED,
        true,
    )?;
    delay_histogram(&panels[3], summary, &recording.detection_delays_ms)?;
    Ok(())
}

/// A y range around `values` with some air; from 0 when `from_zero`.
fn y_range(values: impl Iterator<Item = f64> + Clone, from_zero: bool) -> (f64, f64) {
    let max = values.clone().fold(f64::MIN, f64::max);
    let min = values.fold(f64::MAX, f64::min);
    if max < min {
        return (0.0, 1.0);
    }
    if from_zero {
        return (0.0, (max * 1.1).max(1.0));
    }
    let pad = ((max - min) * 0.1).max(max.abs() * 0.001).max(1.0);
    (min - pad, max + pad)
}

type Panel<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One panel: caption, axes with their ranges and descriptions, a mesh.
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    (x_range, x_desc): (Range<f64>, &str),
    (y_range, y_desc): (Range<f64>, &str),
) -> Result<Panel<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, CAPTION_FONT)
        .margin(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_range)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(LABEL_FONT)
        .x_label_formatter(&tick_label)
        .y_label_formatter(&tick_label)
        .draw()?;
    Ok(chart)
}

/// A tick's label: whole numbers without decimals, others with one.
fn tick_label(value: &f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn time_series(
    area: &Area<'_>,
    caption: &str,
    y_desc: &str,
    points: &[(f64, f64)],
    end_s: f64,
    color: &RGBColor,
    from_zero: bool,
) -> DrawResult {
    let (y0, y1) = y_range(points.iter().map(|p| p.1), from_zero);
    let mut chart = panel(
        area,
        caption,
        (0.0..end_s.max(0.001), "simulated time (s)"),
        (y0..y1, y_desc),
    )?;
    chart.draw_series(LineSeries::new(
        points.iter().copied(),
        color.stroke_width(2),
    ))?;
    Ok(())
}

fn delay_histogram(area: &Area<'_>, summary: &Summary, delays: &[u64]) -> DrawResult {
    let session = summary.config.session_timeout_ms;
    let caption = match (
        summary.detection_delay_p50_ms,
        summary.detection_delay_max_ms,
    ) {
        (Some(p50), Some(max)) => {
            format!("detection delay (p50 {p50} ms, max {max} ms)")
        }
        _ => "detection delay (no failure detected)".to_string(),
    };
    let lo = delays.first().copied().unwrap_or(session).min(session);
    let hi = delays.last().copied().unwrap_or(session).max(session);
    let bin = (hi - lo + 1).div_ceil(MAX_BINS).max(1);
    let pad = (bin * 5).max((hi - lo) / 10);
    let x0 = lo.saturating_sub(pad);
    let x1 = hi + bin + pad;
    let mut counts = vec![0u64; ((x1 - x0) / bin + 1) as usize];
    for &d in delays {
        counts[((d - x0) / bin) as usize] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.15;
    let mut chart = panel(
        area,
        &caption,
        (
            x0 as f64..x1 as f64,
            "eviction time minus last heartbeat (ms)",
        ),
        (0.0..top, "failures"),
    )?;
    chart
        .draw_series(
            counts
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| {
                    let left = (x0 + i as u64 * bin) as f64;
                    Rectangle::new(
                        [(left, 0.0), (left + bin as f64, n as f64)],
                        RED.mix(0.6).filled(),
                    )
                }),
        )?
        .label(format!("failures detected ({} ms bins)", bin))
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], RED.mix(0.6).filled()));
    let marker = BLACK.stroke_width(2);
    chart
        .draw_series(LineSeries::new(
            [(session as f64, 0.0), (session as f64, top)],
            marker,
        ))?
        .label(format!("session timeout {session} ms"))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], marker));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(LABEL_FONT)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_paths_end_in_svg_in_an_existing_directory() {
        assert!(svg_path("run.svg").is_ok());
        assert!(svg_path("/tmp/run.svg").is_ok());
        for bad in ["run.png", "run", "/no/such/dir/run.svg", ""] {
            assert_eq!(
                svg_path(bad).unwrap_err(),
                "must be a file name ending in .svg, in an existing directory",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_plot_file_that_cannot_be_written_is_refused_up_front() {
        let dir = std::env::temp_dir().join(format!("plot-test-{}.svg", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A directory passes the name check but cannot be written.
        assert!(svg_path(dir.to_str().unwrap()).is_ok());
        let err = create_svg(&dir).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "--plot {}: cannot write to this file: ",
                dir.display()
            )),
            "{err}"
        );
        let file = dir.join("run.svg");
        assert!(create_svg(&file).is_ok());
        assert!(file.is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn y_ranges_have_air() {
        assert_eq!(y_range([0.0, 10.0].into_iter(), true), (0.0, 11.0));
        let (lo, hi) = y_range([990.0, 1000.0].into_iter(), false);
        assert!(lo < 990.0 && hi > 1000.0);
        assert_eq!(y_range(std::iter::empty(), false), (0.0, 1.0));
    }
}
