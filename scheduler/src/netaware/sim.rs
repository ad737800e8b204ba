//! A simulation of paper 003's experiment (NOT the testbed): the m0–m12 + db1–db4 workflow on one
//! control node and five workers, virtual users each sending one request per second, the 95th
//! percentile of the end-to-end response time under the network-aware scheduler and the
//! network-unaware baseline; then latencies changed mid-run and the descheduler at work.
//!
//! # The workflow (invented: the paper's figure gives the names, not the edges we need)
//!
//! ```text
//! m0 ─┬─ m1 ─┬─ m4 ── db1            each component: its own work, then its stages in
//!     │      └─ m5 ── m10 ── db1      order, the calls of a stage in parallel
//!     ├─ m2 ─── m6 ── db2             (m2: first m6, then m7)
//!     │    └─── m7 ── m11 ── db2
//!     └─ m3 ─┬─ m8 ── db3
//!            └─ m9 ── m12 ── db4
//! ```
//!
//! m0 calls m1, m2 and m3 in parallel; m1 calls m4 and m5 in parallel; m2 calls m6, then m7;
//! m3 calls m8 and m9 in parallel; the rest is a chain each. One request visits every
//! microservice once, db1 and db2 twice. CPU per visit: 2 ms of one core for a microservice,
//! 4 ms for a database (50 ms per request). Memory: 64 MB per microservice, 256 MB per database.
//! Bytes per call: 1 KB request + 3 KB response between microservices, 1 KB + 15 KB with a
//! database (databases answer with data).
//!
//! # The cluster
//!
//! `c0`: control node, unschedulable, where the users' requests enter (ingress). `w1`..`w5`:
//! 2000 millicores and 4096 MB each, with some background use (other tenants): w1 300 m / 600 MB,
//! w2 500 / 1000, w3 200 / 400, w4 400 / 800, w5 100 / 300. One-way latency `L` between any two
//! distinct nodes (the paper's 10, 100, 200 ms), 0 within a node.
//!
//! # The response-time model
//!
//! A request costs `2·L(c0, node(m0))` (in and out) plus the time of m0; the time of a component
//! is its sojourn at its node plus, per stage, the largest of `2·L(its node, callee's node) +
//! time(callee)` over the stage's calls (request and response each cross the link once).
//! A node is one M/M/1 server whose speed is its capacity: a visit that needs `d` ms of one core
//! takes `d·1000/C` ms of service on a node of `C` millicores, and its sojourn is exponential
//! with mean `service / (1 − ρ)`, `ρ` the node's CPU utilisation (background included). ρ ≥ 1 is
//! saturation (reported, no figure). Response times are sampled (seeded), the p95 taken over
//! the samples.
//!
//! The schedulers see what would be measured at the load: each component's CPU
//! (`users × visits × d`), memory, and the traffic matrix (`users × calls × bytes`).

use super::desched::{Action, Config, Descheduler, Event};
use super::{baseline, place, ComponentUse, Latency, NetOutcome, NodeState, Snapshot, Weights};
use crate::rng::SplitMix64 as Rng;

/// The application: components, their calls, their costs.
#[derive(Debug, Clone)]
pub struct Workflow {
    pub names: Vec<String>,
    /// Per component: stages in order, each a set of parallel callees.
    pub stages: Vec<Vec<Vec<usize>>>,
    /// CPU per visit, ms of one core.
    pub cpu_ms: Vec<f64>,
    pub memory_mb: Vec<f64>,
    /// Bytes of a call's request and of its response, by callee.
    pub request_bytes: Vec<f64>,
    pub response_bytes: Vec<f64>,
    pub entry: usize,
}

