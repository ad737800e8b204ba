//! k3s / Kubernetes: pods bound to this node (`spec.nodeName`), with the same labels
//! as the Podman containers.
//!
//! The pod documents are built here as plain JSON and unit-tested in every build.
//! The client that sends them (kube crate) is behind the cargo feature `k3s`, which
//! the default edge binary leaves out to stay small. Restarting dead containers is
//! the kubelet's job there (`restartPolicy: Always`), so `start` does nothing.
//!
//! Health checks are the kubelet's too: a component's check becomes the container's
//! `livenessProbe` (`exec`, `tcpSocket` or `httpGet`; `periodSeconds`, `timeoutSeconds`,
//! `failureThreshold`, and the start period as `initialDelaySeconds`), so the kubelet restarts
//! it, with its own backoff. The agent runs no checks on k3s and reports no health.

use acoa_shared::wire::{CheckSpec, ContainerSpec, HealthSpec};
use serde_json::{json, Value};

use super::*;

/// A DNS-1123 name from an arbitrary one: lowercase, `[a-z0-9-]` (and `.` where
/// `dots`), starting and ending with an alphanumeric, at most `max` characters.
pub fn dns_name(s: &str, dots: bool, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || (dots && c == '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(max);
    let out = out.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if out.is_empty() {
        "x".into()
    } else {
        out.to_owned()
    }
}

/// The pod name of a spec on a node.
pub fn pod_name(node: &str, spec_name: &str) -> String {
    dns_name(&container_name(node, spec_name), true, 253)
}

/// The pod document for `spec` on `node`.
pub fn pod_document(
    node: &str,
    namespace: &str,
    spec: &ContainerSpec,
    generation: u64,
    spec_hash: &str,
) -> Value {
    let env: Vec<Value> = spec
        .env
        .iter()
        .map(|e| json!({"name": e.name.as_str(), "value": e.value.as_str()}))
        .collect();
    let mut limits = serde_json::Map::new();
    if spec.cpu_millis > 0 {
        limits.insert("cpu".into(), json!(format!("{}m", spec.cpu_millis)));
    }
    if spec.memory_mb > 0 {
        limits.insert("memory".into(), json!(format!("{}Mi", spec.memory_mb)));
    }
    let mut container = json!({
        "name": dns_name(&spec.component, false, 63),
        "image": spec.image.as_str(),
        "env": env,
        "resources": { "limits": limits, "requests": limits },
    });
    if let Some(h) = &spec.health {
        container["livenessProbe"] = liveness_probe(h);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node, &spec.name),
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED: "true",
                LABEL_NODE: node,
                LABEL_APP: spec.app.as_str(),
                LABEL_COMPONENT: spec.component.as_str(),
                LABEL_GENERATION: generation.to_string(),
                LABEL_SPEC: spec_hash,
                LABEL_NAME: spec.name.as_str(),
            }
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 3,
            "containers": [container]
        }
    })
}

/// A health check as the kubelet's `livenessProbe`.
pub fn liveness_probe(h: &HealthSpec) -> Value {
    let mut probe = json!({
        "periodSeconds": h.interval_s,
        "timeoutSeconds": h.timeout_s,
        "failureThreshold": h.retries,
        "initialDelaySeconds": h.start_period_s,
    });
    match &h.check {
        CheckSpec::Cmd(args) => {
            let command: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
            probe["exec"] = json!({ "command": command });
        }
        CheckSpec::Tcp(port) => probe["tcpSocket"] = json!({ "port": port }),
        CheckSpec::Http { port, path } => {
            probe["httpGet"] = json!({ "port": port, "path": path.as_str() })
        }
    }
    probe
}

/// The label selector of this node's managed pods.
pub fn selector(node: &str) -> String {
    format!("{LABEL_MANAGED}=true,{LABEL_NODE}={node}")
}

#[cfg(feature = "k3s")]
pub use live::K3sRuntime;

