//! The control plane's decisions, as a pure state machine: [`Engine::handle`] takes an event
//! (a verified node message, an application definition, a scheduling result, a tick) and the
//! current time, and returns the actions to carry out, in order (persist before publish).
//! Placement computations are described by [`Job`]s, run by [`run_job`] (pure too) wherever the
//! I/O loop likes (a blocking task per job, at most one job per application at a time), and
//! come back as [`Event::Scheduled`]; commits are optimistic against the resource ledger.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use acoa_shared::model::{self, Application, Cluster, Link, Resources, Usage};
use acoa_shared::topics;
use acoa_shared::wire::ComponentUsage;
use acoa_shared::wire::{
    self, ActualState, ContainerSpec, ContainerState, DesiredState, EnvVar, LinkMetrics, Message,
    NodeReport, Peer, PeerList, MAX_CONTAINERS,
};
use ed25519_dalek::SigningKey;
use tracing::{error, info, warn};

use crate::records::{AppRecord, Meta, NodeInfo, PersistOp, Snapshot};
use crate::sched;
use crate::status::{digest, AppStatus, GradeRecord, NotRunning, PlacementRecord};

mod measured;
pub use measured::{comm_cost, NETWORK_AWARE};

/// The latency given to a node's own loopback when its agent does not report one: the
/// probers' floor ([`LATENCY_FLOOR_MS`]), since nothing below it can be told apart.
pub const LOOPBACK_LATENCY_MS: f64 = LATENCY_FLOOR_MS;

/// What the probers can tell apart: measured latencies are rounded to this step, and
/// none is taken below [`LATENCY_FLOOR_MS`]. A user-space prober's round trip includes
/// the scheduling delays of two busy hosts (0.1 to 0.7 ms on the 2-core test machines,
/// see BENCHMARKS.md "Testbed"); below that, differences are noise (e.g. 0.1 against
/// 0.15 ms between agents on one host), which the scale-free response-time grade would
/// read as a 33 % gain, and placements would chase it.
pub const LATENCY_STEP_MS: f64 = 0.1;
pub const LATENCY_FLOOR_MS: f64 = 0.5;

/// A measured latency as the scheduler sees it (see [`LATENCY_STEP_MS`]).
pub fn quantize_latency(ms: f64) -> f64 {
    ((ms / LATENCY_STEP_MS).round() * LATENCY_STEP_MS).max(LATENCY_FLOOR_MS)
}

/// Standard errors spanned, on each side, by the confidence bounds of a measured link.
/// Whether a placement is clearly better than the current one is decided on the network
/// seen in the current placement's favour ([`favour_current`]): success rates over 20
/// probes that move in 5 % steps (a probe lost now and then on a busy host) and latencies
/// that wander by a few resolution steps cannot make a move (tests/decisions.rs), a link
/// that loses most probes or gets milliseconds slower still does.
pub const CONFIDENCE_Z: f64 = 1.0;

/// Wilson score interval of a success rate `p` measured over `n` probes at `z` standard
/// errors; `(0, 1)` when nothing was measured.
pub fn wilson_interval(p: f64, n: u32, z: f64) -> (f64, f64) {
    if n == 0 || !p.is_finite() {
        return (0.0, 1.0);
    }
    let (n, p) = (n as f64, p.clamp(0.0, 1.0));
    let z2 = z * z;
    let den = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / den;
    let half = z / den * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).clamp(0.0, p), (centre + half).clamp(p, 1.0))
}

/// What a link's measurement allows, at [`CONFIDENCE_Z`] standard errors: latency
/// (quantized) ± z · jitter / √samples but at least ± half a step of the probers'
/// resolution ([`LATENCY_STEP_MS`]), never below their floor; the success rate's Wilson
/// interval over `samples` probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkBounds {
    /// (optimistic, pessimistic)
    pub latency_ms: (f64, f64),
    /// (pessimistic, optimistic)
    pub success: (f64, f64),
}

impl LinkBounds {
    pub fn exact(latency_ms: f64, success: f64) -> LinkBounds {
        LinkBounds {
            latency_ms: (latency_ms, latency_ms),
            success: (success, success),
        }
    }

    pub fn measured(latency_ms: f64, jitter_ms: f64, success: f64, samples: u16) -> LinkBounds {
        // never tighter than what the probers resolve (one quantization step)
        let m = (CONFIDENCE_Z * jitter_ms.max(0.0) / (samples.max(1) as f64).sqrt())
            .max(LATENCY_STEP_MS / 2.0);
        LinkBounds {
            latency_ms: (
                (latency_ms - m).max(LATENCY_FLOOR_MS).min(latency_ms),
                latency_ms + m,
            ),
            success: wilson_interval(success, samples as u32, CONFIDENCE_Z),
        }
    }
}

/// The network as seen in favour of `current`: every link a channel of `app` uses under
/// `current` (either direction) at its optimistic bound, every other link at its pessimistic
/// bound. Scored on it, a candidate beats the current placement only if it does so however
/// the measurements' uncertainty turns out. `bounds` is aligned with `cluster.links`
/// (otherwise the cluster is returned unchanged).
pub fn favour_current(
    cluster: &Cluster,
    bounds: &[LinkBounds],
    app: &Application,
    current: &BTreeMap<String, String>,
) -> Cluster {
    let mut c = cluster.clone();
    if bounds.len() != c.links.len() {
        return c;
    }
    let used: BTreeSet<(&str, &str)> = app
        .channels
        .iter()
        .filter_map(|ch| {
            Some((
                current.get(&ch.from)?.as_str(),
                current.get(&ch.to)?.as_str(),
            ))
        })
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    for (l, b) in c.links.iter_mut().zip(bounds) {
        if used.contains(&(l.from.as_str(), l.to.as_str())) {
            l.latency_ms = b.latency_ms.0;
            l.success = b.success.1;
        } else {
            l.latency_ms = b.latency_ms.1;
            l.success = b.success.0;
        }
    }
    c
}

/// Tunables of the decisions.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// A node whose reports stop for this long is lost (3 report periods by default).
    pub node_timeout_ms: u64,
    /// An `offline` marker (last will) makes a node lost if no signed report follows within this.
    pub offline_confirm_ms: u64,
    /// How often placed applications are evaluated again (descheduler) and unplaced ones retried.
    pub reevaluate_ms: u64,
    /// Relative score gain a better placement must offer before anything moves.
    pub hysteresis: f64,
    /// ... sustained over this many evaluations in a row.
    pub sustain: u32,
    /// Peer-list changes are gathered for this long before one publication.
    pub peers_debounce_ms: u64,
    /// Link samples older than this are forgotten.
    pub link_max_age_ms: u64,
    /// How often the ingest statistics line is logged (0: never).
    pub stats_every_ms: u64,
    /// How often the network-aware descheduler evaluates its applications (and the status
    /// documents get the current measurements).
    pub deschedule_ms: u64,
    /// Relative gain a network-aware move must offer (0.2 = 20 %), sustained over `sustain`
    /// evaluations in a row.
    pub netaware_threshold: f64,
    /// Measured use and traffic: the mean over this many reports of a node (smoothing window).
    pub observed_window: usize,
    /// Measurements not refreshed for this long are forgotten.
    pub observed_max_age_ms: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_timeout_ms: 3000,
            offline_confirm_ms: 1000,
            reevaluate_ms: 5000,
            hysteresis: 0.05,
            sustain: 3,
            peers_debounce_ms: 500,
            link_max_age_ms: 60_000,
            stats_every_ms: 10_000,
            deschedule_ms: 10_000,
            netaware_threshold: 0.2,
            observed_window: 10,
            observed_max_age_ms: 30_000,
        }
    }
}

