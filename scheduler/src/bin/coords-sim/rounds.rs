//! What the control plane does after a placement that rests on estimates (issue 16), in
//! simulation: the pairs its channels use that are only estimated are probed (targeted probes,
//! `Engine::target_placement` in cloud-broker/src/engine/probes.rs); when they are measured
//! the application is evaluated again (`Purpose::Reevaluate`), and the placement in force
//! changes by a rule ([`Rule`]):
//!
//! - [`Rule::System`], the descheduler's rule as the engine has it (cloud-broker/src/engine:
//!   `jobs::finish_job`, `commit::reevaluated`, `links::favour_current`,
//!   `links::relative_gain`, `EngineConfig::default()`): a search from scratch on the updated
//!   model gives the best placement; the current and the best are scored on the network seen in
//!   the current placement's favour (every link the current placement uses, either direction,
//!   at its optimistic confidence bound, every other measured link at its pessimistic one; a
//!   used estimated pair at latency x (1 - r), r the larger coordinate error of its ends,
//!   clamped to 10-100 %; every other estimate x (1 + the largest r of any node)); if the best
//!   beats the current by more than the hysteresis (5 %) for `sustain` (3) evaluations in a
//!   row, one component moves (the single move that scores best on that network and beats the
//!   current, else the best placement's first difference), and the next evaluation may move
//!   another. The simulation's network does not change between evaluations, so a gain that
//!   holds once holds `sustain` times: the moves of one round are made back to back on the
//!   round's network (the new pairs they use are probed in the next round). Not modelled: the
//!   check that a moved component still fits the node's free resources (`Engine::fits`; the
//!   simulation places every application alone, on an empty ledger), the quantization of
//!   measured latencies to 0.1 ms.
//! - [`Rule::Adopt`], what the control plane could do instead (not implemented there): the
//!   fresh search's placement replaces the one in force whenever it scores higher on the
//!   updated model, with no hysteresis. That is probing a placement's estimated pairs before
//!   committing to it, round after round, until the placement rests on measured links.
//! - [`Rule::Pessimistic`]: [`Rule::Adopt`] with the search (the first placement too) on
//!   pessimistic estimates, every estimated latency x (1 + the largest coordinate error of
//!   any node, `LinkEstimates::max_uncertainty`), against the winner's curse: an estimated
//!   pair is chosen only when it looks better than a measured one by more than the
//!   coordinates' error.
//! - [`Rule::Probe`]: probing candidates before adopting them. Each round the estimated pairs
//!   of the placement in force and of the last search's placement (the candidate) are
//!   measured; the candidate replaces the placement in force if it then scores higher (both
//!   on measured links only, so no estimate decides), and a new search on the updated model
//!   gives the next candidate. The placement in force never moves onto an estimate.
//! - [`Rule::Multi`]: [`Rule::Probe`] with several candidates per round, so that the measured
//!   neighbourhood of the optimum grows fast. Each round two searches run on the updated
//!   model: one on measured links plus estimates (its placement is the candidate), one on the
//!   measured links alone. The placement in force becomes the best of itself, the candidate
//!   probed in this round and the measured-links search's placement, all scored together on
//!   measured links (no estimate decides). Around the candidate, per component its node and
//!   the [`MULTI_WIDTH`] - 1 nodes whose single move scores best on the model; the pairs
//!   between the candidate nodes of the two ends of each channel (at most [`MULTI_WIDTH`]^2
//!   per channel) are probed in the next round with the candidate's, and so are the own
//!   pairs of the [`MULTI_WIDTH`] single moves per component that score best with their
//!   estimated pairs at the optimistic bound (latency x (1 - r), r the larger coordinate
//!   error of the ends: optimism where the coordinates are unsure), and the pairs that move
//!   an end of a channel of the placement in force to a mate in its datacenter. This is the control
//!   plane's rule (`acoa_scheduler::explore::round`, run by cloud-broker `engine/explore.rs`
//!   when an application's targeted probes are measured): the simulation runs the very code.
//!
//! The scores a rule compares on one network are computed together (`score_all_on`: one
//! l_min search, stopped after the search's time budget: on estimated links an unbounded one
//! ran for minutes), so they compare with one another.
//!
//! A measured link's confidence bounds (cloud-broker `links::LinkBounds::measured`): latency
//! ± max(z · jitter / √samples, half the probers' 0.1 ms step), never below the 0.5 ms floor;
//! success the Wilson interval over `samples` probes; z = 1, samples = the 20 probes a
//! simulated link is measured over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use acoa_scheduler::explore;
use acoa_scheduler::{place_on, score_all_on, Infra, Ledger, LinkQ, Options, Outcome as Placed};
use acoa_shared::coords::{estimate_in_group_ms, medians_between, EndpointSummary, MeasuredLink};
use acoa_shared::model::{Application, Between, CoordDoc, EstimatedNode, LinkEstimates, Node};

