//! Experiment 2 with the whole system: the real control plane places each application from what
//! the real agents measured (one-way delays with `[probe] clock = "synchronized"`: every
//! namespace shares the host's clock), the placement is judged under the true table against the
//! optimum, and the agents run it as Podman containers of the workload program, where every
//! path's end-to-end latency and loss are measured. The baseline, random feasible placements
//! (what a scheduler that only filters, such as Kubernetes' default, would do), goes the same
//! way: each draw is published as a copy of the application with every component pinned
//! (`requires.node`) and run by the same agents.
//!
//! Test harness code: errors are `anyhow`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Cluster};
use anyhow::{bail, Result};
use rand::SeedableRng;

use crate::agents::AgentOptions;
use crate::dynamic::{placement_of, remove_containers_of, System};
use crate::emu::Testbed;
use crate::placement::{self, Evaluation, RunResult};
use crate::workload::{self, BASE_PORT};

pub struct LiveOptions {
    pub cloud_bin: PathBuf,
    pub agent: AgentOptions,
    pub workdir: PathBuf,
    /// How long the agents measure before the first application is applied.
    pub warmup: Duration,
    /// Allowed for an application to run after it is applied.
    pub timeout: Duration,
    /// Random feasible placements per application.
    pub random: usize,
    /// Random placements run at once.
    pub batch: usize,
    /// Seconds every placement is measured.
    pub secs: f64,
    pub rate_hz: f64,
    pub seed: u64,
}

/// One application's results.
pub struct LiveApp {
    pub app: Application,
    /// ACOA's placement (made by the control plane from the agents' measurements), judged under
    /// the true table.
    pub ev: Evaluation,
    /// Seconds from `cloud-broker apply` until every component ran.
    pub running_after_s: f64,
    /// "acoa" and "random-K" runs, measured inside the containers.
    pub runs: Vec<RunResult>,
    /// Wall time of the random baseline, s.
    pub random_wall_s: f64,
}

/// Ports of the workload containers: every copy running at once gets its own range (they share
/// the nodes' namespaces).
fn base_port(slot: usize, stride: usize) -> u16 {
    BASE_PORT + (slot * stride) as u16
}

/// Runs the experiment for every application of `apps` on `tb` (which needs the host endpoint).
pub fn run(
    tb: &Testbed,
    truth: &Cluster,
    apps: &[Application],
    o: &LiveOptions,
) -> Result<Vec<LiveApp>> {
    let sys = System::up(tb, truth, &o.cloud_bin, &o.agent, &o.workdir)?;
    let mut applied: Vec<String> = Vec::new();
    let res = run_inner(tb, truth, apps, o, &sys, &mut applied);
    drop(sys);
    remove_containers_of(
        &applied,
        &truth
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .collect::<Vec<_>>(),
    );
    res
}

