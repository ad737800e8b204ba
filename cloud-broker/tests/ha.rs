//! The highly available setup end to end, with real processes: three etcd members, two
//! control-plane replicas (lease 2 s), two Mosquitto brokers with the generated password file
//! and ACL, four real edge agents with both broker URLs running the railway's smoke monitoring
//! with real Podman.
//!
//! 1. kill -9 the leader: the standby leads, an application published meanwhile is placed and
//!    runs, smoke monitoring keeps its placement and no container is restarted;
//! 2. kill the broker the agents are on: they move to the other one, their reports keep
//!    flowing (no node is lost), no container is restarted;
//! 3. SIGSTOP the leader past its lease, let the standby lead, SIGCONT it: it says it lost the
//!    leadership and waits as a standby, and no agent accepts a desired state of its term after
//!    the takeover;
//! 4. kill two of the three etcd members: an application published meanwhile is not placed,
//!    the containers keep running; restart them: it is placed, nothing is lost.
//!
//! Needs `mosquitto`, `etcd` (Debian's etcd-server), the `edge-agent` binary and the Podman REST
//! socket (ACOA_SKIP_PODMAN=1 skips it), busybox-static for the images.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use acoa_test_support::etcd::EtcdCluster;
use acoa_test_support::{busybox_images, remove_containers_labelled, sh, PODMAN_SOCKET};
use cloud_broker::status::AppStatus;
use common::*;

const IMAGES: [&str; 6] = [
    "localhost/acoa/smoke-measurement:1",
    "localhost/acoa/smoke-batching:1",
    "localhost/acoa/smoke-level:1",
    "localhost/acoa/smoke-storage:1",
    "localhost/acoa/smoke-alarm:1",
    "localhost/acoa/ha-test:1",
];

/// An agent process, killed on drop with its node's containers.
struct Agent {
    child: Child,
    node: String,
    log: PathBuf,
}

impl Agent {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            print_tail(&format!("agent {}", self.node), &self.log_text(), 30);
        }
        remove_containers_labelled("acoa.node", &self.node);
    }
}

/// A running container: (node, app, component) → (id, start time).
type Running = BTreeMap<(String, String, String), (String, String)>;

