//! `scheduler: topsis`: paper 002's pod-by-pod flow over the domain model.
//!
//! Components are placed one at a time, in the application's order (the pods of the paper
//! arrive one by one). For each, the candidate nodes are those that pass the constraint
//! plugins and have room in the [`Ledger`] for its CPU and memory request (the same filter as
//! `qos`), and among them those where its demand fits in every one of the five metrics with
//! the components placed before it; [`super::rank`] scores them by combined-weight TOPSIS over
//! the utilisations with the component added, and the highest closeness wins (ties: the first
//! node in name order).
//!
//! Per node, from the domain model:
//!
//! | metric    | capacity               | in use                                          | demand                 |
//! |-----------|------------------------|-------------------------------------------------|------------------------|
//! | CPU       | `capacity.cpu_millis`  | `usage.cpu_millis` + ledger reservation         | `resources.cpu_millis` |
//! | memory    | `capacity.memory_mb`   | `usage.memory_mb` + ledger reservation          | `resources.memory_mb`  |
//! | bandwidth | `capacity.net_mbps`    | `usage.net_mbps`                                | `resources.net_mbps`   |
//! | disk      | `capacity.disk_mb`     | `usage.disk_mb`                                 | `resources.disk_mb`    |
//! | I/O       | `capacity.io_mbps`     | `usage.io_mbps`                                 | `resources.io_mbps`    |
//!
//! A missing demand is 0. A node that does not report a bandwidth or I/O capacity is taken as
//! an average node in that metric: the mean capacity of the nodes that report it, used at their
//! mean utilisation (so it is neither favoured nor penalised); a node that reports the capacity
//! but not the use is taken at that mean utilisation too. When no node reports a metric's
//! capacity, the metric is left out (0 everywhere, so its entropy weight is 0) and so are the
//! components' demands in it.
//!
//! Subjective weights, the paper's default: a component whose demand, relative to the mean
//! node, is heaviest in one metric by at least a factor [`HEAVY_FACTOR`] over every other
//! metric judges that metric "strongly more important" (Saaty 5) than each of the others, as
//! the paper's heavy pods do; any other component (balanced, or without requests) weighs the
//! five metrics equally. The balance criterion has its default share
//! ([`super::DEFAULT_BALANCE`]).
//!
//! Placement time only, as the paper's scheduler (and Kubernetes') is: the control plane does
//! not search a running `topsis` application again on re-evaluation (the nodes' measured usage
//! includes the application itself, so a search would always find moving better); it is placed
//! again when a node it uses is lost or its definition changes.
//!
//! The score of a deployment ([`crate::score`]): the mean, over the components, of the closeness of
//! the node each one is on, replaying the same flow with the components on their given nodes
//! (0 for a component whose node is not a candidate at its turn). For the deployment [`crate::place`]
//! returns it is the mean closeness of the chosen nodes, in [0, 1].

use super::{ahp, rank, Metric, NodeUtil, PodRequest, Vector, Weights, METRICS};
use crate::ledger::Ledger;
use crate::problem::Model;
use crate::Decided;
use acoa_shared::model::Application;

/// A metric is a component's heavy one when its demand share (demand / mean node capacity) is
/// at least this many times that of every other metric.
pub const HEAVY_FACTOR: f64 = 2.0;

/// The paper's judgement of a heavy metric against each other one (Saaty: strongly more
/// important).
pub const HEAVY_JUDGEMENT: f64 = 5.0;

/// The nodes, demands and weights of one application on one snapshot.
struct Setup {
    /// Per node of the infrastructure (index order).
    nodes: Vec<NodeUtil>,
    /// Per component (application order).
    pods: Vec<PodRequest>,
    weights: Vec<Weights>,
    notes: Vec<String>,
}

fn setup(model: &Model<'_>, app: &Application, ledger: &Ledger) -> Setup {
    let infra = model.infra;
    let mut notes = Vec::new();
    let mut nodes: Vec<NodeUtil> = infra
        .nodes()
        .iter()
        .map(|n| {
            let r = ledger.reserved(&n.name);
            NodeUtil {
                capacity: [
                    n.capacity.cpu_millis as f64,
                    n.capacity.memory_mb as f64,
                    n.capacity.net_mbps.unwrap_or(f64::NAN),
                    n.capacity.disk_mb as f64,
                    n.capacity.io_mbps.unwrap_or(f64::NAN),
                ],
                used: [
                    n.usage.cpu_millis.saturating_add(r.cpu_millis) as f64,
                    n.usage.memory_mb.saturating_add(r.memory_mb) as f64,
                    n.usage.net_mbps.unwrap_or(f64::NAN),
                    n.usage.disk_mb as f64,
                    n.usage.io_mbps.unwrap_or(f64::NAN),
                ],
            }
        })
        .collect();
    // Unknown bandwidth and I/O: an average node; no node knows it: the metric is left out.
    let mut left_out = [false; METRICS];
    for j in [2, 4] {
        let known: Vec<&NodeUtil> = nodes.iter().filter(|u| !u.capacity[j].is_nan()).collect();
        let mean_cap = known.iter().map(|u| u.capacity[j]).sum::<f64>() / known.len().max(1) as f64;
        let utils: Vec<f64> = known
            .iter()
            .filter(|u| !u.used[j].is_nan() && u.capacity[j] > 0.0)
            .map(|u| u.used[j] / u.capacity[j])
            .collect();
        let mean_util = utils.iter().sum::<f64>() / utils.len().max(1) as f64;
        let unknown = nodes.len() - known.len();
        if known.is_empty() {
            left_out[j] = true;
            notes.push(format!(
                "no node reports its {} capacity: the metric is left out",
                Metric::ALL[j].name()
            ));
        } else if unknown > 0 {
            notes.push(format!(
                "{unknown} of {} nodes do not report their {} capacity: taken as the mean node ({mean_cap:.1} at {:.1} % use)",
                nodes.len(),
                Metric::ALL[j].name(),
                mean_util * 100.0
            ));
        }
        for u in &mut nodes {
            if left_out[j] {
                u.capacity[j] = 0.0;
                u.used[j] = 0.0;
                continue;
            }
            if u.capacity[j].is_nan() {
                u.capacity[j] = mean_cap;
                u.used[j] = f64::NAN;
            }
            if u.used[j].is_nan() {
                u.used[j] = mean_util * u.capacity[j];
            }
        }
    }
    let mean_capacity: Vector = std::array::from_fn(|j| {
        nodes.iter().map(|u| u.capacity[j]).sum::<f64>() / nodes.len().max(1) as f64
    });
    let pods: Vec<PodRequest> = app
        .components
        .iter()
        .map(|c| {
            let r = c.resources.unwrap_or_default();
            let mut demand = [
                r.cpu_millis as f64,
                r.memory_mb as f64,
                r.net_mbps.unwrap_or(0.0),
                r.disk_mb.unwrap_or(0) as f64,
                r.io_mbps.unwrap_or(0.0),
            ];
            for j in 0..METRICS {
                if left_out[j] {
                    demand[j] = 0.0;
                }
            }
            PodRequest { demand }
        })
        .collect();
    let weights = app
        .components
        .iter()
        .zip(&pods)
        .map(|(c, p)| {
            let (w, heavy) = paper_weights(&p.demand, &mean_capacity);
            if let Some(j) = heavy {
                notes.push(format!(
                    "component `{}` is {}-heavy: AHP judges {} {}:1 against each other metric",
                    c.name,
                    Metric::ALL[j].name(),
                    Metric::ALL[j].name(),
                    HEAVY_JUDGEMENT
                ));
            }
            w
        })
        .collect();
    Setup {
        nodes,
        pods,
        weights,
        notes,
    }
}

