//! Experiment 2: placements made from measured link tables, scored under the true table against
//! the optimum and the worst, then run: the workload program plays every component, and the
//! end-to-end latency and loss of every path are measured, for ACOA's placement and for random
//! feasible placements (what a scheduler that only filters by constraints would do).

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use acoa_scheduler::{Infra, Ledger, Options, Outcome};
use acoa_shared::model::{Application, Cluster};
use anyhow::{bail, Context, Result};
use rand::Rng;

use crate::agents::Proc;
use crate::emu::{Testbed, HOST};
use crate::fidelity::PairRow;
use crate::workload::{self, Collector, PathStats, COLLECTOR_PORT};

/// The cluster the control plane would see: every measured pair's latency and success as
/// measured (the success a round-trip prober sees, as the control plane takes it), jitter and
/// loopback links from the table.
pub fn measured_cluster(truth: &Cluster, rows: &[PairRow]) -> Cluster {
    let mut c = truth.clone();
    let m: HashMap<(&str, &str), &PairRow> = rows
        .iter()
        .filter(|r| r.measured_latency_ms.is_finite())
        .map(|r| ((r.from.as_str(), r.to.as_str()), r))
        .collect();
    for l in &mut c.links {
        if let Some(r) = m.get(&(l.from.as_str(), l.to.as_str())) {
            l.latency_ms = r.measured_latency_ms.max(0.0);
            l.success = r.measured_success.clamp(0.0, 1.0);
        }
    }
    c
}

/// What a perfect round-trip prober would report: for every pair, half the sum of both
/// directions' latencies and the product of their successes (loopback links unchanged).
pub fn round_trip_view(truth: &Cluster) -> Cluster {
    let mut c = truth.clone();
    let m: HashMap<(String, String), (f64, f64)> = truth
        .links
        .iter()
        .map(|l| ((l.from.clone(), l.to.clone()), (l.latency_ms, l.success)))
        .collect();
    for l in &mut c.links {
        if l.from == l.to {
            continue;
        }
        if let (Some(ab), Some(ba)) = (
            m.get(&(l.from.clone(), l.to.clone())),
            m.get(&(l.to.clone(), l.from.clone())),
        ) {
            l.latency_ms = (ab.0 + ba.0) / 2.0;
            l.success = ab.1 * ba.1;
        }
    }
    c
}

/// How ACOA's placement from the measured table does under the true one.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub app: String,
    pub assignment: BTreeMap<String, String>,
    /// Score of the placement under the measured table (what the scheduler believed).
    pub score_measured: f64,
    /// Under the true table.
    pub score_true: f64,
    pub optimum_true: f64,
    pub worst_true: f64,
    pub mean_true: f64,
    pub feasible: u128,
    pub optimum_assignment: BTreeMap<String, String>,
    /// Score under the true table of the placement made from [`round_trip_view`] (a perfect
    /// round-trip prober): separates measurement error from what round trips cannot see.
    pub score_true_from_round_trip_view: f64,
}

impl Evaluation {
    /// (optimum - score) / optimum.
    pub fn gap(&self) -> f64 {
        if self.optimum_true <= 0.0 {
            return 0.0;
        }
        (self.optimum_true - self.score_true) / self.optimum_true
    }
}

pub fn evaluate(truth: &Cluster, measured: &Cluster, app: &Application) -> Result<Evaluation> {
    let ledger = Ledger::new();
    let placed = match acoa_scheduler::place(measured, app, &ledger)? {
        Outcome::Placed(p) => p,
        Outcome::Infeasible(i) => bail!("{}: infeasible: {}", app.application, i.reason),
    };
    judge(truth, app, &placed.assignment, placed.score)
}

/// Judges a placement made elsewhere (from measurements: by [`evaluate`], or by the running
/// control plane) under the true table: its score against the optimum and the worst.
pub fn judge(
    truth: &Cluster,
    app: &Application,
    assignment: &BTreeMap<String, String>,
    score_measured: f64,
) -> Result<Evaluation> {
    let ledger = Ledger::new();
    let (score_true, _) = acoa_scheduler::score(truth, app, assignment)?;
    let opts = Options {
        enumerate: true,
        ..Options::default()
    };
    let rep = acoa_scheduler::place_on(&Infra::from_cluster(truth), app, &ledger, &opts)?;
    let Outcome::Placed(best) = rep.outcome else {
        bail!("{}: infeasible under the true table", app.application);
    };
    let rt_view = match acoa_scheduler::place(&round_trip_view(truth), app, &ledger)? {
        Outcome::Placed(p) => acoa_scheduler::score(truth, app, &p.assignment)?.0,
        Outcome::Infeasible(_) => f64::NAN,
    };
    Ok(Evaluation {
        score_true_from_round_trip_view: rt_view,
        app: app.application.clone(),
        assignment: assignment.clone(),
        score_measured,
        score_true,
        optimum_true: best.score,
        worst_true: rep.worst_score.unwrap_or(f64::NAN),
        mean_true: rep.mean_score.unwrap_or(f64::NAN),
        feasible: best.feasible_deployments,
        optimum_assignment: best.assignment,
    })
}

