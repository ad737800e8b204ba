//! CI-sized experiment 2 on the whole railway testbed (20 namespaces): the link table measured
//! with the reference prober, the smoke-monitoring placement made from it must score within 1 %
//! of the optimum under the true table, and, run with the workload program, its alarm path must
//! be several times faster than the mean of random feasible placements. Needs root and
//! /dev/net/tun.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use hil_tests::emu::Testbed;
use hil_tests::{fidelity, placement, report};
use rand::SeedableRng;

#[test]
fn railway_smoke_monitoring_placed_from_measurements_and_run() {
    if skip() {
        return;
    }
    let cl = railway_cluster();
    let app = acoa_shared::model::load_application(&railway("smoke-monitoring.yaml")).unwrap();
    let names: Vec<String> = cl.nodes.iter().map(|n| n.name.clone()).collect();
    let tb = Testbed::builder()
        .subnet("10.83.0.0/16".parse().unwrap())
        .host(true)
        .up_numbered(&numbered(&cl, &names), &cl.links)
        .unwrap();
    let comp = tb.calibrate("n01", "n02").unwrap();
    tb.set_compensation(comp);
    let rows = fidelity::reference(&tb, &names, &cl.links, 60, Duration::from_millis(50)).unwrap();
    let measured = placement::measured_cluster(&cl, &rows);
    let ev = placement::evaluate(&cl, &measured, &app).unwrap();
    println!(
        "smoke-monitoring: {:?}\nscore under the true table {:.4}, optimum {:.4}, gap {:.2} %",
        ev.assignment,
        ev.score_true,
        ev.optimum_true,
        100.0 * ev.gap()
    );
    assert!(
        ev.gap() < 0.01,
        "placement from measurements {:.2} % below the optimum",
        100.0 * ev.gap()
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut placements = vec![("acoa".to_string(), ev.assignment.clone())];
    for k in 0..4 {
        placements.push((
            format!("random-{k}"),
            placement::random_feasible(&cl, &app, &mut rng).unwrap(),
        ));
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hil-results/railway-placement");
    let runs = placement::run_placements(
        &tb,
        &app,
        &placements,
        std::path::Path::new(env!("CARGO_BIN_EXE_acoa-workload")),
        20.0,
        5.0,
        &dir.join("logs"),
    )
    .unwrap();
    drop(tb);
    let md = report::placement_section(&dir, &app, &ev, &runs).unwrap();
    println!("{md}");
    let alarm =
        |label: &str| runs.iter().find(|r| r.label == label).unwrap().paths["alarm"].clone();
    let acoa = alarm("acoa");
    let random: Vec<f64> = runs
        .iter()
        .filter(|r| r.label != "acoa")
        .map(|r| r.paths["alarm"].median_ms())
        .collect();
    let random_mean = hil_tests::probe::mean(&random);
    assert!(acoa.sent >= 80, "acoa sent {}", acoa.sent);
    assert!(
        acoa.success() > 0.85,
        "acoa alarm path success {}",
        acoa.success()
    );
    assert!(
        acoa.median_ms() * 3.0 < random_mean,
        "alarm path: acoa {:.3} ms, random mean {:.3} ms",
        acoa.median_ms(),
        random_mean
    );
}
