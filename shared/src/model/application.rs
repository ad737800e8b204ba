//! The application definition (`app.yaml`): components (vertices), channels (edges), paths
//! and criteria, with its validation.

use super::checks::{check_count, check_labels, check_name, check_opt_rate};
use super::limits::{
    DEFAULT_TOLERATE_S, MAX_CHANNELS, MAX_COMPONENTS, MAX_CRITERIA, MAX_IMAGE_LEN, MAX_LABELS,
    MAX_PATHS, MAX_TOLERATE_S,
};
use super::{Health, Layer, ModelError, Update};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;

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
    /// What happens to components on a node the control plane cannot hear but whose peers
    /// still reach it (unreachable), and when it comes back.
    #[serde(default, skip_serializing_if = "Disconnect::is_default")]
    pub disconnect: Disconnect,
    /// How a new revision replaces the running one (`docs/model.md`, "update"); without it,
    /// everything changes at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
}

/// The disconnect policy (`docs/model.md`, "disconnect"). Components on an unreachable node
/// keep their placement for `tolerate_s` seconds, then those that other nodes can host are
/// placed elsewhere; components only the cut-off group can host (pinned to its hardware or
/// by `requires.node`) stay. When the node returns and a component runs twice, `on_return`
/// decides which copy stays. A lost node's components are placed elsewhere at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disconnect {
    /// Seconds an unreachable node's components are tolerated before they are replaced.
    #[serde(default = "default_tolerate_s")]
    pub tolerate_s: u64,
    #[serde(default)]
    pub on_return: OnReturn,
}

fn default_tolerate_s() -> u64 {
    DEFAULT_TOLERATE_S
}

impl Default for Disconnect {
    fn default() -> Self {
        Disconnect {
            tolerate_s: DEFAULT_TOLERATE_S,
            on_return: OnReturn::Original,
        }
    }
}

impl Disconnect {
    pub fn is_default(&self) -> bool {
        *self == Disconnect::default()
    }
}

/// Which copy of a component stays when a node comes back and its component was replaced
/// meanwhile: the one on the returning node, the replacement, or the one of the better score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnReturn {
    #[default]
    Original,
    Replacement,
    Best,
}

impl OnReturn {
    pub fn as_str(self) -> &'static str {
        match self {
            OnReturn::Original => "original",
            OnReturn::Replacement => "replacement",
            OnReturn::Best => "best",
        }
    }
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
    /// Checked by the agent of the node it runs on, which restarts it when it is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
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
        check_count("components", self.components.len(), MAX_COMPONENTS)?;
        check_count("channels", self.channels.len(), MAX_CHANNELS)?;
        check_count("paths", self.paths.len(), MAX_PATHS)?;
        check_count("criteria", self.criteria.len(), MAX_CRITERIA)?;
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
                || c.image.len() > MAX_IMAGE_LEN
                || c.image
                    .chars()
                    .any(|ch| ch.is_whitespace() || ch.is_control())
            {
                return Err(ModelError::new(
                    format!("components[{i}].image"),
                    format!("must be an image reference of 1 to {MAX_IMAGE_LEN} characters without spaces or control characters"),
                ));
            }
            for (list, labels) in [
                ("hardware", &c.requires.hardware),
                ("software", &c.requires.software),
            ] {
                let field = format!("components[{i}].requires.{list}");
                check_count(&field, labels.len(), MAX_LABELS)?;
                check_labels(&field, labels)?;
            }
            if let Some(n) = &c.requires.node {
                check_name(&format!("components[{i}].requires.node"), n)?;
            }
            if let Some(d) = &c.requires.datacenter {
                check_name(&format!("components[{i}].requires.datacenter"), d)?;
            }
            if let Some(a) = &c.requires.arch {
                check_name(&format!("components[{i}].requires.arch"), a)?;
            }
        }
        for (i, c) in self.components.iter().enumerate() {
            if let Some(r) = &c.resources {
                check_opt_rate(&format!("components[{i}].resources.net_mbps"), r.net_mbps)?;
                check_opt_rate(&format!("components[{i}].resources.io_mbps"), r.io_mbps)?;
            }
            if let Some(h) = &c.health {
                h.validate(&format!("components[{i}].health"))?;
            }
        }
        if self.disconnect.tolerate_s > MAX_TOLERATE_S {
            return Err(ModelError::new(
                "disconnect.tolerate_s",
                format!(
                    "{} s is more than the most, {MAX_TOLERATE_S} s (7 days)",
                    self.disconnect.tolerate_s
                ),
            ));
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
        if let Some((closing, cycle)) = channel_cycle(&self.components, &self.channels) {
            let ch = &self.channels[closing];
            let mut route = vec![self.channels[cycle[0]].from.as_str()];
            route.extend(cycle.iter().map(|k| self.channels[*k].to.as_str()));
            let names: Vec<String> = cycle
                .iter()
                .map(|k| format!("`{}`", self.channels[*k].name))
                .collect();
            return Err(ModelError::new(
                format!("channels[{closing}]"),
                format!(
                    "channel `{}` closes the cycle {} (channels {}); channels must not form a cycle",
                    ch.name,
                    route.join(" -> "),
                    names.join(", ")
                ),
            ));
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
        if let Some(u) = &self.update {
            u.validate(|p| paths.contains_key(p))?;
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
                if !paths.contains_key(pname.as_str()) {
                    return Err(ModelError::new(
                        format!("criteria[{i}].path"),
                        format!("path `{pname}` does not exist"),
                    ));
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

/// The first directed cycle of the channel graph (depth-first, in declaration order), if
/// it has one: the index of the channel that closes it and the cycle's channels in order
/// (ending with that one). Every channel end must exist.
fn channel_cycle(components: &[Component], channels: &[Channel]) -> Option<(usize, Vec<usize>)> {
    let index: HashMap<&str, usize> = components
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let mut out: Vec<Vec<(usize, usize)>> = vec![Vec::new(); components.len()];
    for (k, ch) in channels.iter().enumerate() {
        out[index[ch.from.as_str()]].push((k, index[ch.to.as_str()]));
    }
    // 0: not seen, 1: on the current route, 2: done (no cycle through it).
    let mut state = vec![0u8; components.len()];
    for root in 0..components.len() {
        if state[root] != 0 {
            continue;
        }
        // The current route: (component, next outgoing channel to try, channel taken to it).
        let mut route: Vec<(usize, usize, Option<usize>)> = vec![(root, 0, None)];
        state[root] = 1;
        while let Some(top) = route.last_mut() {
            let (v, next) = (top.0, top.1);
            let Some(&(k, w)) = out[v].get(next) else {
                state[v] = 2;
                route.pop();
                continue;
            };
            top.1 += 1;
            match state[w] {
                0 => {
                    state[w] = 1;
                    route.push((w, 0, Some(k)));
                }
                1 => {
                    let from = route.iter().position(|r| r.0 == w).unwrap_or(0);
                    let mut cycle: Vec<usize> =
                        route[from + 1..].iter().filter_map(|r| r.2).collect();
                    cycle.push(k);
                    return Some((k, cycle));
                }
                _ => {}
            }
        }
    }
    None
}
