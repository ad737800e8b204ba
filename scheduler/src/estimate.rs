//! Links of the pairs nobody measured (issue 16): the [`Estimator`] of an [`crate::Infra`]
//! answers any pair from O(nodes + datacenter pairs) values (each node's coordinate and
//! measured-link medians, each datacenter's median internal latency, the median latency
//! between two datacenters with measured links between them), by the one rule of
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
use acoa_shared::coords::{Coord, EndpointSummary, Groups, LinkView, DIMS};
use acoa_shared::model::{optimistic_ms, row_starts, Between, LinkEstimates, Node};
use std::collections::HashMap;
use std::sync::Arc;

/// The estimates of an [`crate::Infra`]'s unmeasured pairs, indexed like its nodes.
#[derive(Debug, Clone)]
pub struct Estimator {
    coord: Vec<Option<Coord<DIMS>>>,
    ends: Vec<Option<EndpointSummary>>,
    /// Datacenter index per node.
    group: Vec<u32>,
    /// Per datacenter index: its median measured internal latency.
    group_ms: Vec<Option<f64>>,
    /// The medians measured between datacenters: the estimates' own table, shared (not
    /// copied: hundreds of thousands of pairs in a fleet of trains), read by number.
    between: Between,
    /// Per datacenter index, its number in `between` and the medians it has with others;
    /// shared by the scaled and hopeful copies.
    adjacent: Arc<Adjacency>,
    /// The factor of every median of `between` and `adjacent` ([`Estimator::scaled`]; 1 as
    /// built).
    scale: f64,
    /// Per node: see [`Estimator::half`].
    half: Vec<Option<LinkQ>>,
    /// Per node: `LinkEstimates::uncertainty`.
    uncertainty: Vec<f64>,
    /// Set in a hopeful estimator ([`Estimator::hopeful`]): the largest `uncertainty`, by
    /// which its bounds are lowered.
    hope: Option<f64>,
}

/// The medians between datacenters by an estimator's datacenter indexes (16 bytes a pair).
#[derive(Debug, Default)]
struct Adjacency {
    /// Per datacenter index, its number in the `Between` table ([`NONE`]: no pair names it).
    number: Vec<u32>,
    /// Per datacenter index, where its row starts in `to` (one more entry than datacenters).
    start: Vec<u32>,
    /// The rows: per datacenter index, the datacenters it has a finite median with and the
    /// median's place in the `Between` table ([`Between::median_at`]), shortest first.
    to: Vec<(u32, u32)>,
}

/// No number.
const NONE: u32 = u32::MAX;

impl Adjacency {
    /// Of the pairs of `between` whose datacenters are both among `groups`.
    fn new(groups: &HashMap<&str, u32>, between: &Between) -> Adjacency {
        let group_of: Vec<Option<u32>> = between
            .names()
            .iter()
            .map(|n| groups.get(n.as_str()).copied())
            .collect();
        let mut number = vec![NONE; groups.len()];
        for (i, g) in group_of.iter().enumerate() {
            if let Some(g) = g {
                number[*g as usize] = i as u32;
            }
        }
        let pairs = || {
            between
                .numbered()
                .enumerate()
                .filter_map(|(i, (a, b, ms))| {
                    let (ga, gb) = (group_of[a as usize]?, group_of[b as usize]?);
                    (ga != gb && ms.is_finite()).then_some((ga, gb, i as u32))
                })
        };
        let start = row_starts(groups.len(), pairs().flat_map(|(ga, gb, _)| [ga, gb]));
        let mut next = start.clone();
        let mut to = vec![(0u32, 0u32); start[groups.len()] as usize];
        for (ga, gb, i) in pairs() {
            for (g, other) in [(ga, gb), (gb, ga)] {
                to[next[g as usize] as usize] = (other, i);
                next[g as usize] += 1;
            }
        }
        let mut a = Adjacency { number, start, to };
        for g in 0..groups.len() {
            let (i, j) = (a.start[g] as usize, a.start[g + 1] as usize);
            a.to[i..j].sort_unstable_by(|x, y| {
                let m = |p: u32| between.median_at(p as usize);
                m(x.1).total_cmp(&m(y.1))
            });
        }
        a
    }

