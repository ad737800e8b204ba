//! Network- and resource-aware placement with a descheduler (paper 003), and a
//! network-unaware, Kubernetes-default-like baseline ([`baseline`]).
//!
//! Everything here is pure: plain data in ([`Snapshot`]: nodes with capacity and background
//! usage, a measured node-to-node latency matrix, the components' measured CPU and memory use,
//! a measured component-to-component traffic matrix), plain values out. No I/O, deterministic
//! (fixed orders, ties to the lowest index).
//!
//! # The score
//!
//! For component `c` on candidate node `n`, with the other components placed as in the
//! (partial) assignment `A`:
//!
//! ```text
//! H_cpu(n) = 1 − (bg_cpu(n) + Σ_{k∈A, A[k]=n, k≠c} cpu_k + cpu_c) / cap_cpu(n)   headroom left
//! H_mem(n) = same with memory
//! T(c,k)   = traffic[c][k] + traffic[k][c]                     bytes/s exchanged, both ways
//! N(n)     = 1 − Σ_{k∈A, k≠c} T(c,k)·L(n, A[k]) / (Σ_{k∈A, k≠c} T(c,k) · L_max)
//!            traffic-weighted latency to the already-placed peers, normalised to [0, 1]
//!            (1 = every byte stays on the node; 1 too when c exchanges nothing with placed peers)
//! E(n)     = 1 − L(ingress, n) / L_max                          only for the entry component
//! S(c,n)   = (α·H_cpu + β·H_mem + γ·N + δ·E) / (α + β + γ + δ)  for the entry component
//! S(c,n)   = (α·H_cpu + β·H_mem + γ·N) / (α + β + γ)            for the others
//! ```
//!
//! `L(a, b)` is the measured one-way latency from node `a` to node `b` (the diagonal is the
//! loopback, normally 0), `L_max` the largest latency in the matrix (all network terms are 1 if
//! it is 0). A node is a candidate only if it is schedulable, allowed for `c`
//! ([`Snapshot::allowed`]: the component's constraints) and, with `c` placed, its CPU and
//! memory utilisation stay at or below [`Weights::max_utilisation`].
//!
//! Why this definition of γ and δ:
//! - **γ weighs the communication cost**, the paper's "traffic times network cost": each byte/s
//!   `c` exchanges with a placed peer costs the latency between the candidate and that peer's
//!   node. Normalising by `Σ T · L_max` makes it a traffic-weighted mean latency as a fraction of
//!   the worst one, so it lies in [0, 1] like the headroom terms and α, β, γ are comparable
//!   shares, whatever the traffic volume of the component (a chatty and a quiet component are
//!   judged by the same scale). The price: the trade-off between network and resources does not
//!   depend on the absolute latency scale (10 ms and 200 ms everywhere weigh the same); only the
//!   ratios between links matter.
//! - **δ weighs the latency to the entry point**: every request enters through the ingress node
//!   (where the load balancer or gateway receives it) and is handed to the entry component, so
//!   that hop is on every request's path; nothing else pulls the application towards its users
//!   (γ alone keeps the components together, wherever that is). It applies to the entry
//!   component only; the others follow it through γ.
//!
//! # Placement order
//!
//! [`placement_order`]: the entry component first, then repeatedly the unplaced component
//! that exchanges the most traffic with the components already ordered (a maximum-spanning-tree
//! order, i.e. breadth-first from the entry, heaviest traffic first); components with no traffic
//! to the ordered set come last, by decreasing total traffic. Ties go to the lowest index. This
//! way each component is placed when its heaviest peers already are, so `N` sees them, as a
//! Kubernetes scheduler plugin placing one pod at a time would.
//!
//! # Descheduler
//!
//! [`desched::Descheduler`]: a state machine fed with fresh measurements on every tick; it moves
//! a component (or a traffic-connected group of components sharing a node, one component at a
//! time) when another node scores clearly higher (smoothed relative gain above a threshold,
//! sustained over N evaluations), one move in flight at a time.
//!
//! # Applications
//!
//! [`app`]: `scheduler: network-aware` in an application definition. Builds the snapshot from
//! the domain model (the cluster's measured use and traffic, [`Snapshot::allowed`] from the
//! constraint plugins and the ledger), places with the rule above, scores deployments, and
//! [`app::deschedule`] evaluates the descheduler's rule once on a running application.
//!
//! # Simulation
//!
//! [`sim`]: paper 003's experiment as a simulation (not the testbed); run it with
//! `cargo run --release -p acoa-scheduler --features sim --example netaware-sim` (the module
//! is built with the feature `sim` only).

