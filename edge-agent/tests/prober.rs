//! The prober measured against known delay and loss, on an asymmetric link.
//!
//! Two real agents run in two network namespaces (veth pairs to the root namespace).
//! Each probes the other through a UDP relay in the root namespace (threads of this
//! test on real sockets) that holds every datagram for a fixed delay per direction and
//! drops every fifth datagram of one direction: this kernel has no netem. The emulated
//! link is asymmetric: A -> B 20 ms with 20 % loss, B -> A 60 ms without loss.
//!
//! With `clock = "synchronized"` (the namespaces share the host clock) each agent must
//! report its own direction's latency within 10 % (+ 1.5 ms) of what the relay held; with
//! `clock = "free"` both report half the round trip. In both modes the success is that
//! of the forward direction (the responder counts the pings it gets): about 0.8 for
//! A -> B and about 1 for B -> A, although both see 0.8 of their round trips.
//!
//! Each agent reads its own peer list (wire v5), and their pongs carry each other's network
//! coordinate: both report one with their link metrics, and the two settle the half round trip
//! apart (within 15 %).
//!
//! Needs root (ip netns), iproute2 and mosquitto; fails clearly when they are missing
//! unless ACOA_SKIP_PODMAN=1 (the switch of the tests that need system services).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{self, decode_verified, encode, Message, Peer, PeerList};
use common::*;
use edge_agent::prober;

const DROP_EVERY: u32 = 5;
/// Absolute tolerance on top of 10 %.
const SLACK_MS: f64 = 1.5;
/// A -> B: delay and whether every fifth datagram is dropped.
const A_TO_B: Leg = Leg {
    delay: Duration::from_millis(20),
    lossy: true,
};
/// B -> A.
const B_TO_A: Leg = Leg {
    delay: Duration::from_millis(60),
    lossy: false,
};

/// One direction of the emulated link.
#[derive(Clone, Copy)]
struct Leg {
    delay: Duration,
    lossy: bool,
}

/// Milliseconds datagrams were actually held (from their arrival in the kernel to their
/// sending), and how many: on a loaded machine the relay's wake-ups add to the nominal delay.
#[derive(Default)]
struct Held {
    ms: f64,
    n: u64,
}

