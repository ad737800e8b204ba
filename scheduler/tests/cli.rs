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
    let apps = [
        railway("smoke-monitoring.yaml"),
        railway("speed-profiling.yaml"),
    ];
    let lines = place_json(&cluster, &apps, &["--enumerate"]);
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
fn algorithms_lists_qos_topsis_and_network_aware() {
    let out = scheduler(&["algorithms"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["qos", "topsis", "network-aware"]
    );
}

/// A railway application with `scheduler: qos` replaced by `algorithm`, in a temporary file.
fn railway_with(file: &str, algorithm: &str) -> String {
    let text = std::fs::read_to_string(railway(file)).unwrap();
    assert!(text.contains("\nscheduler: qos\n"));
    tmp(
        &format!("{algorithm}-{file}"),
        &text.replacen(
            "\nscheduler: qos\n",
            &format!("\nscheduler: {algorithm}\n"),
            1,
        ),
    )
}

/// `place --format json` of `apps` on `cluster` with `extra`, which must succeed: a JSON
/// value per line.
fn place_json(cluster: &str, apps: &[String], extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["place", "--cluster", cluster, "--format", "json"];
    for a in apps {
        args.extend(["--app", a.as_str()]);
    }
    args.extend_from_slice(extra);
    let out = scheduler(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn place_honours_scheduler_topsis_and_network_aware_on_the_railway() {
    let cluster = railway("cluster.yaml");
    for algorithm in ["topsis", "network-aware"] {
        let apps = [
            railway_with("smoke-monitoring.yaml", algorithm),
            railway_with("speed-profiling.yaml", algorithm),
        ];
        let lines = place_json(&cluster, &apps, &[]);
        assert_eq!(lines.len(), 2, "{algorithm}");
        for l in &lines {
            assert_eq!(l["scheduler"], algorithm);
            let s = l["score"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&s), "{algorithm}: {s}");
            assert_eq!(l["feasible_exact"], false);
            assert!(!l["notes"].as_array().unwrap().is_empty(), "{l}");
        }
        // The constraints hold: the sensor's component on the sensor's node, the alarm on
        // train1's dashboard, the profilers' broker wherever.
        let smoke = &lines[0]["placement"];
        assert_eq!(smoke["measurement"], "n13", "{algorithm}");
        assert_eq!(smoke["alarm"], "n14", "{algorithm}");
        assert_eq!(lines[1]["placement"].as_object().unwrap().len(), 7);
    }
    // TOPSIS on an idle cluster without requests: every candidate is the same, so each
    // closeness is 1 and ties go to the first node in name order; bandwidth and I/O are not
    // reported by any node and are left out.
    let lines = place_json(
        &cluster,
        &[railway_with("smoke-monitoring.yaml", "topsis")],
        &[],
    );
    assert_eq!(lines[0]["score"], 1.0);
    assert_eq!(lines[0]["placement"]["batching"], "n01");
    let notes = lines[0]["notes"].to_string();
    assert!(
        notes.contains("bandwidth capacity: the metric is left out"),
        "{notes}"
    );
    // Network-aware before any measurement: equal traffic on every channel, so the
    // unconstrained stages join the sensor's node (its loopback is the fastest link), and
    // the notes say so.
    let lines = place_json(
        &cluster,
        &[railway_with("smoke-monitoring.yaml", "network-aware")],
        &[],
    );
    let p = &lines[0]["placement"];
    assert_eq!(p["batching"], "n13");
    assert_eq!(p["level-detection"], "n13");
    let notes = lines[0]["notes"].to_string();
    assert!(
        notes.contains("no measurements of `smoke-monitoring` yet"),
        "{notes}"
    );
    // With measurements in the cluster file: no fallback note, and the text output names
    // the algorithm instead of an optimum.
    let measured = std::fs::read_to_string(&cluster).unwrap()
        + "observed:\n  smoke-monitoring:\n    components:\n"
        + "      measurement: {cpu_millis: 50, memory_mb: 20}\n"
        + "      batching: {cpu_millis: 100, memory_mb: 64}\n"
        + "      level-detection: {cpu_millis: 80, memory_mb: 32}\n"
        + "      storage: {cpu_millis: 200, memory_mb: 256}\n"
        + "      alarm: {cpu_millis: 10, memory_mb: 16}\n"
        + "    traffic:\n"
        + "    - {from: measurement, to: level-detection, bytes_per_s: 4000}\n"
        + "    - {from: measurement, to: batching, bytes_per_s: 4000}\n"
        + "    - {from: level-detection, to: alarm, bytes_per_s: 100}\n";
    let measured = tmp("measured-cluster.yaml", &measured);
    let app = railway_with("smoke-monitoring.yaml", "network-aware");
    let lines = place_json(&measured, std::slice::from_ref(&app), &[]);
    assert!(lines[0].get("notes").is_none(), "{}", lines[0]);
    let out = scheduler(&["place", "--cluster", &measured, "--app", &app]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("smoke-monitoring: score")
            && text.contains("network-aware, component by component"),
        "{text}"
    );
    assert!(!text.contains("optimum proven"), "{text}");
}

#[test]
fn an_unknown_scheduler_is_refused_naming_the_known_ones() {
    let cluster = railway("cluster.yaml");
    let app = railway_with("smoke-monitoring.yaml", "fastest");
    let out = scheduler(&["place", "--cluster", &cluster, "--app", &app]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown algorithm `fastest` (known: qos, topsis, network-aware)"),
        "{err}"
    );
}
