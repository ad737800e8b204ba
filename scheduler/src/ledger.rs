//! Resources already reserved on nodes by other applications' placements.

use acoa_shared::model::Resources;
use std::collections::BTreeMap;

/// Per node: resources already reserved by other applications (committed placements the
/// agents may not have reported as usage yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    reserved: BTreeMap<String, Resources>,
}

impl Ledger {
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Adds `r` to what is reserved on `node`.
    pub fn reserve(&mut self, node: &str, r: Resources) {
        let e = self.reserved.entry(node.to_string()).or_default();
        e.cpu_millis = e.cpu_millis.saturating_add(r.cpu_millis);
        e.memory_mb = e.memory_mb.saturating_add(r.memory_mb);
    }

    /// Takes `r` back from what is reserved on `node` (never below zero).
    pub fn release(&mut self, node: &str, r: Resources) {
        if let Some(e) = self.reserved.get_mut(node) {
            e.cpu_millis = e.cpu_millis.saturating_sub(r.cpu_millis);
            e.memory_mb = e.memory_mb.saturating_sub(r.memory_mb);
            if e.cpu_millis == 0 && e.memory_mb == 0 {
                self.reserved.remove(node);
            }
        }
    }

    /// What is reserved on `node` (zero when nothing is).
    pub fn reserved(&self, node: &str) -> Resources {
        self.reserved.get(node).copied().unwrap_or_default()
    }

    /// Every node with a reservation, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Resources)> {
        self.reserved.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.reserved.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_and_release() {
        let mut l = Ledger::new();
        let r = Resources {
            cpu_millis: 100,
            memory_mb: 64,
            ..Default::default()
        };
        l.reserve("n1", r);
        l.reserve("n1", r);
        assert_eq!(l.reserved("n1").cpu_millis, 200);
        l.release("n1", r);
        assert_eq!(l.reserved("n1").memory_mb, 64);
        l.release("n1", r);
        l.release("n1", r);
        assert_eq!(l.reserved("n1"), Resources::default());
        assert!(l.is_empty());
        assert_eq!(l.reserved("nx"), Resources::default());
    }
}
