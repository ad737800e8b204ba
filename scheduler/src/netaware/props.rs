//! Properties over random snapshots (seeded generator, proptest picks the seeds).

use super::desched::{Action, Config, Descheduler, Event};
use super::*;
use crate::rng::SplitMix64 as Rng;
use proptest::prelude::*;

fn random_snapshot(seed: u64) -> Snapshot {
    let mut r = Rng::new(seed);
    let nn = 2 + (r.next_u64() % 5) as usize;
    let nc = 1 + (r.next_u64() % 8) as usize;
    let nodes: Vec<NodeState> = (0..nn)
        .map(|i| {
            let cap = 500.0 + 3500.0 * r.unit();
            let mem = 500.0 + 3500.0 * r.unit();
            NodeState {
                name: format!("n{i}"),
                cpu_capacity: cap,
                memory_capacity: mem,
                cpu_background: cap * 0.5 * r.unit(),
                memory_background: mem * 0.5 * r.unit(),
                schedulable: r.unit() > 0.15,
            }
        })
        .collect();
    let mut latency_ms = vec![vec![0.0; nn]; nn];
    for a in 0..nn {
        for b in a + 1..nn {
            let l = 200.0 * r.unit();
            latency_ms[a][b] = l;
            latency_ms[b][a] = l;
        }
    }
    let components = (0..nc)
        .map(|i| ComponentUse {
            name: format!("c{i}"),
            cpu: 400.0 * r.unit(),
            memory: 400.0 * r.unit(),
        })
        .collect();
    let mut traffic = vec![vec![0.0; nc]; nc];
    for row in traffic.iter_mut() {
        for v in row.iter_mut() {
            if r.unit() < 0.4 {
                *v = 10_000.0 * r.unit();
            }
        }
    }
    for (i, row) in traffic.iter_mut().enumerate() {
        row[i] = 0.0;
    }
    Snapshot {
        nodes,
        latency: Latency::Matrix(latency_ms),
        components,
        traffic,
        entry: (r.next_u64() % nc as u64) as usize,
        ingress: (r.next_u64() % nn as u64) as usize,
        allowed: Vec::new(),
    }
}

fn check(seed: u64) -> Result<(), TestCaseError> {
    let s = random_snapshot(seed);
    let w = Weights::default();
    let order = placement_order(&s);
    prop_assert_eq!(order[0], s.entry);
    let mut sorted = order.clone();
    sorted.sort();
    prop_assert_eq!(sorted, (0..s.components.len()).collect::<Vec<_>>());
    match place(&s, &w).unwrap() {
        NetOutcome::Placed(a) => {
            let opt: Vec<Option<usize>> = a.iter().map(|&n| Some(n)).collect();
            for (n, (cpu, mem)) in s.loads(&opt, None).into_iter().enumerate() {
                if a.contains(&n) {
                    prop_assert!(s.nodes[n].schedulable);
                    prop_assert!(cpu <= w.max_utilisation * s.nodes[n].cpu_capacity + 1e-6);
                    prop_assert!(mem <= w.max_utilisation * s.nodes[n].memory_capacity + 1e-6);
                }
            }
            for c in 0..a.len() {
                let v = score(&s, &w, &opt, c, a[c]);
                prop_assert!((0.0..=1.0 + 1e-12).contains(&v), "score {}", v);
            }
            // On a static snapshot the descheduler settles: a bounded number of moves, and
            // none in the last 100 of 400 ticks.
            let mut d = Descheduler::new(Config::default()).unwrap();
            let mut a = a;
            let mut moves = Vec::new();
            for t in 0..400 {
                let acts = d
                    .handle(Event::Tick {
                        snapshot: s.clone(),
                        assignment: a.clone(),
                    })
                    .unwrap();
                for act in acts {
                    if let Action::Move { component, to, .. } = act {
                        a[component] = to;
                        moves.push(t);
                    }
                }
            }
            prop_assert!(moves.iter().all(|&t| t < 300), "moves at ticks {:?}", moves);
        }
        NetOutcome::Unschedulable { component, partial } => {
            let c = s
                .components
                .iter()
                .position(|x| x.name == component)
                .unwrap();
            prop_assert!(partial[c].is_none());
            prop_assert!(best_node(&s, &w, &partial, c).is_none());
        }
    }
    if let NetOutcome::Placed(a) = baseline::place(&s).unwrap() {
        let opt: Vec<Option<usize>> = a.iter().map(|&n| Some(n)).collect();
        for (n, (cpu, mem)) in s.loads(&opt, None).into_iter().enumerate() {
            if a.contains(&n) {
                prop_assert!(cpu <= s.nodes[n].cpu_capacity + 1e-6);
                prop_assert!(mem <= s.nodes[n].memory_capacity + 1e-6);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    #[test]
    fn placements_respect_the_filters_and_the_descheduler_settles(seed in any::<u64>()) {
        check(seed)?;
    }
}
