//! Evaluations that place nothing new (exploration rounds, re-evaluations: the background)
//! run at most [`super::EngineConfig::background_jobs`] at once; the others wait here, as the
//! names of their applications, not as jobs. A job holds the live model it was given until it
//! ends: at 50,000 nodes a model's views are about 100 MiB, and twenty exploration rounds
//! queued behind one another (7 s of a core each, with 20-component applications) each held
//! the model of the moment they were asked for, one per model period: the control plane's RSS
//! rose from 1.1 to 2.6 GiB (BENCHMARKS.md, "Shared tables, kept deadlines, evaluations that
//! wait"). An evaluation that waits here takes the model of the moment it starts.
//!
//! Invariants: a job counts as running from its [`Action::Schedule`] until its result
//! ([`Engine::on_scheduled`]); an application waits at most once, its purpose kept as its
//! `rerun`; a placement (`Purpose::Place`: a new application or revision, a retry, a node
//! lost) never waits, and it drops the evaluation its application waited for (it places anew,
//! and a new placement starts its evaluations again); the longest waiting starts first.

use std::collections::{BTreeSet, VecDeque};

use super::{Action, Engine, Purpose};

/// The background jobs running and the applications waiting for one.
#[derive(Debug, Default)]
pub(super) struct Background {
    running: BTreeSet<u64>,
    waiting: VecDeque<String>,
}

impl Background {
    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// Applications waiting (at most: one a placement took over since is dropped when its
    /// turn comes).
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

/// Which of two wanted computations of one application wins: a placement over an exploration
/// round over a re-evaluation.
pub(super) fn rank(p: &Purpose) -> u8 {
    match p {
        Purpose::Place(_) => 2,
        Purpose::Explore => 1,
        Purpose::Reevaluate => 0,
    }
}

impl Engine {
    /// Whether a background job of `app` must wait (as many running as allowed): then it
    /// waits, its purpose kept (unless one that wins is kept already).
    pub(super) fn background_waits(&mut self, app: &str, purpose: &Purpose) -> bool {
        if self.background.running.len() < self.cfg.background_jobs {
            return false;
        }
        let Some(a) = self.apps.get_mut(app) else {
            return true;
        };
        if a.rerun.as_ref().is_none_or(|r| rank(purpose) >= rank(r)) {
            a.rerun = Some(purpose.clone());
        }
        if !self.background.waiting.iter().any(|w| w == app) {
            self.background.waiting.push_back(app.to_string());
        }
        true
    }

    /// Job `id` was handed over (`background`: it places nothing new).
    pub(super) fn job_started(&mut self, id: u64, background: bool) {
        if background {
            self.background.running.insert(id);
        }
    }

    /// Job `id`'s result came in: its place goes to the longest waiting application that
    /// still wants a background job and has none running.
    pub(super) fn job_ended(&mut self, id: u64, out: &mut Vec<Action>) {
        if !self.background.running.remove(&id) {
            return;
        }
        while self.background.running.len() < self.cfg.background_jobs {
            let Some(app) = self.background.waiting.pop_front() else {
                break;
            };
            let Some(a) = self.apps.get_mut(&app) else {
                continue; // deleted meanwhile
            };
            if a.job.is_some() || !a.rerun.as_ref().is_some_and(Purpose::in_background) {
                continue; // a placement took over: its result decides what comes next
            }
            let p = a.rerun.take().expect("checked above");
            self.request(&app, p, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::engine::{run_job, EngineConfig, Event, Job};
    use crate::testkit::engine::{first_report, railway, railway_app, reevaluating, EngineSim};

    use super::*;

    fn scheduled(acts: &[Action]) -> Vec<Job> {
        acts.iter()
            .filter_map(|a| match a {
                Action::Schedule(j) => Some((**j).clone()),
                _ => None,
            })
            .collect()
    }

    /// With room for one background job, the re-evaluations of two applications run one
    /// after the other, the second on the model of the moment it starts; a new application's
    /// placement does not wait for them.
    #[test]
    fn evaluations_wait_their_turn_in_the_engine_and_placements_do_not() {
        let c = railway();
        let mut sim = EngineSim::new(EngineConfig {
            background_jobs: 1,
            ..reevaluating()
        });
        sim.join_cluster(&c);
        for app in ["smoke-monitoring", "speed-profiling"] {
            sim.publish(app, railway_app(app));
            assert!(sim.e.placement(app).is_some(), "{app} placed");
        }
        sim.run_jobs = false;
        sim.tick(1000);
        let first = std::mem::take(&mut sim.pending_jobs);
        let names = |js: &[Job]| {
            js.iter()
                .map(|j| (j.app.clone(), j.purpose.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            first.len(),
            1,
            "one re-evaluation at a time: {:?}",
            names(&first)
        );
        assert_eq!(first[0].purpose, Purpose::Reevaluate);
        assert_eq!(
            (sim.e.background.running(), sim.e.background.waiting()),
            (1, 1)
        );

        // a new application is placed at once
        let mut renamed = String::from_utf8(railway_app("speed-profiling")).unwrap();
        renamed = renamed.replace("application: speed-profiling", "application: third");
        let acts = sim.publish("third", renamed.into_bytes());
        let placing = scheduled(&acts);
        assert_eq!(placing.len(), 1);
        assert!(matches!(placing[0].purpose, Purpose::Place(_)));
        sim.pending_jobs.clear();

        // the model moves (a node's usage), then the first re-evaluation ends: the second
        // starts, on the model of now
        let mut r = first_report(&c.nodes[0]);
        r.seq += 1;
        r.load.cpu_millis += 100;
        sim.feed(Event::Report(Box::new(r)));
        let acts = sim.feed(Event::Scheduled(Box::new(run_job(&first[0]))));
        let second = scheduled(&acts);
        assert_eq!(second.len(), 1, "{:?}", names(&second));
        assert_eq!(second[0].purpose, Purpose::Reevaluate);
        assert_ne!(second[0].app, first[0].app);
        assert!(!Arc::ptr_eq(&second[0].model, &first[0].model));
        assert_eq!(
            (sim.e.background.running(), sim.e.background.waiting()),
            (1, 0)
        );
    }
}
