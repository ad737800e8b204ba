//! The node inventory and the live infrastructure model: nodes join with a signed report and
//! are lost on silence, on a confirmed last will or on removal; link metrics between known
//! nodes; the live [`Cluster`] and its links' confidence bounds (the peer lists: `probes`).
//!
//! Invariant: `model_version` grows whenever anything [`Engine::cluster`] shows changes (a
//! node's properties, usage or liveness, a new link, the measurements), so that the cached
//! live model and bounds are those of the current version; new metrics of a link already
//! measured make it grow too, at most once every [`LINK_MODEL_EVERY_MS`] (the model is
//! O(links) to build: at 50,000 nodes every link report would rebuild it), and so do new
//! links in a large fleet ([`Engine::large_fleet`]). Memory stays
//! bounded (links only between known nodes, forgotten with their node or when too old).

use std::sync::Arc;

use acoa_shared::coords::MeasuredLink;
use acoa_shared::model::{self, Cluster, Usage};
use acoa_shared::wire::{self, LinkMetrics, NodeReport};
use tracing::{info, warn};

use super::disconnect::model_node;
use super::links::{LATENCY_FLOOR_MS, LATENCY_STEP_MS};
use super::liveness::{Heard, NodeState, Witnessed};
use super::model::LiveModel;
use super::{ms, Action, Engine, Purpose, LINK_MODEL_EVERY_MS, LINK_MODEL_LINKS_PER_MS};
use crate::records::{NodeInfo, PersistOp};

/// A node of the inventory, as last reported.
#[derive(Debug, Clone)]
pub(super) struct LiveNode {
    pub(super) info: NodeInfo,
    pub(super) usage: Usage,
    pub(super) last_seen: u64,
    pub(super) online: bool,
    /// What the evidence says of it (`online` is `state == Online`).
    pub(super) state: NodeState,
    /// Since when it is unreachable.
    pub(super) unreachable_since: Option<u64>,
}

/// A link's last metrics, as its source node measured them, held small (24 bytes; 1.6
/// million links at 50,000 nodes): the latency as a count of [`LATENCY_STEP_MS`], which is
/// what the model reads of it ([`quantize_latency`](super::links::quantize_latency)), jitter and success rate as the wire
/// carries them (`f32`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LinkEntry {
    latency_steps: u32,
    jitter_ms: f32,
    success: f32,
    pub(super) samples: u16,
    /// When they came.
    pub(super) at: u64,
}

impl LinkEntry {
    /// The metrics of one sample (a latency beyond 4 · 10^8 ms is held as that).
    pub(super) fn new(
        latency_ms: f64,
        jitter_ms: f64,
        success: f64,
        samples: u16,
        at: u64,
    ) -> Self {
        LinkEntry {
            // `as` saturates (and takes NaN to 0): the step count of any latency given
            latency_steps: (latency_ms / LATENCY_STEP_MS).round() as u32,
            jitter_ms: jitter_ms as f32,
            success: success as f32,
            samples,
            at,
        }
    }

    /// The latency, quantized (`quantize_latency` of the one given).
    pub(super) fn latency_ms(&self) -> f64 {
        (f64::from(self.latency_steps) * LATENCY_STEP_MS).max(LATENCY_FLOOR_MS)
    }

    pub(super) fn jitter_ms(&self) -> f64 {
        f64::from(self.jitter_ms)
    }

    pub(super) fn success(&self) -> f64 {
        f64::from(self.success)
    }

    /// The same metrics as the estimator reads them.
    pub(super) fn measured(&self) -> MeasuredLink {
        MeasuredLink {
            latency_ms: self.latency_ms(),
            jitter_ms: self.jitter_ms(),
            success: self.success(),
        }
    }

    /// Whether `other` carries the same metrics (whenever it came).
    fn same_metrics(&self, other: &LinkEntry) -> bool {
        LinkEntry { at: 0, ..*self } == LinkEntry { at: 0, ..*other }
    }
}

