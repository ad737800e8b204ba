//! The bookkeeping of placement jobs sent to `scheduler worker` processes (`serve
//! --scheduler-workers external`): a pure state machine, plain values in, [`Step`]s out, for the
//! I/O in [`crate::workers`] to carry out.
//!
//! A [`Job`] of the engine becomes a signed [`jobs::Job`] ([`frame`]) on `acoa/v1/sched/jobs`;
//! workers take jobs through a shared subscription, so each goes to one worker, and answer on
//! `acoa/v1/sched/results/{worker}`. A result is received through [`check()`] (its module says
//! how); one that fails is dropped with a log line and the job is published again.
//! The engine's optimistic commit then treats a checked result like any other: one that no
//! longer fits the ledger counts a collision and is recomputed.
//!
//! Invariants of [`Dispatch`]:
//! - At most `window` jobs are out at workers at once (published, or a result being checked);
//!   the others wait in submission order.
//! - Every publication has a deadline; a job nobody answers in time, or whose result is refused,
//!   is published again, and after `max_tries` publications it is computed in process.
//! - A result is taken only for an outstanding, published job with the job's nonce, and only
//!   one at a time per job; anything else is dropped with the reason.

pub mod check;
pub mod frame;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use acoa_shared::jobs;
use tracing::warn;

use crate::engine::Job;

pub use check::check;
pub use frame::{encode, wire_job, PackCache};

/// Tunables of the dispatch to workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkersConfig {
    /// A job not answered this long after its publication is published again.
    pub timeout_ms: u64,
    /// Publications of a job before it is computed in process.
    pub max_tries: u32,
    /// Jobs out at workers at once; more wait here.
    pub window: usize,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            timeout_ms: 10_000,
            max_tries: 3,
            window: 16,
        }
    }
}

/// What the I/O loop must do for the dispatch.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Publish this signed job frame on the jobs topic.
    Publish { id: u64, frame: Arc<Vec<u8>> },
    /// Compute the job in process.
    Local { job: Box<Job>, why: String },
    /// A result came for an outstanding job: [`check`] it, then call [`Dispatch::accepted`] or
    /// [`Dispatch::rejected`].
    Check {
        job: Box<Job>,
        result: Box<jobs::JobResult>,
    },
}

#[derive(Debug, Clone)]
struct Pending {
    job: Box<Job>,
    nonce: u128,
    frame: Arc<Vec<u8>>,
    /// Publications so far.
    tries: u32,
    /// When the current publication expires; `None` while waiting for the window.
    deadline: Option<u64>,
    checking: bool,
}

/// Counters for the operator and the benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchStats {
    pub published: u64,
    pub republished: u64,
    pub local: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub dropped: u64,
}

/// The outstanding jobs, their deadlines and tries.
#[derive(Debug, Default)]
pub struct Dispatch {
    cfg: WorkersConfig,
    pending: BTreeMap<u64, Pending>,
    queue: VecDeque<u64>,
    pub stats: DispatchStats,
}

impl Dispatch {
    pub fn new(cfg: WorkersConfig) -> Dispatch {
        Dispatch {
            cfg,
            ..Default::default()
        }
    }

    /// Jobs published and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pending
            .values()
            .filter(|p| p.deadline.is_some() || p.checking)
            .count()
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// A new job, with its nonce and signed frame (or why it cannot go to a worker).
    pub fn submit(
        &mut self,
        now: u64,
        job: Box<Job>,
        nonce: u128,
        frame: Result<Vec<u8>, String>,
    ) -> Vec<Step> {
        let frame = match frame {
            Ok(f) => f,
            Err(why) => {
                self.stats.local += 1;
                return vec![Step::Local { job, why }];
            }
        };
        let id = job.id;
        self.pending.insert(
            id,
            Pending {
                job,
                nonce,
                frame: Arc::new(frame),
                tries: 0,
                deadline: None,
                checking: false,
            },
        );
        self.queue.push_back(id);
        self.pump(now)
    }

    fn pump(&mut self, now: u64) -> Vec<Step> {
        let mut out = vec![];
        while self.in_flight() < self.cfg.window.max(1) {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let Some(p) = self.pending.get_mut(&id) else {
                continue;
            };
            p.tries += 1;
            p.deadline = Some(now + self.cfg.timeout_ms);
            self.stats.published += 1;
            out.push(Step::Publish {
                id,
                frame: p.frame.clone(),
            });
        }
        out
    }

    /// Publishes the job again, or gives it to the process after `max_tries`.
    fn retry(&mut self, now: u64, id: u64, why: &str) -> Vec<Step> {
        let Some(p) = self.pending.get_mut(&id) else {
            return vec![];
        };
        p.checking = false;
        if p.tries >= self.cfg.max_tries {
            let p = self.pending.remove(&id).expect("present");
            self.stats.local += 1;
            let why = format!(
                "{why}; {} publications unanswered or refused, computed in process",
                p.tries
            );
            let mut out = vec![Step::Local { job: p.job, why }];
            out.extend(self.pump(now));
            return out;
        }
        p.tries += 1;
        p.deadline = Some(now + self.cfg.timeout_ms);
        self.stats.republished += 1;
        warn!(
            "placement job {id} for {}: {why}; published again (try {} of {})",
            p.job.app, p.tries, self.cfg.max_tries
        );
        vec![Step::Publish {
            id,
            frame: p.frame.clone(),
        }]
    }

