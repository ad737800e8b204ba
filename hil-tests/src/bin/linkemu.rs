//! `linkemu`: the testbed's user-space wide-area network emulator.
//!
//! ```text
//! linkemu up --cluster FILE [--nodes n01,n02] [--subnet 10.77.0.0/16] [--prefix P] [--host]
//! linkemu down [--name NAME] [--cluster FILE --prefix P]
//! linkemu set FROM TO [--latency-ms X] [--jitter-ms J] [--loss L | --success S] [--both]
//! linkemu compensate US     # subtract the emulator's own overhead from every non-zero delay
//! linkemu get FROM TO | links | stats | reset-stats | nodes | reload | gc
//! ```
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use hil_tests::control::{self, ControlServer};
use hil_tests::emu::{self, Subnet, Testbed, TestbedNode};
use hil_tests::netns;

const STATE_DIR: &str = "/run/acoa-linkemu";

#[derive(Parser)]
#[command(
    name = "linkemu",
    about = "User-space WAN emulator: namespaces, TUN devices, per-direction delay, jitter and loss"
)]
struct Cli {
    /// Name of this emulator instance (state file and default socket under /run/acoa-linkemu)
    #[arg(long, global = true, default_value = "default")]
    name: String,
    /// Control socket (default /run/acoa-linkemu/NAME.sock)
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Brings the namespaces and TUN devices up and forwards until SIGTERM/SIGINT (SIGHUP reloads
    /// the link table from the cluster file); tears everything down on exit
    Up {
        /// Scenario cluster file (nodes and link table)
        #[arg(long)]
        cluster: PathBuf,
        /// Only these nodes (comma-separated); default all of the cluster's
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Node number i (its position in the cluster file, from 1) gets the subnet's address i
        #[arg(long, default_value = "10.77.0.0/16")]
        subnet: String,
        /// Namespace of node N is PREFIX + N
        #[arg(long, default_value = "")]
        prefix: String,
        /// Also a TUN endpoint named `host` in the root namespace (the subnet's last address)
        #[arg(long)]
        host: bool,
        /// Run the forwarder as normal threads (no SCHED_FIFO)
        #[arg(long)]
        no_realtime: bool,
        /// Let jitter reorder packets of one link
        #[arg(long)]
        reorder: bool,
        #[arg(long, default_value_t = 0xac0a00)]
        seed: u64,
        /// Subtract this many µs (the emulator's own overhead) from every non-zero delay
        #[arg(long, default_value_t = 0.0)]
        compensate_us: f64,
    },
    /// Stops a running emulator of this name and deletes its namespaces (idempotent)
    Down {
        /// Without a state file: delete the namespaces of this cluster's nodes
        #[arg(long)]
        cluster: Option<PathBuf>,
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Changes a directed link (or both directions with --both); fields not given keep their value
    Set {
        from: String,
        to: String,
        #[arg(long)]
        latency_ms: Option<f64>,
        #[arg(long)]
        jitter_ms: Option<f64>,
        /// Drop probability 0..=1
        #[arg(long, conflicts_with = "success")]
        loss: Option<f64>,
        /// 1 - loss
        #[arg(long)]
        success: Option<f64>,
        #[arg(long)]
        both: bool,
    },
    /// Shows a directed link
    Get {
        from: String,
        to: String,
    },
    /// Shows every link that is not ideal
    Links,
    /// Counters and delivery lateness (µs)
    Stats,
    ResetStats,
    /// Node names, namespaces and addresses
    Nodes,
    /// Reads the link table again from the cluster file
    Reload,
    /// Subtracts US µs (the emulator's own overhead) from every non-zero delay
    Compensate {
        us: f64,
    },
    /// Deletes namespaces left by library testbeds whose process died
    Gc,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    pid: u32,
    socket: PathBuf,
    cluster: PathBuf,
    nodes: Vec<TestbedNode>,
}

fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

/// A process that has exited but whose parent has not collected it yet (a zombie, state `Z`)
/// is gone for our purposes: waiting for it would wait for its parent.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // the state follows the command name, which is in parentheses and may hold spaces
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn main() -> Result<()> {
    hil_tests::init_logging();
    let cli = Cli::parse();
    let socket = cli
        .socket
        .clone()
        .unwrap_or_else(|| Path::new(STATE_DIR).join(format!("{}.sock", cli.name)));
    let req = |line: &str| -> Result<()> {
        let v = control::request(&socket, line)?;
        use std::io::Write;
        // a closed pipe (`| head`) is not worth a panic
        let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&v)?);
        Ok(())
    };
    match cli.cmd {
        Cmd::Up {
            cluster,
            nodes,
            subnet,
            prefix,
            host,
            no_realtime,
            reorder,
            seed,
            compensate_us,
        } => up(
            &cli.name,
            &socket,
            &cluster,
            &nodes,
            &subnet,
            &prefix,
            host,
            !no_realtime,
            !reorder,
            seed,
            compensate_us,
        ),
        Cmd::Down { cluster, prefix } => down(&cli.name, &socket, cluster.as_deref(), &prefix),
        Cmd::Set {
            from,
            to,
            latency_ms,
            jitter_ms,
            loss,
            success,
            both,
        } => {
            let mut kv = String::new();
            if let Some(v) = latency_ms {
                kv += &format!(" latency_ms={v}");
            }
            if let Some(v) = jitter_ms {
                kv += &format!(" jitter_ms={v}");
            }
            if let Some(v) = loss {
                kv += &format!(" loss={v}");
            }
            if let Some(v) = success {
                kv += &format!(" success={v}");
            }
            if both {
                control::request(&socket, &format!("set {to} {from}{kv}"))?;
            }
            req(&format!("set {from} {to}{kv}"))
        }
        Cmd::Get { from, to } => req(&format!("get {from} {to}")),
        Cmd::Links => req("links"),
        Cmd::Stats => req("stats"),
        Cmd::ResetStats => req("reset-stats"),
        Cmd::Nodes => req("nodes"),
        Cmd::Reload => req("reload"),
        Cmd::Compensate { us } => req(&format!("compensate {us}")),
        Cmd::Gc => {
            println!("deleted {} stale namespaces", emu::gc_stale_testbeds());
            Ok(())
        }
    }
}

