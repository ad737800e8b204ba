//! The ACOA placement engine (ACOA section 3.3.3, `spec/model.md`): the facade.
//!
//! A pluggable design in the spirit of the Kubernetes scheduling framework:
//! - constraint plugins ([`filter`]) filter the candidate nodes of each component
//!   (hardware, software, datacenter, layer, arch, min_free_disk_mb, and the resource
//!   request against capacity - usage - [`Ledger`] reservations);
//! - criterion plugins ([`criteria`]) grade whole deployments exactly as model.md says, and
//!   give admissible optimistic grades (upper bounds) for partial ones;
//! - a search finds the deployment of highest score: branch and bound ([`search`]), or
//!   exhaustive enumeration ([`enumerate`], the test oracle and `--enumerate`); [`qos`] puts
//!   them together.
//!
//! The infrastructure is an [`Infra`]: nodes in name order and a sparse link set (a
//! missing link is unknown: a deployment that needs it is infeasible, and the
//! [`Infeasible`] reason names it). Build it once per snapshot ([`Infra::from_cluster`]);
//! [`place`] builds it on every call.
//!
//! The library does no I/O and is deterministic: the same inputs give the same placement
//! (candidates in name order, fixed variable and value orders, ties to the first found;
//! only an explicit [`Options::time_budget`] makes the result depend on the clock).
//!
//! # Algorithms
//!
//! An application's `scheduler:` names the algorithm that places it ([`algorithms`],
//! [`Algorithm`]); [`place`], [`place_on`] and [`score`] dispatch on it. All three use the
//! same constraint plugins ([`filter`]) and the same [`Ledger`] (a component with a resource
//! request goes only where capacity − usage − reservations leave room for it).
//! - `qos` (default, [`qos`]): branch and bound over whole deployments; `score` is G of
//!   model.md, `criteria` its grades.
//! - `topsis` (paper 002, [`topsis::app`]): components placed one by one in declaration order,
//!   each on the candidate node that combined-weight TOPSIS ranks first over the five
//!   utilisations (CPU, memory, bandwidth, disk, I/O) with the component added. `score` is the
//!   mean TOPSIS closeness of the chosen nodes, in [0, 1]. Placement time only (the control
//!   plane does not search it again on re-evaluation).
//! - `network-aware` (paper 003, [`netaware::app`]): components placed one by one (entry first,
//!   then by traffic), each on the node with the best resource headroom and traffic-weighted
//!   latency to its placed peers, from the measured use and traffic of [`Cluster::observed`]
//!   (before any measurement: the declared requests and equal traffic on every channel).
//!   `score` is the mean of the components' scores S(c, node) with everything placed, in
//!   [0, 1]. [`netaware::app::deschedule`] proposes at most one move of a running application.
//!
//! For `topsis` and `network-aware`, [`Placement::criteria`] grades the application's declared
//! criteria as `qos` would grade the chosen deployment (for information: they are not what the
//! algorithm optimised; empty when they cannot be graded, e.g. a missing link), and
//! [`Placement::notes`] says what the decision rested on. Scores of different algorithms are
//! not comparable: compare placements of one application (one algorithm) only. The `score` of
//! both is computed as [`score`] computes it (on the cluster's measured state, without the
//! ledger), so that `place` and `score` agree on the placement they return.

pub mod criteria;
pub mod enumerate;
pub mod estimate;
pub mod explore;
pub mod filter;
pub mod infra;
pub mod ledger;
pub mod netaware;
pub mod problem;
pub mod qos;
pub mod rng;
pub mod search;
#[cfg(feature = "sim")]
pub mod synth;
#[cfg(test)]
mod testkit;
pub mod topsis;

use acoa_shared::model::{Application, Cluster, CriterionKind, ModelError};
use problem::Model;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

pub use acoa_shared::model::Resources;
pub use infra::{Infra, LinkQ};
pub use ledger::Ledger;
pub use qos::lmin_search;

/// The outcome of placing one application: a placement, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Placed(Placement),
    Infeasible(Infeasible),
}

/// The chosen deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Component -> node.
    pub assignment: BTreeMap<String, String>,
    /// G, in [0, 1].
    pub score: f64,
    /// One grade per criterion, in the application's order.
    pub criteria: Vec<CriterionGrade>,
    /// How many feasible deployments there are (see [`Report::feasible_exact`]); for
    /// `topsis` and `network-aware` the product of the candidate counts (an upper bound).
    pub feasible_deployments: u128,
    /// What the decision rested on, one line each, for operators (empty for `qos`): e.g.
    /// that `network-aware` had no measurements yet and used the declared requests.
    pub notes: Vec<String>,
}

