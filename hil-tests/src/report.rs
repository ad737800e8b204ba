//! Report files: Markdown, CSV and PNG plots (plotters, pure Rust; text needs a TTF font such as
//! Debian's fonts-dejavu-core; without one, plots are skipped with a note in the report).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::fidelity::{PairRow, Summary};

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// `YYYYmmddTHHMMSSZ` of now: how result folders are named.
pub fn utc_stamp_now() -> String {
    utc_stamp(crate::partition::unix_now() as i64)
}

/// `YYYYmmddTHHMMSSZ` of Unix time `s`.
pub fn utc_stamp(s: i64) -> String {
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    // civil from days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Registers a system font for plot text once; `Err` says why plots cannot have text.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        for f in FONTS {
            if let Ok(bytes) = std::fs::read(f) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("cannot load font {f}"));
            }
        }
        Err("no TTF font found (apt-get install fonts-dejavu-core)".into())
    })
    .clone()
}

fn range(vals: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = (hi - lo).max(1e-6);
    (lo - pad * span, hi + pad * span)
}

/// A scatter plot; `diagonal` draws y = x, `bands` draws extra lines (label, points).
pub fn scatter_png(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    points: &[(f64, f64)],
    diagonal: bool,
    lines: &[Vec<(f64, f64)>],
) -> Result<(), String> {
    font()?;
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = BitMapBackend::new(path, (900, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (x0, x1) = range(points.iter().map(|p| p.0), 0.05);
    let (mut y0, mut y1) = range(points.iter().map(|p| p.1), 0.05);
    for l in lines {
        let (a, b) = range(l.iter().map(|p| p.1), 0.05);
        y0 = y0.min(a);
        y1 = y1.max(b);
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    if diagonal {
        let a = x0.max(y0);
        let b = x1.min(y1);
        chart
            .draw_series(LineSeries::new(vec![(a, a), (b, b)], BLACK.stroke_width(1)))
            .map_err(e)?;
    }
    for l in lines {
        chart
            .draw_series(LineSeries::new(l.clone(), RED.stroke_width(1)))
            .map_err(e)?;
    }
    chart
        .draw_series(
            points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| Circle::new((x, y), 3, BLUE.mix(0.6).filled())),
        )
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Bars of (label, value) pairs, e.g. mean path latency per placement strategy.
pub fn bars_png(
    path: &Path,
    title: &str,
    y_desc: &str,
    bars: &[(String, f64)],
) -> Result<(), String> {
    font()?;
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = BitMapBackend::new(path, (900, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let ymax = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-6) * 1.15;
    let n = bars.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..n as f64, 0.0..ymax)
        .map_err(e)?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, b.1)],
                BLUE.mix(0.7).filled(),
            )
        }))
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `pairs.csv`, the plots and `report.md` of a fidelity run into `dir`; returns the
/// Markdown.
pub fn fidelity_report(
    dir: &Path,
    title: &str,
    how: &str,
    rows: &[PairRow],
    summary: &Summary,
) -> std::io::Result<String> {
    std::fs::create_dir_all(dir)?;
    let mut csv = String::from(
        "from,to,table_latency_ms,expected_latency_ms,measured_latency_ms,latency_error_ms,expected_success,measured_success,samples\n",
    );
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{:.3},{:.4},{:.4},{:.4},{:.4},{:.4},{}",
            r.from,
            r.to,
            r.table_latency_ms,
            r.expected_latency_ms,
            r.measured_latency_ms,
            r.latency_error_ms(),
            r.expected_success,
            r.measured_success,
            r.samples
        );
    }
    std::fs::write(dir.join("pairs.csv"), csv)?;
    let mut plots = Vec::new();
    let lat: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.expected_latency_ms, r.measured_latency_ms))
        .collect();
    plots.push((
        "latency.png",
        "measured against emulated latency (line: equal)",
        scatter_png(
            &dir.join("latency.png"),
            "Latency: measured vs emulated",
            "emulated (RTT/2 of the link table), ms",
            "measured, ms",
            &lat,
            true,
            &[],
        ),
    ));
    let err: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.expected_latency_ms, r.latency_error_ms()))
        .collect();
    let xmax = rows
        .iter()
        .map(|r| r.expected_latency_ms)
        .fold(0.0, f64::max);
    let tol = |s: f64| -> Vec<(f64, f64)> {
        (0..=100)
            .map(|i| {
                let x = xmax * i as f64 / 100.0;
                (x, s * (0.05 * x).max(0.1))
            })
            .collect()
    };
    plots.push((
        "latency_error.png",
        "latency error per pair; red: the goal (5 % or 0.1 ms)",
        scatter_png(
            &dir.join("latency_error.png"),
            "Latency error per directed pair",
            "emulated latency, ms",
            "measured - emulated, ms",
            &err,
            false,
            &[tol(1.0), tol(-1.0)],
        ),
    ));
    let succ: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.expected_success, r.measured_success))
        .collect();
    plots.push((
        "success.png",
        "measured against emulated success (line: equal)",
        scatter_png(
            &dir.join("success.png"),
            "Success rate: measured vs emulated",
            "emulated success",
            "measured success",
            &succ,
            true,
            &[],
        ),
    ));
    let mut md = String::new();
    let _ = writeln!(md, "# {title}\n\n{how}\n");
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(md, "| directed pairs | {} |", summary.pairs);
    let _ = writeln!(md, "| pairs with a measurement | {} |", summary.measured);
    let _ = writeln!(
        md,
        "| latency within goal (5 % or 0.1 ms) | {} of {} |",
        summary.latency_within_goal, summary.pairs
    );
    let _ = writeln!(
        md,
        "| max abs latency error | {:.3} ms |",
        summary.max_abs_latency_error_ms
    );
    let _ = writeln!(
        md,
        "| mean abs latency error | {:.3} ms |",
        summary.mean_abs_latency_error_ms
    );
    let _ = writeln!(
        md,
        "| mean latency error (bias) | {:+.3} ms |",
        summary.mean_latency_error_ms
    );
    let _ = writeln!(
        md,
        "| max abs success error | {:.3} |",
        summary.max_abs_success_error
    );
    let _ = writeln!(
        md,
        "| mean abs success error | {:.3} |",
        summary.mean_abs_success_error
    );
    md.push('\n');
    for (file, caption, res) in &plots {
        match res {
            Ok(()) => {
                let _ = writeln!(md, "![{caption}]({file})\n");
            }
            Err(e) => {
                let _ = writeln!(md, "(plot {file} not drawn: {e})\n");
            }
        }
    }
    let mut worst: Vec<&PairRow> = rows.iter().collect();
    worst.sort_by(|a, b| {
        b.latency_error_ms()
            .abs()
            .total_cmp(&a.latency_error_ms().abs())
    });
    let _ = writeln!(md, "Largest latency errors (all pairs in `pairs.csv`):\n");
    let _ = writeln!(md, "| from | to | table one-way ms | expected ms | measured ms | error ms | expected success | measured success | samples |\n|---|---|---|---|---|---|---|---|---|");
    for r in worst.iter().take(10) {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:+.3} | {:.3} | {:.3} | {} |",
            r.from,
            r.to,
            r.table_latency_ms,
            r.expected_latency_ms,
            r.measured_latency_ms,
            r.latency_error_ms(),
            r.expected_success,
            r.measured_success,
            r.samples
        );
    }
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}

