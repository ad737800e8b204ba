//! The fleet document: what the web view shows and `/api/fleet` serves, built off the
//! decision loop from each published view. Each application's paths are measured on the
//! live model (the longest route of the path's channels, the product of their links'
//! success) and set against the optimum on that same model: `l_min` from the
//! `min-e2e-response-time` grade (`l_min / l`), and the best reliability by the scheduler's
//! own exact search for the deployment with only that path's `max-e2e-reliability` as its
//! criterion (constraints kept, resource requests of other applications aside, as `l_min`).
//! Scoring is a search: it is done again when the live model changed, at most every
//! [`SCORE_EVERY`] per application, or at once when its placement changes. A document is
//! built from each published view, and building them takes at most a tenth of a core
//! ([`super::publish_every_ms`] of the last one's time between two).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Criterion, CriterionKind};
use serde::Serialize;
use tokio::sync::watch;

use super::{OpEvent, Published};
use crate::engine::view::{AppView, FleetView};
use crate::engine::LiveModel;
use crate::unix_ms;

/// Everything the web view shows.
#[derive(Debug, Clone, Serialize)]
pub struct FleetDoc {
    pub at_unix_ms: u64,
    pub model_version: u64,
    /// Nodes grouped by datacenter (a train is a datacenter), datacenters and nodes by name.
    pub datacenters: Vec<DatacenterDoc>,
    /// Every node's name, in the order of the link matrix's rows and columns.
    pub node_names: Vec<String>,
    /// Every measured link in a small fleet; in a large one the links the placements' channels
    /// cross ([`crate::engine::view::VIEW_LINKS_MAX`]).
    pub links: Vec<LinkDoc>,
    /// How many links are measured in all.
    pub links_measured: usize,
    pub apps: Vec<AppDoc>,
    pub counters: CountersDoc,
    /// Oldest first.
    pub events: Vec<OpEvent>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatacenterDoc {
    pub name: String,
    pub nodes: Vec<NodeDoc>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeDoc {
    pub name: String,
    pub state: &'static str,
    pub layer: String,
    pub arch: String,
    pub cpu_millis: u64,
    pub cpu_capacity_millis: u64,
    pub memory_mb: u64,
    pub memory_capacity_mb: u64,
    pub disk_mb: u64,
    pub disk_capacity_mb: u64,
    pub containers: u32,
    pub silent_ms: u64,
    /// The node's network coordinate as last reported (Vivaldi with a height, milliseconds;
    /// `acoa_shared::coords`): the latency of a pair nobody probes is estimated from two.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinate: Option<CoordDoc>,
}

/// A network coordinate: the Euclidean part, the height and the node's own error estimate.
#[derive(Debug, Clone, Serialize)]
pub struct CoordDoc {
    pub vec: Vec<f64>,
    pub height: f64,
    pub error: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LinkDoc {
    pub from: String,
    pub to: String,
    pub latency_ms: f64,
    pub jitter_ms: f64,
    /// Share of probes lost, 0 to 1.
    pub loss: f64,
    pub samples: u16,
    pub age_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppDoc {
    pub name: String,
    /// The status document's state (`running`, `placed`, `unplaced`, ...).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub scheduler: String,
    /// The score at the last placement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The same deployment scored on the live model now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score_now: Option<f64>,
    pub components: Vec<ComponentDoc>,
    pub channels: Vec<ChannelDoc>,
    pub paths: Vec<PathDoc>,
    /// The revision that runs (the last good one while a rollout is under way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The rollout under way, or the last one (phase, batch, what it waits for, why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::engine::update::RolloutStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComponentDoc {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `running`, or what the status says instead (`pending`, `unknown`, `node lost`, ...).
    pub state: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChannelDoc {
    pub name: String,
    pub from: String,
    pub to: String,
    /// The measured latency of the link it crosses, when placed and measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PathDoc {
    pub name: String,
    pub channels: Vec<String>,
    /// The longest route of the path's channels on the measured links: its network latency
    /// (absent: a link is not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The sum of the service times its components' workloads report (absent: none reports
    /// one): what a rollout's gate adds to `latency_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_ms: Option<f64>,
    /// `l_min`: the least the path could have on this network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_optimum_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliability: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliability_optimum: Option<f64>,
}

/// The engine's counters, as the fleet document shows them.
pub type CountersDoc = crate::engine::Stats;

/// Builds a [`FleetDoc`] from each view published on `rx` (on a blocking thread: scoring
/// the paths may take a while) and publishes it.
pub(super) fn spawn_builder(
    mut rx: watch::Receiver<Option<Arc<Published>>>,
) -> watch::Receiver<Option<Arc<FleetDoc>>> {
    let (tx, docs) = watch::channel(None);
    tokio::spawn(async move {
        let mut scored = Scored::default();
        while rx.changed().await.is_ok() {
            let Some(p) = rx.borrow_and_update().clone() else {
                continue;
            };
            let mut kept = std::mem::take(&mut scored);
            let nodes = p.view.nodes.len();
            let started = Instant::now();
            let built = tokio::task::spawn_blocking(move || {
                let d = build_with(&p.view, p.events.clone(), &mut kept);
                (d, kept)
            })
            .await;
            match built {
                Ok((d, kept)) => {
                    scored = kept;
                    tx.send_replace(Some(Arc::new(d)));
                }
                Err(e) => tracing::error!("fleet view not built: {e}"),
            }
            // no more documents than the loop publishes views of a fleet this size, whatever
            // it publishes, and building them takes at most a tenth of a core
            let took = started.elapsed().as_millis() as u64;
            tokio::time::sleep(Duration::from_millis(super::publish_every_ms(took, nodes))).await;
        }
    });
    docs
}

/// How often an application's deployment is scored again on the live model, when the model
/// changed (on the same model the scores are the same: not scored again).
pub const SCORE_EVERY: Duration = Duration::from_secs(2);

/// One application's deployment scored on the live model.
#[derive(Debug, Clone)]
struct Scoring {
    at: Instant,
    /// The version of the model it was scored on.
    model_version: u64,
    assignment: BTreeMap<String, String>,
    score_now: Option<f64>,
    /// Per path: the least latency and the best reliability it could have.
    optimum: HashMap<String, (Option<f64>, Option<f64>)>,
}

/// The latest scoring of each application.
#[derive(Debug, Default)]
pub struct Scored(HashMap<String, Scoring>);

/// The document of one view (every application scored now).
pub fn build(v: &FleetView, events: Vec<OpEvent>) -> FleetDoc {
    build_with(v, events, &mut Scored::default())
}

/// The document of one view, the applications' scorings taken from `scored` while fresh.
pub fn build_with(v: &FleetView, events: Vec<OpEvent>, scored: &mut Scored) -> FleetDoc {
    scored
        .0
        .retain(|app, _| v.apps.iter().any(|a| &a.name == app));
    let mut dcs: BTreeMap<&str, Vec<NodeDoc>> = BTreeMap::new();
    for n in &v.nodes {
        dcs.entry(n.datacenter.as_str()).or_default().push(NodeDoc {
            name: n.name.clone(),
            state: n.state,
            layer: n.layer.clone(),
            arch: n.arch.clone(),
            cpu_millis: n.usage.cpu_millis,
            cpu_capacity_millis: n.capacity.cpu_millis,
            memory_mb: n.usage.memory_mb,
            memory_capacity_mb: n.capacity.memory_mb,
            disk_mb: n.usage.disk_mb,
            disk_capacity_mb: n.capacity.disk_mb,
            containers: n.usage.containers,
            silent_ms: n.silent_ms,
            coordinate: n.coordinate.map(|c| CoordDoc {
                vec: c.vec().to_vec(),
                height: c.height(),
                error: c.error(),
            }),
        });
    }
    let links = v
        .links
        .iter()
        .map(|l| LinkDoc {
            from: l.from.clone(),
            to: l.to.clone(),
            latency_ms: l.latency_ms,
            jitter_ms: l.jitter_ms,
            loss: (1.0 - l.success).clamp(0.0, 1.0),
            samples: l.samples,
            age_ms: l.age_ms,
        })
        .collect();
    FleetDoc {
        at_unix_ms: unix_ms(),
        model_version: v.model_version,
        datacenters: dcs
            .into_iter()
            .map(|(name, nodes)| DatacenterDoc {
                name: name.to_string(),
                nodes,
            })
            .collect(),
        node_names: v.nodes.iter().map(|n| n.name.clone()).collect(),
        links,
        links_measured: v.links_measured,
        apps: v
            .apps
            .iter()
            .map(|a| app_doc(&v.model, v.model_version, a, scored))
            .collect(),
        counters: v.stats.clone(),
        events,
    }
}

fn app_doc(model: &LiveModel, model_version: u64, a: &AppView, scored: &mut Scored) -> AppDoc {
    let app = &a.application;
    let assignment = a.placement.as_ref().map(|p| &p.assignment);
    let status = a.status.as_ref();
    let component_state = |c: &str| -> String {
        let Some(st) = status else {
            return "accepted".into();
        };
        if st.running.iter().any(|r| r == c) {
            return "running".into();
        }
        match st.not_running.iter().find(|n| n.component == c) {
            Some(n) => n.state.clone(),
            None if assignment.is_some() => "unknown".into(),
            None => "not placed".into(),
        }
    };
    let hop = |from: &str, to: &str| -> Option<(f64, f64)> {
        let asg = assignment?;
        model.measured(asg.get(from)?, asg.get(to)?)
    };
    let channels: Vec<ChannelDoc> = app
        .channels
        .iter()
        .map(|c| ChannelDoc {
            name: c.name.clone(),
            from: c.from.clone(),
            to: c.to.clone(),
            latency_ms: hop(&c.from, &c.to).map(|h| h.0),
        })
        .collect();
    let measured: Vec<(Option<f64>, Option<f64>)> = app
        .paths
        .iter()
        .map(|p| measure(app, &p.channels, &hop))
        .collect();
    let scoring = match assignment {
        Some(asg) => {
            let fresh = scored.0.get(&a.name).is_some_and(|s| {
                &s.assignment == asg
                    && (s.model_version == model_version || s.at.elapsed() < SCORE_EVERY)
            });
            if !fresh {
                let s = score(model, model_version, app, asg, &measured);
                scored.0.insert(a.name.clone(), s);
            }
            scored.0.get(&a.name)
        }
        None => {
            scored.0.remove(&a.name);
            None
        }
    };
    let paths = app
        .paths
        .iter()
        .zip(&measured)
        .map(|(p, (latency, reliability))| {
            let (lat_opt, rel_opt) = scoring
                .and_then(|s| s.optimum.get(&p.name).copied())
                .unwrap_or((None, None));
            let mut comps: Vec<&str> = vec![];
            for ch in app.channels.iter().filter(|c| p.channels.contains(&c.name)) {
                for c in [ch.from.as_str(), ch.to.as_str()] {
                    if !comps.contains(&c) {
                        comps.push(c);
                    }
                }
            }
            let service: Vec<f64> = comps
                .iter()
                .filter_map(|c| a.service_ms.get(*c).copied())
                .collect();
            PathDoc {
                name: p.name.clone(),
                channels: p.channels.clone(),
                latency_ms: *latency,
                service_ms: (!service.is_empty()).then(|| service.iter().sum()),
                latency_optimum_ms: lat_opt,
                reliability: *reliability,
                reliability_optimum: rel_opt,
            }
        })
        .collect();
    AppDoc {
        name: a.name.clone(),
        state: status.map_or("accepted".into(), |s| s.state.clone()),
        reason: status.and_then(|s| s.reason.clone()),
        scheduler: app.scheduler.clone(),
        score: a.placement.as_ref().map(|p| p.score),
        score_now: scoring.and_then(|s| s.score_now),
        revision: status.and_then(|s| s.revision),
        rollout: status.and_then(|s| s.rollout.clone()),
        components: app
            .components
            .iter()
            .map(|c| ComponentDoc {
                name: c.name.clone(),
                node: assignment.and_then(|asg| asg.get(&c.name).cloned()),
                state: component_state(&c.name),
            })
            .collect(),
        channels,
        paths,
    }
}

/// Scores `assignment` on the live model (as the engine scores: the model is not validated,
/// it keeps a lost node's links until they age out) and finds each path's optimum.
/// `measured`: each path's latency and reliability now, in the order of `app.paths`.
fn score(
    model: &LiveModel,
    model_version: u64,
    app: &Application,
    assignment: &BTreeMap<String, String>,
    measured: &[(Option<f64>, Option<f64>)],
) -> Scoring {
    // the view the placement jobs share, derived once per model
    let infra = model.infra();
    let (score_now, grades) = match crate::sched::score_on(&infra, app, assignment) {
        Ok((s, g)) => (Some(s), g),
        Err(_) => (None, vec![]),
    };
    let mut optimum = HashMap::new();
    for (p, (latency, _)) in app.paths.iter().zip(measured) {
        let has = |kind: CriterionKind| {
            app.criteria
                .iter()
                .any(|c| c.kind == kind && c.path.as_deref() == Some(p.name.as_str()))
        };
        // l_min / l, so l_min = grade × l
        let lat_opt = grades
            .iter()
            .find(|g| {
                g.kind == CriterionKind::MinE2eResponseTime
                    && g.path.as_deref() == Some(p.name.as_str())
            })
            .zip(*latency)
            .filter(|(g, l)| g.grade.is_finite() && g.grade > 0.0 && l.is_finite())
            .map(|(g, l)| l * g.grade.min(1.0));
        let rel_opt = if has(CriterionKind::MaxE2eReliability) {
            best_reliability(&infra, app, &p.name)
        } else {
            None
        };
        optimum.insert(p.name.clone(), (lat_opt, rel_opt));
    }
    Scoring {
        at: Instant::now(),
        model_version,
        assignment: assignment.clone(),
        score_now,
        optimum,
    }
}

/// The best reliability `path` could have: the score of the deployment the scheduler finds
/// with that path's reliability as the only criterion (constraints kept).
fn best_reliability(infra: &acoa_scheduler::Infra, app: &Application, path: &str) -> Option<f64> {
    let mut only = app.clone();
    only.scheduler = "qos".into();
    only.criteria = vec![Criterion {
        kind: CriterionKind::MaxE2eReliability,
        path: Some(path.to_string()),
        component: None,
        weight: 1.0,
    }];
    let opts = acoa_scheduler::Options {
        time_budget: Some(crate::sched::TIME_BUDGET),
        count_budget: 0,
        ..Default::default()
    };
    match acoa_scheduler::place_on(infra, &only, &acoa_scheduler::Ledger::new(), &opts) {
        Ok(r) => match r.outcome {
            acoa_scheduler::Outcome::Placed(p) => Some(p.score),
            acoa_scheduler::Outcome::Infeasible(_) => None,
        },
        Err(_) => None,
    }
}

/// A channel's link under the placement: (latency ms, success), if placed and measured.
type Hop<'a> = dyn Fn(&str, &str) -> Option<(f64, f64)> + 'a;

/// A path's latency (the longest route over its channels, which form no cycle) and
/// reliability (the product of its channels' success) on the measured links; `None` where a
/// channel's link is not measured or the application is not placed.
fn measure(
    app: &Application,
    path_channels: &[String],
    hop: &Hop<'_>,
) -> (Option<f64>, Option<f64>) {
    let mut edges = vec![];
    for name in path_channels {
        let Some(c) = app.channels.iter().find(|c| &c.name == name) else {
            return (None, None);
        };
        let Some((lat, success)) = hop(&c.from, &c.to) else {
            return (None, None);
        };
        edges.push((c.from.as_str(), c.to.as_str(), lat, success));
    }
    let reliability = edges.iter().map(|e| e.3).product();
    // longest route ending at each component: relaxing every channel once per channel
    // settles an acyclic graph
    let mut ends: HashMap<&str, f64> = HashMap::new();
    for _ in 0..edges.len() {
        for (from, to, lat, _) in &edges {
            let d = ends.get(from).copied().unwrap_or(0.0) + lat;
            let e = ends.entry(to).or_insert(0.0);
            if d > *e {
                *e = d;
            }
        }
    }
    let latency = ends.values().copied().fold(0.0, f64::max);
    (Some(latency), Some(reliability))
}

#[cfg(test)]
mod tests {
    use acoa_shared::model;

    use super::*;
    use crate::engine::view::VIEW_LINKS_MAX;
    use crate::engine::Event;
    use crate::testkit::engine::{edge_node, lost_when_silent, railway, will_of, EngineSim};

    /// 80 nodes each measuring the next 60 (4,800 links, more than a view lists): the view and the
    /// fleet document hold the one link the placement crosses, the path is measured on it and
    /// the deployment scored on the live model.
    #[test]
    fn a_large_fleets_view_holds_the_links_its_placements_cross() {
        let (n, peers) = (80, 60);
        let name = |i: usize| format!("n{i:02}");
        let nodes = (0..n)
            .map(|i| edge_node(&name(i), &format!("dc{}", i / 5)))
            .collect();
        let mut links = vec![];
        for a in 0..n {
            for b in (1..=peers).map(|k| (a + k) % n) {
                links.push(model::Link {
                    from: name(a),
                    to: name(b),
                    latency_ms: 1.0 + (a * 100 + b) as f64 / 100.0,
                    jitter_ms: 0.1,
                    success: 0.99,
                });
            }
        }
        let c = model::Cluster {
            cluster: "big".into(),
            nodes,
            links,
            ..Default::default()
        };
        let mut sim = EngineSim::new(lost_when_silent());
        sim.join_cluster(&c);
        sim.feed(Event::StartupDone);
        let app = "application: pair\n\
                   components:\n\
                   - {name: a, image: 'localhost/acoa/a:1', requires: {node: n03}}\n\
                   - {name: b, image: 'localhost/acoa/b:1', requires: {node: n41}}\n\
                   channels:\n\
                   - {name: a-to-b, from: a, to: b}\n\
                   paths:\n\
                   - {name: p, channels: [a-to-b]}\n\
                   criteria:\n\
                   - {type: min-e2e-response-time, path: p, weight: 1.0}\n";
        sim.publish("pair", app.into());
        assert_eq!(sim.assignment("pair")["b"], "n41");
        let v = sim.e.view();
        assert_eq!(v.links_measured, n * peers);
        assert!(v.links_measured > VIEW_LINKS_MAX);
        let shown: Vec<_> = v
            .links
            .iter()
            .map(|l| (l.from.as_str(), l.to.as_str()))
            .collect();
        assert_eq!(shown, [("n03", "n41")]);
        let d = build(&v, vec![]);
        assert_eq!((d.links.len(), d.links_measured), (1, n * peers));
        assert_eq!(d.node_names.len(), n);
        let path = &d.apps[0].paths[0];
        // 1 + (3 * 100 + 41) / 100 ms, as the link table keeps it (0.1 ms steps)
        assert_eq!(path.latency_ms, Some(4.4), "{path:?}");
        assert!(d.apps[0].score_now.is_some(), "scored on the live model");

        // scored again only when the model changed: a scoring older than SCORE_EVERY on the
        // same model is kept, one on another model is not
        let old = Instant::now()
            .checked_sub(SCORE_EVERY * 5)
            .expect("a clock that far back");
        let planted = |version: u64| {
            let mut s = Scored::default();
            s.0.insert(
                "pair".into(),
                Scoring {
                    at: old,
                    model_version: version,
                    assignment: sim.assignment("pair"),
                    score_now: Some(-1.0),
                    optimum: HashMap::new(),
                },
            );
            s
        };
        let mut kept = planted(v.model_version);
        let d = build_with(&v, vec![], &mut kept);
        assert_eq!(
            d.apps[0].score_now,
            Some(-1.0),
            "the same model: not scored again"
        );
        let mut kept = planted(v.model_version - 1);
        let d = build_with(&v, vec![], &mut kept);
        assert_ne!(
            d.apps[0].score_now,
            Some(-1.0),
            "another model: scored again"
        );
        assert!(kept.0["pair"].at > old);
    }

    /// In a large fleet a view shows the model the tick took last and takes none of its own: a
    /// node that leaves does not make the next view take (and have derived) a new model.
    #[test]
    fn a_large_fleets_view_takes_no_model_of_its_own() {
        let c = railway();
        let mut sim = EngineSim::new(crate::engine::EngineConfig {
            peers_offload_from: c.nodes.len(),
            ..lost_when_silent()
        });
        sim.join_cluster(&c);
        sim.feed(Event::StartupDone);
        sim.tick(1000);
        let first = sim.e.view();
        assert!(first.model.node("n05").is_some());
        sim.feed(will_of("n05"));
        // judged gone on the next tick, before the next model is due
        sim.tick(10);
        assert_eq!(
            sim.e
                .view()
                .nodes
                .iter()
                .find(|n| n.name == "n05")
                .unwrap()
                .state,
            "lost"
        );
        for _ in 0..3 {
            let v = sim.e.view();
            assert!(Arc::ptr_eq(&v.model, &first.model), "a model of its own");
            assert_eq!(v.model_version, first.model_version);
        }
        // the tick takes the next one, and the view shows it
        sim.tick(60_000);
        let v = sim.e.view();
        assert!(!Arc::ptr_eq(&v.model, &first.model));
        assert!(v.model_version > first.model_version);
        assert!(v.model.node("n05").is_none(), "the node gone");
    }
}