    /// A decoded result; `Err` says why it is dropped (nothing else changes then).
    pub fn on_result(&mut self, r: jobs::JobResult) -> Result<Step, String> {
        let Some(p) = self.pending.get_mut(&r.id) else {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {}: no such job is outstanding (late, duplicate or forged)",
                r.worker, r.id
            ));
        };
        if p.nonce != r.nonce {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {} ({}): the nonce does not match the job's (forged)",
                r.worker, r.id, p.job.app
            ));
        }
        if p.checking || p.deadline.is_none() {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {}: another result is being checked",
                r.worker, r.id
            ));
        }
        p.checking = true;
        Ok(Step::Check {
            job: p.job.clone(),
            result: Box::new(r),
        })
    }

    /// The checked result of job `id` was handed to the engine.
    pub fn accepted(&mut self, now: u64, id: u64) -> Vec<Step> {
        if self.pending.remove(&id).is_some() {
            self.stats.accepted += 1;
        }
        self.pump(now)
    }

    /// The result of job `id` failed its check.
    pub fn rejected(&mut self, now: u64, id: u64, why: &str) -> Vec<Step> {
        self.stats.rejected += 1;
        self.retry(now, id, why)
    }

    /// Time passes: expired publications are retried.
    pub fn on_tick(&mut self, now: u64) -> Vec<Step> {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.checking && p.deadline.is_some_and(|d| now >= d))
            .map(|(id, _)| *id)
            .collect();
        let mut out = vec![];
        let timeout = self.cfg.timeout_ms;
        for id in expired {
            out.extend(self.retry(now, id, &format!("no worker answered within {timeout} ms")));
        }
        out.extend(self.pump(now));
        out
    }
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::{answer, jobs_for};
    use super::*;
    use crate::engine::JobOutcome;

    fn cfg() -> WorkersConfig {
        WorkersConfig {
            timeout_ms: 1000,
            max_tries: 3,
            window: 1,
        }
    }

    fn published(steps: &[Step]) -> Vec<u64> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Publish { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_window_of_jobs_goes_out_and_the_next_follows_an_answer() {
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        let (a, b) = (js[0].clone(), js[1].clone());
        let mut d = Dispatch::new(cfg());
        assert_eq!(
            published(&d.submit(0, a.clone(), 11, Ok(vec![1]))),
            vec![a.id]
        );
        assert!(published(&d.submit(0, b.clone(), 22, Ok(vec![2]))).is_empty());
        assert_eq!((d.in_flight(), d.outstanding()), (1, 2));
        // a result for b (not out yet), or with the wrong nonce, or for no job: dropped
        assert!(d.on_result(answer(&b, 22)).is_err());
        assert!(d.on_result(answer(&a, 99)).is_err());
        assert!(d
            .on_result(answer(
                &Job {
                    id: 77,
                    ..(*a).clone()
                },
                11
            ))
            .is_err());
        assert_eq!(d.stats.dropped, 3);
        let Ok(Step::Check { job, result }) = d.on_result(answer(&a, 11)) else {
            panic!()
        };
        assert_eq!(job.id, a.id);
        // a second answer while the first is being checked is dropped
        assert!(d.on_result(answer(&a, 11)).is_err());
        let r = check(&job, &result).unwrap();
        assert!(
            matches!(r.outcome, JobOutcome::Placed(_)),
            "{:?}",
            r.outcome
        );
        assert_eq!(r, {
            let mut x = crate::engine::run_job(&a);
            x.elapsed_us = r.elapsed_us;
            x
        });
        assert_eq!(published(&d.accepted(10, a.id)), vec![b.id]);
        assert_eq!((d.in_flight(), d.outstanding()), (1, 1));
    }

    #[test]
    fn unanswered_jobs_are_published_again_then_computed_in_process() {
        let js = jobs_for(&["smoke-monitoring"]);
        let mut d = Dispatch::new(cfg());
        assert_eq!(
            published(&d.submit(0, js[0].clone(), 1, Ok(vec![1]))).len(),
            1
        );
        assert!(d.on_tick(999).is_empty());
        assert_eq!(published(&d.on_tick(1000)), vec![js[0].id]);
        assert!(d.on_tick(1999).is_empty());
        assert_eq!(published(&d.on_tick(2000)), vec![js[0].id]);
        let last = d.on_tick(3000);
        assert!(
            matches!(&last[..], [Step::Local { job, why }] if job.id == js[0].id && why.contains("3 publications")),
            "{last:?}"
        );
        assert_eq!(d.outstanding(), 0);
        assert_eq!(d.stats.republished, 2);
        assert_eq!(d.stats.local, 1);
        // a job that cannot be encoded for workers is computed in process at once
        let s = d.submit(0, js[0].clone(), 1, Err("too large".into()));
        assert!(matches!(&s[..], [Step::Local { why, .. }] if why == "too large"));
    }

    #[test]
    fn a_refused_result_publishes_the_job_again() {
        let js = jobs_for(&["smoke-monitoring"]);
        let mut d = Dispatch::new(cfg());
        d.submit(0, js[0].clone(), 1, Ok(vec![1]));
        assert!(d.on_result(answer(&js[0], 1)).is_ok());
        // checking: no deadline runs
        assert!(d.on_tick(5000).is_empty());
        assert_eq!(
            published(&d.rejected(5000, js[0].id, "bad")),
            vec![js[0].id]
        );
        assert_eq!(d.stats.rejected, 1);
        assert!(d.on_result(answer(&js[0], 1)).is_ok());
    }
}
