//! Constraint plugins: each one filters the candidate nodes of a component (the
//! "filter" extension point of the Kubernetes scheduling framework).

use crate::infra::Infra;
use crate::ledger::{Ledger, NODE_CONTAINER_LIMIT};
use acoa_shared::model::{Component, Node};

/// What a constraint plugin may look at besides the node and the component.
pub struct FilterCtx<'a> {
    pub infra: &'a Infra,
    pub ledger: &'a Ledger,
}

/// A constraint: a node either may host a component or may not.
pub trait Constraint: Send + Sync {
    /// Short name, used in infeasibility reasons.
    fn name(&self) -> &'static str;
    /// Whether `node` may host `comp`.
    fn admits(&self, ctx: &FilterCtx<'_>, node: u32, comp: &Component) -> bool;
    /// The rule as it applies to `comp`, e.g. "datacenter = train1"; `None` when the
    /// plugin has nothing to say about `comp` (it then admits every node).
    fn describe(&self, comp: &Component) -> Option<String>;
    /// Whether this constraint is one of the component's `requires` (true) or a resource
    /// constraint (false), which `l_min` ignores.
    fn is_requirement(&self) -> bool {
        true
    }
    /// Why none of `nodes` (all refused) may host `comp`, when the plugin says it better than
    /// "none of them has <rule>".
    fn explain_refusal(
        &self,
        _ctx: &FilterCtx<'_>,
        _nodes: &[u32],
        _comp: &Component,
    ) -> Option<String> {
        None
    }
}

fn node<'a>(ctx: &'a FilterCtx<'_>, i: u32) -> &'a Node {
    ctx.infra.node(i)
}

pub struct Hardware;
impl Constraint for Hardware {
    fn name(&self) -> &'static str {
        "hardware"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        let n = node(ctx, n);
        c.requires.hardware.iter().all(|h| n.hardware.contains(h))
    }
    fn describe(&self, c: &Component) -> Option<String> {
        (!c.requires.hardware.is_empty())
            .then(|| format!("hardware [{}]", c.requires.hardware.join(", ")))
    }
}

pub struct Software;
impl Constraint for Software {
    fn name(&self) -> &'static str {
        "software"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        let n = node(ctx, n);
        c.requires.software.iter().all(|s| n.software.contains(s))
    }
    fn describe(&self, c: &Component) -> Option<String> {
        (!c.requires.software.is_empty())
            .then(|| format!("software [{}]", c.requires.software.join(", ")))
    }
}

pub struct Datacenter;
impl Constraint for Datacenter {
    fn name(&self) -> &'static str {
        "datacenter"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        c.requires
            .datacenter
            .as_ref()
            .is_none_or(|d| *d == node(ctx, n).datacenter)
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.requires
            .datacenter
            .as_ref()
            .map(|d| format!("datacenter {d}"))
    }
}

pub struct LayerC;
impl Constraint for LayerC {
    fn name(&self) -> &'static str {
        "layer"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        c.requires.layer.is_none_or(|l| l == node(ctx, n).layer)
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.requires.layer.map(|l| format!("layer {l}"))
    }
}

pub struct Arch;
impl Constraint for Arch {
    fn name(&self) -> &'static str {
        "arch"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        c.requires
            .arch
            .as_ref()
            .is_none_or(|a| *a == node(ctx, n).arch)
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.requires.arch.as_ref().map(|a| format!("arch {a}"))
    }
}

pub struct FreeDisk;
impl Constraint for FreeDisk {
    fn name(&self) -> &'static str {
        "min_free_disk_mb"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        c.requires
            .min_free_disk_mb
            .is_none_or(|d| node(ctx, n).free_disk_mb() >= d)
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.requires
            .min_free_disk_mb
            .map(|d| format!("min_free_disk_mb {d}"))
    }
}

/// `requires.node`: the component is pinned to one node by name. Like resources it is not a
/// requirement for `l_min`: the reference latency stays that of the unpinned application, so a
/// pinned deployment scores exactly as the same deployment chosen freely (the random baseline
/// of experiment 2 runs pinned deployments through the control plane). Applied after the
/// requirements, so a pin to a node that fails one of them is reported naming the pinned node.
pub struct Pin;
impl Constraint for Pin {
    fn name(&self) -> &'static str {
        "node"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        c.requires
            .node
            .as_ref()
            .is_none_or(|p| *p == node(ctx, n).name)
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.requires
            .node
            .as_ref()
            .map(|p| format!("the name `{p}` the component is pinned to (requires.node)"))
    }
    fn is_requirement(&self) -> bool {
        false
    }
}

