//! `rollouts`: the rollout experiment (the experiment is [`hil_tests::rollouts`]): smoke
//! monitoring under an update policy on the railway testbed, updated with a good revision, a bad
//! one and, with a gate, two that break it (a component moved across the WAN; a workload that
//! holds every message `--delay-ms`) while its paths are measured inside the containers; the
//! report and its plot.
//!
//! ```text
//! rollouts [--healthy-s 10] [--batch-size 1] [--bad-component level-detection]
//!          [--delay-component measurement --delay-ms 50] [--out DIR]
//! ```
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use acoa_shared::model::{Gate, Update};
use anyhow::{Context, Result};
use hil_tests::railbed::{Bed, BedArgs, Names};
use hil_tests::report::scatter_png;
use hil_tests::rollouts::{self, Options, Run};

/// The command line.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "rollouts",
    about = "ACOA testbed: smoke monitoring updated with a good, a bad and two gate-breaking revisions (a component moved across the WAN, a workload that adds delay) while its paths are measured"
)]
pub struct Args {
    #[command(flatten)]
    pub bed: BedArgs,
    /// The update policy: components per batch
    #[arg(long, default_value_t = 1)]
    pub batch_size: u32,
    /// The update policy: components in the first batch, alone
    #[arg(long, default_value_t = 1)]
    pub canaries: u32,
    /// The update policy: seconds a batch must stay running and healthy
    #[arg(long, default_value_t = 10)]
    pub healthy_s: u32,
    /// The update policy: seconds a batch may take
    #[arg(long, default_value_t = 60)]
    pub deadline_s: u32,
    /// The component whose image the bad revision breaks
    #[arg(long, default_value = "level-detection")]
    pub bad_component: String,
    /// The update policy's QoS gate: the alarm path's measured latency must stay under this, ms
    /// (0: no gate, and no third revision)
    #[arg(long, default_value_t = 10.0)]
    pub gate_ms: f64,
    /// The component the third revision requires on a cloud node (a gate breach)
    #[arg(long, default_value = "level-detection")]
    pub gate_component: String,
    /// The component whose workload the fourth revision slows down (holds every message
    /// `--delay-ms`), with a gate
    #[arg(long, default_value = "measurement")]
    pub delay_component: String,
    /// How long the fourth revision's workload holds every message, ms (0: no fourth revision)
    #[arg(long, default_value_t = 50.0)]
    pub delay_ms: f64,
    /// The path drawn in the plot
    #[arg(long, default_value = "alarm")]
    pub plot_path: String,
    /// Seconds the agents measure before the application is applied
    #[arg(long, default_value_t = 20)]
    pub warmup_s: u64,
    /// Seconds measured before the first update and after each
    #[arg(long, default_value_t = 15.0)]
    pub settle_s: f64,
    /// A path without a completed message for longer than this is not served, ms (a few
    /// messages lost in a row to the links' own loss stay below it)
    #[arg(long, default_value_t = 250.0)]
    pub outage_ms: f64,
    /// Messages per second of the source (measurement)
    #[arg(long, default_value_t = 20.0)]
    pub rate_hz: f64,
    /// Report directory (default hil-tests/results/rollouts-<UTC time>)
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn main() -> Result<()> {
    hil_tests::init_logging();
    let a = <Args as clap::Parser>::parse();
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "hil-tests/results/rollouts-{}",
            hil_tests::report::utc_stamp_now()
        ))
    });
    let names = a.bed.names(Names {
        prefix: "rol-".into(),
        node_prefix: "ro-".into(),
        image_prefix: "rollouts-".into(),
        subnet: "10.87.0.0/16".into(),
    });
    let app =
        acoa_shared::model::load_application(&a.bed.app).map_err(|e| anyhow::anyhow!("{e}"))?;
    let update = Update {
        batch_size: a.batch_size,
        canaries: a.canaries,
        healthy_s: a.healthy_s,
        deadline_s: a.deadline_s,
        auto_rollback: true,
        gate: (a.gate_ms > 0.0).then(|| Gate {
            path: "alarm".into(),
            max_latency_ms: Some(a.gate_ms),
            min_reliability: None,
        }),
    };
    let base = rollouts::base_app(&app, &names.image_prefix, &update);
    let app_name = base.application.clone();
    hil_tests::agents::guard_signals(&names.prefix, move || {
        hil_tests::partition::remove_app_containers(&app_name)
    })?;
    let bed = Bed::up(&a.bed, names)?;
    let delay = (a.delay_ms > 0.0).then_some((a.delay_component.as_str(), a.delay_ms));
    let steps = rollouts::steps(&base, &a.bad_component, &a.gate_component, delay)?;
    std::fs::create_dir_all(&out)?;
    let o = Options {
        rate_hz: a.rate_hz,
        warmup: Duration::from_secs(a.warmup_s),
        settle_s: a.settle_s,
        outage_s: a.outage_ms / 1e3,
        update,
    };
    let run = rollouts::run(&bed, &a.bed.cloud_bin, &base, &steps, &o, &out.join("run"))
        .context("the rollout experiment")?;
    let md = report(&out, &a, &run)?;
    println!(
        "{md}\nrollouts: report in {}",
        out.join("report.md").display()
    );
    Ok(())
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.1}"))
}

