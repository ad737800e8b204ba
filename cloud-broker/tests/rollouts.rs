//! Revisions and rollouts through the engine, with plain values: the railway cluster, the
//! smoke-monitoring application with an `update` block, simulated agents that run at once
//! what their desired state says (a bad image's containers exit), time in milliseconds.
//! The end-to-end runs with real agents and Podman are not here (see the report of this
//! branch).

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::topics;
use acoa_shared::wire::{
    self, ActualState, ComponentSample, ComponentUsage, ContainerState, ContainerStatus,
    ServiceSample,
};
use cloud_broker::engine::{Action, EngineConfig, Event};
use cloud_broker::records::{rollback_request, EnvDoc, Snapshot};
use cloud_broker::status::AppStatus;
use cloud_broker::testkit::engine::{
    desired_published, railway, railway_app, statuses, EngineSim as Sim,
};

const APP: &str = "smoke-monitoring";
const UPDATE: &str = "update: {batch_size: 2, canaries: 1, healthy_s: 2, deadline_s: 20}\n";

/// The definition with every image at `version` (and the update block).
fn definition(version: u32) -> Vec<u8> {
    let text = String::from_utf8(railway_app(APP)).unwrap();
    format!(
        "{}{UPDATE}",
        text.replace(":1'", &format!(":{version}'"))
            .replace(":1\n", &format!(":{version}\n"))
    )
    .into_bytes()
}

/// The agents: each node runs what its desired state says; containers whose image is in
/// `bad` exit at once. With `measure`, each node also reports its containers' service times
/// (as their workloads would): 60 ms per message for an image in `slow`, 0.5 ms for others.
struct Agents {
    seq: u64,
    bad: BTreeSet<String>,
    slow: BTreeSet<String>,
    measure: bool,
}

impl Agents {
    fn report(&mut self, sim: &mut Sim, nodes: &[String]) -> Vec<Action> {
        let mut out = vec![];
        for n in nodes {
            let Some(d) = sim.e.desired(n).cloned() else {
                continue;
            };
            self.seq += 1;
            let mut a = ActualState {
                node: wire::name(n).unwrap(),
                generation: d.generation,
                seq: self.seq,
                run: 0,
                containers: Default::default(),
            };
            for c in &d.containers {
                let bad = self.bad.contains(&c.image);
                a.containers
                    .push(ContainerStatus {
                        name: wire::name(&c.name).unwrap(),
                        image: wire::bounded("image", &c.image).unwrap(),
                        state: if bad {
                            ContainerState::Exited
                        } else {
                            ContainerState::Running
                        },
                        restarts: 0,
                        error: Default::default(),
                        health: None,
                    })
                    .unwrap();
            }
            out.extend(sim.feed(Event::Actual(Box::new(a))));
            if self.measure {
                let u = ComponentUsage {
                    node: wire::name(n).unwrap(),
                    seq: self.seq,
                    run: 0,
                    period_ms: 1000,
                    components: d
                        .containers
                        .iter()
                        .map(|c| ComponentSample {
                            app: wire::name(&c.app).unwrap(),
                            component: wire::name(&c.component).unwrap(),
                            container: wire::name(&c.name).unwrap(),
                            cpu_millis: None,
                            memory_mb: None,
                            traffic: Default::default(),
                            service: Some(ServiceSample {
                                mean_ms: if self.slow.contains(&c.image) {
                                    60.0
                                } else {
                                    0.5
                                },
                                messages: 10,
                            }),
                        })
                        .collect(),
                };
                out.extend(sim.feed(Event::Usage(Box::new(u))));
            }
        }
        out
    }
}

/// The nodes report nothing but their actual states here: they are not judged on silence.
fn config() -> EngineConfig {
    EngineConfig {
        node_timeout_ms: 3_600_000,
        ..EngineConfig::default()
    }
}

fn nodes() -> Vec<String> {
    railway().nodes.iter().map(|n| n.name.clone()).collect()
}

