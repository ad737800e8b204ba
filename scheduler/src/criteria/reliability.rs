//! `max-e2e-reliability`: the grade, the spanning-forest bound.

use super::*;
use crate::infra::LinkQ;
use crate::problem::{CandIndex, Model, UNSET};
use acoa_shared::model::CriterionKind;
use std::sync::Arc;

/// `max-e2e-reliability`: the product of `success` over every channel of the path.
pub struct Reliability {
    scope: Scope,
    chans: Vec<usize>,
    forest: Option<Forest>,
}

/// A spanning forest of the path's channels (as undirected edges between components)
/// with, per component and node, the least total `-ln success` over the forest's
/// channels when the component is on that node (exact max-marginals of a tree, computed
/// by two message passes). Channels left out of the forest only make the bound looser.
struct Forest {
    /// Channels outside the forest (closing a cycle, or from a component to itself).
    rest: Vec<usize>,
    /// Per slot, the index of the candidates its row of `m` follows.
    index: Vec<Arc<CandIndex>>,
    /// Per slot, per candidate: the least forest cost with the slot on the node.
    m: Vec<Vec<f64>>,
    /// The least forest cost overall.
    mmin: f64,
}

impl Forest {
    /// `m` at slot `v` on node `b` (infinite on a node that is not a candidate).
    #[inline]
    fn m(&self, v: usize, b: u32) -> f64 {
        self.index[v].get(&self.m[v], b, f64::INFINITY)
    }
}

impl Reliability {
    pub fn new(model: &Model<'_>, path: &str, channels: &[usize]) -> Self {
        let mut comps = Vec::new();
        for ch in channels {
            for c in [model.chans[*ch].from, model.chans[*ch].to] {
                if !comps.contains(&c) {
                    comps.push(c);
                }
            }
        }
        Reliability {
            scope: Scope {
                kind: CriterionKind::MaxE2eReliability,
                path: Some(path.to_string()),
                component: None,
                comps,
            },
            chans: channels.to_vec(),
            forest: None,
        }
    }

    /// Precomputes the forest bound over the candidates of `ctx.space`.
    pub fn with_forest(mut self, ctx: &Ctx<'_, '_>) -> Self {
        let m = ctx.model;
        let nv = self.scope.comps.len();
        let slot = |c: usize| {
            self.scope
                .comps
                .iter()
                .position(|x| *x == c)
                .expect("path comp")
        };
        let cand = |v: usize| &ctx.space.cand[self.scope.comps[v]][..];
        let index = ctx.space.indexes(&self.scope.comps);
        // Union-find for the spanning forest.
        let mut uf: Vec<usize> = (0..nv).collect();
        fn find(uf: &mut [usize], x: usize) -> usize {
            let mut r = x;
            while uf[r] != r {
                r = uf[r];
            }
            uf[x] = r;
            r
        }
        let mut adj: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nv]; // (channel, other slot)
        let mut rest = Vec::new();
        for ch in &self.chans {
            let c = &m.chans[*ch];
            let (x, y) = (slot(c.from), slot(c.to));
            let (rx, ry) = (find(&mut uf, x), find(&mut uf, y));
            if x == y || rx == ry {
                rest.push(*ch);
            } else {
                uf[rx] = ry;
                adj[x].push((*ch, y));
                adj[y].push((*ch, x));
            }
        }
        // Orient each tree from its first slot: BFS order, parents before children.
        let mut parent: Vec<Option<(usize, usize)>> = vec![None; nv]; // (channel, parent)
        let mut seen = vec![false; nv];
        let mut order = Vec::with_capacity(nv);
        let mut roots = Vec::new();
        for r in 0..nv {
            if seen[r] {
                continue;
            }
            seen[r] = true;
            roots.push(r);
            let start = order.len();
            order.push(r);
            let mut k = start;
            while k < order.len() {
                let v = order[k];
                for (ch, w) in &adj[v] {
                    if !seen[*w] {
                        seen[*w] = true;
                        parent[*w] = Some((*ch, v));
                        order.push(*w);
                    }
                }
                k += 1;
            }
        }
        // Links between child x and parent y under channel ch: x -> y when the channel
        // goes from the child's component.
        let child_to_parent = |ch: usize, v: usize| m.chans[ch].from == self.scope.comps[v];
        // a row per slot, an entry per candidate of its component
        let zeros = |v: usize| vec![0.0; cand(v).len()];
        let mut inner: Vec<Vec<f64>> = (0..nv).map(zeros).collect();
        let mut up: Vec<Vec<f64>> = vec![Vec::new(); nv];
        for v in order.iter().rev() {
            let Some((ch, p)) = parent[*v] else { continue };
            let mut msg = vec![f64::INFINITY; cand(p).len()];
            propagate(
                ctx,
                cand(*v),
                &inner[*v],
                cand(p),
                &index[p],
                child_to_parent(ch, *v),
                Cost::Unreliability,
                &mut msg,
            );
            for (x, c) in inner[p].iter_mut().zip(&msg) {
                *x += c;
            }
            up[*v] = msg;
        }
        let mut down: Vec<Vec<f64>> = (0..nv).map(zeros).collect();
        for v in &order {
            let Some((ch, p)) = parent[*v] else { continue };
            // Everything at the parent but this child's own message.
            let mut excl = down[p].clone();
            for w in 0..nv {
                if w != *v && parent[w].is_some_and(|(_, q)| q == p) {
                    for (x, c) in excl.iter_mut().zip(&up[w]) {
                        *x += c;
                    }
                }
            }
            let mut msg = vec![f64::INFINITY; cand(*v).len()];
            propagate(
                ctx,
                cand(p),
                &excl,
                cand(*v),
                &index[*v],
                !child_to_parent(ch, *v),
                Cost::Unreliability,
                &mut msg,
            );
            down[*v] = msg;
        }
        let tree_min: Vec<(usize, f64)> = roots
            .iter()
            .map(|r| {
                let best = inner[*r].iter().copied().fold(f64::INFINITY, f64::min);
                (find(&mut uf, *r), best)
            })
            .collect();
        let mmin: f64 = tree_min.iter().map(|(_, t)| t).sum();
        let mm = (0..nv)
            .map(|v| {
                let root = find(&mut uf, v);
                let others: f64 = tree_min
                    .iter()
                    .filter(|(r, _)| *r != root)
                    .map(|(_, t)| t)
                    .sum();
                inner[v]
                    .iter()
                    .zip(&down[v])
                    .map(|(i, d)| i + d + others)
                    .collect()
            })
            .collect();
        self.forest = Some(Forest {
            rest,
            index,
            m: mm,
            mmin,
        });
        self
    }
}

