//! Load benchmark of the control plane (not a test): N simulated agents — lightweight MQTT
//! clients publishing real signed link metrics every second and their node report on each
//! connection and every `--report-every-s` (10 s, the agent's `report_max_interval_s`: nothing
//! changes in a simulated node) — against the real `cloud-broker serve` (embedded broker, or
//! one or several Mosquitto) in its own process. As a real agent, each reports its network
//! coordinate and measures the peers of its signed peer list (up to 32), so the control plane
//! estimates the pairs nobody measured, places on them and explores those placements;
//! `--no-coords` gives the lighter fleet of the runs before 2026-12-05 (fixed peers: the
//! train's nodes and four clouds, no coordinate). Prints the control plane's ingest rate, CPU
//! and peak memory, each Mosquitto's CPU and RSS, the peer lists' sizes, and the time from an
//! application's publication to the last of its desired states being published (p50, p99).
//!
//! ```text
//! cargo build --release -p cloud-broker --examples
//! target/release/examples/loadgen --nodes 1000 --measure-s 30 --apps 40
//! # fleet sizes one after another, the last one with a 10-minute memory curve:
//! nice -n -10 target/release/examples/loadgen --nodes 100:60,1000:60,5000:600 --apps 20
//! # the same load through an external Mosquitto (broker memory apart from ours):
//! target/release/examples/loadgen --nodes 5000:300 --mosquitto
//! # the file store and etcd side by side (each fleet size once per store; etcd: one member
//! # started here, its writes per second and database size reported):
//! target/release/examples/loadgen --nodes 5000:600 --stores file,etcd
//! # 50,000 nodes: four Mosquitto (127.0.0.10-13, one port each), the agents in four child
//! # processes of 12,500 connections (one process may hold 20,000 open files here), reniced
//! # to 19 so that they stand for machines of their own rather than take the control plane's:
//! target/release/examples/loadgen --nodes 50000:60 --mosquitto --brokers 4 --agent-procs 4 \
//!     --agent-nice 19
//! # and 90 s more after the applications, while their explorations run:
//! #   ... --after-s 90
//! ```
//!
//! On a machine shared with builds, run it with a higher priority (`nice -n -10`): starved of
//! CPU, the simulated agents miss their reports and nodes are lost and join again, which is
//! a different experiment.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use clap::Parser;
use cloud_broker::identity::{DataDir, Inventory, NodeEntry};
use cloud_broker::testkit::engine::chain_app_yaml;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

mod fleet;
mod procs;
mod report;

use procs::{etcd_status, proc_cpu_ticks, proc_status_kb, smaps_anon_kb, Killed, Mosq};
use report::Summary;

