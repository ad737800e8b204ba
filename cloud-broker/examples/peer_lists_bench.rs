//! How long the control plane takes to compute every node's peer list (`engine::probes::
//! peer_lists`, what `publish_peers` runs after a membership change or a coordinate move),
//! at several fleet sizes (not a test: it prints figures).
//!
//! ```text
//! cargo build --release -p cloud-broker --example peer_lists_bench
//! target/release/examples/peer_lists_bench --nodes 1000,10000,50000 --k 32
//! ```
//!
//! The fleet: trains of 10 nodes and two cloud datacenters of a twentieth of the nodes each,
//! every node with a 3-dimensional coordinate spread over 5 regions (heights 0-3 ms); with
//! `--positioned S`, that share of the groups of 10 are stations with a position on the map
//! (a square of 400 km x sqrt(n / 1000) a side, the group's nodes within 200 m), whose lists
//! then take their nearest on the map too. A change
//! (one node's coordinate moved) costs a whole computation again: the lists are recomputed,
//! then compared with the ones sent, and only the changed ones are published.
//!
//! Probe packets per agent per second, from the lists and the prober's rule (each period of
//! 1 s an agent pings `PEERS_PER_PERIOD` peers of its list in rotation, so each peer of a list
//! of m is pinged 4/m times a second by that agent, and answers each ping with one pong): an
//! agent's pings sent plus pongs received (8/s whatever the fleet) plus the pings it receives
//! and answers (the sum over the lists it is in of 4/m, twice: ping in, pong out). Mean, p99
//! and max over the fleet.

use std::collections::BTreeMap;
use std::time::Instant;

use acoa_shared::coords::{Coord, DIMS};
use acoa_shared::geo::Position;
use clap::Parser;
use cloud_broker::engine::probes::{peer_lists, Candidate};
use rand::{Rng, SeedableRng};

/// The agents' default (`probe.peers_per_period`) with periods of 1 s.
const PEERS_PER_PERIOD: usize = 4;

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    nodes: Vec<usize>,
    #[arg(long, default_value_t = 32)]
    k: usize,
    /// Computations per fleet size (the median is printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Shares of the groups of 10 that are stations with a position, one table row each.
    #[arg(long, value_delimiter = ',', default_value = "0,0.3")]
    positioned: Vec<f64>,
}

fn fleet(n: usize, positioned: f64, rng: &mut impl Rng) -> Vec<Candidate> {
    let clouds = n / 10;
    let side_km = 400.0 * (n as f64 / 1000.0).sqrt();
    let mut at: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    // the map draws from a generator of its own: the fleet is the same with positions or not
    let mut map = rand::rngs::StdRng::seed_from_u64(61);
    (0..n)
        .map(|i| {
            let (name, group) = if i < clouds {
                (format!("c{i:05}"), format!("cloud{}", i % 2 + 1))
            } else {
                (format!("e{i:05}"), format!("train{}", (i - clouds) / 10))
            };
            let region = rng.gen_range(0..5) as f64 * 50.0;
            let mut x = [0.0; DIMS];
            for v in x.iter_mut() {
                *v = region + rng.gen_range(-20.0..20.0);
            }
            let height = rng.gen_range(0.0..3.0);
            // a station: its group's place (drawn for its first node), each node within 200 m
            let g = (i - clouds.min(i)) / 10;
            let place = (i >= clouds && (g as f64 * 0.618_034).fract() < positioned).then(|| {
                let (y, x) = *at
                    .entry(g)
                    .or_insert_with(|| (map.gen_range(0.0..side_km), map.gen_range(0.0..side_km)));
                let (dy, dx) = (map.gen_range(-0.2..0.2), map.gen_range(-0.2..0.2));
                Position::new(46.0 + (y + dy) / 111.19, 7.0 + (x + dx) / 77.2).unwrap()
            });
            Candidate::new(
                &name,
                &format!("10.{}.{}.{}:7878", i / 65536, (i / 256) % 256, i % 256),
                group,
                Some(Coord::new(x, height, 0.2).unwrap()),
                place,
                0,
            )
        })
        .collect()
}

fn main() {
    let args = Args::parse();
    let none = BTreeMap::new();
    println!(
        "| nodes | k | groups with a position | all lists (median of {}) | peers per list (min / mean / max) | probe packets per agent per second (mean / p99 / max) |",
        args.runs
    );
    println!("|---|---|---|---|---|---|");
    for (&n, &positioned) in args
        .nodes
        .iter()
        .flat_map(|n| args.positioned.iter().map(move |p| (n, p)))
    {
        let mut rng = rand::rngs::StdRng::seed_from_u64(16 ^ n as u64);
        let mut cands = fleet(n, positioned, &mut rng);
        let mut times = vec![];
        let mut lists = BTreeMap::new();
        for r in 0..args.runs {
            // a change between runs: one node's coordinate moved
            let i = r % n;
            let mut x = *cands[i].coord.as_ref().unwrap().vec();
            x[0] += 1.0;
            cands[i].coord = Some(Coord::new(x, 1.0, 0.2).unwrap());
            let t = Instant::now();
            lists = peer_lists(&cands, args.k, &none, 1);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        let sizes: Vec<usize> = lists.values().map(Vec::len).collect();
        // packets: own pings and their pongs, and the pings of the lists it is in, answered
        let mut packets: BTreeMap<&str, f64> = lists
            .iter()
            .map(|(n, l)| {
                let own = PEERS_PER_PERIOD.min(l.len()) as f64;
                (n.as_ref(), 2.0 * own)
            })
            .collect();
        for l in lists.values() {
            let each = PEERS_PER_PERIOD.min(l.len()) as f64 / l.len().max(1) as f64;
            for p in l {
                *packets.entry(&*p.peer.name).or_default() += 2.0 * each;
            }
        }
        let mut per_agent: Vec<f64> = packets.into_values().collect();
        per_agent.sort_by(f64::total_cmp);
        let at = |q: f64| per_agent[((per_agent.len() - 1) as f64 * q).round() as usize];
        println!(
            "| {n} | {} | {:.0} % | {:.1} ms | {} / {:.1} / {} | {:.1} / {:.1} / {:.1} |",
            args.k,
            positioned * 100.0,
            times[times.len() / 2],
            sizes.iter().min().unwrap_or(&0),
            sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64,
            sizes.iter().max().unwrap_or(&0),
            per_agent.iter().sum::<f64>() / per_agent.len() as f64,
            at(0.99),
            at(1.0),
        );
    }
}
