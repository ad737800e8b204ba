//! What the control plane says about a pair of nodes nobody measures.
//!
//! - Latency, for two nodes of one group (one datacenter, one train): the median of the
//!   group's measured internal links ([`estimate_in_group_ms`]). The coordinates do not apply
//!   there (their heights stand for the access link, which such a pair does not cross:
//!   `vivaldi`'s documentation).
//! - Latency, for two nodes of two groups: the distance of the two reported coordinates,
//!   `|x_a - x_b| + h_a + h_b` ([`estimate_latency_ms`]), or the median of the links measured
//!   between the two groups (the same median) when some were and it is shorter. The members
//!   of a group share its access links, so one measured pair between two groups tells the
//!   others' latency better than coordinates do where these over-count the heights: on the
//!   1,000-node railway simulation, 4.9 % median relative error against 8.3 % on the pairs a
//!   median covers, and 4.6 % against 54 % on those under 5 ms (BENCHMARKS.md). The shorter of
//!   the two, because a median also flattens the differences between a large datacenter's
//!   nodes (a cloud's 66 nodes 14.3-20.6 ms from one station), which the coordinates keep; a
//!   placement never rests on an estimate for long (its links are measured and it is explored
//!   again), so erring short costs a probe, erring long hides a node. Both need the two
//!   nodes' coordinates, so that a node without one is estimated as before.
//! - Jitter: the larger of the two endpoints' median jitter over their measured links
//!   ([`EndpointSummary`]). A link's jitter comes mostly from its two ends' access (a train's
//!   radio, a loaded uplink); an endpoint's median over its links is its own contribution plus
//!   that of a typical far end, so the worse endpoint's median is what a link from it to a
//!   typical node shows. It is a typical value, not a bound: two bad ends may jitter more.
//! - Success rate: the product of the two endpoints' median success over their measured links.
//!   Each median already contains the loss of a typical far end, so the product counts a
//!   typical node's loss twice: a pessimistic estimate, by choice (reliability planned on an
//!   unmeasured pair should not be better than what was seen).
//!
//! Every value is a [`Known`]: [`Known::Measured`] when the pair's own link was measured (all
//! three values then are the measurement's), [`Known::Estimated`] otherwise, so that whoever
//! uses it can tell (and, e.g., not move a component on an estimate alone).

use super::vivaldi::Coord;

/// A value, marked as measured on the link itself or estimated.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Known<T> {
    Measured(T),
    Estimated(T),
}

impl<T: Copy> Known<T> {
    pub fn value(&self) -> T {
        match self {
            Known::Measured(v) | Known::Estimated(v) => *v,
        }
    }

    pub fn is_estimated(&self) -> bool {
        matches!(self, Known::Estimated(_))
    }
}

/// A measured link's metrics, as the agents report them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredLink {
    pub latency_ms: f64,
    pub jitter_ms: f64,
    /// In [0, 1].
    pub success: f64,
}

/// An endpoint's measured links, summarised: the medians of their jitter and success rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointSummary {
    /// Links the medians are over.
    pub links: usize,
    pub median_jitter_ms: f64,
    pub median_success: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl EndpointSummary {
    /// From the measured links the node is an end of (either direction; values that are not
    /// finite are skipped, success is clamped to [0, 1]); `None` without any.
    pub fn from_links(links: impl IntoIterator<Item = MeasuredLink>) -> Option<Self> {
        Self::from_jitter_success(links.into_iter().map(|l| (l.jitter_ms, l.success)))
    }

    /// [`EndpointSummary::from_links`] of the links' `(jitter_ms, success)`, all it reads of
    /// them (for callers that hold no latency beside them).
    pub fn from_jitter_success(links: impl IntoIterator<Item = (f64, f64)>) -> Option<Self> {
        let (mut jitter, mut success): (Vec<f64>, Vec<f64>) = links
            .into_iter()
            .filter(|(j, s)| j.is_finite() && s.is_finite())
            .map(|(j, s)| (j.max(0.0), s.clamp(0.0, 1.0)))
            .unzip();
        if jitter.is_empty() {
            return None;
        }
        Some(EndpointSummary {
            links: jitter.len(),
            median_jitter_ms: median(&mut jitter),
            median_success: median(&mut success),
        })
    }
}