/// The grade of one criterion.
#[derive(Debug, Clone, PartialEq)]
pub struct CriterionGrade {
    pub kind: CriterionKind,
    pub path: Option<String>,
    pub component: Option<String>,
    pub weight: f64,
    pub grade: f64,
}

/// No deployment exists; the reason names the component or link that blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Infeasible {
    pub reason: String,
}

/// What went wrong (an application that does not fit is an [`Outcome`], not an error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Model(#[from] ModelError),
    #[error("assignment: component `{0}` is not in the application")]
    UnknownComponent(String),
    #[error("assignment: component `{0}` has no node")]
    Unassigned(String),
    #[error("assignment: node `{0}` is not in the cluster")]
    UnknownNode(String),
    #[error(
        "assignment: node `{node}` does not satisfy the constraints of component `{component}`"
    )]
    Unsatisfied { component: String, node: String },
    #[error("missing link from `{from}` to `{to}` under channel `{channel}`")]
    MissingLink {
        channel: String,
        from: String,
        to: String,
    },
    #[error("no deployment has a link under every channel, so l_min of path `{0}` is undefined")]
    NoReference(String),
    #[error("{0} deployments are too many to enumerate (limit {1})")]
    TooLarge(u128, u128),
    #[error("scheduler: unknown algorithm `{name}` (known: {known})")]
    UnknownAlgorithm { name: String, known: String },
}

/// The placement algorithms this crate provides, by the name `scheduler:` gives them.
pub fn algorithms() -> &'static [&'static str] {
    &[Algorithm::QOS, Algorithm::TOPSIS, Algorithm::NETWORK_AWARE]
}

/// A placement algorithm (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Branch and bound over whole deployments for the criteria of model.md.
    Qos,
    /// Combined-weight TOPSIS over five resource utilisations, component by component.
    Topsis,
    /// Resource headroom and measured traffic × latency, component by component.
    NetworkAware,
}

impl Algorithm {
    pub const QOS: &'static str = "qos";
    pub const TOPSIS: &'static str = "topsis";
    pub const NETWORK_AWARE: &'static str = "network-aware";

    /// The algorithm `name` stands for; an unknown name is an error naming the known ones.
    pub fn from_name(name: &str) -> Result<Algorithm, ScheduleError> {
        match name {
            Self::QOS => Ok(Algorithm::Qos),
            Self::TOPSIS => Ok(Algorithm::Topsis),
            Self::NETWORK_AWARE => Ok(Algorithm::NetworkAware),
            _ => Err(ScheduleError::UnknownAlgorithm {
                name: name.to_string(),
                known: algorithms().join(", "),
            }),
        }
    }

    /// The algorithm an application asks for (`scheduler:`).
    pub fn of(app: &Application) -> Result<Algorithm, ScheduleError> {
        Algorithm::from_name(&app.scheduler)
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Qos => Self::QOS,
            Algorithm::Topsis => Self::TOPSIS,
            Algorithm::NetworkAware => Self::NETWORK_AWARE,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to search (`qos`; `topsis` and `network-aware` do not search and ignore these).
#[derive(Debug, Clone)]
pub struct Options {
    /// Enumerate every deployment instead of branch and bound (the oracle); also fills
    /// [`Report::worst_score`] and [`Report::mean_score`].
    pub enumerate: bool,
    /// Enumeration refuses more deployments than this.
    pub enumerate_limit: u128,
    /// Branch and bound stops this long after the placement started (compiling the model and
    /// the bounds count) with the best deployment found so far ([`Report::proven`] is then
    /// false and [`Report::upper_bound`] gives the gap); the `qos` l_min searches get at most
    /// half of what is left when they start. A search always ends its first descent, so a
    /// placement may end past it.
    pub time_budget: Option<Duration>,
    /// Counting the feasible deployments (needed when links are sparse or requests
    /// apply) gives up after this many search-tree nodes and reports the product of the
    /// candidate counts instead.
    pub count_budget: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            enumerate: false,
            enumerate_limit: 50_000_000,
            time_budget: None,
            count_budget: 100_000,
        }
    }
}