/// How often unplaced applications are placed again while nodes keep joining.
const JOIN_RETRY_MS: u64 = 1000;

impl Engine {
    pub(super) fn on_report(&mut self, r: NodeReport, out: &mut Vec<Action>) {
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
        let mut returned = false;
        let will = self.evidence.heard(&name).and_then(|h| h.will_at);
        if let (Some(at), true) = (will, self.is_online(&name)) {
            info!(
                "node {name}: a signed report {} after its connection's last will: it is back",
                ms(now.saturating_sub(at))
            );
        }
        let windows = self.windows();
        let heard = Heard::on_message(self.evidence.heard(&name), &info.datacenter, now, &windows);
        self.evidence.hear(&name, heard);
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
                if !n.online {
                    returned = n.state == NodeState::Unreachable;
                    n.online = true;
                    n.state = NodeState::Online;
                    n.unreachable_since = None;
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
                        state: NodeState::Online,
                        unreachable_since: None,
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
            // an unreachable node never left the peer lists (`Engine::candidates`): its
            // return changes none (in a fleet joining at once, returns by the thousand each
            // made a round of every list)
            if !returned {
                self.peers_dirty = true;
            }
            // A node that joins may make unplaced applications feasible.
            match &mut self.joins_pending {
                Some((_, count)) => *count += 1,
                None => self.joins_pending = Some((name.clone(), 1)),
            }
            self.retry_for_joins(out);
        }
        if returned {
            self.node_returned(&name, out);
        }
    }

    /// The unplaced applications placed again for the nodes that joined: at once for the first
    /// join after a quiet [`JOIN_RETRY_MS`], then at most once every [`JOIN_RETRY_MS`] (from the
    /// tick) while nodes keep joining, or as seldom as the live model takes new link metrics
    /// when that is longer (each retry builds it again: seconds at 50,000 nodes). A fleet
    /// joining by the thousand must not start a search per application per join, each on a
    /// new cluster.
    pub(super) fn retry_for_joins(&mut self, out: &mut Vec<Action>) {
        // each retry builds the live model again: no more often than it takes link metrics
        let every = JOIN_RETRY_MS.max(self.model_every_ms());
        if self
            .last_join_retry
            .is_some_and(|at| self.now.saturating_sub(at) < every)
        {
            return;
        }
        let Some((first, count)) = self.joins_pending.take() else {
            return;
        };
        self.last_join_retry = Some(self.now);
        let why = match count {
            1 => format!("node {first} joined"),
            _ => format!("{count} nodes joined ({first} first)"),
        };
        let waiting: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| a.rec.placement.is_none() || a.unplaced.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        for app in waiting {
            self.request(&app, Purpose::Place(why.clone()), out);
        }
    }

    /// An online node's link metrics count as hearing from it (so does any of its verified
    /// periodic telemetry the ingest shed, [`super::Event::HeardShed`]): agents send their node report
    /// only when it changed, when no link metrics went out in a period, or every
    /// `report_max_interval_s`, their link metrics every period. A node already silent (its
    /// last will came, or the silence window passed) returns only by a report, which its
    /// agent sends on every new connection.
    pub(super) fn heard_by_links(&mut self, node: &str) {
        let (now, w) = (self.now, self.windows());
        let Some(h) = self.evidence.heard_mut(node) else {
            return;
        };
        if h.is_silent(now, &w) {
            return;
        }
        h.last_heard = now;
        if let Some(n) = self.nodes.get_mut(node) {
            n.last_seen = now;
        }
    }

