//! An application compiled against an [`Infra`]: components with their candidate nodes
//! (after the constraint plugins), channels as index pairs, and per-channel tables the
//! search's bounds read.

use crate::estimate::Estimator;
use crate::filter::{self, Constraint, FilterCtx};
use crate::infra::Infra;
use crate::ledger::{Ledger, NODE_CONTAINER_LIMIT};
use acoa_shared::model::{Application, Resources};
use std::collections::HashMap;
use std::sync::Arc;

/// What a node has left for the application's components: cpu millicores and memory MB
/// (capacity − usage − ledger reservations, may be negative) and containers (the node limit
/// less the ledger's containers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub cpu: i64,
    pub mem: i64,
    pub containers: i64,
}

/// What one component takes from its node's [`Room`]: its request (cpu, memory) when it has
/// one, and its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    pub request: Option<(i64, i64)>,
    pub containers: i64,
}

impl Room {
    /// Whether `d` fits in what is left.
    pub fn admits(&self, d: &Demand) -> bool {
        d.request
            .is_none_or(|(c, m)| c <= self.cpu && m <= self.mem)
            && d.containers <= self.containers
    }

    pub fn take(&mut self, d: &Demand) {
        if let Some((c, m)) = d.request {
            self.cpu -= c;
            self.mem -= m;
        }
        self.containers -= d.containers;
    }

    pub fn give(&mut self, d: &Demand) {
        if let Some((c, m)) = d.request {
            self.cpu += c;
            self.mem += m;
        }
        self.containers += d.containers;
    }
}

/// Marks a component that has no node yet in a partial assignment.
pub const UNSET: u32 = u32::MAX;

pub struct Comp {
    pub name: String,
    /// Nodes that satisfy the component's `requires` (what `l_min` ranges over), in order
    /// (the fleet's nodes filtered: a binary search finds one).
    pub req_cand: Vec<u32>,
    /// `req_cand` minus the nodes the component's own resource request does not fit.
    pub cand: Vec<u32>,
    pub request: Option<Resources>,
    /// Why the candidate set is empty, when it is.
    pub empty_reason: Option<String>,
}

pub struct Chan {
    pub name: String,
    pub from: usize,
    pub to: usize,
}

/// The application's components and channels over the infrastructure.
pub struct Model<'a> {
    pub infra: &'a Infra,
    pub comps: Vec<Comp>,
    pub chans: Vec<Chan>,
    /// For each component, the channels it is an end of.
    pub chans_of: Vec<Vec<usize>>,
    pub comp_index: HashMap<String, usize>,
    pub chan_index: HashMap<String, usize>,
    /// Per node: how many more containers it can be given ([`Ledger::container_room`]);
    /// `None` when no node's limit can bind (every node has room for all the components).
    pub container_room: Option<Vec<i64>>,
}