/// The workflow of the module docs.
pub fn paper_workflow() -> Workflow {
    let names: Vec<String> = (0..13)
        .map(|i| format!("m{i}"))
        .chain((1..=4).map(|i| format!("db{i}")))
        .collect();
    let id = |n: &str| names.iter().position(|x| x == n).expect("known name");
    let mut stages: Vec<Vec<Vec<usize>>> = vec![Vec::new(); names.len()];
    let calls: &[(&str, &[&[&str]])] = &[
        ("m0", &[&["m1", "m2", "m3"]]),
        ("m1", &[&["m4", "m5"]]),
        ("m2", &[&["m6"], &["m7"]]),
        ("m3", &[&["m8", "m9"]]),
        ("m4", &[&["db1"]]),
        ("m5", &[&["m10"]]),
        ("m6", &[&["db2"]]),
        ("m7", &[&["m11"]]),
        ("m8", &[&["db3"]]),
        ("m9", &[&["m12"]]),
        ("m10", &[&["db1"]]),
        ("m11", &[&["db2"]]),
        ("m12", &[&["db4"]]),
    ];
    for (from, st) in calls {
        stages[id(from)] = st
            .iter()
            .map(|par| par.iter().map(|n| id(n)).collect())
            .collect();
    }
    let is_db: Vec<bool> = names.iter().map(|n| n.starts_with("db")).collect();
    let pick = |db: f64, ms: f64| -> Vec<f64> {
        is_db
            .iter()
            .map(|&d| if d { db } else { ms })
            .collect::<Vec<f64>>()
    };
    Workflow {
        cpu_ms: pick(4.0, 2.0),
        memory_mb: pick(256.0, 64.0),
        request_bytes: pick(1000.0, 1000.0),
        response_bytes: pick(15000.0, 3000.0),
        stages,
        names,
        entry: 0,
    }
}

impl Workflow {
    /// Visits per request, by component.
    pub fn visits(&self) -> Vec<f64> {
        let mut v = vec![0.0; self.names.len()];
        self.walk(self.entry, &mut v);
        v
    }
    fn walk(&self, c: usize, v: &mut [f64]) {
        v[c] += 1.0;
        for stage in &self.stages[c] {
            for &k in stage {
                self.walk(k, v);
            }
        }
    }
    /// `calls[i][j]`: calls from i to j per request.
    pub fn calls(&self) -> Vec<Vec<f64>> {
        let n = self.names.len();
        let visits = self.visits();
        let mut calls = vec![vec![0.0; n]; n];
        for i in 0..n {
            for stage in &self.stages[i] {
                for &k in stage {
                    calls[i][k] += visits[i];
                }
            }
        }
        calls
    }
}

/// The paper's cluster with latency `l` between distinct nodes: `c0` (ingress, unschedulable)
/// and `w1`..`w5`.
pub fn paper_nodes() -> Vec<NodeState> {
    let mut nodes = vec![NodeState {
        name: "c0".into(),
        cpu_capacity: 2000.0,
        memory_capacity: 4096.0,
        cpu_background: 0.0,
        memory_background: 0.0,
        schedulable: false,
    }];
    for (i, (cpu, mem)) in [
        (300.0, 600.0),
        (500.0, 1000.0),
        (200.0, 400.0),
        (400.0, 800.0),
        (100.0, 300.0),
    ]
    .into_iter()
    .enumerate()
    {
        nodes.push(NodeState {
            name: format!("w{}", i + 1),
            cpu_capacity: 2000.0,
            memory_capacity: 4096.0,
            cpu_background: cpu,
            memory_background: mem,
            schedulable: true,
        });
    }
    nodes
}

/// `l` ms between any two distinct nodes of `n`, 0 on the diagonal.
pub fn uniform_latency(n: usize, l: f64) -> Vec<Vec<f64>> {
    (0..n)
        .map(|a| (0..n).map(|b| if a == b { 0.0 } else { l }).collect())
        .collect()
}

/// What the schedulers would measure with `users` virtual users.
pub fn snapshot(
    wf: &Workflow,
    nodes: &[NodeState],
    latency_ms: Vec<Vec<f64>>,
    users: f64,
) -> Snapshot {
    let visits = wf.visits();
    let calls = wf.calls();
    let n = wf.names.len();
    let mut traffic = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..n {
            if calls[i][j] > 0.0 {
                traffic[i][j] += users * calls[i][j] * wf.request_bytes[j];
                traffic[j][i] += users * calls[i][j] * wf.response_bytes[j];
            }
        }
    }
    Snapshot {
        nodes: nodes.to_vec(),
        latency: Latency::Matrix(latency_ms),
        components: (0..n)
            .map(|c| ComponentUse {
                name: wf.names[c].clone(),
                cpu: users * visits[c] * wf.cpu_ms[c],
                memory: wf.memory_mb[c],
            })
            .collect(),
        traffic,
        entry: wf.entry,
        ingress: 0,
        allowed: Vec::new(),
    }
}

