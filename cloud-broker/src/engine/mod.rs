//! The control plane's decisions, as a pure state machine: [`Engine::handle`] takes an event
//! (a verified node message, an application definition, a scheduling result, a tick) and the
//! current time, and returns the actions to carry out, in order (persist before publish).
//! Placement computations are described by [`Job`]s, run by [`run_job`] (pure too) wherever the
//! I/O loop likes (a blocking task per job, at most one job per application at a time), and
//! come back as [`Event::Scheduled`]; commits are optimistic against the resource ledger.
//!
//! Invariant: no I/O here or below. State changes only through [`Engine::handle`]; every
//! change that must survive a restart leaves as an [`Action::Persist`] before the
//! [`Action::Publish`] that depends on it. The parts:
//! - `links`: link statistics and the confidence-aware comparison (pure functions);
//! - `jobs`: placement computations (pure functions of a [`Job`]);
//! - `inventory`: the nodes and their links; `models`: when the live model is taken and which
//!   one a job reads (`model`: what is derived from it); `probes`: the coordinates, the
//!   per-node peer lists, the estimates of unmeasured links and the targeted probes;
//! - `commit`: the applications' lifecycle, the resource ledger and placement commits;
//! - `rollout`: desired states, actual states and the application status documents;
//! - `measured`: run-time measurements and the network-aware descheduler;
//! - here: the state, the events, start-up and the clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use acoa_shared::model::{Resources, Usage};
use acoa_shared::topics;
use acoa_shared::wire::{self, ActualState, ComponentUsage, LinkMetrics, Message, NodeReport};
use ed25519_dalek::SigningKey;
use tracing::info;

use crate::records::{AppRecord, DesiredDoc, History, Meta, PersistOp, Snapshot};
use crate::status::PlacementRecord;

mod admit;
mod background;
mod commit;
mod disconnect;
mod durable;
mod explore;
mod inventory;
mod jobs;
mod linkbatch;
mod links;
mod linktable;
pub mod liveness;
pub mod loopback;
mod measured;
mod model;
mod models;
mod nodemap;
mod peerlists;
pub mod probes;
mod revisions;
mod rollout;
pub mod update;
pub mod view;

use commit::reservations_of;
pub use commit::validate;
pub use explore::{DEFAULT_EXPLORE_ROUNDS, EXPLORE_WAIT_MS};
use inventory::LiveNode;
pub(crate) use jobs::grades;
pub use jobs::{
    finish_job, run_job, search_job, Compared, ExploreFound, ExploreInput, Job, JobOutcome,
    JobResult, Purpose,
};
pub use linkbatch::{LinkBatch, PeerSample};
pub use links::{
    favour_current, quantize_latency, wilson_interval, LinkBounds, CONFIDENCE_Z, LATENCY_FLOOR_MS,
    LATENCY_STEP_MS, LOOPBACK_LATENCY_MS,
};
pub use liveness::{Liveness, NodeState};
pub use measured::{comm_cost, NETWORK_AWARE};
pub use model::LiveModel;