#[derive(Parser, Clone)]
struct Args {
    /// Fleet sizes, one control plane each, one after another: `N` or `N:SECONDS` (a
    /// measurement window of its own), comma-separated, e.g. `100:60,1000:60,5000:600`.
    #[arg(long, default_value = "1000", value_delimiter = ',')]
    nodes: Vec<String>,
    /// Seconds of steady state over which ingest, CPU and memory are measured (RSS sampled
    /// every 10 s; per-minute min/max printed).
    #[arg(long, default_value_t = 30)]
    measure_s: u64,
    /// Applications published one after another (latency samples).
    #[arg(long, default_value_t = 40)]
    apps: usize,
    /// The applications published get this many stages between their sensor and their
    /// database, in a chain (`testkit::engine::chain_app_yaml`; 0: the three-component
    /// application, `bench_app_yaml`).
    #[arg(long, default_value_t = 0)]
    stages: usize,
    /// A simulated agent sends its link metrics every this many milliseconds (the agent's
    /// `report_period_ms`); the control plane is started with a node timeout and evidence
    /// window of three periods (at least 10 s).
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// The control plane binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Extra environment of the control plane, `KEY=VALUE` (e.g. `MALLOC_ARENA_MAX=2`).
    #[arg(long)]
    cp_env: Vec<String>,
    /// An extra argument of the control plane's `serve` (repeated; e.g.
    /// `--cp-arg=--peers-rotate-s=0`).
    #[arg(long, allow_hyphen_values = true)]
    cp_arg: Vec<String>,
    /// Run the load through an external Mosquitto (`serve --broker-url`, configured by
    /// `cloud-broker mosquitto-config`) instead of the embedded broker: separates the
    /// broker's memory from the control plane's own.
    #[arg(long)]
    mosquitto: bool,
    /// With --mosquitto: this many Mosquitto instances, each on its own loopback address
    /// (127.0.0.10, .11, ...) and port; node i connects to broker i % brokers, the control
    /// plane to all of them (`serve --broker-url` with the list). One process holds at most
    /// 20,000 open files here: 50,000 nodes need at least 3.
    #[arg(long, default_value_t = 1)]
    brokers: usize,
    /// Run the simulated agents in this many child processes (0: in this process), each a
    /// contiguous range of nodes (under 19,000 connections each).
    #[arg(long, default_value_t = 0)]
    agent_procs: usize,
    /// With --agent-procs: renice the agent processes to this niceness once started (e.g. 19:
    /// they get what the control plane and the brokers leave of the cores, as a fleet on
    /// other machines would; 0: as this process).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    agent_nice: i32,
    /// A simulated agent sends its link metrics every period and its node report on every
    /// connection and then every this many seconds (the agent's `report_max_interval_s`:
    /// nothing changes in a simulated node); 0: every period (the agent before issue 16).
    #[arg(long, default_value_t = 10)]
    report_every_s: u64,
    /// The simulated agents report no network coordinate and measure fixed peers (their
    /// group, four clouds), whatever their peer list says: the runs before 2026-12-05. The
    /// control plane then estimates no pair, its peer lists take no nearest peers, and no
    /// placement rests on estimates, so none is explored. By default each agent reports its
    /// coordinate and measures the peers of its signed list (up to 32), so that the targeted
    /// probes of an exploration are measured.
    #[arg(long)]
    no_coords: bool,
    /// Seconds the load goes on after the applications are placed: their explorations run
    /// then (a round waits up to 30 s for its targeted probes, which the simulated agents do
    /// not send), and the control plane's CPU and ingest over that time are printed; the peak
    /// RSS is read after it.
    #[arg(long, default_value_t = 0)]
    after_s: u64,
    /// (internal) Be a child process running the agents of nodes FROM..TO.
    #[arg(long, hide = true)]
    child: Option<String>,
    #[arg(long, hide = true)]
    child_total: Option<usize>,
    #[arg(long, hide = true, value_delimiter = ',')]
    child_brokers: Vec<String>,
    /// The stores to run each fleet size with, one after the other: `file`, `etcd` (one etcd
    /// member started for the run, with its data in the run's directory).
    #[arg(long, value_delimiter = ',', default_value = "file")]
    stores: Vec<StoreChoice>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum StoreChoice {
    File,
    Etcd,
}

fn cadence(args: &Args) -> fleet::Cadence {
    fleet::Cadence {
        period: Duration::from_millis(args.period_ms),
        report_every: (args.report_every_s * 1000 / args.period_ms.max(1)).max(1),
        coords: !args.no_coords,
    }
}

/// The ingest rates (msg/s) the control plane's stats lines give.
fn ingest_rates(stats: &[String]) -> Vec<f64> {
    stats
        .iter()
        .filter_map(|l| l.split("ingest ").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let k = ((p / 100.0) * (s.len() as f64 - 1.0)).round() as usize;
    s[k.min(s.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(range) = &args.child {
        let (from, to) = range
            .split_once("..")
            .ok_or_else(|| anyhow::anyhow!("--child: FROM..TO"))?;
        let brokers = args
            .child_brokers
            .iter()
            .map(|b| {
                let (h, p) = b
                    .rsplit_once(':')
                    .ok_or_else(|| anyhow::anyhow!("--child-brokers: HOST:PORT"))?;
                Ok((h.to_string(), p.parse()?))
            })
            .collect::<anyhow::Result<Vec<(String, u16)>>>()?;
        return fleet::child_main(
            from.parse()?..to.parse()?,
            args.child_total.unwrap_or(0),
            brokers,
            cadence(&args),
        );
    }
    anyhow::ensure!(
        args.brokers >= 1 && (args.brokers == 1 || args.mosquitto),
        "--brokers above 1 needs --mosquitto"
    );
    let mut runs = vec![];
    for spec in &args.nodes {
        let (n, secs) = match spec.split_once(':') {
            Some((n, s)) => (n.trim().parse::<usize>()?, s.trim().parse::<u64>()?),
            None => (spec.trim().parse::<usize>()?, args.measure_s),
        };
        runs.push((n, secs));
    }
    let mut summaries = vec![];
    let runs: Vec<(usize, u64, StoreChoice)> = runs
        .into_iter()
        .flat_map(|(n, secs)| args.stores.iter().map(move |s| (n, secs, *s)))
        .collect();
    for (n, secs, store) in runs {
        // a fresh runtime per fleet size: the previous one's simulated agents end with it
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_stack_size(16 << 20)
            .enable_all()
            .build()?;
        let a = args.clone();
        let s = rt.block_on(async move { tokio::spawn(bench(a, n, secs, store)).await? })?;
        rt.shutdown_timeout(Duration::from_secs(2));
        summaries.push(s);
        std::thread::sleep(Duration::from_secs(2));
    }
    report::print(&summaries);
    Ok(())
}

async fn bench(
    args: Args,
    n: usize,
    measure_s: u64,
    store: StoreChoice,
) -> anyhow::Result<Summary> {
    let dir = tempfile::tempdir()?;
    let etcd = match store {
        StoreChoice::File => None,
        StoreChoice::Etcd => Some(acoa_test_support::etcd::EtcdCluster::start(1, dir.path())),
    };
    let endpoints = etcd.as_ref().map(|e| e.endpoints());
    let data = dir.path().join("data");
    let dd = DataDir::new(&data);
    let mut inv = Inventory::default();
    for i in 0..n {
        inv.nodes.insert(
            fleet::node_profile(i, n).name,
            NodeEntry {
                password: fleet::password(i),
                public_key: Some(wire::keys::public_hex(&fleet::node_key(i).verifying_key())),
            },
        );
    }
    dd.save_inventory(&inv)?;
    let creds = dd.credentials()?;

    let bin = args.bin.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("cloud-broker")
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut mosq: Vec<Mosq> = Vec::new();
    // where the simulated agents connect (node i to broker i % len)
    let mut agent_brokers = vec![("127.0.0.1".to_string(), port)];
    // where the control plane, the observer and the admin connect (Mosquitto: each broker's
    // control plane's listener)
    let mut cp_brokers = agent_brokers.clone();
    // the silence after which a node is judged, and the evidence window: three periods of
    // the simulated agents' messages (as a fleet reporting every `period_ms` would be run)
    let window_ms = (3 * args.period_ms).max(10_000);
    let mut serve_args = vec![
        "serve".to_string(),
        "--stats-every-ms".into(),
        "5000".into(),
        "--node-timeout-ms".into(),
        window_ms.to_string(),
        "--evidence-window-ms".into(),
        window_ms.to_string(),
        "--reevaluate-ms".into(),
        "3600000".into(),
    ];
    serve_args.extend(args.cp_arg.iter().cloned());
    if args.mosquitto {
        // mosquitto drops to its own user: it must be able to reach its files
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        // broker b on its own loopback address 127.0.0.(10 + b) and port: each (address,
        // port) destination gets its own ephemeral source ports
        agent_brokers.clear();
        cp_brokers.clear();
        for b in 0..args.brokers {
            let host = if args.brokers == 1 {
                "127.0.0.1".to_string()
            } else {
                format!("127.0.0.{}", 10 + b)
            };
            let free = || -> anyhow::Result<u16> {
                Ok(std::net::TcpListener::bind((host.as_str(), 0))?
                    .local_addr()?
                    .port())
            };
            let (port, cport) = (free()?, free()?);
            let conf = dir.path().join(format!("mosquitto-{b}"));
            if b == 0 {
                let st = Command::new(&bin)
                    .arg("--data-dir")
                    .arg(&data)
                    .args(["mosquitto-config", "--out"])
                    .arg(&conf)
                    .args(["--listen", &format!("{host}:{port}")])
                    .args(["--control-listen", &format!("{host}:{cport}")])
                    .status()?;
                anyhow::ensure!(st.success(), "mosquitto-config failed");
            } else {
                // the same logins and ACL: hashing 50,000 passwords takes a minute, once is
                // enough (a copy with its owners, then the listener and paths of its own)
                let first = dir.path().join("mosquitto-0");
                let st = Command::new("cp")
                    .arg("-a")
                    .arg(&first)
                    .arg(&conf)
                    .status()?;
                anyhow::ensure!(st.success(), "cannot copy {}", first.display());
                let text = std::fs::read_to_string(first.join("mosquitto.conf"))?;
                let ((h0, p0), (_, c0)) = (&agent_brokers[0], &cp_brokers[0]);
                let text = text
                    .replace(&*first.to_string_lossy(), &conf.to_string_lossy())
                    .replace(
                        &format!("listener {p0} {h0}"),
                        &format!("listener {port} {host}"),
                    )
                    .replace(
                        &format!("listener {c0} {h0}"),
                        &format!("listener {cport} {host}"),
                    );
                std::fs::write(conf.join("mosquitto.conf"), text)?;
            }
            let m = Mosq(
                Command::new("mosquitto")
                    .arg("-c")
                    .arg(conf.join("mosquitto.conf"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            );
            println!("external mosquitto {b} (pid {}) on {host}:{port}", m.0.id());
            mosq.push(m);
            agent_brokers.push((host.clone(), port));
            cp_brokers.push((host, cport));
        }
        // each reads a password file and an ACL of the whole inventory first (one to five
        // minutes at 50,000 nodes, four brokers on two cores): all started, then waited for
        let t = Instant::now();
        for (host, port) in agent_brokers.iter().chain(&cp_brokers) {
            while std::net::TcpStream::connect((host.as_str(), *port)).is_err() {
                anyhow::ensure!(
                    t.elapsed() < Duration::from_secs(900),
                    "mosquitto on {host}:{port} did not start"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        println!(
            "{} mosquitto up after {:.1} s",
            agent_brokers.len(),
            t.elapsed().as_secs_f64()
        );
        let cp_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let urls: Vec<String> = cp_brokers
            .iter()
            .map(|(h, p)| format!("mqtt://{h}:{p}"))
            .collect();
        serve_args.extend([
            "--listen".into(),
            format!("127.0.0.1:{cp_port}"),
            "--broker-url".into(),
            urls.join(","),
        ]);
    } else {
        serve_args.extend(["--listen".into(), format!("127.0.0.1:{port}")]);
    }
    // the observer and the admin use the first broker
    let (obs_host, port) = cp_brokers[0].clone();
    if let Some(e) = &endpoints {
        serve_args.extend([
            "--store".into(),
            "etcd".into(),
            "--etcd-endpoints".into(),
            e.clone(),
        ]);
    }
    let etcd_start = endpoints.as_deref().and_then(etcd_status);
    let t_start = Instant::now();
    let mut cmd = Command::new(&bin);
    cmd.arg("--data-dir")
        .arg(&data)
        .args(&serve_args)
        .env(
            "RUST_LOG",
            "warn,cloud_broker::engine=info,cloud_broker::serve=info",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for kv in &args.cp_env {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    // the control plane's log: keep the stats lines, count the rest
    let last_stats = Arc::new(Mutex::new(Vec::<String>::new()));
    let joined = Arc::new(AtomicU64::new(0));
    let collisions_line = Arc::new(Mutex::new(String::new()));
    {
        let stderr = child.stderr.take().unwrap();
        let last_stats = last_stats.clone();
        let joined = joined.clone();
        let _ = collisions_line;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(" joined: ") {
                    joined.fetch_add(1, Ordering::Relaxed);
                } else if line.contains("stats: ") {
                    last_stats.lock().unwrap().push(line);
                } else if line.contains("peer lists ") && line.contains(" published: ") {
                    // each round of peer lists (membership, coordinates, rotation)
                    println!(
                        "cp: {} {}",
                        line.split(' ').next().unwrap_or(""),
                        line.split("probes: ").last().unwrap_or(&line)
                    );
                } else if line.contains(" placed (")
                    || line.contains(": exploration ")
                    || line.contains(" re-placed (")
                {
                    println!(
                        "cp: {}",
                        line.split("cloud_broker::engine").last().unwrap_or(&line)
                    );
                } else if line.contains("decision loop: ") {
                    // how the loop spent each 10 s (deciding, carrying out)
                    println!("cp: {}", line.split("serve: ").last().unwrap_or(&line));
                } else if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("cp: {line}");
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // observer: every desired state, as the admin sees it (the embedded broker has no ACL)
    let desired_seen: Arc<Mutex<HashMap<String, (Instant, usize)>>> =
        Arc::new(Mutex::new(HashMap::new()));
    let published_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    // the size of each node's last peer list
    let peer_lists: Arc<Mutex<HashMap<String, usize>>> = Arc::new(Mutex::new(HashMap::new()));
    {
        let mut o = MqttOptions::new("loadgen-observer", obs_host.clone(), port);
        // Mosquitto's ACL lets only the control plane's login read desired states
        let login = if args.mosquitto {
            &creds.control_plane
        } else {
            &creds.admin
        };
        o.set_credentials(&login.username, &login.password);
        o.set_max_packet_size(4 << 20, 4 << 20);
        let (c, mut el) = AsyncClient::new(o, 100);
        let seen = desired_seen.clone();
        let lists = peer_lists.clone();
        tokio::spawn(async move {
            loop {
                match el.poll().await {
                    Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                        let _ = c
                            .subscribe("acoa/v1/nodes/+/desired", QoS::AtLeastOnce)
                            .await;
                        let _ = c.subscribe(topics::peers("+"), QoS::AtMostOnce).await;
                    }
                    Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                        let now = Instant::now();
                        let msg = wire::decode_unverified(&p.payload);
                        if let Ok(Message::PeerList(l)) = &msg {
                            lists
                                .lock()
                                .unwrap()
                                .insert(l.node.to_string(), l.peers.len());
                        }
                        if let Ok(Message::DesiredState(d)) = msg {
                            let mut s = seen.lock().unwrap();
                            for cs in d.containers.iter() {
                                let e = s.entry(cs.app.to_string()).or_insert((now, 0));
                                e.0 = now;
                                e.1 += 1;
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
    }

    // the simulated agents: in this process, or in child processes (one each a contiguous
    // range of nodes, each node on broker i % brokers)
    let sent = Arc::new(AtomicU64::new(0));
    // how late the simulated agents are themselves (their ticks, their sends dropped at the
    // source): the most over the run, and the most since the fleet joined
    let agents_late = Arc::new(fleet::Lateness::default());
    let t_connect = Instant::now();
    let cadence = cadence(&args);
    let mut children = Vec::new();
    if args.agent_procs == 0 {
        let sent = sent.clone();
        let agent_brokers = agent_brokers.clone();
        let late = agents_late.clone();
        tokio::spawn(async move {
            fleet::start_agents(0..n, n, &agent_brokers, cadence, 200, sent, late).await
        });
    } else {
        let procs = args.agent_procs;
        let list: Vec<String> = agent_brokers
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        for c in 0..procs {
            let (from, to) = (c * n / procs, (c + 1) * n / procs);
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args([
                "--child",
                &format!("{from}..{to}"),
                "--child-total",
                &n.to_string(),
                "--child-brokers",
                &list.join(","),
                "--period-ms",
                &args.period_ms.to_string(),
                "--report-every-s",
                &args.report_every_s.to_string(),
            ]);
            if args.no_coords {
                cmd.arg("--no-coords");
            }
            let mut child = Killed(cmd.stdout(Stdio::piped()).spawn()?);
            if args.agent_nice != 0 {
                // the simulated fleet stands for other machines: it gets what the control
                // plane and the brokers leave of these cores
                let _ = Command::new("renice")
                    .args([
                        "-n",
                        &args.agent_nice.to_string(),
                        "-p",
                        &child.0.id().to_string(),
                    ])
                    .stdout(Stdio::null())
                    .status();
            }
            let counted = Arc::new(AtomicU64::new(0));
            let stdout = child.0.stdout.take().unwrap();
            {
                let counted = counted.clone();
                let (late, dropped) = (agents_late.clone(), Arc::new(AtomicU64::new(0)));
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        if let Some(v) = line.strip_prefix("sent ").and_then(|v| v.parse().ok()) {
                            counted.store(v, Ordering::Relaxed);
                        } else if let Some((ms, d)) = line
                            .strip_prefix("late ")
                            .and_then(|r| r.split_once(" dropped "))
                        {
                            let (Ok(ms), Ok(d)) = (ms.parse::<u64>(), d.parse::<u64>()) else {
                                continue;
                            };
                            let before = late.late_max_ms.fetch_max(ms, Ordering::Relaxed);
                            if ms >= 5000 && ms > before {
                                println!(
                                    "agents {from}..{to}: their ticks {:.1} s late (the simulated fleet is behind its own schedule)",
                                    ms as f64 / 1000.0
                                );
                            }
                            let d0 = dropped.swap(d, Ordering::Relaxed);
                            late.dropped
                                .fetch_add(d.saturating_sub(d0), Ordering::Relaxed);
                        }
                    }
                });
            }
            println!("agents {from}..{to}: child process {}", child.0.id());
            children.push((child, counted));
        }
        let counters: Vec<Arc<AtomicU64>> = children.iter().map(|c| c.1.clone()).collect();
        let sent = sent.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                sent.store(
                    counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
                    Ordering::Relaxed,
                );
            }
        });
    }
    // all joined, or no progress for 30 s (the figures are then of the part that joined)
    let (mut last, mut since) = (0, Instant::now());
    while (joined.load(Ordering::Relaxed) as usize) < n {
        let j = joined.load(Ordering::Relaxed) as usize;
        if j != last {
            (last, since) = (j, Instant::now());
        }
        if since.elapsed() > Duration::from_secs(30)
            || t_connect.elapsed() > Duration::from_secs(300)
        {
            println!("only {j} of {n} nodes joined, measuring anyway");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{} of {n} nodes joined in {:.1} s (control plane RSS {} MiB now, at most {} MiB so far)",
        joined.load(Ordering::Relaxed),
        t_connect.elapsed().as_secs_f64(),
        proc_status_kb(pid, "VmRSS") / 1024,
        proc_status_kb(pid, "VmHWM") / 1024
    );
    // settle, then measure
    tokio::time::sleep(Duration::from_secs(6)).await;
    let hz = 100.0; // USER_HZ
    let etcd0 = endpoints.as_deref().and_then(etcd_status);
    let mosq_pids: Vec<u32> = mosq.iter().map(|m| m.0.id()).collect();
    let mosq_c0: Vec<u64> = mosq_pids.iter().map(|p| proc_cpu_ticks(*p)).collect();
    let mut mosq_peak_kb = vec![0u64; mosq_pids.len()];
    let (c0, t0, s0) = (
        proc_cpu_ticks(pid),
        Instant::now(),
        sent.load(Ordering::Relaxed),
    );
    let stats_before = last_stats.lock().unwrap().len();
    let late_join = agents_late.late_max_ms.swap(0, Ordering::Relaxed);
    let dropped0 = agents_late.dropped.load(Ordering::Relaxed);
    let rss_joined = proc_status_kb(pid, "VmRSS") as f64 / 1024.0;
    let mut rss_samples: Vec<(u64, u64)> = vec![];
    let mut next = Duration::from_secs(10);
    while t0.elapsed() < Duration::from_secs(measure_s) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if t0.elapsed() >= next || t0.elapsed() >= Duration::from_secs(measure_s) {
            next += Duration::from_secs(10);
            let (rss, anon) = (proc_status_kb(pid, "VmRSS"), smaps_anon_kb(pid));
            let mut broker = String::new();
            for (b, p) in mosq_pids.iter().enumerate() {
                let kb = proc_status_kb(*p, "VmRSS");
                mosq_peak_kb[b] = mosq_peak_kb[b].max(kb);
                broker += &format!(", mosquitto {b} {} MiB", kb / 1024);
            }
            println!(
                "{n} nodes, t+{:>4} s: control plane RSS {} MiB (anonymous {} MiB){broker}",
                t0.elapsed().as_secs(),
                rss / 1024,
                anon / 1024
            );
            rss_samples.push((t0.elapsed().as_secs(), rss));
        }
    }
    let mut per_minute: Vec<(u64, f64, f64)> = vec![];
    for (t, kb) in &rss_samples {
        let m = t.saturating_sub(1) / 60 + 1;
        let mib = *kb as f64 / 1024.0;
        match per_minute.last_mut() {
            Some(e) if e.0 == m => {
                e.1 = e.1.min(mib);
                e.2 = e.2.max(mib);
            }
            _ => per_minute.push((m, mib, mib)),
        }
    }
    let (c1, wall, s1) = (
        proc_cpu_ticks(pid),
        t0.elapsed().as_secs_f64(),
        sent.load(Ordering::Relaxed),
    );
    let cpu = (c1 - c0) as f64 / hz / wall;
    let brokers: Vec<(f64, f64)> = mosq_pids
        .iter()
        .zip(&mosq_c0)
        .zip(&mosq_peak_kb)
        .map(|((p, c0), kb)| {
            (
                (proc_cpu_ticks(*p) - c0) as f64 / hz / wall,
                *kb as f64 / 1024.0,
            )
        })
        .collect();
    let lists: Vec<usize> = peer_lists.lock().unwrap().values().copied().collect();
    let lists = (
        lists.len(),
        lists.iter().min().copied().unwrap_or(0),
        lists.iter().sum::<usize>() as f64 / lists.len().max(1) as f64,
        lists.iter().max().copied().unwrap_or(0),
    );
    println!(
        "{n} nodes: peer lists seen {} (peers min {} / mean {:.1} / max {}); mosquitto CPU (cores) and peak RSS (MiB): {:?}",
        lists.0, lists.1, lists.2, lists.3, brokers
    );
    let etcd1 = endpoints.as_deref().and_then(etcd_status);
    let etcd_figures = match (etcd_start, etcd0, etcd1) {
        (Some((_, db_start)), Some((r0, _)), Some((r1, db1))) => Some((
            (r1 - r0) as f64 / wall,
            db_start,
            db1,
            t_start.elapsed().as_secs_f64(),
        )),
        _ => None,
    };
    if let Some((w, _, db1, secs)) = etcd_figures {
        println!(
            "{n} nodes on etcd: {w:.1} writes/s over the window, database {:.1} MiB after {secs:.0} s",
            db1 as f64 / 1048576.0
        );
    }
    let offered = (s1 - s0) as f64 / wall;
    let ingest = ingest_rates(&last_stats.lock().unwrap()[stats_before..]);

    // latency: publish applications one by one while the load goes on
    let mut o = MqttOptions::new("loadgen-admin", obs_host.clone(), port);
    o.set_credentials(&creds.admin.username, &creds.admin.password);
    let (admin, mut el) = AsyncClient::new(o, 100);
    tokio::spawn(async move { while el.poll().await.is_ok() {} });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let trains = (n - (n / 20).max(4)) / 10;
    let mut lat = vec![];
    // each application's, in the order published ("-": not placed in 10 s)
    let mut per_app = vec![];
    let mut unplaced = 0;
    for k in 0..args.apps {
        let name = format!("bench-{k}");
        let t = Instant::now();
        published_at.lock().unwrap().insert(name.clone(), t);
        admin
            .publish(
                topics::app(&name),
                QoS::AtLeastOnce,
                true,
                chain_app_yaml(&name, k % trains.max(1), 0.5, args.stages),
            )
            .await?;
        let mut done = false;
        while t.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(2)).await;
            if let Some((at, count)) = desired_seen.lock().unwrap().get(&name).copied() {
                if count >= 3 {
                    let ms = at.duration_since(t).as_secs_f64() * 1000.0;
                    lat.push(ms);
                    per_app.push(format!("{ms:.0}"));
                    done = true;
                    break;
                }
            }
        }
        if !done {
            unplaced += 1;
            per_app.push("-".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if args.after_s > 0 {
        let (c0, t0, at) = (
            proc_cpu_ticks(pid),
            Instant::now(),
            last_stats.lock().unwrap().len(),
        );
        // sampled every second; the largest of each 10 s kept, to see when it peaks
        let (mut rss_max, mut per_10s) = (0, vec![]);
        while t0.elapsed() < Duration::from_secs(args.after_s) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rss = proc_status_kb(pid, "VmRSS");
            rss_max = rss_max.max(rss);
            let i = (t0.elapsed().as_secs() / 10) as usize;
            per_10s.resize(per_10s.len().max(i + 1), 0);
            per_10s[i] = per_10s[i].max(rss / 1024);
        }
        let wall = t0.elapsed().as_secs_f64();
        let ingest = ingest_rates(&last_stats.lock().unwrap()[at..]);
        println!(
            "nodes {n}, {wall:.0} s after the applications (their explorations): CPU {:.2} cores, RSS at most {} MiB (the largest of each 10 s: {per_10s:?}), control plane ingest {:?} msg/s",
            (proc_cpu_ticks(pid) - c0) as f64 / hz / wall,
            rss_max / 1024,
            ingest
        );
    }
    let peak_kb = proc_status_kb(pid, "VmHWM");
    let rss_kb = proc_status_kb(pid, "VmRSS");
    println!(
        "nodes {n}: offered {:.0} msg/s, control plane ingest {:.0} msg/s (stats lines: {:?}), CPU {:.2} cores, RSS {:.0} MiB now, peak {:.0} MiB (during measure max {:.0} MiB); publish→desired p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} apps ({} not placed within 10 s)",
        offered,
        if ingest.is_empty() { f64::NAN } else { ingest.iter().sum::<f64>() / ingest.len() as f64 },
        ingest,
        cpu,
        rss_kb as f64 / 1024.0,
        peak_kb as f64 / 1024.0,
        rss_samples.iter().map(|x| x.1).max().unwrap_or(0) as f64 / 1024.0,
        pct(&lat, 50.0),
        pct(&lat, 99.0),
        lat.iter().cloned().fold(f64::NAN, f64::max),
        lat.len(),
        unplaced
    );
    println!(
        "publish→desired per application, ms, in the order published: {}",
        per_app.join(" ")
    );
    let last: Vec<String> = last_stats
        .lock()
        .unwrap()
        .iter()
        .rev()
        .take(1)
        .cloned()
        .collect();
    println!(
        "simulated agents: ticks late at most {:.1} s in the join, {:.1} s from the window on; sends dropped at the source (client queue full) {dropped0} in the join, {} from the window on",
        late_join as f64 / 1000.0,
        agents_late.late_max_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        agents_late.dropped.load(Ordering::Relaxed) - dropped0
    );
    println!(
        "last control plane stats line: {}",
        last.first().map(|s| s.as_str()).unwrap_or("")
    );
    let _ = child.kill();
    let _ = child.wait();
    drop(children);
    drop(mosq);
    drop(etcd);
    Ok(Summary {
        nodes: n,
        store,
        etcd: etcd_figures,
        window_s: wall,
        offered,
        ingest: if ingest.is_empty() {
            f64::NAN
        } else {
            ingest.iter().sum::<f64>() / ingest.len() as f64
        },
        cpu,
        rss_joined_mib: rss_joined,
        rss_end_mib: rss_samples.last().map_or(0.0, |x| x.1 as f64 / 1024.0),
        peak_mib: peak_kb as f64 / 1024.0,
        per_minute,
        p50: pct(&lat, 50.0),
        p99: pct(&lat, 99.0),
        apps: lat.len(),
        unplaced,
        brokers,
        lists,
    })
}
