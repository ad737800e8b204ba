//! Property: on random small clusters and applications (random DAGs, branching paths,
//! mixed criteria, resource requests, sparse links, estimated links for half the cases),
//! branch and bound finds the score of
//! the exhaustive optimum, and its deployment's recomputed score is the reported one.

mod common;

use acoa_scheduler::criteria::{Branch, Ctx, Objective};
use acoa_scheduler::problem::{Model, Space, UNSET};
use acoa_scheduler::rng::SplitMix64 as Rng;
use acoa_scheduler::{enumerate, filter, place_on, score, Infra, Ledger, LinkQ, Options, Outcome};
use acoa_shared::model::{
    Application, Cluster, CoordDoc, CriterionKind, EstimatedNode, LinkEstimates,
};
use common::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn generate(seed: u64) -> (Cluster, Application) {
    let mut r = Rng::new(seed);
    let n = 1 + r.below(5);
    let link_p = [1.0, 0.85, 0.6][r.below(3)];
    let discrete = r.chance(0.3); // few distinct values: many ties
    let names: Vec<String> = (0..n).map(|i| format!("n{}", (i * 7 + 3) % 10)).collect();
    let nodes = names
        .iter()
        .map(|nm| {
            let dc = format!("d{}", r.below(2));
            let hw: Vec<&str> = ["h0", "h1"].into_iter().filter(|_| r.chance(0.6)).collect();
            let mut nd = node(nm, &dc, &hw);
            nd.usage.containers = r.below(4) as u32;
            nd.usage.memory_mb = r.below(5) as u64 * 150;
            nd
        })
        .collect();
    let mut links = Vec::new();
    for f in &names {
        for t in &names {
            if r.chance(link_p) {
                let (lat, succ) = if discrete {
                    ([0.5, 1.0, 2.0][r.below(3)], [0.9, 1.0][r.below(2)])
                } else {
                    (
                        if f == t { 0.05 } else { 0.1 + 20.0 * r.unit() },
                        0.7 + 0.3 * r.unit(),
                    )
                };
                links.push(link(f, t, lat, succ));
            }
        }
    }
    let nc = 1 + r.below(5);
    let comps = (0..nc)
        .map(|i| {
            let hw: Vec<&str> = if r.chance(0.25) {
                vec![["h0", "h1"][r.below(2)]]
            } else {
                vec![]
            };
            let res = r
                .chance(0.4)
                .then(|| (r.below(3) as u64 * 300, [200, 400, 600][r.below(3)]));
            let mut c = comp(&format!("c{i}"), &hw, res);
            if r.chance(0.15) {
                c.requires.datacenter = Some(format!("d{}", r.below(2)));
            }
            c
        })
        .collect();
    let mut chans = Vec::new();
    let mut forward = Vec::new();
    // Channels go forward only: an application's channels form no cycle.
    for i in 0..nc {
        for j in i + 1..nc {
            if r.chance(0.5) {
                let name = format!("e{i}-{j}");
                forward.push(name.clone());
                chans.push(chan(&name, &format!("c{i}"), &format!("c{j}")));
            }
        }
    }
    let mut paths = Vec::new();
    let mut criteria = Vec::new();
    for k in 0..(1 + r.below(3)) {
        if chans.is_empty() {
            break;
        }
        let rt = r.chance(0.6) && !forward.is_empty();
        let pool: Vec<String> = if rt {
            forward.clone()
        } else {
            chans.iter().map(|c| c.name.clone()).collect()
        };
        let mut pick: Vec<&str> = pool
            .iter()
            .filter(|_| r.chance(0.6))
            .map(|s| s.as_str())
            .collect();
        if pick.is_empty() {
            pick.push(&pool[r.below(pool.len())]);
        }
        let pname = format!("p{k}");
        paths.push(path(&pname, &pick));
        let w = 0.1 + 2.0 * r.unit();
        if rt {
            criteria.push(crit(CriterionKind::MinE2eResponseTime, &pname, w));
            if r.chance(0.5) {
                criteria.push(crit(CriterionKind::MaxE2eReliability, &pname, 0.5));
            }
        } else {
            criteria.push(crit(CriterionKind::MaxE2eReliability, &pname, w));
        }
    }
    for i in 0..nc {
        if r.chance(0.2) {
            criteria.push(crit(CriterionKind::LeastContainers, &format!("c{i}"), 0.3));
        }
        if r.chance(0.2) {
            criteria.push(crit(CriterionKind::MostFreeMemory, &format!("c{i}"), 0.7));
        }
    }
    let mut cluster = cluster(nodes, links);
    estimate(&mut cluster, seed);
    (cluster, app("random", comps, chans, paths, criteria))
}

