//! Configuration: the agent's TOML file, overridden by command-line flags. [`check`] judges
//! configuration files with the same schema and rules (`edge-agent check-config`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use acoa_shared::geo::Position;
use acoa_shared::model::Layer;
use acoa_shared::wire::keys;
use ed25519_dalek::VerifyingKey;

mod broker;
pub mod check;
mod cli;
mod file;
#[cfg(test)]
mod tests;

use broker::broker_list;
pub use broker::{parse_broker_url, BrokerUrl};
pub use cli::{Cli, Command, Overrides};
pub use file::FileCapacity;
use file::{read_file, FileConfig};

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

// ------------------------------------------------------------------ resolved

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Podman,
    K3s,
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
    /// Where a fixed node (a station, a datacenter) stands on the map; none on a train. The
    /// control plane gives a few slots of the node's peer list to the positioned nodes nearest
    /// on the map ([`acoa_shared::geo`]).
    pub position: Option<Position>,
    pub state_dir: PathBuf,
    pub report_period_ms: u64,
    /// A node report goes out when something changed (usage beyond a small threshold), or
    /// at the latest after this many seconds.
    pub report_max_interval_s: u64,
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
/// `report_max_interval_s` unless set: usage that moves less than its threshold is at most this
/// old at the control plane.
pub const DEFAULT_REPORT_MAX_INTERVAL_S: u64 = 10;
/// The most brokers an agent's list holds.
pub const MAX_BROKERS: usize = 8;
/// The most peers whose window a prober keeps (bits of a `u64`).
pub const MAX_WINDOW: usize = 64;

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
        let report_max_interval_s = o
            .report_max_interval_s
            .or(f.report_max_interval_s)
            .unwrap_or(DEFAULT_REPORT_MAX_INTERVAL_S);
        if !(1..=3600).contains(&report_max_interval_s) {
            return Err(invalid("report_max_interval_s", "must be 1 to 3600"));
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
            position: f.position,
            state_dir: o
                .state_dir
                .or(f.state_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            report_period_ms,
            report_max_interval_s,
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
