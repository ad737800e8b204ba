//! `tunnels`: the tunnel experiment (the experiment is [`hil_tests::tunnels`]): train 1 in a
//! tunnel every period, a cloud node crashed half-way, each liveness policy of the control
//! plane on the same schedule one after the other; the report and its plots.
//!
//! ```text
//! tunnels [--arms evidence,timer] [--cycles 10] [--period-s 120] [--cut-s 30] [--out DIR]
//! ```
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use hil_tests::railbed::{Bed, BedArgs, Names};
use hil_tests::report::{bars_png, scatter_png};
use hil_tests::tunnels::{self, Arm, ArmResult, Rig, Schedule};

/// The command line.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "tunnels",
    about = "ACOA testbed: train 1 in tunnels and a cloud node crashed, liveness policies compared"
)]
pub struct Args {
    #[command(flatten)]
    pub bed: BedArgs,
    /// Policies compared, one after the other on the same schedule: `evidence`, `timer`
    /// (lost after 40 s, as Kubernetes) or `timer:SECONDS`
    #[arg(long, value_delimiter = ',', default_value = "evidence,timer")]
    pub arms: Vec<String>,
    /// Tunnels (train 1 cut from the cloud and the station)
    #[arg(long, default_value_t = 10)]
    pub cycles: usize,
    /// Seconds from one tunnel to the next
    #[arg(long, default_value_t = 120.0)]
    pub period_s: f64,
    /// Seconds in a tunnel
    #[arg(long, default_value_t = 30.0)]
    pub cut_s: f64,
    /// Seconds from the start of the schedule to the first tunnel
    #[arg(long, default_value_t = 20.0)]
    pub first_s: f64,
    /// The node crashed half-way (default: the cloud node of the first component placed in
    /// the cloud)
    #[arg(long)]
    pub crash_node: Option<String>,
    /// Seconds the agents measure before the application is applied
    #[arg(long, default_value_t = 30)]
    pub warmup_s: u64,
    /// Messages per second of the source (measurement)
    #[arg(long, default_value_t = 10.0)]
    pub rate_hz: f64,
    /// Report directory (default hil-tests/results/tunnels-<UTC time>)
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = <Args as clap::Parser>::parse();
    let stamp = hil_tests::report::utc_stamp_now();
    run(a, stamp)
}

fn run(a: Args, stamp: String) -> Result<()> {
    let names = a.bed.names(Names {
        prefix: "tun-".into(),
        node_prefix: "tu-".into(),
        image_prefix: "tunnels-".into(),
        subnet: "10.86.0.0/16".into(),
    });
    let app =
        acoa_shared::model::load_application(&a.bed.app).map_err(|e| anyhow::anyhow!("{e}"))?;
    let schedule = Schedule::new(a.cycles, a.period_s, a.cut_s, a.first_s)?;
    let arms: Vec<Arm> = a
        .arms
        .iter()
        .map(|s| tunnels::parse_arm(s))
        .collect::<Result<_>>()?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("hil-tests/results/tunnels-{stamp}")));
    guard(
        &names.prefix,
        arms.iter()
            .map(|x| tunnels::arm_app(&app, x, &names.image_prefix).application)
            .collect(),
    )?;
    let Bed {
        tb,
        cluster: cl,
        collector,
        agent,
        ..
    } = Bed::up(&a.bed, names.clone())?;
    std::fs::create_dir_all(&out)?;
    let mut results = Vec::new();
    for arm in &arms {
        let arm_app = tunnels::arm_app(&app, arm, &names.image_prefix);
        collector.clear();
        let rig = Rig {
            tb: &tb,
            cluster: &cl,
            app: &arm_app,
            cloud_bin: &a.bed.cloud_bin,
            agent: &agent,
            collector: &collector,
            schedule: &schedule,
            warmup: Duration::from_secs(a.warmup_s),
            rate_hz: a.rate_hz,
            crash_node: a.crash_node.clone(),
        };
        println!("hil: arm {} ({} s of schedule)", arm.name, schedule.end);
        let r = tunnels::run_arm(&rig, arm, &tunnels::arm_dir(&out, arm))
            .with_context(|| format!("arm {}", arm.name))?;
        println!("{}", arm_line(&r));
        results.push(r);
        // write what there is after every arm
        write_report(&out, &a, &schedule, &results)?;
    }
    drop(collector);
    drop(tb);
    let md = write_report(&out, &a, &schedule, &results)?;
    println!("{md}\nhil: report in {}", out.join("report.md").display());
    Ok(())
}

