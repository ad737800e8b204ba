//! The applications' lifecycle: definitions accepted or rejected, placement jobs requested
//! (one per application at a time), their results committed against the resource ledger,
//! the descheduler's re-evaluations, deletion.
//!
//! Invariants: the ledger (`reservations`) holds, per application, exactly what its current
//! placement reserves ([`reservations_of`]), and `ledger_version` grows with every change; a
//! placement commits only if no node it uses changed its reservations since its job was
//! computed (optimistic concurrency); a job's result for an older revision of the definition
//! is discarded; an application record is persisted before any desired state it causes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use acoa_shared::model::{self, Application, Resources};
use acoa_shared::topics;
use acoa_shared::wire::MAX_CONTAINERS;
use tracing::{debug, info, warn};

use super::background::rank;
use super::{
    grades, Action, AppState, Compared, Engine, ExploreInput, Job, JobOutcome, JobResult, Purpose,
};
use crate::records::{AppRecord, PersistOp};
use crate::sched;
use crate::status::{digest, AppStatus, PlacementRecord};

impl Engine {
    pub(super) fn on_app(&mut self, app: String, payload: Vec<u8>, out: &mut Vec<Action>) {
        if crate::records::is_deletion(&app, &payload) {
            self.delete_app(&app, out);
            return;
        }
        if let Some(to) = crate::records::is_rollback(&app, &payload) {
            self.on_rollback(&app, to, out);
            return;
        }
        let d = digest(&payload);
        if let Some(a) = self.apps.get(&app) {
            if a.rec.digest == d {
                return; // the same definition again (a retained copy): nothing changes
            }
        }
        if self.held_by_rollout(&app, &d, &payload, out) {
            return;
        }
        if self.store_full.is_some() {
            self.hold(app, payload, out);
            return;
        }
        match self.take_checked(&app, &d, &payload) {
            Err(reason) => {
                warn!("application {app} rejected: {reason}");
                let mut st = AppStatus::new(&app, "rejected", &d);
                st.reason = Some(reason.clone());
                if let Some(a) = self.apps.get_mut(&app) {
                    a.rejected = Some((d, reason));
                    st.reason = Some(format!(
                        "{}; the previous definition stays deployed",
                        st.reason.unwrap_or_default()
                    ));
                }
                self.send_status(&app, &st, out);
            }
            Ok(application) => {
                let text = String::from_utf8(payload).unwrap_or_default();
                let rec = AppRecord {
                    name: app.clone(),
                    definition: text,
                    digest: d.clone(),
                    application,
                    placement: None,
                    names: BTreeMap::new(),
                };
                let reason = match self.apps.get_mut(&app) {
                    Some(a) => {
                        let old = std::mem::replace(&mut a.rec, rec);
                        a.rec.placement = old.placement.clone();
                        a.rec.names = old.names.clone();
                        // a rollout starts from what runs, not from a revision never placed
                        if a.prior.is_none() && old.placement.is_some() {
                            a.prior = Some(Box::new(old));
                        }
                        a.revision += 1;
                        a.rejected = None;
                        a.unplaced = None;
                        a.better_count = 0;
                        "definition updated"
                    }
                    None => {
                        let h = crate::records::History::new(&app);
                        self.apps.insert(app.clone(), AppState::new(rec, h));
                        "new application"
                    }
                };
                let a = self.apps.get_mut(&app).expect("inserted above");
                let number = a.history.push(&d, &a.rec.definition);
                a.fresh = true;
                let a = &self.apps[&app];
                info!(
                    "application {app} accepted ({reason}) as revision {number}: {} components, scheduler {}",
                    a.rec.application.components.len(),
                    a.rec.application.scheduler
                );
                out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
                self.put_history(&app, out);
                if a.rec.placement.is_none() {
                    let st = AppStatus::new(&app, "accepted", &d);
                    self.send_status(&app, &st, out);
                }
                // a job for an older revision may be running: its result will be discarded
                if let Some(a) = self.apps.get_mut(&app) {
                    a.job = None;
                }
                self.request(&app, Purpose::Place(reason.into()), out);
            }
        }
    }

