//! The workload stats datagrams the agent receives over UDP (`edge_agent::stats`): `parse` on
//! the whole input, then the input split into datagrams at bytes 0xFF (one second later) and
//! 0xFE (past the staleness limit) fed to a `Table` that allows every container that parses
//! (`{app}.{component}`, and the container a v2 datagram names), reading the rates and service
//! times at each split and at the end through `samples`. Nothing panics, tables stay bounded,
//! rates are finite and >= 0, service times finite and within `0..=MAX_SERVICE_MS`.
#![no_main]

use std::time::{Duration, Instant};

use acoa_shared::wire::{self, MAX_DOWNSTREAM};
use edge_agent::stats::{
    self, Table, MAX_COMPONENTS, MAX_DATAGRAM, MAX_ENTRIES, MAX_SERVICE_MS, OLD_VERSIONS, STALE,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = stats::parse(data) {
        assert!(data.len() <= MAX_DATAGRAM);
        assert!(d.v == stats::VERSION || OLD_VERSIONS.contains(&d.v));
    }

    let datagrams: Vec<(u8, &[u8])> = split(data);
    // (container, app, component)
    let mut desired: Vec<(String, String, String)> = Vec::new();
    for (_, d) in &datagrams {
        if let Ok(d) = stats::parse(d) {
            let (a, c) = (d.app.to_string(), d.component.to_string());
            let names = [Some(format!("{a}.{c}")), d.container.map(|n| n.to_string())];
            for n in names.into_iter().flatten() {
                let x = (n, a.clone(), c.clone());
                if !desired.contains(&x) && desired.len() < MAX_COMPONENTS {
                    desired.push(x);
                }
            }
        }
    }
    let mut table = Table::new();
    table.set_desired(
        desired
            .iter()
            .map(|(n, a, c)| (n.as_str(), a.as_str(), c.as_str())),
    );
    let start = Instant::now();
    let mut now = start;
    for (sep, d) in &datagrams {
        now += match sep {
            0xFE => STALE + Duration::from_secs(1),
            _ => Duration::from_secs(1),
        };
        let _ = table.receive(d, now);
        assert!(table.len() <= MAX_ENTRIES);
        for (n, a, c) in &desired {
            check_rates(&table.rates(n, a, c, now));
            check_service(table.service(n, a, c, now));
        }
    }
    now += Duration::from_millis(500);
    let samples = stats::samples(&desired, &[], &[], &mut table, now);
    for s in &samples {
        check_rates(&s.traffic);
        check_service(s.service);
    }
});

fn check_service(s: Option<wire::ServiceSample>) {
    if let Some(s) = s {
        assert!(
            s.mean_ms.is_finite() && (0.0..=MAX_SERVICE_MS).contains(&s.mean_ms),
            "service time {} ms",
            s.mean_ms
        );
    }
}

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
