//! Paper 003 reproduced as a SIMULATION (not the testbed): p95 of the end-to-end response time
//! under the network-aware scheduler and the network-unaware baseline, then the descheduler
//! after a latency change. Model and workflow: `acoa_scheduler::netaware::sim`.
//!
//! `cargo run --release -p acoa-scheduler --example netaware-sim`

#![allow(clippy::needless_range_loop)]

use acoa_scheduler::netaware::desched::Config;
use acoa_scheduler::netaware::sim;
use acoa_scheduler::netaware::{place, NetOutcome, Weights};

fn fmt(v: Option<f64>) -> String {
    v.map_or("saturated".to_string(), |v| format!("{v:.1}"))
}

/// A p95, or why there is none: no placement (a scheduler found no room), or a node in use at
/// or over 100 % CPU (the queue grows without bound).
fn cell(p95: Option<f64>, nodes: usize) -> String {
    match (p95, nodes) {
        (Some(v), _) => format!("{v:.1}"),
        (None, 0) => "no placement".into(),
        (None, _) => "saturated".into(),
    }
}

fn calls(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v}")
    }
}

fn main() {
    let w = Weights::default();
    let samples = 20_000;
    let users = [10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0, 140.0];
    println!("weights: {w:?}; {samples} sampled requests per cell, seed 1\n");
    println!(
        "| latency (ms) | users | baseline p95 (ms) | network-aware p95 (ms) | reduction | nodes (base/net) | remote calls per request (base/net) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in sim::compare(&[10.0, 100.0, 200.0], &users, &w, samples, 1) {
        println!(
            "| {} | {} | {} | {} | {} | {}/{} | {}/{} |",
            r.latency_ms,
            r.users,
            cell(r.baseline_p95, r.baseline_nodes),
            cell(r.netaware_p95, r.netaware_nodes),
            r.reduction().map_or("-".into(), |v| format!("{v:.0} %")),
            r.baseline_nodes,
            r.netaware_nodes,
            calls(r.baseline_remote_calls),
            calls(r.netaware_remote_calls),
        );
    }

    // Mean reduction per latency, over the loads where both have a figure.
    let rows = sim::compare(&[10.0, 100.0, 200.0], &users, &w, samples, 1);
    println!();
    for l in [10.0, 100.0, 200.0] {
        let r: Vec<f64> = rows
            .iter()
            .filter(|r| r.latency_ms == l)
            .filter_map(|r| r.reduction())
            .collect();
        println!(
            "latency {l} ms: p95 reduction mean {:.0} %, min {:.0} %, max {:.0} % over {} loads",
            r.iter().sum::<f64>() / r.len() as f64,
            r.iter().cloned().fold(f64::INFINITY, f64::min),
            r.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            r.len()
        );
    }

    let nodes = sim::paper_nodes();
    let wf = sim::paper_workflow();
    let before = sim::uniform_latency(nodes.len(), 10.0);
    // (label, users, component whose node is hit, ingress link only?, group moves?)
    let scenarios = [
        ("A", 80.0, "m0", true, true),
        ("B", 40.0, "m12", false, true),
        ("B'", 40.0, "m12", false, false),
        ("C", 80.0, "m3", false, true),
    ];
    println!(
        "\ndescheduler: 10 ms everywhere, change at tick 20, latencies measured with ±20 % noise (uniform, each link each tick), {:?}",
        Config::default()
    );
    for (label, users, victim, ingress_only, group_moves) in scenarios {
        let cfg = Config {
            group_moves,
            ..Config::default()
        };
        let s = sim::snapshot(&wf, &nodes, before.clone(), users);
        let Ok(NetOutcome::Placed(a)) = place(&s, &cfg.weights) else {
            panic!("the workflow fits")
        };
        let hit = a[wf.names.iter().position(|n| n == victim).unwrap()];
        let mut after = before.clone();
        for x in 0..nodes.len() {
            if x != hit && (!ingress_only || x == 0) {
                after[hit][x] = 200.0;
                after[x][hit] = 200.0;
            }
        }
        let what = if ingress_only {
            format!(
                "the ingress c0's link to {} ({victim}'s node)",
                nodes[hit].name
            )
        } else {
            format!("every link of {} ({victim}'s node)", nodes[hit].name)
        };
        let on: Vec<&str> = (0..a.len())
            .filter(|&c| a[c] == hit)
            .map(|c| wf.names[c].as_str())
            .collect();
        println!(
            "\n{label}: {users} users; at tick 20 {what} goes from 10 to 200 ms; on {}: {}; group moves {}\n",
            nodes[hit].name,
            on.join(" "),
            if group_moves { "on" } else { "off" }
        );
        println!("| tick | p95 (ms) | remote calls per request | moves |");
        println!("|---|---|---|---|");
        let rows = sim::deschedule_run(before.clone(), after, users, 60, 20, 0.2, cfg, 5000, 1);
        let mut show_next = false;
        for r in rows {
            let moved = !r.moves.is_empty();
            if r.tick % 10 == 0 || moved || show_next || r.tick == 19 || r.tick == 59 {
                println!(
                    "| {} | {} | {:.0} | {} |",
                    r.tick,
                    fmt(r.p95),
                    r.remote_calls,
                    r.moves.join(", ")
                );
            }
            show_next = moved;
        }
    }
}