/// `EngineConfig::default().hysteresis`.
pub const HYSTERESIS: f64 = 0.05;
/// cloud-broker `links::SCORE_RESOLUTION`: score differences below it are rounding.
const SCORE_RESOLUTION: f64 = 1e-6;
/// cloud-broker `links::CONFIDENCE_Z`, `LATENCY_STEP_MS`, `LATENCY_FLOOR_MS`.
const CONFIDENCE_Z: f64 = 1.0;
const LATENCY_STEP_MS: f64 = 0.1;
const LATENCY_FLOOR_MS: f64 = 0.5;
/// Probes a simulated link is measured over.
const SAMPLES: u32 = 20;

/// How the placement in force changes when its targeted links are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rule {
    /// The control plane's descheduler rule (hysteresis, favour of the current placement,
    /// one component at a time).
    System,
    /// The fresh search's placement whenever it scores higher on the updated model.
    Adopt,
    /// [`Rule::Adopt`] on a model whose estimates are pessimistic: every estimated latency
    /// x (1 + the largest coordinate error of any node), the factor `favour_current` applies
    /// to the estimates a placement does not use (from the first placement on).
    Pessimistic,
    /// Probe before adopting: each round's search result is a candidate whose estimated
    /// pairs are probed in the next round; it replaces the placement in force only then, if
    /// it scores higher with both on measured links.
    Probe,
    /// Probe several candidates per round: [`Rule::Probe`], plus per component the
    /// [`MULTI_WIDTH`] nodes whose single move from the search's placement scores best on the
    /// live model, the pairs between the candidates of components a channel joins probed in
    /// the next round; the placement in force changes only to a placement on measured links
    /// (a candidate once probed, or the search's best on the measured links alone).
    Multi,
}

/// [`Rule::Multi`]: candidate nodes per component (the search's own node included), so at
/// most `MULTI_WIDTH`^2 pairs per channel and round (the default of `--place-multi-width`).
pub const MULTI_WIDTH: usize = explore::DEFAULT_WIDTH;

/// One directed link as measured: its quality and jitter (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meas {
    pub q: LinkQ,
    pub jitter_ms: f64,
}

/// Directed measured links by (from, to) node index (loopbacks included).
pub type Links = BTreeMap<(u32, u32), Meas>;

/// The simulated fleet as the control plane knows it: nodes (indexed as in an [`Infra`]
/// built from them: names sort as indices), each node's site and reported coordinate.
pub struct Fleet<'a> {
    pub nodes: &'a [Node],
    pub site: Vec<usize>,
    /// Position, height, error.
    pub coords: &'a [(Vec<f64>, f64, f64)],
}

