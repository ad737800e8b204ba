//! `hil`: runs the testbed's experiments and writes their reports.
//!
//! ```text
//! hil fidelity [--prober reference|agent] [--cluster FILE] [--nodes n01,..] [--out DIR]
//! hil down [--prefix hil-]        # deletes the namespaces a killed run left
//! ```
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use hil_tests::agents::AgentOptions;
use hil_tests::emu::Testbed;
use hil_tests::forwarder::StatsSnapshot;
use hil_tests::{fidelity, netns, report};

mod netaware;

#[derive(Parser)]
#[command(
    name = "hil",
    about = "ACOA hardware-in-the-loop testbed: experiments and reports"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Prober {
    /// The testbed's own UDP echo prober (checks the emulator)
    Reference,
    /// The edge agents' probers, read from their link-metrics messages over MQTT
    Agent,
}

#[derive(Subcommand)]
enum Cmd {
    /// Experiment 1: measured link metrics against the emulated ones, every directed pair
    Fidelity {
        #[arg(long, value_enum, default_value = "reference")]
        prober: Prober,
        #[arg(long, default_value = "scenarios/railway/cluster.yaml")]
        cluster: PathBuf,
        /// Only these nodes (comma-separated); default all
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Reference prober: probes per pair
        #[arg(long, default_value_t = 200)]
        probes: usize,
        /// Reference prober: interval between probes of one pair, ms
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        /// Agent prober: how long the agents run before their last metrics are taken, s
        #[arg(long, default_value_t = 120)]
        duration_s: u64,
        /// The edge-agent binary (agent prober)
        #[arg(long, default_value = "target/release/edge-agent")]
        agent_bin: PathBuf,
        #[command(flatten)]
        agents: Agents,
        /// Do not subtract the emulator's calibrated own overhead from the delays
        #[arg(long)]
        no_compensate: bool,
        #[arg(long, default_value = "10.77.0.0/16")]
        subnet: String,
        #[command(flatten)]
        run: RunArgs,
    },
    /// The emulator's precision as the packet rate grows (one-way error of a 10 ms link)
    EmuBench {
        /// Packets per second, comma-separated
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000,10000")]
        rates: Vec<u64>,
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        #[arg(long, default_value_t = 10.0)]
        delay_ms: f64,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Experiment 2: placements from measured links, scored under the true table, and run
    /// (the workload program) against random feasible placements
    Placement {
        #[arg(long, default_value = "scenarios/railway/cluster.yaml")]
        cluster: PathBuf,
        #[command(flatten)]
        apps: Apps,
        /// Random feasible placements per application
        #[arg(long, default_value_t = 20)]
        random: usize,
        /// Placements run at once
        #[arg(long, default_value_t = 7)]
        batch: usize,
        /// Seconds each batch is measured
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
        /// Messages per second of every source component
        #[arg(long, default_value_t = 10.0)]
        rate_hz: f64,
        /// Reference-prober probes per pair for the measured link table
        #[arg(long, default_value_t = 100)]
        probes: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The workload program (default: beside this binary)
        #[arg(long)]
        workload_bin: Option<PathBuf>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Experiments 3 and 4 with the real control plane, agents and Podman containers: a node
    /// killed, a link degraded, the control plane restarted; time to recover, path latency
    Dynamic {
        #[command(flatten)]
        system: System,
        #[arg(long, default_value = "scenarios/railway/smoke-monitoring.yaml")]
        app: PathBuf,
        /// Seconds the agents measure before the application is applied
        #[arg(long, default_value_t = 30)]
        warmup_s: u64,
        /// Seconds between events
        #[arg(long, default_value_t = 15)]
        settle_s: u64,
        /// Seconds allowed to recover from an event
        #[arg(long, default_value_t = 90)]
        timeout_s: u64,
        /// Seconds a link stays noisy (no re-placement expected)
        #[arg(long, default_value_t = 40)]
        noise_s: u64,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Paper 003 in the testbed: network-aware placement against the baseline, and the
    /// descheduler (namespaces na-*, 10.78.0.0/16)
    Netaware(netaware::Args),
    /// Experiment 2 with the whole system: the control plane places every application from the
    /// agents' measurements, the agents run it as containers; random feasible placements run
    /// the same way, pinned (`requires.node`)
    Live {
        #[command(flatten)]
        system: System,
        #[command(flatten)]
        apps: Apps,
        /// Probes in the agents' window (success rates from 64 probes: sd ~0.04; from the
        /// agent's default 20: ~0.07, enough to move a reliability-weighted placement by 2 %)
        #[arg(long, default_value_t = 64)]
        window: usize,
        /// Seconds the agents measure before the first application is applied (one probe per
        /// peer per second: a full window of 64 takes 64 s)
        #[arg(long, default_value_t = 70)]
        warmup_s: u64,
        #[arg(long, default_value_t = 90)]
        timeout_s: u64,
        /// Random feasible placements per application
        #[arg(long, default_value_t = 20)]
        random: usize,
        /// Random placements run at once
        #[arg(long, default_value_t = 5)]
        batch: usize,
        /// Seconds every placement is measured
        #[arg(long, default_value_t = 15.0)]
        secs: f64,
        #[arg(long, default_value_t = 10.0)]
        rate_hz: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Deletes the namespaces of a run that was killed
    Down {
        #[arg(long, default_value = "hil-")]
        prefix: String,
    },
}

/// How the agents of a run are started.
#[derive(clap::Args)]
struct Agents {
    /// aarch64 build of the agent for the aarch64 nodes, run under qemu-aarch64-static
    #[arg(long)]
    agent_bin_aarch64: Option<PathBuf>,
    /// Run the agents SCHED_FIFO (chrt -f 20), like the emulator
    #[arg(long)]
    agent_rt: bool,
    /// The agents' `[probe] clock`: synchronized (one-way delays) or free (half the RTT)
    #[arg(long, default_value = "synchronized")]
    clock: String,
}

impl Agents {
    /// The agents' options, `bin` on the nodes that are not aarch64.
    fn options(&self, bin: &Path) -> AgentOptions {
        let mut o = AgentOptions::new(bin);
        o.aarch64_bin = self.agent_bin_aarch64.clone();
        o.realtime = self.agent_rt;
        o.clock = self.clock.clone();
        o
    }
}

/// The whole system of `dynamic` and `live`: the cluster, the control plane and the agents.
#[derive(clap::Args)]
struct System {
    #[arg(long, default_value = "scenarios/railway/cluster.yaml")]
    cluster: PathBuf,
    #[arg(long, default_value = "target-hil/release/cloud-broker")]
    cloud_bin: PathBuf,
    #[arg(long, default_value = "target-hil/release/edge-agent")]
    agent_bin: PathBuf,
    #[command(flatten)]
    agents: Agents,
}

/// The applications placed (`placement`, `live`).
#[derive(clap::Args)]
struct Apps {
    /// Application definitions, comma-separated
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "scenarios/railway/smoke-monitoring.yaml,scenarios/railway/speed-profiling.yaml"
    )]
    apps: Vec<PathBuf>,
}

/// Where a run lives: its namespaces and its report.
#[derive(clap::Args)]
struct RunArgs {
    /// Namespace prefix
    #[arg(long, default_value = "hil-")]
    prefix: String,
    /// Report directory (default hil-tests/results/<experiment>-<UTC time>)
    #[arg(long)]
    out: Option<PathBuf>,
}

impl RunArgs {
    /// The report directory: `--out`, else `hil-tests/results/<experiment>-<UTC time>`.
    fn dir(&self, experiment: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from(format!(
                "hil-tests/results/{experiment}-{}",
                hil_tests::report::utc_stamp_now()
            ))
        })
    }
}

