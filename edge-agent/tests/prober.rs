//! The prober measured against known delay and loss.
//!
//! Two real agents run in two network namespaces (veth pairs to the root namespace).
//! Each probes the other through a UDP relay in the root namespace (threads of this
//! test on real sockets) that holds every datagram for a fixed delay in each
//! direction and drops every fifth probe on the way out: this kernel has no netem.
//! The agents must report a one-way latency within 10 % of the delay and a success
//! rate within a few points of 80 %.
//!
//! Needs root (ip netns), iproute2 and mosquitto; fails clearly when they are missing
//! unless ACOA_SKIP_PODMAN=1 (the switch of the tests that need system services).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{self, decode_verified, encode, Message, Peer, PeerList};
use common::*;

const DELAY: Duration = Duration::from_millis(50);
const DROP_EVERY: u32 = 5;

/// A UDP relay: client → `listen` → (delay, drop every nth) → `target`, and back.
struct Relay {
    /// Total milliseconds datagrams were actually held, and how many: on a loaded
    /// machine the relay's own wake-ups add to the nominal delay.
    held: Arc<std::sync::Mutex<(f64, u64)>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn spawn(listen: SocketAddr, upstream_bind: SocketAddr, target: SocketAddr) -> Relay {
        let front = UdpSocket::bind(listen).expect("relay front socket");
        let back = UdpSocket::bind(upstream_bind).expect("relay back socket");
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        // (due, to upstream?, bytes, client)
        let (tx, rx) = mpsc::channel::<(Instant, bool, Vec<u8>, Option<SocketAddr>)>();
        let mut threads = Vec::new();
        {
            let (front, stop, tx) = (front.try_clone().unwrap(), stop.clone(), tx.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                let mut n_up = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = front.recv_from(&mut buf) {
                        n_up += 1;
                        if n_up.is_multiple_of(DROP_EVERY) {
                            continue;
                        }
                        let _ =
                            tx.send((Instant::now() + DELAY, true, buf[..n].to_vec(), Some(from)));
                    }
                }
            }));
        }
        {
            let (back, stop, tx) = (back.try_clone().unwrap(), stop.clone(), tx);
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, _)) = back.recv_from(&mut buf) {
                        let _ = tx.send((Instant::now() + DELAY, false, buf[..n].to_vec(), None));
                    }
                }
            }));
        }
        let held = Arc::new(std::sync::Mutex::new((0.0, 0u64)));
        {
            let (stop, held) = (stop.clone(), held.clone());
            threads.push(std::thread::spawn(move || {
                let mut client: Option<SocketAddr> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Ok((due, up, bytes, from)) = rx.recv_timeout(Duration::from_millis(100))
                    else {
                        continue;
                    };
                    // Constant delay: the queue is in due order.
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    if up {
                        client = from;
                        let _ = back.send_to(&bytes, target);
                    } else if let Some(c) = client {
                        let _ = front.send_to(&bytes, c);
                    }
                    let ms = (Instant::now() - (due - DELAY)).as_secs_f64() * 1000.0;
                    let mut h = held.lock().unwrap();
                    h.0 += ms;
                    h.1 += 1;
                }
            }));
        }
        Relay {
            held,
            stop,
            threads,
        }
    }
}

