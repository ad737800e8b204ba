//! What the scheduler estimates a pair of nodes without a measured link from (issue 16): each
//! node's network coordinate and the medians of its measured links, each datacenter's median
//! internal latency, and the median latency between two datacenters with measured links
//! between them. The rule that turns them into a link is `coords::LinkView::of_pair`
//! (documented in `coords/estimate.rs`); the control plane fills this in from what the agents
//! report, so the live model holds measured links plus O(nodes + measured links) values
//! instead of an estimated link for every unmeasured pair.

use super::checks::{check_name, check_rate};
use super::{Between, ModelError, Node};
use crate::coords::{Coord, EndpointSummary, Groups, LinkView, DIMS};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// The inputs of the estimates of a snapshot's unmeasured pairs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEstimates {
    /// Per node name: its coordinate and its measured links' medians. A node absent here has
    /// no estimated link (it has no measured link to summarise).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, EstimatedNode>,
    /// Per datacenter: the median latency of its measured internal links, ms (the estimate of
    /// an unmeasured pair inside it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, f64>,
    /// Per pair of datacenters, the lesser name first then the greater: the median latency of
    /// the measured links between them, either direction, ms (the estimate of an unmeasured
    /// pair between them where it is shorter than their coordinates' distance). Built with
    /// [`Between::from_pairs`], read with [`LinkEstimates::between_ms`]; held by number
    /// (`model/between.rs`).
    #[serde(default, skip_serializing_if = "Between::is_empty")]
    pub between: Between,
}

/// One node's part of the estimates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimatedNode {
    /// Its reported coordinate; absent before it reported one (then it has estimated links
    /// only inside its datacenter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coord: Option<CoordDoc>,
    /// Median jitter of its measured links, ms.
    pub median_jitter_ms: f64,
    /// Median success rate of its measured links, in [0, 1].
    pub median_success: f64,
}

/// A network coordinate: a position in `coords::DIMS` dimensions and a height, both in ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordDoc {
    pub position: [f64; DIMS],
    pub height_ms: f64,
    /// The node's own estimate of its relative error (Vivaldi's), for the estimates'
    /// confidence bounds ([`LinkEstimates::uncertainty`]).
    #[serde(default)]
    pub error: f64,
}

impl CoordDoc {
    pub fn of(c: &Coord<DIMS>) -> CoordDoc {
        CoordDoc {
            position: *c.vec(),
            height_ms: c.height(),
            error: c.error(),
        }
    }

    /// The coordinate; `None` when a value is not finite or the height or error negative
    /// (validation refuses those).
    pub fn coord(&self) -> Option<Coord<DIMS>> {
        Coord::new(self.position, self.height_ms, self.error).ok()
    }
}

impl EstimatedNode {
    pub fn summary(&self) -> EndpointSummary {
        EndpointSummary {
            links: 1,
            median_jitter_ms: self.median_jitter_ms,
            median_success: self.median_success,
        }
    }
}

