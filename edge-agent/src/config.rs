//! Configuration: the agent's TOML file, overridden by command-line flags. [`check`] judges
//! configuration files with the same schema and rules (`edge-agent check-config`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use acoa_shared::model::Layer;
use acoa_shared::wire::keys;
use clap::{Args, Parser, Subcommand};
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;

pub mod check;

/// What can be wrong with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// The longest probe period or time-out, in milliseconds (an hour: the prober keeps its
/// times in nanoseconds, so a larger one could not be represented).
pub const MAX_PROBE_MS: u64 = 3_600_000;

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

// ------------------------------------------------------------------ command line

#[derive(Debug, Parser)]
#[command(name = "edge-agent", version, about = "ACOA node daemon")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Log lines on stderr: `text` (readable) or `json` (one object a line, for log shippers).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    #[command(flatten)]
    pub overrides: Overrides,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Creates the node key if absent and prints its public key (hex).
    Pubkey {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Checks configuration files as the agent reads them at start; with --cluster, also that
    /// each agrees with its node in the cluster file. One line per file; fails if any is wrong.
    CheckConfig {
        /// Cluster file (YAML or JSON) the configurations' nodes must agree with.
        #[arg(long)]
        cluster: Option<PathBuf>,
        /// Accept `CHANGE-ME` placeholders for broker.password and broker.control_plane_key
        /// (role profiles, the package's default configuration).
        #[arg(long)]
        templates: bool,
        #[arg(required = true, value_name = "CONFIG")]
        files: Vec<PathBuf>,
    },
}

/// Flags that override the configuration file.
#[derive(Debug, Default, Args)]
pub struct Overrides {
    /// TOML configuration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long)]
    pub node: Option<String>,
    #[arg(long)]
    pub datacenter: Option<String>,
    /// cloud | edge
    #[arg(long)]
    pub layer: Option<String>,
    #[arg(long)]
    pub arch: Option<String>,
    /// Hardware label (repeatable; replaces the file's list).
    #[arg(long = "hardware")]
    pub hardware: Vec<String>,
    /// Software label (repeatable; replaces the file's list).
    #[arg(long = "software")]
    pub software: Vec<String>,
    /// mqtt://host:port or mqtts://host:port; several, comma-separated, are a list the agent
    /// moves along when its broker is gone (replaces the file's `broker.url` / `broker.urls`).
    #[arg(long)]
    pub broker: Option<String>,
    #[arg(long)]
    pub username: Option<String>,
    #[arg(long)]
    pub password: Option<String>,
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// The control plane's ed25519 public key (64 hex digits).
    #[arg(long)]
    pub control_plane_key: Option<String>,
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    #[arg(long)]
    pub report_period_ms: Option<u64>,
    /// podman | k3s
    #[arg(long)]
    pub runtime: Option<String>,
    /// Allowed image prefix (repeatable; replaces the file's list).
    #[arg(long = "allow-image")]
    pub allow_image: Vec<String>,
    #[arg(long)]
    pub probe_listen: Option<SocketAddr>,
    #[arg(long)]
    pub probe_advertise: Option<SocketAddr>,
    #[arg(long)]
    pub peers_per_period: Option<usize>,
    #[arg(long)]
    pub probe_period_ms: Option<u64>,
    #[arg(long)]
    pub probe_window: Option<usize>,
    /// free (latency = RTT/2) | synchronized (one-way delay; needs synchronized clocks)
    #[arg(long)]
    pub probe_clock: Option<String>,
    #[arg(long)]
    pub podman_socket: Option<String>,
    /// Network namespace the containers join (path such as /run/netns/n13).
    #[arg(long)]
    pub netns: Option<String>,
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where workloads send their traffic stats datagrams (UDP).
    #[arg(long)]
    pub stats_listen: Option<SocketAddr>,
    /// The address put into containers as ACOA_AGENT_STATS (`ip:port`).
    #[arg(long)]
    pub stats_advertise: Option<String>,
}

