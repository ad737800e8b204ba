//! A rollout: how a new revision of an application replaces the running one under its
//! `update` policy, as a pure state machine. [`Rollout::plan`] compares the old revision's
//! record (definition, placement, container names) with the new one's and makes one
//! [`Step`] per component that changes; steps go in batches (the canaries first).
//! [`Rollout::advance`] takes the time and what the control plane sees ([`World`]: the nodes
//! online, the containers the agents report with their health and restarts, the free room per
//! node, the measured QoS of the gate's path) and moves the rollout on; [`Rollout::containers_on`]
//! says which of the rollout's containers a node runs at each moment.
//!
//! The rules:
//! - A batch starts the new copy of each of its components before the old copy stops: on
//!   another node, or on the same node under another container name when the node has room for
//!   both (its free room holds the old copy's request); otherwise the old copy stops first and
//!   the log says so.
//! - A batch is done once every new copy in it has run, healthy (its health check passes, when
//!   it has one), without a restart, and the gate has held, for `healthy_s` in a row; then the
//!   old copies stop and the next batch starts.
//! - It fails when a new copy fails, is refused, exits, restarts or turns unhealthy, when the
//!   gate breaks during the healthy time, or when the batch is not done `deadline_s` after its
//!   start. With `auto_rollback` every component goes back to the old revision: the old copies
//!   start again (those of the running batch never stopped) and each new copy stops once its
//!   old copy runs. Without it the rollout stays where it is.
//! - A component whose node is offline when its batch starts (or goes offline during it) is
//!   deferred: it does not hold the rollout up, and its node gets the revision that is current
//!   when it returns (the desired state held for it then says so).
//! - Persisted (in the application's [`crate::records::History`]) whenever a step changes;
//!   the timers are not: a control plane restarted mid-rollout starts the running batch's
//!   healthy time and deadline again.

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::model::{self, Update};
use acoa_shared::wire::{ContainerState, Health};
use serde::{Deserialize, Serialize};

use crate::records::{AppRecord, ContainerDoc};

mod status;
#[cfg(test)]
mod tests;

pub use status::RolloutStatus;

/// One copy of a component: its node and its container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copy {
    pub node: String,
    pub container: ContainerDoc,
}

/// Where one component's change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepState {
    /// Its batch has not started: the old copy runs.
    Waiting,
    /// The new copy runs next to the old one until the batch is done.
    Surge,
    /// The node had no room for both copies: the old one stopped first.
    Replaced,
    /// The new copy runs, the old one stopped.
    Done,
    /// A node it uses was offline in its batch: it gets the current revision when it returns.
    Deferred,
}

/// The change of one component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub component: String,
    /// None: the component is new.
    pub old: Option<Copy>,
    /// None: the component is removed.
    pub new: Option<Copy>,
    /// 0-based; batch 0 holds the canaries when there are any.
    pub batch: u32,
    pub state: StepState,
    /// During a rollback: the old copy runs again, the new one can stop.
    #[serde(default)]
    pub restored: bool,
    /// The new copy's restart count when it was first seen running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
}

/// Where the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
pub enum Phase {
    Rolling,
    /// Failed with `auto_rollback: false`: stays where it is.
    Failed {
        reason: String,
    },
    RollingBack {
        reason: String,
    },
    Done,
    RolledBack {
        reason: String,
    },
}

/// A rollout from revision `from` to revision `to` (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    pub app: String,
    pub from: u64,
    pub to: u64,
    pub policy: Update,
    pub steps: Vec<Step>,
    /// The running batch (0-based) and how many there are.
    pub batch: u32,
    pub batches: u32,
    pub phase: Phase,
    /// The old revision's record, restored by a rollback.
    pub previous: Box<AppRecord>,
    /// When the running batch (or the rollback) started; not persisted.
    #[serde(skip)]
    pub started_at: Option<u64>,
    /// Since when every new copy of the batch is healthy (and the gate holds); not persisted.
    #[serde(skip)]
    pub healthy_since: Option<u64>,
    /// What the running batch waits for, one line each (for the status).
    #[serde(skip)]
    pub waiting: Vec<String>,
    /// The gate's last reading (for the status): `path alarm: 1.2 ms (network ... + service
    /// ...), bound 10 ms`.
    #[serde(skip)]
    pub gate_reading: Option<String>,
}

