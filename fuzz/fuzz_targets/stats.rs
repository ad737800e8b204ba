//! The workload stats datagrams the agent receives over UDP (`edge_agent::stats`): `parse` on
//! the whole input, then the input split into datagrams at bytes 0xFF (one second later) and
//! 0xFE (past the staleness limit) fed to a `Table` that allows every app/component pair that
//! parses, reading the rates at each split and at the end through `samples`. Nothing panics,
//! tables stay bounded, rates are finite and >= 0.
#![no_main]

use std::time::{Duration, Instant};

use acoa_shared::wire::{self, MAX_DOWNSTREAM};
use edge_agent::stats::{self, Table, MAX_COMPONENTS, MAX_DATAGRAM, STALE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = stats::parse(data) {
        assert!(data.len() <= MAX_DATAGRAM);
        assert_eq!(d.v, stats::VERSION);
    }

    let datagrams: Vec<(u8, &[u8])> = split(data);
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (_, d) in &datagrams {
        if let Ok(d) = stats::parse(d) {
            let p = (d.app.to_string(), d.component.to_string());
            if !pairs.contains(&p) && pairs.len() < MAX_COMPONENTS {
                pairs.push(p);
            }
        }
    }
    let mut table = Table::new();
    table.set_desired(pairs.iter().map(|(a, c)| (a.as_str(), c.as_str())));
    let start = Instant::now();
    let mut now = start;
    for (sep, d) in &datagrams {
        now += match sep {
            0xFE => STALE + Duration::from_secs(1),
            _ => Duration::from_secs(1),
        };
        let _ = table.receive(d, now);
        assert!(table.len() <= MAX_COMPONENTS);
        for (a, c) in &pairs {
            check_rates(&table.rates(a, c, now));
        }
    }
    let desired: Vec<(String, String, String)> = pairs
        .iter()
        .map(|(a, c)| (format!("{a}.{c}"), a.clone(), c.clone()))
        .collect();
    now += Duration::from_millis(500);
    let samples = stats::samples(&desired, &[], &[], &mut table, now);
    for s in &samples {
        check_rates(&s.traffic);
    }
});

/// The datagrams of `data`, each with the separator before it (0 for the first).
fn split(data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut sep = 0u8;
    let mut start = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == 0xFF || *b == 0xFE {
            out.push((sep, &data[start..i]));
            sep = *b;
            start = i + 1;
        }
    }
    out.push((sep, &data[start..]));
    out
}

fn check_rates(traffic: &[wire::TrafficSample]) {
    assert!(traffic.len() <= MAX_DOWNSTREAM);
    for t in traffic {
        assert!(
            t.bytes_per_s.is_finite() && t.bytes_per_s >= 0.0,
            "rate {} bytes/s to {}",
            t.bytes_per_s,
            t.to
        );
        assert!(
            t.messages_per_s.is_finite() && t.messages_per_s >= 0.0,
            "rate {} messages/s to {}",
            t.messages_per_s,
            t.to
        );
    }
}