// Index loops read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

pub mod app;
use crate::Infra;

pub mod baseline;
pub mod desched;
#[cfg(feature = "sim")]
pub mod sim;

/// One node as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    pub name: String,
    /// Millicores.
    pub cpu_capacity: f64,
    /// MB.
    pub memory_capacity: f64,
    /// CPU used by everything that is not one of the snapshot's components (other
    /// applications, the system), millicores. The components' own use is added from the
    /// assignment, so that moving a component moves its use.
    pub cpu_background: f64,
    /// Memory used by everything that is not one of the snapshot's components, MB.
    pub memory_background: f64,
    /// False for a node that takes no components (a control node, a cordoned node).
    pub schedulable: bool,
}

/// One component's measured resource use.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentUse {
    pub name: String,
    /// Millicores.
    pub cpu: f64,
    /// MB.
    pub memory: f64,
}

/// Everything the scheduler and the descheduler look at, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub nodes: Vec<NodeState>,
    /// The one-way latency from node `a` to node `b`, ms ([`Latency::ms`]).
    pub latency: Latency,
    pub components: Vec<ComponentUse>,
    /// `traffic[i][j]`: measured bytes/s sent by component `i` to component `j`.
    pub traffic: Vec<Vec<f64>>,
    /// Index of the entry component (the one that receives the users' requests).
    pub entry: usize,
    /// Index of the node where the users' requests enter the cluster.
    pub ingress: usize,
    /// `allowed[c][n]`: whether component `c` may run on node `n` at all (its constraints:
    /// hardware, layer, ...). Empty: every component may run on every schedulable node.
    pub allowed: Vec<Vec<bool>>,
}

/// Where a [`Snapshot`] reads the latency between two nodes.
#[derive(Debug, Clone)]
pub enum Latency {
    /// `[a][b]`: the one-way latency from node `a` to node `b`, ms (the paper's simulation and
    /// the tests: every pair given).
    Matrix(Vec<Vec<f64>>),
    /// The scheduler's sparse source: [`Infra::link`] (measured, else estimated), and
    /// `unknown_ms` for a pair it has neither for; 0 from a node to itself. No n x n matrix.
    Links {
        infra: Infra,
        unknown_ms: f64,
        /// [`Latency::max`], computed once: the largest measured latency, `unknown_ms`, and an
        /// upper bound of the estimates (`Estimator::max_latency_bound`; the largest estimate
        /// itself would cost n^2).
        max_ms: f64,
    },
}

impl PartialEq for Latency {
    fn eq(&self, other: &Latency) -> bool {
        match (self, other) {
            (Latency::Matrix(a), Latency::Matrix(b)) => a == b,
            (
                Latency::Links {
                    infra: a,
                    unknown_ms: ua,
                    max_ms: ma,
                },
                Latency::Links {
                    infra: b,
                    unknown_ms: ub,
                    max_ms: mb,
                },
            ) => a.same(b) && ua == ub && ma == mb,
            _ => false,
        }
    }
}

impl Latency {
    /// Over `infra`'s links and estimates (see [`Latency::Links`]).
    pub fn links(infra: &Infra, unknown_ms: f64) -> Latency {
        let measured = (0..infra.len() as u32)
            .flat_map(|a| infra.out_links(a).1.iter().map(|q| q.latency_ms))
            .fold(unknown_ms, f64::max);
        let max_ms = infra
            .estimator()
            .map_or(measured, |e| measured.max(e.max_latency_bound()));
        Latency::Links {
            infra: infra.clone(),
            unknown_ms,
            max_ms,
        }
    }

    /// The latency from node `a` to node `b`, ms.
    #[inline]
    pub fn ms(&self, a: usize, b: usize) -> f64 {
        match self {
            Latency::Matrix(m) => m[a][b],
            Latency::Links {
                infra, unknown_ms, ..
            } => {
                if a == b {
                    return infra.link(a as u32, a as u32).map_or(0.0, |q| q.latency_ms);
                }
                infra
                    .link(a as u32, b as u32)
                    .map_or(*unknown_ms, |q| q.latency_ms)
            }
        }
    }

    /// The largest latency (of the matrix; for [`Latency::Links`], its `max_ms`).
    pub fn max(&self) -> f64 {
        match self {
            Latency::Matrix(m) => m.iter().flatten().fold(0.0_f64, |m, &v| m.max(v)),
            Latency::Links { max_ms, .. } => *max_ms,
        }
    }
}

