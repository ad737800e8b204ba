//! What the coordinates do with the shortest pairs, and one way of measuring more of them.
//!
//! - [`ShortPairs`]: the pairs of stations of two sites under [`SHORT_MS`] (in this topology
//!   the only short pairs between sites: a train's radio link is 4 ms or more, two clouds are
//!   1 ms of peering apart plus fibre). Vivaldi's error is absolute, a few milliseconds at
//!   thousands of nodes, so it cannot tell such a pair from one several times as long; the
//!   placements' references use them (BENCHMARKS.md, "Why 10,000 nodes miss").
//! - [`discover`] (`--discover D`, an experiment): neighbour discovery, as Meridian finds a
//!   node's nearest (Wong, Slivkins and Sirer, SIGCOMM 2005): part of a node's "nearest"
//!   slots go to the measured nearest of its own measured nearest.

use std::collections::HashSet;

use acoa_shared::coords::{estimate_latency_ms, Coord};

use super::{pair_key, quantile, Kind, Topology};

/// A pair of stations of two sites under this true latency is short (ms).
pub const SHORT_MS: f64 = 1.5;

/// How many of a node's measured nearest (outside its group) [`discover`] asks.
const DISCOVER_VIA: usize = 3;

/// The short pairs at the end of a simulation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShortPairs {
    /// Short pairs never probed (in any round), and those probed at some time.
    pub unprobed: usize,
    pub probed: usize,
    /// Estimated over true latency of the unprobed ones: median and p90.
    pub ratio_median: f64,
    pub ratio_p90: f64,
    /// The stations' coordinate heights (ms): median and p90.
    pub height_median: f64,
    pub height_p90: f64,
    /// Where the coordinates rank an unprobed short pair, from each of its ends: how many
    /// nodes of other sites the end estimates nearer than the other end (0: the nearest by
    /// coordinates), median and p90. A rule that probes a node's nearest by coordinates (or
    /// goes through them in turn) finds the pair only within that many.
    pub rank_median: f64,
    pub rank_p90: f64,
}

impl ShortPairs {
    /// Every pair of stations of two sites (O(stations^2): 4.5 million pairs at 10,000
    /// nodes), judged on the nodes' reported coordinates.
    pub fn measure<const D: usize>(
        topo: &Topology,
        coords: &[Coord<D>],
        probed: &HashSet<u64>,
    ) -> ShortPairs {
        let stations: Vec<usize> = (0..topo.nodes.len())
            .filter(|&i| topo.sites[topo.nodes[i].site].kind == Kind::Station)
            .collect();
        let mut ratios = Vec::new();
        let mut probed_short = 0;
        // each end of an unprobed short pair, with the other end
        let mut unprobed: Vec<(usize, usize)> = Vec::new();
        for (x, &a) in stations.iter().enumerate() {
            for &b in &stations[x + 1..] {
                if topo.nodes[a].site == topo.nodes[b].site {
                    continue;
                }
                let t = topo.true_ms(a, b);
                if t >= SHORT_MS {
                    continue;
                }
                if probed.contains(&pair_key(a, b)) {
                    probed_short += 1;
                } else {
                    ratios.push(estimate_latency_ms(&coords[a], &coords[b]) / t);
                    unprobed.extend([(a, b), (b, a)]);
                }
            }
        }
        let mut ranks = Vec::with_capacity(unprobed.len());
        unprobed.sort_unstable();
        for ends in unprobed.chunk_by(|x, y| x.0 == y.0) {
            let a = ends[0].0;
            let site = topo.nodes[a].site;
            let est: Vec<f64> = (0..topo.nodes.len())
                .filter(|&j| topo.nodes[j].site != site)
                .map(|j| estimate_latency_ms(&coords[a], &coords[j]))
                .collect();
            for &(_, b) in ends {
                let e = estimate_latency_ms(&coords[a], &coords[b]);
                ranks.push(est.iter().filter(|&&x| x < e).count() as f64);
            }
        }
        let mut heights: Vec<f64> = stations.iter().map(|&i| coords[i].height()).collect();
        let q = |v: &mut Vec<f64>, p| {
            if v.is_empty() {
                f64::NAN
            } else {
                quantile(v, p)
            }
        };
        ShortPairs {
            unprobed: ratios.len(),
            probed: probed_short,
            ratio_median: q(&mut ratios, 0.5),
            ratio_p90: q(&mut ratios, 0.9),
            height_median: q(&mut heights, 0.5),
            height_p90: q(&mut heights, 0.9),
            rank_median: q(&mut ranks, 0.5),
            rank_p90: q(&mut ranks, 0.9),
        }
    }
}

/// Neighbour discovery for node `me`, whose fresh list is `list` (its group first, then
/// `near_end - group` nearest by coordinates, then the random ones): the last `slots` of the
/// nearest slots go to the nodes two measured links away, shortest first. The two links: from
/// `me` to one of its [`DISCOVER_VIA`] nearest measured peers outside its group (over its
/// previous list, `previous[me]`), then from that peer to one of its own previous peers.
/// Never `me`, its group or a node the list already names. `filtered(i, j)`: `i`'s filtered
/// latency to `j`, if it has one.
pub fn discover(
    me: usize,
    list: &mut [usize],
    near_end: usize,
    slots: usize,
    previous: &[Vec<usize>],
    topo: &Topology,
    filtered: impl Fn(usize, usize) -> Option<f64>,
) {
    let site = topo.nodes[me].site;
    let group = list.iter().filter(|&&j| topo.nodes[j].site == site).count();
    let near_end = near_end.max(group).min(list.len());
    let mut mine: Vec<(f64, usize)> = previous[me]
        .iter()
        .filter(|&&j| topo.nodes[j].site != site)
        .filter_map(|&j| Some((filtered(me, j)?, j)))
        .collect();
    mine.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut found: Vec<(f64, usize)> = Vec::new();
    for &(d, j) in mine.iter().take(DISCOVER_VIA) {
        for &c in &previous[j] {
            if c == me || topo.nodes[c].site == site || list.contains(&c) {
                continue;
            }
            if let Some(e) = filtered(j, c) {
                found.push((d + e, c));
            }
        }
    }
    found.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut seen = HashSet::new();
    found.retain(|x| seen.insert(x.1));
    let take = slots.min(near_end - group).min(found.len());
    // the farthest of the nearest slots first
    for (at, &(_, c)) in (near_end - take..near_end).rev().zip(&found) {
        list[at] = c;
    }
}