/// For half the seeds, estimates of the unmeasured pairs (issue 16): four in five links between
/// two nodes dropped, most nodes with measured-link medians, most of those with a coordinate,
/// some datacenters with a median (from a generator of their own, so the rest of the case is
/// that of the seed without them).
fn estimate(c: &mut Cluster, seed: u64) {
    let mut r = Rng::new(seed ^ 0xe57);
    if !r.chance(0.5) {
        return;
    }
    c.links.retain(|l| l.from == l.to || r.chance(0.2));
    let mut e = LinkEstimates::default();
    for n in &c.nodes {
        if r.chance(0.85) {
            let coord = r.chance(0.75).then(|| CoordDoc {
                position: [10.0 * r.unit(), 10.0 * r.unit(), 2.0 * r.unit()],
                height_ms: 2.0 * r.unit(),
                error: 0.0,
            });
            e.nodes.insert(
                n.name.clone(),
                EstimatedNode {
                    coord,
                    median_jitter_ms: r.unit(),
                    median_success: 0.7 + 0.3 * r.unit(),
                },
            );
        }
    }
    for g in ["d0", "d1"] {
        if r.chance(0.5) {
            e.groups.insert(g.to_string(), 0.1 + 3.0 * r.unit());
        }
    }
    c.estimates = Some(e);
}

