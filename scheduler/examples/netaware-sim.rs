//! Paper 003 reproduced as a SIMULATION (not the testbed): p95 of the end-to-end response time
//! under the network-aware scheduler and the network-unaware baseline, then the descheduler
//! after a latency change. Model and workflow: `acoa_scheduler::netaware::sim`.
//!
//! ```text
//! cargo run --release -p acoa-scheduler --features sim --example netaware-sim               # tables
//! cargo run --release -p acoa-scheduler --features sim --example netaware-sim -- --out DIR
//!                                                   # + CSV files and PNG plots (p95.png, desched.png)
//! ```

#![allow(clippy::needless_range_loop)]

use acoa_scheduler::netaware::desched::Config;
use acoa_scheduler::netaware::sim;
use acoa_scheduler::netaware::{place, NetOutcome, Weights};

fn fmt(v: Option<f64>) -> String {
    v.map_or("saturated".to_string(), |v| format!("{v:.1}"))
}

/// A p95, or why there is none: no placement (a scheduler found no room), or a node in use at
/// or over 100 % CPU (the queue grows without bound).
fn cell(p95: Option<f64>, nodes: usize) -> String {
    match (p95, nodes) {
        (Some(v), _) => format!("{v:.1}"),
        (None, 0) => "no placement".into(),
        (None, _) => "saturated".into(),
    }
}

fn calls(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v}")
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut out: Option<std::path::PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => {
                out = Some(
                    args.next()
                        .ok_or_else(|| anyhow::anyhow!("--out needs a directory"))?
                        .into(),
                )
            }
            other => anyhow::bail!("unknown argument {other} (usage: netaware-sim [--out DIR])"),
        }
    }
    let w = Weights::default();
    let samples = 20_000;
    let users = [10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0, 140.0];
    println!("weights: {w:?}; {samples} sampled requests per cell, seed 1\n");
    println!(
        "| latency (ms) | users | baseline p95 (ms) | network-aware p95 (ms) | reduction | nodes (base/net) | remote calls per request (base/net) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let rows = sim::compare(&[10.0, 100.0, 200.0], &users, &w, samples, 1);
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {}/{} | {}/{} |",
            r.latency_ms,
            r.users,
            cell(r.baseline_p95, r.baseline_nodes),
            cell(r.netaware_p95, r.netaware_nodes),
            r.reduction().map_or("-".into(), |v| format!("{v:.0} %")),
            r.baseline_nodes,
            r.netaware_nodes,
            calls(r.baseline_remote_calls),
            calls(r.netaware_remote_calls),
        );
    }

    // Mean reduction per latency, over the loads where both have a figure.
    println!();
    for l in [10.0, 100.0, 200.0] {
        let r: Vec<f64> = rows
            .iter()
            .filter(|r| r.latency_ms == l)
            .filter_map(|r| r.reduction())
            .collect();
        println!(
            "latency {l} ms: p95 reduction mean {:.0} %, min {:.0} %, max {:.0} % over {} loads",
            r.iter().sum::<f64>() / r.len() as f64,
            r.iter().cloned().fold(f64::INFINITY, f64::min),
            r.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            r.len()
        );
    }

    let nodes = sim::paper_nodes();
    let wf = sim::paper_workflow();
    let before = sim::uniform_latency(nodes.len(), 10.0);
    // (label, users, component whose node is hit, ingress link only?, group moves?)
    let scenarios = [
        ("A", 80.0, "m0", true, true),
        ("B", 40.0, "m12", false, true),
        ("B'", 40.0, "m12", false, false),
        ("C", 80.0, "m3", false, true),
    ];
    println!(
        "\ndescheduler: 10 ms everywhere, change at tick 20, latencies measured with ±20 % noise (uniform, each link each tick), {:?}",
        Config::default()
    );
    let mut runs: Vec<(String, Vec<sim::TickRow>)> = Vec::new();
    for (label, users, victim, ingress_only, group_moves) in scenarios {
        let cfg = Config {
            group_moves,
            ..Config::default()
        };
        let s = sim::snapshot(&wf, &nodes, before.clone(), users);
        let Ok(NetOutcome::Placed(a)) = place(&s, &cfg.weights) else {
            panic!("the workflow fits")
        };
        let hit = a[wf.names.iter().position(|n| n == victim).unwrap()];
        let mut after = before.clone();
        for x in 0..nodes.len() {
            if x != hit && (!ingress_only || x == 0) {
                after[hit][x] = 200.0;
                after[x][hit] = 200.0;
            }
        }
        let what = if ingress_only {
            format!(
                "the ingress c0's link to {} ({victim}'s node)",
                nodes[hit].name
            )
        } else {
            format!("every link of {} ({victim}'s node)", nodes[hit].name)
        };
        let on: Vec<&str> = (0..a.len())
            .filter(|&c| a[c] == hit)
            .map(|c| wf.names[c].as_str())
            .collect();
        println!(
            "\n{label}: {users} users; at tick 20 {what} goes from 10 to 200 ms; on {}: {}; group moves {}\n",
            nodes[hit].name,
            on.join(" "),
            if group_moves { "on" } else { "off" }
        );
        println!("| tick | p95 (ms) | remote calls per request | moves |");
        println!("|---|---|---|---|");
        let rows = sim::deschedule_run(before.clone(), after, users, 60, 20, 0.2, cfg, 5000, 1);
        let title = format!(
            "{label}: {users} users, {what} 10 -> 200 ms{}",
            if group_moves { "" } else { ", no group moves" }
        );
        let mut show_next = false;
        for r in &rows {
            let moved = !r.moves.is_empty();
            if r.tick % 10 == 0 || moved || show_next || r.tick == 19 || r.tick == 59 {
                println!(
                    "| {} | {} | {:.0} | {} |",
                    r.tick,
                    fmt(r.p95),
                    r.remote_calls,
                    r.moves.join(", ")
                );
            }
            show_next = moved;
        }
        runs.push((title, rows));
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(&dir)?;
        let mut csv = String::from("latency_ms,users,baseline_p95_ms,netaware_p95_ms,baseline_nodes,netaware_nodes,baseline_remote_calls,netaware_remote_calls\n");
        let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        for r in &rows {
            csv += &format!(
                "{},{},{},{},{},{},{},{}\n",
                r.latency_ms,
                r.users,
                num(r.baseline_p95),
                num(r.netaware_p95),
                r.baseline_nodes,
                r.netaware_nodes,
                calls(r.baseline_remote_calls),
                calls(r.netaware_remote_calls)
            );
        }
        std::fs::write(dir.join("p95.csv"), csv)?;
        let mut csv = String::from("scenario,tick,p95_ms,remote_calls,moves\n");
        for (label, ticks) in &runs {
            for r in ticks {
                csv += &format!(
                    "\"{label}\",{},{},{},{}\n",
                    r.tick,
                    num(r.p95),
                    r.remote_calls,
                    r.moves.join(" / ")
                );
            }
        }
        std::fs::write(dir.join("desched.csv"), csv)?;
        plots::write(&dir, &rows, &runs)?;
        println!("\nwrote {}", dir.display());
    }
    Ok(())
}

