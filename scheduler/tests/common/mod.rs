//! Small clusters and applications built in code.
#![allow(dead_code)]

use acoa_shared::model::{
    AppPath, Capacity, Channel, Cluster, Component, Criterion, CriterionKind, Layer, Link, Node,
    Requirements, Resources, Usage,
};

pub fn node(name: &str, dc: &str, hardware: &[&str]) -> Node {
    Node {
        name: name.into(),
        datacenter: dc.into(),
        layer: Layer::Edge,
        arch: "aarch64".into(),
        hardware: hardware.iter().map(|s| s.to_string()).collect(),
        software: vec![],
        capacity: Capacity {
            cpu_millis: 1000,
            memory_mb: 1000,
            disk_mb: 10_000,
            ..Default::default()
        },
        usage: Usage::default(),
        position: None,
    }
}

pub fn link(from: &str, to: &str, latency_ms: f64, success: f64) -> Link {
    Link {
        from: from.into(),
        to: to.into(),
        latency_ms,
        jitter_ms: 0.0,
        success,
    }
}

pub fn cluster(nodes: Vec<Node>, links: Vec<Link>) -> Cluster {
    Cluster {
        cluster: "test".into(),
        datacenters: vec![],
        nodes,
        links,
        ..Default::default()
    }
}

pub fn comp(name: &str, hardware: &[&str], resources: Option<(u64, u64)>) -> Component {
    Component {
        name: name.into(),
        image: format!("localhost/acoa/{name}:1"),
        requires: Requirements {
            hardware: hardware.iter().map(|s| s.to_string()).collect(),
            ..Requirements::default()
        },
        resources: resources.map(|(cpu_millis, memory_mb)| Resources {
            cpu_millis,
            memory_mb,
            ..Default::default()
        }),
        health: None,
    }
}

pub fn chan(name: &str, from: &str, to: &str) -> Channel {
    Channel {
        name: name.into(),
        from: from.into(),
        to: to.into(),
    }
}

pub fn path(name: &str, channels: &[&str]) -> AppPath {
    AppPath {
        name: name.into(),
        channels: channels.iter().map(|s| s.to_string()).collect(),
    }
}

pub fn crit(kind: CriterionKind, target: &str, weight: f64) -> Criterion {
    let on_path = kind.targets_path();
    Criterion {
        kind,
        path: on_path.then(|| target.to_string()),
        component: (!on_path).then(|| target.to_string()),
        weight,
    }
}

/// An application of these parts for the `qos` scheduler.
pub use acoa_scheduler::qos::application as app;
