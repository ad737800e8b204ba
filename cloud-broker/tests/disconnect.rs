//! Node states from evidence and the disconnect policy, through the engine with plain values:
//! the railway cluster's nodes report every second (signed reports are taken as verified
//! here: `ingest` checks signatures), their link samples say when each peer last answered,
//! placement jobs run inline with the real scheduler.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::path::Path;

use acoa_shared::model::Cluster;
use acoa_shared::wire::{self, LinkSample, NodeLoad};
use cloud_broker::engine::{Action, EngineConfig, Event, Liveness, NodeState};
use cloud_broker::status::AppStatus;
use cloud_broker::testkit::engine::{
    desired_states, first_report, link_metrics, railway, statuses, EngineSim,
};
use cloud_broker::testkit::running;
use ed25519_dalek::SigningKey;

const APP: &str = "smoke-monitoring";

/// The railway smoke-monitoring application with `policy` as its `disconnect:` value.
fn app_with(policy: &str) -> Vec<u8> {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/railway/smoke-monitoring.yaml");
    let mut text = std::fs::read_to_string(p).unwrap();
    text.push_str(&format!("disconnect: {policy}\n"));
    text.into_bytes()
}

/// The railway cluster reporting to an engine every second.
struct Railway {
    sim: EngineSim,
    c: Cluster,
    /// When each (prober, peer) last had an answer.
    answered: HashMap<(String, String), u64>,
}

impl Deref for Railway {
    type Target = EngineSim;
    fn deref(&self) -> &EngineSim {
        &self.sim
    }
}

impl DerefMut for Railway {
    fn deref_mut(&mut self) -> &mut EngineSim {
        &mut self.sim
    }
}

impl Railway {
    fn new(cfg: EngineConfig) -> Railway {
        let mut r = Railway {
            sim: EngineSim::new(cfg),
            c: railway(),
            answered: HashMap::new(),
        };
        r.second(&[], |_, _| true);
        r.feed(Event::StartupDone);
        r
    }

    /// One second: every node but `silent` reports (its link samples: `answers(prober, peer)`
    /// says whether the peer answered this second), then the engine ticks.
    fn second(&mut self, silent: &[&str], answers: impl Fn(&str, &str) -> bool) -> Vec<Action> {
        self.now += 1000;
        let now = self.now;
        let mut out = vec![];
        let nodes = self.c.nodes.clone();
        for n in nodes.iter().filter(|n| !silent.contains(&n.name.as_str())) {
            let report = wire::NodeReport {
                load: NodeLoad::default(),
                ..first_report(n)
            };
            out.extend(self.feed(Event::Report(Box::new(report))));
        }
        for n in nodes.iter().filter(|n| !silent.contains(&n.name.as_str())) {
            let mut samples = vec![];
            for k in self
                .c
                .links
                .iter()
                .filter(|k| k.from == n.name && k.to != n.name)
            {
                let pair = (k.from.clone(), k.to.clone());
                if answers(&k.from, &k.to) {
                    self.answered.insert(pair.clone(), now);
                }
                let last_answer_ms = self
                    .answered
                    .get(&pair)
                    .map_or(wire::NEVER_ANSWERED, |t| (now - t) as u32);
                samples.push(LinkSample {
                    peer: wire::name(&k.to).unwrap(),
                    latency_ms: k.latency_ms as f32,
                    jitter_ms: k.jitter_ms as f32,
                    success: k.success as f32,
                    samples: 20,
                    last_answer_ms,
                });
            }
            let l = link_metrics(&n.name, samples);
            out.extend(self.feed(Event::links(Box::new(l))));
        }
        out.extend(self.feed(Event::Tick));
        out
    }

    /// `seconds` seconds with `silent` silent and answering only whom `answers` says.
    fn seconds(
        &mut self,
        seconds: u32,
        silent: &[&str],
        answers: impl Fn(&str, &str) -> bool,
    ) -> Vec<Action> {
        (0..seconds)
            .flat_map(|_| self.second(silent, &answers))
            .collect()
    }

    fn placement(&self) -> BTreeMap<String, String> {
        self.assignment(APP)
    }

    /// `node` reports that it runs every container of the desired state it was last given.
    fn runs_desired(&mut self, node: &str) -> Vec<Action> {
        let d = self.e.desired(node).cloned();
        let containers = d.iter().flat_map(|d| d.containers.iter());
        let a = running(
            node,
            d.as_ref().map_or(0, |d| d.generation),
            self.now,
            containers.map(|s| (s.name.as_str(), s.image.as_str())),
        );
        self.feed(Event::Actual(Box::new(a)))
    }

