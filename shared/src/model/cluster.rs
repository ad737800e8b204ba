//! The infrastructure snapshot (`cluster.yaml`): nodes, datacenters, directed links and
//! the measured use of applications, with its validation.

use super::checks::{check_labels, check_name, check_opt_rate, check_rate};
use super::{Layer, ModelError, Requirements};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A snapshot of the infrastructure: nodes and directed links.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub cluster: String,
    #[serde(default)]
    pub datacenters: Vec<Datacenter>,
    pub nodes: Vec<Node>,
    #[serde(default)]
    pub links: Vec<Link>,
    /// Measured at run time, per application name: what its components use and the traffic
    /// between them (read by the `network-aware` scheduler). Empty until something is measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub observed: BTreeMap<String, Observed>,
    /// What the latency, jitter and success of a pair without a measured link are estimated
    /// from (network coordinates, issue 16); absent: such a pair has no link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimates: Option<super::LinkEstimates>,
}

/// What one application was measured to use at run time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// Component name -> measured use (the sum over its replicas).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ObservedUsage>,
    /// Measured traffic between components.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<ObservedTraffic>,
}

/// A component's measured use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedUsage {
    #[serde(default)]
    pub cpu_millis: f64,
    #[serde(default)]
    pub memory_mb: f64,
}

/// Measured traffic sent by component `from` to component `to`, bytes per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedTraffic {
    pub from: String,
    pub to: String,
    pub bytes_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Datacenter {
    pub name: String,
    pub layer: Layer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    pub datacenter: String,
    pub layer: Layer,
    pub arch: String,
    /// Static: attached devices.
    #[serde(default)]
    pub hardware: Vec<String>,
    /// Static: installed services.
    #[serde(default)]
    pub software: Vec<String>,
    pub capacity: Capacity,
    /// Dynamic: what is in use now.
    #[serde(default)]
    pub usage: Usage,
    /// Static: where a fixed node (a station, a datacenter) stands on the map; none for a
    /// train. Its peer list then measures the positioned nodes nearest on the map
    /// ([`crate::geo`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<crate::geo::Position>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// Network bandwidth, megabits per second; unknown when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_mbps: Option<f64>,
    /// Disk I/O throughput, megabytes per second; unknown when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_mbps: Option<f64>,
}

// The float fields are validated finite (never NaN), so equality is reflexive.
impl Eq for Capacity {}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    #[serde(default)]
    pub cpu_millis: u64,
    #[serde(default)]
    pub memory_mb: u64,
    #[serde(default)]
    pub disk_mb: u64,
    #[serde(default)]
    pub containers: u32,
    /// Network traffic in use, megabits per second; unknown when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_mbps: Option<f64>,
    /// Disk I/O in use, megabytes per second; unknown when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_mbps: Option<f64>,
}

// The float fields are validated finite (never NaN), so equality is reflexive.
impl Eq for Usage {}

/// A directed link; `from == to` is the node's own loopback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub from: String,
    pub to: String,
    pub latency_ms: f64,
    #[serde(default)]
    pub jitter_ms: f64,
    pub success: f64,
}

impl Node {
    /// `capacity.disk_mb - usage.disk_mb`, never below zero.
    pub fn free_disk_mb(&self) -> u64 {
        self.capacity.disk_mb.saturating_sub(self.usage.disk_mb)
    }

    /// `(capacity.memory_mb - usage.memory_mb) / capacity.memory_mb`, clamped to [0, 1].
    pub fn free_memory_fraction(&self) -> f64 {
        if self.capacity.memory_mb == 0 {
            return 0.0;
        }
        let free = self.capacity.memory_mb as f64 - self.usage.memory_mb as f64;
        (free / self.capacity.memory_mb as f64).clamp(0.0, 1.0)
    }

    /// Whether this node satisfies every one of `req`'s constraints.
    pub fn satisfies(&self, req: &Requirements) -> bool {
        req.hardware.iter().all(|h| self.hardware.contains(h))
            && req.software.iter().all(|s| self.software.contains(s))
            && req
                .datacenter
                .as_ref()
                .is_none_or(|d| *d == self.datacenter)
            && req.layer.is_none_or(|l| l == self.layer)
            && req.arch.as_ref().is_none_or(|a| *a == self.arch)
            && req
                .min_free_disk_mb
                .is_none_or(|d| self.free_disk_mb() >= d)
            && req.node.as_ref().is_none_or(|n| *n == self.name)
    }
}