/// CPU utilisation per node under `assignment` (background included).
pub fn utilisation(s: &Snapshot, assignment: &[usize]) -> Vec<f64> {
    let a: Vec<Option<usize>> = assignment.iter().map(|&n| Some(n)).collect();
    s.loads(&a, None)
        .iter()
        .zip(&s.nodes)
        .map(|(l, n)| l.0 / n.cpu_capacity)
        .collect()
}

/// Sampled end-to-end response times (ms), or `None` if a node in use is saturated.
/// `latency_ms` is the true latency (it may differ from what the snapshot measured).
pub fn response_times(
    wf: &Workflow,
    s: &Snapshot,
    latency_ms: &[Vec<f64>],
    assignment: &[usize],
    samples: usize,
    rng: &mut Rng,
) -> Option<Vec<f64>> {
    let rho = utilisation(s, assignment);
    let mut mean = vec![0.0; wf.names.len()];
    for c in 0..wf.names.len() {
        let n = assignment[c];
        if rho[n] >= 1.0 {
            return None;
        }
        mean[c] = wf.cpu_ms[c] * 1000.0 / s.nodes[n].cpu_capacity / (1.0 - rho[n]);
    }
    let time = |rng: &mut Rng| -> f64 {
        fn visit(
            c: usize,
            wf: &Workflow,
            mean: &[f64],
            lat: &[Vec<f64>],
            a: &[usize],
            rng: &mut Rng,
        ) -> f64 {
            let mut t = rng.exp(mean[c]);
            for stage in &wf.stages[c] {
                let mut longest: f64 = 0.0;
                for &k in stage {
                    let hop = 2.0 * lat[a[c]][a[k]];
                    longest = longest.max(hop + visit(k, wf, mean, lat, a, rng));
                }
                t += longest;
            }
            t
        }
        2.0 * latency_ms[s.ingress][assignment[wf.entry]]
            + visit(wf.entry, wf, &mean, latency_ms, assignment, rng)
    };
    Some((0..samples).map(|_| time(rng)).collect())
}

/// The `q` quantile (nearest rank) of `v`.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// p95 of the sampled response times, `None` when saturated.
pub fn p95(
    wf: &Workflow,
    s: &Snapshot,
    latency_ms: &[Vec<f64>],
    assignment: &[usize],
    samples: usize,
    seed: u64,
) -> Option<f64> {
    let mut rng = Rng::new(seed);
    response_times(wf, s, latency_ms, assignment, samples, &mut rng)
        .map(|mut v| quantile(&mut v, 0.95))
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub latency_ms: f64,
    pub users: f64,
    pub baseline_p95: Option<f64>,
    pub netaware_p95: Option<f64>,
    /// Worker nodes used.
    pub baseline_nodes: usize,
    pub netaware_nodes: usize,
    /// Calls per request that cross nodes.
    pub baseline_remote_calls: f64,
    pub netaware_remote_calls: f64,
}

impl Row {
    /// Reduction of the p95 by the network-aware scheduler, percent.
    pub fn reduction(&self) -> Option<f64> {
        Some(100.0 * (1.0 - self.netaware_p95? / self.baseline_p95?))
    }
}

fn nodes_used(a: &[usize]) -> usize {
    let mut v = a.to_vec();
    v.sort();
    v.dedup();
    v.len()
}

fn remote_calls(wf: &Workflow, a: &[usize]) -> f64 {
    let calls = wf.calls();
    let mut r = 0.0;
    for i in 0..calls.len() {
        for j in 0..calls.len() {
            if a[i] != a[j] {
                r += calls[i][j];
            }
        }
    }
    r
}

/// The two placements of the workflow for one setting: (baseline, network-aware); `None` where
/// a scheduler finds no room.
pub fn placements(s: &Snapshot, w: &Weights) -> (Option<Vec<usize>>, Option<Vec<usize>>) {
    let get = |o: Result<NetOutcome, _>| match o {
        Ok(NetOutcome::Placed(a)) => Some(a),
        _ => None,
    };
    (get(baseline::place(s)), get(place(s, w)))
}

