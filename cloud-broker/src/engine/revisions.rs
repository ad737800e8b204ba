//! The engine's side of revisions and rollouts: every accepted definition is a numbered
//! revision ([`History`]); a placed application whose new revision has an `update` block
//! gets a [`Rollout`] ([`update`](super::update)) instead of new desired states everywhere at
//! once; the rollout is driven on every tick and actual state, with what the control plane
//! sees ([`World`]); when it ends the application record follows (done: the new container
//! names stay; rolled back: the old record comes back and its definition is published again,
//! retained, so that the broker's definition is the one that runs); `cloud-broker rollback`
//! requests are handled here.
//!
//! Invariants: the history (with the rollout) is persisted before any desired state that
//! depends on it; a definition that arrives during a rollout waits for its end (unless it is
//! the revision the rollout started from: that rolls it back).

use std::collections::BTreeSet;

use acoa_shared::topics;
use tracing::{info, warn};

use super::update::{PathQos, Phase, Rollout, Seen, StepState, World};
use super::{commit::reservations_of, Action, Engine, NodeState, LOOPBACK_LATENCY_MS};
use crate::records::{AppRecord, History, PersistOp};
use crate::status::{AppStatus, RevisionLine};

impl Engine {
    /// The history of a restored application, or one revision made of its record (stores
    /// written before revisions).
    pub(super) fn restored_history(rec: &AppRecord, h: Option<History>) -> History {
        h.unwrap_or_else(|| {
            let mut h = History::new(&rec.name);
            h.current = h.push(&rec.digest, &rec.definition);
            h
        })
    }

    /// The rollout of `app` that still changes something.
    fn active_rollout(&self, app: &str) -> Option<&Rollout> {
        self.apps
            .get(app)
            .and_then(|a| a.history.rollout.as_ref())
            .filter(|r| r.is_active())
    }

    /// Whether `app` goes back to its old revision now.
    pub(super) fn rolling_back(&self, app: &str) -> bool {
        self.active_rollout(app)
            .is_some_and(|r| matches!(r.phase, Phase::RollingBack { .. }))
    }

    /// Whether `app` has a rollout that still changes something.
    pub(super) fn rolling(&self, app: &str) -> bool {
        self.active_rollout(app).is_some()
    }

    pub(super) fn put_history(&self, app: &str, out: &mut Vec<Action>) {
        if let Some(a) = self.apps.get(app) {
            out.push(Action::Persist(PersistOp::PutHistory(Box::new(
                a.history.clone(),
            ))));
        }
    }

    /// A definition `d` of `app` that does not start anything now: `true` when it was handled
    /// here (a replay of a rolled-back revision, the start revision of a running rollout, or
    /// one that waits for the rollout's end).
    pub(super) fn held_by_rollout(
        &mut self,
        app: &str,
        d: &str,
        payload: &[u8],
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(a) = self.apps.get_mut(app) else {
            return false;
        };
        if a.history
            .revisions
            .last()
            .is_some_and(|r| r.digest == d && r.failed.is_some())
        {
            // the broker's copy of a definition that was rolled back (published again at once)
            return true;
        }
        let Some(r) = a.history.rollout.as_ref().filter(|r| r.is_active()) else {
            return false;
        };
        if r.previous.digest == d {
            let reason = format!("revision {} was published again", r.from);
            self.roll_back(app, reason, out);
            return true;
        }
        let to = r.to;
        let failed = matches!(r.phase, Phase::Failed { .. });
        info!("application {app}: a new definition waits for the rollout of revision {to} to end");
        a.queued = Some(payload.to_vec());
        if failed {
            self.roll_back(app, "replaced by a new definition".into(), out);
        }
        true
    }

