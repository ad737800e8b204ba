//! The infrastructure model (`cluster.yaml`) and the workload model (`app.yaml`) of
//! `spec/model.md`, read from YAML or JSON and validated.
//!
//! Every error names the file (when there is one), the field (a path such as
//! `channels[2].to`) and the reason.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;

/// A model file that could not be read, parsed or validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelError {
    /// The file the model came from, when it came from one.
    pub file: Option<String>,
    /// Where in the document: `components[1].requires.datacenter`; empty for the whole document.
    pub field: String,
    /// What is wrong, lowercase.
    pub reason: String,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl ModelError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError {
            file: None,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error, said of `file`.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }
}

/// Where a datacenter or node sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Cloud,
    Edge,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Cloud => "cloud",
            Layer::Edge => "edge",
        })
    }
}

// ---------------------------------------------------------------- infrastructure

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

// ---------------------------------------------------------------- workload

/// An application: components (vertices), channels (edges), paths and criteria.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Application {
    pub application: String,
    /// Which per-application algorithm places it (`qos` by default).
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    pub components: Vec<Component>,
    #[serde(default)]
    pub channels: Vec<Channel>,
    #[serde(default)]
    pub paths: Vec<AppPath>,
    #[serde(default)]
    pub criteria: Vec<Criterion>,
    /// Where users' requests enter the system (optional). Read by the `network-aware`
    /// scheduler only (the paper's entry term δ: the latency from `ingress.node` to the node
    /// of `ingress.component`); `qos` and `topsis` ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Ingress>,
}

/// Users' requests enter the system at cluster node `node` and go to component `component`.
/// The component must exist in the application; the node is a valid name here and is looked
/// up in the cluster at placement time (an unknown node is a note, not an error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ingress {
    pub node: String,
    pub component: String,
}

fn default_scheduler() -> String {
    "qos".to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    pub name: String,
    pub image: String,
    #[serde(default)]
    pub requires: Requirements,
    /// Reserved on the chosen node when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

/// Constraints: every one must hold on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirements {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hardware: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub software: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<Layer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_disk_mb: Option<u64>,
    /// Pins the component: node.name must equal this (an operator's override, e.g. to run
    /// a chosen deployment through the control plane). Not part of `l_min`'s reference set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// What a component asks for. The scheduler's ledger reserves `cpu_millis` and `memory_mb`;
/// the optional expected demands below are read by the `topsis` scheduler only (as the paper's
/// pod requests) and are not reserved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub cpu_millis: u64,
    #[serde(default)]
    pub memory_mb: u64,
    /// Expected network bandwidth, megabits per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_mbps: Option<f64>,
    /// Expected disk I/O throughput, megabytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_mbps: Option<f64>,
    /// Expected disk space, megabytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
}

// The float fields are validated finite (never NaN), so equality is reflexive.
impl Eq for Resources {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    pub name: String,
    pub from: String,
    pub to: String,
}

/// A named subset of channels, the target of path criteria.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppPath {
    pub name: String,
    pub channels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CriterionKind {
    MinE2eResponseTime,
    MaxE2eReliability,
    LeastContainers,
    MostFreeMemory,
}

impl CriterionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CriterionKind::MinE2eResponseTime => "min-e2e-response-time",
            CriterionKind::MaxE2eReliability => "max-e2e-reliability",
            CriterionKind::LeastContainers => "least-containers",
            CriterionKind::MostFreeMemory => "most-free-memory",
        }
    }

    /// Path criteria target a path; the others a component.
    pub fn targets_path(self) -> bool {
        matches!(
            self,
            CriterionKind::MinE2eResponseTime | CriterionKind::MaxE2eReliability
        )
    }
}

