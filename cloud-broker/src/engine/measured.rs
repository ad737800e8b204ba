//! The engine's side of run-time measurements: the agents' usage messages folded into
//! the live model's `observed` ([`crate::observed`]), and the network-aware descheduler of
//! applications with `scheduler: network-aware`, run every
//! [`EngineConfig::deschedule_ms`](super::EngineConfig::deschedule_ms) on the live model.
//!
//! The descheduler rule is `acoa_scheduler::netaware::app::deschedule` (one evaluation: the
//! move of one component, or the first of a traffic-connected group sharing a node, whose
//! relative gain is largest and above the threshold). Hysteresis here: a move of the same component
//! (to the best node of the last evaluation) must be proposed [`EngineConfig::sustain`](super::EngineConfig::sustain)
//! evaluations in a row; one move at a time per application: nothing is evaluated while a
//! component of the application is not running (a move still rolling out, or anything else
//! wrong), and the evidence restarts after each move. A move of a traffic-connected group (the
//! rule proposes its first member) is carried through: the other members follow to the same node,
//! one at a time, each once everything runs, without evaluating again in between (a half-moved
//! group would see its own return as a gain and flap); the plan is dropped if the application is
//! placed again meanwhile, the target is lost, or a member does not fit there. The move goes through the same path as
//! every placement change (reservations, desired states of the two nodes, status). Pure: part of
//! the state machine, driven by `Event::Usage` and `Event::Tick`.

use std::collections::BTreeMap;

use acoa_scheduler::netaware::app::{deschedule, DeschedConfig};
use acoa_shared::model::{Cluster, Observed};
use acoa_shared::wire::ComponentUsage;
use tracing::{debug, info, warn};

use super::{grades, Action, Engine, PlacementRecord};
use crate::observed::{rounded, ObservedTable};
use crate::sched;
use crate::service_times::ServiceTimes;

/// The name `scheduler:` gives the algorithm whose applications this descheduler moves.
pub const NETWORK_AWARE: &str = "network-aware";

/// What the engine keeps for this.
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) table: ObservedTable,
    /// The workloads' service times per container (a rollout's gate reads them).
    pub(super) service: ServiceTimes,
    last_desched: u64,
    /// Per application: the move proposed at the last evaluations, and how many in a row.
    streaks: BTreeMap<String, (String, String, u32)>,
    /// Per application: the measurements the status document shows (rounded).
    pub(super) for_status: BTreeMap<String, Observed>,
    /// Per application: a group move under way (see [`GroupPlan`]).
    plans: BTreeMap<String, GroupPlan>,
}

/// A traffic-connected group that the descheduler decided to move together, one member at a
/// time: its first member has moved; the others follow to `to`, each once everything runs,
/// without evaluating again in between (a half-moved group would score its own return as a
/// gain, and flap). Abandoned if the first member is no longer on `to` (something else placed
/// the application again), `to` is lost, or a member does not fit there.
#[derive(Debug, Clone, PartialEq)]
struct GroupPlan {
    to: String,
    members: Vec<String>,
}

impl Measured {
    pub(super) fn new(window: usize, now: u64) -> Self {
        Measured {
            table: ObservedTable::new(window),
            service: ServiceTimes::new(),
            last_desched: now,
            streaks: BTreeMap::new(),
            for_status: BTreeMap::new(),
            plans: BTreeMap::new(),
        }
    }
}

/// Traffic-weighted mean latency (ms) of what `comp` exchanges with the other components
/// (both directions) under `assignment`, and the bytes/s it exchanges: the communication cost
/// the network-aware score weighs. `None` when it exchanges nothing measured.
pub fn comm_cost(
    cluster: &Cluster,
    app: &str,
    assignment: &BTreeMap<String, String>,
    comp: &str,
) -> Option<(f64, f64)> {
    let o = cluster.observed.get(app)?;
    let lat = |a: &str, b: &str| {
        cluster
            .links
            .iter()
            .find(|l| l.from == a && l.to == b)
            .map(|l| l.latency_ms)
    };
    let here = assignment.get(comp)?;
    let (mut weighted, mut total) = (0.0, 0.0);
    for t in &o.traffic {
        let (peer, there_to_here) = if t.from == comp {
            (&t.to, false)
        } else if t.to == comp {
            (&t.from, true)
        } else {
            continue;
        };
        let Some(there) = assignment.get(peer) else {
            continue;
        };
        let l = if there_to_here {
            lat(there, here)
        } else {
            lat(here, there)
        };
        let Some(l) = l else { continue };
        weighted += t.bytes_per_s * l;
        total += t.bytes_per_s;
    }
    (total > 0.0).then(|| (weighted / total, total))
}

