//! The control plane's engine driven with plain values, for the tests of its decisions: a
//! clock, events in and actions out, placement jobs run inline with the real scheduler (or kept
//! for the test to run), persisted operations kept in a snapshot as the store would keep them.

use std::collections::BTreeMap;
use std::path::Path;

use acoa_shared::model::{self, Cluster};
use acoa_shared::topics;
use acoa_shared::wire::{self, LinkMetrics, LinkSample, Message, NodeReport};
use ed25519_dalek::SigningKey;

use crate::engine::{run_job, Action, Engine, EngineConfig, Event, Job};
use crate::records::DesiredDoc;
use crate::status::AppStatus;
use crate::store::{PersistOp, Snapshot};

/// The railway scenario's cluster (`scenarios/railway/cluster.yaml`).
pub fn railway() -> Cluster {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/railway/cluster.yaml");
    model::load_cluster(&p).unwrap()
}

/// The text of the railway scenario's application `name` (`scenarios/railway/{name}.yaml`).
pub fn railway_app(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/railway/{name}.yaml"));
    std::fs::read(p).unwrap()
}

/// The first report of node `n` as the engine tests give it: no bandwidth, probed at
/// `10.0.0.{number}:7878`.
pub fn first_report(n: &model::Node) -> NodeReport {
    let mut r = super::report_of(n, 1, &format!("10.0.0.{}:7878", &n.name[1..]));
    r.capacity.net_mbps = 0;
    r
}

/// The links of `from` in `c` as a first link report, every peer having just answered.
pub fn links_of(c: &Cluster, from: &str) -> LinkMetrics {
    link_metrics(
        from,
        super::samples_of(c, from).into_iter().map(|s| LinkSample {
            last_answer_ms: 0,
            ..s
        }),
    )
}

/// A first link report (sequence 1, run 0) of node `from`.
pub fn link_metrics(from: &str, samples: impl IntoIterator<Item = LinkSample>) -> LinkMetrics {
    let mut l = LinkMetrics {
        node: wire::name(from).unwrap(),
        seq: 1,
        run: 0,
        links: Default::default(),
        coord: None,
    };
    for s in samples {
        l.links.push(s).unwrap();
    }
    l
}

/// An engine with a clock.
pub struct EngineSim {
    pub e: Engine,
    pub now: u64,
    /// What the engine persisted, applied as the store would.
    pub snap: Snapshot,
    pub key: SigningKey,
    /// Every action so far.
    pub log: Vec<Action>,
    /// Run placement jobs inline (else they wait in `pending_jobs`).
    pub run_jobs: bool,
    pub pending_jobs: Vec<Job>,
}

impl EngineSim {
    pub fn new(cfg: EngineConfig) -> EngineSim {
        let key = SigningKey::from_bytes(&[42; 32]);
        EngineSim::restore(cfg, key, Snapshot::default())
    }

    /// An engine started on a store's snapshot.
    pub fn restore(cfg: EngineConfig, key: SigningKey, snap: Snapshot) -> EngineSim {
        EngineSim {
            e: Engine::new(cfg, key.clone(), snap.clone(), 0),
            now: 0,
            snap,
            key,
            log: vec![],
            run_jobs: true,
            pending_jobs: vec![],
        }
    }

    /// Handles `ev` and what follows from it (jobs run inline), at the current time.
    pub fn feed(&mut self, ev: Event) -> Vec<Action> {
        let mut all = vec![];
        let mut queue = vec![ev];
        while let Some(ev) = queue.pop() {
            for a in self.e.handle(self.now, ev) {
                match &a {
                    Action::Persist(op) => apply(&mut self.snap, op),
                    Action::Schedule(j) if self.run_jobs => {
                        queue.push(Event::Scheduled(Box::new(run_job(j))))
                    }
                    Action::Schedule(j) => self.pending_jobs.push((**j).clone()),
                    // as the I/O loop does, off the decision (here: at once)
                    Action::ComputePeers(j) => queue.push(Event::PeersComputed(Box::new(j.run()))),
                    Action::WarmModel(m) => m.derive_views(),
                    _ => {}
                }
                all.push(a);
            }
        }
        self.log.extend(all.clone());
        all
    }

    /// Every node of `c` reports ([`first_report`]), then its links ([`links_of`]).
    pub fn join_cluster(&mut self, c: &Cluster) {
        for n in &c.nodes {
            self.feed(Event::Report(Box::new(first_report(n))));
        }
        for n in &c.nodes {
            self.feed(Event::links(Box::new(links_of(c, &n.name))));
        }
    }

