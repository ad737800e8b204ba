//! The per-application placement algorithms, from `acoa_scheduler`.

use std::time::Duration;

pub use acoa_scheduler::{
    algorithms, score, score_on, CriterionGrade, Infeasible, Ledger, Outcome, Placement,
    ScheduleError,
};
use acoa_shared::model::{Application, Cluster};

/// How long one placement search may take before the best deployment found so far is used.
pub const TIME_BUDGET: Duration = Duration::from_millis(500);

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

/// The search options of every placement: [`TIME_BUDGET`], [`COUNT_BUDGET`].
pub fn options() -> acoa_scheduler::Options {
    acoa_scheduler::Options {
        time_budget: Some(TIME_BUDGET),
        count_budget: COUNT_BUDGET,
        ..Default::default()
    }
}