/// On SIGINT/SIGTERM: kill what the run started, remove its containers and namespaces, exit.
fn guard(prefix: &str, apps: Vec<String>) -> Result<()> {
    Ok(hil_tests::agents::guard_signals(prefix, move || {
        for a in &apps {
            hil_tests::partition::remove_app_containers(a);
        }
    })?)
}

fn pct(x: (usize, usize)) -> String {
    if x.1 == 0 {
        return "-".into();
    }
    format!("{:.2} % ({}/{})", 100.0 * x.0 as f64 / x.1 as f64, x.0, x.1)
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.1}"))
}

fn arm_line(r: &ArmResult) -> String {
    format!(
        "hil: {}: {} moves ({} needless), {} needless container starts, {} lost after {} s, running elsewhere after {} s; served {:?}",
        r.arm,
        r.moves.len(),
        r.needless_moves,
        r.needless_starts.len(),
        r.crashed,
        opt_s(r.lost_after_s),
        opt_s(r.recovered_after_s),
        r.served.iter().map(|(p, (all, _))| format!("{p} {}", pct(*all))).collect::<Vec<_>>()
    )
}

/// Writes `report.md`, the plots and the raw records; returns the Markdown.
fn write_report(dir: &Path, a: &Args, s: &Schedule, results: &[ArmResult]) -> Result<String> {
    let mut md = format!(
        "# Tunnels: partitions against crashes on the railway testbed\n\n\
The whole system on the emulated railway network ({nodes}): the control plane (`cloud-broker serve`, embedded broker on the host endpoint), one agent per node namespace (probe period {pp} ms), smoke monitoring as workload containers (source {rate} msg/s; the collector on an endpoint of its own that no cut touches). \
Schedule, the same for every policy: train 1 (its nodes' links to every other node and to the control plane) cut for {cut} s every {period} s, {cycles} times from t = {first} s; the cloud node of the first cloud-placed component crashed at t = {crash} s (agent SIGKILL, its containers removed, every link cut); the run ends at t = {end} s. \
Each policy (an arm) runs on the same testbed one after the other, with its own control plane data and application copy.\n\n\
- moves: a component's node changed in the control plane's placement (status polled every 0.5 s); needless: every move but the crashed node's components leaving it.\n\
- needless container starts: containers (Podman id and start time, polled every second) that were not running when the schedule began, except the first container of each component the crash moved, on its new node.\n\
- crash: seconds from the crash until the control plane's log calls the node lost (the evidence), and until the status shows every component running with none on the crashed node.\n\
- served: the fraction of 1 s windows (by the messages' origin time) in which at least one message completed the path, measured inside the containers; over the whole schedule and inside the tunnels only.\n\n",
        nodes = if a.bed.agent_bin_aarch64.is_some() { "20 nodes, the aarch64 ones' agents under qemu" } else { "20 nodes, every agent the x86_64 build" },
        pp = a.bed.probe_period_ms,
        rate = a.rate_hz,
        cut = a.cut_s,
        period = a.period_s,
        cycles = a.cycles,
        first = a.first_s,
        crash = s.crash_at,
        end = s.end,
    );
    md += "| policy | moves | needless moves (goal 0) | needless container starts (goal 0) | crashed node | lost after (s) | running elsewhere after the crash (s) | after the evidence (s, goal < 5) |";
    let paths: Vec<String> = results
        .first()
        .map(|r| r.served.keys().cloned().collect())
        .unwrap_or_default();
    for p in &paths {
        let _ = write!(md, " {p} served | {p} served in tunnels |");
    }
    md += "\n|---|---|---|---|---|---|---|---|";
    md += &"---|---|".repeat(paths.len());
    md.push('\n');
    for r in results {
        let after_evidence = match (r.lost_after_s, r.recovered_after_s) {
            (Some(l), Some(x)) => format!("{:.1}", x - l),
            _ => "-".into(),
        };
        let _ = write!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.arm,
            r.moves.len(),
            r.needless_moves,
            r.needless_starts.len(),
            r.crashed,
            opt_s(r.lost_after_s),
            opt_s(r.recovered_after_s),
            after_evidence
        );
        for p in &paths {
            let (all, inside) = r.served.get(p).copied().unwrap_or_default();
            let _ = write!(md, " {} | {} |", pct(all), pct(inside));
        }
        md.push('\n');
    }
    md.push('\n');
    let mut bars = Vec::new();
    for r in results {
        let _ = writeln!(md, "## {}\n\nInitial placement: `{:?}`\n", r.arm, r.initial);
        if r.moves.is_empty() {
            md += "No moves.\n\n";
        } else {
            md += "| t (s) | component | from | to | in a tunnel |\n|---|---|---|---|---|\n";
            for m in &r.moves {
                let _ = writeln!(
                    md,
                    "| {:.1} | {} | {} | {} | {} |",
                    m.t,
                    m.component,
                    m.from,
                    m.to,
                    if s.in_tunnel(m.t) { "yes" } else { "no" }
                );
            }
            md.push('\n');
        }
        if !r.needless_starts.is_empty() {
            let _ = writeln!(md, "Needless container starts: {:?}\n", r.needless_starts);
        }
        let states: Vec<String> = r
            .states
            .iter()
            .map(|(t, n, st)| format!("{t:.1} s {n} {st:?}"))
            .collect();
        let _ = writeln!(
            md,
            "Node states from the control plane's log ({}): {}\n",
            states.len(),
            states.join("; ")
        );
        let lines: Vec<Vec<(f64, f64)>> = r
            .events
            .iter()
            .map(|(t, _)| vec![(*t, 0.0), (*t, 1.0)])
            .collect();
        for p in &paths {
            let pts: Vec<(f64, f64)> = r
                .samples
                .iter()
                .filter(|x| &x.1 == p)
                .map(|x| (x.0, x.2))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let ymax = pts.iter().map(|x| x.1).fold(1.0, f64::max);
            let ev: Vec<Vec<(f64, f64)>> = lines
                .iter()
                .map(|l| vec![(l[0].0, 0.0), (l[1].0, ymax)])
                .collect();
            let file = format!("{}-path-{p}.png", r.arm);
            match scatter_png(
                &dir.join(&file),
                &format!(
                    "{}: path {p}, end-to-end latency (red: tunnel in/out, crash)",
                    r.arm
                ),
                "time since the schedule began, s",
                "latency, ms",
                &pts,
                false,
                &ev,
            ) {
                Ok(()) => {
                    let _ = writeln!(md, "![{} {p}]({file})\n", r.arm);
                }
                Err(e) => {
                    let _ = writeln!(md, "(plot {file} not drawn: {e})\n");
                }
            }
            if let Some((all, _)) = r.served.get(p) {
                if all.1 > 0 {
                    bars.push((
                        format!("{} {p}", r.arm),
                        100.0 * all.0 as f64 / all.1 as f64,
                    ));
                }
            }
        }
        let raw: String = r
            .samples
            .iter()
            .map(|(t, p, l)| format!("{t:.3}\t{p}\t{l:.3}\n"))
            .collect();
        std::fs::write(dir.join(format!("{}-samples.tsv", r.arm)), raw)?;
        let ev: String = r
            .events
            .iter()
            .map(|(t, e)| format!("{t:.2}\t{e}\n"))
            .collect();
        std::fs::write(dir.join(format!("{}-events.tsv", r.arm)), ev)?;
    }
    if !bars.is_empty() {
        match bars_png(
            &dir.join("served.png"),
            "time each path is served, %",
            "served, %",
            &bars,
        ) {
            Ok(()) => md += "![served](served.png)\n",
            Err(e) => {
                let _ = writeln!(md, "(plot served.png not drawn: {e})");
            }
        }
    }
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}
