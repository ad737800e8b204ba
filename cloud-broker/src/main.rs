//! `cloud-broker`: the ACOA control plane's command line.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use acoa_shared::wire::keys;
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use cloud_broker::dispatch::WorkersConfig;
use cloud_broker::engine::{EngineConfig, Liveness};

/// mimalloc instead of glibc's malloc (see cloud-broker/Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use cloud_broker::identity::{agent_broker_config, DataDir};
use cloud_broker::serve::{serve, ServeOptions};
use cloud_broker::store::StoreKind;

#[derive(Parser)]
#[command(
    name = "cloud-broker",
    version,
    about = "ACOA control plane: broker, store, schedulers, desired states"
)]
struct Cli {
    /// Where the control plane keeps its key, credentials, inventory and store.
    #[arg(
        long,
        global = true,
        env = "ACOA_DATA_DIR",
        default_value = "/var/lib/acoa-cloud"
    )]
    data_dir: PathBuf,
    /// Log lines on stderr: `text` (readable) or `json` (one object a line, for log shippers).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Where the records and the inventory are kept (`serve`, and `node`, `worker`,
    /// `mosquitto-config` which change or read the inventory).
    #[command(flatten)]
    store: cloud_broker::store::etcd::StoreArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the control plane (embedded broker unless --broker-url is given).
    Serve(Box<ServeArgs>),
    /// Logins of `scheduler worker` processes.
    Worker {
        #[command(subcommand)]
        cmd: WorkerCmd,
    },
    /// The node inventory.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
    /// Publishes an application definition and waits for its placement.
    Apply {
        file: PathBuf,
        #[arg(long)]
        broker_url: Option<String>,
        /// How long to wait for the control plane's verdict.
        #[arg(long, default_value_t = 15)]
        wait_s: u64,
        /// Once placed, how long to wait for the agents to run every component (or refuse one).
        #[arg(long, default_value_t = 10)]
        agents_wait_s: u64,
    },
    /// Deletes an application and its containers.
    Delete {
        app: String,
        #[arg(long)]
        broker_url: Option<String>,
    },
    /// Prints the status of one application or of all, one JSON object a line.
    Status {
        app: Option<String>,
        #[arg(long)]
        broker_url: Option<String>,
    },
    /// Prints an application's revisions (the last 10), which one runs, why others failed,
    /// and its rollout.
    History {
        app: String,
        #[arg(long)]
        broker_url: Option<String>,
    },
    /// Goes back: during a rollout to the revision it started from, else to the last good
    /// revision before the one that runs (or to --to), applied again as a new revision.
    Rollback {
        app: String,
        #[arg(long)]
        to: Option<u64>,
        #[arg(long)]
        broker_url: Option<String>,
        /// How long to wait for the control plane to act on it.
        #[arg(long, default_value_t = 10)]
        wait_s: u64,
    },
    /// Writes Mosquitto's password files, ACL and configuration from the inventory.
    MosquittoConfig {
        #[arg(long)]
        out: PathBuf,
        /// The fleet's listener: agents and workers connect here (`node add --broker-url`).
        #[arg(long, default_value = "127.0.0.1:1883")]
        listen: SocketAddr,
        /// The control plane's listener (`serve --broker-url`, the CLI); by default the
        /// address of --listen with the next port.
        #[arg(long)]
        control_listen: Option<SocketAddr>,
    },
}

