//! Podman through its REST API (podman-api).

use std::collections::HashMap;

use acoa_shared::wire::ContainerSpec;
use podman_api::models::{LinuxCpu, LinuxMemory, LinuxResources, Namespace};
use podman_api::opts::{
    ContainerCreateOpts, ContainerDeleteOpts, ContainerListFilter, ContainerListOpts,
    ContainerStopOpts,
};
use podman_api::Podman;

use super::*;
use crate::reconciler::RunState;

/// Seconds a container gets to stop before it is killed.
const STOP_TIMEOUT_S: usize = 3;

pub struct PodmanRuntime {
    podman: Podman,
    node: String,
    netns: Option<String>,
}

fn classify(e: podman_api::Error) -> RuntimeError {
    match e {
        podman_api::Error::Fault { code, message } => {
            RuntimeError::Failed(format!("podman answered {}: {message}", code.as_u16()))
        }
        other => RuntimeError::Unavailable(format!("podman: {other}")),
    }
}

/// The labels a managed container carries.
pub fn labels(
    node: &str,
    spec: &ContainerSpec,
    generation: u64,
    spec_hash: &str,
) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_NODE.to_owned(), node.to_owned()),
        (LABEL_APP.to_owned(), spec.app.to_string()),
        (LABEL_COMPONENT.to_owned(), spec.component.to_string()),
        (LABEL_GENERATION.to_owned(), generation.to_string()),
        (LABEL_SPEC.to_owned(), spec_hash.to_owned()),
        (LABEL_NAME.to_owned(), spec.name.to_string()),
    ])
}

fn run_state(state: &str, exit_code: Option<i32>) -> RunState {
    match state {
        "running" => RunState::Running,
        "created" | "configured" | "initialized" => RunState::Created,
        "exited" | "stopped" => RunState::Exited(exit_code),
        "paused" => RunState::Paused,
        other => RunState::Other(other.to_owned()),
    }
}

impl PodmanRuntime {
    /// `socket` as in the configuration: `unix:///run/podman/podman.sock`.
    pub fn new(socket: &str, node: &str, netns: Option<String>) -> Result<Self, RuntimeError> {
        let podman = match socket.strip_prefix("unix://") {
            Some(path) => Podman::unix(path),
            None => Podman::new(socket)
                .map_err(|e| RuntimeError::Unavailable(format!("podman socket {socket:?}: {e}")))?,
        };
        Ok(PodmanRuntime {
            podman,
            node: node.to_owned(),
            netns,
        })
    }

    fn full_name(&self, name: &str) -> String {
        container_name(&self.node, name)
    }
}

impl Runtime for PodmanRuntime {
    async fn list(&self) -> Result<Vec<Observed>, RuntimeError> {
        let opts = ContainerListOpts::builder()
            .all(true)
            .filter([
                ContainerListFilter::LabelKeyVal(LABEL_MANAGED.into(), "true".into()),
                ContainerListFilter::LabelKeyVal(LABEL_NODE.into(), self.node.clone()),
            ])
            .build();
        let list = self
            .podman
            .containers()
            .list(&opts)
            .await
            .map_err(classify)?;
        let prefix = self.full_name("");
        let mut out = Vec::with_capacity(list.len());
        for c in list {
            let labels = c.labels.unwrap_or_default();
            // Belt and braces: the filter already did this.
            if labels.get(LABEL_MANAGED).map(String::as_str) != Some("true")
                || labels.get(LABEL_NODE) != Some(&self.node)
            {
                continue;
            }
            let Some(name) = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .and_then(|n| n.trim_start_matches('/').strip_prefix(&prefix))
            else {
                continue;
            };
            out.push(Observed {
                name: name.to_owned(),
                image: c.image.unwrap_or_default(),
                spec_hash: labels.get(LABEL_SPEC).cloned().unwrap_or_default(),
                generation: labels
                    .get(LABEL_GENERATION)
                    .and_then(|g| g.parse().ok())
                    .unwrap_or(0),
                state: run_state(c.state.as_deref().unwrap_or(""), c.exit_code),
            });
        }
        Ok(out)
    }

    async fn create(
        &self,
        spec: &ContainerSpec,
        generation: u64,
        spec_hash: &str,
    ) -> Result<(), RuntimeError> {
        let mut b = ContainerCreateOpts::builder()
            .name(self.full_name(&spec.name))
            .image(spec.image.as_str())
            .labels(labels(&self.node, spec, generation, spec_hash))
            .env(spec.env.iter().map(|e| (e.name.as_str(), e.value.as_str())))
            .stop_timeout(STOP_TIMEOUT_S as u64);
        if spec.cpu_millis > 0 || spec.memory_mb > 0 {
            b = b.resource_limits(LinuxResources {
                block_io: None,
                cpu: (spec.cpu_millis > 0).then(|| LinuxCpu {
                    cpus: None,
                    mems: None,
                    period: Some(100_000),
                    quota: Some((spec.cpu_millis * 100) as i64),
                    realtime_period: None,
                    realtime_runtime: None,
                    shares: None,
                }),
                devices: None,
                hugepage_limits: None,
                memory: (spec.memory_mb > 0).then(|| LinuxMemory {
                    disable_oom_killer: None,
                    kernel: None,
                    kernel_tcp: None,
                    limit: Some((spec.memory_mb * 1024 * 1024) as i64),
                    reservation: None,
                    swap: None,
                    swappiness: None,
                    use_hierarchy: None,
                }),
                network: None,
                pids: None,
                rdma: None,
                unified: None,
            });
        }
        if let Some(ns) = &self.netns {
            b = b.net_namespace(Namespace {
                nsmode: Some("path".into()),
                value: Some(ns.clone()),
            });
        }
        self.podman
            .containers()
            .create(&b.build())
            .await
            .map(|_| ())
            .map_err(classify)
    }

    async fn start(&self, name: &str) -> Result<(), RuntimeError> {
        self.podman
            .containers()
            .get(self.full_name(name))
            .start(None)
            .await
            .map_err(classify)
    }

    async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
        let c = self.podman.containers().get(self.full_name(name));
        // A stop that fails (already stopped, gone) does not matter: the forced delete follows.
        let _ = c
            .stop(&ContainerStopOpts::builder().timeout(STOP_TIMEOUT_S).build())
            .await;
        match c
            .delete(&ContainerDeleteOpts::builder().force(true).build())
            .await
        {
            Ok(()) => Ok(()),
            Err(podman_api::Error::Fault { code, .. }) if code.as_u16() == 404 => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map() {
        assert_eq!(run_state("running", None), RunState::Running);
        assert_eq!(run_state("exited", Some(137)), RunState::Exited(Some(137)));
        assert_eq!(run_state("created", None), RunState::Created);
        assert_eq!(
            run_state("removing", None),
            RunState::Other("removing".into())
        );
    }
}