/// `app` with every component pinned (`requires.node`) to its node in `assignment`, renamed
/// `name`: how a placement made elsewhere (a random draw) runs through the control plane.
pub fn pinned(app: &Application, name: &str, assignment: &BTreeMap<String, String>) -> Application {
    let mut a = app.clone();
    a.application = name.to_string();
    for c in &mut a.components {
        c.requires.node = assignment.get(&c.name).cloned();
    }
    a
}

/// A random feasible placement: every component on a uniformly drawn node that satisfies its
/// constraints (as a scheduler that filters and spreads would pick), redrawn until the
/// scheduler's own check accepts it.
pub fn random_feasible<R: Rng>(
    cluster: &Cluster,
    app: &Application,
    rng: &mut R,
) -> Result<BTreeMap<String, String>> {
    for _ in 0..1000 {
        let mut a = BTreeMap::new();
        for c in &app.components {
            let cand: Vec<&str> = cluster
                .nodes
                .iter()
                .filter(|n| n.satisfies(&c.requires))
                .map(|n| n.name.as_str())
                .collect();
            if cand.is_empty() {
                bail!("component {} fits no node", c.name);
            }
            a.insert(
                c.name.clone(),
                cand[rng.gen_range(0..cand.len())].to_string(),
            );
        }
        if acoa_scheduler::score(cluster, app, &a).is_ok() {
            return Ok(a);
        }
    }
    bail!("no random feasible placement found for {}", app.application)
}

/// Measured figures of one placement.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub label: String,
    pub assignment: BTreeMap<String, String>,
    /// Path name -> figures.
    pub paths: BTreeMap<String, PathStats>,
}

/// Runs every placement of `app` at once for `secs` (each as its own copy of the application,
/// on its own ports), the workload program in the nodes' namespaces, sources at `rate_hz`.
pub fn run_placements(
    tb: &Testbed,
    app: &Application,
    placements: &[(String, BTreeMap<String, String>)],
    workload_bin: &Path,
    rate_hz: f64,
    secs: f64,
    logdir: &Path,
) -> Result<Vec<RunResult>> {
    let host = tb
        .addr(HOST)
        .context("the testbed needs its host endpoint")?;
    let collector = Collector::start_on(tb, host)?;
    let control = SocketAddr::V4(SocketAddrV4::new(host, COLLECTOR_PORT));
    std::fs::create_dir_all(logdir)?;
    let stride = app.components.len().max(1) as u16;
    let mut procs = Vec::new();
    let mut copies = Vec::new();
    for (i, (label, assignment)) in placements.iter().enumerate() {
        let mut copy = app.clone();
        copy.application = format!("{}~{i}", app.application);
        let base = workload::BASE_PORT + i as u16 * stride;
        let confs = workload::app_confs_at(&copy, assignment, |n| tb.addr(n).ok(), rate_hz, base);
        collector.set_app(&copy.application, confs);
        // sinks first, so that the first messages find their receivers
        for c in app.components.iter().rev() {
            let node = &assignment[&c.name];
            // SCHED_FIFO, as the emulator: what is measured is the emulated network and the
            // placement, not how long a normal process waits for a CPU on a busy machine
            let mut cmd = tb.command(node, "chrt");
            cmd.args(["-f", "10"]).arg(workload_bin);
            cmd.env("ACOA_APP", &copy.application)
                .env("ACOA_COMPONENT", &c.name)
                .env("ACOA_CONTROL", control.to_string());
            procs.push(Proc::spawn(
                &format!("{label}/{}", c.name),
                cmd,
                &logdir.join(format!("{}-{}.log", copy.application, c.name)),
            )?);
        }
        copies.push((label.clone(), assignment.clone(), copy));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let from = workload::now_ns();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let to = workload::now_ns();
    std::thread::sleep(Duration::from_millis(1500)); // messages in flight
    drop(procs);
    let rec = collector.records();
    Ok(copies
        .into_iter()
        .map(|(label, assignment, copy)| RunResult {
            label,
            assignment,
            paths: copy
                .paths
                .iter()
                .map(|p| (p.name.clone(), rec.path_stats(&copy, p, from, to)))
                .collect(),
        })
        .collect())
}
