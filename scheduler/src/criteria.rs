//! Criterion plugins: each one grades a whole deployment in [0, 1] (model.md, "Scoring"),
//! and gives the search an optimistic grade (an upper bound) for a partial one.

use crate::infra::LinkQ;
use crate::problem::{Model, Space, UNSET};
use acoa_shared::model::{Application, CriterionKind, Node};

/// What a criterion plugin may read.
pub struct Ctx<'a, 'm> {
    pub model: &'a Model<'m>,
    pub space: &'a Space,
}

pub trait CriterionPlugin: Send + Sync {
    fn kind(&self) -> CriterionKind;
    /// The targeted path, for path criteria.
    fn path(&self) -> Option<&str> {
        None
    }
    /// The targeted component, for component criteria.
    fn component(&self) -> Option<&str> {
        None
    }
    /// The components whose node changes this criterion's grade or bound.
    fn components(&self) -> &[usize];
    /// The grade of a full assignment whose channels all have links.
    fn grade(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64;
    /// An upper bound on the grade of every completion of the partial assignment `a`
    /// (`UNSET` marks unplaced components) within the candidate space.
    fn bound(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64;
    /// [`CriterionPlugin::bound`], given in `fixed` the link under every channel whose
    /// two ends are placed (indexed by channel; other entries are not read), which spares
    /// the search the look-ups.
    fn bound_cached(&self, ctx: &Ctx<'_, '_>, a: &[u32], fixed: &[LinkQ]) -> f64 {
        let _ = fixed;
        self.bound(ctx, a)
    }
    /// A cheap (O(1)) upper bound on the bound once component `comp` is placed on node
    /// `b`, given `parent`, the bound before: the search skips the full bound of a
    /// child whose quick bound already cannot beat the incumbent.
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        let _ = (comp, b);
        parent
    }
    /// Prepares bounding the children of the partial assignment `a` that place `comp`
    /// (unplaced in `a`): fills `state` for [`CriterionPlugin::child_bound`].
    fn prepare(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        state: &mut Vec<f64>,
    ) {
        let _ = (ctx, a, fixed, comp);
        state.clear();
    }
    /// The bound of the child `a` (the prepared parent plus `comp` on `b`; `fixed` holds
    /// the links under `comp`'s channels whose other end is placed). Equal to
    /// [`CriterionPlugin::bound_cached`] of the child (by default, it is that), but
    /// computed from the prepared parent in time proportional to `comp`'s channels.
    fn child_bound(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        b: u32,
        state: &[f64],
    ) -> f64 {
        let _ = (comp, b, state);
        self.bound_cached(ctx, a, fixed)
    }
}

// ------------------------------------------------------------ response time

/// Relaxes `out[y] = min(out[y], val[x] + cost(link))` over the links between the nodes
/// `x` of `src` (with a finite `val[x]`) and the nodes `y` that `dst_member` admits:
/// links `x -> y` when `forward`, `y -> x` otherwise. `val` and `out` are per node.
fn propagate(
    ctx: &Ctx<'_, '_>,
    src: &[u32],
    val: &[f64],
    dst_member: &[bool],
    forward: bool,
    cost: impl Fn(crate::infra::LinkQ) -> f64,
    out: &mut [f64],
) {
    let infra = ctx.model.infra;
    for x in src {
        let vx = val[*x as usize];
        if !vx.is_finite() {
            continue;
        }
        let (ys, ls) = if forward {
            infra.out_links(*x)
        } else {
            infra.inn_links(*x)
        };
        for (y, l) in ys.iter().zip(ls) {
            if dst_member[*y as usize] {
                let c = vx + cost(*l);
                if c < out[*y as usize] {
                    out[*y as usize] = c;
                }
            }
        }
    }
}

/// Per slot of a response-time path: `g[v][b]`, a lower bound on the longest route that
/// ends at `v` when `v` is on node `b`, and `h[v][b]`, on the longest route that starts
/// there (each predecessor / successor takes its best node independently, which relaxes
/// the shared choices, so both are admissible). Infinite: no route at all.
pub struct RtPot {
    g: Vec<Vec<f64>>,
    h: Vec<Vec<f64>>,
    gmin: Vec<f64>,
    hmin: Vec<f64>,
}

/// `min-e2e-response-time`: g = l_min / l, l the longest source-to-sink route of the
/// path (latencies are >= 0, so that is the longest path of the path's DAG).
pub struct ResponseTime {
    path: String,
    /// (channel, source slot, sink slot), sorted so that a channel comes after every
    /// channel into its source (topological order).
    edges: Vec<(usize, usize, usize)>,
    /// Slot -> component.
    comps: Vec<usize>,
    /// `Some(l_min)`: grade l_min / l. `None`: the raw objective -l (used to find l_min).
    pub lmin: Option<f64>,
    pot: Option<std::sync::Arc<RtPot>>,
}

impl ResponseTime {
    pub fn new(model: &Model<'_>, path: &str, channels: &[usize], lmin: Option<f64>) -> Self {
        let mut comps: Vec<usize> = Vec::new();
        let slot = |c: usize, comps: &mut Vec<usize>| match comps.iter().position(|x| *x == c) {
            Some(i) => i,
            None => {
                comps.push(c);
                comps.len() - 1
            }
        };
        let mut raw = Vec::new();
        for ch in channels {
            let s = slot(model.chans[*ch].from, &mut comps);
            let t = slot(model.chans[*ch].to, &mut comps);
            raw.push((*ch, s, t));
        }
        // Kahn's algorithm over slots; the path is acyclic (validated).
        let nv = comps.len();
        let mut indeg = vec![0usize; nv];
        for (_, _, t) in &raw {
            indeg[*t] += 1;
        }
        let mut order = Vec::with_capacity(nv);
        let mut ready: Vec<usize> = (0..nv).filter(|v| indeg[*v] == 0).collect();
        while let Some(v) = ready.pop() {
            order.push(v);
            for (_, s, t) in &raw {
                if *s == v {
                    indeg[*t] -= 1;
                    if indeg[*t] == 0 {
                        ready.push(*t);
                    }
                }
            }
        }
        let mut pos = vec![usize::MAX; nv];
        for (i, v) in order.iter().enumerate() {
            pos[*v] = i;
        }
        raw.sort_by_key(|(ch, s, _)| (pos[*s], *ch));
        ResponseTime {
            path: path.to_string(),
            edges: raw,
            comps,
            lmin,
            pot: None,
        }
    }