    pub(super) fn delete_app(&mut self, app: &str, out: &mut Vec<Action>) {
        self.forget_measured(None, Some(app));
        self.untarget(app);
        self.held.remove(app);
        let Some(a) = self.apps.remove(app) else {
            // cleared even when nothing was known: the deleting client waits for it
            self.status_sent.remove(app);
            out.push(Action::Publish {
                topic: topics::app_status(app),
                payload: vec![],
                retain: true,
            });
            return;
        };
        let nodes: BTreeSet<String> = a
            .rec
            .placement
            .iter()
            .flat_map(|p| p.assignment.values().cloned())
            .collect();
        self.set_reservations(app, BTreeMap::new());
        out.push(Action::Persist(PersistOp::DeleteApp(app.into())));
        for n in &nodes {
            self.update_desired(n, out);
        }
        self.status_sent.remove(app);
        out.push(Action::Publish {
            topic: topics::app_status(app),
            payload: vec![],
            retain: true,
        });
        info!(
            "application {app} deleted; its containers stop on {}",
            if nodes.is_empty() {
                "no node".to_string()
            } else {
                nodes.into_iter().collect::<Vec<_>>().join(", ")
            }
        );
    }

    /// Asks for a placement computation, or notes that one is wanted after the running one.
    pub(super) fn request(&mut self, app: &str, purpose: Purpose, out: &mut Vec<Action>) {
        let busy = match self.apps.get_mut(app) {
            None => return,
            Some(a) if a.job.is_some() => {
                // a Place request wins over an exploration, which wins over a re-evaluation
                if a.rerun.as_ref().is_none_or(|r| rank(&purpose) >= rank(r)) {
                    a.rerun = Some(purpose.clone());
                }
                true
            }
            Some(_) => false,
        };
        if busy {
            return;
        }
        let background = purpose.in_background();
        if background && self.background_waits(app, &purpose) {
            return;
        }
        if !background {
            // it places anew: the evaluation it may have waited for is moot
            if let Some(a) = self.apps.get_mut(app) {
                a.rerun = None;
            }
        }
        let (model, closed) = self.job_model();
        let reserved = self.reserved_by_others(app);
        let mut containers = self.containers_of_others(app);
        // gone or changed since the model was taken: no room there
        for n in &closed {
            containers.insert(n.clone(), MAX_CONTAINERS as u32);
        }
        let id = self.next_job;
        self.next_job += 1;
        let ledger_version = self.ledger_version;
        let a = self.apps.get_mut(app).expect("checked above");
        let current = a.rec.placement.as_ref().map(|p| p.assignment.clone());
        let mut keep = BTreeMap::new();
        if let (Purpose::Place(_), Some(cur)) = (&purpose, &current) {
            for (c, n) in cur {
                let Some(comp) = a.rec.application.component(c) else {
                    continue;
                };
                if !closed.contains(n)
                    && model
                        .node(n)
                        .is_some_and(|node| node.satisfies(&comp.requires))
                {
                    keep.insert(c.clone(), n.clone());
                }
            }
        }
        a.job = Some(id);
        self.stats.jobs += 1;
        let mut job = Job {
            id,
            app: app.into(),
            revision: a.revision,
            application: Arc::new(a.rec.application.clone()),
            model,
            reserved,
            containers,
            ledger_version,
            explore: (purpose == Purpose::Explore).then(|| ExploreInput {
                candidate: a.explore.candidate.clone(),
                width: self.cfg.explore_width,
            }),
            purpose,
            current,
            keep,
        };
        self.hold_unreachable(&mut job);
        self.job_started(id, background);
        out.push(Action::Schedule(Box::new(job)));
    }

    pub(super) fn reserved_by_others(&self, app: &str) -> BTreeMap<String, Resources> {
        let mut m: BTreeMap<String, Resources> = BTreeMap::new();
        for (a, res) in &self.reservations {
            if a == app {
                continue;
            }
            for (n, r) in res {
                let e = m.entry(n.clone()).or_default();
                e.cpu_millis += r.cpu_millis;
                e.memory_mb += r.memory_mb;
            }
        }
        m
    }