impl CriterionPlugin for Reliability {
    fn scope(&self) -> &Scope {
        &self.scope
    }
    fn grade(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        let m = ctx.model;
        self.chans
            .iter()
            .map(|ch| {
                let c = &m.chans[*ch];
                m.infra.link(a[c.from], a[c.to]).map_or(0.0, |q| q.success)
            })
            .product()
    }
    fn bound(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        let m = ctx.model;
        self.bound_with(ctx, a, |ch| {
            let c = &m.chans[ch];
            m.infra.link(a[c.from], a[c.to]).unwrap_or(LinkQ {
                latency_ms: f64::INFINITY,
                success: 0.0,
            })
        })
    }
    fn bound_cached(&self, ctx: &Ctx<'_, '_>, a: &[u32], fixed: &[LinkQ]) -> f64 {
        self.bound_with(ctx, a, |ch| fixed[ch])
    }
    fn prepare(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, state: &mut Vec<f64>) {
        let Branch { a, fixed, comp } = br;
        // [product of the best success over the channels not at `comp`, the forest's
        // bound so far, the sum of -ln(best) over the rest channels not at `comp`]
        state.clear();
        let m = ctx.model;
        let at = |ch: usize| m.chans[ch].from == comp || m.chans[ch].to == comp;
        let best = |ch: usize| self.best(ctx, a, ch, |ch| fixed[ch]);
        let prod: f64 = self
            .chans
            .iter()
            .filter(|ch| !at(**ch))
            .map(|ch| best(*ch))
            .product();
        state.push(prod);
        if let Some(f) = &self.forest {
            let mut lb = f.mmin;
            for (v, c) in self.scope.comps.iter().enumerate() {
                if a[*c] != UNSET {
                    lb = lb.max(f.m(v, a[*c]));
                }
            }
            let rest: f64 = f
                .rest
                .iter()
                .filter(|ch| !at(**ch))
                .map(|ch| neg_ln(best(*ch)))
                .sum();
            state.push(lb);
            state.push(rest);
        }
    }
    fn child_bound(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, b: u32, state: &[f64]) -> f64 {
        let Branch { a, fixed, comp } = br;
        if state.is_empty() {
            return self.bound_cached(ctx, a, fixed);
        }
        let m = ctx.model;
        let at = |ch: &usize| m.chans[*ch].from == comp || m.chans[*ch].to == comp;
        let best = |ch: usize| self.best(ctx, a, ch, |ch| fixed[ch]);
        let mut p = state[0];
        for ch in self.chans.iter().filter(|ch| at(ch)) {
            p *= best(*ch);
        }
        let Some(f) = &self.forest else { return p };
        let mut lb = state[1];
        if let Some(v) = self.scope.comps.iter().position(|c| *c == comp) {
            lb = lb.max(f.m(v, b));
        }
        let mut rest = state[2];
        for ch in f.rest.iter().filter(|ch| at(ch)) {
            rest += neg_ln(best(*ch));
        }
        p.min((-(lb + rest)).exp())
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        match (
            &self.forest,
            self.scope.comps.iter().position(|c| *c == comp),
        ) {
            (Some(f), Some(v)) => parent.min((-f.m(v, b)).exp()),
            _ => parent,
        }
    }
}

impl Reliability {
    /// The best success the link under `ch` can have given `a` (`link` for a channel
    /// whose two ends are placed).
    fn best(&self, ctx: &Ctx<'_, '_>, a: &[u32], ch: usize, link: impl Fn(usize) -> LinkQ) -> f64 {
        let c = &ctx.model.chans[ch];
        let t = &ctx.space.tables[ch];
        let s = match (a[c.from], a[c.to]) {
            (UNSET, UNSET) => t.best_succ,
            (x, UNSET) => t.succ_out(x),
            (UNSET, y) => t.succ_in(y),
            _ => link(ch).success,
        };
        s.max(0.0)
    }

    fn bound_with(&self, ctx: &Ctx<'_, '_>, a: &[u32], link: impl Fn(usize) -> LinkQ) -> f64 {
        let mut p = 1.0;
        for ch in &self.chans {
            p *= self.best(ctx, a, *ch, &link);
        }
        let Some(f) = &self.forest else { return p };
        // The forest's least cost given the placed components, plus the other channels'.
        let mut lb = f.mmin;
        for (v, comp) in self.scope.comps.iter().enumerate() {
            let b = a[*comp];
            if b != UNSET {
                lb = lb.max(f.m(v, b));
            }
        }
        let mut rest = 0.0;
        for ch in &f.rest {
            rest += neg_ln(self.best(ctx, a, *ch, &link));
        }
        p.min((-(lb + rest)).exp())
    }
}

fn neg_ln(s: f64) -> f64 {
    if s > 0.0 {
        -s.ln()
    } else {
        f64::INFINITY
    }
}
