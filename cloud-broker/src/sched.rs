//! The per-application placement algorithms, from `acoa_scheduler`.

use std::time::Duration;

pub use acoa_scheduler::{
    algorithms, score, CriterionGrade, Infeasible, Ledger, Outcome, Placement, ScheduleError,
};
use acoa_shared::model::{Application, Cluster};

/// How long one placement search may take before the best deployment found so far is used.
pub const TIME_BUDGET: Duration = Duration::from_millis(500);

/// Places `app` with the algorithm its definition names, within [`TIME_BUDGET`].
pub fn place(
    cluster: &Cluster,
    app: &Application,
    ledger: &Ledger,
) -> Result<Outcome, ScheduleError> {
    let infra = acoa_scheduler::Infra::from_cluster(cluster);
    let opts = acoa_scheduler::Options {
        time_budget: Some(TIME_BUDGET),
        count_budget: 100_000,
        ..Default::default()
    };
    Ok(acoa_scheduler::place_on(&infra, app, ledger, &opts)?.outcome)
}