// ------------------------------------------------------------------ file format

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node: Option<String>,
    datacenter: Option<String>,
    layer: Option<String>,
    arch: Option<String>,
    hardware: Option<Vec<String>>,
    software: Option<Vec<String>>,
    state_dir: Option<PathBuf>,
    report_period_ms: Option<u64>,
    runtime: Option<String>,
    image_allowlist: Option<Vec<String>>,
    #[serde(default)]
    capacity: FileCapacity,
    #[serde(default)]
    broker: FileBroker,
    #[serde(default)]
    probe: FileProbe,
    #[serde(default)]
    podman: FilePodman,
    #[serde(default)]
    k3s: FileK3s,
    #[serde(default)]
    stats: FileStats,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStats {
    listen: Option<SocketAddr>,
    advertise: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCapacity {
    pub cpu_millis: Option<u64>,
    pub memory_mb: Option<u64>,
    pub disk_mb: Option<u64>,
    pub net_mbps: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBroker {
    url: Option<String>,
    urls: Option<Vec<String>>,
    username: Option<String>,
    password: Option<String>,
    ca_file: Option<PathBuf>,
    control_plane_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProbe {
    listen: Option<SocketAddr>,
    advertise: Option<SocketAddr>,
    peers_per_period: Option<usize>,
    period_ms: Option<u64>,
    window: Option<usize>,
    timeout_ms: Option<u64>,
    clock: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePodman {
    socket: Option<String>,
    netns: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileK3s {
    kubeconfig: Option<PathBuf>,
    namespace: Option<String>,
}

// ------------------------------------------------------------------ resolved

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Podman,
    K3s,
}

/// One broker of the agent's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

impl std::fmt::Display for BrokerUrl {
    /// `host:port` (`[v6]:port`), as the agent's log lines name a broker.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The brokers in the order the agent tries them: never empty, at most [`MAX_BROKERS`],
    /// no two alike. One login and one CA for all of them.
    pub urls: Vec<BrokerUrl>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub control_plane_key: VerifyingKey,
}

#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub listen: SocketAddr,
    pub advertise: SocketAddr,
    pub peers_per_period: usize,
    pub period_ms: u64,
    pub window: usize,
    pub timeout_ms: u64,
    /// How latency samples are taken: RTT/2 or the one-way delay.
    pub clock: crate::prober::ClockMode,
}

/// Workload traffic stats (see `stats`): where the agent listens, what containers are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsConfig {
    /// Default `127.0.0.1:7879`: reachable from containers that join the agent's network
    /// namespace (`[podman] netns`, the agent running in that namespace too).
    pub listen: SocketAddr,
    /// `ACOA_AGENT_STATS` in every container. Default: the listen address; when that is
    /// `0.0.0.0`, the gateway of Podman's default network (containers on its bridge reach the
    /// host there) with the listen port.
    pub advertise: Option<String>,
}

/// The agent's complete configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub node: String,
    pub datacenter: String,
    pub layer: Layer,
    pub arch: String,
    pub hardware: Vec<String>,
    pub software: Vec<String>,
    pub state_dir: PathBuf,
    pub report_period_ms: u64,
    pub runtime: RuntimeKind,
    pub image_allowlist: Vec<String>,
    pub capacity: FileCapacity,
    pub broker: BrokerConfig,
    pub probe: ProbeConfig,
    pub podman_socket: String,
    pub netns: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub k3s_namespace: String,
    pub stats: StatsConfig,
}

pub const DEFAULT_STATE_DIR: &str = "/var/lib/acoa-agent";
/// The most brokers an agent's list holds.
pub const MAX_BROKERS: usize = 8;
/// The most peers whose window a prober keeps (bits of a `u64`).
pub const MAX_WINDOW: usize = 64;

fn read_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// The state directory alone (for `edge-agent pubkey`).
pub fn state_dir_only(
    config: Option<&Path>,
    state_dir: Option<PathBuf>,
) -> Result<PathBuf, ConfigError> {
    let file = read_file(config)?;
    Ok(state_dir
        .or(file.state_dir)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)))
}

