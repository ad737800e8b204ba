//! The `scheduler` binary, run as a real process.

use std::path::PathBuf;
use std::process::Command;

fn railway(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/railway")
        .join(file)
        .display()
        .to_string()
}

fn scheduler(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(args)
        .output()
        .expect("run scheduler")
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("acoa-sched-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn place_prints_json_lines_for_the_railway_apps() {
    let cluster = railway("cluster.yaml");
    let (smoke, speed) = (
        railway("smoke-monitoring.yaml"),
        railway("speed-profiling.yaml"),
    );
    let out = scheduler(&[
        "place",
        "--cluster",
        &cluster,
        "--app",
        &smoke,
        "--app",
        &speed,
        "--enumerate",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let expect = [
        ("smoke-monitoring", 4800, 0.985122, 0.428112, 0.528718),
        ("speed-profiling", 2880, 0.994404, 0.474749, 0.677211),
    ];
    for (l, (name, n, best, worst, mean)) in lines.iter().zip(expect) {
        assert_eq!(l["application"], name);
        assert_eq!(l["feasible_deployments"], n);
        assert!((l["score"].as_f64().unwrap() - best).abs() < 1e-6);
        assert!((l["worst_score"].as_f64().unwrap() - worst).abs() < 1e-6);
        assert!((l["mean_score"].as_f64().unwrap() - mean).abs() < 1e-6);
        assert!(l["elapsed_us"].as_u64().is_some());
        assert!(l["placement"].as_object().unwrap().len() >= 5);
        for c in l["criteria"].as_array().unwrap() {
            assert!(c["type"].is_string() && c["weight"].is_f64() && c["grade"].is_f64());
            assert!(c["path"].is_string() || c["component"].is_string());
        }
    }
    assert_eq!(lines[0]["placement"]["measurement"], "n13");
}

#[test]
fn place_without_enumerate_has_no_worst_or_mean_and_text_is_readable() {
    let cluster = railway("cluster.yaml");
    let smoke = railway("smoke-monitoring.yaml");
    let out = scheduler(&[
        "place",
        "--cluster",
        &cluster,
        "--app",
        &smoke,
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(l.get("worst_score").is_none() && l.get("mean_score").is_none());
    assert!((l["score"].as_f64().unwrap() - 0.985122).abs() < 1e-6);
    let out = scheduler(&["place", "--cluster", &cluster, "--app", &smoke]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("smoke-monitoring: score 0.985122"), "{text}");
    assert!(text.contains("measurement"), "{text}");
}

#[test]
fn a_bad_file_names_the_file_the_field_and_the_reason() {
    let cluster = railway("cluster.yaml");
    let bad = tmp(
        "bad-weight.yaml",
        "application: x\ncomponents:\n- {name: m, image: 'i:1'}\ncriteria:\n- {type: least-containers, component: m, weight: -2}\n",
    );
    let out = scheduler(&["place", "--cluster", &cluster, "--app", &bad]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad-weight.yaml"), "{err}");
    assert!(err.contains("criteria[0].weight"), "{err}");
    assert!(err.contains("must be a finite number > 0"), "{err}");
    let out = scheduler(&["place", "--cluster", "/nonexistent/c.yaml", "--app", &bad]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/c.yaml"));
}

#[test]
fn an_infeasible_application_fails_with_the_reason() {
    let cluster = railway("cluster.yaml");
    let app = tmp(
        "no-gps.yaml",
        "application: y\ncomponents:\n- name: m\n  image: 'i:1'\n  requires: {hardware: [gps], datacenter: cloud1}\n",
    );
    let out = scheduler(&[
        "place",
        "--cluster",
        &cluster,
        "--app",
        &app,
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("`y` cannot be placed"), "{err}");
    assert!(err.contains("component `m`"), "{err}");
}

#[test]
fn algorithms_lists_qos() {
    let out = scheduler(&["algorithms"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .any(|l| l == "qos"));
}
