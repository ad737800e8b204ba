//! Reading and validating the models of spec/model.md: the railway scenario reads,
//! and every class of bad input is refused with the file, the field and the reason.

use acoa_shared::model::{
    load_application, load_cluster, parse_application, parse_cluster, Between, CriterionKind,
    Layer, LinkEstimates,
};
use std::path::PathBuf;

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/railway")
        .join(name)
}

const APP: &str = r#"
application: demo
components:
- {name: a, image: localhost/acoa/a:1}
- {name: b, image: localhost/acoa/b:1, resources: {cpu_millis: 100, memory_mb: 64}}
- name: c
  image: localhost/acoa/c:1
  requires: {hardware: [gps], layer: edge, arch: aarch64, min_free_disk_mb: 10}
channels:
- {name: ab, from: a, to: b}
- {name: bc, from: b, to: c}
paths:
- {name: p, channels: [ab, bc]}
criteria:
- {type: min-e2e-response-time, path: p, weight: 1.0}
- {type: max-e2e-reliability, path: p, weight: 0.5}
- {type: least-containers, component: b, weight: 0.2}
- {type: most-free-memory, target: c, weight: 0.2}
"#;

#[test]
fn railway_scenario_reads() {
    let c = load_cluster(&scenario("cluster.yaml")).unwrap();
    assert_eq!(c.nodes.len(), 20);
    assert_eq!(c.links.len(), 400);
    assert_eq!(c.datacenters.len(), 5);
    let n13 = c.node("n13").unwrap();
    assert_eq!(n13.layer, Layer::Edge);
    assert_eq!(n13.hardware, vec!["smoke-sensor".to_string()]);
    let smoke = load_application(&scenario("smoke-monitoring.yaml")).unwrap();
    assert_eq!(smoke.components.len(), 5);
    assert_eq!(smoke.scheduler, "qos");
    assert_eq!(smoke.criteria[1].kind, CriterionKind::MinE2eResponseTime);
    let speed = load_application(&scenario("speed-profiling.yaml")).unwrap();
    assert_eq!(speed.components.len(), 7);
    assert_eq!(speed.paths.len(), 2);
}

#[test]
fn a_full_application_reads_from_yaml_and_json_alike() {
    let app = parse_application(APP).unwrap();
    assert_eq!(app.components[1].resources.unwrap().memory_mb, 64);
    assert_eq!(app.criteria[3].component.as_deref(), Some("c"));
    let json = serde_json::to_string(&app).unwrap();
    assert!(json.starts_with('{'));
    assert_eq!(parse_application(&json).unwrap(), app);
}

/// `APP` with `from` replaced by `to`; the result must be refused at `field` with `reason` in it.
fn refused(from: &str, to: &str, field: &str, reason: &str) {
    assert!(APP.contains(from), "test bug: {from:?} not in APP");
    let text = APP.replacen(from, to, 1);
    let err = parse_application(&text).expect_err(&format!("accepted: {to}"));
    assert_eq!(err.field, field, "{err}");
    assert!(err.reason.contains(reason), "{err}");
}

