//! The descheduler, as a pure state machine: events in, actions out.
//!
//! A *candidate move* is a set of components that would move together from their node to
//! another: every component alone, and (with [`Config::group_moves`]) every *group*: the
//! components on one node that are connected by traffic among themselves (two or more). A
//! group matters when the components of a chatty subtree share a node that has become badly
//! connected: none of them gains by leaving alone (it would leave its heaviest peers behind),
//! but together they do.
//!
//! On every [`Event::Tick`] (fresh measurements and the observed assignment), for each candidate
//! move `G` (on node `from`) and each node `n ≠ from` where all of `G` fits (filtered as for
//! placement, everything else where it is):
//! 1. `g(G, n)` = `(Σ_{c∈G} S(c, n | G on n) − Σ_{c∈G} S(c, from)) / (Σ_{c∈G} S(c, from) / |G|)`,
//!    the relative gain of the move: the total improvement in units of the members' mean
//!    score (for one component: `(S(c, n) − S(c, from)) / S(c, from)`; the current node is
//!    scored without the filter: the components are already there). Not relative to the sum:
//!    the inner members of a group gain nothing (their peers move with them), so a group's
//!    relative gain would shrink with its size;
//! 2. the gain is smoothed: `ḡ ← ḡ + λ·(g − ḡ)` (exponentially weighted, `λ` =
//!    [`Config::smoothing`]; `ḡ = g` the first time, and after every move);
//! 3. `best` = the node with the largest `ḡ`; if `ḡ(best) > threshold`, the candidate's streak
//!    grows if `best` is the same node as on the previous tick, else restarts at 1; otherwise
//!    the streak is cleared.
//!
//! A candidate whose streak reaches `sustain` is due. If no move is in flight, the due candidate
//! with the largest gain (ties: the first, singletons in component order, then groups) is
//! carried out one component at a time (ascending index): an [`Action::Move`] for the first,
//! which is in flight until a tick observes it on its target node (or [`Event::MoveFailed`], or
//! `confirm_timeout` ticks pass: then [`Action::Abandoned`], and the rest of the group is
//! dropped); then the next one's `Move` on that same tick, and so on. While a move is in flight
//! nothing else moves and no evidence is gathered, and all streaks and smoothed gains restart
//! once the last move ends: the evidence for the next decision is gathered on the new state,
//! not on the one the moves changed.
//!
//! Hysteresis: the smoothing takes most of the measurement noise out of the gain, and what
//! is left may cross the threshold now and then, but rarely towards the same node `sustain`
//! ticks in a row; a real change does, a few ticks later. The rule is stricter than "one
//! replica of a component at a time": one move in the whole application at a time (our
//! components have one replica each).

use super::{score_with_max, NetError, Snapshot, Weights};
use std::collections::BTreeMap;

/// The descheduler's tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub weights: Weights,
    /// Minimum (smoothed) relative gain of the best other node over the current one (0.2 = 20 %).
    pub threshold: f64,
    /// Consecutive ticks the same better node must be seen before a move.
    pub sustain: u32,
    /// Ticks to wait for a move to be observed before giving up on it.
    pub confirm_timeout: u32,
    /// Weight of the newest gain in the smoothed gain, in (0, 1] (1 = no smoothing).
    pub smoothing: f64,
    /// Also consider moving the traffic-connected groups of components that share a node.
    pub group_moves: bool,
}

impl Default for Config {
    /// Threshold 20 %, sustained 5 ticks, smoothing 0.2, confirmation within 10 ticks: no
    /// move over 10 × 1000 ticks of ±20 % latency noise in `tests::noisy_latencies_...`; a
    /// real change moves within about 7 ticks.
    fn default() -> Self {
        Config {
            weights: Weights::default(),
            threshold: 0.2,
            sustain: 5,
            confirm_timeout: 10,
            smoothing: 0.2,
            group_moves: true,
        }
    }
}

/// What the descheduler is told.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Fresh measurements; `assignment[c]` is the node component `c` is observed on.
    Tick {
        snapshot: Snapshot,
        assignment: Vec<usize>,
    },
    /// The move of this component could not be carried out.
    MoveFailed { component: usize },
}

/// What the descheduler asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Move `component` from node `from` to node `to`; `gain` is the relative score gain of
    /// the candidate move it is part of (alone or with its group).
    Move {
        component: usize,
        from: usize,
        to: usize,
        gain: f64,
    },
    /// The move in flight was not observed within `confirm_timeout` ticks; no longer waited for.
    Abandoned { component: usize, to: usize },
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Streak {
    target: usize,
    count: u32,
}

#[derive(Debug, Clone, PartialEq)]
struct InFlight {
    component: usize,
    to: usize,
    waited: u32,
    gain: f64,
    /// The rest of the group, moved after this one.
    rest: Vec<usize>,
}

