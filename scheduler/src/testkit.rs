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
