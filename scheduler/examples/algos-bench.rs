//! Placement time of each algorithm (not a test):
//! `cargo run --release -p acoa-scheduler --features sim --example algos-bench [-- --sizes 100,1000 --algorithms topsis,network-aware --components 10]`
//!
//! For each cluster size (synthetic, `acoa_scheduler::synth`) and algorithm, places one
//! synthetic application of `--components` components (median of 5 runs below 2,000 nodes,
//! else one run) and prints the wall-clock time, the score and the number of (component,
//! node) pairs scored. Peak memory: run one size and one algorithm per process under
//! `/usr/bin/time -f %M`.

use acoa_scheduler::{place_on, synth, Ledger, Options, Outcome};
use std::time::{Duration, Instant};

#[path = "common/args.rs"]
mod args;
use args::arg;

fn main() {
    let sizes = args::sizes(&[100, 1_000, 5_000]);
    let algorithms: Vec<String> = arg("--algorithms").map_or_else(
        || {
            acoa_scheduler::algorithms()
                .iter()
                .map(|s| s.to_string())
                .collect()
        },
        |v| v.split(',').map(str::to_string).collect(),
    );
    let components: usize = arg("--components").map_or(10, |v| v.parse().expect("--components"));
    println!("| nodes | algorithm | components | time | score | pairs scored |");
    println!("|---:|---|---:|---:|---:|---:|");
    for &n in &sizes {
        let per_dc = 10;
        let dcs = n.div_ceil(per_dc);
        let infra = synth::cluster(dcs, per_dc, 1);
        for algo in &algorithms {
            let mut app = synth::application(components, dcs, 1);
            app.scheduler = algo.clone();
            let opts = Options {
                time_budget: Some(Duration::from_secs(10)),
                ..Options::default()
            };
            let runs = if n < 2_000 { 5 } else { 1 };
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let t = Instant::now();
                let r = place_on(&infra, &app, &Ledger::new(), &opts).expect("place");
                times.push(t.elapsed());
                last = Some(r);
            }
            times.sort();
            let r = last.expect("one run");
            let score = match &r.outcome {
                Outcome::Placed(p) => format!("{:.4}", p.score),
                Outcome::Infeasible(i) => format!("infeasible: {}", i.reason),
            };
            println!(
                "| {} | {algo} | {components} | {:.1} ms | {score} | {} |",
                infra.len(),
                times[times.len() / 2].as_secs_f64() * 1e3,
                r.explored
            );
        }
    }
}
