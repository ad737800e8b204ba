//! The two filters of Ledlie, Gardner and Seltzer ("Network Coordinates in the Wild", NSDI
//! 2007), fixed-size.
//!
//! - [`MpFilter`], the latency filter: a moving percentile (the median by default) of the last
//!   `W` samples of one peer. A sample far off the peer's usual latency (a queue, a
//!   retransmission on the radio, a scheduling hiccup) does not reach the coordinate unless it
//!   lasts half a window; a lasting change does, within about `W / 2` samples. [`PeerFilters`]
//!   keeps one per peer in a table of at most `P` peers (the least recently sampled is
//!   replaced when a new peer comes and the table is full).
//! - [`RelativeFilter`], the application-level update filter. The system-level coordinate
//!   moves with every sample; what the node reports (and what the control plane estimates
//!   with) is an application-level coordinate that changes only when the system-level one has
//!   moved enough to matter. Of the paper's ENERGY and RELATIVE heuristics this is RELATIVE:
//!   when the centroid of the latest `UPDATE_WINDOW` system-level coordinates is further from
//!   the application-level coordinate than a threshold share of the distance to the node's
//!   nearest known neighbour, the application-level coordinate becomes that centroid and the
//!   window starts again empty (the next test is on `UPDATE_WINDOW` coordinates that all came
//!   after the change). One difference from the paper: the reference is the application-level
//!   coordinate itself, where the paper compares with the centroid of a "start window" taken
//!   after the last change. With a start window, a centroid adopted while the node was still
//!   moving lags the move, and once both windows sit at the new place nothing corrects it
//!   (the first version of this filter did so in this module's test of a 10 ms move, and
//!   stayed several ms short). Against the reported
//!   coordinate the rule guarantees what the control plane needs: the reported coordinate is
//!   within `threshold * nearest` of the smoothed system-level one after every full window.
//!   Why RELATIVE rather than ENERGY: its test is O(D) per sample on one window where
//!   ENERGY's energy distance is O(W^2 * D) over two windows of coordinates, which matters on
//!   the agent's small CPU; and its threshold means something placement cares about (has the
//!   node moved by a noticeable share of the distance to its closest neighbour, i.e. would
//!   "who is near me" change), where ENERGY's threshold is a statistic's value to be tuned.
//!   The nearest known neighbour's distance is the smallest filtered latency among the node's
//!   peers (a measured distance: no coordinates of peers to keep), floored at
//!   [`super::VivaldiConfig::min_nearest_ms`] so that a colocated
//!   peer at 0.1 ms does not make every jiggle an update.
//!
//! Invariant: no heap; memory is `P * (W + 3)` words for the peer table and `UPDATE_WINDOW`
//! coordinates for the update filter, whatever the fleet size.

use super::vivaldi::Coord;

/// Coordinates in each of the [`RelativeFilter`]'s two windows.
pub const UPDATE_WINDOW: usize = 16;

/// A moving percentile of the last `W` latency samples (W >= 1).
#[derive(Debug, Clone)]
pub struct MpFilter<const W: usize> {
    samples: [f32; W],
    len: usize,
    next: usize,
}

impl<const W: usize> Default for MpFilter<W> {
    fn default() -> Self {
        MpFilter {
            samples: [0.0; W],
            len: 0,
            next: 0,
        }
    }
}

impl<const W: usize> MpFilter<W> {
    /// Adds a sample (replacing the oldest once `W` are kept).
    pub fn push(&mut self, sample_ms: f64) {
        if W == 0 {
            return;
        }
        self.samples[self.next] = sample_ms as f32;
        self.next = (self.next + 1) % W;
        self.len = (self.len + 1).min(W);
    }

    /// Samples kept (at most `W`).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `p`-th percentile (0..=1, linear between order statistics: 0.5 is the median, the
    /// mean of the two middle samples of an even count) of the kept samples; `None` before the
    /// first.
    pub fn value(&self, p: f64) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        let mut v = self.samples;
        let v = &mut v[..self.len];
        // Insertion sort: W is a handful of samples.
        for i in 1..v.len() {
            let mut j = i;
            while j > 0 && v[j - 1] > v[j] {
                v.swap(j - 1, j);
                j -= 1;
            }
        }
        let pos = p.clamp(0.0, 1.0) * (v.len() - 1) as f64;
        let lo = pos.floor() as usize;
        let hi = (lo + 1).min(v.len() - 1);
        let frac = pos - lo as f64;
        Some(f64::from(v[lo]) + frac * (f64::from(v[hi]) - f64::from(v[lo])))
    }
}

