//! Rollouts end to end with real processes: the control plane (embedded broker), two real edge
//! agents and real Podman. An application of two components (one per node) with an `update`
//! block: a good revision goes batch by batch with a running copy of every component at every
//! moment (Podman is asked all along); a bad image (exits at once) and a failing health check
//! each roll back by themselves, and the log and `history` say why; a control plane killed
//! mid-rollout finishes it after its restart; `rollback` brings an earlier revision back.
//!
//! Needs what tests/e2e_agents.rs needs (the edge-agent binary, Podman's REST socket,
//! busybox-static). ACOA_SKIP_PODMAN=1 skips it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use acoa_test_support::{busybox_images, remove_containers_labelled, sh};
use common::*;

const GOOD: [&str; 3] = [
    "localhost/acoa/rollout-test:1",
    "localhost/acoa/rollout-test:2",
    "localhost/acoa/rollout-test:5",
];
const BAD: &str = "localhost/acoa/rollout-test-exits:3";

/// The images: sleepers under three tags, and one whose command exits at once.
fn images() {
    busybox_images(&GOOD);
    if !acoa_test_support::image_exists(BAD) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Containerfile"),
            format!("FROM {}\nCMD [\"/bin/busybox\", \"false\"]\n", GOOD[0]),
        )
        .unwrap();
        sh(Command::new("podman")
            .args(["build", "-t", BAD, "-f"])
            .arg(dir.path().join("Containerfile"))
            .arg(dir.path()));
    }
}

/// The definition: components a (on node n1) and b (on n2) with `image`s, `extra` after a's
/// fields; a batch must stay healthy [`HEALTHY_S`].
fn definition(dir: &Path, prefix: &str, images: [&str; 2], a_extra: &str) -> std::path::PathBuf {
    definition_healthy(dir, prefix, images, a_extra, HEALTHY_S)
}

/// How long a batch must stay healthy in these rollouts.
const HEALTHY_S: u32 = 3;

