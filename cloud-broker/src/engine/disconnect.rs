//! Node states in the engine and the applications' disconnect policy: nodes are judged on each
//! tick from the evidence ([`super::liveness`]); a lost node's components are placed elsewhere
//! at once (`inventory::lose`); an unreachable node keeps its components for the application's
//! `disconnect.tolerate_s`, after which those other nodes can host are placed elsewhere and those
//! only the cut-off nodes can host stay; its desired state is held meanwhile (it could not
//! receive it, and it must not stop a copy before the winner of its return is known). When it
//! returns, on its first actual state, each component that runs twice is settled by
//! `disconnect.on_return` (the original, the replacement, or the better score), and the loser's
//! desired state drops it only if the winner runs.
//!
//! Invariant: no I/O; only nodes in state `Unreachable` hold their desired states.

use std::collections::BTreeMap;
use std::sync::Arc;

use acoa_shared::model::{self, OnReturn};
use acoa_shared::wire::{ContainerState, MAX_CONTAINERS};
use tracing::{info, warn};

use super::inventory::LiveNode;
use super::jobs::Job;
use super::liveness::{self, Liveness, NodeState, Windows};
use super::loopback::Note;
use super::{ms, Action, AppState, Engine};
use crate::sched;
use crate::status::PlacementRecord;

/// Why a component stays on an unreachable node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stay {
    /// The application's `disconnect.tolerate_s` is not over.
    Tolerated,
    /// No node the control plane hears can host it.
    OnlyThere,
    /// A channel links it to a component that stays for good: its path stays inside the
    /// cut-off nodes.
    PathInside,
}

impl Stay {
    fn for_good(self) -> bool {
        self != Stay::Tolerated
    }

    fn as_str(self) -> &'static str {
        match self {
            Stay::Tolerated => "tolerated",
            Stay::OnlyThere => "no other node can host it",
            Stay::PathInside => "its path stays in the cut-off nodes",
        }
    }
}

/// A node as the scheduler's model shows it.
pub(super) fn model_node(n: &LiveNode) -> model::Node {
    model::Node {
        name: n.info.name.clone(),
        datacenter: n.info.datacenter.clone(),
        layer: n.info.layer,
        arch: n.info.arch.clone(),
        hardware: n.info.hardware.clone(),
        software: n.info.software.clone(),
        capacity: n.info.capacity,
        usage: n.usage,
        // the scheduler does not read it (the peer lists do, from `NodeInfo`): the jobs'
        // snapshots stay as they were (`jobs::VERSION`)
        position: None,
    }
}

impl Engine {
    /// The windows of judgment, each longer by how far behind the control plane hears now
    /// ([`super::loopback`]): a silence the control plane's own backlog explains is none.
    pub(super) fn windows(&self) -> Windows {
        let behind = self.loopback.behind(self.now);
        Windows {
            silence_ms: self.cfg.node_timeout_ms + behind,
            evidence_ms: self.cfg.evidence_ms + behind,
            together_ms: self.cfg.evidence_ms / 2,
        }
    }

    /// Publishes the loopback due, and says when the control plane falls behind or catches up.
    pub(super) fn tick_loopback(&mut self, out: &mut Vec<Action>) {
        if let Some(seq) = self.loopback.due(self.now) {
            out.push(Action::Loopback {
                nonce: self.cfg.loopback_nonce,
                seq,
            });
        }
        match self.loopback.note(self.now) {
            Some(Note::Behind { behind_ms }) => warn!(
                "the control plane hears {} late (its loopback through the broker is not back): silence is judged that much later, at most {} later",
                ms(behind_ms),
                ms(self.cfg.node_timeout_ms)
            ),
            Some(Note::CaughtUp { worst_ms }) => info!(
                "the control plane hears on time again (its loopback is back; it was {} late at worst)",
                ms(worst_ms)
            ),
            None => {}
        }
    }

    /// A verified presence of `node`'s current connection. `offline` (its last will, or its
    /// goodbye) makes it silent at once for the evidence; `online` says nothing a signed report
    /// does not say better.
    pub(super) fn on_presence(&mut self, node: &str, online: bool) {
        if online || matches!(self.cfg.liveness, Liveness::Timer { .. }) {
            return;
        }
        let now = self.now;
        if !self.is_online(node) {
            return;
        }
        if let Some(h) = self.evidence.heard_mut(node) {
            if h.will_at.is_none() {
                h.will_at = Some(now);
                info!(
                    "node {node}: the broker lost its connection (signed last will), last heard {} ago",
                    ms(now.saturating_sub(h.last_heard))
                );
            }
        }
    }