impl Engine {
    /// A verified usage message of a node.
    pub(super) fn on_usage(&mut self, u: &ComponentUsage) {
        let node = u.node.as_str();
        if !self.nodes.get(node).is_some_and(|n| n.online) {
            return;
        }
        let apps = &self.apps;
        let placed = |app: &str, comp: &str| {
            apps.get(app)?
                .rec
                .placement
                .as_ref()?
                .assignment
                .get(comp)
                .cloned()
        };
        if self.measured.table.fold(self.now, u, placed) {
            self.model_moved();
        }
        self.measured.service.fold(self.now, u);
    }

    /// Measurements of a lost node or a deleted application go with it.
    pub(super) fn forget_measured(&mut self, node: Option<&str>, app: Option<&str>) {
        let mut changed = false;
        if let Some(n) = node {
            changed |= self.measured.table.forget_node(n);
            self.measured.service.forget_node(n);
        }
        if let Some(a) = app {
            changed |= self.measured.table.forget_app(a);
            self.measured.streaks.remove(a);
            self.measured.for_status.remove(a);
            self.measured.plans.remove(a);
        }
        if changed {
            self.model_moved();
        }
    }

    pub(super) fn is_network_aware(&self, app: &str) -> bool {
        self.apps
            .get(app)
            .is_some_and(|a| a.rec.application.scheduler == NETWORK_AWARE)
    }

    /// Every component of `app` runs where its placement says.
    fn all_running(&self, app: &str) -> bool {
        self.status_of(app)
            .is_some_and(|s| s.state == "running" && s.not_running.is_empty())
    }

    /// On every tick: old measurements expire; every `deschedule_ms`, the status documents
    /// get the current measurements and the network-aware applications are evaluated.
    pub(super) fn measured_tick(&mut self, out: &mut Vec<Action>) {
        let now = self.now;
        if self
            .measured
            .table
            .expire(now, self.cfg.observed_max_age_ms)
        {
            self.model_moved();
        }
        self.measured
            .service
            .expire(now, self.cfg.observed_max_age_ms);
        if now.saturating_sub(self.measured.last_desched) < self.cfg.deschedule_ms {
            return;
        }
        self.measured.last_desched = now;
        let names: Vec<String> = self.apps.keys().cloned().collect();
        self.measured
            .streaks
            .retain(|a, _| self.apps.contains_key(a));
        // the live model (O(links)) only when an application is network-aware
        let mut cluster = None;
        for app in names {
            let shown = self
                .apps
                .get(&app)
                .and_then(|a| self.measured.table.observed(&a.rec.application))
                .as_ref()
                .map(rounded);
            if self.measured.for_status.get(&app) != shown.as_ref() {
                match shown {
                    Some(o) => self.measured.for_status.insert(app.clone(), o),
                    None => self.measured.for_status.remove(&app),
                };
                self.update_status(&app, out);
            }
            if self.is_network_aware(&app) {
                let c = cluster.get_or_insert_with(|| self.cluster()).clone();
                self.deschedule_app(&app, &c, out);
            }
        }
    }

