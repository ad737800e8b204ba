//! Who probes whom, and what the control plane says of the pairs nobody probes (issue 16).
//!
//! - Each node's peer list ([`peer_lists`], pure): its neighbour set from
//!   `acoa_shared::coords::select_all_neighbours` (its own datacenter or train first, then the
//!   nearest by the reported coordinates, one per datacenter or train first, then a few
//!   random ones; at most `k`, the `serve`
//!   option `--peers-k`, 32 by default), plus the peers the placements ask it to probe
//!   (targeted probes, beyond `k`, up to [`wire::MAX_PEERS_PER_NODE`]). Signed and published
//!   retained on the node's own topic, only for the nodes whose list changed, debounced:
//!   membership changes after `peers_debounce_ms` (a millisecond per 10 nodes in a larger
//!   fleet), coordinate moves at most every `peers_refresh_ms`; a list that only found other
//!   neighbours (no peer gone, none targeted, as long as before) waits until the one sent is
//!   `peers_refresh_ms` old (`peerlists::due`: a joining fleet changes most lists each round);
//!   each node's random slots are drawn again once every `peers_rotate_ms`
//!   ([`rotation_epoch`]), the nodes spread over it, on the wall clock (`wall_clock_at_0_ms`:
//!   every replica draws the same slots).
//! - The sparse link source ([`Engine::link_view`]): a pair's own measurement where one exists,
//!   else an estimate marked as one (`acoa_shared::coords::estimate`: latency from the two
//!   coordinates, or the median of the group's measured internal links for two nodes of one
//!   group; jitter the worse endpoint's median over its measured links, success the product of
//!   the endpoints' medians).
//!
//! - The live model the placements read ([`Engine::cluster`]) holds the measured links and
//!   what the other pairs are estimated from ([`LinkEstimates`]: per node its coordinate and
//!   measured-link medians, per datacenter its median internal latency; O(nodes), whatever
//!   the fleet's size); the scheduler estimates a pair when it looks at it. The estimates'
//!   confidence bounds are wide (the coordinates' error: `links::favour_current`) so that the
//!   descheduler does not move on an estimate alone.
//! - Targeted probes ([`Engine::target_placement`]): after a placement is applied (and for every
//!   placement restored at start-up), the pairs its channels use are added to the first node's
//!   list (probing the second; a change of targets alone is applied to the lists sent, only
//!   for the nodes concerned: [`Engine::retarget_peers`]) and stay there while the placement
//!   does, so that no rotation of the random slots and no takeover leaves a placement on
//!   expired measurements; when the last of those that were only estimated is measured, the
//!   application is evaluated again (`Purpose::Reevaluate` or an exploration round, on the next
//!   tick).
//!
//! Invariant: a node's list never names the node itself, holds at most
//! [`wire::MAX_PEERS_PER_NODE`] peers and each peer once; the same members, coordinates,
//! targets and seed give the same lists.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use acoa_shared::coords::{
    estimate_in_group_ms, medians_between, Coord, EndpointSummary, Groups, LinkView, DIMS,
};
use acoa_shared::model::{self, Between, CoordDoc, EstimatedNode, LinkEstimates};
use acoa_shared::topics;
use acoa_shared::wire::{self, WireCoord, MAX_PEERS_PER_NODE};
use tracing::{error, info};

use super::inventory::{LinkEntry, LiveNode};
use super::linktable::LinkTable;
use super::liveness::NodeState;
use super::model::EstimateInputs;
use super::{Action, Engine, Purpose};
use crate::records::PersistOp;

use super::peerlists::{frame, SentList};
pub use super::peerlists::{
    peer_lists, retarget, rotation_epoch, Candidate, ListEntry, PeerAt, PeersComputed, PeersJob,
    Sent,
};

/// The seed of the neighbour sets' random slots (fixed: a list changes only when its members,
/// their coordinates or the node's rotation epoch do).
const NEIGHBOUR_SEED: u64 = 0x16_c00d;

/// How long a computation handed out may take before the engine asks for another (one that
/// never came back must not stop the lists for good).
const PEERS_JOB_GIVE_UP_MS: u64 = 60_000;