    /// Judges every node not lost; acts on the changes; settles returns that waited too long
    /// for an actual state.
    pub(super) fn judge_nodes(&mut self, out: &mut Vec<Action>) {
        let now = self.now;
        let w = self.windows();
        // Only a silent node can change state (a node heard within the silence window is
        // online, and an online verdict changes nothing); under the timer rule every node is
        // judged by its silence alone. Every verdict first (then the actions, which change the
        // engine's state but not the evidence the verdicts read), in the nodes' name order:
        // the actions are deterministic.
        let timer = matches!(self.cfg.liveness, liveness::Liveness::Timer { .. });
        let unreachable_too =
            now.saturating_sub(self.last_unreachable_judged) >= super::UNREACHABLE_JUDGED_EVERY_MS;
        if unreachable_too {
            self.last_unreachable_judged = now;
        }
        let mut judged: Vec<&str> = if timer {
            self.nodes.keys().map(String::as_str).collect()
        } else {
            self.evidence.silent_nodes(now, &w).collect()
        };
        judged.sort_unstable();
        let mut computed = 0;
        let verdicts: Vec<(String, NodeState, liveness::Verdict)> = judged
            .iter()
            .filter_map(|n| {
                // a lost node: only a signed report brings it back
                let state = self.nodes.get(*n)?.state;
                if state == NodeState::Lost || (state == NodeState::Unreachable && !unreachable_too)
                {
                    return None;
                }
                computed += 1;
                let v = liveness::classify(&self.evidence, n, now, self.cfg.liveness, &w)?;
                Some((n.to_string(), state, v))
            })
            .collect();
        self.stats.judged += computed;
        let mut lost = Vec::new();
        for (n, state, v) in verdicts {
            match (state, v.state) {
                (_, NodeState::Lost) => {
                    self.lose(&n, &v.evidence, out);
                    lost.push(n);
                }
                (NodeState::Online, NodeState::Unreachable) => {
                    self.set_unreachable(&n, &v.evidence, out)
                }
                _ => {}
            }
        }
        self.drop_links_of(&lost);
        let late: Vec<String> = self
            .returning
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) > self.cfg.evidence_ms)
            .map(|(n, _)| n.clone())
            .collect();
        for n in late {
            info!(
                "node {n}: no actual state since it returned; settling its copies on what is known"
            );
            self.settle_return(&n, out);
        }
    }

    fn set_unreachable(&mut self, node: &str, evidence: &str, out: &mut Vec<Action>) {
        let now = self.now;
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        n.online = false;
        n.state = NodeState::Unreachable;
        n.unreachable_since = Some(now);
        self.node_left(node);
        let mut held = vec![];
        let mut affected = vec![];
        for (name, a) in &self.apps {
            let comps: Vec<&str> = a
                .rec
                .placement
                .iter()
                .flat_map(|p| p.assignment.iter())
                .filter(|(_, n)| n.as_str() == node)
                .map(|(c, _)| c.as_str())
                .collect();
            if !comps.is_empty() {
                held.push(format!(
                    "{name} ({}) for {} s",
                    comps.join(", "),
                    a.rec.application.disconnect.tolerate_s
                ));
                affected.push(name.clone());
            }
        }
        if held.is_empty() {
            warn!("node {node} unreachable: {evidence}");
        } else {
            warn!(
                "node {node} unreachable: {evidence}; its components stay: {}",
                held.join("; ")
            );
        }
        for app in affected {
            self.update_status(&app, out);
        }
    }

    /// Whether component `comp` of `a` may stay on `node` though the control plane does not
    /// hear it ([`Engine::staying`]).
    pub(super) fn tolerated(&self, a: &AppState, comp: &str, node: &str) -> bool {
        a.rec
            .placement
            .as_ref()
            .is_some_and(|p| p.assignment.get(comp).is_some_and(|n| n == node))
            && self.staying(a).contains_key(comp)
    }

    /// The components of `a` that stay on unreachable nodes, with the reason: the node's
    /// tolerance is not over; or no node the control plane hears can host the component; or a
    /// channel links it to a component that stays on a cut-off node for one of these two
    /// reasons (its path stays inside the cut-off group: a copy outside would serve nothing).
    pub(super) fn staying(&self, a: &AppState) -> BTreeMap<String, Stay> {
        let mut stay = BTreeMap::new();
        let Some(p) = &a.rec.placement else {
            return stay;
        };
        let tolerate_ms = a.rec.application.disconnect.tolerate_s.saturating_mul(1000);
        let mut cut: BTreeMap<&str, &str> = BTreeMap::new();
        for (c, n) in &p.assignment {
            let Some(node) = self.nodes.get(n) else {
                continue;
            };
            if node.state != NodeState::Unreachable {
                continue;
            }
            cut.insert(c, n);
            let since = node.unreachable_since.unwrap_or(self.now);
            if self.only_cut_off_hosts(a, c) {
                stay.insert(c.clone(), Stay::OnlyThere);
            } else if self.now.saturating_sub(since) < tolerate_ms {
                stay.insert(c.clone(), Stay::Tolerated);
            }
        }
        // a path that stays inside the cut-off nodes keeps its components there
        loop {
            let mut more = vec![];
            for ch in &a.rec.application.channels {
                for (x, y) in [(&ch.from, &ch.to), (&ch.to, &ch.from)] {
                    let for_good = |c: &str| stay.get(c).is_some_and(|s: &Stay| s.for_good());
                    if for_good(x) && cut.contains_key(y.as_str()) && !for_good(y) {
                        more.push(y.clone());
                    }
                }
            }
            if more.is_empty() {
                break;
            }
            for c in more {
                stay.insert(c, Stay::PathInside);
            }
        }
        stay
    }

    /// No node the control plane hears satisfies `comp`'s requirements (pinned to the cut-off
    /// nodes' hardware, datacenter or by `requires.node`).
    fn only_cut_off_hosts(&self, a: &AppState, comp: &str) -> bool {
        let Some(c) = a.rec.application.component(comp) else {
            return false;
        };
        !self
            .nodes
            .values()
            .filter(|n| n.online)
            .any(|n| model_node(n).satisfies(&c.requires))
    }

    /// Whether a component of `app` is on an unreachable node.
    pub(super) fn touches_unreachable(&self, app: &str) -> bool {
        self.apps
            .get(app)
            .and_then(|a| a.rec.placement.as_ref())
            .is_some_and(|p| {
                p.assignment.values().any(|n| {
                    self.nodes
                        .get(n)
                        .is_some_and(|n| n.state == NodeState::Unreachable)
                })
            })
    }

    /// A placement computation of an application with components on unreachable nodes: those
    /// tolerated there stay (pinned, their nodes in the job's model with room for them only),
    /// the others are placed elsewhere.
    pub(super) fn hold_unreachable(&self, job: &mut Job) {
        let Some(a) = self.apps.get(&job.app) else {
            return;
        };
        let Some(cur) = &job.current else {
            return;
        };
        let staying = self.staying(a);
        let mut stay: BTreeMap<String, String> = BTreeMap::new();
        for (c, n) in cur {
            if self
                .nodes
                .get(n)
                .is_some_and(|x| x.state == NodeState::Unreachable)
            {
                job.keep.remove(c);
                if staying.contains_key(c) {
                    stay.insert(c.clone(), n.clone());
                }
            }
        }
        if stay.is_empty() {
            return;
        }
        let mut app = (*job.application).clone();
        let mut extra = vec![];
        for (c, n) in &stay {
            if let Some(comp) = app.components.iter_mut().find(|x| &x.name == c) {
                comp.requires.node = Some(n.clone());
            }
            job.keep.insert(c.clone(), n.clone());
            if job.model.node(n).is_none() && !extra.iter().any(|x: &model::Node| &x.name == n) {
                // with its measured links and its loopback
                extra.push(model_node(&self.nodes[n]));
            }
            let staying = stay.values().filter(|x| *x == n).count() as u32;
            job.containers
                .insert(n.clone(), (MAX_CONTAINERS as u32).saturating_sub(staying));
        }
        if !extra.is_empty() {
            job.model = Arc::new(job.model.with_nodes(extra));
        }
        job.application = Arc::new(app);
    }

    /// `node` was unreachable and reports again: its copies are settled on its next actual
    /// state (what it runs after the partition).
    pub(super) fn node_returned(&mut self, node: &str, _out: &mut Vec<Action>) {
        info!("node {node} is back; what it runs is settled on its next actual state");
        self.returning.insert(node.to_string(), self.now);
    }

    fn runs(&self, node: &str, container: &str) -> bool {
        self.actual.get(node).is_some_and(|s| {
            s.containers
                .iter()
                .any(|x| x.name.as_str() == container && x.state == ContainerState::Running)
        })
    }

    /// Settles the copies of a returned node: each component its held desired state names but
    /// the placement put elsewhere meanwhile runs twice; `disconnect.on_return` picks the copy
    /// that stays, provided it runs (else the other one stays), and the loser's desired state
    /// drops it. Then the node catches up with its latest desired state (unchanged containers
    /// are not restarted: the agent keeps a container whose spec is the same).
    pub(super) fn settle_return(&mut self, node: &str, out: &mut Vec<Action>) {
        self.returning.remove(node);
        let held: Vec<(String, String)> = self
            .desired
            .get(node)
            .map(|d| {
                d.containers
                    .iter()
                    .map(|c| (c.app.clone(), c.component.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // scored only when a copy runs elsewhere: thousands of nodes return in a large fleet's
        // churn, each a view derived on the loop when every return took one
        let copies = held.iter().any(|(app, comp)| {
            self.apps
                .get(app)
                .and_then(|a| a.rec.placement.as_ref()?.assignment.get(comp))
                .is_some_and(|other| other != node)
        });
        let infra = copies.then(|| self.model_having(node).infra());
        let mut changed: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (app, comp) in held {
            let Some(a) = self.apps.get(&app) else {
                continue;
            };
            let Some(p) = &a.rec.placement else {
                continue;
            };
            let Some(other) = p.assignment.get(&comp).cloned() else {
                continue;
            };
            let (false, Some(infra)) = (other == node, &infra) else {
                continue;
            };
            let cname = format!("{app}.{comp}");
            let (orig, repl) = (self.runs(node, &cname), self.runs(&other, &cname));
            let policy = a.rec.application.disconnect.on_return;
            let mut back = p.assignment.clone();
            back.insert(comp.clone(), node.to_string());
            let (original_wins, why) = match policy {
                OnReturn::Original => (true, "on_return: original".to_string()),
                OnReturn::Replacement => (false, "on_return: replacement".to_string()),
                OnReturn::Best => {
                    let app_def = &self.apps[&app].rec.application;
                    // scored together: they compare with each other
                    let mut s =
                        sched::score_all_on(infra, app_def, &[back.clone(), p.assignment.clone()])
                            .into_iter()
                            .map(|s| s.map(|s| s.0));
                    let (s_back, s_now) = (s.next().expect("two"), s.next().expect("two"));
                    match (s_back, s_now) {
                        (Ok(b), Ok(n)) => (
                            b >= n,
                            format!("on_return: best (original {b:.6}, replacement {n:.6})"),
                        ),
                        _ => (
                            false,
                            "on_return: best, the original cannot be scored".into(),
                        ),
                    }
                }
            };
            let (original_wins, why) = match (original_wins, orig, repl) {
                (true, false, true) => (false, format!("{why}, but the original does not run")),
                (false, true, false) => {
                    (true, format!("{why}, but the replacement does not run yet"))
                }
                (w, _, _) => (w, why),
            };
            let decision = if original_wins {
                format!("{comp}: the original on {node} stays, the copy on {other} stops ({why})")
            } else {
                format!("{comp}: the replacement on {other} stays, the original on {node} stops ({why})")
            };
            info!("application {app} after {node} returned: {decision}");
            if original_wins {
                let current = p.assignment.clone();
                changed
                    .entry(app.clone())
                    .or_insert(current)
                    .insert(comp, node.to_string());
            }
            if let Some(a) = self.apps.get_mut(&app) {
                a.returned = Some(decision);
            }
        }
        for (app, assignment) in changed {
            let Some(a) = self.apps.get(&app) else {
                continue;
            };
            let Some(old) = a.rec.placement.clone() else {
                continue;
            };
            let Some(infra) = &infra else {
                continue;
            };
            let (score, criteria) = match sched::score_on(infra, &a.rec.application, &assignment) {
                Ok((s, g)) => (s, super::grades(&g)),
                Err(_) => (old.score, old.criteria.clone()),
            };
            let rec = PlacementRecord {
                assignment,
                score,
                criteria,
                feasible_deployments: old.feasible_deployments,
            };
            self.apply_placement(&app, rec, &old.assignment, out);
        }
        self.update_desired(node, out);
        let apps: Vec<String> = self.apps.keys().cloned().collect();
        for app in apps {
            if self.apps[&app].returned.is_some() {
                self.update_status(&app, out);
            }
        }
    }

    /// The disconnect lines of an application's status: components waiting on unreachable
    /// nodes and the last decision on a return.
    pub(super) fn disconnect_notes(&self, app: &str) -> Vec<String> {
        let Some(a) = self.apps.get(app) else {
            return vec![];
        };
        let mut notes = vec![];
        let staying = self.staying(a);
        for (c, n) in a.rec.placement.iter().flat_map(|p| p.assignment.iter()) {
            let Some(why) = staying.get(c) else {
                continue;
            };
            let tol = a.rec.application.disconnect.tolerate_s;
            notes.push(if *why == Stay::Tolerated {
                format!(
                    "{c} on {n}: node unreachable; tolerated for {tol} s, then placed elsewhere"
                )
            } else {
                format!("{c} on {n}: node unreachable; stays ({})", why.as_str())
            });
        }
        notes.extend(a.returned.clone());
        notes
    }
}
