//! How a worker's result is received: never trusted blindly. Its assignment must name every
//! component and only known nodes, satisfy every constraint and link, and fit the resources
//! and the containers left on the job's snapshot and ledger; the score and grades are computed
//! here again.
//!
//! Invariant: a worker's placement reaches the engine only if it holds on the job's own
//! snapshot and ledger, and with the score and grades computed here; an infeasibility is taken
//! as said (it cannot be checked short of searching).

use std::collections::BTreeMap;
use std::time::Instant;

use acoa_scheduler::ledger::NODE_CONTAINER_LIMIT;
use acoa_shared::jobs::{self, ResultOutcome};
use tracing::warn;

use crate::engine::{finish_job, grades, Job, JobOutcome, JobResult};
use crate::sched;
use crate::status::PlacementRecord;

/// Receives a worker's result for `job`: checks it against the job's snapshot and ledger,
/// scores it again, and completes it as [`crate::engine::run_job`] would have. `Err` says why it is refused.
pub fn check(job: &Job, r: &jobs::JobResult) -> Result<JobResult, String> {
    let started = Instant::now();
    let outcome = match &r.outcome {
        ResultOutcome::Placed {
            assignment,
            score,
            feasible_deployments,
        } => {
            let app = job.application.as_ref();
            if let Some(why) =
                overcommitted(job, assignment).or_else(|| overfilled(job, assignment))
            {
                return Err(format!("the placement does not fit: {why}"));
            }
            let (s, g) = sched::score_on(&job.model.infra(), app, assignment)
                .map_err(|e| format!("the placement does not hold: {e}"))?;
            if (s - score).abs() > 1e-9 {
                warn!(
                    "worker {} scored job {} ({}) {score:.9}, recomputed {s:.9}: the recomputed score is used",
                    r.worker, r.id, job.app
                );
            }
            JobOutcome::Placed(PlacementRecord {
                assignment: assignment.clone(),
                score: s,
                criteria: grades(&g),
                feasible_deployments: *feasible_deployments,
            })
        }
        // An infeasibility cannot be checked short of searching: it is taken as said (the job
        // is retried when a node joins and on every re-evaluation).
        ResultOutcome::Infeasible(why) => JobOutcome::Infeasible(why.clone()),
        ResultOutcome::Error(e) => return Err(format!("the worker failed: {e}")),
    };
    let mut res = finish_job(job, outcome);
    res.elapsed_us = r.elapsed_us + started.elapsed().as_micros() as u64;
    Ok(res)
}

/// Whether the requests placed on each node exceed what it has left (capacity - usage - what
/// other applications reserve), the scheduler's resource rule.
fn overcommitted(job: &Job, assignment: &BTreeMap<String, String>) -> Option<String> {
    let mut want: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for c in &job.application.components {
        let (Some(r), Some(n)) = (c.resources, assignment.get(&c.name)) else {
            continue;
        };
        let e = want.entry(n.as_str()).or_default();
        e.0 += r.cpu_millis;
        e.1 += r.memory_mb;
    }
    for (n, (cpu, mem)) in want {
        let node = job.model.node(n)?;
        let res = job.reserved.get(n).copied().unwrap_or_default();
        let left_cpu =
            node.capacity.cpu_millis as i64 - node.usage.cpu_millis as i64 - res.cpu_millis as i64;
        let left_mem =
            node.capacity.memory_mb as i64 - node.usage.memory_mb as i64 - res.memory_mb as i64;
        if cpu as i64 > left_cpu || mem as i64 > left_mem {
            return Some(format!(
                "node {n} has {left_cpu} mCPU and {left_mem} MB left, the placement asks {cpu} mCPU and {mem} MB"
            ));
        }
    }
    None
}

