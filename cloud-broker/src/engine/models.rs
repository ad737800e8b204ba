//! When the live model is taken, and which one a placement job reads.
//!
//! A [`LiveModel`] is taken on the decision loop (the online nodes and a copy of the link
//! table: numbers); its views are derived where first read (seconds of CPU at 50,000 nodes).
//! What changed since the last model decides when the next is taken:
//! - **a node gone or changed** (lost, unreachable, removed, its properties): the next job's
//!   model must not offer it ([`Engine::node_left`]);
//! - **new metrics of links already measured**: at most every [`Engine::model_every_ms`];
//! - **the rest** (a node that joined or returned, its usage, a link new or expired, the
//!   applications' measured use: [`Engine::model_moved`]): in a small fleet at once; in a large
//!   one ([`Engine::large_fleet`]) with the metrics.
//!
//! In a large fleet only the tick takes models, at most every model period, and has their
//! views derived off the loop ([`Action::WarmModel`]). A job reads the last model whose views
//! are derived ([`Models::ready`]): it never waits for a derivation (before, the first
//! placements after a change waited 1-4 s for one). The nodes gone or changed since that model
//! was taken are closed to the job (no room for a container there, [`Engine::job_model`]): a
//! placement never lands on a node known to be gone. Nodes that joined since wait for the next
//! model, and so do the unplaced applications' retries for them ([`Engine::joins_modelled`]).
//!
//! Invariants: `version` grows with every change a job must see; `current` is the model of
//! `version` when it was taken; `ready` is a model taken no later than `current`, whose views
//! are derived; `left` holds exactly the nodes gone or changed after `ready` was taken.

use std::sync::Arc;

use acoa_shared::model::Cluster;

use super::disconnect::model_node;
use super::model::LiveModel;
use super::{Action, Engine, LINK_MODEL_EVERY_MS, LINK_MODEL_LINKS_PER_MS};

/// The live models taken and what changed since (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Models {
    /// Grows with every change the next job must see.
    pub(super) version: u64,
    /// Changes since the last model that wait for the next one: the links' metrics, and in a
    /// large fleet the rest ([`Engine::model_moved`]).
    moved: bool,
    /// The model of a version, and its number.
    current: Option<Taken>,
    built_at: u64,
    /// How many models were taken (the last one's number).
    built: u64,
    /// The version of the last model derived ahead ([`Engine::warm_model`]).
    warmed: Option<u64>,
    /// The last model taken whose views are derived (large fleet).
    ready: Option<Taken>,
    /// The nodes gone or changed since `ready` was taken, with the version that saw them go.
    left: Vec<(u64, String)>,
}

#[derive(Debug, Clone)]
struct Taken {
    version: u64,
    number: u64,
    model: Arc<LiveModel>,
}

impl Models {
    /// The last model taken whose views are derived, found by looking (a derivation runs off
    /// the loop, nobody tells): the current one once it is; the nodes gone before it are in it.
    fn refresh_ready(&mut self) {
        let Some(c) = &self.current else {
            return;
        };
        if c.model.views_ready() && self.ready.as_ref().is_none_or(|r| r.number < c.number) {
            let v = c.version;
            self.ready = Some(c.clone());
            self.left.retain(|(at, _)| *at > v);
        }
    }
}

impl Engine {
    /// `node` went (lost, unreachable, removed) or changed: the next job must not read it as
    /// it was.
    pub(super) fn node_left(&mut self, node: &str) {
        self.models.version += 1;
        if self.large_fleet() {
            self.models
                .left
                .push((self.models.version, node.to_string()));
        }
    }

    /// Something the model shows changed that no job must see at once (a node joined or
    /// returned, its usage, a link new or expired, the applications' measured use): in a small
    /// fleet the next job takes it, in a large one the next model the tick takes.
    pub(super) fn model_moved(&mut self) {
        if self.large_fleet() {
            self.models.moved = true;
        } else {
            self.models.version += 1;
        }
    }

    /// New metrics of a link already measured: taken with the next model, at most every
    /// [`Engine::model_every_ms`].
    pub(super) fn metrics_moved(&mut self) {
        self.models.moved = true;
    }

    /// The live infrastructure model of now: online nodes, their measured links (loopbacks
    /// filled in) and what the other pairs are estimated from (`probes`: `Engine::estimate_inputs`,
    /// [`LiveModel::estimates`]). On the loop: the online nodes and a copy of the link table
    /// (numbers); what a job reads is derived from it on the job's thread ([`LiveModel`]). In a
    /// large fleet what waits for the next model is not in it ([`Engine::warm_model`]).
    pub fn model(&mut self) -> Arc<LiveModel> {
        if !self.large_fleet() {
            self.settle_links();
        }
        if let Some(c) = &self.models.current {
            if c.version == self.models.version {
                return c.model.clone();
            }
        }
        let nodes: Vec<_> = self
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
        self.models.built += 1;
        self.models.built_at = self.now;
        self.models.current = Some(Taken {
            version: self.models.version,
            number: self.models.built,
            model: m.clone(),
        });
        m
    }

