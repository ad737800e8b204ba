//! Paper 003 reproduced in the testbed (issue 7): the m0–m12 + db1–db4 workflow of
//! [`acoa_scheduler::netaware::sim::paper_workflow`] run as real microservices (`na-micro`), on
//! one control node `cp` (where the users' requests enter) and workers `w1`..`w5`, with a uniform
//! inter-node latency on the emulated network; a load generator on `cp` with N virtual users,
//! each sending one request per second to m0; the p95 of the end-to-end response time under the
//! network-aware placement against the network-unaware baseline. Then the latencies change while
//! it runs, and the descheduler moves components.
//!
//! Namespaces `na-*`, subnet 10.78.0.0/16 (the railway testbed uses `hil-` and 10.77.0.0/16).
//!
//! How components find each other: like `acoa-workload`, each instance asks the testbed's
//! discovery service (UDP on the host endpoint, port [`DISCOVERY_PORT`]) every second for its
//! port, its service time and the addresses of its downstream calls; the discovery service
//! answers from the placement the control plane reports (`cloud-broker status`), so a move is
//! followed within a second.
//!
//! Two ways of running the components:
//! - [`Launch::ControlPlane`]: the real control plane (`cloud-broker serve`) and real agents in
//!   the worker namespaces, the components as Podman containers (image `localhost/acoa/na-micro:1`
//!   from `images.sh`). A placement computed here is imposed with `requires.datacenter` (every
//!   worker is its own datacenter); a `scheduler:` name leaves it to the control plane.
//! - [`Launch::Processes`]: `na-micro` as plain processes in the node namespaces, placed as
//!   computed here (the CI-sized test: no Podman, no control plane).
//!
//! Test harness code: errors are `anyhow`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use acoa_scheduler::netaware::desched::{self, Descheduler};
use acoa_scheduler::netaware::sim::{self, Workflow};
use acoa_scheduler::netaware::{self, NetOutcome, NodeState, Snapshot, Weights};
use anyhow::{bail, Context, Result};

use crate::agents::{self, AgentOptions, Proc};
use crate::dynamic::{self, Cloud};
use crate::emu::{Testbed, HOST};
use crate::LinkSpec;

/// The discovery service's port on the host endpoint (`images.sh` bakes `10.78.255.254:9098`).
pub const DISCOVERY_PORT: u16 = 9098;
/// The image the containers run.
pub const IMAGE: &str = "localhost/acoa/na-micro:1";
/// The control node: ingress, no components.
pub const CONTROL_NODE: &str = "cp";
/// Bytes of an answer: a microservice's, a database's (a request is 200 bytes).
pub const RESP_BYTES: (usize, usize) = (1000, 1400);
/// How long the load generator waits for an answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How a placement is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum Sched {
    /// Kubernetes' default scoring of the paper's time (LeastAllocated + BalancedAllocation),
    /// network-unaware: [`acoa_scheduler::netaware::baseline`], imposed.
    Baseline,
    /// The network- and resource-aware placement, [`acoa_scheduler::netaware::place`], imposed.
    NetAware,
    /// Left to the control plane: `scheduler: <name>` in the application, no pins.
    ControlPlane(String),
}

impl Sched {
    pub fn label(&self) -> String {
        match self {
            Sched::Baseline => "baseline (k8s default)".into(),
            Sched::NetAware => "network-aware".into(),
            Sched::ControlPlane(s) => format!("control plane: {s}"),
        }
    }
    fn short(&self) -> String {
        match self {
            Sched::Baseline => "base".into(),
            Sched::NetAware => "net".into(),
            Sched::ControlPlane(s) => s.chars().filter(|c| c.is_ascii_alphanumeric()).collect(),
        }
    }
}

/// The experiment's nodes and workflow.
#[derive(Clone, Debug)]
pub struct Setup {
    pub wf: Workflow,
    /// Node names, `cp` first (index 0 = the ingress, as in the simulation's `c0`).
    pub nodes: Vec<String>,
    /// As the schedulers see them (the simulation's capacities and background use).
    pub states: Vec<NodeState>,
    /// Applications left to the control plane declare, as their requests, the components'
    /// use at this many users (the simulation's model), so that its scheduler sees the same
    /// resource needs as the ones computed here.
    pub declare_users: Option<f64>,
}

impl Setup {
    /// `cp` and the first `workers` of `w1`..`w5`, with the simulation's capacities.
    pub fn paper(workers: usize) -> Result<Self> {
        if !(1..=5).contains(&workers) {
            bail!("workers must be within 1..=5, got {workers}");
        }
        let mut states = sim::paper_nodes();
        states.truncate(workers + 1);
        states[0].name = CONTROL_NODE.into();
        Ok(Self {
            wf: sim::paper_workflow(),
            nodes: states.iter().map(|n| n.name.clone()).collect(),
            states,
            declare_users: None,
        })
    }

    pub fn workers(&self) -> &[String] {
        &self.nodes[1..]
    }

    fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n == name)
    }

    /// What the schedulers see with `users` users and this latency matrix.
    pub fn snapshot(&self, latency: Vec<Vec<f64>>, users: f64) -> Snapshot {
        sim::snapshot(&self.wf, &self.states, latency, users)
    }

    /// The placement (component -> node) chosen by `sched` (not for [`Sched::ControlPlane`]).
    pub fn place(&self, sched: &Sched, s: &Snapshot) -> Result<BTreeMap<String, String>> {
        let out = match sched {
            Sched::Baseline => netaware::baseline::place(s)?,
            Sched::NetAware => netaware::place(s, &Weights::default())?,
            Sched::ControlPlane(_) => bail!("the control plane places this one"),
        };
        match out {
            NetOutcome::Placed(a) => Ok(self.named(&a)),
            other => bail!("no placement: {other:?}"),
        }
    }

    fn named(&self, a: &[usize]) -> BTreeMap<String, String> {
        a.iter()
            .enumerate()
            .map(|(c, &n)| (self.wf.names[c].clone(), self.nodes[n].clone()))
            .collect()
    }

    /// The application definition (YAML): every call of the workflow a channel; components
    /// pinned with `requires.datacenter` when `pins` is given.
    pub fn app_yaml(
        &self,
        app: &str,
        scheduler: &str,
        pins: Option<&BTreeMap<String, String>>,
    ) -> String {
        let mut s = format!("application: {app}\nscheduler: {scheduler}\ncomponents:\n");
        let visits = self.wf.visits();
        for (i, c) in self.wf.names.iter().enumerate() {
            let _ = write!(s, "- name: {c}\n  image: {IMAGE}\n");
            if let Some(node) = pins.and_then(|p| p.get(c)) {
                let _ = writeln!(s, "  requires: {{datacenter: {node}}}");
            }
            if let (None, Some(u)) = (pins, self.declare_users) {
                let _ = writeln!(
                    s,
                    "  resources: {{cpu_millis: {}, memory_mb: {}}}",
                    (u * visits[i] * self.wf.cpu_ms[i]).round() as u64,
                    self.wf.memory_mb[i].round() as u64
                );
            }
        }
        s.push_str("channels:\n");
        for (i, stages) in self.wf.stages.iter().enumerate() {
            for k in stages.iter().flatten() {
                let (a, b) = (&self.wf.names[i], &self.wf.names[*k]);
                let _ = writeln!(s, "- {{name: {a}-{b}, from: {a}, to: {b}}}");
            }
        }
        if pins.is_none() {
            // left to the control plane: users' requests enter at cp and go to the entry
            let _ = writeln!(
                s,
                "ingress: {{node: {CONTROL_NODE}, component: {}}}",
                self.wf.names[self.wf.entry]
            );
        }
        s
    }

    /// The cluster the agents describe: the workers, each its own datacenter (capacities as
    /// the schedulers here see them, or `capacity` = (millicores, MB) for every worker).
    pub fn cluster_yaml(&self) -> String {
        self.cluster_yaml_with(None)
    }

    /// [`Self::cluster_yaml_with`] plus the control node `cp` with no capacity (its agent
    /// reports and probes, so the control plane knows the ingress's links; nothing runs there).
    pub fn cluster_yaml_cp(&self, capacity: Option<(u64, u64)>) -> String {
        let s = self.cluster_yaml_with(capacity);
        let (dcs, nodes) = s.split_once("nodes:\n").expect("a nodes section");
        format!(
            "{dcs}- {{name: {CONTROL_NODE}, layer: edge}}\nnodes:\n{nodes}- {{name: {CONTROL_NODE}, datacenter: {CONTROL_NODE}, layer: edge, arch: {}, capacity: {{cpu_millis: 0, memory_mb: 0, disk_mb: 16000}}}}\n",
            std::env::consts::ARCH
        )
    }

    pub fn cluster_yaml_with(&self, capacity: Option<(u64, u64)>) -> String {
        let mut s = String::from("cluster: na\ndatacenters:\n");
        for n in self.workers() {
            let _ = writeln!(s, "- {{name: {n}, layer: edge}}");
        }
        s.push_str("nodes:\n");
        for n in &self.states[1..] {
            let _ = writeln!(
                s,
                "- {{name: {}, datacenter: {}, layer: edge, arch: {}, capacity: {{cpu_millis: {}, memory_mb: {}, disk_mb: 16000}}}}",
                n.name,
                n.name,
                std::env::consts::ARCH,
                capacity.map(|c| c.0).unwrap_or(n.cpu_capacity as u64),
                capacity.map(|c| c.1).unwrap_or(n.memory_capacity as u64)
            );
        }
        s
    }

    /// The discovery answers of every component of `app` placed as `placement`; ports from
    /// `base_port` + the component's index.
    pub fn answers(
        &self,
        placement: &BTreeMap<String, String>,
        addr_of: &dyn Fn(&str) -> Option<Ipv4Addr>,
        base_port: u16,
    ) -> HashMap<String, String> {
        let wf = &self.wf;
        let addr = |c: usize| -> Option<String> {
            let node = placement.get(&wf.names[c])?;
            Some(format!("{}:{}", addr_of(node)?, base_port + c as u16))
        };
        let mut m = HashMap::new();
        for (c, name) in wf.names.iter().enumerate() {
            let stages: Vec<String> = wf.stages[c]
                .iter()
                .map(|st| {
                    st.iter()
                        .filter_map(|&k| Some(format!("{}@{}", wf.names[k], addr(k)?)))
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect();
            let resp = if wf.stages[c].is_empty() {
                RESP_BYTES.1
            } else {
                RESP_BYTES.0
            };
            m.insert(
                name.clone(),
                format!(
                    "K1 port={} service_ms={} resp={} stages={}",
                    base_port + c as u16,
                    wf.cpu_ms[c],
                    resp,
                    stages.join(";")
                ),
            );
        }
        m
    }

    /// Where m0 listens.
    pub fn entry_addr(
        &self,
        placement: &BTreeMap<String, String>,
        addr_of: &dyn Fn(&str) -> Option<Ipv4Addr>,
        base_port: u16,
    ) -> Option<SocketAddr> {
        let e = self.wf.entry;
        let node = placement.get(&self.wf.names[e])?;
        Some(SocketAddr::V4(SocketAddrV4::new(
            addr_of(node)?,
            base_port + e as u16,
        )))
    }
}

/// The discovery service: answers `C1 app component` with what the component must do.
pub struct Discovery {
    answers: Arc<RwLock<HashMap<(String, String), String>>>,
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicU64>,
}

impl Discovery {
    pub fn start(sock: UdpSocket) -> Result<Self> {
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let answers: Arc<RwLock<HashMap<(String, String), String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicU64::new(0));
        let (a, s, n) = (answers.clone(), stop.clone(), asked.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !s.load(Ordering::Relaxed) {
                let Ok((len, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&buf[..len]);
                let mut w = text.split_whitespace();
                let (Some("C1"), Some(app), Some(comp)) = (w.next(), w.next(), w.next()) else {
                    continue;
                };
                let answer = a
                    .read()
                    .ok()
                    .and_then(|m| m.get(&(app.to_string(), comp.to_string())).cloned());
                if let Some(ans) = answer {
                    n.fetch_add(1, Ordering::Relaxed);
                    let _ = sock.send_to(ans.as_bytes(), from);
                }
            }
        });
        Ok(Self {
            answers,
            stop,
            asked,
        })
    }

    pub fn set_app(&self, app: &str, answers: HashMap<String, String>) {
        if let Ok(mut m) = self.answers.write() {
            m.retain(|(a, _), _| a != app);
            for (c, ans) in answers {
                m.insert((app.to_string(), c), ans);
            }
        }
    }

    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One request of the load generator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the generator started, when it was sent.
    pub sent_s: f64,
    /// End-to-end response time; `None` when no answer came within [`REQUEST_TIMEOUT`].
    pub rt_ms: Option<f64>,
    /// The answer said every downstream call succeeded.
    pub ok: bool,
}

/// The load generator: `users` virtual users, each one request per second to the target, from
/// a socket in the control node's namespace.
pub struct Load {
    pub target: Arc<RwLock<Option<SocketAddr>>>,
    users: Arc<AtomicUsize>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    t0: Instant,
}

impl Load {
    pub fn start(sock: UdpSocket) -> Result<Self> {
        let t0 = Instant::now();
        let target: Arc<RwLock<Option<SocketAddr>>> = Arc::default();
        let users = Arc::new(AtomicUsize::new(0));
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let pending: Arc<Mutex<HashMap<u64, (Instant, f64)>>> = Arc::default();
        let rx = sock.try_clone()?;
        rx.set_read_timeout(Some(Duration::from_millis(200)))?;
        {
            let (pending, samples, stop) = (pending.clone(), samples.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, _)) = rx.recv_from(&mut buf) else {
                        continue;
                    };
                    let now = Instant::now();
                    let head = String::from_utf8_lossy(&buf[..n.min(64)]).into_owned();
                    let mut w = head.split(' ');
                    let (Some("A1"), Some(id), Some(ok)) = (w.next(), w.next(), w.next()) else {
                        continue;
                    };
                    let Ok(id) = id.parse::<u64>() else { continue };
                    let sent = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some((at, sent_s)) = sent {
                        if let Ok(mut s) = samples.lock() {
                            s.push(Sample {
                                sent_s,
                                rt_ms: Some(now.duration_since(at).as_secs_f64() * 1e3),
                                ok: ok == "1",
                            });
                        }
                    }
                }
            });
        }
        {
            let (target, users, samples, stop) =
                (target.clone(), users.clone(), samples.clone(), stop.clone());
            std::thread::spawn(move || {
                // user i of n sends at k + i/n seconds
                let mut id: u64 = 1;
                let mut next_tick = Instant::now();
                let mut slot: u64 = 0;
                let mut last_expire = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let n = users.load(Ordering::Relaxed);
                    if n == 0 {
                        std::thread::sleep(Duration::from_millis(20));
                        next_tick = Instant::now();
                        continue;
                    }
                    let gap = Duration::from_secs_f64(1.0 / n as f64);
                    let now = Instant::now();
                    if now < next_tick {
                        std::thread::sleep((next_tick - now).min(Duration::from_millis(50)));
                        continue;
                    }
                    next_tick += gap;
                    if next_tick + Duration::from_secs(1) < now {
                        next_tick = now; // do not burst after a stall
                    }
                    slot += 1;
                    let to = target.read().ok().and_then(|t| *t);
                    if let Some(to) = to {
                        let mut b = format!("Q1 {id} - ").into_bytes();
                        b.resize(200, b'x');
                        let sent_s = t0.elapsed().as_secs_f64();
                        if let Ok(mut p) = pending.lock() {
                            p.insert(id, (Instant::now(), sent_s));
                        }
                        let _ = sock.send_to(&b, to);
                        id += 1;
                    }
                    if last_expire.elapsed() > Duration::from_millis(500) {
                        last_expire = Instant::now();
                        let mut lost = Vec::new();
                        if let Ok(mut p) = pending.lock() {
                            p.retain(|_, (at, sent_s)| {
                                let keep = at.elapsed() < REQUEST_TIMEOUT;
                                if !keep {
                                    lost.push(*sent_s);
                                }
                                keep
                            });
                        }
                        if let Ok(mut s) = samples.lock() {
                            s.extend(lost.into_iter().map(|sent_s| Sample {
                                sent_s,
                                rt_ms: None,
                                ok: false,
                            }));
                        }
                    }
                }
                let _ = slot;
            });
        }
        Ok(Self {
            target,
            users,
            samples,
            stop,
            t0,
        })
    }

    pub fn set_users(&self, n: usize) {
        self.users.store(n, Ordering::Relaxed);
    }

    pub fn set_target(&self, to: Option<SocketAddr>) {
        if let Ok(mut t) = self.target.write() {
            *t = to;
        }
    }

    /// Seconds since the generator started.
    pub fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The samples of the requests sent within `[from_s, to_s)`.
    pub fn samples(&self, from_s: f64, to_s: f64) -> Vec<Sample> {
        self.samples
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|x| x.sent_s >= from_s && x.sent_s < to_s)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Percentiles of the successful requests (answered, every downstream call answered; nearest
/// rank); the others (lost, or answered after a downstream call timed out) counted as failed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub requests: usize,
    pub answered: usize,
    pub failed: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

pub fn stats(samples: &[Sample]) -> Stats {
    let answered = samples.iter().filter(|s| s.rt_ms.is_some()).count();
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.ok)
        .filter_map(|s| s.rt_ms)
        .collect();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[k - 1]
    };
    Stats {
        requests: samples.len(),
        answered,
        failed: samples
            .iter()
            .filter(|s| s.rt_ms.is_none() || !s.ok)
            .count(),
        p50: q(0.50),
        p95: q(0.95),
        p99: q(0.99),
    }
}

