//! Reproduction of paper 002 (combined-weight TOPSIS) as a simulation: writes a Markdown report,
//! a CSV of the imbalance series and PNG plots.
//!
//! `cargo run --release -p acoa-scheduler --bin topsis-sim --features sim -- --out results/topsis`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use acoa_scheduler::topsis::sim::{self, Algorithm, Run, Spread};
use acoa_scheduler::topsis::{Combination, Metric, Weights, DEFAULT_BALANCE, METRICS};
use anyhow::{Context, Result};
use clap::Parser;
use plotters::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "Simulate paper 002's experiment: TOPSIS against Kubernetes' LeastRequested and BalancedResourceAllocation"
)]
struct Args {
    /// Output directory (report.md, imbalance.csv, *.png).
    #[arg(long, default_value = "results/topsis")]
    out: PathBuf,
    /// Pods offered, placed one by one until one fits nowhere.
    #[arg(long, default_value_t = 7200)]
    pods: usize,
    /// Seed of the run that is plotted.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of seeds (seed, seed+1, ...) over which the headline figures are summarised.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Share of the imbalance criterion in the main TOPSIS run.
    #[arg(long, default_value_t = DEFAULT_BALANCE)]
    balance: f64,
}

/// The schedulers compared: the three of the paper, then ablations of ours.
fn algorithms(kinds: &[sim::PodKind], balance: f64) -> Result<Vec<Algorithm>> {
    Ok(vec![
        Algorithm::topsis("TOPSIS", kinds, |w| w.with_balance(balance))?,
        Algorithm::LeastAllocated,
        Algorithm::BalancedAllocation,
        Algorithm::topsis(
            "TOPSIS, five metrics only (no imbalance criterion)",
            kinds,
            |w| w.with_balance(0.0),
        )?,
        Algorithm::topsis("TOPSIS, linear combination a=0.5", kinds, |w| {
            w.with_combination(Combination::Linear {
                subjective_share: 0.5,
            })
        })?,
        Algorithm::Topsis {
            label: "TOPSIS, equal subjective weights (no AHP)".into(),
            weights: vec![Weights::equal(); kinds.len()],
        },
        Algorithm::topsis("TOPSIS, AHP only (no entropy)", kinds, |w| {
            w.with_combination(Combination::Linear {
                subjective_share: 1.0,
            })
        })?,
    ])
}

const MAIN: usize = 3;

struct SeedResult {
    runs: Vec<Run>,
}

fn final_imbalance(r: &Run) -> f64 {
    r.imbalance.last().copied().unwrap_or(0.0)
}

fn at(r: &Run, pods: usize) -> f64 {
    r.imbalance[pods.min(r.placed).max(1) - 1]
}

fn pct_below(ours: f64, base: f64) -> f64 {
    (base - ours) / base * 100.0
}

struct Scenario {
    name: &'static str,
    about: &'static str,
    node_kinds: Vec<sim::NodeKind>,
    pod_kinds: Vec<sim::PodKind>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow::anyhow!("embedded font is invalid"))?;

    let pod_kinds = sim::paper_pod_kinds();
    let scenarios = [
        Scenario {
            name: "shaped",
            about: "three node kinds of different shapes (the main setup)",
            node_kinds: sim::paper_node_kinds(),
            pod_kinds: pod_kinds.clone(),
        },
        Scenario {
            name: "proportional",
            about: "control: three node kinds of one shape at 0.5x, 1x and 1.5x size",
            node_kinds: sim::proportional_node_kinds(),
            pod_kinds: pod_kinds.clone(),
        },
        Scenario {
            name: "cpu-memory-bound",
            about: "shaped nodes, pods' bandwidth, disk and I/O demands halved (7,200 pods ask 90 % of CPU and memory but 45 % of the rest)",
            node_kinds: sim::paper_node_kinds(),
            pod_kinds: sim::scale_pods(&pod_kinds, [1.0, 1.0, 0.5, 0.5, 0.5]),
        },
    ];

    let mut report = header(&args, &pod_kinds);
    for sc in &scenarios {
        let algs = algorithms(&sc.pod_kinds, args.balance)?;
        let pod_kinds = &sc.pod_kinds;
        let (nodes, _) = sim::build_nodes(&sc.node_kinds);
        let mut results = Vec::new();
        for seed in args.seed..args.seed + args.seeds.max(1) {
            let pods = sim::pod_stream(pod_kinds, args.pods, seed);
            let runs = algs
                .iter()
                .map(|a| sim::run(a, &nodes, &pods, seed))
                .collect();
            results.push(SeedResult { runs });
        }
        let first = &results[0];
        let file = |what: &str| args.out.join(format!("{}-{what}", sc.name));
        write_csv(&file("imbalance.csv"), &first.runs)?;
        plot_imbalance(&file("imbalance.png"), &first.runs[..MAIN], args.pods)?;
        plot_utilisation(&file("utilisation.png"), &first.runs[..MAIN])?;
        plot_imbalance(&file("ablation.png"), &first.runs, args.pods)?;
        scenario_report(&mut report, &args, sc, &results);
    }
    std::fs::write(args.out.join("report.md"), &report)?;
    print!("{report}");
    Ok(())
}