impl<'a> Model<'a> {
    /// Runs the constraint plugins over every (component, node) pair.
    pub fn compile(
        infra: &'a Infra,
        app: &Application,
        ledger: &Ledger,
        constraints: &[Box<dyn Constraint>],
    ) -> Model<'a> {
        let ctx = FilterCtx { infra, ledger };
        let comps = app
            .components
            .iter()
            .map(|c| {
                let mut req_cand: Vec<u32> = (0..infra.len() as u32).collect();
                let mut empty_reason = None;
                let mut apply = |list: &mut Vec<u32>, k: &dyn Constraint| {
                    let Some(rule) = k.describe(c) else { return };
                    let before = list.len();
                    if before > 0 && !list.iter().any(|n| k.admits(&ctx, *n, c)) {
                        if empty_reason.is_none() {
                            empty_reason = Some(match k.explain_refusal(&ctx, list, c) {
                                Some(why) => {
                                    format!("component `{}` has no candidate node: {why}", c.name)
                                }
                                None => format!(
                                    "component `{}` has no candidate node: {} of {} nodes pass the constraints before {}, none of them has {}",
                                    c.name,
                                    before,
                                    infra.len(),
                                    k.name(),
                                    rule
                                ),
                            });
                        }
                        list.clear();
                        return;
                    }
                    list.retain(|n| k.admits(&ctx, *n, c));
                };
                for k in constraints.iter().filter(|k| k.is_requirement()) {
                    apply(&mut req_cand, k.as_ref());
                }
                let mut cand = req_cand.clone();
                for k in constraints.iter().filter(|k| !k.is_requirement()) {
                    apply(&mut cand, k.as_ref());
                }
                if infra.is_empty() {
                    empty_reason = Some(format!(
                        "component `{}` has no candidate node: the cluster has no nodes",
                        c.name
                    ));
                }
                Comp {
                    name: c.name.clone(),
                    req_cand,
                    cand,
                    request: c.resources,
                    empty_reason,
                }
            })
            .collect::<Vec<_>>();
        let comp_index: HashMap<String, usize> = comps
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let chans: Vec<Chan> = app
            .channels
            .iter()
            .map(|ch| Chan {
                name: ch.name.clone(),
                from: comp_index[&ch.from],
                to: comp_index[&ch.to],
            })
            .collect();
        let mut chans_of = vec![Vec::new(); comps.len()];
        for (i, ch) in chans.iter().enumerate() {
            chans_of[ch.from].push(i);
            if ch.to != ch.from {
                chans_of[ch.to].push(i);
            }
        }
        let chan_index = chans
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let container_room = container_room(infra, ledger, comps.len());
        Model {
            infra,
            comps,
            chans,
            chans_of,
            comp_index,
            chan_index,
            container_room,
        }
    }

    /// The first channel whose link is missing under the full assignment `a`.
    pub fn missing_link(&self, a: &[u32]) -> Option<usize> {
        self.chans
            .iter()
            .position(|ch| self.infra.link(a[ch.from], a[ch.to]).is_none())
    }

    /// Whether the full assignment `a` fits: per node, the sum of the [`Model::demand`]s
    /// placed on it within `remaining` (cpu and memory checked where a request is placed).
    pub fn fits(&self, a: &[u32], remaining: &[Room]) -> bool {
        let mut left: Vec<(u32, Room)> = Vec::new();
        for (u, n) in a.iter().enumerate() {
            let Some(d) = self.demand(u) else { continue };
            let i = match left.iter().position(|s| s.0 == *n) {
                Some(i) => i,
                None => {
                    left.push((*n, remaining[*n as usize]));
                    left.len() - 1
                }
            };
            let room = &mut left[i].1;
            if !room.admits(&d) {
                return false;
            }
            room.take(&d);
        }
        true
    }

    pub fn has_requests(&self) -> bool {
        self.comps.iter().any(|c| c.request.is_some())
    }

    /// Whether a deployment must be checked against what the nodes have left as a whole:
    /// some component has a resource request, or some node's container limit can bind.
    pub fn joint(&self) -> bool {
        self.has_requests() || self.container_room.is_some()
    }

    /// What component `u` takes from its node: its request, and one container when the
    /// container limit can bind; `None` when it takes nothing that is checked.
    pub fn demand(&self, u: usize) -> Option<Demand> {
        let request = self.comps[u]
            .request
            .map(|r| (r.cpu_millis as i64, r.memory_mb as i64));
        let containers = i64::from(self.container_room.is_some());
        (request.is_some() || containers > 0).then_some(Demand {
            request,
            containers,
        })
    }

    /// Why containers do not fit: the nodes of `nodes` with fewer than `below` containers of
    /// room left in `room` (per node) and some containers already there, with how many, and
    /// the limit.
    pub fn containers_note(&self, nodes: &[u32], room: &[i64], below: i64) -> String {
        let limit = i64::from(NODE_CONTAINER_LIMIT);
        let full: Vec<(&str, u32)> = nodes
            .iter()
            .filter(|&&n| room[n as usize] < below && room[n as usize] < limit)
            .map(|&n| {
                let runs = (limit - room[n as usize]).clamp(0, i64::from(u32::MAX));
                (self.infra.node(n).name.as_str(), runs as u32)
            })
            .collect();
        if full.is_empty() {
            format!("a node's desired state carries at most {NODE_CONTAINER_LIMIT} containers")
        } else {
            filter::full_nodes(&full)
        }
    }

    /// Per node: what is left (capacity - usage - ledger reservation; the container room).
    pub fn remaining(&self, ledger: &Ledger) -> Vec<Room> {
        let ctx = FilterCtx {
            infra: self.infra,
            ledger,
        };
        (0..self.infra.len() as u32)
            .map(|n| {
                let (cpu, mem) = filter::remaining(&ctx, n);
                let containers = self
                    .container_room
                    .as_ref()
                    .map_or(i64::MAX, |r| r[n as usize]);
                Room {
                    cpu,
                    mem,
                    containers,
                }
            })
            .collect()
    }
}