    /// Per node, how many containers the other applications' placements put there.
    pub(super) fn containers_of_others(&self, app: &str) -> BTreeMap<String, u32> {
        let mut m: BTreeMap<String, u32> = BTreeMap::new();
        for (a, s) in &self.apps {
            if a == app {
                continue;
            }
            for n in s.rec.placement.iter().flat_map(|p| p.assignment.values()) {
                *m.entry(n.clone()).or_default() += 1;
            }
        }
        m
    }

    pub(super) fn set_reservations(&mut self, app: &str, new: BTreeMap<String, Resources>) {
        let old = self.reservations.remove(app).unwrap_or_default();
        let changed: BTreeSet<&String> = old
            .iter()
            .chain(new.iter())
            .filter(|(n, _)| old.get(*n) != new.get(*n))
            .map(|(n, _)| n)
            .collect();
        if !changed.is_empty() {
            self.ledger_version += 1;
            for n in changed {
                self.node_version.insert(n.clone(), self.ledger_version);
            }
        }
        if !new.is_empty() {
            self.reservations.insert(app.into(), new);
        }
    }

    /// Whether `assignment`'s requests fit next to what the other applications hold.
    pub(super) fn fits(&self, app: &Application, assignment: &BTreeMap<String, String>) -> bool {
        let others = self.reserved_by_others(&app.application);
        reservations_of(app, assignment).iter().all(|(n, r)| {
            let Some(node) = self.nodes.get(n) else {
                return false;
            };
            let o = others.get(n).copied().unwrap_or_default();
            o.cpu_millis + r.cpu_millis <= node.info.capacity.cpu_millis
                && o.memory_mb + r.memory_mb <= node.info.capacity.memory_mb
        })
    }

    /// Optimistic concurrency: a placement computed at ledger version `v` commits if the ledger
    /// is still at `v`, or if no node it uses changed its reservations since.
    pub(super) fn committable(
        &self,
        v: u64,
        app: &Application,
        a: &BTreeMap<String, String>,
    ) -> bool {
        if self.ledger_version == v {
            return true;
        }
        if app.components.iter().all(|c| c.resources.is_none()) {
            return true; // the ledger played no part in this placement
        }
        a.values()
            .all(|n| self.node_version.get(n).copied().unwrap_or(0) <= v)
    }

    pub(super) fn on_scheduled(&mut self, r: JobResult, out: &mut Vec<Action>) {
        // its place in the background first goes to those that waited longest
        self.job_ended(r.id, out);
        self.take_result(r, out);
    }

    fn take_result(&mut self, r: JobResult, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get_mut(&r.app) else {
            return; // deleted meanwhile
        };
        if a.job == Some(r.id) {
            a.job = None;
        }
        if a.revision != r.revision {
            // a newer definition came in: its own job decides
            if a.job.is_none() {
                let p = a
                    .rerun
                    .take()
                    .unwrap_or(Purpose::Place("definition updated".into()));
                self.request(&r.app, p, out);
            }
            return;
        }
        let rerun = a.rerun.take();
        let app = r.app.clone();
        match r.purpose.clone() {
            Purpose::Place(reason) => self.commit_place(r, &reason, out),
            Purpose::Reevaluate => self.reevaluated(r, out),
            Purpose::Explore => self.explored(r, out),
        }
        if let Some(p) = rerun {
            if self.apps.get(&app).is_some_and(|a| a.job.is_none()) {
                self.request(&app, p, out);
            }
        }
    }

