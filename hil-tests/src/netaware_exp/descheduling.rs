//! The descheduling scenario: the latencies of one node change while the application runs,
//! and the descheduler moves components.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_scheduler::netaware::desched::{self, Descheduler};
use acoa_scheduler::netaware::sim;
use anyhow::{Context, Result};

use crate::agents::Proc;
use crate::dynamic;
use crate::emu::HOST;
use crate::LinkSpec;

use super::*;

/// The node whose links the descheduling scenario degrades: the node holding the most
/// components other than m0's (the application then calls across it), or m0's node when the
/// application sits on one node.
pub fn degraded_node(setup: &Setup, placement: &BTreeMap<String, String>) -> Result<String> {
    let entry = placement
        .get(&setup.wf.names[setup.wf.entry])
        .context("m0 not placed")?;
    let mut by: BTreeMap<&String, usize> = BTreeMap::new();
    for n in placement.values().filter(|n| *n != entry) {
        *by.entry(n).or_default() += 1;
    }
    Ok(by
        .into_iter()
        .max_by_key(|(n, k)| (*k, std::cmp::Reverse(*n)))
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| entry.clone()))
}

/// The descheduling scenario's record.
#[derive(Clone, Debug, Default)]
pub struct DynResult {
    /// (seconds, what) of the latency change and every move.
    pub events: Vec<(f64, String)>,
    pub samples: Vec<Sample>,
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    pub change_s: f64,
    /// The node whose links were degraded.
    pub degraded: String,
    /// p95 before the change, from the change to the first move (at most 10 s), in the last
    /// 10 s.
    pub p95_before: f64,
    pub p95_degraded: f64,
    pub p95_end: f64,
}

/// Options of the descheduling scenario.
#[derive(Clone, Debug)]
pub struct DynOptions {
    pub latency_ms: f64,
    pub degraded_ms: f64,
    pub users: usize,
    /// Users the schedulers assume (the components' measured use at this load).
    pub plan_users: f64,
    pub before: Duration,
    pub after: Duration,
    /// Harness-driven descheduler ticks (`None`: the control plane deschedules by itself).
    pub tick: Option<Duration>,
    pub timeout: Duration,
}