fn main() -> Result<()> {
    hil_tests::init_logging();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Netaware(a) => netaware::run(a),
        Cmd::Down { prefix } => {
            let n = down(&prefix)?;
            println!("hil: deleted {n} namespaces with prefix {prefix}");
            Ok(())
        }
        Cmd::Placement {
            cluster,
            apps,
            random,
            batch,
            secs,
            rate_hz,
            probes,
            seed,
            workload_bin,
            run,
        } => {
            use rand::SeedableRng;
            let workload_bin = match workload_bin {
                Some(p) => p,
                None => std::env::current_exe()?.with_file_name("acoa-workload"),
            };
            let cl = load_cluster(&cluster)?;
            let apps = load_apps(&apps.apps)?;
            let names: Vec<String> = cl.nodes.iter().map(|n| n.name.clone()).collect();
            let dir = run.dir("placement");
            let (tb, comp) = cluster_testbed(&cl, &run.prefix)?;
            println!(
                "hil: testbed up, compensation {:.0} µs; measuring every pair",
                comp.as_secs_f64() * 1e6
            );
            let rows =
                fidelity::reference(&tb, &names, &cl.links, probes, Duration::from_millis(50))?;
            let measured = hil_tests::placement::measured_cluster(&cl, &rows);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut md = format!(
                "# Experiment 2: placements from measurements\n\nLink table measured on the emulated railway network (reference prober, {probes} probes per directed pair; latency = RTT/2, success = round-trip success: what a round-trip prober sees; `hil live` is the same experiment with the agents' one-way measurements and the control plane). ACOA's placement (`acoa_scheduler::place`, qos) from that table is scored under the true table against the optimum and the worst (enumeration). Then every placement runs: the workload program plays every component in its node's namespace, sources send {rate_hz} msg/s, and each path's end-to-end latency (origin to last component, one clock) and success are measured for {secs} s; the baseline is {random} random feasible placements (each component on a uniformly drawn node meeting its constraints, as a scheduler that only filters would place it; seed {seed}).\n\n"
            );
            for app in &apps {
                let ev = hil_tests::placement::evaluate(&cl, &measured, app)?;
                println!(
                    "hil: {}: score {:.4} under the true table, optimum {:.4} (gap {:.2} %), {} feasible",
                    app.application, ev.score_true, ev.optimum_true, 100.0 * ev.gap(), ev.feasible
                );
                let mut placements = vec![("acoa".to_string(), ev.assignment.clone())];
                for k in 0..random {
                    placements.push((
                        format!("random-{k}"),
                        hil_tests::placement::random_feasible(&cl, app, &mut rng)?,
                    ));
                }
                let mut runs = Vec::new();
                for (bi, chunk) in placements.chunks(batch.max(1)).enumerate() {
                    println!(
                        "hil: {}: running placements batch {} ({} placements)",
                        app.application,
                        bi + 1,
                        chunk.len()
                    );
                    runs.extend(hil_tests::placement::run_placements(
                        &tb,
                        app,
                        chunk,
                        &workload_bin,
                        rate_hz,
                        secs,
                        &dir.join("logs"),
                    )?);
                }
                md += &report::placement_section(&dir, app, &ev, &runs)?;
            }
            let emu = tb.stats();
            drop(tb);
            md += &format!("{}\n", emulator_note(comp, &emu));
            println!("{md}");
            write_report(&dir, &md)
        }
        Cmd::Dynamic {
            system,
            app,
            warmup_s,
            settle_s,
            timeout_s,
            noise_s,
            run,
        } => {
            let cl = load_cluster(&system.cluster)?;
            let application =
                acoa_shared::model::load_application(&app).map_err(|e| anyhow::anyhow!("{e}"))?;
            let dir = run.dir("dynamic");
            let (tb, _) = cluster_testbed(&cl, &run.prefix)?;
            let mut ao = system.agents.options(&system.agent_bin);
            ao.window = 20;
            let opts = hil_tests::dynamic::DynamicOptions {
                cloud_bin: system.cloud_bin,
                agent: ao,
                app_file: app.clone(),
                workdir: dir.join("run"),
                warmup: Duration::from_secs(warmup_s),
                settle: Duration::from_secs(settle_s),
                timeout: Duration::from_secs(timeout_s),
                rate_hz: 10.0,
                noise: Duration::from_secs(noise_s),
            };
            let res = hil_tests::dynamic::run(&tb, &cl, &application, &opts);
            hil_tests::dynamic::remove_containers(
                &application.application,
                &cl.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
            );
            drop(tb);
            let run = res?;
            let md = report::dynamic_report(&dir, &application, &run)?;
            println!("{md}\nhil: report in {}", dir.join("report.md").display());
            Ok(())
        }
        Cmd::Live {
            system,
            apps,
            window,
            warmup_s,
            timeout_s,
            random,
            batch,
            secs,
            rate_hz,
            seed,
            run,
        } => {
            let cl = load_cluster(&system.cluster)?;
            let apps = load_apps(&apps.apps)?;
            let dir = run.dir("live");
            let (tb, comp) = cluster_testbed(&cl, &run.prefix)?;
            let mut ao = system.agents.options(&system.agent_bin);
            ao.window = window;
            let o = hil_tests::live::LiveOptions {
                cloud_bin: system.cloud_bin,
                agent: ao,
                workdir: dir.join("run"),
                warmup: Duration::from_secs(warmup_s),
                timeout: Duration::from_secs(timeout_s),
                random,
                batch,
                secs,
                rate_hz,
                seed,
            };
            let res = hil_tests::live::run(&tb, &cl, &apps, &o);
            let emu = tb.stats();
            drop(tb);
            let res = res?;
            let note = format!(
                "{} Load average at the end: {}.\n",
                emulator_note(comp, &emu),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            let md = hil_tests::live::report(&dir, &o, &res, &note)?;
            println!("{md}\nhil: report in {}", dir.join("report.md").display());
            Ok(())
        }
        Cmd::EmuBench {
            rates,
            secs,
            delay_ms,
            out,
        } => {
            guard_signals("hil-bench-", || {})?;
            down("hil-bench-")?;
            let tb = Testbed::builder()
                .prefix("hil-bench-")
                .subnet("10.76.0.0/16".parse()?)
                .up(&["a", "b"], &[])?;
            let comp = tb.calibrate("a", "b")?;
            tb.set_compensation(comp);
            let res = hil_tests::bench::rate_sweep(&tb, "a", "b", delay_ms, &rates, secs)?;
            drop(tb);
            let mut md = format!(
                "# Emulator precision against packet rate\n\nOne link of {delay_ms} ms (no jitter, no loss), {secs} s per rate, 64-byte UDP datagrams; one-way error = kernel receive stamp - kernel send stamp - {delay_ms} ms (one clock: the emulator's own error, not the measuring threads' wake-ups), with {:.0} µs calibrated compensation. Lateness: the delivery thread's write time minus due time.\n\n| rate (pkt/s) | sent | received | error p50 (ms) | error p99 (ms) | error max (ms) | lateness p50 / p99 / p99.9 / max (µs) |\n|---|---|---|---|---|---|---|\n",
                comp.as_secs_f64() * 1e6
            );
            for r in &res {
                md +=
                    &format!(
                    "| {} | {} | {} | {:+.3} | {:+.3} | {:+.3} | {:.0} / {:.0} / {:.0} / {:.0} |\n",
                    r.rate_pps, r.sent, r.received, r.error_p50_ms, r.error_p99_ms, r.error_max_ms,
                    r.lateness_us.p50, r.lateness_us.p99, r.lateness_us.p999, r.lateness_us.max
                );
            }
            println!("{md}");
            match out {
                Some(dir) => write_report(&dir, &md),
                None => Ok(()),
            }
        }
        Cmd::Fidelity {
            prober,
            cluster,
            nodes,
            probes,
            interval_ms,
            duration_s,
            agent_bin,
            agents,
            no_compensate,
            subnet,
            run,
        } => {
            let prefix = &run.prefix;
            if prefix.is_empty() {
                bail!("--prefix must not be empty (teardown deletes namespaces by prefix)");
            }
            guard_signals(prefix, || {})?;
            let cl =
                acoa_shared::model::load_cluster(&cluster).map_err(|e| anyhow::anyhow!("{e}"))?;
            let names: Vec<String> = if nodes.is_empty() {
                cl.nodes.iter().map(|n| n.name.clone()).collect()
            } else {
                nodes
            };
            let numbered: Vec<(String, u32)> = names
                .iter()
                .map(|n| {
                    cl.nodes
                        .iter()
                        .position(|x| &x.name == n)
                        .map(|i| (n.clone(), i as u32 + 1))
                        .with_context(|| format!("unknown node {n}"))
                })
                .collect::<Result<_>>()?;
            down(prefix)?;
            let dir = run.dir(&format!(
                "fidelity-{}",
                format!("{prober:?}").to_lowercase()
            ));
            let t0 = Instant::now();
            let tb = Testbed::builder()
                .prefix(prefix)
                .subnet(subnet.parse()?)
                .host(prober == Prober::Agent)
                .up_numbered(&numbered, &cl.links)
                .context("bringing the testbed up")?;
            println!(
                "hil: {} nodes up in {:.1} s",
                names.len(),
                t0.elapsed().as_secs_f64()
            );
            let comp = if no_compensate || names.len() < 2 {
                Duration::ZERO
            } else {
                tb.calibrate(&names[0], &names[1])?
            };
            tb.set_compensation(comp);
            println!(
                "hil: emulator overhead compensation {:.0} µs per packet",
                comp.as_secs_f64() * 1e6
            );
            let (rows, how) = match prober {
                Prober::Reference => {
                    let rows = fidelity::reference(
                        &tb,
                        &names,
                        &cl.links,
                        probes,
                        Duration::from_millis(interval_ms),
                    )?;
                    let how = format!(
                        "Prober: the testbed's reference UDP echo prober, {probes} probes per directed pair every {interval_ms} ms, all {} pairs at once; latency = median round trip / 2 (includes the kernel's and emulator's own path, ~0.15 ms each way). Emulated: `{}` through `linkemu` (one TUN per namespace, user-space delay/jitter/loss).",
                        names.len() * (names.len() - 1),
                        cluster.display()
                    );
                    (rows, how)
                }
                Prober::Agent => {
                    let o = agents.options(&agent_bin);
                    let clock = &agents.clock;
                    let rows = hil_tests::agents::fidelity(
                        &tb,
                        &cl,
                        &names,
                        &o,
                        Duration::from_secs(duration_s),
                        &dir.join("run"),
                    )?;
                    let how = format!(
                        "Prober: the edge agents (`{}`{}{}), one per node namespace, `[probe] clock = \"{clock}\"` ({}), reporting link metrics over MQTT (Mosquitto on the testbed's host endpoint); the last metrics of every pair after {duration_s} s. Emulated: `{}` through `linkemu`.",
                        agent_bin.display(),
                        if agents.agent_rt { ", SCHED_FIFO" } else { "" },
                        match &agents.agent_bin_aarch64 {
                            Some(b) => format!("; the aarch64 nodes run `{}` under qemu-aarch64-static, normal priority", b.display()),
                            None => String::new(),
                        },
                        if clock == "synchronized" {
                            "one-way delays: every namespace shares the host's clock; expected = the table's value of that direction, success of that direction"
                        } else {
                            "half the round trip: expected = (latency(A->B) + latency(B->A)) / 2, round-trip success"
                        },
                        cluster.display()
                    );
                    (rows, how)
                }
            };
            let emu = tb.stats();
            drop(tb);
            let summary = fidelity::summarize(&rows);
            let how = format!(
                "{how}\n\nEmulator overhead compensation: {:.0} µs subtracted from every non-zero one-way delay (calibrated: the median one-way delay over a 1 ms link from the kernel send stamp to the kernel receive stamp, minus 1 ms; `--no-compensate` to disable).\n\nEmulator during the run: {} packets delivered, {} dropped by emulated loss; delivery lateness p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs, max {:.0} µs.",
                comp.as_secs_f64() * 1e6,
                emu.delivered, emu.dropped, emu.lateness_us.p50, emu.lateness_us.p99, emu.lateness_us.p999, emu.lateness_us.max
            );
            let md = report::fidelity_report(
                &dir,
                "Experiment 1: measurement fidelity",
                &how,
                &rows,
                &summary,
            )?;
            println!("{md}");
            println!("hil: report in {}", dir.join("report.md").display());
            Ok(())
        }
    }
}

