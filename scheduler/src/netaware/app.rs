//! `scheduler: network-aware`: paper 003's placement and descheduler over the domain model.
//!
//! The application and the cluster become a [`Snapshot`] and the placement is
//! [`super::place`] with [`app_weights`]:
//! - nodes: every node of the cluster; capacity from `capacity`, background use
//!   `usage` + the [`Ledger`]'s reservations (CPU and memory); a node without CPU or memory
//!   capacity takes nothing;
//! - [`Snapshot::allowed`]: the nodes that pass the constraint plugins and have room in the
//!   ledger for the component's request, as for `qos`;
//! - latency: the links' measured latency (a node's own loopback 0 when not measured); a
//!   link that is not known counts as the slowest known one;
//! - components' use and traffic: measured, from [`Cluster::observed`] for this application
//!   (CPU millicores and memory MB per component, bytes/s between components). Before anything
//!   is measured, each component's declared request (0 without one) and 1 byte/s on every
//!   channel (equal traffic); a component without a measurement of its own takes its request.
//!   [`crate::Placement::notes`] says which were used;
//! - the entry point: with the application's `ingress: {node, component}` and that node in
//!   the cluster, the *entry* (placed first) is `ingress.component`, the ingress is
//!   `ingress.node` and the weights are the paper's ([`Weights::default`], δ = 0.1: the
//!   latency from the ingress node to the entry's node counts); the node needs no capacity
//!   (it can be a gateway that runs nothing), but its links must be measured (an agent on it)
//!   or they count as the slowest known. Without `ingress` (or with a node the cluster does not
//!   have: a note says so) δ = 0 (the entry term drops out) and the entry is the most
//!   constrained component (fewest candidate nodes), then the one that exchanges the most
//!   traffic, then the first.
//!
//! The score of a deployment ([`crate::score`]): the mean over the components of S(c, node of c)
//! with every component placed (the module formula of [`super`]), clamped to [0, 1].
//!
//! [`deschedule`]: one evaluation of the descheduler's rule on a running application: the move
//! (of one component, or the first of a traffic-connected group sharing a node) with the
//! largest relative gain, if it exceeds [`DeschedConfig::threshold`]. Pure and deterministic;
//! the caller requires it several evaluations in a row before acting (the control plane's
//! hysteresis), or uses [`super::desched::Descheduler`] on [`snapshot`]'s output.

use super::ComponentUse;
use super::{desched, Latency, NodeState, Snapshot, Weights};
use crate::ledger::Ledger;
use crate::problem::Model;
use crate::{filter, Decided, Infra, ScheduleError};
use acoa_shared::model::{Application, Cluster};
use std::collections::{BTreeMap, HashMap};

/// The weights used for applications without an ingress: [`Weights::default`] without the
/// entry term (δ = 0). With an ingress in the cluster: [`Weights::default`].
pub fn app_weights() -> Weights {
    Weights {
        delta: 0.0,
        ..Weights::default()
    }
}

/// A [`Snapshot`] of one application on one cluster, and what it rested on.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// Nodes in the infrastructure's (name) order, components in the application's.
    pub snapshot: Snapshot,
    /// One line per fallback taken (no measurements, unknown links, no ingress node).
    pub notes: Vec<String>,
    /// The weights to judge it with: [`Weights::default`] with an ingress, else
    /// [`app_weights`] (δ = 0).
    pub weights: Weights,
}

