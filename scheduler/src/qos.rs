//! `qos` (the default algorithm): the deployment of highest score G of `spec/model.md`, by
//! branch and bound over whole deployments.
//!
//! [`place`] runs: compile ([`Model`]: candidates per component, channels as index pairs;
//! [`Space`]: per-channel best-link tables, then arc consistency over the links) -> l_min of
//! every response-time path (its own exact search over the deployments that satisfy
//! `requires` and have every link, resource requests aside) -> bound tables (route potentials,
//! reliability forests) -> branch and bound -> count of the feasible deployments (exact when
//! cheap, else an upper bound, said so).
//!
//! Optimality is exact up to [`search::EPS`] (1e-12): a subtree is cut unless its bound
//! beats the incumbent by more than that, for the score and for each l_min alike.

use crate::criteria::{self, Ctx, Objective};
use crate::problem::{Model, Space};
use crate::{
    enumerate, filter, infeasible, search, CriterionGrade, Infra, Ledger, Options, Outcome, Phases,
    Placement, Report, ScheduleError,
};
use acoa_shared::model::{self, Application, CriterionKind};
use std::time::Instant;

/// An application `name` of these parts, placed by the `qos` scheduler (no ingress, the
/// default disconnect policy).
pub fn application(
    name: &str,
    components: Vec<model::Component>,
    channels: Vec<model::Channel>,
    paths: Vec<model::AppPath>,
    criteria: Vec<model::Criterion>,
) -> Application {
    Application {
        application: name.to_string(),
        scheduler: "qos".to_string(),
        components,
        channels,
        paths,
        criteria,
        ingress: None,
        disconnect: Default::default(),
        update: None,
    }
}

/// The `qos` search of [`place_on`](crate::place_on).
pub(crate) fn place(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    opts: &Options,
    t0: Instant,
) -> Result<Report, ScheduleError> {
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, ledger, &constraints);
    if let Some(r) = model.comps.iter().find_map(|c| c.empty_reason.clone()) {
        return Ok(infeasible(r));
    }
    let space =
        match Space::build_consistent(&model, model.comps.iter().map(|c| c.cand.clone()).collect())
        {
            Ok(s) => s,
            Err(c) => {
                let full =
                    Space::build(&model, model.comps.iter().map(|c| c.cand.clone()).collect());
                let reason = dead_channel(&model, &full).unwrap_or_else(|| unsupported(&model, c));
                return Ok(infeasible(reason));
            }
        };
    // the budget counts from the start: compiling and the bounds are in it (at 50,000 nodes
    // they were half a 20-component placement, on top of a budget the l_min search took whole)
    let limits = search::Limits {
        deadline: opts.time_budget.map(|b| t0 + b),
        max_nodes: None,
    };
    let remaining = model.joint().then(|| model.remaining(ledger));
    if opts.enumerate {
        let total = space.product();
        if total > opts.enumerate_limit {
            return Err(ScheduleError::TooLarge(total, opts.enumerate_limit));
        }
        let lmin = enumerate::lmin(app, &model);
        if let Some(r) = missing_reference(app, &lmin) {
            return Ok(infeasible(r));
        }
        let objective = Objective::for_app(app, &model, &space, &lmin);
        let e = enumerate::run(&model, &space, &objective, remaining.as_deref());
        let Some((best, _)) = e.best else {
            return Ok(infeasible(no_deployment(
                &model,
                e.first_missing,
                remaining.is_some(),
            )));
        };
        let placement = make_placement(app, &model, &space, &objective, &best, e.feasible);
        let score = placement.score;
        return Ok(Report {
            outcome: Outcome::Placed(placement),
            feasible_exact: true,
            worst_score: Some(e.worst),
            mean_score: Some(e.mean),
            explored: space.product().min(u64::MAX as u128) as u64,
            proven: true,
            upper_bound: score,
            phases: Phases::default(),
        });
    }
    let mut phases = Phases {
        compile: t0.elapsed(),
        ..Phases::default()
    };
    let t = Instant::now();
    // on estimates a long path's l_min search rarely ends: half of the time left, the other
    // half for the placement's own search
    let (lmin, lmin_proven, mut explored, pots) =
        lmin_search_pots(app, &model, &space, part_of(limits, 2));
    phases.lmin = t.elapsed();
    if let Some(r) = missing_reference(app, &lmin) {
        if lmin_proven {
            return Ok(infeasible(r));
        }
    }
    let t = Instant::now();
    let objective = Objective::for_app_with(app, &model, &space, &lmin, &pots);
    phases.bounds = t.elapsed();
    let t = Instant::now();
    let found = search::branch_and_bound(&model, &space, &objective, remaining.clone(), limits);
    explored += found.explored;
    phases.search = t.elapsed();
    let Some((best, _)) = found.best else {
        let reason = if found.proven {
            no_deployment(&model, found.first_missing, remaining.is_some())
        } else {
            "no deployment found within the time budget".to_string()
        };
        return Ok(infeasible(reason));
    };
    let t = Instant::now();
    let largest = space
        .cand
        .iter()
        .map(|c| c.len() as u128)
        .max()
        .unwrap_or(1);
    let (feasible, feasible_exact) = if remaining.is_none() && space.links_complete(&model) {
        (space.product(), true)
    } else if remaining.is_some() && space.product() / largest.max(1) > opts.count_budget as u128 {
        // With requests the count visits every feasible deployment but the last
        // component's: hopeless within the budget, so do not start.
        (space.product(), false)
    } else {
        match search::count(&model, &space, &objective, remaining, opts.count_budget) {
            Some(n) => (n, true),
            None => (space.product(), false),
        }
    };
    phases.count = t.elapsed();
    let placement = make_placement(app, &model, &space, &objective, &best, feasible);
    let score = placement.score;
    let proven = found.proven && lmin_proven;
    Ok(Report {
        outcome: Outcome::Placed(placement),
        feasible_exact,
        worst_score: None,
        mean_score: None,
        explored,
        proven,
        upper_bound: if proven {
            score
        } else {
            found.upper_bound.max(score)
        },
        phases,
    })
}

