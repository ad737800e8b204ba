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

/// A feasible but far from optimal deployment of smoke-monitoring.
fn far_from_optimal() -> std::collections::BTreeMap<String, String> {
    [
        ("measurement", "n13"),
        ("batching", "n19"),
        ("level-detection", "n07"),
        ("storage", "n02"),
        ("alarm", "n14"),
    ]
    .into_iter()
    .map(|(c, n)| (c.to_string(), n.to_string()))
    .collect()
}

/// `requires.node` pins: the placement follows the pins, scores exactly as the same
/// deployment of the unpinned application (l_min ignores pins), and a pin that breaks
/// another constraint is an infeasible outcome naming the pinned node.
#[test]
fn pinned_components_land_on_their_node_and_score_as_unpinned() {
    let (cluster, app) = load("smoke-monitoring.yaml");
    let chosen = far_from_optimal();
    let mut pinned = app.clone();
    for c in &mut pinned.components {
        c.requires.node = Some(chosen[&c.name].clone());
    }
    pinned.validate().unwrap();
    let Outcome::Placed(p) = place(&cluster, &pinned, &Ledger::new()).unwrap() else {
        panic!("a pinned feasible deployment is infeasible")
    };
    assert_eq!(p.assignment, chosen);
    assert_eq!(p.feasible_deployments, 1);
    let (free, _) = acoa_scheduler::score(&cluster, &app, &chosen).unwrap();
    assert!((p.score - free).abs() < 1e-12, "{} vs {free}", p.score);
    let Outcome::Placed(best) = place(&cluster, &app, &Ledger::new()).unwrap() else {
        panic!("infeasible")
    };
    assert!(p.score < best.score, "{} vs {}", p.score, best.score);

    // One pin only: that component lands there, the others are optimised around it.
    let mut one = app.clone();
    one.components[1].requires.node = Some("n05".into()); // batching
    let Outcome::Placed(q) = place(&cluster, &one, &Ledger::new()).unwrap() else {
        panic!("infeasible")
    };
    assert_eq!(q.assignment["batching"], "n05");

    // A pin to a node outside the component's datacenter (train1): infeasible, named.
    let mut bad = app.clone();
    bad.components[0].requires.node = Some("n16".into()); // measurement, train2
    match place(&cluster, &bad, &Ledger::new()).unwrap() {
        Outcome::Infeasible(i) => {
            assert!(i.reason.contains("component `measurement`"), "{}", i.reason);
            assert!(i.reason.contains("`n16`"), "{}", i.reason);
            assert!(i.reason.contains("requires.node"), "{}", i.reason);
        }
        o => panic!("{o:?}"),
    }
    // A pin to a node that does not exist: infeasible, named.
    let mut gone = app.clone();
    gone.components[2].requires.node = Some("n99".into());
    match place(&cluster, &gone, &Ledger::new()).unwrap() {
        Outcome::Infeasible(i) => {
            assert!(
                i.reason.contains("component `level-detection`"),
                "{}",
                i.reason
            );
            assert!(i.reason.contains("`n99`"), "{}", i.reason);
        }
        o => panic!("{o:?}"),
    }
}

/// Every algorithm honours the pins (they all take the candidates after the filters).
#[test]
fn every_algorithm_honours_pins() {
    let (cluster, app) = load("smoke-monitoring.yaml");
    let chosen = far_from_optimal();
    for algo in acoa_scheduler::algorithms() {
        let mut pinned = app.clone();
        pinned.scheduler = algo.to_string();
        pinned.components[1].requires.node = Some("n19".into()); // batching only
        let Outcome::Placed(p) = place(&cluster, &pinned, &Ledger::new()).unwrap() else {
            panic!("{algo}: infeasible")
        };
        assert_eq!(p.assignment["batching"], "n19", "{algo}");
        for c in &mut pinned.components {
            c.requires.node = Some(chosen[&c.name].clone());
        }
        let Outcome::Placed(p) = place(&cluster, &pinned, &Ledger::new()).unwrap() else {
            panic!("{algo}: infeasible")
        };
        assert_eq!(p.assignment, chosen, "{algo}");
    }
}

#[test]
fn a_pin_is_read_from_yaml_and_validated() {
    let text = std::fs::read_to_string(scenario("smoke-monitoring.yaml")).unwrap();
    let pinned = text.replace(
        "datacenter: train1\n- {name: batching",
        "datacenter: train1\n    node: n13\n- {name: batching",
    );
    let app = acoa_shared::model::parse_application(&pinned).unwrap();
    assert_eq!(app.components[0].requires.node.as_deref(), Some("n13"));
    let bad = text.replace(
        "datacenter: train1\n- {name: batching",
        "datacenter: train1\n    node: 'no such/node'\n- {name: batching",
    );
    let e = acoa_shared::model::parse_application(&bad).unwrap_err();
    assert_eq!(e.field, "components[0].requires.node");
    assert!(e.reason.contains("no such/node"), "{}", e.reason);
}

/// Why the agents measure one-way delay: the railway table is asymmetric. Placed on what a
/// round-trip prober sees (each direction at half the round trip, success of the round
/// trip), speed-profiling scores 12.6 % below the optimum under the true table; the directed
/// table (what `clock = "synchronized"` agents report, up to measurement error) is the true
/// one, on which the placement is the optimum.
#[test]
fn a_round_trip_view_of_the_asymmetric_table_misplaces_and_the_directed_view_does_not() {
    let (truth, app) = load("speed-profiling.yaml");
    let Outcome::Placed(best) = place(&truth, &app, &Ledger::new()).unwrap() else {
        panic!("infeasible")
    };
    let mut round_trip = truth.clone();
    for l in &mut round_trip.links {
        if l.from == l.to {
            continue;
        }
        let back = truth
            .links
            .iter()
            .find(|r| r.from == l.to && r.to == l.from)
            .expect("both directions are in the table");
        l.latency_ms = (l.latency_ms + back.latency_ms) / 2.0;
        l.success *= back.success;
    }
    let Outcome::Placed(p) = place(&round_trip, &app, &Ledger::new()).unwrap() else {
        panic!("infeasible")
    };
    let (s, _) = acoa_scheduler::score(&truth, &app, &p.assignment).unwrap();
    let gap = (best.score - s) / best.score;
    println!(
        "round-trip view: {s:.6} under the true table, optimum {:.6}, gap {:.2} %",
        best.score,
        gap * 100.0
    );
    assert!(gap > 0.10, "gap {gap}");
}
