//! Criterion plugins: each one grades a whole deployment in [0, 1] (model.md, "Scoring"),
//! and gives the search an optimistic grade (an upper bound) for a partial one.

mod reliability;
mod response_time;

pub use reliability::Reliability;
pub use response_time::{ResponseTime, RtPot};

use crate::infra::LinkQ;
use crate::problem::{CandIndex, Model, Space, UNSET};
use acoa_shared::model::{Application, CriterionKind, Node};

/// What a criterion plugin may read.
pub struct Ctx<'a, 'm> {
    pub model: &'a Model<'m>,
    pub space: &'a Space,
}

/// What a criterion grades: its kind, what it targets, and the components whose node
/// changes its grade or bound.
pub struct Scope {
    pub kind: CriterionKind,
    /// The targeted path, for path criteria.
    pub path: Option<String>,
    /// The targeted component, for component criteria.
    pub component: Option<String>,
    pub comps: Vec<usize>,
}

/// A node of the search being branched on: the assignment `a` (`UNSET` marks unplaced
/// components; in [`CriterionPlugin::child_bound`] it is the child's, with `comp` placed),
/// `fixed`, the link under every channel whose two ends are placed (indexed by channel;
/// other entries are not read), and `comp`, the component the branches place.
#[derive(Clone, Copy)]
pub struct Branch<'p> {
    pub a: &'p [u32],
    pub fixed: &'p [LinkQ],
    pub comp: usize,
}

pub trait CriterionPlugin: Send + Sync {
    fn scope(&self) -> &Scope;
    fn kind(&self) -> CriterionKind {
        self.scope().kind
    }
    fn path(&self) -> Option<&str> {
        self.scope().path.as_deref()
    }
    fn component(&self) -> Option<&str> {
        self.scope().component.as_deref()
    }
    fn components(&self) -> &[usize] {
        &self.scope().comps
    }
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
    /// Prepares bounding the children of the partial assignment `br.a` that place
    /// `br.comp` (unplaced in `br.a`): fills `state` for [`CriterionPlugin::child_bound`].
    fn prepare(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, state: &mut Vec<f64>) {
        let _ = (ctx, br);
        state.clear();
    }
    /// The bound of the child `br.a` (the prepared parent plus `br.comp` on `b`;
    /// `br.fixed` also holds the links under `comp`'s channels whose other end is placed).
    /// Equal to [`CriterionPlugin::bound_cached`] of the child (by default, it is that), but
    /// computed from the prepared parent in time proportional to `comp`'s channels.
    fn child_bound(&self, ctx: &Ctx<'_, '_>, br: Branch<'_>, b: u32, state: &[f64]) -> f64 {
        let _ = (b, state);
        self.bound_cached(ctx, br.a, br.fixed)
    }
}

