//! Run-time measurements and the network-aware descheduler in the control plane's decisions,
//! with plain values: usage messages folded into the live model's `observed` (and the status
//! document), and an application with `scheduler: network-aware` moved one component at a time,
//! with hysteresis, when the measured traffic says its components sit on the wrong nodes.

use std::collections::BTreeMap;

use acoa_shared::model::{self, Cluster};
use acoa_shared::topics;
use acoa_shared::wire::{self, ComponentSample, ComponentUsage, LinkMetrics, TrafficSample};
use cloud_broker::engine::{comm_cost, Action, EngineConfig, Event};
use cloud_broker::status::AppStatus;
use cloud_broker::testkit::engine::{desired_states, link_metrics, statuses, EngineSim};
use cloud_broker::testkit::{report_of, running, samples_of};

/// n1 has the sensor, n3 the database, n2 neither; 10 ms between nodes, 0.5 ms loopback.
fn cluster() -> Cluster {
    let mut text = String::from(
        "cluster: t\n\
         datacenters: [{name: dc, layer: edge}]\n\
         nodes:\n",
    );
    for (n, hw) in [("n1", "[sensor]"), ("n2", "[]"), ("n3", "[db]")] {
        text += &format!(
            "- {{name: {n}, datacenter: dc, layer: edge, arch: x86_64, hardware: {hw}, \
             capacity: {{cpu_millis: 4000, memory_mb: 8192, disk_mb: 1000}}}}\n"
        );
    }
    text += "links:\n";
    for a in ["n1", "n2", "n3"] {
        for b in ["n1", "n2", "n3"] {
            let l = if a == b { 0.5 } else { 10.0 };
            text += &format!(
                "- {{from: {a}, to: {b}, latency_ms: {l}, jitter_ms: 0.0, success: 1.0}}\n"
            );
        }
    }
    model::parse_cluster(&text).unwrap()
}

/// `source` stays on n1 (sensor), `sink` on n3 (database); `relay` may go anywhere.
const APP: &str = "application: pipeline
scheduler: network-aware
components:
- {name: source, image: 'localhost/acoa/x:1', requires: {hardware: [sensor]}}
- {name: relay, image: 'localhost/acoa/x:1'}
- {name: sink, image: 'localhost/acoa/x:1', requires: {hardware: [db]}}
channels:
- {name: source-to-relay, from: source, to: relay}
- {name: relay-to-sink, from: relay, to: sink}
";

/// An engine that evaluates the network-aware descheduler every second (a move needs 3 in a
/// row above `netaware_threshold`), nothing else.
fn sim(netaware_threshold: f64) -> EngineSim {
    EngineSim::new(EngineConfig {
        netaware_threshold,
        node_timeout_ms: 1_000_000,
        reevaluate_ms: 1_000_000,
        deschedule_ms: 1000,
        sustain: 3,
        stats_every_ms: 0,
        observed_window: 3,
        ..EngineConfig::default()
    })
}

/// Every node of [`cluster`] joined and `pipeline` ([`APP`]) applied.
fn with_pipeline() -> EngineSim {
    let mut s = sim(EngineConfig::default().netaware_threshold);
    s.join(&cluster());
    s.publish("pipeline", APP.as_bytes().to_vec());
    s
}

/// The `pipeline` application's nodes as the tests drive them.
trait Pipeline {
    fn join(&mut self, c: &Cluster);
    fn pipeline(&self) -> BTreeMap<String, String>;
    fn components_on(&self, n: &str) -> Vec<String>;
    fn all_running(&mut self, seq: u64);
    fn usage(&mut self, traffic: &[(&str, &str, f32)]);
    fn last_status(&self) -> AppStatus;
    fn desired_nodes_of(&self, comp: &str) -> Vec<String>;
}

impl Pipeline for EngineSim {
    fn join(&mut self, c: &Cluster) {
        for n in &c.nodes {
            self.feed(Event::Report(Box::new(report_of(n, 1, "10.0.0.1:7878"))));
        }
        for n in &c.nodes {
            let l = link_metrics(&n.name, samples_of(c, &n.name));
            self.feed(Event::links(Box::new(l)));
        }
    }

    fn pipeline(&self) -> BTreeMap<String, String> {
        self.assignment("pipeline")
    }

    /// The components placed on node `n`.
    fn components_on(&self, n: &str) -> Vec<String> {
        let a = self.pipeline();
        a.into_iter()
            .filter(|(_, node)| node == n)
            .map(|(c, _)| c)
            .collect()
    }

    /// Every node says: the components placed on it run.
    fn all_running(&mut self, seq: u64) {
        for n in ["n1", "n2", "n3"] {
            let containers = self
                .components_on(n)
                .into_iter()
                .map(|c| (format!("pipeline.{c}"), "localhost/acoa/x:1"));
            let a = running(n, 1, seq, containers);
            self.feed(Event::Actual(Box::new(a)));
        }
    }