/// The weights of the score and the candidate filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// CPU headroom.
    pub alpha: f64,
    /// Memory headroom.
    pub beta: f64,
    /// Traffic-weighted latency to the placed peers.
    pub gamma: f64,
    /// Latency from the ingress node (entry component only).
    pub delta: f64,
    /// A node is a candidate only if its CPU and memory utilisation with the component stay at
    /// or below this fraction (keeps room for load peaks: a packed node's queues explode).
    pub max_utilisation: f64,
}

impl Default for Weights {
    /// The network dominates (γ + δ = 0.6), resources still count (α + β = 0.4); nodes are
    /// filled to 80 % at most.
    fn default() -> Self {
        Weights {
            alpha: 0.25,
            beta: 0.15,
            gamma: 0.5,
            delta: 0.1,
            max_utilisation: 0.8,
        }
    }
}

/// Bad input: the snapshot or the weights do not make sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NetError {
    #[error("{what}: expected {expected} entries, got {got}")]
    Shape {
        what: String,
        expected: usize,
        got: usize,
    },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
}

/// The result of placing all components: a value, also when some component fits nowhere.
#[derive(Debug, Clone, PartialEq)]
pub enum NetOutcome {
    /// `assignment[c]` = node index of component `c`.
    Placed(Vec<usize>),
    /// No candidate node for this component (the ones before it were placed as given).
    Unschedulable {
        component: String,
        partial: Vec<Option<usize>>,
    },
}

/// The parts of a score, for explanations and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreParts {
    pub cpu_headroom: f64,
    pub memory_headroom: f64,
    pub network: f64,
    /// `Some` for the entry component only.
    pub entry: Option<f64>,
    pub total: f64,
}

fn invalid(what: impl Into<String>, reason: impl Into<String>) -> NetError {
    NetError::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}

fn check_value(what: impl Into<String>, v: f64) -> Result<(), NetError> {
    if !v.is_finite() || v < 0.0 {
        return Err(invalid(what, format!("must be finite and >= 0, got {v}")));
    }
    Ok(())
}

fn check_matrix(what: &str, m: &[Vec<f64>], n: usize) -> Result<(), NetError> {
    if m.len() != n {
        return Err(NetError::Shape {
            what: what.to_string(),
            expected: n,
            got: m.len(),
        });
    }
    for (i, row) in m.iter().enumerate() {
        if row.len() != n {
            return Err(NetError::Shape {
                what: format!("{what} row {i}"),
                expected: n,
                got: row.len(),
            });
        }
        for (j, &v) in row.iter().enumerate() {
            // The field name is formatted only for a bad value (this runs n² times).
            if !(v.is_finite() && v >= 0.0) {
                check_value(format!("{what}[{i}][{j}]"), v)?;
            }
        }
    }
    Ok(())
}