/// Builds the snapshot (see the module docs). With `current` (node index per component), the
/// components' own use is taken off their nodes' measured usage (it is counted again from the
/// assignment) and every component is allowed on its current node.
pub(crate) fn prepare(
    model: &Model<'_>,
    app: &Application,
    ledger: &Ledger,
    current: Option<&[u32]>,
) -> Prepared {
    let infra = model.infra;
    let nn = infra.len();
    let nc = model.comps.len();
    let mut notes = Vec::new();
    let observed = infra.observed(&app.application);
    // Components' use: measured, else declared.
    let mut unmeasured = Vec::new();
    let components: Vec<ComponentUse> = app
        .components
        .iter()
        .map(|c| match observed.and_then(|o| o.components.get(&c.name)) {
            Some(u) => ComponentUse {
                name: c.name.clone(),
                cpu: u.cpu_millis,
                memory: u.memory_mb,
            },
            None => {
                unmeasured.push(c.name.as_str());
                let r = c.resources.unwrap_or_default();
                ComponentUse {
                    name: c.name.clone(),
                    cpu: r.cpu_millis as f64,
                    memory: r.memory_mb as f64,
                }
            }
        })
        .collect();
    // Traffic: measured, else equal on every channel.
    let index: HashMap<&str, usize> = app
        .components
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let mut traffic = vec![vec![0.0; nc]; nc];
    let mut measured_traffic = false;
    if let Some(o) = observed {
        for t in &o.traffic {
            if let (Some(&f), Some(&to)) = (index.get(t.from.as_str()), index.get(t.to.as_str())) {
                if f != to {
                    traffic[f][to] += t.bytes_per_s;
                    measured_traffic = true;
                }
            }
        }
    }
    if !measured_traffic {
        for ch in &app.channels {
            let (f, t) = (index[ch.from.as_str()], index[ch.to.as_str()]);
            if f != t {
                traffic[f][t] = 1.0;
            }
        }
    }
    match (unmeasured.len() == nc, measured_traffic) {
        (true, false) => notes.push(format!(
            "no measurements of `{}` yet: declared requests and equal traffic on every channel",
            app.application
        )),
        (all, measured) => {
            if !unmeasured.is_empty() && !all {
                notes.push(format!(
                    "no measured use of {}: declared requests",
                    unmeasured
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            } else if all {
                notes.push("no measured use yet: declared requests".to_string());
            }
            if !measured {
                notes.push("no traffic measured yet: equal traffic on every channel".to_string());
            }
        }
    }
    // Nodes: capacity, and background use (without the components' own where they run).
    let mut own = vec![(0.0, 0.0); nn];
    if let Some(cur) = current {
        for (c, &n) in cur.iter().enumerate() {
            own[n as usize].0 += components[c].cpu;
            own[n as usize].1 += components[c].memory;
        }
    }
    let nodes: Vec<NodeState> = infra
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let r = ledger.reserved(&n.name);
            let (cpu, mem) = (n.capacity.cpu_millis as f64, n.capacity.memory_mb as f64);
            NodeState {
                name: n.name.clone(),
                cpu_capacity: if cpu > 0.0 { cpu } else { 1.0 },
                memory_capacity: if mem > 0.0 { mem } else { 1.0 },
                cpu_background: (n.usage.cpu_millis as f64 - own[i].0).max(0.0)
                    + r.cpu_millis as f64,
                memory_background: (n.usage.memory_mb as f64 - own[i].1).max(0.0)
                    + r.memory_mb as f64,
                schedulable: cpu > 0.0 && mem > 0.0,
            }
        })
        .collect();
    // Latency: measured, else estimated; unknown = the slowest measured.
    let slowest = (0..nn as u32)
        .flat_map(|a| infra.out_links(a).1.iter().map(|q| q.latency_ms))
        .fold(0.0_f64, f64::max);
    let known_pairs: usize = match infra.estimator() {
        Some(_) => nn * nn.saturating_sub(1),
        None => (0..nn as u32)
            .map(|a| infra.out(a).iter().filter(|b| **b != a).count())
            .sum(),
    };
    if infra.estimator().is_some() {
        notes.push(
            "links without a measurement are estimated from the nodes' coordinates".to_string(),
        );
    } else if known_pairs < nn * nn.saturating_sub(1) {
        notes.push(format!(
            "{} of {} links are not measured: taken as the slowest known ({slowest} ms)",
            nn * nn.saturating_sub(1) - known_pairs,
            nn * nn.saturating_sub(1)
        ));
    }
    let latency = Latency::links(infra, slowest);
    let mut allowed = vec![vec![false; nn]; nc];
    for (c, comp) in model.comps.iter().enumerate() {
        for &n in &comp.cand {
            allowed[c][n as usize] = true;
        }
        if let Some(cur) = current {
            allowed[c][cur[c] as usize] = true;
        }
    }
    // The entry point: the declared ingress when its node is in the cluster.
    let declared = app.ingress.as_ref().and_then(|ing| {
        let node = infra.index_of(&ing.node);
        let comp = index.get(ing.component.as_str()).copied();
        if node.is_none() {
            notes.push(format!(
                "ingress node `{}` is not a node of the cluster: no entry term (δ = 0)",
                ing.node
            ));
        }
        Some((comp?, node? as usize))
    });
    if let Some((_, n)) = declared {
        let measured = infra.out_links(n as u32).0.len() + infra.inn_links(n as u32).0.len();
        if measured == 0 && nn > 1 {
            notes.push(format!(
                "no link of ingress node `{}` is measured: taken as the slowest known",
                infra.node(n as u32).name
            ));
        }
    }
    let weights = if declared.is_some() {
        Weights::default()
    } else {
        app_weights()
    };
    let entry = declared.map(|(c, _)| c).unwrap_or_else(|| {
        (0..nc)
            .min_by(|&a, &b| {
                let count = |c: usize| allowed[c].iter().filter(|x| **x).count();
                let vol = |c: usize| (0..nc).map(|k| traffic[c][k] + traffic[k][c]).sum::<f64>();
                count(a)
                    .cmp(&count(b))
                    .then(vol(b).total_cmp(&vol(a)))
                    .then(a.cmp(&b))
            })
            .unwrap_or(0)
    });
    Prepared {
        snapshot: Snapshot {
            nodes,
            latency,
            components,
            traffic,
            entry,
            ingress: declared.map_or(0, |(_, n)| n),
            allowed,
        },
        notes,
        weights,
    }
}