/// What the engine keeps of probing: the coordinates, the lists sent, the targeted pairs.
#[derive(Debug, Default)]
pub(super) struct Probes {
    /// Each node's last reported coordinate.
    pub(super) coords: HashMap<String, Coord<DIMS>>,
    /// Per node, the list last published and its generation (shared with a job out).
    pub(super) sent: Arc<Sent>,
    /// Per application, the directed pairs its placement uses that were only estimated when
    /// it was placed: their first node is asked to probe the second.
    pub(super) targeted: BTreeMap<String, BTreeSet<(String, String)>>,
    /// Per application, the targeted pairs not measured yet: when none is left, the
    /// application is evaluated again.
    pub(super) awaiting: BTreeMap<String, BTreeSet<(String, String)>>,
    /// Applications whose targeted pairs were all measured, to evaluate again once the live
    /// model has them: the count of models taken then ([`Engine::model_has_links_since`]).
    pub(super) measured_apps: BTreeMap<String, u64>,
    /// A coordinate moved since the lists were computed.
    pub(super) moved: bool,
    /// The targeted pairs changed since the lists were last computed or retargeted
    /// ([`Engine::retarget_peers`]).
    pub(super) targets_dirty: bool,
    /// The targeted peers of each node the lists were last computed or retargeted for.
    pub(super) listed_targets: BTreeMap<String, BTreeSet<String>>,
    /// The last round left changed lists unpublished (only other neighbours found): a round
    /// comes at the refresh period to publish them ([`super::peerlists::due`]).
    pub(super) deferred: bool,
    pub(super) last_refresh: u64,
    /// The computation handed out and not back yet: its id and when it was asked for.
    pub(super) computing: Option<(u64, u64)>,
    /// The last computation's id.
    pub(super) last_job: u64,
}

impl Probes {
    /// The targeted peers of each node, over every application.
    fn targets(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut t: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in self.targeted.values().flatten() {
            t.entry(a.clone()).or_default().insert(b.clone());
        }
        t
    }
}

impl Engine {
    /// A node's reported coordinate (from its link metrics); a bad one is logged and ignored.
    pub(super) fn on_coord(&mut self, node: &str, coord: &WireCoord) {
        match coord.to_coord() {
            Ok(c) => {
                if self.probes.coords.insert(node.to_string(), c) != Some(c) {
                    self.probes.moved = true;
                }
            }
            Err(e) => tracing::warn!("node {node}: link metrics refused in part: {e}"),
        }
    }

    /// The nodes that get a peer list and are probed: every node not lost with a probe
    /// address (an unreachable node stays: its peers' probes are the evidence it is alive).
    fn candidates(&self) -> Vec<Candidate> {
        self.nodes
            .values()
            .filter(|n| listable(n))
            .map(|n| {
                Candidate::new(
                    &n.info.name,
                    &n.info.probe_addr,
                    n.info.datacenter.clone(),
                    self.probes.coords.get(&n.info.name).copied(),
                    n.info.position,
                    rotation_epoch(
                        &n.info.name,
                        self.cfg.wall_clock_at_0_ms.saturating_add(self.now),
                        self.cfg.peers_rotate_ms,
                    ),
                )
            })
            .collect()
    }

    /// How long membership changes are gathered before a round of peer lists:
    /// `peers_debounce_ms`, longer in a large fleet ([`super::PEERS_DEBOUNCE_NODES_PER_MS`]).
    pub(super) fn peers_debounce_ms(&self) -> u64 {
        self.cfg
            .peers_debounce_ms
            .max(self.nodes.len() as u64 / super::PEERS_DEBOUNCE_NODES_PER_MS)
    }

    /// Whether a peer-list computation handed out is still under way.
    pub(super) fn peers_computing(&self) -> bool {
        self.probes
            .computing
            .is_some_and(|(_, at)| self.now.saturating_sub(at) < PEERS_JOB_GIVE_UP_MS)
    }

