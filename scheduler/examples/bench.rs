//! Placement benchmark (not a test): `cargo run --release -p acoa-scheduler --features sim --example bench`
//!
//! Prints: the two railway applications (branch and bound vs exhaustive enumeration), and
//! a synthetic sweep of 100 / 1,000 / 10,000 nodes x applications of 5 / 10 / 20
//! components (see `acoa_scheduler::synth` for how they are generated). Where
//! enumeration is out of reach, its time is estimated as (product of the candidate
//! counts) x (measured CPU cost per deployment on a truncated space), labelled `est.`,
//! and the speed-up divides it by the search's CPU time. The machine may be shared, so
//! the synthetic rows give the thread's CPU time next to the wall-clock time.
//!
//! Options: `--budget-ms N` (time budget of each synthetic search, default 10000),
//! `--sizes 100,1000` (cluster sizes to run), `--estimates` (instead: each size placed on
//! the measured links only and on the same links plus estimates of every other pair, issue 16;
//! sizes default 1000,5000,10000).

use acoa_scheduler::criteria::Objective;
use acoa_scheduler::problem::{Model, Space};
use acoa_scheduler::{enumerate, filter, place_on, synth, Infra, Ledger, Options, Outcome};
use acoa_shared::model::{load_application, load_cluster, Application};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "common/args.rs"]
mod args;
use args::arg;

fn main() {
    let budget_ms: u64 = arg("--budget-ms").map_or(10_000, |v| v.parse().expect("--budget-ms"));
    if std::env::args().any(|a| a == "--estimates") {
        let sizes = args::sizes(&[1_000, 5_000, 10_000]);
        estimates_sweep(&sizes, Duration::from_millis(budget_ms));
        return;
    }
    let sizes = args::sizes(&[100, 1_000, 10_000]);
    railway();
    sweep(&sizes, Duration::from_millis(budget_ms));
}

/// CPU time of this thread (the machine may be shared: wall-clock then overstates).
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    (median(times), last.expect("runs > 0"))
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn railway() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/railway");
    let cluster = load_cluster(&dir.join("cluster.yaml")).expect("railway cluster");
    println!("## Railway scenario (median of 200 runs; Infra prepared once)\n");
    println!("| application | feasible deployments | score | B&B time (us) | B&B CPU time, mean (us) | B&B nodes explored | B&B incl. building Infra from the Cluster (us) | enumeration time (us) | speed-up |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for file in ["smoke-monitoring.yaml", "speed-profiling.yaml"] {
        let app = load_application(&dir.join(file)).expect("railway app");
        let infra = Infra::from_cluster(&cluster);
        let ledger = Ledger::new();
        let c0 = cpu_now();
        let (t_bb, r) = time(200, || {
            place_on(&infra, &app, &ledger, &Options::default()).expect("place")
        });
        let cpu_bb = (cpu_now() - c0) / 200;
        let (t_full, _) = time(200, || {
            let infra = Infra::from_cluster(&cluster);
            place_on(&infra, &app, &ledger, &Options::default()).expect("place")
        });
        let enum_opts = Options {
            enumerate: true,
            ..Options::default()
        };
        let (t_en, e) = time(20, || {
            place_on(&infra, &app, &ledger, &enum_opts).expect("enumerate")
        });
        let (Outcome::Placed(p), Outcome::Placed(q)) = (&r.outcome, &e.outcome) else {
            panic!("railway infeasible")
        };
        assert!((p.score - q.score).abs() < 1e-12 && r.proven);
        println!(
            "| {} | {} | {:.6} | {} | {} | {} | {} | {} | {:.0}x |",
            app.application,
            p.feasible_deployments,
            p.score,
            us(t_bb),
            us(cpu_bb),
            r.explored,
            us(t_full),
            us(t_en),
            t_en.as_secs_f64() / t_bb.as_secs_f64()
        );
    }
    println!();
}

/// Nanoseconds per deployment of exhaustive enumeration, measured on the space truncated
/// to the first `k` candidates of each component (at most about 2^20 deployments).
fn enumeration_cost(infra: &Infra, app: &Application) -> f64 {
    let ledger = Ledger::new();
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, &ledger, &constraints);
    let n = model.comps.len() as u32;
    let k = ((1u64 << 20) as f64).powf(1.0 / n as f64).floor().max(2.0) as usize;
    let cand: Vec<Vec<u32>> = model
        .comps
        .iter()
        .map(|c| c.cand.iter().copied().take(k).collect())
        .collect();
    let space = Space::build(&model, cand);
    let lmin = vec![Some(1.0); app.criteria.len()];
    let obj = Objective::for_app(app, &model, &space, &lmin);
    let remaining = model.remaining(&ledger);
    let t = cpu_now();
    let _ = enumerate::run(&model, &space, &obj, Some(&remaining));
    (cpu_now() - t).as_secs_f64() * 1e9 / space.product() as f64
}