    /// Precomputes the route potentials the bound uses, over the candidates of `space`.
    pub fn with_potentials(self, ctx: &Ctx<'_, '_>) -> Self {
        let pot = std::sync::Arc::new(self.potentials(ctx));
        self.with_pot(pot)
    }

    /// Uses potentials computed for the same path over a superset of the candidates
    /// (they stay admissible: a minimum over more nodes is no larger).
    pub fn with_pot(mut self, pot: std::sync::Arc<RtPot>) -> Self {
        self.pot = Some(pot);
        self
    }

    /// The route potentials of this path over the candidates of `ctx.space`.
    pub fn potentials(&self, ctx: &Ctx<'_, '_>) -> RtPot {
        let n = ctx.model.infra.len();
        let nv = self.comps.len();
        let lat = |q: crate::infra::LinkQ| q.latency_ms;
        let cand = |slot: usize| &ctx.space.cand[self.comps[slot]][..];
        let member = |slot: usize| &ctx.space.member[self.comps[slot]][..];
        let mut has_in = vec![false; nv];
        let mut has_out = vec![false; nv];
        for (_, s, t) in &self.edges {
            has_out[*s] = true;
            has_in[*t] = true;
        }
        let init = |slot: usize, zero: bool| {
            let mut v = vec![f64::INFINITY; n];
            for b in cand(slot) {
                v[*b as usize] = if zero { 0.0 } else { f64::NEG_INFINITY };
            }
            v
        };
        let mut g: Vec<Vec<f64>> = (0..nv).map(|v| init(v, !has_in[v])).collect();
        let mut msg = vec![f64::INFINITY; n];
        for (_, s, t) in &self.edges {
            msg.iter_mut().for_each(|m| *m = f64::INFINITY);
            propagate(ctx, cand(*s), &g[*s], member(*t), true, lat, &mut msg);
            for b in cand(*t) {
                let b = *b as usize;
                g[*t][b] = g[*t][b].max(msg[b]);
            }
        }
        let mut h: Vec<Vec<f64>> = (0..nv).map(|v| init(v, !has_out[v])).collect();
        for (_, s, t) in self.edges.iter().rev() {
            msg.iter_mut().for_each(|m| *m = f64::INFINITY);
            propagate(ctx, cand(*t), &h[*t], member(*s), false, lat, &mut msg);
            for b in cand(*s) {
                let b = *b as usize;
                h[*s][b] = h[*s][b].max(msg[b]);
            }
        }
        let min_over = |v: &[f64], slot: usize| {
            cand(slot)
                .iter()
                .map(|b| v[*b as usize])
                .fold(f64::INFINITY, f64::min)
        };
        let gmin = (0..nv).map(|v| min_over(&g[v], v)).collect();
        let hmin = (0..nv).map(|v| min_over(&h[v], v)).collect();
        RtPot { g, h, gmin, hmin }
    }