/// A uniform latency `l` (one way, ms) between every two distinct nodes of the setup.
pub fn set_uniform(tb: &Testbed, nodes: &[String], l: f64) -> Result<()> {
    for a in nodes {
        for b in nodes {
            if a != b {
                tb.set_link(a, b, LinkSpec::new(l, 0.0, 0.0))?;
            }
        }
    }
    Ok(())
}

/// The current one-way latencies of the emulator between the setup's nodes (what the agents'
/// probers measure, within the emulator's precision).
pub fn latency_matrix(tb: &Testbed, nodes: &[String]) -> Result<Vec<Vec<f64>>> {
    let mut m = vec![vec![0.0; nodes.len()]; nodes.len()];
    for (i, a) in nodes.iter().enumerate() {
        for (j, b) in nodes.iter().enumerate() {
            if i != j {
                m[i][j] = tb.link(a, b)?.latency_ms;
            }
        }
    }
    Ok(m)
}

/// The components' runners.
pub enum Launch {
    /// Real control plane, agents, Podman.
    ControlPlane(Box<CpRun>),
    /// `na-micro` processes in the node namespaces.
    Processes {
        bin: PathBuf,
        procs: BTreeMap<(String, String), Proc>,
        logdir: PathBuf,
    },
}

/// The control plane and agents of a run.
pub struct CpRun {
    pub cloud: Cloud,
    pub cp: Proc,
    pub agents: Vec<Proc>,
    pub workdir: PathBuf,
}

