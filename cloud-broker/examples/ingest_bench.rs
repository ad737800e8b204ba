//! What an ingest task spends per message of node telemetry (`ingest::classify`: topic, key,
//! signature, decoding), one by one and in batches (`ingest::classify_all`: the signatures of
//! what waits in the task's queue checked together), side by side in one run (not a test: it
//! prints figures).
//!
//! ```text
//! cargo build --release -p cloud-broker --example ingest_bench
//! target/release/examples/ingest_bench
//! ```
//!
//! The messages: link metrics of 32 samples each (what a node of the 50,000-node load test
//! sends every 10 s, about 1 KiB), each from another node with its own key.

use std::time::Instant;

use acoa_shared::wire::{self, LinkSample, Message};
use clap::Parser;
use cloud_broker::ingest::{classify, classify_all, Keys};
use cloud_broker::testkit::engine::link_metrics;
use ed25519_dalek::SigningKey;

#[derive(Parser)]
struct Args {
    /// Messages per round (each from its own node).
    #[arg(long, default_value_t = 4096)]
    messages: usize,
    /// Batch sizes compared with one by one.
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64")]
    batches: Vec<usize>,
    /// Rounds (the median is printed).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = Args::parse();
    let cp = SigningKey::from_bytes(&[255; 32]).verifying_key();
    let mut keys = Keys::new();
    let frames: Vec<(String, Vec<u8>)> = (0..a.messages)
        .map(|i| {
            let node = format!("e{i:05}");
            let mut seed = [7u8; 32];
            seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let key = SigningKey::from_bytes(&seed);
            keys.insert(node.clone(), Some(key.verifying_key()));
            let samples = (0..32).map(|p| LinkSample {
                peer: wire::name(&format!("e{:05}", (i + p + 1) % a.messages)).unwrap(),
                latency_ms: 5.0 + p as f32,
                jitter_ms: 0.2,
                success: 1.0,
                samples: 20,
                last_answer_ms: 100,
            });
            let m = Message::LinkMetrics(Box::new(link_metrics(&node, samples)));
            let topic = format!("acoa/v1/nodes/{node}/links");
            (topic, wire::encode(&m, Some(&key)).unwrap())
        })
        .collect();
    let items: Vec<(&str, &[u8])> = frames
        .iter()
        .map(|(t, p)| (t.as_str(), p.as_slice()))
        .collect();
    let bytes = frames.iter().map(|f| f.1.len()).sum::<usize>() / frames.len();
    let per_message = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / items.len() as f64;
    let mut one = vec![];
    let mut batched = vec![vec![]; a.batches.len()];
    for _ in 0..a.rounds {
        let t = Instant::now();
        for (topic, payload) in &items {
            assert!(classify(topic, payload, &keys, &cp).is_ok());
        }
        one.push(per_message(t));
        for (b, times) in a.batches.iter().zip(&mut batched) {
            let t = Instant::now();
            for chunk in items.chunks(*b) {
                assert!(classify_all(chunk, &keys, &cp).iter().all(Result::is_ok));
            }
            times.push(per_message(t));
        }
    }
    println!(
        "{} link metrics of {bytes} bytes, median of {} rounds",
        items.len(),
        a.rounds
    );
    println!("| classified | µs per message | messages per core-second |");
    println!("|---|---|---|");
    let row = |what: String, us: f64| println!("| {what} | {us:.1} | {:.0} |", 1e6 / us);
    row("one by one (`classify`)".into(), median(one));
    for (b, times) in a.batches.iter().zip(batched) {
        row(format!("in batches of {b} (`classify_all`)"), median(times));
    }
}
