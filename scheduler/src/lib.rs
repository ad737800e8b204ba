//! The ACOA placement engine (ACOA section 3.3.3, `spec/model.md`).
//!
//! A pluggable design in the spirit of the Kubernetes scheduling framework:
//! - constraint plugins ([`filter`]) filter the candidate nodes of each component
//!   (hardware, software, datacenter, layer, arch, min_free_disk_mb, and the resource
//!   request against capacity - usage - [`Ledger`] reservations);
//! - criterion plugins ([`criteria`]) grade whole deployments exactly as model.md says, and
//!   give admissible optimistic grades (upper bounds) for partial ones;
//! - a search finds the deployment of highest score: branch and bound ([`search`]), or
//!   exhaustive enumeration ([`enumerate`], the test oracle and `--enumerate`).
//!
//! [`place_on`] runs: compile ([`problem::Model`]: candidates per component, channels as
//! index pairs; [`problem::Space`]: per-channel best-link tables, then arc consistency
//! over the links) -> l_min of every response-time path (its own exact search over the
//! deployments that satisfy `requires` and have every link, resource requests aside) ->
//! bound tables (route potentials, reliability forests) -> branch and bound -> count of
//! the feasible deployments (exact when cheap, else an upper bound, said so).
//!
//! The infrastructure is an [`Infra`]: nodes in name order and a sparse link set (a
//! missing link is unknown: a deployment that needs it is infeasible, and the
//! [`Infeasible`] reason names it). Build it once per snapshot ([`Infra::from_cluster`]);
//! [`place`] builds it on every call.
//!
//! Optimality is exact up to [`search::EPS`] (1e-12): a subtree is cut unless its bound
//! beats the incumbent by more than that, for the score and for each l_min alike.
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
//! - `qos` (default): the search above; `score` is G of model.md, `criteria` its grades.
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
pub mod filter;
pub mod infra;
pub mod ledger;
pub mod netaware;
pub mod problem;
pub mod search;
pub mod synth;
pub mod topsis;

use acoa_shared::model::{Application, Cluster, CriterionKind, ModelError};
use criteria::{Ctx, Objective};
use problem::{Model, Space};
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

pub use acoa_shared::model::Resources;
pub use infra::{Infra, LinkQ};
pub use ledger::Ledger;

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
    /// Branch and bound stops after this long with the best deployment found so far
    /// ([`Report::proven`] is then false and [`Report::upper_bound`] gives the gap).
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
        Algorithm::Qos => place_qos(infra, app, ledger, opts, t0),
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

/// The `qos` search of [`place_on`].
fn place_qos(
    infra: &Infra,
    app: &Application,
    ledger: &Ledger,
    opts: &Options,
    t0: Instant,
) -> Result<Report, ScheduleError> {
    let constraints = filter::default_constraints();
    let model = Model::compile(infra, app, ledger, &constraints);
    if let Some(r) = model.comps.iter().find_map(|c| c.empty_reason.clone()) {
        return Ok(infeasible(r));
    }
    let space =
        match Space::build_consistent(&model, model.comps.iter().map(|c| c.cand.clone()).collect())
        {
            Ok(s) => s,
            Err(c) => {
                let full =
                    Space::build(&model, model.comps.iter().map(|c| c.cand.clone()).collect());
                let reason = dead_channel(&model, &full).unwrap_or_else(|| unsupported(&model, c));
                return Ok(infeasible(reason));
            }
        };
    let limits = search::Limits {
        deadline: opts.time_budget.map(|b| Instant::now() + b),
        max_nodes: None,
    };
    let remaining = model.has_requests().then(|| model.remaining(ledger));
    if opts.enumerate {
        let total = space.product();
        if total > opts.enumerate_limit {
            return Err(ScheduleError::TooLarge(total, opts.enumerate_limit));
        }
        let lmin = enumerate::lmin(app, &model);
        if let Some(r) = missing_reference(app, &lmin) {
            return Ok(infeasible(r));
        }
        let objective = Objective::for_app(app, &model, &space, &lmin);
        let e = enumerate::run(&model, &space, &objective, remaining.as_deref());
        let Some((best, _)) = e.best else {
            return Ok(infeasible(no_deployment(
                &model,
                e.first_missing,
                remaining.is_some(),
            )));
        };
        let placement = make_placement(app, &model, &space, &objective, &best, e.feasible);
        let score = placement.score;
        return Ok(Report {
            outcome: Outcome::Placed(placement),
            feasible_exact: true,
            worst_score: Some(e.worst),
            mean_score: Some(e.mean),
            explored: space.product().min(u64::MAX as u128) as u64,
            proven: true,
            upper_bound: score,
            phases: Phases::default(),
        });
    }
    let mut phases = Phases {
        compile: t0.elapsed(),
        ..Phases::default()
    };
    let t = Instant::now();
    let (lmin, lmin_proven, mut explored, pots) = lmin_search_pots(app, &model, &space, limits);
    phases.lmin = t.elapsed();
    if let Some(r) = missing_reference(app, &lmin) {
        if lmin_proven {
            return Ok(infeasible(r));
        }
    }
    let t = Instant::now();
    let objective = Objective::for_app_with(app, &model, &space, &lmin, &pots);
    phases.bounds = t.elapsed();
    let t = Instant::now();
    let found = search::branch_and_bound(&model, &space, &objective, remaining.clone(), limits);
    explored += found.explored;
    phases.search = t.elapsed();
    let Some((best, _)) = found.best else {
        let reason = if found.proven {
            no_deployment(&model, found.first_missing, remaining.is_some())
        } else {
            "no deployment found within the time budget".to_string()
        };
        return Ok(infeasible(reason));
    };
    let t = Instant::now();
    let largest = space
        .cand
        .iter()
        .map(|c| c.len() as u128)
        .max()
        .unwrap_or(1);
    let (feasible, feasible_exact) = if remaining.is_none() && space.links_complete(&model) {
        (space.product(), true)
    } else if remaining.is_some() && space.product() / largest.max(1) > opts.count_budget as u128 {
        // With requests the count visits every feasible deployment but the last
        // component's: hopeless within the budget, so do not start.
        (space.product(), false)
    } else {
        match search::count(&model, &space, &objective, remaining, opts.count_budget) {
            Some(n) => (n, true),
            None => (space.product(), false),
        }
    };
    phases.count = t.elapsed();
    let placement = make_placement(app, &model, &space, &objective, &best, feasible);
    let score = placement.score;
    let proven = found.proven && lmin_proven;
    Ok(Report {
        outcome: Outcome::Placed(placement),
        feasible_exact,
        worst_score: None,
        mean_score: None,
        explored,
        proven,
        upper_bound: if proven {
            score
        } else {
            found.upper_bound.max(score)
        },
        phases,
    })
}

