//! The container limit of a node: a node's desired state carries at most
//! `acoa_shared::wire::MAX_CONTAINERS` containers, so no algorithm gives a node more, counting
//! the containers other applications' placements hold there (the ledger). An application that
//! cannot be placed because of it is infeasible, and the reason names the node and the limit.

mod common;

use acoa_scheduler::ledger::NODE_CONTAINER_LIMIT;
use acoa_scheduler::netaware::app::{deschedule, DeschedConfig};
use acoa_scheduler::rng::SplitMix64;
use acoa_scheduler::{algorithms, place, place_on, Infra, Ledger, Options, Outcome};
use acoa_shared::model::{Application, Cluster};
use acoa_shared::wire::MAX_CONTAINERS;
use common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// `n` nodes n1..nn in one datacenter, every link (loopbacks included) 1 ms, success 1.
fn mesh(n: usize) -> Cluster {
    let names: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
    let nodes = names.iter().map(|nm| node(nm, "dc1", &[])).collect();
    let mut links = Vec::new();
    for f in &names {
        for t in &names {
            links.push(link(f, t, if f == t { 0.1 } else { 1.0 }, 1.0));
        }
    }
    cluster(nodes, links)
}

/// `k` components c0..c(k-1), each pinned to `pins[i]` when given, in a chain of channels.
fn chain(k: usize, pins: &[Option<&str>], algorithm: &str) -> Application {
    let comps = (0..k)
        .map(|i| {
            let mut c = comp(&format!("c{i}"), &[], None);
            c.requires.node = pins.get(i).copied().flatten().map(str::to_string);
            c
        })
        .collect();
    let chans: Vec<_> = (1..k)
        .map(|i| chan(&format!("e{i}"), &format!("c{}", i - 1), &format!("c{i}")))
        .collect();
    let mut a = app("x", comps, chans, vec![], vec![]);
    a.scheduler = algorithm.into();
    a
}

fn ledger(counts: &[(&str, u32)]) -> Ledger {
    let mut l = Ledger::new();
    for (n, k) in counts {
        l.add_containers(n, *k);
    }
    l
}

fn per_node(a: &BTreeMap<String, String>) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for n in a.values() {
        *m.entry(n.clone()).or_default() += 1;
    }
    m
}

fn infeasible(c: &Cluster, a: &Application, l: &Ledger) -> String {
    match place(c, a, l).unwrap() {
        Outcome::Infeasible(i) => i.reason,
        Outcome::Placed(p) => panic!("{}: placed {:?}", a.scheduler, p.assignment),
    }
}

#[test]
fn the_limit_is_the_desired_states() {
    assert_eq!(NODE_CONTAINER_LIMIT as usize, MAX_CONTAINERS);
}

#[test]
fn a_full_node_is_named_with_the_limit() {
    let c = mesh(2);
    let l = ledger(&[("n1", NODE_CONTAINER_LIMIT)]);
    for algo in algorithms() {
        let a = chain(1, &[Some("n1")], algo);
        let r = infeasible(&c, &a, &l);
        assert!(
            r.contains("n1 already runs 32 containers, the most a node's desired state carries"),
            "{algo}: {r}"
        );
        assert!(r.contains("component `c0`"), "{algo}: {r}");
        // free to go elsewhere, it goes to n2
        let free = chain(1, &[None], algo);
        match place(&c, &free, &l).unwrap() {
            Outcome::Placed(p) => assert_eq!(p.assignment["c0"], "n2", "{algo}"),
            o => panic!("{algo}: {o:?}"),
        }
    }
}

#[test]
fn components_that_together_overflow_a_node_are_infeasible_and_the_node_is_named() {
    let c = mesh(2);
    let pins = [Some("n1"); 3];
    for algo in algorithms() {
        // 30 of other applications + 3 pinned: one too many
        let r = infeasible(&c, &chain(3, &pins, algo), &ledger(&[("n1", 30)]));
        assert!(r.contains("n1 already runs"), "{algo}: {r}");
        assert!(
            r.contains("desired state carries"),
            "{algo}: the reason names the limit: {r}"
        );
        // 29 + 3 = 32 fits
        match place(&c, &chain(3, &pins, algo), &ledger(&[("n1", 29)])).unwrap() {
            Outcome::Placed(p) => assert_eq!(per_node(&p.assignment)["n1"], 3, "{algo}"),
            o => panic!("{algo}: {o:?}"),
        }
    }
}

#[test]
fn one_application_alone_never_exceeds_the_limit_on_a_node() {
    let k = NODE_CONTAINER_LIMIT as usize + 8;
    for algo in algorithms() {
        let r = infeasible(&mesh(1), &chain(k, &[], algo), &Ledger::new());
        assert!(r.contains("desired state carries"), "{algo}: {r}");
        match place(&mesh(2), &chain(k, &[], algo), &Ledger::new()).unwrap() {
            Outcome::Placed(p) => {
                let used = per_node(&p.assignment);
                assert!(
                    used.values().all(|v| *v <= NODE_CONTAINER_LIMIT),
                    "{algo}: {used:?}"
                );
                assert_eq!(used.values().sum::<u32>() as usize, k, "{algo}");
            }
            o => panic!("{algo}: {o:?}"),
        }
    }
}