/// Per component, the images of its running copies, from the desired states (the agents run
/// them at once).
fn copies(sim: &Sim) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in nodes() {
        for c in sim
            .e
            .desired(&n)
            .map(|d| d.containers.clone())
            .unwrap_or_default()
        {
            m.entry(c.component.clone())
                .or_default()
                .push(c.image.clone());
        }
    }
    m
}

/// The railway cluster with revision 1 placed and running.
fn placed() -> (Sim, Agents) {
    let mut sim = Sim::new(config());
    let mut agents = Agents {
        seq: 0,
        bad: BTreeSet::new(),
        slow: BTreeSet::new(),
        measure: false,
    };
    sim.join_cluster(&railway());
    sim.publish(APP, definition(1));
    agents.report(&mut sim, &nodes());
    sim.tick(1000);
    agents.report(&mut sim, &nodes());
    (sim, agents)
}

fn last_status(actions: &[Action]) -> Option<AppStatus> {
    statuses(actions, APP).pop()
}

/// Ticks of one second with the agents following, until `done` says so (at most `max_s`);
/// checks at every step that every component has a running copy. Returns the seconds taken
/// and every status published.
fn run_until(
    sim: &mut Sim,
    agents: &mut Agents,
    max_s: u64,
    done: impl Fn(&AppStatus) -> bool,
) -> (u64, Vec<AppStatus>) {
    let mut seen = vec![];
    for s in 1..=max_s {
        let mut acts = sim.tick(1000);
        acts.extend(agents.report(sim, &nodes()));
        let c = copies(sim);
        for comp in [
            "measurement",
            "batching",
            "level-detection",
            "storage",
            "alarm",
        ] {
            let running = c
                .get(comp)
                .into_iter()
                .flatten()
                .filter(|i| !agents.bad.contains(*i))
                .count();
            assert!(running >= 1, "{comp} has no running copy at {s} s: {c:?}");
        }
        seen.extend(statuses(&acts, APP));
        if seen.last().is_some_and(&done) {
            return (s, seen);
        }
    }
    panic!("not done within {max_s} s: {:?}", seen.last());
}

/// A new process on the store's records `snap`: restored, the cluster joined, started.
fn restarted(sim: &Sim, snap: Snapshot) -> (Sim, Vec<Action>) {
    let mut sim2 = Sim::restore(config(), sim.key.clone(), snap);
    sim2.join_cluster(&railway());
    let acts = sim2.feed(Event::StartupDone);
    (sim2, acts)
}

/// The rollout to revision 2 ends done, every copy of revision 2.
fn finishes_at_revision_2(sim: &mut Sim, agents: &mut Agents, max_s: u64) {
    let (_, seen) = run_until(sim, agents, max_s, |s| phase(s) == "done");
    assert_eq!(seen.last().unwrap().revision, Some(2));
    for imgs in copies(sim).values() {
        assert_eq!(imgs.len(), 1);
        assert!(imgs[0].ends_with(":2"), "{imgs:?}");
    }
}

fn phase(st: &AppStatus) -> &str {
    st.rollout.as_ref().map(|r| r.phase.as_str()).unwrap_or("")
}

#[test]
fn a_good_revision_goes_batch_by_batch_and_no_component_is_ever_without_a_running_copy() {
    let (mut sim, mut agents) = placed();
    let before = sim.assignment(APP);
    let acts = sim.publish(APP, definition(2));
    let st = last_status(&acts).unwrap();
    assert_eq!(st.revision, Some(1));
    assert_eq!(st.revisions.len(), 2);
    let r = st.rollout.as_ref().unwrap();
    assert_eq!((r.from, r.to, r.batch.as_str()), (1, 2, "1/3"));
    // the canary's new copy runs beside the old one
    let c = copies(&sim);
    assert_eq!(c.values().filter(|v| v.len() == 2).count(), 1, "{c:?}");
    let (secs, seen) = run_until(&mut sim, &mut agents, 30, |s| phase(s) == "done");
    let batches: BTreeSet<String> = seen
        .iter()
        .filter_map(|s| s.rollout.as_ref().map(|r| r.batch.clone()))
        .collect();
    assert_eq!(batches, ["1/3", "2/3", "3/3"].map(String::from).into());
    assert!(
        (6..=12).contains(&secs),
        "3 batches of 2 s healthy: {secs} s"
    );
    let st = seen.last().unwrap();
    assert_eq!(st.revision, Some(2));
    assert_eq!(st.state, "running", "{st:?}");
    assert_eq!(
        sim.assignment(APP),
        before,
        "an image-only revision keeps the placement"
    );
    for imgs in copies(&sim).values() {
        assert_eq!(imgs.len(), 1);
        assert!(imgs[0].ends_with(":2"), "{imgs:?}");
    }
    // the persisted history says so
    assert_eq!(sim.snap.history[APP].current, 2);
    assert!(sim.snap.history[APP].rollout.is_none());
}

