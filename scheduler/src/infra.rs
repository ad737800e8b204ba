//! The scheduler's own view of the infrastructure: nodes indexed in name order, a sparse
//! set of measured directed links and, optionally, an [`Estimator`] for the pairs without
//! a measurement (a pair neither measured nor estimable is unknown, so a channel that needs
//! it cannot be placed there).
//!
//! A full mesh of 10,000 nodes is 10^8 links: that is never a YAML file. [`Infra`] keeps
//! only the measured links, in per-node sorted adjacency lists (by source and by
//! destination) that serve both the search's "where can the other end of this channel go"
//! and point look-ups (a binary search in the source's row); an
//! estimated link is computed when asked ([`Infra::link`], [`Infra::link_known`]) and the
//! search bounds estimated links with the estimator's per-node halves, never by visiting
//! n^2 pairs.

use crate::estimate::Estimator;
use acoa_shared::coords::Known;
use acoa_shared::model::{last_of_each_pair, row_starts, Cluster, LinkEstimates, Node, Observed};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A small fast hasher for integer keys (the Fx hash of rustc); not DoS-resistant, which
/// does not matter for keys we build ourselves.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const FX_K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(FX_K);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(FX_K);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    /// The product's high bits, rotated down (as rustc-hash 2 does): the map picks a bucket by
    /// the low bits, and the low bits of `key x K` are those of the key's own low bits alone.
    /// A pair of nodes hashes as `from` then `to`, so without the rotation every pair into
    /// one node fell in one bucket: n^2 pairs made chains of n (when the links were in such a
    /// map, an all-pairs network of 10,000 nodes did not finish building in 25 minutes).
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// The measured quality of one directed link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkQ {
    pub latency_ms: f64,
    pub success: f64,
}

/// Nodes (sorted by name, so that index order is name order) and the links that exist.
/// Cloning it is cheap (shared, immutable once built).
#[derive(Debug, Clone)]
pub struct Infra {
    d: Arc<Data>,
}

#[derive(Debug, Clone)]
struct Data {
    /// Shared with the views requalified from this one ([`Infra::requalified`]).
    nodes: Arc<Vec<Node>>,
    index: Arc<HashMap<String, u32>>,
    /// The measured links, shared with the views that differ only in their estimates
    /// ([`Infra::without_estimates`], [`Infra::hopeful`]).
    net: Arc<Net>,
    /// What the applications were measured to use ([`Cluster::observed`]).
    observed: BTreeMap<String, Observed>,
    /// The pairs without a measurement, estimated.
    est: Option<Arc<Estimator>>,
}

/// The measured links in compressed rows: their shape (which pairs, by source and by
/// destination), shared by every view that differs only in the links' qualities
/// ([`Infra::requalified`]), and their qualities by link number (the links numbered in
/// (from, to) order: the rows by source in order). No hash map: a point look-up is a binary
/// search in its source's row (a node measures a few dozen peers). At 1.7 million links a view
/// takes about 32 bytes a link (16 of them the qualities), and a view requalified the 16 of
/// its qualities alone; a map and the qualities held again by destination took 80.
#[derive(Debug)]
struct Net {
    shape: Arc<Shape>,
    q: Vec<LinkQ>,
}

/// Which pairs are measured: by source (`out`: entry `i` is link number `i`) and by
/// destination (`inn`, for the search's backward walks: each entry's link number in
/// `inn_link`, not a second copy of its quality).
#[derive(Debug)]
struct Shape {
    out: Rows,
    inn: Rows,
    inn_link: Vec<u32>,
}

impl Net {
    /// The links `(from, to, quality)` of `n` nodes (a pair given again: the later one wins).
    fn new(n: usize, links: impl IntoIterator<Item = (u32, u32, LinkQ)>) -> Arc<Net> {
        let links: Vec<(u32, u32, LinkQ)> = links.into_iter().collect();
        let (out, q) = Rows::build(n, &links);
        drop(links);
        let (inn, inn_link) = out.transposed();
        Arc::new(Net {
            shape: Arc::new(Shape { out, inn, inn_link }),
            q,
        })
    }