/// Parses `mqtt://host[:port]` or `mqtts://host[:port]`.
pub fn parse_broker_url(url: &str) -> Result<(String, u16, bool), ConfigError> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("mqtt://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("mqtts://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("tcp://") {
        (false, r)
    } else {
        return Err(invalid(
            "broker.url",
            format!("{url:?} must start with mqtt:// or mqtts://"),
        ));
    };
    let rest = rest.trim_end_matches('/');
    let default_port = if tls { 8883 } else { 1883 };
    let (host, port) = if let Some(h) = rest.strip_prefix('[') {
        // [v6]:port
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| invalid("broker.url", "unclosed [ in host"))?;
        let port = match p.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|_| invalid("broker.url", format!("bad port {p:?}")))?,
            None => default_port,
        };
        (h.to_owned(), port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse()
                    .map_err(|_| invalid("broker.url", format!("bad port {p:?}")))?,
            ),
            None => (rest.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(invalid("broker.url", "no host"));
    }
    Ok((host, port, tls))
}

/// The broker list from the flag `--broker` (comma-separated), else the file's `broker.url` or
/// `broker.urls` (not both). Errors name `broker.url` for a single URL, `broker.urls` and the
/// entry's position for a list (the flag's with a comma too).
fn broker_list(
    flag: Option<String>,
    url: Option<String>,
    urls: Option<Vec<String>>,
) -> Result<Vec<BrokerUrl>, ConfigError> {
    let (list, field): (Vec<String>, &'static str) = match (flag, url, urls) {
        (Some(f), _, _) => {
            let field = if f.contains(',') {
                "broker.urls"
            } else {
                "broker.url"
            };
            (f.split(',').map(|u| u.trim().to_string()).collect(), field)
        }
        (None, Some(_), Some(_)) => {
            return Err(invalid(
                "broker.urls",
                "set broker.url or broker.urls, not both",
            ))
        }
        (None, Some(u), None) => (vec![u], "broker.url"),
        (None, None, Some(l)) => (l, "broker.urls"),
        (None, None, None) => (vec!["mqtt://127.0.0.1:1883".into()], "broker.url"),
    };
    if list.is_empty() {
        return Err(invalid(field, "empty: at least one broker"));
    }
    if list.len() > MAX_BROKERS {
        return Err(invalid(
            field,
            format!("{} brokers: at most {MAX_BROKERS}", list.len()),
        ));
    }
    let mut out: Vec<BrokerUrl> = Vec::with_capacity(list.len());
    for (i, u) in list.iter().enumerate() {
        let (host, port, tls) = parse_broker_url(u).map_err(|e| match e {
            ConfigError::Invalid { reason, .. } if field == "broker.urls" => {
                invalid(field, format!("entry {}: {reason}", i + 1))
            }
            e => e,
        })?;
        let b = BrokerUrl { host, port, tls };
        if out.contains(&b) {
            return Err(invalid(
                field,
                format!("entry {}: {u:?} is listed twice", i + 1),
            ));
        }
        out.push(b);
    }
    Ok(out)
}

/// A name the control plane will accept: the model's one rule (`acoa_shared::model::check_name`).
fn check_name(field: &'static str, s: &str) -> Result<(), ConfigError> {
    acoa_shared::model::check_name(field, s).map_err(|e| invalid(field, e.reason))
}

impl Config {
    /// Reads the file named by `--config` (if any) and applies the flags.
    pub fn load(o: Overrides) -> Result<Config, ConfigError> {
        let f = read_file(o.config.as_deref())?;
        Config::resolve(o, f)
    }