    /// The datacenters `g` has a median with, and the median's place in the table, shortest
    /// first.
    #[inline]
    fn row(&self, g: u32) -> &[(u32, u32)] {
        &self.to[self.start[g as usize] as usize..self.start[g as usize + 1] as usize]
    }
}

/// How many boxes [`Estimator::cells`] makes of a set at most (a grid of 8 x 8).
pub const CELLS: usize = 64;

/// Least corner, greatest corner, least `val + height` of the members inside.
type Cell = ([f64; DIMS], [f64; DIMS], f64);

/// A set of nodes as [`Estimator::latency_lb`] reads it.
#[derive(Debug, Default)]
pub struct Cells {
    /// Least `val + height` first, so that [`Estimator::latency_lb`] stops at the first box
    /// that cannot beat what it found.
    boxes: Vec<Cell>,
    /// Per datacenter index (with a median): the least `val` of its members.
    groups: FxMap<u32, f64>,
    /// Per datacenter index (with a median to another): the least `val` of its members with
    /// a coordinate.
    between: FxMap<u32, f64>,
    /// The least of `between`'s values.
    least_between: f64,
    /// The least `val` of all the members (a hopeful estimator's bound reads it).
    least_val: f64,
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
        let adjacent = Arc::new(Adjacency::new(&groups, &est.between));
        let mut coord = Vec::with_capacity(nodes.len());
        let mut ends = Vec::with_capacity(nodes.len());
        for n in nodes {
            let e = est.nodes.get(&n.name);
            coord.push(e.and_then(|e| e.coord.as_ref()?.coord()));
            ends.push(e.map(|e| e.summary()));
        }
        let half = halves(
            &coord,
            &ends,
            &group,
            &group_ms,
            &adjacent,
            &est.between,
            1.0,
        );
        let uncertainty = nodes.iter().map(|n| est.uncertainty(&n.name)).collect();
        Estimator {
            coord,
            ends,
            group,
            group_ms,
            between: est.between.clone(),
            adjacent,
            scale: 1.0,
            half,
            uncertainty,
            hope: None,
        }
    }

    /// The same estimates with every estimated latency multiplied by `f` >= 0: the estimator
    /// [`Estimator::new`] builds from [`LinkEstimates::scaled`], without that copy of the
    /// estimates (a string per node, 15 MiB at 50,000 nodes) and a second pass over them.
    pub fn scaled(&self, f: f64) -> Estimator {
        let mut e = self.clone();
        for c in &mut e.coord {
            if let Some(x) = *c {
                *c = Coord::new(x.vec().map(|v| v * f), x.height() * f, x.error()).ok();
            }
        }
        e.group_ms.iter_mut().flatten().for_each(|m| *m *= f);
        // the medians between datacenters are scaled where read (a scaled one's factors
        // multiply); scaled by the same factor, each row stays in order
        e.scale *= f;
        e.half = halves(
            &e.coord,
            &e.ends,
            &e.group,
            &e.group_ms,
            &e.adjacent,
            &e.between,
            e.scale,
        );
        if let Some(r) = e.hope {
            e.lower_halves(r);
        }
        e
    }

    /// Every half's latency x (1 - r) (a hopeful estimator's, [`Estimator::hopeful`]).
    fn lower_halves(&mut self, r: f64) {
        for h in self.half.iter_mut().flatten() {
            h.latency_ms *= 1.0 - r;
        }
    }

    /// The same estimates at their optimistic bound: every estimated latency x (1 - r), r the
    /// larger uncertainty of its ends (as [`Estimator::optimistic`]), successes as they are.
    /// Its bounds stay admissible: the halves and [`Estimator::latency_lb`] are lowered by
    /// the largest uncertainty R (an estimate x (1 - r) is at least x (1 - R)), and the
    /// maximum bound holds as it is (1 - r <= 1). A search on it places where the pairs
    /// nobody measured could be best: several components moved at once onto pairs the
    /// coordinates over-estimate, which no single move reaches (`crate::explore`).
    pub fn hopeful(&self) -> Estimator {
        let r = self
            .uncertainty
            .iter()
            .fold(0.0f64, |m, x| m.max(*x))
            .clamp(0.0, 1.0);
        let mut e = self.clone();
        e.hope = Some(r);
        e.lower_halves(r);
        e
    }

    /// Whether [`Estimator::estimate`] gives `a` to `b` an estimate, without computing it:
    /// distinct nodes, both with a summary of their links, and both with a coordinate or
    /// both in one datacenter with a median inside it.
    #[inline]
    pub fn covers(&self, a: u32, b: u32) -> bool {
        let (a, b) = (a as usize, b as usize);
        a != b
            && self.ends[a].is_some()
            && self.ends[b].is_some()
            && ((self.coord[a].is_some() && self.coord[b].is_some())
                || (self.group[a] == self.group[b]
                    && self.group_ms[self.group[a] as usize].is_some()))
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
        let (ga, gb) = (self.group[a], self.group[b]);
        let coords = match (&self.coord[a], &self.coord[b]) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => None,
        };
        // (a median between two datacenters needs both coordinates: `of_pair`)
        let groups = if ga == gb {
            self.group_ms[ga as usize].map_or(Groups::Unmeasured, Groups::Inside)
        } else {
            self.median_between(ga, gb)
                .map_or(Groups::Unmeasured, Groups::Between)
        };
        let v = LinkView::of_pair(None, coords, groups, Some((sa, sb)))?;
        let latency = v.latency_ms.value();
        Some(LinkQ {
            latency_ms: match self.hope {
                None => latency,
                Some(_) => optimistic_ms(latency, self.uncertainty[a], self.uncertainty[b]),
            },
            success: v.success.value(),
        })
    }

    /// The median between datacenter indexes `ga` and `gb` (distinct), scaled, if finite.
    #[inline]
    fn median_between(&self, ga: u32, gb: u32) -> Option<f64> {
        let n = &self.adjacent.number;
        let (na, nb) = (n[ga as usize], n[gb as usize]);
        if na == NONE || nb == NONE {
            return None;
        }
        let m = self.between.get_numbered(na, nb)?;
        m.is_finite().then_some(m * self.scale)
    }

    /// The optimistic bound of the estimated link from `a` to `b`: its latency x (1 - r), r
    /// the larger `LinkEstimates::uncertainty` of its ends (the bound the control plane
    /// favours a placement's own estimated links with), its success as estimated. (On a
    /// hopeful estimator, the bound of its own, lower, estimate.)
    pub fn optimistic(&self, a: u32, b: u32) -> Option<LinkQ> {
        let q = self.estimate(a, b)?;
        let (ra, rb) = (self.uncertainty[a as usize], self.uncertainty[b as usize]);
        Some(LinkQ {
            latency_ms: optimistic_ms(q.latency_ms, ra, rb),
            ..q
        })
    }

    /// Node `a`'s half of any estimated link it is an end of: for every estimated link
    /// between `a` and `b`, `latency >= half(a).latency + half(b).latency` and
    /// `success <= half(a).success * half(b).success` (the least of the height, half the
    /// datacenter's median and half its least median to another datacenter is below every
    /// form of the latency estimate; the success estimate is that product). `None`: `a` has
    /// no estimated link.
    #[inline]
    pub fn half(&self, a: u32) -> Option<LinkQ> {
        self.half[a as usize]
    }

    /// An upper bound of every estimated latency, in O(n): the diagonal of the coordinates'
    /// bounding box plus the two largest heights, or the largest datacenter median (inside
    /// one or between two).
    pub fn max_latency_bound(&self) -> f64 {
        let mut lo = [f64::INFINITY; DIMS];
        let mut hi = [f64::NEG_INFINITY; DIMS];
        let (mut h1, mut h2) = (0.0f64, 0.0f64);
        let mut any = false;
        for (c, e) in self.coord.iter().zip(&self.ends) {
            let (Some(c), Some(_)) = (c, e) else { continue };
            any = true;
            for (i, x) in c.vec().iter().enumerate() {
                lo[i] = lo[i].min(*x);
                hi[i] = hi[i].max(*x);
            }
            let h = c.height();
            if h > h1 {
                h2 = h1;
                h1 = h;
            } else if h > h2 {
                h2 = h;
            }
        }
        let by_coord = if any {
            let d2: f64 = lo.iter().zip(&hi).map(|(l, h)| (h - l) * (h - l)).sum();
            d2.sqrt() + h1 + h2
        } else {
            0.0
        };
        self.group_ms
            .iter()
            .flatten()
            .copied()
            .chain(
                self.adjacent
                    .to
                    .iter()
                    .map(|(_, i)| self.between.median_at(*i as usize) * self.scale),
            )
            .fold(by_coord, f64::max)
    }

    /// `set` summarised for [`Estimator::latency_lb`], its `k`-th member `x` weighted
    /// `val(k)` (skipped when not finite): boxes of nearby coordinates (one per member up to
    /// [`CELLS`] members, else a grid of [`CELLS`] cells on the first two dimensions, each
    /// the tight box of its members) with the least `val + height(x)` inside, per
    /// datacenter with a median the least `val` of its members, and per datacenter with a
    /// median to another the least `val` of its members with a coordinate.
    pub fn cells(&self, set: &[u32], val: impl Fn(usize) -> f64) -> Cells {
        let mut c = Cells {
            least_between: f64::INFINITY,
            least_val: f64::INFINITY,
            ..Cells::default()
        };
        let mut pts: Vec<([f64; DIMS], f64)> = Vec::new();
        for (k, x) in set.iter().enumerate() {
            let v = val(k);
            let i = *x as usize;
            if !v.is_finite() || self.ends[i].is_none() {
                continue;
            }
            c.least_val = c.least_val.min(v);
            if let Some(k) = &self.coord[i] {
                pts.push((*k.vec(), v + k.height()));
                if !self.adjacent.row(self.group[i]).is_empty() {
                    let m = c.between.entry(self.group[i]).or_insert(f64::INFINITY);
                    *m = m.min(v);
                    c.least_between = c.least_between.min(v);
                }
            }
            if self.group_ms[self.group[i] as usize].is_some() {
                let m = c.groups.entry(self.group[i]).or_insert(f64::INFINITY);
                *m = m.min(v);
            }
        }
        if pts.len() <= CELLS {
            c.boxes = pts.into_iter().map(|(p, v)| (p, p, v)).collect();
            c.boxes.sort_by(|x, y| x.2.total_cmp(&y.2));
            return c;
        }
        let side = (CELLS as f64).sqrt() as usize;
        let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
        for (p, _) in &pts {
            for d in 0..2 {
                lo[d] = lo[d].min(p[d]);
                hi[d] = hi[d].max(p[d]);
            }
        }
        let cell = |p: &[f64; DIMS], d: usize| {
            let w = (hi[d] - lo[d]).max(f64::MIN_POSITIVE);
            (((p[d] - lo[d]) / w * side as f64) as usize).min(side - 1)
        };
        let mut boxes: Vec<Option<Cell>> = vec![None; side * side];
        for (p, v) in &pts {
            let b = &mut boxes[cell(p, 0) * side + cell(p, 1)];
            match b {
                None => *b = Some((*p, *p, *v)),
                Some((l, h, m)) => {
                    for d in 0..DIMS {
                        l[d] = l[d].min(p[d]);
                        h[d] = h[d].max(p[d]);
                    }
                    *m = m.min(*v);
                }
            }
        }
        c.boxes = boxes.into_iter().flatten().collect();
        c.boxes.sort_by(|x, y| x.2.total_cmp(&y.2));
        c
    }

    /// A lower bound of `val(x) + estimated latency between x and y` over the members `x` of
    /// the set `c` summarises ([`Estimator::cells`]); infinite when no member can have an
    /// estimated link with `y`. Holds because an estimate is either the coordinates'
    /// distance plus both heights (at least the distance from `y` to the member's box),
    /// inside one datacenter its median, or between two datacenters (both ends with a
    /// coordinate) their median. O(cells + the datacenters `y`'s has a median shorter than
    /// the bound found so far with: they are read shortest first). On a hopeful estimator
    /// (R the largest uncertainty): `(1 - R) x bound + R x least val`, since `val(x) + (1 -
    /// r) x latency >= (1 - R) x (val(x) + latency) + R x val(x)`.
    #[inline]
    pub fn latency_lb(&self, y: u32, c: &Cells) -> f64 {
        let y = y as usize;
        if self.ends[y].is_none() {
            return f64::INFINITY;
        }
        let mut best = f64::INFINITY;
        if let Some(k) = &self.coord[y] {
            let p = k.vec();
            for (lo, hi, m) in &c.boxes {
                if *m >= best {
                    // the boxes are sorted by `m`: none further on is nearer
                    break;
                }
                let mut d2 = 0.0;
                for d in 0..DIMS {
                    let gap = (lo[d] - p[d]).max(p[d] - hi[d]).max(0.0);
                    d2 += gap * gap;
                }
                best = best.min(m + d2.sqrt());
            }
            best += k.height();
            for (g2, i) in self.adjacent.row(self.group[y]) {
                let ms = self.between.median_at(*i as usize) * self.scale;
                if c.least_between + ms >= best {
                    break;
                }
                if let Some(m) = c.between.get(g2) {
                    best = best.min(m + ms);
                }
            }
        }
        let g = self.group[y];
        if let (Some(gm), Some(m)) = (self.group_ms[g as usize], c.groups.get(&g)) {
            best = best.min(m + gm);
        }
        match self.hope {
            Some(r) if best.is_finite() => (1.0 - r) * best + r * c.least_val,
            _ => best,
        }
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

/// Per node, the least latency any of its estimated links can take, halved ([`Estimator::half`]),
/// and its success rate: from its coordinate's height and its datacenter's medians.
fn halves(
    coord: &[Option<Coord<DIMS>>],
    ends: &[Option<EndpointSummary>],
    group: &[u32],
    group_ms: &[Option<f64>],
    adjacent: &Adjacency,
    between: &Between,
    scale: f64,
) -> Vec<Option<LinkQ>> {
    let least_between: Vec<f64> = (0..group_ms.len() as u32)
        .map(|g| {
            let least = adjacent.row(g).first();
            least.map_or(f64::INFINITY, |x| between.median_at(x.1 as usize) * scale)
        })
        .collect();
    (0..coord.len())
        .map(|i| {
            let s = ends[i]?;
            // a median between datacenters estimates only pairs with coordinates
            let by_coord = coord[i].map(|c| c.height().min(least_between[group[i] as usize] / 2.0));
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
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use acoa_shared::model::{Between, CoordDoc, EstimatedNode};

    use crate::testkit::edge_node as node;

    /// Twelve nodes in three datacenters, most with estimates, some with coordinates; some
    /// datacenter medians.
    fn random_estimates(r: &mut SplitMix64) -> (Vec<Node>, LinkEstimates) {
        let nodes: Vec<Node> = (0..12)
            .map(|i| node(format!("n{i:02}"), ["a", "b", "c"][r.below(3)]))
            .collect();
        let mut est = LinkEstimates::default();
        for n in &nodes {
            if r.chance(0.8) {
                let coord = r.chance(0.7).then(|| CoordDoc {
                    position: [20.0 * r.unit(), 20.0 * r.unit(), 5.0 * r.unit()],
                    height_ms: 5.0 * r.unit(),
                    error: r.unit(),
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
        let mut between = Vec::new();
        for (g, h) in [("a", "b"), ("a", "c"), ("b", "c")] {
            if r.chance(0.5) {
                between.push((g, h, 6.0 * r.unit()));
            }
        }
        est.between = Between::from_pairs(between);
        (nodes, est)
    }

    /// Everything an estimator answers, for every pair and node of `n` (and a set's bounds).
    fn answers(e: &Estimator, n: u32, set: &[u32]) -> String {
        let mut out = format!("max {:?}\n", e.max_latency_bound());
        let cells = e.cells(set, |k| f64::from(set[k]) / 3.0);
        for a in 0..n {
            out += &format!(
                "{a}: half {:?} lb {:?}\n",
                e.half(a),
                e.latency_lb(a, &cells)
            );
            for b in 0..n {
                out += &format!("{a}-{b}: {:?} {:?}\n", e.estimate(a, b), e.optimistic(a, b));
            }
        }
        out
    }

    /// Scaling an estimator gives the estimator of the estimates scaled: every estimate,
    /// bound and half the same (its hopeful view too), though the medians between
    /// datacenters are shared with the estimator scaled and scaled where read.
    #[test]
    fn an_estimator_scaled_is_the_estimator_of_the_estimates_scaled() {
        for seed in 0..50 {
            let mut r = SplitMix64::new(seed);
            let (nodes, est) = random_estimates(&mut r);
            let f = 1.0 + est.max_uncertainty();
            let plain = Estimator::new(&nodes, &est);
            let want = Estimator::new(&nodes, &est.scaled(f));
            let n = nodes.len() as u32;
            let set: Vec<u32> = (0..n).filter(|_| r.chance(0.5)).collect();
            assert_eq!(
                answers(&plain.scaled(f), n, &set),
                answers(&want, n, &set),
                "seed {seed}"
            );
            assert_eq!(
                answers(&plain.hopeful().scaled(f), n, &set),
                answers(&want.hopeful(), n, &set),
                "seed {seed}"
            );
        }
    }

    /// The halves bound every estimated link, `supports` says exactly whether a set holds a
    /// far end of an estimated link, and `covers` (what a search filters its domains with)
    /// exactly whether a pair has an estimate.
    #[test]
    fn halves_bound_every_estimate_and_support_and_cover_are_exact() {
        let (mut with, mut without) = (0, 0);
        for seed in 0..50 {
            let mut r = SplitMix64::new(seed);
            let (nodes, est) = random_estimates(&mut r);
            let plain = Estimator::new(&nodes, &est);
            // the hopeful view's bounds too (every estimate x (1 - r))
            for e in [plain.clone(), plain.hopeful()] {
                let n = nodes.len() as u32;
                for a in 0..n {
                    for b in 0..n {
                        let est = e.estimate(a, b);
                        assert_eq!(e.covers(a, b), est.is_some(), "seed {seed} pair {a}-{b}");
                        let Some(q) = est else {
                            without += 1;
                            continue;
                        };
                        with += 1;
                        assert!(q.latency_ms <= plain.estimate(a, b).unwrap().latency_ms);
                        let (ha, hb) = (e.half(a).unwrap(), e.half(b).unwrap());
                        assert!(q.latency_ms >= ha.latency_ms + hb.latency_ms - 1e-12);
                        assert!(q.success <= ha.success * hb.success + 1e-12);
                        assert!(q.latency_ms <= e.max_latency_bound() + 1e-9);
                    }
                }
                let set: Vec<u32> = (0..n).filter(|_| r.chance(0.5)).collect();
                let val: Vec<f64> = (0..n).map(|_| 3.0 * r.unit() - 1.0).collect();
                for cells in [e.cells(&set, |k| val[set[k] as usize]), {
                    // the grid (more members than CELLS): the set repeated
                    let many: Vec<u32> = set.iter().copied().cycle().take(CELLS * 3).collect();
                    e.cells(&many, |k| val[many[k] as usize])
                }] {
                    for y in 0..n {
                        let least = set
                            .iter()
                            .filter_map(|x| Some(val[*x as usize] + e.estimate(*x, y)?.latency_ms))
                            .fold(f64::INFINITY, f64::min);
                        assert!(
                            e.latency_lb(y, &cells) <= least + 1e-9,
                            "seed {seed} node {y}"
                        );
                    }
                }
                let s = e.set(&set);
                for a in 0..n {
                    let inside = set.contains(&a);
                    let any = set.iter().any(|b| e.estimate(a, *b).is_some());
                    assert_eq!(e.supports(a, &s, inside), any, "seed {seed} node {a}");
                }
            }
        }
        assert!(
            with > 1000 && without > 1000,
            "{with} with, {without} without"
        );
    }
}