fn load_links(cluster: &Path) -> Result<Vec<acoa_shared::model::Link>> {
    Ok(acoa_shared::model::load_cluster(cluster)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .links)
}

#[allow(clippy::too_many_arguments)]
fn up(
    name: &str,
    socket: &Path,
    cluster_file: &Path,
    only: &[String],
    subnet: &str,
    prefix: &str,
    host: bool,
    realtime: bool,
    keep_order: bool,
    seed: u64,
    compensate_us: f64,
) -> Result<()> {
    let cluster =
        acoa_shared::model::load_cluster(cluster_file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let subnet: Subnet = subnet.parse()?;
    for n in only {
        if cluster.node(n).is_none() {
            bail!("unknown node {n} (not in {})", cluster_file.display());
        }
    }
    let numbered: Vec<(String, u32)> = cluster
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| only.is_empty() || only.contains(&n.name))
        .map(|(i, n)| (n.name.clone(), i as u32 + 1))
        .collect();
    // a previous instance of this name: refuse if it runs, clean up if it died
    if let Ok(text) = std::fs::read_to_string(state_path(name)) {
        if let Ok(st) = serde_json::from_str::<State>(&text) {
            if pid_alive(st.pid) && st.pid != std::process::id() {
                bail!(
                    "an emulator named {name} already runs (pid {}); `linkemu down --name {name}` first",
                    st.pid
                );
            }
        }
        down(name, socket, None, prefix)?;
    }
    let term = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, term.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())?;

    let t0 = Instant::now();
    let tb = Testbed::builder()
        .prefix(prefix)
        .subnet(subnet)
        .host(host)
        .realtime(realtime)
        .keep_order(keep_order)
        .seed(seed)
        .up_numbered(&numbered, &cluster.links)
        .context("bringing the emulated network up")?;
    tb.set_compensation(Duration::from_secs_f64(
        compensate_us.clamp(0.0, 10_000.0) / 1e6,
    ));
    let tb = Arc::new(tb);
    let reload: Arc<control::ReloadFn> = {
        let tb = tb.clone();
        let file = cluster_file.to_path_buf();
        Arc::new(move || {
            let links = load_links(&file).map_err(|e| e.to_string())?;
            tb.apply_links(&links).map_err(|e| e.to_string())
        })
    };
    let server = ControlServer::start(
        socket,
        tb.shared().clone(),
        tb.nodes().to_vec(),
        Some(reload.clone()),
    )
    .with_context(|| format!("control socket {}", socket.display()))?;
    let state = State {
        pid: std::process::id(),
        socket: socket.to_path_buf(),
        cluster: cluster_file.to_path_buf(),
        nodes: tb.nodes().to_vec(),
    };
    std::fs::create_dir_all(STATE_DIR)?;
    std::fs::write(state_path(name), serde_json::to_vec_pretty(&state)?)?;
    for n in tb.nodes() {
        println!(
            "{}\t{}\t{}",
            n.name,
            if n.netns.is_empty() { "-" } else { &n.netns },
            n.addr
        );
    }
    println!(
        "linkemu {name}: up, {} endpoints in {:.1} s, control socket {}",
        tb.nodes().len(),
        t0.elapsed().as_secs_f64(),
        socket.display()
    );
    while !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if hup.swap(false, Ordering::Relaxed) {
            match reload() {
                Ok(n) => tracing::info!(links = n, "link table reloaded"),
                Err(e) => tracing::warn!(error = %e, "link table reload failed"),
            }
        }
    }
    tracing::info!("stopping");
    let stats = tb.stats();
    drop(server);
    drop(reload);
    match Arc::try_unwrap(tb) {
        Ok(tb) => tb.down()?,
        Err(tb) => drop(tb), // tears down on drop all the same
    }
    let _ = std::fs::remove_file(state_path(name));
    println!(
        "linkemu {name}: down; delivered {} dropped {} lateness p50 {:.0} µs p99 {:.0} µs max {:.0} µs",
        stats.delivered, stats.dropped, stats.lateness_us.p50, stats.lateness_us.p99, stats.lateness_us.max
    );
    Ok(())
}