/// The paper's default subjective weights for a demand (see the module docs), and the heavy
/// metric if there is one.
pub fn paper_weights(demand: &Vector, mean_capacity: &Vector) -> (Weights, Option<usize>) {
    let share: Vector = std::array::from_fn(|j| {
        if mean_capacity[j] > 0.0 {
            demand[j] / mean_capacity[j]
        } else {
            0.0
        }
    });
    let (top, max) = share
        .iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
            if v > bv {
                (i, v)
            } else {
                (bi, bv)
            }
        });
    let heavy = (max > 0.0
        && share
            .iter()
            .enumerate()
            .all(|(j, &v)| j == top || max >= HEAVY_FACTOR * v))
    .then_some(top);
    let mut priority = [1.0; METRICS];
    if let Some(j) = heavy {
        priority[j] = HEAVY_JUDGEMENT;
    }
    let w = Weights::from_ahp(&ahp::consistent_matrix(&priority))
        .expect("a consistent matrix of positive priorities");
    (w, heavy)
}

/// Places the application one component at a time (see the module docs).
pub(crate) fn place(model: &Model<'_>, app: &Application, ledger: &Ledger) -> Decided {
    let mut st = setup(model, app, ledger);
    let mut assignment = Vec::with_capacity(model.comps.len());
    let mut explored = 0u64;
    // Containers each node can still be given, when the limit can bind.
    let mut room = model.container_room.clone();
    for (c, comp) in model.comps.iter().enumerate() {
        let nodes: Vec<u32> = match &room {
            Some(room) => comp
                .cand
                .iter()
                .copied()
                .filter(|&n| room[n as usize] > 0)
                .collect(),
            None => comp.cand.clone(),
        };
        if nodes.is_empty() {
            if let Some(room) = &room {
                return Decided::Infeasible(format!(
                    "component `{}` has no candidate node with room for its container: {} (with the components placed before it: topsis places them one by one, in the application's order)",
                    comp.name,
                    model.containers_note(&comp.cand, room, 1)
                ));
            }
        }
        let cand: Vec<NodeUtil> = nodes.iter().map(|&n| st.nodes[n as usize]).collect();
        explored += cand.len() as u64;
        let r = rank(&cand, &st.pods[c], &st.weights[c]);
        let Some(k) = r.chosen else {
            return Decided::Infeasible(format!(
                "component `{}` fits on none of its {} candidate nodes in cpu, memory, bandwidth, disk and io together with the components placed before it (topsis places them one by one, in the application's order)",
                comp.name,
                nodes.len()
            ));
        };
        let n = nodes[k];
        st.nodes[n as usize].place(&st.pods[c]);
        if let Some(room) = &mut room {
            room[n as usize] -= 1;
        }
        assignment.push(n);
    }
    Decided::Placed {
        assignment,
        notes: st.notes,
        explored,
        score: None,
    }
}

/// The mean closeness of the given deployment (see the module docs).
pub(crate) fn score(model: &Model<'_>, app: &Application, ledger: &Ledger, a: &[u32]) -> f64 {
    let mut st = setup(model, app, ledger);
    let mut total = 0.0;
    for (c, comp) in model.comps.iter().enumerate() {
        let cand: Vec<NodeUtil> = comp.cand.iter().map(|&n| st.nodes[n as usize]).collect();
        let r = rank(&cand, &st.pods[c], &st.weights[c]);
        total += r
            .scored
            .iter()
            .find(|s| comp.cand[s.node] == a[c])
            .map_or(0.0, |s| s.closeness);
        st.nodes[a[c] as usize].place(&st.pods[c]);
    }
    if model.comps.is_empty() {
        0.0
    } else {
        (total / model.comps.len() as f64).clamp(0.0, 1.0)
    }
}
