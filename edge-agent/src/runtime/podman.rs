//! Podman through its REST API (podman-api).

use std::collections::HashMap;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use acoa_shared::wire::{CheckSpec, ContainerSpec, HealthSpec};
use podman_api::models::{LinuxCpu, LinuxMemory, LinuxResources, Namespace, Schema2HealthConfig};
use podman_api::opts::{
    ContainerCreateOpts, ContainerDeleteOpts, ContainerListFilter, ContainerListOpts,
    ContainerStatsOpts, ContainerStopOpts,
};
use podman_api::Podman;

use super::*;
use crate::reconciler::RunState;

/// Seconds a container gets to stop before it is killed.
const STOP_TIMEOUT_S: usize = 3;
/// Longer than a check's own timeout the agent waits for Podman's answer to a command check.
const CHECK_SLACK: Duration = Duration::from_secs(5);
/// The most of a failed command check's output quoted in its reason, characters.
const CHECK_OUTPUT_MAX: usize = 80;

/// Podman's health configuration of a command check (`Test: ["CMD", args...]`), so that
/// `podman ps` and `podman inspect` show its health too; `None` for the checks the agent runs
/// itself (TCP, HTTP). Podman's own timer needs systemd, so the agent runs each check through
/// Podman (`/containers/{name}/healthcheck`) on its interval.
pub fn health_config(h: &HealthSpec) -> Option<Schema2HealthConfig> {
    let CheckSpec::Cmd(args) = &h.check else {
        return None;
    };
    let ns = |s: u16| i64::from(s) * 1_000_000_000;
    let mut test = vec!["CMD".to_owned()];
    test.extend(args.iter().map(|a| a.to_string()));
    Some(Schema2HealthConfig {
        test: Some(test),
        interval: Some(ns(h.interval_s)),
        timeout: Some(ns(h.timeout_s)),
        retries: Some(i64::from(h.retries)),
        start_period: Some(ns(h.start_period_s)),
    })
}

/// The most of an inspect answer read, bytes (one container's is about 10 KB).
const INSPECT_MAX: u64 = 1 << 20;