fn pubkey(agent_bin: &Path, state: &Path) -> Result<String> {
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

impl CpRun {
    /// Enrolls and starts an agent on every worker and the control plane on the host endpoint.
    pub fn start(
        tb: &Testbed,
        setup: &Setup,
        cloud_bin: &Path,
        agent: &AgentOptions,
        workdir: &Path,
        extra: &[&str],
        capacity: Option<(u64, u64)>,
    ) -> Result<Self> {
        let host = tb.addr(HOST)?;
        std::fs::create_dir_all(workdir)?;
        let cl = acoa_shared::model::parse_cluster(&setup.cluster_yaml_cp(capacity))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let cloud = Cloud {
            bin: cloud_bin.to_path_buf(),
            data_dir: workdir.join("cloud"),
            addr: host,
        };
        let mut cfgs = Vec::new();
        // an agent on every worker and on cp (the ingress: no capacity, measured links)
        for n in setup.workers().iter().chain(&setup.nodes[..1]) {
            let dir = workdir.join(n);
            std::fs::create_dir_all(dir.join("state"))?;
            let key = pubkey(&agent.bin, &dir.join("state"))?;
            let broker = cloud.enroll(n, &key)?;
            let cfg = agents::agent_config(
                &cl,
                n,
                tb.addr(n)?,
                &broker,
                &dir.join("state"),
                &tb.netns_path(n)?,
                agent,
            )?;
            let path = dir.join("agent.toml");
            std::fs::write(&path, cfg)?;
            cfgs.push((n.clone(), path));
        }
        let mut args = vec!["--node-timeout-ms", "3000"];
        args.extend_from_slice(extra);
        let cp = cloud.serve(&workdir.join("cloud.log"), &args)?;
        let mut agents_v = Vec::new();
        for (n, path) in &cfgs {
            let cmd = agents::agent_command(tb, &cl, n, agent, path);
            agents_v.push(Proc::spawn(
                &format!("agent {n}"),
                cmd,
                &workdir.join(n).join("agent.log"),
            )?);
        }
        Ok(Self {
            cloud,
            cp,
            agents: agents_v,
            workdir: workdir.to_path_buf(),
        })
    }

    fn delete(&self, app: &str) -> Result<()> {
        let out = Command::new(&self.cloud.bin)
            .arg("--data-dir")
            .arg(&self.cloud.data_dir)
            .args(["delete", app, "--broker-url", &self.cloud.url()])
            .output()?;
        if !out.status.success() {
            bail!(
                "cloud-broker delete {app}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// The options of a whole run.
#[derive(Clone, Debug)]
pub struct Options {
    pub latencies: Vec<f64>,
    pub users: Vec<usize>,
    pub step: Duration,
    pub scheds: Vec<Sched>,
    /// Users the schedulers assume (the measured use at this load).
    pub plan_users: f64,
    pub timeout: Duration,
}

/// The result of one (latency, scheduler) setting.
#[derive(Clone, Debug)]
pub struct SettingResult {
    pub latency_ms: f64,
    pub sched: Sched,
    pub placement: BTreeMap<String, String>,
    /// (users, stats) per step.
    pub steps: Vec<(usize, Stats)>,
    /// Cross-node calls per request under the placement (from the workflow).
    pub remote_calls: f64,
}

/// Calls per request that cross nodes (ingress to m0 included).
pub fn remote_calls(setup: &Setup, placement: &BTreeMap<String, String>) -> f64 {
    let calls = setup.wf.calls();
    let node = |c: usize| placement.get(&setup.wf.names[c]);
    let mut n = if node(setup.wf.entry).map(|s| s.as_str()) != Some(CONTROL_NODE) {
        1.0
    } else {
        0.0
    };
    for (i, row) in calls.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            if k > 0.0 && node(i) != node(j) {
                n += k;
            }
        }
    }
    n
}

/// Everything a run needs running: the emulated network, discovery, load, the launcher.
pub struct Bench<'a> {
    pub tb: &'a Testbed,
    pub setup: Setup,
    pub discovery: Discovery,
    pub load: Load,
    pub launch: Launch,
    pub log: Vec<String>,
    runs: u16,
}

impl<'a> Bench<'a> {
    pub fn new(tb: &'a Testbed, setup: Setup, launch: Launch) -> Result<Self> {
        let host = tb.addr(HOST)?;
        let discovery =
            Discovery::start(UdpSocket::bind(SocketAddrV4::new(host, DISCOVERY_PORT))?)?;
        let load = Load::start(tb.udp_socket(CONTROL_NODE, 0)?)?;
        Ok(Self {
            tb,
            setup,
            discovery,
            load,
            launch,
            log: Vec::new(),
            runs: 0,
        })
    }

    fn note(&mut self, s: String) {
        tracing::info!("{s}");
        self.log.push(format!("{:>7.1} s  {s}", self.load.now_s()));
    }

    fn addr_of(&self) -> impl Fn(&str) -> Option<Ipv4Addr> + '_ {
        move |n: &str| self.tb.addr(n).ok()
    }

    /// Points discovery and the load generator at `placement`.
    fn follow(&self, app: &str, placement: &BTreeMap<String, String>, base: u16) {
        let a = self.addr_of();
        self.discovery
            .set_app(app, self.setup.answers(placement, &a, base));
        self.load
            .set_target(self.setup.entry_addr(placement, &a, base));
    }

    /// Deploys `app` (placed by `sched` from `snapshot`); returns the placement once every
    /// component runs and answers.
    pub fn deploy(
        &mut self,
        app: &str,
        sched: &Sched,
        pins: Option<&BTreeMap<String, String>>,
        base: u16,
        timeout: Duration,
    ) -> Result<BTreeMap<String, String>> {
        let scheduler = match sched {
            Sched::ControlPlane(s) => s.as_str(),
            _ => "qos",
        };
        let yaml = self.setup.app_yaml(app, scheduler, pins);
        let placement = match &mut self.launch {
            Launch::ControlPlane(cp) => {
                let file = cp.workdir.join(format!("{app}.yaml"));
                std::fs::write(&file, &yaml)?;
                let st = cp.cloud.apply(&file, 60)?;
                if st["state"] == "rejected" || st["state"] == "infeasible" {
                    bail!("{app}: {st}");
                }
                let application = acoa_shared::model::parse_application(&yaml)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let t = Instant::now();
                loop {
                    if let Ok(st) = cp.cloud.status(app) {
                        let p = dynamic::placement_of(&st);
                        let pinned_ok = pins.is_none_or(|want| &p == want);
                        if pinned_ok && dynamic::all_running(&st, &application) {
                            break p;
                        }
                    }
                    if t.elapsed() > timeout {
                        bail!(
                            "{app} did not run within {timeout:?}; see {}",
                            cp.workdir.join("cloud.log").display()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
            Launch::Processes { bin, procs, logdir } => {
                let p = pins
                    .cloned()
                    .context("process mode needs a computed placement")?;
                procs.retain(|(a, _), _| a != app);
                std::fs::create_dir_all(&*logdir)?;
                let host = self.tb.addr(HOST)?;
                for (c, node) in &p {
                    let mut cmd = self.tb.command(node, &*bin);
                    cmd.env("ACOA_APP", app)
                        .env("ACOA_COMPONENT", c)
                        .env("ACOA_CONTROL", format!("{host}:{DISCOVERY_PORT}"));
                    let proc = Proc::spawn(
                        &format!("na-micro {c}@{node}"),
                        cmd,
                        &logdir.join(format!("{app}-{c}.log")),
                    )?;
                    procs.insert((app.to_string(), c.clone()), proc);
                }
                p
            }
        };
        self.follow(app, &placement, base);
        self.wait_answers(timeout)?;
        Ok(placement)
    }

    /// Waits until a request goes through the whole workflow.
    fn wait_answers(&mut self, timeout: Duration) -> Result<()> {
        let t = Instant::now();
        self.load.set_users(2);
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = self.load.now_s();
            let s = self.load.samples(now - 6.0, now);
            if s.iter().any(|x| x.ok && x.rt_ms.is_some()) {
                break;
            }
            if t.elapsed() > timeout {
                self.load.set_users(0);
                bail!("no request went through within {timeout:?}");
            }
        }
        self.load.set_users(0);
        Ok(())
    }

    fn undeploy(&mut self, app: &str) -> Result<()> {
        self.load.set_target(None);
        match &mut self.launch {
            Launch::ControlPlane(cp) => {
                cp.delete(app)?;
                dynamic::remove_containers(app, self.setup.workers());
            }
            Launch::Processes { procs, .. } => procs.retain(|(a, _), _| a != app),
        }
        Ok(())
    }

    /// One setting: latency `l` everywhere, the placement of `sched`, the load steps.
    pub fn setting(&mut self, l: f64, sched: &Sched, o: &Options) -> Result<SettingResult> {
        set_uniform(self.tb, &self.setup.nodes, l)?;
        self.runs += 1;
        let app = format!("na-{}-{}", sched.short(), self.runs);
        let base = 9200 + 20 * (self.runs % 40);
        let pins = match sched {
            Sched::ControlPlane(_) => None,
            s => {
                let snap = self.setup.snapshot(
                    sim::uniform_latency(self.setup.nodes.len(), l),
                    o.plan_users,
                );
                Some(self.setup.place(s, &snap)?)
            }
        };
        self.note(format!(
            "{l} ms, {}: deploying {app} {}",
            sched.label(),
            pins.as_ref().map(|p| format!("{p:?}")).unwrap_or_default()
        ));
        let placement = self.deploy(&app, sched, pins.as_ref(), base, o.timeout)?;
        self.note(format!("{app} runs: {placement:?}"));
        let mut steps = Vec::new();
        for &u in &o.users {
            self.load.set_users(u);
            let from = self.load.now_s() + 2.0; // the first 2 s warm the step up
            std::thread::sleep(o.step);
            let to = self.load.now_s();
            self.load.set_users(0);
            // the step's late answers
            std::thread::sleep(Duration::from_secs_f64((l * 30.0 / 1000.0).max(1.0)));
            let st = stats(&self.load.samples(from, to));
            self.note(format!(
                "{l} ms, {}, {u} users: {} requests, {} failed, p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
                sched.label(),
                st.requests,
                st.failed,
                st.p50,
                st.p95,
                st.p99
            ));
            steps.push((u, st));
        }
        self.undeploy(&app)?;
        Ok(SettingResult {
            latency_ms: l,
            sched: sched.clone(),
            remote_calls: remote_calls(&self.setup, &placement),
            placement,
            steps,
        })
    }
}

/// The node whose links the descheduling scenario degrades: the node holding the most
/// components other than m0's (the application then calls across it), or m0's node when the
/// application sits on one node.
pub fn degraded_node(setup: &Setup, placement: &BTreeMap<String, String>) -> Result<String> {
    let entry = placement
        .get(&setup.wf.names[setup.wf.entry])
        .context("m0 not placed")?;
    let mut by: BTreeMap<&String, usize> = BTreeMap::new();
    for n in placement.values().filter(|n| *n != entry) {
        *by.entry(n).or_default() += 1;
    }
    Ok(by
        .into_iter()
        .max_by_key(|(n, k)| (*k, std::cmp::Reverse(*n)))
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| entry.clone()))
}

/// The descheduling scenario's record.
#[derive(Clone, Debug, Default)]
pub struct DynResult {
    /// (seconds, what) of the latency change and every move.
    pub events: Vec<(f64, String)>,
    pub samples: Vec<Sample>,
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    pub change_s: f64,
    /// The node whose links were degraded.
    pub degraded: String,
    /// p95 before the change, from the change to the first move (at most 10 s), in the last
    /// 10 s.
    pub p95_before: f64,
    pub p95_degraded: f64,
    pub p95_end: f64,
}

/// Options of the descheduling scenario.
#[derive(Clone, Debug)]
pub struct DynOptions {
    pub latency_ms: f64,
    pub degraded_ms: f64,
    pub users: usize,
    /// Users the schedulers assume (the components' measured use at this load).
    pub plan_users: f64,
    pub before: Duration,
    pub after: Duration,
    /// Harness-driven descheduler ticks (`None`: the control plane deschedules by itself).
    pub tick: Option<Duration>,
    pub timeout: Duration,
}

impl Bench<'_> {
    /// The network-aware placement at `latency_ms`; after `before`, every link of m0's node goes
    /// to `degraded_ms`; the descheduler moves components (one at a time, re-pinned through
    /// the control plane) while the load runs.
    pub fn deschedule(&mut self, o: &DynOptions, sched: &Sched) -> Result<DynResult> {
        set_uniform(self.tb, &self.setup.nodes, o.latency_ms)?;
        self.runs += 1;
        let app = format!("na-dyn-{}", self.runs);
        let base = 9200 + 20 * (self.runs % 40);
        let users = o.plan_users;
        let n = self.setup.nodes.len();
        let mut pins = match sched {
            Sched::ControlPlane(_) => None,
            s => Some(
                self.setup.place(
                    s,
                    &self
                        .setup
                        .snapshot(sim::uniform_latency(n, o.latency_ms), users),
                )?,
            ),
        };
        let mut placement = self.deploy(&app, sched, pins.as_ref(), base, o.timeout)?;
        let before = placement.clone();
        self.note(format!("{app} runs: {placement:?}"));
        let t_start = self.load.now_s();
        self.load.set_users(o.users);
        std::thread::sleep(o.before);
        let victim = degraded_node(&self.setup, &placement)?;
        let change_s = self.load.now_s();
        for other in self.setup.nodes.clone() {
            if other != victim {
                self.tb
                    .set_link(&victim, &other, LinkSpec::new(o.degraded_ms, 0.0, 0.0))?;
                self.tb
                    .set_link(&other, &victim, LinkSpec::new(o.degraded_ms, 0.0, 0.0))?;
            }
        }
        let mut events = vec![(
            change_s,
            format!(
                "every link of {victim} ({}) {} -> {} ms",
                placement
                    .iter()
                    .filter(|(_, n)| **n == victim)
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                o.latency_ms,
                o.degraded_ms
            ),
        )];
        self.note(events[0].1.clone());
        let mut d = Descheduler::new(desched::Config::default())?;
        let end = Instant::now() + o.after;
        let mut next_tick = Instant::now();
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(250));
            // follow the placement the control plane reports
            if let Launch::ControlPlane(cp) = &self.launch {
                if let Ok(st) = cp.cloud.status(&app) {
                    let p = dynamic::placement_of(&st);
                    if !p.is_empty() && p != placement {
                        for (c, node) in &p {
                            if placement.get(c) != Some(node) {
                                let what = format!(
                                    "{c} moved {} -> {node}",
                                    placement.get(c).map(|s| s.as_str()).unwrap_or("?")
                                );
                                events.push((self.load.now_s(), what.clone()));
                                self.note(what);
                            }
                        }
                        placement = p;
                        self.follow(&app, &placement, base);
                    }
                }
            }
            let (Some(tick), Some(pinned)) = (o.tick, pins.as_mut()) else {
                continue;
            };
            if Instant::now() < next_tick {
                continue;
            }
            next_tick = Instant::now() + tick;
            let snap = self
                .setup
                .snapshot(latency_matrix(self.tb, &self.setup.nodes)?, users);
            let assignment: Vec<usize> = self
                .setup
                .wf
                .names
                .iter()
                .map(|c| {
                    placement
                        .get(c)
                        .and_then(|n| self.setup.node_index(n))
                        .unwrap_or(0)
                })
                .collect();
            for a in d.handle(desched::Event::Tick {
                snapshot: snap,
                assignment,
            })? {
                match a {
                    desched::Action::Move {
                        component,
                        from,
                        to,
                        gain,
                    } => {
                        let (c, to_n) = (
                            self.setup.wf.names[component].clone(),
                            self.setup.nodes[to].clone(),
                        );
                        let what = format!(
                            "descheduler: move {c} {} -> {to_n} (gain {:.0} %)",
                            self.setup.nodes[from],
                            gain * 100.0
                        );
                        events.push((self.load.now_s(), what.clone()));
                        self.note(what);
                        pinned.insert(c, to_n);
                        match &mut self.launch {
                            Launch::ControlPlane(cp) => {
                                let file = cp.workdir.join(format!("{app}.yaml"));
                                std::fs::write(
                                    &file,
                                    self.setup.app_yaml(&app, "qos", Some(pinned)),
                                )?;
                                cp.cloud.apply(&file, 30)?;
                            }
                            Launch::Processes { .. } => {
                                // processes: a rolling move; the new instance starts where it
                                // goes, the callers learn its address (they ask every second),
                                // then the old one stops
                                let p = pinned.clone();
                                let old = self.move_process(&app, &p)?;
                                placement = p;
                                self.follow(&app, &placement, base);
                                std::thread::sleep(Duration::from_millis(1500));
                                drop(old);
                            }
                        }
                    }
                    desched::Action::Abandoned { component, to } => {
                        let what = format!(
                            "descheduler: move of {} to {} abandoned",
                            self.setup.wf.names[component], self.setup.nodes[to]
                        );
                        events.push((self.load.now_s(), what.clone()));
                        self.note(what);
                    }
                }
            }
        }
        self.load.set_users(0);
        std::thread::sleep(Duration::from_secs_f64(
            (o.degraded_ms * 30.0 / 1000.0).max(1.0),
        ));
        let now = self.load.now_s();
        let samples = self.load.samples(t_start, now);
        let end_s = now - (o.degraded_ms * 30.0 / 1000.0).max(1.0);
        let win = |a: f64, b: f64| {
            stats(
                &samples
                    .iter()
                    .filter(|s| s.sent_s >= a && s.sent_s < b)
                    .copied()
                    .collect::<Vec<_>>(),
            )
            .p95
        };
        // degraded: from the change until the first move (or 10 s)
        let first_move = events.get(1).map(|e| e.0).filter(|t| *t > change_s + 1.0);
        let res = DynResult {
            p95_before: win(t_start + 2.0, change_s),
            p95_degraded: win(change_s, first_move.unwrap_or(change_s + 10.0)),
            p95_end: win(end_s - 10.0, end_s),
            events,
            samples: samples
                .iter()
                .map(|s| Sample {
                    sent_s: s.sent_s - t_start,
                    ..*s
                })
                .collect(),
            before,
            after: placement,
            change_s: change_s - t_start,
            degraded: victim,
        };
        self.undeploy(&app)?;
        Ok(res)
    }

    /// Starts the components of `p` that are not running where `p` says; returns the
    /// processes they replace (stopped when dropped).
    fn move_process(&mut self, app: &str, p: &BTreeMap<String, String>) -> Result<Vec<Proc>> {
        let mut old = Vec::new();
        let host = self.tb.addr(HOST)?;
        if let Launch::Processes { bin, procs, logdir } = &mut self.launch {
            for (c, node) in p {
                let key = (app.to_string(), c.clone());
                let here = procs
                    .get(&key)
                    .map(|pr| pr.name.ends_with(&format!("@{node}")))
                    .unwrap_or(false);
                if here {
                    continue;
                }
                old.extend(procs.remove(&key));
                let mut cmd = self.tb.command(node, &*bin);
                cmd.env("ACOA_APP", app)
                    .env("ACOA_COMPONENT", c)
                    .env("ACOA_CONTROL", format!("{host}:{DISCOVERY_PORT}"));
                let proc = Proc::spawn(
                    &format!("na-micro {c}@{node}"),
                    cmd,
                    &logdir.join(format!("{app}-{c}-{node}.log")),
                )?;
                procs.insert(key, proc);
            }
        }
        Ok(old)
    }
}