fn check(seed: u64) -> Result<(), TestCaseError> {
    let (cluster, app) = generate(seed);
    cluster
        .validate()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    app.validate()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let infra = Infra::from_cluster(&cluster);
    let ledger = Ledger::new();
    let oracle = place_on(
        &infra,
        &app,
        &ledger,
        &Options {
            enumerate: true,
            ..Options::default()
        },
    )
    .unwrap();
    let search = place_on(&infra, &app, &ledger, &Options::default()).unwrap();
    prop_assert!(search.proven);
    match (&oracle.outcome, &search.outcome) {
        (Outcome::Infeasible(_), Outcome::Infeasible(_)) => {}
        (Outcome::Placed(o), Outcome::Placed(s)) => {
            prop_assert!(
                (o.score - s.score).abs() < 1e-9,
                "seed {seed}: enumeration {} vs search {}",
                o.score,
                s.score
            );
            prop_assert!(search.feasible_exact);
            prop_assert_eq!(o.feasible_deployments, s.feasible_deployments);
            let (again, _) = score(&cluster, &app, &s.assignment).unwrap();
            prop_assert!((again - s.score).abs() < 1e-12);
            // The requests placed on each node fit it.
            let mut mem: HashMap<&str, u64> = HashMap::new();
            for c in &app.components {
                if let Some(r) = c.resources {
                    *mem.entry(s.assignment[&c.name].as_str()).or_default() += r.memory_mb;
                }
            }
            for (n, m) in mem {
                let node = cluster.node(n).unwrap();
                prop_assert!(m + node.usage.memory_mb <= node.capacity.memory_mb);
            }
        }
        (o, s) => prop_assert!(false, "seed {seed}: enumeration {o:?} vs search {s:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn branch_and_bound_finds_the_exhaustive_optimum(seed in any::<u64>()) {
        check(seed)?;
    }
}

#[test]
fn fixed_seeds() {
    for seed in 0..300 {
        check(seed).unwrap();
    }
    // Found by proptest: score() once took other spaces than place_on, and its l_min
    // (optimal to within EPS) differed in the last digits.
    check(12368747828101273826).unwrap();
}

/// The generator covers what the property is about: placed and infeasible cases,
/// resource requests that cut deployments, sparse links, branching paths, placements that
/// use an estimated link.
#[test]
fn the_generator_covers_the_interesting_cases() {
    let (mut placed, mut infeasible, mut cut_by_requests, mut branching) = (0, 0, 0, 0);
    let mut estimated = 0;
    for seed in 0..300 {
        let (cluster, app) = generate(seed);
        let infra = Infra::from_cluster(&cluster);
        let r = place_on(&infra, &app, &Ledger::new(), &Options::default()).unwrap();
        match &r.outcome {
            Outcome::Placed(p) => {
                placed += 1;
                let on_estimate = app.channels.iter().any(|c| {
                    let at = |comp: &str| infra.index_of(&p.assignment[comp]).unwrap();
                    infra
                        .link_known(at(&c.from), at(&c.to))
                        .is_some_and(|q| q.is_estimated())
                });
                estimated += on_estimate as usize;
            }
            Outcome::Infeasible(_) => infeasible += 1,
        }
        if app.components.iter().any(|c| c.resources.is_some()) {
            let mut free = app.clone();
            for c in &mut free.components {
                c.resources = None;
            }
            let f = place_on(&infra, &free, &Ledger::new(), &Options::default()).unwrap();
            if let (Outcome::Placed(a), Some(b)) = (
                &f.outcome,
                match &r.outcome {
                    Outcome::Placed(p) => Some(p.feasible_deployments),
                    _ => Some(0),
                },
            ) {
                if b < a.feasible_deployments {
                    cut_by_requests += 1;
                }
            }
        }
        let fan_out = app.paths.iter().any(|p| {
            let froms: Vec<&str> = p
                .channels
                .iter()
                .map(|c| {
                    app.channels
                        .iter()
                        .find(|x| &x.name == c)
                        .unwrap()
                        .from
                        .as_str()
                })
                .collect();
            froms
                .iter()
                .any(|f| froms.iter().filter(|g| *g == f).count() > 1)
        });
        branching += fan_out as usize;
    }
    assert!(placed > 100, "placed {placed}");
    assert!(infeasible > 10, "infeasible {infeasible}");
    assert!(cut_by_requests > 10, "cut by requests {cut_by_requests}");
    assert!(branching > 20, "branching {branching}");
    // (few: one node for everything, on its loopback, is often best)
    assert!(estimated > 5, "placed on an estimated link: {estimated}");
}

/// Every criterion plugin's bound is admissible: for random partial assignments it is at
/// least the best grade over the completions (checked by enumerating them).
#[test]
fn bounds_are_admissible() {
    let mut checked = 0;
    for seed in 0..400u64 {
        let (cluster, app) = generate(seed);
        let infra = Infra::from_cluster(&cluster);
        let ledger = Ledger::new();
        let constraints = filter::default_constraints();
        let model = Model::compile(&infra, &app, &ledger, &constraints);
        if model.comps.iter().any(|c| c.cand.is_empty()) {
            continue;
        }
        let lmin = enumerate::lmin(&app, &model);
        if lmin
            .iter()
            .zip(&app.criteria)
            .any(|(l, c)| l.is_none() && c.kind == CriterionKind::MinE2eResponseTime)
        {
            continue;
        }
        let space = Space::build(&model, model.comps.iter().map(|c| c.cand.clone()).collect());
        let obj = Objective::for_app(&app, &model, &space, &lmin);
        let ctx = Ctx {
            model: &model,
            space: &space,
        };
        let mut r = Rng::new(seed ^ 0xadd);
        for _ in 0..4 {
            let partial: Vec<u32> = model
                .comps
                .iter()
                .map(|c| {
                    if r.chance(0.5) {
                        c.cand[r.below(c.cand.len())]
                    } else {
                        UNSET
                    }
                })
                .collect();
            let restricted: Vec<Vec<u32>> = model
                .comps
                .iter()
                .zip(&partial)
                .map(|(c, p)| {
                    if *p == UNSET {
                        c.cand.clone()
                    } else {
                        vec![*p]
                    }
                })
                .collect();
            let mut best = vec![f64::NEG_INFINITY; obj.crits.len()];
            enumerate::for_each(&restricted, |a| {
                if model.missing_link(a).is_some() {
                    return;
                }
                for (j, c) in obj.crits.iter().enumerate() {
                    best[j] = best[j].max(c.grade(&ctx, a));
                }
            });
            // The prepared child bound equals the child's full bound.
            if let Some(u) = partial.iter().position(|x| *x == UNSET) {
                let node = model.comps[u].cand[r.below(model.comps[u].cand.len())];
                let mut child = partial.clone();
                child[u] = node;
                let links = |a: &[u32]| -> Vec<LinkQ> {
                    model
                        .chans
                        .iter()
                        .map(|c| {
                            if a[c.from] == UNSET || a[c.to] == UNSET {
                                LinkQ {
                                    latency_ms: f64::NAN,
                                    success: f64::NAN,
                                }
                            } else {
                                infra.link(a[c.from], a[c.to]).unwrap_or(LinkQ {
                                    latency_ms: f64::INFINITY,
                                    success: 0.0,
                                })
                            }
                        })
                        .collect()
                };
                let (fp, fc) = (links(&partial), links(&child));
                for c in &obj.crits {
                    let mut state = Vec::new();
                    let parent = Branch {
                        a: &partial,
                        fixed: &fp,
                        comp: u,
                    };
                    c.prepare(&ctx, parent, &mut state);
                    let br = Branch {
                        a: &child,
                        fixed: &fc,
                        comp: u,
                    };
                    let quick = c.child_bound(&ctx, br, node, &state);
                    let full = c.bound(&ctx, &child);
                    assert!(
                        (quick - full).abs() <= 1e-9 * (1.0 + full.abs()),
                        "seed {seed}: {:?} child bound {quick} != full {full}",
                        c.kind()
                    );
                }
            }
            // The quick bound of a child is at least the child's full bound.
            if let Some(u) = partial.iter().position(|x| *x == UNSET) {
                let node = model.comps[u].cand[r.below(model.comps[u].cand.len())];
                let mut child = partial.clone();
                child[u] = node;
                for c in &obj.crits {
                    let quick = c.quick_bound(u, node, c.bound(&ctx, &partial));
                    let full = c.bound(&ctx, &child);
                    assert!(
                        quick >= full - 1e-9,
                        "seed {seed}: quick {quick} < full {full}"
                    );
                }
            }
            for (j, c) in obj.crits.iter().enumerate() {
                let b = c.bound(&ctx, &partial);
                assert!(
                    b >= best[j] - 1e-9,
                    "seed {seed}: criterion {j} ({:?}) bound {b} < best completion {}",
                    c.kind(),
                    best[j]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "checked {checked}");
}
