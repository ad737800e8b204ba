//! Exploring around a placement with targeted probes (issue 16): one round of the rule that
//! takes a placement found on measured links plus estimates to within 1 % of the placement on
//! every measured pair, without ever moving on an estimate.
//!
//! A search on estimates picks the pairs the coordinates under-estimate (the winner's curse),
//! and probing only the pairs of that one placement explores slowly. Each round here, on the
//! live model after the last round's probes were measured:
//!
//! 1. a search on the model (measured links plus estimates) gives the *search's placement*;
//! 2. a second search on the measured links alone ([`Infra::without_estimates`]);
//! 3. the placement in force becomes the best of itself, the last round's candidate and the
//!    placements of (1), (2) and (8), of those that use measured links only, scored together on
//!    the model (no estimate decides a move, and no hysteresis: a measured gain is a gain);
//! 4. around the search's placement, every single move of a component to another node it may
//!    run on is scored on the model; per component its own node and the `width - 1` best are
//!    its candidate nodes, and every unmeasured pair between the candidate nodes of a
//!    channel's two ends (at most `width`^2 per channel) is to be probed, with the estimated
//!    pairs of the search's placement (the next *candidate*) and of the placement in force;
//! 5. the same single moves are scored again with their own estimated pairs at the optimistic
//!    bound, latency x (1 - r) with r the larger coordinate error of the pair's ends
//!    ([`crate::Estimator::optimistic`]), and per component the `width` moves hoped best have
//!    their own unmeasured pairs probed. A pair the coordinates over-estimate is never chosen
//!    by a search on the estimates, nor ranked high by step 4; step 5 probes it when its
//!    nodes' coordinates are unsure enough that it could be better (optimism in the face of
//!    uncertainty), at about `width` x 2 pairs per channel;
//! 6. each end of each channel of the placement in force moved to a node of its datacenter
//!    (train, station): the `width - 1` mates nearest the other end, their unmeasured pairs.
//!    Mates share an access link, so their links to the rest are about the same, but their
//!    coordinates can differ by milliseconds, and a pair over-estimated by a coordinate that
//!    is sure of itself is hoped for by no ranking.
//!    Each end of each channel of the placement in force moved, too, to a node one or two
//!    measured links from its node (either direction): the `width - 1` nearest by the
//!    path's latency, their unmeasured pairs. The station next door along a line is a pair
//!    the coordinates over-estimate several times and nobody measures (the nearest slots are
//!    chosen by the same coordinates), but it is often two measured links away;
//! 7. a third search, on the *hopeful* view ([`Infra::hopeful`]: every estimated pair at
//!    its optimistic bound, as in step 5), and its placement's unmeasured pairs probed.
//!    Steps 4-6 probe around single moves; the placement on every pair measured often moves
//!    several components at once onto pairs the coordinates over-estimate (components of
//!    one path into the stations between them), which only a search that hopes for every
//!    pair at once reaches. Its placement is never a move: it is the next candidate when the
//!    search's placement is not one, compared once measured (step 3).
//! 8. a large-neighbourhood search around the placement in force ([`improved`]): per
//!    channel, its two ends and the other ends of their channels (four components of a
//!    path in a row) free among their own nodes and the
//!    [`HOOD_NODES`] nodes nearest their channels' other ends, the rest pinned, each such
//!    neighbourhood searched to the end or to its share of the time budget. A budget-cut
//!    search from scratch on thousands of nodes ends well below the placement in force, and
//!    single moves cannot move several components of a path at once onto a nearer station;
//!    this search starts where the placement is. It runs on the model and on the measured
//!    links alone: each neighbourhood's best that rests on measured links joins the options
//!    of step 3; on the model, each neighbourhood's best that beats the placement in force has
//!    its unmeasured pairs probed, and the best of them is the next candidate when the
//!    search's placement is not one.
//!
//! Scores compared with one another are computed together ([`crate::score_with_moves_on`]:
//! one l_min search under the search's time budget). In a large fleet a component's single
//! moves are limited to the [`MOVES_PER_COMPONENT`] nodes whose links to the other ends of
//! its channels are the shortest (measured or estimated): the moves worth scoring, at a
//! bounded cost.
//!
//! `coords-sim --place-rules multi` measures the rule (BENCHMARKS.md, "Placements on k
//! measured pairs plus estimates"); the control plane runs it when an application's targeted
//! probes are measured (cloud-broker `engine/explore.rs`).
//!
//! Invariant: pure and deterministic (the same model, application and inputs give the same
//! round); every pair to probe is unmeasured, between two different nodes.

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::model::Application;