    /// The longest route with channel weights `w`.
    fn longest(&self, w: impl Fn(usize) -> f64) -> f64 {
        let mut small = [0f64; 32];
        let mut big;
        let dist: &mut [f64] = if self.comps.len() <= 32 {
            &mut small[..self.comps.len()]
        } else {
            big = vec![0f64; self.comps.len()];
            &mut big
        };
        let mut longest = 0f64;
        for (ch, s, t) in &self.edges {
            let d = dist[*s] + w(*ch);
            if d > dist[*t] {
                dist[*t] = d;
                if d > longest {
                    longest = d;
                }
            }
        }
        longest
    }

    /// The path's accumulated latency l under a full assignment (infinite when a link is
    /// missing).
    pub fn latency(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        let m = ctx.model;
        self.longest(|ch| {
            let c = &m.chans[ch];
            m.infra
                .link(a[c.from], a[c.to])
                .map_or(f64::INFINITY, |q| q.latency_ms)
        })
    }

    /// A lower bound on l over the completions of `a`: the longest route with each
    /// channel at its least possible latency, and, with potentials, the largest
    /// (into v) + (out of v) bound over the path's components.
    pub fn latency_lb(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        self.latency_lb_with(ctx, a, |_, x, y| ctx.model.infra.link(x, y))
    }

    fn latency_lb_with(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        link: impl Fn(usize, u32, u32) -> Option<LinkQ>,
    ) -> f64 {
        let m = ctx.model;
        let w = |ch: usize| {
            let c = &m.chans[ch];
            let t = &ctx.space.tables[ch];
            match (a[c.from], a[c.to]) {
                (UNSET, UNSET) => t.min_lat,
                (x, UNSET) => t.lat_out[x as usize],
                (UNSET, y) => t.lat_in[y as usize],
                (x, y) => link(ch, x, y).map_or(f64::INFINITY, |q| q.latency_ms),
            }
        };
        let Some(p) = &self.pot else {
            return self.longest(w);
        };
        let nv = self.comps.len();
        let mut small = [0f64; 64];
        let mut big;
        let buf: &mut [f64] = if 2 * nv <= 64 {
            &mut small[..2 * nv]
        } else {
            big = vec![0f64; 2 * nv];
            &mut big
        };
        self.passes(p, a, w, buf)
    }