/// Tunables of the decisions.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// A node whose reports stop for this long is judged (3 report periods by default): lost,
    /// or unreachable when the evidence says so (`liveness`).
    pub node_timeout_ms: u64,
    /// How nodes are judged: from evidence (default) or, as a baseline, by a timer only.
    pub liveness: Liveness,
    /// A peer's report that a silent node answered its probe counts as evidence for this
    /// long; a silent node no peer reached within it is lost.
    pub evidence_ms: u64,
    /// How often placed applications are evaluated again (descheduler) and unplaced ones retried.
    pub reevaluate_ms: u64,
    /// Relative score gain a better placement must offer before anything moves.
    pub hysteresis: f64,
    /// ... sustained over this many evaluations in a row.
    pub sustain: u32,
    /// Peer-list changes are gathered for this long before one publication (longer in a
    /// large fleet: [`PEERS_DEBOUNCE_NODES_PER_MS`]).
    pub peers_debounce_ms: u64,
    /// Peers in each node's neighbour set (`probes`; at most `wire::MAX_PEERS_PER_NODE`).
    pub peers_k: usize,
    /// Moved coordinates change the neighbour sets at most this often, and a list that only
    /// found other neighbours waits until the one sent is this old (`peerlists::due`).
    pub peers_refresh_ms: u64,
    /// Each node's random peers are drawn again this often, the nodes staggered over the
    /// period (0: never, they change only with the members). Checked every
    /// `peers_refresh_ms`.
    pub peers_rotate_ms: u64,
    /// The wall-clock time (Unix milliseconds) at the engine's time 0 (`serve`: the system
    /// clock when its loop starts; 0 in tests). The rotation epochs count on the wall clock,
    /// so that a standby that takes over, or a restarted control plane, draws the random
    /// slots of the epoch in force, as its predecessor did, not those of epoch 0 again.
    pub wall_clock_at_0_ms: u64,
    /// With at least this many nodes to list, the peer lists are computed off the decision
    /// loop ([`Action::ComputePeers`]; seconds at 50,000 nodes), below it in the tick.
    pub peers_offload_from: usize,
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
    /// Exploration rounds after a placement that rested on estimates (`explore`: each probes
    /// the neighbourhood of the search's placement, and moves only onto measured links); 0:
    /// none, the descheduler's rule alone.
    pub explore_rounds: u32,
    /// Candidate nodes per component in an exploration round (at most this squared pairs
    /// probed per channel and round).
    pub explore_width: usize,
    /// Exploration rounds and re-evaluations computed at once; the others wait in the engine
    /// and take the model of the moment they start (`background`). No limit by default (the
    /// engine alone); `serve`: as many as it computes at once besides a placement
    /// (`workers::background_slot_count`).
    pub background_jobs: usize,
    /// Measured use and traffic: the mean over this many reports of a node (smoothing window).
    pub observed_window: usize,
    /// Measurements not refreshed for this long are forgotten.
    pub observed_max_age_ms: u64,
    /// A loopback through every broker this often (`loopback`: how far behind the control
    /// plane hears; silence is judged that much later, at most one `node_timeout_ms` later);
    /// 0: none, the control plane is taken to hear at once (the default of the engine alone;
    /// `serve` publishes one a second, [`LOOPBACK_EVERY_MS`]).
    pub loopback_every_ms: u64,
    /// The broker connections a loopback goes through (1 to [`loopback::MAX_BROKERS`]).
    pub brokers: usize,
    /// This process' loopbacks (a random number: another replica's are not ours).
    pub loopback_nonce: u64,
}

/// How often `serve` publishes a loopback on each broker.
pub const LOOPBACK_EVERY_MS: u64 = 1000;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_timeout_ms: 3000,
            liveness: Liveness::Evidence,
            evidence_ms: 10_000,
            reevaluate_ms: 5000,
            hysteresis: 0.05,
            sustain: 3,
            peers_debounce_ms: 500,
            peers_k: 32,
            peers_refresh_ms: 30_000,
            peers_rotate_ms: 0,
            wall_clock_at_0_ms: 0,
            peers_offload_from: 2_000,
            link_max_age_ms: 60_000,
            stats_every_ms: 10_000,
            deschedule_ms: 10_000,
            netaware_threshold: 0.2,
            explore_rounds: DEFAULT_EXPLORE_ROUNDS,
            explore_width: acoa_scheduler::explore::DEFAULT_WIDTH,
            background_jobs: usize::MAX,
            observed_window: 10,
            observed_max_age_ms: 30_000,
            loopback_every_ms: 0,
            brokers: 1,
            loopback_nonce: 0,
        }
    }
}