/// What happens to the control plane.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A verified node report.
    Report(Box<NodeReport>),
    /// Verified link metrics.
    Links(Box<LinkMetrics>),
    /// Verified per-component usage of a node.
    Usage(Box<ComponentUsage>),
    /// A verified container-state report.
    Actual(Box<ActualState>),
    /// The online marker (or last will) of a node.
    Online { node: String, online: bool },
    /// A desired state the broker holds (retained), seen at start-up.
    RetainedDesired { node: String, generation: u64 },
    /// An application definition (empty payload: delete).
    AppPublished { app: String, payload: Vec<u8> },
    /// A node left the inventory.
    NodeRemoved(String),
    /// A placement computation finished.
    Scheduled(Box<JobResult>),
    /// The broker's retained messages have been read: republish what the agents lack.
    StartupDone,
    /// Time passes.
    Tick,
}

/// What the I/O loop must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Persist(PersistOp),
    /// QoS 1.
    Publish {
        topic: String,
        payload: Vec<u8>,
        retain: bool,
    },
    Schedule(Box<Job>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Purpose {
    /// Find a placement (new, updated, retry, or a node was lost): the result is committed.
    Place(String),
    /// Descheduler: is a clearly better placement there? Moves one component at a time.
    Reevaluate,
}

/// A placement computation, with everything it needs as values.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: u64,
    pub app: String,
    pub revision: u64,
    pub purpose: Purpose,
    pub application: Arc<Application>,
    pub cluster: Arc<Cluster>,
    /// What other applications hold, per node.
    pub reserved: BTreeMap<String, Resources>,
    pub ledger_version: u64,
    /// The current assignment, if placed.
    pub current: Option<BTreeMap<String, String>>,
    /// Components that should stay where they are if that costs little.
    pub keep: BTreeMap<String, String>,
    /// Confidence bounds of `cluster.links` (aligned), given when `current` is: the decision
    /// to move is taken on [`favour_current`].
    pub bounds: Option<Arc<Vec<LinkBounds>>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    Placed(PlacementRecord),
    Infeasible(String),
    Error(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    pub id: u64,
    pub app: String,
    pub revision: u64,
    pub purpose: Purpose,
    pub ledger_version: u64,
    pub outcome: JobOutcome,
    /// `keep` completed with the best placement for the other components, scored.
    pub merged: Option<PlacementRecord>,
    /// Score of the current assignment on the current network.
    pub current_score: Option<f64>,
    /// For each component the best placement puts elsewhere: the score with only it moved
    /// (on the network in the current placement's favour when the job had bounds).
    pub single_moves: Vec<(String, String, f64)>,
    /// The scores the decision to move is taken on, when the job had bounds.
    pub compared: Option<Compared>,
    pub elapsed_us: u64,
}

/// Scores on the network seen in the current placement's favour ([`favour_current`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compared {
    pub current: f64,
    pub best: f64,
    /// `keep` completed with the best placement for the other components, and the best
    /// placement, both on the network seen in the kept components' favour (the incumbents of
    /// that choice).
    pub merged: Option<(f64, f64)>,
}

pub(crate) fn grades(g: &[sched::CriterionGrade]) -> Vec<GradeRecord> {
    g.iter()
        .map(|c| GradeRecord {
            kind: c.kind,
            path: c.path.clone(),
            component: c.component.clone(),
            weight: c.weight,
            grade: c.grade,
        })
        .collect()
}

/// Runs a placement computation (pure; may take a while: run it off the decision loop).
pub fn run_job(job: &Job) -> JobResult {
    let started = std::time::Instant::now();
    let mut r = finish_job(job, search_job(job));
    r.elapsed_us = started.elapsed().as_micros() as u64;
    r
}

/// The search of [`run_job`]: what a `scheduler worker` computes instead (`crate::workers`).
pub fn search_job(job: &Job) -> JobOutcome {
    let mut ledger = sched::Ledger::new();
    for (n, r) in &job.reserved {
        ledger.reserve(n, *r);
    }
    match sched::place(job.cluster.as_ref(), job.application.as_ref(), &ledger) {
        Ok(sched::Outcome::Placed(p)) => JobOutcome::Placed(PlacementRecord {
            assignment: p.assignment.clone(),
            score: p.score,
            criteria: grades(&p.criteria),
            feasible_deployments: p.feasible_deployments,
        }),
        Ok(sched::Outcome::Infeasible(i)) => JobOutcome::Infeasible(i.reason.clone()),
        Err(e) => JobOutcome::Error(e.to_string()),
    }
}

/// The rest of [`run_job`] around a search `outcome`, computed here or by a worker (whose
/// placement was checked and scored again first): the merged placement, the scores of the
/// current assignment and of single moves.
pub fn finish_job(job: &Job, outcome: JobOutcome) -> JobResult {
    let started = std::time::Instant::now();
    let app = job.application.as_ref();
    let cluster = job.cluster.as_ref();
    let score_of = |a: &BTreeMap<String, String>| sched::score(cluster, app, a).ok();
    let favoured = match (&job.bounds, &job.current) {
        (Some(b), Some(cur)) => Some(favour_current(cluster, b, app, cur)),
        _ => None,
    };
    let compare_on = favoured.as_ref().unwrap_or(cluster);
    let compared_score =
        |a: &BTreeMap<String, String>| sched::score(compare_on, app, a).ok().map(|x| x.0);
    let mut merged = None;
    let mut single_moves = vec![];
    let mut compared = None;
    if let JobOutcome::Placed(best) = &outcome {
        if !job.keep.is_empty() {
            let mut a = best.assignment.clone();
            for (c, n) in &job.keep {
                if a.contains_key(c) {
                    a.insert(c.clone(), n.clone());
                }
            }
            if let Some((s, g)) = score_of(&a) {
                merged = Some(PlacementRecord {
                    assignment: a,
                    score: s,
                    criteria: grades(&g),
                    feasible_deployments: best.feasible_deployments,
                });
            }
        }
        if let (Purpose::Reevaluate, Some(cur)) = (&job.purpose, &job.current) {
            for (c, n) in &best.assignment {
                if cur.get(c) != Some(n) {
                    let mut a = cur.clone();
                    a.insert(c.clone(), n.clone());
                    if let Some(s) = compared_score(&a) {
                        single_moves.push((c.clone(), n.clone(), s));
                    }
                }
            }
        }
        if let (Some(_), Some(cur)) = (&favoured, &job.current) {
            if let (Some(c), Some(b)) = (compared_score(cur), compared_score(&best.assignment)) {
                let merged = match (&job.bounds, &merged) {
                    (Some(bounds), Some(m)) => {
                        let f = favour_current(cluster, bounds, app, &m.assignment);
                        let on_f = |a: &BTreeMap<String, String>| {
                            sched::score(&f, app, a).ok().map(|x| x.0)
                        };
                        on_f(&m.assignment).zip(on_f(&best.assignment))
                    }
                    _ => None,
                };
                compared = Some(Compared {
                    current: c,
                    best: b,
                    merged,
                });
            }
        }
    }
    let current_score = job.current.as_ref().and_then(|a| score_of(a).map(|x| x.0));
    JobResult {
        id: job.id,
        app: job.app.clone(),
        revision: job.revision,
        purpose: job.purpose.clone(),
        ledger_version: job.ledger_version,
        outcome,
        merged,
        current_score,
        single_moves,
        compared,
        elapsed_us: started.elapsed().as_micros() as u64,
    }
}