#[test]
fn every_class_of_bad_application_is_refused_with_field_and_reason() {
    // channel end that does not exist
    refused(
        "{name: bc, from: b, to: c}",
        "{name: bc, from: b, to: x}",
        "channels[1].to",
        "component `x` does not exist",
    );
    // path channel that does not exist
    refused(
        "channels: [ab, bc]",
        "channels: [ab, zz]",
        "paths[0].channels[1]",
        "channel `zz` does not exist",
    );
    // criterion target that does not exist
    refused(
        "path: p, weight: 0.5",
        "path: q, weight: 0.5",
        "criteria[1].path",
        "path `q` does not exist",
    );
    refused(
        "component: b, weight",
        "component: nope, weight",
        "criteria[2].component",
        "does not exist",
    );
    // weights
    refused(
        "weight: 0.5",
        "weight: -0.5",
        "criteria[1].weight",
        "finite number > 0",
    );
    refused(
        "weight: 0.5",
        "weight: 0",
        "criteria[1].weight",
        "finite number > 0",
    );
    refused(
        "weight: 0.5",
        "weight: .nan",
        "criteria[1].weight",
        "finite number > 0",
    );
    refused(
        "weight: 0.5",
        "weight: .inf",
        "criteria[1].weight",
        "finite number > 0",
    );
    // duplicates
    refused(
        "{name: b, image",
        "{name: a, image",
        "components[1].name",
        "duplicate component `a`",
    );
    refused(
        "{name: bc, from",
        "{name: ab, from",
        "channels[1].name",
        "duplicate channel `ab`",
    );
    refused(
        "channels: [ab, bc]",
        "channels: [ab, ab]",
        "paths[0].channels[1]",
        "listed twice",
    );
    // a cyclic response-time path: the channel that closes the cycle is named
    refused(
        "{name: bc, from: b, to: c}",
        "{name: bc, from: b, to: a}",
        "channels[1]",
        "channel `bc` closes the cycle a -> b -> a (channels `ab`, `bc`)",
    );
    // a criterion with the wrong kind of target
    refused(
        "{type: least-containers, component: b",
        "{type: least-containers, path: p",
        "criteria[2].path",
        "targets a component",
    );
    refused(
        "{type: max-e2e-reliability, path: p",
        "{type: max-e2e-reliability, component: a",
        "criteria[1].component",
        "targets a path",
    );
    // unknown criterion type, unknown field, wrong type
    refused(
        "type: most-free-memory",
        "type: most-free-cpu",
        "criteria[3].type",
        "unknown variant",
    );
    refused(
        "requires: {hardware",
        "requeries: {hardware",
        "components[2].requeries",
        "unknown field `requeries`",
    );
    refused(
        "cpu_millis: 100",
        "cpu_millis: lots",
        "components[1].resources.cpu_millis",
        "invalid",
    );
    refused(
        "layer: edge",
        "layer: fog",
        "components[2].requires.layer",
        "unknown variant",
    );
    // names that cannot travel in a topic
    refused(
        "application: demo",
        "application: de/mo",
        "application",
        "not a valid name",
    );
    refused(
        "image: localhost/acoa/a:1",
        "image: ''",
        "components[0].image",
        "image reference",
    );
}

#[test]
fn a_channel_cycle_anywhere_is_refused_naming_it() {
    // on a path that only a reliability criterion reads
    let text = APP
        .replacen(
            "{name: bc, from: b, to: c}",
            "{name: bc, from: b, to: a}",
            1,
        )
        .replacen(
            "- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
            "",
            1,
        );
    let err = parse_application(&text).unwrap_err();
    assert_eq!(err.field, "channels[1]", "{err}");
    assert!(
        err.reason
            .contains("closes the cycle a -> b -> a (channels `ab`, `bc`)"),
        "{err}"
    );
    // on no path at all, and longer
    let text = APP.replacen(
        "- {name: bc, from: b, to: c}\n",
        "- {name: bc, from: b, to: c}\n- {name: ca, from: c, to: a}\n",
        1,
    );
    let err = parse_application(&text).unwrap_err();
    assert_eq!(err.field, "channels[2]", "{err}");
    assert!(
        err.reason
            .contains("channel `ca` closes the cycle a -> b -> c -> a (channels `ab`, `bc`, `ca`)"),
        "{err}"
    );
    // off the path, not through the first component
    let text = APP.replacen(
        "- {name: bc, from: b, to: c}\n",
        "- {name: bc, from: b, to: c}\n- {name: cb, from: c, to: b}\n",
        1,
    );
    let err = parse_application(&text).unwrap_err();
    assert_eq!(err.field, "channels[2]", "{err}");
    assert!(err.reason.contains("b -> c -> b"), "{err}");
    // a component sending to itself
    let text = APP.replacen(
        "- {name: bc, from: b, to: c}\n",
        "- {name: bc, from: b, to: c}\n- {name: cc, from: c, to: c}\n",
        1,
    );
    let err = parse_application(&text).unwrap_err();
    assert_eq!(err.field, "channels[2]", "{err}");
    assert!(err.reason.contains("c -> c (channels `cc`)"), "{err}");
}

#[test]
fn branches_that_meet_again_and_parallel_channels_are_not_cycles() {
    // a -> b -> c and a -> c (a diamond's two routes), and two channels from a to b
    let text = APP.replacen(
        "- {name: bc, from: b, to: c}\n",
        "- {name: bc, from: b, to: c}\n- {name: ac, from: a, to: c}\n- {name: ab2, from: a, to: b}\n",
        1,
    );
    let app = parse_application(&text).unwrap();
    assert_eq!(app.channels.len(), 4);
    // the railway applications (speed-profiling's broker fans in and out)
    load_application(&scenario("speed-profiling.yaml")).unwrap();
    load_application(&scenario("smoke-monitoring.yaml")).unwrap();
}