/// Per node: how many more containers it can be given, or `None` when every node has room for
/// `components` more (the limit cannot bind).
fn container_room(infra: &Infra, ledger: &Ledger, components: usize) -> Option<Vec<i64>> {
    let limit = NODE_CONTAINER_LIMIT as usize;
    if components <= limit && ledger.iter_containers().next().is_none() {
        return None;
    }
    let room: Vec<i64> = (0..infra.len() as u32)
        .map(|n| i64::from(ledger.container_room(&infra.node(n).name)))
        .collect();
    room.iter().any(|r| *r < components as i64).then_some(room)
}

/// Where each node stands among one component's candidates (a sorted list of node numbers):
/// what the per-candidate rows of a [`Space`]'s tables and of the criteria's bounds are
/// indexed by, so that they hold an entry per candidate, not per node of the fleet (a
/// neighbourhood of the exploration pins most components to one node of 50,000).
#[derive(Debug)]
pub enum CandIndex {
    /// Per node, its position among the candidates (`u32::MAX`: not one of them).
    Dense(Vec<u32>),
    /// Few candidates in a large fleet ([`CandIndex::new`]): their list, searched.
    Few(Vec<u32>),
}

impl CandIndex {
    /// The index of `cand` (sorted, no repeats) among `n` nodes: a position per node,
    /// unless that would hold 64 times more than the list (a neighbourhood's pinned and
    /// freed components at 1,000 nodes and more), where a binary search of at most 10 steps
    /// looks a node up.
    pub fn new(n: usize, cand: &[u32]) -> CandIndex {
        debug_assert!(cand.windows(2).all(|w| w[0] < w[1]), "candidates sorted");
        if cand.len() * 64 < n && cand.len() < 1024 {
            CandIndex::Few(cand.to_vec())
        } else {
            CandIndex::dense(n, cand)
        }
    }

    fn dense(n: usize, cand: &[u32]) -> CandIndex {
        let mut pos = vec![u32::MAX; n];
        for (i, x) in cand.iter().enumerate() {
            pos[*x as usize] = i as u32;
        }
        CandIndex::Dense(pos)
    }

    /// The bytes it holds.
    pub fn held_bytes(&self) -> usize {
        match self {
            CandIndex::Dense(v) | CandIndex::Few(v) => 4 * v.len(),
        }
    }

    /// Node `x`'s position among the candidates, if it is one.
    #[inline]
    pub fn of(&self, x: u32) -> Option<usize> {
        match self {
            CandIndex::Dense(pos) => match pos.get(x as usize) {
                Some(&i) if i != u32::MAX => Some(i as usize),
                _ => None,
            },
            CandIndex::Few(cand) => cand.binary_search(&x).ok(),
        }
    }

    #[inline]
    pub fn has(&self, x: u32) -> bool {
        self.of(x).is_some()
    }

    /// `row`'s entry for node `x` (a row per candidate), `missing` when `x` is not one.
    #[inline]
    pub fn get(&self, row: &[f64], x: u32, missing: f64) -> f64 {
        self.of(x).map_or(missing, |i| row[i])
    }
}

