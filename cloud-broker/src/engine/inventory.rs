//! The node inventory: nodes join with a signed report and are lost on silence, on a
//! confirmed last will or on removal; link metrics between known nodes (the live model taken
//! from them: `models`; the peer lists: `probes`).
//!
//! Invariant: every change the live model shows is told to `models` as it happens (a node
//! gone or changed: [`Engine::node_left`]; joined, its usage, a link new or forgotten:
//! [`Engine::model_moved`]; a link's new metrics: [`Engine::metrics_moved`]), which decides
//! when the next model takes it. Memory stays bounded (links only between known nodes,
//! forgotten with their node or when too old).

use acoa_shared::coords::MeasuredLink;
use acoa_shared::model::Usage;
use acoa_shared::wire::{self, NodeReport};
use tracing::{info, warn};

use super::linkbatch::LinkBatch;
use super::links::{LATENCY_FLOOR_MS, LATENCY_STEP_MS};
use super::liveness::{Heard, NodeState, Witnessed};
use super::{ms, Action, Engine, Purpose};
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

/// A link's last metrics, as its source node measured them, held small: 24 bytes, aligned to
/// 4, so that a row's entry with its peer's number is 28 bytes, not 32 (1.6 million links at
/// 50,000 nodes, in up to three copies of the rows). The latency as a count of
/// [`LATENCY_STEP_MS`], which is what the model reads of it
/// ([`quantize_latency`](super::links::quantize_latency)), jitter and success rate as the
/// wire carries them (`f32`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LinkEntry {
    latency_steps: u32,
    jitter_ms: f32,
    success: f32,
    pub(super) samples: u16,
    /// When they came ([`LinkEntry::at`]): its low and high 32 bits.
    at_low: u32,
    at_high: u32,
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
            at_low: at as u32,
            at_high: (at >> 32) as u32,
        }
    }

    /// When the metrics came (the engine's clock, ms).
    pub(super) fn at(&self) -> u64 {
        u64::from(self.at_high) << 32 | u64::from(self.at_low)
    }

    /// The latency, quantized (`quantize_latency` of the one given).
    pub(super) fn latency_ms(&self) -> f64 {
        Self::latency_of_steps(self.latency_steps)
    }

    /// The latency as a count of [`LATENCY_STEP_MS`] (what [`LinkEntry::latency_of_steps`]
    /// reads back).
    pub(super) fn latency_steps(&self) -> u32 {
        self.latency_steps
    }

    /// The latency of `steps` ([`LinkEntry::latency_ms`] of an entry holding them).
    pub(super) fn latency_of_steps(steps: u32) -> f64 {
        (f64::from(steps) * LATENCY_STEP_MS).max(LATENCY_FLOOR_MS)
    }

    pub(super) fn jitter_ms(&self) -> f64 {
        f64::from(self.jitter_ms)
    }

    pub(super) fn success(&self) -> f64 {
        f64::from(self.success)
    }

    /// Jitter and success rate as held (`f32`): [`LinkEntry::jitter_ms`] and
    /// [`LinkEntry::success`] are these, widened.
    pub(super) fn jitter_success(&self) -> (f32, f32) {
        (self.jitter_ms, self.success)
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
        let when = |e: &LinkEntry| LinkEntry {
            at_low: 0,
            at_high: 0,
            ..*e
        };
        when(self) == when(other)
    }
}

/// How often unplaced applications are placed again while nodes keep joining.
const JOIN_RETRY_MS: u64 = 1000;

