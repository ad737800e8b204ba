//! The workloads' own service times per message (wire v6 [`ServiceSample`]), per running
//! container: what a rollout's gate adds to the network latency of its path. Kept per
//! `(node, container)`, not per component: while a rollout runs a new copy beside the old one,
//! each copy's measurement stays its own (the gate reads the copy that serves).
//!
//! Pure and bounded: a node's usage message is the complete list of its containers (at most
//! `MAX_CONTAINERS` per node), so a node holds at most that many entries; entries of a lost node,
//! or not refreshed for `max_age_ms`, are dropped.

use std::collections::BTreeMap;

use acoa_shared::wire::{ComponentUsage, ServiceSample};

#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry {
    mean_ms: f64,
    at: u64,
}

/// The service times of the running containers (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct ServiceTimes {
    /// (node, container) → the last mean its workload reported.
    entries: BTreeMap<(String, String), Entry>,
}

impl ServiceTimes {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Folds one verified message of a node at `now`: its containers that report a service time
    /// (a sane one: [`ServiceSample::checked_ms`]) replace what the node reported before.
    pub fn fold(&mut self, now: u64, u: &ComponentUsage) {
        let node = u.node.as_str();
        self.forget_node(node);
        for s in &u.components {
            if let Some(mean_ms) = s.service.as_ref().and_then(ServiceSample::checked_ms) {
                self.entries.insert(
                    (node.to_string(), s.container.to_string()),
                    Entry { mean_ms, at: now },
                );
            }
        }
    }

    /// The service time the workload in `container` on `node` reported last, ms.
    pub fn get(&self, node: &str, container: &str) -> Option<f64> {
        self.entries
            .get(&(node.to_string(), container.to_string()))
            .map(|e| e.mean_ms)
    }

    /// Forgets what `node` reported (it is lost, or sent its complete list again).
    pub fn forget_node(&mut self, node: &str) {
        self.entries.retain(|(n, _), _| n != node);
    }

    /// Drops entries not refreshed for `max_age_ms`.
    pub fn expire(&mut self, now: u64, max_age_ms: u64) {
        self.entries
            .retain(|_, e| now.saturating_sub(e.at) <= max_age_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::wire::{self, ComponentSample};

    fn usage(node: &str, samples: &[(&str, Option<f32>)]) -> ComponentUsage {
        ComponentUsage {
            node: wire::name(node).unwrap(),
            seq: 1,
            run: 1,
            period_ms: 1000,
            components: samples
                .iter()
                .map(|(container, ms)| ComponentSample {
                    app: wire::name("app").unwrap(),
                    component: wire::name("a").unwrap(),
                    container: wire::name(container).unwrap(),
                    cpu_millis: None,
                    memory_mb: None,
                    traffic: Default::default(),
                    service: ms.map(|mean_ms| ServiceSample {
                        mean_ms,
                        messages: 10,
                    }),
                })
                .collect(),
        }
    }

    #[test]
    fn each_copy_keeps_its_own_service_time_and_a_node_reports_all_of_its_own() {
        let mut t = ServiceTimes::new();
        t.fold(
            0,
            &usage("n1", &[("app.a", Some(0.5)), ("app.a.r2", Some(60.0))]),
        );
        t.fold(0, &usage("n2", &[("app.a", Some(2.0))]));
        assert_eq!(t.get("n1", "app.a"), Some(0.5));
        assert_eq!(t.get("n1", "app.a.r2"), Some(60.0));
        assert_eq!(t.get("n2", "app.a"), Some(2.0));
        // the old copy stopped: absent from the node's next message
        t.fold(1000, &usage("n1", &[("app.a.r2", Some(61.0))]));
        assert_eq!(t.get("n1", "app.a"), None);
        assert_eq!(t.get("n1", "app.a.r2"), Some(61.0));
        // nothing said, or nonsense: nothing kept
        t.fold(
            2000,
            &usage("n1", &[("app.a.r2", None), ("app.b", Some(f32::NAN))]),
        );
        assert!(t.get("n1", "app.a.r2").is_none() && t.get("n1", "app.b").is_none());
        t.fold(2000, &usage("n1", &[("app.a", Some(-1.0))]));
        assert_eq!(t.get("n1", "app.a"), None);
        // old entries expire; a lost node's go
        t.expire(10_000, 5_000);
        assert!(t.is_empty());
        t.fold(0, &usage("n2", &[("app.a", Some(2.0))]));
        t.forget_node("n2");
        assert_eq!(t.len(), 0);
    }
}
