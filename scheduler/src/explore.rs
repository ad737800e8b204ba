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
//!    placements of (1) and (2), of those that use measured links only, scored together on
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
//!
//! Scores compared with one another are computed together ([`score_all_on`]: one l_min search
//! under the search's time budget). In a large fleet a component's single moves are limited
//! to the [`MOVES_PER_COMPONENT`] nodes whose links to the other ends of its channels are the
//! shortest (measured or estimated): the moves worth scoring, at a bounded cost.
//!
//! `coords-sim --place-rules multi` measures the rule (BENCHMARKS.md, "Placements on k
//! measured pairs plus estimates"); the control plane runs it when an application's targeted
//! probes are measured (cloud-broker `engine/explore.rs`).
//!
//! Invariant: pure and deterministic (the same model, application and inputs give the same
//! round); every pair to probe is unmeasured, between two different nodes.

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::model::Application;

use crate::{place_on, score_all_on, CriterionGrade, Infra, Ledger, Options, Outcome};

mod scenario;
pub use scenario::{Scenario, ScenarioApp};

/// Candidate nodes per component (its own and the best single moves): at most this squared
/// pairs per channel and round.
pub const DEFAULT_WIDTH: usize = 8;

/// Single moves scored per component and round, at most (every node of a smaller fleet).
pub const MOVES_PER_COMPONENT: usize = 2048;

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
    /// round.
    pub probe: BTreeSet<(u32, u32)>,
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
    // the placements that rest on measured links, then the single moves around the search's
    let options: Vec<Assignment> = std::iter::once(current.clone())
        .chain(
            candidate
                .cloned()
                .into_iter()
                .chain(on_measured)
                .chain(searched.clone())
                .filter(|a| model.estimated_channels(app, a) == 0),
        )
        .collect();
    let around = searched.clone().unwrap_or_else(|| current.clone());
    let moves = single_moves(model, app, &around);
    let all: Vec<Assignment> = options
        .iter()
        .cloned()
        .chain(moves.iter().map(|m| m.2.clone()))
        .collect();
    let mut graded: Vec<Option<(f64, Vec<CriterionGrade>)>> =
        score_all_on(model, app, &all, opts.time_budget)
            .into_iter()
            .map(|s| s.ok())
            .collect();
    let scores: Vec<Option<f64>> = graded.iter().map(|s| s.as_ref().map(|x| x.0)).collect();
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
    let hopeful = optimistic_scores(model, app, &moves, &all[options.len()..], opts);
    let mut probe = neighbourhood(
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
        .or_else(|| hoped.clone().filter(unsure));
    for a in std::iter::once(&next).chain(&candidate).chain(&hoped) {
        probe.extend(
            channel_pairs(model, app, a)
                .into_iter()
                .filter(|&(x, y)| x != y && !model.is_measured(x, y)),
        );
    }
    probe.extend(mates(model, app, &next, width));
    probe.extend(measured_near(model, app, &next, width));
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

/// The single moves from `around` as (component, node, placement): per component the nodes
/// other than its own that satisfy its requirements (its pin among them), at most
/// [`MOVES_PER_COMPONENT`] of them, those nearest the other ends of its channels.
fn single_moves(
    model: &Infra,
    app: &Application,
    around: &Assignment,
) -> Vec<(usize, u32, Assignment)> {
    let at = |c: &str| model.index_of(around.get(c)?);
    let mut out = Vec::new();
    for (c, comp) in app.components.iter().enumerate() {
        let own = at(&comp.name);
        let mut nodes: Vec<u32> = (0..model.len() as u32)
            .filter(|&i| Some(i) != own && model.node(i).satisfies(&comp.requires))
            .collect();
        if nodes.len() > MOVES_PER_COMPONENT {
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
            nodes = ranked
                .into_iter()
                .take(MOVES_PER_COMPONENT)
                .map(|x| x.1)
                .collect();
            nodes.sort_unstable();
        }
        for n in nodes {
            let mut a = around.clone();
            a.insert(comp.name.clone(), model.node(n).name.clone());
            out.push((c, n, a));
        }
    }
    out
}

/// The single moves' scores with their own estimated pairs at the optimistic bound
/// ([`crate::Estimator::optimistic`]): what each move could score if its estimates are as
/// wrong as its nodes' coordinates say they may be. A pair the coordinates over-estimate is
/// never chosen by a search on the estimates, so it is probed only if some ranking hopes for
/// it (optimism in the face of uncertainty); the nodes whose coordinates are the least sure
/// rank higher here. All scored together, on one view; `placements`: the moves' own, in
/// their order.
fn optimistic_scores(
    model: &Infra,
    app: &Application,
    moves: &[(usize, u32, Assignment)],
    placements: &[Assignment],
    opts: &Options,
) -> Vec<Option<f64>> {
    let Some(est) = model.estimator() else {
        return vec![None; moves.len()];
    };
    let mut extra = BTreeMap::new();
    for m in moves {
        for (x, y) in moved_pairs(model, app, m) {
            if let Some(q) = est.optimistic(x, y) {
                extra.insert((x, y), q);
            }
        }
    }
    let extra: Vec<(u32, u32, crate::LinkQ)> =
        extra.into_iter().map(|((x, y), q)| (x, y, q)).collect();
    let view = model.requalified(|_, _, _, q| q, &extra);
    score_all_on(&view, app, placements, opts.time_budget)
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
    moves: &[(usize, u32, Assignment)],
    scores: [&[Option<f64>]; 2],
    width: usize,
) -> BTreeSet<(u32, u32)> {
    let rank = |scores: &[Option<f64>]| {
        let mut ranked: Vec<Vec<(f64, usize)>> = vec![Vec::new(); app.components.len()];
        for (m, ((c, _, _), s)) in moves.iter().zip(scores).enumerate() {
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
            out.extend(moved_pairs(model, app, &moves[m]));
        }
    }
    out
}

/// The unmeasured pairs (between two nodes) of the channels a single move changes: those of
/// the moved component, under the moved placement.
fn moved_pairs<'a>(
    model: &'a Infra,
    app: &'a Application,
    (c, _, a): &'a (usize, u32, Assignment),
) -> impl Iterator<Item = (u32, u32)> + 'a {
    let comp = &app.components[*c].name;
    let at = move |x: &str| model.index_of(a.get(x)?);
    app.channels
        .iter()
        .filter(move |ch| ch.from == *comp || ch.to == *comp)
        .filter_map(move |ch| Some((at(&ch.from)?, at(&ch.to)?)))
        .filter(|&(x, y)| x != y && !model.is_measured(x, y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkQ;
    use acoa_shared::model::{
        parse_application, Capacity, CoordDoc, EstimatedNode, Layer, LinkEstimates, Node, Usage,
    };

    fn node(i: usize, dc: &str) -> Node {
        Node {
            name: format!("n{i:05}"),
            datacenter: dc.into(),
            layer: Layer::Edge,
            arch: "aarch64".into(),
            hardware: vec![],
            software: vec![],
            capacity: Capacity::default(),
            usage: Usage::default(),
            position: None,
        }
    }

    fn q(latency_ms: f64) -> LinkQ {
        LinkQ {
            latency_ms,
            success: 1.0,
        }
    }

    /// src pinned to n00000, sink in datacenter b; one channel, a response-time path.
    fn app() -> Application {
        parse_application(
            "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: sink, image: i, requires: {datacenter: b}}\nchannels:\n- {name: c, from: src, to: sink}\npaths:\n- {name: p, channels: [c]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
        )
        .unwrap()
    }

    fn at(sink: &str) -> Assignment {
        [("src", "n00000"), ("sink", sink)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// The round after `last` on `m` (what it decided, its candidate now to compare).
    fn next_round(
        m: &Infra,
        app: &Application,
        last: &Explored,
        width: usize,
        opts: &Options,
    ) -> Explored {
        round(
            m,
            app,
            &Ledger::new(),
            &last.next,
            last.candidate.as_ref(),
            width,
            opts,
        )
    }

    /// n00000 in datacenter a, n00001-n00004 in b; `measured` links, every node's coordinate
    /// on a line at `x` (height 1 ms: an estimate is the distance plus 2 ms), its error 0.2.
    fn model(measured: &[(u32, u32, f64)]) -> Infra {
        model_unsure(measured, [0.2; 5])
    }

    /// [`model`] with each node's coordinate error.
    fn model_unsure(measured: &[(u32, u32, f64)], errors: [f64; 5]) -> Infra {
        let nodes: Vec<Node> = (0..5)
            .map(|i| node(i, if i == 0 { "a" } else { "b" }))
            .collect();
        on_a_line(nodes, [0.0, -20.0, 5.0, 6.0, 9.0], errors, measured)
    }

    /// Five nodes, each with its coordinate on a line at `x` (height 1 ms: an estimate is the
    /// distance plus 2 ms) and its error, a loopback of 0.05 ms and the `measured` links.
    fn on_a_line(
        nodes: Vec<Node>,
        x: [f64; 5],
        errors: [f64; 5],
        measured: &[(u32, u32, f64)],
    ) -> Infra {
        let mut est = LinkEstimates::default();
        for ((n, x), error) in nodes.iter().zip(x).zip(errors) {
            let coord = CoordDoc {
                position: [x, 0.0, 0.0],
                height_ms: 1.0,
                error,
            };
            let e = EstimatedNode {
                coord: Some(coord),
                median_jitter_ms: 0.1,
                median_success: 1.0,
            };
            est.nodes.insert(n.name.clone(), e);
        }
        let links = (0..5)
            .map(|i| (i, i, q(0.05)))
            .chain(measured.iter().map(|&(a, b, l)| (a, b, q(l))));
        Infra::new(nodes, links).with_estimates(&est)
    }

    /// The estimates say n00002 (7 ms) is better than the measured n00001 (10 ms); the truth:
    /// n00002 12 ms, n00003 15 ms, n00004 5 ms (estimated 11 ms: no search on estimates
    /// would try it).
    #[test]
    fn a_round_moves_only_onto_measured_links_and_probes_the_candidates_neighbourhood() {
        let (app, opts) = (app(), Options::default());
        let m = model(&[(0, 1, 10.0)]);
        assert_eq!(m.link(0, 2).unwrap().latency_ms, 7.0);
        assert_eq!(m.link(0, 4).unwrap().latency_ms, 11.0);
        let r1 = round(&m, &app, &Ledger::new(), &at("n00001"), None, 8, &opts);
        assert_eq!(r1.next, at("n00001"), "no move onto an estimate");
        assert_eq!(r1.candidate, Some(at("n00002")), "the search's placement");
        // the candidate's pair and, around it, the sink's other nodes (n00001 is measured)
        assert_eq!(r1.probe, BTreeSet::from([(0, 2), (0, 3), (0, 4)]));
        assert!(r1.goes_on());
        // width 1: the candidate's node and the single move hoped best (n00003, 8 x 0.8 ms)
        let narrow = round(&m, &app, &Ledger::new(), &at("n00001"), None, 1, &opts);
        assert_eq!(narrow.probe, BTreeSet::from([(0, 2), (0, 3)]));
        // measured: the best of the candidate (12 ms) and the measured search's (n00004)
        let m = model(&[(0, 1, 10.0), (0, 2, 12.0), (0, 3, 15.0), (0, 4, 5.0)]);
        let second = || next_round(&m, &app, &r1, 8, &opts);
        let r2 = second();
        assert_eq!(r2.next, at("n00004"));
        assert_eq!(r2.candidate, None);
        assert!(r2.probe.is_empty() && !r2.goes_on(), "{r2:?}");
        assert_eq!(second(), r2, "the same round again gives the same result");
    }

    /// A node whose coordinate is unsure (error 0.9) is probed though its estimate (11 ms) is
    /// the worst: at its optimistic bound (1.1 ms) it could be the best. Width 1: the
    /// candidate's node (n00002, 7 ms) and the single move hoped best.
    #[test]
    fn a_round_probes_the_node_whose_coordinate_is_least_sure() {
        let (app, opts) = (app(), Options::default());
        let sure = round(
            &model(&[(0, 1, 10.0)]),
            &app,
            &Ledger::new(),
            &at("n00001"),
            None,
            1,
            &opts,
        );
        // hoped best: n00003 (8 x 0.8 ms), before n00004 (11 x 0.8 ms)
        assert_eq!(sure.probe, BTreeSet::from([(0, 2), (0, 3)]));
        let m = model_unsure(&[(0, 1, 10.0)], [0.2, 0.2, 0.2, 0.2, 0.9]);
        assert_eq!(
            m.link(0, 4).unwrap().latency_ms,
            11.0,
            "the estimate is the same"
        );
        let r = round(&m, &app, &Ledger::new(), &at("n00001"), None, 1, &opts);
        assert_eq!(r.next, at("n00001"));
        assert_eq!(r.candidate, Some(at("n00002")));
        assert_eq!(r.probe, BTreeSet::from([(0, 2), (0, 4)]));
    }

    /// A channel's end moved to a group mate: the sink's node n00001 has three mates in
    /// datacenter b, width 3 keeps the two nearest the source on the model (n00002 7 ms,
    /// n00003 8 ms; not n00004, 11 ms), a measured pair is not asked for again, and the
    /// source (alone in datacenter a, and pinned) has none.
    #[test]
    fn the_group_mates_of_a_placements_nodes_are_probed() {
        let m = model(&[(0, 1, 10.0)]);
        assert_eq!(
            mates(&m, &app(), &at("n00001"), 3),
            BTreeSet::from([(0, 2), (0, 3)])
        );
        let m = model(&[(0, 1, 10.0), (0, 2, 7.5)]);
        assert_eq!(
            mates(&m, &app(), &at("n00001"), 3),
            BTreeSet::from([(0, 3)])
        );
        assert!(
            mates(&m, &app(), &at("n00001"), 1).is_empty(),
            "width 1: none"
        );
    }

    /// A channel's end moved to a node near its own on measured links: the sink's node n00001
    /// measures n00002 (0.7 ms), which measures n00003 (0.6 ms), a station the coordinates put
    /// 42 ms from the source (33.6 ms at their optimistic bound, against the 10 ms measured:
    /// no ranking on them hopes for it); n00004 measures n00001 (3 ms). n00002's pair with the
    /// source is measured (12 ms). Each node a datacenter of its own; the source is pinned, so
    /// it has none, and the sink runs anywhere else.
    #[test]
    fn the_nodes_near_a_placements_nodes_on_measured_links_are_probed() {
        let app = parse_application(
            "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: sink, image: i, requires: {hardware: [s]}}\nchannels:\n- {name: c, from: src, to: sink}\npaths:\n- {name: p, channels: [c]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
        )
        .unwrap();
        let m = |extra: &[(u32, u32, f64)]| {
            let nodes = ["a", "b", "c", "d", "e"]
                .iter()
                .enumerate()
                .map(|(i, dc)| Node {
                    hardware: if i > 0 { vec!["s".into()] } else { vec![] },
                    ..node(i, dc)
                })
                .collect();
            let measured = [
                (0, 1, 10.0),
                (0, 2, 12.0),
                (1, 2, 0.7),
                (2, 3, 0.6),
                (4, 1, 3.0),
            ];
            let all: Vec<_> = measured.iter().chain(extra).copied().collect();
            on_a_line(nodes, [0.0, 8.0, 8.5, 40.0, 11.0], [0.2; 5], &all)
        };
        let model = m(&[]);
        assert_eq!(model.link(0, 3).unwrap().latency_ms, 42.0);
        let near = |model: &Infra, width| measured_near(model, &app, &at("n00001"), width);
        assert_eq!(near(&model, 2), BTreeSet::from([(0, 3)]));
        assert_eq!(near(&model, 3), BTreeSet::from([(0, 3), (0, 4)]));
        assert!(near(&model, 1).is_empty(), "width 1: none");
        assert_eq!(near(&m(&[(0, 3, 7.0)]), 2), BTreeSet::from([(0, 4)]));
        // the round probes it (nothing else does), and moves there once it is measured
        let opts = Options::default();
        let r = round(&model, &app, &Ledger::new(), &at("n00001"), None, 2, &opts);
        assert_eq!(r.probe, BTreeSet::from([(0, 3), (0, 4)]));
        let r = round(
            &m(&[(0, 3, 7.0)]),
            &app,
            &Ledger::new(),
            &r.next,
            None,
            2,
            &opts,
        );
        assert_eq!(r.next, at("n00003"));
    }

    /// Two components that move together: the source (pinned to n00000) feeds `mid` (n00001
    /// or n00002), which feeds the sink (n00003 or n00004), each node a datacenter of its own.
    /// The placement in force, n00001 and n00003, is measured at 10 + 10 ms; the estimates
    /// put n00002 and n00004 at 12 + 12 ms, and either alone far from the other's first node
    /// (112 and 72 ms). Their coordinates are unsure (error 0.9): hoped for together, they
    /// could be 1.2 + 1.2 ms. Width 1, so that steps 4-6 probe only single moves: the pair
    /// between n00002 and n00004 is probed by the hopeful search alone, and once it is
    /// measured the next round moves there.
    #[test]
    fn a_round_probes_the_placement_that_moves_several_components_at_once_hopefully() {
        let app = parse_application(
            "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: mid, image: i, requires: {hardware: [m]}}\n- {name: sink, image: i, requires: {hardware: [s]}}\nchannels:\n- {name: a, from: src, to: mid}\n- {name: b, from: mid, to: sink}\npaths:\n- {name: p, channels: [a, b]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
        )
        .unwrap();
        let model = |measured: &[(u32, u32, f64)]| {
            let nodes: Vec<Node> = (0..5)
                .map(|i| Node {
                    hardware: match i {
                        1 | 2 => vec!["m".into()],
                        3 | 4 => vec!["s".into()],
                        _ => vec![],
                    },
                    ..node(i, &format!("d{i}"))
                })
                .collect();
            let x = [0.0, -50.0, 10.0, -100.0, 20.0];
            on_a_line(nodes, x, [0.2, 0.2, 0.9, 0.2, 0.9], measured)
        };
        let placed = |mid: &str, sink: &str| -> Assignment {
            [("src", "n00000"), ("mid", mid), ("sink", sink)]
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let opts = Options::default();
        let m = model(&[(0, 1, 10.0), (1, 3, 10.0)]);
        assert_eq!(m.link(2, 4).unwrap().latency_ms, 12.0);
        assert!((m.hopeful().link(2, 4).unwrap().latency_ms - 1.2).abs() < 1e-9);
        assert_eq!(
            m.hopeful().link(1, 3).unwrap().latency_ms,
            10.0,
            "measured: as is"
        );
        let current = placed("n00001", "n00003");
        let r1 = round(&m, &app, &Ledger::new(), &current, None, 1, &opts);
        assert_eq!(r1.next, current, "no move onto an estimate");
        // the search on estimates keeps the measured placement: the hopeful one is compared
        assert_eq!(r1.candidate, Some(placed("n00002", "n00004")));
        // the single moves hoped best (mid to n00002, sink to n00004) and the hopeful search's
        assert_eq!(r1.probe, BTreeSet::from([(0, 2), (1, 4), (2, 3), (2, 4)]));
        let m = model(&[
            (0, 1, 10.0),
            (1, 3, 10.0),
            (0, 2, 3.0),
            (1, 4, 60.0),
            (2, 3, 90.0),
            (2, 4, 3.0),
        ]);
        let r2 = next_round(&m, &app, &r1, 1, &opts);
        assert_eq!(r2.next, placed("n00002", "n00004"));
        assert_eq!(r2.candidate, None);
    }

    /// In a fleet larger than [`MOVES_PER_COMPONENT`], a component's single moves are the
    /// nodes nearest the other end of its channel, not the first by name.
    #[test]
    fn a_large_fleets_single_moves_are_bounded_and_the_nearest() {
        let n = MOVES_PER_COMPONENT + 1000;
        let nodes: Vec<Node> = (0..=n)
            .map(|i| node(i, if i == 0 { "a" } else { "b" }))
            .collect();
        // n00000 -> node i: (n + 1 - i) ms, the last nodes the nearest
        let links = (1..=n as u32).map(|i| (0, i, q((n as u32 + 1 - i) as f64)));
        let m = Infra::new(nodes, links);
        let moves = single_moves(&m, &app(), &at("n00001"));
        assert_eq!(moves.len(), MOVES_PER_COMPONENT, "src is pinned: no move");
        let sinks: Vec<u32> = moves.iter().map(|(_, i, _)| *i).collect();
        let want: Vec<u32> = (n as u32 + 1 - MOVES_PER_COMPONENT as u32..=n as u32).collect();
        assert_eq!(sinks, want);
        assert!(moves
            .iter()
            .all(|(c, i, a)| *c == 1 && a["sink"] == m.node(*i).name));
    }
}
