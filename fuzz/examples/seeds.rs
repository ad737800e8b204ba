//! Writes the seed inputs of every fuzz target into `corpus/<target>/seed-*`, made with the
//! project's own encoders and example files, so that the fuzzers start from valid messages.
//! Run from `fuzz/`: `cargo run --example seeds` (the committed corpus already holds them).

use std::fs;
use std::path::Path;

use acoa_fuzz::signing_key;
use acoa_shared::jobs::{self, JobResult, ResultOutcome};
use acoa_shared::model::{self, Cluster};
use acoa_shared::topics;
use acoa_shared::wire::{self, keys, Message};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenarios = root.join("../scenarios/railway");
    let read = |f: &str| fs::read_to_string(scenarios.join(f)).expect("scenario file");
    let full = model::parse_cluster(&read("cluster.yaml")).expect("railway cluster");
    let cluster = small(&full, 5);
    let apps: Vec<String> = ["smoke-monitoring.yaml", "speed-profiling.yaml"]
        .iter()
        .map(|f| read(f))
        .collect();

    let mut w = Writer::new(root.join("corpus"));
    // wire: every message variant, framed signed and unsigned, and as a bare body.
    for (i, m) in messages().iter().enumerate() {
        let signed = wire::encode(m, Some(signing_key())).expect("encodes");
        w.put("wire", &format!("{i}-signed"), &signed);
        w.put(
            "wire",
            &format!("{i}-unsigned"),
            &wire::encode(m, None).expect("encodes"),
        );
        w.put(
            "wire",
            &format!("{i}-body"),
            &postcard::to_allocvec(m).expect("encodes"),
        );
    }

    // jobs: results and a packed cluster (deflated and not). A job's frame and body are not
    // made here (`Job` gains fields as the scheduler does): `seed-job-frame` and `seed-job-body`
    // were made by `encode_job` and are kept.
    let packed = jobs::pack_cluster(&cluster).expect("cluster packs");
    let raw = miniz_oxide::inflate::decompress_to_vec(&packed).expect("inflates");
    for (i, outcome) in [
        ResultOutcome::Placed {
            assignment: [("s".to_string(), "n01".to_string())].into(),
            score: 0.75,
            feasible_deployments: 12,
        },
        ResultOutcome::Infeasible("no node has gps".into()),
        ResultOutcome::Error("budget".into()),
    ]
    .into_iter()
    .enumerate()
    {
        let r = JobResult {
            id: 7,
            nonce: 9,
            worker: "w1".into(),
            outcome,
            elapsed_us: 1200,
        };
        w.put(
            "jobs",
            &format!("result-{i}"),
            &mode(0, &jobs::encode_result(&r).unwrap()),
        );
    }
    w.put("jobs", "cluster-packed", &mode(3, &packed));
    w.put("jobs", "cluster-raw", &mode(3, &raw));

    // model: the railway files, a small cluster, each in YAML and JSON, and every feature.
    for (i, a) in apps.iter().enumerate() {
        let app = model::parse_application(a).expect("railway app");
        w.put("model", &format!("app-{i}.yaml"), a.as_bytes());
        w.put("model", &format!("app-{i}.json"), json(&app).as_bytes());
    }
    w.put("model", "cluster.yaml", yaml(&cluster).as_bytes());
    w.put("model", "cluster.json", json(&cluster).as_bytes());
    w.put("model", "features-app.yaml", FEATURES_APP.as_bytes());
    w.put(
        "model",
        "features-cluster.yaml",
        FEATURES_CLUSTER.as_bytes(),
    );
    model::parse_application(FEATURES_APP).expect("the features app is valid");
    model::parse_cluster(FEATURES_CLUSTER).expect("the features cluster is valid");

    // topics: every topic the scheme has, and broker addresses.
    for (i, t) in [
        topics::report("n13"),
        topics::links("n13"),
        topics::online("n13"),
        topics::desired("n13"),
        topics::actual("n13"),
        topics::usage("n13"),
        topics::peers("n13"),
        topics::app("smoke"),
        topics::app_status("smoke"),
        jobs::results("w1"),
        jobs::shared_jobs(jobs::DEFAULT_GROUP),
        "mqtt://127.0.0.1:1884/".into(),
        "tcp://[::1]:1883".into(),
        "mqtts://broker.example:8883".into(),
    ]
    .iter()
    .enumerate()
    {
        w.put("topics", &i.to_string(), t.as_bytes());
    }

    // agent_config: the packaged file, a rendered node file, the test's full file, its fields.
    let key = keys::public_hex(&signing_key().verifying_key());
    let packaged = fs::read_to_string(root.join("../cross/deb/agent.toml")).expect("agent.toml");
    w.put(
        "agent_config",
        "packaged.toml",
        packaged
            .replace(
                "CHANGE-ME: 64 hex digits printed by cloud-broker node add",
                &key,
            )
            .replace("CHANGE-ME", "n13")
            .as_bytes(),
    );
    w.put(
        "agent_config",
        "full.toml",
        FULL_CONFIG.replace("CONTROL-PLANE-KEY", &key).as_bytes(),
    );
    w.put("agent_config", "key", key.as_bytes());
    w.put("agent_config", "url", b"mqtts://[fe80::1]:8883/");

    // stats: the contract datagram, and a sequence with a restart and a silence.
    let d = |b: u64, m: u64| {
        format!(
            r#"{{"v":1,"app":"smoke","component":"camera","sent":[{{"to":"detector","bytes":{b},"messages":{m}}},{{"to":"store","bytes":{b}}}]}}"#
        )
    };
    w.put("stats", "datagram", d(123_456, 789).as_bytes());
    let mut seq = d(1000, 10).into_bytes();
    for (sep, b, m) in [(0xFF, 5000, 50), (0xFF, 100, 1), (0xFE, 200, 2)] {
        seq.push(sep);
        seq.extend_from_slice(d(b, m).as_bytes());
    }
    w.put("stats", "sequence", &seq);
    // v2: the container's name and its cumulative service time; two copies side by side, one
    // restarted
    let d2 = |c: &str, us: u64, m: u64| {
        format!(
            r#"{{"v":2,"app":"smoke","component":"camera","container":"{c}","sent":[{{"to":"detector","bytes":{},"messages":{m}}}],"service":{{"us":{us},"messages":{m}}}}}"#,
            m * 100
        )
    };
    w.put("stats", "datagram-v2", d2("smoke.camera", 61_200, 10).as_bytes());
    let mut seq = d2("smoke.camera", 1000, 10).into_bytes();
    for (sep, c, us, m) in [
        (0xFF, "smoke.camera.r2", 600_000, 10),
        (0xFF, "smoke.camera", 2000, 20),
        (0xFF, "smoke.camera.r2", 100, 1),
        (0xFE, "smoke.camera", 3000, 30),
    ] {
        seq.push(sep);
        seq.extend_from_slice(d2(c, us, m).as_bytes());
    }
    w.put("stats", "sequence-v2", &seq);
    println!("{} seeds written", w.count);
}