impl LinkEstimates {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.groups.is_empty() && self.between.is_empty()
    }

    /// The median latency between datacenters `a` and `b` (either order), if links between
    /// them were measured; `None` for `a == b`.
    pub fn between_ms(&self, a: &str, b: &str) -> Option<f64> {
        (a != b).then(|| self.between.get(a, b))?
    }

    /// What the measured links of `a`'s and `b`'s datacenters say of the pair's latency.
    pub fn groups_of(&self, a: &Node, b: &Node) -> Groups {
        let median = if a.datacenter == b.datacenter {
            self.groups.get(&a.datacenter).copied().map(Groups::Inside)
        } else {
            self.between_ms(&a.datacenter, &b.datacenter)
                .map(Groups::Between)
        };
        median.unwrap_or(Groups::Unmeasured)
    }

    /// The estimate of the pair `a` → `b` (`coords::LinkView::of_pair`), whatever is
    /// measured; `None` for `a == b` or when a value it needs is missing.
    pub fn view(&self, a: &Node, b: &Node) -> Option<LinkView> {
        if a.name == b.name {
            return None;
        }
        let (ea, eb) = (self.nodes.get(&a.name)?, self.nodes.get(&b.name)?);
        let (ca, cb) = (
            ea.coord.as_ref().and_then(CoordDoc::coord),
            eb.coord.as_ref().and_then(CoordDoc::coord),
        );
        let (sa, sb) = (ea.summary(), eb.summary());
        LinkView::of_pair(
            None,
            ca.as_ref().zip(cb.as_ref()),
            self.groups_of(a, b),
            Some((&sa, &sb)),
        )
    }

    /// The relative uncertainty of node `n`'s estimated latencies: its coordinate's own error,
    /// at least 10 %, at most 100 % (100 % without a coordinate).
    pub fn uncertainty(&self, n: &str) -> f64 {
        self.nodes
            .get(n)
            .and_then(|e| e.coord)
            .map_or(1.0, |c| c.error)
            .clamp(0.1, 1.0)
    }

    /// [`optimistic_ms`] of an estimated latency between nodes `a` and `b`, with their
    /// [`LinkEstimates::uncertainty`].
    pub fn optimistic_ms(&self, latency_ms: f64, a: &str, b: &str) -> f64 {
        optimistic_ms(latency_ms, self.uncertainty(a), self.uncertainty(b))
    }

    /// The largest [`LinkEstimates::uncertainty`] of any node (0 without nodes).
    pub fn max_uncertainty(&self) -> f64 {
        self.nodes
            .keys()
            .map(|n| self.uncertainty(n))
            .fold(0.0, f64::max)
    }

    /// The same estimates with every estimated latency multiplied by `f` >= 0 (positions,
    /// heights and datacenter medians scaled: a distance scales with its points).
    pub fn scaled(&self, f: f64) -> LinkEstimates {
        let mut e = self.clone();
        for n in e.nodes.values_mut() {
            if let Some(c) = &mut n.coord {
                c.position.iter_mut().for_each(|x| *x *= f);
                c.height_ms *= f;
            }
        }
        e.groups.values_mut().for_each(|m| *m *= f);
        e.between = e.between.scaled(f);
        e
    }

    /// Every node named is in `nodes`, every value finite and in range.
    pub(crate) fn validate(&self, nodes: &HashSet<&str>) -> Result<(), ModelError> {
        for (name, e) in &self.nodes {
            let f = format!("estimates.nodes.{name}");
            check_name(&f, name)?;
            if !nodes.contains(name.as_str()) {
                return Err(ModelError::new(f, format!("node `{name}` does not exist")));
            }
            if let Some(c) = &e.coord {
                for (i, x) in c.position.iter().enumerate() {
                    if !x.is_finite() {
                        return Err(ModelError::new(
                            format!("{f}.coord.position[{i}]"),
                            format!("must be a finite number, got {x}"),
                        ));
                    }
                }
                check_rate(&format!("{f}.coord.height_ms"), c.height_ms)?;
                check_rate(&format!("{f}.coord.error"), c.error)?;
            }
            check_rate(&format!("{f}.median_jitter_ms"), e.median_jitter_ms)?;
            if !(0.0..=1.0).contains(&e.median_success) {
                return Err(ModelError::new(
                    format!("{f}.median_success"),
                    format!("must be between 0 and 1, got {}", e.median_success),
                ));
            }
        }
        for (g, ms) in &self.groups {
            let f = format!("estimates.groups.{g}");
            check_name(&f, g)?;
            check_rate(&f, *ms)?;
        }
        for (a, b, ms) in self.between.iter() {
            check_name(&format!("estimates.between.{a}"), a)?;
            let f = format!("estimates.between.{a}.{b}");
            check_name(&f, b)?;
            if a >= b {
                return Err(ModelError::new(
                    f,
                    format!(
                        "a pair of datacenters names the lesser first, `{b}` is not after `{a}`"
                    ),
                ));
            }
            check_rate(&f, ms)?;
        }
        Ok(())
    }
}

/// The optimistic bound of an estimated latency: `latency_ms` x (1 - r), r the larger of its
/// two ends' uncertainties ([`LinkEstimates::uncertainty`]). The control plane favours a
/// placement's own estimated links with it, and an exploration round ranks the moves it
/// hopes for by it.
pub fn optimistic_ms(latency_ms: f64, uncertainty_a: f64, uncertainty_b: f64) -> f64 {
    latency_ms * (1.0 - uncertainty_a.max(uncertainty_b))
}