    /// `payload` published (retained) as the definition of application `app`.
    pub fn publish(&mut self, app: &str, payload: Vec<u8>) -> Vec<Action> {
        self.feed(Event::AppPublished {
            app: app.into(),
            payload,
        })
    }

    /// `ms` later, a tick.
    pub fn tick(&mut self, ms: u64) -> Vec<Action> {
        self.now += ms;
        self.feed(Event::Tick)
    }

    /// The current placement of `app` (component → node).
    pub fn assignment(&self, app: &str) -> BTreeMap<String, String> {
        self.e.placement(app).unwrap().assignment.clone()
    }
}

fn apply(s: &mut Snapshot, op: &PersistOp) {
    match op {
        PersistOp::PutApp(a) => {
            s.apps.insert(a.name.clone(), (**a).clone());
        }
        PersistOp::DeleteApp(n) => {
            s.apps.remove(n);
            s.history.remove(n);
        }
        PersistOp::PutHistory(h) => {
            s.history.insert(h.app.clone(), (**h).clone());
        }
        PersistOp::PutDesired(d) => {
            s.desired.insert(d.node.to_string(), (**d).clone());
        }
        PersistOp::PutNode(n) => {
            s.nodes.insert(n.name.clone(), (**n).clone());
        }
        PersistOp::PutMeta(m) => s.meta = m.clone(),
    }
}

