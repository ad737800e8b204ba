//! The peers a node probes: a bounded neighbour set, built by the control plane for each node's
//! peer list.
//!
//! At most `k` peers, in this order:
//! 1. its own group (datacenter, train), at most [`NeighbourMix::group_max`] of them (drawn at
//!    random when the group is larger): the links placement uses most, measured directly;
//! 2. the nearest others by coordinates (predicted latency `|x_i - x_j| + h_j`), which Vivaldi
//!    needs to place a node precisely among its neighbours;
//! 3. [`NeighbourMix::random`] others drawn uniformly (half of the slots the group leaves), which keep the global layout right (with
//!    near neighbours only, regions of the map drift against one another) and let the set
//!    change as coordinates improve.
//!
//! Nodes without a coordinate yet (new ones, or when `me` has none) only take random slots.
//! Deterministic: the same members, `k`, mix and seed give the same list. The cost is one scan
//! of the members per node (O(n log k)); for a whole fleet O(n^2), a fraction of a second at
//! 10,000 nodes (`coords-sim`).

use super::vivaldi::Coord;
use super::SplitMix64;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One node as the selection sees it.
#[derive(Debug, Clone)]
pub struct Member<G, const D: usize> {
    /// Its group (datacenter or train): members of one group are probed first.
    pub group: G,
    /// Its reported coordinate, if any.
    pub coord: Option<Coord<D>>,
}

/// How the `k` slots are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourMix {
    /// At most this many peers of the node's own group.
    pub group_max: usize,
    /// This many random peers (fewer if there are fewer others).
    pub random: usize,
}

impl NeighbourMix {
    /// The default mix for `k` slots: at most a quarter for the group, then half of the rest
    /// (at least one) random, the other half nearest. Measured (`coords-sim`, 2,000 nodes,
    /// median relative error): with k = 8 (two group slots) one random slot gave 15.1 %, two
    /// 11.8 %, three (this mix) 10.9 %, four 10.4 %, all six 11.8 %; with k = 32, four 6.9 %,
    /// twelve (this mix) 6.3 %. Vivaldi needs both: near peers place a node precisely among
    /// its neighbours, far ones keep the regions of the map in place.
    pub fn for_k(k: usize) -> Self {
        let group_max = k / 4;
        NeighbourMix {
            group_max,
            random: ((k - group_max) / 2).max(1).min(k),
        }
    }
}

#[derive(PartialEq)]
struct Far(f64, usize);

impl Eq for Far {}

impl PartialOrd for Far {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Far {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The peers of `members[me]`: indices into `members`, never `me`, no repeats, at most `k`.
pub fn select_neighbours<G: PartialEq, const D: usize>(
    me: usize,
    members: &[Member<G, D>],
    k: usize,
    mix: NeighbourMix,
    seed: u64,
) -> Vec<usize> {
    let Some(mine) = members.get(me) else {
        return Vec::new();
    };
    let mut rng = SplitMix64::new(seed ^ (me as u64).wrapping_mul(0xD134_2543_DE82_EF95));
    let mut chosen: Vec<usize> = Vec::with_capacity(k);

    // 1. Own group, a random subset when it is larger than its share.
    let mut group: Vec<usize> = (0..members.len())
        .filter(|&j| j != me && members[j].group == mine.group)
        .collect();
    let take = mix.group_max.min(k).min(group.len());
    for i in 0..take {
        let j = i + rng.below(group.len() - i);
        group.swap(i, j);
    }
    chosen.extend_from_slice(&group[..take]);

    // 2. Nearest others by coordinates.
    let others = members.len() - 1 - group.len();
    let random = mix.random.min(k - chosen.len()).min(others);
    let near = k - chosen.len() - random;
    if let (Some(c), true) = (&mine.coord, near > 0) {
        let mut heap: BinaryHeap<Far> = BinaryHeap::with_capacity(near + 1);
        for (j, m) in members.iter().enumerate() {
            if j == me || m.group == mine.group {
                continue;
            }
            let Some(o) = &m.coord else { continue };
            let d = c.euclid(o) + o.height();
            if heap.len() < near {
                heap.push(Far(d, j));
            } else if heap.peek().is_some_and(|f| Far(d, j) < *f) {
                heap.pop();
                heap.push(Far(d, j));
            }
        }
        let mut nearest = heap.into_vec();
        nearest.sort();
        chosen.extend(nearest.into_iter().map(|f| f.1));
    }

    // 3. Random others to fill up to k (the random share, plus nearest slots left empty).
    let want = k.min(take + others);
    let mut tries = 0;
    while chosen.len() < want && tries < 64 * k {
        tries += 1;
        let j = rng.below(members.len());
        if j != me && members[j].group != mine.group && !chosen.contains(&j) {
            chosen.push(j);
        }
    }
    if chosen.len() < want {
        // Few others, or unlucky draws: the first ones not yet chosen.
        for (j, m) in members.iter().enumerate() {
            if chosen.len() >= want {
                break;
            }
            if j != me && m.group != mine.group && !chosen.contains(&j) {
                chosen.push(j);
            }
        }
    }
    chosen
}