// The flags of `serve`: a new one is a field here and a line in `ServeArgs::options`.
#[derive(Args)]
struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:1883")]
    listen: SocketAddr,
    /// External brokers (e.g. Mosquitto configured with `mosquitto-config`), comma-separated:
    /// the control plane takes reports from all and publishes on all (workers use the first).
    #[arg(long, value_name = "URL[,URL...]")]
    broker_url: Option<String>,
    /// The embedded broker also listens here with TLS (`mqtts://`; agents set
    /// `[broker] ca_file`), with --tls-cert and --tls-key.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_listen: Option<SocketAddr>,
    /// The TLS listener's certificate chain (PEM).
    #[arg(long, requires = "tls_listen")]
    tls_cert: Option<PathBuf>,
    /// The TLS listener's private key (PEM).
    #[arg(long, requires = "tls_listen")]
    tls_key: Option<PathBuf>,
    /// A node whose reports stop for this long is judged (lost, or unreachable on evidence).
    #[arg(long, default_value_t = 3000)]
    node_timeout_ms: u64,
    /// How nodes are judged: `evidence` (silence and the peers' link reports: a node cut off
    /// from the cloud only is unreachable and keeps its components for the application's
    /// disconnect policy) or `timer` (lost after --lost-after-s of silence, as Kubernetes).
    #[arg(long, value_enum, default_value_t = LivenessFlag::Evidence)]
    liveness: LivenessFlag,
    /// With --liveness timer: a node silent for this long is lost, seconds.
    #[arg(long, default_value_t = 40)]
    lost_after_s: u64,
    /// With --liveness evidence: a peer's report that a silent node answered counts for this
    /// long, and a silent node no peer reached within it is lost, milliseconds.
    #[arg(long, default_value_t = 10_000)]
    evidence_window_ms: u64,
    /// How often placements are evaluated again.
    #[arg(long, default_value_t = 5000)]
    reevaluate_ms: u64,
    /// Relative score gain a better placement must offer before anything moves.
    #[arg(long, default_value_t = 0.05)]
    hysteresis: f64,
    /// ... sustained over this many evaluations.
    #[arg(long, default_value_t = 3)]
    sustain: u32,
    /// How often the ingest statistics are logged (0: never).
    #[arg(long, default_value_t = 10_000)]
    stats_every_ms: u64,
    /// How often the network-aware descheduler evaluates its applications and the status
    /// documents get the measured use and traffic.
    #[arg(long, default_value_t = 10_000)]
    deschedule_ms: u64,
    /// The relative gain of its score a move must offer the network-aware descheduler
    /// (sustained over `--sustain` evaluations).
    #[arg(long, default_value_t = 0.2)]
    deschedule_threshold: f64,
    /// Peers in each node's neighbour set: its own datacenter or train, the nearest by network
    /// coordinates, a few random (1 to 64; placements may add the links they use on top).
    #[arg(long, default_value_t = 32)]
    peers_k: usize,
    /// Each node's random peers are drawn again this often, the nodes spread over the period,
    /// on the wall clock (every replica draws the same) (0: never): the coordinates and the
    /// search for short pairs need many random peers over time. Each rotation is a new signed
    /// list for the node.
    #[arg(long, default_value_t = 300)]
    peers_rotate_s: u64,
    /// Exploration rounds after a placement that rested on estimated links: each probes the
    /// links around the best placement on estimates and moves only onto measured links (0:
    /// none).
    #[arg(long, default_value_t = cloud_broker::engine::DEFAULT_EXPLORE_ROUNDS)]
    explore_rounds: u32,
    /// Candidate nodes per component in an exploration round (1 to 16; at most this squared
    /// links probed per channel and round).
    #[arg(long, default_value_t = acoa_scheduler::explore::DEFAULT_WIDTH)]
    explore_width: usize,
    #[arg(long, default_value_t = 200)]
    tick_ms: u64,
    /// Where placement jobs are computed: in this process, or by `scheduler worker`
    /// processes sharing the load over MQTT (see `worker add`).
    #[arg(long, value_enum, default_value_t = SchedulerWorkers::InProcess)]
    scheduler_workers: SchedulerWorkers,
    /// External workers: a job not answered this long is published again ...
    #[arg(long, default_value_t = 10_000)]
    worker_timeout_ms: u64,
    /// ... and computed in this process after this many publications.
    #[arg(long, default_value_t = 3)]
    worker_tries: u32,
    /// External workers: jobs out at once (more wait in the control plane).
    #[arg(long, default_value_t = 16)]
    worker_window: usize,
    /// How long one application definition may take to read before it is refused.
    #[arg(long, default_value_t = cloud_broker::definitions::DEFAULT_BUDGET.as_millis() as u64)]
    definition_budget_ms: u64,
    #[command(flatten)]
    observe: cloud_broker::observe::ObserveArgs,
}