#[derive(Debug, Clone)]
struct PeerEntry<K, const W: usize> {
    key: K,
    filter: MpFilter<W>,
    /// The filter's current value (kept so that the nearest neighbour is a scan of values).
    value_ms: f64,
    /// When this peer was last sampled (the table's own counter), for replacement.
    last: u64,
}

/// One [`MpFilter`] per peer, at most `P` peers (least recently sampled replaced first).
#[derive(Debug, Clone)]
pub struct PeerFilters<K, const P: usize, const W: usize> {
    peers: heapless::Vec<PeerEntry<K, W>, P>,
    clock: u64,
}

impl<K, const P: usize, const W: usize> Default for PeerFilters<K, P, W> {
    fn default() -> Self {
        PeerFilters {
            peers: heapless::Vec::new(),
            clock: 0,
        }
    }
}

impl<K: Copy + PartialEq, const P: usize, const W: usize> PeerFilters<K, P, W> {
    /// Adds a sample of `peer` and returns its filtered latency (`None` only if `P` is 0).
    pub fn push(&mut self, peer: K, sample_ms: f64, percentile: f64) -> Option<f64> {
        self.clock += 1;
        let i = match self.peers.iter().position(|e| e.key == peer) {
            Some(i) => i,
            None => {
                let fresh = PeerEntry {
                    key: peer,
                    filter: MpFilter::default(),
                    value_ms: 0.0,
                    last: 0,
                };
                if self.peers.push(fresh.clone()).is_ok() {
                    self.peers.len() - 1
                } else {
                    let (oldest, _) = self.peers.iter().enumerate().min_by_key(|(_, e)| e.last)?;
                    self.peers[oldest] = fresh;
                    oldest
                }
            }
        };
        let e = &mut self.peers[i];
        e.filter.push(sample_ms);
        e.last = self.clock;
        e.value_ms = e.filter.value(percentile)?;
        Some(e.value_ms)
    }

    /// The filtered latency of `peer`, if it has samples.
    pub fn get(&self, peer: K) -> Option<f64> {
        self.peers
            .iter()
            .find(|e| e.key == peer)
            .map(|e| e.value_ms)
    }

    /// Forgets a peer (it left the peer list).
    pub fn forget(&mut self, peer: K) {
        if let Some(i) = self.peers.iter().position(|e| e.key == peer) {
            self.peers.swap_remove(i);
        }
    }

    /// The smallest filtered latency of all peers (`None` without any).
    pub fn nearest_ms(&self) -> Option<f64> {
        self.peers.iter().map(|e| e.value_ms).reduce(f64::min)
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

/// The application-level coordinate (RELATIVE update filter: see the module's documentation).
#[derive(Debug, Clone)]
pub struct RelativeFilter<const D: usize> {
    /// The system-level coordinates since the last change (at most the latest
    /// `UPDATE_WINDOW`), oldest first.
    current: heapless::Deque<Coord<D>, UPDATE_WINDOW>,
    app: Option<Coord<D>>,
    updates: u64,
}

impl<const D: usize> Default for RelativeFilter<D> {
    fn default() -> Self {
        RelativeFilter {
            current: heapless::Deque::new(),
            app: None,
            updates: 0,
        }
    }
}

impl<const D: usize> RelativeFilter<D> {
    /// Takes the system-level coordinate after an update; `nearest_ms` is the distance to the
    /// nearest known neighbour (> 0). Returns whether the application-level coordinate changed.
    pub fn push(&mut self, sys: &Coord<D>, nearest_ms: f64, threshold: f64) -> bool {
        if self.current.is_full() {
            self.current.pop_front();
        }
        let _ = self.current.push_back(*sys);
        if !self.current.is_full() {
            return false;
        }
        let cur = self.current_centroid();
        let change = match &self.app {
            None => true,
            Some(app) => {
                let moved = cur.euclid(app) + (cur.height() - app.height()).abs();
                moved / nearest_ms.max(f64::MIN_POSITIVE) > threshold
            }
        };
        if change {
            self.app = Some(cur);
            self.updates += 1;
            self.current.clear();
        }
        change
    }

    fn current_centroid(&self) -> Coord<D> {
        let n = self.current.len() as f64;
        let mut v = [0.0; D];
        let (mut h, mut e) = (0.0, 0.0);
        for c in &self.current {
            for (a, x) in v.iter_mut().zip(c.vec()) {
                *a += x / n;
            }
            h += c.height() / n;
            e += c.error() / n;
        }
        // Means of finite, non-negative values are finite and non-negative.
        Coord::from_parts(v, h, e)
    }

    /// The application-level coordinate; `None` until the first window is full.
    pub fn coord(&self) -> Option<&Coord<D>> {
        self.app.as_ref()
    }

    /// Times the application-level coordinate changed.
    pub fn updates(&self) -> u64 {
        self.updates
    }
}
