//! The records the control plane keeps across restarts, and the operations that change them:
//! the vocabulary shared by the pure decisions ([`crate::engine`], which emits [`PersistOp`]s
//! and starts from a [`Snapshot`]) and the stores that make them durable ([`crate::store`]).
//!
//! Invariants: plain values (no I/O); every record names itself (an application or a node), so
//! that a store can keep one record per name.

use std::collections::BTreeMap;

use acoa_shared::model::{Application, Capacity, Layer};
use acoa_shared::wire::{DesiredState, NodeReport};
use serde::{Deserialize, Serialize};

use crate::status::PlacementRecord;

/// The static properties a node reported last (persisted when they change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    pub datacenter: String,
    pub layer: Layer,
    pub arch: String,
    pub hardware: Vec<String>,
    pub software: Vec<String>,
    pub capacity: Capacity,
    pub probe_addr: String,
}

impl NodeInfo {
    pub fn from_report(r: &NodeReport) -> NodeInfo {
        NodeInfo {
            name: r.node.to_string(),
            datacenter: r.datacenter.to_string(),
            layer: r.layer,
            arch: r.arch.to_string(),
            hardware: r.hardware.iter().map(|s| s.to_string()).collect(),
            software: r.software.iter().map(|s| s.to_string()).collect(),
            capacity: Capacity {
                cpu_millis: r.capacity.cpu_millis,
                memory_mb: r.capacity.memory_mb,
                disk_mb: r.capacity.disk_mb,
                ..Default::default()
            },
            probe_addr: r.probe_addr.to_string(),
        }
    }
}

/// An accepted application, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppRecord {
    pub name: String,
    /// The definition's text as published.
    pub definition: String,
    pub digest: String,
    pub application: Application,
    #[serde(default)]
    pub placement: Option<PlacementRecord>,
}

/// Counters that must survive a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub peer_generation: u64,
}

/// Everything the control plane keeps across restarts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub apps: BTreeMap<String, AppRecord>,
    pub desired: BTreeMap<String, DesiredState>,
    pub nodes: BTreeMap<String, NodeInfo>,
    pub meta: Meta,
}

/// What the engine asks to be made durable, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum PersistOp {
    PutApp(Box<AppRecord>),
    DeleteApp(String),
    PutDesired(Box<DesiredState>),
    PutNode(Box<NodeInfo>),
    PutMeta(Meta),
}