    /// Computes the peer lists and publishes those that changed (one generation for the
    /// round): here for a small fleet; for one of `peers_offload_from` nodes or more, hands
    /// the computation to the I/O loop and publishes when it comes back
    /// ([`Engine::on_peers_computed`]). Changes meanwhile make the next round.
    pub(super) fn publish_peers(&mut self, out: &mut Vec<Action>) {
        self.peers_dirty = false;
        self.probes.moved = false;
        self.probes.deferred = false;
        self.probes.targets_dirty = false;
        self.last_peers_pub = self.now;
        self.probes.last_refresh = self.now;
        let cands = self.candidates();
        self.probes.last_job += 1;
        let targets = self.probes.targets();
        self.probes.listed_targets = targets.clone();
        let job = PeersJob {
            id: self.probes.last_job,
            k: self.cfg.peers_k,
            targets,
            seed: NEIGHBOUR_SEED,
            cands,
            generation: self.meta.peer_generation + 1,
            sent: self.probes.sent.clone(),
            stale_before: self.now.saturating_sub(self.cfg.peers_refresh_ms),
            key: self.key.clone(),
        };
        if job.cands.len() >= self.cfg.peers_offload_from {
            self.probes.computing = Some((job.id, self.now));
            out.push(Action::ComputePeers(Box::new(job)));
        } else {
            let r = job.run();
            self.publish_lists(r, out);
        }
    }

    /// The lists of a computation handed out: published if it is the last one asked for.
    pub(super) fn on_peers_computed(&mut self, r: PeersComputed, out: &mut Vec<Action>) {
        if self.probes.computing.map(|(id, _)| id) != Some(r.id) {
            return; // superseded (one that took too long) or not ours
        }
        self.probes.computing = None;
        // a node lost while they were computed keeps no list
        let mut r = r;
        r.lists.retain(|n, _| {
            self.nodes
                .get(n)
                .is_some_and(|node| node.state != NodeState::Lost)
        });
        self.publish_lists(r, out);
    }

    /// Publishes the lists of `r` that are due ([`super::peerlists::due`]): signed by its job,
    /// or here when its generation is no longer above the last published (a round published
    /// meanwhile).
    fn publish_lists(&mut self, r: PeersComputed, out: &mut Vec<Action>) {
        let PeersComputed {
            mut lists,
            due,
            relabel,
            deferred,
            mut signed,
            generation,
            ..
        } = r;
        let total = lists.len();
        let sent = Arc::make_mut(&mut self.probes.sent);
        sent.retain(|n, _| lists.contains_key(n));
        for n in relabel {
            if let (Some(s), Some(list)) = (sent.get_mut(&n), lists.remove(&n)) {
                s.list = list;
            }
        }
        self.probes.deferred = deferred > 0;
        let due: Vec<(String, Vec<ListEntry>)> = due
            .into_iter()
            .filter_map(|n| lists.remove_entry(&n))
            .collect();
        drop(lists);
        if due.is_empty() {
            return;
        }
        if generation <= self.meta.peer_generation {
            signed.clear(); // a round published meanwhile: signed again for the next
        }
        let waiting = if deferred > 0 {
            format!(
                "; {deferred} that only found other neighbours wait until theirs is {} s old",
                self.cfg.peers_refresh_ms / 1000
            )
        } else {
            String::new()
        };
        let (generation, published) = self.send_lists(due, signed, out);
        info!(
            "peer lists {generation} published: {published} of {total} nodes changed (k = {}){waiting}",
            self.cfg.peers_k.min(MAX_PEERS_PER_NODE)
        );
    }

    /// Publishes `lists` as the next generation (the bytes `signed` holds for a node, else
    /// signed here) and keeps them as sent; the generation and how many were published.
    fn send_lists(
        &mut self,
        lists: Vec<(String, Vec<ListEntry>)>,
        mut signed: BTreeMap<String, Vec<u8>>,
        out: &mut Vec<Action>,
    ) -> (u64, usize) {
        let generation = self.meta.peer_generation + 1;
        let mut published = 0usize;
        let sent = Arc::make_mut(&mut self.probes.sent);
        for (node, list) in lists {
            let bytes = match signed.remove(&node) {
                Some(b) => Ok(b),
                None => {
                    frame(&node, generation, &list).and_then(|m| wire::encode(&m, Some(&self.key)))
                }
            };
            match bytes {
                Ok(bytes) => {
                    out.push(Action::PublishLatest {
                        topic: topics::peers(&node),
                        payload: bytes,
                    });
                    published += 1;
                }
                Err(e) => error!("peer list of node {node} cannot be encoded: {e}"),
            }
            sent.insert(
                node,
                SentList {
                    generation,
                    at_ms: self.now,
                    list,
                },
            );
        }
        self.meta.peer_generation = generation;
        out.push(Action::Persist(PersistOp::PutMeta(self.meta.clone())));
        (generation, published)
    }

