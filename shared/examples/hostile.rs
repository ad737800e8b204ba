//! Time and peak memory of reading hostile application definitions with
//! `parse_application`, the control plane's reader.
//!
//! ```text
//! cargo run --release -p acoa-shared --example hostile
//! ```
//!
//! The same program builds against any version of the crate (it uses only
//! `parse_application`), so the figures of an earlier commit come from a copy of it:
//!
//! ```text
//! mkdir /tmp/acoa-old && git archive 57a8b19 | tar -x -C /tmp/acoa-old
//! cp shared/examples/hostile.rs /tmp/acoa-old/shared/examples/
//! cargo run --release --manifest-path /tmp/acoa-old/Cargo.toml -p acoa-shared --example hostile
//! ```
//!
//! Each case runs in a child process of its own, so that its peak RSS is its own. Besides
//! the wall time it prints the CPU time the reading thread spent running (the kernel's
//! schedstat, updated at scheduler ticks: 0 means less than a tick), which a loaded
//! machine does not inflate.

use acoa_shared::model::parse_application;
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

const SMALL: &str = "application: demo\ncomponents:\n- {name: a, image: localhost/acoa/a:1}\n- {name: b, image: localhost/acoa/b:1}\nchannels:\n- {name: ab, from: a, to: b}\n";

/// Components, channels, paths and criteria of the largest application the bounds admit
/// (`model::limits`; written out so that this program builds against any version).
const COMPONENTS: usize = 256;
const CHANNELS: usize = 1024;
const PATHS: usize = 256;
const CRITERIA: usize = 256;

/// The largest application within every count limit (accepted): the cost of a valid read.
fn at_limits() -> String {
    let mut t = "application: big\ncomponents:\n".to_string();
    for i in 0..COMPONENTS {
        t.push_str(&format!(
            "- {{name: component-{i:04}, image: registry.example/acoa/component:{i}, requires: {{hardware: [h1, h2], layer: edge}}, resources: {{cpu_millis: 100, memory_mb: 64}}}}\n"
        ));
    }
    t.push_str("channels:\n");
    for i in 0..CHANNELS {
        let a = i % (COMPONENTS - 1);
        t.push_str(&format!(
            "- {{name: channel-{i:04}, from: component-{a:04}, to: component-{:04}}}\n",
            a + 1
        ));
    }
    t.push_str("paths:\n");
    for i in 0..PATHS {
        t.push_str(&format!(
            "- {{name: path-{i:04}, channels: [channel-{i:04}, channel-{:04}]}}\n",
            i + 1
        ));
    }
    t.push_str("criteria:\n");
    for i in 0..CRITERIA {
        t.push_str(&format!(
            "- {{type: max-e2e-reliability, path: path-{i:04}, weight: 1}}\n"
        ));
    }
    t
}

/// The costliest refusal within the document bounds: just under 256 KiB of components
/// that are each valid, within every pre-scan bound, refused by validate() for their
/// number.
fn late_refusal() -> String {
    let mut t = "application: late\ncomponents:\n".to_string();
    let image = format!("registry.example/{}:1", "x".repeat(230));
    let labels: Vec<String> = (0..30).map(|i| format!("label-{i:02}")).collect();
    for i in 0.. {
        let line = format!(
            "- {{name: c{i:04}, image: {image}, requires: {{hardware: [{}]}}}}\n",
            labels.join(", ")
        );
        if t.len() + line.len() > 256 * 1024 {
            break;
        }
        t.push_str(&line);
    }
    t
}

fn case(name: &str) -> String {
    match name {
        "nested-seq-100k" => nested_seq(100_000),
        "nested-seq-200k" => nested_seq(200_000),
        "nested-map-50k" => nested_map(50_000),
        "nested-yaml-map-50k" => format!("a: {}", nested_map(50_000)),
        "block-seq-100k" => format!("{}1\n", "- ".repeat(100_000)),
        "nested-json-50k" => nested_json(50_000),
        "nested-json-100k" => nested_json(100_000),
        "alias-1000x12000" => alias_bomb(1000, 12_000),
        "alias-1000x6000" => alias_bomb(1000, 6_000),
        "alias-1000x2000" => alias_bomb(1000, 2_000),
        "laughs-10^9" => laughs(),
        "binary-tag" => SMALL.replacen("image: localhost/acoa/a:1", "image: !!binary bG9s", 1),
        "cycle-off-path" => format!("{SMALL}- {{name: ba, from: b, to: a}}\n"),
        "name-with-#" => SMALL.replacen("application: demo", "application: 'de#mo'", 1),
        "valid-at-limits" => at_limits(),
        "late-refusal-256k" => late_refusal(),
        _ => panic!("unknown case {name}"),
    }
}

const CASES: [&str; 16] = [
    "nested-seq-100k",
    "nested-seq-200k",
    "nested-map-50k",
    "nested-yaml-map-50k",
    "block-seq-100k",
    "nested-json-50k",
    "nested-json-100k",
    "alias-1000x12000",
    "alias-1000x6000",
    "alias-1000x2000",
    "laughs-10^9",
    "binary-tag",
    "cycle-off-path",
    "name-with-#",
    "valid-at-limits",
    "late-refusal-256k",
];

/// CPU time this thread has run, ms (`/proc/thread-self/schedstat`, nanoseconds).
fn cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

fn peak_rss_mb() -> f64 {
    acoa_test_support::proc_status_kb(None, "VmHWM").map_or(f64::NAN, |kb| kb as f64 / 1024.0)
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
fn child(name: &str) {
    let text = case(name);
    let c = cpu_ms();
    let t = Instant::now();
    let outcome = parse_application(&text)
        .map(|a| a.components.len())
        .map_err(|e| e.to_string());
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let cpu = cpu_ms() - c;
    let outcome = match outcome {
        Ok(n) => format!("accepted ({n} components)"),
        Err(e) => format!("refused: {}", short(&e)),
    };
    println!(
        "{ms:.3}|{cpu:.3}|{:.1}|{outcome}|{}",
        peak_rss_mb(),
        text.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        child(&args[i + 1]);
        return;
    }
    let me = std::env::current_exe().expect("own path");
    println!("| input | bytes | wall time (ms) | CPU time (ms) | peak RSS (MB) | outcome |");
    println!("|---|---|---|---|---|---|");
    for name in CASES {
        let out = Command::new(&me)
            .args(["--case", name])
            .output()
            .expect("run a case");
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = line.trim().splitn(5, '|').collect();
        if f.len() == 5 {
            println!(
                "| {name} | {} | {} | {} | {} | {} |",
                f[4], f[0], f[1], f[2], f[3]
            );
        } else {
            println!(
                "| {name} | | | | | failed ({}): {} |",
                out.status,
                short(&String::from_utf8_lossy(&out.stderr))
            );
        }
    }
}
