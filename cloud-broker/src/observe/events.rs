//! The recent operator events (a node's state changed, an application was placed or moved,
//! its state changed, a commit collided), in a bounded ring: the newest [`EVENTS_KEPT`].

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::engine::view::{FleetView, NodeView};
use crate::engine::Engine;
use crate::unix_ms;

/// How many operator events are kept.
pub const EVENTS_KEPT: usize = 200;

/// One operator event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpEvent {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// `node`, `placement`, `application` or `collision`.
    pub kind: &'static str,
    pub text: String,
}

/// An application placed for the first time or moved.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementChange {
    pub app: String,
    /// Placed for the first time (else moved).
    pub first: bool,
    pub reason: &'static str,
}

/// The ring and what it was last told, to see changes.
#[derive(Debug, Default)]
pub(super) struct Ring {
    events: VecDeque<OpEvent>,
    assignments: BTreeMap<String, BTreeMap<String, String>>,
    node_states: BTreeMap<String, &'static str>,
    app_states: BTreeMap<String, String>,
    collisions: u64,
    started: bool,
}

/// Each node's state, by name.
fn states_of(nodes: &[NodeView]) -> BTreeMap<String, &'static str> {
    nodes.iter().map(|n| (n.name.clone(), n.state)).collect()
}

/// The names `old` has and `now` has not.
fn gone<V, W>(old: &BTreeMap<String, V>, now: &BTreeMap<String, W>) -> Vec<String> {
    old.keys()
        .filter(|n| !now.contains_key(*n))
        .cloned()
        .collect()
}

fn placed_text(a: &BTreeMap<String, String>) -> String {
    a.iter()
        .map(|(c, n)| format!("{c} on {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Ring {
    fn push(&mut self, kind: &'static str, text: String) {
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(OpEvent {
            at_unix_ms: unix_ms(),
            kind,
            text,
        });
    }

    /// The events kept, oldest first.
    pub(super) fn recent(&self) -> Vec<OpEvent> {
        self.events.iter().cloned().collect()
    }

    /// The applications placed or moved since the last call (`reason`: why).
    pub(super) fn placements(
        &mut self,
        engine: &Engine,
        reason: &'static str,
    ) -> Vec<PlacementChange> {
        let mut changes = vec![];
        let mut seen = BTreeMap::new();
        for (app, a) in engine.assignments() {
            let Some(a) = a else { continue };
            let before = self.assignments.get(app);
            if before != Some(a) {
                let first = before.is_none();
                let text = match before {
                    None => format!("{app} placed ({reason}): {}", placed_text(a)),
                    Some(b) => {
                        let moved: Vec<String> = a
                            .iter()
                            .filter(|(c, n)| b.get(*c) != Some(*n))
                            .map(|(c, n)| match b.get(c) {
                                Some(old) => format!("{c} {old} → {n}"),
                                None => format!("{c} on {n}"),
                            })
                            .collect();
                        format!("{app} moved ({reason}): {}", moved.join(", "))
                    }
                };
                self.push("placement", text);
                changes.push(PlacementChange {
                    app: app.to_string(),
                    first,
                    reason,
                });
            }
            seen.insert(app.to_string(), a.clone());
        }
        self.assignments = seen;
        changes
    }

    /// Notes each node whose state changed, that came or that was removed since the last
    /// view: O(n log n) (a view of 50,000 nodes is compared with the last one several times a
    /// second; it was a scan of the whole view for each node, 1.25 billion comparisons).
    fn nodes_changed(&mut self, nodes: &[NodeView]) {
        let now = states_of(nodes);
        for (name, state) in &now {
            match self.node_states.get(name) {
                Some(s) if s == state => {}
                Some(s) => {
                    let text = format!("node {name} {s} → {state}");
                    self.push("node", text);
                }
                None => self.push("node", format!("node {name} {state}")),
            }
        }
        for name in gone(&self.node_states, &now) {
            self.push("node", format!("node {name} removed"));
        }
        self.node_states = now;
    }

    /// Notes what changed in nodes, applications and collisions since the last view.
    pub(super) fn states(&mut self, v: &FleetView) {
        if !self.started {
            self.started = true;
            let online = v.nodes.iter().filter(|n| n.state == "online").count();
            self.push(
                "node",
                format!(
                    "watching {} nodes ({online} online) and {} applications",
                    v.nodes.len(),
                    v.apps.len()
                ),
            );
            self.node_states = states_of(&v.nodes);
        } else {
            self.nodes_changed(&v.nodes);
        }
        let mut apps = BTreeMap::new();
        for a in &v.apps {
            let st = a.status.as_ref().map_or("accepted", |s| s.state.as_str());
            if self.app_states.get(&a.name).map(String::as_str) != Some(st) {
                let why = a
                    .status
                    .as_ref()
                    .and_then(|s| s.reason.clone())
                    .filter(|_| st != "running")
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                self.push("application", format!("{} {st}{why}", a.name));
            }
            apps.insert(a.name.clone(), st.to_string());
        }
        for name in gone(&self.app_states, &apps) {
            self.push("application", format!("{name} deleted"));
        }
        self.app_states = apps;
        if v.stats.collisions > self.collisions {
            let n = v.stats.collisions - self.collisions;
            self.push(
                "collision",
                format!(
                    "{n} placement commit{} collided ({} so far)",
                    if n == 1 { "" } else { "s" },
                    v.stats.collisions
                ),
            );
        }
        self.collisions = v.stats.collisions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest() {
        let mut r = Ring::default();
        for i in 0..EVENTS_KEPT + 5 {
            r.push("node", format!("e{i}"));
        }
        let e = r.recent();
        assert_eq!(e.len(), EVENTS_KEPT);
        assert_eq!(e[0].text, "e5");
        assert_eq!(e.last().unwrap().text, format!("e{}", EVENTS_KEPT + 4));
    }

    fn node(i: usize, state: &'static str) -> NodeView {
        NodeView {
            name: format!("e{i:05}"),
            datacenter: format!("train{}", i / 10),
            layer: "edge".into(),
            arch: "aarch64".into(),
            state,
            capacity: Default::default(),
            usage: Default::default(),
            silent_ms: 0,
            coordinate: None,
        }
    }

    /// A 50,000-node view against the last: the node that changed, the one that came and the
    /// one removed are noted, nothing else (when each node was looked for in the whole view,
    /// the removed ones alone took 3.3 s in a release build).
    #[test]
    fn a_large_fleets_node_changes_are_noted_one_each() {
        let mut r = Ring::default();
        let mut nodes: Vec<NodeView> = (0..50_000).map(|i| node(i, "online")).collect();
        r.node_states = states_of(&nodes);
        nodes[7].state = "unreachable";
        nodes.remove(20_000);
        nodes.push(node(50_000, "online"));
        r.nodes_changed(&nodes);
        let texts: Vec<String> = r.recent().into_iter().map(|e| e.text).collect();
        assert_eq!(
            texts,
            [
                "node e00007 online → unreachable",
                "node e50000 online",
                "node e20000 removed"
            ]
        );
        r.nodes_changed(&nodes);
        assert_eq!(r.recent().len(), 3, "nothing new");
    }
}