/// A container as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub state: ContainerState,
    pub health: Option<Health>,
    pub restarts: u32,
    pub error: String,
}

/// The measured QoS of a path: the network's latency and reliability between the nodes of
/// the copies that serve, and the service times their workloads report.
#[derive(Debug, Clone, PartialEq)]
pub struct PathQos {
    /// The sum over its channels of the links' measured latency, ms.
    pub network_ms: f64,
    /// The product over its channels of the links' success rates.
    pub reliability: f64,
    /// Per component of the path whose serving copy reports one: its service time, ms.
    pub service: Vec<(String, f64)>,
}

impl PathQos {
    /// The path's network latency alone (no workload reports a service time).
    pub fn network(network_ms: f64, reliability: f64) -> Self {
        PathQos {
            network_ms,
            reliability,
            service: vec![],
        }
    }

    /// The service times' sum, ms.
    pub fn service_ms(&self) -> f64 {
        self.service.iter().map(|(_, v)| v).sum()
    }

    /// What the gate compares with its bound: network latency plus service times, ms.
    pub fn latency_ms(&self) -> f64 {
        self.network_ms + self.service_ms()
    }

    /// `61.2 ms (network 1.1 ms + service 60.1 ms: level-detection 60.0 ms, alarm 0.1 ms)`, or
    /// `1.1 ms` when no workload of the path reports a service time.
    pub fn describe(&self) -> String {
        if self.service.is_empty() {
            return format!("{:.1} ms", self.latency_ms());
        }
        let parts: Vec<String> = self
            .service
            .iter()
            .map(|(c, v)| format!("{c} {v:.1} ms"))
            .collect();
        format!(
            "{:.1} ms (network {:.1} ms + service {:.1} ms: {})",
            self.latency_ms(),
            self.network_ms,
            self.service_ms(),
            parts.join(", ")
        )
    }
}

/// What the control plane sees, as plain values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct World {
    pub online: BTreeSet<String>,
    /// (node, container name) → what its agent reports.
    pub containers: BTreeMap<(String, String), Seen>,
    /// Per node, the CPU (millicores) and memory (MB) no placement reserves.
    pub room: BTreeMap<String, (u64, u64)>,
    /// Per path, its measured QoS (absent: not measured).
    pub paths: BTreeMap<String, PathQos>,
}

/// What one [`Rollout::advance`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// One log line per step that matters to an operator.
    pub lines: Vec<String>,
    /// Nodes whose containers changed (their desired states are computed again).
    pub nodes: BTreeSet<String>,
    /// The rollout changed in what is persisted.
    pub persist: bool,
}

/// The container name `{app}.{component}`.
fn base_name(app: &str, c: &str) -> String {
    format!("{app}.{c}")
}

/// The other name of a component's container, for a new copy on the node of the old one:
/// `{app}.{component}.r{revision}` when the old copy has the plain name, else the plain
/// name; None when the suffixed name is too long for a container (the old copy must stop
/// first and the new one takes its name).
fn other_name(app: &str, c: &str, old: &str, revision: u64) -> Option<String> {
    let base = base_name(app, c);
    if old != base {
        return Some(base);
    }
    let n = format!("{base}.r{revision}");
    (n.len() <= model::limits::MAX_NAME_LEN).then_some(n)
}