/// The descheduler's state.
#[derive(Debug, Clone)]
pub struct Descheduler {
    cfg: Config,
    /// By candidate move (its components, ascending).
    streaks: BTreeMap<Vec<usize>, Streak>,
    /// Smoothed relative gain by (candidate move, target node).
    gains: BTreeMap<(Vec<usize>, usize), f64>,
    in_flight: Option<InFlight>,
}

impl Descheduler {
    pub fn new(cfg: Config) -> Result<Self, NetError> {
        cfg.weights.validate()?;
        if !cfg.threshold.is_finite() || cfg.threshold < 0.0 {
            return Err(NetError::Invalid {
                what: "threshold".into(),
                reason: format!("must be finite and >= 0, got {}", cfg.threshold),
            });
        }
        if !(cfg.smoothing > 0.0 && cfg.smoothing <= 1.0) {
            return Err(NetError::Invalid {
                what: "smoothing".into(),
                reason: format!("must be in (0, 1], got {}", cfg.smoothing),
            });
        }
        if cfg.sustain == 0 {
            return Err(NetError::Invalid {
                what: "sustain".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(Descheduler {
            cfg,
            streaks: BTreeMap::new(),
            gains: BTreeMap::new(),
            in_flight: None,
        })
    }

    /// The move in flight: (component, target node).
    pub fn in_flight(&self) -> Option<(usize, usize)> {
        self.in_flight.as_ref().map(|f| (f.component, f.to))
    }

    /// Current streak of component `c` moving alone: (target node, consecutive ticks).
    pub fn streak(&self, c: usize) -> Option<(usize, u32)> {
        self.streak_of(&[c])
    }

    /// Current streak of a candidate move (components ascending).
    pub fn streak_of(&self, members: &[usize]) -> Option<(usize, u32)> {
        self.streaks.get(members).map(|s| (s.target, s.count))
    }

    pub fn handle(&mut self, event: Event) -> Result<Vec<Action>, NetError> {
        match event {
            Event::MoveFailed { component } => {
                if self
                    .in_flight
                    .as_ref()
                    .is_some_and(|f| f.component == component)
                {
                    self.in_flight = None;
                    self.clear_streaks();
                }
                Ok(Vec::new())
            }
            Event::Tick {
                snapshot,
                assignment,
            } => self.tick(&snapshot, &assignment),
        }
    }

    /// Forgets streaks and smoothed gains: the state they were gathered on is gone.
    fn clear_streaks(&mut self) {
        self.streaks.clear();
        self.gains.clear();
    }

    fn tick(&mut self, s: &Snapshot, assignment: &[usize]) -> Result<Vec<Action>, NetError> {
        s.validate()?;
        if assignment.len() != s.components.len() {
            return Err(NetError::Shape {
                what: "assignment".into(),
                expected: s.components.len(),
                got: assignment.len(),
            });
        }
        if let Some(&n) = assignment.iter().find(|&&n| n >= s.nodes.len()) {
            return Err(NetError::Invalid {
                what: "assignment".into(),
                reason: format!("no node {n}"),
            });
        }
        let mut actions = Vec::new();
        if let Some(mut f) = self.in_flight.take() {
            if f.component < assignment.len() && assignment[f.component] == f.to {
                self.clear_streaks();
                // Next member of the group, if any (one that is still elsewhere).
                f.rest
                    .retain(|&c| c < assignment.len() && assignment[c] != f.to);
                if !f.rest.is_empty() {
                    let c = f.rest.remove(0);
                    actions.push(Action::Move {
                        component: c,
                        from: assignment[c],
                        to: f.to,
                        gain: f.gain,
                    });
                    self.in_flight = Some(InFlight {
                        component: c,
                        waited: 0,
                        ..f
                    });
                }
            } else {
                f.waited += 1;
                if f.waited >= self.cfg.confirm_timeout {
                    self.clear_streaks();
                    actions.push(Action::Abandoned {
                        component: f.component,
                        to: f.to,
                    });
                } else {
                    self.in_flight = Some(f);
                }
            }
            // The state is in transition: gather no evidence on it.
            return Ok(actions);
        }
        let mut candidates: Vec<Vec<usize>> = (0..s.components.len()).map(|c| vec![c]).collect();
        if self.cfg.group_moves {
            candidates.extend(groups(s, assignment).into_iter().filter(|g| g.len() > 1));
        }
        let lambda = self.cfg.smoothing;
        let mut gains = BTreeMap::new();
        let mut streaks = BTreeMap::new();
        let mut due: Option<(Vec<usize>, usize, f64)> = None;
        for members in candidates {
            let mut verdict: Option<(usize, f64)> = None;
            let raw = group_gains(s, &self.cfg.weights, assignment, &members);
            for (n, g) in raw.into_iter().enumerate() {
                let Some(g) = g else { continue };
                let key = (members.clone(), n);
                let v = self.gains.get(&key).map_or(g, |p| p + lambda * (g - p));
                gains.insert(key, v);
                if verdict.is_none_or(|(_, b)| v > b) {
                    verdict = Some((n, v));
                }
            }
            let Some((to, gain)) = verdict.filter(|&(_, v)| v > self.cfg.threshold) else {
                continue;
            };
            let count = match self.streaks.get(&members) {
                Some(st) if st.target == to => st.count + 1,
                _ => 1,
            };
            streaks.insert(members.clone(), Streak { target: to, count });
            if count >= self.cfg.sustain && due.as_ref().is_none_or(|(_, _, g)| gain > *g) {
                due = Some((members, to, gain));
            }
        }
        self.gains = gains;
        self.streaks = streaks;
        if let Some((mut members, to, gain)) = due {
            let c = members.remove(0);
            actions.push(Action::Move {
                component: c,
                from: assignment[c],
                to,
                gain,
            });
            self.in_flight = Some(InFlight {
                component: c,
                to,
                waited: 0,
                gain,
                rest: members,
            });
            self.clear_streaks();
        }
        Ok(actions)
    }
}

/// The best other node for component `c` alone and the relative gain of moving it there (one
/// evaluation, not smoothed).
pub fn evaluate(s: &Snapshot, w: &Weights, assignment: &[usize], c: usize) -> Option<(usize, f64)> {
    let g = group_gains(s, w, assignment, &[c]);
    let mut best: Option<(usize, f64)> = None;
    for (n, v) in g.into_iter().enumerate() {
        if let Some(v) = v {
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((n, v));
            }
        }
    }
    best
}

/// The relative gain of moving component `c` alone to each node (`None`: its current node, or
/// a node that is not a candidate).
pub fn gains(s: &Snapshot, w: &Weights, assignment: &[usize], c: usize) -> Vec<Option<f64>> {
    group_gains(s, w, assignment, &[c])
}

/// The relative gain of moving all of `members` (all on one node) to each node (`None`: their
/// node, or a node that is not schedulable or where they do not all fit).
pub fn group_gains(
    s: &Snapshot,
    w: &Weights,
    assignment: &[usize],
    members: &[usize],
) -> Vec<Option<f64>> {
    let from = assignment[members[0]];
    let opt: Vec<Option<usize>> = assignment.iter().map(|&n| Some(n)).collect();
    let lmax = s.max_latency();
    let here: f64 = members
        .iter()
        .map(|&c| score_with_max(s, w, &opt, lmax, c, from))
        .sum();
    let (cpu, mem) = members.iter().fold((0.0, 0.0), |(a, b), &c| {
        (a + s.components[c].cpu, b + s.components[c].memory)
    });
    let mut rest = opt.clone();
    for &c in members {
        rest[c] = None;
    }
    let loads = s.loads(&rest, None);
    (0..s.nodes.len())
        .map(|n| {
            let node = &s.nodes[n];
            let eps = 1e-9;
            let fits = node.schedulable
                && members.iter().all(|&c| s.is_allowed(c, n))
                && loads[n].0 + cpu <= w.max_utilisation * node.cpu_capacity + eps
                && loads[n].1 + mem <= w.max_utilisation * node.memory_capacity + eps;
            if n == from || !fits {
                return None;
            }
            let mut moved = opt.clone();
            for &c in members {
                moved[c] = Some(n);
            }
            let there: f64 = members
                .iter()
                .map(|&c| score_with_max(s, w, &moved, lmax, c, n))
                .sum();
            // Relative to the members' mean score: the total improvement in units of one
            // member's score (for one component, its relative gain). Relative to the sum, the
            // gain of a group would shrink with its size: its inner members gain nothing
            // (their peers move with them), only the boundary does.
            Some((there - here) / (here / members.len() as f64).max(1e-9))
        })
        .collect()
}

/// The groups: per node, the sets of components connected by traffic among themselves
/// (exchanged bytes/s > 0), each ascending, in order of their smallest member. A component that
/// exchanges nothing with the others on its node is a group of one.
pub fn groups(s: &Snapshot, assignment: &[usize]) -> Vec<Vec<usize>> {
    let nc = assignment.len();
    let mut seen = vec![false; nc];
    let mut out = Vec::new();
    for start in 0..nc {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut group = vec![start];
        let mut i = 0;
        while i < group.len() {
            let c = group[i];
            for k in 0..nc {
                if !seen[k] && assignment[k] == assignment[start] && s.exchanged(c, k) > 0.0 {
                    seen[k] = true;
                    group.push(k);
                }
            }
            i += 1;
        }
        group.sort();
        out.push(group);
    }
    out
}
