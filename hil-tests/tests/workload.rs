//! The workload program in real namespaces through the emulated network: a three-component
//! chain `src -> mid -> dst` on three nodes, with a collector on the host endpoint; the measured
//! path latency is the sum of the emulated one-way delays, and the path loss the product of the
//! links' losses. Needs root and /dev/net/tun, otherwise prints why it skipped.

use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::process::{Child, Stdio};
use std::time::Duration;

use hil_tests::emu::{unavailable_reason, Testbed, HOST};
use hil_tests::workload::{self, Collector, COLLECTOR_PORT};
use hil_tests::LinkSpec;

struct KillOnDrop(Vec<Child>);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

const APP: &str = r#"
application: chain
components:
- {name: src, image: 'localhost/acoa/chain-src:1'}
- {name: mid, image: 'localhost/acoa/chain-mid:1'}
- {name: dst, image: 'localhost/acoa/chain-dst:1'}
channels:
- {name: s-m, from: src, to: mid}
- {name: m-d, from: mid, to: dst}
paths:
- {name: p, channels: [s-m, m-d]}
criteria:
- {type: min-e2e-response-time, path: p, weight: 1.0}
"#;

#[test]
fn workload_measures_path_latency_and_loss_through_the_emulator() {
    if let Some(why) = unavailable_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    let app = acoa_shared::model::parse_application(APP).unwrap();
    let tb = Testbed::builder()
        .host(true)
        .subnet("10.81.0.0/16".parse().unwrap())
        .up(&["w1", "w2", "w3"], &[])
        .unwrap();
    tb.set_link("w1", "w2", LinkSpec::new(12.0, 0.0, 0.1))
        .unwrap();
    tb.set_link("w2", "w3", LinkSpec::new(7.0, 0.0, 0.0))
        .unwrap();
    let host = tb.addr(HOST).unwrap();
    let collector = Collector::start(
        std::net::UdpSocket::bind(SocketAddrV4::new(host, COLLECTOR_PORT)).unwrap(),
    )
    .unwrap();
    let placement: BTreeMap<String, String> = [("src", "w1"), ("mid", "w2"), ("dst", "w3")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let confs = workload::app_confs(&app, &placement, |n| tb.addr(n).ok(), 100.0);
    collector.set_app("chain", confs);
    let control = SocketAddr::V4(SocketAddrV4::new(host, COLLECTOR_PORT));
    let mut procs = KillOnDrop(Vec::new());
    for (comp, node) in [("dst", "w3"), ("mid", "w2"), ("src", "w1")] {
        // SCHED_FIFO, as the emulator: the test measures the emulated network, not how long a
        // normal process waits for a CPU on a busy 2-core machine
        let child = tb
            .command(node, "chrt")
            .args(["-f", "10", env!("CARGO_BIN_EXE_acoa-workload")])
            .env("ACOA_APP", "chain")
            .env("ACOA_COMPONENT", comp)
            .env("ACOA_CONTROL", control.to_string())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        procs.0.push(child);
    }
    std::thread::sleep(Duration::from_millis(1000));
    // This machine is a VM whose vCPUs stall now and then: the path passes when one of three
    // 6-second windows meets the bounds (every failed window is printed).
    let mut failures = Vec::new();
    for _ in 0..3 {
        let from = workload::now_ns();
        std::thread::sleep(Duration::from_secs(6));
        let to = workload::now_ns() - 500_000_000;
        std::thread::sleep(Duration::from_millis(300));
        let stats = collector
            .records()
            .path_stats(&app, &app.paths[0], from, to);
        println!(
            "path p: sent {} received {} success {:.3} (expected 0.9), latency median {:.3} mean {:.3} ms (expected 19 + overhead)",
            stats.sent,
            stats.received,
            stats.success(),
            stats.median_ms(),
            stats.mean_ms()
        );
        let failed = if stats.sent < 400 {
            format!("sent {}", stats.sent)
        } else if (stats.success() - 0.9).abs() >= 0.05 {
            format!("success {}", stats.success())
        // what three user-space hops add: about 0.5 ms on an idle machine, 1.9 ms seen in a CI
        // run on a busy one; a lost or doubled link delay (7, 12 or 38 ms more) stays far out
        } else if !(stats.median_ms() > 19.0 && stats.median_ms() < 19.0 + 2.5) {
            format!("median {}", stats.median_ms())
        } else {
            return;
        };
        println!("window failed: {failed}");
        failures.push(failed);
    }
    panic!("three windows failed: {}", failures.join("; "));
}