/// A placement with what the search saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    /// Whether `feasible_deployments` is the exact count (otherwise it is the product of
    /// the candidate counts, an upper bound).
    pub feasible_exact: bool,
    /// With enumeration: the worst and mean score over the feasible deployments.
    pub worst_score: Option<f64>,
    pub mean_score: Option<f64>,
    /// Search-tree nodes explored (deployments visited, for enumeration).
    pub explored: u64,
    /// Whether the placement is proven optimal.
    pub proven: bool,
    /// The best upper bound on the optimum the search established (= score when proven).
    pub upper_bound: f64,
    /// Where the time went: compiling the constraints and tables, finding l_min, the
    /// branch and bound, counting the feasible deployments.
    pub phases: Phases,
}

/// Wall-clock time per phase of [`place_on`] (compile: constraint plugins, channel
/// tables and arc consistency).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    pub compile: Duration,
    pub lmin: Duration,
    /// Precomputing the criteria's bound tables (route potentials, forests).
    pub bounds: Duration,
    pub search: Duration,
    pub count: Duration,
}

/// Places `app` on `cluster`, around what `ledger` already reserves, with the algorithm its
/// `scheduler:` names: for `qos` the deployment of highest score (branch and bound, proven
/// optimal).
pub fn place(
    cluster: &Cluster,
    app: &Application,
    ledger: &Ledger,
) -> Result<Outcome, ScheduleError> {
    cluster.validate()?;
    let infra = Infra::from_cluster(cluster);
    Ok(place_on(&infra, app, ledger, &Options::default())?.outcome)
}

/// [`place`] on a prepared [`Infra`], with options and statistics. Dispatches on
/// `app.scheduler`; for `topsis` and `network-aware` the report has `proven` true (the
/// one-by-one decision ran to its end), `feasible_exact` false and `explored` the number of
/// (component, node) pairs scored.
pub fn place_on(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    opts: &Options,
) -> Result<Report, ScheduleError> {
    let t0 = Instant::now();
    app.validate()?;
    match Algorithm::of(app)? {
        Algorithm::Qos => qos::place(infra, app, ledger, opts, t0),
        Algorithm::Topsis => Ok(heuristic_report(infra, app, ledger, topsis::app::place, t0)),
        Algorithm::NetworkAware => Ok(heuristic_report(
            infra,
            app,
            ledger,
            netaware::app::place,
            t0,
        )),
    }
}

/// [`place_on`] within restrictions of the nodes each component may take (`qos` only), all
/// searched on one compile and one l_min, so that their scores compare with one another.
/// `within[r]`: per component name, the node numbers it may take in restriction `r`; a
/// component not named may take any of its candidates. Each restriction's branch and bound
/// gets an even share of what is left of `opts.time_budget` (l_min is searched first, within
/// it). Per restriction the best deployment found, `None` when none was (or for another
/// algorithm); `feasible_deployments` is 0.
pub fn place_within_on(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    within: &[BTreeMap<String, Vec<u32>>],
    opts: &Options,
) -> Result<Vec<Option<Placement>>, ScheduleError> {
    app.validate()?;
    if Algorithm::of(app)? != Algorithm::Qos {
        return Ok(within.iter().map(|_| None).collect());
    }
    let all: Vec<u32> = (0..infra.len() as u32).collect();
    let within: Vec<Vec<Vec<u32>>> = within
        .iter()
        .map(|w| {
            app.components
                .iter()
                .map(|c| w.get(&c.name).cloned().unwrap_or_else(|| all.clone()))
                .collect()
        })
        .collect();
    let limits = search::Limits {
        deadline: opts.time_budget.map(|b| Instant::now() + b),
        max_nodes: None,
    };
    Ok(qos::place_within(infra, app, ledger, &within, limits))
}

/// What a one-by-one algorithm decided: node indices per component, in the application's
/// order, and what it rested on; or why nothing fits.
pub(crate) enum Decided {
    Placed {
        assignment: Vec<u32>,
        notes: Vec<String>,
        explored: u64,
        /// The deployment's score as [`score`] computes it, when the algorithm has it at
        /// hand (saves building its inputs again).
        score: Option<f64>,
    },
    Infeasible(String),
}