    pub(super) fn on_links(&mut self, l: &LinkMetrics) {
        self.stats.links += 1;
        let from = l.node.to_string();
        if !self.nodes.contains_key(&from) {
            return;
        }
        if let Some(c) = &l.coord {
            self.on_coord(&from, c);
        }
        let now = self.now;
        // the peers this control plane knows, looked up once per sample (5,000 nodes each
        // reporting 32 peers a second: 160,000 samples a second)
        let known: Vec<bool> = l
            .links
            .iter()
            .map(|s| self.nodes.contains_key(s.peer.as_str()))
            .collect();
        // a node's sample of its own loopback is a link of the model, not evidence about a peer
        self.evidence.witness_all(
            &from,
            l.links
                .iter()
                .zip(&known)
                .filter(|(s, k)| **k && s.peer.as_str() != from)
                .map(|(s, _)| {
                    let answered_at = (s.last_answer_ms != wire::NEVER_ANSWERED)
                        .then(|| now.saturating_sub(u64::from(s.last_answer_ms)));
                    (
                        s.peer.as_str(),
                        Witnessed {
                            at: now,
                            answered_at,
                        },
                    )
                }),
        );
        if !self.nodes.get(&from).is_some_and(|n| n.online) {
            return;
        }
        self.heard_by_links(&from);
        let large = self.large_fleet();
        // the sender looked up once: a sample is one lookup of its peer's name
        let mut links = self.links.from(&from);
        let mut measured: Vec<&str> = Vec::with_capacity(l.links.len());
        // unknown peers are not remembered: memory stays bounded
        for (s, _) in l.links.iter().zip(&known).filter(|(_, k)| **k) {
            let (lat, jit, suc) = (s.latency_ms as f64, s.jitter_ms as f64, s.success as f64);
            if !(lat.is_finite() && lat >= 0.0 && jit.is_finite() && (0.0..=1.0).contains(&suc)) {
                continue;
            }
            let e = LinkEntry::new(lat, jit.max(0.0), suc, s.samples, self.now);
            let to = s.peer.as_str();
            measured.push(to);
            match links.get_mut(to) {
                Some(o) => {
                    let same = o.same_metrics(&e);
                    *o = e;
                    if !same {
                        // taken into the model on its next build a second on
                        self.links_moved = true;
                    }
                }
                None => {
                    links.insert(to, e);
                    if large {
                        // new links come with every round of peer lists there: the model
                        // takes them with the metrics, at most every `model_every_ms`
                        self.links_moved = true;
                    } else {
                        self.model_version += 1;
                    }
                }
            }
        }
        self.on_measured(&from, &measured);
    }

    /// Forgets every link from or to the `lost` nodes, in one pass.
    pub(super) fn drop_links_of(&mut self, lost: &[String]) {
        if lost.is_empty() {
            return;
        }
        let lost: std::collections::HashSet<&str> = lost.iter().map(String::as_str).collect();
        let before = self.links.len();
        self.links
            .retain(|a, b, _| !lost.contains(a) && !lost.contains(b));
        if self.links.len() != before {
            self.model_version += 1;
        }
    }

    /// Marks `node` lost and re-places what it ran; the caller then drops its links
    /// ([`Engine::drop_links_of`]).
    pub(super) fn lose(&mut self, node: &str, why: &str, out: &mut Vec<Action>) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if n.state == NodeState::Lost {
            return;
        }
        n.online = false;
        n.state = NodeState::Lost;
        n.unreachable_since = None;
        self.model_version += 1;
        self.peers_dirty = true;
        // its links go with the next `drop_links_of` (one pass over the links for all the
        // nodes lost at once: a pass each was 8 ms at 20,000 nodes, seconds when thousands go)
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