impl fmt::Display for CriterionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An optimisation criterion with its weight (> 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Criterion {
    #[serde(rename = "type")]
    pub kind: CriterionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The target of `least-containers` and `most-free-memory` (`target:` is accepted too).
    #[serde(default, alias = "target", skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    pub weight: f64,
}

impl Application {
    /// Checks every rule of model.md; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_name("application", &self.application)?;
        check_name("scheduler", &self.scheduler)?;
        if self.components.is_empty() {
            return Err(ModelError::new(
                "components",
                "an application needs at least one component",
            ));
        }
        let mut comps = HashSet::new();
        for (i, c) in self.components.iter().enumerate() {
            check_name(&format!("components[{i}].name"), &c.name)?;
            if !comps.insert(c.name.as_str()) {
                return Err(ModelError::new(
                    format!("components[{i}].name"),
                    format!("duplicate component `{}`", c.name),
                ));
            }
            if c.image.trim().is_empty()
                || c.image.len() > 255
                || c.image.contains(char::is_whitespace)
            {
                return Err(ModelError::new(
                    format!("components[{i}].image"),
                    "must be an image reference of 1 to 255 characters without spaces",
                ));
            }
            check_labels(
                &format!("components[{i}].requires.hardware"),
                &c.requires.hardware,
            )?;
            check_labels(
                &format!("components[{i}].requires.software"),
                &c.requires.software,
            )?;
            if let Some(n) = &c.requires.node {
                check_name(&format!("components[{i}].requires.node"), n)?;
            }
        }
        for (i, c) in self.components.iter().enumerate() {
            if let Some(r) = &c.resources {
                check_opt_rate(&format!("components[{i}].resources.net_mbps"), r.net_mbps)?;
                check_opt_rate(&format!("components[{i}].resources.io_mbps"), r.io_mbps)?;
            }
        }
        if let Some(ing) = &self.ingress {
            check_name("ingress.node", &ing.node)?;
            check_name("ingress.component", &ing.component)?;
            if !comps.contains(ing.component.as_str()) {
                return Err(ModelError::new(
                    "ingress.component",
                    format!("component `{}` does not exist", ing.component),
                ));
            }
        }
        let mut chans: HashMap<&str, &Channel> = HashMap::new();
        for (i, ch) in self.channels.iter().enumerate() {
            check_name(&format!("channels[{i}].name"), &ch.name)?;
            if chans.insert(&ch.name, ch).is_some() {
                return Err(ModelError::new(
                    format!("channels[{i}].name"),
                    format!("duplicate channel `{}`", ch.name),
                ));
            }
            for (end, name) in [("from", &ch.from), ("to", &ch.to)] {
                if !comps.contains(name.as_str()) {
                    return Err(ModelError::new(
                        format!("channels[{i}].{end}"),
                        format!("component `{name}` does not exist"),
                    ));
                }
            }
        }
        let mut paths: HashMap<&str, &AppPath> = HashMap::new();
        for (i, p) in self.paths.iter().enumerate() {
            check_name(&format!("paths[{i}].name"), &p.name)?;
            if paths.insert(&p.name, p).is_some() {
                return Err(ModelError::new(
                    format!("paths[{i}].name"),
                    format!("duplicate path `{}`", p.name),
                ));
            }
            if p.channels.is_empty() {
                return Err(ModelError::new(
                    format!("paths[{i}].channels"),
                    "a path needs at least one channel",
                ));
            }
            let mut in_path = HashSet::new();
            for (j, c) in p.channels.iter().enumerate() {
                if !chans.contains_key(c.as_str()) {
                    return Err(ModelError::new(
                        format!("paths[{i}].channels[{j}]"),
                        format!("channel `{c}` does not exist"),
                    ));
                }
                if !in_path.insert(c.as_str()) {
                    return Err(ModelError::new(
                        format!("paths[{i}].channels[{j}]"),
                        format!("channel `{c}` is listed twice"),
                    ));
                }
            }
        }
        for (i, cr) in self.criteria.iter().enumerate() {
            if !(cr.weight.is_finite() && cr.weight > 0.0) {
                return Err(ModelError::new(
                    format!("criteria[{i}].weight"),
                    format!("must be a finite number > 0, got {}", cr.weight),
                ));
            }
            if cr.kind.targets_path() {
                if cr.component.is_some() {
                    return Err(ModelError::new(
                        format!("criteria[{i}].component"),
                        format!("{} targets a path, not a component", cr.kind),
                    ));
                }
                let Some(pname) = &cr.path else {
                    return Err(ModelError::new(
                        format!("criteria[{i}].path"),
                        format!("{} needs a path", cr.kind),
                    ));
                };
                let Some(p) = paths.get(pname.as_str()) else {
                    return Err(ModelError::new(
                        format!("criteria[{i}].path"),
                        format!("path `{pname}` does not exist"),
                    ));
                };
                if cr.kind == CriterionKind::MinE2eResponseTime {
                    let edges: Vec<(&str, &str)> = p
                        .channels
                        .iter()
                        .map(|c| {
                            (
                                chans[c.as_str()].from.as_str(),
                                chans[c.as_str()].to.as_str(),
                            )
                        })
                        .collect();
                    if let Some(comp) = find_cycle(&edges) {
                        return Err(ModelError::new(
                            format!("criteria[{i}].path"),
                            format!(
                                "path `{pname}` has a cycle through component `{comp}`; a response-time path must be acyclic"
                            ),
                        ));
                    }
                }
            } else {
                if cr.path.is_some() {
                    return Err(ModelError::new(
                        format!("criteria[{i}].path"),
                        format!("{} targets a component, not a path", cr.kind),
                    ));
                }
                let Some(cname) = &cr.component else {
                    return Err(ModelError::new(
                        format!("criteria[{i}].component"),
                        format!("{} needs a component", cr.kind),
                    ));
                };
                if !comps.contains(cname.as_str()) {
                    return Err(ModelError::new(
                        format!("criteria[{i}].component"),
                        format!("component `{cname}` does not exist"),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn component(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }
}

/// A vertex on a cycle of the directed graph `edges`, if it has one.
fn find_cycle<'a>(edges: &[(&'a str, &'a str)]) -> Option<&'a str> {
    // Kahn's algorithm: what is left after peeling sources lies on or after a cycle.
    let mut indeg: HashMap<&str, usize> = HashMap::new();
    for (a, b) in edges {
        indeg.entry(a).or_default();
        *indeg.entry(b).or_default() += 1;
    }
    let mut ready: Vec<&str> = indeg
        .iter()
        .filter(|(_, d)| **d == 0)
        .map(|(v, _)| *v)
        .collect();
    while let Some(v) = ready.pop() {
        indeg.remove(v);
        for (a, b) in edges {
            if *a == v {
                if let Some(d) = indeg.get_mut(b) {
                    *d -= 1;
                    if *d == 0 {
                        ready.push(b);
                    }
                }
            }
        }
    }
    indeg.keys().min().copied()
}

/// Names travel in MQTT topics and container names: 1 to 63 characters of
/// `[A-Za-z0-9_.-]`, starting with a letter or digit.
pub fn check_name(field: &str, name: &str) -> Result<(), ModelError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!(
                "`{name}` is not a valid name (1 to 63 characters of letters, digits, `_`, `.`, `-`, starting with a letter or digit)"
            ),
        ))
    }
}

/// A measured or declared rate: finite and >= 0.
fn check_rate(field: &str, v: f64) -> Result<(), ModelError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!("must be a finite number >= 0, got {v}"),
        ))
    }
}