    pub(super) fn commit_place(&mut self, r: JobResult, reason: &str, out: &mut Vec<Action>) {
        let app = r.app.clone();
        let application = self.apps[&app].rec.application.clone();
        let best = match r.outcome {
            JobOutcome::Placed(p) => p,
            JobOutcome::Infeasible(why) | JobOutcome::Error(why) => {
                let a = self.apps.get_mut(&app).unwrap();
                let first = a.unplaced.as_deref() != Some(why.as_str());
                a.unplaced = Some(why.clone());
                if first {
                    warn!("application {app} cannot be placed ({reason}): {why}");
                }
                self.update_status(&app, out);
                return;
            }
        };
        // the kept components stay unless the best placement is clearly better, however the
        // links' uncertainty turns out
        let (merged_cmp, best_cmp) = match r.compared {
            Some(Compared {
                merged: Some((m, b)),
                ..
            }) => (Some(m), b),
            _ => (r.merged.as_ref().map(|m| m.score), best.score),
        };
        let chosen = match r.merged {
            Some(m)
                if merged_cmp.unwrap_or(m.score) >= best_cmp * (1.0 - self.cfg.hysteresis)
                    && self.fits(&application, &m.assignment) =>
            {
                m
            }
            _ => best,
        };
        if !self.committable(r.ledger_version, &application, &chosen.assignment) {
            self.stats.collisions += 1;
            warn!(
                "placement of {app} collided with another commit on its nodes (ledger v{} → v{}), recomputing; {} collisions so far",
                r.ledger_version, self.ledger_version, self.stats.collisions
            );
            self.request(&app, Purpose::Place(reason.to_string()), out);
            return;
        }
        let old = self.apps[&app]
            .rec
            .placement
            .as_ref()
            .map(|p| p.assignment.clone())
            .unwrap_or_default();
        let moved: Vec<String> = chosen
            .assignment
            .iter()
            .filter(|(c, n)| old.get(*c) != Some(*n))
            .map(|(c, n)| match old.get(c) {
                Some(o) => format!("{c} {o}→{n}"),
                None => format!("{c}→{n}"),
            })
            .collect();
        if old.is_empty() {
            info!(
                "application {app} placed ({reason}) with score {:.6} ({} feasible deployments, computed in {} µs): {}",
                chosen.score,
                chosen.feasible_deployments,
                r.elapsed_us,
                moved.join(", ")
            );
        } else if moved.is_empty() {
            info!(
                "application {app} stays where it is ({reason}), score {:.6}",
                chosen.score
            );
        } else {
            info!(
                "application {app} re-placed ({reason}) with score {:.6}: {}",
                chosen.score,
                moved.join(", ")
            );
        }
        // a new placement: a new exploration once its estimated links are measured
        if let Some(a) = self.apps.get_mut(&app) {
            a.explore = Default::default();
        }
        self.apply_placement(&app, chosen, &old, out);
    }

    pub(super) fn apply_placement(
        &mut self,
        app: &str,
        p: PlacementRecord,
        old: &BTreeMap<String, String>,
        out: &mut Vec<Action>,
    ) {
        self.cut_rollout(app, out);
        let a = self.apps.get_mut(app).unwrap();
        a.unplaced = None;
        let res = reservations_of(&a.rec.application, &p.assignment);
        let nodes: BTreeSet<String> = old.values().chain(p.assignment.values()).cloned().collect();
        let assignment = p.assignment.clone();
        a.rec.placement = Some(p);
        out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
        self.set_reservations(app, res);
        // a new revision rolls out (persisted first), or is current at once
        self.begin_rollout(app, out);
        for n in &nodes {
            self.update_desired(n, out);
        }
        self.target_placement(app, &assignment);
        self.update_status(app, out);
    }