#[derive(Debug, Clone)]
struct LiveNode {
    info: NodeInfo,
    usage: Usage,
    last_seen: u64,
    online: bool,
    /// When an `offline` marker (last will) came. The marker is not signed, and the embedded
    /// broker lets any client publish it: it counts only if no signed report follows it.
    offline_marker: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct LinkEntry {
    latency_ms: f64,
    jitter_ms: f64,
    success: f64,
    samples: u16,
    at: u64,
}

#[derive(Debug, Clone)]
struct AppState {
    rec: AppRecord,
    revision: u64,
    job: Option<u64>,
    rerun: Option<Purpose>,
    better_count: u32,
    /// Status reason when the latest placement attempt failed.
    unplaced: Option<String>,
    /// A newer definition was rejected (the previous one keeps running).
    rejected: Option<(String, String)>,
}

/// Counters for the operator and the benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub reports: u64,
    pub links: u64,
    pub actuals: u64,
    pub collisions: u64,
    pub desired_published: u64,
    pub jobs: u64,
}

/// The control plane's state and decisions.
pub struct Engine {
    cfg: EngineConfig,
    key: SigningKey,
    now: u64,
    nodes: BTreeMap<String, LiveNode>,
    links: HashMap<(String, String), LinkEntry>,
    model_version: u64,
    cluster_cache: Option<(u64, Arc<Cluster>)>,
    bounds_cache: Option<(u64, Arc<Vec<LinkBounds>>)>,
    apps: BTreeMap<String, AppState>,
    desired: BTreeMap<String, DesiredState>,
    retained_seen: BTreeMap<String, u64>,
    actual: HashMap<String, ActualState>,
    status_sent: BTreeMap<String, String>,
    /// Ledger: per application, per node, what it reserves.
    reservations: BTreeMap<String, BTreeMap<String, Resources>>,
    ledger_version: u64,
    node_version: HashMap<String, u64>,
    next_job: u64,
    meta: Meta,
    peers_dirty: bool,
    peers_sent: Option<Vec<(String, String)>>,
    last_peers_pub: u64,
    last_reeval: u64,
    last_stats: u64,
    measured: measured::Measured,
    stats_at_last: Stats,
    pub stats: Stats,
}

fn ms(v: u64) -> String {
    format!("{:.1} s", v as f64 / 1000.0)
}

impl Engine {
    /// An engine restored from `snap` at time `now`. Restored nodes count as alive until they
    /// miss the report timeout.
    pub fn new(cfg: EngineConfig, key: SigningKey, snap: Snapshot, now: u64) -> Engine {
        let cfg_window = cfg.observed_window;
        let mut e = Engine {
            cfg,
            key,
            now,
            nodes: BTreeMap::new(),
            links: HashMap::new(),
            model_version: 0,
            cluster_cache: None,
            bounds_cache: None,
            apps: BTreeMap::new(),
            desired: snap.desired,
            retained_seen: BTreeMap::new(),
            actual: HashMap::new(),
            status_sent: BTreeMap::new(),
            reservations: BTreeMap::new(),
            ledger_version: 0,
            node_version: HashMap::new(),
            next_job: 1,
            meta: snap.meta,
            peers_dirty: false,
            peers_sent: None,
            last_peers_pub: 0,
            last_reeval: now,
            last_stats: now,
            measured: measured::Measured::new(cfg_window, now),
            stats_at_last: Stats::default(),
            stats: Stats::default(),
        };
        for (name, info) in snap.nodes {
            e.nodes.insert(
                name,
                LiveNode {
                    info,
                    usage: Usage::default(),
                    last_seen: now,
                    online: true,
                    offline_marker: None,
                },
            );
        }
        for (name, rec) in snap.apps {
            if let Some(p) = &rec.placement {
                let res = reservations_of(&rec.application, &p.assignment);
                e.reservations.insert(name.clone(), res);
            }
            e.apps.insert(
                name,
                AppState {
                    rec,
                    revision: 1,
                    job: None,
                    rerun: None,
                    better_count: 0,
                    unplaced: None,
                    rejected: None,
                },
            );
        }
        e
    }

    pub fn collisions(&self) -> u64 {
        self.stats.collisions
    }

    pub fn desired(&self, node: &str) -> Option<&DesiredState> {
        self.desired.get(node)
    }

    pub fn placement(&self, app: &str) -> Option<&PlacementRecord> {
        self.apps.get(app).and_then(|a| a.rec.placement.as_ref())
    }

