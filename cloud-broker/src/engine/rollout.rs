//! What the nodes are told and what is told about the applications: each node's desired
//! state (the containers the placements put there), the nodes' actual states, and the
//! application status documents.
//!
//! Invariants: a node's desired state changes only when its containers do, its generation then
//! grows by one, and it is persisted before it is published (signed, retained); a status
//! document is published only when its text changes.

use std::collections::BTreeMap;

use acoa_shared::topics;
use acoa_shared::wire::{self, ActualState, ContainerState, Message, MAX_CONTAINERS};
use tracing::{error, info};

use super::{Action, Engine, NodeState};
use crate::records::{ContainerDoc, DesiredDoc, PersistOp};
use crate::status::{AppStatus, NotRunning};

impl Engine {
    pub(super) fn desired_containers(&self, node: &str) -> Vec<ContainerDoc> {
        let mut v = Vec::new();
        for (name, a) in &self.apps {
            let Some(p) = &a.rec.placement else { continue };
            // a rollout decides where the components it changes run
            let r = a.history.rollout.as_ref().filter(|r| r.is_active());
            for (c, n) in &p.assignment {
                if n != node || r.is_some_and(|r| r.step(c).is_some()) {
                    continue;
                }
                let Some(comp) = a.rec.application.component(c) else {
                    continue;
                };
                match ContainerDoc::named(name, comp, &a.rec.container_name(c)) {
                    Ok(s) => v.push(s),
                    Err(e) => error!("container {name}.{c} cannot be described: {e}"),
                }
            }
            if let Some(r) = r {
                v.extend(r.containers_on(node));
            }
        }
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub(super) fn update_desired(&mut self, node: &str, out: &mut Vec<Action>) {
        if self.node_state(node) == Some(NodeState::Unreachable) {
            return; // held until it returns (disconnect)
        }
        let mut specs = self.desired_containers(node);
        if specs.len() > MAX_CONTAINERS {
            error!(
                "node {node} is given {} containers, more than the {MAX_CONTAINERS} a desired state holds; the rest are left out",
                specs.len()
            );
            specs.truncate(MAX_CONTAINERS);
        }
        let cur = self.desired.get(node);
        if cur.is_some_and(|d| d.containers == specs) {
            return;
        }
        if cur.is_none() && specs.is_empty() {
            return;
        }
        let d = DesiredDoc {
            node: node.into(),
            generation: cur.map(|d| d.generation).unwrap_or(0) + 1,
            term: self.term,
            containers: specs,
        };
        match d
            .to_wire()
            .and_then(|w| wire::encode(&Message::DesiredState(w), Some(&self.key)))
        {
            Ok(bytes) => {
                out.push(Action::Persist(PersistOp::PutDesired(Box::new(d.clone()))));
                out.push(Action::Publish {
                    topic: topics::desired(node),
                    payload: bytes,
                    retain: true,
                });
                self.stats.desired_published += 1;
                info!(
                    "desired state {} for node {node}: {}",
                    d.generation,
                    if d.containers.is_empty() {
                        "nothing".to_string()
                    } else {
                        d.containers
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                );
                let old = self.spec_since.remove(node).unwrap_or_default();
                let since = d
                    .containers
                    .iter()
                    .map(|c| {
                        let kept = cur.and_then(|cur| {
                            let same = cur.containers.iter().any(|o| o == c);
                            same.then(|| old.get(&c.name).copied().unwrap_or(cur.generation))
                        });
                        (c.name.clone(), kept.unwrap_or(d.generation))
                    })
                    .collect();
                self.spec_since.insert(node.into(), since);
                self.desired.insert(node.into(), d);
            }
            Err(e) => error!("desired state for node {node} cannot be encoded: {e}"),
        }
    }

    /// The generation from which what `node` reports about its container `name` is about the
    /// spec it was last given (its node's current generation when not known).
    pub(super) fn spec_since(&self, node: &str, name: &str) -> u64 {
        self.spec_since
            .get(node)
            .and_then(|m| m.get(name))
            .copied()
            .unwrap_or_else(|| self.desired.get(node).map_or(0, |d| d.generation))
    }

    pub(super) fn on_actual(&mut self, a: ActualState, out: &mut Vec<Action>) {
        self.stats.actuals += 1;
        let node = a.node.to_string();
        if !self.nodes.get(&node).is_some_and(|n| n.online) {
            return;
        }
        if self.actual.get(&node) == Some(&a) {
            return;
        }
        self.actual.insert(node.clone(), a);
        if self.returning.contains_key(&node) {
            self.settle_return(&node, out);
        }
        self.drive_rollouts_on(&node, out);
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

    pub(super) fn status_of(&self, app: &str) -> Option<AppStatus> {
        let mut st = self.placement_status(app)?;
        self.add_revisions(app, &mut st);
        Some(st)
    }

    /// The status without its revisions.
    fn placement_status(&self, app: &str) -> Option<AppStatus> {
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
        let mut health = BTreeMap::new();
        for (c, n) in &p.assignment {
            let (n, cname) = &self.serving_copy(app, c, n);
            let reported = self.actual.get(n);
            // a report of an earlier spec under this name (a definition changed in place) is
            // not the container's: it is pending until its node reports on its spec
            let stale = reported.is_some_and(|s| s.generation < self.spec_since(n, cname));
            let seen = reported
                .filter(|_| !stale)
                .and_then(|s| s.containers.iter().find(|x| x.name.as_str() == cname));
            if let Some(h) = seen.and_then(|x| x.health) {
                health.insert(c.clone(), h.as_str().to_owned());
            }
            let st = match seen {
                Some(x) => Some((x.state, x.error.to_string())),
                None if stale && self.is_online(n) => {
                    Some((ContainerState::Pending, String::new()))
                }
                None => None,
            };
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
                    state: match self.node_state(n) {
                        Some(NodeState::Online) => "unknown",
                        Some(NodeState::Unreachable) => "node unreachable",
                        _ => "node lost",
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
        st.disconnect = self.disconnect_notes(app);
        st.health = health;
        st.links = self.placement_links(app, &p.assignment);
        Some(st)
    }

    pub(super) fn update_status(&mut self, app: &str, out: &mut Vec<Action>) {
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

    pub(super) fn send_status(&mut self, app: &str, st: &AppStatus, out: &mut Vec<Action>) {
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
}