    /// The forward (D: longest route into each slot) and backward (H: out of it) passes
    /// into `buf` (D then H); returns max over slots of D + H.
    fn passes(&self, p: &RtPot, a: &[u32], w: impl Fn(usize) -> f64, buf: &mut [f64]) -> f64 {
        let nv = self.comps.len();
        let (d, hh) = buf.split_at_mut(nv);
        for v in 0..nv {
            match a[self.comps[v]] {
                UNSET => {
                    d[v] = p.gmin[v];
                    hh[v] = p.hmin[v];
                }
                b => {
                    d[v] = p.g[v][b as usize];
                    hh[v] = p.h[v][b as usize];
                }
            }
        }
        let mut ws = [0f64; 64];
        let mut wbig;
        let wv: &mut [f64] = if self.edges.len() <= 64 {
            &mut ws[..self.edges.len()]
        } else {
            wbig = vec![0f64; self.edges.len()];
            &mut wbig
        };
        for (k, (ch, s, t)) in self.edges.iter().enumerate() {
            wv[k] = w(*ch);
            let x = d[*s] + wv[k];
            if x > d[*t] {
                d[*t] = x;
            }
        }
        for (k, (_, s, t)) in self.edges.iter().enumerate().rev() {
            let x = wv[k] + hh[*t];
            if x > hh[*s] {
                hh[*s] = x;
            }
        }
        let mut lb = 0f64;
        for v in 0..nv {
            lb = lb.max(d[v] + hh[v]);
        }
        lb
    }

    fn ratio(&self, l: f64) -> f64 {
        match self.lmin {
            None => -l,
            Some(lmin) => {
                if l <= lmin {
                    1.0
                } else {
                    lmin / l
                }
            }
        }
    }
}

impl CriterionPlugin for ResponseTime {
    fn kind(&self) -> CriterionKind {
        CriterionKind::MinE2eResponseTime
    }
    fn path(&self) -> Option<&str> {
        Some(&self.path)
    }
    fn components(&self) -> &[usize] {
        &self.comps
    }
    fn grade(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        self.ratio(self.latency(ctx, a))
    }
    fn bound(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        self.ratio(self.latency_lb(ctx, a))
    }
    fn bound_cached(&self, ctx: &Ctx<'_, '_>, a: &[u32], fixed: &[LinkQ]) -> f64 {
        self.ratio(self.latency_lb_with(ctx, a, |ch, _, _| Some(fixed[ch])))
    }
    fn prepare(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        state: &mut Vec<f64>,
    ) {
        let _ = comp;
        state.clear();
        let Some(p) = &self.pot else { return };
        let m = ctx.model;
        let w = |ch: usize| {
            let c = &m.chans[ch];
            let t = &ctx.space.tables[ch];
            match (a[c.from], a[c.to]) {
                (UNSET, UNSET) => t.min_lat,
                (x, UNSET) => t.lat_out[x as usize],
                (UNSET, y) => t.lat_in[y as usize],
                _ => fixed[ch].latency_ms,
            }
        };
        state.resize(2 * self.comps.len() + 1, 0.0);
        let (buf, last) = state.split_at_mut(2 * self.comps.len());
        last[0] = self.passes(p, a, w, buf);
    }
    fn child_bound(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        b: u32,
        state: &[f64],
    ) -> f64 {
        // Only the routes through `comp` change: D and H of its predecessors and
        // successors do not depend on it (the path is acyclic), so the child's bound is
        // max(parent's, D[v] + H[v] at comp's slot v) exactly.
        let (Some(p), Some(v)) = (&self.pot, self.comps.iter().position(|c| *c == comp)) else {
            return self.bound_cached(ctx, a, fixed);
        };
        if state.is_empty() {
            return self.bound_cached(ctx, a, fixed);
        }
        let nv = self.comps.len();
        let (d, hh, parent) = (&state[..nv], &state[nv..2 * nv], state[2 * nv]);
        let bu = b as usize;
        let (mut dv, mut hv) = (p.g[v][bu], p.h[v][bu]);
        for (ch, s, t) in &self.edges {
            if *t == v {
                let w = match a[self.comps[*s]] {
                    UNSET => ctx.space.tables[*ch].lat_in[bu],
                    _ => fixed[*ch].latency_ms,
                };
                dv = dv.max(d[*s] + w);
            } else if *s == v {
                let w = match a[self.comps[*t]] {
                    UNSET => ctx.space.tables[*ch].lat_out[bu],
                    _ => fixed[*ch].latency_ms,
                };
                hv = hv.max(w + hh[*t]);
            }
        }
        self.ratio(parent.max(dv + hv))
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        // The route through `comp` is at least g + h there.
        match (&self.pot, self.comps.iter().position(|c| *c == comp)) {
            (Some(p), Some(v)) => {
                let b = b as usize;
                parent.min(self.ratio(p.g[v][b] + p.h[v][b]))
            }
            _ => parent,
        }
    }
}

// ------------------------------------------------------------ reliability

/// `max-e2e-reliability`: the product of `success` over every channel of the path.
pub struct Reliability {
    path: String,
    chans: Vec<usize>,
    comps: Vec<usize>,
    forest: Option<Forest>,
}

/// A spanning forest of the path's channels (as undirected edges between components)
/// with, per component and node, the least total `-ln success` over the forest's
/// channels when the component is on that node (exact max-marginals of a tree, computed
/// by two message passes). Channels left out of the forest only make the bound looser.
struct Forest {
    /// Channels outside the forest (closing a cycle, or from a component to itself).
    rest: Vec<usize>,
    /// Per slot, per node: the least forest cost with the slot on the node.
    m: Vec<Vec<f64>>,
    /// The least forest cost overall.
    mmin: f64,
}

fn cost(q: crate::infra::LinkQ) -> f64 {
    if q.success > 0.0 {
        -q.success.ln()
    } else {
        f64::INFINITY
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
            path: path.to_string(),
            chans: channels.to_vec(),
            comps,
            forest: None,
        }
    }

