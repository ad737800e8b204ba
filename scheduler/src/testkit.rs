//! What the library's unit tests share.

use acoa_shared::model::{Capacity, Layer, Node, Usage};

/// An aarch64 edge node named `name` in datacenter `dc`, nothing used, no capacity declared.
pub(crate) fn edge_node(name: String, dc: &str) -> Node {
    Node {
        name,
        datacenter: dc.into(),
        layer: Layer::Edge,
        arch: "aarch64".into(),
        hardware: vec![],
        software: vec![],
        capacity: Capacity::default(),
        usage: Usage::default(),
        position: None,
    }
}

/// Estimates for every one of `nodes`: a random coordinate in a 100 × 100 × 10 ms box and a
/// height of `least_height_ms` plus up to 2 ms, jitter 1 ms, success 0.99 (drawn from `r` in
/// the nodes' order: position, then height).
pub(crate) fn random_estimates(
    nodes: &[Node],
    r: &mut crate::rng::SplitMix64,
    least_height_ms: f64,
) -> acoa_shared::model::LinkEstimates {
    use acoa_shared::model::{CoordDoc, EstimatedNode};
    let mut est = acoa_shared::model::LinkEstimates::default();
    for x in nodes {
        let coord = CoordDoc {
            position: [100.0 * r.unit(), 100.0 * r.unit(), 10.0 * r.unit()],
            height_ms: least_height_ms + 2.0 * r.unit(),
            error: 0.1,
        };
        let e = EstimatedNode {
            coord: Some(coord),
            median_jitter_ms: 1.0,
            median_success: 0.99,
        };
        est.nodes.insert(x.name.clone(), e);
    }
    est
}

/// A chain of `k` components `c0`..: channels `h1`.. between neighbours, one path `p` along
/// them and its response time the only criterion; component `c` requires `requires(c)`.
pub(crate) fn chain_app(
    k: usize,
    requires: impl Fn(usize) -> &'static str,
) -> acoa_shared::model::Application {
    let mut y = "application: t\ncomponents:\n".to_string();
    for c in 0..k {
        y += &format!("- {{name: c{c}, image: i, requires: {}}}\n", requires(c));
    }
    y += "channels:\n";
    for c in 1..k {
        y += &format!("- {{name: h{c}, from: c{}, to: c{c}}}\n", c - 1);
    }
    let hops: Vec<String> = (1..k).map(|c| format!("h{c}")).collect();
    y += &format!(
        "paths:\n- {{name: p, channels: [{}]}}\ncriteria:\n- {{type: min-e2e-response-time, path: p, weight: 1.0}}\n",
        hops.join(", ")
    );
    acoa_shared::model::parse_application(&y).expect("a valid chain")
}
