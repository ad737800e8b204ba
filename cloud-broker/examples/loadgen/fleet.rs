//! The simulated fleet: each node's profile, key and link samples (derived from its index, so
//! that child processes make the same as the parent enrolled), and the simulated agents, in this
//! process or in child processes (`--child`: one process holds at most 20,000 open files here).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acoa_shared::coords::DIMS;
use acoa_shared::model::{self, Capacity, Layer, Usage};
use acoa_shared::topics;
use acoa_shared::wire::{self, LinkMetrics, LinkSample, Message, WireCoord};
use cloud_broker::testkit::{presence_frame, report_of};
use ed25519_dalek::SigningKey;
use rand::{Rng, RngCore, SeedableRng};
use rumqttc::{AsyncClient, Event as MqttEvent, LastWill, MqttOptions, Packet, QoS};

/// How many cloud nodes a fleet of `n` has (the rest are train nodes, 10 a train).
pub fn clouds(n: usize) -> usize {
    (n / 20).max(4)
}

pub fn node_profile(i: usize, n: usize) -> model::Node {
    let clouds = clouds(n);
    if i < clouds {
        model::Node {
            name: format!("c{i:05}"),
            datacenter: format!("cloud{}", i % 2 + 1),
            layer: Layer::Cloud,
            arch: "x86_64".into(),
            hardware: vec!["fast-cpu".into()],
            software: vec!["database".into()],
            capacity: Capacity {
                cpu_millis: 8000,
                memory_mb: 16384,
                disk_mb: 200_000,
                ..Default::default()
            },
            usage: Usage {
                cpu_millis: 500,
                memory_mb: 2000,
                disk_mb: 10_000,
                containers: 0,
                ..Default::default()
            },
            position: None,
        }
    } else {
        let e = i - clouds;
        model::Node {
            name: format!("e{i:05}"),
            datacenter: format!("train{}", e / 10),
            layer: Layer::Edge,
            arch: "aarch64".into(),
            hardware: if e.is_multiple_of(10) {
                vec!["sensor".into()]
            } else {
                vec![]
            },
            software: vec![],
            capacity: Capacity {
                cpu_millis: 2000,
                memory_mb: 2048,
                disk_mb: 16_000,
                ..Default::default()
            },
            usage: Usage {
                cpu_millis: 200,
                memory_mb: 300,
                disk_mb: 2000,
                containers: 0,
                ..Default::default()
            },
            position: None,
        }
    }
}

/// Node `i`'s key (the same in every process).
pub fn node_key(i: usize) -> SigningKey {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x16_5eed ^ (i as u64) << 8);
    SigningKey::generate(&mut rng)
}

/// Node `i`'s password.
pub fn password(i: usize) -> String {
    format!("pw-{i}")
}

/// Node `i`'s sample of its link to node `j` (the same every time: a pair's own seed): within
/// a group 0.2-2 ms, else the coordinates' distance and up to a quarter more.
fn sample(i: usize, j: usize, n: usize, same_group: bool) -> LinkSample {
    let mut rng = rand::rngs::StdRng::seed_from_u64(((i as u64) << 32) ^ j as u64 ^ 0x5a3e);
    let latency_ms = if same_group {
        rng.gen_range(0.2..2.0)
    } else {
        distance_ms(i, j, n) * rng.gen_range(1.0..1.25)
    };
    link_sample(j, n, latency_ms, &mut rng)
}

/// A sample of the link to node `j` at `latency_ms`, its jitter and success drawn from `rng`.
fn link_sample(j: usize, n: usize, latency_ms: f32, rng: &mut rand::rngs::StdRng) -> LinkSample {
    LinkSample {
        peer: wire::name(&node_profile(j, n).name).unwrap(),
        latency_ms,
        jitter_ms: rng.gen_range(0.0..0.2),
        success: 0.95 + (rng.next_u32() % 50) as f32 / 1000.0,
        samples: 20,
        last_answer_ms: 0,
    }
}

/// The distance between nodes `i` and `j` by their coordinates ([`coord_of`]).
fn distance_ms(i: usize, j: usize, n: usize) -> f32 {
    let c = |k: usize| coord_of(k, n).to_coord().expect("a finite coordinate");
    c(i).distance_ms(&c(j)) as f32
}

/// The index of the node named `name` in [`node_profile`]'s numbering (`c00012`, `e01234`).
fn index_of(name: &str) -> Option<usize> {
    name.get(1..)?.parse().ok()
}

/// What node `i`'s agent measures once it has its peer list: one sample per listed peer (as
/// many as a link metrics message holds), as [`sample`] gives it.
pub fn samples_of(i: usize, n: usize, list: &wire::PeerList) -> Vec<LinkSample> {
    list.peers
        .iter()
        .filter_map(|p| Some(sample(i, index_of(&p.node)?, n, p.group)))
        .take(wire::MAX_LINKS_PER_MESSAGE)
        .collect()
}