    fn place(&mut self, policy: &str) {
        self.publish(APP, app_with(policy));
        let nodes: Vec<String> = self.placement().values().cloned().collect();
        for n in nodes {
            self.runs_desired(&n);
        }
    }
}

/// The nodes given a new desired state in `actions`.
fn desired_to(actions: &[Action], key: &SigningKey) -> BTreeMap<String, Vec<String>> {
    desired_states(actions, key)
        .into_iter()
        .map(|(n, d)| (n, d.containers.iter().map(|c| c.name.to_string()).collect()))
        .collect()
}

fn last_status(actions: &[Action]) -> Option<AppStatus> {
    statuses(actions, APP).pop()
}

/// Smoke monitoring placed with `on_return: {on_return}` and 5 s of tolerance, the node of its
/// storage cut off from the cloud until storage is placed elsewhere and runs there: the
/// railway, that node and the one storage moved to.
fn storage_replaced(on_return: &str) -> (Railway, String, String) {
    let mut r = Railway::new(EngineConfig::default());
    r.place(&format!("{{tolerate_s: 5, on_return: {on_return}}}"));
    let victim = r.placement()["storage"].clone();
    r.seconds(16, &[&victim], |_, _| true);
    let moved_to = r.placement()["storage"].clone();
    assert_ne!(moved_to, victim);
    r.runs_desired(&moved_to);
    (r, victim, moved_to)
}

#[test]
fn cut_from_the_cloud_only_it_is_unreachable_then_tolerated_then_replaced_and_on_return_the_original_stays(
) {
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 30, on_return: original}");
    let before = r.placement();
    let victim = before["storage"].clone();
    let v = victim.as_str();
    // its link to the cloud is cut; its peers still reach it
    let acts = r.seconds(4, &[v], |_, _| true);
    assert_eq!(r.e.node_state(v), Some(NodeState::Unreachable));
    assert_eq!(NodeState::Unreachable.as_str(), "unreachable");
    let st = last_status(&acts).expect("the status says why storage waits");
    assert!(
        st.disconnect.iter().any(|l| l.contains(&format!(
            "storage on {v}: node unreachable; tolerated for 30 s"
        ))),
        "{:?}",
        st.disconnect
    );
    // nothing moves, nothing is published to anyone, within the tolerance
    let acts = r.seconds(24, &[v], |_, _| true);
    assert_eq!(r.placement(), before);
    assert!(
        desired_to(&acts, &r.key).is_empty(),
        "{:?}",
        desired_to(&acts, &r.key)
    );
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Schedule(_))),
        "no job while it waits"
    );
    // past the tolerance (and the next evaluation) storage is placed elsewhere; the
    // unreachable node's desired state is held
    let acts = r.seconds(12, &[v], |_, _| true);
    let after = r.placement();
    let moved_to = after["storage"].clone();
    assert_ne!(moved_to, victim);
    for (c, n) in &before {
        if *n == victim {
            assert_ne!(
                after[c], victim,
                "{c} leaves the node once tolerated long enough"
            );
        } else {
            assert_eq!(&after[c], n, "{c} stays");
        }
    }
    let d = desired_to(&acts, &r.key);
    assert!(d[&moved_to].contains(&format!("{APP}.storage")), "{d:?}");
    assert!(!d.contains_key(&victim), "held while it is cut off: {d:?}");
    r.runs_desired(&moved_to);
    let held_gen = r.e.desired(v).unwrap().generation;
    // it comes back: the original runs (its agent ran on); policy original: the copy placed
    // meanwhile stops, the returning node keeps its desired state (no restart)
    let acts = r.second(&[], |_, _| true);
    assert_eq!(r.e.node_state(v), Some(NodeState::Online));
    assert!(
        desired_to(&acts, &r.key).is_empty(),
        "settled on its actual state"
    );
    let acts = r.runs_desired(v);
    assert_eq!(r.placement(), before);
    let d = desired_to(&acts, &r.key);
    assert!(
        !d.contains_key(&victim),
        "unchanged: not published again: {d:?}"
    );
    assert_eq!(r.e.desired(v).unwrap().generation, held_gen);
    assert!(
        !d[&moved_to].contains(&format!("{APP}.storage")),
        "the replacement stops: {d:?}"
    );
    let st = last_status(&acts).unwrap();
    assert!(
        st.disconnect.iter().any(|l| l.contains(&format!(
            "storage: the original on {v} stays, the copy on {moved_to} stops (on_return: original)"
        ))),
        "{:?}",
        st.disconnect
    );
}