    /// This net with each link's quality `quality(i, from, to, q)` and the `extra` links added
    /// (an extra pair already measured takes the extra quality; of two extras for one pair
    /// the later): each row merged with its extras in order, no sort of every link again (an
    /// exploration's view at 1.7 million links held 50 MB more while it was built).
    fn merged(
        &self,
        quality: &impl Fn(usize, u32, u32, LinkQ) -> LinkQ,
        extra: &[(u32, u32, LinkQ)],
    ) -> Arc<Net> {
        // of equal pairs the later given is kept
        let kept = last_of_each_pair(extra.to_vec());
        let old = &self.shape.out;
        let rows = old.at.len() - 1;
        let mut out = Rows {
            at: Vec::with_capacity(rows + 1),
            other: Vec::with_capacity(old.other.len() + kept.len()),
        };
        let mut q = Vec::with_capacity(old.other.len() + kept.len());
        out.at.push(0);
        let mut e = kept.iter().peekable();
        for f in 0..rows as u32 {
            let (a, b) = old.span(f);
            let mut i = a;
            loop {
                let measured = (i < b).then(|| old.other[i]);
                let extra = e.peek().filter(|x| x.0 == f).map(|x| x.1);
                // the lower end first; an extra for a measured pair takes its place
                let take_extra = match (measured, extra) {
                    (None, None) => break,
                    (None, Some(_)) => true,
                    (Some(_), None) => false,
                    (Some(m), Some(t)) => t <= m,
                };
                if take_extra {
                    let (_, t, x) = *e.next().expect("peeked");
                    out.other.push(t);
                    q.push(x);
                    if measured == Some(t) {
                        i += 1;
                    }
                } else {
                    out.other.push(old.other[i]);
                    q.push(quality(i, f, old.other[i], self.q[i]));
                    i += 1;
                }
            }
            out.at.push(out.other.len() as u32);
        }
        let (inn, inn_link) = out.transposed();
        Arc::new(Net {
            shape: Arc::new(Shape { out, inn, inn_link }),
            q,
        })
    }

    /// The number of the link from `from` to `to`, if it is measured.
    #[inline]
    fn find(&self, from: u32, to: u32) -> Option<usize> {
        let out = &self.shape.out;
        let (a, b) = out.span(from);
        out.other[a..b].binary_search(&to).ok().map(|i| a + i)
    }

    /// Every link, in (from, to) order: (number, from, to).
    fn each(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        let out = &self.shape.out;
        (0..out.at.len().saturating_sub(1) as u32).flat_map(move |f| {
            let (a, b) = out.span(f);
            (a..b).map(move |i| (i, f, out.other[i]))
        })
    }
}

/// Adjacency lists in compressed rows (one allocation each, not one per node): row `r`'s
/// entries are `at[r]..at[r + 1]`, sorted by the node at the other end.
#[derive(Debug, Clone, Default)]
struct Rows {
    at: Vec<u32>,
    other: Vec<u32>,
}

impl Rows {
    /// The rows of `rows` nodes from `(row, other end, quality)` entries, and the qualities in
    /// the rows' order (a counting sort, then each row's few entries sorted; of two entries
    /// for one pair the later one stays).
    fn build(rows: usize, entries: &[(u32, u32, LinkQ)]) -> (Rows, Vec<LinkQ>) {
        let at = row_starts(rows, entries.iter().map(|(r, _, _)| *r));
        let mut next = at.clone();
        let mut placed: Vec<(u32, u32)> = vec![(0, 0); entries.len()];
        for (i, (r, o, _)) in entries.iter().enumerate() {
            let p = &mut next[*r as usize];
            placed[*p as usize] = (*o, i as u32);
            *p += 1;
        }
        let mut kept = Rows {
            at: Vec::with_capacity(rows + 1),
            other: Vec::with_capacity(entries.len()),
        };
        let mut q = Vec::with_capacity(entries.len());
        kept.at.push(0);
        for r in 0..rows {
            let row = &mut placed[at[r] as usize..at[r + 1] as usize];
            // by the other end, then the order given: the last of equal ends is the later
            row.sort_unstable();
            for (j, (o, i)) in row.iter().enumerate() {
                if row.get(j + 1).is_some_and(|(next, _)| next == o) {
                    continue;
                }
                kept.other.push(*o);
                q.push(entries[*i as usize].2);
            }
            kept.at.push(kept.other.len() as u32);
        }
        (kept, q)
    }