/// The first `n` nodes of `c` and the links between them.
fn small(c: &Cluster, n: usize) -> Cluster {
    let mut s = c.clone();
    s.nodes.truncate(n);
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    s.links = c
        .links
        .iter()
        .filter(|l| names.contains(&l.from.as_str()) && names.contains(&l.to.as_str()))
        .cloned()
        .collect();
    s.datacenters
        .retain(|d| s.nodes.iter().any(|n| n.datacenter == d.name));
    s.validate().expect("a part of a valid cluster is valid");
    s
}

/// One message of every variant. Read from JSON, which skips fields it does not know, so that
/// a field added to a message (`run` in every message an agent signs) does not break this.
fn messages() -> Vec<Message> {
    [
        r#"{"NodeReport": {"node": "n13", "seq": 3, "run": 1, "timestamp_ms": 1700000000000,
            "datacenter": "train1", "layer": "edge", "arch": "aarch64",
            "hardware": ["smoke-sensor"], "software": [],
            "capacity": {"cpu_millis": 2000, "memory_mb": 2048, "disk_mb": 16000, "net_mbps": 100},
            "load": {"cpu_millis": 300, "memory_used_mb": 512, "disk_used_mb": 0, "net_rx_bps": 0,
                     "net_tx_bps": 0, "disk_read_bps": 0, "disk_write_bps": 0, "containers": 2},
            "probe_addr": "10.0.0.13:7878"}}"#,
        r#"{"LinkMetrics": {"node": "n13", "seq": 4, "run": 1, "links": [
            {"peer": "n14", "latency_ms": 1.25, "jitter_ms": 0.1, "success": 0.99, "samples": 20, "last_answer_ms": 300}],
            "coord": {"vec": [1.5, -2.0, 0.25], "height": 0.5, "error": 0.4}}}"#,
        r#"{"DesiredState": {"node": "n13", "generation": 5, "term": 2, "containers": [
            {"name": "smoke.camera", "app": "smoke", "component": "camera",
             "image": "localhost/acoa/camera:1", "cpu_millis": 100, "memory_mb": 64,
             "env": [{"name": "MODE", "value": "fast"}]}]}}"#,
        r#"{"ActualState": {"node": "n13", "generation": 5, "seq": 6, "run": 1, "containers": [
            {"name": "smoke.camera", "image": "localhost/acoa/camera:1", "state": "Failed",
             "restarts": 2, "error": "exit 1"}]}}"#,
        r#"{"PeerList": {"node": "n13", "generation": 8, "peers": [{"node": "n14", "addr": "10.0.0.14:7878", "group": true}]}}"#,
        r#"{"ComponentUsage": {"node": "n13", "seq": 9, "run": 1, "period_ms": 1000, "components": [
            {"app": "smoke", "component": "camera", "container": "smoke.camera.r2",
             "cpu_millis": 12.5, "memory_mb": null,
             "traffic": [{"to": "detector", "bytes_per_s": 1000.0, "messages_per_s": 10.0}],
             "service": {"mean_ms": 61.25, "messages": 10}}]}}"#,
    ]
    .iter()
    .map(|j| serde_json::from_str(j).expect("a message in json"))
    .collect()
}