/// The paper's p95 reductions (network-aware against the baseline) at 10, 100, 200 ms.
pub const PAPER_REDUCTION: [(f64, f64); 3] = [(10.0, 0.39), (100.0, 0.56), (200.0, 0.66)];

/// Relative p95 reduction of `net` against `base` at every common number of users.
pub fn reductions(base: &SettingResult, net: &SettingResult) -> Vec<(usize, f64)> {
    base.steps
        .iter()
        .filter_map(|(u, b)| {
            let n = net.steps.iter().find(|(v, _)| v == u)?.1;
            (b.p95.is_finite() && n.p95.is_finite() && b.p95 > 0.0)
                .then(|| (*u, (b.p95 - n.p95) / b.p95))
        })
        .collect()
}

/// The command line of `hil netaware`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Uniform one-way inter-node latencies, ms (comma-separated)
    #[arg(long, value_delimiter = ',', default_value = "10,100,200")]
    pub latencies: Vec<f64>,
    /// Load steps: virtual users, each one request per second (comma-separated)
    #[arg(long, value_delimiter = ',', default_value = "10,20,40")]
    pub users: Vec<usize>,
    /// Seconds per load step
    #[arg(long, default_value_t = 20)]
    pub step_s: u64,
    /// Workers w1..wN (1..=5)
    #[arg(long, default_value_t = 5)]
    pub workers: usize,
    /// Schedulers compared: `baseline`, `network-aware` (placements computed here and imposed
    /// with requires.datacenter), or `cp:NAME` (left to the control plane's `scheduler: NAME`)
    #[arg(long, value_delimiter = ',', default_value = "baseline,network-aware")]
    pub scheds: Vec<String>,
    /// Run the components as plain processes instead of through the control plane and Podman
    #[arg(long)]
    pub processes: bool,
    #[arg(long, default_value = "target/release/cloud-broker")]
    pub cloud_bin: PathBuf,
    #[arg(long, default_value = "target/release/edge-agent")]
    pub agent_bin: PathBuf,
    /// The na-micro binary (process mode; default: beside this binary)
    #[arg(long)]
    pub micro_bin: Option<PathBuf>,
    /// Skip the static comparison (only the descheduling scenario)
    #[arg(long)]
    pub no_static: bool,
    /// Skip the descheduling scenario
    #[arg(long)]
    pub no_dynamic: bool,
    /// Descheduling scenario: users, seconds before and after the change, latencies
    #[arg(long, default_value_t = 20)]
    pub dyn_users: usize,
    #[arg(long, default_value_t = 20)]
    pub dyn_before_s: u64,
    #[arg(long, default_value_t = 60)]
    pub dyn_after_s: u64,
    #[arg(long, default_value_t = 10.0)]
    pub dyn_latency_ms: f64,
    #[arg(long, default_value_t = 200.0)]
    pub dyn_degraded_ms: f64,
    /// The descheduling scenario's scheduler: `network-aware` (the harness runs the
    /// descheduler state machine and re-pins through the control plane) or `cp:NAME` (the
    /// control plane deschedules by itself)
    #[arg(long, default_value = "network-aware")]
    pub dyn_sched: String,
    /// Passed to `cloud-broker serve --deschedule-ms`: how often the control plane's own
    /// network-aware descheduler evaluates (for `--dyn-sched cp:NAME`)
    #[arg(long)]
    pub deschedule_ms: Option<u64>,
    /// Passed to `cloud-broker serve --deschedule-threshold`: the relative gain a move must
    /// offer the control plane's own descheduler (for `--dyn-sched cp:NAME`)
    #[arg(long)]
    pub deschedule_threshold: Option<f64>,
    /// Applications left to the control plane (cp:NAME) declare the components' modelled use
    /// at the largest load step as resource requests. Off by default: every agent of the testbed
    /// reports the one host's usage, and on a busy 2-core host no node then has room for them
    #[arg(long)]
    pub declare_requests: bool,
    /// Capacity the agents declare (`[capacity]`), MILLICORES,MB. Every agent here measures
    /// the one shared host's usage; a control-plane scheduler that filters on measured usage
    /// (cp:network-aware keeps nodes below 80 %) needs a capacity far above the host's load
    #[arg(long, value_delimiter = ',')]
    pub agent_capacity: Vec<u64>,
    /// Namespace prefix
    #[arg(long, default_value = "na-")]
    pub prefix: String,
    #[arg(long, default_value = "10.78.0.0/16")]
    pub subnet: String,
    /// Report directory (default hil-tests/results/netaware-<UTC time>)
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn parse_sched(s: &str) -> Result<Sched> {
    Ok(match s {
        "baseline" | "base" => Sched::Baseline,
        "network-aware" | "net" => Sched::NetAware,
        s if s.starts_with("cp:") => Sched::ControlPlane(s[3..].to_string()),
        s => bail!("unknown scheduler {s:?} (baseline | network-aware | cp:NAME)"),
    })
}