mod plots {
    use acoa_scheduler::netaware::sim::{Row, TickRow};
    use plotters::prelude::*;
    use std::path::Path;

    const BASE: RGBColor = RGBColor(200, 60, 40);
    const NET: RGBColor = RGBColor(30, 90, 200);

    pub fn write(dir: &Path, rows: &[Row], runs: &[(String, Vec<TickRow>)]) -> anyhow::Result<()> {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| anyhow::anyhow!("embedded font is invalid"))?;
        p95(&dir.join("p95.png"), rows)?;
        desched(&dir.join("desched.png"), runs)?;
        Ok(())
    }

    fn p95(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
        let root = BitMapBackend::new(path, (1500, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((1, 3));
        for (panel, l) in panels.iter().zip([10.0, 100.0, 200.0]) {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.latency_ms == l).collect();
            let ymax = mine
                .iter()
                .flat_map(|r| [r.baseline_p95, r.netaware_p95])
                .flatten()
                .fold(0.0, f64::max)
                * 1.1;
            let xmax = mine.iter().map(|r| r.users).fold(0.0, f64::max);
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!("p95, {l} ms between nodes (simulation)"),
                    ("sans-serif", 20),
                )
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..xmax, 0.0..ymax.max(1.0))?;
            chart
                .configure_mesh()
                .x_desc("virtual users (1 request/s each)")
                .y_desc("p95 response time (ms)")
                .label_style(("sans-serif", 14))
                .draw()?;
            for (name, colour, pick) in [
                ("baseline (LeastAllocated + Balanced)", BASE, 0),
                ("network-aware", NET, 1),
            ] {
                let pts: Vec<(f64, f64)> = mine
                    .iter()
                    .filter_map(|r| {
                        let v = if pick == 0 {
                            r.baseline_p95
                        } else {
                            r.netaware_p95
                        };
                        v.map(|v| (r.users, v))
                    })
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    });
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .label_font(("sans-serif", 14))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
        Ok(())
    }

    fn desched(path: &Path, runs: &[(String, Vec<TickRow>)]) -> anyhow::Result<()> {
        let root = BitMapBackend::new(path, (1400, 900)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((2, 2));
        for (panel, (label, ticks)) in panels.iter().zip(runs) {
            let ymax = ticks.iter().filter_map(|r| r.p95).fold(0.0, f64::max) * 1.1;
            let xmax = ticks.len() as f64;
            let mut chart = ChartBuilder::on(panel)
                .caption(label.as_str(), ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..xmax, 0.0..ymax.max(1.0))?;
            chart
                .configure_mesh()
                .x_desc("tick (latency change at 20; dots: moves)")
                .y_desc("p95 response time (ms)")
                .label_style(("sans-serif", 14))
                .draw()?;
            let pts: Vec<(f64, f64)> = ticks
                .iter()
                .filter_map(|r| r.p95.map(|v| (r.tick as f64, v)))
                .collect();
            chart.draw_series(LineSeries::new(pts, NET.stroke_width(2)))?;
            chart.draw_series(LineSeries::new(
                vec![(20.0, 0.0), (20.0, ymax)],
                BLACK.mix(0.4).stroke_width(1),
            ))?;
            chart.draw_series(
                ticks
                    .iter()
                    .filter(|r| !r.moves.is_empty())
                    .filter_map(|r| {
                        r.p95
                            .map(|v| Circle::new((r.tick as f64, v), 5, BASE.filled()))
                    }),
            )?;
        }
        root.present()?;
        Ok(())
    }
}