    /// Usage messages of every node: `traffic` (from, channel, bytes/s), as the workloads count
    /// them, from the node each component is placed on.
    fn usage(&mut self, traffic: &[(&str, &str, f32)]) {
        for n in ["n1", "n2", "n3"] {
            let components = self
                .components_on(n)
                .iter()
                .map(|c| ComponentSample {
                    app: wire::name("pipeline").unwrap(),
                    component: wire::name(c).unwrap(),
                    container: wire::name(&format!("pipeline.{c}")).unwrap(),
                    cpu_millis: Some(100.0),
                    memory_mb: Some(50.0),
                    traffic: traffic
                        .iter()
                        .filter(|(from, _, _)| from == c)
                        .map(|(_, ch, b)| TrafficSample {
                            to: wire::name(ch).unwrap(),
                            bytes_per_s: *b,
                            messages_per_s: 10.0,
                        })
                        .collect(),
                    service: None,
                })
                .collect();
            self.feed(Event::Usage(Box::new(ComponentUsage {
                node: wire::name(n).unwrap(),
                seq: 1,
                run: 0,
                period_ms: 1000,
                components,
            })));
        }
    }

    fn last_status(&self) -> AppStatus {
        statuses(&self.log, "pipeline").pop().unwrap()
    }

    fn desired_nodes_of(&self, comp: &str) -> Vec<String> {
        // the latest desired state of each node, from the publications
        desired_states(&self.log, &self.key)
            .into_iter()
            .filter(|(_, d)| d.containers.iter().any(|c| c.component.as_str() == comp))
            .map(|(n, _)| n)
            .collect()
    }
}

#[test]
fn measured_traffic_moves_one_component_after_sustained_evaluations() {
    let mut s = with_pipeline();
    let first = s.pipeline();
    assert_eq!(first["source"], "n1");
    assert_eq!(first["sink"], "n3");
    // nothing measured yet: equal traffic on both channels, relay next to one of them
    let relay = first["relay"].clone();
    assert_ne!(relay, "n2", "a node of its own costs both channels 10 ms");
    // what the workloads will measure: the heavy channel is the one relay is NOT next to
    let (heavy, light, target) = if relay == "n1" {
        ("relay-to-sink", "source-to-relay", "n3")
    } else {
        ("source-to-relay", "relay-to-sink", "n1")
    };
    let heavy_from = if heavy == "relay-to-sink" {
        "relay"
    } else {
        "source"
    };
    let light_from = if heavy_from == "relay" {
        "source"
    } else {
        "relay"
    };
    let traffic = [(heavy_from, heavy, 100_000.0), (light_from, light, 1_000.0)];
    s.all_running(1);
    s.usage(&traffic);

    // the live model and the status document show the measurements (channels resolved)
    let cl = s.e.cluster();
    let o = &cl.observed["pipeline"];
    assert_eq!(o.components["relay"].cpu_millis, 100.0);
    assert_eq!(o.traffic.len(), 2);
    assert!(o
        .traffic
        .iter()
        .any(|t| t.bytes_per_s == 100_000.0 && (t.from == "relay" || t.to == "relay")));
    let before = comm_cost(&cl, "pipeline", &first, "relay").unwrap();
    assert!(
        before.0 > 9.0,
        "most of relay's bytes cross a 10 ms link: {before:?}"
    );

    // evaluations 1 and 2: a better node, not yet sustained; evaluation 3 moves
    let mut moved_at = None;
    for k in 1..=6 {
        s.usage(&traffic);
        let out = s.tick(1000);
        let now = s.pipeline();
        if now["relay"] != relay {
            moved_at.get_or_insert(k);
            assert_eq!(now["relay"], target);
            assert_eq!(now["source"], "n1");
            assert_eq!(now["sink"], "n3");
            assert!(
                    out.iter().any(|a| matches!(a, Action::Publish { topic, .. } if *topic == topics::desired(target))),
                    "the target node gets a new desired state"
                );
            break;
        }
    }
    assert_eq!(moved_at, Some(3), "moved after 3 evaluations in a row");
    assert_eq!(s.desired_nodes_of("relay"), vec![target.to_string()]);
    let after = comm_cost(&s.e.cluster(), "pipeline", &s.pipeline(), "relay").unwrap();
    assert!(after.0 < before.0 / 2.0, "{before:?} -> {after:?}");
    let st = s.last_status();
    assert!(st.observed.is_some(), "the status shows what was measured");

    // the move is rolling out (relay not yet running on the target): nothing else moves,
    // and once it runs the placement is stable under the same measurements
    let placed = s.pipeline();
    for k in 0..10 {
        if k == 3 {
            s.all_running(2);
        }
        s.usage(&traffic);
        s.tick(1000);
        assert_eq!(s.pipeline(), placed, "no further move (tick {k})");
    }
}