/// What happens to the control plane.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A verified node report.
    Report(Box<NodeReport>),
    /// Verified link metrics, compact ([`Event::links`]).
    Links(Box<LinkBatch>),
    /// Verified per-component usage of a node.
    Usage(Box<ComponentUsage>),
    /// A verified container-state report.
    Actual(Box<ActualState>),
    /// A verified presence of a node (`online: false`: its connection's last will, or its
    /// goodbye), of its connection `(run, conn)`.
    Online {
        node: String,
        online: bool,
        run: u64,
        conn: u64,
    },
    /// A desired state the broker holds (retained), seen at start-up.
    RetainedDesired { node: String, generation: u64 },
    /// An application definition (empty payload: delete).
    AppPublished { app: String, payload: Vec<u8> },
    /// An application definition read off the loop ([`crate::definitions`]): its text and
    /// what reading it gave.
    AppChecked {
        app: String,
        payload: Vec<u8>,
        checked: Result<Box<acoa_shared::model::Application>, String>,
    },
    /// A node left the inventory.
    NodeRemoved(String),
    /// A placement computation finished.
    Scheduled(Box<JobResult>),
    /// The broker's retained messages have been read: republish what the agents lack.
    StartupDone,
    /// A record could not be made durable (`app`: the application it was about); what
    /// depended on it was not published.
    StoreFailed { app: Option<String>, reason: String },
    /// The store writes again after a [`Event::StoreFailed`].
    StoreWritable,
    /// The broker accepted a new connection of ours: it may have lost the retained documents.
    BrokerReconnected,
    /// The peer lists an [`Action::ComputePeers`] asked for.
    PeersComputed(Box<probes::PeersComputed>),
    /// Verified, fresh periodic telemetry of these nodes that the ingest shed because the
    /// engine's queue was full ([`crate::ingest::periodic`]): the nodes were heard (one online and not
    /// yet silent stays so), what they said is lost and their next message replaces it.
    HeardShed(Vec<String>),
    /// A loopback of process `nonce` ([`Action::Loopback`]) came back through broker number
    /// `broker` (in `--broker-url`'s order), after an ingest task.
    LoopedBack { broker: usize, nonce: u64, seq: u64 },
    /// Time passes.
    Tick,
}

impl Event {
    /// Verified link metrics as the engine keeps them ([`LinkBatch`]: sized to the samples
    /// that came, not the wire's 64 inline).
    pub fn links(m: impl std::borrow::Borrow<LinkMetrics>) -> Event {
        Event::Links(Box::new(LinkBatch::from(m.borrow())))
    }
}

/// How often old links are looked for.
const LINK_EXPIRY_EVERY_MS: u64 = 1000;

/// How often a node already unreachable is judged again (it becomes lost as its peers' last
/// answers age past the evidence window, seconds): a silent node not yet unreachable is
/// judged on every tick. With tens of thousands of nodes cut off at once, judging them all
/// five times a second was most of the decision loop.
pub const UNREACHABLE_JUDGED_EVERY_MS: u64 = 1000;

/// Nodes per millisecond of the peer lists' debounce beyond `peers_debounce_ms`: a round
/// computes every list and signs the changed ones (O(fleet)), and while a fleet joins every
/// join changes lists; 3 s at 30,000 nodes, 5 s at 50,000 (at 30,000 nodes joining, rounds
/// every 500 ms were a third of the control plane's CPU).
pub const PEERS_DEBOUNCE_NODES_PER_MS: u64 = 10;

/// How often new metrics of links already measured are taken into the live model (a new link
/// or a node's change is at once): at least this, and a millisecond per hundred links (3 s at
/// 10,000 nodes, 16 s at 50,000 reporting 32 peers each). Building the model is O(links),
/// seconds at 50,000 nodes, and every link report changes some metric.
pub const LINK_MODEL_EVERY_MS: u64 = 1000;
/// Links per millisecond of [`LINK_MODEL_EVERY_MS`] beyond its minimum.
pub const LINK_MODEL_LINKS_PER_MS: u64 = 100;

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
    /// A retained document of which only the latest counts (a node's peer list), QoS 1:
    /// queued without waiting, and replaced by a later one for the same topic while it waits
    /// (`crate::latest`); it may leave after publications that come after it.
    PublishLatest {
        topic: String,
        payload: Vec<u8>,
    },
    Schedule(Box<Job>),
    /// Compute these peer lists off the loop ([`probes::PeersJob::run`]) and hand the result
    /// back as an [`Event::PeersComputed`].
    ComputePeers(Box<probes::PeersJob>),
    /// Derive this live model's scheduler view off the loop, ahead of the placements that
    /// will read it ([`Engine::warm_model`]).
    WarmModel(Arc<LiveModel>),
    /// Publish loopback `seq` of process `nonce` on every broker, each on its own topic
    /// (`topics::loopback`, QoS 0 as the fleet's telemetry; `loopback`).
    Loopback {
        nonce: u64,
        seq: u64,
    },
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
    /// The disconnect policy's last decision when a node returned.
    returned: Option<String>,
    /// Its revisions and the rollout under way (`revisions`, `update`).
    history: History,
    /// A newer revision was accepted and its placement is not applied yet.
    fresh: bool,
    /// The record that ran when it was accepted (placed, with an `update` block: rolled out
    /// from).
    prior: Option<Box<AppRecord>>,
    /// A definition that arrived during a rollout, applied when it ends.
    queued: Option<Vec<u8>>,
    /// The last rollout, once ended (for the status).
    finished: Option<update::RolloutStatus>,
    /// Its exploration since it was last placed (`explore`).
    explore: explore::Exploration,
}

