//! Exhaustive enumeration: the test oracle and `scheduler place --enumerate`.
//!
//! Visits every assignment of candidate nodes in lexicographic order (components in
//! declaration order, nodes in name order), so the best deployment it reports is the
//! lexicographically first among those of highest score.

use crate::criteria::{CriterionPlugin, Ctx, Objective, ResponseTime};
use crate::problem::{Model, Room, Space};
use acoa_shared::model::{Application, CriterionKind};

/// Calls `f` on every assignment of the product of `cand`, in lexicographic order.
pub fn for_each(cand: &[Vec<u32>], mut f: impl FnMut(&[u32])) {
    if cand.iter().any(|c| c.is_empty()) {
        return;
    }
    let mut idx = vec![0usize; cand.len()];
    let mut a: Vec<u32> = cand.iter().map(|c| c[0]).collect();
    loop {
        f(&a);
        let mut k = cand.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < cand[k].len() {
                a[k] = cand[k][idx[k]];
                break;
            }
            idx[k] = 0;
            a[k] = cand[k][0];
        }
    }
}

/// l_min of every response-time criterion (by index), by enumeration over the
/// deployments that satisfy the `requires` constraints and have every link; `None` for
/// other criteria, or when no such deployment exists.
pub fn lmin(app: &Application, model: &Model<'_>) -> Vec<Option<f64>> {
    let space = Space::build(
        model,
        model.comps.iter().map(|c| c.req_cand.clone()).collect(),
    );
    let rts: Vec<(usize, ResponseTime)> = app
        .criteria
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CriterionKind::MinE2eResponseTime)
        .map(|(j, c)| {
            let pname = c.path.as_deref().unwrap_or_default();
            let chans = crate::criteria::path_channels(app, model, pname);
            (j, ResponseTime::new(model, pname, &chans, None))
        })
        .collect();
    let mut out = vec![None; app.criteria.len()];
    if rts.is_empty() {
        return out;
    }
    let ctx = Ctx {
        model,
        space: &space,
    };
    for_each(&space.cand, |a| {
        if model.missing_link(a).is_some() {
            return;
        }
        for (j, rt) in &rts {
            let l = rt.latency(&ctx, a);
            if out[*j].is_none_or(|m: f64| l < m) {
                out[*j] = Some(l);
            }
        }
    });
    out
}

/// What enumeration found.
#[derive(Debug, Clone)]
pub struct Enumerated {
    /// The best deployment and its score (lexicographically first among ties).
    pub best: Option<(Vec<u32>, f64)>,
    pub worst: f64,
    pub mean: f64,
    pub feasible: u128,
    /// The first missing link met: (channel, from node, to node).
    pub first_missing: Option<(usize, u32, u32)>,
}

/// Enumerates every deployment of `space` (links present, resource requests fitting
/// `remaining` when given).
pub fn run(
    model: &Model<'_>,
    space: &Space,
    objective: &Objective,
    remaining: Option<&[Room]>,
) -> Enumerated {
    let ctx = Ctx { model, space };
    let mut e = Enumerated {
        best: None,
        worst: f64::INFINITY,
        mean: 0.0,
        feasible: 0,
        first_missing: None,
    };
    let mut sum = 0.0;
    let mut vals = vec![0.0; objective.crits.len()];
    for_each(&space.cand, |a| {
        if let Some(ch) = model.missing_link(a) {
            if e.first_missing.is_none() {
                let c = &model.chans[ch];
                e.first_missing = Some((ch, a[c.from], a[c.to]));
            }
            return;
        }
        if let Some(rem) = remaining {
            if !model.fits(a, rem) {
                return;
            }
        }
        for (v, c) in vals.iter_mut().zip(&objective.crits) {
            *v = c.grade(&ctx, a);
        }
        let s = objective.combine(&vals);
        e.feasible += 1;
        sum += s;
        if s < e.worst {
            e.worst = s;
        }
        if e.best.as_ref().is_none_or(|(_, b)| s > *b) {
            e.best = Some((a.to_vec(), s));
        }
    });
    if e.feasible > 0 {
        e.mean = sum / e.feasible as f64;
    } else {
        e.worst = 0.0;
    }
    e
}

#[allow(dead_code)]
fn _assert_object_safe(_: &dyn CriterionPlugin) {}
