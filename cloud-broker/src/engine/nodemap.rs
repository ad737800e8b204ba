//! The live nodes by name ([`NodeMap`]): in name order, so that every pass over the fleet and
//! what is derived from it stay deterministic, with a hashed index of the names for the
//! lookups of the hot path.
//!
//! Why: a link report names up to 64 peers and each is looked up to know whether the control
//! plane knows it. In a B-tree of 50,000 names that is about 16 name comparisons, each a
//! cache miss; in the join of a 50,000-node fleet those lookups were a fifth of the decision
//! loop's time (BENCHMARKS.md, "Peer lists off the loop").
//!
//! Invariant: the index holds exactly the map's names (every insertion and removal goes
//! through [`NodeMap::insert`] and [`NodeMap::remove`]; the map is read through `Deref`).

use std::collections::{BTreeMap, HashSet};
use std::ops::Deref;

use super::inventory::LiveNode;

#[derive(Debug, Default)]
pub(super) struct NodeMap {
    sorted: BTreeMap<String, LiveNode>,
    names: HashSet<Box<str>, foldhash::fast::RandomState>,
}

impl NodeMap {
    pub(super) fn insert(&mut self, name: String, node: LiveNode) -> Option<LiveNode> {
        self.names.insert(name.as_str().into());
        self.sorted.insert(name, node)
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<LiveNode> {
        self.names.remove(name);
        self.sorted.remove(name)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut LiveNode> {
        self.sorted.get_mut(name)
    }

    /// Whether `name` is a node of the inventory: one hashed lookup.
    pub(super) fn contains_key(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}

impl Deref for NodeMap {
    type Target = BTreeMap<String, LiveNode>;

    fn deref(&self) -> &Self::Target {
        &self.sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::liveness::NodeState;
    use crate::records::NodeInfo;
    use crate::testkit::{engine::railway, report_of};

    fn live(name: &str) -> LiveNode {
        let mut m = railway().nodes[0].clone();
        m.name = name.into();
        LiveNode {
            info: NodeInfo::from_report(&report_of(&m, 1, "127.0.0.1:1")),
            usage: Default::default(),
            last_seen: 0,
            online: true,
            state: NodeState::Online,
            unreachable_since: None,
        }
    }

    #[test]
    fn the_index_holds_exactly_the_names_of_the_map() {
        let names: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
        let mut m = NodeMap::default();
        let mut rng = 0x16u64;
        for step in 0..2_000 {
            // a simple LCG: the same sequence of insertions and removals every run
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let name = &names[(rng >> 33) as usize % names.len()];
            if (rng >> 20).is_multiple_of(3) {
                m.remove(name);
            } else {
                m.insert(name.clone(), live(name));
            }
            for n in &names {
                assert_eq!(
                    m.contains_key(n),
                    m.sorted.contains_key(n),
                    "{n} at step {step}"
                );
            }
            assert_eq!(m.names.len(), m.len());
        }
        // read through the map, in name order
        let keys: Vec<&String> = m.keys().collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
    }
}