#[test]
fn empty_and_garbage_documents_are_errors() {
    assert!(parse_application("").unwrap_err().reason.contains("empty"));
    assert!(parse_application("{not json").is_err());
    assert!(parse_application("- a\n- b\n").is_err());
    assert!(parse_application("application: x\ncomponents: []\n")
        .unwrap_err()
        .reason
        .contains("at least one component"));
    assert!(parse_application("\u{0}\u{1}binary").is_err());
}

const CLUSTER: &str = r#"
cluster: t
datacenters:
- {name: dc1, layer: edge}
nodes:
- {name: a, datacenter: dc1, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
- {name: b, datacenter: dc1, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
links:
- {from: a, to: b, latency_ms: 1.5, jitter_ms: 0.1, success: 0.99}
- {from: b, to: a, latency_ms: 1.5, success: 0.99}
"#;

fn cluster_refused(from: &str, to: &str, field: &str, reason: &str) {
    assert!(CLUSTER.contains(from), "test bug: {from:?}");
    let err = parse_cluster(&CLUSTER.replacen(from, to, 1)).expect_err(to);
    assert_eq!(err.field, field, "{err}");
    assert!(err.reason.contains(reason), "{err}");
}

#[test]
fn every_class_of_bad_cluster_is_refused_with_field_and_reason() {
    parse_cluster(CLUSTER).unwrap();
    cluster_refused(
        "{name: b, datacenter",
        "{name: a, datacenter",
        "nodes[1].name",
        "duplicate node `a`",
    );
    cluster_refused(
        "{from: a, to: b, latency",
        "{from: a, to: z, latency",
        "links[0].to",
        "node `z` does not exist",
    );
    cluster_refused(
        "{from: b, to: a,",
        "{from: a, to: b,",
        "links[1]",
        "duplicate link",
    );
    cluster_refused(
        "latency_ms: 1.5, jitter",
        "latency_ms: -1, jitter",
        "links[0].latency_ms",
        ">= 0",
    );
    cluster_refused(
        "success: 0.99}\n- {from: b",
        "success: 1.2}\n- {from: b",
        "links[0].success",
        "between 0 and 1",
    );
    cluster_refused(
        "jitter_ms: 0.1",
        "jitter_ms: .nan",
        "links[0].jitter_ms",
        "finite",
    );
    cluster_refused(
        "{name: a, datacenter: dc1",
        "{name: a, datacenter: dc9",
        "nodes[0].datacenter",
        "not declared",
    );
    cluster_refused(
        "{name: a, datacenter: dc1, layer: edge",
        "{name: a, datacenter: dc1, layer: cloud",
        "nodes[0].layer",
        "differs",
    );
    cluster_refused(
        "memory_mb: 512",
        "memory_mb: -5",
        "nodes[0].capacity.memory_mb",
        "invalid",
    );
}

#[test]
fn file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("acoa-model-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad-app.yaml");
    std::fs::write(&bad, APP.replacen("to: c}", "to: x}", 1)).unwrap();
    let err = load_application(&bad).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with(&bad.display().to_string()), "{text}");
    assert!(
        text.contains("channels[1].to: component `x` does not exist"),
        "{text}"
    );
    let missing = load_cluster(&dir.join("nope.yaml")).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("nope.yaml: cannot read the file"),
        "{missing}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const MEASURED: &str = r#"
cluster: t
nodes:
- name: a
  datacenter: dc1
  layer: edge
  arch: aarch64
  capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100, net_mbps: 100, io_mbps: 50}
  usage: {cpu_millis: 100, net_mbps: 12.5, io_mbps: 3}