/// Whether the placement gives a node more containers than its room in the job's ledger
/// (the scheduler's container rule: at most [`NODE_CONTAINER_LIMIT`] per node, counting other
/// applications').
fn overfilled(job: &Job, assignment: &BTreeMap<String, String>) -> Option<String> {
    let mut put: BTreeMap<&str, u32> = BTreeMap::new();
    for n in assignment.values() {
        *put.entry(n.as_str()).or_default() += 1;
    }
    let ledger = job.ledger();
    put.into_iter().find_map(|(n, k)| {
        (k > ledger.container_room(n)).then(|| {
            format!(
                "node {n} already runs {} containers of other applications and the placement adds {k}, over the {NODE_CONTAINER_LIMIT} a node's desired state carries",
                ledger.containers(n)
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use acoa_shared::model;

    use super::super::fixtures::{answer, jobs_for};
    use super::*;

    #[test]
    fn results_are_checked_against_the_snapshot_and_scored_again() {
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        let job = &js[0];
        let good = answer(job, 1);
        let ResultOutcome::Placed {
            assignment, score, ..
        } = good.outcome.clone()
        else {
            panic!()
        };
        let with = |a: BTreeMap<String, String>, s: f64| jobs::JobResult {
            outcome: ResultOutcome::Placed {
                assignment: a,
                score: s,
                feasible_deployments: 1,
            },
            ..good.clone()
        };
        // a wrong score is replaced by the recomputed one
        let r = check(job, &with(assignment.clone(), 1.0)).unwrap();
        let JobOutcome::Placed(p) = &r.outcome else {
            panic!()
        };
        assert!((p.score - score).abs() < 1e-12);
        // an unknown node, a missing component, an extra component
        let first = assignment.keys().next().unwrap().clone();
        let mut a = assignment.clone();
        a.insert(first.clone(), "nowhere".into());
        assert!(check(job, &with(a, score)).unwrap_err().contains("nowhere"));
        let mut a = assignment.clone();
        a.remove(&first);
        assert!(check(job, &with(a, score)).unwrap_err().contains(&first));
        let mut a = assignment.clone();
        a.insert("intruder".into(), "n01".into());
        assert!(check(job, &with(a, score))
            .unwrap_err()
            .contains("intruder"));
        // a node that does not satisfy a component's constraints
        let sensor = job
            .application
            .components
            .iter()
            .find(|c| !c.requires.hardware.is_empty())
            .unwrap();
        let mut a = assignment.clone();
        let bad = job
            .model
            .nodes()
            .iter()
            .find(|n| !n.satisfies(&sensor.requires))
            .unwrap();
        a.insert(sensor.name.clone(), bad.name.clone());
        assert!(check(job, &with(a, score)).is_err());
        // more than a node has left
        let mut big = (*js[0]).clone();
        let mut app = (*big.application).clone();
        app.components[0].resources = Some(model::Resources {
            cpu_millis: 1_000_000,
            ..Default::default()
        });
        big.application = Arc::new(app);
        assert!(check(&big, &with(assignment.clone(), score))
            .unwrap_err()
            .contains("does not fit"));
        // more containers than a node has room for, counting other applications'
        let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
        for n in assignment.values() {
            *per_node.entry(n.clone()).or_default() += 1;
        }
        let (busy, k) = per_node.iter().max_by_key(|(_, k)| **k).unwrap();
        let mut full = (*js[0]).clone();
        full.containers = [(busy.clone(), NODE_CONTAINER_LIMIT - k + 1)].into();
        let e = check(&full, &with(assignment.clone(), score)).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        assert!(e.contains(&format!("node {busy} already runs")), "{e}");
        assert!(e.contains("32 a node's desired state carries"), "{e}");
        // exactly up to the limit is taken
        full.containers = [(busy.clone(), NODE_CONTAINER_LIMIT - k)].into();
        assert!(check(&full, &with(assignment.clone(), score)).is_ok());
        // a worker error is refused (the job goes out again), an infeasibility is taken
        let err = jobs::JobResult {
            outcome: ResultOutcome::Error("boom".into()),
            ..good.clone()
        };
        assert!(check(job, &err).unwrap_err().contains("boom"));
        let inf = jobs::JobResult {
            outcome: ResultOutcome::Infeasible("no gps".into()),
            ..good.clone()
        };
        assert_eq!(
            check(job, &inf).unwrap().outcome,
            JobOutcome::Infeasible("no gps".into())
        );
    }
}