/// Where the agent reaches a container's ports (from its inspect document): its address on a
/// Podman network, or the loopback address when it has none (it shares the agent's network
/// namespace).
pub fn container_ip(inspect: &serde_json::Value) -> IpAddr {
    let ns = &inspect["NetworkSettings"];
    let nets = ns["Networks"].as_object();
    std::iter::once(&ns["IPAddress"])
        .chain(
            nets.into_iter()
                .flat_map(|m| m.values().map(|n| &n["IPAddress"])),
        )
        .filter_map(|ip| ip.as_str()?.parse().ok())
        .next()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Why a command check failed, from the last entry of the container's health log (in its
/// inspect document).
pub fn failed_run(inspect: &serde_json::Value) -> Option<String> {
    let last = inspect["State"]["Health"]["Log"].as_array()?.last()?;
    let mut why = format!("exited with {}", last["ExitCode"].as_i64()?);
    let out = last["Output"].as_str().unwrap_or_default().trim();
    if !out.is_empty() {
        let mut shown: String = out
            .chars()
            .take(CHECK_OUTPUT_MAX)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if out.chars().nth(CHECK_OUTPUT_MAX).is_some() {
            shown.push_str("...");
        }
        why = format!("{why}: {shown}");
    }
    Some(why)
}

pub struct PodmanRuntime {
    podman: Podman,
    node: String,
    netns: Option<String>,
    /// `ACOA_AGENT_STATS` for the containers created.
    stats: Option<String>,
    /// The socket's path, for the raw inspect of health checks.
    socket_path: Option<std::path::PathBuf>,
}

/// `op` failed with Podman's error `e`: an answer with an error status is
/// [`RuntimeError::Refused`], anything else (no socket, no answer) [`RuntimeError::Unavailable`].
fn classify(op: Op, e: podman_api::Error) -> RuntimeError {
    match e {
        podman_api::Error::Fault { code, ref message } => RuntimeError::Refused {
            runtime: "podman",
            op,
            status: code.as_u16(),
            message: message.clone(),
            source: Box::new(e),
        },
        other => RuntimeError::Unavailable {
            runtime: "podman",
            op,
            source: Box::new(other),
        },
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
            None => Podman::new(socket).map_err(|e| RuntimeError::Invalid {
                op: Op::Connect {
                    to: format!("podman socket {socket:?}"),
                },
                source: Box::new(e),
            })?,
        };
        Ok(PodmanRuntime {
            podman,
            node: node.to_owned(),
            netns,
            stats: None,
            socket_path: socket.strip_prefix("unix://").map(Into::into),
        })
    }

    /// Containers created from now on are told to send their stats to `addr`.
    pub fn with_stats(mut self, addr: Option<String>) -> Self {
        self.stats = addr;
        self
    }

    /// The gateway of Podman's default network (`podman`): where containers on its bridge
    /// reach the host.
    pub async fn default_gateway(&self) -> Option<std::net::IpAddr> {
        let net = self.podman.networks().get("podman").inspect().await.ok()?;
        net.subnets?
            .into_iter()
            .find_map(|s| s.gateway?.parse().ok())
    }

    fn full_name(&self, name: &str) -> String {
        container_name(&self.node, name)
    }

    /// The inspect document of container `name`, as JSON. Read with a plain HTTP/1.0 request on
    /// the socket: podman-api's typed inspect model would add about 300 KB of code to the agent
    /// for the two fields health checks read.
    async fn inspect_json(&self, name: &str) -> Result<serde_json::Value, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let path = self
            .socket_path
            .as_ref()
            .ok_or("podman is not on a unix socket")?;
        let mut s = tokio::net::UnixStream::connect(path)
            .await
            .map_err(|e| format!("podman: {e}"))?;
        let req = format!(
            "GET /v4.0.0/libpod/containers/{}/json HTTP/1.0\r\nHost: podman\r\n\r\n",
            self.full_name(name)
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("podman: {e}"))?;
        let mut buf = Vec::new();
        s.take(INSPECT_MAX)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("podman: {e}"))?;
        if !buf.starts_with(b"HTTP/1.0 200") && !buf.starts_with(b"HTTP/1.1 200") {
            let line = buf.split(|b| *b == b'\r').next().unwrap_or_default();
            return Err(format!("podman: {}", String::from_utf8_lossy(line)));
        }
        let body = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| &buf[i + 4..])
            .ok_or("podman: the answer has no body")?;
        serde_json::from_slice(body).map_err(|e| format!("podman: {e}"))
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
            .map_err(|e| classify(Op::List, e))?;
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
            out.push(observed(
                name.to_owned(),
                c.image.unwrap_or_default(),
                run_state(c.state.as_deref().unwrap_or(""), c.exit_code),
                |k| labels.get(k),
            ));
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
            .env(injected_env(spec, self.stats.as_deref()))
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
        if let Some(hc) = spec.health.as_deref().and_then(health_config) {
            b = b.health_config(hc);
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
            .map_err(|e| {
                classify(
                    Op::Create {
                        container: spec.name.to_string(),
                    },
                    e,
                )
            })
    }

    async fn start(&self, name: &str) -> Result<(), RuntimeError> {
        self.podman
            .containers()
            .get(self.full_name(name))
            .start(None)
            .await
            .map_err(|e| {
                classify(
                    Op::Start {
                        container: name.to_owned(),
                    },
                    e,
                )
            })
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
            Err(e) => Err(classify(
                Op::Remove {
                    container: name.to_owned(),
                },
                e,
            )),
        }
    }

    async fn restart(&self, name: &str) -> Result<(), RuntimeError> {
        self.podman
            .containers()
            .get(self.full_name(name))
            .restart_with_timeout(STOP_TIMEOUT_S)
            .await
            .map_err(|e| {
                classify(
                    Op::Restart {
                        container: name.to_owned(),
                    },
                    e,
                )
            })
    }

    async fn check(&self, name: &str, check: &HealthSpec) -> Result<(), String> {
        let c = self.podman.containers().get(self.full_name(name));
        let timeout = Duration::from_secs(u64::from(check.timeout_s.max(1)));
        let port = match &check.check {
            CheckSpec::Cmd(_) => {
                // Podman runs it in the container with the timeout it was created with
                let res = tokio::time::timeout(timeout + CHECK_SLACK, c.healthcheck()).await;
                return match res {
                    Ok(Ok(r)) if r.status.as_deref() == Some("healthy") => Ok(()),
                    Ok(Ok(r)) => {
                        let why = self.inspect_json(name).await.ok();
                        let why = why.as_ref().and_then(failed_run);
                        Err(why.unwrap_or_else(|| {
                            format!("podman says {}", r.status.as_deref().unwrap_or("nothing"))
                        }))
                    }
                    Ok(Err(e)) => Err(format!("podman: {e}")),
                    Err(_) => Err(format!(
                        "podman did not answer within {} s",
                        (timeout + CHECK_SLACK).as_secs()
                    )),
                };
            }
            CheckSpec::Tcp(p) => *p,
            CheckSpec::Http { port, .. } => *port,
        };
        let inspect = tokio::time::timeout(timeout + CHECK_SLACK, self.inspect_json(name));
        let ip = match inspect.await {
            Ok(Ok(i)) => container_ip(&i),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("podman did not answer".into()),
        };
        let addr = SocketAddr::new(ip, port);
        match &check.check {
            CheckSpec::Http { path, .. } => super::check::http(addr, path, timeout).await,
            _ => super::check::tcp(addr, timeout).await,
        }
    }

    async fn usage(&self) -> Result<Vec<crate::stats::ContainerUsage>, RuntimeError> {
        let running: Vec<String> = self
            .list()
            .await?
            .into_iter()
            .filter(|o| o.state == RunState::Running)
            .map(|o| o.name)
            .collect();
        if running.is_empty() {
            return Ok(Vec::new());
        }
        let opts = ContainerStatsOpts::builder()
            .containers(running.iter().map(|n| self.full_name(n)))
            .build();
        let v = self
            .podman
            .containers()
            .stats(&opts)
            .await
            .map_err(|e| classify(Op::Usage, e))?;
        Ok(parse_stats(&v, &self.full_name("")))
    }
}

