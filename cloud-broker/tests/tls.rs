//! TLS on the embedded broker: `serve --tls-listen ... --tls-cert ... --tls-key ...` with a CA
//! made here by openssl; a real edge agent connects over `mqtts://` (its `[broker] ca_file`)
//! and receives its desired state; an agent that trusts another CA gets nothing.
//!
//! Needs the `edge-agent` binary (built by `cargo build -p edge-agent`, or ACOA_EDGE_AGENT_BIN)
//! and openssl. No Podman: the agent's runtime points nowhere (its containers are not the
//! point here, its desired state is).

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

struct Agent {
    child: Child,
    log: PathBuf,
    state: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Enrolls `name` and starts its agent on `url` trusting the CA in `ca_file`.
fn start_agent(bin: &Path, dir: &Path, data: &Path, url: &str, name: &str, ca: &Path) -> Agent {
    let state = dir.join(format!("{name}-state"));
    let broker = enroll_agent(bin, &state, data, name, url).replace(
        "[broker]\n",
        &format!("[broker]\nca_file = \"{}\"\n", ca.display()),
    );
    assert!(broker.contains("ca_file"), "{broker}");
    let probe = free_port();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "node = \"{name}\"\ndatacenter = \"train1\"\nlayer = \"edge\"\narch = \"aarch64\"\n\
             hardware = [\"smoke-sensor\", \"dashboard\"]\nsoftware = [\"database\"]\n\
             state_dir = \"{}\"\nreport_period_ms = 500\nruntime = \"podman\"\n\
             image_allowlist = [\"localhost/acoa/\"]\n\
             [capacity]\ncpu_millis = 8000\nmemory_mb = 8192\ndisk_mb = 100000\n{broker}\n\
             [probe]\nlisten = \"127.0.0.1:{probe}\"\nperiod_ms = 300\n\
             [podman]\nsocket = \"unix:///nonexistent/podman.sock\"\n",
            state.display()
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    let child = spawn_agent(bin, &config, &log);
    Agent { child, log, state }
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_agent_over_mqtts_to_the_embedded_broker_gets_its_desired_state() {
    let Some(bin) = agent_bin() else {
        eprintln!(
            "SKIPPED: no edge-agent binary (cargo build -p edge-agent, or set ACOA_EDGE_AGENT_BIN)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    acoa_test_support::test_certificates(dir.path());
    let data = dir.path().join("cp");
    let (port, tls_port) = (free_port(), free_port());
    let tls_listen = format!("127.0.0.1:{tls_port}");
    let cp = ControlPlane::start(
        &data,
        port,
        &[
            "--tls-listen",
            &tls_listen,
            "--tls-cert",
            dir.path().join("server.pem").to_str().unwrap(),
            "--tls-key",
            dir.path().join("server.key").to_str().unwrap(),
        ],
    );
    cp.wait_log("with TLS", Duration::from_secs(20));
    let url = format!("mqtts://localhost:{tls_port}");
    let good = start_agent(
        &bin,
        dir.path(),
        &data,
        &url,
        "tls-ok",
        &dir.path().join("ca.pem"),
    );
    let bad = start_agent(
        &bin,
        dir.path(),
        &data,
        &url,
        "tls-bad",
        &dir.path().join("other.pem"),
    );
    cp.wait_log("node tls-ok joined", Duration::from_secs(30));
    // every component fits the one node that joined
    ok(apply(
        &data,
        &scenario("smoke-monitoring.yaml"),
        &["--wait-s", "20"],
    ));
    // the agent persists every desired state it accepts (signed by the control plane)
    wait_until(
        "the desired state at the agent over mqtts",
        Duration::from_secs(30),
        || good.state.join("desired.bin").exists(),
    );
    assert!(
        good.log_text()
            .contains("accepted desired state generation"),
        "{}",
        good.log_text()
    );
    // the agent that does not trust the broker's CA never connects
    assert!(!cp.has_log("node tls-bad joined"), "{}", cp.log_text());
    let bad_log = bad.log_text();
    assert!(
        !bad_log.contains("connected to broker") && !bad_log.contains("connection back"),
        "{bad_log}"
    );
    assert!(!bad_log.contains("accepted desired state"), "{bad_log}");
    assert!(!bad.state.join("desired.bin").exists());
}