/// For one channel and one candidate space: the best the link under it can be.
#[derive(Debug, Clone)]
pub struct ChanTable {
    /// Best success / least latency over all linked candidate pairs.
    pub best_succ: f64,
    pub min_lat: f64,
    /// Per candidate of the source (in `from`'s order): best success / least latency to any
    /// candidate of the sink.
    succ_out: Vec<f64>,
    lat_out: Vec<f64>,
    /// Per candidate of the sink (in `to`'s order): best success / least latency from any
    /// candidate of the source.
    succ_in: Vec<f64>,
    lat_in: Vec<f64>,
    from: Arc<CandIndex>,
    to: Arc<CandIndex>,
    /// How many candidate pairs have a measured link.
    pub linked_pairs: u128,
    /// The values above also bound the channel's estimated links (the infrastructure has an
    /// estimator: then `linked_pairs` does not count every pair with a link).
    pub estimated: bool,
}

impl ChanTable {
    /// Best success of a link from source node `x` (negative: none, or not a candidate).
    #[inline]
    pub fn succ_out(&self, x: u32) -> f64 {
        self.from.get(&self.succ_out, x, -1.0)
    }
    /// Least latency of a link from source node `x` (infinite: none, or not a candidate).
    #[inline]
    pub fn lat_out(&self, x: u32) -> f64 {
        self.from.get(&self.lat_out, x, f64::INFINITY)
    }
    /// Best success of a link into sink node `y`.
    #[inline]
    pub fn succ_in(&self, y: u32) -> f64 {
        self.to.get(&self.succ_in, y, -1.0)
    }
    /// Least latency of a link into sink node `y`.
    #[inline]
    pub fn lat_in(&self, y: u32) -> f64 {
        self.to.get(&self.lat_in, y, f64::INFINITY)
    }
}

/// The candidate nodes of every component (one choice of candidate sets) and the tables
/// derived from them.
pub struct Space {
    pub cand: Vec<Vec<u32>>,
    /// Per component, the index of its candidates.
    pub index: Vec<Arc<CandIndex>>,
    /// Per channel. Channels between the same two candidate lists (a chain of stages that
    /// ask for the same nodes) share one table: it depends on nothing else.
    pub tables: Vec<Arc<ChanTable>>,
}

/// The sum of `size` over `items`, an item that several hold (the same `Arc`) counted once.
fn once_each<T>(items: &[Arc<T>], size: impl Fn(&T) -> usize) -> usize {
    let mut seen: Vec<*const T> = Vec::new();
    let mut sum = 0;
    for i in items {
        if !seen.contains(&Arc::as_ptr(i)) {
            seen.push(Arc::as_ptr(i));
            sum += size(i);
        }
    }
    sum
}

/// Per component, whether each of the `n` nodes is among its candidates `cand`.
fn membership(n: usize, cand: &[Vec<u32>]) -> Vec<Vec<bool>> {
    cand.iter()
        .map(|c| {
            let mut m = vec![false; n];
            for x in c {
                m[*x as usize] = true;
            }
            m
        })
        .collect()
}

impl Space {
    pub fn build(model: &Model<'_>, cand: Vec<Vec<u32>>) -> Space {
        let n = model.infra.len();
        let mut index: Vec<Arc<CandIndex>> = Vec::with_capacity(cand.len());
        for (c, list) in cand.iter().enumerate() {
            // components with the same candidates (the unconstrained ones) share one index
            let same = (0..c).find(|d| cand[*d] == *list);
            index.push(match same {
                Some(d) => index[d].clone(),
                None => Arc::new(CandIndex::new(n, list)),
            });
        }
        let mut tables: Vec<Arc<ChanTable>> = Vec::with_capacity(model.chans.len());
        for (k, ch) in model.chans.iter().enumerate() {
            let ends = |c: &Chan| {
                (
                    Arc::as_ptr(&index[c.from]),
                    Arc::as_ptr(&index[c.to]),
                    c.from == c.to,
                )
            };
            let same = (0..k).find(|j| ends(&model.chans[*j]) == ends(ch));
            tables.push(match same {
                Some(j) => tables[j].clone(),
                None => Arc::new(table(model, ch, &cand, &index)),
            });
        }
        Space {
            cand,
            index,
            tables,
        }
    }

