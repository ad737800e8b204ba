//! The QoS gate sees delay added inside a container, end to end with real processes: the
//! control plane (embedded broker), two real edge agents and real Podman. Component `a` (on
//! node n1) is the testbed's workload program (`acoa-workload`, built from the current source)
//! as a source of 10 messages/s; it reports to its agent (ACOA_AGENT_STATS, ACOA_CONTAINER,
//! injected by the agent) the time it spends on each message (stats datagram v2). Revision 2
//! of `a` holds every message 80 ms (ACOA_DELAY_MS): the network between n1 and n2 (loopback)
//! stays well within the gate's 30 ms bound, but its new copy's service time does not: the
//! rollout rolls back by itself, and the log, `status` and `history` name the gate and the
//! measured service time. The old copy keeps reporting its own (sub-millisecond) service time
//! beside the new one all along.
//!
//! Needs what tests/e2e_usage.rs needs (the edge-agent binary, Podman's REST socket, `rustc`,
//! `tar`). The containers are on Podman's default bridge: each agent listens for stats on
//! 0.0.0.0 (a port of its own) and tells them the bridge's gateway. ACOA_SKIP_PODMAN=1 skips it.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use acoa_test_support::{remove_containers_labelled, workload_image};
use cloud_broker::status::AppStatus;
use common::*;

const APP: &str = "gate-e2e";
const A1: &str = "localhost/acoa/gate-e2e-a:1";
const A2: &str = "localhost/acoa/gate-e2e-a:2";
const B: &str = "localhost/acoa/gate-e2e-b:1";

/// `a`: a source of 10 messages/s on channel `to-b` (sent to the discard port of its own
/// namespace: only its own time per message matters here); its revision 2 holds each 80 ms.
/// `b` listens only.
fn images() {
    let src = ["ACOA_RATE_HZ=10", "ACOA_OUT=to-b@127.0.0.1:9"];
    workload_image(A1, &src);
    workload_image(A2, &[src[0], src[1], "ACOA_DELAY_MS=80"]);
    workload_image(B, &[]);
}

fn definition(dir: &Path, prefix: &str, a_image: &str) -> std::path::PathBuf {
    let text = format!(
        "application: {APP}\ncomponents:\n\
         - {{name: a, image: '{a_image}', requires: {{node: {prefix}n1}}}}\n\
         - {{name: b, image: '{B}', requires: {{node: {prefix}n2}}}}\n\
         channels:\n- {{name: to-b, from: a, to: b}}\n\
         paths:\n- {{name: alarm, channels: [to-b]}}\n\
         update: {{batch_size: 1, healthy_s: 10, deadline_s: 60, gate: {{path: alarm, max_latency_ms: 30}}}}\n"
    );
    let p = dir.join("gate.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Agent `name`, its stats socket on all addresses (a port of its own: the containers are on
/// Podman's bridge and told its gateway).
fn start_agent(bin: &Path, dir: &Path, data: &Path, url: &str, name: &str) -> Child {
    let stats = format!("[stats]\nlisten = \"0.0.0.0:{}\"\n", free_port());
    start_podman_agent(bin, dir, data, url, name, &stats)
}

fn status(data: &Path) -> Option<AppStatus> {
    let out = cli(data, &["status", APP]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

#[test]
fn a_revision_whose_container_adds_delay_breaks_the_gate_and_rolls_back_by_itself() {
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    images();
    remove_containers_labelled("acoa.app", APP);
    let prefix = format!("sg{}-", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cp");
    let cp = ControlPlane::start(&data, free_port(), &[]);
    let mut agents = PodmanAgents {
        children: vec![],
        app: APP.into(),
    };
    for n in ["n1", "n2"] {
        let name = format!("{prefix}{n}");
        agents
            .children
            .push(start_agent(&bin, dir.path(), &data, &cp.url, &name));
        cp.wait_log(&format!("node {name} joined"), Duration::from_secs(30));
    }
    // placed once the agents measured the link between n1 and n2 (an apply before that is
    // unplaced, and placed when the measurement comes)
    let _ = apply(
        &data,
        &definition(dir.path(), &prefix, A1),
        &["--wait-s", "5", "--agents-wait-s", "0"],
    );
    wait_for("revision 1 running", Duration::from_secs(90), || {
        status(&data).filter(|s| s.state == "running")
    });

    // revision 2: a's workload holds every message 80 ms
    let started = Instant::now();
    let _ = apply(
        &data,
        &definition(dir.path(), &prefix, A2),
        &["--wait-s", "5", "--agents-wait-s", "0"],
    );
    cp.wait_log(
        "rollout of gate-e2e r1→r2: batch 1/1 started: a",
        Duration::from_secs(30),
    );
    cp.wait_log(
        "rollout of gate-e2e r1→r2: rolled back, revision 1 runs",
        Duration::from_secs(90),
    );
    let log = cp.log_text();
    let failed = log
        .lines()
        .find(|l| l.contains("rollout of gate-e2e r1→r2 failed"))
        .unwrap_or_else(|| panic!("no failure line:\n{log}"));
    eprintln!(
        "figure: revision 2 rolled back {:.1} s after its apply; {failed}",
        started.elapsed().as_secs_f64()
    );
    // e.g. `gate broken: path alarm measures 80.3 ms (network 0.2 ms + service 80.1 ms: a 80.1 ms), above its bound of 30 ms`
    let service_ms = |text: &str| -> f64 {
        let at = text
            .find("+ service ")
            .unwrap_or_else(|| panic!("no service time in: {text}"));
        text[at + "+ service ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        failed.contains("gate broken: path alarm measures ")
            && failed.contains(": a ")
            && failed.contains("above its bound of 30 ms")
            && failed.contains("rolling back to revision 1"),
        "{failed}"
    );
    let ms = service_ms(failed);
    assert!(
        (80.0..1000.0).contains(&ms),
        "the new copy holds each message 80 ms: {ms} ms"
    );
    let st = wait_for("the status says why", Duration::from_secs(20), || {
        status(&data).filter(|s| s.rollout.as_ref().is_some_and(|r| r.phase == "rolled-back"))
    });
    let r = st.rollout.as_ref().unwrap();
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("gate broken: path alarm measures ") && service_ms(reason) >= 80.0,
        "{reason}"
    );
    assert_eq!(st.revision, Some(1));
    let h = ok(cli(&data, &["history", APP]));
    assert!(h.contains("rolled back: gate broken: path alarm"), "{h}");
    // revision 1 alone again
    wait_for("revision 1 alone again", Duration::from_secs(30), || {
        status(&data).filter(|s| s.state == "running" && s.running.len() == 2)
    });
    drop(agents);
}