/// l_min of every response-time criterion by branch and bound (minimise the path's
/// longest route over the deployments that satisfy `requires` and have every link,
/// resource requests aside). Returns the values, whether all are proven, and the
/// search-tree nodes explored.
pub fn lmin_search(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    limits: search::Limits,
) -> (Vec<Option<f64>>, bool, u64) {
    let (l, p, e, _) = lmin_search_pots(app, model, space, limits);
    (l, p, e)
}

type Pots = Vec<Option<std::sync::Arc<criteria::RtPot>>>;

/// [`lmin_search`], also returning the route potentials it computed (per criterion
/// index), which the main search reuses.
fn lmin_search_pots(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    limits: search::Limits,
) -> (Vec<Option<f64>>, bool, u64, Pots) {
    let mut out = vec![None; app.criteria.len()];
    let mut pots: Pots = vec![None; app.criteria.len()];
    let mut proven = true;
    let mut explored = 0;
    if !app
        .criteria
        .iter()
        .any(|c| c.kind == CriterionKind::MinE2eResponseTime)
    {
        return (out, true, 0, Vec::new());
    }
    let same = model.comps.iter().all(|c| c.cand.len() == c.req_cand.len());
    let owned;
    let req_space = if same {
        space
    } else {
        match Space::build_consistent(
            model,
            model.comps.iter().map(|c| c.req_cand.clone()).collect(),
        ) {
            Ok(s) => owned = s,
            Err(_) => return (out, true, 0, Vec::new()),
        }
        &owned
    };
    for (j, cr) in app.criteria.iter().enumerate() {
        if cr.kind != CriterionKind::MinE2eResponseTime {
            continue;
        }
        let pname = cr.path.as_deref().unwrap_or_default();
        let chans = criteria::path_channels(app, model, pname);
        let ctx = Ctx {
            model,
            space: req_space,
        };
        let rt = criteria::ResponseTime::new(model, pname, &chans, None);
        let pot = std::sync::Arc::new(rt.potentials(&ctx));
        pots[j] = Some(pot.clone());
        let rt = rt.with_pot(pot);
        let obj = Objective::new(model.comps.len(), vec![Box::new(rt)], vec![1.0]);
        let found = search::branch_and_bound(model, req_space, &obj, None, limits);
        explored += found.explored;
        proven &= found.proven;
        if let Some((a, _)) = found.best {
            let rt = criteria::ResponseTime::new(model, pname, &chans, None);
            let ctx = Ctx {
                model,
                space: req_space,
            };
            out[j] = Some(rt.latency(&ctx, &a));
        }
    }
    (out, proven, explored, pots)
}

fn no_deployment(
    model: &Model<'_>,
    first_missing: Option<(usize, u32, u32)>,
    requests: bool,
) -> String {
    match first_missing {
        Some((ch, f, t)) if !requests => missing_reason(model, ch, f, t),
        Some((ch, f, t)) => format!(
            "the resource requests of the components do not fit together on the candidate nodes with a link under every channel ({})",
            missing_reason(model, ch, f, t)
        ),
        None => "the resource requests of the components do not fit together on the candidate nodes".to_string(),
    }
}