    /// [`Space::build`] after arc consistency on `cand` (cheap: a node needs only one
    /// linked node at each channel's other end, found by an early-exit scan), so the
    /// tables are built once. `Err(c)`: the candidates of component `c` ran out.
    pub fn build_consistent(model: &Model<'_>, mut cand: Vec<Vec<u32>>) -> Result<Space, usize> {
        let mut member = membership(model.infra.len(), &cand);
        let infra = model.infra;
        loop {
            let mut changed = false;
            for ch in &model.chans {
                let (f, t) = (ch.from, ch.to);
                let before = (cand[f].len(), cand[t].len());
                if f == t {
                    cand[f].retain(|a| infra.link(*a, *a).is_some());
                } else {
                    // a measured link to the other end's candidates, else an estimated one
                    let est = infra.estimator();
                    let mt = &member[t];
                    let st = est.map(|e| e.set(&cand[t]));
                    cand[f].retain(|a| {
                        infra.out(*a).iter().any(|b| mt[*b as usize])
                            || est
                                .zip(st.as_ref())
                                .is_some_and(|(e, st)| e.supports(*a, st, mt[*a as usize]))
                    });
                    let mf = &member[f];
                    let sf = est.map(|e| e.set(&cand[f]));
                    // (`mf` may still admit a node just removed from `cand[f]`: ask the list)
                    let cf = est.map(|_| cand[f].clone()).unwrap_or_default();
                    cand[t].retain(|b| {
                        infra.inn(*b).iter().any(|a| mf[*a as usize])
                            || est.zip(sf.as_ref()).is_some_and(|(e, sf)| {
                                e.supports(*b, sf, cf.binary_search(b).is_ok())
                            })
                    });
                }
                for (c, len) in [(f, before.0), (t, before.1)] {
                    if cand[c].len() != len {
                        changed = true;
                        member[c].iter_mut().for_each(|x| *x = false);
                        for x in &cand[c] {
                            member[c][*x as usize] = true;
                        }
                    }
                    if cand[c].is_empty() {
                        return Err(c);
                    }
                }
            }
            if !changed {
                break;
            }
        }
        Ok(Space::build(model, cand))
    }

    /// The indexes of the candidates of components `comps`, in their order (what the
    /// criteria's per-slot rows are indexed by).
    pub fn indexes(&self, comps: &[usize]) -> Vec<Arc<CandIndex>> {
        comps.iter().map(|c| self.index[*c].clone()).collect()
    }

    /// The bytes held by its candidate lists, their indexes (one that components share
    /// counted once) and its tables' rows (a table that channels share counted once).
    pub fn held_bytes(&self) -> usize {
        let lists: usize = self.cand.iter().map(|c| 4 * c.len()).sum();
        let indexes = once_each(&self.index, CandIndex::held_bytes);
        let rows = once_each(&self.tables, |t| 16 * (t.succ_out.len() + t.succ_in.len()));
        lists + indexes + rows
    }

    /// Whether every candidate pair of every channel has a link (then the link-complete
    /// deployments are exactly the product of the candidate counts).
    pub fn links_complete(&self, model: &Model<'_>) -> bool {
        model.chans.iter().zip(&self.tables).all(|(ch, t)| {
            let want = if ch.from == ch.to {
                self.cand[ch.from].len() as u128
            } else {
                self.cand[ch.from].len() as u128 * self.cand[ch.to].len() as u128
            };
            t.linked_pairs == want
        })
    }

    /// The product of the candidate counts (saturating).
    pub fn product(&self) -> u128 {
        self.cand
            .iter()
            .fold(1u128, |p, c| p.saturating_mul(c.len() as u128))
    }
}