use crate::{
    place_on, place_within_on, score_with_moves_on, CriterionGrade, Infra, Ledger, Options, Outcome,
};

mod scenario;
pub use scenario::{Scenario, ScenarioApp};

/// Candidate nodes per component (its own and the best single moves): at most this squared
/// pairs per channel and round.
pub const DEFAULT_WIDTH: usize = 8;

/// Single moves scored per component and round, at most (every node of a smaller fleet).
pub const MOVES_PER_COMPONENT: usize = 2048;

/// Nodes a component of a neighbourhood may move to in the large-neighbourhood search
/// ([`improved`]), besides its own: those nearest the other ends of its channels.
pub const HOOD_NODES: usize = 64;

/// Score differences below this are rounding (cloud-broker `links::SCORE_RESOLUTION`).
const SCORE_RESOLUTION: f64 = 1e-6;

/// Component -> node.
pub type Assignment = BTreeMap<String, String>;

/// What one round decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Explored {
    /// The placement in force after the round (the current one when nothing measured beats it).
    pub next: Assignment,
    /// The search's placement when it differs from `next` and uses estimated pairs (else the
    /// hopeful search's, if so): to be compared once its pairs are measured.
    pub candidate: Option<Assignment>,
    /// The unmeasured pairs (from, to), by the model's node numbers, to probe before the next
    /// round, each once, those that decide most first: the pairs of the placement in force and
    /// of the candidate, then of the neighbourhoods' bests and of the hopeful search's
    /// placement, then the single moves', the mates' and the near nodes'. A node probes a
    /// bounded list: a caller that cannot ask for all asks for the first (a pair that is not
    /// probed would hold the next round until the caller stops waiting).
    pub probe: Vec<(u32, u32)>,
    /// Whether the search on the model was proven optimal.
    pub proven: bool,
    /// The scores and grades of `next` and of the current placement, on the model, computed
    /// with the rest of the round (a budget-cut l_min: they compare with each other).
    pub next_score: Option<(f64, Vec<CriterionGrade>)>,
    pub current_score: Option<f64>,
}

impl Explored {
    /// Whether another round could find anything: there is something to probe or compare.
    pub fn goes_on(&self) -> bool {
        !self.probe.is_empty() || self.candidate.is_some()
    }
}