    /// The same entries by their other end, and each one's number here (each row comes out
    /// sorted: the rows are walked in order).
    fn transposed(&self) -> (Rows, Vec<u32>) {
        let rows = self.at.len() - 1;
        let at = row_starts(rows, self.other.iter().copied());
        let mut next = at.clone();
        let mut other = vec![0u32; self.other.len()];
        let mut number = vec![0u32; self.other.len()];
        for r in 0..rows as u32 {
            let (a, b) = self.span(r);
            for i in a..b {
                let p = &mut next[self.other[i] as usize];
                other[*p as usize] = r;
                number[*p as usize] = i as u32;
                *p += 1;
            }
        }
        (Rows { at, other }, number)
    }

    #[inline]
    fn span(&self, r: u32) -> (usize, usize) {
        (
            self.at[r as usize] as usize,
            self.at[r as usize + 1] as usize,
        )
    }

    fn row(&self, r: u32) -> &[u32] {
        let (a, b) = self.span(r);
        &self.other[a..b]
    }
}

/// The qualities of the links into one node, in its row's order ([`Infra::inn_links`]):
/// looked up by link number.
#[derive(Debug, Clone, Copy)]
pub struct InnQ<'a> {
    links: &'a [u32],
    q: &'a [LinkQ],
}

impl<'a> InnQ<'a> {
    /// The `j`-th link's quality.
    #[inline]
    pub fn get(&self, j: usize) -> LinkQ {
        self.q[self.links[j] as usize]
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The qualities in the row's order.
    pub fn iter(&self) -> impl Iterator<Item = LinkQ> + 'a {
        let q = self.q;
        self.links.iter().map(move |i| q[*i as usize])
    }
}

/// Names strictly increasing: in name order, none twice.
fn in_name_order(nodes: &[Node]) -> bool {
    nodes.windows(2).all(|w| w[0].name < w[1].name)
}

impl Infra {
    /// Builds the view from `nodes` and links given as indices into `nodes`
    /// (`(from, to, quality)`). Node names must be unique; a later duplicate link wins.
    pub fn new(nodes: Vec<Node>, links: impl IntoIterator<Item = (u32, u32, LinkQ)>) -> Infra {
        if in_name_order(&nodes) {
            return Infra::built(Arc::new(nodes), links);
        }
        let mut order: Vec<u32> = (0..nodes.len() as u32).collect();
        order.sort_by(|a, b| nodes[*a as usize].name.cmp(&nodes[*b as usize].name));
        let mut new_of_old = vec![0u32; nodes.len()];
        for (new, old) in order.iter().enumerate() {
            new_of_old[*old as usize] = new as u32;
        }
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        let nodes: Vec<Node> = order
            .iter()
            .map(|o| slots[*o as usize].take().expect("each node once"))
            .collect();
        Infra::built(
            Arc::new(nodes),
            links
                .into_iter()
                .map(|(f, t, q)| (new_of_old[f as usize], new_of_old[t as usize], q)),
        )
    }

    /// [`Infra::new`] of nodes already in name order, shared with the caller, not copied (a
    /// live model of 50,000 nodes holds them once, not twice). Nodes out of order or named
    /// twice are copied and sorted by [`Infra::new`].
    pub fn of_sorted(
        nodes: Arc<Vec<Node>>,
        links: impl IntoIterator<Item = (u32, u32, LinkQ)>,
    ) -> Infra {
        if !in_name_order(&nodes) {
            return Infra::new(nodes.as_ref().clone(), links);
        }
        Infra::built(nodes, links)
    }

