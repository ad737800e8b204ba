//! What other applications' placements already hold on nodes: resources and containers.

use acoa_shared::model::Resources;
use acoa_shared::wire::MAX_CONTAINERS;
use std::collections::BTreeMap;

/// The most containers one node runs: what a node's desired state carries
/// ([`acoa_shared::wire::MAX_CONTAINERS`]). No placement gives a node more, counting the
/// containers other applications have there ([`Ledger::containers`]).
pub const NODE_CONTAINER_LIMIT: u32 = MAX_CONTAINERS as u32;

/// Per node: resources already reserved by other applications (committed placements the
/// agents may not have reported as usage yet), and how many containers their placements put
/// there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    reserved: BTreeMap<String, Resources>,
    containers: BTreeMap<String, u32>,
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

    /// Adds `n` containers that other applications' placements put on `node`.
    pub fn add_containers(&mut self, node: &str, n: u32) {
        if n == 0 {
            return;
        }
        let e = self.containers.entry(node.to_string()).or_default();
        *e = e.saturating_add(n);
    }

    /// Takes `n` containers back from `node` (never below zero).
    pub fn remove_containers(&mut self, node: &str, n: u32) {
        if let Some(e) = self.containers.get_mut(node) {
            *e = e.saturating_sub(n);
            if *e == 0 {
                self.containers.remove(node);
            }
        }
    }

    /// How many containers other applications' placements put on `node`.
    pub fn containers(&self, node: &str) -> u32 {
        self.containers.get(node).copied().unwrap_or(0)
    }

    /// How many more containers `node` can be given: [`NODE_CONTAINER_LIMIT`] less what
    /// [`Ledger::containers`] counts there (zero when that is already more).
    pub fn container_room(&self, node: &str) -> u32 {
        NODE_CONTAINER_LIMIT.saturating_sub(self.containers(node))
    }

    /// Every node with containers of other applications, in name order.
    pub fn iter_containers(&self) -> impl Iterator<Item = (&str, u32)> {
        self.containers.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Nothing reserved and no containers counted.
    pub fn is_empty(&self) -> bool {
        self.reserved.is_empty() && self.containers.is_empty()
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

    #[test]
    fn containers_are_counted_per_node() {
        let mut l = Ledger::new();
        l.add_containers("n1", 30);
        l.add_containers("n1", 5);
        l.add_containers("n2", 0);
        assert_eq!(l.containers("n1"), 35);
        assert_eq!(l.container_room("n1"), 0);
        assert_eq!(l.container_room("n2"), NODE_CONTAINER_LIMIT);
        assert!(!l.is_empty());
        l.remove_containers("n1", 4);
        assert_eq!(l.container_room("n1"), 1);
        assert_eq!(l.iter_containers().collect::<Vec<_>>(), vec![("n1", 31)]);
        l.remove_containers("n1", 40);
        assert_eq!(l.containers("n1"), 0);
        assert!(l.is_empty());
    }
}