fn run_inner(
    tb: &Testbed,
    truth: &Cluster,
    apps: &[Application],
    o: &LiveOptions,
    sys: &System,
    applied: &mut Vec<String>,
) -> Result<Vec<LiveApp>> {
    let stride = apps.iter().map(|a| a.components.len()).max().unwrap_or(1);
    let files = o.workdir.join("apps");
    std::fs::create_dir_all(&files)?;
    let write_app = |a: &Application| -> Result<PathBuf> {
        // JSON is YAML: the control plane reads either
        let p = files.join(format!("{}.yaml", a.application));
        std::fs::write(&p, serde_json::to_string_pretty(a)?)?;
        Ok(p)
    };
    tracing::info!(
        "control plane and {} agents up; agents measure for {:?}",
        sys.names.len(),
        o.warmup
    );
    std::thread::sleep(o.warmup);

    // ACOA: both applications placed by the control plane from the agents' measurements
    let mut out = Vec::new();
    for (i, app) in apps.iter().enumerate() {
        let t = Instant::now();
        applied.push(app.application.clone());
        let st = sys.cloud.apply(&write_app(app)?, 60)?;
        let score_measured = st["score"].as_f64().unwrap_or(f64::NAN);
        let (up, p) = sys.wait_running(app, o.timeout, &|_| true, &mut |p, _| {
            sys.collector.set_app(
                &app.application,
                workload::app_confs_at(
                    app,
                    p,
                    |n| tb.addr(n).ok(),
                    o.rate_hz,
                    base_port(i, stride),
                ),
            )
        });
        if up.is_none() {
            bail!(
                "{} never ran; see {}",
                app.application,
                o.workdir.join("cloud.log").display()
            );
        }
        let running_after_s = t.elapsed().as_secs_f64();
        if p != placement_of(&st) {
            tracing::info!(app = %app.application, "placement changed while starting: {:?} -> {:?}", placement_of(&st), p);
        }
        let ev = placement::judge(truth, app, &p, score_measured)?;
        println!(
            "hil: {}: placed by the control plane {:?}, score {:.4} under the true table, optimum {:.4} (gap {:.2} %), running after {:.1} s",
            app.application, p, ev.score_true, ev.optimum_true, 100.0 * ev.gap(), running_after_s
        );
        out.push(LiveApp {
            app: app.clone(),
            ev,
            running_after_s,
            runs: Vec::new(),
            random_wall_s: 0.0,
        });
    }
    let measured = measure(sys, apps, o.secs);
    for (la, paths) in out.iter_mut().zip(measured) {
        la.runs.push(RunResult {
            label: "acoa".into(),
            assignment: la.ev.assignment.clone(),
            paths,
        });
    }
    // the placements still the same after the measurement? (a re-placement would mix two)
    for la in &out {
        if let Ok(st) = sys.cloud.status(&la.app.application) {
            if placement_of(&st) != la.ev.assignment {
                tracing::warn!(app = %la.app.application, "re-placed during the measurement");
            }
        }
    }
    for app in apps {
        sys.cloud.delete(&app.application)?;
        wait_gone(&app.application, &sys.names, Duration::from_secs(30));
    }

    // the random baseline, through the same control plane and agents
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    for la in &mut out {
        let t = Instant::now();
        let app = la.app.clone();
        let draws: Vec<BTreeMap<String, String>> = (0..o.random)
            .map(|_| placement::random_feasible(truth, &app, &mut rng))
            .collect::<Result<_>>()?;
        let short: String = app
            .application
            .split('-')
            .next()
            .unwrap_or("app")
            .to_string();
        for (bi, chunk) in draws.chunks(o.batch.max(1)).enumerate() {
            let mut copies = Vec::new();
            for (j, a) in chunk.iter().enumerate() {
                let k = bi * o.batch.max(1) + j;
                let copy = placement::pinned(&app, &format!("{short}-r{k}"), a);
                sys.collector.set_app(
                    &copy.application,
                    workload::app_confs_at(
                        &copy,
                        a,
                        |n| tb.addr(n).ok(),
                        o.rate_hz,
                        base_port(j, stride),
                    ),
                );
                applied.push(copy.application.clone());
                let st = sys.cloud.apply(&write_app(&copy)?, 60)?;
                if placement_of(&st) != *a {
                    bail!(
                        "{}: the control plane did not follow the pins: {:?}",
                        copy.application,
                        placement_of(&st)
                    );
                }
                // one copy at a time: an agent busy reconciling drops desired-state frames
                // that arrive faster than it works (seen with the qemu agents)
                let (up, _) = sys.wait_running(&copy, o.timeout, &|_| true, &mut |_, _| {});
                if up.is_none() {
                    bail!("{} never ran", copy.application);
                }
                copies.push((k, a.clone(), copy));
            }
            println!(
                "hil: {}: random placements batch {} ({} copies) running",
                app.application,
                bi + 1,
                copies.len()
            );
            let apps_now: Vec<Application> = copies.iter().map(|c| c.2.clone()).collect();
            let m = measure(sys, &apps_now, o.secs);
            for ((k, a, copy), paths) in copies.into_iter().zip(m) {
                la.runs.push(RunResult {
                    label: format!("random-{k}"),
                    assignment: a,
                    paths,
                });
                sys.cloud.delete(&copy.application)?;
                wait_gone(&copy.application, &sys.names, Duration::from_secs(30));
            }
        }
        la.random_wall_s = t.elapsed().as_secs_f64();
    }
    Ok(out)
}

