//! The per-application placement algorithms, from `acoa_scheduler`.

use std::time::Duration;

pub use acoa_scheduler::{
    algorithms, score, CriterionGrade, Infeasible, Ledger, Outcome, Placement, ScheduleError,
};
use acoa_shared::model::{Application, Cluster};

/// How long one placement search may take before the best deployment found so far is used.
pub const TIME_BUDGET: Duration = Duration::from_millis(500);

/// How long each search of an exploration round may take ([`explore_options`]). A round runs
/// in the background, after the application is placed, on a core placements never wait for
/// (`workers::background_slots`), so it is not on the way to any desired state. On a
/// 10,000-node fleet the searches of a 20-component application end at the budget rather than
/// proven: with [`TIME_BUDGET`] two such applications ended 1.04 and 1.67 % below the
/// placement on every pair measured, with 2 s -0.16 and 0.97 % (BENCHMARKS.md, "A longer
/// search for the explorations"). A search that is proven sooner ends sooner.
pub const EXPLORE_TIME_BUDGET: Duration = Duration::from_secs(2);

/// Search-tree nodes spent counting feasible deployments before an upper bound is given.
pub const COUNT_BUDGET: u64 = 100_000;

/// Places `app` with the algorithm its definition names, within [`TIME_BUDGET`].
/// `scheduler worker` (scheduler/src/worker.rs) computes exactly this on the jobs it takes.
pub fn place(
    cluster: &Cluster,
    app: &Application,
    ledger: &Ledger,
) -> Result<Outcome, ScheduleError> {
    place_on(&acoa_scheduler::Infra::from_cluster(cluster), app, ledger)
}

/// [`place`] on a prepared view of the cluster.
pub fn place_on(
    infra: &acoa_scheduler::Infra,
    app: &Application,
    ledger: &Ledger,
) -> Result<Outcome, ScheduleError> {
    Ok(acoa_scheduler::place_on(infra, app, ledger, &options())?.outcome)
}

/// The score of one placement of `app` on `infra`, as [`score_all_on`] gives it (never an
/// unbounded l_min search: on estimated links one took minutes).
pub fn score_on(
    infra: &acoa_scheduler::Infra,
    app: &Application,
    assignment: &std::collections::BTreeMap<String, String>,
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    score_all_on(infra, app, std::slice::from_ref(assignment))
        .pop()
        .expect("one score per placement")
}

/// The scores of several placements of `app` on one network, comparable with one another
/// (one l_min search, stopped after [`TIME_BUDGET`]: on estimated links an unbounded one can
/// take minutes).
pub fn score_all_on(
    infra: &acoa_scheduler::Infra,
    app: &Application,
    assignments: &[std::collections::BTreeMap<String, String>],
) -> Vec<Result<(f64, Vec<CriterionGrade>), ScheduleError>> {
    acoa_scheduler::score_all_on(infra, app, assignments, Some(TIME_BUDGET))
}

/// The search options of every placement: [`TIME_BUDGET`], [`COUNT_BUDGET`].
pub fn options() -> acoa_scheduler::Options {
    acoa_scheduler::Options {
        time_budget: Some(TIME_BUDGET),
        count_budget: COUNT_BUDGET,
        ..Default::default()
    }
}

/// The search options of an exploration round's searches and scores: [`EXPLORE_TIME_BUDGET`].
pub fn explore_options() -> acoa_scheduler::Options {
    acoa_scheduler::Options {
        time_budget: Some(EXPLORE_TIME_BUDGET),
        ..options()
    }
}
