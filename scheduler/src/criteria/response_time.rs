//! `min-e2e-response-time`: the grade, the route potentials that bound it.

use super::*;
use crate::infra::LinkQ;
use crate::problem::{CandIndex, Model, UNSET};
use acoa_shared::model::CriterionKind;
use std::sync::Arc;

/// Per slot of a response-time path: `g[v][b]`, a lower bound on the longest route that
/// ends at `v` when `v` is on node `b`, and `h[v][b]`, on the longest route that starts
/// there (each predecessor / successor takes its best node independently, which relaxes
/// the shared choices, so both are admissible). Infinite: no route at all.
pub struct RtPot {
    /// Per slot, the index of the candidates its rows of `g` and `h` follow (those of the
    /// space the potentials were computed over).
    index: Vec<Arc<CandIndex>>,
    g: Vec<Vec<f64>>,
    h: Vec<Vec<f64>>,
    gmin: Vec<f64>,
    hmin: Vec<f64>,
    /// How many of the passes' messages were computed over the links ([`propagate`]); the
    /// others were the last one shifted ([`Step::shifted`]).
    sweeps: usize,
}

impl RtPot {
    /// How many of its messages were computed by a sweep over the links (the others were
    /// the last one between the same candidate lists, shifted).
    pub fn sweeps(&self) -> usize {
        self.sweeps
    }

    /// `g` at slot `v` on node `b` (infinite on a node that is not a candidate: no route).
    #[inline]
    fn g(&self, v: usize, b: u32) -> f64 {
        self.index[v].get(&self.g[v], b, f64::INFINITY)
    }
    /// `h` at slot `v` on node `b`.
    #[inline]
    fn h(&self, v: usize, b: u32) -> f64 {
        self.index[v].get(&self.h[v], b, f64::INFINITY)
    }
}

