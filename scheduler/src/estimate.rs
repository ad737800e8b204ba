//! Links of the pairs nobody measured (issue 16): the [`Estimator`] of an [`crate::Infra`]
//! answers any pair from O(nodes) values (each node's coordinate and measured-link medians,
//! each datacenter's median internal latency), by the one rule of
//! `acoa_shared::coords::LinkView::of_pair`, so the scheduler never holds n^2 links.
//!
//! Why a struct of those values and not a trait object: the search needs more than point
//! look-ups. Its bounds take a minimum or maximum over a whole candidate set, which over
//! n^2 estimated pairs would cost n^2; the estimate's form gives a per-node *half*
//! ([`Estimator::half`]) whose sum bounds every estimated latency from below and whose
//! product bounds every estimated success rate from above, so those bounds cost O(n) and stay
//! admissible (the proofs of optimality hold on estimated links too). A trait object could
//! not promise that.

use crate::infra::{FxMap, LinkQ};
use acoa_shared::coords::{Coord, EndpointSummary, LinkView, DIMS};
use acoa_shared::model::{LinkEstimates, Node};
use std::collections::HashMap;

/// The estimates of an [`crate::Infra`]'s unmeasured pairs, indexed like its nodes.
#[derive(Debug, Clone)]
pub struct Estimator {
    coord: Vec<Option<Coord<DIMS>>>,
    ends: Vec<Option<EndpointSummary>>,
    /// Datacenter index per node.
    group: Vec<u32>,
    /// Per datacenter index: its median measured internal latency.
    group_ms: Vec<Option<f64>>,
    /// Per node: see [`Estimator::half`].
    half: Vec<Option<LinkQ>>,
}

/// How many nodes of a set can be the far end of an estimated link, for
/// [`Estimator::supports`] (counted once per set, so that asking is O(1)).
#[derive(Debug, Default)]
pub struct EstSet {
    /// Nodes with a coordinate and measured-link medians.
    full: u32,
    /// Per datacenter index: nodes with measured-link medians.
    per_group: FxMap<u32, u32>,
}

