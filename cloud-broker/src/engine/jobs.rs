//! Placement computations: a [`Job`] carries everything it needs as values (the application,
//! the live model, what the other applications hold, the current assignment), [`run_job`]
//! searches and scores, and the [`JobResult`] comes back to the engine as
//! `Event::Scheduled`.
//!
//! Invariant: pure functions of the job (no engine state, no I/O), so that a job runs on any
//! thread or on a `scheduler worker` ([`search_job`] there, [`finish_job`] here) with the same
//! result; the engine decides what to commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use acoa_scheduler::Infra;
use acoa_shared::model::{Application, Resources};

use super::links::favour_current;
use super::model::LiveModel;
use crate::sched;
use crate::status::{GradeRecord, PlacementRecord};

#[derive(Debug, Clone, PartialEq)]
pub enum Purpose {
    /// Find a placement (new, updated, retry, or a node was lost): the result is committed.
    Place(String),
    /// Descheduler: is a clearly better placement there? Moves one component at a time.
    Reevaluate,
    /// The links an exploration asked for are measured: one round of
    /// `acoa_scheduler::explore::round` (the placement moves only onto measured links; the
    /// next round's pairs to probe come back). Runs in this process, not on a worker.
    Explore,
}

impl Purpose {
    /// Whether the job places nothing new (an exploration round, a re-evaluation): it runs in
    /// the background (`engine/background.rs` lets so many run, `workers::background_slots`
    /// computes them).
    pub fn in_background(&self) -> bool {
        !matches!(self, Purpose::Place(_))
    }
}

/// A placement computation, with everything it needs as values.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: u64,
    pub app: String,
    pub revision: u64,
    pub purpose: Purpose,
    pub application: Arc<Application>,
    /// The live model it is computed on (shared with the other jobs on it).
    pub model: Arc<LiveModel>,
    /// What other applications hold, per node.
    pub reserved: BTreeMap<String, Resources>,
    /// How many containers other applications' placements put on each node.
    pub containers: BTreeMap<String, u32>,
    pub ledger_version: u64,
    /// The current assignment, if placed.
    pub current: Option<BTreeMap<String, String>>,
    /// Components that should stay where they are if that costs little. When `current` is
    /// given, the decision to move is taken on [`favour_current`] (the model's link bounds).
    pub keep: BTreeMap<String, String>,
    /// For [`Purpose::Explore`]: the last round's candidate and the candidate nodes per
    /// component.
    pub explore: Option<ExploreInput>,
}

/// What an exploration round starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct ExploreInput {
    /// The last round's candidate (the search's placement, on estimated links then).
    pub candidate: Option<BTreeMap<String, String>>,
    pub width: usize,
}

/// What an exploration round found ([`JobResult::explored`]; the placement in force after it
/// is the result's outcome).
#[derive(Debug, Clone, PartialEq)]
pub struct ExploreFound {
    pub candidate: Option<BTreeMap<String, String>>,
    /// The unmeasured pairs (from, to) to probe before the next round, each once, those that
    /// decide most first (`acoa_scheduler::explore::Explored::probe`).
    pub probe: Vec<(String, String)>,
    pub proven: bool,
}