/// Places the application (see the module docs): [`super::placement_order`], each component
/// on its [`super::best_node`], where a node is allowed only while the declared requests of
/// the components placed on it still fit in what the ledger leaves (capacity − usage −
/// reservations), as for `qos` (the measured use may be lower than the requests).
pub(crate) fn place(model: &Model<'_>, app: &Application, ledger: &Ledger) -> Decided {
    let Prepared {
        snapshot: mut s,
        notes,
        weights: w,
    } = prepare(model, app, ledger, None);
    if let Err(e) = s.validate() {
        return Decided::Infeasible(format!("network-aware: {e}"));
    }
    let mut room = model.remaining(ledger);
    let mut assignment: Vec<Option<usize>> = vec![None; s.components.len()];
    let mut explored = 0u64;
    for c in super::placement_order(&s) {
        let demand = model.demand(c);
        // Candidates refused only because they have no room for another container.
        let mut full: Vec<u32> = Vec::new();
        if let Some(d) = &demand {
            for (n, ok) in s.allowed[c].iter_mut().enumerate() {
                if *ok && d.containers > room[n].containers {
                    full.push(n as u32);
                }
                *ok &= room[n].admits(d);
            }
        }
        explored += s.allowed[c].iter().filter(|x| **x).count() as u64;
        let Some((n, _)) = super::best_node(&s, &w, &assignment, c) else {
            let mut reason = format!(
                "component `{}` has no candidate node with room: network-aware keeps each node's cpu and memory at most {:.0} % used (measured use, reservations and the components placed before it)",
                s.components[c].name,
                w.max_utilisation * 100.0
            );
            if !full.is_empty() {
                let left: Vec<i64> = room.iter().map(|r| r.containers).collect();
                reason += &format!(
                    "; {} (with the components placed before it)",
                    model.containers_note(&full, &left, 1)
                );
            }
            return Decided::Infeasible(reason);
        };
        if let Some(d) = &demand {
            room[n].take(d);
        }
        assignment[c] = Some(n);
    }
    let assignment: Vec<u32> = assignment
        .into_iter()
        .map(|n| n.expect("every component placed") as u32)
        .collect();
    // The score is judged without the ledger (see `score`): the same snapshot with the
    // measured usage alone as background, which is what `prepare` builds without a ledger.
    for (i, node) in s.nodes.iter_mut().enumerate() {
        let u = &model.infra.node(i as u32).usage;
        node.cpu_background = u.cpu_millis as f64;
        node.memory_background = u.memory_mb as f64;
    }
    let score = app_score(&s, &w, &assignment);
    Decided::Placed {
        assignment,
        notes,
        explored,
        score: Some(score),
    }
}

/// The mean score of the given deployment (see the module docs).
pub(crate) fn score(model: &Model<'_>, app: &Application, ledger: &Ledger, a: &[u32]) -> f64 {
    let p = prepare(model, app, ledger, None);
    app_score(&p.snapshot, &p.weights, a)
}

/// The mean of S(c, a[c]) over the components, everything placed as in `a`, in [0, 1].
fn app_score(s: &Snapshot, w: &Weights, a: &[u32]) -> f64 {
    let opt: Vec<Option<usize>> = a.iter().map(|&n| Some(n as usize)).collect();
    let lmax = s.max_latency();
    let total: f64 = (0..a.len())
        .map(|c| super::score_with_max(s, w, &opt, lmax, c, a[c] as usize))
        .sum();
    if a.is_empty() {
        0.0
    } else {
        (total / a.len() as f64).clamp(0.0, 1.0)
    }
}

