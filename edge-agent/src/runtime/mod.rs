//! Container runtimes: what the reconciler's actions are carried out with.

use acoa_shared::wire::ContainerSpec;

use crate::reconciler::Observed;

pub mod k3s;
pub mod podman;

/// Labels on every container the agent manages.
pub const LABEL_MANAGED: &str = "acoa.managed";
pub const LABEL_NODE: &str = "acoa.node";
pub const LABEL_APP: &str = "acoa.app";
pub const LABEL_COMPONENT: &str = "acoa.component";
pub const LABEL_GENERATION: &str = "acoa.generation";
/// Hash of the spec a container was created from (see `reconciler::spec_hash`).
pub const LABEL_SPEC: &str = "acoa.spec";
/// The spec name (`{app}.{component}`).
pub const LABEL_NAME: &str = "acoa.name";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime could not be reached at all.
    #[error("{0}")]
    Unavailable(String),
    /// The runtime answered with an error.
    #[error("{0}")]
    Failed(String),
}

/// The container name of a spec on a node: `acoa-{node}-{spec.name}`.
pub fn container_name(node: &str, spec_name: &str) -> String {
    format!("acoa-{node}-{spec_name}")
}

/// A runtime that runs containers for the reconciler. Implementations only touch
/// containers labelled `acoa.managed=true` and `acoa.node={node}`.
#[allow(async_fn_in_trait)]
pub trait Runtime {
    /// The managed containers of this node.
    async fn list(&self) -> Result<Vec<Observed>, RuntimeError>;
    async fn create(
        &self,
        spec: &ContainerSpec,
        generation: u64,
        spec_hash: &str,
    ) -> Result<(), RuntimeError>;
    async fn start(&self, name: &str) -> Result<(), RuntimeError>;
    /// Stops (briefly) and removes; a container already gone is not an error.
    async fn remove(&self, name: &str) -> Result<(), RuntimeError>;
    /// CPU time and memory of the running managed containers of this node (empty where the
    /// runtime does not tell).
    async fn usage(&self) -> Result<Vec<crate::stats::ContainerUsage>, RuntimeError> {
        Ok(Vec::new())
    }
}

/// The environment the agent adds to every container it starts: `ACOA_APP`, `ACOA_COMPONENT`
/// and, when workload stats are collected, `ACOA_AGENT_STATS` (where to send them).
pub fn injected_env(spec: &ContainerSpec, stats: Option<&str>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|e| {
            !matches!(
                e.name.as_str(),
                "ACOA_APP" | "ACOA_COMPONENT" | "ACOA_AGENT_STATS"
            )
        })
        .map(|e| (e.name.to_string(), e.value.to_string()))
        .collect();
    env.push(("ACOA_APP".into(), spec.app.to_string()));
    env.push(("ACOA_COMPONENT".into(), spec.component.to_string()));
    if let Some(a) = stats {
        env.push(("ACOA_AGENT_STATS".into(), a.to_string()));
    }
    env
}