    /// The model a placement job reads, and the nodes closed to it (gone or changed since it
    /// was taken): in a small fleet the model of now; in a large one the last whose views are
    /// derived ([`Models::ready`]), or, before any is, the model of now.
    pub(super) fn job_model(&mut self) -> (Arc<LiveModel>, Vec<String>) {
        if !self.large_fleet() {
            return (self.model(), vec![]);
        }
        self.models.refresh_ready();
        match &self.models.ready {
            Some(r) => {
                // once each, and only those the model offers (a churning fleet loses thousands)
                let mut closed: Vec<String> = self
                    .models
                    .left
                    .iter()
                    .filter(|(_, n)| r.model.node(n).is_some())
                    .map(|(_, n)| n.clone())
                    .collect();
                closed.sort_unstable();
                closed.dedup();
                (r.model.clone(), closed)
            }
            None => (self.model(), vec![]),
        }
    }

    /// A model `node` is online in, to score on at once on the loop: in a large fleet the
    /// ready one when it has `node`, else the model of now, taken again if it lacks `node`
    /// (derived on the loop: a node's return decided on scores, seldom).
    pub(super) fn model_having(&mut self, node: &str) -> Arc<LiveModel> {
        if self.large_fleet() {
            self.models.refresh_ready();
            if let Some(r) = self
                .models
                .ready
                .as_ref()
                .filter(|r| r.model.node(node).is_some())
            {
                return r.model.clone();
            }
            let now_has =
                self.models.current.as_ref().is_some_and(|c| {
                    c.version == self.models.version && c.model.node(node).is_some()
                });
            if !now_has {
                self.models.version += 1;
            }
        }
        self.model()
    }

    /// A fleet of `peers_offload_from` nodes or more: its live model is taken by the tick only
    /// and derived ahead ([`Engine::warm_model`]); jobs read the last one derived.
    pub(super) fn large_fleet(&self) -> bool {
        self.nodes.len() >= self.cfg.peers_offload_from
    }

    /// Whether the next placement job reads a model with the links as they were when `built`
    /// models were taken: in a small fleet always (a new link makes a new model); in a large
    /// one once a later model is ready, or when nothing waits for the next and the ready model
    /// is the current one.
    pub(super) fn model_has_links_since(&self, built: u64) -> bool {
        if !self.large_fleet() {
            return true;
        }
        let m = &self.models;
        m.ready.as_ref().is_some_and(|r| {
            r.number > built || (!m.moved && r.version == m.version && r.number == m.built)
        })
    }

    /// In a large fleet, whether the ready model was taken after the `built`-th: it has what
    /// changed then ([`Engine::retry_for_joins`]); in a small fleet always.
    pub(super) fn joins_modelled(&mut self, built: u64) -> bool {
        if !self.large_fleet() {
            return true;
        }
        self.models.refresh_ready();
        self.models.ready.as_ref().is_some_and(|r| r.number > built)
    }

    /// The live model operators see, and its version: in a large fleet the one the tick took
    /// last (a view takes no model of its own: in a fleet that churns every node that leaves
    /// would have made one, and its views derived, at each view, four times a second), else
    /// [`Engine::model`].
    pub(super) fn model_for_view(&mut self) -> (Arc<LiveModel>, u64) {
        if self.large_fleet() {
            if let Some(c) = &self.models.current {
                return (c.model.clone(), c.version);
            }
        }
        let m = self.model();
        (m, self.models.version)
    }

    /// How many live models were taken ([`Engine::model_has_links_since`]).
    pub(super) fn models_built(&self) -> u64 {
        self.models.built
    }

    /// The live model as a cluster document ([`Engine::model`], [`LiveModel::cluster`]).
    pub fn cluster(&mut self) -> Arc<Cluster> {
        self.model().cluster()
    }

    /// How often the live model takes new link metrics: [`LINK_MODEL_EVERY_MS`], longer with
    /// many links ([`LINK_MODEL_LINKS_PER_MS`]).
    pub(super) fn model_every_ms(&self) -> u64 {
        LINK_MODEL_EVERY_MS.max(self.links.len() as u64 / LINK_MODEL_LINKS_PER_MS)
    }

    /// In a large fleet, on the tick: the live model taken once it would change, at most every
    /// [`Engine::model_every_ms`], and its scheduler's view derived off the loop
    /// ([`Action::WarmModel`]).
    pub(super) fn warm_model(&mut self, out: &mut Vec<Action>) {
        if !self.large_fleet() {
            return;
        }
        self.models.refresh_ready();
        let due = self.now.saturating_sub(self.models.built_at) >= self.model_every_ms();
        let stale = self.models.moved
            || self
                .models
                .current
                .as_ref()
                .is_none_or(|c| c.version != self.models.version);
        if stale && due {
            self.settle_links();
            self.model();
        }
        // the model taken, once
        let Some(c) = &self.models.current else {
            return;
        };
        if self.models.warmed == Some(c.version) {
            return;
        }
        self.models.warmed = Some(c.version);
        out.push(Action::WarmModel(c.model.clone()));
    }

    /// Takes what moved into the next model if the last was built [`Engine::model_every_ms`]
    /// ago or more (a small fleet when a job takes a model, a large one on the tick).
    fn settle_links(&mut self) {
        let every = self.model_every_ms();
        if self.models.moved && self.now.saturating_sub(self.models.built_at) >= every {
            self.models.moved = false;
            self.models.version += 1;
        }
    }
}
