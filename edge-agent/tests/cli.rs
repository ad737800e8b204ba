//! The command line: `pubkey`, `check-config`, configuration errors, an agent with nothing to
//! talk to.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn pubkey_creates_the_key_once_with_0600() {
    let dir = scratch_dir("pubkey");
    let state = dir.join("state");
    let out1 = run(Command::new(agent_bin())
        .arg("pubkey")
        .arg("--state-dir")
        .arg(&state));
    let out2 = run(Command::new(agent_bin())
        .arg("pubkey")
        .arg("--state-dir")
        .arg(&state));
    let hex = out1.trim();
    assert_eq!(hex.len(), 64, "{out1}");
    assert!(acoa_shared::wire::keys::public_from_hex(hex).is_ok());
    assert_eq!(out1, out2, "the same key every time");
    let mode = std::fs::metadata(state.join("node.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Through a configuration file, too.
    let cfg = dir.join("a.toml");
    std::fs::write(
        &cfg,
        format!("node = \"x\"\nstate_dir = \"{}\"\n", state.display()),
    )
    .unwrap();
    let out3 = run(Command::new(agent_bin())
        .arg("pubkey")
        .arg("--config")
        .arg(&cfg));
    assert_eq!(out1, out3);
}

#[test]
fn bad_configuration_is_named() {
    let dir = scratch_dir("badcfg");
    let cfg = dir.join("a.toml");
    std::fs::write(
        &cfg,
        "node = \"x\"\nlayer = \"fog\"\n[broker]\ncontrol_plane_key = \"00\"\n",
    )
    .unwrap();
    let out = Command::new(agent_bin())
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("layer"), "{err}");
    let out = Command::new(agent_bin())
        .args(["--node", "x", "--control-plane-key", "zz"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("control_plane_key"));
}

/// The repository's role profiles and per-node configurations agree with the railway cluster;
/// a file the removed `acoa-wire check-config` accepted (a probe window of 100, a report period
/// of 50 ms: the agent refuses both at start) is refused for the agent's own reason, and one it
/// refused (`tcp://`, which the agent reads as plain MQTT) passes.
#[test]
fn check_config_judges_files_as_the_agent_reads_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let toml_files = |dir: &str| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        v.sort();
        v
    };
    let cluster = root.join("scenarios/railway/cluster.yaml");
    let files: Vec<_> = toml_files("targets/profiles")
        .into_iter()
        .chain(toml_files("targets/nodes"))
        .chain([root.join("cross/deb/agent.toml")])
        .collect();
    let out = Command::new(agent_bin())
        .arg("check-config")
        .arg("--templates")
        .arg("--cluster")
        .arg(&cluster)
        .args(&files[..files.len() - 1])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        files.len() - 1
    );
    // The package's default configuration, without a cluster: placeholders only as a template.
    let deb = files.last().unwrap();
    run(Command::new(agent_bin())
        .args(["check-config", "--templates"])
        .arg(deb));
    let out = Command::new(agent_bin())
        .arg("check-config")
        .arg(deb)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("control_plane_key"));

    let dir = scratch_dir("checkcfg");
    let n13 = std::fs::read_to_string(root.join("targets/nodes/n13.toml")).unwrap();
    let key = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";
    let filled = n13
        .replace(
            "\"CHANGE-ME: 64 hex digits printed by cloud-broker node add\"",
            &format!("\"{key}\""),
        )
        .replace("password = \"CHANGE-ME\"", "password = \"secret\"");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let check = |file: &std::path::Path| {
        let out = Command::new(agent_bin())
            .arg("check-config")
            .arg("--cluster")
            .arg(&cluster)
            .arg(file)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let good = write("good.toml", filled.clone());
    let (ok, text) = check(&good);
    assert!(ok, "{text}");
    let window = write("window.toml", filled.replace("window = 20", "window = 100"));
    let (ok, text) = check(&window);
    assert!(
        !ok && text.contains("FAIL") && text.contains("probe.window: must be 1 to 64"),
        "{text}"
    );
    let report = write(
        "report.toml",
        filled.replace("report_period_ms = 1000", "report_period_ms = 50"),
    );
    let (ok, text) = check(&report);
    assert!(
        !ok && text.contains("report_period_ms: must be at least 100"),
        "{text}"
    );
    let tcp = write(
        "tcp.toml",
        filled.replace("mqtt://127.0.0.1:1883", "tcp://127.0.0.1:1883"),
    );
    let (ok, text) = check(&tcp);
    assert!(ok, "{text}");
    // The agent itself starts reading what check-config refuses: it refuses it the same way.
    let out = Command::new(agent_bin())
        .arg("--config")
        .arg(&window)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("probe.window: must be 1 to 64"));
}

#[test]
fn agent_without_broker_or_runtime_keeps_running_and_retries() {
    let dir = scratch_dir("alone");
    let port = free_port(); // nothing listens there
    let mut agent = Agent::new(
        &node_name("alone"),
        &dir,
        &format!("mqtt://127.0.0.1:{port}"),
        "",
        "listen = \"127.0.0.1:0\"",
    );
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
    agent.start_with(cmd);
    agent.wait_log("broker connection lost", Duration::from_secs(30));
    agent.wait_log("container runtime unavailable", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    assert!(agent.is_running());
    let log = agent.logs();
    assert_eq!(
        log.matches("broker connection lost").count(),
        1,
        "one line per outage:\n{log}"
    );
}