    pub(super) fn reevaluated(&mut self, r: JobResult, out: &mut Vec<Action>) {
        let app = r.app.clone();
        let JobOutcome::Placed(best) = &r.outcome else {
            return;
        };
        let Some(cur_assignment) = self.apps[&app]
            .rec
            .placement
            .as_ref()
            .map(|p| p.assignment.clone())
        else {
            return;
        };
        // on the network seen in the current placement's favour when bounds were given
        let (cur, best_score) = match (r.compared, r.current_score) {
            (Some(c), _) => (c.current, c.best),
            (None, Some(cur)) => (cur, best.score),
            (None, None) => {
                // the current placement does not score on this model (a link or a measurement
                // it needs is missing for now): that is no evidence that another is better, and
                // taking it as a score of 0 moved components round and round after a node loss
                debug!("application {app}: the current placement cannot be scored on the live model; nothing moves");
                if let Some(a) = self.apps.get_mut(&app) {
                    a.better_count = 0;
                }
                return;
            }
        };
        let gain = super::links::relative_gain(cur, best_score);
        let sustain = self.cfg.sustain;
        let a = self.apps.get_mut(&app).unwrap();
        if gain > self.cfg.hysteresis {
            a.better_count += 1;
        } else {
            a.better_count = 0;
            return;
        }
        if a.better_count < sustain {
            info!(
                "application {app}: a placement {:.1} % better is available ({:.6} vs {:.6}), {} of {} evaluations",
                gain * 100.0,
                best_score,
                cur,
                a.better_count,
                sustain
            );
            return;
        }
        let application = a.rec.application.clone();
        // one component at a time: the single move that helps most
        let mut moves = r.single_moves.clone();
        moves.sort_by(|x, y| y.2.total_cmp(&x.2).then_with(|| x.0.cmp(&y.0)));
        let pick = moves.into_iter().find(|(c, n, s)| {
            let mut cand = cur_assignment.clone();
            cand.insert(c.clone(), n.clone());
            *s > cur && self.fits(&application, &cand)
        });
        let (comp, node, score) = match pick {
            Some(m) => m,
            None => {
                // no single move helps on its own: take the best placement's first difference
                match best
                    .assignment
                    .iter()
                    .find(|(c, n)| cur_assignment.get(*c) != Some(*n))
                {
                    Some((c, n)) => (c.clone(), n.clone(), cur),
                    None => return,
                }
            }
        };
        let mut assignment = cur_assignment.clone();
        assignment.insert(comp.clone(), node.clone());
        if !self.committable(r.ledger_version, &application, &assignment) {
            self.stats.collisions += 1;
            warn!("re-placement of {app} collided with another commit, will evaluate again");
            return;
        }
        let (score_now, criteria) =
            match sched::score_on(&self.model_having(&node).infra(), &application, &assignment) {
                Ok((s, g)) => (s, grades(&g)),
                Err(_) => (score, vec![]),
            };
        let from = cur_assignment.get(&comp).cloned().unwrap_or_default();
        info!(
            "application {app} re-placed because link metrics changed: {comp} {from}→{node} (score {:.6} → {:.6}; best {:.6}, {:.1} % better for {} evaluations)",
            cur, score_now, best_score, gain * 100.0, sustain
        );
        let p = PlacementRecord {
            assignment,
            score: score_now,
            criteria,
            feasible_deployments: best.feasible_deployments,
        };
        self.apply_placement(&app, p, &cur_assignment, out);
        if let Some(a) = self.apps.get_mut(&app) {
            // keep moving next evaluation if still clearly better
            a.better_count = sustain.saturating_sub(1);
        }
    }
}

pub(super) fn reservations_of(
    app: &Application,
    assignment: &BTreeMap<String, String>,
) -> BTreeMap<String, Resources> {
    let mut m: BTreeMap<String, Resources> = BTreeMap::new();
    for c in &app.components {
        let (Some(r), Some(n)) = (c.resources, assignment.get(&c.name)) else {
            continue;
        };
        let e = m.entry(n.clone()).or_default();
        e.cpu_millis += r.cpu_millis;
        e.memory_mb += r.memory_mb;
    }
    m
}

/// Validates a published definition for topic `acoa/v1/apps/{topic_app}`.
pub fn validate(topic_app: &str, payload: &[u8]) -> Result<Application, String> {
    let text = std::str::from_utf8(payload)
        .map_err(|_| "the definition is not UTF-8 text (YAML or JSON expected)".to_string())?;
    let app = model::parse_application(text).map_err(|e| e.to_string())?;
    if app.application != topic_app {
        return Err(format!(
            "application: `{}` differs from the topic's name `{topic_app}`",
            app.application
        ));
    }
    let algos = sched::algorithms();
    if !algos.contains(&app.scheduler.as_str()) {
        return Err(format!(
            "scheduler: unknown algorithm `{}` (known: {})",
            app.scheduler,
            algos.join(", ")
        ));
    }
    for (i, c) in app.components.iter().enumerate() {
        if app.application.len() + 1 + c.name.len() > 63 {
            return Err(format!(
                "components[{i}].name: `{}.{}` is longer than a container name may be (63)",
                app.application, c.name
            ));
        }
    }
    Ok(app)
}