impl Relay {
    fn mean_held_ms(&self) -> f64 {
        let h = self.held.lock().unwrap();
        h.0 / h.1.max(1) as f64
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

#[test]
fn prober_measures_injected_delay_and_loss() {
    if skip_or_require("prober_measures_injected_delay_and_loss", false) {
        return;
    }
    require_bin("ip", "apt-get install -y iproute2");
    let tag = std::process::id() % 1000;
    let _net = Net::up(tag);
    let dir = scratch_dir("prober");
    let broker = Broker::start_on("10.213.1.1", free_port(), &dir);
    let probe_port = 7878;
    let a_addr: SocketAddr = format!("10.213.1.2:{probe_port}").parse().unwrap();
    let b_addr: SocketAddr = format!("10.213.2.2:{probe_port}").parse().unwrap();
    // What A dials to reach B, and B to reach A: relay ports on the root namespace.
    let via_b: SocketAddr = "10.213.1.1:17001".parse().unwrap();
    let via_a: SocketAddr = "10.213.1.1:17002".parse().unwrap();
    let _relay_b = Relay::spawn(via_b, "10.213.2.1:0".parse().unwrap(), b_addr);
    let _relay_a = Relay::spawn(via_a, "10.213.1.1:0".parse().unwrap(), a_addr);

    let node_a = node_name("pa");
    let node_b = node_name("pb");
    let watcher = Watcher::new(&broker.host, broker.port, "acoa/v1/nodes/+/links");
    let mut agents = Vec::new();
    for (node, ns, listen) in [
        (&node_a, &_net.names[0], a_addr),
        (&node_b, &_net.names[1], b_addr),
    ] {
        let mut agent = Agent::new(
            node,
            &dir,
            &broker.url(),
            "",
            &format!("listen = \"{listen}\"\nperiod_ms = 200\nwindow = 20\npeers_per_period = 4"),
        );
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.as_str(), agent_bin()])
            .args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
        agent.start_with(cmd);
        agent.wait_log("connected to broker", Duration::from_secs(30));
        agents.push(agent);
    }
    let keys: Vec<_> = agents.iter().map(|a| a.public_key()).collect();
    let peers = PeerList {
        generation: 1,
        peers: vec![
            Peer {
                node: wire::name(&node_a).unwrap(),
                addr: wire::bounded("addr", &via_a.to_string()).unwrap(),
            },
            Peer {
                node: wire::name(&node_b).unwrap(),
                addr: wire::bounded("addr", &via_b.to_string()).unwrap(),
            },
        ],
    };
    broker.publish(
        topics::PEERS,
        &encode(&Message::PeerList(peers), Some(&cp_key())).unwrap(),
        true,
    );
    for a in &agents {
        a.wait_log(
            "accepted peer list generation 1 (1 peers to probe)",
            Duration::from_secs(30),
        );
    }
    // 20 probes fill the window (one peer, one probe each 200 ms), the EWMA settles:
    // give it 12 s, then read what each agent says about the other.
    std::thread::sleep(Duration::from_secs(12));
    let nominal_ms = DELAY.as_secs_f64() * 1000.0;
    let expected_success = 1.0 - 1.0 / f64::from(DROP_EVERY);
    for (i, (me, other, relay)) in [(&node_a, &node_b, &_relay_b), (&node_b, &node_a, &_relay_a)]
        .into_iter()
        .enumerate()
    {
        // What the relay really held (nominal plus its own wake-up lateness).
        let expected_ms = relay.mean_held_ms();
        let payload = watcher
            .last(&topics::links(me))
            .unwrap_or_else(|| panic!("no link metrics from {me}"));
        let Message::LinkMetrics(m) =
            decode_verified(&payload, &keys[i]).expect("signed by the node")
        else {
            panic!("not link metrics")
        };
        let s = m
            .links
            .iter()
            .find(|l| l.peer.as_str() == other.as_str())
            .expect("a sample of the peer");
        println!(
            "{me} -> {other}: latency {:.2} ms (injected {expected_ms:.2}, nominal {nominal_ms:.0}), jitter {:.2} ms, \
             success {:.3} (injected {expected_success:.3}) over {} probes",
            s.latency_ms, s.jitter_ms, s.success, s.samples
        );
        let lat = f64::from(s.latency_ms);
        assert!(
            (lat - expected_ms).abs() <= 0.10 * expected_ms,
            "latency {lat} ms not within 10 % of {expected_ms} ms"
        );
        assert!(
            (f64::from(s.success) - expected_success).abs() <= 0.05,
            "success {} not within 5 points of {expected_success}",
            s.success
        );
        assert_eq!(s.samples, 20);
        // The delay is constant up to the relay's own wake-up noise (a few ms on a busy
        // machine): the jitter must stay small against it.
        assert!(
            f64::from(s.jitter_ms) < 0.3 * expected_ms,
            "jitter {} ms on a constant delay",
            s.jitter_ms
        );
    }
    for a in &mut agents {
        assert!(a.is_running());
    }
}