#[cfg(feature = "k3s")]
mod live {
    use super::*;
    use crate::reconciler::{Observed, RunState};
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, ListParams, PostParams};
    use std::path::Path;

    pub struct K3sRuntime {
        api: Api<Pod>,
        node: String,
        namespace: String,
    }

    /// `op` failed with the Kubernetes client's error `e`: an API answer is
    /// [`RuntimeError::Refused`], anything else [`RuntimeError::Unavailable`].
    fn err(op: Op, e: kube::Error) -> RuntimeError {
        match e {
            kube::Error::Api(ref s) => RuntimeError::Refused {
                runtime: "kubernetes",
                op,
                status: s.code,
                message: s.message.clone(),
                source: Box::new(e),
            },
            other => RuntimeError::Unavailable {
                runtime: "kubernetes",
                op,
                source: Box::new(other),
            },
        }
    }

    /// Reaching the cluster at all failed: kubeconfig or client.
    fn connect(to: String, e: impl std::error::Error + Send + Sync + 'static) -> RuntimeError {
        RuntimeError::Unavailable {
            runtime: "kubernetes",
            op: Op::Connect { to },
            source: Box::new(e),
        }
    }

    impl K3sRuntime {
        pub async fn new(
            kubeconfig: Option<&Path>,
            namespace: &str,
            node: &str,
        ) -> Result<Self, RuntimeError> {
            let config = match kubeconfig {
                Some(path) => {
                    let kc = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| connect(format!("kubeconfig {}", path.display()), e))?;
                    kube::Config::from_custom_kubeconfig(kc, &Default::default())
                        .await
                        .map_err(|e| connect(format!("kubeconfig {}", path.display()), e))?
                }
                None => kube::Config::infer()
                    .await
                    .map_err(|e| connect("the inferred kubeconfig".into(), e))?,
            };
            let client = kube::Client::try_from(config)
                .map_err(|e| connect("the kubernetes client".into(), e))?;
            Ok(K3sRuntime {
                api: Api::namespaced(client, namespace),
                node: node.to_owned(),
                namespace: namespace.to_owned(),
            })
        }
    }

    impl Runtime for K3sRuntime {
        async fn list(&self) -> Result<Vec<Observed>, RuntimeError> {
            let pods = self
                .api
                .list(&ListParams::default().labels(&selector(&self.node)))
                .await
                .map_err(|e| err(Op::List, e))?;
            let mut out = Vec::new();
            for p in pods {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                let Some(name) = labels.get(LABEL_NAME).cloned() else {
                    continue;
                };
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                let state = match phase.as_str() {
                    "Running" => RunState::Running,
                    // The kubelet is pulling, starting or restarting it: leave it be.
                    "Pending" | "" => RunState::Paused,
                    "Succeeded" => RunState::Exited(Some(0)),
                    "Failed" => RunState::Exited(None),
                    other => RunState::Other(other.to_owned()),
                };
                let image = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                out.push(observed(name, image, state, |k| labels.get(k)));
            }
            Ok(out)
        }

        async fn create(
            &self,
            spec: &ContainerSpec,
            generation: u64,
            spec_hash: &str,
        ) -> Result<(), RuntimeError> {
            let doc = pod_document(&self.node, &self.namespace, spec, generation, spec_hash);
            let op = || Op::Create {
                container: spec.name.to_string(),
            };
            let pod: Pod = serde_json::from_value(doc).map_err(|e| RuntimeError::Invalid {
                op: op(),
                source: format!("pod document: {e}").into(),
            })?;
            self.api
                .create(&PostParams::default(), &pod)
                .await
                .map(|_| ())
                .map_err(|e| err(op(), e))
        }

        async fn start(&self, name: &str) -> Result<(), RuntimeError> {
            // A pod that ended for good is replaced: delete it, the next pass creates it.
            let pod = self
                .api
                .get_opt(&pod_name(&self.node, name))
                .await
                .map_err(|e| {
                    err(
                        Op::Start {
                            container: name.to_owned(),
                        },
                        e,
                    )
                })?;
            let phase = pod
                .and_then(|p| p.status)
                .and_then(|s| s.phase)
                .unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                self.remove(name).await?;
            }
            Ok(())
        }

        async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
            let dp = DeleteParams {
                grace_period_seconds: Some(3),
                ..Default::default()
            };
            match self.api.delete(&pod_name(&self.node, name), &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(err(
                    Op::Remove {
                        container: name.to_owned(),
                    },
                    e,
                )),
            }
        }

        /// Not asked for (the reconciler leaves health to the kubelet here): replaces the pod.
        async fn restart(&self, name: &str) -> Result<(), RuntimeError> {
            self.remove(name).await
        }

        async fn check(&self, _name: &str, _check: &HealthSpec) -> Result<(), String> {
            Err("on k3s the kubelet checks health (the pod's livenessProbe)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::wire::{bounded, name, EnvVar};

    fn spec() -> ContainerSpec {
        let mut env = heapless::Vec::new();
        env.push(EnvVar {
            name: bounded("n", "MODE").unwrap(),
            value: bounded("v", "fast").unwrap(),
        })
        .unwrap();
        ContainerSpec {
            name: name("Smoke.Detector_1").unwrap(),
            app: name("smoke").unwrap(),
            component: name("Detector_1").unwrap(),
            image: bounded("image", "localhost/acoa/det:2").unwrap(),
            cpu_millis: 250,
            memory_mb: 64,
            env,
            health: None,
        }
    }

    #[test]
    fn pod_is_bound_to_the_node_with_labels_and_limits() {
        let d = pod_document("n13", "acoa", &spec(), 42, "00ff");
        assert_eq!(d["apiVersion"], "v1");
        assert_eq!(d["kind"], "Pod");
        assert_eq!(d["metadata"]["name"], "acoa-n13-smoke.detector-1");
        assert_eq!(d["metadata"]["namespace"], "acoa");
        let l = &d["metadata"]["labels"];
        assert_eq!(l["acoa.managed"], "true");
        assert_eq!(l["acoa.node"], "n13");
        assert_eq!(l["acoa.app"], "smoke");
        assert_eq!(l["acoa.component"], "Detector_1");
        assert_eq!(l["acoa.generation"], "42");
        assert_eq!(l["acoa.name"], "Smoke.Detector_1");
        assert_eq!(d["spec"]["nodeName"], "n13");
        assert_eq!(d["spec"]["restartPolicy"], "Always");
        let c = &d["spec"]["containers"][0];
        assert_eq!(c["name"], "detector-1");
        assert_eq!(c["image"], "localhost/acoa/det:2");
        assert_eq!(c["env"][0]["name"], "MODE");
        assert_eq!(c["resources"]["limits"]["cpu"], "250m");
        assert_eq!(c["resources"]["limits"]["memory"], "64Mi");
    }

    #[test]
    fn a_health_check_becomes_the_kubelets_liveness_probe() {
        assert!(
            pod_document("n1", "acoa", &spec(), 1, "0")["spec"]["containers"][0]
                .get("livenessProbe")
                .is_none()
        );
        let mut s = spec();
        s.health = Some(Box::new(HealthSpec {
            check: CheckSpec::Http {
                port: 8080,
                path: bounded("p", "/healthz").unwrap(),
            },
            interval_s: 5,
            timeout_s: 2,
            retries: 3,
            start_period_s: 10,
        }));
        let d = pod_document("n1", "acoa", &s, 1, "0");
        let p = &d["spec"]["containers"][0]["livenessProbe"];
        assert_eq!(
            *p,
            json!({"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 5,
                "timeoutSeconds": 2, "failureThreshold": 3, "initialDelaySeconds": 10})
        );
        let h = s.health.as_mut().unwrap();
        h.check = CheckSpec::Tcp(5672);
        assert_eq!(liveness_probe(h)["tcpSocket"], json!({"port": 5672}));
        h.check = CheckSpec::Cmd(
            ["sh", "-c", "test -f /ok"]
                .iter()
                .map(|a| bounded("a", a).unwrap())
                .collect(),
        );
        assert_eq!(
            liveness_probe(h)["exec"],
            json!({"command": ["sh", "-c", "test -f /ok"]})
        );
    }

    #[test]
    fn names_are_dns_safe() {
        assert_eq!(dns_name("-A_b.c-", false, 63), "a-b-c");
        assert_eq!(dns_name("___", false, 63), "x");
        assert_eq!(dns_name(&"a".repeat(100), false, 63).len(), 63);
        assert_eq!(selector("n1"), "acoa.managed=true,acoa.node=n1");
    }
}