#[test]
fn a_bad_image_rolls_back_by_itself_and_says_why() {
    let (mut sim, mut agents) = placed();
    agents.bad = ["localhost/acoa/smoke-measurement:3".to_string()].into();
    sim.publish(APP, definition(3));
    let (_, seen) = run_until(&mut sim, &mut agents, 30, |s| phase(s) == "rolled-back");
    let st = seen.last().unwrap();
    let reason = st.rollout.as_ref().unwrap().reason.clone().unwrap();
    assert!(
        reason.contains("measurement on") && reason.contains("the new copy exited"),
        "{reason}"
    );
    assert_eq!(st.revision, Some(1));
    assert!(st.revisions[1]
        .failed
        .as_ref()
        .unwrap()
        .starts_with("rolled back: "));
    for imgs in copies(&sim).values() {
        assert_eq!(imgs.len(), 1);
        assert!(imgs[0].ends_with(":1"), "{imgs:?}");
    }
    // the good definition is the broker's retained one again, and its echo changes nothing
    let republished = sim.log.iter().rev().find_map(|a| match a {
        Action::Publish {
            topic,
            payload,
            retain: true,
        } if *topic == topics::app(APP) => Some(payload.clone()),
        _ => None,
    });
    assert_eq!(republished.unwrap(), definition(1));
    assert!(sim.publish(APP, definition(1)).is_empty());
    // the bad definition replayed (a restart reads the broker's retained messages) is not
    // rolled out again
    assert!(sim.publish(APP, definition(3)).is_empty());
}

#[test]
fn a_control_plane_restarted_mid_rollout_finishes_it() {
    let (mut sim, mut agents) = placed();
    sim.publish(APP, definition(2));
    run_until(&mut sim, &mut agents, 30, |s| {
        s.rollout.as_ref().is_some_and(|r| r.batch == "2/3")
    });
    let (mut sim2, _) = restarted(&sim, sim.snap.clone());
    finishes_at_revision_2(&mut sim2, &mut agents, 30);
}

/// A rolled-back revision's copy and the next revision's copy can have one name (they
/// alternate with the record's): until its node reports on the desired state that starts the
/// new one, what it reported is the earlier copy's, and must not fail (or pass) the new one.
#[test]
fn a_new_copy_is_judged_on_its_nodes_report_after_its_desired_state_not_on_an_earlier_copy_of_its_name(
) {
    let (mut sim, mut agents) = placed();
    // revision 2 done: its copies keep their suffixed names, the next copies take the plain ones
    sim.publish(APP, definition(2));
    run_until(&mut sim, &mut agents, 30, |s| phase(s) == "done");
    agents.bad = ["localhost/acoa/smoke-measurement:3".to_string()].into();
    sim.publish(APP, definition(3));
    run_until(&mut sim, &mut agents, 30, |s| phase(s) == "rolled-back");
    // revision 4 at once: the agents' last actual states still show revision 3's copies
    agents.bad.clear();
    let mut seen = statuses(&sim.publish(APP, definition(4)), APP);
    seen.extend(statuses(&sim.tick(1000), APP));
    let ended: Vec<_> = seen
        .iter()
        .filter_map(|s| s.rollout.as_ref())
        .filter(|r| {
            r.to == 4 && matches!(r.phase.as_str(), "failed" | "rolling-back" | "rolled-back")
        })
        .collect();
    assert!(ended.is_empty(), "judged on the earlier copy: {ended:?}");
    let (_, seen) = run_until(&mut sim, &mut agents, 40, |s| phase(s) == "done");
    assert_eq!(seen.last().unwrap().revision, Some(4));
}

