//! The nearest members by predicted latency (`|x_i - x_j| + h_j`), for a whole fleet at once: a
//! k-d tree over the members' coordinates, built once in O(n log n), queried per node in about
//! O(log n + m) for m nearest instead of a scan of every member.
//!
//! The answer is exactly the scan's (same order, ties broken by the lower index): a subtree is
//! skipped only when the lower bound of its distances (the Euclidean distance to its bounding
//! box, computed term by term as [`Coord::euclid`] computes the distance, plus the least height
//! in it) is strictly above the m-th best so far. Rounding is monotone, so the bound computed
//! in floating point is never above a distance computed in floating point.

use super::vivaldi::Coord;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A candidate at predicted distance `.0`, member index `.1`; ordered by distance, then index.
#[derive(PartialEq, Clone, Copy)]
pub(super) struct Far(pub(super) f64, pub(super) usize);

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

/// The `m` best of the candidates offered (a bounded max-heap).
pub(super) struct Best {
    m: usize,
    heap: BinaryHeap<Far>,
}

impl Best {
    pub(super) fn new(m: usize) -> Self {
        Best {
            m,
            heap: BinaryHeap::with_capacity(m + 1),
        }
    }

    pub(super) fn offer(&mut self, f: Far) {
        if self.heap.len() < self.m {
            self.heap.push(f);
        } else if self.heap.peek().is_some_and(|w| f < *w) {
            self.heap.pop();
            self.heap.push(f);
        }
    }

    /// The distance a candidate must not exceed to matter (infinite while not full).
    fn bound(&self) -> f64 {
        if self.heap.len() < self.m {
            f64::INFINITY
        } else {
            self.heap.peek().map_or(f64::INFINITY, |w| w.0)
        }
    }

    /// The member indices, nearest first.
    pub(super) fn into_sorted(self) -> Vec<usize> {
        let mut v = self.heap.into_vec();
        v.sort();
        v.into_iter().map(|f| f.1).collect()
    }
}

const LEAF: usize = 16;

struct Node<const D: usize> {
    lo: [f64; D],
    hi: [f64; D],
    min_height: f64,
    /// The range of `points` under this node.
    start: usize,
    end: usize,
    /// Children (indices into `nodes`), none for a leaf.
    kids: Option<(usize, usize)>,
}

/// A k-d tree over the members that have a coordinate.
pub struct NearIndex<const D: usize> {
    /// (member index, coordinate), reordered so that each node's points are contiguous.
    points: Vec<(usize, Coord<D>)>,
    nodes: Vec<Node<D>>,
}

impl<const D: usize> NearIndex<D> {
    /// The index of `coords` (member index, coordinate); members without one are left out.
    pub fn build(coords: impl IntoIterator<Item = (usize, Coord<D>)>) -> Self {
        let mut t = NearIndex {
            points: coords.into_iter().collect(),
            nodes: Vec::new(),
        };
        if !t.points.is_empty() {
            t.build_node(0, t.points.len());
        }
        t
    }

    fn build_node(&mut self, start: usize, end: usize) -> usize {
        let mut lo = [f64::INFINITY; D];
        let mut hi = [f64::NEG_INFINITY; D];
        let mut min_height = f64::INFINITY;
        for (_, c) in &self.points[start..end] {
            for (d, x) in c.vec().iter().enumerate() {
                lo[d] = lo[d].min(*x);
                hi[d] = hi[d].max(*x);
            }
            min_height = min_height.min(c.height());
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            lo,
            hi,
            min_height,
            start,
            end,
            kids: None,
        });
        if end - start > LEAF {
            let dim = (0..D)
                .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
                .unwrap_or(0);
            let mid = start + (end - start) / 2;
            self.points[start..end].select_nth_unstable_by(mid - start, |a, b| {
                a.1.vec()[dim].total_cmp(&b.1.vec()[dim])
            });
            let l = self.build_node(start, mid);
            let r = self.build_node(mid, end);
            self.nodes[id].kids = Some((l, r));
        }
        id
    }

    /// Lower bound of the predicted distance from `q` to any point under node `n`.
    fn bound(&self, n: usize, q: &Coord<D>) -> f64 {
        let node = &self.nodes[n];
        let sq = q
            .vec()
            .iter()
            .enumerate()
            .map(|(d, x)| {
                let gap = if *x < node.lo[d] {
                    node.lo[d] - x
                } else if *x > node.hi[d] {
                    x - node.hi[d]
                } else {
                    0.0
                };
                gap * gap
            })
            .sum::<f64>()
            .sqrt();
        sq + node.min_height
    }

    /// The `m` members nearest to `q` by `|q - x_j| + h_j` among those `keep` accepts, nearest
    /// first (ties: the lower index first), exactly as a scan of every member would give.
    pub fn nearest(&self, q: &Coord<D>, m: usize, keep: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut best = Best::new(m);
        if m > 0 && !self.nodes.is_empty() {
            self.visit(0, q, &keep, &mut best);
        }
        best.into_sorted()
    }

    fn visit(&self, n: usize, q: &Coord<D>, keep: &impl Fn(usize) -> bool, best: &mut Best) {
        let node = &self.nodes[n];
        match node.kids {
            None => {
                for (j, c) in &self.points[node.start..node.end] {
                    if keep(*j) {
                        best.offer(Far(q.euclid(c) + c.height(), *j));
                    }
                }
            }
            Some((l, r)) => {
                let (bl, br) = (self.bound(l, q), self.bound(r, q));
                let order = if bl <= br {
                    [(l, bl), (r, br)]
                } else {
                    [(r, br), (l, bl)]
                };
                for (kid, b) in order {
                    if b <= best.bound() {
                        self.visit(kid, q, keep, best);
                    }
                }
            }
        }
    }
}
