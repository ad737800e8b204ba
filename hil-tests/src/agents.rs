//! Real edge agents on the testbed: one per node namespace, a Mosquitto broker on the host
//! endpoint, the peer list signed and published as the control plane would (with a key of the
//! testbed's own, pinned in the agents' configuration), and their link metrics read over MQTT.
//!
//! Test harness code: errors are `anyhow` (it only runs experiments and reports).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::model::Cluster;
use acoa_shared::topics;
use acoa_shared::wire::{self, LinkSample, Message, Peer, PeerList};
use anyhow::{bail, Context, Result};
use ed25519_dalek::SigningKey;

use crate::emu::{Testbed, HOST};
use crate::fidelity::{self, PairRow};

pub const PROBE_PORT: u16 = 7878;
pub const MQTT_PORT: u16 = 1883;

static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every process this module started (agents, broker): for a signal handler.
pub fn kill_all() {
    for pid in CHILDREN.lock().map(|v| v.clone()).unwrap_or_default() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A child process killed on drop.
pub struct Proc {
    pub name: String,
    pub child: Child,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let f = std::fs::File::create(log)?;
        let child = cmd
            .stdout(Stdio::from(f.try_clone()?))
            .stderr(Stdio::from(f))
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        if let Ok(mut v) = CHILDREN.lock() {
            v.push(child.id());
        }
        Ok(Self {
            name: name.into(),
            child,
        })
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Mosquitto listening on `addr:port`, anonymous, with its files in `dir`.
pub fn mosquitto(dir: &Path, addr: Ipv4Addr, port: u16) -> Result<Proc> {
    std::fs::create_dir_all(dir)?;
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!("listener {port} {addr}\nallow_anonymous true\npersistence false\nmax_queued_messages 10000\n"),
    )?;
    let mut cmd = Command::new("mosquitto");
    cmd.arg("-c").arg(&conf);
    let mut p = Proc::spawn("mosquitto", cmd, &dir.join("mosquitto.log"))?;
    let t = Instant::now();
    while std::net::TcpStream::connect((addr, port)).is_err() {
        if !p.alive() || t.elapsed() > Duration::from_secs(10) {
            bail!(
                "mosquitto did not start on {addr}:{port}; see {}",
                dir.join("mosquitto.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(p)
}

/// How to run agents.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub bin: PathBuf,
    /// For aarch64 nodes: this binary, run with `qemu-aarch64-static -L /usr/aarch64-linux-gnu`
    pub aarch64_bin: Option<PathBuf>,
    pub peers_per_period: usize,
    pub period_ms: u64,
    pub window: usize,
    pub report_period_ms: u64,
    /// Run the agents with `chrt -f 20` (SCHED_FIFO), as the emulator and the reference prober
    /// run: on a loaded 2-core machine a normal thread's wake-up adds tenths of a millisecond.
    /// Agents under qemu (aarch64) stay normal processes.
    pub realtime: bool,
    /// `[probe] clock`: "synchronized" (one-way delays: every namespace shares the host's clock)
    /// or "free" (half the round trip).
    pub clock: String,
}

impl AgentOptions {
    pub fn new(bin: &Path) -> Self {
        Self {
            bin: bin.to_path_buf(),
            aarch64_bin: None,
            peers_per_period: 19,
            period_ms: 1000,
            window: 64,
            report_period_ms: 1000,
            realtime: false,
            clock: "synchronized".into(),
        }
    }
}

/// The agent configuration file of one node.
#[allow(clippy::too_many_arguments)]
pub fn agent_config(
    cluster: &Cluster,
    node: &str,
    addr: Ipv4Addr,
    broker_section: &str,
    state_dir: &Path,
    netns_path: &Path,
    o: &AgentOptions,
) -> Result<String> {
    let n = cluster
        .node(node)
        .with_context(|| format!("unknown node {node}"))?;
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::new();
    let _ = writeln!(s, "node = {:?}", n.name);
    let _ = writeln!(s, "datacenter = {:?}", n.datacenter);
    let _ = writeln!(s, "layer = {:?}", format!("{:?}", n.layer).to_lowercase());
    let _ = writeln!(s, "arch = {:?}", n.arch);
    let _ = writeln!(s, "hardware = [{}]", list(&n.hardware));
    let _ = writeln!(s, "software = [{}]", list(&n.software));
    let _ = writeln!(s, "state_dir = {:?}", state_dir.display().to_string());
    let _ = writeln!(s, "report_period_ms = {}", o.report_period_ms);
    let _ = writeln!(s, "runtime = \"podman\"");
    let _ = writeln!(s, "image_allowlist = [\"localhost/acoa/\"]");
    let _ = writeln!(s, "[capacity]");
    let _ = writeln!(s, "cpu_millis = {}", n.capacity.cpu_millis);
    let _ = writeln!(s, "memory_mb = {}", n.capacity.memory_mb);
    let _ = writeln!(s, "disk_mb = {}", n.capacity.disk_mb);
    s.push_str(broker_section.trim_end());
    s.push('\n');
    let _ = writeln!(s, "[probe]");
    let _ = writeln!(s, "listen = \"0.0.0.0:{PROBE_PORT}\"");
    let _ = writeln!(s, "advertise = \"{addr}:{PROBE_PORT}\"");
    let _ = writeln!(s, "peers_per_period = {}", o.peers_per_period);
    let _ = writeln!(s, "period_ms = {}", o.period_ms);
    let _ = writeln!(s, "window = {}", o.window);
    let _ = writeln!(s, "clock = {:?}", o.clock);
    let _ = writeln!(s, "[podman]");
    let _ = writeln!(s, "socket = \"unix:///run/podman/podman.sock\"");
    let _ = writeln!(s, "netns = {:?}", netns_path.display().to_string());
    Ok(s)
}

/// The latest link sample of every (node, peer), fed from MQTT.
pub type Samples = Arc<Mutex<HashMap<(String, String), LinkSample>>>;

/// Subscribes to every node's link metrics; returns the table it keeps up to date and the client.
pub fn watch_links(broker: Ipv4Addr) -> Result<(Samples, rumqttc::Client)> {
    let mut opts = rumqttc::MqttOptions::new(
        format!("hil-{}", std::process::id()),
        broker.to_string(),
        MQTT_PORT,
    );
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut conn) = rumqttc::Client::new(opts, 256);
    client.subscribe("acoa/v1/nodes/+/links", rumqttc::QoS::AtMostOnce)?;
    let samples: Samples = Arc::default();
    let s2 = samples.clone();
    std::thread::spawn(move || {
        for ev in conn.iter() {
            match ev {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                    if let Ok(Message::LinkMetrics(m)) = wire::decode_unverified(&p.payload) {
                        let mut t = s2.lock().expect("samples lock");
                        for l in &m.links {
                            t.insert((m.node.to_string(), l.peer.to_string()), l.clone());
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "mqtt");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    });
    Ok((samples, client))
}

/// Publishes each node's signed, retained peer list (wire v5: one per node): all the others
/// (the experiment measures every pair; at most `wire::MAX_PEERS_PER_NODE` of them).
pub fn publish_peers(
    client: &rumqttc::Client,
    key: &SigningKey,
    peers: &[(String, Ipv4Addr)],
    generation: u64,
) -> Result<()> {
    for (me, _) in peers {
        let mut list = PeerList {
            node: wire::name(me)?,
            generation,
            peers: Default::default(),
        };
        for (n, a) in peers.iter().filter(|(n, _)| n != me) {
            let p = Peer {
                node: wire::name(n)?,
                addr: wire::bounded("peer address", &format!("{a}:{PROBE_PORT}"))?,
                group: false,
            };
            if list.peers.push(p).is_err() {
                anyhow::bail!(
                    "{} peers: a peer list holds at most {}",
                    peers.len() - 1,
                    wire::MAX_PEERS_PER_NODE
                );
            }
        }
        let frame = wire::encode(&Message::PeerList(Box::new(list)), Some(key))?;
        client.publish(topics::peers(me), rumqttc::QoS::AtLeastOnce, true, frame)?;
    }
    Ok(())
}

/// Runs experiment 1 with real agents on `names`; returns one row per directed pair.
pub fn fidelity(
    tb: &Testbed,
    cluster: &Cluster,
    names: &[String],
    o: &AgentOptions,
    run_for: Duration,
    workdir: &Path,
) -> Result<Vec<PairRow>> {
    let broker = tb
        .addr(HOST)
        .context("the testbed needs its host endpoint")?;
    std::fs::create_dir_all(workdir)?;
    let _mosq = mosquitto(&workdir.join("broker"), broker, MQTT_PORT)?;
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let cp_hex = wire::keys::public_hex(&key.verifying_key());
    let (samples, client) = watch_links(broker)?;
    let peers: Vec<(String, Ipv4Addr)> = names
        .iter()
        .map(|n| Ok((n.clone(), tb.addr(n)?)))
        .collect::<Result<_>>()?;
    publish_peers(&client, &key, &peers, 1)?;
    let mut agents = Vec::new();
    for n in names {
        let dir = workdir.join(n);
        std::fs::create_dir_all(dir.join("state"))?;
        let cfg = agent_config(
            cluster,
            n,
            tb.addr(n)?,
            &format!(
                "[broker]\nurl = \"mqtt://{broker}:{MQTT_PORT}\"\ncontrol_plane_key = {cp_hex:?}\n"
            ),
            &dir.join("state"),
            &tb.netns_path(n)?,
            o,
        )?;
        let cfg_path = dir.join("agent.toml");
        std::fs::write(&cfg_path, cfg)?;
        let cmd = agent_command(tb, cluster, n, o, &cfg_path);
        agents.push(Proc::spawn(
            &format!("agent {n}"),
            cmd,
            &dir.join("agent.log"),
        )?);
    }
    collect(cluster, names, o, run_for, &samples, &mut agents)
}

/// The public key of the agent whose state is in `state` (`edge-agent pubkey`), to enroll it.
pub fn pubkey(agent_bin: &Path, state: &Path) -> Result<String> {
    let out = Command::new(agent_bin)
        .arg("pubkey")
        .arg("--state-dir")
        .arg(state)
        .output()?;
    if !out.status.success() {
        bail!(
            "edge-agent pubkey: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `ip netns exec <ns of node> [chrt -f 20] [qemu-aarch64-static -L ...] edge-agent --config FILE`.
pub fn agent_command(
    tb: &Testbed,
    cluster: &Cluster,
    n: &str,
    o: &AgentOptions,
    cfg_path: &Path,
) -> Command {
    {
        let arch = cluster.node(n).map(|x| x.arch.as_str()).unwrap_or("");
        let emulated = o.aarch64_bin.is_some() && arch == "aarch64";
        // never SCHED_FIFO under qemu: its translator would starve the machine (broker included)
        let mut cmd = if o.realtime && !emulated {
            let mut c = tb.command(n, "chrt");
            c.args(["-f", "20"]);
            c
        } else {
            tb.command(n, "env")
        };
        match (&o.aarch64_bin, arch) {
            (Some(b), "aarch64") => {
                // The cross prefix's own libraries: with libc6:arm64 also installed, ld.so
                // would mix two glibc builds, and the agent hangs at its first thread.
                cmd.arg("qemu-aarch64-static")
                    .arg("-L")
                    .arg("/usr/aarch64-linux-gnu")
                    .arg("-E")
                    .arg("LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib")
                    .arg(b);
            }
            _ => {
                cmd.arg(&o.bin);
            }
        }
        cmd.arg("--config").arg(cfg_path);
        cmd
    }
}

fn collect(
    cluster: &Cluster,
    names: &[String],
    o: &AgentOptions,
    run_for: Duration,
    samples: &Samples,
    agents: &mut [Proc],
) -> Result<Vec<PairRow>> {
    let want = names.len() * (names.len() - 1);
    let t0 = Instant::now();
    let mut next_print = Duration::from_secs(10);
    while t0.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(500));
        if t0.elapsed() >= next_print {
            next_print += Duration::from_secs(10);
            let t = samples.lock().expect("samples lock");
            let full = t
                .values()
                .filter(|s| s.samples as usize >= o.window)
                .count();
            let dead: Vec<String> = agents
                .iter_mut()
                .filter_map(|a| (!a.alive()).then(|| a.name.clone()))
                .collect();
            tracing::info!(
                "{:>4} s: {} of {want} pairs reported, {} with a full window; agents exited: {:?}",
                t0.elapsed().as_secs(),
                t.len(),
                full,
                dead
            );
        }
    }
    for a in agents.iter_mut() {
        let _ = a.child.kill();
    }
    let map = fidelity::link_map(&cluster.links);
    let t = samples.lock().expect("samples lock");
    let mut rows = Vec::new();
    for a in names {
        for b in names {
            if a == b {
                continue;
            }
            let mut row = if o.clock == "synchronized" {
                fidelity::expected_one_way(&map, a, b)
            } else {
                fidelity::expected(&map, a, b)
            };
            if let Some(s) = t.get(&(a.clone(), b.clone())) {
                row.measured_latency_ms = f64::from(s.latency_ms);
                row.measured_success = f64::from(s.success);
                row.samples = s.samples as usize;
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// On SIGINT/SIGTERM: kill the processes the run started ([`kill_all`]), run `cleanup`, delete
/// the run's namespaces (names starting with `prefix`) and exit with 130 (the TUN devices go
/// with the process).
pub fn guard_signals(prefix: &str, cleanup: impl Fn() + Send + 'static) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, term.clone())?;
    let prefix = prefix.to_string();
    std::thread::spawn(move || loop {
        if term.load(Ordering::Relaxed) {
            eprintln!("hil: interrupted, tearing down");
            kill_all();
            cleanup();
            let _ = crate::netns::del_prefixed(&prefix);
            std::process::exit(130);
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    Ok(())
}