    /// Precomputes the forest bound over the candidates of `ctx.space`.
    pub fn with_forest(mut self, ctx: &Ctx<'_, '_>) -> Self {
        let m = ctx.model;
        let n = m.infra.len();
        let nv = self.comps.len();
        let slot = |c: usize| self.comps.iter().position(|x| *x == c).expect("path comp");
        let cand = |v: usize| &ctx.space.cand[self.comps[v]][..];
        let member = |v: usize| &ctx.space.member[self.comps[v]][..];
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
        let child_to_parent = |ch: usize, v: usize| m.chans[ch].from == self.comps[v];
        let init = |v: usize| {
            let mut t = vec![f64::INFINITY; n];
            for b in cand(v) {
                t[*b as usize] = 0.0;
            }
            t
        };
        let mut inner: Vec<Vec<f64>> = (0..nv).map(init).collect();
        let mut up: Vec<Vec<f64>> = vec![Vec::new(); nv];
        for v in order.iter().rev() {
            let Some((ch, p)) = parent[*v] else { continue };
            let mut msg = vec![f64::INFINITY; n];
            propagate(
                ctx,
                cand(*v),
                &inner[*v],
                member(p),
                child_to_parent(ch, *v),
                cost,
                &mut msg,
            );
            for b in cand(p) {
                let b = *b as usize;
                inner[p][b] += msg[b];
            }
            up[*v] = msg;
        }
        let mut down: Vec<Vec<f64>> = (0..nv)
            .map(|v| {
                let mut t = vec![f64::INFINITY; n];
                for b in cand(v) {
                    t[*b as usize] = 0.0;
                }
                t
            })
            .collect();
        for v in &order {
            let Some((ch, p)) = parent[*v] else { continue };
            // Everything at the parent but this child's own message.
            let mut excl = down[p].clone();
            for w in 0..nv {
                if w != *v && parent[w].is_some_and(|(_, q)| q == p) {
                    for b in cand(p) {
                        let b = *b as usize;
                        excl[b] += up[w][b];
                    }
                }
            }
            let mut msg = vec![f64::INFINITY; n];
            propagate(
                ctx,
                cand(p),
                &excl,
                member(*v),
                !child_to_parent(ch, *v),
                cost,
                &mut msg,
            );
            down[*v] = msg;
        }
        let tree_min: Vec<(usize, f64)> = roots
            .iter()
            .map(|r| {
                let best = cand(*r)
                    .iter()
                    .map(|b| inner[*r][*b as usize])
                    .fold(f64::INFINITY, f64::min);
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
                let mut t = vec![f64::INFINITY; n];
                for b in cand(v) {
                    let b = *b as usize;
                    t[b] = inner[v][b] + down[v][b] + others;
                }
                t
            })
            .collect();
        self.forest = Some(Forest { rest, m: mm, mmin });
        self
    }
}