impl Snapshot {
    /// Checks shapes and values; everything else assumes a valid snapshot.
    pub fn validate(&self) -> Result<(), NetError> {
        if self.nodes.is_empty() {
            return Err(invalid("nodes", "no nodes"));
        }
        if self.components.is_empty() {
            return Err(invalid("components", "no components"));
        }
        for n in &self.nodes {
            for (field, v) in [
                ("cpu_capacity", n.cpu_capacity),
                ("memory_capacity", n.memory_capacity),
                ("cpu_background", n.cpu_background),
                ("memory_background", n.memory_background),
            ] {
                check_value(format!("node {} {field}", n.name), v)?;
            }
            if n.cpu_capacity <= 0.0 || n.memory_capacity <= 0.0 {
                return Err(invalid(
                    format!("node {}", n.name),
                    "capacity must be positive",
                ));
            }
        }
        for c in &self.components {
            check_value(format!("component {} cpu", c.name), c.cpu)?;
            check_value(format!("component {} memory", c.name), c.memory)?;
        }
        match &self.latency {
            Latency::Matrix(m) => check_matrix("latency_ms", m, self.nodes.len())?,
            Latency::Links {
                infra,
                unknown_ms,
                max_ms,
            } => {
                if infra.len() != self.nodes.len() {
                    return Err(NetError::Shape {
                        what: "latency nodes".into(),
                        expected: self.nodes.len(),
                        got: infra.len(),
                    });
                }
                check_value("latency unknown_ms".to_string(), *unknown_ms)?;
                check_value("latency max_ms".to_string(), *max_ms)?;
            }
        }
        check_matrix("traffic", &self.traffic, self.components.len())?;
        if self.entry >= self.components.len() {
            return Err(invalid("entry", format!("no component {}", self.entry)));
        }
        if self.ingress >= self.nodes.len() {
            return Err(invalid("ingress", format!("no node {}", self.ingress)));
        }
        if !self.allowed.is_empty() {
            if self.allowed.len() != self.components.len() {
                return Err(NetError::Shape {
                    what: "allowed".into(),
                    expected: self.components.len(),
                    got: self.allowed.len(),
                });
            }
            for (c, row) in self.allowed.iter().enumerate() {
                if row.len() != self.nodes.len() {
                    return Err(NetError::Shape {
                        what: format!("allowed row {c}"),
                        expected: self.nodes.len(),
                        got: row.len(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether component `c` may run on node `n` by its constraints ([`Snapshot::allowed`]).
    pub fn is_allowed(&self, c: usize, n: usize) -> bool {
        self.allowed.is_empty() || self.allowed[c][n]
    }

    /// Bytes/s exchanged between components `a` and `b`, both directions.
    pub fn exchanged(&self, a: usize, b: usize) -> f64 {
        self.traffic[a][b] + self.traffic[b][a]
    }

    /// The largest latency ([`Latency::max`]).
    pub fn max_latency(&self) -> f64 {
        self.latency.max()
    }

    /// CPU and memory in use on each node: background plus the assigned components, except
    /// `except`.
    pub fn loads(&self, assignment: &[Option<usize>], except: Option<usize>) -> Vec<(f64, f64)> {
        let mut loads: Vec<(f64, f64)> = self
            .nodes
            .iter()
            .map(|n| (n.cpu_background, n.memory_background))
            .collect();
        for (k, a) in assignment.iter().enumerate() {
            if Some(k) == except {
                continue;
            }
            if let Some(n) = *a {
                loads[n].0 += self.components[k].cpu;
                loads[n].1 += self.components[k].memory;
            }
        }
        loads
    }
}

impl Weights {
    pub fn validate(&self) -> Result<(), NetError> {
        for (f, v) in [
            ("alpha", self.alpha),
            ("beta", self.beta),
            ("gamma", self.gamma),
            ("delta", self.delta),
            ("max_utilisation", self.max_utilisation),
        ] {
            check_value(format!("weights {f}"), v)?;
        }
        if self.alpha + self.beta + self.gamma <= 0.0 {
            return Err(invalid("weights", "alpha + beta + gamma must be positive"));
        }
        Ok(())
    }
}

/// The score of component `c` on node `n`, the other components placed as in `assignment`
/// (its entry for `c` is ignored). Does not filter: see [`fits`].
pub fn score_parts(
    s: &Snapshot,
    w: &Weights,
    assignment: &[Option<usize>],
    c: usize,
    n: usize,
) -> ScoreParts {
    let loads = s.loads(assignment, Some(c));
    score_with_loads(s, w, assignment, &loads, s.max_latency(), c, n)
}

/// [`score`] with the snapshot's [`Snapshot::max_latency`] given (it costs a pass over the
/// latency matrix: callers that score many nodes compute it once).
pub fn score_with_max(
    s: &Snapshot,
    w: &Weights,
    assignment: &[Option<usize>],
    lmax: f64,
    c: usize,
    n: usize,
) -> f64 {
    let loads = s.loads(assignment, Some(c));
    score_with_loads(s, w, assignment, &loads, lmax, c, n).total
}

/// [`score_parts`]`.total`.
pub fn score(s: &Snapshot, w: &Weights, assignment: &[Option<usize>], c: usize, n: usize) -> f64 {
    score_parts(s, w, assignment, c, n).total
}

fn score_with_loads(
    s: &Snapshot,
    w: &Weights,
    assignment: &[Option<usize>],
    loads: &[(f64, f64)],
    lmax: f64,
    c: usize,
    n: usize,
) -> ScoreParts {
    let node = &s.nodes[n];
    let comp = &s.components[c];
    let cpu_headroom = 1.0 - (loads[n].0 + comp.cpu) / node.cpu_capacity;
    let memory_headroom = 1.0 - (loads[n].1 + comp.memory) / node.memory_capacity;
    let (mut cost, mut volume) = (0.0, 0.0);
    for (k, a) in assignment.iter().enumerate() {
        if k == c {
            continue;
        }
        if let Some(m) = *a {
            let t = s.exchanged(c, k);
            cost += t * s.latency.ms(n, m);
            volume += t;
        }
    }
    let network = if volume > 0.0 && lmax > 0.0 {
        1.0 - cost / (volume * lmax)
    } else {
        1.0
    };
    let entry = (c == s.entry).then(|| {
        if lmax > 0.0 {
            1.0 - s.latency.ms(s.ingress, n) / lmax
        } else {
            1.0
        }
    });
    let (mut num, mut den) = (
        w.alpha * cpu_headroom + w.beta * memory_headroom + w.gamma * network,
        w.alpha + w.beta + w.gamma,
    );
    if let Some(e) = entry {
        num += w.delta * e;
        den += w.delta;
    }
    ScoreParts {
        cpu_headroom,
        memory_headroom,
        network,
        entry,
        total: num / den,
    }
}

/// Whether component `c` may go on node `n` (schedulable, CPU and memory utilisation with it at
/// most [`Weights::max_utilisation`]), the others placed as in `assignment`.
pub fn fits(s: &Snapshot, w: &Weights, assignment: &[Option<usize>], c: usize, n: usize) -> bool {
    let loads = s.loads(assignment, Some(c));
    fits_with_loads(s, w.max_utilisation, &loads, c, n)
}

fn fits_with_loads(s: &Snapshot, max_util: f64, loads: &[(f64, f64)], c: usize, n: usize) -> bool {
    let node = &s.nodes[n];
    let comp = &s.components[c];
    // A small tolerance so that "exactly full" counts as fitting despite rounding.
    let eps = 1e-9;
    node.schedulable
        && s.is_allowed(c, n)
        && loads[n].0 + comp.cpu <= max_util * node.cpu_capacity + eps
        && loads[n].1 + comp.memory <= max_util * node.memory_capacity + eps
}

/// The best candidate node for `c` and its score, or `None` if it fits nowhere. Ties go to the
/// lowest node index.
pub fn best_node(
    s: &Snapshot,
    w: &Weights,
    assignment: &[Option<usize>],
    c: usize,
) -> Option<(usize, f64)> {
    best_node_except(s, w, assignment, c, None)
}

/// [`best_node`] among the nodes other than `except`.
pub fn best_node_except(
    s: &Snapshot,
    w: &Weights,
    assignment: &[Option<usize>],
    c: usize,
    except: Option<usize>,
) -> Option<(usize, f64)> {
    let loads = s.loads(assignment, Some(c));
    let lmax = s.max_latency();
    let mut best: Option<(usize, f64)> = None;
    for n in 0..s.nodes.len() {
        if Some(n) == except || !fits_with_loads(s, w.max_utilisation, &loads, c, n) {
            continue;
        }
        let v = score_with_loads(s, w, assignment, &loads, lmax, c, n).total;
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((n, v));
        }
    }
    best
}

/// The order in which [`place`] places the components (see the module docs).
pub fn placement_order(s: &Snapshot) -> Vec<usize> {
    let nc = s.components.len();
    let mut order = vec![s.entry];
    let mut done = vec![false; nc];
    done[s.entry] = true;
    let total: Vec<f64> = (0..nc)
        .map(|i| (0..nc).filter(|&j| j != i).map(|j| s.exchanged(i, j)).sum())
        .collect();
    while order.len() < nc {
        let mut best: Option<(usize, f64, f64)> = None; // (component, to ordered, total)
        for i in (0..nc).filter(|&i| !done[i]) {
            let to_ordered: f64 = order.iter().map(|&k| s.exchanged(i, k)).sum();
            let better = match best {
                None => true,
                Some((_, bt, btot)) => to_ordered > bt || (to_ordered == bt && total[i] > btot),
            };
            if better {
                best = Some((i, to_ordered, total[i]));
            }
        }
        let (i, _, _) = best.expect("an unplaced component remains");
        done[i] = true;
        order.push(i);
    }
    order
}

/// Places every component, one at a time in [`placement_order`], each on its [`best_node`].
pub fn place(s: &Snapshot, w: &Weights) -> Result<NetOutcome, NetError> {
    s.validate()?;
    w.validate()?;
    Ok(place_in_order(s, placement_order(s), |a, c| {
        best_node(s, w, a, c).map(|(n, _)| n)
    }))
}

/// Places the components one at a time in `order`, each on the node `choose(assignment so far,
/// component)` says; unschedulable at the first it finds none for.
pub(crate) fn place_in_order(
    s: &Snapshot,
    order: impl IntoIterator<Item = usize>,
    mut choose: impl FnMut(&[Option<usize>], usize) -> Option<usize>,
) -> NetOutcome {
    let mut assignment: Vec<Option<usize>> = vec![None; s.components.len()];
    for c in order {
        match choose(&assignment, c) {
            Some(n) => assignment[c] = Some(n),
            None => {
                return NetOutcome::Unschedulable {
                    component: s.components[c].name.clone(),
                    partial: assignment,
                };
            }
        }
    }
    NetOutcome::Placed(assignment.into_iter().map(|a| a.expect("placed")).collect())
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
