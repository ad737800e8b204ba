//! A rollout as the application's status document shows it (`cloud-broker status`, `history`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Phase, Rollout, StepState};

impl Rollout {
    /// The rollout as the application's status shows it.
    pub fn status(&self) -> RolloutStatus {
        let (phase, reason) = match &self.phase {
            Phase::Rolling => ("rolling", None),
            Phase::Failed { reason } => ("failed", Some(reason.clone())),
            Phase::RollingBack { reason } => ("rolling-back", Some(reason.clone())),
            Phase::Done => ("done", None),
            Phase::RolledBack { reason } => ("rolled-back", Some(reason.clone())),
        };
        RolloutStatus {
            from: self.from,
            to: self.to,
            phase: phase.into(),
            batch: format!("{}/{}", self.batch + 1, self.batches),
            components: self
                .steps
                .iter()
                .map(|s| {
                    let st = match s.state {
                        StepState::Waiting => "waiting",
                        StepState::Surge => "new beside old",
                        StepState::Replaced => "old stopped first",
                        StepState::Done => "done",
                        StepState::Deferred => "deferred (node offline)",
                    };
                    (s.component.clone(), st.to_string())
                })
                .collect(),
            waiting: self.waiting.clone(),
            gate: self.gate_reading.clone(),
            reason,
        }
    }
}

/// A rollout in an application's status document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatus {
    pub from: u64,
    pub to: u64,
    /// `rolling`, `failed`, `rolling-back`, `done`, `rolled-back`.
    pub phase: String,
    /// The running batch and how many there are: `2/3`.
    pub batch: String,
    /// Per component it changes: `waiting`, `new beside old`, `old stopped first`, `done`,
    /// `deferred (node offline)`.
    pub components: BTreeMap<String, String>,
    /// What the running batch (or the rollback) waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// The gate's last reading: the path's latency as the gate adds it up (network latency
    /// plus the service times the workloads report) against its bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// Why it failed or was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