/// What a node reports about a container counts from the desired state that gave it its
/// spec on, not only from the node's newest one: another application's change on the node
/// (a new generation the agent has not applied yet) does not hide the batch's new copy and
/// start its healthy time again.
#[test]
fn another_applications_change_on_the_node_does_not_hide_the_batchs_new_copy() {
    let (mut sim, mut agents) = placed();
    sim.publish(APP, definition(2));
    agents.report(&mut sim, &nodes());
    sim.tick(1000);
    let canary = sim
        .e
        .placement(APP)
        .unwrap()
        .assignment
        .iter()
        .find(|(c, n)| {
            sim.e
                .desired(n)
                .unwrap()
                .containers
                .iter()
                .any(|d| d.component == **c && d.image.ends_with(":2"))
        })
        .map(|(_, n)| n.clone())
        .expect("the canary's node");
    let other = format!(
        "application: other\ncomponents:\n- {{name: x, image: 'localhost/acoa/other:1', requires: {{node: {canary}}}}}\n"
    );
    let before = sim.e.desired(&canary).unwrap().generation;
    sim.publish("other", other.into_bytes());
    assert!(
        sim.e.desired(&canary).unwrap().generation > before,
        "a new generation"
    );
    // the agents have not applied it yet: the canary's healthy time (2 s) still ends
    let seen = statuses(&sim.tick(1000), APP);
    let r = seen
        .last()
        .expect("the rollout's status")
        .rollout
        .clone()
        .unwrap();
    assert_eq!(r.batch, "2/3", "the canary's batch done: {:?}", r.waiting);
    assert!(
        !r.waiting.iter().any(|w| w.starts_with("measurement on")),
        "{:?}",
        r.waiting
    );
}

/// A definition changed without an `update` block is given to the nodes at once, under the
/// same container names: the application is not "running" on the reports of the containers
/// it replaces, only once its nodes report on the new specs (so `apply --wait-s` waits for them).
#[test]
fn an_image_changed_in_place_is_running_only_once_its_nodes_report_the_new_spec() {
    let (mut sim, mut agents) = placed();
    let text = String::from_utf8(railway_app(APP)).unwrap();
    let v2 = text.replace(":1'", ":2'").replace(":1\n", ":2\n");
    let st = last_status(&sim.publish(APP, v2.into_bytes())).expect("a status");
    assert_ne!(
        st.state, "running",
        "on the old containers' reports: {:?}",
        st.not_running
    );
    assert!(
        st.not_running.iter().all(|n| n.state == "pending"),
        "{:?}",
        st.not_running
    );
    let st = last_status(&agents.report(&mut sim, &nodes())).expect("a status");
    assert_eq!(st.state, "running");
}

/// A control plane killed between the two writes of a batch's start (the history first, then
/// the desired states) finds, after its restart, desired states that lack the batch's new
/// copies: it brings them in line with the persisted rollout, or the batch would wait for
/// copies no node was ever told to run, and roll back at its deadline.
#[test]
fn a_control_plane_killed_between_the_history_and_the_desired_states_finishes_the_rollout() {
    let (mut sim, mut agents) = placed();
    let before = sim.snap.desired.clone();
    sim.publish(APP, definition(2));
    // the store as the kill left it: the rollout's batch started, the desired states older
    let mut snap = sim.snap.clone();
    assert_ne!(snap.desired, before, "the batch changed some desired state");
    snap.desired = before.clone();
    let (mut sim2, acts) = restarted(&sim, snap);
    let repaired = desired_published(&acts, &sim2.key);
    assert!(
        repaired
            .values()
            .any(|d| d.containers.iter().any(|c| c.image.ends_with(":2"))),
        "the batch's new copy is ordered again: {repaired:?}"
    );
    for (node, d) in &repaired {
        if let Some(old) = before.get(node).filter(|o| o.containers != d.containers) {
            assert!(d.generation > old.generation, "a new generation for {node}");
        }
    }
    finishes_at_revision_2(&mut sim2, &mut agents, 40);
}