/// Waits until no container of `app` on one of `nodes` is left (the agents removed them), at
/// most `max`.
fn wait_gone(app: &str, nodes: &[String], max: Duration) {
    let t = Instant::now();
    while t.elapsed() < max {
        // a failing `podman ps` counts as gone, as before: this only shortens a wait
        let left = crate::partition::containers(app, nodes).is_ok_and(|c| !c.is_empty());
        if !left {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    tracing::warn!(%app, "containers still there after {max:?}");
}

/// Measures every path of `apps` (running, their confs set) for `secs`: messages that left a
/// source within the window, 1.5 s grace for those in flight.
fn measure(
    sys: &System,
    apps: &[Application],
    secs: f64,
) -> Vec<BTreeMap<String, workload::PathStats>> {
    std::thread::sleep(Duration::from_millis(2500)); // components fetch their conf every second
    let from = workload::now_ns();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let to = workload::now_ns();
    std::thread::sleep(Duration::from_millis(1500));
    let rec = sys.collector.records();
    apps.iter()
        .map(|a| {
            a.paths
                .iter()
                .map(|p| (p.name.clone(), rec.path_stats(a, p, from, to)))
                .collect()
        })
        .collect()
}

/// Writes `dir/report.md`; returns it.
pub fn report(dir: &Path, o: &LiveOptions, apps: &[LiveApp], emu_note: &str) -> Result<String> {
    std::fs::create_dir_all(dir)?;
    let mut md = format!(
        "# Experiment 2 with the whole system: placements from the agents' measurements, run as containers\n\n\
The real control plane (`cloud-broker serve`, embedded broker on the testbed's host endpoint) and one real agent per node namespace ({agents}; `[probe] clock = \"{clock}\"`: one-way delays, valid here since every namespace shares the host's clock; window {window} probes). After {warm} s of measurements every application is applied (`cloud-broker apply`); the control plane places it from the agents' link metrics; its placement is judged under the true table (the scenario's link table the emulator applies) against the optimum and the worst (enumeration). The agents run the placement as Podman containers of the workload program (joined to their node's namespace); sources send {rate} msg/s and each path's end-to-end latency (origin to last component, one clock) and success are measured inside the containers for {secs} s. \
Baseline: {random} random feasible placements per application (each component on a uniformly drawn node meeting its constraints, as a scheduler that only filters would place it; seed {seed}), each published as a copy of the application with every component pinned (`requires.node`) and run by the same control plane and agents, {batch} copies at once, {secs} s each.\n\n",
        agents = if o.agent.aarch64_bin.is_some() {
            "the aarch64 nodes run the ARM build of the agent under qemu-aarch64-static, the others the x86_64 build"
        } else {
            "the x86_64 build everywhere"
        },
        clock = o.agent.clock,
        window = o.agent.window,
        warm = o.warmup.as_secs(),
        rate = o.rate_hz,
        secs = o.secs,
        random = o.random,
        seed = o.seed,
        batch = o.batch,
    );
    md += "| application | placed by the control plane | score under the true table | optimum | gap (goal < 1 %) | running after apply (s) | random draws run | wall time of the baseline (s) |\n|---|---|---|---|---|---|---|---|\n";
    for la in apps {
        md += &format!(
            "| {} | `{:?}` | {:.4} | {:.4} | {:.2} % | {:.1} | {} | {:.0} |\n",
            la.app.application,
            la.ev.assignment,
            la.ev.score_true,
            la.ev.optimum_true,
            100.0 * la.ev.gap(),
            la.running_after_s,
            la.runs.iter().filter(|r| r.label != "acoa").count(),
            la.random_wall_s
        );
    }
    md.push('\n');
    for la in apps {
        md += &crate::report::placement_section(dir, &la.app, &la.ev, &la.runs)?;
    }
    md += emu_note;
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_copy_reads_back_as_the_same_application_pinned() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let app = acoa_shared::model::load_application(
            &root.join("scenarios/railway/smoke-monitoring.yaml"),
        )
        .unwrap();
        let a: BTreeMap<String, String> = app
            .components
            .iter()
            .map(|c| (c.name.clone(), "n13".to_string()))
            .collect();
        let copy = placement::pinned(&app, "smoke-r0", &a);
        let text = serde_json::to_string_pretty(&copy).unwrap();
        let back = acoa_shared::model::parse_application(&text).unwrap();
        assert_eq!(back, copy);
        assert!(back
            .components
            .iter()
            .all(|c| c.requires.node.as_deref() == Some("n13")));
        assert_eq!(base_port(0, 7), BASE_PORT);
        assert_eq!(base_port(2, 7), BASE_PORT + 14);
    }
}
