//! Vivaldi with a height (Dabek, Cox, Kaashoek and Morris, "Vivaldi: a decentralized network
//! coordinate system", SIGCOMM 2004), adaptive timestep.
//!
//! A coordinate is a point `x` in `D` dimensions plus a height `h >= 0`: the predicted latency
//! between two nodes is `|x_i - x_j| + h_i + h_j`. The height stands for the node's access link
//! (a train's radio, a station's uplink), which every path from the node crosses, so that the
//! Euclidean part only has to fit the core's geography. Each node also keeps `e`, its error
//! estimate (a relative error, at most `error_max`).
//!
//! One sample of latency `l` to a peer j with coordinate `(x_j, h_j)` and error `e_j`:
//!
//! ```text
//! d     = |x_i - x_j| + h_i + h_j                  predicted
//! w     = e_i / (e_i + e_j)                        trust in ourselves against the peer
//! e_s   = |d - l| / l                              this sample's relative error
//! e_i   = min(error_max, ce * w * e_s + (1 - ce * w) * e_i)
//! c     = cc_settled + (cc - cc_settled) * min(1, e_i / error_unsettled)
//! delta = c * w                                    adaptive timestep
//! f     = delta * (l - d)                          > 0 pushes apart, < 0 pulls together
//! x_i  += f * (x_i - x_j) / d                      (the height vector's unit vector:
//! h_i  += f * (h_i + h_j) / d                       [x_i - x_j, h_i + h_j] / d)
//! h_i   = max(h_i, height_min)
//! ```
//!
//! Two nodes at the same point are pushed apart along a direction drawn from the node's seeded
//! generator. A confident node (`e_i` small) against an uncertain peer moves little; a new node
//! (error `error_max`) against settled peers moves most of the way at once.
//!
//! The timestep constant itself falls with the node's own error, from Dabek's `cc` (0.25) at
//! `error_unsettled` (0.25) and above to `cc_settled` (0.05) at 0: a node that has just joined
//! or whose samples stopped fitting moves as fast as in the paper, a settled one averages its
//! samples over about five times as many (the filtered latencies still carry noise, and a
//! node's peer list changes: with `cc` 0.25 throughout, a settled coordinate follows the
//! latest few peers' noise). In the simulation (10,000 nodes, k = 16, 48 minutes with the
//! random slots drawn again every 4 minutes) the median error of the unprobed pairs fell from
//! 8.0 to 7.4 %; with `cc` 0.05 throughout it fell to 6.6 %, but a fleet starting together
//! needed far longer to settle (10.5 % after 120 rounds against 7.4 %): BENCHMARKS.md,
//! "Network coordinates", "A timestep that falls with the error".
//!
//! [`VivaldiNode::observe`] runs a raw sample through the peer's [`MpFilter`] first, updates the
//! system-level coordinate with the filtered latency, then feeds the [`RelativeFilter`] that
//! yields the application-level coordinate, the one to report.
//!
//! Peers of the node's own group (its datacenter, its train) are probed, but their samples are
//! not given to the coordinate: the height stands for the node's access link, which a link
//! inside the group does not cross (two nodes of one train see each other at 0.2 ms, while
//! their heights are the radio's 4 to 15 ms). Fed with them, the heights of a train's nodes
//! collapse and every estimate from that train is short: in the simulation (1,000 nodes, k =
//! 32) the median error was 20.3 % with them and 6.5 % without (BENCHMARKS.md, "Network
//! coordinates"). The pairs of a
//! group are measured directly instead (the neighbour set takes the group first), and an
//! unmeasured pair inside a group is estimated from the group's measured links
//! ([`super::estimate::estimate_in_group_ms`]).
//!
//! [`MpFilter`]: super::filter::MpFilter

use super::filter::{PeerFilters, RelativeFilter};
use super::{CoordError, SplitMix64};

/// Latencies and distances below this are taken as this (no division by zero).
const ZERO_MS: f64 = 1e-6;

/// A network coordinate: always finite, height and error non-negative.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coord<const D: usize> {
    vec: [f64; D],
    height: f64,
    error: f64,
}

impl<const D: usize> Coord<D> {
    /// A coordinate from reported values (e.g. a peer's, off the wire), checked.
    pub fn new(vec: [f64; D], height: f64, error: f64) -> Result<Self, CoordError> {
        if let Some(i) = vec.iter().position(|x| !x.is_finite()) {
            return Err(CoordError::NotFinite(i));
        }
        if !height.is_finite() || height < 0.0 {
            return Err(CoordError::BadHeight(height));
        }
        if !error.is_finite() || error < 0.0 {
            return Err(CoordError::BadError(error));
        }
        Ok(Coord { vec, height, error })
    }

