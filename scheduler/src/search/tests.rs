//! The search's unit tests on plain values.

use super::*;
use crate::filter;
use crate::infra::Infra;
use crate::ledger::Ledger;
use crate::rng::SplitMix64;

/// A chain of `k` components on `n` nodes that all have a coordinate (every pair has an
/// estimated link): each node of the search bounds a domain of `n` children.
fn chain_on_estimates(k: usize, n: usize) -> (Infra, acoa_shared::model::Application) {
    let mut r = SplitMix64::new(7);
    let nodes: Vec<_> = (0..n)
        .map(|i| crate::testkit::edge_node(format!("n{i:05}"), &format!("d{}", i / 10)))
        .collect();
    let est = crate::testkit::random_estimates(&nodes, &mut r, 0.0);
    let infra = Infra::new(nodes, []).with_estimates(&est);
    (infra, crate::testkit::chain_app(k, |_| "{}"))
}

/// Past its deadline, a search stops within the node it is bounding once it holds a
/// deployment, not at the next 64th node: on a large fleet each node bounds the whole
/// fleet, and 64 of them outlast a budget by far (a 20-component placement at 50,000
/// nodes ran 100-250 ms over its 500 ms). Its first descent still ends in a deployment,
/// and its upper bound still holds the children it did not bound.
#[test]
fn a_search_past_its_deadline_stops_within_a_node() {
    let (k, n) = (8, 3000);
    let (infra, app) = chain_on_estimates(k, n);
    let model = Model::compile(&infra, &app, &Ledger::new(), &filter::default_constraints());
    let cand = model.comps.iter().map(|c| c.cand.clone()).collect();
    let space = Space::build_consistent(&model, cand).unwrap();
    let obj = Objective::for_app(&app, &model, &space, &[Some(1.0)]);
    let work = |f: &Found| f.bounded + f.quick_cut;
    // what a check every 64th node alone allows: 64 nodes of n children each
    let per_node = branch_and_bound(
        &model,
        &space,
        &obj,
        None,
        Limits {
            deadline: None,
            max_nodes: Some(64),
        },
    );
    assert!(work(&per_node) > 12 * n as u64, "{}", work(&per_node));
    let late = branch_and_bound(
        &model,
        &space,
        &obj,
        None,
        Limits {
            deadline: Some(Instant::now()),
            max_nodes: None,
        },
    );
    let (_, score) = late
        .best
        .clone()
        .expect("the first descent ends in a deployment");
    assert!(!late.proven);
    // the first descent (k nodes of n children), then at most 4,096 more children
    assert!(
        work(&late) <= (k * n + 4096) as u64,
        "{} children looked at",
        work(&late)
    );
    assert!(late.upper_bound >= score);
    assert!(late.upper_bound >= per_node.best.expect("a deployment").1 - 1e-9);
}