/// A control plane restarted while a node is cut off does not know it was: the node's held
/// desired state (more than the records put there) is not taken for one a crash left behind,
/// so the node still keeps its copy until its return is settled.
#[test]
fn a_control_plane_restarted_while_a_node_is_cut_off_keeps_its_held_desired_state() {
    let (r, victim, _) = storage_replaced("original");
    let held = r.e.desired(&victim).cloned().unwrap();
    assert!(held.containers.iter().any(|c| c.component == "storage"));
    let mut r2 = EngineSim::restore(EngineConfig::default(), r.key.clone(), r.snap.clone());
    r2.join_cluster(&r.c);
    let acts = r2.feed(Event::StartupDone);
    let d = desired_to(&acts, &r2.key);
    assert_eq!(
        d.get(&victim),
        Some(&held.containers.iter().map(|c| c.name.to_string()).collect()),
        "republished as it was"
    );
    assert_eq!(r2.e.desired(&victim), Some(&held));
}

#[test]
fn on_return_replacement_keeps_the_copy_placed_meanwhile_and_the_original_stops() {
    let (mut r, victim, moved_to) = storage_replaced("replacement");
    let v = victim.as_str();
    let held_gen = r.e.desired(v).unwrap().generation;
    r.second(&[], |_, _| true);
    let acts = r.runs_desired(v);
    assert_eq!(r.placement()["storage"], moved_to);
    let d = desired_to(&acts, &r.key);
    assert!(!d[&victim].contains(&format!("{APP}.storage")), "{d:?}");
    assert_eq!(r.e.desired(v).unwrap().generation, held_gen + 1);
    assert!(last_status(&acts)
        .unwrap()
        .disconnect
        .iter()
        .any(|l| l.contains(&format!(
            "the replacement on {moved_to} stays, the original on {v} stops"
        ))));
}

#[test]
fn a_crash_its_peers_see_too_is_lost_and_replaced_at_once() {
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 600}");
    let before = r.placement();
    let victim = before["storage"].clone();
    let v = victim.as_str();
    let nobody_reaches = |_: &str, to: &str| to != v;
    let mut lost_at = None;
    for s in 1..=15 {
        let acts = r.second(&[v], nobody_reaches);
        if r.e.node_state(v) == Some(NodeState::Lost) {
            lost_at = Some(s);
            // replaced in the same step as the decision
            assert_ne!(r.placement()["storage"], victim);
            assert!(desired_to(&acts, &r.key).contains_key(&victim));
            break;
        }
        assert_ne!(
            r.e.node_state(v),
            Some(NodeState::Unreachable),
            "second {s}"
        );
    }
    let s = lost_at.expect("lost within 15 s");
    assert!(
        (10..=12).contains(&s),
        "lost after {s} s: the 10 s evidence window"
    );
}

#[test]
fn a_whole_train_cut_off_keeps_its_components_for_good_and_nothing_runs_twice() {
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 5}");
    let before = r.placement();
    let train = ["n13", "n14", "n15"];
    let in_train: Vec<&String> = before
        .values()
        .filter(|n| train.contains(&n.as_str()))
        .collect();
    assert!(
        in_train.len() >= 2,
        "measurement and alarm are train hardware: {before:?}"
    );
    // the tunnel: no one outside reaches the train
    let cut = |from: &str, to: &str| train.contains(&from) == train.contains(&to);
    let acts = r.seconds(30, &train, cut);
    for n in train {
        assert_eq!(r.e.node_state(n), Some(NodeState::Unreachable), "{n}");
    }
    assert_eq!(r.placement(), before, "nothing moves out of the train");
    assert!(desired_to(&acts, &r.key).is_empty());
    let st = r.e.placement(APP).unwrap();
    assert_eq!(st.assignment, before);
    // out of the tunnel: the train's nodes report and run what they ran
    let acts = r.second(&[], |_, _| true);
    let mut acts2 = vec![];
    for n in train {
        assert_eq!(r.e.node_state(n), Some(NodeState::Online));
        acts2.extend(r.runs_desired(n));
    }
    assert!(desired_to(&acts, &r.key).is_empty());
    assert!(
        desired_to(&acts2, &r.key).is_empty(),
        "nothing to catch up, no restart"
    );
    assert_eq!(r.placement(), before);
}