/// The descheduler's rule as one evaluation (see [`deschedule`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeschedConfig {
    /// Minimum relative gain of the move (0.2 = the moved components score 20 % better).
    pub threshold: f64,
    /// Also consider moving the traffic-connected groups of components that share a node
    /// (the first member moves now, the others follow on later evaluations).
    pub group_moves: bool,
}

impl Default for DeschedConfig {
    /// The threshold and group moves of [`desched::Config::default`].
    fn default() -> Self {
        let d = desched::Config::default();
        DeschedConfig {
            threshold: d.threshold,
            group_moves: d.group_moves,
        }
    }
}

/// A move the descheduler proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub component: String,
    pub from: String,
    pub to: String,
    /// Relative gain of the candidate move (the component alone or its group), > threshold.
    pub gain: f64,
    /// The components moving together (ascending application order); `component` is the first.
    pub group: Vec<String>,
}

/// The snapshot [`deschedule`] judges on: `current` placement's own use taken off its nodes.
pub fn snapshot(
    cluster: &Cluster,
    app: &Application,
    ledger: &Ledger,
    current: &BTreeMap<String, String>,
) -> Result<(Prepared, Vec<usize>), ScheduleError> {
    cluster.validate()?;
    app.validate()?;
    let infra = Infra::from_cluster(cluster);
    let constraints = filter::default_constraints();
    let model = Model::compile(&infra, app, ledger, &constraints);
    let a = crate::resolve(&infra, &model, current)?;
    let p = prepare(&model, app, ledger, Some(&a));
    Ok((p, a.into_iter().map(|n| n as usize).collect()))
}

/// One evaluation of the descheduler on a running application: given its `current`
/// placement, at most one move, when another node scores clearly higher (relative gain above
/// `cfg.threshold`) for a component or a traffic-connected group sharing a node; `None`
/// otherwise. Pure and deterministic: the largest gain wins, ties to the first candidate
/// (single components in application order, then groups). A move never gives a node more
/// containers than it can take ([`Ledger::container_room`], less this application's own
/// there). Judged with the network-aware score
/// whatever the application's `scheduler:`. With an `ingress` whose node is in the cluster, the
/// entry term counts: a slower link between the ingress node and the entry's node lowers the
/// entry's (and its group's) score where it runs.
pub fn deschedule(
    cluster: &Cluster,
    app: &Application,
    ledger: &Ledger,
    current: &BTreeMap<String, String>,
    cfg: &DeschedConfig,
) -> Result<Option<Move>, ScheduleError> {
    if !(cfg.threshold.is_finite() && cfg.threshold >= 0.0) {
        return Err(ScheduleError::Model(acoa_shared::model::ModelError::new(
            "threshold",
            format!("must be a finite number >= 0, got {}", cfg.threshold),
        )));
    }
    let (p, a) = snapshot(cluster, app, ledger, current)?;
    let s = &p.snapshot;
    let w = p.weights;
    let mut candidates: Vec<Vec<usize>> = (0..a.len()).map(|c| vec![c]).collect();
    if cfg.group_moves {
        candidates.extend(desched::groups(s, &a).into_iter().filter(|g| g.len() > 1));
    }
    // Containers each node can still be given besides this application's own there.
    let mut room: Vec<i64> = s
        .nodes
        .iter()
        .map(|n| i64::from(ledger.container_room(&n.name)))
        .collect();
    for &n in &a {
        room[n] -= 1;
    }
    let mut best: Option<(Vec<usize>, usize, f64)> = None;
    for members in candidates {
        for (n, g) in desched::group_gains(s, &w, &a, &members)
            .into_iter()
            .enumerate()
        {
            let Some(g) = g else { continue };
            let arriving = members.iter().filter(|&&m| a[m] != n).count() as i64;
            if arriving > room[n] {
                continue;
            }
            if g > cfg.threshold && best.as_ref().is_none_or(|(_, _, b)| g > *b) {
                best = Some((members.clone(), n, g));
            }
        }
    }
    Ok(best.map(|(members, to, gain)| {
        let c = members[0];
        Move {
            component: s.components[c].name.clone(),
            from: s.nodes[a[c]].name.clone(),
            to: s.nodes[to].name.clone(),
            gain,
            group: members
                .iter()
                .map(|&m| s.components[m].name.clone())
                .collect(),
        }
    }))
}