    /// The targeted pairs changed, nothing else: the lists of the nodes whose targets changed
    /// are the ones sent with their targeted peers replaced ([`super::peerlists::retarget`]),
    /// published at once (an exploration round changes a few nodes' targets every few seconds;
    /// computing every list for it took 2.8 s of a core at 50,000 nodes). False, and nothing
    /// done, when one of those nodes has no list sent yet (placements restored at start-up):
    /// that takes a round of every list.
    pub(super) fn retarget_peers(&mut self, out: &mut Vec<Action>) -> bool {
        let targets = self.probes.targets();
        let changed: BTreeSet<&String> = targets
            .keys()
            .chain(self.probes.listed_targets.keys())
            .filter(|n| targets.get(*n) != self.probes.listed_targets.get(*n))
            .collect();
        if changed.iter().any(|n| !self.probes.sent.contains_key(*n)) {
            return false;
        }
        self.probes.targets_dirty = false;
        let mut lists = Vec::new();
        for node in changed {
            let s = &self.probes.sent[node];
            let group = self.nodes.get(node).map(|n| &n.info.datacenter);
            let list = retarget(node, &s.list, targets.get(node), |peer| {
                let n = self.nodes.get(peer).filter(|n| listable(n))?;
                Some((
                    PeerAt::shared(peer, &n.info.probe_addr),
                    group == Some(&n.info.datacenter),
                ))
            });
            if list != s.list {
                lists.push((node.clone(), list));
            }
        }
        self.probes.listed_targets = targets;
        let nodes: Vec<String> = lists.iter().map(|(n, _)| n.clone()).collect();
        if nodes.is_empty() {
            return true;
        }
        let (generation, _) = self.send_lists(lists, BTreeMap::new(), out);
        const NAMED: usize = 8;
        let more = match nodes.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        info!(
            "peer lists {generation} published: new targeted peers for {}{more}",
            nodes[..nodes.len().min(NAMED)].join(", ")
        );
        true
    }

    /// Every peer list sent, published again unchanged (a new broker session).
    pub(super) fn republish_peers(&self, out: &mut Vec<Action>) {
        for (node, s) in self.probes.sent.iter() {
            if let Ok(bytes) =
                frame(node, s.generation, &s.list).and_then(|m| wire::encode(&m, Some(&self.key)))
            {
                out.push(Action::PublishLatest {
                    topic: topics::peers(node),
                    payload: bytes,
                });
            }
        }
    }

    /// The peer list last published for `node` (peer names), if any.
    pub fn peer_list(&self, node: &str) -> Option<Vec<String>> {
        self.probes
            .sent
            .get(node)
            .map(|s| s.list.iter().map(|e| e.peer.name.to_string()).collect())
    }

    /// The status `app` would have published now (its links measured or estimated as of now).
    pub fn status_now(&self, app: &str) -> Option<crate::status::AppStatus> {
        self.status_of(app)
    }

    /// `node`'s coordinate as last reported.
    pub fn coordinate(&self, node: &str) -> Option<Coord<DIMS>> {
        self.probes.coords.get(node).copied()
    }

    /// What the estimates of the unmeasured pairs among `nodes` (the online ones) are
    /// computed from, by link-table number (O(nodes), on the decision loop; the pass over the
    /// links is [`estimates_from`], where the live model is first read).
    pub(super) fn estimate_inputs(&self, nodes: &[model::Node]) -> EstimateInputs {
        let names = self.links.names();
        let mut dc_ids: HashMap<&str, usize> = HashMap::new();
        let datacenter_of: Vec<Option<usize>> = names
            .iter()
            .map(|n| {
                let x = self.nodes.get(*n)?;
                let next = dc_ids.len();
                Some(*dc_ids.entry(x.info.datacenter.as_str()).or_insert(next))
            })
            .collect();
        let online: HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let online = names
            .iter()
            .map(|n| {
                online
                    .contains(n)
                    .then(|| self.probes.coords.get(*n).map(CoordDoc::of))
            })
            .collect();
        let mut datacenters = vec![String::new(); dc_ids.len()];
        for (g, i) in dc_ids {
            datacenters[i] = g.to_string();
        }
        EstimateInputs {
            datacenter_of,
            datacenters,
            online,
        }
    }