impl Job {
    /// The scheduler's ledger of this job: what other applications reserve and how many
    /// containers they put on each node.
    pub fn ledger(&self) -> sched::Ledger {
        let mut ledger = sched::Ledger::new();
        for (n, r) in &self.reserved {
            ledger.reserve(n, *r);
        }
        for (n, k) in &self.containers {
            ledger.add_containers(n, *k);
        }
        ledger
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    Placed(PlacementRecord),
    Infeasible(String),
    Error(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    pub id: u64,
    pub app: String,
    pub revision: u64,
    pub purpose: Purpose,
    pub ledger_version: u64,
    pub outcome: JobOutcome,
    /// `keep` completed with the best placement for the other components, scored.
    pub merged: Option<PlacementRecord>,
    /// Score of the current assignment on the current network.
    pub current_score: Option<f64>,
    /// For each component the best placement puts elsewhere: the score with only it moved
    /// (on the network in the current placement's favour when the job had bounds).
    pub single_moves: Vec<(String, String, f64)>,
    /// The scores the decision to move is taken on, when the job had bounds.
    pub compared: Option<Compared>,
    /// For [`Purpose::Explore`]: what the round found.
    pub explored: Option<Box<ExploreFound>>,
    pub elapsed_us: u64,
}

/// Scores on the network seen in the current placement's favour ([`favour_current`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compared {
    pub current: f64,
    pub best: f64,
    /// `keep` completed with the best placement for the other components, and the best
    /// placement, both on the network seen in the kept components' favour (the incumbents of
    /// that choice).
    pub merged: Option<(f64, f64)>,
}

pub(crate) fn grades(g: &[sched::CriterionGrade]) -> Vec<GradeRecord> {
    g.iter()
        .map(|c| GradeRecord {
            kind: c.kind,
            path: c.path.clone(),
            component: c.component.clone(),
            weight: c.weight,
            grade: c.grade,
        })
        .collect()
}

/// The job's network seen in favour of `assignment` ([`favour_current`]), as the scheduler
/// views it.
fn favoured_on(job: &Job, assignment: &BTreeMap<String, String>) -> Arc<Infra> {
    Arc::new(favour_current(&job.model, &job.application, assignment))
}

/// Runs a placement computation (pure; may take a while: run it off the decision loop).
pub fn run_job(job: &Job) -> JobResult {
    let started = std::time::Instant::now();
    let mut r = match (&job.purpose, &job.current, &job.explore) {
        (Purpose::Explore, Some(current), Some(x)) => explore_job(job, current, x),
        _ => finish_job(job, search_job(job)),
    };
    r.elapsed_us = started.elapsed().as_micros() as u64;
    r
}

/// The search of [`run_job`]: what a `scheduler worker` computes instead (`crate::workers`).
pub fn search_job(job: &Job) -> JobOutcome {
    match sched::place_on(&job.model.infra(), job.application.as_ref(), &job.ledger()) {
        Ok(sched::Outcome::Placed(p)) => JobOutcome::Placed(PlacementRecord {
            assignment: p.assignment.clone(),
            score: p.score,
            criteria: grades(&p.criteria),
            feasible_deployments: p.feasible_deployments,
        }),
        Ok(sched::Outcome::Infeasible(i)) => JobOutcome::Infeasible(i.reason.clone()),
        Err(e) => JobOutcome::Error(e.to_string()),
    }
}

/// The rest of [`run_job`] around a search `outcome`, computed here or by a worker (whose
/// placement was checked and scored again first): the merged placement, the scores of the
/// current assignment and of single moves.
pub fn finish_job(job: &Job, outcome: JobOutcome) -> JobResult {
    let started = std::time::Instant::now();
    let app = job.application.as_ref();
    let infra = job.model.infra();
    // scores compared with one another are computed together, under the search's budget:
    // an unbounded l_min search on estimated links took minutes (`sched::score_all_on`)
    let score_all = |on: &Infra, a: &[&BTreeMap<String, String>]| {
        let a: Vec<BTreeMap<String, String>> = a.iter().map(|x| (*x).clone()).collect();
        sched::score_all_on(on, app, &a)
            .into_iter()
            .map(|r| r.ok())
            .collect::<Vec<_>>()
    };
    // the network in the current placement's favour, when there is one
    let favoured = job.current.as_ref().map(|cur| favoured_on(job, cur));
    let best = match &outcome {
        JobOutcome::Placed(best) => Some(best),
        _ => None,
    };
    // `keep` completed with the best placement for the other components
    let kept = best.filter(|_| !job.keep.is_empty()).map(|best| {
        let mut a = best.assignment.clone();
        for (c, n) in &job.keep {
            if a.contains_key(c) {
                a.insert(c.clone(), n.clone());
            }
        }
        a
    });
    // on the model: the merged placement and the current one
    let on_model = score_all(
        &infra,
        &kept.iter().chain(job.current.as_ref()).collect::<Vec<_>>(),
    );
    let mut on_model = on_model.into_iter();
    let merged = match (best, &kept) {
        (Some(best), Some(a)) => on_model.next().flatten().map(|(s, g)| PlacementRecord {
            assignment: a.clone(),
            score: s,
            criteria: grades(&g),
            feasible_deployments: best.feasible_deployments,
        }),
        _ => None,
    };
    let current_score = job
        .current
        .as_ref()
        .and_then(|_| on_model.next().flatten().map(|x| x.0));
    let mut single_moves = vec![];
    let mut compared = None;
    if let (Some(best), Some(cur), Some(f)) = (best, &job.current, favoured) {
        // on the network in the current placement's favour: the single moves towards the best
        // placement (a re-evaluation), the current placement and the best
        let moves: Vec<(String, String, BTreeMap<String, String>)> = match job.purpose {
            Purpose::Reevaluate => best
                .assignment
                .iter()
                .filter(|(c, n)| cur.get(*c) != Some(*n))
                .map(|(c, n)| {
                    let mut a = cur.clone();
                    a.insert(c.clone(), n.clone());
                    (c.clone(), n.clone(), a)
                })
                .collect(),
            _ => vec![],
        };
        let list: Vec<&BTreeMap<String, String>> = moves
            .iter()
            .map(|m| &m.2)
            .chain([cur, &best.assignment])
            .collect();
        let scores: Vec<Option<f64>> = score_all(&f, &list)
            .into_iter()
            .map(|x| x.map(|x| x.0))
            .collect();
        // a view of the whole network: not held while the next is built (a re-placement's
        // heap at its peak at 50,000 nodes: 142 MiB with both)
        drop(f);
        for ((c, n, _), s) in moves.into_iter().zip(&scores) {
            if let Some(s) = s {
                single_moves.push((c, n, *s));
            }
        }
        if let (Some(c), Some(b)) = (scores[scores.len() - 2], scores[scores.len() - 1]) {
            // both on the network in the kept components' favour
            let merged = merged.as_ref().and_then(|m| {
                let f = favoured_on(job, &m.assignment);
                let on_f = score_all(&f, &[&m.assignment, &best.assignment]);
                on_f[0]
                    .as_ref()
                    .map(|x| x.0)
                    .zip(on_f[1].as_ref().map(|x| x.0))
            });
            compared = Some(Compared {
                current: c,
                best: b,
                merged,
            });
        }
    }
    JobResult {
        merged,
        current_score,
        single_moves,
        compared,
        elapsed_us: started.elapsed().as_micros() as u64,
        ..JobResult::of(job, outcome)
    }
}

impl JobResult {
    /// The result of `job` with `outcome` and nothing else computed.
    fn of(job: &Job, outcome: JobOutcome) -> JobResult {
        JobResult {
            id: job.id,
            app: job.app.clone(),
            revision: job.revision,
            purpose: job.purpose.clone(),
            ledger_version: job.ledger_version,
            outcome,
            merged: None,
            current_score: None,
            single_moves: vec![],
            compared: None,
            explored: None,
            elapsed_us: 0,
        }
    }
}

/// One exploration round around `current` ([`Purpose::Explore`]): the outcome is the
/// placement in force after it, scored on the model (its `feasible_deployments` 0: the
/// engine keeps the current placement's).
fn explore_job(job: &Job, current: &BTreeMap<String, String>, x: &ExploreInput) -> JobResult {
    let app = job.application.as_ref();
    let infra = job.model.infra();
    let r = acoa_scheduler::explore::round(
        &infra,
        app,
        &job.ledger(),
        current,
        x.candidate.as_ref(),
        x.width,
        &sched::explore_options(),
    );
    // the round's own scores: an unbounded one on estimated links can take minutes
    let outcome = match r.next_score {
        Some((score, g)) => JobOutcome::Placed(PlacementRecord {
            assignment: r.next.clone(),
            score,
            criteria: grades(&g),
            feasible_deployments: 0,
        }),
        None => JobOutcome::Error("the placement does not score on the live model".into()),
    };
    let name = |i: u32| infra.node(i).name.clone();
    JobResult {
        current_score: r.current_score,
        explored: Some(Box::new(ExploreFound {
            candidate: r.candidate,
            probe: r.probe.iter().map(|&(a, b)| (name(a), name(b))).collect(),
            proven: r.proven,
        })),
        ..JobResult::of(job, outcome)
    }
}
