//! The signed frame of a placement job for workers.
//!
//! Invariant: a frame decodes to exactly the engine's job ([`wire_job`]), with the budgets of
//! [`crate::sched`] and the container counts of the snapshot's nodes; the snapshot is packed
//! once per snapshot the engine hands out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use acoa_shared::jobs;
use acoa_shared::model::Cluster;
use ed25519_dalek::SigningKey;

use crate::engine::Job;
use crate::sched;

/// The wire form of an engine job.
pub fn wire_job(job: &Job, nonce: u128) -> jobs::Job {
    with_cluster(job, nonce, job.model.cluster().as_ref().clone())
}

/// The wire form of `job` carrying `cluster` as its snapshot.
fn with_cluster(job: &Job, nonce: u128, cluster: Cluster) -> jobs::Job {
    jobs::Job {
        id: job.id,
        nonce,
        app: job.app.clone(),
        application: job.application.as_ref().clone(),
        cluster,
        reserved: job.reserved.clone(),
        containers: containers_on(job),
        time_budget_ms: sched::TIME_BUDGET.as_millis() as u64,
        count_budget: sched::COUNT_BUDGET,
    }
}

/// The engine job's container counts of the nodes in its snapshot, above zero: a node that
/// left the snapshot cannot be chosen, and a job carries at most one count per node
/// ([`jobs::check_containers`]).
fn containers_on(job: &Job) -> BTreeMap<String, u32> {
    let nodes: BTreeSet<&str> = job.model.nodes().iter().map(|n| n.name.as_str()).collect();
    job.containers
        .iter()
        .filter(|(n, k)| **k > 0 && nodes.contains(n.as_str()))
        .map(|(n, k)| (n.clone(), *k))
        .collect()
}

/// The snapshot last packed for jobs: the engine hands out the same `Arc` while its live model
/// does not change, so consecutive jobs reuse the packed bytes.
#[derive(Default)]
pub struct PackCache {
    last: Option<(Arc<Cluster>, Arc<Vec<u8>>)>,
}

impl PackCache {
    pub fn packed(&mut self, cluster: &Arc<Cluster>) -> Result<Arc<Vec<u8>>, jobs::JobError> {
        if let Some((c, b)) = &self.last {
            if Arc::ptr_eq(c, cluster) {
                return Ok(b.clone());
            }
        }
        let b = Arc::new(jobs::pack_cluster(cluster)?);
        self.last = Some((cluster.clone(), b.clone()));
        Ok(b)
    }
}

/// The signed frame of `job` for workers (the snapshot packed once per snapshot).
pub fn encode(
    job: &Job,
    nonce: u128,
    key: &SigningKey,
    cache: &Mutex<PackCache>,
) -> Result<Vec<u8>, String> {
    let packed = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .packed(&job.model.cluster())
        .map_err(|e| e.to_string())?;
    // the snapshot travels packed, beside the job
    let w = with_cluster(job, nonce, Cluster::default());
    jobs::encode_job_packed(&w, &packed, key).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::jobs_for;
    use super::*;

    #[test]
    fn engine_jobs_travel_to_workers_exactly() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let cache = Mutex::new(PackCache::default());
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        // the engine's live model did not change between the two: one snapshot, packed once
        assert!(Arc::ptr_eq(&js[0].model, &js[1].model));
        for j in js {
            let w = wire_job(&j, 42);
            let bytes = encode(&j, 42, &key, &cache).unwrap();
            assert_eq!(jobs::decode_job(&bytes, &key.verifying_key()).unwrap(), w);
        }
    }

    #[test]
    fn the_container_counts_of_the_snapshots_nodes_travel() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let cache = Mutex::new(PackCache::default());
        let mut j = (*jobs_for(&["smoke-monitoring"])[0]).clone();
        let n1 = j.model.nodes()[0].name.clone();
        let n2 = j.model.nodes()[1].name.clone();
        // a node gone from the snapshot and a zero count are left out
        j.containers = [(n1.clone(), 32), (n2.clone(), 0), ("gone".to_string(), 5)].into();
        let bytes = encode(&j, 1, &key, &cache).unwrap();
        let w = jobs::decode_job(&bytes, &key.verifying_key()).unwrap();
        assert_eq!(w.containers, [(n1, 32)].into());
        assert_eq!(w, wire_job(&j, 1));
    }
}
