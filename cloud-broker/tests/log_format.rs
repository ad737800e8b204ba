//! `--log-format json`: the real control plane binary writes one JSON object a line, with the
//! level and the message at the top, for a serve with an agent joining and for a failed command.

mod common;

use std::time::Duration;

use common::*;

/// Every line of `text` as a JSON object with `level` and `message` strings; returns the messages.
fn json_lines(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\nlog:\n{text}"));
        let level = v["level"].as_str();
        let message = v["message"].as_str();
        match (level, message) {
            (Some(l), Some(m)) => out.push((l.to_string(), m.to_string())),
            _ => panic!("no level or message field: {line}"),
        }
    }
    out
}

#[test]
fn serve_and_a_failed_command_log_one_json_object_a_line() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let n1 = enroll(&data, "n1");
        let mut cp = ControlPlane::start(&data, free_port(), &["--log-format", "json"]);
        let agent = start_n1(&cp, &cp.url.clone(), n1, false).await;
        drop(agent);
        cp.kill();
        let lines = json_lines(&cp.log_text());
        assert!(
            lines
                .iter()
                .any(|(l, m)| l == "INFO" && m.contains("connected to the broker")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|(_, m)| m.contains("node n1 joined")),
            "{lines:?}"
        );

        // A command that fails says why in a JSON line too.
        let out = cli(
            &data,
            &["--log-format", "json", "node", "set-key", "n2", "not-hex"],
        );
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines = json_lines(&stderr);
        assert!(
            lines.iter().any(|(l, _)| l == "ERROR"),
            "the failure is an ERROR line: {stderr}"
        );

        // The default stays the readable text.
        let out = cli(&data, &["node", "set-key", "n2", "not-hex"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: "), "{stderr}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}