fn sweep(sizes: &[usize], budget: Duration) {
    println!(
        "## Synthetic sweep (one run each; time budget {} ms per search)\n",
        budget.as_millis()
    );
    println!("| nodes | datacenters | links | components | channels | paths | criteria | candidate product | build Infra (ms) | place time (ms) | place CPU time (ms) | of which compile / l_min / bounds / B&B / count (ms) | nodes explored | proven | gap (upper bound - score) | score | feasible deployments | enumeration (est.) | speed-up (est.) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &size in sizes {
        let (dcs, per_dc) = shape(size);
        let t = Instant::now();
        let infra = synth::cluster(dcs, per_dc, 42 + size as u64);
        let t_build = t.elapsed();
        for comps in [5, 10, 20] {
            let app = synth::application(comps, dcs, 7 + comps as u64);
            app.validate().expect("synthetic app is valid");
            let (r, t_bb, cpu, product) = timed(&infra, &app, budget);
            let ns = enumeration_cost(&infra, &app);
            let est_s = product * ns * 1e-9;
            let (score, feasible, gap) = match &r.outcome {
                Outcome::Placed(p) => (
                    format!("{:.6}", p.score),
                    if r.feasible_exact {
                        format!("{}", p.feasible_deployments)
                    } else {
                        format!("<= {:.3e}", p.feasible_deployments as f64)
                    },
                    format!("{:.2e}", r.upper_bound - p.score),
                ),
                Outcome::Infeasible(i) => {
                    (format!("infeasible: {}", i.reason), "0".into(), "-".into())
                }
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.3e} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3e} s | {:.1e}x |",
                infra.len(),
                dcs,
                infra.link_count(),
                comps,
                app.channels.len(),
                app.paths.len(),
                app.criteria.len(),
                product,
                ms(t_build),
                ms(t_bb),
                ms(cpu),
                phases(&r),
                r.explored,
                if r.proven { "yes" } else { "no" },
                gap,
                score,
                feasible,
                est_s,
                est_s / cpu.as_secs_f64()
            );
        }
    }
}

/// `place_on` within `budget`: the report, its wall-clock and CPU time, the product of the
/// candidate counts.
fn timed(
    infra: &Infra,
    app: &Application,
    budget: Duration,
) -> (acoa_scheduler::Report, Duration, Duration, f64) {
    let opts = Options {
        time_budget: Some(budget),
        ..Options::default()
    };
    let t = Instant::now();
    let c0 = cpu_now();
    let r = place_on(infra, app, &Ledger::new(), &opts).expect("place");
    let cpu = cpu_now() - c0;
    let wall = t.elapsed();
    let ledger = Ledger::new();
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, &ledger, &constraints);
    let product = model
        .comps
        .iter()
        .fold(1f64, |p, c| p * c.cand.len() as f64);
    (r, wall, cpu, product)
}

/// compile / l_min / bounds / B&B / count, ms.
fn phases(r: &acoa_scheduler::Report) -> String {
    let p = &r.phases;
    [p.compile, p.lmin, p.bounds, p.search, p.count]
        .map(ms)
        .join(" / ")
}

/// Datacenters and nodes per datacenter of a sweep size.
fn shape(size: usize) -> (usize, usize) {
    match size {
        100 => (10, 10),
        1_000 => (40, 25),
        10_000 => (200, 50),
        n => ((n / 50).max(1), 50.min(n)),
    }
}

/// Each size on its measured links only, then on the same links plus the estimates of every
/// other pair ([`synth::cluster_with_estimates`]).
fn estimates_sweep(sizes: &[usize], budget: Duration) {
    println!(
        "## Measured links only against measured + estimated (one run each; time budget {} ms per search)\n",
        budget.as_millis()
    );
    println!("| nodes | links the search sees | components | candidate product | place time (ms) | place CPU time (ms) | of which compile / l_min / bounds / B&B / count (ms) | nodes explored | proven | gap | score | channels on estimated links |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &size in sizes {
        let (dcs, per_dc) = shape(size);
        let seed = 42 + size as u64;
        for (label, infra) in [
            ("measured", synth::cluster(dcs, per_dc, seed)),
            (
                "measured + estimates",
                synth::cluster_with_estimates(dcs, per_dc, seed),
            ),
        ] {
            for comps in [5, 10, 20] {
                let app = synth::application(comps, dcs, 7 + comps as u64);
                let (r, wall, cpu, product) = timed(&infra, &app, budget);
                let (score, gap, on_est) = match &r.outcome {
                    Outcome::Placed(p) => (
                        format!("{:.6}", p.score),
                        format!("{:.2e}", r.upper_bound - p.score),
                        format!(
                            "{} of {}",
                            infra.estimated_channels(&app, &p.assignment),
                            app.channels.len()
                        ),
                    ),
                    Outcome::Infeasible(i) => {
                        (format!("infeasible: {}", i.reason), "-".into(), "-".into())
                    }
                };
                println!(
                    "| {} | {} | {} | {:.3e} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    infra.len(),
                    label,
                    comps,
                    product,
                    ms(wall),
                    ms(cpu),
                    phases(&r),
                    r.explored,
                    if r.proven { "yes" } else { "no" },
                    gap,
                    score,
                    on_est
                );
            }
        }
    }
}