impl Fleet<'_> {
    /// What the estimates are made from, out of `links` as the control plane builds it
    /// (`Engine::link_estimates`): per node its coordinate and the medians of the measured
    /// links it is an end of, per site the median of its measured internal links, per pair of
    /// sites the median of the measured links between them.
    pub fn estimates(&self, links: &Links) -> LinkEstimates {
        let n = self.nodes.len();
        let mut ends: Vec<Vec<MeasuredLink>> = vec![Vec::new(); n];
        let mut internal: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut cross: Vec<(usize, usize, f64)> = Vec::new();
        for (&(a, b), m) in links {
            let (a, b) = (a as usize, b as usize);
            if a == b {
                continue;
            }
            let l = MeasuredLink {
                latency_ms: m.q.latency_ms,
                jitter_ms: m.jitter_ms,
                success: m.q.success,
            };
            ends[a].push(l);
            ends[b].push(l);
            let (sa, sb) = (self.site[a], self.site[b]);
            if sa == sb {
                internal.entry(sa).or_default().push(m.q.latency_ms);
            } else {
                cross.push((sa, sb, m.q.latency_ms));
            }
        }
        let mut est = LinkEstimates::default();
        for (i, l) in ends.into_iter().enumerate() {
            let Some(s) = EndpointSummary::from_links(l) else {
                continue;
            };
            let (v, h, e) = &self.coords[i];
            est.nodes.insert(
                self.nodes[i].name.clone(),
                EstimatedNode {
                    coord: Some(CoordDoc {
                        position: [v[0], v[1], v[2]],
                        height_ms: *h,
                        error: *e,
                    }),
                    median_jitter_ms: s.median_jitter_ms,
                    median_success: s.median_success,
                },
            );
        }
        let mut dc: BTreeMap<usize, &str> = BTreeMap::new();
        for (i, s) in self.site.iter().enumerate() {
            dc.entry(*s).or_insert(&self.nodes[i].datacenter);
        }
        for (site, l) in internal {
            if let Some(m) = estimate_in_group_ms(l) {
                est.groups.insert(dc[&site].to_string(), m);
            }
        }
        est.between = Between::from_pairs(
            medians_between(cross)
                .into_iter()
                .map(|(x, y, m)| (dc[&x], dc[&y], m)),
        );
        est
    }

    /// The live model: `links` measured, every other pair estimated (and the estimates'
    /// inputs).
    pub fn view(&self, links: &Links) -> (Infra, LinkEstimates) {
        self.view_as(links, Rule::System)
    }

    /// [`Fleet::view`] as `rule` searches it: [`Rule::Pessimistic`] with every estimated
    /// latency x (1 + the largest coordinate error r of any node, 10-100 %).
    pub fn view_as(&self, links: &Links, rule: Rule) -> (Infra, LinkEstimates) {
        let est = self.estimates(links);
        let searched = match rule {
            Rule::Pessimistic => est.scaled(1.0 + est.max_uncertainty()),
            Rule::System | Rule::Adopt | Rule::Probe | Rule::Multi => est.clone(),
        };
        let infra = Infra::new(
            self.nodes.to_vec(),
            links.iter().map(|(&(a, b), m)| (a, b, m.q)),
        )
        .with_estimates(&searched);
        (infra, est)
    }

    /// The network seen in `current`'s favour (cloud-broker `links::favour_current`, on
    /// this simulation's values).
    pub fn favour(
        &self,
        links: &Links,
        est: &LinkEstimates,
        app: &Application,
        current: &BTreeMap<String, String>,
    ) -> Infra {
        let used: BTreeSet<(u32, u32)> = channel_pairs(self.nodes, app, current)
            .into_iter()
            .flat_map(|(a, b)| [(a, b), (b, a)])
            .collect();
        let mut out: Vec<(u32, u32, LinkQ)> = links
            .iter()
            .map(|(&(a, b), m)| {
                let q = if a == b {
                    m.q
                } else {
                    let (lat, succ) = bounds(m);
                    if used.contains(&(a, b)) {
                        LinkQ {
                            latency_ms: lat.0,
                            success: succ.1,
                        }
                    } else {
                        LinkQ {
                            latency_ms: lat.1,
                            success: succ.0,
                        }
                    }
                };
                (a, b, q)
            })
            .collect();
        for &(a, b) in &used {
            if a == b || links.contains_key(&(a, b)) {
                continue;
            }
            let (na, nb) = (&self.nodes[a as usize], &self.nodes[b as usize]);
            if let Some(v) = est.view(na, nb) {
                out.push((
                    a,
                    b,
                    LinkQ {
                        latency_ms: est.optimistic_ms(v.latency_ms.value(), &na.name, &nb.name),
                        success: v.success.value(),
                    },
                ));
            }
        }
        Infra::new(self.nodes.to_vec(), out)
            .with_estimates(&est.scaled(1.0 + est.max_uncertainty()))
    }
}

/// The node-index pairs of `app`'s channels under `assignment` (names as in `nodes`, whose
/// index is the name's order).
fn channel_pairs(
    nodes: &[Node],
    app: &Application,
    assignment: &BTreeMap<String, String>,
) -> Vec<(u32, u32)> {
    let at = |c: &str| {
        let name = assignment.get(c)?;
        nodes
            .binary_search_by(|n| n.name.as_str().cmp(name))
            .ok()
            .map(|i| i as u32)
    };
    app.channels
        .iter()
        .filter_map(|c| Some((at(&c.from)?, at(&c.to)?)))
        .collect()
}

