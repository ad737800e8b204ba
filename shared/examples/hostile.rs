//! Time and peak memory of reading hostile application definitions, with the bounds
//! (`parse_application`) and, with `--before`, through the unbounded pipeline the control
//! plane used before them (serde_yaml_ng or serde_json straight into the typed model, then
//! `validate()`).
//!
//! ```text
//! cargo run --release -p acoa-shared --example hostile [-- --before]
//! ```
//!
//! Each case runs in a child process of its own, so that its peak RSS is its own.

use acoa_shared::model::{limits, parse_application, Application, Format};
use std::process::Command;
use std::time::Instant;

fn nested_seq(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_map(depth: usize) -> String {
    format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth))
}

fn nested_json(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

/// One anchored requirement with `labels` labels reused by `uses` more components.
fn alias_bomb(labels: usize, uses: usize) -> String {
    let list: Vec<String> = (0..labels).map(|i| format!("l{i}")).collect();
    let mut text = format!(
        "application: bomb\ncomponents:\n- name: c0\n  image: i\n  requires: &r {{hardware: [{}]}}\n",
        list.join(", ")
    );
    for i in 1..=uses {
        text.push_str(&format!("- {{name: c{i}, image: i, requires: *r}}\n"));
    }
    text
}

fn laughs() -> String {
    let mut text = "application: lol\ncomponents:\n- name: a\n  image: i\n  requires:\n    hardware: &a0 [x, x, x, x, x, x, x, x, x, x]\n".to_string();
    for i in 1..9 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "- name: c{i}\n  image: i\n  requires:\n    hardware: &a{i} [{}]\n",
            vec![prev; 10].join(", ")
        ));
    }
    text
}

const SMALL: &str = "application: demo\ncomponents:\n- {name: a, image: localhost/acoa/a:1}\n- {name: b, image: localhost/acoa/b:1}\nchannels:\n- {name: ab, from: a, to: b}\n- {name: ba, from: b, to: a}\n";

/// The largest application within every count limit (accepted): the cost of a valid read.
fn at_limits() -> String {
    let mut t = "application: big\ncomponents:\n".to_string();
    for i in 0..limits::MAX_COMPONENTS {
        t.push_str(&format!(
            "- {{name: component-{i:04}, image: registry.example/acoa/component:{i}, requires: {{hardware: [h1, h2], layer: edge}}, resources: {{cpu_millis: 100, memory_mb: 64}}}}\n"
        ));
    }
    t.push_str("channels:\n");
    for i in 0..limits::MAX_CHANNELS {
        let a = i % (limits::MAX_COMPONENTS - 1);
        t.push_str(&format!(
            "- {{name: channel-{i:04}, from: component-{a:04}, to: component-{:04}}}\n",
            a + 1
        ));
    }
    t.push_str("paths:\n");
    for i in 0..limits::MAX_PATHS {
        t.push_str(&format!(
            "- {{name: path-{i:04}, channels: [channel-{i:04}, channel-{:04}]}}\n",
            i + 1
        ));
    }
    t.push_str("criteria:\n");
    for i in 0..limits::MAX_CRITERIA {
        t.push_str(&format!(
            "- {{type: max-e2e-reliability, path: path-{i:04}, weight: 1}}\n"
        ));
    }
    t
}

fn case(name: &str) -> String {
    match name {
        "nested-seq-100k" => nested_seq(100_000),
        "nested-seq-200k" => nested_seq(200_000),
        "nested-map-50k" => nested_map(50_000),
        "nested-json-100k" => nested_json(100_000),
        "alias-1000x12000" => alias_bomb(1000, 12_000),
        "alias-1000x2000" => alias_bomb(1000, 2_000),
        "laughs-10^9" => laughs(),
        "binary-tag" => SMALL.replacen("image: localhost/acoa/a:1", "image: !!binary bG9s", 1),
        "cycle-off-path" => SMALL.to_string(),
        "name-with-#" => SMALL.replacen("application: demo", "application: 'de#mo'", 1),
        "valid-at-limits" => at_limits(),
        _ => panic!("unknown case {name}"),
    }
}

const CASES: [&str; 11] = [
    "nested-seq-100k",
    "nested-seq-200k",
    "nested-map-50k",
    "nested-json-100k",
    "alias-1000x12000",
    "alias-1000x2000",
    "laughs-10^9",
    "binary-tag",
    "cycle-off-path",
    "name-with-#",
    "valid-at-limits",
];

/// main's reading: the typed parser on the whole text, then the checks.
fn unbounded(text: &str) -> Result<Application, String> {
    let app: Application = match Format::sniff(text) {
        Format::Json => {
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
                .map_err(|e| e.to_string())?
        }
        Format::Yaml => {
            serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
                .map_err(|e| e.to_string())?
        }
    };
    app.validate().map_err(|e| e.to_string())?;
    Ok(app)
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn short(s: &str) -> String {
    let s = s.replace('|', "/").replace('\n', " ");
    if s.chars().count() > 110 {
        format!("{}...", s.chars().take(110).collect::<String>())
    } else {
        s
    }
}

/// Runs one case in this process and prints `ms|peak MB|outcome`.
fn child(name: &str, before: bool) {
    let text = case(name);
    let t = Instant::now();
    let outcome = if before {
        unbounded(&text).map(|a| a.components.len())
    } else {
        parse_application(&text)
            .map(|a| a.components.len())
            .map_err(|e| e.to_string())
    };
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let outcome = match outcome {
        Ok(n) => format!("accepted ({n} components)"),
        Err(e) => format!("refused: {}", short(&e)),
    };
    println!("{ms:.3}|{:.1}|{outcome}|{}", peak_rss_mb(), text.len());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        child(&args[i + 1], args.iter().any(|a| a == "--unbounded"));
        return;
    }
    let before = args.iter().any(|a| a == "--before");
    let me = std::env::current_exe().expect("own path");
    println!("| input | bytes | reader | time (ms) | peak RSS (MB) | outcome |");
    println!("|---|---|---|---|---|---|");
    for name in CASES {
        let modes: &[bool] = if before { &[true, false] } else { &[false] };
        for &unb in modes {
            let mut cmd = Command::new(&me);
            cmd.args(["--case", name]);
            if unb {
                cmd.arg("--unbounded");
            }
            let out = cmd.output().expect("run a case");
            let line = String::from_utf8_lossy(&out.stdout);
            let f: Vec<&str> = line.trim().splitn(4, '|').collect();
            let reader = if unb { "unbounded (main)" } else { "bounded" };
            if f.len() == 4 {
                println!(
                    "| {name} | {} | {reader} | {} | {} | {} |",
                    f[3], f[0], f[1], f[2]
                );
            } else {
                println!(
                    "| {name} | | {reader} | | | failed: {} |",
                    short(&String::from_utf8_lossy(&out.stderr))
                );
            }
        }
    }
}
