//! The configuration file's format (TOML): every field optional, none unknown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) node: Option<String>,
    pub(super) datacenter: Option<String>,
    pub(super) layer: Option<String>,
    pub(super) arch: Option<String>,
    pub(super) hardware: Option<Vec<String>>,
    pub(super) software: Option<Vec<String>>,
    /// `position = { lat_deg = 47.378, lon_deg = 8.540 }`: a fixed node's place on the map.
    pub(super) position: Option<acoa_shared::geo::Position>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) report_period_ms: Option<u64>,
    pub(super) report_max_interval_s: Option<u64>,
    pub(super) runtime: Option<String>,
    pub(super) image_allowlist: Option<Vec<String>>,
    #[serde(default)]
    pub(super) capacity: FileCapacity,
    #[serde(default)]
    pub(super) broker: FileBroker,
    #[serde(default)]
    pub(super) probe: FileProbe,
    #[serde(default)]
    pub(super) podman: FilePodman,
    #[serde(default)]
    pub(super) k3s: FileK3s,
    #[serde(default)]
    pub(super) stats: FileStats,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStats {
    pub(super) listen: Option<SocketAddr>,
    pub(super) advertise: Option<String>,
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
pub(super) struct FileBroker {
    pub(super) url: Option<String>,
    pub(super) urls: Option<Vec<String>>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) control_plane_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProbe {
    pub(super) listen: Option<SocketAddr>,
    pub(super) advertise: Option<SocketAddr>,
    pub(super) peers_per_period: Option<usize>,
    pub(super) period_ms: Option<u64>,
    pub(super) window: Option<usize>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) clock: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePodman {
    pub(super) socket: Option<String>,
    pub(super) netns: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileK3s {
    pub(super) kubeconfig: Option<PathBuf>,
    pub(super) namespace: Option<String>,
}

pub(super) fn read_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
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
