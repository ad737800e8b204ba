//! A read-only snapshot of the engine for operators ([`Engine::view`]): the nodes and their
//! state, the measured links (all of them in a small fleet, the ones the placements cross in a
//! large one), the applications with their placement and status, the live model and the
//! counters. Built from the engine's state as it is, no decision taken.
//!
//! Invariants: a node's state label is [`NodeState::as_str`] of the engine's own judgement,
//! and [`NODE_STATES`] lists every label (metrics show each, zero included). A view holds at
//! most [`VIEW_LINKS_MAX`] links or the placements' own, whatever the fleet measures, and
//! shares the live model with the placement jobs instead of copying it: at 50,000 nodes (1.6
//! million links) every link with its two names and the model as a cluster document took
//! 1.6 s of the decision loop on a new model and raised the RSS by 650 MiB (BENCHMARKS.md,
//! "What operators watch, at 50,000 nodes").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use acoa_shared::coords::{Coord, DIMS};
use acoa_shared::model::{Application, Capacity, Usage};

use super::inventory::LinkEntry;
use super::{Engine, LiveModel, NodeState, Stats};
use crate::status::{AppStatus, PlacementRecord};

/// A view lists every measured link while the fleet measures at most this many (64 nodes
/// measuring every pair measure 4,032); above, only the links the placements' channels cross.
pub const VIEW_LINKS_MAX: usize = 4_096;

/// Every node state (a test holds it to the enum).
pub const NODE_STATES: [NodeState; 3] =
    [NodeState::Online, NodeState::Unreachable, NodeState::Lost];

/// One node of the inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub datacenter: String,
    pub layer: String,
    pub arch: String,
    /// [`NodeState::as_str`] of one of [`NODE_STATES`].
    pub state: &'static str,
    pub capacity: Capacity,
    pub usage: Usage,
    /// Milliseconds since its last report.
    pub silent_ms: u64,
    /// Its network coordinate as last reported (issue 16), if any.
    pub coordinate: Option<Coord<DIMS>>,
}

/// A directed link as its source node last measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkView {
    pub from: String,
    pub to: String,
    pub latency_ms: f64,
    pub jitter_ms: f64,
    /// Share of probes answered, 0 to 1.
    pub success: f64,
    pub samples: u16,
    /// Milliseconds since it came.
    pub age_ms: u64,
}

/// An application, its placement and its status document.
#[derive(Debug, Clone, PartialEq)]
pub struct AppView {
    pub name: String,
    pub application: Application,
    pub placement: Option<PlacementRecord>,
    pub status: Option<AppStatus>,
    /// Per component, the service time its placed copy's workload reports, ms (absent: none).
    pub service_ms: BTreeMap<String, f64>,
}

/// The engine as operators see it at one moment.
#[derive(Debug, Clone)]
pub struct FleetView {
    /// The engine's clock (milliseconds).
    pub at_ms: u64,
    pub nodes: Vec<NodeView>,
    /// Every measured link while there are at most [`VIEW_LINKS_MAX`], else the links the
    /// placements' channels cross; in (from, to) order.
    pub links: Vec<LinkView>,
    /// How many links are measured in all (`links` may list fewer).
    pub links_measured: usize,
    pub apps: Vec<AppView>,
    /// The live model the scheduler sees (online nodes, links, loopbacks filled in), shared
    /// with the placement jobs.
    pub model: Arc<LiveModel>,
    /// Grows whenever `model` changes (the version it was taken at).
    pub model_version: u64,
    pub stats: Stats,
}

impl Engine {
    /// A snapshot for operators. `&mut` only for the live model's cache.
    pub fn view(&mut self) -> FleetView {
        let now = self.now;
        let (model, model_version) = self.model_for_view();
        let nodes = self
            .nodes
            .values()
            .map(|n| NodeView {
                name: n.info.name.clone(),
                datacenter: n.info.datacenter.clone(),
                layer: n.info.layer.to_string(),
                arch: n.info.arch.clone(),
                state: n.state.as_str(),
                capacity: n.info.capacity,
                usage: n.usage,
                silent_ms: now.saturating_sub(n.last_seen),
                coordinate: self.coordinate(&n.info.name),
            })
            .collect();
        let link = |a: &str, b: &str, e: &LinkEntry| LinkView {
            from: a.to_string(),
            to: b.to_string(),
            latency_ms: e.latency_ms(),
            jitter_ms: e.jitter_ms(),
            success: e.success(),
            samples: e.samples,
            age_ms: now.saturating_sub(e.at()),
        };
        let links_measured = self.links.len();
        let mut links: Vec<LinkView> = if links_measured <= VIEW_LINKS_MAX {
            self.links.iter().map(|(a, b, e)| link(a, b, e)).collect()
        } else {
            self.placed_links()
                .into_iter()
                .filter_map(|(a, b)| Some(link(a, b, self.links.get(a, b)?)))
                .collect()
        };
        links.sort_by(|x, y| (&x.from, &x.to).cmp(&(&y.from, &y.to)));
        let apps = self
            .apps
            .iter()
            .map(|(name, a)| AppView {
                name: name.clone(),
                application: a.rec.application.clone(),
                placement: a.rec.placement.clone(),
                status: self.status_of(name),
                service_ms: a
                    .rec
                    .placement
                    .iter()
                    .flat_map(|p| &p.assignment)
                    .filter_map(|(c, node)| {
                        let ms = self.measured.service.get(node, &a.rec.container_name(c))?;
                        Some((c.clone(), ms))
                    })
                    .collect(),
            })
            .collect();
        FleetView {
            at_ms: now,
            nodes,
            links,
            links_measured,
            apps,
            model,
            model_version,
            stats: self.stats.clone(),
        }
    }
}

impl Engine {
    /// The pairs of nodes the placements' channels cross (a channel between two components
    /// on one node: that node's loopback).
    fn placed_links(&self) -> BTreeSet<(&str, &str)> {
        let mut pairs = BTreeSet::new();
        for a in self.apps.values() {
            let Some(p) = &a.rec.placement else { continue };
            for c in &a.rec.application.channels {
                if let (Some(x), Some(y)) = (p.assignment.get(&c.from), p.assignment.get(&c.to)) {
                    pairs.insert((x.as_str(), y.as_str()));
                }
            }
        }
        pairs
    }

    /// Each application's current assignment (component → node), if placed: cheap enough to
    /// look at after every control event.
    pub fn assignments(
        &self,
    ) -> impl Iterator<Item = (&str, Option<&std::collections::BTreeMap<String, String>>)> {
        self.apps
            .iter()
            .map(|(n, a)| (n.as_str(), a.rec.placement.as_ref().map(|p| &p.assignment)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_state_is_listed() {
        // a new state fails to compile here until it is listed
        for s in NODE_STATES {
            match s {
                NodeState::Online | NodeState::Unreachable | NodeState::Lost => {}
            }
        }
        assert_eq!(NODE_STATES.len(), 3);
    }
}