    fn deschedule_app(&mut self, app: &str, cluster: &Cluster, out: &mut Vec<Action>) {
        let Some(a) = self.apps.get(app) else { return };
        if a.rec.application.scheduler != NETWORK_AWARE
            || a.job.is_some()
            || a.unplaced.is_some()
            || self.rolling(app)
        {
            return;
        }
        let Some(current) = a.rec.placement.as_ref().map(|p| p.assignment.clone()) else {
            return;
        };
        if !self.all_running(app) {
            // a move (or anything else) still rolling out: one at a time, evidence restarts
            self.measured.streaks.remove(app);
            return;
        }
        let application = a.rec.application.clone();
        if let Some(plan) = self.measured.plans.get(app).cloned() {
            self.follow_plan(app, &application, cluster, &current, plan, out);
            return;
        }
        let mut ledger = sched::Ledger::new();
        for (n, r) in self.reserved_by_others(app) {
            ledger.reserve(&n, r);
        }
        let cfg = DeschedConfig {
            threshold: self.cfg.netaware_threshold,
            ..DeschedConfig::default()
        };
        let m = match deschedule(cluster, &application, &ledger, &current, &cfg) {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.measured.streaks.remove(app);
                return;
            }
            Err(e) => {
                debug!("descheduler: application {app} not evaluated: {e}");
                self.measured.streaks.remove(app);
                return;
            }
        };
        let count = match self.measured.streaks.get(app) {
            // the same component must want to leave; where to may change between equally good
            // nodes (measurement noise picks another each time), the last evaluation's wins
            Some((c, _, k)) if *c == m.component => k + 1,
            _ => 1,
        };
        let sustain = self.cfg.sustain.max(1);
        if count < sustain {
            info!(
                "application {app}: moving {} from {} to {} would gain {:.1} %, {count} of {sustain} evaluations",
                m.component,
                m.from,
                m.to,
                m.gain * 100.0
            );
            self.measured
                .streaks
                .insert(app.to_string(), (m.component, m.to, count));
            return;
        }
        self.measured.streaks.remove(app);
        let why = format!(
            "network-aware descheduler, gain {:.1} % for {sustain} evaluations",
            m.gain * 100.0
        );
        let follows = if m.group.len() > 1 {
            format!("; its group {} follows", m.group[1..].join(", "))
        } else {
            String::new()
        };
        if self.move_one(
            app,
            &application,
            cluster,
            &current,
            &m.component,
            &m.to,
            &why,
            &follows,
            out,
        ) && m.group.len() > 1
        {
            self.measured.plans.insert(
                app.to_string(),
                GroupPlan {
                    to: m.to.clone(),
                    members: m.group.clone(),
                },
            );
        }
    }

    /// The next member of a group move under way, or the end of the plan.
    fn follow_plan(
        &mut self,
        app: &str,
        application: &acoa_shared::model::Application,
        cluster: &Cluster,
        current: &BTreeMap<String, String>,
        plan: GroupPlan,
        out: &mut Vec<Action>,
    ) {
        let first_there = plan
            .members
            .first()
            .is_some_and(|c| current.get(c) == Some(&plan.to));
        let to_online = self.nodes.get(&plan.to).is_some_and(|n| n.online);
        if !first_there || !to_online {
            info!(
                "application {app}: group move to {} abandoned ({})",
                plan.to,
                if to_online {
                    "the application was placed again meanwhile"
                } else {
                    "the target node is lost"
                }
            );
            self.measured.plans.remove(app);
            return;
        }
        let left: Vec<&String> = plan
            .members
            .iter()
            .filter(|c| current.get(*c).is_some_and(|n| *n != plan.to))
            .collect();
        let Some(next) = left.first() else {
            self.measured.plans.remove(app);
            return;
        };
        let why = format!(
            "network-aware descheduler, following its group to {} ({} of {})",
            plan.to,
            plan.members.len() - left.len() + 1,
            plan.members.len()
        );
        let next = (*next).clone();
        let moved = self.move_one(
            app,
            application,
            cluster,
            current,
            &next,
            &plan.to,
            &why,
            "",
            out,
        );
        if !moved || left.len() == 1 {
            if !moved {
                info!(
                    "application {app}: group move to {} abandoned at {next}",
                    plan.to
                );
            }
            self.measured.plans.remove(app);
        }
    }

    /// Moves `comp` of `app` to `to` (one component: the rollout of every placement change),
    /// with one log line; false when it does not fit or cannot be scored (logged).
    #[allow(clippy::too_many_arguments)]
    fn move_one(
        &mut self,
        app: &str,
        application: &acoa_shared::model::Application,
        cluster: &Cluster,
        current: &BTreeMap<String, String>,
        comp: &str,
        to: &str,
        why: &str,
        suffix: &str,
        out: &mut Vec<Action>,
    ) -> bool {
        let from = current.get(comp).cloned().unwrap_or_default();
        let mut assignment = current.clone();
        assignment.insert(comp.to_string(), to.to_string());
        if !self.fits(application, &assignment) {
            warn!(
                "application {app}: {comp} does not fit on {to} next to the other applications' reservations: not moved"
            );
            return false;
        }
        let (score, criteria) = match sched::score(cluster, application, &assignment) {
            Ok((s, g)) => (s, grades(&g)),
            Err(e) => {
                warn!("application {app}: the move of {comp} cannot be scored: {e}");
                return false;
            }
        };
        let cost = |a: &BTreeMap<String, String>| {
            comm_cost(cluster, app, a, comp)
                .map(|(l, _)| format!("{l:.1} ms"))
                .unwrap_or_else(|| "n/a".into())
        };
        let bytes = comm_cost(cluster, app, current, comp)
            .map(|(_, b)| b)
            .unwrap_or(0.0);
        info!(
            "moved {app}/{comp} from {from} to {to} ({why}): traffic-weighted latency to its peers {} -> {} over {bytes:.0} B/s{suffix}",
            cost(current),
            cost(&assignment),
        );
        let feasible = self
            .apps
            .get(app)
            .and_then(|a| a.rec.placement.as_ref())
            .map(|p| p.feasible_deployments)
            .unwrap_or(0);
        let p = PlacementRecord {
            assignment,
            score,
            criteria,
            feasible_deployments: feasible,
        };
        self.apply_placement(app, p, current, out);
        true
    }
}
