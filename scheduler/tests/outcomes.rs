//! Infeasible applications, missing links, resource requests and the ledger.

mod common;

use acoa_scheduler::{place, score, Ledger, Outcome, Resources, ScheduleError};
use acoa_shared::model::{Application, CriterionKind};
use common::*;
use std::collections::BTreeMap;

/// Two nodes a and b; a has the sensor; every link but b -> a.
fn two_nodes() -> acoa_shared::model::Cluster {
    cluster(
        vec![node("a", "dc1", &["sensor"]), node("b", "dc1", &["screen"])],
        vec![
            link("a", "a", 0.1, 1.0),
            link("b", "b", 0.1, 1.0),
            link("a", "b", 2.0, 0.9),
        ],
    )
}

#[test]
fn a_component_without_candidates_is_infeasible_and_named() {
    let app = app("x", vec![comp("m", &["gps"], None)], vec![], vec![], vec![]);
    match place(&two_nodes(), &app, &Ledger::new()).unwrap() {
        Outcome::Infeasible(i) => {
            assert!(i.reason.contains("component `m`"), "{}", i.reason);
            assert!(i.reason.contains("gps"), "{}", i.reason);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_missing_link_makes_the_deployment_infeasible_and_is_named() {
    // screen on b must send to sensor on a: the link b -> a is missing.
    let app = app(
        "x",
        vec![comp("s", &["screen"], None), comp("m", &["sensor"], None)],
        vec![chan("s-to-m", "s", "m")],
        vec![path("p", &["s-to-m"])],
        vec![crit(CriterionKind::MinE2eResponseTime, "p", 1.0)],
    );
    match place(&two_nodes(), &app, &Ledger::new()).unwrap() {
        Outcome::Infeasible(i) => {
            assert!(i.reason.contains("s-to-m"), "{}", i.reason);
            assert!(i.reason.contains("from `b` to `a`"), "{}", i.reason);
        }
        o => panic!("{o:?}"),
    }
    let assignment: BTreeMap<String, String> =
        [("s".into(), "b".into()), ("m".into(), "a".into())].into();
    assert_eq!(
        score(&two_nodes(), &app, &assignment),
        Err(ScheduleError::MissingLink {
            channel: "s-to-m".into(),
            from: "b".into(),
            to: "a".into()
        })
    );
}

/// x (anywhere) sends to y (needs the sensor), graded by the path's reliability.
fn x_to_sensor() -> Application {
    app(
        "x",
        vec![comp("x", &[], None), comp("y", &["sensor"], None)],
        vec![chan("x-to-y", "x", "y")],
        vec![path("p", &["x-to-y"])],
        vec![crit(CriterionKind::MaxE2eReliability, "p", 1.0)],
    )
}

#[test]
fn the_search_avoids_missing_links_when_it_can() {
    // x may go anywhere; y needs the sensor (only a). b -> a is missing, so x must be on a.
    let app = x_to_sensor();
    let Outcome::Placed(p) = place(&two_nodes(), &app, &Ledger::new()).unwrap() else {
        panic!()
    };
    assert_eq!(p.assignment["x"], "a");
    assert_eq!(p.feasible_deployments, 1);
}

#[test]
fn resource_requests_are_honoured_with_usage_and_ledger() {
    // Both components want 600 MB; each node has 1000 MB: they cannot share a node.
    let app = app(
        "x",
        vec![
            comp("p", &[], Some((100, 600))),
            comp("q", &[], Some((100, 600))),
        ],
        vec![chan("p-to-q", "p", "q")],
        vec![path("pq", &["p-to-q"])],
        vec![crit(CriterionKind::MaxE2eReliability, "pq", 1.0)],
    );
    let c = cluster(
        vec![node("a", "dc", &[]), node("b", "dc", &[])],
        vec![
            link("a", "a", 0.1, 1.0),
            link("b", "b", 0.1, 1.0),
            link("a", "b", 2.0, 0.9),
            link("b", "a", 2.0, 0.8),
        ],
    );
    let Outcome::Placed(p) = place(&c, &app, &Ledger::new()).unwrap() else {
        panic!()
    };
    // Sharing a node would give 1.0; the requests force a -> b (0.9).
    assert_eq!(p.assignment["p"], "a");
    assert_eq!(p.assignment["q"], "b");
    assert!((p.score - 0.9).abs() < 1e-12);
    assert_eq!(p.feasible_deployments, 2);
    // A reservation of 500 MB on b leaves only a with room for one: infeasible.
    let mut ledger = Ledger::new();
    ledger.reserve(
        "b",
        Resources {
            cpu_millis: 0,
            memory_mb: 500,
            ..Default::default()
        },
    );
    match place(&c, &app, &ledger).unwrap() {
        Outcome::Infeasible(i) => assert!(i.reason.contains("resource"), "{}", i.reason),
        o => panic!("{o:?}"),
    }
}

#[test]
fn least_containers_and_most_free_memory_grade_the_node() {
    let mut busy = node("a", "dc", &[]);
    busy.usage.containers = 3;
    busy.usage.memory_mb = 750;
    let c = cluster(vec![busy, node("b", "dc", &[])], vec![]);
    let app = app(
        "x",
        vec![comp("m", &[], None)],
        vec![],
        vec![],
        vec![
            crit(CriterionKind::LeastContainers, "m", 1.0),
            crit(CriterionKind::MostFreeMemory, "m", 3.0),
        ],
    );
    let Outcome::Placed(p) = place(&c, &app, &Ledger::new()).unwrap() else {
        panic!()
    };
    assert_eq!(p.assignment["m"], "b");
    let a: BTreeMap<String, String> = [("m".into(), "a".into())].into();
    let (s, grades) = score(&c, &app, &a).unwrap();
    assert!((grades[0].grade - 0.25).abs() < 1e-12);
    assert!((grades[1].grade - 0.25).abs() < 1e-12);
    assert!((s - 0.25).abs() < 1e-12);
}

#[test]
fn an_invalid_application_is_an_error() {
    let mut a = app(
        "x",
        vec![comp("m", &[], None)],
        vec![],
        vec![],
        vec![crit(CriterionKind::LeastContainers, "m", 1.0)],
    );
    a.criteria[0].weight = -1.0;
    match place(&two_nodes(), &a, &Ledger::new()) {
        Err(ScheduleError::Model(e)) => assert_eq!(e.field, "criteria[0].weight"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn branching_paths_use_the_longest_route() {
    // s -> l -> r and s -> r: the path's latency is max(s-l + l-r, s-r).
    let c = cluster(
        vec![
            node("a", "dc", &["s"]),
            node("b", "dc", &["l"]),
            node("c", "dc", &["r"]),
        ],
        vec![
            link("a", "b", 1.0, 1.0),
            link("b", "c", 2.0, 1.0),
            link("a", "c", 5.0, 1.0),
        ],
    );
    let app = app(
        "x",
        vec![
            comp("s", &["s"], None),
            comp("l", &["l"], None),
            comp("r", &["r"], None),
        ],
        vec![
            chan("sl", "s", "l"),
            chan("lr", "l", "r"),
            chan("sr", "s", "r"),
        ],
        vec![path("p", &["sl", "lr", "sr"])],
        vec![crit(CriterionKind::MinE2eResponseTime, "p", 1.0)],
    );
    let Outcome::Placed(p) = place(&c, &app, &Ledger::new()).unwrap() else {
        panic!()
    };
    // Only one deployment: its latency is its own l_min, so the grade is 1.
    assert_eq!(p.criteria[0].grade, 1.0);
    assert_eq!(p.feasible_deployments, 1);
}

#[test]
fn algorithms_include_qos() {
    assert!(acoa_scheduler::algorithms().contains(&"qos"));
}

#[test]
fn score_rejects_bad_assignments() {
    let app = x_to_sensor();
    let c = two_nodes();
    let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        score(&c, &app, &a(&[("x", "a")])),
        Err(ScheduleError::Unassigned("y".into()))
    );
    assert_eq!(
        score(&c, &app, &a(&[("x", "a"), ("y", "zz")])),
        Err(ScheduleError::UnknownNode("zz".into()))
    );
    assert_eq!(
        score(&c, &app, &a(&[("x", "a"), ("y", "a"), ("w", "a")])),
        Err(ScheduleError::UnknownComponent("w".into()))
    );
    assert_eq!(
        score(&c, &app, &a(&[("x", "a"), ("y", "b")])),
        Err(ScheduleError::Unsatisfied {
            component: "y".into(),
            node: "b".into()
        })
    );
    let (s, g) = score(&c, &app, &a(&[("x", "a"), ("y", "a")])).unwrap();
    assert_eq!((s, g[0].grade), (1.0, 1.0));
}

#[test]
fn an_empty_cluster_is_infeasible_not_a_panic() {
    // The control plane places on its live model, which is empty until agents report.
    let empty = acoa_scheduler::Infra::from_cluster(&cluster(vec![], vec![]));
    let app = app("x", vec![comp("m", &[], None)], vec![], vec![], vec![]);
    let report =
        acoa_scheduler::place_on(&empty, &app, &Ledger::new(), &Default::default()).unwrap();
    match report.outcome {
        Outcome::Infeasible(i) => assert!(i.reason.contains("no nodes"), "{}", i.reason),
        o => panic!("{o:?}"),
    }
}