- {name: b, datacenter: dc1, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
observed:
  smoke-monitoring:
    components:
      measurement: {cpu_millis: 120, memory_mb: 40}
      level-detection: {cpu_millis: 30.5}
    traffic:
    - {from: measurement, to: level-detection, bytes_per_s: 12000}
"#;

#[test]
fn measured_rates_and_observed_use_read_and_round_trip() {
    let c = parse_cluster(MEASURED).unwrap();
    let a = c.node("a").unwrap();
    assert_eq!(a.capacity.net_mbps, Some(100.0));
    assert_eq!(a.capacity.io_mbps, Some(50.0));
    assert_eq!(a.usage.net_mbps, Some(12.5));
    assert_eq!(a.usage.io_mbps, Some(3.0));
    let b = c.node("b").unwrap();
    assert_eq!(b.capacity.net_mbps, None);
    assert_eq!(b.usage.io_mbps, None);
    let o = &c.observed["smoke-monitoring"];
    assert_eq!(o.components["measurement"].cpu_millis, 120.0);
    assert_eq!(o.components["level-detection"].memory_mb, 0.0);
    assert_eq!(o.traffic[0].from, "measurement");
    assert_eq!(o.traffic[0].bytes_per_s, 12000.0);
    // JSON and YAML round trips give the same model.
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(parse_cluster(&json).unwrap(), c);
    let yaml = serde_yaml_ng::to_string(&c).unwrap();
    assert_eq!(parse_cluster(&yaml).unwrap(), c);
    // Absent fields stay absent: an old-style cluster serialises as before.
    let plain = parse_cluster(CLUSTER).unwrap();
    assert!(plain.observed.is_empty());
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("observed"), "{json}");
    assert!(!json.contains("net_mbps"), "{json}");
}

fn measured_refused(from: &str, to: &str, field: &str, reason: &str) {
    assert!(MEASURED.contains(from), "test bug: {from:?}");
    let err = parse_cluster(&MEASURED.replacen(from, to, 1)).expect_err(to);
    assert_eq!(err.field, field, "{err}");
    assert!(err.reason.contains(reason), "{err}");
}

#[test]
fn bad_measured_rates_are_refused_with_field_and_reason() {
    measured_refused(
        "net_mbps: 100",
        "net_mbps: -1",
        "nodes[0].capacity.net_mbps",
        "finite number >= 0",
    );
    measured_refused(
        "io_mbps: 50",
        "io_mbps: .inf",
        "nodes[0].capacity.io_mbps",
        "finite number >= 0",
    );
    measured_refused(
        "net_mbps: 12.5",
        "net_mbps: .nan",
        "nodes[0].usage.net_mbps",
        "finite number >= 0",
    );
    measured_refused(
        "cpu_millis: 120",
        "cpu_millis: -120",
        "observed.smoke-monitoring.components.measurement.cpu_millis",
        "finite number >= 0",
    );
    measured_refused(
        "bytes_per_s: 12000",
        "bytes_per_s: .nan",
        "observed.smoke-monitoring.traffic[0].bytes_per_s",
        "finite number >= 0",
    );
    measured_refused(
        "to: level-detection, bytes",
        "to: 'a b', bytes",
        "observed.smoke-monitoring.traffic[0].to",
        "not a valid name",
    );
    measured_refused(
        "{cpu_millis: 30.5}",
        "{cpu_millis: 30.5, disk_mb: 3}",
        "observed.smoke-monitoring.components.level-detection.disk_mb",
        "unknown field",
    );
    measured_refused(
        "bytes_per_s: 12000}",
        "bytes_per_s: 12000, messages: 3}",
        "observed.smoke-monitoring.traffic[0].messages",
        "unknown field",
    );
    measured_refused(
        "net_mbps: 100",
        "net_gbps: 100",
        "nodes[0].capacity.net_gbps",
        "unknown field",
    );
}

#[test]
fn expected_demands_of_a_component_read_and_are_validated() {
    let text = APP.replacen(
        "resources: {cpu_millis: 100, memory_mb: 64}",
        "resources: {cpu_millis: 100, memory_mb: 64, net_mbps: 20, io_mbps: 5.5, disk_mb: 300}",
        1,
    );
    let app = parse_application(&text).unwrap();
    let r = app.components[1].resources.unwrap();
    assert_eq!(
        (r.net_mbps, r.io_mbps, r.disk_mb),
        (Some(20.0), Some(5.5), Some(300))
    );
    let json = serde_json::to_string(&app).unwrap();
    assert_eq!(parse_application(&json).unwrap(), app);
    let plain = serde_json::to_string(&parse_application(APP).unwrap()).unwrap();
    assert!(!plain.contains("net_mbps"), "{plain}");
    let bad = APP.replacen("memory_mb: 64}", "memory_mb: 64, net_mbps: -3}", 1);
    let err = parse_application(&bad).unwrap_err();
    assert_eq!(err.field, "components[1].resources.net_mbps", "{err}");
    assert!(err.reason.contains("finite number >= 0"), "{err}");
}