impl CriterionPlugin for Reliability {
    fn kind(&self) -> CriterionKind {
        CriterionKind::MaxE2eReliability
    }
    fn path(&self) -> Option<&str> {
        Some(&self.path)
    }
    fn components(&self) -> &[usize] {
        &self.comps
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
    fn prepare(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        state: &mut Vec<f64>,
    ) {
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
            for (v, c) in self.comps.iter().enumerate() {
                if a[*c] != UNSET {
                    lb = lb.max(f.m[v][a[*c] as usize]);
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
    fn child_bound(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        fixed: &[LinkQ],
        comp: usize,
        b: u32,
        state: &[f64],
    ) -> f64 {
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
        if let Some(v) = self.comps.iter().position(|c| *c == comp) {
            lb = lb.max(f.m[v][b as usize]);
        }
        let mut rest = state[2];
        for ch in f.rest.iter().filter(|ch| at(ch)) {
            rest += neg_ln(best(*ch));
        }
        p.min((-(lb + rest)).exp())
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        match (&self.forest, self.comps.iter().position(|c| *c == comp)) {
            (Some(f), Some(v)) => parent.min((-f.m[v][b as usize]).exp()),
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
            (x, UNSET) => t.succ_out[x as usize],
            (UNSET, y) => t.succ_in[y as usize],
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
        for (v, comp) in self.comps.iter().enumerate() {
            let b = a[*comp];
            if b != UNSET {
                lb = lb.max(f.m[v][b as usize]);
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

// ------------------------------------------------------------ per component

/// A criterion on the node of one component: `least-containers` or `most-free-memory`.
pub struct NodeGrade {
    kind: CriterionKind,
    name: String,
    comp: [usize; 1],
    /// The best grade among the component's candidates.
    best: f64,
    /// Per node: the grade.
    grades: Vec<f64>,
}

/// The grade of `node` under a per-component criterion.
pub fn node_grade(kind: CriterionKind, node: &Node) -> f64 {
    match kind {
        CriterionKind::LeastContainers => 1.0 / (1.0 + f64::from(node.usage.containers)),
        CriterionKind::MostFreeMemory => node.free_memory_fraction(),
        _ => 0.0,
    }
}

impl NodeGrade {
    pub fn new(model: &Model<'_>, space: &Space, kind: CriterionKind, comp: usize) -> Self {
        let best = space.cand[comp]
            .iter()
            .map(|n| node_grade(kind, model.infra.node(*n)))
            .fold(0.0, f64::max);
        NodeGrade {
            kind,
            name: model.comps[comp].name.clone(),
            comp: [comp],
            best,
            grades: model
                .infra
                .nodes()
                .iter()
                .map(|n| node_grade(kind, n))
                .collect(),
        }
    }
}

impl CriterionPlugin for NodeGrade {
    fn kind(&self) -> CriterionKind {
        self.kind
    }
    fn component(&self) -> Option<&str> {
        Some(&self.name)
    }
    fn components(&self) -> &[usize] {
        &self.comp
    }
    fn grade(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        node_grade(self.kind, ctx.model.infra.node(a[self.comp[0]]))
    }
    fn bound(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        match a[self.comp[0]] {
            UNSET => self.best,
            n => node_grade(self.kind, ctx.model.infra.node(n)),
        }
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        if comp == self.comp[0] {
            parent.min(self.grades[b as usize])
        } else {
            parent
        }
    }
}

// ------------------------------------------------------------ the objective

/// The weighted criteria of an application: G = sum w g / sum w.
pub struct Objective {
    pub crits: Vec<Box<dyn CriterionPlugin>>,
    pub weights: Vec<f64>,
    pub total_weight: f64,
    /// Per component: the criteria it affects.
    pub crits_of: Vec<Vec<usize>>,
}

impl Objective {
    pub fn new(ncomps: usize, crits: Vec<Box<dyn CriterionPlugin>>, weights: Vec<f64>) -> Self {
        let mut crits_of = vec![Vec::new(); ncomps];
        for (j, c) in crits.iter().enumerate() {
            for comp in c.components() {
                if !crits_of[*comp].contains(&j) {
                    crits_of[*comp].push(j);
                }
            }
        }
        let total_weight = weights.iter().sum();
        Objective {
            crits,
            weights,
            total_weight,
            crits_of,
        }
    }

    /// G from per-criterion values (grades or bounds), always summed in the same order.
    pub fn combine(&self, vals: &[f64]) -> f64 {
        if self.crits.is_empty() {
            return 1.0;
        }
        let s: f64 = vals.iter().zip(&self.weights).map(|(v, w)| v * w).sum();
        s / self.total_weight
    }

    /// The grades of a full assignment whose channels all have links.
    pub fn grades(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> Vec<f64> {
        self.crits.iter().map(|c| c.grade(ctx, a)).collect()
    }

    /// The application's criteria as plugins; `lmin` gives l_min per criterion index
    /// (response-time criteria only).
    pub fn for_app(
        app: &Application,
        model: &Model<'_>,
        space: &Space,
        lmin: &[Option<f64>],
    ) -> Objective {
        Objective::for_app_with(app, model, space, lmin, &[])
    }

    /// [`Objective::for_app`], reusing route potentials already computed per criterion
    /// index (over a superset of the candidates: see [`ResponseTime::with_pot`]).
    pub fn for_app_with(
        app: &Application,
        model: &Model<'_>,
        space: &Space,
        lmin: &[Option<f64>],
        pots: &[Option<std::sync::Arc<RtPot>>],
    ) -> Objective {
        let mut crits: Vec<Box<dyn CriterionPlugin>> = Vec::new();
        let mut weights = Vec::new();
        for (j, cr) in app.criteria.iter().enumerate() {
            let plugin: Box<dyn CriterionPlugin> = match cr.kind {
                CriterionKind::MinE2eResponseTime | CriterionKind::MaxE2eReliability => {
                    let pname = cr.path.as_deref().unwrap_or_default();
                    let chans = path_channels(app, model, pname);
                    if cr.kind == CriterionKind::MinE2eResponseTime {
                        let ctx = Ctx { model, space };
                        let rt = ResponseTime::new(model, pname, &chans, lmin[j]);
                        Box::new(match pots.get(j).cloned().flatten() {
                            Some(p) => rt.with_pot(p),
                            None => rt.with_potentials(&ctx),
                        })
                    } else {
                        let ctx = Ctx { model, space };
                        Box::new(Reliability::new(model, pname, &chans).with_forest(&ctx))
                    }
                }
                CriterionKind::LeastContainers | CriterionKind::MostFreeMemory => {
                    let comp = model.comp_index[cr.component.as_deref().unwrap_or_default()];
                    Box::new(NodeGrade::new(model, space, cr.kind, comp))
                }
            };
            crits.push(plugin);
            weights.push(cr.weight);
        }
        Objective::new(model.comps.len(), crits, weights)
    }
}

/// The channel indices of the path `name`.
pub fn path_channels(app: &Application, model: &Model<'_>, name: &str) -> Vec<usize> {
    app.paths
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.channels.iter().map(|c| model.chan_index[c]).collect())
        .unwrap_or_default()
}
