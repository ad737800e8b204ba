//! `hil netaware`: paper 003 in the testbed (the experiment is [`hil_tests::netaware_exp`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hil_tests::agents::AgentOptions;
use hil_tests::emu::Testbed;
use hil_tests::netaware_exp::{
    self, parse_sched, remove_all_containers, write_report, CpRun, DynOptions, Launch, Options,
    Plan, Sched, Setup,
};

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

/// The run the command line asks for (schedulers already parsed).
fn plan(a: &Args, scheds: Vec<Sched>) -> Result<Plan> {
    let plan_users = a.users.iter().copied().max().unwrap_or(10) as f64;
    let dynamic = if a.no_dynamic {
        None
    } else {
        let sched = parse_sched(&a.dyn_sched)?;
        let d = DynOptions {
            latency_ms: a.dyn_latency_ms,
            degraded_ms: a.dyn_degraded_ms,
            users: a.dyn_users,
            plan_users,
            before: Duration::from_secs(a.dyn_before_s),
            after: Duration::from_secs(a.dyn_after_s),
            tick: (!matches!(sched, Sched::ControlPlane(_))).then_some(Duration::from_secs(1)),
            timeout: Duration::from_secs(120),
        };
        Some((sched, d))
    };
    Ok(Plan {
        processes: a.processes,
        options: Options {
            latencies: a.latencies.clone(),
            users: a.users.clone(),
            step: Duration::from_secs(a.step_s),
            scheds,
            plan_users,
            timeout: Duration::from_secs(120),
        },
        compare: !a.no_static,
        dynamic,
    })
}

/// `hil netaware`: brings the testbed up, runs the comparison and the descheduling scenario,
/// tears everything down (also on failure), writes the report.
pub fn run(a: Args) -> Result<()> {
    if a.prefix.is_empty() {
        bail!("--prefix must not be empty");
    }
    let mut setup = Setup::paper(a.workers)?;
    if a.declare_requests {
        setup.declare_users = Some(a.users.iter().copied().max().unwrap_or(10) as f64);
    }
    let workers = setup.workers().to_vec();
    crate::guard_signals(&a.prefix, move || remove_all_containers(&workers))?;
    let scheds: Vec<Sched> = a
        .scheds
        .iter()
        .map(|s| parse_sched(s))
        .collect::<Result<_>>()?;
    let plan = plan(&a, scheds)?;
    let dir = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "hil-tests/results/netaware-{}",
            hil_tests::report::utc_stamp_now()
        ))
    });
    std::fs::create_dir_all(&dir)?;
    let _ = crate::down(&a.prefix);
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
    let res = netaware_exp::run(&tb, setup.clone(), launch, &plan);
    remove_all_containers(setup.workers());
    drop(tb);
    let (results, dynres, log) = res?;
    let md = write_report(&dir, &plan, &setup, &results, dynres.as_ref(), &log)?;
    println!("{md}");
    println!(
        "hil netaware: report in {}",
        dir.join("report.md").display()
    );
    Ok(())
}