/// The table of channel `ch` over the candidate sets `cand` (`index`: their indexes).
fn table(model: &Model<'_>, ch: &Chan, cand: &[Vec<u32>], index: &[Arc<CandIndex>]) -> ChanTable {
    let (src, dst) = (&cand[ch.from], &cand[ch.to]);
    let mut t = ChanTable {
        best_succ: -1.0,
        min_lat: f64::INFINITY,
        succ_out: vec![-1.0; src.len()],
        lat_out: vec![f64::INFINITY; src.len()],
        succ_in: vec![-1.0; dst.len()],
        lat_in: vec![f64::INFINITY; dst.len()],
        from: index[ch.from].clone(),
        to: index[ch.to].clone(),
        linked_pairs: 0,
        estimated: false,
    };
    if ch.from == ch.to {
        for (i, a) in src.iter().enumerate() {
            if let Some(q) = model.infra.link(*a, *a) {
                t.linked_pairs += 1;
                t.best_succ = t.best_succ.max(q.success);
                t.min_lat = t.min_lat.min(q.latency_ms);
                t.succ_out[i] = q.success;
                t.lat_out[i] = q.latency_ms;
                t.succ_in[i] = q.success;
                t.lat_in[i] = q.latency_ms;
            }
        }
    } else {
        let sink = &*t.to;
        for (i, a) in src.iter().enumerate() {
            let (bs, ls) = model.infra.out_links(*a);
            let (mut s_out, mut l_out, mut pairs) = (-1.0f64, f64::INFINITY, 0u128);
            for (b, q) in bs.iter().zip(ls) {
                if let Some(j) = sink.of(*b) {
                    pairs += 1;
                    s_out = s_out.max(q.success);
                    l_out = l_out.min(q.latency_ms);
                    t.succ_in[j] = t.succ_in[j].max(q.success);
                    t.lat_in[j] = t.lat_in[j].min(q.latency_ms);
                }
            }
            t.linked_pairs += pairs;
            t.succ_out[i] = s_out;
            t.lat_out[i] = l_out;
            t.best_succ = t.best_succ.max(s_out);
            t.min_lat = t.min_lat.min(l_out);
        }
        if let Some(e) = model.infra.estimator() {
            estimated_bounds(e, &mut t, src, dst);
        }
    }
    t
}

