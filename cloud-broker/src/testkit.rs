//! Simulated agents for tests and the load benchmark: real MQTT clients (rumqttc) publishing
//! real signed wire messages (node report, link metrics, actual state), with the agent's last
//! will, receiving and verifying their desired states. Not the edge agent: no containers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acoa_shared::model;
use acoa_shared::topics;
use acoa_shared::wire::{
    self, ActualState, ContainerState, ContainerStatus, DesiredState, LinkMetrics, LinkSample,
    Message, NodeCapacity, NodeLoad, NodeReport,
};
use ed25519_dalek::{SigningKey, VerifyingKey};
use rumqttc::{AsyncClient, Event as MqttEvent, LastWill, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;

pub mod engine;

/// A node report for `n` (a node of a cluster snapshot).
pub fn report_of(n: &model::Node, seq: u64, probe_addr: &str) -> NodeReport {
    let labels = |v: &[String]| {
        let mut l = wire::Labels::new();
        for s in v {
            let _ = l.push(wire::name(s).unwrap_or_default());
        }
        l
    };
    NodeReport {
        node: wire::name(&n.name).unwrap_or_default(),
        seq,
        run: 0,
        timestamp_ms: 0,
        datacenter: wire::name(&n.datacenter).unwrap_or_default(),
        layer: n.layer,
        arch: wire::name(&n.arch).unwrap_or_default(),
        hardware: labels(&n.hardware),
        software: labels(&n.software),
        capacity: NodeCapacity {
            cpu_millis: n.capacity.cpu_millis,
            memory_mb: n.capacity.memory_mb,
            disk_mb: n.capacity.disk_mb,
            net_mbps: 1000,
        },
        load: NodeLoad {
            cpu_millis: n.usage.cpu_millis,
            memory_used_mb: n.usage.memory_mb,
            disk_used_mb: n.usage.disk_mb,
            containers: n.usage.containers,
            ..Default::default()
        },
        probe_addr: wire::bounded("probe_addr", probe_addr).unwrap_or_default(),
        position: n.position.as_ref().map(wire::WirePosition::from_position),
    }
}

/// The links of `from` in a cluster snapshot, as samples.
pub fn samples_of(c: &model::Cluster, from: &str) -> Vec<LinkSample> {
    c.links
        .iter()
        .filter(|l| l.from == from)
        .map(|l| LinkSample {
            peer: wire::name(&l.to).unwrap_or_default(),
            latency_ms: l.latency_ms as f32,
            jitter_ms: l.jitter_ms as f32,
            success: l.success as f32,
            samples: 20,
            // simulated agents do not probe: they are no evidence that a peer answers
            last_answer_ms: wire::NEVER_ANSWERED,
        })
        .collect()
}

/// A simulated agent's signed presence (run 0, connection 1: its reports are of run 0 too).
pub fn presence_frame(node: &str, key: &SigningKey, online: bool) -> Vec<u8> {
    let p = Message::Presence(wire::Presence {
        node: wire::name(node).unwrap_or_default(),
        run: 0,
        conn: 1,
        online,
    });
    wire::encode(&p, Some(key)).unwrap_or_default()
}

/// The actual state of `node` for desired generation `generation`: these containers (name,
/// image) running.
pub fn running<N: AsRef<str>, I: AsRef<str>>(
    node: &str,
    generation: u64,
    seq: u64,
    containers: impl IntoIterator<Item = (N, I)>,
) -> ActualState {
    let mut a = ActualState {
        node: wire::name(node).unwrap_or_default(),
        generation,
        seq,
        run: 0,
        containers: Default::default(),
    };
    for (name, image) in containers {
        let _ = a.containers.push(ContainerStatus {
            name: wire::name(name.as_ref()).unwrap_or_default(),
            image: wire::bounded("image", image.as_ref()).unwrap_or_default(),
            state: ContainerState::Running,
            restarts: 0,
            error: Default::default(),
            health: None,
        });
    }
    a
}

/// What a simulated agent is.
#[derive(Clone)]
pub struct AgentSpec {
    pub url: String,
    pub node: model::Node,
    pub password: String,
    pub key: SigningKey,
    pub control_plane: VerifyingKey,
    pub probe_addr: String,
    pub links: Vec<LinkSample>,
    pub period: Duration,
    /// Subscribe to the node's desired state.
    pub subscribe_desired: bool,
}

/// A running simulated agent.
pub struct SimAgent {
    pub name: String,
    client: AsyncClient,
    key: SigningKey,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Verified desired states as they arrive.
    pub desired: mpsc::UnboundedReceiver<Box<DesiredState>>,
    /// Messages published on the desired topic that did not verify.
    pub refused: Arc<AtomicU64>,
    pub connected: Arc<AtomicBool>,
    /// Connections the broker accepted (1 while the first one holds).
    pub connacks: Arc<AtomicU64>,
    pub links: Arc<Mutex<Vec<LinkSample>>>,
    seq: Arc<AtomicU64>,
}

fn split_url(url: &str) -> (String, u16) {
    crate::conn::parse_url(url).expect("broker url")
}

impl SimAgent {
    pub fn start(spec: AgentSpec) -> SimAgent {
        let name = spec.node.name.clone();
        let (host, port) = split_url(&spec.url);
        let mut o = MqttOptions::new(format!("sim-{name}"), host, port);
        o.set_credentials(&name, &spec.password);
        o.set_keep_alive(Duration::from_secs(5));
        o.set_clean_session(true);
        o.set_max_packet_size(2 << 20, 64 << 10);
        o.set_last_will(LastWill::new(
            topics::online(&name),
            presence_frame(&name, &spec.key, false),
            QoS::AtLeastOnce,
            true,
        ));
        let (client, mut el) = AsyncClient::new(o, 64);
        let (dtx, drx) = mpsc::unbounded_channel();
        let refused = Arc::new(AtomicU64::new(0));
        let connected = Arc::new(AtomicBool::new(false));
        let connacks = Arc::new(AtomicU64::new(0));
        let links = Arc::new(Mutex::new(spec.links.clone()));
        let seq = Arc::new(AtomicU64::new(0));
        let mut tasks = vec![];
        {
            let c = client.clone();
            let name = name.clone();
            let refused = refused.clone();
            let connected = connected.clone();
            let connacks = connacks.clone();
            let cp = spec.control_plane;
            let sub = spec.subscribe_desired;
            let here = presence_frame(&name, &spec.key, true);
            tasks.push(tokio::spawn(async move {
                loop {
                    match el.poll().await {
                        Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                            connected.store(true, Ordering::SeqCst);
                            connacks.fetch_add(1, Ordering::SeqCst);
                            let c = c.clone();
                            let name = name.clone();
                            let here = here.clone();
                            tokio::spawn(async move {
                                let _ = c
                                    .publish(topics::online(&name), QoS::AtLeastOnce, true, here)
                                    .await;
                                if sub {
                                    let _ =
                                        c.subscribe(topics::desired(&name), QoS::AtLeastOnce).await;
                                }
                            });
                        }
                        Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                            match wire::decode_verified(&p.payload, &cp) {
                                Ok(Message::DesiredState(d)) if d.node.as_str() == name => {
                                    let _ = dtx.send(d);
                                }
                                _ => {
                                    refused.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                        Ok(_) => {}
                        Err(_) => {
                            connected.store(false, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }));
        }
        {
            let c = client.clone();
            let key = spec.key.clone();
            let node = spec.node.clone();
            let probe = spec.probe_addr.clone();
            let links = links.clone();
            let seq = seq.clone();
            let period = spec.period;
            tasks.push(tokio::spawn(async move {
                let mut iv = tokio::time::interval(period);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    iv.tick().await;
                    let s = seq.fetch_add(1, Ordering::SeqCst) + 1;
                    let r = Message::NodeReport(Box::new(report_of(&node, s, &probe)));
                    if let Ok(b) = wire::encode(&r, Some(&key)) {
                        let _ =
                            c.try_publish(topics::report(&node.name), QoS::AtMostOnce, false, b);
                    }
                    let samples = links.lock().unwrap().clone();
                    for chunk in samples.chunks(wire::MAX_LINKS_PER_MESSAGE) {
                        let mut l = LinkMetrics {
                            node: wire::name(&node.name).unwrap_or_default(),
                            seq: s,
                            run: 0,
                            links: Default::default(),
                            coord: None,
                        };
                        for x in chunk {
                            let _ = l.links.push(x.clone());
                        }
                        if let Ok(b) = wire::encode(&Message::LinkMetrics(Box::new(l)), Some(&key))
                        {
                            let _ =
                                c.try_publish(topics::links(&node.name), QoS::AtMostOnce, false, b);
                        }
                    }
                }
            }));
        }
        SimAgent {
            name,
            client,
            key: spec.key,
            tasks,
            desired: drx,
            refused,
            connected,
            connacks,
            links,
            seq,
        }
    }

    /// Reports these containers (`{app}.{component}`) running, for desired generation `generation`.
    pub async fn report_running(&self, generation: u64, names: &[String]) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let a = running(&self.name, generation, seq, names.iter().map(|n| (n, "")));
        if let Ok(b) = wire::encode(&Message::ActualState(Box::new(a)), Some(&self.key)) {
            let _ = self
                .client
                .publish(topics::actual(&self.name), QoS::AtLeastOnce, false, b)
                .await;
        }
    }

    /// Publishes raw bytes on any topic with this agent's credentials.
    pub async fn publish_raw(&self, topic: &str, payload: Vec<u8>, retain: bool) {
        let _ = self
            .client
            .publish(topic, QoS::AtLeastOnce, retain, payload)
            .await;
    }

    pub fn client(&self) -> &AsyncClient {
        &self.client
    }

    /// Dies without a goodbye: the broker fires the last will.
    pub fn kill(self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Stops reporting but keeps the connection (reports stop: the timeout path).
    pub fn silence(&mut self) {
        if let Some(t) = self.tasks.get(1) {
            t.abort();
        }
    }
}