/// `YYYYmmddTHHMMSSZ` of now (from `date`; "now" when it cannot run).
fn utc_stamp() -> String {
    Command::new("date")
        .args(["-u", "+%Y%m%dT%H%M%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "now".into())
}

fn down(prefix: &str) {
    for ns in crate::netns::list_netns() {
        if ns.starts_with(prefix) {
            let _ = crate::netns::del_netns(&ns);
        }
    }
}

/// On SIGINT/SIGTERM: kill what this run started, remove its containers and namespaces, exit.
fn guard_signals(prefix: &str, workers: Vec<String>) -> Result<()> {
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, term.clone())?;
    let prefix = prefix.to_string();
    std::thread::spawn(move || loop {
        if term.load(Ordering::Relaxed) {
            eprintln!("hil netaware: interrupted, tearing down");
            agents::kill_all();
            remove_all_containers(&workers);
            down(&prefix);
            std::process::exit(130);
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    Ok(())
}

/// Removes the `na-*` application containers of the run's nodes (by label).
pub fn remove_all_containers(workers: &[String]) {
    for n in workers {
        let Ok(o) = Command::new("podman")
            .args(["ps", "-aq", "--filter", "label=acoa.managed=true"])
            .arg("--filter")
            .arg(format!("label=acoa.node={n}"))
            .args(["--format", "{{.ID}} {{.Labels}}"])
            .output()
        else {
            continue;
        };
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let mut w = line.split_whitespace();
            if let Some(id) = w.next() {
                if line.contains("acoa.app:na-") {
                    let _ = Command::new("podman")
                        .args(["rm", "-f", "-t", "0", id])
                        .output();
                }
            }
        }
    }
}

/// `hil netaware`: brings the testbed up, runs the comparison and the descheduling scenario,
/// tears everything down (also on failure), writes the report.
pub fn main(a: Args) -> Result<()> {
    if a.prefix.is_empty() {
        bail!("--prefix must not be empty");
    }
    let mut setup = Setup::paper(a.workers)?;
    if a.declare_requests {
        setup.declare_users = Some(a.users.iter().copied().max().unwrap_or(10) as f64);
    }
    guard_signals(&a.prefix, setup.workers().to_vec())?;
    let scheds: Vec<Sched> = a
        .scheds
        .iter()
        .map(|s| parse_sched(s))
        .collect::<Result<_>>()?;
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("hil-tests/results/netaware-{}", utc_stamp())));
    std::fs::create_dir_all(&dir)?;
    down(&a.prefix);
    let names: Vec<&str> = setup.nodes.iter().map(|s| s.as_str()).collect();
    let tb = Testbed::builder()
        .prefix(&a.prefix)
        .subnet(a.subnet.parse()?)
        .host(true)
        .up(&names, &[])?;
    let comp = tb.calibrate(&setup.nodes[0], &setup.nodes[1])?;
    tb.set_compensation(comp);
    let launch = if a.processes {
        let bin = match &a.micro_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?
                .parent()
                .context("no directory")?
                .join("na-micro"),
        };
        Launch::Processes {
            bin,
            procs: BTreeMap::new(),
            logdir: dir.join("run"),
        }
    } else {
        let mut ao = AgentOptions::new(&a.agent_bin);
        ao.peers_per_period = setup.nodes.len() - 1;
        ao.window = 20;
        let ms = a.deschedule_ms.map(|m| m.to_string());
        let th = a.deschedule_threshold.map(|t| t.to_string());
        let mut extra: Vec<&str> = Vec::new();
        if let Some(m) = &ms {
            extra.extend(["--deschedule-ms", m.as_str()]);
        }
        if let Some(t) = &th {
            extra.extend(["--deschedule-threshold", t.as_str()]);
        }
        Launch::ControlPlane(Box::new(CpRun::start(
            &tb,
            &setup,
            &a.cloud_bin,
            &ao,
            &dir.join("run"),
            &extra,
            match a.agent_capacity.as_slice() {
                [c, m] => Some((*c, *m)),
                [] => None,
                _ => bail!("--agent-capacity wants MILLICORES,MB"),
            },
        )?))
    };
    let res = run_all(&tb, setup.clone(), launch, &a, &scheds);
    remove_all_containers(setup.workers());
    drop(tb);
    let (results, dynres, log) = res?;
    let md = write_report(&dir, &a, &setup, &results, dynres.as_ref(), &log)?;
    println!("{md}");
    println!(
        "hil netaware: report in {}",
        dir.join("report.md").display()
    );
    Ok(())
}

type RunAll = (Vec<SettingResult>, Option<DynResult>, Vec<String>);

fn run_all(
    tb: &Testbed,
    setup: Setup,
    launch: Launch,
    a: &Args,
    scheds: &[Sched],
) -> Result<RunAll> {
    let mut b = Bench::new(tb, setup, launch)?;
    if matches!(b.launch, Launch::ControlPlane(_)) {
        // the agents report and probe before anything is placed
        std::thread::sleep(Duration::from_secs(8));
    }
    let o = Options {
        latencies: a.latencies.clone(),
        users: a.users.clone(),
        step: Duration::from_secs(a.step_s),
        scheds: scheds.to_vec(),
        plan_users: a.users.iter().copied().max().unwrap_or(10) as f64,
        timeout: Duration::from_secs(120),
    };
    let mut results = Vec::new();
    if !a.no_static {
        for &l in &o.latencies {
            for s in &o.scheds {
                results.push(b.setting(l, s, &o)?);
            }
        }
    }
    let mut dynres = None;
    if !a.no_dynamic {
        let sched = parse_sched(&a.dyn_sched)?;
        let d = DynOptions {
            latency_ms: a.dyn_latency_ms,
            degraded_ms: a.dyn_degraded_ms,
            users: a.dyn_users,
            plan_users: a.users.iter().copied().max().unwrap_or(10) as f64,
            before: Duration::from_secs(a.dyn_before_s),
            after: Duration::from_secs(a.dyn_after_s),
            tick: (!matches!(sched, Sched::ControlPlane(_))).then_some(Duration::from_secs(1)),
            timeout: Duration::from_secs(120),
        };
        dynres = Some(b.deschedule(&d, &sched)?);
    }
    Ok((results, dynres, b.log.clone()))
}