impl ServeArgs {
    /// The control plane's options, or what is wrong with the flags.
    fn options(self, data_dir: PathBuf, store: StoreKind) -> anyhow::Result<ServeOptions> {
        let ServeArgs {
            listen,
            broker_url,
            tls_listen,
            tls_cert,
            tls_key,
            node_timeout_ms,
            liveness,
            lost_after_s,
            evidence_window_ms,
            reevaluate_ms,
            hysteresis,
            sustain,
            stats_every_ms,
            deschedule_ms,
            deschedule_threshold,
            peers_k,
            peers_rotate_s,
            explore_rounds,
            explore_width,
            tick_ms,
            scheduler_workers,
            worker_timeout_ms,
            worker_tries,
            worker_window,
            definition_budget_ms,
            observe,
        } = self;
        let tls = match (tls_listen, tls_cert, tls_key) {
            (Some(listen), Some(cert), Some(key)) => {
                Some(cloud_broker::broker::TlsListener { listen, cert, key })
            }
            (None, None, None) => None,
            _ => anyhow::bail!("--tls-listen, --tls-cert and --tls-key go together"),
        };
        anyhow::ensure!(
            deschedule_threshold.is_finite() && deschedule_threshold >= 0.0,
            "--deschedule-threshold must be a finite number >= 0, not {deschedule_threshold}"
        );
        anyhow::ensure!(
            (1..=acoa_shared::wire::MAX_PEERS_PER_NODE).contains(&peers_k),
            "--peers-k must be 1 to {}, not {peers_k}",
            acoa_shared::wire::MAX_PEERS_PER_NODE
        );
        anyhow::ensure!(
            (1..=16).contains(&explore_width),
            "--explore-width must be 1 to 16, not {explore_width}"
        );
        let broker_urls = match &broker_url {
            Some(list) => cloud_broker::conn::parse_list(list)?,
            None => vec![],
        };
        let liveness = match liveness {
            LivenessFlag::Evidence => Liveness::Evidence,
            LivenessFlag::Timer => Liveness::Timer {
                lost_after_ms: lost_after_s.saturating_mul(1000),
            },
        };
        Ok(ServeOptions {
            tls,
            data_dir,
            listen,
            startup_wait_ms: if broker_urls.is_empty() { 100 } else { 1000 },
            broker_urls,
            engine: EngineConfig {
                node_timeout_ms,
                liveness,
                evidence_ms: evidence_window_ms,
                reevaluate_ms,
                hysteresis,
                sustain,
                stats_every_ms,
                deschedule_ms,
                netaware_threshold: deschedule_threshold,
                peers_k,
                peers_rotate_ms: peers_rotate_s.saturating_mul(1000),
                explore_rounds,
                explore_width,
                background_jobs: cloud_broker::workers::background_slot_count(),
                loopback_every_ms: cloud_broker::engine::LOOPBACK_EVERY_MS,
                ..EngineConfig::default()
            },
            tick_ms,
            definition_budget: std::time::Duration::from_millis(definition_budget_ms),
            observe: observe.options()?,
            store,
            workers: (scheduler_workers == SchedulerWorkers::External).then_some(WorkersConfig {
                timeout_ms: worker_timeout_ms,
                max_tries: worker_tries.max(1),
                window: worker_window.max(1),
            }),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LivenessFlag {
    Evidence,
    Timer,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SchedulerWorkers {
    InProcess,
    External,
}

#[derive(Subcommand)]
enum WorkerCmd {
    /// Adds a worker login; prints the `scheduler worker` options it needs.
    Add {
        name: String,
        /// The broker URL to print (default: the one `serve` uses, else mqtt://127.0.0.1:1883).
        #[arg(long)]
        broker_url: Option<String>,
    },
    Remove {
        name: String,
    },
    List,
}

#[derive(Subcommand)]
enum NodeCmd {
    /// Enrolls a node; prints the [broker] section of its agent's configuration.
    Add {
        name: String,
        #[arg(long)]
        public_key: Option<String>,
        /// The broker URL to print (default: the one `serve` uses, else mqtt://127.0.0.1:1883).
        #[arg(long)]
        broker_url: Option<String>,
    },
    /// Enrolls a node's public key (from `edge-agent pubkey`).
    SetKey {
        name: String,
        public_key: String,
    },
    Remove {
        name: String,
    },
    List,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let json = cli.log_format == LogFormat::Json;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rumqttd=warn,rumqttc=warn".into()),
        )
        .with_writer(std::io::stderr);
    if json {
        logs.json().flatten_event(true).init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if json {
                tracing::error!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Transparent huge pages off for this process, as mimalloc does itself with
/// `MIMALLOC_ALLOW_THP=0`; `serve` calls it. mimalloc asks the kernel for them on its regions
/// (`madvise`), and the kernel then backs every 2 MiB stretch touched at all with a whole huge
/// page. The embedded broker's per-connection buffers are written at their start only: at
/// 15,000 agents, 3.4 of the control plane's 4.5 GiB were huge pages, 1.5 GiB in all without
/// them. With external brokers, at 50,000 nodes, they held 190-330 MiB of the RSS, which then
/// passed 1 GiB; without them the jobs run faster too (a re-placement 335-356 ms instead of
/// 563-573, the page faults of fresh huge pages zeroed; BENCHMARKS.md, "Huge pages", "The
/// heap and the RSS at 50,000 nodes"). Memory touched before this call keeps its pages (the
/// arguments, the log's set-up).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!("transparent huge pages stay on for this process: {e}");
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The broker URL `worker add` and `node add` print: the one given, else the embedded broker
/// `serve` uses, else the default listener. `serve`'s external brokers are refused: the URLs it
/// uses are the control plane's listeners, and nodes and workers take the fleet's.
fn printed_url(dd: &DataDir, broker_url: Option<String>) -> anyhow::Result<String> {
    if let Some(u) = broker_url {
        return Ok(u);
    }
    match dd.endpoint() {
        Some(u) if dd.endpoint_is_external() => bail!(
            "the control plane uses external brokers ({u}), on their control plane's listener, \
             which takes no node or worker: give --broker-url the fleet's listener (the address \
             of `mosquitto-config --listen`)"
        ),
        Some(u) => Ok(u),
        None => Ok("mqtt://127.0.0.1:1883".into()),
    }
}

fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let store = cli.store.kind()?;
    // the inventory's commands read and write it where `serve` keeps it
    let inventory = matches!(
        cli.cmd,
        Cmd::Node { .. } | Cmd::Worker { .. } | Cmd::MosquittoConfig { .. }
    );
    let dd = match inventory {
        true => {
            let (dd, imported) = DataDir::open(&cli.data_dir, &store)?;
            if imported > 0 {
                eprintln!("inventory.json imported into etcd: {imported} nodes and workers");
            }
            dd
        }
        false => DataDir::new(&cli.data_dir),
    };
    match cli.cmd {
        Cmd::Serve(args) => {
            let opts = args.options(cli.data_dir, store)?;
            no_huge_pages();
            let rt = runtime()?;
            // on a worker thread (large stack), not on the main thread
            rt.block_on(async { tokio::spawn(serve(opts)).await })??;
        }
        Cmd::Worker { cmd } => match cmd {
            WorkerCmd::Add { name, broker_url } => {
                // workers take jobs on the first broker of a list
                let url = printed_url(&dd, broker_url)?;
                let login = dd.add_worker(&name)?;
                let url = url.split(',').next().unwrap_or_default().trim();
                let cp = dd.signing_key()?.verifying_key();
                println!(
                    "--broker-url {url} --username {} --password {} --control-plane-key {}",
                    login.username,
                    login.password,
                    keys::public_hex(&cp)
                );
            }
            WorkerCmd::Remove { name } => {
                dd.remove_worker(&name)?;
                println!("worker {name} removed");
            }
            WorkerCmd::List => {
                for n in dd.inventory()?.workers.keys() {
                    println!("{n}");
                }
            }
        },
        Cmd::Node { cmd } => match cmd {
            NodeCmd::Add {
                name,
                public_key,
                broker_url,
            } => {
                let url = printed_url(&dd, broker_url)?;
                let e = dd.add_node(&name, public_key.as_deref())?;
                let cp = dd.signing_key()?.verifying_key();
                print!("{}", agent_broker_config(&url, &name, &e, &cp));
                if e.public_key.is_none() {
                    eprintln!(
                        "note: reports from {name} are dropped until its key is enrolled: cloud-broker node set-key {name} $(edge-agent pubkey)"
                    );
                }
            }
            NodeCmd::SetKey { name, public_key } => {
                dd.set_key(&name, &public_key)?;
                println!("node {name}: key {}", public_key.trim());
            }
            NodeCmd::Remove { name } => {
                dd.remove_node(&name)?;
                println!("node {name} removed");
            }
            NodeCmd::List => {
                for (n, e) in dd.inventory()?.nodes {
                    println!(
                        "{n}\t{}",
                        e.public_key.as_deref().unwrap_or("(no key enrolled)")
                    );
                }
                let cp = dd.signing_key()?.verifying_key();
                eprintln!("control plane key: {}", keys::public_hex(&cp));
            }
        },
        Cmd::Apply {
            file,
            broker_url,
            wait_s,
            agents_wait_s,
        } => {
            let st = runtime()?.block_on(cloud_broker::cli::apply(
                &dd,
                broker_url.as_deref(),
                &file,
                Duration::from_secs(wait_s),
                Duration::from_secs(agents_wait_s),
            ))?;
            println!("{}", serde_json::to_string(&st)?);
            let verdict = cloud_broker::cli::Verdict::of(&st);
            for line in verdict.lines(&st) {
                eprintln!("{line}");
            }
            if verdict.failed() {
                return Ok(std::process::ExitCode::FAILURE);
            }
        }
        Cmd::Delete { app, broker_url } => {
            runtime()?.block_on(cloud_broker::cli::delete(&dd, broker_url.as_deref(), &app))?;
            println!("application {app} deleted");
        }
        Cmd::Status { app, broker_url } => {
            let all = runtime()?.block_on(cloud_broker::cli::status(
                &dd,
                broker_url.as_deref(),
                app.as_deref(),
            ))?;
            if let (Some(a), true) = (&app, all.is_empty()) {
                anyhow::bail!("no status for application {a}");
            }
            for st in all.values() {
                println!("{}", serde_json::to_string(st)?);
            }
        }
        Cmd::History { app, broker_url } => {
            let all = runtime()?.block_on(cloud_broker::cli::status(
                &dd,
                broker_url.as_deref(),
                Some(&app),
            ))?;
            let Some(st) = all.get(&app) else {
                anyhow::bail!("no status for application {app}");
            };
            for line in cloud_broker::cli::history_lines(st) {
                println!("{line}");
            }
        }
        Cmd::Rollback {
            app,
            to,
            broker_url,
            wait_s,
        } => {
            let st = runtime()?.block_on(cloud_broker::cli::rollback(
                &dd,
                broker_url.as_deref(),
                &app,
                to,
                Duration::from_secs(wait_s),
            ))?;
            for line in cloud_broker::cli::history_lines(&st) {
                println!("{line}");
            }
        }
        Cmd::MosquittoConfig {
            out,
            listen,
            control_listen,
        } => {
            let at = cloud_broker::mosquitto::Listeners::new(listen, control_listen)?;
            cloud_broker::mosquitto::generate(&dd, &out, at)
                .with_context(|| format!("mosquitto configuration in {}", out.display()))?;
            println!(
                "wrote {0}/passwd, {0}/acl, {0}/passwd-control, {0}/acl-control, {0}/mosquitto.conf (run: mosquitto -c {0}/mosquitto.conf)",
                out.display()
            );
            println!(
                "agents and workers connect to mqtt://{} (each under its login's name as client id); the control plane and the CLI to mqtt://{}",
                at.fleet, at.control
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