/// The running containers of the nodes named with `prefix`.
fn running(prefix: &str) -> Running {
    let out = sh(Command::new("podman").args([
        "ps",
        "--filter",
        "label=acoa.managed=true",
        "--format",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let mut r = Running::new();
    for c in v.as_array().cloned().unwrap_or_default() {
        let l = &c["Labels"];
        let node = l["acoa.node"].as_str().unwrap_or("").to_string();
        if !node.starts_with(prefix) || c["State"].as_str() != Some("running") {
            continue;
        }
        let app = l["acoa.app"].as_str().unwrap_or("").to_string();
        let comp = l["acoa.component"].as_str().unwrap_or("").to_string();
        let id = c["Id"].as_str().unwrap_or("").to_string();
        r.insert((node, app, comp), (id, c["StartedAt"].to_string()));
    }
    r
}

fn status(data: &Path, app: &str) -> Option<AppStatus> {
    let out = cli(data, &["status", app]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// Waits until `app` runs; returns its placement.
fn wait_running(data: &Path, app: &str, timeout: Duration) -> BTreeMap<String, String> {
    let st = wait_for(&format!("{app} running"), timeout, || {
        status(data, app).filter(|s| s.state == "running")
    });
    st.placement.unwrap()
}

/// Publishes the definition in `file` through the CLI (it tries the brokers of the data
/// directory's list), on a thread of its own: the caller does not wait for a verdict.
fn publish(data: &Path, file: &Path) {
    let (d, f) = (data.to_path_buf(), file.to_path_buf());
    std::thread::spawn(move || apply(&d, &f, &["--wait-s", "3", "--agents-wait-s", "0"]));
}

/// The index of the replica that leads now: the one whose count of `leading: term` lines grew
/// past `before` (its count when the wait began).
fn wait_leader(cps: &[ControlPlane; 2], before: [usize; 2], timeout: Duration) -> usize {
    wait_for("a new leader", timeout, || {
        (0..2).find(|&i| cps[i].count_log("leading: term") > before[i])
    })
}

fn lead_counts(cps: &[ControlPlane; 2]) -> [usize; 2] {
    [
        cps[0].count_log("leading: term"),
        cps[1].count_log("leading: term"),
    ]
}

/// Smoke monitoring keeps `placement` and its containers (the same ids and start times as in
/// `before`).
fn assert_smoke_unmoved(
    data: &Path,
    prefix: &str,
    placement: &BTreeMap<String, String>,
    before: &Running,
) {
    let st = status(data, "smoke-monitoring").expect("a status");
    assert_eq!(st.placement.as_ref(), Some(placement));
    let mut now = running(prefix);
    now.retain(|(_, app, _), _| app == "smoke-monitoring");
    assert_eq!(&now, before, "smoke monitoring moved or restarted");
}

/// The terms of the desired states an agent log accepted, after its first `skip` lines.
fn accepted_terms(log: &str, skip: usize) -> Vec<u64> {
    log.lines()
        .skip(skip)
        .filter(|l| l.contains("accepted desired state generation"))
        .filter_map(|l| {
            let at = l.find(" of term ")? + " of term ".len();
            l[at..].split(' ').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn the_control_plane_survives_its_leader_a_broker_and_the_etcd_quorum() {
    let Some(mosquitto) = find_bin("mosquitto") else {
        assert!(std::env::var("CI").is_err(), "mosquitto is missing");
        eprintln!("SKIPPED: mosquitto is not installed");
        return;
    };
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    busybox_images(&IMAGES);
    let prefix = format!("ha{}-", std::process::id() % 100_000);
    let dir = tempdir_for_mosquitto();
    let mut etcd = EtcdCluster::start(3, dir.path());
    let endpoints = etcd.endpoints();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (port_a, port_b) = (free_port_pair(), free_port_pair());
    // the agents on both brokers' fleet listeners, the replicas on their control planes'
    let both = format!("mqtt://127.0.0.1:{port_a},mqtt://127.0.0.1:{port_b}");
    let both_cp = format!("{},{}", control_url(port_a), control_url(port_b));

    // four railway nodes, enrolled first: the password file both brokers get holds them
    let cloud = "datacenter = \"cloud1\"\nlayer = \"cloud\"\narch = \"x86_64\"\nhardware = [\"fast-cpu\"]\nsoftware = [\"database\"]\n[capacity]\ncpu_millis = 8000\nmemory_mb = 16384\ndisk_mb = 200000";
    let train = |hw: &str| {
        format!("datacenter = \"train1\"\nlayer = \"edge\"\narch = \"aarch64\"\nhardware = [\"{hw}\"]\n[capacity]\ncpu_millis = 2000\nmemory_mb = 2048\ndisk_mb = 16000")
    };
    let profiles = [
        ("n01", cloud.to_string()),
        ("n02", cloud.to_string()),
        ("n13", train("smoke-sensor")),
        ("n14", train("dashboard")),
    ];
    let mut configs = Vec::new();
    for (n, p) in &profiles {
        let name = format!("{prefix}{n}");
        remove_containers_labelled("acoa.node", &name);
        let state = dir.path().join(format!("{name}-state"));
        let broker = enroll_agent(&bin, &state, &data, &name, &both);
        let (top, cap) = p.split_once("[capacity]").unwrap();
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "node = \"{name}\"\n{top}\nstate_dir = \"{}\"\nreport_period_ms = 500\nruntime = \"podman\"\nimage_allowlist = [\"localhost/acoa/\"]\n[capacity]\n{cap}\n{broker}\n[probe]\nlisten = \"127.0.0.1:{}\"\nperiod_ms = 300\n[podman]\nsocket = \"unix://{PODMAN_SOCKET}\"\n",
                state.display(),
                free_port()
            ),
        )
        .unwrap();
        configs.push((name, config));
    }
    let ha_new = write_pinned(
        dir.path(),
        "ha-new",
        "",
        IMAGES[5],
        &format!("{prefix}n01"),
        1,
        "",
    );
    let ha_paused = write_pinned(
        dir.path(),
        "ha-paused",
        "",
        IMAGES[5],
        &format!("{prefix}n02"),
        1,
        "",
    );
    let ha_held = write_pinned(
        dir.path(),
        "ha-held",
        "",
        IMAGES[5],
        &format!("{prefix}n02"),
        1,
        "",
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let (m_a, _) = rt.block_on(start_mosquitto(&mosquitto, &dir_a, &data, port_a, false));
    let (_m_b, _) = rt.block_on(start_mosquitto(&mosquitto, &dir_b, &data, port_b, false));

    let mut cps = [
        replica(&data, "r0", &both_cp, &endpoints),
        replica(&data, "r1", &both_cp, &endpoints),
    ];
    let mut leader = wait_leader(&cps, [0, 0], Duration::from_secs(20));
    let agents: Vec<Agent> = configs
        .iter()
        .map(|(name, config)| Agent {
            child: spawn_agent(&bin, config, &dir.path().join(format!("{name}.log"))),
            node: name.clone(),
            log: dir.path().join(format!("{name}.log")),
        })
        .collect();
    for a in &agents {
        cps[leader].wait_log(&format!("node {} joined", a.node), Duration::from_secs(30));
    }
    // probes need a moment to measure the links the scheduler needs
    let placement = wait_for("smoke monitoring placed", Duration::from_secs(60), || {
        let out = apply(
            &data,
            &scenario("smoke-monitoring.yaml"),
            &["--wait-s", "5", "--agents-wait-s", "0"],
        );
        let st: AppStatus = serde_json::from_slice(&out.stdout).ok()?;
        st.placement
    });
    assert_eq!(
        wait_running(&data, "smoke-monitoring", Duration::from_secs(90)),
        placement
    );
    let before = running(&prefix);
    assert_eq!(before.len(), 5, "{before:?}");

    // 1. the leader killed: the standby leads, places a new application, moves nothing
    let counts = lead_counts(&cps);
    let t = Instant::now();
    cps[leader].kill();
    publish(&data, &ha_new);
    let next = wait_leader(&cps, counts, Duration::from_secs(15));
    eprintln!(
        "killed leader r{leader}: r{next} leads after {:?}",
        t.elapsed()
    );
    assert_ne!(next, leader);
    wait_running(&data, "ha-new", Duration::from_secs(30));
    eprintln!("ha-new running {:?} after the kill", t.elapsed());
    cps[leader] = replica(&data, &format!("r{leader}-back"), &both_cp, &endpoints);
    leader = next;
    assert_smoke_unmoved(&data, &prefix, &placement, &before);

    // 2. broker A killed: the agents move to B, stay online, keep their containers
    let lines = cps[leader].log_text().lines().count();
    let all = running(&prefix);
    drop(m_a);
    for a in &agents {
        wait_for(
            &format!("{} on broker B", a.node),
            Duration::from_secs(15),
            || {
                a.log_text()
                    .contains(&format!("on broker 127.0.0.1:{port_b}"))
                    .then_some(())
            },
        );
    }
    // past the node time-out (2 s): reports flow through B
    std::thread::sleep(Duration::from_secs(4));
    let since: Vec<String> = cps[leader]
        .log_text()
        .lines()
        .skip(lines)
        .map(str::to_string)
        .collect();
    for a in &agents {
        assert!(
            !since
                .iter()
                .any(|l| l.contains(&format!("node {} lost", a.node))
                    || l.contains(&format!("node {} unreachable", a.node))),
            "{}",
            since.join("\n")
        );
    }
    assert_eq!(running(&prefix), all, "a container restarted");

    // 3. the leader paused past its lease: the standby leads; woken, the old one writes
    //    nothing and no agent accepts its orders
    let counts = lead_counts(&cps);
    let old = leader;
    let old_term = term_of(&cps[old]);
    signal(&cps[old], "-STOP");
    let next = wait_leader(&cps, counts, Duration::from_secs(15));
    assert_ne!(next, old);
    let new_term = term_of(&cps[next]);
    assert!(new_term > old_term, "{old_term} then {new_term}");
    let agent_lines: Vec<usize> = agents
        .iter()
        .map(|a| a.log_text().lines().count())
        .collect();
    publish(&data, &ha_paused);
    wait_running(&data, "ha-paused", Duration::from_secs(30));
    signal(&cps[old], "-CONT");
    cps[old].wait_log("lost the leadership", Duration::from_secs(15));
    wait_for("the old leader a standby", Duration::from_secs(15), || {
        (cps[old].count_log("standby: waiting to lead") >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    for (a, skip) in agents.iter().zip(&agent_lines) {
        let terms = accepted_terms(&a.log_text(), *skip);
        assert!(
            terms.iter().all(|t| *t == new_term),
            "{}: accepted terms {terms:?} after term {new_term} began",
            a.node
        );
    }
    leader = next;

    // 4. etcd without its quorum: nothing decided, nothing lost; back: it resumes
    let before_quorum = running(&prefix);
    etcd.stop(1);
    etcd.stop(2);
    wait_for(
        "no decision without a quorum",
        Duration::from_secs(30),
        || {
            cps.iter()
                .any(|c| c.has_log("no decision can be made, etcd does not answer"))
                .then_some(())
        },
    );
    publish(&data, &ha_held);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        status(&data, "ha-held").is_none_or(|s| s.placement.is_none()),
        "placed without a quorum"
    );
    assert_eq!(running(&prefix), before_quorum, "a container stopped");
    etcd.restart(1);
    etcd.restart(2);
    etcd.wait_healthy(Duration::from_secs(20));
    wait_running(&data, "ha-held", Duration::from_secs(60));
    assert_smoke_unmoved(&data, &prefix, &placement, &before);
    for a in &agents {
        assert!(!a.log_text().contains("panicked"), "{}", a.log_text());
    }
    let _ = leader;
    drop(agents);
}