/// The comparison for every latency and number of users.
pub fn compare(
    latencies: &[f64],
    users: &[f64],
    w: &Weights,
    samples: usize,
    seed: u64,
) -> Vec<Row> {
    let wf = paper_workflow();
    let nodes = paper_nodes();
    let mut rows = Vec::new();
    for &l in latencies {
        for &u in users {
            let lat = uniform_latency(nodes.len(), l);
            let s = snapshot(&wf, &nodes, lat.clone(), u);
            let (b, n) = placements(&s, w);
            let p = |a: &Option<Vec<usize>>| {
                a.as_ref()
                    .and_then(|a| p95(&wf, &s, &lat, a, samples, seed))
            };
            rows.push(Row {
                latency_ms: l,
                users: u,
                baseline_p95: p(&b),
                netaware_p95: p(&n),
                baseline_nodes: b.as_deref().map_or(0, nodes_used),
                netaware_nodes: n.as_deref().map_or(0, nodes_used),
                baseline_remote_calls: b.as_deref().map_or(f64::NAN, |a| remote_calls(&wf, a)),
                netaware_remote_calls: n.as_deref().map_or(f64::NAN, |a| remote_calls(&wf, a)),
            });
        }
    }
    rows
}

/// One tick of the descheduling run.
#[derive(Debug, Clone, PartialEq)]
pub struct TickRow {
    pub tick: u32,
    pub p95: Option<f64>,
    /// "m3 w2->w4" for a move issued on this tick.
    pub moves: Vec<String>,
    pub remote_calls: f64,
}