/// The confidence bounds of a measured link: ((optimistic, pessimistic) latency,
/// (pessimistic, optimistic) success).
pub fn bounds(m: &Meas) -> ((f64, f64), (f64, f64)) {
    let lat = m.q.latency_ms;
    let e = (CONFIDENCE_Z * m.jitter_ms.max(0.0) / f64::from(SAMPLES).sqrt())
        .max(LATENCY_STEP_MS / 2.0);
    (
        ((lat - e).max(LATENCY_FLOOR_MS).min(lat), lat + e),
        wilson(m.q.success, SAMPLES, CONFIDENCE_Z),
    )
}

/// Wilson score interval of a success rate `p` over `n` probes at `z` standard errors
/// (cloud-broker `links::wilson_interval`, which this crate cannot call).
fn wilson(p: f64, n: u32, z: f64) -> (f64, f64) {
    if n == 0 || !p.is_finite() {
        return (0.0, 1.0);
    }
    let (n, p) = (f64::from(n), p.clamp(0.0, 1.0));
    let den = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / den;
    let half = z / den * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).clamp(0.0, p), (centre + half).clamp(p, 1.0))
}

/// cloud-broker `links::relative_gain`.
pub fn relative_gain(current: f64, best: f64) -> f64 {
    let diff = best - current;
    if diff <= SCORE_RESOLUTION {
        return 0.0;
    }
    diff / current.max(SCORE_RESOLUTION)
}

/// [`Rule::System`]: the placement in force after the evaluations of one round on `links`
/// (`best`: the search's placement on the live model).
pub fn system_rule(
    fleet: &Fleet,
    links: &Links,
    est: &LinkEstimates,
    app: &Application,
    current: &BTreeMap<String, String>,
    best: &BTreeMap<String, String>,
    budget: Option<Duration>,
) -> BTreeMap<String, String> {
    let mut cur = current.clone();
    for _ in 0..app.components.len() {
        let fav = fleet.favour(links, est, app, &cur);
        // the current, the best, and the best's components moved one at a time
        let moved: Vec<(String, String)> = best
            .iter()
            .filter(|(k, n)| cur.get(*k) != Some(*n))
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        let mut all = vec![cur.clone(), best.clone()];
        all.extend(moved.iter().map(|(k, n)| {
            let mut a = cur.clone();
            a.insert(k.clone(), n.clone());
            a
        }));
        let scores: Vec<Option<f64>> = score_all_on(&fav, app, &all, budget)
            .into_iter()
            .map(|s| s.ok().map(|x| x.0))
            .collect();
        let (Some(c), Some(b)) = (scores[0], scores[1]) else {
            break; // the current placement does not score: nothing moves
        };
        if relative_gain(c, b) <= HYSTERESIS {
            break;
        }
        let mut moves: Vec<(&(String, String), f64)> = moved
            .iter()
            .zip(&scores[2..])
            .filter_map(|(m, s)| Some((m, (*s)?)))
            .collect();
        moves.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0 .0.cmp(&y.0 .0)));
        let pick = moves
            .into_iter()
            .find(|m| m.1 > c)
            .map(|(m, _)| m)
            .or(moved.first());
        let Some((k, n)) = pick else { break };
        cur.insert(k.clone(), n.clone());
    }
    cur
}

/// [`Rule::Adopt`]: `best` if it scores higher than `current` on `model` (or `current` does
/// not score there).
pub fn adopt_rule(
    model: &Infra,
    app: &Application,
    current: &BTreeMap<String, String>,
    best: &BTreeMap<String, String>,
    budget: Option<Duration>,
) -> BTreeMap<String, String> {
    let s = score_all_on(model, app, &[current.clone(), best.clone()], budget);
    match (
        s[0].as_ref().ok().map(|x| x.0),
        s[1].as_ref().ok().map(|x| x.0),
    ) {
        (Some(c), Some(b)) if b > c + SCORE_RESOLUTION => best.clone(),
        (None, Some(_)) => best.clone(),
        _ => current.clone(),
    }
}

/// The placement in force after one round.
#[derive(Debug, Clone)]
pub struct Round {
    pub assignment: BTreeMap<String, String>,
    /// Whether the round changed it.
    pub changed: bool,
    /// Its channels on estimated links (on the round's model).
    pub on_estimates: usize,
    /// Targeted pairs measured so far.
    pub probed: usize,
    /// Whether the round's search was proven optimal (no search: false).
    pub proven: bool,
    /// The pairs the round measured (targeted probes).
    pub targeted: Vec<(u32, u32)>,
}