    /// The node pairs the channels of `app` use under `assignment` (other than a node's own).
    pub(super) fn channel_pairs(
        &self,
        app: &str,
        assignment: &BTreeMap<String, String>,
    ) -> Vec<(String, String, String)> {
        let Some(a) = self.apps.get(app) else {
            return Vec::new();
        };
        a.rec
            .application
            .channels
            .iter()
            .filter_map(|c| {
                let (x, y) = (assignment.get(&c.from)?, assignment.get(&c.to)?);
                Some((c.name.clone(), x.clone(), y.clone()))
            })
            .collect()
    }

    /// After a placement of `app` was applied (or restored): its channels' pairs are probed by
    /// their first node from now on (targeted probes), those measured already as well (a
    /// measurement that only a random slot or a predecessor's list gave would expire); once
    /// the estimated ones are measured, `app` is evaluated again.
    pub(super) fn target_placement(&mut self, app: &str, assignment: &BTreeMap<String, String>) {
        let estimated = self.target_pairs(app, assignment);
        if !estimated.is_empty() {
            info!(
                "application {app}: {} links of its placement are estimated, asking their nodes to probe them: {}",
                estimated.len(),
                estimated
                    .iter()
                    .map(|(x, y)| format!("{x} -> {y}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    /// Every placement restored at start-up is targeted (its links are measured again before it
    /// is evaluated on them); one line for all.
    pub(super) fn target_restored(&mut self) {
        let placed: Vec<(String, BTreeMap<String, String>)> = self
            .apps
            .iter()
            .filter_map(|(n, a)| Some((n.clone(), a.rec.placement.as_ref()?.assignment.clone())))
            .collect();
        let (mut apps, mut pairs) = (0, 0);
        for (app, assignment) in &placed {
            let estimated = self.target_pairs(app, assignment).len();
            apps += usize::from(estimated > 0);
            pairs += estimated;
        }
        if pairs > 0 {
            info!("{apps} restored placements use {pairs} links not measured since the start: asking their nodes to probe them, the applications are evaluated again once they are");
        }
    }

    /// Targets `app`'s pairs under `assignment`; the estimated ones, now awaited.
    fn target_pairs(
        &mut self,
        app: &str,
        assignment: &BTreeMap<String, String>,
    ) -> BTreeSet<(String, String)> {
        let pairs: BTreeSet<(String, String)> = self
            .channel_pairs(app, assignment)
            .into_iter()
            .filter(|(_, x, y)| x != y)
            .map(|(_, x, y)| (x, y))
            .collect();
        let estimated: BTreeSet<(String, String)> = pairs
            .iter()
            .filter(|(x, y)| !self.links.contains(x, y))
            .cloned()
            .collect();
        if estimated.is_empty() {
            self.probes.awaiting.remove(app);
        } else {
            self.probes
                .awaiting
                .insert(app.to_string(), estimated.clone());
        }
        if self.probes.targeted.get(app) != Some(&pairs) {
            if pairs.is_empty() {
                self.probes.targeted.remove(app);
            } else {
                self.probes.targeted.insert(app.to_string(), pairs);
            }
            self.probes.targets_dirty = true;
        }
        estimated
    }

    /// Of `want` (pairs from -> to, those that matter most first), the pairs `app` may ask for
    /// now beside the peers other applications target and `app`'s own (`own`)
    /// ([`super::peerlists::fitting`]); and how many were left out.
    pub(super) fn fitting(
        &self,
        app: &str,
        own: &BTreeSet<(String, String)>,
        want: impl IntoIterator<Item = (String, String)>,
    ) -> (BTreeSet<(String, String)>, usize) {
        let others = self
            .probes
            .targeted
            .iter()
            .filter(|(a, _)| a.as_str() != app)
            .flat_map(|(_, pairs)| pairs);
        let room = MAX_PEERS_PER_NODE.saturating_sub(self.cfg.peers_k.min(MAX_PEERS_PER_NODE));
        super::peerlists::fitting(room, others.chain(own), want)
    }

    /// `app` is gone: its targeted probes go too.
    pub(super) fn untarget(&mut self, app: &str) {
        if self.probes.targeted.remove(app).is_some() {
            self.probes.targets_dirty = true;
        }
        self.probes.awaiting.remove(app);
        self.probes.measured_apps.remove(app);
    }

    /// `from` measured its links to `to`: an application waiting for them may be evaluated again.
    pub(super) fn on_measured(&mut self, from: &str, to: &[&str]) {
        if self.probes.awaiting.is_empty() {
            return;
        }
        // once per report, over the pairs awaited (a few per application), not once per
        // sample over every application's set
        let mut done = Vec::new();
        for (app, left) in self.probes.awaiting.iter_mut() {
            let before = left.len();
            left.retain(|(a, b)| !(a == from && to.contains(&b.as_str())));
            if left.len() < before && left.is_empty() {
                done.push(app.clone());
            }
        }
        for app in done {
            self.probes.awaiting.remove(&app);
            self.measured_now(app);
        }
    }

    /// `app`'s links are measured: it is evaluated again once the live model has them.
    pub(super) fn measured_now(&mut self, app: String) {
        let built = self.models_built();
        self.probes.measured_apps.insert(app, built);
    }

    /// The applications whose targeted links were all measured are evaluated again, once the
    /// live model has those links (in a large fleet, the next taken: at most
    /// `Engine::model_every_ms` later, [`Engine::warm_model`] takes it when due).
    /// An exploration round (`explore`) when the application has rounds left.
    pub(super) fn reevaluate_measured(&mut self, out: &mut Vec<Action>) {
        self.explore_overdue();
        let ready: Vec<String> = self
            .probes
            .measured_apps
            .iter()
            .filter(|(_, built)| self.model_has_links_since(**built))
            .map(|(app, _)| app.clone())
            .collect();
        for app in ready {
            self.probes.measured_apps.remove(&app);
            if !self.apps.contains_key(&app) {
                continue;
            }
            if self.explores(&app) {
                info!("application {app}: the links asked for are measured now: exploring around its placement");
                self.request(&app, Purpose::Explore, out);
            } else {
                info!("application {app}: the links of its placement are measured now: evaluating it again");
                self.request(&app, Purpose::Reevaluate, out);
            }
        }
    }

    /// For `status`: each channel of `app`'s placement, `measured`, `estimated` or `local`
    /// (both ends on one node).
    pub(super) fn placement_links(
        &self,
        app: &str,
        assignment: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        self.channel_pairs(app, assignment)
            .into_iter()
            .map(|(c, x, y)| {
                let state = if x == y {
                    "local"
                } else if self.links.contains(&x, &y) {
                    "measured"
                } else {
                    "estimated"
                };
                (c, state.to_string())
            })
            .collect()
    }

    /// The measured links `node` is an end of, summarised (either direction).
    fn summary(&self, node: &str) -> Option<EndpointSummary> {
        EndpointSummary::from_links(
            self.links
                .iter()
                .filter(|(a, b, _)| a != b && (*a == node || *b == node))
                .map(|(_, _, e)| e.measured()),
        )
    }

    /// The sparse link source: the pair's own measurement (`from` probing `to`) where there
    /// is one, else an estimate marked as one; `None` when neither can be said (a node
    /// unknown, without coordinate or measured links). Costs one scan of the measured links
    /// for an estimate: a caller that asks for many keeps what it needs.
    pub fn link_view(&self, from: &str, to: &str) -> Option<LinkView> {
        let (na, nb) = (self.nodes.get(from)?, self.nodes.get(to)?);
        let measured = self.links.get(from, to).map(|e| e.measured());
        if measured.is_some() {
            return LinkView::of_pair::<DIMS>(measured, None, Groups::Unmeasured, None);
        }
        let coords = match (self.probes.coords.get(from), self.probes.coords.get(to)) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        // the measured links inside the pair's datacenter, or between its two (used only
        // with both coordinates: `coords::estimate`)
        let (ga, gb) = (&na.info.datacenter, &nb.info.datacenter);
        let inside = ga == gb;
        let dc = |n: &str| self.nodes.get(n).map(|x| &x.info.datacenter);
        let median = (inside || coords.is_some())
            .then(|| {
                estimate_in_group_ms(
                    self.links
                        .iter()
                        .filter(|(a, b, _)| {
                            a != b
                                && match (dc(a), dc(b)) {
                                    (Some(x), Some(y)) => {
                                        (x == ga && y == gb) || (x == gb && y == ga)
                                    }
                                    _ => false,
                                }
                        })
                        .map(|(_, _, e)| e.latency_ms()),
                )
            })
            .flatten();
        let groups = match median {
            Some(m) if inside => Groups::Inside(m),
            Some(m) => Groups::Between(m),
            None => Groups::Unmeasured,
        };
        let (sa, sb) = (self.summary(from)?, self.summary(to)?);
        LinkView::of_pair(None, coords, groups, Some((&sa, &sb)))
    }
}

/// What the placements estimate the unmeasured pairs from (O(nodes + measured links),
/// whatever the fleet's size): each online node's coordinate and measured-link medians, each
/// datacenter's median internal latency, the median latency between two datacenters with
/// measured links between them; the rule is `coords::LinkView::of_pair`, applied by
/// the scheduler to the pairs it looks at. Pure: the link table's numbers and `inputs`
/// ([`Engine::estimate_inputs`]), no name looked up per link.
pub(super) fn estimates_from(links: &LinkTable, inputs: &EstimateInputs) -> LinkEstimates {
    let (names, _) = links.numbered();
    let dc_of = &inputs.datacenter_of;
    // each link counts for both ends: every end's links in one array (counted first, so that
    // nothing grows: 3.3 million entries at 50,000 nodes), a datacenter's internal latencies.
    // Held small while the model is derived (a model's transient heap, 150 MiB at 50,000
    // nodes with whole `MeasuredLink`s and `usize` groups): an end keeps its link's jitter and
    // success as the table holds them (`f32`), a group its latencies as steps.
    let between = || {
        links.numbered().1.filter_map(|(ia, ib, e)| {
            if ia == ib {
                return None;
            }
            // links are only between known nodes
            Some((ia, ib, dc_of[ia]?, dc_of[ib]?, e))
        })
    };
    let mut at = vec![0usize; names.len() + 1];
    let mut group_len = vec![0usize; inputs.datacenters.len()];
    for (ia, ib, ga, gb, _) in between() {
        at[ia + 1] += 1;
        at[ib + 1] += 1;
        if ga == gb {
            group_len[ga] += 1;
        }
    }
    for i in 0..names.len() {
        at[i + 1] += at[i];
    }
    let mut next = at.clone();
    let mut flat = vec![(0f32, 0f32); at[names.len()]];
    let mut groups: Vec<Vec<u32>> = group_len.into_iter().map(Vec::with_capacity).collect();
    for (ia, ib, ga, gb, e) in between() {
        for i in [ia, ib] {
            flat[next[i]] = e.jitter_success();
            next[i] += 1;
        }
        if ga == gb {
            groups[ga].push(e.latency_steps());
        }
    }
    drop(next);
    let ends = (0..names.len()).map(|i| &flat[at[i]..at[i + 1]]);
    let nodes = ends
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .filter_map(|(i, l)| {
            let coord = inputs.online[i].as_ref()?;
            let s = EndpointSummary::from_jitter_success(
                l.iter().map(|&(j, s)| (f64::from(j), f64::from(s))),
            )?;
            Some((
                names[i].to_string(),
                EstimatedNode {
                    coord: *coord,
                    median_jitter_ms: s.median_jitter_ms,
                    median_success: s.median_success,
                },
            ))
        })
        .collect();
    drop((flat, at));
    let groups = groups
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .filter_map(|(i, l)| {
            let ms = l.into_iter().map(LinkEntry::latency_of_steps);
            Some((inputs.datacenters[i].clone(), estimate_in_group_ms(ms)?))
        })
        .collect();
    // the links between two datacenters, by their numbers, straight into the one array that
    // is sorted, and their medians into the table by number (no name compared per pair)
    let cross = between()
        .filter(|(_, _, ga, gb, _)| ga != gb)
        .map(|(_, _, ga, gb, e)| {
            let number = |g: usize| u32::try_from(g).expect("fewer than 2^32 datacenters");
            (number(ga), number(gb), e.latency_ms())
        });
    LinkEstimates {
        nodes,
        groups,
        between: Between::from_numbered(&inputs.datacenters, medians_between(cross)),
    }
}

/// Whether a peer list may name `n` (as a neighbour or a target): it is not lost and has a
/// probe address.
fn listable(n: &LiveNode) -> bool {
    n.state != NodeState::Lost && !n.info.probe_addr.is_empty()
}