    /// Starts the rollout of the revision just placed, when there is one to do; else the
    /// newest revision is the current one.
    pub(super) fn begin_rollout(&mut self, app: &str, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get_mut(app) else {
            return;
        };
        if !std::mem::take(&mut a.fresh) {
            return;
        }
        let prior = a.prior.take();
        let to = a.history.last();
        let from = a.history.current;
        let plan = match (prior, a.rec.application.update.clone()) {
            (Some(prior), Some(policy)) => Rollout::plan(&prior, &a.rec, from, to, &policy),
            _ => None,
        };
        match plan {
            Some(r) => {
                info!(
                    "rollout of {app} r{from}→r{to}: {} components change, in {} batches ({} canaries, {} per batch, healthy {} s, deadline {} s{})",
                    r.steps.len(),
                    r.batches,
                    r.policy.canaries,
                    r.policy.batch_size,
                    r.policy.healthy_s,
                    r.policy.deadline_s,
                    r.policy
                        .gate
                        .as_ref()
                        .map(|g| format!(", gate on path {}", g.path))
                        .unwrap_or_default()
                );
                a.history.rollout = Some(r);
                a.finished = None;
            }
            None => a.history.current = to,
        }
        self.put_history(app, out);
        self.drive_rollout(app, out);
    }

    /// What the control plane sees that `app`'s rollout needs.
    fn world_for(&self, app: &str, r: &Rollout) -> World {
        let nodes = r.nodes();
        let mut w = World {
            online: self
                .nodes
                .iter()
                .filter(|(_, n)| n.online && n.state == NodeState::Online)
                .map(|(k, _)| k.clone())
                .collect(),
            ..World::default()
        };
        for n in &nodes {
            if let Some(st) = self.actual.get(n) {
                // only what the node reports from the desired state that gave a container its
                // spec on: before, a container of the new copy's name may be an earlier copy
                // (a rolled-back revision's: copies alternate between two names), and must
                // neither fail nor pass the new one
                let current = st
                    .containers
                    .iter()
                    .filter(|c| st.generation >= self.spec_since(n, &c.name));
                for c in current {
                    w.containers.insert(
                        (n.clone(), c.name.to_string()),
                        Seen {
                            state: c.state,
                            health: c.health,
                            restarts: c.restarts,
                            error: c.error.to_string(),
                        },
                    );
                }
            }
            if let Some(node) = self.nodes.get(n) {
                let (mut cpu, mut mem) = (0, 0);
                for res in self.reservations.values() {
                    if let Some(x) = res.get(n) {
                        cpu += x.cpu_millis;
                        mem += x.memory_mb;
                    }
                }
                let cap = &node.info.capacity;
                w.room.insert(
                    n.clone(),
                    (
                        cap.cpu_millis.saturating_sub(cpu),
                        cap.memory_mb.saturating_sub(mem),
                    ),
                );
            }
        }
        if let Some(g) = &r.policy.gate {
            if let Some(q) = self.path_qos(app, r, &g.path) {
                w.paths.insert(g.path.clone(), q);
            }
        }
        w
    }

    /// The measured QoS of `path` of `app` with the copies that serve now: the network's
    /// latency (sum over its channels) and reliability (product) between their nodes, and the
    /// service times their workloads report (each copy its own: a new copy beside the old one
    /// is read, not the old one); None while a link of it has no measurement.
    fn path_qos(&self, app: &str, r: &Rollout, path: &str) -> Option<PathQos> {
        let a = self.apps.get(app)?;
        let application = &a.rec.application;
        let p = application.paths.iter().find(|p| p.name == path)?;
        // (node, container) of the copy of `c` that serves now
        let copy_of = |c: &str| -> Option<(String, String)> {
            match r.serving(c) {
                Some(copy) => Some((copy.node.clone(), copy.container.name.clone())),
                None => Some((
                    a.rec.placement.as_ref()?.assignment.get(c)?.clone(),
                    a.rec.container_name(c),
                )),
            }
        };
        let mut q = PathQos::network(0.0, 1.0);
        let mut components: Vec<&str> = vec![];
        for ch in &p.channels {
            let ch = application.channels.iter().find(|c| &c.name == ch)?;
            for c in [ch.from.as_str(), ch.to.as_str()] {
                if !components.contains(&c) {
                    components.push(c);
                }
            }
            let ((x, _), (y, _)) = (copy_of(&ch.from)?, copy_of(&ch.to)?);
            if x == y {
                q.network_ms += LOOPBACK_LATENCY_MS;
                continue;
            }
            let l = self.links.get(&x, &y)?;
            q.network_ms += l.latency_ms();
            q.reliability *= l.success();
        }
        let service = &self.measured.service;
        for c in components {
            let Some((node, container)) = copy_of(c) else {
                continue;
            };
            // a copy that reports nothing (it served no message: beside the old copy, the
            // traffic may all go to the old one) adds nothing; the old copy's time is not its
            if let Some(ms) = service.get(&node, &container) {
                q.service.push((c.to_string(), ms));
            }
        }
        Some(q)
    }

