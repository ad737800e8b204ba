//! CI-sized experiment 1 on the railway scenario: five nodes across the five datacenters (cloud1,
//! cloud2, train1, train2, station), their table links emulated, every directed pair measured
//! with the reference prober. Fails when a measured latency is off by more than the fidelity
//! goal (5 % or 0.1 ms), or a success rate by more than 4.5 binomial standard deviations.
//! Writes the report under target dir's `hil-results/`. Needs root and /dev/net/tun.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use hil_tests::emu::Testbed;
use hil_tests::{fidelity, report};

#[test]
fn railway_five_nodes_measured_as_emulated() {
    if skip() {
        return;
    }
    let cl = railway_cluster();
    let names: Vec<String> = ["n01", "n07", "n12", "n16", "n20"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let tb = Testbed::builder()
        .subnet("10.82.0.0/16".parse().unwrap())
        .up_numbered(&numbered(&cl, &names), &cl.links)
        .unwrap();
    // This machine is a VM whose vCPUs stall now and then (a CI run once measured every pair
    // 0.3 ms late, one 1 ms link by 0.103 ms): the pairs are measured again, calibration
    // included, up to three times until one measurement meets the goal on every pair (each
    // failed attempt is printed; the report and the asserts are the last attempt's).
    let mut attempt = 0;
    let (comp, rows) = loop {
        attempt += 1;
        let comp = tb.calibrate("n01", "n07").unwrap();
        tb.set_compensation(comp);
        let rows =
            fidelity::reference(&tb, &names, &cl.links, 300, Duration::from_millis(20)).unwrap();
        let off: Vec<String> = rows
            .iter()
            .filter(|r| !r.latency_ok())
            .map(|r| {
                format!(
                    "{} -> {} {:+.3} ms",
                    r.from,
                    r.to,
                    r.measured_latency_ms - r.expected_latency_ms
                )
            })
            .collect();
        if off.is_empty() || attempt == 3 {
            break (comp, rows);
        }
        println!(
            "attempt {attempt}: latency off the goal on {}",
            off.join(", ")
        );
    };
    let emu = tb.stats();
    drop(tb);
    let summary = fidelity::summarize(&rows);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hil-results/railway-5");
    let md = report::fidelity_report(
        &dir,
        "Experiment 1 (CI size): 5 railway nodes, reference prober",
        &format!(
            "300 probes per pair every 20 ms; compensation {:.0} µs; emulator lateness p99 {:.0} µs",
            comp.as_secs_f64() * 1e6,
            emu.lateness_us.p99
        ),
        &rows,
        &summary,
    )
    .unwrap();
    println!("{md}\nreport: {}", dir.join("report.md").display());
    assert_eq!(rows.len(), 20);
    for r in &rows {
        assert!(
            r.latency_ok(),
            "{} -> {}: measured {:.3} ms, emulated {:.3} ms (tolerance {:.3})",
            r.from,
            r.to,
            r.measured_latency_ms,
            r.expected_latency_ms,
            r.tolerance_ms()
        );
        let p = r.expected_success;
        let sigma = (p * (1.0 - p) / 300.0).sqrt().max(0.005);
        assert!(
            r.success_error().abs() <= 4.5 * sigma,
            "{} -> {}: success {:.3}, emulated {:.3}",
            r.from,
            r.to,
            r.measured_success,
            p
        );
    }
}
