//! Paper 003 reproduced as a SIMULATION (not the testbed): p95 of the end-to-end response time
//! under the network-aware scheduler and the network-unaware baseline, then the descheduler
//! after a latency change. Model and workflow: `acoa_scheduler::netaware::sim`.
//!
//! `cargo run --release -p acoa-scheduler --example netaware-sim`

use acoa_scheduler::netaware::desched::Config;
use acoa_scheduler::netaware::sim;
use acoa_scheduler::netaware::Weights;

fn fmt(v: Option<f64>) -> String {
    v.map_or("saturated".to_string(), |v| format!("{v:.1}"))
}

fn main() {
    let w = Weights::default();
    let samples = 20_000;
    let users = [10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0];
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
            fmt(r.baseline_p95),
            fmt(r.netaware_p95),
            r.reduction().map_or("-".into(), |v| format!("{v:.0} %")),
            r.baseline_nodes,
            r.netaware_nodes,
            r.baseline_remote_calls,
            r.netaware_remote_calls,
        );
    }
}

#[allow(dead_code)]
fn explore() {}
