//! Link statistics as the scheduler sees them, and the confidence-aware comparison of
//! placements: measured latencies quantized to what the probers resolve, confidence bounds of
//! each measured link ([`LinkBounds`]), and the network seen in the current placement's favour
//! ([`favour_current`]).
//!
//! Invariant: pure functions of their arguments. A candidate placement scored on
//! [`favour_current`]'s network beats the current one only if it does so however the
//! measurements' uncertainty turns out.

use std::collections::{BTreeMap, HashSet};

use acoa_scheduler::{Infra, LinkQ};
use acoa_shared::model::Application;

use super::model::LiveModel;

/// The latency given to a node's own loopback when its agent does not report one: the
/// probers' floor ([`LATENCY_FLOOR_MS`]), since nothing below it can be told apart.
pub const LOOPBACK_LATENCY_MS: f64 = LATENCY_FLOOR_MS;

/// What the probers can tell apart: measured latencies are rounded to this step, and
/// none is taken below [`LATENCY_FLOOR_MS`]. A user-space prober's round trip includes
/// the scheduling delays of two busy hosts (0.1 to 0.7 ms on the 2-core test machines,
/// see BENCHMARKS.md "Testbed"); below that, differences are noise (e.g. 0.1 against
/// 0.15 ms between agents on one host), which the scale-free response-time grade would
/// read as a 33 % gain, and placements would chase it.
pub const LATENCY_STEP_MS: f64 = 0.1;
pub const LATENCY_FLOOR_MS: f64 = 0.5;

/// A measured latency as the scheduler sees it (see [`LATENCY_STEP_MS`]).
pub fn quantize_latency(ms: f64) -> f64 {
    ((ms / LATENCY_STEP_MS).round() * LATENCY_STEP_MS).max(LATENCY_FLOOR_MS)
}

/// Standard errors spanned, on each side, by the confidence bounds of a measured link.
/// Whether a placement is clearly better than the current one is decided on the network
/// seen in the current placement's favour ([`favour_current`]): success rates over 20
/// probes that move in 5 % steps (a probe lost now and then on a busy host) and latencies
/// that wander by a few resolution steps cannot make a move (tests/decisions.rs), a link
/// that loses most probes or gets milliseconds slower still does.
pub const CONFIDENCE_Z: f64 = 1.0;

/// Wilson score interval of a success rate `p` measured over `n` probes at `z` standard
/// errors; `(0, 1)` when nothing was measured.
pub fn wilson_interval(p: f64, n: u32, z: f64) -> (f64, f64) {
    if n == 0 || !p.is_finite() {
        return (0.0, 1.0);
    }
    let (n, p) = (n as f64, p.clamp(0.0, 1.0));
    let z2 = z * z;
    let den = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / den;
    let half = z / den * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).clamp(0.0, p), (centre + half).clamp(p, 1.0))
}

/// What a link's measurement allows, at [`CONFIDENCE_Z`] standard errors: latency
/// (quantized) ± z · jitter / √samples but at least ± half a step of the probers'
/// resolution ([`LATENCY_STEP_MS`]), never below their floor; the success rate's Wilson
/// interval over `samples` probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkBounds {
    /// (optimistic, pessimistic)
    pub latency_ms: (f64, f64),
    /// (pessimistic, optimistic)
    pub success: (f64, f64),
}

impl LinkBounds {
    pub fn exact(latency_ms: f64, success: f64) -> LinkBounds {
        LinkBounds {
            latency_ms: (latency_ms, latency_ms),
            success: (success, success),
        }
    }

    pub fn measured(latency_ms: f64, jitter_ms: f64, success: f64, samples: u16) -> LinkBounds {
        // never tighter than what the probers resolve (one quantization step)
        let m = (CONFIDENCE_Z * jitter_ms.max(0.0) / (samples.max(1) as f64).sqrt())
            .max(LATENCY_STEP_MS / 2.0);
        LinkBounds {
            latency_ms: (
                (latency_ms - m).max(LATENCY_FLOOR_MS).min(latency_ms),
                latency_ms + m,
            ),
            success: wilson_interval(success, samples as u32, CONFIDENCE_Z),
        }
    }
}