fn down(name: &str, socket: &Path, cluster: Option<&Path>, prefix: &str) -> Result<()> {
    let mut namespaces: Vec<String> = Vec::new();
    let mut sock = socket.to_path_buf();
    if let Ok(text) = std::fs::read_to_string(state_path(name)) {
        match serde_json::from_str::<State>(&text) {
            Ok(st) => {
                if st.pid != std::process::id() && pid_alive(st.pid) {
                    let pid = nix::unistd::Pid::from_raw(st.pid as i32);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                    let t = Instant::now();
                    while pid_alive(st.pid) && t.elapsed() < Duration::from_secs(10) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if pid_alive(st.pid) {
                        tracing::warn!(pid = st.pid, "emulator did not stop, killing it");
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                namespaces.extend(st.nodes.into_iter().map(|n| n.netns));
                sock = st.socket;
            }
            Err(e) => tracing::warn!(error = %e, "unreadable state file, ignoring it"),
        }
    }
    if let Some(c) = cluster {
        let cl = acoa_shared::model::load_cluster(c).map_err(|e| anyhow::anyhow!("{e}"))?;
        namespaces.extend(cl.nodes.iter().map(|n| format!("{prefix}{}", n.name)));
    }
    let mut deleted = 0;
    for ns in namespaces.iter().filter(|n| !n.is_empty()) {
        if netns::netns_exists(ns) {
            netns::del_netns(ns)?;
            deleted += 1;
        }
    }
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(state_path(name));
    println!("linkemu {name}: down ({deleted} namespaces deleted)");
    Ok(())
}