    /// Built from values the caller derived from valid coordinates (finite, non-negative).
    pub(super) fn from_parts(vec: [f64; D], height: f64, error: f64) -> Self {
        debug_assert!(Self::new(vec, height, error).is_ok());
        Coord { vec, height, error }
    }

    /// The origin with the given height and error (a node's first coordinate).
    pub fn origin(height: f64, error: f64) -> Self {
        Coord {
            vec: [0.0; D],
            height: if height.is_finite() {
                height.max(0.0)
            } else {
                0.0
            },
            error: if error.is_finite() {
                error.max(0.0)
            } else {
                0.0
            },
        }
    }

    pub fn vec(&self) -> &[f64; D] {
        &self.vec
    }

    pub fn height(&self) -> f64 {
        self.height
    }

    /// The node's own estimate of its relative error.
    pub fn error(&self) -> f64 {
        self.error
    }

    /// Euclidean distance between the two points (without heights).
    pub fn euclid(&self, other: &Coord<D>) -> f64 {
        super::euclidean(&self.vec, &other.vec)
    }

    /// The predicted latency: Euclidean distance plus both heights.
    pub fn distance_ms(&self, other: &Coord<D>) -> f64 {
        self.euclid(other) + self.height + other.height
    }
}

/// The constants of the update and its filters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VivaldiConfig {
    /// Timestep constant `cc` (Dabek et al.: 0.25) of a node whose error estimate is at least
    /// `error_unsettled`.
    pub cc: f64,
    /// Timestep constant of a node whose error estimate is 0 (between 0 and `error_unsettled`
    /// it goes linearly from this to `cc`; set to `cc`, the paper's constant timestep).
    pub cc_settled: f64,
    /// The error estimate at and above which the timestep constant is `cc` (> 0).
    pub error_unsettled: f64,
    /// Error-estimate constant `ce` (Dabek et al.: 0.25).
    pub ce: f64,
    /// The largest (and initial) error estimate.
    pub error_max: f64,
    /// The smallest height (ms), >= 0.
    pub height_min_ms: f64,
    /// Samples above this (ms) are refused, not filtered: a probe that late is a loss.
    pub max_sample_ms: f64,
    /// The latency filter's percentile (0.5: moving median).
    pub percentile: f64,
    /// The RELATIVE update filter's threshold: the application-level coordinate changes when
    /// the window's centroid is further from it than this share of the nearest neighbour's
    /// distance (0.1: at 0.3 a train whose nearest peer outside it is 10 ms away could report
    /// a coordinate 3 ms off, and the median error of the reported coordinates was 8.6 %
    /// against 6.4 % for the system-level ones at 5,000 simulated nodes; at 0.1 they agree
    /// within the simulation's noise, for about twice as many changes).
    pub relative_threshold: f64,
    /// Floor of the nearest neighbour's distance in the update filter (ms).
    pub min_nearest_ms: f64,
}

impl Default for VivaldiConfig {
    fn default() -> Self {
        VivaldiConfig {
            cc: 0.25,
            cc_settled: 0.05,
            error_unsettled: 0.25,
            ce: 0.25,
            error_max: 1.5,
            height_min_ms: 0.01,
            max_sample_ms: 10_000.0,
            percentile: 0.5,
            relative_threshold: 0.1,
            min_nearest_ms: 1.0,
        }
    }
}

/// One node's coordinate state: `D` dimensions, a latency filter for each of at most `P` peers
/// keyed by `K`, `W` samples each. Fixed size: nothing grows with the fleet.
#[derive(Debug, Clone)]
pub struct VivaldiNode<const D: usize, const P: usize, const W: usize, K = u32> {
    cfg: VivaldiConfig,
    sys: Coord<D>,
    app: RelativeFilter<D>,
    peers: PeerFilters<K, P, W>,
    rng: SplitMix64,
    samples: u64,
}

impl<const D: usize, const P: usize, const W: usize, K: Copy + PartialEq> VivaldiNode<D, P, W, K> {
    /// A node at the origin, with the largest error; `seed` draws the directions that separate
    /// coincident nodes (give each node its own, e.g. from its name).
    pub fn new(cfg: VivaldiConfig, seed: u64) -> Self {
        VivaldiNode {
            cfg,
            sys: Coord::origin(cfg.height_min_ms, cfg.error_max),
            app: RelativeFilter::default(),
            peers: PeerFilters::default(),
            rng: SplitMix64::new(seed),
            samples: 0,
        }
    }

    pub fn config(&self) -> &VivaldiConfig {
        &self.cfg
    }