    pub fn is_online(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| n.online)
    }

    /// Handles one event at time `now_ms` (milliseconds, monotonic).
    pub fn handle(&mut self, now_ms: u64, ev: Event) -> Vec<Action> {
        self.now = self.now.max(now_ms);
        let mut out = Vec::new();
        match ev {
            Event::Report(r) => self.on_report(*r, &mut out),
            Event::Links(l) => self.on_links(&l),
            Event::Usage(u) => self.on_usage(&u),
            Event::Actual(a) => self.on_actual(*a, &mut out),
            Event::Online { node, online } => {
                if !online {
                    let now = self.now;
                    if let Some(n) = self.nodes.get_mut(&node) {
                        if n.online && n.offline_marker.is_none() {
                            n.offline_marker = Some(now);
                        }
                    }
                }
            }
            Event::RetainedDesired { node, generation } => {
                self.retained_seen.insert(node, generation);
            }
            Event::AppPublished { app, payload } => self.on_app(app, payload, &mut out),
            Event::NodeRemoved(n) => {
                self.lose(&n, "removed from the inventory", &mut out);
                self.nodes.remove(&n);
            }
            Event::Scheduled(r) => self.on_scheduled(*r, &mut out),
            Event::StartupDone => self.on_startup(&mut out),
            Event::Tick => self.on_tick(&mut out),
        }
        out
    }

    // ------------------------------------------------------------ infrastructure

    fn on_report(&mut self, r: NodeReport, out: &mut Vec<Action>) {
        self.stats.reports += 1;
        let info = NodeInfo::from_report(&r);
        let usage = Usage {
            cpu_millis: r.load.cpu_millis,
            memory_mb: r.load.memory_used_mb,
            disk_mb: r.load.disk_used_mb,
            containers: r.load.containers,
            ..Default::default()
        };
        let name = info.name.clone();
        let now = self.now;
        let mut joined = false;
        match self.nodes.get_mut(&name) {
            Some(n) => {
                if n.info != info {
                    if n.info.probe_addr != info.probe_addr {
                        self.peers_dirty = true;
                    }
                    out.push(Action::Persist(PersistOp::PutNode(Box::new(info.clone()))));
                    n.info = info;
                    self.model_version += 1;
                }
                if n.usage != usage {
                    n.usage = usage;
                    self.model_version += 1;
                }
                n.last_seen = now;
                if let Some(at) = n.offline_marker.take() {
                    if n.online {
                        warn!(
                            "node {name}: an offline marker came {} before this signed report: ignored, the node is alive (restarted, or the marker was not its own)",
                            ms(now.saturating_sub(at))
                        );
                    }
                }
                if !n.online {
                    n.online = true;
                    joined = true;
                }
            }
            None => {
                out.push(Action::Persist(PersistOp::PutNode(Box::new(info.clone()))));
                self.nodes.insert(
                    name.clone(),
                    LiveNode {
                        info,
                        usage,
                        last_seen: now,
                        online: true,
                        offline_marker: None,
                    },
                );
                joined = true;
            }
        }
        if joined {
            let n = &self.nodes[&name];
            info!(
                "node {name} joined: {} {} {}, {} mCPU, {} MB, probes at {}",
                n.info.datacenter,
                n.info.layer,
                n.info.arch,
                n.info.capacity.cpu_millis,
                n.info.capacity.memory_mb,
                n.info.probe_addr
            );
            self.model_version += 1;
            self.peers_dirty = true;
            // A node that joins may make unplaced applications feasible.
            let waiting: Vec<String> = self
                .apps
                .iter()
                .filter(|(_, a)| a.rec.placement.is_none() || a.unplaced.is_some())
                .map(|(n, _)| n.clone())
                .collect();
            for app in waiting {
                self.request(&app, Purpose::Place(format!("node {name} joined")), out);
            }
        }
    }

    fn on_links(&mut self, l: &LinkMetrics) {
        self.stats.links += 1;
        let from = l.node.to_string();
        if !self.nodes.get(&from).is_some_and(|n| n.online) {
            return;
        }
        for s in &l.links {
            let to = s.peer.to_string();
            if !self.nodes.contains_key(&to) {
                continue; // unknown peers are not remembered: memory stays bounded
            }
            let (lat, jit, suc) = (s.latency_ms as f64, s.jitter_ms as f64, s.success as f64);
            if !(lat.is_finite() && lat >= 0.0 && jit.is_finite() && (0.0..=1.0).contains(&suc)) {
                continue;
            }
            let e = LinkEntry {
                latency_ms: quantize_latency(lat),
                jitter_ms: jit.max(0.0),
                success: suc,
                samples: s.samples,
                at: self.now,
            };
            let k = (from.clone(), to);
            match self.links.get(&k) {
                Some(old)
                    if old.latency_ms == e.latency_ms
                        && old.success == e.success
                        && old.jitter_ms == e.jitter_ms
                        && old.samples == e.samples =>
                {
                    self.links.insert(k, e);
                }
                _ => {
                    self.links.insert(k, e);
                    self.model_version += 1;
                }
            }
        }
    }

    fn lose(&mut self, node: &str, why: &str, out: &mut Vec<Action>) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if !n.online {
            return;
        }
        n.online = false;
        n.offline_marker = None;
        self.model_version += 1;
        self.peers_dirty = true;
        self.links.retain(|(a, b), _| a != node && b != node);
        self.forget_measured(Some(node), None);
        self.actual.remove(node);
        let affected: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| {
                a.rec
                    .placement
                    .as_ref()
                    .is_some_and(|p| p.assignment.values().any(|v| v == node))
            })
            .map(|(n, _)| n.clone())
            .collect();
        if affected.is_empty() {
            warn!("node {node} lost ({why})");
        } else {
            warn!(
                "node {node} lost ({why}); re-placing {}",
                affected.join(", ")
            );
        }
        for app in affected {
            self.request(&app, Purpose::Place(format!("node {node} lost")), out);
            self.update_status(&app, out);
        }
    }

    /// The live infrastructure model: online nodes and their links (loopbacks filled in).
    pub fn cluster(&mut self) -> Arc<Cluster> {
        if let Some((v, c)) = &self.cluster_cache {
            if *v == self.model_version {
                return c.clone();
            }
        }
        let nodes: Vec<model::Node> = self
            .nodes
            .values()
            .filter(|n| n.online)
            .map(|n| model::Node {
                name: n.info.name.clone(),
                datacenter: n.info.datacenter.clone(),
                layer: n.info.layer,
                arch: n.info.arch.clone(),
                hardware: n.info.hardware.clone(),
                software: n.info.software.clone(),
                capacity: n.info.capacity,
                usage: n.usage,
            })
            .collect();
        let mut links: Vec<Link> = self
            .links
            .iter()
            .map(|((a, b), e)| Link {
                from: a.clone(),
                to: b.clone(),
                latency_ms: e.latency_ms,
                jitter_ms: e.jitter_ms,
                success: e.success,
            })
            .collect();
        for n in &nodes {
            if !self.links.contains_key(&(n.name.clone(), n.name.clone())) {
                links.push(Link {
                    from: n.name.clone(),
                    to: n.name.clone(),
                    latency_ms: LOOPBACK_LATENCY_MS,
                    jitter_ms: 0.0,
                    success: 1.0,
                });
            }
        }
        links.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
        let observed = self
            .apps
            .iter()
            .filter_map(|(n, a)| {
                Some((n.clone(), self.measured.table.observed(&a.rec.application)?))
            })
            .collect();
        let c = Arc::new(Cluster {
            cluster: "live".into(),
            datacenters: vec![],
            nodes,
            links,
            observed,
        });
        self.cluster_cache = Some((self.model_version, c.clone()));
        c
    }

    /// Confidence bounds of the live model's links, aligned with [`Engine::cluster`]'s.
    pub fn link_bounds(&mut self) -> Arc<Vec<LinkBounds>> {
        let cluster = self.cluster();
        if let Some((v, b)) = &self.bounds_cache {
            if *v == self.model_version {
                return b.clone();
            }
        }
        let b: Vec<LinkBounds> = cluster
            .links
            .iter()
            .map(|l| match self.links.get(&(l.from.clone(), l.to.clone())) {
                // a node's own loopback carries no network: what its prober loses there is
                // the host's scheduling, not a link's quality
                Some(e) if l.from != l.to => {
                    LinkBounds::measured(e.latency_ms, e.jitter_ms, e.success, e.samples)
                }
                _ => LinkBounds::exact(l.latency_ms, l.success),
            })
            .collect();
        let b = Arc::new(b);
        self.bounds_cache = Some((self.model_version, b.clone()));
        b
    }

    fn peers_now(&self) -> Vec<(String, String)> {
        self.nodes
            .values()
            .filter(|n| n.online && !n.info.probe_addr.is_empty())
            .map(|n| (n.info.name.clone(), n.info.probe_addr.clone()))
            .collect()
    }

    fn publish_peers(&mut self, out: &mut Vec<Action>) {
        self.peers_dirty = false;
        self.last_peers_pub = self.now;
        let peers = self.peers_now();
        if self.peers_sent.as_ref() == Some(&peers) {
            return;
        }
        let mut list = Vec::with_capacity(peers.len());
        for (n, a) in &peers {
            if let (Ok(node), Ok(addr)) = (wire::name(n), wire::bounded("probe_addr", a)) {
                list.push(Peer { node, addr });
            }
        }
        self.meta.peer_generation += 1;
        let msg = Message::PeerList(PeerList {
            generation: self.meta.peer_generation,
            peers: list,
        });
        match wire::encode(&msg, Some(&self.key)) {
            Ok(bytes) => {
                out.push(Action::Persist(PersistOp::PutMeta(self.meta.clone())));
                out.push(Action::Publish {
                    topic: topics::PEERS.into(),
                    payload: bytes,
                    retain: true,
                });
                info!(
                    "peer list {} published: {} nodes",
                    self.meta.peer_generation,
                    peers.len()
                );
            }
            Err(e) => error!("peer list cannot be encoded: {e}"),
        }
        self.peers_sent = Some(peers);
    }

    // ------------------------------------------------------------ applications

    fn on_app(&mut self, app: String, payload: Vec<u8>, out: &mut Vec<Action>) {
        if payload.is_empty() {
            self.delete_app(&app, out);
            return;
        }
        let d = digest(&payload);
        if let Some(a) = self.apps.get(&app) {
            if a.rec.digest == d {
                return; // the same definition again (a retained copy): nothing changes
            }
        }
        match validate(&app, &payload) {
            Err(reason) => {
                warn!("application {app} rejected: {reason}");
                let mut st = AppStatus::new(&app, "rejected", &d);
                st.reason = Some(reason.clone());
                if let Some(a) = self.apps.get_mut(&app) {
                    a.rejected = Some((d, reason));
                    st.reason = Some(format!(
                        "{}; the previous definition stays deployed",
                        st.reason.unwrap_or_default()
                    ));
                }
                self.send_status(&app, &st, out);
            }
            Ok(application) => {
                let text = String::from_utf8(payload).unwrap_or_default();
                let rec = AppRecord {
                    name: app.clone(),
                    definition: text,
                    digest: d.clone(),
                    application,
                    placement: None,
                };
                let reason = match self.apps.get_mut(&app) {
                    Some(a) => {
                        let old = std::mem::replace(&mut a.rec, rec);
                        a.rec.placement = old.placement;
                        a.revision += 1;
                        a.rejected = None;
                        a.unplaced = None;
                        a.better_count = 0;
                        "definition updated"
                    }
                    None => {
                        self.apps.insert(
                            app.clone(),
                            AppState {
                                rec,
                                revision: 1,
                                job: None,
                                rerun: None,
                                better_count: 0,
                                unplaced: None,
                                rejected: None,
                            },
                        );
                        "new application"
                    }
                };
                let a = &self.apps[&app];
                info!(
                    "application {app} accepted ({reason}): {} components, scheduler {}",
                    a.rec.application.components.len(),
                    a.rec.application.scheduler
                );
                out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
                if a.rec.placement.is_none() {
                    let st = AppStatus::new(&app, "accepted", &d);
                    self.send_status(&app, &st, out);
                }
                // a job for an older revision may be running: its result will be discarded
                if let Some(a) = self.apps.get_mut(&app) {
                    a.job = None;
                }
                self.request(&app, Purpose::Place(reason.into()), out);
            }
        }
    }

    fn delete_app(&mut self, app: &str, out: &mut Vec<Action>) {
        self.forget_measured(None, Some(app));
        let Some(a) = self.apps.remove(app) else {
            if self.status_sent.remove(app).is_some() {
                out.push(Action::Publish {
                    topic: topics::app_status(app),
                    payload: vec![],
                    retain: true,
                });
            }
            return;
        };
        let nodes: BTreeSet<String> = a
            .rec
            .placement
            .iter()
            .flat_map(|p| p.assignment.values().cloned())
            .collect();
        self.set_reservations(app, BTreeMap::new());
        out.push(Action::Persist(PersistOp::DeleteApp(app.into())));
        for n in &nodes {
            self.update_desired(n, out);
        }
        self.status_sent.remove(app);
        out.push(Action::Publish {
            topic: topics::app_status(app),
            payload: vec![],
            retain: true,
        });
        info!(
            "application {app} deleted; its containers stop on {}",
            if nodes.is_empty() {
                "no node".to_string()
            } else {
                nodes.into_iter().collect::<Vec<_>>().join(", ")
            }
        );
    }

    /// Asks for a placement computation, or notes that one is wanted after the running one.
    fn request(&mut self, app: &str, purpose: Purpose, out: &mut Vec<Action>) {
        let busy = match self.apps.get_mut(app) {
            None => return,
            Some(a) if a.job.is_some() => {
                // a Place request wins over a re-evaluation
                if matches!(purpose, Purpose::Place(_)) || a.rerun.is_none() {
                    a.rerun = Some(purpose.clone());
                }
                true
            }
            Some(_) => false,
        };
        if busy {
            return;
        }
        let cluster = self.cluster();
        let has_placement = self
            .apps
            .get(app)
            .is_some_and(|a| a.rec.placement.is_some());
        let bounds = has_placement.then(|| self.link_bounds());
        let reserved = self.reserved_by_others(app);
        let id = self.next_job;
        self.next_job += 1;
        let ledger_version = self.ledger_version;
        let a = self.apps.get_mut(app).expect("checked above");
        let current = a.rec.placement.as_ref().map(|p| p.assignment.clone());
        let mut keep = BTreeMap::new();
        if let (Purpose::Place(_), Some(cur)) = (&purpose, &current) {
            for (c, n) in cur {
                let Some(comp) = a.rec.application.component(c) else {
                    continue;
                };
                if cluster
                    .node(n)
                    .is_some_and(|node| node.satisfies(&comp.requires))
                {
                    keep.insert(c.clone(), n.clone());
                }
            }
        }
        a.job = Some(id);
        self.stats.jobs += 1;
        out.push(Action::Schedule(Box::new(Job {
            id,
            app: app.into(),
            revision: a.revision,
            purpose,
            application: Arc::new(a.rec.application.clone()),
            cluster,
            reserved,
            ledger_version,
            current,
            keep,
            bounds,
        })));
    }

    fn reserved_by_others(&self, app: &str) -> BTreeMap<String, Resources> {
        let mut m: BTreeMap<String, Resources> = BTreeMap::new();
        for (a, res) in &self.reservations {
            if a == app {
                continue;
            }
            for (n, r) in res {
                let e = m.entry(n.clone()).or_default();
                e.cpu_millis += r.cpu_millis;
                e.memory_mb += r.memory_mb;
            }
        }
        m
    }

    fn set_reservations(&mut self, app: &str, new: BTreeMap<String, Resources>) {
        let old = self.reservations.remove(app).unwrap_or_default();
        let changed: BTreeSet<&String> = old
            .iter()
            .chain(new.iter())
            .filter(|(n, _)| old.get(*n) != new.get(*n))
            .map(|(n, _)| n)
            .collect();
        if !changed.is_empty() {
            self.ledger_version += 1;
            for n in changed {
                self.node_version.insert(n.clone(), self.ledger_version);
            }
        }
        if !new.is_empty() {
            self.reservations.insert(app.into(), new);
        }
    }

    /// Whether `assignment`'s requests fit next to what the other applications hold.
    fn fits(&self, app: &Application, assignment: &BTreeMap<String, String>) -> bool {
        let others = self.reserved_by_others(&app.application);
        reservations_of(app, assignment).iter().all(|(n, r)| {
            let Some(node) = self.nodes.get(n) else {
                return false;
            };
            let o = others.get(n).copied().unwrap_or_default();
            o.cpu_millis + r.cpu_millis <= node.info.capacity.cpu_millis
                && o.memory_mb + r.memory_mb <= node.info.capacity.memory_mb
        })
    }

    /// Optimistic concurrency: a placement computed at ledger version `v` commits if the ledger
    /// is still at `v`, or if no node it uses changed its reservations since.
    fn committable(&self, v: u64, app: &Application, a: &BTreeMap<String, String>) -> bool {
        if self.ledger_version == v {
            return true;
        }
        if app.components.iter().all(|c| c.resources.is_none()) {
            return true; // the ledger played no part in this placement
        }
        a.values()
            .all(|n| self.node_version.get(n).copied().unwrap_or(0) <= v)
    }

    fn on_scheduled(&mut self, r: JobResult, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get_mut(&r.app) else {
            return; // deleted meanwhile
        };
        if a.job == Some(r.id) {
            a.job = None;
        }
        if a.revision != r.revision {
            // a newer definition came in: its own job decides
            if a.job.is_none() {
                let p = a
                    .rerun
                    .take()
                    .unwrap_or(Purpose::Place("definition updated".into()));
                self.request(&r.app, p, out);
            }
            return;
        }
        let rerun = a.rerun.take();
        let app = r.app.clone();
        match r.purpose.clone() {
            Purpose::Place(reason) => self.commit_place(r, &reason, out),
            Purpose::Reevaluate => self.reevaluated(r, out),
        }
        if let Some(p) = rerun {
            if self.apps.get(&app).is_some_and(|a| a.job.is_none()) {
                self.request(&app, p, out);
            }
        }
    }

    fn commit_place(&mut self, r: JobResult, reason: &str, out: &mut Vec<Action>) {
        let app = r.app.clone();
        let application = self.apps[&app].rec.application.clone();
        let best = match r.outcome {
            JobOutcome::Placed(p) => p,
            JobOutcome::Infeasible(why) | JobOutcome::Error(why) => {
                let a = self.apps.get_mut(&app).unwrap();
                let first = a.unplaced.as_deref() != Some(why.as_str());
                a.unplaced = Some(why.clone());
                if first {
                    warn!("application {app} cannot be placed ({reason}): {why}");
                }
                self.update_status(&app, out);
                return;
            }
        };
        // the kept components stay unless the best placement is clearly better, however the
        // links' uncertainty turns out
        let (merged_cmp, best_cmp) = match r.compared {
            Some(Compared {
                merged: Some((m, b)),
                ..
            }) => (Some(m), b),
            _ => (r.merged.as_ref().map(|m| m.score), best.score),
        };
        let chosen = match r.merged {
            Some(m)
                if merged_cmp.unwrap_or(m.score) >= best_cmp * (1.0 - self.cfg.hysteresis)
                    && self.fits(&application, &m.assignment) =>
            {
                m
            }
            _ => best,
        };
        if !self.committable(r.ledger_version, &application, &chosen.assignment) {
            self.stats.collisions += 1;
            warn!(
                "placement of {app} collided with another commit on its nodes (ledger v{} → v{}), recomputing; {} collisions so far",
                r.ledger_version, self.ledger_version, self.stats.collisions
            );
            self.request(&app, Purpose::Place(reason.to_string()), out);
            return;
        }
        let old = self.apps[&app]
            .rec
            .placement
            .as_ref()
            .map(|p| p.assignment.clone())
            .unwrap_or_default();
        let moved: Vec<String> = chosen
            .assignment
            .iter()
            .filter(|(c, n)| old.get(*c) != Some(*n))
            .map(|(c, n)| match old.get(c) {
                Some(o) => format!("{c} {o}→{n}"),
                None => format!("{c}→{n}"),
            })
            .collect();
        if old.is_empty() {
            info!(
                "application {app} placed ({reason}) with score {:.6} ({} feasible deployments, computed in {} µs): {}",
                chosen.score,
                chosen.feasible_deployments,
                r.elapsed_us,
                moved.join(", ")
            );
        } else if moved.is_empty() {
            info!(
                "application {app} stays where it is ({reason}), score {:.6}",
                chosen.score
            );
        } else {
            info!(
                "application {app} re-placed ({reason}) with score {:.6}: {}",
                chosen.score,
                moved.join(", ")
            );
        }
        self.apply_placement(&app, chosen, &old, out);
    }

    fn apply_placement(
        &mut self,
        app: &str,
        p: PlacementRecord,
        old: &BTreeMap<String, String>,
        out: &mut Vec<Action>,
    ) {
        let a = self.apps.get_mut(app).unwrap();
        a.unplaced = None;
        let res = reservations_of(&a.rec.application, &p.assignment);
        let nodes: BTreeSet<String> = old.values().chain(p.assignment.values()).cloned().collect();
        a.rec.placement = Some(p);
        out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
        self.set_reservations(app, res);
        for n in &nodes {
            self.update_desired(n, out);
        }
        self.update_status(app, out);
    }

    fn reevaluated(&mut self, r: JobResult, out: &mut Vec<Action>) {
        let app = r.app.clone();
        let JobOutcome::Placed(best) = &r.outcome else {
            return;
        };
        let Some(cur_assignment) = self.apps[&app]
            .rec
            .placement
            .as_ref()
            .map(|p| p.assignment.clone())
        else {
            return;
        };
        // on the network seen in the current placement's favour when bounds were given
        let (cur, best_score) = match r.compared {
            Some(c) => (c.current, c.best),
            None => (r.current_score.unwrap_or(0.0), best.score),
        };
        let gain = (best_score - cur) / cur.max(1e-9);
        let sustain = self.cfg.sustain;
        let a = self.apps.get_mut(&app).unwrap();
        if gain > self.cfg.hysteresis {
            a.better_count += 1;
        } else {
            a.better_count = 0;
            return;
        }
        if a.better_count < sustain {
            info!(
                "application {app}: a placement {:.1} % better is available ({:.6} vs {:.6}), {} of {} evaluations",
                gain * 100.0,
                best_score,
                cur,
                a.better_count,
                sustain
            );
            return;
        }
        let application = a.rec.application.clone();
        // one component at a time: the single move that helps most
        let mut moves = r.single_moves.clone();
        moves.sort_by(|x, y| y.2.total_cmp(&x.2).then_with(|| x.0.cmp(&y.0)));
        let pick = moves.into_iter().find(|(c, n, s)| {
            let mut cand = cur_assignment.clone();
            cand.insert(c.clone(), n.clone());
            *s > cur && self.fits(&application, &cand)
        });
        let (comp, node, score) = match pick {
            Some(m) => m,
            None => {
                // no single move helps on its own: take the best placement's first difference
                match best
                    .assignment
                    .iter()
                    .find(|(c, n)| cur_assignment.get(*c) != Some(*n))
                {
                    Some((c, n)) => (c.clone(), n.clone(), cur),
                    None => return,
                }
            }
        };
        let mut assignment = cur_assignment.clone();
        assignment.insert(comp.clone(), node.clone());
        if !self.committable(r.ledger_version, &application, &assignment) {
            self.stats.collisions += 1;
            warn!("re-placement of {app} collided with another commit, will evaluate again");
            return;
        }
        let (score_now, criteria) = match sched::score(&self.cluster(), &application, &assignment) {
            Ok((s, g)) => (s, grades(&g)),
            Err(_) => (score, vec![]),
        };
        let from = cur_assignment.get(&comp).cloned().unwrap_or_default();
        info!(
            "application {app} re-placed because link metrics changed: {comp} {from}→{node} (score {:.6} → {:.6}; best {:.6}, {:.1} % better for {} evaluations)",
            cur, score_now, best_score, gain * 100.0, sustain
        );
        let p = PlacementRecord {
            assignment,
            score: score_now,
            criteria,
            feasible_deployments: best.feasible_deployments,
        };
        self.apply_placement(&app, p, &cur_assignment, out);
        if let Some(a) = self.apps.get_mut(&app) {
            // keep moving next evaluation if still clearly better
            a.better_count = sustain.saturating_sub(1);
        }
    }

    // ------------------------------------------------------------ desired and actual states

    fn desired_containers(&self, node: &str) -> Vec<ContainerSpec> {
        let mut v = Vec::new();
        for (name, a) in &self.apps {
            let Some(p) = &a.rec.placement else { continue };
            for (c, n) in &p.assignment {
                if n != node {
                    continue;
                }
                let Some(comp) = a.rec.application.component(c) else {
                    continue;
                };
                match container_spec(name, comp) {
                    Ok(s) => v.push(s),
                    Err(e) => error!("container {name}.{c} cannot be described: {e}"),
                }
            }
        }
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn update_desired(&mut self, node: &str, out: &mut Vec<Action>) {
        let mut specs = self.desired_containers(node);
        if specs.len() > MAX_CONTAINERS {
            error!(
                "node {node} is given {} containers, more than the {MAX_CONTAINERS} a desired state holds; the rest are left out",
                specs.len()
            );
            specs.truncate(MAX_CONTAINERS);
        }
        let cur = self.desired.get(node);
        if cur.is_some_and(|d| d.containers.as_slice() == specs.as_slice()) {
            return;
        }
        if cur.is_none() && specs.is_empty() {
            return;
        }
        let generation = cur.map(|d| d.generation).unwrap_or(0) + 1;
        let Ok(node_name) = wire::name(node) else {
            return;
        };
        let d = DesiredState {
            node: node_name,
            generation,
            containers: heapless::Vec::from_slice(&specs).unwrap_or_default(),
        };
        match wire::encode(&Message::DesiredState(Box::new(d.clone())), Some(&self.key)) {
            Ok(bytes) => {
                out.push(Action::Persist(PersistOp::PutDesired(Box::new(d.clone()))));
                out.push(Action::Publish {
                    topic: topics::desired(node),
                    payload: bytes,
                    retain: true,
                });
                self.stats.desired_published += 1;
                info!(
                    "desired state {generation} for node {node}: {}",
                    if specs.is_empty() {
                        "nothing".to_string()
                    } else {
                        specs
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                );
                self.desired.insert(node.into(), d);
            }
            Err(e) => error!("desired state for node {node} cannot be encoded: {e}"),
        }
    }

    fn on_actual(&mut self, a: ActualState, out: &mut Vec<Action>) {
        self.stats.actuals += 1;
        let node = a.node.to_string();
        if !self.nodes.get(&node).is_some_and(|n| n.online) {
            return;
        }
        if self.actual.get(&node) == Some(&a) {
            return;
        }
        self.actual.insert(node.clone(), a);
        let apps: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, s)| {
                s.rec
                    .placement
                    .as_ref()
                    .is_some_and(|p| p.assignment.values().any(|n| *n == node))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for app in apps {
            self.update_status(&app, out);
        }
    }

    fn status_of(&self, app: &str) -> Option<AppStatus> {
        let a = self.apps.get(app)?;
        if let Some((d, reason)) = &a.rejected {
            let mut st = AppStatus::new(app, "rejected", d);
            st.reason = Some(format!("{reason}; the previous definition stays deployed"));
            return Some(st);
        }
        let d = &a.rec.digest;
        let Some(p) = &a.rec.placement else {
            let mut st = AppStatus::new(
                app,
                if a.unplaced.is_some() {
                    "unplaced"
                } else {
                    "accepted"
                },
                d,
            );
            st.reason = a.unplaced.clone();
            return Some(st);
        };
        let mut running = vec![];
        let mut not_running = vec![];
        for (c, n) in &p.assignment {
            let cname = format!("{app}.{c}");
            let st = self.actual.get(n).and_then(|s| {
                s.containers
                    .iter()
                    .find(|x| x.name.as_str() == cname)
                    .map(|x| (x.state, x.error.to_string()))
            });
            match st {
                Some((ContainerState::Running, _)) if self.is_online(n) => running.push(c.clone()),
                Some((s, e)) => not_running.push(NotRunning {
                    component: c.clone(),
                    node: n.clone(),
                    state: format!("{s:?}").to_lowercase(),
                    error: e,
                }),
                None => not_running.push(NotRunning {
                    component: c.clone(),
                    node: n.clone(),
                    state: if self.is_online(n) {
                        "unknown"
                    } else {
                        "node lost"
                    }
                    .into(),
                    error: String::new(),
                }),
            }
        }
        let state = if not_running.is_empty() {
            "running"
        } else {
            "placed"
        };
        let mut st = AppStatus::new(app, state, d);
        st.reason = a.unplaced.clone();
        st.placement = Some(p.assignment.clone());
        st.score = Some(p.score);
        st.criteria = p.criteria.clone();
        st.feasible_deployments = Some(p.feasible_deployments);
        st.running = running;
        st.not_running = not_running;
        st.observed = self.measured.for_status.get(app).cloned();
        Some(st)
    }

    fn update_status(&mut self, app: &str, out: &mut Vec<Action>) {
        if let Some(st) = self.status_of(app) {
            let was_running = self
                .status_sent
                .get(app)
                .is_some_and(|s| s.contains("\"state\":\"running\""));
            if st.state == "running" && !was_running && self.status_sent.contains_key(app) {
                info!(
                    "application {app} running: {}",
                    st.placement
                        .iter()
                        .flatten()
                        .map(|(c, n)| format!("{c} on {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            self.send_status(app, &st, out);
        }
    }

    fn send_status(&mut self, app: &str, st: &AppStatus, out: &mut Vec<Action>) {
        let json = serde_json::to_string(st).expect("status serializes");
        if self.status_sent.get(app) == Some(&json) {
            return;
        }
        out.push(Action::Publish {
            topic: topics::app_status(app),
            payload: json.clone().into_bytes(),
            retain: true,
        });
        self.status_sent.insert(app.into(), json);
    }

    // ------------------------------------------------------------ time

    fn on_startup(&mut self, out: &mut Vec<Action>) {
        let mut republished = 0;
        let nodes: Vec<String> = self.desired.keys().cloned().collect();
        for n in nodes {
            let d = &self.desired[&n];
            if self.retained_seen.get(&n) == Some(&d.generation) {
                continue;
            }
            if let Ok(bytes) =
                wire::encode(&Message::DesiredState(Box::new(d.clone())), Some(&self.key))
            {
                out.push(Action::Publish {
                    topic: topics::desired(&n),
                    payload: bytes,
                    retain: true,
                });
                republished += 1;
            }
        }
        info!(
            "started with {} applications and {} desired states; {} desired states republished (the broker lacked them), same generations",
            self.apps.len(),
            self.desired.len(),
            republished
        );
        let apps: Vec<String> = self.apps.keys().cloned().collect();
        for app in apps {
            self.update_status(&app, out);
            if self.apps[&app].rec.placement.is_none() {
                self.request(&app, Purpose::Place("start-up".into()), out);
            }
        }
    }

    fn on_tick(&mut self, out: &mut Vec<Action>) {
        let now = self.now;
        let timeout = self.cfg.node_timeout_ms;
        let late: Vec<(String, u64)> = self
            .nodes
            .values()
            .filter(|n| n.online && now.saturating_sub(n.last_seen) > timeout)
            .map(|n| (n.info.name.clone(), now - n.last_seen))
            .collect();
        for (n, silent) in late {
            self.lose(&n, &format!("no report for {}", ms(silent)), out);
        }
        let confirm = self.cfg.offline_confirm_ms;
        let marked: Vec<String> = self
            .nodes
            .values()
            .filter(|n| {
                n.online
                    && n.offline_marker
                        .is_some_and(|at| now.saturating_sub(at) >= confirm)
            })
            .map(|n| n.info.name.clone())
            .collect();
        for n in marked {
            self.lose(&n, "last will: offline", out);
        }
        let max_age = self.cfg.link_max_age_ms;
        let before = self.links.len();
        self.links
            .retain(|_, e| now.saturating_sub(e.at) <= max_age);
        if self.links.len() != before {
            self.model_version += 1;
        }
        if self.peers_dirty && now.saturating_sub(self.last_peers_pub) >= self.cfg.peers_debounce_ms
        {
            self.publish_peers(out);
        }
        if now.saturating_sub(self.last_reeval) >= self.cfg.reevaluate_ms {
            self.last_reeval = now;
            let apps: Vec<(String, bool, bool)> =
                self.apps
                    .iter()
                    .map(|(n, a)| {
                        let placed = a.rec.placement.is_some();
                        let broken = a.rec.placement.as_ref().is_some_and(|p| {
                            p.assignment.values().any(|node| !self.is_online(node))
                        });
                        (n.clone(), placed && a.unplaced.is_none(), broken)
                    })
                    .collect();
            for (app, placed, broken) in apps {
                if broken {
                    self.request(
                        &app,
                        Purpose::Place("a node it uses is not available".into()),
                        out,
                    );
                } else if placed {
                    // Only qos applications are searched again. network-aware ones have their
                    // own descheduler (measured_tick); topsis places once, as the paper's
                    // scheduler does (both read the nodes' usage, which includes the running
                    // application itself: scored again, every running placement would look
                    // worse than moving).
                    let topsis = self
                        .apps
                        .get(&app)
                        .is_some_and(|a| a.rec.application.scheduler == "topsis");
                    if !self.is_network_aware(&app) && !topsis {
                        self.request(&app, Purpose::Reevaluate, out);
                    }
                } else {
                    self.request(&app, Purpose::Place("retry".into()), out);
                }
            }
        }
        self.measured_tick(out);
        if self.cfg.stats_every_ms > 0
            && now.saturating_sub(self.last_stats) >= self.cfg.stats_every_ms
        {
            let secs = (now - self.last_stats) as f64 / 1000.0;
            let d = |a: u64, b: u64| (a - b) as f64 / secs;
            let online = self.nodes.values().filter(|n| n.online).count();
            info!(
                "stats: ingest {:.0} msg/s (reports {:.0}/s, links {:.0}/s, actual {:.0}/s); {} nodes online of {}; {} links; {} applications; {} desired states published; {} collisions",
                d(self.stats.reports + self.stats.links + self.stats.actuals,
                  self.stats_at_last.reports + self.stats_at_last.links + self.stats_at_last.actuals),
                d(self.stats.reports, self.stats_at_last.reports),
                d(self.stats.links, self.stats_at_last.links),
                d(self.stats.actuals, self.stats_at_last.actuals),
                online,
                self.nodes.len(),
                self.links.len(),
                self.apps.len(),
                self.stats.desired_published,
                self.stats.collisions
            );
            self.last_stats = now;
            self.stats_at_last = self.stats.clone();
        }
    }
}

fn reservations_of(
    app: &Application,
    assignment: &BTreeMap<String, String>,
) -> BTreeMap<String, Resources> {
    let mut m: BTreeMap<String, Resources> = BTreeMap::new();
    for c in &app.components {
        let (Some(r), Some(n)) = (c.resources, assignment.get(&c.name)) else {
            continue;
        };
        let e = m.entry(n.clone()).or_default();
        e.cpu_millis += r.cpu_millis;
        e.memory_mb += r.memory_mb;
    }
    m
}

fn container_spec(app: &str, c: &model::Component) -> Result<ContainerSpec, wire::WireError> {
    let r = c.resources.unwrap_or_default();
    let mut env = heapless::Vec::new();
    for (k, v) in [("ACOA_APP", app), ("ACOA_COMPONENT", c.name.as_str())] {
        let _ = env.push(EnvVar {
            name: wire::bounded("env name", k)?,
            value: wire::bounded("env value", v)?,
        });
    }
    Ok(ContainerSpec {
        name: wire::name(&format!("{app}.{}", c.name))?,
        app: wire::name(app)?,
        component: wire::name(&c.name)?,
        image: wire::bounded("image", &c.image)?,
        cpu_millis: r.cpu_millis,
        memory_mb: r.memory_mb,
        env,
    })
}

/// Validates a published definition for topic `acoa/v1/apps/{topic_app}`.
pub fn validate(topic_app: &str, payload: &[u8]) -> Result<Application, String> {
    let text = std::str::from_utf8(payload)
        .map_err(|_| "the definition is not UTF-8 text (YAML or JSON expected)".to_string())?;
    let app = model::parse_application(text).map_err(|e| e.to_string())?;
    if app.application != topic_app {
        return Err(format!(
            "application: `{}` differs from the topic's name `{topic_app}`",
            app.application
        ));
    }
    let algos = sched::algorithms();
    if !algos.contains(&app.scheduler.as_str()) {
        return Err(format!(
            "scheduler: unknown algorithm `{}` (known: {})",
            app.scheduler,
            algos.join(", ")
        ));
    }
    for (i, c) in app.components.iter().enumerate() {
        if app.application.len() + 1 + c.name.len() > 63 {
            return Err(format!(
                "components[{i}].name: `{}.{}` is longer than a container name may be (63)",
                app.application, c.name
            ));
        }
    }
    Ok(app)
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    #[test]
    fn sub_resolution_noise_reads_as_one_latency() {
        for noisy in [0.0, 0.02, 0.031, 0.07, 0.09, 0.1, 0.12, 0.3, 0.54] {
            assert_eq!(quantize_latency(noisy), LATENCY_FLOOR_MS, "{noisy}");
        }
        assert!((quantize_latency(0.81) - 0.8).abs() < 1e-9);
        assert!((quantize_latency(24.057) - 24.1).abs() < 1e-9);
        // the self link is never above a measured peer link: colocating is never worse,
        // and not made to look better than the probers can tell
        assert_eq!(LOOPBACK_LATENCY_MS, LATENCY_FLOOR_MS);
    }
}
