//! The descheduler, as a pure state machine: events in, actions out.
//!
//! On every [`Event::Tick`] (fresh measurements and the observed assignment), for each
//! component `c` on node `cur` and each candidate node `n ≠ cur` (filtered as for placement,
//! the other components where they are):
//! 1. `g(c, n)` = `(S(c, n) − S(c, cur)) / S(c, cur)`, the relative gain of the move (the
//!    current node is scored without the filter: the component is already there);
//! 2. the gain is smoothed: `ḡ ← ḡ + λ·(g − ḡ)` (exponentially weighted, `λ` =
//!    [`Config::smoothing`]; `ḡ = g` the first time, and after every move);
//! 3. `best` = the node with the largest `ḡ`; if `ḡ(best) > threshold`, the component's streak
//!    grows if `best` is the same node as on the previous tick, else restarts at 1; otherwise
//!    the streak is cleared.
//!
//! A component whose streak reaches `sustain` is due. If no move is in flight, the due component
//! with the largest gain (ties: lowest index) gets an [`Action::Move`], and that move is in
//! flight until a tick observes the component on its target node (or [`Event::MoveFailed`], or
//! `confirm_timeout` ticks pass: then [`Action::Abandoned`]). While a move is in flight nothing
//! else moves, and all streaks restart once it ends: the evidence for the next move is gathered
//! on the new state, not on the one the move changed.
//!
//! Hysteresis: the smoothing takes most of the measurement noise out of the gain, and what
//! is left may cross the threshold now and then, but rarely towards the same node `sustain`
//! ticks in a row; a real change does, a few ticks later. The rule is stricter than
//! "one replica of a component at a time": one move in the whole application at a time (our
//! components have one replica each).

use super::{best_node_except, fits, score, NetError, Snapshot, Weights};

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
    /// Move `component` from node `from` to node `to`; `gain` is the relative score gain.
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

#[derive(Debug, Clone, Copy, PartialEq)]
struct InFlight {
    component: usize,
    to: usize,
    waited: u32,
}

/// The descheduler's state.
#[derive(Debug, Clone)]
pub struct Descheduler {
    cfg: Config,
    streaks: Vec<Option<Streak>>,
    /// `gains[c][n]`: smoothed relative gain of moving `c` to `n` (`None`: not a candidate).
    gains: Vec<Vec<Option<f64>>>,
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
            streaks: Vec::new(),
            gains: Vec::new(),
            in_flight: None,
        })
    }

    /// The move in flight: (component, target node).
    pub fn in_flight(&self) -> Option<(usize, usize)> {
        self.in_flight.map(|f| (f.component, f.to))
    }

    /// Current streak of component `c`: (target node, consecutive ticks).
    pub fn streak(&self, c: usize) -> Option<(usize, u32)> {
        self.streaks
            .get(c)
            .copied()
            .flatten()
            .map(|s| (s.target, s.count))
    }

    /// The relative gain of the best other node for component `c`, if there is a candidate.
    pub fn evaluate(&self, s: &Snapshot, assignment: &[usize], c: usize) -> Option<(usize, f64)> {
        evaluate(s, &self.cfg.weights, assignment, c)
    }

    pub fn handle(&mut self, event: Event) -> Result<Vec<Action>, NetError> {
        match event {
            Event::MoveFailed { component } => {
                if self.in_flight.is_some_and(|f| f.component == component) {
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
        self.streaks.iter_mut().for_each(|s| *s = None);
        self.gains.iter_mut().flatten().for_each(|g| *g = None);
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
        self.streaks.resize(s.components.len(), None);
        let mut actions = Vec::new();
        if let Some(mut f) = self.in_flight {
            if f.component < assignment.len() && assignment[f.component] == f.to {
                self.in_flight = None;
                self.clear_streaks();
            } else {
                f.waited += 1;
                if f.waited >= self.cfg.confirm_timeout {
                    self.in_flight = None;
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
        self.gains
            .resize(s.components.len(), vec![None; s.nodes.len()]);
        for g in &mut self.gains {
            g.resize(s.nodes.len(), None);
        }
        let lambda = self.cfg.smoothing;
        let mut due: Option<(usize, usize, f64)> = None;
        for c in 0..s.components.len() {
            let raw = gains(s, &self.cfg.weights, assignment, c);
            let mut verdict: Option<(usize, f64)> = None;
            for (n, g) in raw.into_iter().enumerate() {
                let smoothed = &mut self.gains[c][n];
                *smoothed = g.map(|g| smoothed.map_or(g, |p| p + lambda * (g - p)));
                if let Some(v) = *smoothed {
                    if verdict.is_none_or(|(_, b)| v > b) {
                        verdict = Some((n, v));
                    }
                }
            }
            let verdict = verdict.filter(|&(_, gain)| gain > self.cfg.threshold);
            self.streaks[c] = match (verdict, self.streaks[c]) {
                (None, _) => None,
                (Some((to, _)), Some(st)) if st.target == to => Some(Streak {
                    target: to,
                    count: st.count + 1,
                }),
                (Some((to, _)), _) => Some(Streak {
                    target: to,
                    count: 1,
                }),
            };
            if let (Some((to, gain)), Some(st)) = (verdict, self.streaks[c]) {
                if st.count >= self.cfg.sustain && due.is_none_or(|(_, _, g)| gain > g) {
                    due = Some((c, to, gain));
                }
            }
        }
        if let Some((c, to, gain)) = due {
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
            });
            self.clear_streaks();
        }
        Ok(actions)
    }
}

/// The best other node for component `c` and the relative gain of moving there (one
/// evaluation, not smoothed).
pub fn evaluate(s: &Snapshot, w: &Weights, assignment: &[usize], c: usize) -> Option<(usize, f64)> {
    let cur = assignment[c];
    let opt: Vec<Option<usize>> = assignment.iter().map(|&n| Some(n)).collect();
    let here = score(s, w, &opt, c, cur);
    let (to, there) = best_node_except(s, w, &opt, c, Some(cur))?;
    Some((to, relative_gain(here, there)))
}

fn relative_gain(here: f64, there: f64) -> f64 {
    (there - here) / here.max(1e-9)
}

/// The relative gain of moving component `c` to each node (`None`: the current node, or a
/// node that is not a candidate).
pub fn gains(s: &Snapshot, w: &Weights, assignment: &[usize], c: usize) -> Vec<Option<f64>> {
    let cur = assignment[c];
    let opt: Vec<Option<usize>> = assignment.iter().map(|&n| Some(n)).collect();
    let here = score(s, w, &opt, c, cur);
    (0..s.nodes.len())
        .map(|n| {
            (n != cur && fits(s, w, &opt, c, n))
                .then(|| relative_gain(here, score(s, w, &opt, c, n)))
        })
        .collect()
}