/// Killed between the two writes of a deletion (the record removed, then the desired
/// states): after the restart no node keeps a container of the deleted application.
#[test]
fn a_control_plane_killed_between_a_deletion_and_the_desired_states_stops_the_containers() {
    let (mut sim, _) = placed();
    let before = sim.snap.desired.clone();
    sim.publish(APP, vec![]);
    let mut snap = sim.snap.clone();
    assert!(!snap.apps.contains_key(APP));
    snap.desired = before.clone();
    let (sim2, acts) = restarted(&sim, snap);
    let repaired = desired_published(&acts, &sim2.key);
    for (node, d) in &before {
        if d.containers.is_empty() {
            continue;
        }
        let now = &repaired[node];
        assert!(
            now.containers.is_empty(),
            "{node} keeps {:?}",
            now.containers
        );
        assert!(now.generation > d.generation);
    }
}

/// A store written by a control plane that described the same containers otherwise (here:
/// one environment variable more) is not taken for an interrupted write: no new generation,
/// so an upgrade restarts no container.
#[test]
fn a_restart_on_desired_states_that_differ_only_in_description_gives_no_new_generation() {
    let (sim, _) = placed();
    let mut snap = sim.snap.clone();
    for d in snap.desired.values_mut() {
        for c in &mut d.containers {
            c.env.push(EnvDoc {
                name: "OLDER".into(),
                value: "1".into(),
            });
        }
    }
    let (sim2, _) = restarted(&sim, snap.clone());
    for (node, d) in &snap.desired {
        assert_eq!(sim2.e.desired(node), Some(d), "{node} as stored");
    }
}

#[test]
fn the_operator_rolls_back_during_a_rollout_and_to_an_older_revision_after() {
    let (mut sim, mut agents) = placed();
    sim.publish(APP, definition(2));
    sim.tick(1000);
    let acts = sim.publish(APP, rollback_request(APP, None));
    let st = last_status(&acts).unwrap();
    assert_eq!(
        st.rollout.as_ref().unwrap().reason.as_deref(),
        Some("rolled back by the operator")
    );
    // the canary's old copy never stopped: back at once
    assert_eq!(phase(&st), "rolled-back");
    assert_eq!(st.revision, Some(1));
    // revisions 1 (runs) and 2 (rolled back); a good revision 3, then back to 1 by number
    sim.publish(APP, definition(4));
    run_until(&mut sim, &mut agents, 30, |s| phase(s) == "done");
    sim.publish(APP, rollback_request(APP, Some(1)));
    let (_, seen) = run_until(&mut sim, &mut agents, 30, |s| phase(s) == "done");
    let st = seen.last().unwrap();
    assert_eq!(
        st.revision,
        Some(4),
        "revision 1 applied again as revision 4"
    );
    assert_eq!(st.revisions.len(), 4);
    for imgs in copies(&sim).values() {
        assert!(imgs[0].ends_with(":1"), "{imgs:?}");
    }
}