#[test]
fn ingress_reads_round_trips_and_is_validated() {
    let text = format!("{APP}ingress: {{node: cp, component: a}}\n");
    let app = parse_application(&text).unwrap();
    let ing = app.ingress.as_ref().unwrap();
    assert_eq!((ing.node.as_str(), ing.component.as_str()), ("cp", "a"));
    let json = serde_json::to_string(&app).unwrap();
    assert_eq!(parse_application(&json).unwrap(), app);
    // absent by default, and not written when absent
    let plain = parse_application(APP).unwrap();
    assert_eq!(plain.ingress, None);
    assert!(!serde_json::to_string(&plain).unwrap().contains("ingress"));
    // the component must exist; the node must be a valid name (the cluster is not known here)
    let bad = format!("{APP}ingress: {{node: cp, component: x}}\n");
    let err = parse_application(&bad).unwrap_err();
    assert_eq!(err.field, "ingress.component", "{err}");
    assert!(err.reason.contains("component `x` does not exist"), "{err}");
    let bad = format!("{APP}ingress: {{node: 'c p', component: a}}\n");
    let err = parse_application(&bad).unwrap_err();
    assert_eq!(err.field, "ingress.node", "{err}");
    assert!(err.reason.contains("not a valid name"), "{err}");
    let bad = format!("{APP}ingress: {{node: cp, component: a, port: 80}}\n");
    let err = parse_application(&bad).unwrap_err();
    assert!(err.reason.contains("unknown field"), "{err}");
    // a node unknown to any cluster is fine in the file
    let ok = format!("{APP}ingress: {{node: nowhere, component: c}}\n");
    assert!(parse_application(&ok).is_ok());
}

/// Every name that becomes an MQTT topic level, a container name or a label: `+`, `#`, `/`,
/// NUL, a space, a leading dot and an overlong name are refused at the field that holds it.
#[test]
fn names_that_could_break_a_topic_or_container_name_are_refused_at_their_field() {
    let bad = [
        "a+b".to_string(),
        "a#".to_string(),
        "a/b".to_string(),
        "+".to_string(),
        "a\u{0}b".to_string(),
        "a b".to_string(),
        ".hidden".to_string(),
        "x".repeat(64),
    ];
    let app_fields = [
        ("application: demo", "application: {}", "application"),
        ("{name: a, image", "{name: {}, image", "components[0].name"),
        ("{name: ab, from", "{name: {}, from", "channels[0].name"),
        (
            "- {name: p, channels",
            "- {name: {}, channels",
            "paths[0].name",
        ),
        (
            "hardware: [gps]",
            "hardware: [{}]",
            "components[2].requires.hardware[0]",
        ),
        (
            "hardware: [gps]",
            "hardware: [gps], datacenter: {}",
            "components[2].requires.datacenter",
        ),
        (
            "hardware: [gps]",
            "hardware: [gps], node: {}",
            "components[2].requires.node",
        ),
        ("arch: aarch64", "arch: {}", "components[2].requires.arch"),
    ];
    for name in &bad {
        // JSON string escapes carry every character, NUL included, through YAML too
        let quoted = serde_json::to_string(name).unwrap();
        for (from, to, field) in app_fields {
            let text = APP.replacen(from, &to.replace("{}", &quoted), 1);
            let err = parse_application(&text).expect_err(&text);
            assert_eq!(err.field, field, "{name:?}: {err}");
            assert!(err.reason.contains("not a valid name"), "{err}");
            assert!(
                !err.reason.contains('\u{0}'),
                "a NUL is escaped in the error"
            );
        }
        let ingress = format!("{APP}ingress: {{node: {quoted}, component: a}}\n");
        let err = parse_application(&ingress).unwrap_err();
        assert_eq!(err.field, "ingress.node", "{err}");
        for (from, to, field) in [
            ("cluster: t", "cluster: {}", "cluster"),
            (
                "{name: dc1, layer",
                "{name: {}, layer",
                "datacenters[0].name",
            ),
            (
                "{name: a, datacenter",
                "{name: {}, datacenter",
                "nodes[0].name",
            ),
        ] {
            let text = CLUSTER.replacen(from, &to.replace("{}", &quoted), 1);
            let err = parse_cluster(&text).expect_err(&text);
            assert_eq!(err.field, field, "{name:?}: {err}");
            assert!(err.reason.contains("not a valid name"), "{err}");
        }
    }
    // what the railway files use stays valid
    for ok in [
        "smoke-monitoring",
        "n13",
        "train1",
        "fast-cpu",
        "x86_64",
        "a.b-c_d",
    ] {
        acoa_shared::model::check_name("f", ok).unwrap();
    }
    acoa_shared::model::check_name("f", &"x".repeat(63)).unwrap();
}