#[test]
fn usage_of_unplaced_components_and_deleted_apps_is_not_kept() {
    let mut s = with_pipeline();
    let a = s.pipeline();
    // n2 claims to run source (placed on n1): not counted
    let stray = ComponentUsage {
        node: wire::name("n2").unwrap(),
        seq: 1,
        run: 0,
        period_ms: 1000,
        components: [ComponentSample {
            app: wire::name("pipeline").unwrap(),
            component: wire::name("source").unwrap(),
            container: wire::name("pipeline.source").unwrap(),
            cpu_millis: Some(999.0),
            memory_mb: Some(1.0),
            traffic: Default::default(),
            service: None,
        }]
        .into_iter()
        .collect(),
    };
    s.feed(Event::Usage(Box::new(stray)));
    assert!(!s.e.cluster().observed.contains_key("pipeline"));
    s.usage(&[("source", "source-to-relay", 10.0)]);
    let cl = s.e.cluster();
    assert_eq!(
        cl.observed["pipeline"].components["source"].cpu_millis,
        100.0
    );
    assert_eq!(
        cl.observed["pipeline"].traffic[0].to, "relay",
        "channel resolved to its downstream component"
    );
    assert_eq!(a["source"], "n1");
    s.publish("pipeline", vec![]);
    assert!(s.e.cluster().observed.is_empty(), "deleted with its app");
}

/// A gateway `gw` (capacity 0: hosts nothing, measures its links) where users' requests enter,
/// and n1..n3; 10 ms between any two nodes, 0.5 ms loopback; `slow` raises both directions
/// between gw and that node to 200 ms.
fn cluster_with_gateway(slow: Option<&str>) -> Cluster {
    let mut text = String::from(
        "cluster: t\n\
         datacenters: [{name: dc, layer: edge}]\n\
         nodes:\n\
         - {name: gw, datacenter: dc, layer: edge, arch: x86_64, \
            capacity: {cpu_millis: 0, memory_mb: 0, disk_mb: 0}}\n",
    );
    for n in ["n1", "n2", "n3"] {
        text += &format!(
            "- {{name: {n}, datacenter: dc, layer: edge, arch: x86_64, \
             capacity: {{cpu_millis: 4000, memory_mb: 8192, disk_mb: 1000}}}}\n"
        );
    }
    text += "links:\n";
    let all = ["gw", "n1", "n2", "n3"];
    for a in all {
        for b in all {
            let mut l = if a == b { 0.5 } else { 10.0 };
            if slow.is_some_and(|x| (a == "gw" && b == x) || (b == "gw" && a == x)) {
                l = 200.0;
            }
            text += &format!(
                "- {{from: {a}, to: {b}, latency_ms: {l}, jitter_ms: 0.0, success: 1.0}}\n"
            );
        }
    }
    model::parse_cluster(&text).unwrap()
}

/// Users enter at gw and call `front`, which calls `back` a lot.
const GROUP_APP: &str = "application: pipeline
scheduler: network-aware
ingress: {node: gw, component: front}
components:
- {name: front, image: 'localhost/acoa/x:1'}
- {name: back, image: 'localhost/acoa/x:1'}
channels:
- {name: front-to-back, from: front, to: back}
";

#[test]
fn a_group_move_is_carried_through_one_member_at_a_time_without_flapping() {
    let mut s = sim(0.05);
    s.join(&cluster_with_gateway(None));
    s.publish("pipeline", GROUP_APP.as_bytes().to_vec());
    let first = s.pipeline();
    let home = first["front"].clone();
    assert_eq!(first["back"], home, "the pair shares a node: {first:?}");
    assert_ne!(home, "gw", "the gateway hosts nothing");
    let traffic = [("front", "front-to-back", 100_000.0)];
    s.all_running(1);
    s.usage(&traffic);
    // the gateway's links to the pair's node become slow (both directions)
    let slow = cluster_with_gateway(Some(&home));
    for n in ["gw", home.as_str()] {
        s.feed(Event::links(Box::new(LinkMetrics {
            node: wire::name(n).unwrap(),
            seq: 2,
            run: 0,
            links: samples_of(&slow, n).into_iter().collect(),
            coord: None,
        })));
    }
    // the group moves: front first, then back follows once front runs, and nothing returns
    let mut history = vec![s.pipeline()];
    for k in 0..30u64 {
        s.usage(&traffic);
        s.tick(1000);
        s.all_running(3 + k);
        let now = s.pipeline();
        if history.last() != Some(&now) {
            history.push(now);
        }
    }
    assert_eq!(
        history.len(),
        3,
        "two moves, one member at a time: {history:?}"
    );
    let to = history[1]["front"].clone();
    assert_ne!(to, home);
    assert_eq!(
        history[1]["back"], home,
        "one member at a time: {history:?}"
    );
    assert_eq!(history[2]["front"], to);
    assert_eq!(history[2]["back"], to, "the group follows: {history:?}");
}