/// Writes the report of experiment 2 for one application into `dir` (Markdown section returned).
pub fn placement_section(
    dir: &Path,
    app: &acoa_shared::model::Application,
    ev: &crate::placement::Evaluation,
    runs: &[crate::placement::RunResult],
) -> std::io::Result<String> {
    std::fs::create_dir_all(dir)?;
    let mut md = String::new();
    let _ = writeln!(md, "## {}\n", app.application);
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(md, "| feasible deployments | {} |", ev.feasible);
    let _ = writeln!(
        md,
        "| ACOA's score under the measured table | {:.4} |",
        ev.score_measured
    );
    let _ = writeln!(
        md,
        "| ACOA's score under the true table | {:.4} |",
        ev.score_true
    );
    let _ = writeln!(
        md,
        "| optimum under the true table | {:.4} |",
        ev.optimum_true
    );
    let _ = writeln!(md, "| gap to the optimum | {:.2} % |", 100.0 * ev.gap());
    let _ = writeln!(
        md,
        "| for comparison: score (gap) of the placement from a perfect round-trip prober's table | {:.4} ({:.2} %) |",
        ev.score_true_from_round_trip_view,
        100.0 * (ev.optimum_true - ev.score_true_from_round_trip_view) / ev.optimum_true
    );
    let _ = writeln!(
        md,
        "| worst / mean under the true table | {:.4} / {:.4} |",
        ev.worst_true, ev.mean_true
    );
    md.push('\n');
    let _ = writeln!(
        md,
        "| component | ACOA (from measurements) | optimum (true table) |\n|---|---|---|"
    );
    for c in &app.components {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            c.name,
            ev.assignment.get(&c.name).map_or("-", |s| s.as_str()),
            ev.optimum_assignment
                .get(&c.name)
                .map_or("-", |s| s.as_str())
        );
    }
    md.push('\n');
    let acoa = runs.iter().find(|r| r.label == "acoa");
    let randoms: Vec<&crate::placement::RunResult> =
        runs.iter().filter(|r| r.label != "acoa").collect();
    let _ = writeln!(md, "Measured inside the running application (workload program, {} random feasible placements as the baseline):\n", randoms.len());
    let _ = writeln!(md, "| path | ACOA median latency (ms) | ACOA success | random: mean of median latencies (ms) | random: min / max (ms) | random: mean success | random mean / ACOA |\n|---|---|---|---|---|---|---|");
    let mut bars = Vec::new();
    for p in &app.paths {
        let a = acoa.and_then(|r| r.paths.get(&p.name));
        let meds: Vec<f64> = randoms
            .iter()
            .filter_map(|r| r.paths.get(&p.name))
            .map(|s| s.median_ms())
            .filter(|v| v.is_finite())
            .collect();
        let succ: Vec<f64> = randoms
            .iter()
            .filter_map(|r| r.paths.get(&p.name))
            .map(|s| s.success())
            .filter(|v| v.is_finite())
            .collect();
        let rmean = crate::probe::mean(&meds);
        let rmin = meds.iter().copied().fold(f64::INFINITY, f64::min);
        let rmax = meds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let am = a.map_or(f64::NAN, |s| s.median_ms());
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} / {:.3} | {:.3} | {:.1}× |",
            p.name,
            am,
            a.map_or(f64::NAN, |s| s.success()),
            rmean,
            rmin,
            rmax,
            crate::probe::mean(&succ),
            rmean / am
        );
        bars.push((format!("{} ACOA", p.name), am));
        bars.push((format!("{} random", p.name), rmean));
    }
    let file = format!("{}-paths.png", app.application);
    match bars_png(
        &dir.join(&file),
        &format!(
            "{}: median path latency, ACOA vs random mean",
            app.application
        ),
        "ms",
        &bars,
    ) {
        Ok(()) => {
            let _ = writeln!(md, "\n![path latency]({file})\n");
        }
        Err(e) => {
            let _ = writeln!(md, "\n(plot not drawn: {e})\n");
        }
    }
    Ok(md)
}