/// The descheduling scenario: `users` users, the network-aware placement on `before`
/// latencies; at tick `change_at` the latencies become `after`. Every tick the descheduler
/// gets the latencies as measured (true value × a uniform factor in [1 − noise, 1 + noise],
/// each link each tick), and a move it asks for is carried out and observed on the next tick.
#[allow(clippy::too_many_arguments)]
pub fn deschedule_run(
    before: Vec<Vec<f64>>,
    after: Vec<Vec<f64>>,
    users: f64,
    ticks: u32,
    change_at: u32,
    noise: f64,
    cfg: Config,
    samples: usize,
    seed: u64,
) -> Vec<TickRow> {
    let wf = paper_workflow();
    let nodes = paper_nodes();
    let s0 = snapshot(&wf, &nodes, before.clone(), users);
    let mut a = match place(&s0, &cfg.weights) {
        Ok(NetOutcome::Placed(a)) => a,
        _ => return Vec::new(),
    };
    let mut d = Descheduler::new(cfg).expect("valid config");
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut rows = Vec::new();
    let mut pending: Option<(usize, usize)> = None;
    for t in 0..ticks {
        if let Some((c, to)) = pending.take() {
            a[c] = to;
        }
        let truth = if t < change_at { &before } else { &after };
        let measured: Vec<Vec<f64>> = truth
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&l| l * (1.0 + noise * (2.0 * rng.unit() - 1.0)))
                    .collect()
            })
            .collect();
        let s = snapshot(&wf, &nodes, measured, users);
        let actions = d
            .handle(Event::Tick {
                snapshot: s.clone(),
                assignment: a.clone(),
            })
            .expect("valid snapshot");
        let mut moves = Vec::new();
        for act in actions {
            if let Action::Move {
                component,
                from,
                to,
                ..
            } = act
            {
                moves.push(format!(
                    "{} {}->{}",
                    wf.names[component], nodes[from].name, nodes[to].name
                ));
                pending = Some((component, to));
            }
        }
        rows.push(TickRow {
            tick: t,
            p95: p95(&wf, &s, truth, &a, samples, seed.wrapping_add(t as u64)),
            moves,
            remote_calls: remote_calls(&wf, &a),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_visits_and_cpu_per_request() {
        let wf = paper_workflow();
        let v = wf.visits();
        let id = |n: &str| wf.names.iter().position(|x| x == n).unwrap();
        assert_eq!(wf.names.len(), 17);
        assert!((0..13).all(|i| v[i] == 1.0));
        assert_eq!(
            (v[id("db1")], v[id("db2")], v[id("db3")], v[id("db4")]),
            (2.0, 2.0, 1.0, 1.0)
        );
        let cpu: f64 = (0..17).map(|c| v[c] * wf.cpu_ms[c]).sum();
        assert_eq!(cpu, 50.0);
        // 18 call edges (m0 3, m1 m2 m3 2 each, m4..m12 1 each), one call each per request.
        let calls: f64 = wf.calls().iter().flatten().sum();
        assert_eq!(calls, 18.0);
    }

    #[test]
    fn all_local_response_time_is_the_service_path() {
        // Everything on w5 at (almost) no load, latency 0: the p95 is a handful of
        // exponential service times, well under 100 ms; with 100 ms one-way latency the
        // ingress adds exactly 200 ms.
        let wf = paper_workflow();
        let nodes = paper_nodes();
        let s = snapshot(&wf, &nodes, uniform_latency(6, 0.0), 0.001);
        let a = vec![5; 17];
        let p0 = p95(&wf, &s, &uniform_latency(6, 0.0), &a, 4000, 1).unwrap();
        let p1 = p95(&wf, &s, &uniform_latency(6, 100.0), &a, 4000, 1).unwrap();
        assert!(p0 > 0.0 && p0 < 100.0, "{p0}");
        assert!((p1 - p0 - 200.0).abs() < 1e-6, "{p0} {p1}");
    }

    #[test]
    fn network_aware_beats_the_baseline_at_100_ms() {
        // The short version of the example: robust facts only.
        let rows = compare(&[100.0], &[20.0, 60.0], &Weights::default(), 2000, 1);
        for r in &rows {
            let (b, n) = (r.baseline_p95.unwrap(), r.netaware_p95.unwrap());
            assert!(n < b, "{r:?}");
            assert!(r.netaware_remote_calls < r.baseline_remote_calls, "{r:?}");
        }
    }

    #[test]
    fn descheduler_recovers_from_a_degraded_ingress_link() {
        // 80 users, 10 ms everywhere; at tick 10 the ingress' link to m0's node goes to 200 ms:
        // m0 moves, and the p95 comes back near where it was.
        let cfg = Config::default();
        let wf = paper_workflow();
        let nodes = paper_nodes();
        let before = uniform_latency(6, 10.0);
        let s = snapshot(&wf, &nodes, before.clone(), 80.0);
        let Ok(NetOutcome::Placed(a)) = place(&s, &cfg.weights) else {
            panic!("fits")
        };
        let mut after = before.clone();
        after[0][a[0]] = 200.0;
        after[a[0]][0] = 200.0;
        let rows = deschedule_run(before, after, 80.0, 30, 10, 0.2, cfg, 1000, 1);
        let moves: Vec<&String> = rows.iter().flat_map(|r| &r.moves).collect();
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert!(moves[0].starts_with("m0 "), "{moves:?}");
        let (calm, hit, healed) = (
            rows[9].p95.unwrap(),
            rows[10].p95.unwrap(),
            rows[29].p95.unwrap(),
        );
        assert!(hit > calm + 300.0, "{calm} {hit}");
        assert!(healed < calm * 1.2, "{calm} {healed}");
    }

    #[test]
    fn steady_noisy_run_settles_and_stays() {
        // No change, ±20 % latency noise: at most a couple of early moves (the descheduler
        // refining the greedy placement), then nothing for hundreds of ticks.
        for users in [20.0, 40.0, 60.0, 80.0] {
            let lat = uniform_latency(6, 100.0);
            let rows = deschedule_run(
                lat.clone(),
                lat,
                users,
                300,
                300,
                0.2,
                Config::default(),
                10,
                1,
            );
            let moves: Vec<(u32, &String)> = rows
                .iter()
                .flat_map(|r| r.moves.iter().map(move |m| (r.tick, m)))
                .collect();
            assert!(moves.len() <= 3, "{users}: {moves:?}");
            assert!(moves.iter().all(|&(t, _)| t < 50), "{users}: {moves:?}");
        }
    }
}