    /// A latency sample of `peer`, whose current coordinate is `remote`: filtered, then folded
    /// into the system-level coordinate. Give only samples of peers outside the node's own
    /// group (see the module's documentation). Returns whether the application-level coordinate
    /// changed (time to report it). A sample that is not finite, negative or above
    /// `max_sample_ms` is refused and changes nothing.
    pub fn observe(
        &mut self,
        peer: K,
        sample_ms: f64,
        remote: &Coord<D>,
    ) -> Result<bool, CoordError> {
        if !sample_ms.is_finite() || sample_ms < 0.0 {
            return Err(CoordError::BadSample(sample_ms));
        }
        if sample_ms > self.cfg.max_sample_ms {
            return Err(CoordError::SampleTooLarge(
                sample_ms,
                self.cfg.max_sample_ms,
            ));
        }
        self.samples += 1;
        let Some(filtered) = self.peers.push(peer, sample_ms, self.cfg.percentile) else {
            // No room for any peer (P = 0): the raw sample.
            self.update(sample_ms, remote);
            return Ok(false);
        };
        self.update(filtered, remote);
        let nearest = self
            .peers
            .nearest_ms()
            .unwrap_or(filtered)
            .max(self.cfg.min_nearest_ms);
        Ok(self
            .app
            .push(&self.sys, nearest, self.cfg.relative_threshold))
    }

    /// One Vivaldi step with latency `latency_ms` (already filtered) to a node at `remote`.
    pub fn update(&mut self, latency_ms: f64, remote: &Coord<D>) {
        if !latency_ms.is_finite() || latency_ms < 0.0 {
            return;
        }
        let c = self.cfg;
        let l = latency_ms.max(ZERO_MS);
        let d = self.sys.distance_ms(remote);
        let sample_err = (d - l).abs() / l;
        let w = self.sys.error / (self.sys.error + remote.error).max(ZERO_MS);
        let error = c.ce * w * sample_err + (1.0 - c.ce * w) * self.sys.error;
        let settled = if c.error_unsettled > 0.0 {
            1.0 - (self.sys.error / c.error_unsettled).min(1.0)
        } else {
            0.0
        };
        let force = (c.cc - (c.cc - c.cc_settled) * settled) * w * (l - d);

        let mut diff = [0.0; D];
        for (o, (a, b)) in diff.iter_mut().zip(self.sys.vec.iter().zip(remote.vec)) {
            *o = a - b;
        }
        let norm = diff.iter().map(|x| x * x).sum::<f64>().sqrt();
        let mut vec = self.sys.vec;
        let mut height = self.sys.height;
        if norm > ZERO_MS {
            let total = norm + self.sys.height + remote.height;
            for (x, dx) in vec.iter_mut().zip(diff) {
                *x += force * dx / total;
            }
            height += force * (self.sys.height + remote.height) / total;
        } else {
            // Coincident points: push apart along a random direction, all of the force on it.
            let dir = self.random_direction();
            for (x, u) in vec.iter_mut().zip(dir) {
                *x += force * u;
            }
        }
        let height = if height.is_finite() {
            height.max(c.height_min_ms.max(0.0))
        } else {
            self.sys.height
        };
        if vec.iter().all(|x| x.is_finite()) && error.is_finite() {
            self.sys = Coord {
                vec,
                height,
                error: error.clamp(0.0, c.error_max),
            };
        }
    }

    /// A unit vector in a uniformly drawn direction (rejection from the cube).
    fn random_direction(&mut self) -> [f64; D] {
        let mut v = [0.0; D];
        for _ in 0..64 {
            for x in v.iter_mut() {
                *x = 2.0 * self.rng.unit() - 1.0;
            }
            let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            if n > 1e-3 && n <= 1.0 {
                for x in v.iter_mut() {
                    *x /= n;
                }
                return v;
            }
        }
        // D = 1, or very unlucky: the first axis.
        let mut v = [0.0; D];
        if let Some(x) = v.first_mut() {
            *x = 1.0;
        }
        v
    }

    /// The system-level coordinate (changes with every sample).
    pub fn system(&self) -> &Coord<D> {
        &self.sys
    }

    /// The application-level coordinate, the one to report (the system-level one until the
    /// update filter's first window is full).
    pub fn coordinate(&self) -> &Coord<D> {
        self.app.coord().unwrap_or(&self.sys)
    }

    /// Times the application-level coordinate changed.
    pub fn app_updates(&self) -> u64 {
        self.app.updates()
    }

    /// Samples accepted.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The filtered latency of `peer`.
    pub fn filtered_ms(&self, peer: K) -> Option<f64> {
        self.peers.get(peer)
    }

    /// Drops a peer's filter (it left the peer list).
    pub fn forget(&mut self, peer: K) {
        self.peers.forget(peer);
    }
}