    /// The file's settings `f` with the flags `o` applied, checked.
    fn resolve(o: Overrides, f: FileConfig) -> Result<Config, ConfigError> {
        let node = o
            .node
            .or(f.node)
            .ok_or_else(|| invalid("node", "missing (set it in the file or with --node)"))?;
        check_name("node", &node)?;
        let datacenter = o.datacenter.or(f.datacenter).unwrap_or_default();
        let layer = match o
            .layer
            .or(f.layer)
            .unwrap_or_else(|| "edge".into())
            .as_str()
        {
            "edge" => Layer::Edge,
            "cloud" => Layer::Cloud,
            other => {
                return Err(invalid(
                    "layer",
                    format!("{other:?} is neither cloud nor edge"),
                ))
            }
        };
        let runtime = match o
            .runtime
            .or(f.runtime)
            .unwrap_or_else(|| "podman".into())
            .as_str()
        {
            "podman" => RuntimeKind::Podman,
            "k3s" => RuntimeKind::K3s,
            other => {
                return Err(invalid(
                    "runtime",
                    format!("{other:?} is neither podman nor k3s"),
                ))
            }
        };
        let pick_list = |flag: Vec<String>, file: Option<Vec<String>>| {
            if flag.is_empty() {
                file.unwrap_or_default()
            } else {
                flag
            }
        };
        let hardware = pick_list(o.hardware, f.hardware);
        let software = pick_list(o.software, f.software);
        if hardware.len() > 16 || software.len() > 16 {
            return Err(invalid("hardware/software", "at most 16 labels each"));
        }
        let image_allowlist = pick_list(o.allow_image, f.image_allowlist);

        let urls = broker_list(o.broker, f.broker.url, f.broker.urls)?;
        let cp_hex = o
            .control_plane_key
            .or(f.broker.control_plane_key)
            .ok_or_else(|| {
                invalid(
                    "broker.control_plane_key",
                    "missing: the agent trusts nothing without the control plane's key",
                )
            })?;
        let control_plane_key = keys::public_from_hex(&cp_hex)
            .map_err(|e| invalid("broker.control_plane_key", e.to_string()))?;

        let listen = o
            .probe_listen
            .or(f.probe.listen)
            .unwrap_or_else(|| "0.0.0.0:7878".parse().expect("literal address"));
        let advertise = o.probe_advertise.or(f.probe.advertise).unwrap_or(listen);
        let period_ms = o.probe_period_ms.or(f.probe.period_ms).unwrap_or(1000);
        if !(10..=MAX_PROBE_MS).contains(&period_ms) {
            return Err(invalid(
                "probe.period_ms",
                format!("must be 10 to {MAX_PROBE_MS}"),
            ));
        }
        let timeout_ms = f.probe.timeout_ms.unwrap_or(period_ms.max(500));
        if !(1..=MAX_PROBE_MS).contains(&timeout_ms) {
            return Err(invalid(
                "probe.timeout_ms",
                format!("must be 1 to {MAX_PROBE_MS}"),
            ));
        }
        let window = o.probe_window.or(f.probe.window).unwrap_or(20);
        if window == 0 || window > MAX_WINDOW {
            return Err(invalid(
                "probe.window",
                format!("must be 1 to {MAX_WINDOW}"),
            ));
        }
        let peers_per_period = o.peers_per_period.or(f.probe.peers_per_period).unwrap_or(4);
        if peers_per_period > crate::prober::MAX_PEERS {
            return Err(invalid(
                "probe.peers_per_period",
                format!("at most {}", crate::prober::MAX_PEERS),
            ));
        }
        let clock = match o.probe_clock.or(f.probe.clock) {
            None => crate::prober::ClockMode::default(),
            Some(c) => c.parse().map_err(|e: String| invalid("probe.clock", e))?,
        };
        let report_period_ms = o.report_period_ms.or(f.report_period_ms).unwrap_or(1000);
        if report_period_ms < 100 {
            return Err(invalid("report_period_ms", "must be at least 100"));
        }
        Ok(Config {
            node,
            datacenter,
            layer,
            arch: o
                .arch
                .or(f.arch)
                .unwrap_or_else(|| std::env::consts::ARCH.into()),
            hardware,
            software,
            state_dir: o
                .state_dir
                .or(f.state_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            report_period_ms,
            runtime,
            image_allowlist,
            capacity: f.capacity,
            broker: BrokerConfig {
                urls,
                username: o.username.or(f.broker.username),
                password: o.password.or(f.broker.password),
                ca_file: o.ca_file.or(f.broker.ca_file),
                control_plane_key,
            },
            probe: ProbeConfig {
                listen,
                advertise,
                peers_per_period,
                period_ms,
                window,
                timeout_ms,
                clock,
            },
            podman_socket: o
                .podman_socket
                .or(f.podman.socket)
                .unwrap_or_else(|| "unix:///run/podman/podman.sock".into()),
            netns: o.netns.or(f.podman.netns),
            kubeconfig: o.kubeconfig.or(f.k3s.kubeconfig),
            k3s_namespace: f.k3s.namespace.unwrap_or_else(|| "default".into()),
            stats: StatsConfig {
                listen: o
                    .stats_listen
                    .or(f.stats.listen)
                    .unwrap_or_else(|| "127.0.0.1:7879".parse().expect("literal address")),
                advertise: o
                    .stats_advertise
                    .or(f.stats.advertise)
                    .map(|a| a.trim().to_string())
                    .filter(|a| !a.is_empty()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";

    fn load_str(toml_text: &str, o: Overrides) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("acoa-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}.toml", toml_text.len()));
        std::fs::write(&path, toml_text).unwrap();
        Config::load(Overrides {
            config: Some(path),
            ..o
        })
    }

    #[test]
    fn the_documented_example_parses_and_flags_override() {
        let text = format!(
            r#"
node = "n13"
datacenter = "train1"
layer = "edge"
arch = "aarch64"
hardware = ["smoke-sensor"]
software = []
state_dir = "/var/lib/acoa-agent"
report_period_ms = 1000
runtime = "podman"
image_allowlist = ["localhost/acoa/"]
[capacity]
cpu_millis = 2000
memory_mb = 2048
disk_mb = 16000
[broker]
url = "mqtt://127.0.0.1:1883"
username = "n13"
password = "secret"
ca_file = "/etc/acoa/ca.pem"
control_plane_key = "{KEY}"
[probe]
listen = "0.0.0.0:7878"
advertise = "10.0.0.13:7878"
peers_per_period = 4
period_ms = 1000
window = 20
clock = "synchronized"
[podman]
socket = "unix:///run/podman/podman.sock"
netns = "/run/netns/n13"
[k3s]
kubeconfig = "/etc/rancher/k3s/k3s.yaml"
[stats]
listen = "0.0.0.0:7879"
advertise = "10.88.0.1:7879"
"#
        );
        let c = load_str(&text, Overrides::default()).unwrap();
        assert_eq!(c.stats.listen.to_string(), "0.0.0.0:7879");
        assert_eq!(c.stats.advertise.as_deref(), Some("10.88.0.1:7879"));
        assert_eq!(c.node, "n13");
        assert_eq!(c.layer, Layer::Edge);
        assert_eq!(c.capacity.cpu_millis, Some(2000));
        assert_eq!(c.broker.urls.len(), 1);
        assert_eq!(c.broker.urls[0].port, 1883);
        assert_eq!(c.probe.advertise.to_string(), "10.0.0.13:7878");
        assert_eq!(c.probe.clock, crate::prober::ClockMode::Synchronized);
        assert_eq!(c.netns.as_deref(), Some("/run/netns/n13"));
        let c = load_str(
            &text,
            Overrides {
                node: Some("n14".into()),
                broker: Some("mqtt://broker.example:2883".into()),
                allow_image: vec!["localhost/other/".into()],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.node, "n14");
        assert_eq!(
            c.broker.urls,
            [BrokerUrl {
                host: "broker.example".into(),
                port: 2883,
                tls: false
            }]
        );
        assert_eq!(c.image_allowlist, vec!["localhost/other/".to_string()]);
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = load_str(
            &format!("node = \"a\"\nlayer = \"fog\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("layer:"), "{e}");
        let e = load_str("node = \"a\"\n", Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("control_plane_key"), "{e}");
        let e = load_str("node = \"a\"\nbogus = 1\n", Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = load_str(
            &format!(
                "node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\nclock = \"gps\"\n"
            ),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("probe.clock:"), "{e}");
        assert!(e.to_string().contains("gps"), "{e}");
        let c = load_str(
            &format!("node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            c.probe.clock,
            crate::prober::ClockMode::Free,
            "free by default"
        );
    }

    #[test]
    fn broker_urls() {
        assert_eq!(
            parse_broker_url("mqtt://h").unwrap(),
            ("h".into(), 1883, false)
        );
        assert_eq!(
            parse_broker_url("mqtts://h:1").unwrap(),
            ("h".into(), 1, true)
        );
        assert_eq!(
            parse_broker_url("mqtt://[::1]:5").unwrap(),
            ("::1".into(), 5, false)
        );
        assert!(parse_broker_url("http://h").is_err());
        assert!(parse_broker_url("mqtt://h:x").is_err());
    }

    #[test]
    fn a_broker_list_from_the_file_or_the_flag_and_its_errors_name_the_field() {
        let cfg = |broker: &str, flag: Option<&str>| {
            load_str(
                &format!("node = \"n1\"\n[broker]\n{broker}control_plane_key = \"{KEY}\"\n"),
                Overrides {
                    broker: flag.map(String::from),
                    ..Default::default()
                },
            )
        };
        let b = |host: &str, port, tls| BrokerUrl {
            host: host.into(),
            port,
            tls,
        };
        // a list, in its order; url stays valid as a list of one
        let c = cfg(
            "urls = [\"mqtt://a:1\", \"mqtts://b\", \"mqtt://[::1]:3\"]\n",
            None,
        )
        .unwrap();
        assert_eq!(
            c.broker.urls,
            [b("a", 1, false), b("b", 8883, true), b("::1", 3, false)]
        );
        assert_eq!(c.broker.urls[2].to_string(), "[::1]:3");
        let c = cfg("url = \"mqtt://a:1\"\n", None).unwrap();
        assert_eq!(c.broker.urls, [b("a", 1, false)]);
        let c = cfg("", None).unwrap();
        assert_eq!(c.broker.urls, [b("127.0.0.1", 1883, false)], "the default");
        // the flag takes a comma list and replaces the file's
        let c = cfg("url = \"mqtt://a:1\"\n", Some("mqtt://x:7, mqtt://y:8")).unwrap();
        assert_eq!(c.broker.urls, [b("x", 7, false), b("y", 8, false)]);
        // what is wrong is named
        for (broker, flag, want) in [
            (
                "url = \"mqtt://a\"\nurls = [\"mqtt://b\"]\n",
                None,
                "broker.urls: set broker.url or broker.urls, not both",
            ),
            ("urls = []\n", None, "broker.urls: empty"),
            (
                "urls = [\"mqtt://a\", \"http://b\"]\n",
                None,
                "broker.urls: entry 2: \"http://b\" must start with mqtt://",
            ),
            (
                "urls = [\"mqtt://a\", \"mqtt://a:1883\"]\n",
                None,
                "broker.urls: entry 2: \"mqtt://a:1883\" is listed twice",
            ),
            (
                "urls = [\"mqtt://a:x\"]\n",
                None,
                "broker.urls: entry 1: bad port",
            ),
            ("url = \"mqtt://a:x\"\n", None, "broker.url: bad port"),
            (
                "",
                Some("mqtt://a,"),
                "broker.urls: entry 2: \"\" must start with mqtt://",
            ),
            ("", Some("mqtt://a:99999"), "broker.url: bad port"),
        ] {
            let e = cfg(broker, flag).unwrap_err().to_string();
            assert!(e.starts_with(want), "{broker} {flag:?}: {e}");
        }
        let many: Vec<String> = (0..=MAX_BROKERS)
            .map(|i| format!("\"mqtt://h{i}\""))
            .collect();
        let e = cfg(&format!("urls = [{}]\n", many.join(", ")), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("broker.urls:") && e.contains(&format!("at most {MAX_BROKERS}")),
            "{e}"
        );
    }

    #[test]
    fn stats_listen_on_loopback_by_default() {
        let c = load_str(
            &format!("node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            Overrides {
                stats_advertise: Some(" ".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.stats.listen.to_string(), "127.0.0.1:7879");
        assert_eq!(c.stats.advertise, None, "blank means the default");
        let e = load_str(
            &format!("node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[stats]\nlisten = \"nope\"\n"),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("listen"), "{e}");
    }

    /// Found by the fuzz target: the agent took names the control plane refuses (`-a`), and a
    /// probe time-out so large that the prober's nanoseconds overflowed.
    #[test]
    fn names_and_probe_times_are_those_the_rest_of_the_system_can_hold() {
        let cfg = |extra: &str| {
            load_str(
                &format!("node = \"n1\"\n{extra}[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
                Overrides::default(),
            )
        };
        assert!(cfg("").is_ok());
        let e = load_str(
            &format!("node = \"-a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("node"), "{e}");
        for (field, value) in [
            ("timeout_ms", "9223372036854775807"),
            ("timeout_ms", "0"),
            ("period_ms", "3600001"),
        ] {
            let doc = format!("node = \"n1\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\n{field} = {value}\n");
            let e = load_str(&doc, Overrides::default()).unwrap_err();
            assert!(e.to_string().contains(field), "{field} = {value}: {e}");
        }
        let doc = format!("node = \"n1\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\ntimeout_ms = 3600000\nperiod_ms = 3600000\n");
        assert!(load_str(&doc, Overrides::default()).is_ok());
    }
}