impl Engine {
    pub(super) fn on_report(&mut self, r: NodeReport, out: &mut Vec<Action>) {
        self.stats.reports += 1;
        let info = NodeInfo::from_report(&r);
        // `from_report` keeps a position that checks out: only one it dropped is checked
        // again, for the reason
        if info.position.is_none() {
            if let Some(Err(e)) = r.position.map(|p| p.to_position()) {
                warn!("node {}: report's position ignored: {e}", info.name);
            }
        }
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
        let (mut changed, mut moved) = (false, false);
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
                    if n.info.probe_addr != info.probe_addr || n.info.position != info.position {
                        self.peers_dirty = true;
                    }
                    out.push(Action::Persist(PersistOp::PutNode(Box::new(info.clone()))));
                    n.info = info;
                    changed = true;
                }
                if n.usage != usage {
                    n.usage = usage;
                    moved = true;
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
            moved = true;
            // an unreachable node never left the peer lists (`Engine::candidates`): its
            // return changes none (in a fleet joining at once, returns by the thousand each
            // made a round of every list)
            if !returned {
                self.peers_dirty = true;
            }
            // A node that joins may make unplaced applications feasible.
            match &mut self.joins_pending {
                Some((_, count, _)) => *count += 1,
                None => self.joins_pending = Some((name.clone(), 1, self.models_built())),
            }
            self.retry_for_joins(out);
        }
        if changed {
            self.node_left(&name);
        } else if moved {
            self.model_moved();
        }
        if returned {
            self.node_returned(&name, out);
        }
    }

    /// The unplaced applications placed again for the nodes that joined: at once for the first
    /// join after a quiet [`JOIN_RETRY_MS`], then at most once every [`JOIN_RETRY_MS`] (from the
    /// tick) while nodes keep joining, or as seldom as the live model takes new link metrics
    /// when that is longer (each retry built it again: seconds at 50,000 nodes). A fleet
    /// joining by the thousand must not start a search per application per join, each on a
    /// new cluster. In a large fleet, once the model jobs read has the joins
    /// ([`Engine::joins_modelled`]): a retry before would search the same nodes again.
    pub(super) fn retry_for_joins(&mut self, out: &mut Vec<Action>) {
        // each retry builds the live model again: no more often than it takes link metrics
        let every = JOIN_RETRY_MS.max(self.model_every_ms());
        if self
            .last_join_retry
            .is_some_and(|at| self.now.saturating_sub(at) < every)
        {
            return;
        }
        let Some((_, _, built)) = self.joins_pending else {
            return;
        };
        if !self.joins_modelled(built) {
            return;
        }
        let Some((first, count, _)) = self.joins_pending.take() else {
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

    pub(super) fn on_links(&mut self, l: &LinkBatch) {
        self.stats.links += 1;
        let from = l.node.as_str();
        if !self.nodes.contains_key(from) {
            return;
        }
        if let Some(c) = &l.coord {
            self.on_coord(from, c);
        }
        let now = self.now;
        // the peers this control plane knows, looked up once per sample (5,000 nodes each
        // reporting 32 peers a second: 160,000 samples a second)
        let known: Vec<bool> = l
            .iter()
            .map(|(peer, _)| self.nodes.contains_key(peer))
            .collect();
        // a node's sample of its own loopback is a link of the model, not evidence about a peer
        self.evidence.witness_all(
            from,
            l.iter()
                .zip(&known)
                .filter(|((peer, _), k)| **k && *peer != from)
                .map(|((peer, s), _)| {
                    let answered_at = (s.last_answer_ms != wire::NEVER_ANSWERED)
                        .then(|| now.saturating_sub(u64::from(s.last_answer_ms)));
                    (
                        peer,
                        Witnessed {
                            at: now,
                            answered_at,
                        },
                    )
                }),
        );
        if !self.nodes.get(from).is_some_and(|n| n.online) {
            return;
        }
        self.heard_by_links(from);
        let (mut metrics_moved, mut link_came) = (false, false);
        // the sender looked up once: a sample is one lookup of its peer's name
        let mut links = self.links.from(from);
        let mut measured: Vec<&str> = Vec::with_capacity(l.len());
        // unknown peers are not remembered: memory stays bounded
        for ((to, s), _) in l.iter().zip(&known).filter(|(_, k)| **k) {
            let (lat, jit, suc) = (s.latency_ms as f64, s.jitter_ms as f64, s.success as f64);
            if !(lat.is_finite() && lat >= 0.0 && jit.is_finite() && (0.0..=1.0).contains(&suc)) {
                continue;
            }
            let e = LinkEntry::new(lat, jit.max(0.0), suc, s.samples, self.now);
            measured.push(to);
            match links.get_mut(to) {
                Some(o) => {
                    let same = o.same_metrics(&e);
                    *o = e;
                    if !same {
                        metrics_moved = true;
                    }
                }
                None => {
                    links.insert(to, e);
                    link_came = true;
                }
            }
        }
        // new links come with every round of peer lists in a large fleet: its model takes
        // them with the metrics, at most every `model_every_ms`
        if link_came {
            self.model_moved();
        }
        if metrics_moved {
            self.metrics_moved();
        }
        self.on_measured(from, &measured);
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
            self.model_moved();
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
        self.node_left(node);
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
}