/// One round around `current` on `model` (see the module's docs); `candidate`: the last
/// round's, now probed. `ledger`: what other applications hold (the searches place around
/// it; scores do not check resources, a caller that commits checks them).
pub fn round(
    model: &Infra,
    app: &Application,
    ledger: &Ledger,
    current: &Assignment,
    candidate: Option<&Assignment>,
    width: usize,
    opts: &Options,
) -> Explored {
    let measured = model.without_estimates();
    let placed = |infra: &Infra| match place_on(infra, app, ledger, opts) {
        Ok(r) => match r.outcome {
            Outcome::Placed(p) => (Some(p.assignment), r.proven),
            Outcome::Infeasible(_) => (None, r.proven),
        },
        Err(_) => (None, false),
    };
    let (searched, proven) = placed(model);
    let (on_measured, _) = placed(&measured);
    // the neighbourhoods around the placement in force: on the model (to probe) and on the
    // measured links alone (to compare now)
    let hoods = improved(model, app, ledger, current, opts);
    let hoods_measured = improved(&measured, app, ledger, current, opts);
    // the placements that rest on measured links, then the single moves around the search's
    let options: Vec<Assignment> = std::iter::once(current.clone())
        .chain(
            candidate
                .cloned()
                .into_iter()
                .chain(on_measured)
                .chain(searched.clone())
                .chain(hoods.iter().cloned())
                .chain(hoods_measured)
                .filter(|a| model.estimated_channels(app, a) == 0),
        )
        .collect();
    let around = searched.clone().unwrap_or_else(|| current.clone());
    let moves = single_moves(model, app, &around);
    // the options, then the moves (a 20-component application at 50,000 nodes scores 40,960
    // of them: never built as placements of names)
    let mut graded: Vec<Option<(f64, Vec<CriterionGrade>)>> =
        score_with_moves_on(model, app, &options, &around, &moves, opts.time_budget)
            .into_iter()
            .map(|s| s.ok())
            .collect();
    let scores: Vec<Option<f64>> = graded.iter().map(|s| s.as_ref().map(|x| x.0)).collect();
    graded.truncate(options.len());
    let mut chosen = 0;
    for (i, s) in scores.iter().enumerate().take(options.len()).skip(1) {
        if let Some(s) = *s {
            if scores[chosen].is_none_or(|b| s > b + SCORE_RESOLUTION) {
                chosen = i;
            }
        }
    }
    let next = options[chosen].clone();
    let next_score = graded[chosen].take();
    let hopeful = optimistic_scores(model, app, &around, &moves, opts);
    let near = neighbourhood(
        model,
        app,
        &around,
        &moves,
        [&scores[options.len()..], &hopeful[..]],
        width,
    );
    // a third search, on the hopeful view: several components moved at once onto pairs the
    // coordinates may over-estimate (only probed: it decides nothing)
    let hoped = match model.estimator() {
        Some(_) => placed(&model.hopeful()).0,
        None => None,
    };
    // the next round compares the search's placement, else the hopeful one, once measured
    let unsure = |p: &Assignment| *p != next && model.estimated_channels(app, p) > 0;
    let candidate = searched
        .filter(unsure)
        .or_else(|| hoods.first().cloned().filter(unsure))
        .or_else(|| hoped.clone().filter(unsure));
    // the pairs in the order they decide, each once
    let mut seen = BTreeSet::new();
    let mut probe = Vec::new();
    let mut ask = |pairs: &mut dyn Iterator<Item = (u32, u32)>| {
        probe.extend(
            pairs.filter(|&(x, y)| x != y && !model.is_measured(x, y) && seen.insert((x, y))),
        );
    };
    for a in std::iter::once(&next)
        .chain(&candidate)
        .chain(&hoods)
        .chain(&hoped)
    {
        ask(&mut channel_pairs(model, app, a).into_iter());
    }
    ask(&mut near.into_iter());
    ask(&mut mates(model, app, &next, width).into_iter());
    ask(&mut measured_near(model, app, &next, width).into_iter());
    Explored {
        next,
        candidate,
        probe,
        proven,
        next_score,
        current_score: scores[0],
    }
}

/// The node-number pairs (from, to) of `app`'s channels under `assignment` (a component or
/// node the model does not know is left out).
pub fn channel_pairs(model: &Infra, app: &Application, assignment: &Assignment) -> Vec<(u32, u32)> {
    let at = |c: &str| model.index_of(assignment.get(c)?);
    app.channels
        .iter()
        .filter_map(|c| Some((at(&c.from)?, at(&c.to)?)))
        .collect()
}

/// Per neighbourhood of `around`, the best placement that moves its components at once, if
/// it scores above `around` on `model`: best first, each once (a large-neighbourhood search).
/// A neighbourhood is a channel's two ends and the other ends of their channels, each of them
/// free among its own node and the [`HOOD_NODES`] nodes nearest its channels' other ends, the
/// rest pinned; every neighbourhood is searched ([`place_within_on`]: branch and bound, one
/// l_min for all, an even share of the time budget each). Single moves ([`single_moves`])
/// cannot reach a placement that moves several components of a path at once onto a nearer
/// station, though the model prefers it; a component and the other ends of its channels
/// (the neighbourhoods until 2026-12-07) hold three components of a path in a row, a channel's
/// neighbourhood four.
fn improved(
    model: &Infra,
    app: &Application,
    ledger: &Ledger,
    around: &Assignment,
    opts: &Options,
) -> Vec<Assignment> {
    let at = |c: &str| model.index_of(around.get(c)?);
    let pinned: BTreeMap<String, Vec<u32>> = app
        .components
        .iter()
        .map(|c| (c.name.clone(), at(&c.name).into_iter().collect()))
        .collect();
    // per channel: its two ends and the other ends of their channels (a chain of four
    // components moves at once, the components of a path into the stations between them)
    let mut other_ends: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for ch in &app.channels {
        other_ends.entry(&ch.from).or_default().push(&ch.to);
        other_ends.entry(&ch.to).or_default().push(&ch.from);
    }
    let hoods: BTreeSet<BTreeSet<&str>> = app
        .channels
        .iter()
        .map(|ch| {
            let ends = [ch.from.as_str(), ch.to.as_str()];
            let others = ends.iter().flat_map(|e| other_ends[e].iter().copied());
            ends.into_iter().chain(others).collect()
        })
        .collect();
    let free: BTreeMap<&str, Vec<u32>> = app
        .components
        .iter()
        .map(|c| {
            let mut nodes = nearest(model, app, around, c, HOOD_NODES);
            nodes.extend(at(&c.name));
            (c.name.as_str(), nodes)
        })
        .collect();
    // the first restriction pins every component: the score of `around` on the same l_min
    let within: Vec<BTreeMap<String, Vec<u32>>> = std::iter::once(pinned.clone())
        .chain(hoods.iter().map(|hood| {
            let mut w = pinned.clone();
            for c in hood {
                w.insert(c.to_string(), free[c].clone());
            }
            w
        }))
        .collect();
    let Ok(found) = place_within_on(model, app, ledger, &within, opts) else {
        return Vec::new();
    };
    let Some(base) = found.first().and_then(|p| p.as_ref()).map(|p| p.score) else {
        return Vec::new();
    };
    let mut better: Vec<&crate::Placement> = found[1..]
        .iter()
        .flatten()
        .filter(|p| p.score > base + SCORE_RESOLUTION)
        .collect();
    better.sort_by(|x, y| {
        y.score
            .total_cmp(&x.score)
            .then(x.assignment.cmp(&y.assignment))
    });
    better.dedup_by(|x, y| x.assignment == y.assignment);
    better.into_iter().map(|p| p.assignment.clone()).collect()
}

