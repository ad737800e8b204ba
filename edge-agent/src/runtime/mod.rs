//! Container runtimes: what the reconciler's actions are carried out with.

use acoa_shared::wire::{ContainerSpec, HealthSpec};

use crate::reconciler::{Observed, RunState};

pub mod check;
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

/// What the agent asked of the runtime, with the container (its spec name, `{app}.{component}`)
/// where the request was about one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Reach the runtime at all (socket, kubeconfig, client).
    Connect {
        to: String,
    },
    List,
    Create {
        container: String,
    },
    Start {
        container: String,
    },
    Remove {
        container: String,
    },
    Restart {
        container: String,
    },
    Usage,
}

impl Op {
    /// The container the request was about.
    pub fn container(&self) -> Option<&str> {
        match self {
            Op::Create { container }
            | Op::Start { container }
            | Op::Remove { container }
            | Op::Restart { container } => Some(container),
            Op::Connect { .. } | Op::List | Op::Usage => None,
        }
    }

    /// The request's verb: `create`, `start`, `list` ...
    pub fn verb(&self) -> &'static str {
        match self {
            Op::Connect { .. } => "connect",
            Op::List => "list",
            Op::Create { .. } => "create",
            Op::Start { .. } => "start",
            Op::Remove { .. } => "remove",
            Op::Restart { .. } => "restart",
            Op::Usage => "usage",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Connect { to } => write!(f, "connect to {to}"),
            Op::List => f.write_str("list the managed containers"),
            Op::Create { container } => write!(f, "create container {container}"),
            Op::Start { container } => write!(f, "start container {container}"),
            Op::Remove { container } => write!(f, "remove container {container}"),
            Op::Restart { container } => write!(f, "restart container {container}"),
            Op::Usage => f.write_str("read the containers' usage"),
        }
    }
}

/// The error a runtime's own client gave.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// A request to the runtime that failed: which one, on which container, and why.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime could not be reached at all.
    #[error("cannot {op}: {runtime} unreachable: {source}")]
    Unavailable {
        runtime: &'static str,
        op: Op,
        #[source]
        source: Source,
    },
    /// The runtime answered with an error status.
    #[error("cannot {op}: {runtime} answered {status}: {message}")]
    Refused {
        runtime: &'static str,
        op: Op,
        status: u16,
        message: String,
        #[source]
        source: Source,
    },
    /// The request could not be made (a setting or a document the runtime cannot take).
    #[error("cannot {op}: {source}")]
    Invalid {
        op: Op,
        #[source]
        source: Source,
    },
}

impl RuntimeError {
    pub fn op(&self) -> &Op {
        match self {
            RuntimeError::Unavailable { op, .. }
            | RuntimeError::Refused { op, .. }
            | RuntimeError::Invalid { op, .. } => op,
        }
    }

    /// Why, without the request: `podman answered 500: image not known`.
    pub fn reason(&self) -> String {
        match self {
            RuntimeError::Unavailable {
                runtime, source, ..
            } => format!("{runtime} unreachable: {source}"),
            RuntimeError::Refused {
                runtime,
                status,
                message,
                ..
            } => format!("{runtime} answered {status}: {message}"),
            RuntimeError::Invalid { source, .. } => source.to_string(),
        }
    }
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
    /// Stops (briefly) and starts a running container again.
    async fn restart(&self, name: &str) -> Result<(), RuntimeError>;
    /// Runs the health check of the running container `name` once, within its timeout: `Ok`
    /// when it passed, why not otherwise.
    async fn check(&self, name: &str, check: &HealthSpec) -> Result<(), String>;
    /// CPU time and memory of the running managed containers of this node (empty where the
    /// runtime does not tell).
    async fn usage(&self) -> Result<Vec<crate::stats::ContainerUsage>, RuntimeError> {
        Ok(Vec::new())
    }
}

/// The environment the agent adds to every container it starts: `ACOA_APP`, `ACOA_COMPONENT`,
/// `ACOA_CONTAINER` (the container's name, which its stats datagrams give) and, when workload
/// stats are collected, `ACOA_AGENT_STATS` (where to send them).
pub fn injected_env(spec: &ContainerSpec, stats: Option<&str>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|e| {
            !matches!(
                e.name.as_str(),
                "ACOA_APP" | "ACOA_COMPONENT" | "ACOA_CONTAINER" | "ACOA_AGENT_STATS"
            )
        })
        .map(|e| (e.name.to_string(), e.value.to_string()))
        .collect();
    env.push(("ACOA_APP".into(), spec.app.to_string()));
    env.push(("ACOA_COMPONENT".into(), spec.component.to_string()));
    env.push(("ACOA_CONTAINER".into(), spec.name.to_string()));
    if let Some(a) = stats {
        env.push(("ACOA_AGENT_STATS".into(), a.to_string()));
    }
    env
}

/// A container as a runtime lists it: its labels give the spec hash and the generation it was
/// created with (a missing label: an empty hash, generation 0, so that it is replaced).
pub(crate) fn observed<'a>(
    name: String,
    image: String,
    state: RunState,
    label: impl Fn(&str) -> Option<&'a String>,
) -> Observed {
    Observed {
        name,
        image,
        spec_hash: label(LABEL_SPEC).cloned().unwrap_or_default(),
        generation: label(LABEL_GENERATION)
            .and_then(|g| g.parse().ok())
            .unwrap_or(0),
        state,
    }
}