/// The report of experiments 3 and 4.
pub fn dynamic_report(
    dir: &Path,
    app: &acoa_shared::model::Application,
    run: &crate::dynamic::DynamicRun,
) -> std::io::Result<String> {
    std::fs::create_dir_all(dir)?;
    let mut md = format!(
        "# Experiments 3 and 4: dynamicity on the railway testbed\n\nThe real control plane (`cloud-broker serve`, embedded broker on the testbed's host endpoint, node timeout 3 s, re-evaluation every 5 s, hysteresis 5 % over 3 evaluations), one real agent per node namespace (Podman runtime; the workload containers join the node's namespace), application `{}`. Recovery time: from the event until the control plane's status shows a placement that no longer uses what was lost and every component running (status polled every 0.25 s with `cloud-broker status`).\n\nInitial placement: `{:?}`\n\n| event | recovered after (s) | placement before | placement after | note |\n|---|---|---|---|---|\n",
        app.application, run.initial
    );
    for e in &run.events {
        let _ = writeln!(
            md,
            "| {} | {} | `{:?}` | `{:?}` | {} |",
            e.what,
            match e.recovered_s {
                Some(s) => format!("{s:.1}"),
                None if e.what.contains("noisy") => "(nothing to recover)".to_string(),
                None => "not within the time allowed".to_string(),
            },
            e.before,
            e.after,
            e.note
        );
    }
    if !run.recovery.is_empty() {
        let _ = writeln!(
            md,
            "\nPath latency after the link degradation, measured inside the workload containers (median over 1 s windows by the messages' origin time; recovered = the first of 3 windows in a row within the tolerance of the new placement's emulated value, 10 % or 1 ms whichever is larger):\n\n| path | median before (ms) | median while degraded (ms) | new placement's emulated value (ms) | tolerance (ms) | re-placed after (s) | latency recovered after (s) |\n|---|---|---|---|---|---|---|"
        );
        let opt =
            |v: Option<f64>| v.map_or("not within the run".to_string(), |s| format!("{s:.1}"));
        for r in &run.recovery {
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
                r.path,
                r.before_ms,
                r.degraded_ms,
                r.expected_ms,
                r.tolerance_ms,
                opt(r.replaced_s),
                opt(r.recovered_s)
            );
        }
    }
    let ymax = run.path_samples.iter().map(|s| s.2).fold(1.0, f64::max);
    let lines: Vec<Vec<(f64, f64)>> = run
        .event_times
        .iter()
        .map(|(t, _)| vec![(*t, 0.0), (*t, ymax)])
        .collect();
    for p in &app.paths {
        let pts: Vec<(f64, f64)> = run
            .path_samples
            .iter()
            .filter(|s| s.1 == p.name)
            .map(|s| (s.0, s.2))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let file = format!("path-{}.png", p.name);
        match scatter_png(
            &dir.join(&file),
            &format!(
                "path {}: end-to-end latency over the run (red: events)",
                p.name
            ),
            "time since start, s",
            "latency, ms",
            &pts,
            false,
            &lines,
        ) {
            Ok(()) => {
                let _ = writeln!(md, "\n![{}]({file})", p.name);
            }
            Err(e) => {
                let _ = writeln!(md, "\n(plot {file} not drawn: {e})");
            }
        }
    }
    let _ = writeln!(md, "\nEvents: {:?}", run.event_times);
    std::fs::write(dir.join("report.md"), &md)?;
    let log: String = run
        .status_log
        .iter()
        .map(|(t, s)| format!("{t:.2}\t{s}\n"))
        .collect();
    std::fs::write(dir.join("status.log"), log)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps_are_utc_civil_time() {
        assert_eq!(super::utc_stamp(0), "19700101T000000Z");
        assert_eq!(super::utc_stamp(1_709_211_909), "20240229T130509Z");
    }
}