fn mode(m: u8, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![m];
    v.extend_from_slice(bytes);
    v
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).expect("serializes")
}

fn yaml<T: serde::Serialize>(v: &T) -> String {
    serde_yaml_ng::to_string(v).expect("serializes")
}

struct Writer {
    dir: std::path::PathBuf,
    count: usize,
}

impl Writer {
    fn new(dir: std::path::PathBuf) -> Self {
        Writer { dir, count: 0 }
    }

    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.dir.join(target);
        fs::create_dir_all(&dir).expect("corpus directory");
        fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed written");
        self.count += 1;
    }
}

const FEATURES_APP: &str = "\
application: features
scheduler: network-aware
components:
  - name: a
    image: localhost/acoa/a:1
    requires: {hardware: [gps], software: [db], datacenter: dc1, layer: edge, arch: aarch64, min_free_disk_mb: 10, node: n1}
    resources: {cpu_millis: 100, memory_mb: 64, net_mbps: 1.5, io_mbps: 2}
  - {name: b, image: b}
  - {name: c, image: c}
channels:
  - {name: ab, from: a, to: b}
  - {name: bc, from: b, to: c}
paths:
  - {name: p, channels: [ab, bc]}
criteria:
  - {type: min-e2e-response-time, path: p, weight: 0.5}
  - {type: max-e2e-reliability, path: p, weight: 0.2}
  - {type: least-containers, component: b, weight: 0.2}
  - {type: most-free-memory, target: c, weight: 0.1}
ingress: {node: n1, component: a}
";

const FEATURES_CLUSTER: &str = "\
cluster: features
datacenters:
  - {name: dc1, layer: edge}
  - {name: cloud, layer: cloud}
nodes:
  - name: n1
    datacenter: dc1
    layer: edge
    arch: aarch64
    hardware: [gps]
    software: [db]
    capacity: {cpu_millis: 2000, memory_mb: 2048, disk_mb: 1000, net_mbps: 100, io_mbps: 50.5}
    usage: {cpu_millis: 100, memory_mb: 100, disk_mb: 10, containers: 1, net_mbps: 1, io_mbps: 0.5}
  - {name: n2, datacenter: cloud, layer: cloud, arch: x86_64, capacity: {cpu_millis: 8000, memory_mb: 16384, disk_mb: 100000}}
links:
  - {from: n1, to: n2, latency_ms: 12.5, jitter_ms: 0.5, success: 0.99}
  - {from: n2, to: n1, latency_ms: 12.5, success: 1}
  - {from: n1, to: n1, latency_ms: 0, success: 1}
observed:
  features:
    components: {a: {cpu_millis: 50, memory_mb: 32}, b: {}}
    traffic:
      - {from: a, to: b, bytes_per_s: 1000}
";

/// Every key of the agent's configuration (the agent's config tests parse the same file).
const FULL_CONFIG: &str = include_str!("../../edge-agent/config-full.toml");
