//! An application's update policy (`update:` in `app.yaml`): how a new revision replaces the
//! running one (batches of components, canaries first, how long a batch must stay healthy,
//! a deadline, automatic rollback, and an optional QoS gate on a named path; `docs/model.md`,
//! "update"). Without it, a new revision replaces the old one on every node at once.

use super::limits::{MAX_UPDATE_BATCH, MAX_UPDATE_S};
use super::ModelError;
use serde::{Deserialize, Serialize};

/// `update.batch_size` when not given.
pub const DEFAULT_BATCH_SIZE: u32 = 1;
/// `update.healthy_s` when not given.
pub const DEFAULT_HEALTHY_S: u32 = 10;
/// `update.deadline_s` when not given.
pub const DEFAULT_DEADLINE_S: u32 = 120;

/// How a new revision is rolled out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Update {
    /// Components changed per batch (after the canaries).
    #[serde(default = "default_batch_size")]
    pub batch_size: u32,
    /// Components in the first batch, alone (0: no canary batch).
    #[serde(default)]
    pub canaries: u32,
    /// Seconds every new copy of a batch must stay running and healthy (and the gate hold)
    /// before the batch counts as done and the old copies stop.
    #[serde(default = "default_healthy_s")]
    pub healthy_s: u32,
    /// Seconds from a batch's start by which it must be done; past it the rollout failed.
    #[serde(default = "default_deadline_s")]
    pub deadline_s: u32,
    /// Whether a failed rollout goes back to the last good revision by itself (else it
    /// stops where it is until `cloud-broker rollback` or a new definition).
    #[serde(default = "default_true")]
    pub auto_rollback: bool,
    /// A QoS bound that must hold for the healthy time of every batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
}

/// The QoS gate: the measured latency (and/or reliability) of path `path` must stay within
/// the bounds given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reliability: Option<f64>,
}

fn default_batch_size() -> u32 {
    DEFAULT_BATCH_SIZE
}

fn default_healthy_s() -> u32 {
    DEFAULT_HEALTHY_S
}

fn default_deadline_s() -> u32 {
    DEFAULT_DEADLINE_S
}

fn default_true() -> bool {
    true
}

impl Default for Update {
    fn default() -> Self {
        Update {
            batch_size: DEFAULT_BATCH_SIZE,
            canaries: 0,
            healthy_s: DEFAULT_HEALTHY_S,
            deadline_s: DEFAULT_DEADLINE_S,
            auto_rollback: true,
            gate: None,
        }
    }
}

impl Update {
    /// Checks the block; `has_path` says whether the application has a path of that name.
    pub fn validate(&self, has_path: impl Fn(&str) -> bool) -> Result<(), ModelError> {
        if !(1..=MAX_UPDATE_BATCH).contains(&self.batch_size) {
            return Err(ModelError::new(
                "update.batch_size",
                format!("{} is outside 1 to {MAX_UPDATE_BATCH}", self.batch_size),
            ));
        }
        if self.canaries > MAX_UPDATE_BATCH {
            return Err(ModelError::new(
                "update.canaries",
                format!("{} is more than {MAX_UPDATE_BATCH}", self.canaries),
            ));
        }
        if self.healthy_s > MAX_UPDATE_S {
            return Err(ModelError::new(
                "update.healthy_s",
                format!("{} s is more than {MAX_UPDATE_S} s", self.healthy_s),
            ));
        }
        if !(1..=MAX_UPDATE_S).contains(&self.deadline_s) {
            return Err(ModelError::new(
                "update.deadline_s",
                format!("{} s is outside 1 to {MAX_UPDATE_S} s", self.deadline_s),
            ));
        }
        if self.deadline_s <= self.healthy_s {
            return Err(ModelError::new(
                "update.deadline_s",
                format!(
                    "{} s leaves no time to start: it must be longer than healthy_s, {} s",
                    self.deadline_s, self.healthy_s
                ),
            ));
        }
        if let Some(g) = &self.gate {
            if !has_path(&g.path) {
                return Err(ModelError::new(
                    "update.gate.path",
                    format!("path `{}` does not exist", g.path),
                ));
            }
            if g.max_latency_ms.is_none() && g.min_reliability.is_none() {
                return Err(ModelError::new(
                    "update.gate",
                    "needs max_latency_ms, min_reliability or both",
                ));
            }
            if let Some(l) = g.max_latency_ms {
                if !(l.is_finite() && l > 0.0) {
                    return Err(ModelError::new(
                        "update.gate.max_latency_ms",
                        format!("must be a finite number > 0, got {l}"),
                    ));
                }
            }
            if let Some(r) = g.min_reliability {
                if !(r > 0.0 && r <= 1.0) {
                    return Err(ModelError::new(
                        "update.gate.min_reliability",
                        format!("must be above 0 and at most 1, got {r}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<crate::model::Application, ModelError> {
        crate::model::parse_application(&format!(
            "application: a\ncomponents:\n  - {{name: s, image: 'i:1'}}\n  - {{name: t, image: 'i:1'}}\nchannels:\n  - {{name: c, from: s, to: t}}\npaths:\n  - {{name: alarm, channels: [c]}}\n{yaml}"
        ))
    }

    #[test]
    fn defaults_apply_and_an_application_without_the_block_has_none() {
        let a = parse("").unwrap();
        assert_eq!(a.update, None);
        let a = parse("update: {}\n").unwrap();
        assert_eq!(a.update, Some(Update::default()));
        let a = parse("update: {batch_size: 2, canaries: 1, healthy_s: 5, deadline_s: 60, auto_rollback: false, gate: {path: alarm, max_latency_ms: 50}}\n").unwrap();
        let u = a.update.unwrap();
        assert_eq!(
            (u.batch_size, u.canaries, u.healthy_s, u.deadline_s),
            (2, 1, 5, 60)
        );
        assert!(!u.auto_rollback);
        assert_eq!(u.gate.unwrap().max_latency_ms, Some(50.0));
    }

    #[test]
    fn a_wrong_field_is_named() {
        for (yaml, field, says) in [
            (
                "update: {batch_size: 0}",
                "update.batch_size",
                "outside 1 to",
            ),
            ("update: {canaries: 100000}", "update.canaries", "more than"),
            (
                "update: {deadline_s: 0}",
                "update.deadline_s",
                "outside 1 to",
            ),
            (
                "update: {healthy_s: 30, deadline_s: 30}",
                "update.deadline_s",
                "longer than healthy_s",
            ),
            (
                "update: {gate: {path: nope, max_latency_ms: 5}}",
                "update.gate.path",
                "path `nope` does not exist",
            ),
            (
                "update: {gate: {path: alarm}}",
                "update.gate",
                "needs max_latency_ms",
            ),
            (
                "update: {gate: {path: alarm, max_latency_ms: -1}}",
                "update.gate.max_latency_ms",
                "finite number > 0",
            ),
            (
                "update: {gate: {path: alarm, min_reliability: 1.5}}",
                "update.gate.min_reliability",
                "at most 1",
            ),
        ] {
            let e = parse(&format!("{yaml}\n")).unwrap_err();
            assert_eq!(e.field, field, "{yaml}: {e}");
            assert!(e.reason.contains(says), "{yaml}: {e}");
        }
        assert!(
            parse("update: {batch: 2}\n").is_err(),
            "unknown fields are refused"
        );
    }
}
