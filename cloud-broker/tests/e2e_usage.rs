//! End to end with real processes: the control plane (embedded broker), a real edge agent and
//! real Podman. The application's source container is the testbed's workload program
//! (`acoa-workload`, built here with plain rustc as hil-tests/images.sh does), which counts the
//! messages it sends on its channel and reports them to the agent (ACOA_AGENT_STATS, injected by
//! the agent); the agent publishes signed usage messages; `cloud-broker status` shows the
//! measured traffic between the components and their CPU and memory.
//!
//! Needs: the `edge-agent` binary (built by `cargo build -p edge-agent`, or ACOA_EDGE_AGENT_BIN),
//! the Podman REST socket at /run/podman/podman.sock, `rustc` and `tar`. The containers are on
//! Podman's default bridge: the agent listens for stats on 0.0.0.0 and tells them the bridge's
//! gateway. ACOA_SKIP_PODMAN=1 skips it.

mod common;

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use acoa_test_support::{remove_containers_labelled, workload_image, PODMAN_SOCKET};
use cloud_broker::status::AppStatus;
use common::*;

const SRC_IMAGE: &str = "localhost/acoa/measure-e2e-src:1";
const SINK_IMAGE: &str = "localhost/acoa/measure-e2e-sink:1";

/// The workload images, from the current source: the source emits 20 messages/s on channel
/// `to-sink` (where they go does not matter: they are counted when sent), the sink only listens.
fn workload_images() {
    workload_image(
        SRC_IMAGE,
        &["ACOA_RATE_HZ=20", "ACOA_OUT=to-sink@127.0.0.1:9"],
    );
    workload_image(SINK_IMAGE, &[]);
}

/// Removes the node's containers however the test ends.
struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_containers_labelled("acoa.node", &self.0);
    }
}

struct Agent(Child, PathBuf);
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- agent log ----\n{}",
                std::fs::read_to_string(&self.1).unwrap_or_default()
            );
        }
    }
}

#[test]
fn workload_traffic_reaches_the_control_planes_observed_model() {
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    workload_images();
    let node = format!("mu{}-n1", std::process::id() % 100_000);
    let _cleanup = Cleanup(node.clone());
    let data = dir.path().join("cp");
    let port = free_port();
    let cp = ControlPlane::start(&data, port, &["--deschedule-ms", "1000"]);

    // one agent, enrolled, its stats socket on all addresses (containers on the bridge)
    let state = dir.path().join("agent-state");
    let broker = enroll_agent(&bin, &state, &data, &node, &cp.url);
    let (probe, stats) = (free_port(), free_port());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "node = \"{node}\"\ndatacenter = \"dc\"\nlayer = \"edge\"\nstate_dir = \"{}\"\nreport_period_ms = 500\nimage_allowlist = [\"localhost/acoa/\"]\n[capacity]\ncpu_millis = 4000\nmemory_mb = 4096\n{broker}\n[probe]\nlisten = \"127.0.0.1:{probe}\"\nperiod_ms = 300\n[podman]\nsocket = \"unix://{PODMAN_SOCKET}\"\n[stats]\nlisten = \"0.0.0.0:{stats}\"\n",
            state.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("agent.log");
    let _agent = Agent(spawn_agent(&bin, &config, &log), log.clone());
    cp.wait_log(&format!("node {node} joined"), Duration::from_secs(30));

    let app = dir.path().join("app.yaml");
    std::fs::write(
        &app,
        format!(
            "application: usage-e2e\nscheduler: network-aware\ncomponents:\n\
             - {{name: src, image: '{SRC_IMAGE}'}}\n\
             - {{name: sink, image: '{SINK_IMAGE}'}}\n\
             channels:\n- {{name: to-sink, from: src, to: sink}}\n"
        ),
    )
    .unwrap();
    let status = || -> Option<AppStatus> {
        let out = cli(&data, &["status", "usage-e2e"]);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    };
    wait_for("the application placed", Duration::from_secs(60), || {
        let out = cli(&data, &["apply", app.to_str().unwrap(), "--wait-s", "5"]);
        let st: AppStatus = serde_json::from_slice(&out.stdout).ok()?;
        (st.state == "placed" || st.state == "running").then_some(())
    });
    wait_for("both components running", Duration::from_secs(90), || {
        status().filter(|s| s.state == "running")
    });

    // 20 messages/s of about 30 bytes each, counted by the workload, folded by the control
    // plane (channel `to-sink` resolved to component `sink`); CPU and memory from Podman
    let st = wait_for(
        "measured traffic src -> sink in the status",
        Duration::from_secs(60),
        || {
            status().filter(|s| {
                s.observed.as_ref().is_some_and(|o| {
                    o.traffic
                        .iter()
                        .any(|t| t.from == "src" && t.to == "sink" && t.bytes_per_s > 100.0)
                        && o.components.get("src").is_some_and(|u| u.memory_mb > 0.0)
                })
            })
        },
    );
    let o = st.observed.unwrap();
    eprintln!("observed: {}", serde_json::to_string(&o).unwrap());
    let t = o.traffic.iter().find(|t| t.from == "src").unwrap();
    assert!(
        t.bytes_per_s < 5_000.0,
        "about 20 × 30 B/s, not {}",
        t.bytes_per_s
    );
    assert!(o.components.contains_key("sink"), "{o:?}");
    assert!(!cp.has_log("component usage"), "no usage message dropped");
    let agent_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        agent_log.contains("containers are told ACOA_AGENT_STATS="),
        "{agent_log}"
    );
    assert!(
        !agent_log.contains("stats datagram"),
        "none dropped: {agent_log}"
    );
}