type Decide = fn(&Model<'_>, &Application, &Ledger) -> Decided;

/// Runs a one-by-one algorithm and completes its [`Report`].
fn heuristic_report(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    decide: Decide,
    t0: Instant,
) -> Report {
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, ledger, &constraints);
    if let Some(r) = model.comps.iter().find_map(|c| c.empty_reason.clone()) {
        return infeasible(r);
    }
    let compile = t0.elapsed();
    let t = Instant::now();
    let decided = decide(&model, app, ledger);
    let search = t.elapsed();
    let (assignment, notes, explored, known) = match decided {
        Decided::Infeasible(r) => return infeasible(r),
        Decided::Placed {
            assignment,
            notes,
            explored,
            score,
        } => (assignment, notes, explored, score),
    };
    let named: BTreeMap<String, String> = model
        .comps
        .iter()
        .zip(&assignment)
        .map(|(c, n)| (c.name.clone(), infra.node(*n).name.clone()))
        .collect();
    let (score, criteria) = match score_known(infra, app, &named, known) {
        Ok(x) => x,
        Err(e) => return infeasible(format!("the placement found cannot be scored: {e}")),
    };
    let feasible = model
        .comps
        .iter()
        .map(|c| c.cand.len() as u128)
        .fold(1u128, |p, k| p.saturating_mul(k));
    Report {
        outcome: Outcome::Placed(Placement {
            assignment: named,
            score,
            criteria,
            feasible_deployments: feasible,
            notes,
        }),
        feasible_exact: false,
        worst_score: None,
        mean_score: None,
        explored,
        proven: true,
        upper_bound: score,
        phases: Phases {
            compile,
            search,
            ..Phases::default()
        },
    }
}

pub(crate) fn infeasible(reason: String) -> Report {
    Report {
        outcome: Outcome::Infeasible(Infeasible { reason }),
        feasible_exact: true,
        worst_score: None,
        mean_score: None,
        explored: 0,
        proven: true,
        upper_bound: 0.0,
        phases: Phases::default(),
    }
}

/// The score of a given deployment (component -> node) and its grades, by the algorithm
/// `app.scheduler` names: for `qos` by model.md (resource requests are not checked;
/// constraints and links are); for `topsis` and `network-aware` see the crate docs
/// (constraints are checked; links and requests are not). Deterministic.
pub fn score(
    cluster: &Cluster,
    app: &Application,
    assignment: &BTreeMap<String, String>,
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    cluster.validate()?;
    app.validate()?;
    let infra = Infra::from_cluster(cluster);
    score_on(&infra, app, assignment)
}

/// [`score`] on a prepared [`Infra`] (the application is taken as valid).
pub fn score_on(
    infra: &Infra,
    app: &Application,
    assignment: &BTreeMap<String, String>,
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    score_known(infra, app, assignment, None)
}

/// [`score_on`] of several deployments of `app` on one `infra`, in their order: for `qos` the
/// model is compiled and l_min searched once (what scoring one deployment costs most),
/// instead of once per deployment; the same results as [`score_on`] each. `budget`: the l_min
/// search stops after it (then l_min is the shortest route found, not proven the least: the
/// scores compare with one another, not with [`score_on`]'s); `None`: no limit.
pub fn score_all_on(
    infra: &Infra,
    app: &Application,
    assignments: &[BTreeMap<String, String>],
    budget: Option<Duration>,
) -> Vec<Result<(f64, Vec<CriterionGrade>), ScheduleError>> {
    score_with_moves_on(infra, app, assignments, &BTreeMap::new(), &[], budget)
}

