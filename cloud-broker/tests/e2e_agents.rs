//! End to end with real processes: the control plane (embedded broker), four real edge agents
//! (railway node profiles) and real Podman. The smoke-monitoring application is placed, its
//! containers run on the chosen nodes; one agent is killed and its components come back on
//! another node; the control plane is restarted and no container is restarted.
//!
//! Needs: the `edge-agent` binary (built by `cargo build -p edge-agent`, or ACOA_EDGE_AGENT_BIN),
//! the Podman REST socket at /run/podman/podman.sock, busybox-static (to make the images if
//! they are missing). ACOA_SKIP_PODMAN=1 skips it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use acoa_test_support::{busybox_images, sh, PODMAN_SOCKET};
use cloud_broker::status::AppStatus;
use common::*;

const IMAGES: [&str; 5] = [
    "localhost/acoa/smoke-measurement:1",
    "localhost/acoa/smoke-batching:1",
    "localhost/acoa/smoke-level:1",
    "localhost/acoa/smoke-storage:1",
    "localhost/acoa/smoke-alarm:1",
];

/// The control plane's defaults (hysteresis 0.05): the agents measure loopback links on a
/// machine that is also compiling and testing, probes time out now and then and success rates
/// over 20 probes move in 5 % steps; the re-placement decision allows for that uncertainty
/// (engine.rs, `favour_current`), so no hysteresis above the noise is needed.
const ENGINE_ARGS: [&str; 0] = [];
/// The railway images, made from busybox-static when they are missing (no registry here).
fn ensure_images() {
    busybox_images(&IMAGES);
}

#[derive(Debug, Clone, PartialEq)]
struct Running {
    id: String,
    started: String,
    node: String,
    component: String,
}

/// Running containers of application smoke-monitoring on nodes named with `prefix`.
fn running(prefix: &str) -> Vec<Running> {
    let out = sh(Command::new("podman").args([
        "ps",
        "--filter",
        "label=acoa.managed=true",
        "--filter",
        "label=acoa.app=smoke-monitoring",
        "--format",
        "json",
    ]));
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or(serde_json::Value::Array(vec![]));
    let mut r = vec![];
    for c in v.as_array().cloned().unwrap_or_default() {
        let labels = &c["Labels"];
        let node = labels["acoa.node"].as_str().unwrap_or("").to_string();
        if !node.starts_with(prefix) || c["State"].as_str() != Some("running") {
            continue;
        }
        r.push(Running {
            id: c["Id"].as_str().unwrap_or("").into(),
            started: c["StartedAt"].to_string(),
            node,
            component: labels["acoa.component"].as_str().unwrap_or("").into(),
        });
    }
    r.sort_by(|a, b| (&a.node, &a.component).cmp(&(&b.node, &b.component)));
    r
}

/// Removes the run's containers when dropped.
struct Containers(String);
impl Drop for Containers {
    fn drop(&mut self) {
        cleanup(&self.0);
    }
}

fn cleanup(prefix: &str) {
    let Ok(out) = Command::new("podman")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=acoa.managed=true",
            "--format",
            "{{.Names}}",
        ])
        .output()
    else {
        return;
    };
    for name in String::from_utf8_lossy(&out.stdout).lines() {
        if name.starts_with(&format!("acoa-{prefix}")) {
            let _ = Command::new("podman")
                .args(["rm", "-f", "-t", "0", name])
                .output();
        }
    }
}