fn nodes_used(p: &BTreeMap<String, String>) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for n in p.values() {
        *by.entry(n.as_str()).or_default() += 1;
    }
    by.iter()
        .map(|(n, k)| format!("{n}:{k}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `report.md`, `steps.csv`, `dynamic.csv` and the plots into `dir`; returns the Markdown.
pub fn write_report(
    dir: &Path,
    a: &Args,
    setup: &Setup,
    results: &[SettingResult],
    dynres: Option<&DynResult>,
    log: &[String],
) -> Result<String> {
    let mut md =
        String::from("# Paper 003 in the testbed: network-aware placement and descheduler\n\n");
    let _ = writeln!(
        md,
        "Workflow m0–m12 + db1–db4 (`acoa_scheduler::netaware::sim::paper_workflow`: {} calls per request), one `na-micro` per component; control node `cp` (ingress, load generator) and workers {}; uniform one-way latency between every two nodes on the emulated network. Service time: a sleep of 2 ms (microservice) or 4 ms (database) per visit, not CPU work (2 shared cores). Request 200 B, answers 1000 B / 1400 B (database). Components run {}. Load: N virtual users on `cp`, one request per second each, {} s per step (the first 2 s of a step not counted). Placements: baseline = Kubernetes' default scoring (LeastAllocated + BalancedAllocation, network-unaware, `netaware::baseline`), network-aware = `netaware::place` (default weights), both from the simulation's node capacities and background use and the components' use at {} users, imposed with `requires.datacenter`{}. Percentiles over the successful requests; failed = no answer within 10 s, or answered after a downstream call timed out (8 s).\n",
        setup.wf.calls().iter().flatten().sum::<f64>(),
        setup.workers().join(", "),
        if a.processes { "as processes in the node namespaces" } else { "as Podman containers started by the real agents, placed through the real control plane" },
        a.step_s,
        a.users.iter().max().copied().unwrap_or(0),
        if a.scheds.iter().any(|s| s.starts_with("cp:")) {
            "; `control plane: NAME` = the application published with `scheduler: NAME` and no pins, placed by the control plane from what the agents measure (latencies from their probers, each component's CPU, memory and traffic from Podman and the workloads' stats datagrams)"
        } else {
            ""
        }
    );
    if !results.is_empty() {
        md.push_str("## Response time per setting\n\n| latency (ms) | scheduler | nodes used (components) | cross-node calls / request | users | requests | failed | p50 (ms) | p95 (ms) | p99 (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n");
        let mut csv =
            String::from("latency_ms,scheduler,users,requests,failed,p50_ms,p95_ms,p99_ms\n");
        for r in results {
            for (u, s) in &r.steps {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.0} | {u} | {} | {} | {:.1} | {:.1} | {:.1} |",
                    r.latency_ms,
                    r.sched.label(),
                    nodes_used(&r.placement),
                    r.remote_calls,
                    s.requests,
                    s.failed,
                    s.p50,
                    s.p95,
                    s.p99
                );
                let _ = writeln!(
                    csv,
                    "{},{},{u},{},{},{:.3},{:.3},{:.3}",
                    r.latency_ms,
                    r.sched.short(),
                    s.requests,
                    s.failed,
                    s.p50,
                    s.p95,
                    s.p99
                );
            }
        }
        std::fs::write(dir.join("steps.csv"), csv)?;
        md.push_str("\n## p95 reduction, network-aware against the baseline\n\n| latency (ms) | users | baseline p95 (ms) | network-aware p95 (ms) | reduction | paper |\n|---|---|---|---|---|---|\n");
        let mut bars = Vec::new();
        for &l in &a.latencies {
            let find = |s: &Sched| results.iter().find(|r| r.latency_ms == l && &r.sched == s);
            let net = results
                .iter()
                .find(|r| r.latency_ms == l && r.sched != Sched::Baseline);
            if let (Some(b), Some(n)) = (find(&Sched::Baseline), net) {
                let paper = PAPER_REDUCTION
                    .iter()
                    .find(|(pl, _)| *pl == l)
                    .map(|(_, r)| format!("{:.0} %", r * 100.0))
                    .unwrap_or_else(|| "-".into());
                for (u, red) in reductions(b, n) {
                    let bp = b
                        .steps
                        .iter()
                        .find(|x| x.0 == u)
                        .map(|x| x.1.p95)
                        .unwrap_or(f64::NAN);
                    let np = n
                        .steps
                        .iter()
                        .find(|x| x.0 == u)
                        .map(|x| x.1.p95)
                        .unwrap_or(f64::NAN);
                    let _ = writeln!(
                        md,
                        "| {l} | {u} | {bp:.1} | {np:.1} | {:.0} % | {paper} |",
                        red * 100.0
                    );
                }
                if let (Some(bl), Some(nl)) = (b.steps.last(), n.steps.last()) {
                    bars.push((format!("{l} ms base"), bl.1.p95));
                    bars.push((format!("{l} ms net"), nl.1.p95));
                }
            }
        }
        if !bars.is_empty() {
            match crate::report::bars_png(
                &dir.join("p95.png"),
                &format!(
                    "p95 end-to-end at {} users",
                    a.users.iter().max().copied().unwrap_or(0)
                ),
                "p95 (ms)",
                &bars,
            ) {
                Ok(()) => md.push_str("\n![p95 per setting](p95.png)\n"),
                Err(e) => {
                    let _ = writeln!(md, "\n(no plot: {e})");
                }
            }
        }
    }
    if let Some(d) = dynres {
        let placed = |p: &BTreeMap<String, String>| {
            format!(
                "{} ({:.0} cross-node calls per request)",
                nodes_used(p),
                remote_calls(setup, p)
            )
        };
        let (before, after) = (placed(&d.before), placed(&d.after));
        let _ = writeln!(
            md,
            "\n## Latencies changed while it runs: the descheduler\n\n{} users; {}; at {:.1} s every link of the node with the most components besides m0's (or m0's node when they share one) goes to {} ms. {}.\n\n- before: {}\n- after: {}\n- p95 before the change {:.1} ms; from the change to the first move (at most 10 s) {:.1} ms; in the last 10 s {:.1} ms\n\n| t (s) | event |\n|---|---|",
            a.dyn_users,
            match parse_sched(&a.dyn_sched) {
                Ok(Sched::ControlPlane(n)) => format!(
                    "placed by the control plane (`scheduler: {n}`) at {} ms everywhere",
                    a.dyn_latency_ms
                ),
                _ => format!(
                    "the network-aware placement at {} ms everywhere (the schedulers see the use at {} users)",
                    a.dyn_latency_ms,
                    a.users.iter().copied().max().unwrap_or(10)
                ),
            },
            d.change_s,
            a.dyn_degraded_ms,
            if a.dyn_sched.starts_with("cp:") {
                "The control plane's own descheduler (`netaware::app::deschedule`, every `--deschedule-ms`) decides, on the agents' measurements".to_string()
            } else {
                "The descheduler (`netaware::desched::Descheduler`, default configuration: 20 % gain sustained 5 ticks, one move in flight) ticks every second in the harness, on the emulator's current link table and the components' modelled use; each move re-pins the component through the control plane (a re-applied definition)".to_string()
            },
            before,
            after,
            d.p95_before,
            d.p95_degraded,
            d.p95_end
        );
        let t0 = d.events.first().map(|e| e.0 - d.change_s).unwrap_or(0.0);
        for (t, e) in &d.events {
            let _ = writeln!(md, "| {:.1} | {e} |", t - t0);
        }
        let mut csv = String::from("sent_s,rt_ms,ok\n");
        for s in &d.samples {
            let _ = writeln!(
                csv,
                "{:.3},{},{}",
                s.sent_s,
                s.rt_ms.map(|x| format!("{x:.3}")).unwrap_or_default(),
                s.ok
            );
        }
        std::fs::write(dir.join("dynamic.csv"), csv)?;
        let pts: Vec<(f64, f64)> = d
            .samples
            .iter()
            .filter(|s| s.ok)
            .filter_map(|s| Some((s.sent_s, s.rt_ms?)))
            .collect();
        let end = pts.iter().map(|p| p.0).fold(0.0, f64::max);
        let mut line = Vec::new();
        let mut windows = String::from(
            "\n| window (s, by send time) | requests | failed | p50 (ms) | p95 (ms) |\n|---|---|---|---|---|\n",
        );
        let mut t = 0.0;
        while t < end {
            let w: Vec<Sample> = d
                .samples
                .iter()
                .filter(|s| s.sent_s >= t && s.sent_s < t + 5.0)
                .copied()
                .collect();
            let st = stats(&w);
            if st.p95.is_finite() {
                line.push((t + 2.5, st.p95));
            }
            let _ = writeln!(
                windows,
                "| {t:.0}–{:.0} | {} | {} | {:.1} | {:.1} |",
                t + 5.0,
                st.requests,
                st.failed,
                st.p50,
                st.p95
            );
            t += 5.0;
        }
        md.push_str(&windows);
        match crate::report::scatter_png(
            &dir.join("desched.png"),
            "successful requests' response time (dots), p95 per 5 s (red)",
            "seconds since the load started",
            "response time (ms)",
            &pts,
            false,
            &[line],
        ) {
            Ok(()) => md.push_str("\n![p95 over time](desched.png)\n"),
            Err(e) => {
                let _ = writeln!(md, "\n(no plot: {e})");
            }
        }
    }
    md.push_str("\n## Log\n\n```text\n");
    for l in log {
        md.push_str(l);
        md.push('\n');
    }
    md.push_str("```\n");
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_on(setup: &Setup, node: &str) -> BTreeMap<String, String> {
        setup
            .wf
            .names
            .iter()
            .map(|c| (c.clone(), node.to_string()))
            .collect()
    }

    #[test]
    fn application_and_cluster_definitions_are_valid() {
        let s = Setup::paper(5).unwrap();
        assert_eq!(s.nodes, ["cp", "w1", "w2", "w3", "w4", "w5"]);
        let pins = all_on(&s, "w2");
        let app =
            acoa_shared::model::parse_application(&s.app_yaml("na-x", "qos", Some(&pins))).unwrap();
        assert_eq!(app.components.len(), 17);
        assert_eq!(app.channels.len(), 18);
        assert!(app
            .components
            .iter()
            .all(|c| c.requires.datacenter.as_deref() == Some("w2")));
        let mut s2 = s.clone();
        s2.declare_users = Some(40.0);
        let req =
            acoa_shared::model::parse_application(&s2.app_yaml("na-z", "network-aware", None))
                .unwrap();
        // db1: 2 visits x 4 ms x 40 users
        let db1 = req.components.iter().find(|c| c.name == "db1").unwrap();
        assert_eq!(
            db1.resources.as_ref().map(|r| (r.cpu_millis, r.memory_mb)),
            Some((320, 256))
        );
        let free = acoa_shared::model::parse_application(&s.app_yaml("na-y", "qos", None)).unwrap();
        assert!(free.components.iter().all(|c| c.resources.is_none()));
        assert!(free
            .components
            .iter()
            .all(|c| c.requires.datacenter.is_none()));
        // left to the control plane: requests enter at cp and go to m0
        let ing = free.ingress.as_ref().expect("an ingress");
        assert_eq!((ing.node.as_str(), ing.component.as_str()), ("cp", "m0"));
        let pinned = acoa_shared::model::parse_application(&s.app_yaml(
            "na-x",
            "qos",
            Some(&BTreeMap::new()),
        ))
        .unwrap();
        assert_eq!(pinned.ingress, None);
        let with_cp =
            acoa_shared::model::parse_cluster(&s.cluster_yaml_cp(Some((20000, 65536)))).unwrap();
        let cp = with_cp.node("cp").expect("cp in the cluster");
        assert_eq!((cp.capacity.cpu_millis, cp.capacity.memory_mb), (0, 0));
        assert_eq!(with_cp.nodes.len(), s.nodes.len());
        let cl = acoa_shared::model::parse_cluster(&s.cluster_yaml()).unwrap();
        assert_eq!(cl.nodes.len(), 5);
        assert!(Setup::paper(0).is_err() && Setup::paper(6).is_err());
    }

    #[test]
    fn discovery_answers_name_every_downstream_call() {
        let s = Setup::paper(2).unwrap();
        let mut p = all_on(&s, "w1");
        p.insert("m7".into(), "w2".into());
        let addr = |n: &str| match n {
            "w1" => Some(Ipv4Addr::new(10, 78, 0, 2)),
            "w2" => Some(Ipv4Addr::new(10, 78, 0, 3)),
            _ => None,
        };
        let a = s.answers(&p, &addr, 9200);
        // m2 (index 2) calls m6, then m7 (index 7, on w2)
        assert_eq!(
            a["m2"],
            "K1 port=9202 service_ms=2 resp=1000 stages=m6@10.78.0.2:9206;m7@10.78.0.3:9207"
        );
        assert_eq!(
            a["m0"],
            "K1 port=9200 service_ms=2 resp=1000 stages=m1@10.78.0.2:9201+m2@10.78.0.2:9202+m3@10.78.0.2:9203"
        );
        assert_eq!(a["db1"], "K1 port=9213 service_ms=4 resp=1400 stages=");
        assert_eq!(
            s.entry_addr(&p, &addr, 9200),
            Some("10.78.0.2:9200".parse().unwrap())
        );
    }

    #[test]
    fn cross_node_calls_and_the_degraded_node() {
        let s = Setup::paper(3).unwrap();
        let mut p = all_on(&s, "w1");
        assert_eq!(remote_calls(&s, &p), 1.0); // the ingress only
        assert_eq!(degraded_node(&s, &p).unwrap(), "w1");
        for c in ["m9", "m12", "db4"] {
            p.insert(c.into(), "w3".into());
        }
        p.insert("db3".into(), "w2".into());
        // ingress + m3->m9 + m8->db3
        assert_eq!(remote_calls(&s, &p), 3.0);
        assert_eq!(degraded_node(&s, &p).unwrap(), "w3");
    }

    #[test]
    fn percentiles_of_successful_requests_failed_ones_apart() {
        let mut v: Vec<Sample> = (1..=100)
            .map(|i| Sample {
                sent_s: i as f64,
                rt_ms: Some(i as f64),
                ok: true,
            })
            .collect();
        v.push(Sample {
            sent_s: 0.0,
            rt_ms: None,
            ok: false,
        });
        v.push(Sample {
            sent_s: 0.0,
            rt_ms: Some(8000.0),
            ok: false,
        });
        let s = stats(&v);
        assert_eq!((s.requests, s.answered, s.failed), (102, 101, 2));
        assert_eq!((s.p50, s.p95, s.p99), (50.0, 95.0, 99.0));
        assert!(stats(&[]).p95.is_nan());
    }

    #[test]
    fn reductions_against_the_baseline() {
        let st = |p95| Stats {
            p95,
            ..Stats::default()
        };
        let r = |sched, p: f64| SettingResult {
            latency_ms: 10.0,
            sched,
            placement: BTreeMap::new(),
            steps: vec![(10, st(p)), (20, st(p * 2.0))],
            remote_calls: 0.0,
        };
        let red = reductions(&r(Sched::Baseline, 100.0), &r(Sched::NetAware, 60.0));
        assert_eq!(red.len(), 2);
        assert!((red[0].1 - 0.4).abs() < 1e-12 && (red[1].1 - 0.4).abs() < 1e-12);
        assert!(
            parse_sched("cp:network-aware").unwrap() == Sched::ControlPlane("network-aware".into())
        );
        assert!(parse_sched("nope").is_err());
    }
}