/// Branch and bound within several restrictions of the candidates, on one compile and one
/// l_min over the unrestricted candidates, so that the scores of every restriction compare
/// with one another: a large-neighbourhood search ([`crate::explore`]) frees a few components
/// and pins the rest. `within[r][u]`: the nodes component `u` may take in restriction `r`
/// (kept only where they are among its candidates). Each restriction's search stops at its
/// share of what is left of `limits` after l_min; the best deployment of each, if any.
pub(crate) fn place_within(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    within: &[Vec<Vec<u32>>],
    limits: search::Limits,
) -> Vec<Option<Placement>> {
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, ledger, &constraints);
    let none = || within.iter().map(|_| None).collect();
    if model.comps.iter().any(|c| c.empty_reason.is_some()) {
        return none();
    }
    let Ok(space) =
        Space::build_consistent(&model, model.comps.iter().map(|c| c.cand.clone()).collect())
    else {
        return none();
    };
    // l_min gets a quarter of the budget (on estimates a search for it rarely ends), the
    // restrictions the rest
    let (lmin, _, _, pots) = lmin_search_pots(app, &model, &space, part_of(limits, 4));
    if missing_reference(app, &lmin).is_some() {
        return none();
    }
    let remaining = model.joint().then(|| model.remaining(ledger));
    let mut out = Vec::with_capacity(within.len());
    for (r, nodes) in within.iter().enumerate() {
        let cand: Vec<Vec<u32>> = space
            .cand
            .iter()
            .zip(nodes)
            .map(|(c, w)| {
                let mut w: Vec<u32> = w
                    .iter()
                    .copied()
                    .filter(|n| c.binary_search(n).is_ok())
                    .collect();
                w.sort_unstable();
                w.dedup();
                w
            })
            .collect();
        let Ok(restricted) = Space::build_consistent(&model, cand) else {
            out.push(None);
            continue;
        };
        let share = part_of(limits, (within.len() - r) as u32);
        let objective = Objective::for_app_with(app, &model, &restricted, &lmin, &pots);
        let found =
            search::branch_and_bound(&model, &restricted, &objective, remaining.clone(), share);
        out.push(
            found
                .best
                .map(|(a, _)| make_placement(app, &model, &restricted, &objective, &a, 0)),
        );
    }
    out
}

/// `limits` with its deadline at one `parts`-th of the time left to it.
fn part_of(limits: search::Limits, parts: u32) -> search::Limits {
    search::Limits {
        deadline: limits.deadline.map(|d| {
            let now = Instant::now();
            now + d.saturating_duration_since(now) / parts
        }),
        ..limits
    }
}

/// l_min of every response-time criterion by branch and bound (minimise the path's
/// longest route over the deployments that satisfy `requires` and have every link,
/// resource requests aside). Returns the values, whether all are proven, and the
/// search-tree nodes explored.
pub fn lmin_search(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    limits: search::Limits,
) -> (Vec<Option<f64>>, bool, u64) {
    let (l, p, e, _) = lmin_search_pots(app, model, space, limits);
    (l, p, e)
}

type Pots = Vec<Option<std::sync::Arc<criteria::RtPot>>>;