fn copy_of(rec: &AppRecord, c: &str, name: &str) -> Option<Copy> {
    let node = rec.placement.as_ref()?.assignment.get(c)?;
    let comp = rec.application.component(c)?;
    let container = ContainerDoc::named(&rec.name, comp, name).ok()?;
    Some(Copy {
        node: node.clone(),
        container,
    })
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl Rollout {
    /// The rollout from `prev` (revision `from`, placed) to `next` (revision `to`, placed) under
    /// `policy`, with the new copies' names; None when no container changes.
    pub fn plan(
        prev: &AppRecord,
        next: &AppRecord,
        from: u64,
        to: u64,
        policy: &Update,
    ) -> Option<Rollout> {
        let app = &next.name;
        let mut order: Vec<&str> = next
            .application
            .components
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        for c in &prev.application.components {
            if next.application.component(&c.name).is_none() {
                order.push(&c.name); // removed ones last
            }
        }
        let mut steps = Vec::new();
        for c in order {
            let old_name = prev.container_name(c);
            let old = copy_of(prev, c, &old_name);
            let mut new = copy_of(next, c, &old_name);
            if let (Some(o), Some(n)) = (&old, &new) {
                if o == n {
                    continue; // unchanged
                }
                if o.node == n.node {
                    let name = other_name(app, c, &old_name, to).unwrap_or(old_name.clone());
                    new = copy_of(next, c, &name);
                }
            }
            if old.is_none() && new.is_none() {
                continue;
            }
            steps.push(Step {
                component: c.to_string(),
                old,
                new,
                batch: 0,
                state: StepState::Waiting,
                restored: false,
                restarts: None,
            });
        }
        if steps.is_empty() {
            return None;
        }
        let canaries = (policy.canaries as usize).min(steps.len());
        let size = policy.batch_size.max(1) as usize;
        for (i, s) in steps.iter_mut().enumerate() {
            s.batch = if i < canaries {
                0
            } else {
                let first = u32::from(canaries > 0);
                first + ((i - canaries) / size) as u32
            };
        }
        let batches = steps.last().map(|s| s.batch + 1).unwrap_or(1);
        Some(Rollout {
            app: app.clone(),
            from,
            to,
            policy: policy.clone(),
            steps,
            batch: 0,
            batches,
            phase: Phase::Rolling,
            previous: Box::new(prev.clone()),
            started_at: None,
            healthy_since: None,
            waiting: vec![],
            gate_reading: None,
        })
    }

    /// Whether it still changes anything (rolling, failed in place, or rolling back).
    pub fn is_active(&self) -> bool {
        !matches!(self.phase, Phase::Done | Phase::RolledBack { .. })
    }

    /// Whether the new revision is the target (rolling, failed in place, done).
    fn forward(&self) -> bool {
        matches!(
            self.phase,
            Phase::Rolling | Phase::Failed { .. } | Phase::Done
        )
    }

    /// Every node a step uses.
    pub fn nodes(&self) -> BTreeSet<String> {
        self.steps
            .iter()
            .flat_map(|s| s.old.iter().chain(s.new.iter()).map(|c| c.node.clone()))
            .collect()
    }

    pub fn step(&self, component: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.component == component)
    }

    /// The copies of step `s` that run now.
    fn copies<'a>(&self, s: &'a Step) -> Vec<&'a Copy> {
        let (old, new) = (s.old.as_ref(), s.new.as_ref());
        let (keep_old, keep_new) = if self.forward() {
            match s.state {
                StepState::Waiting => (true, false),
                StepState::Surge => (true, true),
                StepState::Replaced | StepState::Done | StepState::Deferred => (false, true),
            }
        } else {
            let new_ran = matches!(s.state, StepState::Replaced | StepState::Done);
            let back = matches!(self.phase, Phase::RolledBack { .. }) || s.restored;
            (true, new_ran && !back)
        };
        let mut v = vec![];
        if keep_old {
            v.extend(old);
        }
        if keep_new {
            v.extend(new);
        }
        v
    }

    /// The rollout's containers on `node` now (the components it changes; the others follow
    /// the placement).
    pub fn containers_on(&self, node: &str) -> Vec<ContainerDoc> {
        self.steps
            .iter()
            .flat_map(|s| self.copies(s))
            .filter(|c| c.node == node)
            .map(|c| c.container.clone())
            .collect()
    }

    /// The copy of `component` that serves now (the status reports it): the new one once
    /// its batch started, the old one before and after a rollback.
    pub fn serving(&self, component: &str) -> Option<&Copy> {
        let s = self.step(component)?;
        let new_first = if self.forward() {
            s.state != StepState::Waiting
        } else {
            !s.restored && matches!(s.state, StepState::Replaced | StepState::Done)
        };
        if new_first {
            s.new.as_ref().or(s.old.as_ref())
        } else {
            s.old.as_ref().or(s.new.as_ref())
        }
    }

    fn label(&self) -> String {
        format!("rollout of {} r{}→r{}", self.app, self.from, self.to)
    }

    fn batch_label(&self) -> String {
        let canary = self.policy.canaries > 0 && self.batch == 0;
        format!(
            "batch {}/{}{}",
            self.batch + 1,
            self.batches,
            if canary { " (canaries)" } else { "" }
        )
    }

    /// Moves the rollout on at time `now_ms` (see the module documentation).
    pub fn advance(&mut self, now: u64, world: &World) -> Progress {
        let mut p = Progress::default();
        match self.phase {
            Phase::Rolling => {
                if self.started_at.is_none() {
                    let begun = self
                        .steps
                        .iter()
                        .any(|s| s.batch == self.batch && s.state != StepState::Waiting);
                    if begun {
                        self.started_at = Some(now);
                        p.lines.push(format!(
                            "{}: {} resumed after a restart: its healthy time and deadline start again",
                            self.label(),
                            self.batch_label()
                        ));
                    } else {
                        self.start_batch(now, world, &mut p);
                    }
                }
                self.check_batch(now, world, &mut p);
            }
            Phase::RollingBack { .. } => {
                if self.started_at.is_none() {
                    self.started_at = Some(now);
                }
                self.check_restored(now, world, &mut p);
            }
            _ => {}
        }
        p
    }

    fn start_batch(&mut self, now: u64, world: &World, p: &mut Progress) {
        self.started_at = Some(now);
        self.healthy_since = None;
        p.persist = true;
        let mut room = world.room.clone();
        let mut names = vec![];
        for i in 0..self.steps.len() {
            let s = &self.steps[i];
            if s.batch != self.batch || s.state != StepState::Waiting {
                continue;
            }
            let nodes: Vec<&str> = s
                .old
                .iter()
                .chain(s.new.iter())
                .map(|c| c.node.as_str())
                .collect();
            let offline: Vec<&str> = nodes
                .iter()
                .copied()
                .filter(|n| !world.online.contains(*n))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let state = if !offline.is_empty() {
                p.lines.push(format!(
                    "{}: {} deferred: node {} offline, it gets the revision current when it returns",
                    self.label(),
                    s.component,
                    offline.join(", ")
                ));
                StepState::Deferred
            } else {
                match (&s.old, &s.new) {
                    (Some(o), Some(n)) if o.node == n.node => {
                        let free = room.entry(o.node.clone()).or_insert((0, 0));
                        let need = (o.container.cpu_millis, o.container.memory_mb);
                        let distinct = o.container.name != n.container.name;
                        if distinct && need.0 <= free.0 && need.1 <= free.1 {
                            free.0 -= need.0;
                            free.1 -= need.1;
                            StepState::Surge
                        } else {
                            p.lines.push(format!(
                                "{}: {} on {}: {}, the old copy stops first",
                                self.label(),
                                s.component,
                                o.node,
                                if distinct {
                                    "no room for the old and the new copy side by side"
                                } else {
                                    "no second container name fits"
                                }
                            ));
                            StepState::Replaced
                        }
                    }
                    _ => StepState::Surge,
                }
            };
            for c in s.old.iter().chain(s.new.iter()) {
                p.nodes.insert(c.node.clone());
            }
            names.push(s.component.clone());
            self.steps[i].state = state;
        }
        p.lines.push(format!(
            "{}: {} started: {}",
            self.label(),
            self.batch_label(),
            names.join(", ")
        ));
    }

    /// Why the new copy of step `s` is not healthy (`Err`: it failed), or `Ok(None)`: healthy.
    fn judge(s: &mut Step, world: &World) -> Result<Option<String>, String> {
        let Some(n) = &s.new else { return Ok(None) };
        let at = format!("{} on {}", s.component, n.node);
        let Some(seen) = world
            .containers
            .get(&(n.node.clone(), n.container.name.clone()))
        else {
            return Ok(Some(format!(
                "{at}: waits for its container to be reported"
            )));
        };
        let err = if seen.error.is_empty() {
            String::new()
        } else {
            format!(": {}", seen.error)
        };
        match seen.state {
            ContainerState::Failed | ContainerState::Exited | ContainerState::Refused => {
                let st = format!("{:?}", seen.state).to_lowercase();
                return Err(format!("{at}: the new copy {st}{err}"));
            }
            ContainerState::Pending => return Ok(Some(format!("{at}: waits for it to start"))),
            ContainerState::Running => {}
        }
        let first = *s.restarts.get_or_insert(seen.restarts);
        if seen.restarts > first {
            return Err(format!(
                "{at}: the new copy restarted {} time(s){err}",
                seen.restarts - first
            ));
        }
        match (seen.health, n.container.health.is_some()) {
            (Some(Health::Unhealthy), _) => Err(format!(
                "{at}: the new copy is unhealthy (its health check fails)"
            )),
            (Some(Health::Healthy), _) | (None, false) => Ok(None),
            _ => Ok(Some(format!("{at}: waits for its health check to pass"))),
        }
    }

    fn gate(&mut self, world: &World) -> Result<Option<String>, String> {
        let Some(g) = &self.policy.gate else {
            return Ok(None);
        };
        let Some(q) = world.paths.get(&g.path) else {
            return Ok(Some(format!(
                "the gate waits for a measurement of path {}",
                g.path
            )));
        };
        let mut bounds = vec![];
        if let Some(max) = g.max_latency_ms {
            bounds.push(format!("bound {max} ms"));
        }
        if let Some(min) = g.min_reliability {
            bounds.push(format!("reliability {:.4}, bound {min}", q.reliability));
        }
        self.gate_reading = Some(format!(
            "path {}: {}{}",
            g.path,
            q.describe(),
            if bounds.is_empty() {
                String::new()
            } else {
                format!(", {}", bounds.join(", "))
            }
        ));
        if let Some(max) = g.max_latency_ms {
            if q.latency_ms() > max {
                return Err(format!(
                    "gate broken: path {} measures {}, above its bound of {max} ms",
                    g.path,
                    q.describe()
                ));
            }
        }
        if let Some(min) = g.min_reliability {
            if q.reliability < min {
                return Err(format!(
                    "gate broken: path {} measures a reliability of {:.4}, below its bound of {min}",
                    g.path, q.reliability
                ));
            }
        }
        Ok(None)
    }

    fn check_batch(&mut self, now: u64, world: &World, p: &mut Progress) {
        let mut waiting = vec![];
        let label = self.label();
        for i in 0..self.steps.len() {
            let s = &mut self.steps[i];
            if s.batch != self.batch || !matches!(s.state, StepState::Surge | StepState::Replaced) {
                continue;
            }
            let offline: Vec<String> = s
                .old
                .iter()
                .chain(s.new.iter())
                .map(|c| c.node.clone())
                .filter(|n| !world.online.contains(n))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if !offline.is_empty() {
                p.lines.push(format!(
                    "{label}: {} deferred: node {} went offline, it gets the revision current when it returns",
                    s.component,
                    offline.join(", ")
                ));
                s.state = StepState::Deferred;
                p.persist = true;
                p.nodes.extend(offline);
                continue;
            }
            let before = s.restarts;
            let judged = Self::judge(s, world);
            p.persist |= s.restarts != before;
            match judged {
                Ok(None) => {}
                Ok(Some(w)) => waiting.push(w),
                Err(reason) => return self.fail(now, reason, world, p),
            }
        }
        let active = self.steps.iter().any(|s| {
            s.batch == self.batch && matches!(s.state, StepState::Surge | StepState::Replaced)
        });
        if waiting.is_empty() && active {
            match self.gate(world) {
                Ok(None) => {}
                Ok(Some(w)) => waiting.push(w),
                Err(reason) => return self.fail(now, reason, world, p),
            }
        }
        let healthy_ms = self.policy.healthy_s as u64 * 1000;
        if !active {
            return self.finish_batch(now, world, p);
        }
        if waiting.is_empty() {
            let since = *self.healthy_since.get_or_insert(now);
            if now.saturating_sub(since) >= healthy_ms {
                return self.finish_batch(now, world, p);
            }
            waiting.push(format!(
                "healthy for {} of {}",
                secs(now - since),
                secs(healthy_ms)
            ));
        } else {
            self.healthy_since = None;
        }
        let started = self.started_at.unwrap_or(now);
        let deadline_ms = self.policy.deadline_s as u64 * 1000;
        if now.saturating_sub(started) >= deadline_ms {
            let reason = format!(
                "deadline: {} not healthy for {} within {} ({})",
                self.batch_label(),
                secs(healthy_ms),
                secs(deadline_ms),
                waiting.join("; ")
            );
            return self.fail(now, reason, world, p);
        }
        self.waiting = waiting;
    }

    fn finish_batch(&mut self, now: u64, world: &World, p: &mut Progress) {
        let mut done = vec![];
        for s in self.steps.iter_mut().filter(|s| s.batch == self.batch) {
            if matches!(s.state, StepState::Surge | StepState::Replaced) {
                if s.state == StepState::Surge {
                    p.nodes.extend(s.old.iter().map(|c| c.node.clone()));
                }
                s.state = StepState::Done;
                done.push(s.component.clone());
            }
        }
        p.persist = true;
        p.lines.push(if done.is_empty() {
            format!(
                "{}: {} done (nothing in it runs: its nodes are offline)",
                self.label(),
                self.batch_label()
            )
        } else {
            format!(
                "{}: {} done ({} healthy for {}): old copies stop",
                self.label(),
                self.batch_label(),
                done.join(", "),
                secs(self.policy.healthy_s as u64 * 1000)
            )
        });
        self.waiting.clear();
        if self.batch + 1 < self.batches {
            self.batch += 1;
            self.start_batch(now, world, p);
            self.check_batch(now, world, p);
        } else {
            self.phase = Phase::Done;
            let deferred: Vec<&str> = self
                .steps
                .iter()
                .filter(|s| s.state == StepState::Deferred)
                .map(|s| s.component.as_str())
                .collect();
            p.lines.push(format!(
                "{}: done, revision {} runs{}",
                self.label(),
                self.to,
                if deferred.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} on offline nodes get it when they return)",
                        deferred.join(", ")
                    )
                }
            ));
        }
    }

    /// The rollout failed for `reason`: back to the old revision (auto rollback) or stay.
    pub fn fail(&mut self, now: u64, reason: String, world: &World, p: &mut Progress) {
        p.persist = true;
        self.waiting.clear();
        self.healthy_since = None;
        if !self.policy.auto_rollback {
            p.lines.push(format!(
                "{} failed: {reason}; it stays where it is (auto_rollback off): `cloud-broker rollback {}` goes back",
                self.label(),
                self.app
            ));
            self.phase = Phase::Failed { reason };
            return;
        }
        p.lines.push(format!(
            "{} failed: {reason}; rolling back to revision {}",
            self.label(),
            self.from
        ));
        self.start_rollback(now, reason, world, p);
    }

    /// Goes back to the old revision (a failure, or the operator's `rollback`).
    pub fn start_rollback(&mut self, now: u64, reason: String, world: &World, p: &mut Progress) {
        p.persist = true;
        p.nodes.extend(self.nodes());
        self.phase = Phase::RollingBack { reason };
        self.started_at = Some(now);
        self.check_restored(now, world, p);
    }

    fn check_restored(&mut self, now: u64, world: &World, p: &mut Progress) {
        let mut waiting = vec![];
        for s in &mut self.steps {
            if s.restored || !matches!(s.state, StepState::Replaced | StepState::Done) {
                continue;
            }
            let back = match &s.old {
                None => true,
                Some(o) if !world.online.contains(&o.node) => true,
                Some(o) => world
                    .containers
                    .get(&(o.node.clone(), o.container.name.clone()))
                    .is_some_and(|x| x.state == ContainerState::Running),
            };
            if back {
                s.restored = true;
                p.persist = true;
                p.nodes.extend(s.new.iter().map(|c| c.node.clone()));
            } else {
                let o = s.old.as_ref().expect("checked above");
                waiting.push(format!(
                    "{} on {}: the old copy starts again",
                    s.component, o.node
                ));
            }
        }
        let over = now.saturating_sub(self.started_at.unwrap_or(now))
            >= self.policy.deadline_s as u64 * 1000;
        if waiting.is_empty() || over {
            let Phase::RollingBack { reason } = &self.phase else {
                return;
            };
            let reason = reason.clone();
            p.lines.push(format!(
                "{}: rolled back, revision {} runs{} (why: {reason})",
                self.label(),
                self.from,
                if waiting.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; at the deadline still not running again: {}",
                        waiting.join("; ")
                    )
                }
            ));
            p.persist = true;
            p.nodes.extend(self.nodes());
            self.phase = Phase::RolledBack { reason };
            self.waiting.clear();
        } else {
            self.waiting = waiting;
        }
    }
}
