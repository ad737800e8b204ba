//! `--log-format json`: the real agent writes one JSON object a line, with the level and the
//! message at the top, while it runs and when a bad configuration stops it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Every line of `text` as a JSON object with `level` and `message` strings.
fn json_lines(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\nlog:\n{text}"));
        match (v["level"].as_str(), v["message"].as_str()) {
            (Some(l), Some(m)) => out.push((l.to_string(), m.to_string())),
            _ => panic!("no level or message field: {line}"),
        }
    }
    out
}

#[test]
fn agent_logs_one_json_object_a_line() {
    let dir = scratch_dir("jsonlog");
    let port = free_port(); // nothing listens there: the agent logs its retries
    let mut agent = Agent::new(
        &node_name("jsonlog"),
        &dir,
        &format!("mqtt://127.0.0.1:{port}"),
        "",
        "listen = \"127.0.0.1:0\"",
    );
    let mut cmd = Command::new(agent_bin());
    cmd.args([
        "--log-format",
        "json",
        "--podman-socket",
        "unix:///nonexistent/podman.sock",
    ]);
    agent.start_with(cmd);
    agent.wait_log("broker connection lost", Duration::from_secs(30));
    agent.kill();
    let lines = json_lines(&agent.logs());
    assert!(
        lines
            .iter()
            .any(|(l, m)| l == "WARN" && m.contains("broker connection lost")),
        "{lines:?}"
    );

    // A configuration that stops the agent is named in a JSON line.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "node = \"x\"\nlayer = \"fog\"\n").unwrap();
    let out = Command::new(agent_bin())
        .args(["--log-format", "json", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = json_lines(&stderr);
    assert!(
        lines
            .iter()
            .any(|(l, m)| l == "ERROR" && m.contains("layer")),
        "{stderr}"
    );
}
