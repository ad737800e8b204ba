//! Criterion plugins: each one grades a whole deployment in [0, 1] (model.md, "Scoring"),
//! and gives the search an optimistic grade (an upper bound) for a partial one.

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
}

// ------------------------------------------------------------ response time

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
        }
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

    /// A lower bound on l over the completions of `a`.
    pub fn latency_lb(&self, ctx: &Ctx<'_, '_>, a: &[u32]) -> f64 {
        let m = ctx.model;
        self.longest(|ch| {
            let c = &m.chans[ch];
            let t = &ctx.space.tables[ch];
            match (a[c.from], a[c.to]) {
                (UNSET, UNSET) => t.min_lat,
                (x, UNSET) => t.lat_out[x as usize],
                (UNSET, y) => t.lat_in[y as usize],
                (x, y) => m.infra.link(x, y).map_or(f64::INFINITY, |q| q.latency_ms),
            }
        })
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
}

// ------------------------------------------------------------ reliability

/// `max-e2e-reliability`: the product of `success` over every channel of the path.
pub struct Reliability {
    path: String,
    chans: Vec<usize>,
    comps: Vec<usize>,
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
        }
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
        let mut p = 1.0;
        for ch in &self.chans {
            let c = &m.chans[*ch];
            let t = &ctx.space.tables[*ch];
            let s = match (a[c.from], a[c.to]) {
                (UNSET, UNSET) => t.best_succ,
                (x, UNSET) => t.succ_out[x as usize],
                (UNSET, y) => t.succ_in[y as usize],
                (x, y) => m.infra.link(x, y).map_or(0.0, |q| q.success),
            };
            p *= s.max(0.0);
        }
        p
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
        let mut crits: Vec<Box<dyn CriterionPlugin>> = Vec::new();
        let mut weights = Vec::new();
        for (j, cr) in app.criteria.iter().enumerate() {
            let plugin: Box<dyn CriterionPlugin> = match cr.kind {
                CriterionKind::MinE2eResponseTime | CriterionKind::MaxE2eReliability => {
                    let pname = cr.path.as_deref().unwrap_or_default();
                    let chans = path_channels(app, model, pname);
                    if cr.kind == CriterionKind::MinE2eResponseTime {
                        Box::new(ResponseTime::new(model, pname, &chans, lmin[j]))
                    } else {
                        Box::new(Reliability::new(model, pname, &chans))
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