fn write_csv(path: &Path, runs: &[Run]) -> Result<()> {
    let mut s = String::from("pods");
    for r in runs {
        write!(s, ",{}", r.label.replace(',', ";"))?;
    }
    s.push('\n');
    let n = runs.iter().map(|r| r.placed).max().unwrap_or(0);
    for k in 0..n {
        write!(s, "{}", k + 1)?;
        for r in runs {
            match r.imbalance.get(k) {
                Some(x) => write!(s, ",{x:.6}")?,
                None => s.push(','),
            }
        }
        s.push('\n');
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

const COLOURS: [RGBColor; 7] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

fn plot_imbalance(path: &Path, runs: &[Run], pods: usize) -> Result<()> {
    let root = BitMapBackend::new(path, (1000, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = runs
        .iter()
        .flat_map(|r| r.imbalance.iter().copied())
        .fold(0.0, f64::max)
        * 100.0
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Mean node imbalance (std of 5 utilisations) as pods are placed",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0..pods, 0.0..ymax.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("pods placed")
        .y_desc("mean imbalance (percentage points)")
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let step = (r.placed / 400).max(1);
        let points = r
            .imbalance
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == r.placed)
            .map(|(k, x)| (k + 1, x * 100.0));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(format!("{} (stops at {})", r.label, r.placed))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One panel per metric: every node's final utilisation, sorted, one line per scheduler.
fn plot_utilisation(path: &Path, runs: &[Run]) -> Result<()> {
    let root = BitMapBackend::new(path, (1500, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.titled(
        "Final utilisation of each node per resource, nodes sorted (100 % = capacity)",
        ("sans-serif", 22),
    )?;
    let panels = body.split_evenly((2, 3));
    let ymax = runs
        .iter()
        .flat_map(|r| r.nodes.iter().flat_map(|n| n.utilisation()))
        .fold(1.0, f64::max)
        * 100.0
        * 1.05;
    for (j, metric) in Metric::ALL.iter().enumerate() {
        let n = runs[0].nodes.len();
        let mut chart = ChartBuilder::on(&panels[j])
            .caption(metric.name(), ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(0..n, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("node (sorted)")
            .y_desc("%")
            .label_style(("sans-serif", 13))
            .draw()?;
        chart.draw_series(LineSeries::new(
            vec![(0, 100.0), (n, 100.0)],
            BLACK.stroke_width(1),
        ))?;
        for (i, r) in runs.iter().enumerate() {
            let mut u: Vec<f64> = r.nodes.iter().map(|x| x.utilisation()[j] * 100.0).collect();
            u.sort_by(f64::total_cmp);
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    u.into_iter().enumerate(),
                    colour.stroke_width(2),
                ))?
                .label(r.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        if j == 0 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 13))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, v.sqrt())
}

fn range(xs: &[f64]) -> (f64, f64) {
    (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

fn header(args: &Args, pod_kinds: &[sim::PodKind]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Paper 002 reproduction: combined-weight TOPSIS against Kubernetes' scores\n"
    );
    let _ = writeln!(
        s,
        "Command: `cargo run --release -p acoa-scheduler --bin topsis-sim --features sim -- --out {} --pods {} --seed {} --seeds {} --balance {}`\n",
        args.out.display(),
        args.pods,
        args.seed,
        args.seeds,
        args.balance
    );
    let _ = writeln!(
        s,
        "Units: CPU millicores, memory MiB, bandwidth Mbit/s, disk GiB, I/O MB/s.\n"
    );
    let _ = writeln!(s, "| pod kind | mean CPU | mean memory | mean bandwidth | mean disk | mean I/O | AHP subjective weights (CR) |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for k in pod_kinds {
        let d = k.demand;
        let a = acoa_scheduler::topsis::ahp::ahp(&k.ahp_matrix).expect("consistent");
        let w: Vec<String> = a.weights.iter().map(|x| format!("{x:.3}")).collect();
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | ({}) (CR {:.3}) |",
            k.name,
            d[0],
            d[1],
            d[2],
            d[3],
            d[4],
            w.join(", "),
            a.cr
        );
    }
    let _ = writeln!(
        s,
        "\nPods: kind uniform over the six, each demand x U(0.7, 1.3); placed one by one until one fits nowhere \
         (saturation) or {} are placed. TOPSIS filters on all five resources; the Kubernetes baselines filter on CPU, \
         memory and disk (ephemeral storage) and score CPU and memory only (framework scores, MaxNodeScore 100, random \
         tie-break like `selectHost`). TOPSIS: AHP weights per pod kind, entropy weights over the candidates' current \
         utilisations, multiplicative combination, imbalance-change criterion share {}. Utilisation = requested / capacity.\n",
        args.pods, args.balance
    );
    s
}

fn scenario_report(s: &mut String, args: &Args, sc: &Scenario, results: &[SeedResult]) {
    let first = &results[0];
    let _ = writeln!(s, "## Scenario `{}`: {}\n", sc.name, sc.about);
    let _ = writeln!(
        s,
        "| node kind | count | CPU | memory | bandwidth | disk | I/O |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for k in &sc.node_kinds {
        let c = k.capacity;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            k.name, k.count, c[0], c[1], c[2], c[3], c[4]
        );
    }

    let _ = writeln!(
        s,
        "\n### Seed {} (plotted: `{n}-imbalance.png`, `{n}-utilisation.png`, `{n}-ablation.png`)\n",
        args.seed,
        n = sc.name
    );
    let common = first.runs[..MAIN]
        .iter()
        .map(|r| r.placed)
        .min()
        .unwrap_or(0);
    let _ = writeln!(s, "| scheduler | pods placed | saturated | mean imbalance at end | at {common} pods | load spread between nodes at end | nodes over 100 % bandwidth (at or over) | nodes over 100 % I/O (at or over) | nodes over 100 % in any resource |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for r in &first.runs {
        let sp = sim::spread(&r.nodes);
        let over_any = r
            .nodes
            .iter()
            .filter(|n| n.utilisation().iter().any(|&u| u > 1.0 + 1e-9))
            .count();
        let bw = sp[Metric::Bandwidth as usize];
        let io = sp[Metric::Io as usize];
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} % | {:.2} % | {:.2} % | {:.1} % ({:.1} %) | {:.1} % ({:.1} %) | {} of {} |",
            r.label,
            r.placed,
            if r.saturated { "yes" } else { "no" },
            final_imbalance(r) * 100.0,
            at(r, common) * 100.0,
            r.load_spread.last().copied().unwrap_or(0.0) * 100.0,
            bw.over * 100.0,
            bw.saturated * 100.0,
            io.over * 100.0,
            io.saturated * 100.0,
            over_any,
            r.nodes.len()
        );
    }
    let _ = writeln!(s, "\nUtilisation spread per resource at the end (percent of capacity: min / p25 / median / p75 / max, sd over nodes):\n");
    let _ = writeln!(
        s,
        "| scheduler | {} |",
        Metric::ALL.map(|m| m.name()).join(" | ")
    );
    let _ = writeln!(s, "|---|{}", "---|".repeat(METRICS));
    for r in &first.runs[..MAIN] {
        let sp = sim::spread(&r.nodes);
        let cells: Vec<String> = sp.iter().map(cell).collect();
        let _ = writeln!(s, "| {} | {} |", r.label, cells.join(" | "));
    }

    let _ = writeln!(
        s,
        "\n### Over {} seeds ({}..={})\n",
        results.len(),
        args.seed,
        args.seed + results.len() as u64 - 1
    );
    let _ = writeln!(s, "| scheduler | pods placed (min–max) | imbalance at end, mean ± sd | TOPSIS below it at end, mean (min…max) | TOPSIS below it at common pod count | load spread between nodes at end | TOPSIS below it | nodes over 100 % bandwidth | nodes over 100 % I/O |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for a in 0..first.runs.len() {
        let placed: Vec<f64> = results.iter().map(|r| r.runs[a].placed as f64).collect();
        let end: Vec<f64> = results
            .iter()
            .map(|r| final_imbalance(&r.runs[a]) * 100.0)
            .collect();
        let below_end: Vec<f64> = results
            .iter()
            .map(|r| pct_below(final_imbalance(&r.runs[0]), final_imbalance(&r.runs[a])))
            .collect();
        let below_common: Vec<f64> = results
            .iter()
            .map(|r| {
                let c = r.runs[0].placed.min(r.runs[a].placed);
                pct_below(at(&r.runs[0], c), at(&r.runs[a], c))
            })
            .collect();
        let bw: Vec<f64> = results
            .iter()
            .map(|r| sim::spread(&r.runs[a].nodes)[Metric::Bandwidth as usize].over * 100.0)
            .collect();
        let io: Vec<f64> = results
            .iter()
            .map(|r| sim::spread(&r.runs[a].nodes)[Metric::Io as usize].over * 100.0)
            .collect();
        let spread_end: Vec<f64> = results
            .iter()
            .map(|r| r.runs[a].load_spread.last().copied().unwrap_or(0.0) * 100.0)
            .collect();
        let spread_below: Vec<f64> = results
            .iter()
            .map(|r| {
                let last = |x: &Run| x.load_spread.last().copied().unwrap_or(0.0);
                pct_below(last(&r.runs[0]), last(&r.runs[a]))
            })
            .collect();
        let (sm, _) = mean_sd(&spread_end);
        let (sbm, _) = mean_sd(&spread_below);
        let spread_below = if a == 0 {
            "–".to_string()
        } else {
            format!("{sbm:.1} %")
        };
        let (pmin, pmax) = range(&placed);
        let (em, esd) = mean_sd(&end);
        let (bm, _) = mean_sd(&below_end);
        let (bmin, bmax) = range(&below_end);
        let (cm, _) = mean_sd(&below_common);
        let (cmin, cmax) = range(&below_common);
        let (bwm, _) = mean_sd(&bw);
        let (iom, _) = mean_sd(&io);
        let (below_end, below_common) = if a == 0 {
            ("–".to_string(), "–".to_string())
        } else {
            (
                format!("{bm:.1} % ({bmin:.1}…{bmax:.1})"),
                format!("{cm:.1} % ({cmin:.1}…{cmax:.1})"),
            )
        };
        let _ = writeln!(
            s,
            "| {} | {:.0}–{:.0} | {:.2} ± {:.2} % | {} | {} | {:.2} % | {} | {:.1} % | {:.1} % |",
            first.runs[a].label,
            pmin,
            pmax,
            em,
            esd,
            below_end,
            below_common,
            sm,
            spread_below,
            bwm,
            iom
        );
    }
    let _ = writeln!(
        s,
        "\n\"TOPSIS below it\" is (that row − TOPSIS) / that row, of the mean imbalance; rows after the first three \
         are ablations of ours (a negative value means the ablation is better than the TOPSIS row). \
         Series: `{}-imbalance.csv`.\n",
        sc.name
    );
}

fn cell(sp: &Spread) -> String {
    format!(
        "{:.0} / {:.0} / {:.0} / {:.0} / {:.0} (sd {:.1})",
        sp.min * 100.0,
        sp.p25 * 100.0,
        sp.median * 100.0,
        sp.p75 * 100.0,
        sp.max * 100.0,
        sp.std * 100.0
    )
}