/// Peers of node i: its datacenter group, and four cloud nodes (at their coordinates' distance
/// and up to a quarter more, 19-80 ms); clouds: eight other clouds.
pub fn peers(i: usize, n: usize) -> Vec<LinkSample> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
    let clouds = clouds(n);
    let mut out = vec![];
    let mut push = |j: usize, lat: f32, rng: &mut rand::rngs::StdRng| {
        out.push(link_sample(j, n, lat, rng));
    };
    if i < clouds {
        for k in 1..=8 {
            let j = (i + k) % clouds;
            push(j, rng.gen_range(0.5..3.0), &mut rng);
        }
    } else {
        let e = i - clouds;
        let g0 = clouds + (e / 10) * 10;
        for j in g0..(g0 + 10).min(n) {
            if j != i {
                push(j, rng.gen_range(0.2..2.0), &mut rng);
            }
        }
        // to a cloud: what the two coordinates say, up to a quarter longer (so that the
        // coordinates under-estimate some clouds, as Vivaldi's do: placements rest on them)
        for k in 0..4 {
            let j = (e * 7 + k * 13) % clouds;
            push(j, distance_ms(i, j, n) * rng.gen_range(1.0..1.25), &mut rng);
        }
    }
    out
}

/// Node `i`'s network coordinate, as its agent would report it once settled: consistent with
/// [`peers`]' latencies (a cloud's 0.5-3 ms apart, a train's nodes within 2 ms, trains 20-80
/// ms from the clouds), fixed for the run. With it the control plane estimates the pairs
/// nobody measured, picks each node's nearest peers with its k-d tree, and explores the
/// placements that rest on estimates, as with a real fleet.
pub fn coord_of(i: usize, n: usize) -> WireCoord {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xc0_0d ^ (i as u64) << 8);
    let clouds = clouds(n);
    let mut vec = [0f32; DIMS];
    let (centre, height) = if i < clouds {
        // two cloud datacenters 2 ms apart
        ([(i % 2) as f32 * 2.0, 0.0], 0.3)
    } else {
        // a train at 19-77 ms from the clouds, its own direction (golden angle)
        let t = (i - clouds) / 10;
        let angle = t as f32 * 2.399_963;
        let radius = 19.0 + (t % 30) as f32 * 2.0;
        ([radius * angle.cos(), radius * angle.sin()], 0.4)
    };
    for (d, x) in vec.iter_mut().enumerate() {
        *x = centre.get(d).copied().unwrap_or(0.0) + rng.gen_range(-0.4f32..0.4);
    }
    WireCoord {
        vec,
        height,
        error: rng.gen_range(0.1f32..0.3),
    }
}

/// How the simulated agents send.
#[derive(Clone, Copy)]
pub struct Cadence {
    /// Link metrics every period (as the agent's prober, `report_period_ms`).
    pub period: Duration,
    /// A node report on every connection and then every this many periods (nothing changes
    /// in a simulated node: the agent's `report_max_interval_s`); 1: every period.
    pub report_every: u64,
    /// Whether link metrics carry the node's coordinate ([`coord_of`]) and the agent measures
    /// the peers of its list ([`samples_of`]) rather than fixed ones ([`peers`]).
    pub coords: bool,
}

/// How late the simulated agents are themselves: a process of thousands of agents on a shared
/// machine can fall behind its own schedule, and then the control plane rightly hears them
/// late. The latest tick's lateness at most (ms, since the last read) and the sends dropped at
/// the source (the agent's client queue full: its event loop not polled in time).
#[derive(Default)]
pub struct Lateness {
    pub late_max_ms: AtomicU64,
    pub dropped: AtomicU64,
}

