//! The command line: `pubkey`, configuration errors, an agent with nothing to talk to.

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
