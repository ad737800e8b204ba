//! `coordbed`: network coordinates on the railway testbed (issue 16; the computation is
//! [`hil_tests::coordbed`]). For each neighbour set size k (`serve --peers-k`), the whole
//! system runs on the emulated railway network: after a warm-up the control plane's fleet
//! document gives the measured links and the agents' coordinates, and every pair nobody
//! probed is estimated as the control plane does and compared with the emulator's truth;
//! then the application is published and its placement (first on estimates, then once the
//! targeted probes measured its links) is scored under the truth against the optimum.
//!
//! ```text
//! sudo target/debug/coordbed --k 4,19 [--warmup-s 150] [--out DIR]
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hil_tests::coordbed::{self, Estimates, Fleet};
use hil_tests::dynamic::placement_of;
use hil_tests::partition::{self, Plane};
use hil_tests::placement::{judge, Evaluation};
use hil_tests::probe::quantile;
use hil_tests::railbed::{Bed, BedArgs, Names};

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "coordbed",
    about = "ACOA testbed: latency estimates of unprobed pairs and placements with small neighbour sets"
)]
struct Args {
    #[command(flatten)]
    bed: BedArgs,
    /// Neighbour set sizes, one run of the system each (19: every pair of the 20 nodes)
    #[arg(long, value_delimiter = ',', default_value = "4,19")]
    k: Vec<usize>,
    /// Seconds the agents probe (and their coordinates settle) before the fleet is read
    #[arg(long, default_value_t = 150)]
    warmup_s: u64,
    /// Seconds to wait for the placement's links to be measured after it was placed
    #[arg(long, default_value_t = 90)]
    settle_s: u64,
    /// Report directory (default hil-tests/results/coordbed-<UTC time>)
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One run of the system with one k.
struct ArmResult {
    k: usize,
    est: Estimates,
    first: Option<Evaluation>,
    /// Estimated channels of the first placement.
    first_estimated: usize,
    last: Option<Evaluation>,
    /// Seconds from the first placement until every channel was measured (or local).
    measured_after_s: Option<f64>,
    moved: bool,
}

const TOKEN: &str = "coordbed-token";

fn main() -> Result<()> {
    hil_tests::init_logging();
    let a = <Args as clap::Parser>::parse();
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "hil-tests/results/coordbed-{}",
            hil_tests::report::utc_stamp_now()
        ))
    });
    let names = a.bed.names(Names {
        prefix: "crd-".into(),
        node_prefix: "cb-".into(),
        image_prefix: "coordbed-".into(),
        subnet: "10.89.0.0/16".into(),
    });
    let app =
        acoa_shared::model::load_application(&a.bed.app).map_err(|e| anyhow::anyhow!("{e}"))?;
    let app_name = app.application.clone();
    hil_tests::agents::guard_signals(&names.prefix, move || {
        partition::remove_app_containers(&app_name)
    })?;
    let bed = Bed::up(&a.bed, names)?;
    let mut app = bed.app.clone();
    for c in &mut app.components {
        c.image = hil_tests::tunnels::retag(&c.image, &bed.names.image_prefix);
    }
    std::fs::create_dir_all(&out)?;
    let mut results = Vec::new();
    for (i, &k) in a.k.iter().enumerate() {
        let r = arm(
            &bed,
            &a,
            &app,
            k,
            18_400 + i as u16,
            &out.join(format!("run/k{k}")),
        )
        .with_context(|| format!("the run with k = {k}"))?;
        results.push(r);
    }
    let md = report(&a, &bed, &results);
    std::fs::write(out.join("report.md"), &md)?;
    println!(
        "{md}\ncoordbed: report in {}",
        out.join("report.md").display()
    );
    Ok(())
}

