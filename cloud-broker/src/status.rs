//! The application status document, JSON on `acoa/v1/apps/{app}/status` (retained).

use std::collections::BTreeMap;

use acoa_shared::model::CriterionKind;
use serde::{Deserialize, Serialize};

/// One criterion's grade in a placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeRecord {
    #[serde(rename = "type")]
    pub kind: CriterionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    pub weight: f64,
    pub grade: f64,
}

/// A placement as the control plane keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// component → node
    pub assignment: BTreeMap<String, String>,
    pub score: f64,
    pub criteria: Vec<GradeRecord>,
    pub feasible_deployments: u128,
}

/// A component that is placed but not (yet) running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRunning {
    pub component: String,
    pub node: String,
    /// `pending` (also while its node has not reported on the spec it was last given),
    /// `exited`, `failed`, `refused`, or `unknown` when the node has not said.
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// `state` is one of `accepted`, `rejected`, `unplaced` (valid, but no feasible placement now),
/// `placed` (desired states published, not every component runs yet), `running`, `refused`
/// (held, not applied: the control plane's store cannot write; applied once it can).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    pub application: String,
    pub state: String,
    /// FNV-1a 64 of the definition this status is about, so that a client can wait for its own.
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub criteria: Vec<GradeRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feasible_deployments: Option<u128>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_running: Vec<NotRunning>,
    /// What the components were measured to use at run time (CPU, memory, traffic between
    /// components; see `observed`), rounded; absent before anything is measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<acoa_shared::model::Observed>,
    /// The disconnect policy at work: components waiting on unreachable nodes, and which copy
    /// stayed when a node returned, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disconnect: Vec<String>,
    /// The health its agent reports of each running component that has a health check
    /// (`starting`, `healthy`, `unhealthy`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub health: BTreeMap<String, String>,
    /// Each channel of the placement: `measured` (its nodes' link is probed), `estimated` (from
    /// network coordinates, being probed now: targeted probes) or `local` (one node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, String>,
    /// The revision that runs (the last good one while a rollout is under way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The revisions kept, oldest first (`cloud-broker history`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionLine>,
    /// The rollout under way, or the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::engine::update::RolloutStatus>,
}

/// One kept revision in a status document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionLine {
    pub number: u64,
    pub digest: String,
    /// Why it does not run (rolled back), when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl AppStatus {
    pub fn new(application: &str, state: &str, digest: &str) -> AppStatus {
        AppStatus {
            application: application.into(),
            state: state.into(),
            digest: digest.into(),
            reason: None,
            placement: None,
            score: None,
            criteria: vec![],
            feasible_deployments: None,
            running: vec![],
            not_running: vec![],
            observed: None,
            disconnect: vec![],
            health: BTreeMap::new(),
            links: BTreeMap::new(),
            revision: None,
            revisions: vec![],
            rollout: None,
        }
    }
}

/// FNV-1a 64 of `bytes`, 16 hex digits: identifies a definition's text.
pub fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}