/// [`score_all_on`] of `assignments` and of the single moves around `around`, all on one
/// l_min: the scores of `assignments`, then one per move. A move `(c, n)` is `around` with
/// the component `app.components[c]` on node `n` (a node of `infra`); its placement is held
/// as one node number per component, never as names (an exploration round of a
/// 20-component application at 50,000 nodes scores 40,960 moves).
pub fn score_with_moves_on(
    infra: &Infra,
    app: &Application,
    assignments: &[BTreeMap<String, String>],
    around: &BTreeMap<String, String>,
    moves: &[(usize, u32)],
    budget: Option<Duration>,
) -> Vec<Result<(f64, Vec<CriterionGrade>), ScheduleError>> {
    let component = |c: usize| {
        app.components
            .get(c)
            .map(|x| &x.name)
            .ok_or_else(|| ScheduleError::UnknownComponent(format!("number {c}")))
    };
    if !matches!(Algorithm::of(app), Ok(Algorithm::Qos)) {
        let mut out: Vec<_> = assignments
            .iter()
            .map(|a| score_on(infra, app, a))
            .collect();
        out.extend(moves.iter().map(|&(c, n)| {
            let mut a = around.clone();
            a.insert(component(c)?.clone(), infra.node(n).name.clone());
            score_on(infra, app, &a)
        }));
        return out;
    }
    let ledger = Ledger::new();
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, &ledger, &constraints);
    // (no moves: `around` is not read)
    let base = if moves.is_empty() {
        Err(ScheduleError::Unassigned(String::new()))
    } else {
        resolve(infra, &model, around)
    };
    let mut resolved: Vec<Result<Vec<u32>, ScheduleError>> = assignments
        .iter()
        .map(|a| resolve(infra, &model, a))
        .collect();
    resolved.extend(moves.iter().map(|&(c, n)| {
        let base = base.as_ref().map_err(Clone::clone)?;
        let name = component(c)?;
        let i = model.comp_index[name];
        may_run_on(infra, &model.comps[i], n)?;
        let mut d = base.clone();
        d[i] = n;
        Ok(d)
    }));
    score_resolved(infra, app, &model, resolved, budget)
}

/// The `qos` scores of deployments resolved to node numbers (an error stays that error), on
/// one l_min search stopped after `budget`.
fn score_resolved(
    infra: &Infra,
    app: &Application,
    model: &Model<'_>,
    resolved: Vec<Result<Vec<u32>, ScheduleError>>,
    budget: Option<Duration>,
) -> Vec<Result<(f64, Vec<CriterionGrade>), ScheduleError>> {
    let ok: Vec<&[u32]> = resolved.iter().filter_map(|r| r.as_deref().ok()).collect();
    let limits = search::Limits {
        deadline: budget.map(|b| Instant::now() + b),
        max_nodes: None,
    };
    let mut scored = qos::score_all(infra, app, model, &ok, limits).into_iter();
    resolved
        .into_iter()
        .map(|r| match r {
            Ok(_) => scored.next().expect("one score per resolved deployment"),
            Err(e) => Err(e),
        })
        .collect()
}

/// [`score_on`], taking a `topsis` or `network-aware` score already known as the score.
fn score_known(
    infra: &Infra,
    app: &Application,
    assignment: &BTreeMap<String, String>,
    known: Option<f64>,
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    let algorithm = Algorithm::of(app)?;
    let ledger = Ledger::new();
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, &ledger, &constraints);
    let a = resolve(infra, &model, assignment)?;
    let s = match algorithm {
        Algorithm::Qos => return qos::score(infra, app, &model, &a),
        Algorithm::Topsis => known.unwrap_or_else(|| topsis::app::score(&model, app, &ledger, &a)),
        Algorithm::NetworkAware => {
            known.unwrap_or_else(|| netaware::app::score(&model, app, &ledger, &a))
        }
    };
    let grades = qos::score(infra, app, &model, &a)
        .map(|(_, g)| g)
        .unwrap_or_default();
    Ok((s, grades))
}

/// The node index of each component (in the application's order), checked: every component
/// of the application has a node of the cluster that satisfies its constraints.
pub(crate) fn resolve(
    infra: &Infra,
    model: &Model<'_>,
    assignment: &BTreeMap<String, String>,
) -> Result<Vec<u32>, ScheduleError> {
    for k in assignment.keys() {
        if !model.comp_index.contains_key(k) {
            return Err(ScheduleError::UnknownComponent(k.clone()));
        }
    }
    let mut a = Vec::with_capacity(model.comps.len());
    for c in &model.comps {
        let n = assignment
            .get(&c.name)
            .ok_or_else(|| ScheduleError::Unassigned(c.name.clone()))?;
        let i = infra
            .index_of(n)
            .ok_or_else(|| ScheduleError::UnknownNode(n.clone()))?;
        may_run_on(infra, c, i)?;
        a.push(i);
    }
    Ok(a)
}

/// Whether component `c` may run on node `n` (its `requires`), else that error.
fn may_run_on(infra: &Infra, c: &problem::Comp, n: u32) -> Result<(), ScheduleError> {
    // (sorted: the fleet's nodes in order, filtered)
    if c.req_cand.binary_search(&n).is_ok() {
        return Ok(());
    }
    Err(ScheduleError::Unsatisfied {
        component: c.name.clone(),
        node: infra.node(n).name.clone(),
    })
}
