//! The emulated network's latencies, the components' launchers (control plane and agents, or
//! processes), and the bench that runs one setting of the static comparison.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use acoa_scheduler::netaware::sim;
use anyhow::{bail, Context, Result};

use crate::agents::{self, AgentOptions, Proc};
use crate::dynamic::{self, Cloud};
use crate::emu::{Testbed, HOST};
use crate::LinkSpec;

use super::*;

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
            let path = cloud.enroll_agent(tb, &cl, n, agent, &workdir.join(n))?;
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

/// Starts `na-micro` (`bin`) as component `c` of `app` in `node`'s namespace, asking the
/// discovery service on `host` what to do; its output goes to `log`.
pub(super) fn spawn_micro(
    tb: &Testbed,
    bin: &Path,
    host: Ipv4Addr,
    app: &str,
    c: &str,
    node: &str,
    log: &Path,
) -> Result<Proc> {
    let mut cmd = tb.command(node, bin);
    cmd.env("ACOA_APP", app)
        .env("ACOA_COMPONENT", c)
        .env("ACOA_CONTROL", format!("{host}:{DISCOVERY_PORT}"));
    Proc::spawn(&format!("na-micro {c}@{node}"), cmd, log)
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

/// Everything a run needs running: the emulated network, discovery, load, the launcher.
pub struct Bench<'a> {
    pub tb: &'a Testbed,
    pub setup: Setup,
    pub discovery: Discovery,
    pub load: Load,
    pub launch: Launch,
    pub log: Vec<String>,
    pub(super) runs: u16,
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

    pub(super) fn note(&mut self, s: String) {
        tracing::info!("{s}");
        self.log.push(format!("{:>7.1} s  {s}", self.load.now_s()));
    }

    fn addr_of(&self) -> impl Fn(&str) -> Option<Ipv4Addr> + '_ {
        move |n: &str| self.tb.addr(n).ok()
    }

    /// Points discovery and the load generator at `placement`.
    pub(super) fn follow(&self, app: &str, placement: &BTreeMap<String, String>, base: u16) {
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
                    let log = logdir.join(format!("{app}-{c}.log"));
                    let proc = spawn_micro(self.tb, bin, host, app, c, node, &log)?;
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

    pub(super) fn undeploy(&mut self, app: &str) -> Result<()> {
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

/// A whole run, as the command line asked for it: how the components run, the static
/// comparison, the descheduling scenario.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The components run as `na-micro` processes (true) or as containers through the control
    /// plane and the agents.
    pub processes: bool,
    /// The static comparison's settings (also what the report says about the load).
    pub options: Options,
    /// Whether the static comparison runs.
    pub compare: bool,
    /// The descheduling scenario, with its scheduler.
    pub dynamic: Option<(Sched, DynOptions)>,
}

/// What a run measured: one result per setting of the comparison, the descheduling scenario's
/// record, the bench's log.
pub type RunResults = (Vec<SettingResult>, Option<DynResult>, Vec<String>);

/// Runs `plan` on a testbed that is up: the comparison, then the descheduling scenario.
pub fn run(tb: &Testbed, setup: Setup, launch: Launch, plan: &Plan) -> Result<RunResults> {
    let mut b = Bench::new(tb, setup, launch)?;
    if matches!(b.launch, Launch::ControlPlane(_)) {
        // the agents report and probe before anything is placed
        std::thread::sleep(Duration::from_secs(8));
    }
    let o = &plan.options;
    let mut results = Vec::new();
    if plan.compare {
        for &l in &o.latencies {
            for s in &o.scheds {
                results.push(b.setting(l, s, o)?);
            }
        }
    }
    let mut dynres = None;
    if let Some((sched, d)) = &plan.dynamic {
        dynres = Some(b.deschedule(d, sched)?);
    }
    Ok((results, dynres, b.log.clone()))
}