fn arm(
    bed: &Bed,
    a: &Args,
    app: &acoa_shared::model::Application,
    k: usize,
    port: u16,
    workdir: &std::path::Path,
) -> Result<ArmResult> {
    std::fs::create_dir_all(workdir)?;
    let token = workdir.join("http-token");
    std::fs::write(&token, TOKEN)?;
    let http: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let args: Vec<String> = vec![
        "--peers-k".into(),
        k.to_string(),
        "--http-listen".into(),
        http.to_string(),
        "--http-token-file".into(),
        token.display().to_string(),
    ];
    let plane = Plane::up(
        &bed.tb,
        &bed.cluster,
        &a.bed.cloud_bin,
        &bed.agent,
        workdir,
        &args,
    )?;
    tracing::info!("k = {k}: the system runs; {} s of warm-up", a.warmup_s);
    std::thread::sleep(Duration::from_secs(a.warmup_s));
    // read once: the document kept is the one measured
    let doc: serde_json::Value = coordbed::get_json(http, "/api/fleet", TOKEN)?;
    std::fs::write(
        workdir.join("fleet.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let fleet: Fleet = serde_json::from_value(doc).context("the fleet document")?;
    let est = coordbed::estimates(&fleet, &bed.cluster);
    tracing::info!(
        "k = {k}: {} of {} pairs measured, {} estimated",
        est.measured,
        est.pairs,
        est.errors.len()
    );
    let file = workdir.join("app.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(app)?)?;
    plane.cloud.apply(&file, 60)?;
    let name = &app.application;
    let t0 = Instant::now();
    let mut first: Option<(BTreeMap<String, String>, f64, usize)> = None;
    let mut last: Option<(BTreeMap<String, String>, f64)> = None;
    let mut measured_after_s = None;
    let mut settled_since: Option<Instant> = None;
    while t0.elapsed() < Duration::from_secs(a.settle_s) {
        std::thread::sleep(Duration::from_millis(250));
        let Ok(st) = plane.status(name) else { continue };
        let p = placement_of(&st);
        if p.is_empty() {
            continue;
        }
        let score = st.get("score").and_then(|s| s.as_f64()).unwrap_or(f64::NAN);
        let kinds = coordbed::link_kinds(&st);
        let estimated = kinds.values().filter(|v| v.as_str() == "estimated").count();
        if first.is_none() {
            first = Some((p.clone(), score, estimated));
        }
        let all_measured = estimated == 0;
        if all_measured && measured_after_s.is_none() {
            measured_after_s = Some(t0.elapsed().as_secs_f64());
        }
        if last.as_ref().map(|l| &l.0) != Some(&p) {
            settled_since = None;
        }
        last = Some((p, score));
        if all_measured {
            let s = *settled_since.get_or_insert_with(Instant::now);
            // the re-evaluation after the last targeted probe comes on the next tick
            if s.elapsed() > Duration::from_secs(10) {
                break;
            }
        }
    }
    let judged = |p: &Option<(BTreeMap<String, String>, f64)>| -> Result<Option<Evaluation>> {
        p.as_ref()
            .map(|(asg, score)| judge(&bed.cluster, &bed.app, asg, *score))
            .transpose()
    };
    let first_eval = judged(&first.as_ref().map(|f| (f.0.clone(), f.1)))?;
    let last_eval = judged(&last)?;
    let moved = match (&first, &last) {
        (Some(f), Some(l)) => f.0 != l.0,
        _ => false,
    };
    let _ = plane.cloud.delete(name);
    drop(plane);
    partition::remove_app_containers(name);
    Ok(ArmResult {
        k,
        est,
        first_estimated: first.as_ref().map_or(0, |f| f.2),
        first: first_eval,
        last: last_eval,
        measured_after_s,
        moved,
    })
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

fn report(a: &Args, bed: &Bed, runs: &[ArmResult]) -> String {
    let mut md = format!(
        "# Network coordinates on the railway testbed\n\n\
The whole system on the emulated railway network ({n} nodes, the scenario's link table; the control plane with its embedded broker, one agent per node namespace, probe period {pp} ms). \
Per neighbour set size k (`serve --peers-k k`): {w} s of warm-up, then the fleet document gives the measured links and the reported coordinates; every ordered pair without a measurement of its own is estimated as the control plane does (two nodes of one group: the median of the group's measured internal links; else the coordinates' distance) and compared with the scenario's latency of that direction (\"one-way\") and with the mean of both directions (\"round trip\", what a symmetric estimate can reach). \
Then `{app}` is published; its first placement (made on the estimates) and its placement once the targeted probes measured every channel's link are scored under the true table against the optimum (exhaustive).\n\n",
        n = bed.cluster.nodes.len(),
        pp = a.bed.probe_period_ms,
        w = a.warmup_s,
        app = bed.app.application,
    );
    md += "| k | pairs measured | estimated (in neither direction) | median rel. error one-way / round trip | p90 one-way / round trip | across groups: median / p90 (round trip) | without coordinates (the measured median), across groups: median / p90 (round trip) | no estimate |\n|---|---|---|---|---|---|---|---|\n";
    for r in runs {
        let e = &r.est;
        let one: Vec<f64> = e.errors.iter().map(|x| x.relative()).collect();
        let rt: Vec<f64> = e.errors.iter().map(|x| x.relative_rt()).collect();
        let across: Vec<f64> = e
            .errors
            .iter()
            .filter(|x| !x.in_group)
            .map(|x| x.relative_rt())
            .collect();
        let base: Vec<f64> = e
            .errors
            .iter()
            .filter(|x| !x.in_group && x.baseline_ms.is_finite())
            .map(|x| x.baseline_relative_rt())
            .collect();
        let q = |v: &[f64], p: f64| {
            if v.is_empty() {
                "-".to_string()
            } else {
                pct(quantile(v, p))
            }
        };
        let _ = writeln!(
            md,
            "| {} | {} of {} | {} ({}) | {} / {} | {} / {} | {} / {} ({} pairs) | {} / {} | {} |",
            r.k,
            e.measured,
            e.pairs,
            e.errors.len(),
            e.probed_in_neither,
            q(&one, 0.5),
            q(&rt, 0.5),
            q(&one, 0.9),
            q(&rt, 0.9),
            q(&across, 0.5),
            q(&across, 0.9),
            across.len(),
            q(&base, 0.5),
            q(&base, 0.9),
            e.unknown,
        );
    }
    md += "\n| k | first placement: estimated channels | its score under the truth / optimum (gap) | after the targeted probes: measured after (s) | moved | score / optimum (gap) |\n|---|---|---|---|---|---|\n";
    for r in runs {
        let ev = |e: &Option<Evaluation>| {
            e.as_ref().map_or("-".to_string(), |e| {
                format!(
                    "{:.4} / {:.4} ({})",
                    e.score_true,
                    e.optimum_true,
                    pct(e.gap())
                )
            })
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            r.k,
            r.first_estimated,
            ev(&r.first),
            r.measured_after_s
                .map_or("never".into(), |s| format!("{s:.1}")),
            if r.moved { "yes" } else { "no" },
            ev(&r.last),
        );
    }
    md += "\nFiles: `run/k*/fleet.json` (the fleet document read), `run/k*/cloud.log` and the agents' logs.\n";
    md
}