    /// The view of `nodes` in the order given (their places) and `links` by those places.
    fn built(nodes: Arc<Vec<Node>>, links: impl IntoIterator<Item = (u32, u32, LinkQ)>) -> Infra {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as u32))
            .collect();
        let net = Net::new(nodes.len(), links);
        Infra {
            d: Arc::new(Data {
                nodes,
                index: Arc::new(index),
                net,
                observed: BTreeMap::new(),
                est: None,
            }),
        }
    }

    /// The same view with the unmeasured pairs estimated from `est` (empty: none is).
    pub fn with_estimates(mut self, est: &LinkEstimates) -> Infra {
        let e = (!est.is_empty()).then(|| Arc::new(Estimator::new(&self.d.nodes, est)));
        Arc::make_mut(&mut self.d).est = e;
        self
    }

    /// The same view with every estimated latency multiplied by `f` >= 0 (as
    /// `with_estimates(&est.scaled(f))` of the estimates this view was given, built from its
    /// estimator: [`Estimator::scaled`]); measured links as they are. Without an estimator,
    /// the same view.
    pub fn estimates_scaled(mut self, f: f64) -> Infra {
        if let Some(e) = &self.d.est {
            let scaled = Arc::new(e.scaled(f));
            Arc::make_mut(&mut self.d).est = Some(scaled);
        }
        self
    }

    /// The same view without the estimator: only the measured links exist (nodes and links
    /// shared, not copied).
    pub fn without_estimates(&self) -> Infra {
        let mut d = (*self.d).clone();
        d.est = None;
        Infra { d: Arc::new(d) }
    }

    /// The same view with every estimated link at its optimistic bound
    /// ([`Estimator::hopeful`]: what the pairs nobody measured could be if the coordinates
    /// are as wrong as they say they may be); measured links as they are (shared, not
    /// copied). Without an estimator, the same view.
    pub fn hopeful(&self) -> Infra {
        let mut d = (*self.d).clone();
        d.est = d.est.map(|e| Arc::new(e.hopeful()));
        Infra { d: Arc::new(d) }
    }

    /// Whether `other` is this very view (a clone of it), not merely an equal one.
    pub fn same(&self, other: &Infra) -> bool {
        Arc::ptr_eq(&self.d, &other.d)
    }

    /// The estimator of the unmeasured pairs, if the snapshot has one.
    #[inline]
    pub fn estimator(&self) -> Option<&Estimator> {
        self.d.est.as_deref()
    }

    /// The same view with the applications' measured use ([`Cluster::observed`]), which the
    /// `network-aware` algorithm reads.
    pub fn with_observed(mut self, observed: BTreeMap<String, Observed>) -> Infra {
        Arc::make_mut(&mut self.d).observed = observed;
        self
    }

    /// What application `app` was measured to use, if anything.
    pub fn observed(&self, app: &str) -> Option<&Observed> {
        self.d.observed.get(app)
    }

    /// The view of a (validated) cluster snapshot.
    pub fn from_cluster(cluster: &Cluster) -> Infra {
        let pos: HashMap<&str, u32> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i as u32))
            .collect();
        let links: Vec<(u32, u32, LinkQ)> = cluster
            .links
            .iter()
            .filter_map(|l| {
                Some((
                    *pos.get(l.from.as_str())?,
                    *pos.get(l.to.as_str())?,
                    LinkQ {
                        latency_ms: l.latency_ms,
                        success: l.success,
                    },
                ))
            })
            .collect();
        let infra =
            Infra::new(cluster.nodes.clone(), links).with_observed(cluster.observed.clone());
        match &cluster.estimates {
            Some(e) => infra.with_estimates(e),
            None => infra,
        }
    }

    pub fn len(&self) -> usize {
        self.d.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.d.nodes.is_empty()
    }

    /// Measured links (estimated ones are not counted: they are not stored).
    pub fn link_count(&self) -> usize {
        self.d.net.q.len()
    }

    pub fn node(&self, i: u32) -> &Node {
        &self.d.nodes[i as usize]
    }

    pub fn nodes(&self) -> &[Node] {
        &self.d.nodes
    }

    pub fn index_of(&self, name: &str) -> Option<u32> {
        self.d.index.get(name).copied()
    }

    /// The link from `from` to `to` (`from == to` is the loopback): measured, else
    /// estimated, if either is known.
    #[inline]
    pub fn link(&self, from: u32, to: u32) -> Option<LinkQ> {
        let net = &self.d.net;
        match net.find(from, to) {
            Some(i) => Some(net.q[i]),
            None => self.d.est.as_ref()?.estimate(from, to),
        }
    }

    /// Whether [`Infra::link`] is `Some`, without estimating it (a search filters whole
    /// domains with it).
    #[inline]
    pub fn has_link(&self, from: u32, to: u32) -> bool {
        self.d.est.as_ref().is_some_and(|e| e.covers(from, to))
            || self.d.net.find(from, to).is_some()
    }

    /// [`Infra::link`], marked measured or estimated.
    pub fn link_known(&self, from: u32, to: u32) -> Option<Known<LinkQ>> {
        let net = &self.d.net;
        match net.find(from, to) {
            Some(i) => Some(Known::Measured(net.q[i])),
            None => self
                .d
                .est
                .as_ref()?
                .estimate(from, to)
                .map(Known::Estimated),
        }
    }

    /// How many channels of `app` run over an estimated link under `assignment` (component ->
    /// node; a component or node it does not know is not counted).
    pub fn estimated_channels(
        &self,
        app: &acoa_shared::model::Application,
        assignment: &BTreeMap<String, String>,
    ) -> usize {
        let at = |c: &str| self.index_of(assignment.get(c)?);
        app.channels
            .iter()
            .filter(|c| {
                at(&c.from)
                    .zip(at(&c.to))
                    .and_then(|(a, b)| self.link_known(a, b))
                    .is_some_and(|q| q.is_estimated())
            })
            .count()
    }

    /// Nodes `from` has a measured link to (sorted) and those links.
    pub fn out_links(&self, from: u32) -> (&[u32], &[LinkQ]) {
        let net = &self.d.net;
        let (a, b) = net.shape.out.span(from);
        (&net.shape.out.other[a..b], &net.q[a..b])
    }

    /// Nodes with a measured link to `to` (sorted) and those links.
    pub fn inn_links(&self, to: u32) -> (&[u32], InnQ<'_>) {
        let net = &self.d.net;
        let (a, b) = net.shape.inn.span(to);
        (
            &net.shape.inn.other[a..b],
            InnQ {
                links: &net.shape.inn_link[a..b],
                q: &net.q,
            },
        )
    }

    /// Whether the link from `from` to `to` is measured (not estimated).
    pub fn is_measured(&self, from: u32, to: u32) -> bool {
        self.d.net.find(from, to).is_some()
    }

    /// The same nodes and links with other qualities: each measured link's becomes
    /// `quality(i, from, to, q)` (`i`: its number, the links numbered in (from, to) order),
    /// and the `extra` links are added (a pair already measured takes the extra quality). The
    /// applications' use and the estimator are kept. O(links) numbers, no name: the whole
    /// network seen otherwise (e.g. at its confidence bounds) without building the view again.
    pub fn requalified(
        &self,
        quality: impl Fn(usize, u32, u32, LinkQ) -> LinkQ,
        extra: &[(u32, u32, LinkQ)],
    ) -> Infra {
        let d = &self.d;
        let net = &d.net;
        let net = if extra.is_empty() {
            // the same shape with other qualities
            Arc::new(Net {
                shape: net.shape.clone(),
                q: net
                    .each()
                    .map(|(i, f, t)| quality(i, f, t, net.q[i]))
                    .collect(),
            })
        } else {
            net.merged(&quality, extra)
        };
        Infra {
            d: Arc::new(Data {
                nodes: d.nodes.clone(),
                index: d.index.clone(),
                net,
                observed: d.observed.clone(),
                est: d.est.clone(),
            }),
        }
    }

    /// Nodes `from` has a measured link to, sorted.
    pub fn out(&self, from: u32) -> &[u32] {
        self.d.net.shape.out.row(from)
    }

    /// Nodes with a measured link to `to`, sorted.
    pub fn inn(&self, to: u32) -> &[u32] {
        self.d.net.shape.inn.row(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(latency_ms: f64) -> LinkQ {
        LinkQ {
            latency_ms,
            success: 1.0,
        }
    }

    /// Pairs into one node spread over the buckets of a map: the bucket is picked by the
    /// hash's low bits, which without mixing hold only the pair's `to`.
    #[test]
    fn pairs_into_one_node_spread_over_the_buckets() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<FxHasher>::default();
        let mask = (1u64 << 20) - 1; // a map of a million buckets
        for to in [0, 7, 4_999] {
            let buckets: std::collections::BTreeSet<u64> = (0..1_000)
                .map(|from| build.hash_one((from, to)) & mask)
                .collect();
            assert!(buckets.len() > 990, "to {to}: {} buckets", buckets.len());
        }
    }

    /// `n` edge nodes named in index order, `per_dc` to a datacenter.
    fn edge_nodes(n: u32, per_dc: u32) -> Vec<Node> {
        (0..n)
            .map(|i| Node {
                name: format!("n{i:02}"),
                datacenter: format!("dc{}", i / per_dc),
                layer: acoa_shared::model::Layer::Edge,
                arch: "aarch64".into(),
                hardware: vec![],
                software: vec![],
                capacity: Default::default(),
                usage: Default::default(),
                position: None,
            })
            .collect()
    }

    /// `got` and `want` hold the same links, row by row both ways, and answer every pair alike.
    fn assert_same_view(got: &Infra, want: &Infra) {
        assert_eq!(got.link_count(), want.link_count());
        let n = want.len() as u32;
        for a in 0..n {
            assert_eq!(got.out_links(a), want.out_links(a), "out of {a}");
            let into = |v: &Infra| {
                let (from, qs) = v.inn_links(a);
                (from.to_vec(), qs.iter().collect::<Vec<_>>())
            };
            assert_eq!(into(got), into(want), "into {a}");
            for b in 0..n {
                assert_eq!(got.link(a, b), want.link(a, b), "{a} -> {b}");
            }
        }
    }

    /// Nodes already in name order are shared with the caller, not copied, and give the view
    /// that the same nodes given in another order give (their links numbered by those places).
    #[test]
    fn nodes_in_name_order_are_shared_and_give_the_same_view() {
        let n = 12u32;
        let sorted = edge_nodes(n, 4);
        let links: Vec<(u32, u32, LinkQ)> = (0..n)
            .flat_map(|i| [(i, (i * 5 + 1) % n, q(1.0 + i as f64)), (i, i, q(0.5))])
            .collect();
        let shared = Arc::new(sorted.clone());
        let view = Infra::of_sorted(shared.clone(), links.clone());
        assert!(std::ptr::eq(view.nodes(), shared.as_slice()), "not copied");
        let reversed: Vec<Node> = sorted.iter().rev().cloned().collect();
        let r = |i: u32| n - 1 - i;
        let built = Infra::new(reversed, links.iter().map(|(a, b, x)| (r(*a), r(*b), *x)));
        assert_eq!(built.nodes(), view.nodes());
        assert_same_view(&view, &built);
        // out of order, given shared: copied and sorted, the same view again
        let unsorted = Infra::of_sorted(
            Arc::new(sorted.iter().rev().cloned().collect()),
            links.iter().map(|(a, b, x)| (r(*a), r(*b), *x)),
        );
        assert_same_view(&unsorted, &built);
    }

    /// Extras merged into the rows give the view built with them, whatever rows they fall in
    /// (empty rows, before, between and after the measured ends, the last row), pair by pair.
    #[test]
    fn extras_merged_into_the_rows_are_the_view_built_with_them() {
        let n = 30u32;
        let nodes = edge_nodes(n, n);
        // a small deterministic generator (xorshift)
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |m: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(m)) as u32
        };
        let links: Vec<(u32, u32, LinkQ)> = (0..200)
            .map(|k| (next(n - 3), next(n), q(1.0 + k as f64)))
            .collect();
        let extra: Vec<(u32, u32, LinkQ)> = (0..80)
            .map(|k| (next(n), next(n), q(500.0 + k as f64)))
            .collect();
        let infra = Infra::new(nodes.clone(), links.clone());
        let merged = infra.requalified(|_, _, _, x| q(x.latency_ms + 0.5), &extra);
        let mut all: Vec<(u32, u32, LinkQ)> = vec![];
        for a in 0..n {
            let (to, qs) = infra.out_links(a);
            all.extend(
                to.iter()
                    .zip(qs)
                    .map(|(b, x)| (a, *b, q(x.latency_ms + 0.5))),
            );
        }
        all.extend(extra.iter().copied());
        let built = Infra::new(nodes, all);
        assert_same_view(&merged, &built);
    }

    /// A view requalified is the view built again with those qualities: point look-ups and
    /// the adjacency the search walks agree, extra links included.
    #[test]
    fn a_requalified_view_is_the_view_built_with_those_qualities() {
        let n = 8u32;
        let nodes = edge_nodes(n, 4);
        // a ring both ways, every loopback, and a chord
        let mut links = vec![];
        for i in 0..n {
            links.push((i, (i + 1) % n, q(1.0 + i as f64)));
            links.push(((i + 1) % n, i, q(2.0 + i as f64)));
            links.push((i, i, q(0.5)));
        }
        links.push((0, 4, q(9.0)));
        let infra = Infra::new(nodes, links);
        let mut all = vec![];
        for a in 0..n {
            let (to, qs) = infra.out_links(a);
            for (b, x) in to.iter().zip(qs) {
                all.push((a, *b, *x));
            }
        }
        let unmeasured = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .find(|(a, b)| !infra.is_measured(*a, *b))
            .expect("a pair not measured");
        let measured = all[3];
        let extra = [
            (unmeasured.0, unmeasured.1, q(66.0)),
            (measured.0, measured.1, q(55.0)),
            (unmeasured.0, unmeasured.1, q(77.0)),
        ];
        // every link twice as slow, then the extras
        let twice = infra.requalified(|_, _, _, x| q(x.latency_ms * 2.0), &extra);
        let mut expected: Vec<(u32, u32, LinkQ)> = all
            .iter()
            .map(|(a, b, x)| (*a, *b, q(x.latency_ms * 2.0)))
            .collect();
        expected.extend(extra);
        let built = Infra::new(infra.nodes().to_vec(), expected);
        assert_same_view(&twice, &built);
        assert_eq!(twice.link_count(), infra.link_count() + 1);
        assert_eq!(
            twice.link(unmeasured.0, unmeasured.1).map(|x| x.latency_ms),
            Some(77.0)
        );
        assert_eq!(
            twice.link(measured.0, measured.1).map(|x| x.latency_ms),
            Some(55.0)
        );
        // the original is untouched
        assert_eq!(infra.link(measured.0, measured.1), Some(measured.2));
        // without extras only the qualities are new: the rows are shared
        let slower = infra.requalified(|_, _, _, x| q(x.latency_ms * 2.0), &[]);
        assert!(Arc::ptr_eq(&slower.d.net.shape, &infra.d.net.shape));
        assert!(!Arc::ptr_eq(&twice.d.net.shape, &infra.d.net.shape));
        for a in 0..n {
            for b in 0..n {
                assert_eq!(
                    slower.link(a, b),
                    infra.link(a, b).map(|x| q(x.latency_ms * 2.0)),
                    "{a} -> {b}"
                );
            }
        }
    }
}
