//! The control plane's metrics, exposed in the Prometheus text format by `prometheus-client`.
//! Counters are added to as the loop goes; the gauges (nodes by state, each application's
//! score, each path against its optimum) are set from the latest fleet document at each scrape.
//!
//! Names (every one starts with `acoa_`):
//! - `acoa_nodes{state}`: nodes by state (online, unreachable, lost: every state of
//!   `engine::view::NODE_STATES`, zero included);
//! - `acoa_reports_ingested_total{kind}` (`report`, `links`, `actual`),
//!   `acoa_reports_dropped_total{reason}` (every reason of [`super::DROP_REASONS`]);
//! - `acoa_placements_total{reason}` (first placements), `acoa_replacements_total{reason}`
//!   (a placed application moved), `acoa_commit_collisions_total`,
//!   `acoa_placement_seconds` (histogram of each placement computation's time),
//!   `acoa_placement_jobs_total`, `acoa_desired_states_published_total`;
//! - `acoa_application_score{app}` (at its placement), `acoa_application_score_now{app}`
//!   (the same deployment on the live model);
//! - `acoa_path_latency_ms{app,path}`, `acoa_path_latency_optimum_ms{app,path}`,
//!   `acoa_path_reliability{app,path}`, `acoa_path_reliability_optimum{app,path}`;
//! - `acoa_application_revision{app}` (the revision that runs),
//!   `acoa_rollout_phase{app,phase}` (1 for the phase of the rollout under way or the last one,
//!   0 for the others of [`ROLLOUT_PHASES`]), `acoa_rollout_batch{app}` and
//!   `acoa_rollout_batches{app}` (the batch it is at, of how many).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::events::PlacementChange;
use super::fleet::FleetDoc;
use crate::engine::view::NODE_STATES;
use crate::engine::Stats;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