/// [`lmin_search`], also returning the route potentials it computed (per criterion
/// index), which the main search reuses.
fn lmin_search_pots(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    limits: search::Limits,
) -> (Vec<Option<f64>>, bool, u64, Pots) {
    let mut out = vec![None; app.criteria.len()];
    let mut pots: Pots = vec![None; app.criteria.len()];
    let mut proven = true;
    let mut explored = 0;
    if !app
        .criteria
        .iter()
        .any(|c| c.kind == CriterionKind::MinE2eResponseTime)
    {
        return (out, true, 0, Vec::new());
    }
    let same = model.comps.iter().all(|c| c.cand.len() == c.req_cand.len());
    let owned;
    let req_space = if same {
        space
    } else {
        match Space::build_consistent(
            model,
            model.comps.iter().map(|c| c.req_cand.clone()).collect(),
        ) {
            Ok(s) => owned = s,
            Err(_) => return (out, true, 0, Vec::new()),
        }
        &owned
    };
    // each path's search gets an even share of the time left: one that does not end (on
    // estimates, a long path rarely does) leaves the next its part, not nothing
    let mut left = app
        .criteria
        .iter()
        .filter(|c| c.kind == CriterionKind::MinE2eResponseTime)
        .count() as u32;
    for (j, cr) in app.criteria.iter().enumerate() {
        if cr.kind != CriterionKind::MinE2eResponseTime {
            continue;
        }
        let share = part_of(limits, left);
        left -= 1;
        let pname = cr.path.as_deref().unwrap_or_default();
        let chans = criteria::path_channels(app, model, pname);
        let ctx = Ctx {
            model,
            space: req_space,
        };
        let rt = criteria::ResponseTime::new(model, pname, &chans, None);
        let pot = std::sync::Arc::new(rt.potentials(&ctx));
        pots[j] = Some(pot.clone());
        let rt = rt.with_pot(pot);
        let obj = Objective::new(model.comps.len(), vec![Box::new(rt)], vec![1.0]);
        let found = search::branch_and_bound(model, req_space, &obj, None, share);
        explored += found.explored;
        proven &= found.proven;
        if let Some((a, _)) = found.best {
            let rt = criteria::ResponseTime::new(model, pname, &chans, None);
            let ctx = Ctx {
                model,
                space: req_space,
            };
            out[j] = Some(rt.latency(&ctx, &a));
        }
    }
    (out, proven, explored, pots)
}

fn no_deployment(
    model: &Model<'_>,
    first_missing: Option<(usize, u32, u32)>,
    joint: bool,
) -> String {
    let what = match (model.has_requests(), model.container_room.is_some()) {
        (true, false) => "the resource requests of the components",
        (false, _) => "the containers of the components",
        (true, true) => "the resource requests and containers of the components",
    };
    let note = match &model.container_room {
        Some(room) => {
            let mut cand: Vec<u32> = model.comps.iter().flat_map(|c| c.cand.clone()).collect();
            cand.sort_unstable();
            cand.dedup();
            format!(
                ": {}",
                model.containers_note(&cand, room, model.comps.len() as i64)
            )
        }
        None => String::new(),
    };
    match first_missing {
        Some((ch, f, t)) if !joint => missing_reason(model, ch, f, t),
        Some((ch, f, t)) => format!(
            "{what} do not fit together on the candidate nodes with a link under every channel ({}){note}",
            missing_reason(model, ch, f, t)
        ),
        None => format!("{what} do not fit together on the candidate nodes{note}"),
    }
}

fn missing_reason(model: &Model<'_>, ch: usize, f: u32, t: u32) -> String {
    let c = &model.chans[ch];
    format!(
        "no deployment has a link under every channel: missing link from `{}` to `{}` under channel `{}` (`{}` -> `{}`)",
        model.infra.node(f).name,
        model.infra.node(t).name,
        c.name,
        model.comps[c.from].name,
        model.comps[c.to].name
    )
}

/// Why arc consistency emptied the candidates of component `c`.
fn unsupported(model: &Model<'_>, c: usize) -> String {
    let chans: Vec<&str> = model.chans_of[c]
        .iter()
        .map(|ch| model.chans[*ch].name.as_str())
        .collect();
    format!(
        "component `{}` has no candidate node with a link under each of its channels ({}) to a node its other ends can take: the links are missing",
        model.comps[c].name,
        chans.join(", ")
    )
}