fn infeasible(reason: String) -> Report {
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

fn missing_reason(model: &Model<'_>, ch: usize, f: u32, t: u32) -> String {
    let c = &model.chans[ch];
    format!(
        "no deployment has a link under every channel: missing link from `{}` to `{}` under channel `{}` (`{}` -> `{}`)",
        model.infra.node(f).name,
        model.infra.node(t).name,
        c.name,
        model.comps[c.from].name,
        model.comps[c.to].name
    )
}

/// Why arc consistency emptied the candidates of component `c`.
fn unsupported(model: &Model<'_>, c: usize) -> String {
    let chans: Vec<&str> = model.chans_of[c]
        .iter()
        .map(|ch| model.chans[*ch].name.as_str())
        .collect();
    format!(
        "component `{}` has no candidate node with a link under each of its channels ({}) to a node its other ends can take: the links are missing",
        model.comps[c].name,
        chans.join(", ")
    )
}

/// A channel none of whose candidate pairs has a link.
fn dead_channel(model: &Model<'_>, space: &Space) -> Option<String> {
    model
        .chans
        .iter()
        .zip(&space.tables)
        .find(|(_, t)| t.linked_pairs == 0)
        .map(|(c, _)| {
            let f = space.cand[c.from][0];
            let t = if c.from == c.to { f } else { space.cand[c.to][0] };
            format!(
                "channel `{}`: no candidate node of `{}` has a link to a candidate node of `{}` (missing link from `{}` to `{}`, among others)",
                c.name,
                model.comps[c.from].name,
                model.comps[c.to].name,
                model.infra.node(f).name,
                model.infra.node(t).name
            )
        })
}

fn missing_reference(app: &Application, lmin: &[Option<f64>]) -> Option<String> {
    app.criteria
        .iter()
        .zip(lmin)
        .find(|(c, l)| c.kind == CriterionKind::MinE2eResponseTime && l.is_none())
        .map(|(c, _)| {
            format!(
                "no deployment that satisfies the constraints has a link under every channel (path `{}` has no reference latency)",
                c.path.as_deref().unwrap_or_default()
            )
        })
}

fn make_placement(
    app: &Application,
    model: &Model<'_>,
    space: &Space,
    objective: &Objective,
    a: &[u32],
    feasible: u128,
) -> Placement {
    let ctx = Ctx { model, space };
    let grades = objective.grades(&ctx, a);
    let score = objective.combine(&grades);
    Placement {
        assignment: model
            .comps
            .iter()
            .zip(a)
            .map(|(c, n)| (c.name.clone(), model.infra.node(*n).name.clone()))
            .collect(),
        score,
        criteria: app
            .criteria
            .iter()
            .zip(grades)
            .map(|(c, g)| CriterionGrade {
                kind: c.kind,
                path: c.path.clone(),
                component: c.component.clone(),
                weight: c.weight,
                grade: g,
            })
            .collect(),
        feasible_deployments: feasible,
        notes: Vec::new(),
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
        Algorithm::Qos => return qos_score(infra, app, &model, &a),
        Algorithm::Topsis => known.unwrap_or_else(|| topsis::app::score(&model, app, &ledger, &a)),
        Algorithm::NetworkAware => {
            known.unwrap_or_else(|| netaware::app::score(&model, app, &ledger, &a))
        }
    };
    let grades = qos_score(infra, app, &model, &a)
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
        if !c.req_cand.contains(&i) {
            return Err(ScheduleError::Unsatisfied {
                component: c.name.clone(),
                node: n.clone(),
            });
        }
        a.push(i);
    }
    Ok(a)
}

/// The `qos` score of a resolved deployment.
fn qos_score(
    infra: &Infra,
    app: &Application,
    model: &Model<'_>,
    a: &[u32],
) -> Result<(f64, Vec<CriterionGrade>), ScheduleError> {
    if let Some(ch) = model.missing_link(a) {
        let c = &model.chans[ch];
        return Err(ScheduleError::MissingLink {
            channel: c.name.clone(),
            from: infra.node(a[c.from]).name.clone(),
            to: infra.node(a[c.to]).name.clone(),
        });
    }
    // The same spaces as `place_on`, so that l_min (exact to within the search's EPS)
    // comes out bit for bit the same.
    let space =
        Space::build_consistent(model, model.comps.iter().map(|c| c.cand.clone()).collect())
            .unwrap_or_else(|_| {
                Space::build(
                    model,
                    model.comps.iter().map(|c| c.req_cand.clone()).collect(),
                )
            });
    let (lmin, _, _) = lmin_search(app, model, &space, search::Limits::default());
    if let Some((c, _)) = app
        .criteria
        .iter()
        .zip(&lmin)
        .find(|(c, l)| c.kind == CriterionKind::MinE2eResponseTime && l.is_none())
    {
        return Err(ScheduleError::NoReference(
            c.path.clone().unwrap_or_default(),
        ));
    }
    let objective = Objective::for_app(app, model, &space, &lmin);
    let p = make_placement(app, model, &space, &objective, a, 0);
    Ok((p.score, p.criteria))
}