impl Cluster {
    /// Checks every rule of model.md; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_name("cluster", &self.cluster)?;
        let mut dcs: HashMap<&str, Layer> = HashMap::new();
        for (i, dc) in self.datacenters.iter().enumerate() {
            let field = format!("datacenters[{i}].name");
            check_name(&field, &dc.name)?;
            if dcs.insert(&dc.name, dc.layer).is_some() {
                return Err(ModelError::new(
                    field,
                    format!("duplicate datacenter `{}`", dc.name),
                ));
            }
        }
        if self.nodes.is_empty() {
            return Err(ModelError::new(
                "nodes",
                "a cluster needs at least one node",
            ));
        }
        let mut names = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            check_name(&format!("nodes[{i}].name"), &n.name)?;
            if !names.insert(n.name.as_str()) {
                return Err(ModelError::new(
                    format!("nodes[{i}].name"),
                    format!("duplicate node `{}`", n.name),
                ));
            }
            check_name(&format!("nodes[{i}].datacenter"), &n.datacenter)?;
            if !self.datacenters.is_empty() {
                match dcs.get(n.datacenter.as_str()) {
                    None => {
                        return Err(ModelError::new(
                            format!("nodes[{i}].datacenter"),
                            format!("datacenter `{}` is not declared", n.datacenter),
                        ))
                    }
                    Some(layer) if *layer != n.layer => {
                        return Err(ModelError::new(
                            format!("nodes[{i}].layer"),
                            format!(
                                "layer {} differs from datacenter `{}`'s layer {}",
                                n.layer, n.datacenter, layer
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            if n.arch.is_empty() {
                return Err(ModelError::new(
                    format!("nodes[{i}].arch"),
                    "must not be empty",
                ));
            }
            check_labels(&format!("nodes[{i}].hardware"), &n.hardware)?;
            check_labels(&format!("nodes[{i}].software"), &n.software)?;
            check_opt_rate(
                &format!("nodes[{i}].capacity.net_mbps"),
                n.capacity.net_mbps,
            )?;
            check_opt_rate(&format!("nodes[{i}].capacity.io_mbps"), n.capacity.io_mbps)?;
            check_opt_rate(&format!("nodes[{i}].usage.net_mbps"), n.usage.net_mbps)?;
            check_opt_rate(&format!("nodes[{i}].usage.io_mbps"), n.usage.io_mbps)?;
        }
        let mut seen = HashSet::new();
        for (i, l) in self.links.iter().enumerate() {
            for (end, name) in [("from", &l.from), ("to", &l.to)] {
                if !names.contains(name.as_str()) {
                    return Err(ModelError::new(
                        format!("links[{i}].{end}"),
                        format!("node `{name}` does not exist"),
                    ));
                }
            }
            if !seen.insert((l.from.as_str(), l.to.as_str())) {
                return Err(ModelError::new(
                    format!("links[{i}]"),
                    format!("duplicate link from `{}` to `{}`", l.from, l.to),
                ));
            }
            if !(l.latency_ms.is_finite() && l.latency_ms >= 0.0) {
                return Err(ModelError::new(
                    format!("links[{i}].latency_ms"),
                    format!("must be a finite number >= 0, got {}", l.latency_ms),
                ));
            }
            if !(l.jitter_ms.is_finite() && l.jitter_ms >= 0.0) {
                return Err(ModelError::new(
                    format!("links[{i}].jitter_ms"),
                    format!("must be a finite number >= 0, got {}", l.jitter_ms),
                ));
            }
            if !(0.0..=1.0).contains(&l.success) {
                return Err(ModelError::new(
                    format!("links[{i}].success"),
                    format!("must be between 0 and 1, got {}", l.success),
                ));
            }
        }
        if let Some(e) = &self.estimates {
            e.validate(&names)?;
        }
        for (app, o) in &self.observed {
            check_name(&format!("observed.{app}"), app)?;
            for (comp, u) in &o.components {
                let f = format!("observed.{app}.components.{comp}");
                check_name(&f, comp)?;
                check_rate(&format!("{f}.cpu_millis"), u.cpu_millis)?;
                check_rate(&format!("{f}.memory_mb"), u.memory_mb)?;
            }
            for (i, t) in o.traffic.iter().enumerate() {
                let f = format!("observed.{app}.traffic[{i}]");
                check_name(&format!("{f}.from"), &t.from)?;
                check_name(&format!("{f}.to"), &t.to)?;
                check_rate(&format!("{f}.bytes_per_s"), t.bytes_per_s)?;
            }
        }
        Ok(())
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }
}