#[test]
fn the_timer_baseline_takes_a_partition_for_a_crash_after_its_time() {
    let mut r = Railway::new(EngineConfig {
        liveness: Liveness::Timer {
            lost_after_ms: 40_000,
        },
        ..EngineConfig::default()
    });
    r.place("{tolerate_s: 600}");
    let victim = r.placement()["storage"].clone();
    let v = victim.as_str();
    r.seconds(39, &[v], |_, _| true);
    assert_eq!(r.e.node_state(v), Some(NodeState::Online));
    assert_eq!(r.placement()["storage"], victim);
    r.seconds(2, &[v], |_, _| true);
    assert_eq!(r.e.node_state(v), Some(NodeState::Lost));
    assert_ne!(r.placement()["storage"], victim);
}

#[test]
fn on_return_best_keeps_the_copy_of_the_better_score_and_says_both_scores() {
    let (mut r, victim, moved_to) = storage_replaced("best");
    let v = victim.as_str();
    r.second(&[], |_, _| true);
    let acts = r.runs_desired(v);
    let line = last_status(&acts)
        .unwrap()
        .disconnect
        .into_iter()
        .find(|l| l.starts_with("storage:"))
        .expect("the decision on storage");
    assert!(line.contains("(on_return: best (original "), "{line}");
    // one copy stays, on one of the two nodes, and the other's desired state drops it
    let kept = r.placement()["storage"].clone();
    assert!(kept == victim || kept == moved_to, "{kept}");
    let loser = if kept == victim { &moved_to } else { &victim };
    assert!(!r
        .e
        .desired(loser)
        .unwrap()
        .containers
        .iter()
        .any(|c| c.component.as_str() == "storage"));
}

/// An overloaded control plane sheds a node's periodic telemetry after verifying it and says
/// it heard the node ([`Event::HeardShed`]): the node stays online although nothing it said
/// reached the engine (its peers no longer reach it either: the shed messages are the only
/// evidence). When they stop it is judged as usual; a lost node does not return by them.
#[test]
fn a_node_heard_only_through_shed_messages_is_not_judged_silent_and_a_lost_one_does_not_return_by_them(
) {
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 600}");
    let victim = r.placement()["storage"].clone();
    let v = victim.as_str();
    let nobody_reaches = |_: &str, to: &str| to != v;
    for s in 1..=20 {
        r.second(&[v], nobody_reaches);
        r.feed(Event::HeardShed(vec![victim.clone(), "not-a-node".into()]));
        assert_eq!(r.e.node_state(v), Some(NodeState::Online), "second {s}");
    }
    assert!(r.e.stats.heard_shed >= 40);
    // nothing more of it, not even shed: lost after the evidence window, as a crash
    let mut lost = false;
    for _ in 1..=15 {
        r.second(&[v], nobody_reaches);
        if r.e.node_state(v) == Some(NodeState::Lost) {
            lost = true;
            break;
        }
    }
    assert!(lost, "not lost once its shed messages stopped too");
    r.feed(Event::HeardShed(vec![victim.clone()]));
    r.second(&[v], nobody_reaches);
    assert_eq!(
        r.e.node_state(v),
        Some(NodeState::Lost),
        "a shed message revived it"
    );
}

#[test]
fn an_unreachable_node_is_judged_again_once_a_second_not_on_every_tick() {
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 600}");
    let v = r.placement()["storage"].clone();
    r.seconds(6, &[&v], |_, _| true);
    assert_eq!(r.e.node_state(&v), Some(NodeState::Unreachable));
    // ticks 200 ms apart and no message (within the silence window): only v is silent
    let before = r.e.stats.judged;
    for _ in 0..10 {
        r.now += 200;
        r.feed(Event::Tick);
    }
    let judged = r.e.stats.judged - before;
    assert!(
        (2..=3).contains(&judged),
        "judged {judged} times over 10 ticks in 2 s"
    );
    // still unreachable: its peers reach it
    assert_eq!(r.e.node_state(&v), Some(NodeState::Unreachable));
}

/// A node back from unreachable was never out of the peer lists (an unreachable node stays a
/// candidate: its peers' probes are the evidence it is alive), so its return starts no round
/// of peer lists. In a 50,000-node join, returns by the thousand each started a round of the
/// whole fleet's lists (seconds of CPU), which starved the fleet into more silence.
#[test]
fn a_node_back_from_unreachable_starts_no_round_of_peer_lists() {
    // every round handed out as an action, as in a large fleet
    let mut r = Railway::new(EngineConfig {
        peers_offload_from: 0,
        ..EngineConfig::default()
    });
    r.place("{tolerate_s: 600}");
    let v = r.placement()["storage"].clone();
    // the lists of the whole fleet settle
    r.seconds(10, &[], |_, _| true);
    r.seconds(6, &[&v], |_, _| true);
    assert_eq!(r.e.node_state(&v), Some(NodeState::Unreachable));
    // a round may still follow from before; then v comes back
    r.seconds(10, &[&v], |_, _| true);
    let back = r.seconds(10, &[], |_, _| true);
    assert_eq!(r.e.node_state(&v), Some(NodeState::Online));
    let rounds = back
        .iter()
        .filter(|a| matches!(a, Action::ComputePeers(_)))
        .count();
    assert_eq!(rounds, 0, "a return started {rounds} rounds of peer lists");
    // a node never seen before does
    let mut newcomer = r.c.nodes[0].clone();
    newcomer.name = "newcomer".into();
    r.feed(Event::Report(Box::new(first_report(&newcomer))));
    let after = r.seconds(10, &[], |_, _| true);
    assert!(after.iter().any(|a| matches!(a, Action::ComputePeers(_))));
}

