//! Paper 003 reproduced in the testbed: the m0–m12 + db1–db4 workflow of
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
//! Modules: [`discovery`] (where each instance finds its downstream calls), [`load`] (the load
//! generator and its percentiles), [`bench`] (the emulated network, the launchers and the static
//! comparison), [`descheduling`] (the descheduling scenario), [`report`] (Markdown, CSV, plots). The
//! command line (`hil netaware`) is the `hil` binary's.
//!
//! Test harness code: errors are `anyhow`.

pub mod bench;
pub mod descheduling;
pub mod discovery;
pub mod load;
pub mod report;

pub use bench::{
    latency_matrix, remove_all_containers, run, set_uniform, Bench, CpRun, Launch, Options, Plan,
    RunResults, SettingResult,
};
pub use descheduling::{degraded_node, DynOptions, DynResult};
pub use discovery::Discovery;
pub use load::{stats, Load, Sample, Stats};
pub use report::{reductions, write_report, PAPER_REDUCTION};

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use acoa_scheduler::netaware::sim::{self, Workflow};
use acoa_scheduler::netaware::{self, NetOutcome, NodeState, Snapshot, Weights};
use anyhow::{bail, Result};

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

pub fn parse_sched(s: &str) -> Result<Sched> {
    Ok(match s {
        "baseline" | "base" => Sched::Baseline,
        "network-aware" | "net" => Sched::NetAware,
        s if s.starts_with("cp:") => Sched::ControlPlane(s[3..].to_string()),
        s => bail!("unknown scheduler {s:?} (baseline | network-aware | cp:NAME)"),
    })
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

#[cfg(test)]
mod tests;