/// The containers' figures in an answer of `/libpod/containers/stats` (`{"Stats": [...]}`);
/// names without `prefix` (`acoa-{node}-`) are not ours and left out.
pub fn parse_stats(v: &serde_json::Value, prefix: &str) -> Vec<crate::stats::ContainerUsage> {
    let Some(list) = v.get("Stats").and_then(|s| s.as_array()) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|c| {
            let name = c.get("Name")?.as_str()?.trim_start_matches('/');
            Some(crate::stats::ContainerUsage {
                name: name.strip_prefix(prefix)?.to_owned(),
                cpu_ns: c.get("CPUNano")?.as_u64()?,
                at_ns: c.get("SystemNano")?.as_u64()?,
                memory_bytes: c.get("MemUsage").and_then(|m| m.as_u64()).unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_answers_parse() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"Error":null,"Stats":[{"Name":"acoa-n1-app.a","CPUNano":28531036,"SystemNano":1796036880201673187,"MemUsage":2166784},
                {"Name":"other","CPUNano":1,"SystemNano":1,"MemUsage":1},{"Name":"acoa-n1-app.b"}]}"#,
        )
        .unwrap();
        let u = parse_stats(&v, "acoa-n1-");
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].name, "app.a");
        assert_eq!(u[0].cpu_ns, 28531036);
        assert_eq!(u[0].memory_bytes, 2166784);
        assert!(parse_stats(&serde_json::json!({"Error": "x"}), "acoa-n1-").is_empty());
    }

    #[test]
    fn a_failed_request_names_the_operation_and_the_container_and_keeps_the_source() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Nothing listens on this socket: unreachable, with the client's error as the source.
        let gone = PodmanRuntime::new("unix:///nonexistent/podman.sock", "n1", None).unwrap();
        let e = rt.block_on(gone.list()).unwrap_err();
        assert!(
            matches!(e, RuntimeError::Unavailable { op: Op::List, .. }),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert!(
            e.to_string()
                .starts_with("cannot list the managed containers: podman unreachable: "),
            "{e}"
        );
        // The real Podman refuses to start a container that does not exist.
        if !acoa_test_support::podman_ok() {
            eprintln!(
                "SKIPPED the Podman half: no Podman at {}",
                acoa_test_support::PODMAN_SOCKET
            );
            return;
        }
        let real = PodmanRuntime::new(
            &format!("unix://{}", acoa_test_support::PODMAN_SOCKET),
            "acoa-runtime-error-test",
            None,
        )
        .unwrap();
        let e = rt.block_on(real.start("app.absent")).unwrap_err();
        let RuntimeError::Refused { op, status, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(op.container(), Some("app.absent"));
        assert_eq!(*status, 404);
        assert!(std::error::Error::source(&e).is_some());
        assert!(
            e.to_string()
                .starts_with("cannot start container app.absent: podman answered 404: "),
            "{e}"
        );
        // What the actual state reports for it (unchanged format).
        assert!(e.reason().starts_with("podman answered 404: "), "{e}");
        assert_eq!(e.op().verb(), "start");
    }

    #[test]
    fn a_command_check_is_podmans_health_config_and_the_others_are_not() {
        let mut h = HealthSpec {
            check: CheckSpec::Cmd(
                ["sh", "-c", "test -f /ok"]
                    .iter()
                    .map(|a| acoa_shared::wire::bounded("a", a).unwrap())
                    .collect(),
            ),
            interval_s: 5,
            timeout_s: 2,
            retries: 3,
            start_period_s: 10,
        };
        let c = health_config(&h).unwrap();
        assert_eq!(
            c.test.unwrap(),
            ["CMD", "sh", "-c", "test -f /ok"].map(String::from)
        );
        assert_eq!(c.interval, Some(5_000_000_000));
        assert_eq!(c.timeout, Some(2_000_000_000));
        assert_eq!(c.retries, Some(3));
        assert_eq!(c.start_period, Some(10_000_000_000));
        h.check = CheckSpec::Tcp(80);
        assert!(health_config(&h).is_none());
    }

    #[test]
    fn the_address_and_the_failure_come_from_the_inspect_document() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"NetworkSettings":{"IPAddress":"","Networks":{"podman":{"IPAddress":"10.88.0.7"}}},
                "State":{"Health":{"Status":"unhealthy","Log":[{"ExitCode":0,"Output":""},
                {"ExitCode":1,"Output":"no such file\n"}]}}}"#,
        )
        .unwrap();
        assert_eq!(container_ip(&v).to_string(), "10.88.0.7");
        assert_eq!(
            failed_run(&v).as_deref(),
            Some("exited with 1: no such file")
        );
        // in the node's namespace (no network of its own): loopback
        let v = serde_json::json!({"NetworkSettings": {"IPAddress": ""}});
        assert_eq!(container_ip(&v).to_string(), "127.0.0.1");
        assert_eq!(failed_run(&v), None);
    }

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
