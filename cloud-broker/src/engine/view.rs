//! A read-only snapshot of the engine for operators ([`Engine::view`]): the nodes and their
//! state, the measured links, the applications with their placement and status, the live
//! model and the counters. Built from the engine's state as it is, no decision taken.
//!
//! Invariant: a node's state label is [`NodeState::as_str`] of the engine's own judgement, and
//! [`NODE_STATES`] lists every label (metrics show each, zero included).

use std::collections::BTreeMap;
use std::sync::Arc;

use acoa_shared::coords::{Coord, DIMS};
use acoa_shared::model::{Application, Capacity, Cluster, Usage};

use super::{Engine, NodeState, Stats};
use crate::status::{AppStatus, PlacementRecord};

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
    pub links: Vec<LinkView>,
    pub apps: Vec<AppView>,
    /// The live model the scheduler sees (online nodes, links, loopbacks filled in).
    pub cluster: Arc<Cluster>,
    /// Grows whenever `cluster` changes.
    pub model_version: u64,
    pub stats: Stats,
}

impl Engine {
    /// A snapshot for operators. `&mut` only for the live model's cache.
    pub fn view(&mut self) -> FleetView {
        let now = self.now;
        let cluster = self.cluster();
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
        let mut links: Vec<LinkView> = self
            .links
            .iter()
            .map(|(a, b, e)| LinkView {
                from: a.to_string(),
                to: b.to_string(),
                latency_ms: e.latency_ms(),
                jitter_ms: e.jitter_ms(),
                success: e.success(),
                samples: e.samples,
                age_ms: now.saturating_sub(e.at),
            })
            .collect();
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
            apps,
            cluster,
            model_version: self.models.version,
            stats: self.stats.clone(),
        }
    }
}

impl Engine {
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