impl AppState {
    /// A newly accepted (or restored) application: revision 1, nothing running for it.
    fn new(rec: AppRecord, history: History) -> AppState {
        AppState {
            history,
            fresh: false,
            prior: None,
            queued: None,
            finished: None,
            rec,
            revision: 1,
            job: None,
            rerun: None,
            better_count: 0,
            unplaced: None,
            rejected: None,
            returned: None,
            explore: explore::Exploration::default(),
        }
    }
}

/// Counters for the operator and the benchmark (serialized in the fleet document).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub reports: u64,
    pub links: u64,
    pub actuals: u64,
    pub collisions: u64,
    pub desired_published: u64,
    pub jobs: u64,
    /// Nodes heard through telemetry the ingest shed ([`Event::HeardShed`]).
    pub heard_shed: u64,
    /// Verdicts on silent nodes computed ([`UNREACHABLE_JUDGED_EVERY_MS`]).
    pub judged: u64,
}

/// The control plane's state and decisions.
pub struct Engine {
    cfg: EngineConfig,
    key: SigningKey,
    /// The leader's term, carried by every desired state it decides (0: no election).
    term: u64,
    now: u64,
    nodes: nodemap::NodeMap,
    links: linktable::LinkTable,
    /// The live models taken (`models`).
    models: models::Models,
    apps: BTreeMap<String, AppState>,
    desired: BTreeMap<String, DesiredDoc>,
    /// Per node, per container of its desired state, the generation that gave the container
    /// its spec (`rollout::update_desired`): what the node reports of it counts from there on.
    /// Not persisted: after a restart a container's is its node's current generation.
    spec_since: HashMap<String, BTreeMap<String, u64>>,
    retained_seen: BTreeMap<String, u64>,
    /// What reading the definition being handled gave, when it was read off the loop.
    checked: Option<admit::Checked>,
    actual: HashMap<String, ActualState>,
    status_sent: BTreeMap<String, String>,
    /// Ledger: per application, per node, what it reserves.
    reservations: BTreeMap<String, BTreeMap<String, Resources>>,
    ledger_version: u64,
    node_version: HashMap<String, u64>,
    next_job: u64,
    /// Exploration rounds and re-evaluations running, and those waiting for a turn.
    background: background::Background,
    meta: Meta,
    peers_dirty: bool,
    /// Joins not yet answered by a retry of the unplaced applications (the first node that
    /// joined, how many, and how many live models were taken before the first), and when they
    /// were last retried for a join ([`Engine::retry_for_joins`]).
    joins_pending: Option<(String, usize, u64)>,
    last_join_retry: Option<u64>,
    /// When old links were last looked for ([`Engine::expire_links`]).
    last_link_expiry: u64,
    /// When the unreachable nodes were last judged ([`UNREACHABLE_JUDGED_EVERY_MS`]).
    last_unreachable_judged: u64,
    /// Coordinates, peer lists sent, targeted probes (`probes`).
    probes: probes::Probes,
    last_peers_pub: u64,
    last_reeval: u64,
    last_stats: u64,
    measured: measured::Measured,
    stats_at_last: Stats,
    pub stats: Stats,
    /// Why the store cannot write, while it cannot.
    store_full: Option<String>,
    /// Definitions received while the store could not write, applied once it can.
    held: BTreeMap<String, Vec<u8>>,
    /// What the nodes' liveness is judged on.
    evidence: liveness::Evidence,
    /// Nodes back from unreachable whose copies are settled on their next actual state.
    returning: BTreeMap<String, u64>,
    /// How far behind the control plane hears (`loopback`).
    loopback: loopback::Loopback,
}