/// Relaxes `out[y] = min(out[y], val[x] + cost(link))` over the links between the nodes
/// `x` of `src` (with a finite `val[x]`) and the nodes `y` of `dst`: links `x -> y` when
/// `forward`, `y -> x` otherwise. `val` is per member of `src` (in its order), `out` per
/// member of `dst`; `dst_index` is `dst`'s [`CandIndex`].
///
/// Measured links are visited; estimated ones are bounded without visiting every pair, so
/// that `out` stays a lower bound: latency by the estimator's cells of `src`
/// ([`crate::estimate::Estimator::latency_lb`], O(|dst| x cells)), unreliability by its
/// halves (`-ln` of the success estimate, a product, is a sum: O(|src| + |dst|)).
#[allow(clippy::too_many_arguments)]
pub(super) fn propagate(
    ctx: &Ctx<'_, '_>,
    src: &[u32],
    val: &[f64],
    dst: &[u32],
    dst_index: &CandIndex,
    forward: bool,
    cost: Cost,
    out: &mut [f64],
) {
    let infra = ctx.model.infra;
    for (x, vx) in src.iter().zip(val) {
        if !vx.is_finite() {
            continue;
        }
        let mut relax = |y: u32, l: LinkQ| {
            if let Some(j) = dst_index.of(y) {
                let c = vx + cost.of(l);
                if c < out[j] {
                    out[j] = c;
                }
            }
        };
        if forward {
            let (ys, ls) = infra.out_links(*x);
            for (y, l) in ys.iter().zip(ls) {
                relax(*y, *l);
            }
        } else {
            let (ys, ls) = infra.inn_links(*x);
            for (y, l) in ys.iter().zip(ls.iter()) {
                relax(*y, l);
            }
        }
    }
    let Some(e) = infra.estimator() else { return };
    match cost {
        Cost::Latency => {
            let cells = e.cells(src, |k| val[k]);
            for (y, o) in dst.iter().zip(out.iter_mut()) {
                let c = e.latency_lb(*y, &cells);
                if c < *o {
                    *o = c;
                }
            }
        }
        Cost::Unreliability => {
            let best = src
                .iter()
                .zip(val)
                .filter(|(_, v)| v.is_finite())
                .filter_map(|(x, v)| Some(v + cost.of(e.half(*x)?)))
                .fold(f64::INFINITY, f64::min);
            if !best.is_finite() {
                return;
            }
            for (y, o) in dst.iter().zip(out.iter_mut()) {
                if let Some(h) = e.half(*y) {
                    let c = best + cost.of(h);
                    if c < *o {
                        *o = c;
                    }
                }
            }
        }
    }
}

/// What [`propagate`] adds up over links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cost {
    /// Latency, ms.
    Latency,
    /// `-ln success` (infinite for a link that never answers).
    Unreliability,
}

impl Cost {
    pub(super) fn of(self, q: crate::infra::LinkQ) -> f64 {
        match self {
            Cost::Latency => q.latency_ms,
            Cost::Unreliability => {
                if q.success > 0.0 {
                    -q.success.ln()
                } else {
                    f64::INFINITY
                }
            }
        }
    }
}

// ------------------------------------------------------------ per component

/// A criterion on the node of one component: `least-containers` or `most-free-memory`.
pub struct NodeGrade {
    scope: Scope,
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
            scope: Scope {
                kind,
                path: None,
                component: Some(model.comps[comp].name.clone()),
                comps: vec![comp],
            },
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
    fn scope(&self) -> &Scope {
        &self.scope
    }
    fn grade(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        node_grade(
            self.scope.kind,
            ctx.model.infra.node(a[self.scope.comps[0]]),
        )
    }
    fn bound(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        match a[self.scope.comps[0]] {
            UNSET => self.best,
            n => node_grade(self.scope.kind, ctx.model.infra.node(n)),
        }
    }
    fn quick_bound(&self, comp: usize, b: u32, parent: f64) -> f64 {
        if comp == self.scope.comps[0] {
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
        Objective::build(app, model, space, lmin, pots, true)
    }

    /// [`Objective::for_app`] for grading whole deployments: the same grades, and only the
    /// plain bounds (no route potentials, no reliability forest, which at 50,000 nodes take
    /// tens of MiB while they are computed and which a score never reads).
    pub fn for_grading(
        app: &Application,
        model: &Model<'_>,
        space: &Space,
        lmin: &[Option<f64>],
    ) -> Objective {
        Objective::build(app, model, space, lmin, &[], false)
    }

    fn build(
        app: &Application,
        model: &Model<'_>,
        space: &Space,
        lmin: &[Option<f64>],
        pots: &[Option<std::sync::Arc<RtPot>>],
        bounds: bool,
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
                            None if bounds => rt.with_potentials(&ctx),
                            None => rt,
                        })
                    } else {
                        let ctx = Ctx { model, space };
                        let r = Reliability::new(model, pname, &chans);
                        Box::new(if bounds { r.with_forest(&ctx) } else { r })
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
