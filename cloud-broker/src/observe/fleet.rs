//! The fleet document: what the web view shows and `/api/fleet` serves, built off the
//! decision loop from each published view. Each application's paths are measured on the
//! live model (the longest route of the path's channels, the product of their links'
//! success) and set against the optimum the scheduler's grades give on that same model:
//! `min-e2e-response-time` grades `l_min / l`, `max-e2e-reliability` grades `r / r_max`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use acoa_shared::model::{Application, Cluster, CriterionKind};
use serde::Serialize;
use tokio::sync::watch;

use super::{OpEvent, Published};
use crate::engine::view::{AppView, FleetView};

/// Everything the web view shows.
#[derive(Debug, Clone, Serialize)]
pub struct FleetDoc {
    pub at_unix_ms: u64,
    pub model_version: u64,
    /// Nodes grouped by datacenter (a train is a datacenter), datacenters and nodes by name.
    pub datacenters: Vec<DatacenterDoc>,
    /// Every node's name, in the order of the link matrix's rows and columns.
    pub node_names: Vec<String>,
    pub links: Vec<LinkDoc>,
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
    /// The longest route of the path's channels on the measured links (absent: a link is
    /// not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// `l_min`: the least the path could have on this network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_optimum_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliability: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliability_optimum: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CountersDoc {
    pub reports: u64,
    pub links: u64,
    pub actuals: u64,
    pub collisions: u64,
    pub desired_published: u64,
    pub jobs: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Builds a [`FleetDoc`] from each view published on `rx` (on a blocking thread: scoring
/// the paths may take a while) and publishes it.
pub(super) fn spawn_builder(
    mut rx: watch::Receiver<Option<Arc<Published>>>,
) -> watch::Receiver<Option<Arc<FleetDoc>>> {
    let (tx, docs) = watch::channel(None);
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let Some(p) = rx.borrow_and_update().clone() else {
                continue;
            };
            let doc = tokio::task::spawn_blocking(move || build(&p.view, p.events.clone())).await;
            match doc {
                Ok(d) => {
                    tx.send_replace(Some(Arc::new(d)));
                }
                Err(e) => tracing::error!("fleet view not built: {e}"),
            }
            // at most four documents a second, whatever the loop publishes
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    });
    docs
}

/// The document of one view.
pub fn build(v: &FleetView, events: Vec<OpEvent>) -> FleetDoc {
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
    let s = &v.stats;
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
        apps: v.apps.iter().map(|a| app_doc(&v.cluster, a)).collect(),
        counters: CountersDoc {
            reports: s.reports,
            links: s.links,
            actuals: s.actuals,
            collisions: s.collisions,
            desired_published: s.desired_published,
            jobs: s.jobs,
        },
        events,
    }
}

fn app_doc(cluster: &Cluster, a: &AppView) -> AppDoc {
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
    let links: HashMap<(&str, &str), (f64, f64)> = cluster
        .links
        .iter()
        .map(|l| ((l.from.as_str(), l.to.as_str()), (l.latency_ms, l.success)))
        .collect();
    let hop = |from: &str, to: &str| -> Option<(f64, f64)> {
        let asg = assignment?;
        let (x, y) = (asg.get(from)?, asg.get(to)?);
        links.get(&(x.as_str(), y.as_str())).copied()
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
    let (score_now, grades) = match assignment {
        // as the engine scores: the live model is not validated (it keeps the links of a lost
        // node until they age out)
        Some(asg) => {
            match acoa_scheduler::score_on(&acoa_scheduler::Infra::from_cluster(cluster), app, asg)
            {
                Ok((s, g)) => (Some(s), g),
                Err(_) => (None, vec![]),
            }
        }
        None => (None, vec![]),
    };
    let grade = |kind: CriterionKind, path: &str| {
        grades
            .iter()
            .find(|g| g.kind == kind && g.path.as_deref() == Some(path))
            .map(|g| g.grade)
    };
    let paths = app
        .paths
        .iter()
        .map(|p| {
            let (latency, reliability) = measure(app, &p.channels, &hop);
            let latency_optimum = match (latency, grade(CriterionKind::MinE2eResponseTime, &p.name))
            {
                (Some(l), Some(g)) if g.is_finite() && g > 0.0 => Some(l * g.min(1.0)),
                _ => None,
            };
            let reliability_optimum = match (
                reliability,
                grade(CriterionKind::MaxE2eReliability, &p.name),
            ) {
                (Some(r), Some(g)) if g.is_finite() && g > 0.0 => Some((r / g).min(1.0)),
                _ => None,
            };
            PathDoc {
                name: p.name.clone(),
                channels: p.channels.clone(),
                latency_ms: latency,
                latency_optimum_ms: latency_optimum,
                reliability,
                reliability_optimum,
            }
        })
        .collect();
    AppDoc {
        name: a.name.clone(),
        state: status.map_or("accepted".into(), |s| s.state.clone()),
        reason: status.and_then(|s| s.reason.clone()),
        scheduler: app.scheduler.clone(),
        score: a.placement.as_ref().map(|p| p.score),
        score_now,
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
