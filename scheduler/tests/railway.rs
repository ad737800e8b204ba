//! The railway scenario of the ACOA paper (model.md reference figures).

use acoa_scheduler::{place, place_on, Infra, Ledger, Options, Outcome};
use acoa_shared::model::{load_application, load_cluster, Application, Cluster};
use std::path::PathBuf;

fn scenario(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/railway")
        .join(file)
}

fn load(app: &str) -> (Cluster, Application) {
    (
        load_cluster(&scenario("cluster.yaml")).unwrap(),
        load_application(&scenario(app)).unwrap(),
    )
}

fn check(app: &str, feasible: u128, best: f64, worst: f64, mean: f64) {
    let (cluster, app) = load(app);
    let infra = Infra::from_cluster(&cluster);
    let opts = Options {
        enumerate: true,
        ..Options::default()
    };
    let r = place_on(&infra, &app, &Ledger::new(), &opts).unwrap();
    let Outcome::Placed(p) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(p.feasible_deployments, feasible);
    assert!(r.feasible_exact);
    assert!((p.score - best).abs() < 1e-6, "best {}", p.score);
    assert!(
        (r.worst_score.unwrap() - worst).abs() < 1e-6,
        "worst {:?}",
        r.worst_score
    );
    assert!(
        (r.mean_score.unwrap() - mean).abs() < 1e-6,
        "mean {:?}",
        r.mean_score
    );
    // The default search (branch and bound) finds the same optimum.
    let Outcome::Placed(q) = place(&cluster, &app, &Ledger::new()).unwrap() else {
        panic!("infeasible")
    };
    assert!(
        (q.score - p.score).abs() < 1e-12,
        "{} vs {}",
        q.score,
        p.score
    );
    assert_eq!(q.feasible_deployments, feasible);
    let (s, _) = acoa_scheduler::score(&cluster, &app, &q.assignment).unwrap();
    assert!((s - q.score).abs() < 1e-12);
}

#[test]
fn smoke_monitoring_matches_the_reference_figures() {
    check("smoke-monitoring.yaml", 4800, 0.985122, 0.428112, 0.528718);
}

#[test]
fn speed_profiling_matches_the_reference_figures() {
    check("speed-profiling.yaml", 2880, 0.994404, 0.474749, 0.677211);
}

/// Same inputs, same placement, whatever the order of nodes and links in the file.
#[test]
fn placement_is_deterministic_and_independent_of_file_order() {
    for file in ["smoke-monitoring.yaml", "speed-profiling.yaml"] {
        let (cluster, app) = load(file);
        let a = place(&cluster, &app, &Ledger::new()).unwrap();
        let b = place(&cluster, &app, &Ledger::new()).unwrap();
        assert_eq!(a, b);
        let mut shuffled = cluster.clone();
        shuffled.nodes.reverse();
        shuffled.links.reverse();
        let c = place(&shuffled, &app, &Ledger::new()).unwrap();
        assert_eq!(a, c);
    }
}