/// Up to `rounds` rounds after `first` was placed on `base`: the estimated pairs the placement
/// in force uses are measured (`measure`, the pair's simulated measurement), the application
/// evaluated again by `rule`. Ends early when a round measures nothing new and changes nothing
/// (later rounds would be the same; the first placement was searched on `base`). `width`:
/// [`Rule::Multi`]'s candidate nodes per component.
#[allow(clippy::too_many_arguments)]
pub fn run(
    fleet: &Fleet,
    base: &Links,
    measure: &dyn Fn(u32, u32) -> Meas,
    app: &Application,
    first: &BTreeMap<String, String>,
    rule: Rule,
    rounds: usize,
    width: usize,
    opts: &Options,
) -> Vec<Round> {
    if rule == Rule::Multi {
        return run_multi(fleet, base, measure, app, first, rounds, width, opts);
    }
    let mut links = base.clone();
    let mut cur = first.clone();
    // Rule::Probe: the last search's placement, not adopted yet
    let mut candidate: Option<BTreeMap<String, String>> = None;
    let mut probed = 0;
    let mut out: Vec<Round> = Vec::new();
    for _ in 0..rounds {
        let mut targeted: BTreeSet<(u32, u32)> = BTreeSet::new();
        for a in std::iter::once(&cur).chain(&candidate) {
            targeted.extend(
                channel_pairs(fleet.nodes, app, a)
                    .into_iter()
                    .filter(|&(a, b)| a != b && !links.contains_key(&(a, b))),
            );
        }
        // nothing new measured and nothing changed: the model is the one of the last search
        if targeted.is_empty() && candidate.is_none() && out.last().is_none_or(|r| !r.changed) {
            break;
        }
        for &(a, b) in &targeted {
            links.insert((a, b), measure(a, b));
            probed += 1;
        }
        let (model, est) = fleet.view_as(&links, rule);
        let mut next = cur.clone();
        if let Some(c) = candidate.take() {
            next = adopt_rule(&model, app, &cur, &c, opts.time_budget);
        }
        let proven = match place_on(&model, app, &Ledger::new(), opts) {
            Ok(r) => {
                if let Placed::Placed(p) = &r.outcome {
                    next = match rule {
                        Rule::System => system_rule(
                            fleet,
                            &links,
                            &est,
                            app,
                            &cur,
                            &p.assignment,
                            opts.time_budget,
                        ),
                        Rule::Adopt | Rule::Pessimistic | Rule::Multi => {
                            adopt_rule(&model, app, &cur, &p.assignment, opts.time_budget)
                        }
                        // a candidate on measured links only is compared at once
                        Rule::Probe if model.estimated_channels(app, &p.assignment) == 0 => {
                            adopt_rule(&model, app, &next, &p.assignment, opts.time_budget)
                        }
                        Rule::Probe => {
                            candidate = (p.assignment != next).then(|| p.assignment.clone());
                            next
                        }
                    };
                }
                r.proven
            }
            Err(_) => false,
        };
        let changed = next != cur;
        cur = next;
        out.push(Round {
            on_estimates: model.estimated_channels(app, &cur),
            assignment: cur.clone(),
            changed,
            probed,
            proven,
            targeted: targeted.into_iter().collect(),
        });
    }
    out
}