struct Agent {
    child: Option<Child>,
    log: PathBuf,
}
impl Agent {
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

fn start_agent(
    bin: &Path,
    dir: &Path,
    data: &Path,
    url: &str,
    name: &str,
    profile: &str,
    capacity: &str,
) -> Agent {
    let state = dir.join(format!("{name}-state"));
    let broker = enroll_agent(bin, &state, data, name, url);
    let probe = free_port();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "node = \"{name}\"\n{profile}\nstate_dir = \"{}\"\nreport_period_ms = 500\nruntime = \"podman\"\nimage_allowlist = [\"localhost/acoa/\"]\n[capacity]\n{capacity}\n{broker}\n[probe]\nlisten = \"127.0.0.1:{probe}\"\nperiod_ms = 300\n[podman]\nsocket = \"unix://{PODMAN_SOCKET}\"\n",
            state.display()
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    Agent {
        child: Some(spawn_agent(bin, &config, &log)),
        log,
    }
}

fn status(data: &Path) -> Option<AppStatus> {
    let out = cli(data, &["status", "smoke-monitoring"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

#[test]
fn railway_app_runs_on_real_agents_moves_when_one_dies_and_survives_a_control_plane_restart() {
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    ensure_images();
    let prefix = format!("cb{}-", std::process::id() % 100_000);
    cleanup(&prefix);
    // however the test ends (a failed assertion too), its containers go
    let _containers = Containers(prefix.clone());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cp");
    let port = free_port();
    let mut cp = ControlPlane::start(&data, port, &ENGINE_ARGS);
    let url = cp.url.clone();
    let cloud = "datacenter = \"cloud1\"\nlayer = \"cloud\"\narch = \"x86_64\"\nhardware = [\"fast-cpu\"]\nsoftware = [\"database\"]\n[capacity]\ncpu_millis = 8000\nmemory_mb = 16384\ndisk_mb = 200000";
    let profiles = [
        ("n01", cloud.to_string()),
        ("n02", cloud.to_string()),
        ("n13", "datacenter = \"train1\"\nlayer = \"edge\"\narch = \"aarch64\"\nhardware = [\"smoke-sensor\"]\n[capacity]\ncpu_millis = 2000\nmemory_mb = 2048\ndisk_mb = 16000".to_string()),
        ("n14", "datacenter = \"train1\"\nlayer = \"edge\"\narch = \"aarch64\"\nhardware = [\"dashboard\"]\n[capacity]\ncpu_millis = 2000\nmemory_mb = 2048\ndisk_mb = 16000".to_string()),
    ];
    let mut agents: BTreeMap<String, Agent> = BTreeMap::new();
    for (n, p) in &profiles {
        // top-level keys first, then the [capacity] table
        let (top, cap) = p.split_once("[capacity]").unwrap();
        let name = format!("{prefix}{n}");
        let a = start_agent(&bin, dir.path(), &data, &url, &name, top, cap);
        agents.insert(name, a);
    }
    for name in agents.keys() {
        cp.wait_log(&format!("node {name} joined"), Duration::from_secs(20));
    }
    // probes need a moment to measure the links the scheduler needs
    let st = wait_for("placement", Duration::from_secs(60), || {
        let out = apply(
            &data,
            &scenario("smoke-monitoring.yaml"),
            &["--wait-s", "5"],
        );
        let st: AppStatus = serde_json::from_slice(&out.stdout).ok()?;
        (st.state == "placed" || st.state == "running").then_some(st)
    });
    let placement = st.placement.clone().unwrap();
    assert_eq!(placement["measurement"], format!("{prefix}n13"));
    assert_eq!(placement["alarm"], format!("{prefix}n14"));
    assert!(placement["storage"].ends_with("n01") || placement["storage"].ends_with("n02"));

    // the containers run where the scheduler said
    let st = wait_for("all components running", Duration::from_secs(90), || {
        status(&data).filter(|s| s.state == "running")
    });
    let run = running(&prefix);
    let on: BTreeMap<String, String> = run
        .iter()
        .map(|r| (r.component.clone(), r.node.clone()))
        .collect();
    assert_eq!(on, placement, "podman: {run:?}");
    assert_eq!(st.running.len(), 5);

    // kill the storage node's agent: its components come back elsewhere
    let lost = placement["storage"].clone();
    agents.get_mut(&lost).unwrap().kill();
    cp.wait_log(&format!("node {lost} lost"), Duration::from_secs(20));
    let st = wait_for("re-placement running", Duration::from_secs(90), || {
        status(&data)
            .filter(|s| s.state == "running" && s.placement.as_ref().unwrap()["storage"] != lost)
    });
    let after = st.placement.unwrap();
    for (c, n) in &placement {
        if *n != lost {
            assert_eq!(after[c], *n, "{c} should not move");
        }
    }
    let run = running(&prefix);
    assert!(
        run.iter()
            .any(|r| r.component == "storage" && r.node == after["storage"]),
        "{run:?}"
    );

    // the loopback links' noise moved nothing: a move on link metrics only took components off
    // the killed node (its links fail before the evidence window calls it lost)
    for line in cp
        .log_text()
        .lines()
        .filter(|l| l.contains("re-placed because link metrics changed"))
    {
        let moves = line
            .split_once("changed: ")
            .and_then(|(_, m)| m.split(" (score").next())
            .unwrap_or_default();
        for m in moves.split(", ") {
            let from = m
                .split_once(' ')
                .and_then(|(_, fr)| fr.split('→').next())
                .unwrap_or_default();
            assert_eq!(from, lost, "a move not off the killed node: {line}");
        }
    }

    // restart the control plane: nothing lost, no container restarted
    let live: Vec<Running> = running(&prefix)
        .into_iter()
        .filter(|r| r.node != lost)
        .collect();
    cp.kill();
    let mut cp = ControlPlane::start_logged(&data, port, &ENGINE_ARGS, &data.join("cp2.log"));
    cp.wait_log("started with 1 applications", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(8));
    let again: Vec<Running> = running(&prefix)
        .into_iter()
        .filter(|r| r.node != lost)
        .collect();
    assert_eq!(
        again, live,
        "containers restarted after the control plane restart"
    );
    let st = status(&data).unwrap();
    assert_eq!(st.placement.unwrap(), after);
    assert!(!cp.has_log("re-placed"), "{}", cp.log_text());
    assert!(cp.alive());
    for a in agents.values() {
        let log = std::fs::read_to_string(&a.log).unwrap_or_default();
        assert!(!log.contains("panicked"), "{log}");
    }
    drop(agents);
    cleanup(&prefix);
}