/// The estimated latency of a pair from the two coordinates.
pub fn estimate_latency_ms<const D: usize>(a: &Coord<D>, b: &Coord<D>) -> f64 {
    a.distance_ms(b)
}

/// What the measured links of a pair's groups say of its latency ([`LinkView::of_pair`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Groups {
    /// Nothing: no measured link among them, or the groups are not known.
    Unmeasured,
    /// The two nodes are of one group: the median of its measured internal links.
    Inside(f64),
    /// The two nodes are of two groups: the median of the measured links between them (either
    /// direction); it estimates the pair when it is shorter than the coordinates' distance.
    Between(f64),
}

/// The estimated latency of an unmeasured pair from the measured links of its groups (inside
/// one group, or between two): their median (non-finite ones skipped); `None` without any.
pub fn estimate_in_group_ms(measured_ms: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = measured_ms.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    Some(median(&mut v))
}

/// The median latency between each two groups with links measured between them, from one
/// `(group, group, latency)` per measured link (either direction; a link inside one group is
/// skipped, non-finite latencies too): one `(lesser group, greater group, median)` per pair,
/// in the groups' order. One sort, no allocation per pair.
pub fn medians_between<K: Ord + Copy>(
    links: impl IntoIterator<Item = (K, K, f64)>,
) -> Vec<(K, K, f64)> {
    let mut v: Vec<(K, K, f64)> = links
        .into_iter()
        .filter(|(a, b, _)| a != b)
        .map(|(a, b, l)| (a.min(b), a.max(b), l))
        .collect();
    v.sort_unstable_by_key(|x| (x.0, x.1));
    v.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1))
        .filter_map(|run| {
            let m = estimate_in_group_ms(run.iter().map(|x| x.2))?;
            Some((run[0].0, run[0].1, m))
        })
        .collect()
}

/// A pair's latency, jitter and success rate, each marked measured or estimated.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkView {
    pub latency_ms: Known<f64>,
    pub jitter_ms: Known<f64>,
    pub success: Known<f64>,
}

impl LinkView {
    /// The pair's own measurement, when there is one; else the estimate from the endpoints'
    /// coordinates and summaries and the measured links of their groups (see the module's
    /// documentation for the rule); `None` when neither is known (a new node without
    /// coordinate or measured links). `groups`: the [`estimate_in_group_ms`] of the links
    /// inside the pair's one group, or between its two.
    pub fn of_pair<const D: usize>(
        measured: Option<MeasuredLink>,
        coords: Option<(&Coord<D>, &Coord<D>)>,
        groups: Groups,
        ends: Option<(&EndpointSummary, &EndpointSummary)>,
    ) -> Option<LinkView> {
        if let Some(m) = measured {
            return Some(LinkView {
                latency_ms: Known::Measured(m.latency_ms),
                jitter_ms: Known::Measured(m.jitter_ms),
                success: Known::Measured(m.success),
            });
        }
        let latency = match (groups, coords) {
            (Groups::Inside(l), _) => l,
            (Groups::Between(l), Some((a, b))) => l.min(estimate_latency_ms(a, b)),
            (_, Some((a, b))) => estimate_latency_ms(a, b),
            (_, None) => return None,
        };
        let (sa, sb) = ends?;
        Some(LinkView {
            latency_ms: Known::Estimated(latency),
            jitter_ms: Known::Estimated(sa.median_jitter_ms.max(sb.median_jitter_ms)),
            success: Known::Estimated((sa.median_success * sb.median_success).clamp(0.0, 1.0)),
        })
    }
}