    /// Every active rollout moves on (on a tick).
    pub(super) fn drive_rollouts(&mut self, out: &mut Vec<Action>) {
        let apps: Vec<String> = self
            .apps
            .keys()
            .filter(|a| self.rolling(a))
            .cloned()
            .collect();
        for app in apps {
            self.drive_rollout(&app, out);
        }
    }

    /// The rollouts that use `node` move on (its actual state changed).
    pub(super) fn drive_rollouts_on(&mut self, node: &str, out: &mut Vec<Action>) {
        let apps: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| {
                a.history
                    .rollout
                    .as_ref()
                    .is_some_and(|r| r.is_active() && r.nodes().contains(node))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for app in apps {
            self.drive_rollout(&app, out);
        }
    }

    pub(super) fn drive_rollout(&mut self, app: &str, out: &mut Vec<Action>) {
        let Some(r) = self.active_rollout(app) else {
            return;
        };
        let world = self.world_for(app, r);
        let now = self.now;
        let a = self.apps.get_mut(app).expect("checked above");
        let r = a.history.rollout.as_mut().expect("checked above");
        let p = r.advance(now, &world);
        self.after_progress(app, p, out);
    }

    /// Goes back to the revision the rollout of `app` started from, for `reason`.
    pub(super) fn roll_back(&mut self, app: &str, reason: String, out: &mut Vec<Action>) {
        let Some(r) = self.active_rollout(app) else {
            return;
        };
        if matches!(r.phase, Phase::RollingBack { .. }) {
            return;
        }
        let world = self.world_for(app, r);
        let now = self.now;
        let r = self
            .apps
            .get_mut(app)
            .and_then(|a| a.history.rollout.as_mut())
            .expect("checked above");
        let mut p = super::update::Progress::default();
        p.lines.push(format!(
            "rollout of {app} r{}→r{}: {reason}; rolling back to revision {}",
            r.from, r.to, r.from
        ));
        r.start_rollback(now, reason, &world, &mut p);
        self.after_progress(app, p, out);
    }

    fn after_progress(&mut self, app: &str, p: super::update::Progress, out: &mut Vec<Action>) {
        for l in &p.lines {
            if l.contains(" failed: ") || l.contains("rolled back") {
                warn!("{l}");
            } else {
                info!("{l}");
            }
        }
        let Some(a) = self.apps.get_mut(app) else {
            return;
        };
        let Some(r) = a.history.rollout.as_ref() else {
            return;
        };
        let mut nodes: BTreeSet<String> = p.nodes;
        let mut persist = p.persist;
        let mut queued = None;
        let mut republish = None;
        if !r.is_active() {
            let r = a.history.rollout.take().expect("checked above");
            nodes.extend(r.nodes());
            a.finished = Some(r.status());
            persist = true;
            match &r.phase {
                Phase::Done => {
                    keep_new_names(&mut a.rec, &r);
                    a.history.current = r.to;
                }
                Phase::RolledBack { reason } => {
                    a.history.fail(r.to, &format!("rolled back: {reason}"));
                    a.history.current = r.from;
                    a.rec = *r.previous.clone();
                    // a placement computed meanwhile was for the other revision: discarded
                    a.revision += 1;
                    republish = Some(a.rec.definition.clone().into_bytes());
                    let res = match &a.rec.placement {
                        Some(pl) => reservations_of(&a.rec.application, &pl.assignment),
                        None => Default::default(),
                    };
                    self.set_reservations(app, res);
                }
                _ => {}
            }
            let a = self.apps.get_mut(app).expect("checked above");
            out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
            queued = a.queued.take();
        }
        if persist {
            self.put_history(app, out);
        }
        if let Some(text) = republish {
            // the broker's retained definition is the one that runs again
            out.push(Action::Publish {
                topic: topics::app(app),
                payload: text,
                retain: true,
            });
        }
        for n in &nodes {
            self.update_desired(n, out);
        }
        self.update_status(app, out);
        if let Some(q) = queued {
            self.on_app(app.to_string(), q, out);
        }
    }

    /// `cloud-broker rollback APP [--to N]`: during a rollout (without `--to`, or to the
    /// revision it started from) the rollout goes back; else revision `to` (by default the
    /// newest good one before the current) is applied again as a new revision, and its
    /// definition published, retained.
    pub(super) fn on_rollback(&mut self, app: &str, to: Option<u64>, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get(app) else {
            warn!("rollback of {app} refused: no such application");
            return;
        };
        if let Some(r) = a.history.rollout.as_ref().filter(|r| r.is_active()) {
            if to.is_none() || to == Some(r.from) {
                self.roll_back(app, "rolled back by the operator".into(), out);
                return;
            }
        }
        let h = &a.history;
        let target = to.or_else(|| {
            h.revisions
                .iter()
                .rev()
                .find(|r| r.number < h.current && r.failed.is_none())
                .map(|r| r.number)
        });
        let Some(rev) = target.and_then(|n| h.get(n)) else {
            warn!(
                "rollback of {app} refused: {} (revisions kept: {})",
                match target {
                    Some(n) => format!("revision {n} is not kept"),
                    None => "no good revision before the current one".into(),
                },
                h.revisions
                    .iter()
                    .map(|r| r.number.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return;
        };
        if rev.number == h.current && !self.rolling(app) {
            info!("rollback of {app}: revision {} already runs", rev.number);
            return;
        }
        let text = rev.definition.clone().into_bytes();
        info!(
            "rollback of {app} to revision {} asked: its definition is applied again as a new revision",
            rev.number
        );
        out.push(Action::Publish {
            topic: topics::app(app),
            payload: text.clone(),
            retain: true,
        });
        self.on_app(app.to_string(), text, out);
    }

    /// The revision fields of `app`'s status.
    pub(super) fn add_revisions(&self, app: &str, st: &mut AppStatus) {
        let Some(a) = self.apps.get(app) else { return };
        st.revision = Some(a.history.current).filter(|c| *c > 0);
        st.revisions = a
            .history
            .revisions
            .iter()
            .map(|r| RevisionLine {
                number: r.number,
                digest: r.digest.clone(),
                failed: r.failed.clone(),
            })
            .collect();
        st.rollout = a
            .history
            .rollout
            .as_ref()
            .map(Rollout::status)
            .or_else(|| a.finished.clone());
    }

    /// The node and container name of the copy of `c` (placed on `node`) that serves now.
    pub(super) fn serving_copy(&self, app: &str, c: &str, node: &str) -> (String, String) {
        let Some(a) = self.apps.get(app) else {
            return (node.into(), format!("{app}.{c}"));
        };
        if let Some(copy) = self.active_rollout(app).and_then(|r| r.serving(c)) {
            return (copy.node.clone(), copy.container.name.clone());
        }
        (node.into(), a.rec.container_name(c))
    }

    /// A placement applied while a rollout runs (a node lost, the disconnect policy): the
    /// rollout ends there, its target revision everywhere at once.
    pub(super) fn cut_rollout(&mut self, app: &str, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get_mut(app) else {
            return;
        };
        let Some(r) = a.history.rollout.take_if(|r| r.is_active()) else {
            return;
        };
        warn!(
            "rollout of {app} r{}→r{} cut short: the application is placed again; revision {} goes everywhere at once",
            r.from, r.to, r.to
        );
        keep_new_names(&mut a.rec, &r);
        a.history.current = r.to;
        a.finished = Some(r.status());
        self.put_history(app, out);
    }
}

/// The container names of `r`'s new copies that started stay the components' names in `rec`
/// (the others, and removed components, go back to `{app}.{component}`).
fn keep_new_names(rec: &mut AppRecord, r: &Rollout) {
    for s in &r.steps {
        let started = s.state != StepState::Waiting;
        match &s.new {
            Some(n) if started && n.container.name != format!("{}.{}", rec.name, s.component) => {
                rec.names
                    .insert(s.component.clone(), n.container.name.clone());
            }
            _ => {
                rec.names.remove(&s.component);
            }
        }
    }
}