#[test]
fn a_revision_that_breaks_the_gate_on_the_alarm_path_rolls_back() {
    let (mut sim, mut agents) = placed();
    // revision 2: the same with a gate on the alarm path (images unchanged: nothing rolls out)
    let gated = |text: Vec<u8>| {
        String::from_utf8(text)
            .unwrap()
            .replace(
                UPDATE,
                "update: {healthy_s: 3, deadline_s: 20, gate: {path: alarm, max_latency_ms: 10}}\n",
            )
            .into_bytes()
    };
    sim.publish(APP, gated(definition(1)));
    let before = sim.assignment(APP);
    assert_eq!(
        before["level-detection"], "n13",
        "beside the sensor: the alarm path is about 1 ms"
    );
    // revision 3 pins level-detection to a cloud node: placed again, and its alarm path then
    // crosses two WAN links (17 + 23 ms)
    let pinned = String::from_utf8(gated(definition(1)))
        .unwrap()
        .replace(
            "- {name: level-detection, image: 'localhost/acoa/smoke-level:1'}",
            "- {name: level-detection, image: 'localhost/acoa/smoke-level:1', requires: {node: n10}}",
        )
        .into_bytes();
    sim.publish(APP, pinned);
    let (_, seen) = run_until(&mut sim, &mut agents, 30, |s| phase(s) == "rolled-back");
    let st = seen.last().unwrap();
    let reason = st.rollout.as_ref().unwrap().reason.clone().unwrap();
    assert!(
        reason.starts_with("gate broken: path alarm measures")
            && reason.ends_with("above its bound of 10 ms"),
        "{reason}"
    );
    assert_eq!(st.revision, Some(2));
    assert_eq!(
        sim.assignment(APP),
        before,
        "the placement of revision 2 is back"
    );
}

#[test]
fn a_revision_whose_workload_adds_delay_on_the_alarm_path_rolls_back_and_the_old_copy_does_not_hide_it(
) {
    let (mut sim, mut agents) = placed();
    agents.measure = true;
    let gate = "update: {healthy_s: 3, deadline_s: 20, gate: {path: alarm, max_latency_ms: 10}}\n";
    let gated = |text: Vec<u8>| {
        String::from_utf8(text)
            .unwrap()
            .replace(UPDATE, gate)
            .into_bytes()
    };
    sim.publish(APP, gated(definition(1)));
    for _ in 0..3 {
        sim.tick(1000);
        agents.report(&mut sim, &nodes());
    }
    // the fleet document shows each path's network latency and its service times apart
    let fleet = cloud_broker::observe::fleet::build(&sim.e.view(), vec![]);
    let doc = fleet.apps.iter().find(|a| a.name == APP).unwrap();
    let alarm = doc.paths.iter().find(|p| p.name == "alarm").unwrap();
    assert!(alarm.latency_ms.is_some(), "{alarm:?}");
    assert_eq!(
        alarm.service_ms,
        Some(1.5),
        "measurement, level-detection and alarm: 0.5 ms each"
    );
    // revision 3: level-detection's new image takes 60 ms per message (same node, same
    // placement: only the workload is slower)
    let slow = "localhost/acoa/smoke-level:3";
    agents.slow = [slow.to_string()].into();
    let text = String::from_utf8(gated(definition(1)))
        .unwrap()
        .replace("smoke-level:1", "smoke-level:3");
    let before = sim.assignment(APP);
    sim.publish(APP, text.into_bytes());
    let mut side_by_side = false;
    let (_, seen) = run_until(&mut sim, &mut agents, 30, |s| phase(s) == "rolled-back");
    for st in &seen {
        let r = st.rollout.as_ref();
        side_by_side |= r.is_some_and(|r| {
            r.components.get("level-detection").map(String::as_str) == Some("new beside old")
        });
    }
    assert!(
        side_by_side,
        "the new copy ran beside the old one: {seen:?}"
    );
    let st = seen.last().unwrap();
    let reason = st.rollout.as_ref().unwrap().reason.clone().unwrap();
    // the old copy (0.5 ms, still reporting beside the new one) does not hide the new one's 60 ms
    assert!(
        reason.starts_with("gate broken: path alarm measures ")
            && reason.contains("level-detection 60.0 ms")
            && reason.contains("+ service 61.0 ms")
            && reason.ends_with("above its bound of 10 ms"),
        "{reason}"
    );
    assert_eq!(st.revision, Some(2));
    assert_eq!(sim.assignment(APP), before);
    assert_eq!(
        copies(&sim)["level-detection"],
        ["localhost/acoa/smoke-level:1"]
    );
}
