//! The agent's command line: subcommands and the flags that override the configuration file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// A node report at the latest after this many seconds (sooner when something changed).
    #[arg(long)]
    pub report_max_interval_s: Option<u64>,
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