/// A channel none of whose candidate pairs has a link.
fn dead_channel(model: &Model<'_>, space: &Space) -> Option<String> {
    model
        .chans
        .iter()
        .zip(&space.tables)
        .find(|(_, t)| t.linked_pairs == 0 && !t.estimated)
        .map(|(c, _)| {
            let f = space.cand[c.from][0];
            let t = if c.from == c.to { f } else { space.cand[c.to][0] };
            format!(
                "channel `{}`: no candidate node of `{}` has a link to a candidate node of `{}` (missing link from `{}` to `{}`, among others)",
                c.name,
                model.comps[c.from].name,
                model.comps[c.to].name,
                model.infra.node(f).name,
                model.infra.node(t).name
            )
        })
}

fn missing_reference(app: &Application, lmin: &[Option<f64>]) -> Option<String> {
    app.criteria
        .iter()
        .zip(lmin)
        .find(|(c, l)| c.kind == CriterionKind::MinE2eResponseTime && l.is_none())
        .map(|(c, _)| {
            format!(
                "no deployment that satisfies the constraints has a link under every channel (path `{}` has no reference latency)",
                c.path.as_deref().unwrap_or_default()
            )
        })
}

fn make_placement(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    objective: &Objective,
    a: &[u32],
    feasible: u128,
) -> Placement {
    let (score, criteria) = graded(app, objective, &Ctx { model, space }, a);
    Placement {
        assignment: model
            .comps
            .iter()
            .zip(a)
            .map(|(c, n)| (c.name.clone(), model.infra.node(*n).name.clone()))
            .collect(),
        score,
        criteria,
        feasible_deployments: feasible,
        notes: Vec::new(),
    }
}

/// The score of the deployment `a` and its grade per criterion (a score of many
/// deployments names no node: an exploration round scores 40,960 of them).
fn graded(
    app: &Application,
    objective: &Objective,
    ctx: &Ctx<'_, '_>,
    a: &[u32],
) -> (f64, Vec<CriterionGrade>) {
    let grades = objective.grades(ctx, a);
    let score = objective.combine(&grades);
    let criteria = app
        .criteria
        .iter()
        .zip(grades)
        .map(|(c, g)| CriterionGrade {
            kind: c.kind,
            path: c.path.clone(),
            component: c.component.clone(),
            weight: c.weight,
            grade: g,
        })
        .collect();
    (score, criteria)
}

/// The `qos` score of a resolved deployment.
pub(crate) fn score(
    infra: &Infra,
    app: &Application,
    model: &Model<'_>,
    a: &[u32],
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    score_all(infra, app, model, &[a], search::Limits::default())
        .pop()
        .expect("one deployment, one score")
}

/// [`score`] of several deployments on one model: l_min is searched once (and not at all
/// when every deployment misses a link), within `limits` (cut short, it is the shortest route
/// found, not proven the least).
pub(crate) fn score_all(
    infra: &Infra,
    app: &Application,
    model: &Model<'_>,
    all: &[&[u32]],
    limits: search::Limits,
) -> Vec<Result<(f64, Vec<CriterionGrade>), ScheduleError>> {
    let missing = |a: &[u32]| {
        model.missing_link(a).map(|ch| {
            let c = &model.chans[ch];
            ScheduleError::MissingLink {
                channel: c.name.clone(),
                from: infra.node(a[c.from]).name.clone(),
                to: infra.node(a[c.to]).name.clone(),
            }
        })
    };
    let missed: Vec<Option<ScheduleError>> = all.iter().map(|a| missing(a)).collect();
    if missed.iter().all(Option::is_some) {
        return missed.into_iter().flatten().map(Err).collect();
    }
    // The same spaces as `place_on`, so that l_min (exact to within the search's EPS)
    // comes out bit for bit the same.
    let space =
        Space::build_consistent(model, model.comps.iter().map(|c| c.cand.clone()).collect())
            .unwrap_or_else(|_| {
                Space::build(
                    model,
                    model.comps.iter().map(|c| c.req_cand.clone()).collect(),
                )
            });
    let (lmin, _, _) = lmin_search(app, model, &space, limits);
    let no_reference = app
        .criteria
        .iter()
        .zip(&lmin)
        .find(|(c, l)| c.kind == CriterionKind::MinE2eResponseTime && l.is_none())
        .map(|(c, _)| ScheduleError::NoReference(c.path.clone().unwrap_or_default()));
    let objective = Objective::for_grading(app, model, &space, &lmin);
    let ctx = Ctx {
        model,
        space: &space,
    };
    all.iter()
        .zip(missed)
        .map(|(a, missed)| {
            if let Some(e) = missed.or_else(|| no_reference.clone()) {
                return Err(e);
            }
            Ok(graded(app, &objective, &ctx, a))
        })
        .collect()
}
