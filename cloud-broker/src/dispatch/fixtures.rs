//! Placement jobs as the engine makes them and worker answers to them, for the tests of the
//! dispatch, the result check and the frames.

use acoa_shared::jobs::{self, ResultOutcome};
use acoa_shared::model;
use acoa_shared::wire::{self, LinkMetrics};
use ed25519_dalek::SigningKey;

use crate::engine::{Action, Engine, EngineConfig, Event, Job, JobOutcome};
use crate::store::Snapshot;
use crate::testkit::{report_of, samples_of};

fn railway() -> model::Cluster {
    model::load_cluster(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/railway/cluster.yaml"),
    )
    .unwrap()
}

/// Placement jobs as the engine makes them, for the railway nodes and `apps`.
#[allow(clippy::vec_box)] // the engine hands jobs out boxed
pub fn jobs_for(apps: &[&str]) -> Vec<Box<Job>> {
    let cluster = railway();
    let mut e = Engine::new(
        EngineConfig::default(),
        SigningKey::from_bytes(&[3; 32]),
        Snapshot::default(),
        0,
    );
    for n in &cluster.nodes {
        e.handle(1, Event::Report(Box::new(report_of(n, 1, "127.0.0.1:1"))));
    }
    for n in &cluster.nodes {
        let links = samples_of(&cluster, &n.name);
        for chunk in links.chunks(wire::MAX_LINKS_PER_MESSAGE) {
            e.handle(
                1,
                Event::links(Box::new(LinkMetrics {
                    node: wire::name(&n.name).unwrap(),
                    seq: 1,
                    run: 0,
                    links: heapless::Vec::from_slice(chunk).unwrap(),
                    coord: None,
                })),
            );
        }
    }
    let mut out = vec![];
    for a in apps {
        let text = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scenarios/railway")
                .join(format!("{a}.yaml")),
        )
        .unwrap();
        for act in e.handle(
            2,
            Event::AppPublished {
                app: a.to_string(),
                payload: text,
            },
        ) {
            if let Action::Schedule(j) = act {
                out.push(j);
            }
        }
    }
    assert_eq!(out.len(), apps.len());
    out
}

pub fn answer(job: &Job, nonce: u128) -> jobs::JobResult {
    let outcome = match crate::engine::search_job(job) {
        JobOutcome::Placed(p) => ResultOutcome::Placed {
            assignment: p.assignment,
            score: p.score,
            feasible_deployments: p.feasible_deployments,
        },
        JobOutcome::Infeasible(r) => ResultOutcome::Infeasible(r),
        JobOutcome::Error(e) => ResultOutcome::Error(e),
    };
    jobs::JobResult {
        id: job.id,
        nonce,
        worker: "w1".into(),
        outcome,
        elapsed_us: 5,
    }
}