/// The component's own request fits what the node has left:
/// request + usage + ledger reservation <= capacity (cpu and memory).
/// The joint fit of several components on one node is the search's job.
pub struct ResourceFit;
impl Constraint for ResourceFit {
    fn name(&self) -> &'static str {
        "resources"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, c: &Component) -> bool {
        let Some(r) = c.resources else { return true };
        let (cpu, mem) = remaining(ctx, n);
        cpu >= r.cpu_millis as i64 && mem >= r.memory_mb as i64
    }
    fn describe(&self, c: &Component) -> Option<String> {
        c.resources.map(|r| {
            format!(
                "resources cpu_millis {} memory_mb {} (after usage and reservations)",
                r.cpu_millis, r.memory_mb
            )
        })
    }
    fn is_requirement(&self) -> bool {
        false
    }
}

/// The node can be given one more container: the containers other applications' placements
/// put there ([`Ledger::containers`]) are fewer than [`NODE_CONTAINER_LIMIT`], the most a
/// node's desired state carries. How many of the application's own components fit together on
/// a node is the search's job.
pub struct ContainerRoom;
impl Constraint for ContainerRoom {
    fn name(&self) -> &'static str {
        "containers"
    }
    fn admits(&self, ctx: &FilterCtx<'_>, n: u32, _c: &Component) -> bool {
        ctx.ledger.container_room(&node(ctx, n).name) > 0
    }
    fn describe(&self, _c: &Component) -> Option<String> {
        Some(format!(
            "room for one more container (a node's desired state carries at most {NODE_CONTAINER_LIMIT})"
        ))
    }
    fn is_requirement(&self) -> bool {
        false
    }
    fn explain_refusal(
        &self,
        ctx: &FilterCtx<'_>,
        nodes: &[u32],
        _c: &Component,
    ) -> Option<String> {
        let full: Vec<(&str, u32)> = nodes
            .iter()
            .map(|n| {
                let name = node(ctx, *n).name.as_str();
                (name, ctx.ledger.containers(name))
            })
            .collect();
        Some(full_nodes(&full))
    }
}

/// How many nodes a reason names before "and N more".
const NAMED_NODES: usize = 5;

/// Names nodes that have no room for another container, with how many they run, e.g.
/// "n13 already runs 32 containers, the most a node's desired state carries".
pub fn full_nodes(nodes: &[(&str, u32)]) -> String {
    let mut parts: Vec<String> = nodes
        .iter()
        .take(NAMED_NODES)
        .enumerate()
        .map(|(i, (n, k))| {
            if i == 0 {
                format!("{n} already runs {k} containers")
            } else {
                format!("{n} {k}")
            }
        })
        .collect();
    if nodes.len() > NAMED_NODES {
        parts.push(format!("and {} more nodes", nodes.len() - NAMED_NODES));
    }
    let at_limit = nodes.iter().all(|(_, k)| *k == NODE_CONTAINER_LIMIT);
    if at_limit {
        format!(
            "{}, the most a node's desired state carries",
            parts.join(", ")
        )
    } else {
        format!(
            "{} (a node's desired state carries at most {NODE_CONTAINER_LIMIT})",
            parts.join(", ")
        )
    }
}

/// capacity - usage - ledger reservation, per resource (may be negative).
pub fn remaining(ctx: &FilterCtx<'_>, n: u32) -> (i64, i64) {
    let node = node(ctx, n);
    let res = ctx.ledger.reserved(&node.name);
    (
        node.capacity.cpu_millis as i64 - node.usage.cpu_millis as i64 - res.cpu_millis as i64,
        node.capacity.memory_mb as i64 - node.usage.memory_mb as i64 - res.memory_mb as i64,
    )
}

/// The default constraint plugins, in the order they are applied.
pub fn default_constraints() -> Vec<Box<dyn Constraint>> {
    vec![
        Box::new(Hardware),
        Box::new(Software),
        Box::new(Datacenter),
        Box::new(LayerC),
        Box::new(Arch),
        Box::new(FreeDisk),
        Box::new(Pin),
        Box::new(ResourceFit),
        Box::new(ContainerRoom),
    ]
}