/// Writes `report.md`, `samples.tsv` and the plot; returns the Markdown.
fn report(dir: &std::path::Path, a: &Args, run: &Run) -> Result<String> {
    let mut md = format!(
        "# Rollouts: a good and a bad revision of smoke monitoring on the railway testbed\n\n\
The whole system on the emulated railway network (20 nodes; the control plane with its embedded broker on the host endpoint; one agent per node namespace; the workload containers measure every path, source {rate} msg/s, collector on an endpoint no cut touches). \
Update policy: batch size {bs}, canaries {can}, healthy time {hs} s, deadline {dl} s per batch, automatic rollback{gate}. \
Each update is published {settle} s after the previous one settled; the control plane's status is polled every 0.25 s.\n\n\
- took / detected / undone: seconds from the publication of the definition until the control plane's log says the rollout is done (good), or failed (detected) and rolled back (undone).\n\
- not served: per path, over the update's window (its publication to the next one's, or the run's end; the baseline: the measurement before the first update, from 3 s after the collector got the placement), the time without a message completing the path: the gaps between consecutive completed messages (by origin time) longer than {outage} ms, less one send interval each (a few messages lost in a row to the links' own loss stay below it; the baseline row shows that noise). Goal: 0 ms.\n\n",
        rate = a.rate_hz,
        bs = a.batch_size,
        can = a.canaries,
        hs = a.healthy_s,
        dl = a.deadline_s,
        settle = a.settle_s,
        outage = a.outage_ms,
        gate = if a.gate_ms > 0.0 {
            format!(", QoS gate: the alarm path's measured latency under {} ms", a.gate_ms)
        } else {
            String::new()
        },
    );
    let paths: Vec<String> = run.samples.keys().cloned().collect();
    md += "| update | change | revision | phase | took / undone (s) | detected (s) |";
    for p in &paths {
        let _ = write!(md, " {p}: not served (ms) | {p}: longest gap (ms) |");
    }
    md += "\n|---|---|---|---|---|---|";
    md += &"---|---|".repeat(paths.len());
    md.push('\n');
    for r in &run.results {
        let _ = write!(
            md,
            "| {} | {} | {} | {}{} | {} | {} |",
            r.label,
            r.change,
            r.revision.map_or("-".into(), |v| v.to_string()),
            r.phase,
            r.reason
                .as_deref()
                .map_or(String::new(), |x| format!(" ({x})")),
            if r.revision.is_none() {
                "-".into()
            } else {
                opt_s(r.finished_after)
            },
            if r.bad {
                opt_s(r.detected_after)
            } else {
                "-".into()
            },
        );
        for p in &paths {
            let (longest, lost) = r.paths.get(p).copied().unwrap_or_default();
            let _ = write!(md, " {lost:.0} | {longest:.0} |");
        }
        md.push('\n');
    }
    md += "\nTimelines (seconds after the publication: phase, batch):\n\n";
    for r in run.results.iter().filter(|r| !r.timeline.is_empty()) {
        let _ = writeln!(
            md,
            "- {}: {}",
            r.label,
            r.timeline
                .iter()
                .map(|(t, l)| format!("{t:.1} {l}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut tsv = String::from("path\torigin_s\tlatency_ms\n");
    for (p, s) in &run.samples {
        for (t, ms) in s {
            let _ = writeln!(tsv, "{p}\t{t:.3}\t{ms:.3}");
        }
    }
    std::fs::write(dir.join("samples.tsv"), tsv)?;
    if let Some(s) = run.samples.get(&a.plot_path) {
        let top = s.iter().map(|x| x.1).fold(0.0, f64::max);
        let marks: Vec<Vec<(f64, f64)>> = run
            .results
            .iter()
            .filter(|r| r.revision.is_some())
            .map(|r| vec![(r.applied_at, 0.0), (r.applied_at, top)])
            .collect();
        let png = format!("{}-latency.png", a.plot_path);
        scatter_png(
            &dir.join(&png),
            &format!(
                "{} path latency during the two updates (lines: publications)",
                a.plot_path
            ),
            "seconds",
            "latency (ms)",
            s,
            false,
            &marks,
        )
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        let _ = writeln!(md, "\n![{} path latency]({png})", a.plot_path);
    }
    md += "\nFiles: `samples.tsv` (every completed message: path, origin time, latency), `run/` (the control plane's and the agents' logs, the definitions).\n";
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}