impl ReasonLabel {
    pub fn new(reason: &str) -> ReasonLabel {
        ReasonLabel {
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabel {
    pub app: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub app: String,
    pub phase: String,
}

/// Every phase a rollout's status names (`engine::update::RolloutStatus::phase`).
pub const ROLLOUT_PHASES: [&str; 5] = ["rolling", "failed", "rolling-back", "done", "rolled-back"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub app: String,
    pub path: String,
}

type FGauge = Gauge<f64, AtomicU64>;

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    nodes: Family<StateLabel, Gauge>,
    ingested: Family<KindLabel, Counter>,
    pub(super) drops: Family<ReasonLabel, Counter>,
    placements: Family<ReasonLabel, Counter>,
    replacements: Family<ReasonLabel, Counter>,
    collisions: Counter,
    jobs: Counter,
    desired: Counter,
    pub(super) placement_seconds: Histogram,
    score: Family<AppLabel, FGauge>,
    score_now: Family<AppLabel, FGauge>,
    latency: Family<PathLabel, FGauge>,
    latency_opt: Family<PathLabel, FGauge>,
    reliability: Family<PathLabel, FGauge>,
    reliability_opt: Family<PathLabel, FGauge>,
    revision: Family<AppLabel, Gauge>,
    rollout_phase: Family<PhaseLabel, Gauge>,
    rollout_batch: Family<AppLabel, Gauge>,
    rollout_batches: Family<AppLabel, Gauge>,
    /// The statistics last counted (counters grow by the difference).
    counted: Mutex<Stats>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            nodes: Family::default(),
            ingested: Family::default(),
            drops: Family::default(),
            placements: Family::default(),
            replacements: Family::default(),
            collisions: Counter::default(),
            jobs: Counter::default(),
            desired: Counter::default(),
            // 1 ms to about 33 s
            placement_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            score: Family::default(),
            score_now: Family::default(),
            latency: Family::default(),
            latency_opt: Family::default(),
            reliability: Family::default(),
            reliability_opt: Family::default(),
            revision: Family::default(),
            rollout_phase: Family::default(),
            rollout_batch: Family::default(),
            rollout_batches: Family::default(),
            counted: Mutex::new(Stats::default()),
        };
        let r = &mut m.registry;
        r.register("acoa_nodes", "Nodes by state", m.nodes.clone());
        r.register(
            "acoa_reports_ingested",
            "Verified node messages taken by the engine, by kind",
            m.ingested.clone(),
        );
        r.register(
            "acoa_reports_dropped",
            "Node publications dropped before the engine, by reason",
            m.drops.clone(),
        );
        r.register(
            "acoa_placements",
            "Applications placed for the first time, by why the placement was computed",
            m.placements.clone(),
        );
        r.register(
            "acoa_replacements",
            "Placed applications moved, by why the placement was computed",
            m.replacements.clone(),
        );
        r.register(
            "acoa_commit_collisions",
            "Placement commits that collided with another commit on their nodes",
            m.collisions.clone(),
        );
        r.register(
            "acoa_placement_jobs",
            "Placement computations asked for",
            m.jobs.clone(),
        );
        r.register(
            "acoa_desired_states_published",
            "Desired states published to nodes",
            m.desired.clone(),
        );
        r.register(
            "acoa_placement_seconds",
            "Time of each placement computation",
            m.placement_seconds.clone(),
        );
        r.register(
            "acoa_application_score",
            "Each application's score at its placement",
            m.score.clone(),
        );
        r.register(
            "acoa_application_score_now",
            "Each application's deployment scored on the live model",
            m.score_now.clone(),
        );
        r.register(
            "acoa_path_latency_ms",
            "Each path's latency on the measured links (longest route of its channels)",
            m.latency.clone(),
        );
        r.register(
            "acoa_path_latency_optimum_ms",
            "The least latency the path could have on the measured links (l_min)",
            m.latency_opt.clone(),
        );
        r.register(
            "acoa_path_reliability",
            "Each path's reliability on the measured links (product of its channels' success)",
            m.reliability.clone(),
        );
        r.register(
            "acoa_path_reliability_optimum",
            "The best reliability the path could have on the measured links",
            m.reliability_opt.clone(),
        );
        r.register(
            "acoa_application_revision",
            "The revision of each application that runs",
            m.revision.clone(),
        );
        r.register(
            "acoa_rollout_phase",
            "1 for the phase of each application's rollout under way (or its last one), 0 for the others",
            m.rollout_phase.clone(),
        );
        r.register(
            "acoa_rollout_batch",
            "The batch each application's rollout is at",
            m.rollout_batch.clone(),
        );
        r.register(
            "acoa_rollout_batches",
            "How many batches each application's rollout has",
            m.rollout_batches.clone(),
        );
        for kind in ["report", "links", "actual"] {
            let _ = m.ingested.get_or_create(&KindLabel { kind: kind.into() });
        }
        m
    }

    /// Counts a placement or a move.
    pub(super) fn count_placement(&self, c: &PlacementChange) {
        let f = if c.first {
            &self.placements
        } else {
            &self.replacements
        };
        f.get_or_create(&ReasonLabel::new(c.reason)).inc();
    }

    /// Adds what the engine's statistics grew by since the last call.
    pub(super) fn count_stats(&self, s: &Stats) {
        let mut last = self.counted.lock().expect("metrics lock");
        let grow = |c: &Counter, now: u64, then: u64| {
            if now > then {
                c.inc_by(now - then);
            }
        };
        let kind = |k: &str| self.ingested.get_or_create(&KindLabel { kind: k.into() });
        grow(&kind("report"), s.reports, last.reports);
        grow(&kind("links"), s.links, last.links);
        grow(&kind("actual"), s.actuals, last.actuals);
        grow(&self.collisions, s.collisions, last.collisions);
        grow(&self.jobs, s.jobs, last.jobs);
        grow(&self.desired, s.desired_published, last.desired_published);
        *last = s.clone();
    }

    /// The metrics as text, the gauges set from `doc` (the latest fleet document).
    pub fn render(&self, doc: Option<&FleetDoc>) -> String {
        self.set_gauges(doc);
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }

    fn set_gauges(&self, doc: Option<&FleetDoc>) {
        self.nodes.clear();
        for s in NODE_STATES.map(|s| s.as_str()) {
            let n = doc.map_or(0, |d| {
                d.datacenters
                    .iter()
                    .flat_map(|dc| &dc.nodes)
                    .filter(|n| n.state == s)
                    .count()
            });
            self.nodes
                .get_or_create(&StateLabel {
                    state: s.to_string(),
                })
                .set(n as i64);
        }
        for f in [&self.score, &self.score_now] {
            f.clear();
        }
        for f in [
            &self.latency,
            &self.latency_opt,
            &self.reliability,
            &self.reliability_opt,
        ] {
            f.clear();
        }
        self.revision.clear();
        self.rollout_phase.clear();
        self.rollout_batch.clear();
        self.rollout_batches.clear();
        let Some(doc) = doc else { return };
        for a in &doc.apps {
            let al = AppLabel {
                app: a.name.clone(),
            };
            if let Some(r) = a.revision {
                self.revision.get_or_create(&al).set(r as i64);
            }
            if let Some(ro) = &a.rollout {
                for phase in ROLLOUT_PHASES {
                    let label = PhaseLabel {
                        app: a.name.clone(),
                        phase: phase.into(),
                    };
                    self.rollout_phase
                        .get_or_create(&label)
                        .set(i64::from(ro.phase == phase));
                }
                // `2/5`: at batch 2 of 5
                if let Some((at, of)) = ro.batch.split_once('/') {
                    if let (Ok(at), Ok(of)) = (at.parse::<i64>(), of.parse::<i64>()) {
                        self.rollout_batch.get_or_create(&al).set(at);
                        self.rollout_batches.get_or_create(&al).set(of);
                    }
                }
            }
            if let Some(s) = a.score {
                self.score.get_or_create(&al).set(s);
            }
            if let Some(s) = a.score_now {
                self.score_now.get_or_create(&al).set(s);
            }
            for p in &a.paths {
                let pl = PathLabel {
                    app: a.name.clone(),
                    path: p.name.clone(),
                };
                for (f, v) in [
                    (&self.latency, p.latency_ms),
                    (&self.latency_opt, p.latency_optimum_ms),
                    (&self.reliability, p.reliability),
                    (&self.reliability_opt, p.reliability_optimum),
                ] {
                    if let Some(v) = v {
                        f.get_or_create(&pl).set(v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::update::RolloutStatus;
    use crate::observe::fleet::AppDoc;

    fn app(name: &str, revision: Option<u64>, rollout: Option<RolloutStatus>) -> AppDoc {
        AppDoc {
            name: name.into(),
            state: "running".into(),
            reason: None,
            scheduler: "qos".into(),
            score: None,
            score_now: None,
            components: vec![],
            channels: vec![],
            paths: vec![],
            revision,
            rollout,
        }
    }

    #[test]
    fn the_rollout_under_way_is_a_phase_and_a_batch_per_application() {
        let ro: RolloutStatus = serde_json::from_value(serde_json::json!({
            "from": 2, "to": 3, "phase": "rolling", "batch": "2/5", "components": {}
        }))
        .unwrap();
        let doc = FleetDoc {
            at_unix_ms: 0,
            model_version: 0,
            datacenters: vec![],
            node_names: vec![],
            links: vec![],
            links_measured: 0,
            apps: vec![app("smoke", Some(2), Some(ro)), app("speed", Some(1), None)],
            counters: Default::default(),
            events: vec![],
        };
        let text = Metrics::new().render(Some(&doc));
        for line in [
            "acoa_application_revision{app=\"smoke\"} 2",
            "acoa_application_revision{app=\"speed\"} 1",
            "acoa_rollout_phase{app=\"smoke\",phase=\"rolling\"} 1",
            "acoa_rollout_phase{app=\"smoke\",phase=\"rolled-back\"} 0",
            "acoa_rollout_batch{app=\"smoke\"} 2",
            "acoa_rollout_batches{app=\"smoke\"} 5",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(!text.contains("acoa_rollout_phase{app=\"speed\""), "{text}");
    }
}