/// The emulator's compensation and counters over a run, one sentence.
fn emulator_note(comp: Duration, emu: &StatsSnapshot) -> String {
    format!(
        "Emulator: compensation {:.0} µs; {} packets delivered, {} dropped by emulated loss; lateness p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs.",
        comp.as_secs_f64() * 1e6, emu.delivered, emu.dropped, emu.lateness_us.p50, emu.lateness_us.p99, emu.lateness_us.max
    )
}

/// Writes `md` to `dir/report.md` and says where.
fn write_report(dir: &Path, md: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.md"), md)?;
    println!("hil: report in {}", dir.join("report.md").display());
    Ok(())
}

fn load_cluster(path: &std::path::Path) -> Result<acoa_shared::model::Cluster> {
    acoa_shared::model::load_cluster(path).map_err(|e| anyhow::anyhow!("{e}"))
}

fn load_apps(paths: &[PathBuf]) -> Result<Vec<acoa_shared::model::Application>> {
    paths
        .iter()
        .map(|p| acoa_shared::model::load_application(p).map_err(|e| anyhow::anyhow!("{e}")))
        .collect()
}

/// The whole cluster as a testbed under `prefix` (node i of the file at address number i + 1,
/// with the host endpoint), after removing what a killed run left there, with Ctrl-C tearing
/// it down, and calibrated (the emulator's own overhead compensated); returns the compensation.
fn cluster_testbed(cl: &acoa_shared::model::Cluster, prefix: &str) -> Result<(Testbed, Duration)> {
    if prefix.is_empty() {
        bail!("--prefix must not be empty");
    }
    guard_signals(prefix, || {})?;
    down(prefix)?;
    let names: Vec<&str> = cl.nodes.iter().map(|n| n.name.as_str()).collect();
    let tb = Testbed::builder()
        .prefix(prefix)
        .host(true)
        .up(&names, &cl.links)?;
    let comp = tb.calibrate(names[0], names[1])?;
    tb.set_compensation(comp);
    Ok((tb, comp))
}

/// Deletes every namespace whose name starts with `prefix`; returns how many.
fn down(prefix: &str) -> Result<usize> {
    Ok(netns::del_prefixed(prefix)?)
}

fn guard_signals(prefix: &str, cleanup: impl Fn() + Send + 'static) -> Result<()> {
    Ok(hil_tests::agents::guard_signals(prefix, cleanup)?)
}