/// [`definition`] with a batch's healthy time `healthy_s`.
fn definition_healthy(
    dir: &Path,
    prefix: &str,
    images: [&str; 2],
    a_extra: &str,
    healthy_s: u32,
) -> std::path::PathBuf {
    let text = format!(
        "application: roll\ncomponents:\n- {{name: a, image: '{}', requires: {{node: {prefix}n1}}{a_extra}}}\n- {{name: b, image: '{}', requires: {{node: {prefix}n2}}}}\nupdate: {{batch_size: 1, healthy_s: {healthy_s}, deadline_s: 60}}\n",
        images[0], images[1]
    );
    let p = dir.join("roll.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Per component, the images of its running containers (Podman).
fn running() -> BTreeMap<String, Vec<String>> {
    let out = sh(Command::new("podman").args([
        "ps",
        "--filter",
        "label=acoa.app=roll",
        "--format",
        "json",
    ]));
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or(serde_json::Value::Array(vec![]));
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in v.as_array().cloned().unwrap_or_default() {
        if c["State"].as_str() != Some("running") {
            continue;
        }
        let comp = c["Labels"]["acoa.component"]
            .as_str()
            .unwrap_or("")
            .to_string();
        m.entry(comp)
            .or_default()
            .push(c["Image"].as_str().unwrap_or("").to_string());
    }
    m
}

/// Waits for the log line `line`, asking Podman all along that both components have a
/// running container; returns the most copies of one component seen at once.
fn watch_until(cp: &ControlPlane, line: &str, timeout: Duration) -> usize {
    let t = Instant::now();
    let mut most = 0;
    loop {
        let r = running();
        for c in ["a", "b"] {
            let n = r.get(c).map(Vec::len).unwrap_or(0);
            assert!(
                n >= 1,
                "component {c} has no running container: {r:?}\n{}",
                cp.log_text()
            );
            most = most.max(n);
        }
        if cp.has_log(line) {
            return most;
        }
        assert!(
            t.elapsed() < timeout,
            "`{line}` did not come within {timeout:?}:\n{}",
            cp.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_agent(bin: &Path, dir: &Path, data: &Path, url: &str, name: &str) -> Child {
    start_podman_agent(bin, dir, data, url, name, "")
}

/// `apply FILE` on a thread of its own (Podman is watched meanwhile); its success is not
/// asked (a revision whose new copy fails makes `apply` fail, as it should).
fn apply_in_background(data: &Path, file: std::path::PathBuf) -> std::thread::JoinHandle<()> {
    let data = data.to_path_buf();
    std::thread::spawn(move || {
        apply(&data, &file, &["--wait-s", "10", "--agents-wait-s", "0"]);
    })
}

/// Seconds between the first log line that contains `from` and the first after it that
/// contains `to` (the control plane's own timestamps).
fn log_span(cp: &ControlPlane, from: &str, to: &str) -> f64 {
    let log = cp.log_text();
    let at = |l: &str| -> f64 {
        // 2026-12-02T01:06:17.884532Z: seconds of the day
        let t = &l[11..l.find('Z').unwrap()];
        let mut p = t.split(':').map(|x| x.parse::<f64>().unwrap());
        p.next().unwrap() * 3600.0 + p.next().unwrap() * 60.0 + p.next().unwrap()
    };
    let mut lines = log.lines();
    let a = lines.by_ref().find(|l| l.contains(from)).expect(from);
    let b = lines.find(|l| l.contains(to)).expect(to);
    at(b) - at(a)
}

fn history(data: &Path) -> String {
    ok(cli(data, &["history", "roll"]))
}

#[test]
fn revisions_roll_out_batch_by_batch_roll_back_by_themselves_and_survive_a_restart() {
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    images();
    remove_containers_labelled("acoa.app", "roll");
    let prefix = format!("ro{}-", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cp");
    let port = free_port();
    let mut cp = ControlPlane::start(&data, port, &[]);
    let url = cp.url.clone();
    let mut agents = PodmanAgents {
        children: vec![],
        app: "roll".into(),
    };
    for n in ["n1", "n2"] {
        let name = format!("{prefix}{n}");
        agents
            .children
            .push(start_agent(&bin, dir.path(), &data, &url, &name));
        cp.wait_log(&format!("node {name} joined"), Duration::from_secs(20));
    }
    let apply_ok = |file: &Path| {
        let out = apply(&data, file, &["--wait-s", "10", "--agents-wait-s", "0"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply_ok(&definition(dir.path(), &prefix, [GOOD[0], GOOD[0]], ""));
    wait_for("revision 1 running", Duration::from_secs(60), || {
        let r = running();
        (r.contains_key("a") && r.contains_key("b")).then_some(())
    });

    // a good revision: batch by batch, the new copy beside the old one
    let applied = apply_in_background(
        &data,
        definition(dir.path(), &prefix, [GOOD[1], GOOD[1]], ""),
    );
    let most = watch_until(&cp, "rollout of roll r1→r2: done", Duration::from_secs(90));
    applied.join().unwrap();
    eprintln!(
        "figure: good rollout (2 batches, healthy_s 3): {:.2} s from the revision's acceptance to done",
        log_span(&cp, "accepted (definition updated) as revision 2", "r1→r2: done")
    );
    assert_eq!(most, 2, "a new copy ran beside the old one");
    assert!(cp.has_log("rollout of roll r1→r2: batch 1/2 started: a"));
    assert!(cp.has_log("rollout of roll r1→r2: batch 2/2 started: b"));
    let r = wait_for("old copies gone", Duration::from_secs(20), || {
        let r = running();
        r.values().all(|v| v.len() == 1).then_some(r)
    });
    assert_eq!(r["a"], [GOOD[1]]);
    assert_eq!(r["b"], [GOOD[1]]);

    // a bad image: its container exits at once; back to revision 2 by itself
    // (apply may say the new copy failed: it did)
    let applied = apply_in_background(&data, definition(dir.path(), &prefix, [BAD, GOOD[1]], ""));
    watch_until(&cp, "rolled back, revision 2 runs", Duration::from_secs(90));
    applied.join().unwrap();
    eprintln!(
        "figure: bad image: {:.2} s from acceptance to the failure, {:.2} s from the failure to revision 2 alone again",
        log_span(&cp, "as revision 3", "r2→r3 failed"),
        log_span(&cp, "r2→r3 failed", "r2→r3: rolled back")
    );
    let h = history(&data);
    assert!(h.contains("3\t") && h.contains("rolled back: a on"), "{h}");
    assert!(
        h.contains("the new copy exited")
            || h.contains("the new copy restarted")
            || h.contains("the new copy failed"),
        "{h}"
    );

    // a failing health check: back to revision 2 by itself
    let failing = ", health: {check: {cmd: [/bin/busybox, 'false']}, interval_s: 1, timeout_s: 1, retries: 1}";
    let applied = apply_in_background(
        &data,
        definition(dir.path(), &prefix, [GOOD[1], GOOD[1]], failing),
    );
    watch_until(&cp, "r2→r4 failed", Duration::from_secs(90));
    watch_until(
        &cp,
        "r2→r4: rolled back, revision 2 runs",
        Duration::from_secs(60),
    );
    let h = history(&data);
    // the agent restarts an unhealthy container: the control plane may see the stop (exited)
    // before the health it reports; either fails the new copy
    let r4 = h.lines().find(|l| l.starts_with("4\t")).unwrap_or_default();
    assert!(r4.contains("rolled back: a on"), "{h}");
    applied.join().unwrap();
    eprintln!(
        "figure: failing health check: {:.2} s from acceptance to the failure, {:.2} s to revision 2 alone again ({r4})",
        log_span(&cp, "as revision 4", "r2→r4 failed"),
        log_span(&cp, "r2→r4 failed", "r2→r4: rolled back")
    );

    // a control plane killed mid-rollout finishes it after its restart
    // a long healthy time: the rollout is surely under way when the control plane is killed,
    // however slowly this test polls the store on a busy machine
    let applied = apply_in_background(
        &data,
        definition_healthy(dir.path(), &prefix, [GOOD[2], GOOD[2]], "", 15),
    );
    watch_until(&cp, "r2→r5: batch 1/2 started", Duration::from_secs(60));
    // killed once the batch's start is durable (the log line comes before the store's write)
    let history_file = data.join("store/history/roll.json");
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(&history_file).unwrap_or_default();
        let h: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let steps = h["rollout"]["steps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if steps.iter().any(|s| s["state"] != "waiting") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the batch's start not persisted within 20 s; history: {text}\n{}",
            cp.log_text()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    cp.kill();
    let cp2 = ControlPlane::start_logged(&data, port, &[], &data.join("cp2.log"));
    // batch 1/2, or 2/2 when the first was done before the kill
    watch_until(&cp2, "resumed after a restart", Duration::from_secs(30));
    watch_until(&cp2, "rollout of roll r2→r5: done", Duration::from_secs(90));
    let r = wait_for("revision 5 everywhere", Duration::from_secs(20), || {
        let r = running();
        r.values().all(|v| v.len() == 1).then_some(r)
    });
    assert_eq!(r["a"], [GOOD[2]]);
    assert_eq!(r["b"], [GOOD[2]]);
    let h = history(&data);
    assert!(h.contains("5\t") && h.contains("runs"), "{h}");
    applied.join().unwrap();

    // `rollback`: the newest good revision before 5 is 2, applied again as revision 6
    let out = ok(cli(&data, &["rollback", "roll"]));
    assert!(out.contains("6\t"), "{out}");
    watch_until(&cp2, "rollout of roll r5→r6: done", Duration::from_secs(60));
    let r = wait_for("revision 2's images again", Duration::from_secs(20), || {
        let r = running();
        r.values().all(|v| v.len() == 1).then_some(r)
    });
    assert_eq!(r["a"], [GOOD[1]]);
    assert_eq!(r["b"], [GOOD[1]]);
    drop(agents);
}
