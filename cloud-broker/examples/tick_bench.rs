//! How long the control plane's decision loop takes for one tick (`Event::Tick`: judging the
//! silent nodes, re-placing for joins, expiring links, ...) in a fleet where some nodes are
//! silent, at several fleet sizes (not a test: it prints figures). The engine is driven with
//! plain values (`testkit::engine::EngineSim`), no I/O: what is timed is the loop's own work.
//!
//! ```text
//! cargo build --release -p cloud-broker --example tick_bench
//! target/release/examples/tick_bench --nodes 10000,20000,50000 --silent 0.1
//! ```
//!
//! The fleet: trains of 10 nodes; each node reports 32 peers (the 9 others of its train and 23
//! spread over the fleet), every peer having just answered. Then a fraction of the nodes
//! (`--silent`, whole trains: trains in tunnels) stops reporting; past the silence window they
//! are judged unreachable (their peers reached them), and stay so: every later tick judges
//! them again. The figure is the median time of those later ticks (200 ms apart; the other
//! nodes report every second meanwhile, untimed).

use std::time::Instant;

use acoa_shared::model::{Capacity, Layer, Node, Usage};
use acoa_shared::wire::{self, LinkSample};
use clap::Parser;
use cloud_broker::engine::{EngineConfig, Event, NodeState};
use cloud_broker::testkit::engine::{link_metrics, EngineSim};
use cloud_broker::testkit::report_of;

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_value = "10000,20000,50000")]
    nodes: Vec<usize>,
    /// The fraction of the fleet silent (whole trains).
    #[arg(long, default_value_t = 0.1)]
    silent: f64,
    /// Ticks timed per fleet size (the median is printed).
    #[arg(long, default_value_t = 10)]
    ticks: usize,
}

const TRAIN: usize = 10;
const PEERS: usize = 32;

fn node(i: usize) -> Node {
    Node {
        name: format!("e{i:05}"),
        datacenter: format!("train{}", i / TRAIN),
        layer: Layer::Edge,
        arch: "aarch64".into(),
        hardware: vec![],
        software: vec![],
        capacity: Capacity {
            cpu_millis: 4000,
            memory_mb: 4096,
            disk_mb: 32_000,
            net_mbps: None,
            io_mbps: None,
        },
        usage: Usage::default(),
        position: None,
    }
}

/// Node `i`'s link report: its train, then peers spread over the fleet.
fn links(i: usize, n: usize) -> Event {
    let train = i / TRAIN * TRAIN;
    let own = (train..(train + TRAIN).min(n)).filter(|&j| j != i);
    let spread = (1..=n) // bounded: a fleet of one train has no other
        .map(|s| (i + s * 7919) % n)
        .filter(|&j| j / TRAIN != i / TRAIN);
    let peers = own.chain(spread).take(PEERS);
    Event::links(Box::new(link_metrics(
        &format!("e{i:05}"),
        peers.map(|j| LinkSample {
            peer: wire::name(&format!("e{j:05}")).unwrap(),
            latency_ms: 5.0,
            jitter_ms: 0.5,
            success: 1.0,
            samples: 20,
            last_answer_ms: 0,
        }),
    )))
}

fn main() {
    let args = Args::parse();
    println!(
        "| nodes | silent | tick p50 | tick max | judged unreachable | live model built (links) | link reports taken (32 peers each) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in &args.nodes {
        let cfg = EngineConfig {
            stats_every_ms: 0,
            ..EngineConfig::default()
        };
        let mut sim = EngineSim::new(cfg.clone());
        for i in 0..n {
            let r = report_of(&node(i), 1, &format!("10.{}.{}.1:7878", i / 256, i % 256));
            sim.feed(Event::Report(Box::new(r)));
        }
        for i in 0..n {
            sim.feed(links(i, n));
        }
        sim.tick(200); // the peer lists, computed once
                       // whole trains silent: the last `silent` of the fleet
        let quiet_from = n - ((n as f64 * args.silent) as usize / TRAIN * TRAIN);
        // past the silence window, every other node reporting again each second
        let steps = cfg.node_timeout_ms / 1000 + 2;
        for _ in 0..steps {
            sim.now += 1000;
            for i in 0..quiet_from {
                sim.feed(links(i, n));
            }
            sim.feed(Event::Tick);
        }
        let mut times = Vec::new();
        for t in 0..args.ticks {
            sim.now += 200;
            if t % 5 == 4 {
                // the others keep reporting (untimed)
                for i in 0..quiet_from {
                    sim.feed(links(i, n));
                }
            }
            let t = Instant::now();
            sim.feed(Event::Tick);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        // the live model the placements read, after a second of link reports (timed too: the
        // link reports the decision loop takes a second)
        sim.now += 1000;
        let t = Instant::now();
        for i in 0..quiet_from {
            sim.feed(links(i, n));
        }
        let reports_per_s = quiet_from as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let links_in_model = sim.e.cluster().links.len();
        let cluster_ms = t.elapsed().as_secs_f64() * 1000.0;
        let judged = (0..n)
            .filter(|i| sim.e.node_state(&format!("e{i:05}")) == Some(NodeState::Unreachable))
            .count();
        println!(
            "| {n} | {} | {:.2} ms | {:.2} ms | {judged} | {cluster_ms:.0} ms ({links_in_model}) | {reports_per_s:.0}/s |",
            n - quiet_from,
            times[times.len() / 2],
            times[times.len() - 1],
        );
    }
}