impl Bench<'_> {
    /// The network-aware placement at `latency_ms`; after `before`, every link of m0's node goes
    /// to `degraded_ms`; the descheduler moves components (one at a time, re-pinned through
    /// the control plane) while the load runs.
    pub fn deschedule(&mut self, o: &DynOptions, sched: &Sched) -> Result<DynResult> {
        set_uniform(self.tb, &self.setup.nodes, o.latency_ms)?;
        self.runs += 1;
        let app = format!("na-dyn-{}", self.runs);
        let base = 9200 + 20 * (self.runs % 40);
        let users = o.plan_users;
        let n = self.setup.nodes.len();
        let mut pins = match sched {
            Sched::ControlPlane(_) => None,
            s => Some(
                self.setup.place(
                    s,
                    &self
                        .setup
                        .snapshot(sim::uniform_latency(n, o.latency_ms), users),
                )?,
            ),
        };
        let mut placement = self.deploy(&app, sched, pins.as_ref(), base, o.timeout)?;
        let before = placement.clone();
        self.note(format!("{app} runs: {placement:?}"));
        let t_start = self.load.now_s();
        self.load.set_users(o.users);
        std::thread::sleep(o.before);
        let victim = degraded_node(&self.setup, &placement)?;
        let change_s = self.load.now_s();
        for other in self.setup.nodes.clone() {
            if other != victim {
                self.tb
                    .set_link(&victim, &other, LinkSpec::new(o.degraded_ms, 0.0, 0.0))?;
                self.tb
                    .set_link(&other, &victim, LinkSpec::new(o.degraded_ms, 0.0, 0.0))?;
            }
        }
        let mut events = vec![(
            change_s,
            format!(
                "every link of {victim} ({}) {} -> {} ms",
                placement
                    .iter()
                    .filter(|(_, n)| **n == victim)
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                o.latency_ms,
                o.degraded_ms
            ),
        )];
        self.note(events[0].1.clone());
        let mut d = Descheduler::new(desched::Config::default())?;
        let end = Instant::now() + o.after;
        let mut next_tick = Instant::now();
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(250));
            // follow the placement the control plane reports
            if let Launch::ControlPlane(cp) = &self.launch {
                if let Ok(st) = cp.cloud.status(&app) {
                    let p = dynamic::placement_of(&st);
                    if !p.is_empty() && p != placement {
                        for (c, node) in &p {
                            if placement.get(c) != Some(node) {
                                let what = format!(
                                    "{c} moved {} -> {node}",
                                    placement.get(c).map(|s| s.as_str()).unwrap_or("?")
                                );
                                events.push((self.load.now_s(), what.clone()));
                                self.note(what);
                            }
                        }
                        placement = p;
                        self.follow(&app, &placement, base);
                    }
                }
            }
            let (Some(tick), Some(pinned)) = (o.tick, pins.as_mut()) else {
                continue;
            };
            if Instant::now() < next_tick {
                continue;
            }
            next_tick = Instant::now() + tick;
            let snap = self
                .setup
                .snapshot(latency_matrix(self.tb, &self.setup.nodes)?, users);
            let assignment: Vec<usize> = self
                .setup
                .wf
                .names
                .iter()
                .map(|c| {
                    placement
                        .get(c)
                        .and_then(|n| self.setup.node_index(n))
                        .unwrap_or(0)
                })
                .collect();
            for a in d.handle(desched::Event::Tick {
                snapshot: snap,
                assignment,
            })? {
                match a {
                    desched::Action::Move {
                        component,
                        from,
                        to,
                        gain,
                    } => {
                        let (c, to_n) = (
                            self.setup.wf.names[component].clone(),
                            self.setup.nodes[to].clone(),
                        );
                        let what = format!(
                            "descheduler: move {c} {} -> {to_n} (gain {:.0} %)",
                            self.setup.nodes[from],
                            gain * 100.0
                        );
                        events.push((self.load.now_s(), what.clone()));
                        self.note(what);
                        pinned.insert(c, to_n);
                        match &mut self.launch {
                            Launch::ControlPlane(cp) => {
                                let file = cp.workdir.join(format!("{app}.yaml"));
                                std::fs::write(
                                    &file,
                                    self.setup.app_yaml(&app, "qos", Some(pinned)),
                                )?;
                                cp.cloud.apply(&file, 30)?;
                            }
                            Launch::Processes { .. } => {
                                // processes: a rolling move; the new instance starts where it
                                // goes, the callers learn its address (they ask every second),
                                // then the old one stops
                                let p = pinned.clone();
                                let old = self.move_process(&app, &p)?;
                                placement = p;
                                self.follow(&app, &placement, base);
                                std::thread::sleep(Duration::from_millis(1500));
                                drop(old);
                            }
                        }
                    }
                    desched::Action::Abandoned { component, to } => {
                        let what = format!(
                            "descheduler: move of {} to {} abandoned",
                            self.setup.wf.names[component], self.setup.nodes[to]
                        );
                        events.push((self.load.now_s(), what.clone()));
                        self.note(what);
                    }
                }
            }
        }
        self.load.set_users(0);
        std::thread::sleep(Duration::from_secs_f64(
            (o.degraded_ms * 30.0 / 1000.0).max(1.0),
        ));
        let now = self.load.now_s();
        let samples = self.load.samples(t_start, now);
        let end_s = now - (o.degraded_ms * 30.0 / 1000.0).max(1.0);
        let win = |a: f64, b: f64| {
            stats(
                &samples
                    .iter()
                    .filter(|s| s.sent_s >= a && s.sent_s < b)
                    .copied()
                    .collect::<Vec<_>>(),
            )
            .p95
        };
        // degraded: from the change until the first move (or 10 s)
        let first_move = events.get(1).map(|e| e.0).filter(|t| *t > change_s + 1.0);
        let res = DynResult {
            p95_before: win(t_start + 2.0, change_s),
            p95_degraded: win(change_s, first_move.unwrap_or(change_s + 10.0)),
            p95_end: win(end_s - 10.0, end_s),
            events,
            samples: samples
                .iter()
                .map(|s| Sample {
                    sent_s: s.sent_s - t_start,
                    ..*s
                })
                .collect(),
            before,
            after: placement,
            change_s: change_s - t_start,
            degraded: victim,
        };
        self.undeploy(&app)?;
        Ok(res)
    }

    /// Starts the components of `p` that are not running where `p` says; returns the
    /// processes they replace (stopped when dropped).
    fn move_process(&mut self, app: &str, p: &BTreeMap<String, String>) -> Result<Vec<Proc>> {
        let mut old = Vec::new();
        let host = self.tb.addr(HOST)?;
        if let Launch::Processes { bin, procs, logdir } = &mut self.launch {
            for (c, node) in p {
                let key = (app.to_string(), c.clone());
                let here = procs
                    .get(&key)
                    .map(|pr| pr.name.ends_with(&format!("@{node}")))
                    .unwrap_or(false);
                if here {
                    continue;
                }
                old.extend(procs.remove(&key));
                let log = logdir.join(format!("{app}-{c}-{node}.log"));
                let proc = bench::spawn_micro(self.tb, bin, host, app, c, node, &log)?;
                procs.insert(key, proc);
            }
        }
        Ok(old)
    }
}