    /// The live infrastructure model: online nodes, their measured links (loopbacks filled
    /// in) and what the other pairs are estimated from (`probes`: `Engine::estimate_inputs`,
    /// [`LiveModel::estimates`]). On the loop: the online nodes and a copy of the link table
    /// (numbers); what a job reads is derived from it on the job's thread ([`LiveModel`]).
    pub fn model(&mut self) -> Arc<LiveModel> {
        // in a large fleet new metrics are taken by the tick alone (`warm_model`), whose model
        // has its views derived ahead: a job that took them itself derived them again
        if !self.large_fleet() {
            self.settle_links();
        }
        if let Some((v, m)) = &self.model_cache {
            if *v == self.model_version {
                return m.clone();
            }
        }
        let nodes: Vec<model::Node> = self
            .nodes
            .values()
            .filter(|n| n.online)
            .map(model_node)
            .collect();
        let inputs = self.estimate_inputs(&nodes);
        let observed = self
            .apps
            .iter()
            .filter_map(|(n, a)| {
                Some((n.clone(), self.measured.table.observed(&a.rec.application)?))
            })
            .collect();
        let m = Arc::new(LiveModel::new(
            nodes,
            Arc::new(self.links.clone()),
            inputs,
            observed,
        ));
        self.model_cache = Some((self.model_version, m.clone()));
        self.model_built_at = self.now;
        self.models_built += 1;
        m
    }

    /// A fleet of `peers_offload_from` nodes or more: its live model is taken ahead
    /// ([`Engine::warm_model`]) and takes new links as it takes new metrics, at most every
    /// [`Engine::model_every_ms`] (with rotating peer lists, links come every few seconds
    /// there: each made a new model, whose views a placement then waited for).
    pub(super) fn large_fleet(&self) -> bool {
        self.nodes.len() >= self.cfg.peers_offload_from
    }

    /// Whether the next placement job sees the link table as it is now: in a small fleet
    /// always (a new link makes a new model), in a large one when the model was taken after
    /// `built` models or no metrics moved since the last ([`Engine::large_fleet`]).
    pub(super) fn model_has_links_since(&self, built: u64) -> bool {
        !self.large_fleet() || self.models_built > built || !self.links_moved
    }

    /// How many live models were taken ([`Engine::model_has_links_since`]).
    pub(super) fn models_built(&self) -> u64 {
        self.models_built
    }

    /// The live model as a cluster document ([`Engine::model`], [`LiveModel::cluster`]).
    pub fn cluster(&mut self) -> Arc<Cluster> {
        self.model().cluster()
    }

    /// How often the live model takes new link metrics: [`LINK_MODEL_EVERY_MS`], longer with
    /// many links ([`LINK_MODEL_LINKS_PER_MS`]).
    fn model_every_ms(&self) -> u64 {
        LINK_MODEL_EVERY_MS.max(self.links.len() as u64 / LINK_MODEL_LINKS_PER_MS)
    }

    /// In a fleet of `peers_offload_from` nodes or more, the live model taken ahead of the next
    /// placement once it would change (at most every [`Engine::model_every_ms`]), and its
    /// scheduler's view derived off the loop ([`Action::WarmModel`]): deriving it is seconds of
    /// CPU at 50,000 nodes, which the first placement after a change would otherwise wait for.
    /// New links and metrics are taken here only: a job takes the model as it was taken last
    /// (or a new one when a node changed).
    pub(super) fn warm_model(&mut self, out: &mut Vec<Action>) {
        if !self.large_fleet() {
            return;
        }
        let due = self.now.saturating_sub(self.model_built_at) >= self.model_every_ms();
        let stale = self.links_moved
            || self
                .model_cache
                .as_ref()
                .is_none_or(|(v, _)| *v != self.model_version);
        if stale && due {
            self.settle_links();
            self.model();
        }
        // the model a job would take now, once
        let Some((v, m)) = &self.model_cache else {
            return;
        };
        if *v != self.model_version || self.warmed_model == Some(*v) {
            return;
        }
        self.warmed_model = Some(*v);
        out.push(Action::WarmModel(m.clone()));
    }

    /// Takes the links' new metrics into the model if it was built [`LINK_MODEL_EVERY_MS`]
    /// ago or more (longer with many links: [`LINK_MODEL_LINKS_PER_MS`]).
    fn settle_links(&mut self) {
        let every = self.model_every_ms();
        if self.links_moved && self.now.saturating_sub(self.model_built_at) >= every {
            self.links_moved = false;
            self.model_version += 1;
        }
    }
}