/// Starts simulated agents for nodes `range` of a fleet of `n`, node i connecting to
/// `brokers[i % brokers.len()]`; counts the messages queued in `sent`. Every message is signed
/// afresh (the control plane drops a replayed one: pre-signed copies would not count). Paced: 200 connections
/// every 100 ms (`per_100ms`).
pub async fn start_agents(
    range: std::ops::Range<usize>,
    n: usize,
    brokers: &[(String, u16)],
    cadence: Cadence,
    per_100ms: usize,
    sent: Arc<AtomicU64>,
    lateness: Arc<Lateness>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(range.start as u64);
    for (k, i) in range.enumerate() {
        let node = node_profile(i, n);
        let key = node_key(i);
        // what it measures: fixed, or (with coordinates) its peer list's once it has one
        let samples = Arc::new(std::sync::Mutex::new(peers(i, n)));
        let coord = cadence.coords.then(|| coord_of(i, n));
        let sent = sent.clone();
        let lateness = lateness.clone();
        let (host, port) = brokers[i % brokers.len()].clone();
        let offset = Duration::from_millis(rng.gen_range(0..cadence.period.as_millis() as u64));
        let phase = rng.gen_range(0..cadence.report_every.max(1));
        tokio::spawn(async move {
            let name = node.name.clone();
            let mut o = MqttOptions::new(format!("lg-{name}"), host, port);
            o.set_credentials(&name, password(i));
            o.set_keep_alive(Duration::from_secs(30));
            o.set_last_will(LastWill::new(
                topics::online(&name),
                presence_frame(&name, &key, false),
                QoS::AtLeastOnce,
                true,
            ));
            let (c, mut el) = AsyncClient::new(o, 16);
            let probe = format!("10.{}.{}.{}:7878", i / 65536, (i / 256) % 256, i % 256);
            let mk_report = |seq: u64| {
                wire::encode(
                    &Message::NodeReport(Box::new(report_of(&node, seq, &probe))),
                    Some(&key),
                )
                .unwrap()
            };
            let mk_links = |seq: u64| {
                let mut l = LinkMetrics {
                    node: wire::name(&name).unwrap(),
                    seq,
                    run: 0,
                    links: Default::default(),
                    coord,
                };
                for s in samples
                    .lock()
                    .unwrap()
                    .iter()
                    .take(wire::MAX_LINKS_PER_MESSAGE)
                {
                    let _ = l.links.push(s.clone());
                }
                wire::encode(&Message::LinkMetrics(Box::new(l)), Some(&key)).unwrap()
            };
            // the event loop in its own task: polling it must never be cancelled mid-connect;
            // on every connection the presence, and a node report on the next tick, as the agent
            let connected = Arc::new(AtomicBool::new(false));
            {
                let c = c.clone();
                let name = name.clone();
                let here = presence_frame(&name, &key, true);
                let connected = connected.clone();
                let samples = samples.clone();
                let follow = cadence.coords;
                tokio::spawn(async move {
                    loop {
                        match el.poll().await {
                            Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                                let _ = c.try_publish(
                                    topics::online(&name),
                                    QoS::AtLeastOnce,
                                    true,
                                    here.clone(),
                                );
                                if follow {
                                    let _ = c.try_subscribe(topics::peers(&name), QoS::AtLeastOnce);
                                }
                                connected.store(true, Ordering::Relaxed);
                            }
                            Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                                // (the agent checks the signature; the load is the control
                                // plane's, so this one does not)
                                if let Ok(Message::PeerList(l)) =
                                    wire::decode_unverified(&p.payload)
                                {
                                    if l.node.as_str() == name {
                                        *samples.lock().unwrap() = samples_of(i, n, &l);
                                    }
                                }
                            }
                            Ok(_) => {}
                            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                        }
                    }
                });
            }
            tokio::time::sleep(offset).await;
            let mut iv = tokio::time::interval(cadence.period);
            // every message signed afresh with a new seq: the control plane drops replays
            let mut seq = 0u64;
            let send = |topic: String, payload: Vec<u8>| {
                if c.try_publish(topic, QoS::AtMostOnce, false, payload)
                    .is_ok()
                {
                    sent.fetch_add(1, Ordering::Relaxed);
                } else {
                    lateness.dropped.fetch_add(1, Ordering::Relaxed);
                }
            };
            loop {
                // missed ticks come at once, each with the time it was due
                let due = iv.tick().await;
                let late = due.elapsed().as_millis() as u64;
                lateness.late_max_ms.fetch_max(late, Ordering::Relaxed);
                seq += 1;
                if connected.swap(false, Ordering::Relaxed)
                    || seq % cadence.report_every.max(1) == phase
                {
                    send(topics::report(&name), mk_report(seq));
                }
                send(topics::links(&name), mk_links(seq));
            }
        });
        if k % per_100ms == per_100ms - 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A child process's agents (`loadgen --child FROM..TO --child-total N --child-brokers
/// HOST:PORT,...`): prints the messages queued so far, one line a second (`sent N`), and how late
/// it is (`late MS dropped N`: its latest ticks' lateness at most over the second, the sends
/// dropped so far), until killed.
pub fn child_main(
    range: std::ops::Range<usize>,
    n: usize,
    brokers: Vec<(String, u16)>,
    cadence: Cadence,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sent = Arc::new(AtomicU64::new(0));
        let lateness = Arc::new(Lateness::default());
        {
            let (sent, lateness) = (sent.clone(), lateness.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    println!("sent {}", sent.load(Ordering::Relaxed));
                    println!(
                        "late {} dropped {}",
                        lateness.late_max_ms.swap(0, Ordering::Relaxed),
                        lateness.dropped.load(Ordering::Relaxed)
                    );
                }
            });
        }
        start_agents(range, n, &brokers, cadence, 100, sent, lateness).await;
        std::future::pending::<()>().await;
        Ok(())
    })
}