/// The peer lists among `acts`, by node, checked: signed, for the node of their topic.
pub fn peer_lists_published(
    acts: &[Action],
    key: &ed25519_dalek::SigningKey,
) -> BTreeMap<String, wire::PeerList> {
    acts.iter()
        .filter_map(|a| match a {
            Action::PublishLatest { topic, payload } => match topics::parse(topic) {
                Some(topics::Topic::Peers(n)) => {
                    let Message::PeerList(pl) =
                        wire::decode_verified(payload, &key.verifying_key()).unwrap()
                    else {
                        panic!("not a peer list on {topic}")
                    };
                    assert_eq!(pl.node.as_str(), n, "the list of its topic's node");
                    Some((n.to_string(), *pl))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The peer-list computations `acts` hand to the I/O loop.
pub fn peer_jobs(acts: &[Action]) -> Vec<crate::engine::probes::PeersJob> {
    acts.iter()
        .filter_map(|a| match a {
            Action::ComputePeers(j) => Some((**j).clone()),
            _ => None,
        })
        .collect()
}

/// The desired states published (signed by `key`) in `actions`, per node, decoded and verified.
pub fn desired_states(
    actions: &[Action],
    key: &SigningKey,
) -> BTreeMap<String, Box<wire::DesiredState>> {
    let mut m = BTreeMap::new();
    for a in actions {
        if let Action::Publish { topic, payload, .. } = a {
            if let Some(topics::Topic::Desired(n)) = topics::parse(topic) {
                match wire::decode_verified(payload, &key.verifying_key()).unwrap() {
                    Message::DesiredState(d) => {
                        m.insert(n.to_string(), d);
                    }
                    other => panic!("not a desired state: {other:?}"),
                }
            }
        }
    }
    m
}

/// The desired states published (retained, signed) in `actions`, per node, as the control plane
/// keeps them.
pub fn desired_published(actions: &[Action], key: &SigningKey) -> BTreeMap<String, DesiredDoc> {
    for a in actions {
        if let Action::Publish { topic, retain, .. } = a {
            if let Some(topics::Topic::Desired(_)) = topics::parse(topic) {
                assert!(retain);
            }
        }
    }
    desired_states(actions, key)
        .into_iter()
        .map(|(n, d)| (n, DesiredDoc::from_wire(&d)))
        .collect()
}

/// The statuses of `app` published in `actions` (not the deletions), in order.
pub fn statuses(actions: &[Action], app: &str) -> Vec<AppStatus> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish { topic, payload, .. }
                if *topic == topics::app_status(app) && !payload.is_empty() =>
            {
                Some(serde_json::from_slice(payload).unwrap())
            }
            _ => None,
        })
        .collect()
}

/// An engine that takes a silent node for lost as soon as it is silent (no evidence window for
/// its peers to report an answer): for the tests of what follows a loss.
pub fn lost_when_silent() -> EngineConfig {
    EngineConfig {
        evidence_ms: 0,
        ..EngineConfig::default()
    }
}

/// An engine that evaluates placements again every second and never takes a node for lost on
/// silence.
pub fn reevaluating() -> EngineConfig {
    EngineConfig {
        reevaluate_ms: 1000,
        node_timeout_ms: 1_000_000,
        ..Default::default()
    }
}

/// The signed last will of `node`'s connection: offline.
pub fn will_of(node: impl Into<String>) -> Event {
    Event::Online {
        node: node.into(),
        online: false,
        run: 0,
        conn: 1,
    }
}

/// The application of the load benchmarks (`examples/loadgen`, `examples/model_bench`): a
/// sensor of train `train`, a detector in the cloud and a store with a database; the alarm
/// path's response time (weight 1) and the archive path's reliability (`archive_weight`).
pub fn bench_app_yaml(name: &str, train: usize, archive_weight: f64) -> String {
    format!(
        "application: {name}\nscheduler: qos\ncomponents:\n\
- name: sense\n  image: localhost/acoa/sense:1\n  requires: {{hardware: [sensor], datacenter: train{train}}}\n\
- name: detect\n  image: localhost/acoa/detect:1\n  requires: {{layer: cloud}}\n  resources: {{cpu_millis: 100, memory_mb: 64}}\n\
- name: store\n  image: localhost/acoa/store:1\n  requires: {{software: [database]}}\n\
channels:\n- {{name: raw, from: sense, to: detect}}\n- {{name: keep, from: sense, to: store}}\n\
paths:\n- {{name: alarm, channels: [raw]}}\n- {{name: archive, channels: [keep]}}\n\
criteria:\n- {{type: min-e2e-response-time, path: alarm, weight: 1.0}}\n- {{type: max-e2e-reliability, path: archive, weight: {archive_weight}}}\n"
    )
}

/// [`bench_app_yaml`], or with `stages` > 0 a chain of that many stages from train `train`'s
/// sensor to a database, one path along it (response time, weight 1, and reliability,
/// `archive_weight`). Every other stage may run anywhere, the others in a cloud (each asks
/// for 50 millicores and 32 MB): an exploration round then searches a neighbourhood per
/// channel over the whole fleet (`examples/model_bench --stages`, `examples/loadgen --stages`).
pub fn chain_app_yaml(name: &str, train: usize, archive_weight: f64, stages: usize) -> String {
    if stages == 0 {
        return bench_app_yaml(name, train, archive_weight);
    }
    let mut y = format!(
        "application: {name}\nscheduler: qos\ncomponents:\n\
- name: sense\n  image: localhost/acoa/sense:1\n  requires: {{hardware: [sensor], datacenter: train{train}}}\n"
    );
    for k in 0..stages {
        let requires = if k % 2 == 0 { "{}" } else { "{layer: cloud}" };
        y += &format!(
            "- name: stage{k}\n  image: localhost/acoa/stage:1\n  requires: {requires}\n  resources: {{cpu_millis: 50, memory_mb: 32}}\n"
        );
    }
    y += "- name: store\n  image: localhost/acoa/store:1\n  requires: {software: [database]}\nchannels:\n";
    let ends: Vec<String> = std::iter::once("sense".to_string())
        .chain((0..stages).map(|k| format!("stage{k}")))
        .chain(std::iter::once("store".to_string()))
        .collect();
    let names: Vec<String> = (0..=stages).map(|k| format!("c{k}")).collect();
    for (k, w) in ends.windows(2).enumerate() {
        y += &format!("- {{name: c{k}, from: {}, to: {}}}\n", w[0], w[1]);
    }
    y += &format!(
        "paths:\n- {{name: alarm, channels: [{}]}}\ncriteria:\n\
- {{type: min-e2e-response-time, path: alarm, weight: 1.0}}\n\
- {{type: max-e2e-reliability, path: alarm, weight: {archive_weight}}}\n",
        names.join(", ")
    );
    y
}

/// An aarch64 edge node of datacenter `dc` with room for the tests' applications.
pub fn edge_node(name: &str, dc: &str) -> model::Node {
    model::Node {
        name: name.into(),
        datacenter: dc.into(),
        layer: model::Layer::Edge,
        arch: "aarch64".into(),
        hardware: vec![],
        software: vec![],
        capacity: model::Capacity {
            cpu_millis: 4000,
            memory_mb: 4096,
            disk_mb: 100_000,
            ..Default::default()
        },
        usage: model::Usage::default(),
        position: None,
    }
}