impl Estimator {
    /// From the snapshot's estimates, for `nodes` in the [`crate::Infra`]'s order.
    pub fn new(nodes: &[Node], est: &LinkEstimates) -> Estimator {
        let mut groups: HashMap<&str, u32> = HashMap::new();
        let mut group = Vec::with_capacity(nodes.len());
        for n in nodes {
            let next = groups.len() as u32;
            group.push(*groups.entry(n.datacenter.as_str()).or_insert(next));
        }
        let mut group_ms = vec![None; groups.len()];
        for (g, i) in &groups {
            group_ms[*i as usize] = est.groups.get(*g).copied().filter(|x| x.is_finite());
        }
        let mut coord = Vec::with_capacity(nodes.len());
        let mut ends = Vec::with_capacity(nodes.len());
        for n in nodes {
            let e = est.nodes.get(&n.name);
            coord.push(e.and_then(|e| e.coord.as_ref()?.coord()));
            ends.push(e.map(|e| e.summary()));
        }
        let half = (0..nodes.len())
            .map(|i| {
                let s = ends[i]?;
                let by_coord = coord[i].map(|c| c.height());
                let by_group = group_ms[group[i] as usize].map(|m| m / 2.0);
                let floor = match (by_coord, by_group) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b)?,
                };
                Some(LinkQ {
                    latency_ms: floor,
                    success: s.median_success.clamp(0.0, 1.0),
                })
            })
            .collect();
        Estimator {
            coord,
            ends,
            group,
            group_ms,
            half,
        }
    }

    /// The estimated link from `a` to `b` (`a != b`; no measurement consulted), if the
    /// values it needs are known.
    #[inline]
    pub fn estimate(&self, a: u32, b: u32) -> Option<LinkQ> {
        let (a, b) = (a as usize, b as usize);
        if a == b {
            return None;
        }
        let (sa, sb) = (self.ends[a].as_ref()?, self.ends[b].as_ref()?);
        let in_group = if self.group[a] == self.group[b] {
            self.group_ms[self.group[a] as usize]
        } else {
            None
        };
        let coords = match (&self.coord[a], &self.coord[b]) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => None,
        };
        let v = LinkView::of_pair(None, coords, in_group, Some((sa, sb)))?;
        Some(LinkQ {
            latency_ms: v.latency_ms.value(),
            success: v.success.value(),
        })
    }

    /// Node `a`'s half of any estimated link it is an end of: for every estimated link
    /// between `a` and `b`, `latency >= half(a).latency + half(b).latency` and
    /// `success <= half(a).success * half(b).success` (the height, or half the datacenter's
    /// median, is below either form of the latency estimate; the success estimate is that
    /// product). `None`: `a` has no estimated link.
    #[inline]
    pub fn half(&self, a: u32) -> Option<LinkQ> {
        self.half[a as usize]
    }

    /// The counts [`Estimator::supports`] reads, over `set`.
    pub fn set(&self, set: &[u32]) -> EstSet {
        let mut s = EstSet::default();
        for x in set {
            let x = *x as usize;
            if self.ends[x].is_some() {
                if self.coord[x].is_some() {
                    s.full += 1;
                }
                *s.per_group.entry(self.group[x]).or_default() += 1;
            }
        }
        s
    }

    /// Whether some node of the set counted in `s` other than `a` has an estimated link with
    /// `a` (either direction: the rule is symmetric). `a_in_set`: whether `a` is in the set.
    pub fn supports(&self, a: u32, s: &EstSet, a_in_set: bool) -> bool {
        let a = a as usize;
        if self.ends[a].is_none() {
            return false;
        }
        let own = u32::from(a_in_set);
        if self.coord[a].is_some() && s.full > own {
            return true;
        }
        self.group_ms[self.group[a] as usize].is_some()
            && s.per_group.get(&self.group[a]).copied().unwrap_or(0) > own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use acoa_shared::model::{Capacity, CoordDoc, EstimatedNode, Layer, Usage};

    fn node(name: String, dc: &str) -> Node {
        Node {
            name,
            datacenter: dc.into(),
            layer: Layer::Edge,
            arch: "aarch64".into(),
            hardware: vec![],
            software: vec![],
            capacity: Capacity::default(),
            usage: Usage::default(),
        }
    }

    /// The halves bound every estimated link, and `supports` says exactly whether a set
    /// holds a far end of an estimated link.
    #[test]
    fn halves_bound_every_estimate_and_support_is_exact() {
        for seed in 0..50 {
            let mut r = SplitMix64::new(seed);
            let nodes: Vec<Node> = (0..12)
                .map(|i| node(format!("n{i:02}"), ["a", "b", "c"][r.below(3)]))
                .collect();
            let mut est = LinkEstimates::default();
            for n in &nodes {
                if r.chance(0.8) {
                    let coord = r.chance(0.7).then(|| CoordDoc {
                        position: [20.0 * r.unit(), 20.0 * r.unit(), 5.0 * r.unit()],
                        height_ms: 5.0 * r.unit(),
                        error: 0.0,
                    });
                    let e = EstimatedNode {
                        coord,
                        median_jitter_ms: r.unit(),
                        median_success: r.unit(),
                    };
                    est.nodes.insert(n.name.clone(), e);
                }
            }
            for g in ["a", "b"] {
                if r.chance(0.6) {
                    est.groups.insert(g.into(), 4.0 * r.unit());
                }
            }
            let e = Estimator::new(&nodes, &est);
            let n = nodes.len() as u32;
            for a in 0..n {
                for b in 0..n {
                    let Some(q) = e.estimate(a, b) else { continue };
                    let (ha, hb) = (e.half(a).unwrap(), e.half(b).unwrap());
                    assert!(q.latency_ms >= ha.latency_ms + hb.latency_ms - 1e-12);
                    assert!(q.success <= ha.success * hb.success + 1e-12);
                }
            }
            let set: Vec<u32> = (0..n).filter(|_| r.chance(0.5)).collect();
            let s = e.set(&set);
            for a in 0..n {
                let inside = set.contains(&a);
                let any = set.iter().any(|b| e.estimate(a, *b).is_some());
                assert_eq!(e.supports(a, &s, inside), any, "seed {seed} node {a}");
            }
        }
    }
}