#[test]
fn other_applications_containers_leave_room_for_the_rest_only() {
    // n1 has room for one more: of three free components at most one goes there
    let c = mesh(3);
    let l = ledger(&[("n1", 31), ("n2", 32)]);
    for algo in algorithms() {
        match place(&c, &chain(3, &[], algo), &l).unwrap() {
            Outcome::Placed(p) => {
                let used = per_node(&p.assignment);
                assert!(
                    used.get("n1").copied().unwrap_or(0) <= 1,
                    "{algo}: {used:?}"
                );
                assert_eq!(used.get("n2"), None, "{algo}: {used:?}");
            }
            o => panic!("{algo}: {o:?}"),
        }
    }
}

#[test]
fn the_qos_search_and_the_enumeration_agree_under_the_limit() {
    let c = mesh(2);
    let infra = Infra::from_cluster(&c);
    let l = ledger(&[("n1", 30), ("n2", 31)]);
    for k in 1..=4 {
        let a = chain(k, &[], "qos");
        let bb = place_on(&infra, &a, &l, &Options::default()).unwrap();
        let en = place_on(
            &infra,
            &a,
            &l,
            &Options {
                enumerate: true,
                ..Options::default()
            },
        )
        .unwrap();
        match (&bb.outcome, &en.outcome) {
            (Outcome::Placed(p), Outcome::Placed(q)) => {
                assert!(k <= 3, "{k} components do not fit in 2 + 1");
                assert_eq!(p.feasible_deployments, q.feasible_deployments, "{k}");
                assert!((p.score - q.score).abs() < 1e-12, "{k}");
            }
            (Outcome::Infeasible(x), Outcome::Infeasible(y)) => {
                assert_eq!(k, 4);
                assert_eq!(
                    x.reason,
                    "the containers of the components do not fit together on the candidate nodes: n1 already runs 30 containers, n2 31 (a node's desired state carries at most 32)"
                );
                assert_eq!(x.reason, y.reason);
            }
            o => panic!("{k}: {o:?}"),
        }
    }
}

#[test]
fn the_descheduler_moves_nothing_to_a_full_node() {
    // c0 on n1 with a slow link to its peer c1 on n2: moving c0 to n2 would gain, but n2
    // has no room left once other applications hold 31 of it and c1 is there
    let mut c = mesh(2);
    for l in &mut c.links {
        if l.from != l.to {
            l.latency_ms = 200.0;
        }
    }
    let a = chain(2, &[], "network-aware");
    let current: BTreeMap<String, String> =
        [("c0".into(), "n1".into()), ("c1".into(), "n2".into())].into();
    let cfg = DeschedConfig {
        threshold: 0.0,
        group_moves: false,
    };
    let free = deschedule(&c, &a, &Ledger::new(), &current, &cfg).unwrap();
    assert!(free.is_some(), "without other applications a move gains");
    let full = ledger(&[("n1", 31), ("n2", 31)]);
    assert_eq!(deschedule(&c, &a, &full, &current, &cfg).unwrap(), None);
}

/// A random cluster of 1-3 nodes, other applications' containers close to the limit, and
/// an application of 1-6 components, some pinned.
fn case(seed: u64) -> (Cluster, Ledger, Vec<Option<String>>) {
    let mut r = SplitMix64::new(seed);
    let n = 1 + r.below(3);
    let c = mesh(n);
    let mut l = Ledger::new();
    for i in 1..=n {
        l.add_containers(&format!("n{i}"), 26 + r.below(9) as u32);
    }
    let k = 1 + r.below(6);
    let pins = (0..k)
        .map(|_| r.chance(0.3).then(|| format!("n{}", 1 + r.below(n))))
        .collect();
    (c, l, pins)
}

/// Whether some assignment respects the pins and the limit (by brute force).
fn feasible(nodes: usize, l: &Ledger, pins: &[Option<String>]) -> bool {
    let k = pins.len();
    let room: Vec<i64> = (1..=nodes)
        .map(|i| i64::from(l.container_room(&format!("n{i}"))))
        .collect();
    let total = nodes.pow(k as u32);
    (0..total).any(|mut code| {
        let mut left = room.clone();
        for pin in pins {
            let n = code % nodes;
            code /= nodes;
            if pin.as_deref().is_some_and(|p| p != format!("n{}", n + 1)) {
                return false;
            }
            left[n] -= 1;
        }
        left.iter().all(|x| *x >= 0)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every algorithm keeps every node within the limit, and `qos` places exactly when an
    /// assignment within the limit exists (the others may miss one, never break the limit).
    #[test]
    fn no_placement_exceeds_the_limit(seed in any::<u64>()) {
        let (c, l, pins) = case(seed);
        let pinned: Vec<Option<&str>> = pins.iter().map(|p| p.as_deref()).collect();
        let exists = feasible(c.nodes.len(), &l, &pins);
        for algo in algorithms() {
            let a = chain(pins.len(), &pinned, algo);
            match place(&c, &a, &l).unwrap() {
                Outcome::Placed(p) => {
                    prop_assert!(exists, "{algo} placed what cannot fit: {:?}", p.assignment);
                    for (n, k) in per_node(&p.assignment) {
                        prop_assert!(
                            k + l.containers(&n) <= NODE_CONTAINER_LIMIT,
                            "{algo}: {n} given {k} besides {}",
                            l.containers(&n)
                        );
                    }
                }
                Outcome::Infeasible(i) => {
                    prop_assert!(*algo != "qos" || !exists, "qos missed a placement: {}", i.reason);
                    prop_assert!(i.reason.contains("containers"), "{algo}: {}", i.reason);
                }
            }
        }
    }
}