fn check_opt_rate(field: &str, v: Option<f64>) -> Result<(), ModelError> {
    v.map_or(Ok(()), |v| check_rate(field, v))
}

fn check_labels(field: &str, labels: &[String]) -> Result<(), ModelError> {
    for (i, l) in labels.iter().enumerate() {
        check_name(&format!("{field}[{i}]"), l)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- reading

/// How a model document is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// JSON when the document starts with `{`, YAML otherwise (YAML also reads most JSON).
    pub fn sniff(text: &str) -> Format {
        if text.trim_start().starts_with('{') {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

/// Parses (without validating) a document of type `T` from YAML or JSON text.
pub fn parse<T: serde::de::DeserializeOwned>(text: &str, format: Format) -> Result<T, ModelError> {
    match format {
        Format::Json => {
            let de = &mut serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = field_of(e.path());
                ModelError::new(field, format!("invalid json: {}", e.inner()))
            })
        }
        Format::Yaml => {
            if text.trim().is_empty() {
                return Err(ModelError::new("", "the document is empty"));
            }
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = field_of(e.path());
                // serde_yaml_ng prefixes its message with the path we already name.
                let msg = e.inner().to_string();
                let msg = match msg.split_once(": ") {
                    Some((head, tail)) if !head.contains(' ') => tail.to_string(),
                    _ => msg,
                };
                ModelError::new(field, format!("invalid yaml: {msg}"))
            })
        }
    }
}

fn field_of(path: &serde_path_to_error::Path) -> String {
    let s = path.to_string();
    if s == "." {
        String::new()
    } else {
        s
    }
}

/// Parses and validates an application definition (YAML or JSON, sniffed).
pub fn parse_application(text: &str) -> Result<Application, ModelError> {
    let app: Application = parse(text, Format::sniff(text))?;
    app.validate()?;
    Ok(app)
}

/// Parses and validates a cluster snapshot (YAML or JSON, sniffed).
pub fn parse_cluster(text: &str) -> Result<Cluster, ModelError> {
    let c: Cluster = parse(text, Format::sniff(text))?;
    c.validate()?;
    Ok(c)
}

fn read(path: &Path) -> Result<String, ModelError> {
    std::fs::read_to_string(path).map_err(|e| {
        ModelError::new("", format!("cannot read the file: {e}"))
            .in_file(path.display().to_string())
    })
}

/// Reads, parses and validates a cluster file; errors name the file.
pub fn load_cluster(path: &Path) -> Result<Cluster, ModelError> {
    parse_cluster(&read(path)?).map_err(|e| e.in_file(path.display().to_string()))
}

/// Reads, parses and validates an application file; errors name the file.
pub fn load_application(path: &Path) -> Result<Application, ModelError> {
    parse_application(&read(path)?).map_err(|e| e.in_file(path.display().to_string()))
}