/// [`run`] for [`Rule::Multi`]: the rounds of `acoa_scheduler::explore::round` (the rule the
/// control plane runs), each after the last round's pairs to probe were measured. Ends when a
/// round has nothing to probe, no candidate and changed nothing.
#[allow(clippy::too_many_arguments)]
fn run_multi(
    fleet: &Fleet,
    base: &Links,
    measure: &dyn Fn(u32, u32) -> Meas,
    app: &Application,
    first: &BTreeMap<String, String>,
    rounds: usize,
    width: usize,
    opts: &Options,
) -> Vec<Round> {
    let mut links = base.clone();
    let mut cur = first.clone();
    let mut candidate: Option<BTreeMap<String, String>> = None;
    // the first round probes the first placement's estimated pairs
    let mut pending: BTreeSet<(u32, u32)> = channel_pairs(fleet.nodes, app, first)
        .into_iter()
        .filter(|&(a, b)| a != b && !links.contains_key(&(a, b)))
        .collect();
    let mut probed = 0;
    let mut out: Vec<Round> = Vec::new();
    for _ in 0..rounds {
        let targeted = std::mem::take(&mut pending);
        if targeted.is_empty() && candidate.is_none() && out.last().is_none_or(|r| !r.changed) {
            break;
        }
        for &(a, b) in &targeted {
            links.insert((a, b), measure(a, b));
        }
        probed += targeted.len();
        let (model, _) = fleet.view(&links);
        let r = explore::round(
            &model,
            app,
            &Ledger::new(),
            &cur,
            candidate.as_ref(),
            width,
            opts,
        );
        let changed = r.next != cur;
        cur = r.next;
        candidate = r.candidate;
        pending = r.probe.into_iter().collect();
        out.push(Round {
            on_estimates: model.estimated_channels(app, &cur),
            assignment: cur.clone(),
            changed,
            probed,
            proven: r.proven,
            targeted: targeted.into_iter().collect(),
        });
    }
    out
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::*;
    use acoa_scheduler::rng::SplitMix64 as Rng;
    use acoa_scheduler::synth;
    use acoa_shared::model::parse_application;

    /// An edge node of the benchmark's kind (the test applications ask nothing of it).
    fn node(i: usize, dc: &str) -> Node {
        let mut r = Rng::new(i as u64);
        synth::node(format!("n{i:05}"), dc.into(), false, |_| false, &mut r)
    }

    fn meas(latency_ms: f64) -> Meas {
        Meas {
            q: LinkQ {
                latency_ms,
                success: 1.0,
            },
            jitter_ms: 0.0,
        }
    }

    /// src pinned to n00000, sink free; one channel, a response-time path.
    fn app() -> Application {
        app_where("")
    }

    /// [`app`] with the sink's requirements `req` (YAML flow mapping entries).
    fn app_where(req: &str) -> Application {
        parse_application(&format!(
            "application: t\ncomponents:\n- {{name: src, image: i, requires: {{node: n00000}}}}\n- {{name: sink, image: i, requires: {{{req}}}}}\nchannels:\n- {{name: c, from: src, to: sink}}\npaths:\n- {{name: p, channels: [c]}}\ncriteria:\n- {{type: min-e2e-response-time, path: p, weight: 1.0}}\n",
        ))
        .unwrap()
    }

    fn at(sink: &str) -> BTreeMap<String, String> {
        [("src", "n00000"), ("sink", sink)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// Where the sink of `app` is after each of 4 rounds of `rule` from `first`.
    fn sinks_by(
        fleet: &Fleet,
        base: &Links,
        truth: &dyn Fn(u32, u32) -> Meas,
        app: &Application,
        first: &BTreeMap<String, String>,
        rule: Rule,
    ) -> Vec<String> {
        let opts = Options::default();
        run(fleet, base, truth, app, first, rule, 4, MULTI_WIDTH, &opts)
            .into_iter()
            .map(|r| r.assignment["sink"].clone())
            .collect()
    }

    #[test]
    fn bounds_span_the_jitter_and_the_probes() {
        let ((lo, hi), (s_lo, s_hi)) = bounds(&meas(10.0));
        assert!((lo - 9.95).abs() < 1e-12 && (hi - 10.05).abs() < 1e-12); // half a step
        assert_eq!(s_hi, 1.0);
        assert!(s_lo < 1.0 && s_lo > 0.9, "{s_lo}");
        let mut m = meas(10.0);
        m.jitter_ms = 2.0 * f64::from(SAMPLES).sqrt();
        assert_eq!(bounds(&m).0, (8.0, 12.0));
        assert_eq!(bounds(&meas(0.5)).0 .0, 0.5); // never below the floor
        assert_eq!(relative_gain(0.5, 0.52), 0.52 / 0.5 - 1.0);
        assert_eq!(relative_gain(0.5, 0.4), 0.0);
    }

    /// Three nodes: the sink on n00001 (10 ms) or n00002 (9 ms / 10.6 ms): the system rule
    /// moves only for a gain above the hysteresis on the network in the current's favour, the
    /// adopt rule for any gain.
    #[test]
    fn the_system_rule_moves_only_past_the_hysteresis() {
        let nodes: Vec<Node> = (0..3).map(|i| node(i, "a")).collect();
        let coords = vec![(vec![0.0; 3], 1.0, 0.2); 3];
        let fleet = Fleet {
            nodes: &nodes,
            site: vec![0, 1, 2],
            coords: &coords,
        };
        let app = app();
        for (far, moves) in [(9.0, true), (9.8, false)] {
            let links: Links = [
                ((0, 0), meas(0.05)),
                ((1, 1), meas(0.05)),
                ((2, 2), meas(0.05)),
                ((0, 1), meas(10.0)),
                ((0, 2), meas(far)),
            ]
            .into_iter()
            .collect();
            let (model, est) = fleet.view(&links);
            let (cur, best) = (at("n00001"), at("n00002"));
            let s = system_rule(&fleet, &links, &est, &app, &cur, &best, None);
            assert_eq!(s == best, moves, "far {far}");
            // any gain is taken by the adopt rule, none the other way round
            assert_eq!(adopt_rule(&model, &app, &cur, &best, None), best);
            assert_eq!(adopt_rule(&model, &app, &best, &cur, None), best);
        }
    }

    /// The network in the current placement's favour: its used links optimistic, others
    /// pessimistic, a used estimated pair at x (1 - r), the other estimates x (1 + max r);
    /// the pessimistic rule's model: estimates x (1 + max r), measured links as measured.
    #[test]
    fn the_favoured_network_leans_towards_the_current_placement() {
        let nodes: Vec<Node> = (0..4).map(|i| node(i, "a")).collect();
        let coords = vec![
            (vec![0.0, 0.0, 0.0], 1.0, 0.2),
            (vec![10.0, 0.0, 0.0], 1.0, 0.2),
            (vec![0.0, 10.0, 0.0], 1.0, 0.3),
            (vec![0.0, 0.0, 10.0], 1.0, 0.2),
        ];
        let fleet = Fleet {
            nodes: &nodes,
            site: vec![0, 1, 2, 3],
            coords: &coords,
        };
        let links: Links = [
            ((0, 1), meas(10.0)),
            ((1, 3), meas(12.0)),
            ((2, 3), meas(14.0)),
        ]
        .into_iter()
        .collect();
        let near = |x: f64, y: f64| assert!((x - y).abs() < 1e-9, "{x} against {y}");
        let (model, est) = fleet.view(&links);
        let app = app();
        // the sink on n00002: (0, 2) is estimated and used
        let fav = fleet.favour(&links, &est, &app, &at("n00002"));
        let e02 = model.link(0, 2).unwrap().latency_ms;
        near(fav.link(0, 2).unwrap().latency_ms, e02 * 0.7);
        near(fav.link(2, 0).unwrap().latency_ms, e02 * 0.7);
        near(fav.link(0, 1).unwrap().latency_ms, 10.05);
        let e03 = model.link(0, 3).unwrap().latency_ms;
        near(fav.link(0, 3).unwrap().latency_ms, e03 * 1.3);
        // the sink on n00001: (0, 1) measured and used
        let fav = fleet.favour(&links, &est, &app, &at("n00001"));
        near(fav.link(0, 1).unwrap().latency_ms, 9.95);
        near(fav.link(1, 3).unwrap().latency_ms, 12.05);
        // the pessimistic rule's search: every estimate x (1 + max r), measured links as they are
        let (pess, _) = fleet.view_as(&links, Rule::Pessimistic);
        near(pess.link(0, 2).unwrap().latency_ms, e02 * 1.3);
        near(pess.link(0, 3).unwrap().latency_ms, e03 * 1.3);
        near(pess.link(0, 1).unwrap().latency_ms, 10.0);
    }

    /// The sink in datacenter b: n00001 measured at 10 ms, n00002 and n00003 estimated at 7
    /// and 8 ms but 12 and 15 ms in truth. From the first placement on n00002, the adopt rule
    /// moves onto n00003's estimate before its probe shows it worse; the probe rule keeps
    /// n00002 until then; both end on n00001.
    #[test]
    fn the_probe_rule_adopts_a_candidate_only_once_measured() {
        let nodes: Vec<Node> = (0..4)
            .map(|i| node(i, ["a", "b"][usize::from(i > 0)]))
            .collect();
        let coords = vec![
            (vec![0.0, 0.0, 0.0], 1.0, 0.2),
            (vec![-20.0, 0.0, 0.0], 1.0, 0.2),
            (vec![5.0, 0.0, 0.0], 1.0, 0.2),
            (vec![6.0, 0.0, 0.0], 1.0, 0.2),
        ];
        let fleet = Fleet {
            nodes: &nodes,
            site: vec![0, 1, 1, 1],
            coords: &coords,
        };
        let mut base: Links = (0..4).map(|i| ((i, i), meas(0.05))).collect();
        base.insert((0, 1), meas(10.0));
        base.insert((2, 3), meas(1.0));
        let truth = |a: u32, b: u32| meas([0.0, 10.0, 12.0, 15.0][(a + b) as usize]);
        let app = app_where("datacenter: b");
        let (model, _) = fleet.view(&base);
        assert!(model.link(0, 2).unwrap().latency_ms < model.link(0, 3).unwrap().latency_ms);
        let first = at("n00002");
        let sinks = |rule| sinks_by(&fleet, &base, &truth, &app, &first, rule);
        assert_eq!(sinks(Rule::Adopt), ["n00003", "n00001", "n00001"]);
        assert_eq!(sinks(Rule::Probe), ["n00002", "n00001", "n00001"]);
    }

    /// The sink on a `sink` device: n00001 (datacenter c) measured at 10 ms; n00002 and
    /// n00003 (datacenter b, as n00004) estimated at 7 and 8 ms but 12 and 15 ms in truth;
    /// n00004 estimated at 11 ms (worse than n00001) but 5 ms in truth (n00001 is in a
    /// datacenter of its own so that its measured link does not estimate b's pairs). From
    /// the first placement on n00002, the probe rule ends on n00001 and never probes n00004; the multi rule takes n00001 in round 1 (the search on the measured
    /// links alone), probes the neighbourhood of the search's candidate n00003 (n00004 among
    /// its single moves) and ends on n00004 in round 2, every move onto a measured link.
    #[test]
    fn the_multi_rule_probes_the_neighbourhood_and_adopts_only_measured() {
        let nodes: Vec<Node> = (0..5)
            .map(|i| {
                let mut n = node(i, ["a", "c", "b", "b", "b"][i]);
                if i > 0 {
                    n.hardware = vec!["sink".into()];
                }
                n
            })
            .collect();
        let coords = vec![
            (vec![0.0, 0.0, 0.0], 1.0, 0.2),
            (vec![-20.0, 0.0, 0.0], 1.0, 0.2),
            (vec![5.0, 0.0, 0.0], 1.0, 0.2),
            (vec![6.0, 0.0, 0.0], 1.0, 0.2),
            (vec![9.0, 0.0, 0.0], 1.0, 0.2),
        ];
        let fleet = Fleet {
            nodes: &nodes,
            site: vec![0, 2, 1, 1, 1],
            coords: &coords,
        };
        let mut base: Links = (0..5).map(|i| ((i, i), meas(0.05))).collect();
        base.insert((0, 1), meas(10.0));
        base.insert((2, 3), meas(1.0));
        base.insert((3, 4), meas(1.0));
        let probed = std::cell::RefCell::new(Vec::new());
        let truth = |a: u32, b: u32| {
            probed.borrow_mut().push((a, b));
            assert_eq!(a, 0, "only the channel's pairs are probed");
            meas([0.0, 10.0, 12.0, 15.0, 5.0][b as usize])
        };
        let app = app_where("hardware: [sink]");
        let (model, _) = fleet.view(&base);
        let e = |b| model.link(0, b).unwrap().latency_ms;
        assert!(
            e(2) < e(3) && e(3) < 10.0 && e(4) > 10.0,
            "{} {} {}",
            e(2),
            e(3),
            e(4)
        );
        let first = at("n00002");
        let sinks = |rule| sinks_by(&fleet, &base, &truth, &app, &first, rule);
        assert_eq!(sinks(Rule::Probe), ["n00002", "n00001", "n00001"]);
        assert!(!probed.borrow().contains(&(0, 4)));
        probed.borrow_mut().clear();
        let rounds = run(
            &fleet,
            &base,
            &truth,
            &app,
            &first,
            Rule::Multi,
            4,
            MULTI_WIDTH,
            &Options::default(),
        );
        let got: Vec<&str> = rounds
            .iter()
            .map(|r| r.assignment["sink"].as_str())
            .collect();
        assert_eq!(got, ["n00001", "n00004", "n00004"]);
        // round 1 the placement's pair, round 2 the candidate's and its neighbourhood's
        let targeted: Vec<&[(u32, u32)]> = rounds.iter().map(|r| r.targeted.as_slice()).collect();
        assert_eq!(targeted, [&[(0, 2)][..], &[(0, 3), (0, 4)], &[]]);
        assert_eq!(rounds.last().unwrap().probed, 3);
        assert!(rounds.iter().all(|r| r.on_estimates == 0));
    }
}