/// The single moves from `around` as (component, node): per component the nodes other than
/// its own that satisfy its requirements (its pin among them), at most
/// [`MOVES_PER_COMPONENT`] of them, those nearest the other ends of its channels.
fn single_moves(model: &Infra, app: &Application, around: &Assignment) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for (c, comp) in app.components.iter().enumerate() {
        for n in nearest(model, app, around, comp, MOVES_PER_COMPONENT) {
            out.push((c, n));
        }
    }
    out
}

/// The nodes other than its own that `comp` may run on (its `requires`), at most `limit` of
/// them: those nearest the nodes of the other ends of its channels under `around` (the total
/// latency, measured or estimated), in node order.
fn nearest(
    model: &Infra,
    app: &Application,
    around: &Assignment,
    comp: &acoa_shared::model::Component,
    limit: usize,
) -> Vec<u32> {
    let at = |c: &str| model.index_of(around.get(c)?);
    let own = at(&comp.name);
    let mut nodes: Vec<u32> = (0..model.len() as u32)
        .filter(|&i| Some(i) != own && model.node(i).satisfies(&comp.requires))
        .collect();
    if nodes.len() > limit {
        // the total latency to (from) the nodes of the other ends of its channels; a
        // node with no link to one of them cannot take the component
        let ends: Vec<(bool, u32)> = app
            .channels
            .iter()
            .filter_map(|ch| {
                if ch.from == comp.name && ch.to != comp.name {
                    Some((true, at(&ch.to)?))
                } else if ch.to == comp.name && ch.from != comp.name {
                    Some((false, at(&ch.from)?))
                } else {
                    None
                }
            })
            .collect();
        let mut ranked: Vec<(f64, u32)> = nodes
            .iter()
            .filter_map(|&n| {
                ends.iter()
                    .map(|&(out, peer)| match (n == peer, out) {
                        (true, _) => Some(0.0),
                        (false, true) => model.link(n, peer).map(|q| q.latency_ms),
                        (false, false) => model.link(peer, n).map(|q| q.latency_ms),
                    })
                    .sum::<Option<f64>>()
                    .map(|d| (d, n))
            })
            .collect();
        ranked.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        nodes = ranked.into_iter().take(limit).map(|x| x.1).collect();
        nodes.sort_unstable();
    }
    nodes
}