#[test]
fn binary_and_other_non_core_tags_are_refused_at_their_field() {
    let err = parse_application(&APP.replacen(
        "image: localhost/acoa/a:1",
        "image: !!binary bG9jYWxob3N0L2Fjb2EvYToxCg==",
        1,
    ))
    .unwrap_err();
    assert_eq!(err.field, "components[0].image", "{err}");
    assert!(
        err.reason.contains("tag `!!binary` is not allowed"),
        "{err}"
    );
    let err =
        parse_application(&APP.replacen("requires: {hardware", "requires: !custom {hardware", 1))
            .unwrap_err();
    assert_eq!(err.field, "components[2].requires", "{err}");
    assert!(err.reason.contains("tag `!custom` is not allowed"), "{err}");
    for tag in [
        "!!timestamp",
        "!!set",
        "!!omap",
        "!!python/object",
        "!<tag:x.org,1:a>",
    ] {
        let text = APP.replacen("weight: 0.5", &format!("weight: {tag} 0.5"), 1);
        let err = parse_application(&text).expect_err(tag);
        assert_eq!(err.field, "criteria[1].weight", "{tag}: {err}");
        assert!(err.reason.contains("is not allowed"), "{tag}: {err}");
    }
    // the core schema's own tags say what a plain scalar already is
    let app = parse_application(&APP.replacen("application: demo", "application: !!str demo", 1))
        .unwrap();
    assert_eq!(app.application, "demo");
}