/// A UDP relay: client -> `listen` -> (`up` leg) -> `target`, and back (`down` leg).
struct Relay {
    /// [up, down]
    held: [Arc<Mutex<Held>>; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn spawn(
        listen: SocketAddr,
        upstream_bind: SocketAddr,
        target: SocketAddr,
        up: Leg,
        down: Leg,
    ) -> Relay {
        let front = UdpSocket::bind(listen).expect("relay front socket");
        let back = UdpSocket::bind(upstream_bind).expect("relay back socket");
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let held: [Arc<Mutex<Held>>; 2] = Default::default();
        let mut threads = Vec::new();
        // Per direction: a receiving thread and a delivering one (a constant delay keeps
        // each direction's queue in due order).
        for (dir, leg) in [up, down].into_iter().enumerate() {
            let (rx_sock, tx_sock) = if dir == 0 {
                (front.try_clone().unwrap(), back.try_clone().unwrap())
            } else {
                (back.try_clone().unwrap(), front.try_clone().unwrap())
            };
            let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
            {
                let (stop, client) = (stop.clone(), client.clone());
                threads.push(std::thread::spawn(move || {
                    let mut buf = [0u8; 2048];
                    let mut n = 0u32;
                    // Held from the kernel's arrival time, as the agents stamp: the relay's
                    // own wake-up is then part of what it holds, not an unseen extra.
                    prober::enable_kernel_stamps(&rx_sock);
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((len, from, kernel)) = prober::recv_stamped(&rx_sock, &mut buf) {
                            let now = Instant::now();
                            let (_, k) = prober::backdate(0, prober::wall_ns(), kernel);
                            let t = now
                                .checked_sub(Duration::from_nanos(
                                    prober::wall_ns().saturating_sub(k),
                                ))
                                .unwrap_or(now);
                            if dir == 0 {
                                *client.lock().unwrap() = Some(from);
                            }
                            n += 1;
                            if leg.lossy && n.is_multiple_of(DROP_EVERY) {
                                continue;
                            }
                            let _ = tx.send((t, buf[..len].to_vec()));
                        }
                    }
                }));
            }
            {
                let (stop, client, held) = (stop.clone(), client.clone(), held[dir].clone());
                threads.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok((t, bytes)) = rx.recv_timeout(Duration::from_millis(100)) else {
                            continue;
                        };
                        let due = t + leg.delay;
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        let to = if dir == 0 {
                            Some(target)
                        } else {
                            *client.lock().unwrap()
                        };
                        if let Some(to) = to {
                            let _ = tx_sock.send_to(&bytes, to);
                        }
                        let ms = t.elapsed().as_secs_f64() * 1000.0;
                        let mut h = held.lock().unwrap();
                        h.ms += ms;
                        h.n += 1;
                    }
                }));
            }
        }
        Relay {
            held,
            stop,
            threads,
        }
    }

    /// Mean held time of the up (0) or down (1) direction.
    fn mean_held_ms(&self, dir: usize) -> f64 {
        let h = self.held[dir].lock().unwrap();
        h.ms / h.n.max(1) as f64
    }

    fn reset(&self) {
        for h in &self.held {
            *h.lock().unwrap() = Held::default();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Two namespaces, each with a veth to the root namespace.
struct Net {
    names: Vec<String>,
    links: Vec<String>,
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

impl Net {
    fn up(tag: u32) -> Net {
        let mut net = Net {
            names: Vec::new(),
            links: Vec::new(),
        };
        for (i, side) in ["a", "b"].iter().enumerate() {
            let ns = format!("acoa-pt{tag}-{side}");
            let host_if = format!("vpt{tag}{side}");
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            let _ = Command::new("ip").args(["link", "del", &host_if]).output();
            ip(&["netns", "add", &ns]);
            net.names.push(ns.clone());
            ip(&[
                "link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            net.links.push(host_if.clone());
            let subnet = 1 + i;
            ip(&[
                "addr",
                "add",
                &format!("10.213.{subnet}.1/24"),
                "dev",
                &host_if,
            ]);
            ip(&["link", "set", &host_if, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.213.{subnet}.2/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&[
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                &format!("10.213.{subnet}.1"),
            ]);
        }
        net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for l in &self.links {
            let _ = Command::new("ip").args(["link", "del", l]).output();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// The last link metrics `me` published, checked against its key.
fn last_metrics(
    watcher: &Watcher,
    me: &str,
    key: &ed25519_dalek::VerifyingKey,
) -> wire::LinkMetrics {
    let payload = watcher
        .last(&topics::links(me))
        .unwrap_or_else(|| panic!("no link metrics from {me}"));
    let Message::LinkMetrics(m) = decode_verified(&payload, key).expect("signed by the node")
    else {
        panic!("not link metrics")
    };
    *m
}

/// The coordinate `me` last reported with its link metrics.
fn coordinate(watcher: &Watcher, me: &str, key: &ed25519_dalek::VerifyingKey) -> wire::WireCoord {
    last_metrics(watcher, me, key)
        .coord
        .unwrap_or_else(|| panic!("{me} reports no coordinate"))
}

/// One sample read from the broker: what `me` reports about `other`.
fn sample(
    watcher: &Watcher,
    me: &str,
    other: &str,
    key: &ed25519_dalek::VerifyingKey,
) -> wire::LinkSample {
    last_metrics(watcher, me, key)
        .links
        .iter()
        .find(|l| l.peer.as_str() == other)
        .expect("a sample of the peer")
        .clone()
}

#[test]
fn prober_measures_injected_delay_and_loss_per_direction() {
    if skip_or_require(
        "prober_measures_injected_delay_and_loss_per_direction",
        false,
    ) {
        return;
    }
    require_bin("ip", "apt-get install -y iproute2");
    let tag = std::process::id() % 1000;
    let net = Net::up(tag);
    let dir = scratch_dir("prober");
    let broker = Broker::start_on("10.213.1.1", free_port(), &dir);
    let probe_port = 7878;
    let a_addr: SocketAddr = format!("10.213.1.2:{probe_port}").parse().unwrap();
    let b_addr: SocketAddr = format!("10.213.2.2:{probe_port}").parse().unwrap();
    // What A dials to reach B, and B to reach A: relay ports on the root namespace.
    // A's pings travel A -> B and their pongs B -> A; B's the other way round.
    let via_b: SocketAddr = "10.213.1.1:17001".parse().unwrap();
    let via_a: SocketAddr = "10.213.1.1:17002".parse().unwrap();
    let relay_b = Relay::spawn(
        via_b,
        "10.213.2.1:0".parse().unwrap(),
        b_addr,
        A_TO_B,
        B_TO_A,
    );
    let relay_a = Relay::spawn(
        via_a,
        "10.213.1.1:0".parse().unwrap(),
        a_addr,
        B_TO_A,
        A_TO_B,
    );
    let watcher = Watcher::new(&broker.host, broker.port, "acoa/v1/nodes/+/links");
    let expected_success = 1.0 - 1.0 / f64::from(DROP_EVERY);

    for (generation, clock) in [(1u64, "synchronized"), (2, "free")] {
        let node_a = node_name(&format!("pa{generation}"));
        let node_b = node_name(&format!("pb{generation}"));
        // The retained peer lists name this phase's nodes before they start: each node's
        // own (wire v5), naming the other through its relay.
        for (me, other, via) in [(&node_a, &node_b, via_b), (&node_b, &node_a, via_a)] {
            let mut peers = heapless::Vec::new();
            peers
                .push(Peer {
                    node: wire::name(other).unwrap(),
                    addr: wire::bounded("addr", &via.to_string()).unwrap(),
                    group: false,
                })
                .unwrap();
            let list = PeerList {
                node: wire::name(me).unwrap(),
                generation,
                peers,
            };
            broker.publish(
                &topics::peers(me),
                &encode(&Message::PeerList(Box::new(list)), Some(&cp_key())).unwrap(),
                true,
            );
        }
        let mut agents = Vec::new();
        for (node, ns, listen) in [
            (&node_a, &net.names[0], a_addr),
            (&node_b, &net.names[1], b_addr),
        ] {
            let mut agent = Agent::new(
                node,
                &dir,
                &broker.url(),
                "",
                &format!(
                    "listen = \"{listen}\"\nperiod_ms = 200\nwindow = 20\npeers_per_period = 4\nclock = \"{clock}\""
                ),
            );
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns.as_str(), agent_bin()])
                .args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
            agent.start_with(cmd);
            agent.wait_log("connected to broker", Duration::from_secs(30));
            agent.wait_log(&format!("clock {clock}"), Duration::from_secs(5));
            agents.push(agent);
        }
        let keys: Vec<_> = agents.iter().map(|a| a.public_key()).collect();
        for a in &agents {
            a.wait_log(
                &format!("accepted peer list generation {generation} (1 peers to probe)"),
                Duration::from_secs(30),
            );
        }
        relay_a.reset();
        relay_b.reset();
        // 20 probes fill the window (one peer, one probe each 200 ms), the EWMA settles.
        std::thread::sleep(Duration::from_secs(8));
        // What the relays really held per direction (nominal plus their wake-up lateness).
        let a_to_b = (relay_b.mean_held_ms(0) + relay_a.mean_held_ms(1)) / 2.0;
        let b_to_a = (relay_b.mean_held_ms(1) + relay_a.mean_held_ms(0)) / 2.0;
        let half_rtt = (a_to_b + b_to_a) / 2.0;
        let mut latencies = Vec::new();
        for (i, (me, other, one_way, success)) in [
            (&node_a, &node_b, a_to_b, expected_success),
            (&node_b, &node_a, b_to_a, 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            let expected_ms = if clock == "synchronized" {
                one_way
            } else {
                half_rtt
            };
            let s = sample(&watcher, me, other, &keys[i]);
            let lat = f64::from(s.latency_ms);
            println!(
                "clock {clock}: {me} -> {other}: latency {lat:.3} ms (expected {expected_ms:.3}: \
                 held {a_to_b:.3} A->B, {b_to_a:.3} B->A; error {:+.2} %), jitter {:.3} ms, \
                 success {:.3} (expected {success:.3}) over {} probes",
                (lat - expected_ms) / expected_ms * 100.0,
                s.jitter_ms,
                s.success,
                s.samples
            );
            // 10 %, plus what the relay cannot see: its own and the agents' wake-ups after a
            // datagram arrives (tenths of a millisecond idle, milliseconds on a loaded machine).
            assert!(
                (lat - expected_ms).abs() <= 0.10 * expected_ms + SLACK_MS,
                "clock {clock}: {me} latency {lat} ms not within 10 % + {SLACK_MS} ms of {expected_ms} ms"
            );
            latencies.push(lat);
            assert!(
                (f64::from(s.success) - success).abs() <= 0.06,
                "clock {clock}: {me} success {} not within 6 points of {success}",
                s.success
            );
            assert_eq!(s.samples, 20);
            // The delay is constant up to the relay's own wake-up noise (a few ms on a
            // busy machine, undamped in one-way samples): the jitter stays small against it.
            assert!(
                f64::from(s.jitter_ms) < 0.5 * expected_ms,
                "jitter {} ms on a constant delay",
                s.jitter_ms
            );
        }
        if clock == "synchronized" {
            // The two directions are told apart: B -> A is seen 40 ms longer than A -> B.
            let d = latencies[1] - latencies[0];
            assert!(
                d > 0.75 * (b_to_a - a_to_b),
                "directions not told apart: {latencies:?}"
            );
        }
        // The pongs carried each other's coordinate: both report one, and the distance of
        // the two comes to the half round trip (one-way, symmetric: whatever the clock mode).
        // Two nodes that both start uncertain settle in 40 to 150 samples (8 to 30 s here).
        let settled = Instant::now() + Duration::from_secs(40);
        let (ca, cb, d) = loop {
            let (ca, cb) = (
                coordinate(&watcher, &node_a, &keys[0]).to_coord().unwrap(),
                coordinate(&watcher, &node_b, &keys[1]).to_coord().unwrap(),
            );
            let d = ca.distance_ms(&cb);
            if (d - half_rtt).abs() <= 0.15 * half_rtt || Instant::now() > settled {
                break (ca, cb, d);
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        println!(
            "clock {clock}: coordinates {ca:?} {cb:?}: {d:.3} ms apart (half rtt {half_rtt:.3})"
        );
        assert!(
            (d - half_rtt).abs() <= 0.15 * half_rtt,
            "coordinates {d} ms apart, not within 15 % of {half_rtt} ms"
        );
        for a in &mut agents {
            assert!(a.is_running());
            a.kill();
        }
    }
}