/// The single moves' scores with their own estimated pairs at the optimistic bound
/// ([`crate::Estimator::optimistic`]): what each move could score if its estimates are as
/// wrong as its nodes' coordinates say they may be. A pair the coordinates over-estimate is
/// never chosen by a search on the estimates, so it is probed only if some ranking hopes for
/// it (optimism in the face of uncertainty); the nodes whose coordinates are the least sure
/// rank higher here. All scored together, on one view, in the moves' order.
fn optimistic_scores(
    model: &Infra,
    app: &Application,
    around: &Assignment,
    moves: &[(usize, u32)],
    opts: &Options,
) -> Vec<Option<f64>> {
    let Some(est) = model.estimator() else {
        return vec![None; moves.len()];
    };
    let mut extra = BTreeMap::new();
    for &m in moves {
        for (x, y) in moved_pairs(model, app, around, m) {
            if let Some(q) = est.optimistic(x, y) {
                extra.insert((x, y), q);
            }
        }
    }
    let extra: Vec<(u32, u32, crate::LinkQ)> =
        extra.into_iter().map(|((x, y), q)| (x, y, q)).collect();
    let view = model.requalified(|_, _, _, q| q, &extra);
    score_with_moves_on(&view, app, &[], around, moves, opts.time_budget)
        .into_iter()
        .map(|s| s.ok().map(|x| x.0))
        .collect()
}

/// Each end of each channel of `placement`: (the end's component, its node, the other end's
/// node, whether it is the channel's `from`); a component or node the model does not know is
/// left out.
fn channel_ends<'a>(
    model: &Infra,
    app: &'a Application,
    placement: &Assignment,
) -> Vec<(&'a acoa_shared::model::Component, u32, u32, bool)> {
    let at = |c: &str| model.index_of(placement.get(c)?);
    let comp = |c: &str| app.components.iter().find(|x| x.name == c);
    let mut out = Vec::new();
    for ch in &app.channels {
        let (Some(x), Some(y), Some(cf), Some(ct)) =
            (at(&ch.from), at(&ch.to), comp(&ch.from), comp(&ch.to))
        else {
            continue;
        };
        out.extend([(cf, x, y, true), (ct, y, x, false)]);
    }
    out
}

/// The pair (from, to) of a channel whose end (`from`, else `to`) moved to `m`, its other end
/// on `other`.
fn moved_pair(from: bool, other: u32, m: u32) -> (u32, u32) {
    if from {
        (m, other)
    } else {
        (other, m)
    }
}

/// The unmeasured pairs that move one end of a channel of `placement` to a node of the same
/// datacenter (train, station) that may run the component: at most `width - 1` such nodes
/// per end, those whose link to the other end is the shortest on the model. Nodes of one
/// train or station reach the rest of the network through the same access link, so a group
/// mate's link is about the measured one; the coordinates of two mates can still differ by
/// milliseconds (each fits its own peers), and an over-estimate that sure is never hoped for.
fn mates(
    model: &Infra,
    app: &Application,
    placement: &Assignment,
    width: usize,
) -> BTreeSet<(u32, u32)> {
    let at = |c: &str| model.index_of(placement.get(c)?);
    let mut groups: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for c in &app.components {
        if let Some(i) = at(&c.name) {
            groups.entry(model.node(i).datacenter.as_str()).or_default();
        }
    }
    for i in 0..model.len() as u32 {
        if let Some(g) = groups.get_mut(model.node(i).datacenter.as_str()) {
            g.push(i);
        }
    }
    let mut out = BTreeSet::new();
    for (c, own, other, from) in channel_ends(model, app, placement) {
        let pair = |m: u32| moved_pair(from, other, m);
        let mut near: Vec<(f64, u32)> = groups[model.node(own).datacenter.as_str()]
            .iter()
            .filter(|&&m| m != own && m != other && model.node(m).satisfies(&c.requires))
            .filter_map(|&m| {
                let (a, b) = pair(m);
                Some((model.link(a, b)?.latency_ms, m))
            })
            .collect();
        near.sort_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
        out.extend(
            near.into_iter()
                .take(width.saturating_sub(1))
                .map(|(_, m)| pair(m))
                .filter(|&(a, b)| !model.is_measured(a, b)),
        );
    }
    out
}