/// Folds the channel's estimated links between `src` and `dst` into `t`, without visiting
/// every pair: latency by [`Estimator::latency_lb`] against the other side's cells, success by
/// the halves ([`Estimator::half`]: a node's half times the best half of the other side).
/// Both are bounds of every estimated link (admissible; sometimes below the best actual one).
fn estimated_bounds(e: &Estimator, t: &mut ChanTable, src: &[u32], dst: &[u32]) {
    let best_succ = |set: &[u32]| {
        set.iter()
            .filter_map(|x| e.half(*x))
            .fold(-1.0f64, |s, h| s.max(h.success))
    };
    let (src_succ, dst_succ) = (best_succ(src), best_succ(dst));
    if src_succ < 0.0 || dst_succ < 0.0 {
        return;
    }
    t.estimated = true;
    let (src_cells, dst_cells) = (e.cells(src, |_| 0.0), e.cells(dst, |_| 0.0));
    for (i, a) in src.iter().enumerate() {
        if let Some(h) = e.half(*a) {
            let lb = e.latency_lb(*a, &dst_cells);
            t.lat_out[i] = t.lat_out[i].min(lb);
            t.succ_out[i] = t.succ_out[i].max(h.success * dst_succ);
            t.min_lat = t.min_lat.min(lb);
        }
    }
    for (j, b) in dst.iter().enumerate() {
        if let Some(h) = e.half(*b) {
            t.lat_in[j] = t.lat_in[j].min(e.latency_lb(*b, &src_cells));
            t.succ_in[j] = t.succ_in[j].max(src_succ * h.success);
        }
    }
    t.best_succ = t.best_succ.max(src_succ * dst_succ);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::LinkQ;
    use acoa_shared::model::{parse_application, Node};

    /// Both kinds of index give the list's own positions: for the nodes in it, between its
    /// members, past the fleet and `UNSET`.
    #[test]
    fn both_kinds_of_index_find_what_the_list_holds() {
        let n = 300u32;
        for len in [0, 1, 2, 4, 5, 63, 150, 299, 300] {
            // 7919 is prime to 300: exactly `len` nodes, in order
            let cand: Vec<u32> = (0..n).filter(|x| (x * 7919) % n < len).collect();
            assert_eq!(cand.len(), len as usize);
            let row: Vec<f64> = (0..cand.len()).map(|i| i as f64).collect();
            for index in [
                CandIndex::new(n as usize, &cand),
                CandIndex::dense(n as usize, &cand),
                CandIndex::Few(cand.clone()),
            ] {
                for x in (0..n + 3).chain([UNSET]) {
                    let want = cand.binary_search(&x).ok();
                    assert_eq!(index.of(x), want, "{len} candidates, node {x}");
                    assert_eq!(index.get(&row, x, -1.0), want.map_or(-1.0, |i| i as f64));
                }
            }
        }
    }

    fn node(i: usize) -> Node {
        crate::testkit::edge_node(format!("n{i:05}"), &format!("d{}", i / 10))
    }

    /// A neighbourhood of the exploration pins most components to a node or two of a large
    /// fleet: its space holds tables the size of its candidates, not of the fleet (before
    /// 2026-12-07, four f64 per node of the fleet and channel: 480 KB here, 29 MiB for a
    /// 20-component chain at 50,000 nodes), and they read the same as before.
    #[test]
    fn a_space_of_few_candidates_holds_little_on_a_large_fleet() {
        let n = 5000usize;
        let lat = |i: usize| 1.0 + (i % 7) as f64;
        let infra = Infra::new(
            (0..n).map(node).collect(),
            (0..n - 1).map(|i| {
                let q = LinkQ {
                    latency_ms: lat(i),
                    success: 0.99,
                };
                (i as u32, i as u32 + 1, q)
            }),
        );
        let app = parse_application(
            "application: t\ncomponents:\n- {name: a, image: i}\n- {name: b, image: i}\n- {name: c, image: i}\n- {name: d, image: i}\nchannels:\n- {name: ab, from: a, to: b}\n- {name: bc, from: b, to: c}\n- {name: cd, from: c, to: d}\npaths:\n- {name: p, channels: [ab, bc, cd]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
        )
        .unwrap();
        let model = Model::compile(&infra, &app, &Ledger::new(), &filter::default_constraints());
        assert!(model.comps.iter().all(|c| c.cand.len() == n));
        // component k on node 100 + k or 101 + k: a link under each channel
        let few = Space::build(&model, (0..4).map(|k| vec![100 + k, 101 + k]).collect());
        assert!(
            few.held_bytes() < 1024,
            "{} bytes for 8 candidates",
            few.held_bytes()
        );
        let ab = &few.tables[0];
        assert_eq!(ab.lat_out(100), lat(100));
        assert_eq!(ab.lat_out(101), lat(101));
        assert_eq!(ab.lat_in(101), lat(100));
        assert_eq!(ab.lat_in(102), lat(101));
        assert_eq!(ab.succ_out(101), 0.99);
        // not a candidate: no link
        assert_eq!(ab.lat_out(102), f64::INFINITY);
        assert_eq!(ab.succ_in(100), -1.0);
        assert_eq!(ab.min_lat, lat(100).min(lat(101)));
        // every node a candidate: one index shared by the four, a row per candidate, and
        // one table shared by the three channels (they join the same candidate lists)
        let full = Space::build(&model, model.comps.iter().map(|c| c.cand.clone()).collect());
        assert!(full.index.iter().all(|i| Arc::ptr_eq(i, &full.index[0])));
        assert!(full.tables.iter().all(|t| Arc::ptr_eq(t, &full.tables[0])));
        // a and c on one list, b and d on another: ab and cd share, bc has its own
        let alt = Space::build(
            &model,
            vec![
                vec![100, 101],
                vec![101, 102],
                vec![100, 101],
                vec![101, 102],
            ],
        );
        assert!(Arc::ptr_eq(&alt.tables[0], &alt.tables[2]));
        assert!(!Arc::ptr_eq(&alt.tables[0], &alt.tables[1]));
        assert_eq!(alt.tables[2].lat_out(100), lat(100));
        assert_eq!(alt.tables[1].lat_out(101), f64::INFINITY);
        assert_eq!(alt.tables[1].lat_in(101), f64::INFINITY);
        assert_eq!(full.held_bytes(), 4 * 4 * n + 4 * n + 32 * n);
        assert_eq!(full.tables[1].lat_in(7), lat(6));
    }
}