fn ms(v: u64) -> String {
    format!("{:.1} s", v as f64 / 1000.0)
}

impl Engine {
    /// The same engine deciding in leader term `term` (etcd store: the leadership key's
    /// create revision): agents refuse a desired state of an older term.
    pub fn with_term(mut self, term: u64) -> Engine {
        self.term = term;
        self
    }

    /// An engine restored from `snap` at time `now`. Restored nodes count as alive until they
    /// miss the report timeout.
    pub fn new(cfg: EngineConfig, key: SigningKey, snap: Snapshot, now: u64) -> Engine {
        let cfg_window = cfg.observed_window;
        let loopback = loopback::Loopback::new(
            cfg.loopback_every_ms,
            cfg.node_timeout_ms,
            cfg.node_timeout_ms / 3,
            cfg.brokers,
            cfg.loopback_nonce,
        );
        let mut e = Engine {
            cfg,
            key,
            term: 0,
            now,
            nodes: nodemap::NodeMap::default(),
            links: linktable::LinkTable::default(),
            models: models::Models::default(),
            apps: BTreeMap::new(),
            desired: snap.desired,
            spec_since: HashMap::new(),
            retained_seen: BTreeMap::new(),
            checked: None,
            actual: HashMap::new(),
            status_sent: BTreeMap::new(),
            reservations: BTreeMap::new(),
            ledger_version: 0,
            node_version: HashMap::new(),
            next_job: 1,
            background: background::Background::default(),
            meta: snap.meta,
            peers_dirty: false,
            joins_pending: None,
            last_join_retry: None,
            last_link_expiry: 0,
            last_unreachable_judged: 0,
            probes: probes::Probes::default(),
            last_peers_pub: 0,
            last_reeval: now,
            last_stats: now,
            measured: measured::Measured::new(cfg_window, now),
            stats_at_last: Stats::default(),
            stats: Stats::default(),
            store_full: None,
            held: BTreeMap::new(),
            evidence: liveness::Evidence::default(),
            returning: BTreeMap::new(),
            loopback,
        };
        for (name, info) in snap.nodes {
            e.evidence.hear(
                &name,
                liveness::Heard {
                    datacenter: info.datacenter.clone(),
                    last_heard: now,
                    will_at: None,
                    back: None,
                },
            );
            e.nodes.insert(
                name,
                LiveNode {
                    info,
                    usage: Usage::default(),
                    last_seen: now,
                    online: true,
                    state: NodeState::Online,
                    unreachable_since: None,
                },
            );
        }
        for (name, rec) in snap.apps {
            if let Some(p) = &rec.placement {
                let res = reservations_of(&rec.application, &p.assignment);
                e.reservations.insert(name.clone(), res);
            }
            let h = Engine::restored_history(&rec, snap.history.get(&name).cloned());
            let mut a = AppState::new(rec, h);
            // an exploration's state is not stored: a restored placement is evaluated again
            // (with hysteresis) once its links are measured, not explored afresh
            a.explore.ended = a.rec.placement.is_some();
            e.apps.insert(name, a);
        }
        e
    }

    pub fn collisions(&self) -> u64 {
        self.stats.collisions
    }

    pub fn desired(&self, node: &str) -> Option<&DesiredDoc> {
        self.desired.get(node)
    }

    pub fn placement(&self, app: &str) -> Option<&PlacementRecord> {
        self.apps.get(app).and_then(|a| a.rec.placement.as_ref())
    }