#[test]
fn every_railway_file_reads_within_the_limits() {
    for f in ["smoke-monitoring.yaml", "speed-profiling.yaml"] {
        load_application(&scenario(f)).unwrap();
    }
    load_cluster(&scenario("cluster.yaml")).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// On random channel graphs of up to 6 components, an application is refused for a
    /// cycle exactly when some component reaches itself (transitive closure), and the
    /// cycle it names is a real one.
    #[test]
    fn a_channel_graph_is_refused_exactly_when_it_has_a_directed_cycle(
        n in 1usize..7,
        edges in proptest::collection::vec((0usize..6, 0usize..6), 0..12),
    ) {
        let edges: Vec<(usize, usize)> = edges.into_iter().map(|(a, b)| (a % n, b % n)).collect();
        let mut text = "application: g\ncomponents:\n".to_string();
        for i in 0..n {
            text.push_str(&format!("- {{name: c{i}, image: i}}\n"));
        }
        text.push_str("channels:\n");
        for (k, (a, b)) in edges.iter().enumerate() {
            text.push_str(&format!("- {{name: e{k}, from: c{a}, to: c{b}}}\n"));
        }
        let mut reach = vec![vec![false; n]; n];
        for (a, b) in &edges {
            reach[*a][*b] = true;
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if reach[i][k] && reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
        let cyclic = (0..n).any(|i| reach[i][i]);
        match parse_application(&text) {
            Ok(_) => proptest::prop_assert!(!cyclic),
            Err(e) => {
                proptest::prop_assert!(cyclic, "{}", e);
                proptest::prop_assert!(e.reason.contains("closes the cycle"), "{}", e);
                // the named channels chain head to tail and come back to the start
                let inner = e.reason.split("(channels ").nth(1).unwrap();
                let inner = inner.split(')').next().unwrap();
                let ks: Vec<usize> = inner
                    .split(", ")
                    .map(|c| c.trim_matches('`')[1..].parse().unwrap())
                    .collect();
                for w in ks.windows(2) {
                    proptest::prop_assert_eq!(edges[w[0]].1, edges[w[1]].0);
                }
                proptest::prop_assert_eq!(edges[*ks.last().unwrap()].1, edges[ks[0]].0);
                proptest::prop_assert_eq!(e.field, format!("channels[{}]", ks.last().unwrap()));
            }
        }
    }
}

#[test]
fn an_error_is_one_line_whatever_the_document_quotes() {
    // a channel end is quoted in the error before it is known to be a name
    let text = APP.replacen(
        "from: b, to: c}",
        r#"from: b, to: "c\nWARN forged log line"}"#,
        1,
    );
    let err = parse_application(&text).unwrap_err();
    assert_eq!(err.field, "channels[1].to", "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(err.reason.contains(r"c\nWARN forged"), "{err}");
    // so is a key that is not a field, and a long one is cut
    let key = format!("\"k\\r\\n{}\"", "x".repeat(1000));
    let text = APP.replacen(
        "application: demo",
        &format!("application: demo\n{key}: 1"),
        1,
    );
    let err = parse_application(&text).unwrap_err();
    assert!(!err.to_string().contains(['\n', '\r']), "{err}");
    assert!(err.reason.len() <= 4096 + 3, "{err}");
}

const ESTIMATED: &str = r#"
cluster: t
datacenters:
- {name: dc1, layer: edge}
- {name: dc2, layer: edge}
nodes:
- {name: a, datacenter: dc1, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
- {name: b, datacenter: dc2, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
- {name: c, datacenter: dc2, layer: edge, arch: aarch64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 100}}
estimates:
  nodes:
    a: {coord: {position: [0, 0, 0], height_ms: 5}, median_jitter_ms: 0.2, median_success: 1}
    b: {coord: {position: [30, 0, 0], height_ms: 5}, median_jitter_ms: 0.4, median_success: 1}
    c: {median_jitter_ms: 0.4, median_success: 1}
  between:
    dc1: {dc2: 4.5}
"#;

/// Two datacenters with a measured link between them: an unmeasured pair between them is
/// estimated at the links' median, not at its coordinates' 40 ms; a node without a coordinate
/// still has no estimate outside its datacenter; a pair named the wrong way round is refused.
#[test]
fn the_median_between_two_datacenters_estimates_their_unmeasured_pairs() {
    use acoa_shared::coords::Known;
    let c = parse_cluster(ESTIMATED).unwrap();
    let e = c.estimates.as_ref().unwrap();
    assert_eq!(e.between_ms("dc2", "dc1"), Some(4.5));
    assert_eq!(e.between_ms("dc1", "dc1"), None);
    let (a, b, n_c) = (
        c.node("a").unwrap(),
        c.node("b").unwrap(),
        c.node("c").unwrap(),
    );
    let v = e.view(a, b).unwrap();
    assert_eq!(v.latency_ms, Known::Estimated(4.5));
    assert_eq!(v.jitter_ms, Known::Estimated(0.4));
    assert_eq!(e.view(b, a).unwrap().latency_ms, Known::Estimated(4.5));
    assert!(e.view(a, n_c).is_none());
    // without the pair's median: the coordinates
    let mut plain = e.clone();
    plain.between = Between::default();
    assert_eq!(plain.view(a, b).unwrap().latency_ms, Known::Estimated(40.0));
    // set_between orders the names, scaled scales it
    let set = LinkEstimates {
        between: Between::from_pairs([("dc2", "dc1", 4.5)]),
        ..LinkEstimates::default()
    };
    assert_eq!(set.between, e.between);
    assert_eq!(set.scaled(2.0).between_ms("dc1", "dc2"), Some(9.0));
    let err = parse_cluster(&ESTIMATED.replace("dc1: {dc2: 4.5}", "dc2: {dc1: 4.5}")).unwrap_err();
    assert_eq!(err.field, "estimates.between.dc2.dc1", "{err}");
    assert!(err.reason.contains("lesser first"), "{err}");
    let err = parse_cluster(&ESTIMATED.replace("dc2: 4.5", "dc2: -1")).unwrap_err();
    assert_eq!(err.field, "estimates.between.dc1.dc2", "{err}");
}

#[test]
fn a_nodes_position_reads_and_a_bad_one_is_refused_naming_it() {
    let text = |pos: &str| {
        format!(
            "cluster: t\nnodes:\n- name: n1\n  datacenter: s1\n  layer: edge\n  arch: aarch64\n  \
             capacity: {{cpu_millis: 1, memory_mb: 1, disk_mb: 1}}\n  position: {pos}\nlinks: []\n"
        )
    };
    let c = acoa_shared::model::parse_cluster(&text("{lat_deg: 47.378, lon_deg: 8.54}")).unwrap();
    let p = c.nodes[0].position.unwrap();
    assert_eq!((p.lat_deg(), p.lon_deg()), (47.378, 8.54));
    let e = acoa_shared::model::parse_cluster(&text("{lat_deg: 95, lon_deg: 8.54}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nodes[0].position"), "{e}");
    assert!(e.contains("latitude 95 is not"), "{e}");
}