/// The unmeasured pairs that move one end of a channel of `placement` to a node near its own
/// on measured links: at most `width - 1` such pairs per end, to the nodes one or two measured
/// links (either direction) from its node, the shortest path first (a pair measured in an
/// earlier round makes room for the next node). By the triangle inequality such
/// a node's link to the other end differs from the channel's by at most that path; nearby
/// stations along a line are pairs the coordinates over-estimate several times (their error is
/// a few ms at thousands of nodes), nobody measures (the nearest slots are chosen by the same
/// coordinates) and no ranking on the estimates hopes for, but the station next door is often
/// two measured links away, through a node both measure.
fn measured_near(
    model: &Infra,
    app: &Application,
    placement: &Assignment,
    width: usize,
) -> BTreeSet<(u32, u32)> {
    // a node's measured links, either direction: (latency, the other node)
    let adjacent = |n: u32| {
        let (o, oq) = model.out_links(n);
        let (i, iq) = model.inn_links(n);
        let out = o.iter().zip(oq.iter().map(|q| q.latency_ms));
        let inn = i.iter().zip(iq.iter().map(|q| q.latency_ms));
        out.chain(inn).map(|(&m, d)| (d, m))
    };
    let mut out = BTreeSet::new();
    for (c, own, other, from) in channel_ends(model, app, placement) {
        let pair = |m: u32| moved_pair(from, other, m);
        let mut near: Vec<(f64, u32)> = adjacent(own)
            .filter(|&(_, m1)| m1 != own)
            .flat_map(|(d1, m1)| {
                std::iter::once((d1, m1)).chain(adjacent(m1).map(move |(d2, m2)| (d1 + d2, m2)))
            })
            .filter(|&(_, m)| m != own && m != other)
            .collect();
        near.sort_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
        let mut seen = BTreeSet::new();
        out.extend(
            near.into_iter()
                .filter(|&(_, m)| seen.insert(m) && model.node(m).satisfies(&c.requires))
                .map(|(_, m)| pair(m))
                .filter(|&(a, b)| !model.is_measured(a, b))
                .take(width.saturating_sub(1)),
        );
    }
    out
}

/// The pairs to probe around `around`: per component its node and the `width - 1` nodes whose
/// single move scores best on the model (`scores[0]`, one per move), and every unmeasured
/// pair between the candidate nodes of a channel's ends (from -> to); then per component the
/// `width` single moves hoped best (`scores[1]`, optimistic) and their own unmeasured pairs,
/// so that each of those moves is scored on measurements in the next round.
fn neighbourhood(
    model: &Infra,
    app: &Application,
    around: &Assignment,
    moves: &[(usize, u32)],
    scores: [&[Option<f64>]; 2],
    width: usize,
) -> BTreeSet<(u32, u32)> {
    let rank = |scores: &[Option<f64>]| {
        let mut ranked: Vec<Vec<(f64, usize)>> = vec![Vec::new(); app.components.len()];
        for (m, ((c, _), s)) in moves.iter().zip(scores).enumerate() {
            if let Some(s) = s {
                ranked[*c].push((*s, m));
            }
        }
        for r in &mut ranked {
            r.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        }
        ranked
    };
    let (on_model, hoped) = (rank(scores[0]), rank(scores[1]));
    let cands: BTreeMap<&str, Vec<u32>> = app
        .components
        .iter()
        .zip(on_model)
        .map(|(comp, r)| {
            let own = around.get(&comp.name).and_then(|n| model.index_of(n));
            let c: Vec<u32> = own
                .into_iter()
                .chain(r.into_iter().map(|x| moves[x.1].1))
                .take(width)
                .collect();
            (comp.name.as_str(), c)
        })
        .collect();
    let mut out = BTreeSet::new();
    for ch in &app.channels {
        let (Some(from), Some(to)) = (cands.get(ch.from.as_str()), cands.get(ch.to.as_str()))
        else {
            continue;
        };
        for &a in from {
            for &b in to {
                if a != b && !model.is_measured(a, b) {
                    out.insert((a, b));
                }
            }
        }
    }
    for r in hoped {
        for (_, m) in r.into_iter().take(width) {
            out.extend(moved_pairs(model, app, around, moves[m]));
        }
    }
    out
}

/// The unmeasured pairs (between two nodes) of the channels a single move changes: those of
/// the moved component (`c` onto node `n`), under the moved placement (`around` with it).
fn moved_pairs<'a>(
    model: &'a Infra,
    app: &'a Application,
    around: &'a Assignment,
    (c, n): (usize, u32),
) -> impl Iterator<Item = (u32, u32)> + 'a {
    let comp = &app.components[c].name;
    let at = move |x: &str| {
        if x == comp {
            Some(n)
        } else {
            model.index_of(around.get(x)?)
        }
    };
    app.channels
        .iter()
        .filter(move |ch| ch.from == *comp || ch.to == *comp)
        .filter_map(move |ch| Some((at(&ch.from)?, at(&ch.to)?)))
        .filter(|&(x, y)| x != y && !model.is_measured(x, y))
}

#[cfg(test)]
mod tests;