/// `min-e2e-response-time`: g = l_min / l, l the longest source-to-sink route of the
/// path (latencies are >= 0, so that is the longest path of the path's DAG).
pub struct ResponseTime {
    scope: Scope,
    /// (channel, source slot, sink slot), sorted so that a channel comes after every
    /// channel into its source (topological order).
    edges: Vec<(usize, usize, usize)>,
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
            // `comps`: slot -> component.
            scope: Scope {
                kind: CriterionKind::MinE2eResponseTime,
                path: Some(path.to_string()),
                component: None,
                comps,
            },
            edges: raw,
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
        self.potentials_with(ctx, true)
    }

    /// [`ResponseTime::potentials`]; `shift`: whether a message may be the last one shifted
    /// ([`Step::shifted`]) instead of a sweep over the links.
    fn potentials_with(&self, ctx: &Ctx<'_, '_>, shift: bool) -> RtPot {
        let nv = self.scope.comps.len();
        let cand = |slot: usize| &ctx.space.cand[self.scope.comps[slot]][..];
        let index = ctx.space.indexes(&self.scope.comps);
        let mut has_in = vec![false; nv];
        let mut has_out = vec![false; nv];
        for (_, s, t) in &self.edges {
            has_out[*s] = true;
            has_in[*t] = true;
        }
        // a row per slot, an entry per candidate of its component
        let init = |slot: usize, zero: bool| {
            vec![if zero { 0.0 } else { f64::NEG_INFINITY }; cand(slot).len()]
        };
        let mut sweeps = 0;
        let mut g: Vec<Vec<f64>> = (0..nv).map(|v| init(v, !has_in[v])).collect();
        let mut last = vec![];
        for (_, s, t) in &self.edges {
            let from = (cand(*s), &index[*s], &g[*s][..]);
            let msg = Step::next(ctx, &mut last, shift, from, (cand(*t), &index[*t]), true);
            sweeps += usize::from(msg.1);
            for (x, m) in g[*t].iter_mut().zip(&msg.0) {
                *x = x.max(*m);
            }
        }
        let mut h: Vec<Vec<f64>> = (0..nv).map(|v| init(v, !has_out[v])).collect();
        let mut last = vec![];
        for (_, s, t) in self.edges.iter().rev() {
            let from = (cand(*t), &index[*t], &h[*t][..]);
            let msg = Step::next(ctx, &mut last, shift, from, (cand(*s), &index[*s]), false);
            sweeps += usize::from(msg.1);
            for (x, m) in h[*s].iter_mut().zip(&msg.0) {
                *x = x.max(*m);
            }
        }
        let min_over = |row: &[f64]| row.iter().copied().fold(f64::INFINITY, f64::min);
        let gmin = g.iter().map(|r| min_over(r)).collect();
        let hmin = h.iter().map(|r| min_over(r)).collect();
        RtPot {
            index,
            g,
            h,
            gmin,
            hmin,
            sweeps,
        }
    }

    /// The longest route with channel weights `w`.
    fn longest(&self, w: impl Fn(usize) -> f64) -> f64 {
        let mut small = [0f64; 32];
        let mut big;
        let dist: &mut [f64] = if self.scope.comps.len() <= 32 {
            &mut small[..self.scope.comps.len()]
        } else {
            big = vec![0f64; self.scope.comps.len()];
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
        let w = |ch: usize| self.least_latency(ctx, a, ch, &link);
        let Some(p) = &self.pot else {
            return self.longest(w);
        };
        let nv = self.scope.comps.len();
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

    /// The least latency the link under `ch` can have given `a` (`link` for a channel whose
    /// two ends are placed; infinite without one).
    fn least_latency(
        &self,
        ctx: &Ctx<'_, '_>,
        a: &[u32],
        ch: usize,
        link: impl Fn(usize, u32, u32) -> Option<LinkQ>,
    ) -> f64 {
        let c = &ctx.model.chans[ch];
        let t = &ctx.space.tables[ch];
        match (a[c.from], a[c.to]) {
            (UNSET, UNSET) => t.min_lat,
            (x, UNSET) => t.lat_out(x),
            (UNSET, y) => t.lat_in(y),
            (x, y) => link(ch, x, y).map_or(f64::INFINITY, |q| q.latency_ms),
        }
    }

    /// The forward (D: longest route into each slot) and backward (H: out of it) passes
    /// into `buf` (D then H); returns max over slots of D + H.
    fn passes(&self, p: &RtPot, a: &[u32], w: impl Fn(usize) -> f64, buf: &mut [f64]) -> f64 {
        let nv = self.scope.comps.len();
        let (d, hh) = buf.split_at_mut(nv);
        for v in 0..nv {
            match a[self.scope.comps[v]] {
                UNSET => {
                    d[v] = p.gmin[v];
                    hh[v] = p.hmin[v];
                }
                b => {
                    d[v] = p.g(v, b);
                    hh[v] = p.h(v, b);
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

/// How far (relative to the values' size) a message's input may be from the last one's
/// shifted by a constant for [`Step::shifted`] to give it: far above a sum's rounding, far
/// below a latency that matters.
const SHIFT_TOL: f64 = 1e-9;

/// The last message of a pass of [`ResponseTime::potentials`] between two candidate lists:
/// which, from which values, and what it was.
struct Step {
    src: Arc<CandIndex>,
    dst: Arc<CandIndex>,
    input: Vec<f64>,
    output: Vec<f64>,
}

impl Step {
    /// The message from the nodes of `from` (with their values) to those of `to`, and whether
    /// it took a sweep over the links ([`propagate`]) rather than [`Step::shifted`] from the
    /// pass's last message between the same lists (when `shift`); it becomes that one in
    /// `last` (a chain whose stages alternate between two kinds of candidates has two).
    fn next(
        ctx: &Ctx<'_, '_>,
        last: &mut Vec<Step>,
        shift: bool,
        from: (&[u32], &Arc<CandIndex>, &[f64]),
        to: (&[u32], &Arc<CandIndex>),
        forward: bool,
    ) -> (Vec<f64>, bool) {
        let (src, src_index, val) = from;
        let (dst, dst_index) = to;
        let same = last
            .iter()
            .position(|l| Arc::ptr_eq(&l.src, src_index) && Arc::ptr_eq(&l.dst, dst_index));
        let shifted = same.filter(|_| shift).and_then(|i| last[i].shifted(val));
        let swept = shifted.is_none();
        let msg = shifted.unwrap_or_else(|| {
            let mut msg = vec![f64::INFINITY; dst.len()];
            propagate(
                ctx,
                src,
                val,
                dst,
                dst_index,
                forward,
                Cost::Latency,
                &mut msg,
            );
            msg
        });
        if shift {
            let step = Step {
                src: src_index.clone(),
                dst: dst_index.clone(),
                input: val.to_vec(),
                output: msg.clone(),
            };
            match same {
                Some(i) => last[i] = step,
                None => last.push(step),
            }
        }
        (msg, swept)
    }

    /// The message from `val` between this step's two candidate lists, without a sweep, when
    /// `val` is this step's input plus a constant `c` (to within [`SHIFT_TOL`]): then it is
    /// this step's output plus `c`, less the distance found and the tolerance, so that it
    /// stays a lower bound. A message is a minimum of value plus latency, measured or
    /// bounded by the estimator's cells, and each of those moves by exactly `c` when every
    /// value does. In a chain of stages that share their candidates the messages soon differ
    /// by the loopback only (staying on a node beats every detour): at 50,000 nodes each
    /// sweep reads 1.7 million links and bounds 50,000 nodes against the cells.
    fn shifted(&self, val: &[f64]) -> Option<Vec<f64>> {
        if self.input.len() != val.len() {
            return None;
        }
        let (mut c, mut scale) = (None, 0f64);
        for (a, b) in val.iter().zip(&self.input) {
            if a.is_finite() != b.is_finite() || (!a.is_finite() && a != b) {
                return None;
            }
            if a.is_finite() {
                c.get_or_insert(a - b);
                scale = scale.max(a.abs()).max(b.abs());
            }
        }
        let c = c?;
        let tol = SHIFT_TOL * (1.0 + scale);
        let mut far = 0f64;
        for (a, b) in val.iter().zip(&self.input) {
            if a.is_finite() {
                far = far.max((a - b - c).abs());
                if far > tol {
                    return None;
                }
            }
        }
        let out_scale = self
            .output
            .iter()
            .filter(|o| o.is_finite())
            .fold(0f64, |m, o| m.max(o.abs()));
        let less = far + SHIFT_TOL * (1.0 + scale + out_scale);
        Some(
            self.output
                .iter()
                .map(|o| if o.is_finite() { o + c - less } else { *o })
                .collect(),
        )
    }
}

impl CriterionPlugin for ResponseTime {
    fn scope(&self) -> &Scope {
        &self.scope
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
    fn prepare(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, state: &mut Vec<f64>) {
        let Branch { a, fixed, .. } = br;
        state.clear();
        let Some(p) = &self.pot else { return };
        let w = |ch: usize| self.least_latency(ctx, a, ch, |ch, _, _| Some(fixed[ch]));
        state.resize(2 * self.scope.comps.len() + 1, 0.0);
        let (buf, last) = state.split_at_mut(2 * self.scope.comps.len());
        last[0] = self.passes(p, a, w, buf);
    }
    fn child_bound(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, b: u32, state: &[f64]) -> f64 {
        let Branch { a, fixed, comp } = br;
        // Only the routes through `comp` change: D and H of its predecessors and
        // successors do not depend on it (the path is acyclic), so the child's bound is
        // max(parent's, D[v] + H[v] at comp's slot v) exactly.
        let (Some(p), Some(v)) = (&self.pot, self.scope.comps.iter().position(|c| *c == comp))
        else {
            return self.bound_cached(ctx, a, fixed);
        };
        if state.is_empty() {
            return self.bound_cached(ctx, a, fixed);
        }
        let nv = self.scope.comps.len();
        let (d, hh, parent) = (&state[..nv], &state[nv..2 * nv], state[2 * nv]);
        let (mut dv, mut hv) = (p.g(v, b), p.h(v, b));
        for (ch, s, t) in &self.edges {
            if *t == v {
                let w = match a[self.scope.comps[*s]] {
                    UNSET => ctx.space.tables[*ch].lat_in(b),
                    _ => fixed[*ch].latency_ms,
                };
                dv = dv.max(d[*s] + w);
            } else if *s == v {
                let w = match a[self.scope.comps[*t]] {
                    UNSET => ctx.space.tables[*ch].lat_out(b),
                    _ => fixed[*ch].latency_ms,
                };
                hv = hv.max(w + hh[*t]);
            }
        }
        self.ratio(parent.max(dv + hv))
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        // The route through `comp` is at least g + h there.
        match (&self.pot, self.scope.comps.iter().position(|c| *c == comp)) {
            (Some(p), Some(v)) => parent.min(self.ratio(p.g(v, b) + p.h(v, b))),
            _ => parent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter;
    use crate::infra::Infra;
    use crate::ledger::Ledger;
    use crate::problem::Space;
    use crate::rng::SplitMix64;

    /// A chain of `k` stages on `n` nodes, every other stage on any node and the others on
    /// the half with a GPU (the messages alternate between two pairs of candidate lists):
    /// every node has a coordinate and a loopback, and measured links to a few others, some
    /// far shorter than their estimate (detours pay for a few stages).
    fn chain(k: usize, n: usize) -> (Infra, acoa_shared::model::Application) {
        let mut r = SplitMix64::new(11);
        let nodes: Vec<_> = (0..n)
            .map(|i| {
                let mut x = crate::testkit::edge_node(format!("n{i:04}"), &format!("d{}", i / 10));
                if i % 2 == 0 {
                    x.hardware = vec!["gpu".into()];
                }
                x
            })
            .collect();
        // at least half the loopback: staying on a node is the cheapest stage
        let est = crate::testkit::random_estimates(&nodes, &mut r, 0.05);
        let q = |latency_ms: f64| LinkQ {
            latency_ms,
            success: 0.999,
        };
        let mut links = vec![];
        for x in 0..n as u32 {
            links.push((x, x, q(0.1)));
            for _ in 0..4 {
                let y = (r.unit() * n as f64) as u32 % n as u32;
                if y != x {
                    links.push((x, y, q(1.0 + 60.0 * r.unit())));
                }
            }
        }
        let infra = Infra::new(nodes, links).with_estimates(&est);
        let requires = |c: usize| {
            if c % 2 == 1 {
                "{hardware: [gpu]}"
            } else {
                "{}"
            }
        };
        (infra, crate::testkit::chain_app(k, requires))
    }

    /// Once a pass's messages differ by a constant (the loopback), the rest of the chain is
    /// shifted, not swept; the potentials stay lower bounds, below the swept ones by no more
    /// than the tolerance. Without the shift every message is a sweep.
    #[test]
    fn a_chain_of_stages_on_the_same_nodes_sweeps_its_links_a_few_times_only() {
        let (k, n) = (20, 400);
        let (infra, app) = chain(k, n);
        let model = Model::compile(&infra, &app, &Ledger::new(), &filter::default_constraints());
        let cand = model.comps.iter().map(|c| c.cand.clone()).collect();
        let space = Space::build_consistent(&model, cand).unwrap();
        let ctx = Ctx {
            model: &model,
            space: &space,
        };
        let chans = path_channels(&app, &model, "p");
        let rt = ResponseTime::new(&model, "p", &chans, None);
        let swept = rt.potentials_with(&ctx, false);
        let shifted = rt.potentials_with(&ctx, true);
        assert_eq!(swept.sweeps(), 2 * (k - 1));
        assert!(
            shifted.sweeps() <= swept.sweeps() / 3,
            "{} sweeps of {}",
            shifted.sweeps(),
            swept.sweeps()
        );
        let mut differ = 0;
        for (a, b) in [(&shifted.g, &swept.g), (&shifted.h, &swept.h)] {
            for (ra, rb) in a.iter().zip(b) {
                for (x, y) in ra.iter().zip(rb) {
                    if !y.is_finite() {
                        assert_eq!(x, y);
                        continue;
                    }
                    assert!(x <= y, "{x} above the swept {y}");
                    assert!(y - x <= 1e-6 * (1.0 + y), "{x} too far below {y}");
                    differ += usize::from(x != y);
                }
            }
        }
        // the chain converged: most of its rows were shifted
        assert!(differ > n * k / 2, "{differ}");
        assert!(
            space.cand[0].len() > space.cand[1].len(),
            "two kinds of stages"
        );
    }
}