/// The loopbacks `actions` ask for, as they come back through `brokers` brokers.
fn loopbacks_back(actions: &[Action], brokers: usize) -> Vec<Event> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Loopback { nonce, seq } => Some((*nonce, *seq)),
            _ => None,
        })
        .flat_map(|(nonce, seq)| {
            (0..brokers).map(move |broker| Event::LoopedBack { broker, nonce, seq })
        })
        .collect()
}

/// The railway with `cfg`, smoke monitoring placed, every loopback of the set-up back.
fn placed_hearing_on_time(cfg: &EngineConfig) -> Railway {
    let mut r = Railway::new(cfg.clone());
    r.place("{tolerate_s: 600}");
    for seq in 1..=100 {
        for broker in 0..cfg.brokers {
            r.feed(Event::LoopedBack {
                broker,
                nonce: cfg.loopback_nonce,
                seq,
            });
        }
    }
    r
}

/// With `cfg`, the node of smoke monitoring's storage crashed (silent, no peer reaches it),
/// each second's loopbacks back through the first `returning` brokers: the second it is
/// lost, within `seconds`.
fn crash_lost_after(cfg: &EngineConfig, returning: usize, seconds: u32) -> Option<u32> {
    let mut r = placed_hearing_on_time(cfg);
    let victim = r.placement()["storage"].clone();
    let v = victim.as_str();
    for s in 1..=seconds {
        let out = r.second(&[v], |_, to| to != v);
        assert!(
            out.iter().any(|a| matches!(a, Action::Loopback { .. })),
            "one loopback a second"
        );
        for ev in loopbacks_back(&out, returning) {
            r.feed(ev);
        }
        if r.e.node_state(v) == Some(NodeState::Lost) {
            return Some(s);
        }
    }
    None
}

#[test]
fn a_fleet_silent_while_the_control_plane_hears_late_is_not_judged_and_the_wait_is_bounded() {
    let cfg = EngineConfig {
        loopback_every_ms: 1000,
        loopback_nonce: 9,
        brokers: 2,
        ..EngineConfig::default()
    };
    let everyone: Vec<String> = railway().nodes.iter().map(|n| n.name.clone()).collect();
    let all: Vec<&str> = everyone.iter().map(String::as_str).collect();
    let judged = |r: &Railway| {
        all.iter()
            .filter(|n| r.e.node_state(n) != Some(NodeState::Online))
            .count()
    };

    // the loopbacks come back at once: the engine hears on time, a crash is judged as ever
    let on_time = crash_lost_after(&cfg, 2, 15).expect("a crash is lost with the loopback on time");

    // the control plane falls behind: every node silent and no loopback back (it waits in the
    // same backlog) for 5 s, more than the 3 s silence window: nobody is judged
    let mut r = placed_hearing_on_time(&cfg);
    r.seconds(5, &all, |_, _| false);
    assert_eq!(
        judged(&r),
        0,
        "the control plane's own backlog taken for silence"
    );
    // the backlog arrives: the fleet and the loopbacks
    let out = r.seconds(1, &[], |_, _| true);
    for ev in loopbacks_back(&out, 2) {
        r.feed(ev);
    }
    assert_eq!(judged(&r), 0);

    // without the loopback the same 5 s judge every node
    let mut r = Railway::new(EngineConfig::default());
    r.place("{tolerate_s: 600}");
    r.seconds(5, &all, |_, _| false);
    assert_eq!(judged(&r), all.len(), "a 5 s silence is judged");

    // a loopback that never comes back (a broker that drops it) delays judgment by at most
    // the silence window: a crash is lost within it
    // (only broker 0 of 2 returns them)
    let late = crash_lost_after(&cfg, 1, 25).expect("judged in the end");
    assert!(
        late > on_time && late <= on_time + 3 + 1,
        "lost at {late} s, on time {on_time} s: later by at most the 3 s silence window"
    );
}