    pub fn is_online(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| n.online)
    }

    /// What the control plane makes of `node` (`None`: not in the inventory).
    pub fn node_state(&self, node: &str) -> Option<NodeState> {
        self.nodes.get(node).map(|n| n.state)
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
            Event::Online { node, online, .. } => self.on_presence(&node, online),
            Event::RetainedDesired { node, generation } => {
                self.retained_seen.insert(node, generation);
            }
            Event::AppPublished { app, payload } => self.on_app(app, payload, &mut out),
            Event::AppChecked {
                app,
                payload,
                checked,
            } => self.on_app_checked(app, payload, checked, &mut out),
            Event::NodeRemoved(n) => {
                self.lose(&n, "removed from the inventory", &mut out);
                self.drop_links_of(std::slice::from_ref(&n));
                self.nodes.remove(&n);
                self.evidence.forget(&n);
            }
            Event::Scheduled(r) => self.on_scheduled(*r, &mut out),
            Event::StartupDone => self.on_startup(&mut out),
            Event::StoreFailed { app, reason } => self.on_store_failed(app, reason, &mut out),
            Event::StoreWritable => self.on_store_writable(&mut out),
            Event::BrokerReconnected => self.republish(&mut out),
            Event::PeersComputed(r) => self.on_peers_computed(*r, &mut out),
            Event::LoopedBack { broker, nonce, seq } => self.loopback.back(broker, nonce, seq),
            Event::HeardShed(nodes) => {
                self.stats.heard_shed += nodes.len() as u64;
                for n in &nodes {
                    if self.is_online(n) {
                        self.heard_by_links(n);
                    }
                }
            }
            Event::Tick => self.on_tick(&mut out),
        }
        out
    }

    /// The broker's retained messages have been read: bring the desired states in line with
    /// the records, republish the ones the broker lacks, publish every status, and place what
    /// is not placed.
    fn on_startup(&mut self, out: &mut Vec<Action>) {
        let repaired = self.repair_desired(out);
        let mut republished = 0;
        let nodes: Vec<String> = self.desired.keys().cloned().collect();
        for n in nodes {
            let d = &self.desired[&n];
            if repaired.contains(&n) || self.retained_seen.get(&n) == Some(&d.generation) {
                continue;
            }
            if let Ok(bytes) = d
                .to_wire()
                .and_then(|w| wire::encode(&Message::DesiredState(w), Some(&self.key)))
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
        self.target_restored();
        let apps: Vec<String> = self.apps.keys().cloned().collect();
        for app in apps {
            self.update_status(&app, out);
            if self.apps[&app].rec.placement.is_none() {
                self.request(&app, Purpose::Place("start-up".into()), out);
            }
        }
    }

    /// Forgets the links and the witnesses' samples not measured for `link_max_age_ms`, except
    /// an unreachable node's (its last measurements stand until it returns). At most once every
    /// [`LINK_EXPIRY_EVERY_MS`]: it is a pass over every link (640,000 at 20,000 nodes), and the
    /// unreachable nodes are gathered only when a link is old.
    fn expire_links(&mut self) {
        let now = self.now;
        if now.saturating_sub(self.last_link_expiry) < LINK_EXPIRY_EVERY_MS {
            return;
        }
        self.last_link_expiry = now;
        let max_age = self.cfg.link_max_age_ms;
        if !self
            .links
            .iter()
            .any(|(_, _, e)| now.saturating_sub(e.at()) > max_age)
        {
            return;
        }
        let before = self.links.len();
        let cut_off: std::collections::HashSet<&str> = self
            .nodes
            .values()
            .filter(|n| n.state == NodeState::Unreachable)
            .map(|n| n.info.name.as_str())
            .collect();
        self.links.retain(|a, b, e| {
            now.saturating_sub(e.at()) <= max_age || cut_off.contains(a) || cut_off.contains(b)
        });
        // a witness that stopped measuring a node left an old link, and an old sample
        self.evidence
            .forget_older_than(now, max_age, |n| cut_off.contains(n));
        if self.links.len() != before {
            self.model_moved();
        }
    }

    /// Nodes lost on silence or a confirmed last will, old links forgotten, the peer list,
    /// the periodic evaluations, the measurements, the statistics line.
    fn on_tick(&mut self, out: &mut Vec<Action>) {
        let now = self.now;
        self.tick_loopback(out);
        self.judge_nodes(out);
        self.retry_for_joins(out);
        self.expire_links();
        let refresh = (self.probes.moved || self.probes.deferred || self.cfg.peers_rotate_ms > 0)
            && now.saturating_sub(self.probes.last_refresh) >= self.cfg.peers_refresh_ms;
        let debounced = now.saturating_sub(self.last_peers_pub) >= self.peers_debounce_ms();
        if !self.peers_computing() {
            if refresh || (self.peers_dirty && debounced) {
                self.publish_peers(out);
            } else if self.probes.targets_dirty && !self.retarget_peers(out) {
                // a node concerned has no list yet: a round of every list, at the pace of
                // membership changes
                self.peers_dirty = true;
                if debounced {
                    self.publish_peers(out);
                }
            }
        }
        // the model taken ahead first: an application whose targeted links came is evaluated
        // again on the model that has them
        self.warm_model(out);
        self.reevaluate_measured(out);
        if now.saturating_sub(self.last_reeval) >= self.cfg.reevaluate_ms {
            self.last_reeval = now;
            let apps: Vec<(String, bool, bool)> = self
                .apps
                .iter()
                .map(|(n, a)| {
                    let placed = a.rec.placement.is_some();
                    let broken = a.rec.placement.as_ref().is_some_and(|p| {
                        p.assignment
                            .iter()
                            .any(|(c, node)| !self.is_online(node) && !self.tolerated(a, c, node))
                    });
                    (n.clone(), placed && a.unplaced.is_none(), broken)
                })
                .collect();
            for (app, placed, broken) in apps {
                if broken && self.rolling_back(&app) {
                    // placed again once its old revision is back (within the deadline)
                } else if broken {
                    self.request(
                        &app,
                        Purpose::Place("a node it uses is not available".into()),
                        out,
                    );
                } else if placed {
                    // Only qos applications are searched again. network-aware ones have their
                    // own descheduler (measured_tick); topsis places once and never moves a
                    // running application (both read the nodes' usage, which includes the
                    // running application itself: scored again, every running placement would
                    // look worse than moving).
                    let topsis = self
                        .apps
                        .get(&app)
                        .is_some_and(|a| a.rec.application.scheduler == "topsis");
                    // nothing moves while a component waits on an unreachable node
                    // nor while it rolls out a revision
                    // nor while an exploration waits for the links it asked for
                    if !self.is_network_aware(&app)
                        && !topsis
                        && !self.touches_unreachable(&app)
                        && !self.rolling(&app)
                        && !self.exploring(&app)
                    {
                        self.request(&app, Purpose::Reevaluate, out);
                    }
                } else {
                    self.request(&app, Purpose::Place("retry".into()), out);
                }
            }
        }
        self.measured_tick(out);
        self.drive_rollouts(out);
        if self.cfg.stats_every_ms > 0
            && now.saturating_sub(self.last_stats) >= self.cfg.stats_every_ms
        {
            let secs = (now - self.last_stats) as f64 / 1000.0;
            let d = |a: u64, b: u64| (a - b) as f64 / secs;
            let online = self.nodes.values().filter(|n| n.online).count();
            info!(
                "stats: ingest {:.0} msg/s (reports {:.0}/s, links {:.0}/s, actual {:.0}/s; {:.0} nodes/s heard through shed messages); {} nodes online of {}; {} links; {} applications ({} evaluations running in the background, {} waiting); {} desired states published; {} collisions; loopback: {} back, heard {} ms late",
                d(self.stats.reports + self.stats.links + self.stats.actuals,
                  self.stats_at_last.reports + self.stats_at_last.links + self.stats_at_last.actuals),
                d(self.stats.reports, self.stats_at_last.reports),
                d(self.stats.links, self.stats_at_last.links),
                d(self.stats.actuals, self.stats_at_last.actuals),
                d(self.stats.heard_shed, self.stats_at_last.heard_shed),
                online,
                self.nodes.len(),
                self.links.len(),
                self.apps.len(),
                self.background.running(),
                self.background.waiting(),
                self.stats.desired_published,
                self.stats.collisions,
                self.loopback.returned(),
                self.loopback.behind(now),
            );
            self.last_stats = now;
            self.stats_at_last = self.stats.clone();
        }
    }
}