/// The network as seen in favour of `current`: every link a channel of `app` uses under
/// `current` (either direction) at its optimistic bound, every other link at its pessimistic
/// bound. Scored on it, a candidate beats the current placement only if it does so however
/// the measurements' uncertainty turns out. The model's own view requalified
/// ([`Infra::requalified`]: O(links) numbers, no name per link).
///
/// Estimated pairs (the model's estimates): a used one becomes a link at its optimistic bound,
/// latency × (1 − r) with r the larger `LinkEstimates::uncertainty` of its ends; every other
/// estimate is taken at latency × (1 + the largest r of any node), one factor for all of them
/// (more pessimistic than each pair's own bound, and O(nodes) instead of a link per pair).
pub fn favour_current(
    model: &LiveModel,
    app: &Application,
    current: &BTreeMap<String, String>,
) -> Infra {
    let infra = model.infra();
    let spread = model.infra_spread();
    let at = |c: &str| infra.index_of(current.get(c)?);
    let used: HashSet<(u32, u32)> = app
        .channels
        .iter()
        .filter_map(|ch| Some((at(&ch.from)?, at(&ch.to)?)))
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    let mut extra = vec![];
    if let Some(est) = model.estimates() {
        for &(a, b) in &used {
            if infra.is_measured(a, b) {
                continue;
            }
            let (na, nb) = (infra.node(a), infra.node(b));
            if let Some(v) = est.view(na, nb) {
                let q = LinkQ {
                    latency_ms: est.optimistic_ms(v.latency_ms.value(), &na.name, &nb.name),
                    success: v.success.value(),
                };
                extra.push((a, b, q));
            }
        }
    }
    // deterministic whatever the set's order
    extra.sort_by_key(|(a, b, _)| (*a, *b));
    let favoured = infra.requalified(
        |i, a, b, q| {
            let x = spread[i].bounds(a, b, q);
            if used.contains(&(a, b)) {
                LinkQ {
                    latency_ms: x.latency_ms.0,
                    success: x.success.1,
                }
            } else {
                LinkQ {
                    latency_ms: x.latency_ms.1,
                    success: x.success.0,
                }
            }
        },
        &extra,
    );
    match model.estimates() {
        Some(est) => favoured.estimates_scaled(1.0 + est.max_uncertainty()),
        None => favoured,
    }
}

/// Score differences below this are rounding, not a better placement.
pub(super) const SCORE_RESOLUTION: f64 = 1e-6;

/// How much better `best` is than `current`, relative to `current` (0.2 = 20 %). A difference
/// below [`SCORE_RESOLUTION`] is no gain: when the current placement scores (about) 0, dividing
/// by it would make a best that also scores about 0 look billions of percent better.
pub(super) fn relative_gain(current: f64, best: f64) -> f64 {
    let diff = best - current;
    if diff <= SCORE_RESOLUTION {
        return 0.0;
    }
    diff / current.max(SCORE_RESOLUTION)
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    #[test]
    fn sub_resolution_noise_reads_as_one_latency() {
        for noisy in [0.0, 0.02, 0.031, 0.07, 0.09, 0.1, 0.12, 0.3, 0.54] {
            assert_eq!(quantize_latency(noisy), LATENCY_FLOOR_MS, "{noisy}");
        }
        assert!((quantize_latency(0.81) - 0.8).abs() < 1e-9);
        assert!((quantize_latency(24.057) - 24.1).abs() < 1e-9);
        // the self link is never above a measured peer link: colocating is never worse,
        // and not made to look better than the probers can tell
        assert_eq!(LOOPBACK_LATENCY_MS, LATENCY_FLOOR_MS);
    }

    #[test]
    fn a_gain_needs_a_difference_above_the_score_resolution() {
        // both about 0 (a placement no node can serve well): no gain, nothing moves
        assert_eq!(relative_gain(0.0, 4e-7), 0.0);
        assert_eq!(relative_gain(0.0, 0.0), 0.0);
        assert_eq!(relative_gain(0.5, 0.4), 0.0);
        assert!((relative_gain(0.5, 0.6) - 0.2).abs() < 1e-9);
        // from 0 to a real score: a real gain
        assert!(relative_gain(0.0, 0.3) > 1.0);
    }
}
