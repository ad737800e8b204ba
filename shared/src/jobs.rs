//! Placement jobs for `scheduler worker` processes, and their results (protocol v3).
//!
//! The control plane publishes a [`Job`] on [`JOBS`]; workers read it through an MQTT shared
//! subscription ([`shared_jobs`]), so that each job goes to one worker of the group, and answer
//! with a [`JobResult`] on [`results`]`(worker)`.
//!
//! A job frame is postcard of `(version, body, signature)`, like [`crate::wire`] frames but with
//! its own signing context ([`JOB_SIGNING_CONTEXT`]): a signed desired state cannot pass for a
//! job, nor the reverse. Workers act only on jobs signed by the pinned control-plane key.
//! Results are not signed: the control plane never trusts one blindly (it checks the assignment
//! against its own model and recomputes the score), and the job's random `nonce` must come back.
//!
//! The body carries the application and what other applications hold (resources reserved and
//! containers per node) as JSON (the domain models evolve and skip empty optional fields, which
//! a non-self-describing format cannot read back), and the cluster snapshot packed apart ([`pack_cluster`]): its nodes as JSON, its links
//! (the bulk of a snapshot) in columns of node-name indices and numbers in the shortest exact
//! form ([`Num`]), the whole deflated. A packed snapshot is made once and reused by every job on
//! that snapshot, and a worker unpacks it once for all the jobs that carry the same bytes.
//! Encoding checks that everything decodes back equal, so what a worker computes on is exactly
//! what the control plane holds; anything else is an error, never a silently different snapshot.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::model::{Application, Cluster, Link, Resources};

/// The job protocol version this build speaks. Version 2 added the other applications'
/// containers per node ([`Job::containers`]), without which a worker could fill a node past the
/// limit of its desired state; version 3 the medians between datacenters in the snapshot's
/// estimates (`LinkEstimates::between`), which a version-2 worker's snapshot reader refuses.
pub const VERSION: u16 = 3;
/// The version before: its snapshots have no medians between datacenters and read the same
/// (its pairs are estimated as a version-2 build did), so a frame of it is opened too.
pub const VERSION_WITHOUT_BETWEEN: u16 = 2;
/// The version before that: its jobs carry no container counts, so [`open_job`] names it.
pub const VERSION_WITHOUT_CONTAINERS: u16 = 1;
/// Domain separation for job signatures.
pub const JOB_SIGNING_CONTEXT: &[u8] = b"acoa/v1 scheduler job\0";
/// Jobs, control plane → workers (QoS 1, not retained).
pub const JOBS: &str = "acoa/v1/sched/jobs";
/// What the control plane subscribes to for results.
pub const RESULTS_WILDCARD: &str = "acoa/v1/sched/results/+";
/// The default shared-subscription group of the workers.
pub const DEFAULT_GROUP: &str = "acoa-schedulers";
/// Largest job frame (under the embedded broker's 1 MiB publication limit).
pub const MAX_JOB_BYTES: usize = 1_000_000;
/// Largest snapshot once inflated (a bound on what a frame can make a worker allocate).
pub const MAX_CLUSTER_BYTES: usize = 64 << 20;
/// Largest result frame.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;

/// `acoa/v1/sched/results/{worker}`: results, worker → control plane (QoS 1).
pub fn results(worker: &str) -> String {
    format!("acoa/v1/sched/results/{worker}")
}

/// `$share/{group}/acoa/v1/sched/jobs`: what a worker of `group` subscribes to.
pub fn shared_jobs(group: &str) -> String {
    format!("$share/{group}/{JOBS}")
}

/// What can go wrong with a job or result frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("frame does not decode: {0}")]
    Decode(postcard::Error),
    #[error("unknown job protocol version {0} (this build speaks version {VERSION})")]
    UnknownVersion(u16),
    #[error(
        "job protocol version {VERSION_WITHOUT_CONTAINERS}, before the container counts per node (this build speaks version {VERSION})"
    )]
    WithoutContainers,
    #[error("job is not signed")]
    Unsigned,
    #[error("job signature does not verify against the control plane's key")]
    BadSignature,
    #[error("frame of {size} bytes is over the limit of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("job body: {0}")]
    Body(String),
    #[error("frame could not be encoded: {0}")]
    Encode(String),
    #[error("the job does not survive encoding unchanged ({0}); it must be computed locally")]
    NotExact(&'static str),
}

/// A placement computation for a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: u64,
    /// Random, echoed by the result: a result for this job comes from someone who read it.
    pub nonce: u128,
    pub app: String,
    pub application: Application,
    pub cluster: Cluster,
    /// What other applications hold, per node (the ledger).
    pub reserved: BTreeMap<String, Resources>,
    /// How many containers other applications' placements put on each node (the ledger's
    /// counts); only nodes of the snapshot, with a count above zero ([`check_containers`]).
    pub containers: BTreeMap<String, u32>,
    /// The search stops after this long with the best placement found so far.
    pub time_budget_ms: u64,
    /// Search-tree nodes spent counting feasible deployments before giving an upper bound.
    pub count_budget: u64,
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub id: u64,
    pub nonce: u128,
    /// The worker's name (also in the topic).
    pub worker: String,
    pub outcome: ResultOutcome,
    /// Time the computation took on the worker.
    pub elapsed_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ResultOutcome {
    /// Component → node, with the worker's score (the control plane recomputes it).
    Placed {
        assignment: BTreeMap<String, String>,
        score: f64,
        feasible_deployments: u128,
    },
    /// No deployment exists; the reason names what blocks.
    Infeasible(String),
    /// The computation failed.
    Error(String),
}

/// A number in its shortest exact form: measured link values are `f32` on the wire from the
/// agents, and latencies are quantized to tenths of a millisecond by the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Num {
    F32(f32),
    Tenths(u32),
    F64(f64),
}

impl Num {
    pub fn pack(x: f64) -> Num {
        if (x as f32) as f64 == x {
            return Num::F32(x as f32);
        }
        let k = (x / 0.1).round();
        if (0.0..=u32::MAX as f64).contains(&k) && k * 0.1 == x {
            return Num::Tenths(k as u32);
        }
        Num::F64(x)
    }

    pub fn get(self) -> f64 {
        match self {
            Num::F32(v) => v as f64,
            Num::Tenths(k) => k as f64 * 0.1,
            Num::F64(v) => v,
        }
    }
}

/// The links of a snapshot in columns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Links {
    names: Vec<String>,
    from: Vec<u32>,
    to: Vec<u32>,
    latency_ms: Vec<Num>,
    jitter_ms: Vec<Num>,
    success: Vec<Num>,
}

#[derive(Serialize, Deserialize)]
struct Doc {
    application: Application,
    reserved: BTreeMap<String, Resources>,
    containers: BTreeMap<String, u32>,
}

#[derive(Serialize, Deserialize)]
struct PackedCluster {
    /// The snapshot without its links, as JSON.
    json: String,
    links: Links,
}

#[derive(Serialize, Deserialize)]
struct JobBody {
    id: u64,
    nonce: u128,
    app: String,
    time_budget_ms: u64,
    count_budget: u64,
    /// [`Doc`] as JSON.
    doc: String,
    /// [`pack_cluster`].
    cluster: Vec<u8>,
}

/// The same envelope as the agents' messages (version first, body, signature).
use crate::wire::Frame;

fn signed_bytes(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(JOB_SIGNING_CONTEXT.len() + body.len());
    v.extend_from_slice(JOB_SIGNING_CONTEXT);
    v.extend_from_slice(body);
    v
}

fn pack_links(links: &[Link]) -> Links {
    let mut l = Links::default();
    let mut index: BTreeMap<&str, u32> = BTreeMap::new();
    for k in links {
        for n in [k.from.as_str(), k.to.as_str()] {
            if !index.contains_key(n) {
                index.insert(n, l.names.len() as u32);
                l.names.push(n.to_string());
            }
        }
        l.from.push(index[k.from.as_str()]);
        l.to.push(index[k.to.as_str()]);
        l.latency_ms.push(Num::pack(k.latency_ms));
        l.jitter_ms.push(Num::pack(k.jitter_ms));
        l.success.push(Num::pack(k.success));
    }
    l
}

fn unpack_links(l: Links) -> Result<Vec<Link>, JobError> {
    let n = l.from.len();
    if [
        l.to.len(),
        l.latency_ms.len(),
        l.jitter_ms.len(),
        l.success.len(),
    ]
    .iter()
    .any(|&m| m != n)
    {
        return Err(JobError::Body("link columns differ in length".into()));
    }
    let name = |i: u32| {
        l.names
            .get(i as usize)
            .cloned()
            .ok_or_else(|| JobError::Body(format!("link names a node index {i} out of range")))
    };
    (0..n)
        .map(|i| {
            Ok(Link {
                from: name(l.from[i])?,
                to: name(l.to[i])?,
                latency_ms: l.latency_ms[i].get(),
                jitter_ms: l.jitter_ms[i].get(),
                success: l.success[i].get(),
            })
        })
        .collect()
}

/// The snapshot packed for jobs: deflated postcard of its nodes as JSON and its links in
/// columns. Fails unless it unpacks exactly equal.
pub fn pack_cluster(cluster: &Cluster) -> Result<Vec<u8>, JobError> {
    let mut rest = cluster.clone();
    let links = pack_links(&std::mem::take(&mut rest.links));
    let p = PackedCluster {
        json: serde_json::to_string(&rest).map_err(|e| JobError::Encode(e.to_string()))?,
        links,
    };
    let raw = postcard::to_allocvec(&p).map_err(|e| JobError::Encode(e.to_string()))?;
    let packed = miniz_oxide::deflate::compress_to_vec(&raw, 1);
    if unpack_cluster(&packed).as_ref() != Ok(cluster) {
        return Err(JobError::NotExact(
            "a number or field of the snapshot does not read back the same",
        ));
    }
    Ok(packed)
}

/// The snapshot of [`pack_cluster`].
pub fn unpack_cluster(packed: &[u8]) -> Result<Cluster, JobError> {
    let raw = miniz_oxide::inflate::decompress_to_vec_with_limit(packed, MAX_CLUSTER_BYTES)
        .map_err(|e| JobError::Body(format!("snapshot does not inflate: {e:?}")))?;
    let p: PackedCluster = postcard::from_bytes(&raw).map_err(JobError::Decode)?;
    let mut c: Cluster =
        serde_json::from_str(&p.json).map_err(|e| JobError::Body(format!("snapshot: {e}")))?;
    c.links = unpack_links(p.links)?;
    Ok(c)
}

fn body_of(job: &Job, cluster: &[u8]) -> Result<(Vec<u8>, String), JobError> {
    let doc = Doc {
        application: job.application.clone(),
        reserved: job.reserved.clone(),
        containers: job.containers.clone(),
    };
    let doc = serde_json::to_string(&doc).map_err(|e| JobError::Encode(e.to_string()))?;
    let body = JobBody {
        id: job.id,
        nonce: job.nonce,
        app: job.app.clone(),
        time_budget_ms: job.time_budget_ms,
        count_budget: job.count_budget,
        doc: doc.clone(),
        cluster: cluster.to_vec(),
    };
    let b = postcard::to_allocvec(&body).map_err(|e| JobError::Encode(e.to_string()))?;
    Ok((b, doc))
}

/// A job whose snapshot is still packed: `job.cluster` is empty, `cluster` is what
/// [`unpack_cluster`] reads (the same bytes for every job on the same snapshot).
fn job_of(body: &[u8]) -> Result<(Job, Vec<u8>), JobError> {
    let b: JobBody = postcard::from_bytes(body).map_err(JobError::Decode)?;
    let doc: Doc = serde_json::from_str(&b.doc).map_err(|e| JobError::Body(e.to_string()))?;
    Ok((
        Job {
            id: b.id,
            nonce: b.nonce,
            app: b.app,
            application: doc.application,
            cluster: Cluster::default(),
            reserved: doc.reserved,
            containers: doc.containers,
            time_budget_ms: b.time_budget_ms,
            count_budget: b.count_budget,
        },
        b.cluster,
    ))
}

/// Encodes and signs `job`. Fails if the frame is over [`MAX_JOB_BYTES`] or if the job would
/// not decode back exactly equal (then it must be computed by the control plane itself).
pub fn encode_job(job: &Job, key: &SigningKey) -> Result<Vec<u8>, JobError> {
    encode_job_packed(job, &pack_cluster(&job.cluster)?, key)
}

/// [`encode_job`] with the snapshot already packed (`job.cluster` is not read).
pub fn encode_job_packed(job: &Job, cluster: &[u8], key: &SigningKey) -> Result<Vec<u8>, JobError> {
    let (body, _) = body_of(job, cluster)?;
    match job_of(&body) {
        Ok((j, _))
            if j.application == job.application
                && j.reserved == job.reserved
                && j.containers == job.containers
                && j.app == job.app => {}
        _ => {
            return Err(JobError::NotExact(
                "a number or field of the application does not read back the same",
            ))
        }
    }
    let sig = key.sign(&signed_bytes(&body)).to_bytes();
    let frame = postcard::to_allocvec(&Frame {
        version: VERSION,
        body: &body,
        signature: &sig,
    })
    .map_err(|e| JobError::Encode(e.to_string()))?;
    if frame.len() > MAX_JOB_BYTES {
        return Err(JobError::TooLarge {
            size: frame.len(),
            max: MAX_JOB_BYTES,
        });
    }
    Ok(frame)
}

fn open(bytes: &[u8], max: usize) -> Result<Frame<'_>, JobError> {
    if bytes.len() > max {
        return Err(JobError::TooLarge {
            size: bytes.len(),
            max,
        });
    }
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(JobError::Decode)?;
    if version == VERSION_WITHOUT_CONTAINERS {
        return Err(JobError::WithoutContainers);
    }
    if version != VERSION && version != VERSION_WITHOUT_BETWEEN {
        return Err(JobError::UnknownVersion(version));
    }
    postcard::from_bytes(bytes).map_err(JobError::Decode)
}

/// Opens a job frame and checks its signature against the control plane's `key`; the
/// snapshot stays packed (`job.cluster` is empty): see [`unpack_cluster`].
pub fn open_job(bytes: &[u8], key: &VerifyingKey) -> Result<(Job, Vec<u8>), JobError> {
    let f = open(bytes, MAX_JOB_BYTES)?;
    if f.signature.is_empty() {
        return Err(JobError::Unsigned);
    }
    let sig = Signature::from_slice(f.signature).map_err(|_| JobError::BadSignature)?;
    key.verify(&signed_bytes(f.body), &sig)
        .map_err(|_| JobError::BadSignature)?;
    job_of(f.body)
}

/// Opens a job frame, checks its signature against the control plane's `key`, decodes it
/// (its container counts checked against its snapshot: [`check_containers`]).
pub fn decode_job(bytes: &[u8], key: &VerifyingKey) -> Result<Job, JobError> {
    let (mut job, cluster) = open_job(bytes, key)?;
    job.cluster = unpack_cluster(&cluster)?;
    check_containers(&job.containers, |n| job.cluster.node(n).is_some())?;
    Ok(job)
}

/// A job's container counts are at most one per node of its snapshot (`known` says which
/// names are), each above zero: what the control plane sends, so anything else is refused.
pub fn check_containers(
    containers: &BTreeMap<String, u32>,
    known: impl Fn(&str) -> bool,
) -> Result<(), JobError> {
    for (n, k) in containers {
        if !known(n) {
            return Err(JobError::Body(format!(
                "container counts name node {n}, which is not in the snapshot"
            )));
        }
        if *k == 0 {
            return Err(JobError::Body(format!(
                "container counts give node {n} zero containers (nodes without any are left out)"
            )));
        }
    }
    Ok(())
}

/// Encodes a result (unsigned).
pub fn encode_result(r: &JobResult) -> Result<Vec<u8>, JobError> {
    let body = postcard::to_allocvec(r).map_err(|e| JobError::Encode(e.to_string()))?;
    let frame = postcard::to_allocvec(&Frame {
        version: VERSION,
        body: &body,
        signature: &[],
    })
    .map_err(|e| JobError::Encode(e.to_string()))?;
    if frame.len() > MAX_RESULT_BYTES {
        return Err(JobError::TooLarge {
            size: frame.len(),
            max: MAX_RESULT_BYTES,
        });
    }
    Ok(frame)
}

/// Decodes a result (not trusted: see the module's documentation).
pub fn decode_result(bytes: &[u8]) -> Result<JobResult, JobError> {
    let f = open(bytes, MAX_RESULT_BYTES)?;
    postcard::from_bytes(f.body).map_err(JobError::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{parse_application, Capacity, Layer, Node, Usage};

    fn node(n: &str) -> Node {
        Node {
            name: n.into(),
            datacenter: "dc".into(),
            layer: Layer::Edge,
            arch: "aarch64".into(),
            hardware: vec!["gps".into()],
            software: vec![],
            capacity: Capacity {
                cpu_millis: 2000,
                memory_mb: 2048,
                disk_mb: 1000,
                ..Default::default()
            },
            usage: Usage::default(),
            position: None,
        }
    }

    fn job() -> Job {
        let names = ["a", "b", "c"];
        let mut links = vec![];
        for (i, f) in names.iter().enumerate() {
            for (j, t) in names.iter().enumerate() {
                links.push(Link {
                    from: f.to_string(),
                    to: t.to_string(),
                    latency_ms: [0.5, 1.3000000000000003, 0.1 * 17.0, 1.234_567_891_234]
                        [(i + j) % 4],
                    jitter_ms: 0.25f32 as f64,
                    success: 0.95f32 as f64,
                });
            }
        }
        let application = parse_application(
            "application: x\nscheduler: qos\ncomponents:\n  - {name: s, image: i, requires: {hardware: [gps]}, resources: {cpu_millis: 100, memory_mb: 64}}\n  - {name: t, image: i}\nchannels:\n  - {name: st, from: s, to: t}\npaths:\n  - {name: p, channels: [st]}\ncriteria:\n  - {type: min-e2e-response-time, path: p, weight: 0.7}\n  - {type: max-e2e-reliability, path: p, weight: 0.3}\n",
        )
        .unwrap();
        Job {
            id: 7,
            nonce: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            app: "x".into(),
            application,
            cluster: Cluster {
                cluster: "live".into(),
                nodes: names.iter().map(|n| node(n)).collect(),
                links,
                ..Default::default()
            },
            reserved: [(
                "a".to_string(),
                Resources {
                    cpu_millis: 300,
                    memory_mb: 128,
                    ..Default::default()
                },
            )]
            .into(),
            containers: [("a".to_string(), 31), ("c".to_string(), 2)].into(),
            time_budget_ms: 500,
            count_budget: 100_000,
        }
    }

    fn key(b: u8) -> SigningKey {
        SigningKey::from_bytes(&[b; 32])
    }

    #[test]
    fn a_job_round_trips_exactly_and_only_with_the_right_key() {
        let j = job();
        let bytes = encode_job(&j, &key(1)).unwrap();
        assert_eq!(decode_job(&bytes, &key(1).verifying_key()).unwrap(), j);
        assert_eq!(
            decode_job(&bytes, &key(2).verifying_key()),
            Err(JobError::BadSignature)
        );
    }

    #[test]
    fn a_job_carries_the_container_counts_of_its_snapshots_nodes_only() {
        let j = job();
        let vk = key(1).verifying_key();
        let back = decode_job(&encode_job(&j, &key(1)).unwrap(), &vk).unwrap();
        assert_eq!(back.containers["a"], 31);
        assert_eq!(back.containers["c"], 2);
        assert_eq!(back.containers.len(), 2);
        // the previous version, whose jobs carry no counts, is named rather than misread
        let bytes = encode_job(&j, &key(1)).unwrap();
        let f: Frame<'_> = postcard::from_bytes(&bytes).unwrap();
        let v1 = postcard::to_allocvec(&Frame {
            version: VERSION_WITHOUT_CONTAINERS,
            body: f.body,
            signature: f.signature,
        })
        .unwrap();
        let e = decode_job(&v1, &vk).unwrap_err();
        assert_eq!(e, JobError::WithoutContainers);
        assert!(e.to_string().contains("before the container counts"), "{e}");
        // version 2 (no medians between datacenters) reads the same; 4 is unknown
        let frame = |version| {
            postcard::to_allocvec(&Frame {
                version,
                body: f.body,
                signature: f.signature,
            })
            .unwrap()
        };
        assert_eq!(decode_job(&frame(2), &vk).unwrap(), back);
        assert_eq!(
            decode_job(&frame(4), &vk).unwrap_err(),
            JobError::UnknownVersion(4)
        );
        // counts for a node outside the snapshot, or a zero count: refused, named
        for (n, k) in [("zz", 3), ("b", 0)] {
            let mut bad = job();
            bad.containers.insert(n.to_string(), k);
            let e = decode_job(&encode_job(&bad, &key(1)).unwrap(), &vk).unwrap_err();
            assert!(
                matches!(&e, JobError::Body(m) if m.contains(&format!("node {n}"))),
                "{e}"
            );
        }
    }

    #[test]
    fn numbers_pack_exactly() {
        for x in [
            0.0,
            0.5,
            0.1,
            0.3,
            24.1,
            1e-300,
            0.1f32 as f64,
            2.0f64.sqrt(),
            1e12,
        ] {
            assert_eq!(Num::pack(x).get().to_bits(), x.to_bits(), "{x}");
        }
        assert!(matches!(Num::pack(0.5), Num::F32(_)));
        assert!(matches!(Num::pack(17.0 * 0.1), Num::Tenths(17)));
    }

    #[test]
    fn bad_frames_are_errors_never_panics() {
        let j = job();
        let bytes = encode_job(&j, &key(1)).unwrap();
        let vk = key(1).verifying_key();
        // unsigned
        let f: Frame<'_> = postcard::from_bytes(&bytes).unwrap();
        let unsigned = postcard::to_allocvec(&Frame {
            version: VERSION,
            body: f.body,
            signature: &[],
        })
        .unwrap();
        assert_eq!(decode_job(&unsigned, &vk), Err(JobError::Unsigned));
        // another version
        let v9 = postcard::to_allocvec(&Frame {
            version: 9,
            body: f.body,
            signature: f.signature,
        })
        .unwrap();
        assert_eq!(decode_job(&v9, &vk), Err(JobError::UnknownVersion(9)));
        // every truncation, and bit flips
        for n in 0..bytes.len() {
            assert!(decode_job(&bytes[..n], &vk).is_err());
        }
        for i in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            let _ = decode_job(&b, &vk);
            let _ = decode_result(&b);
        }
        assert!(decode_job(b"garbage", &vk).is_err());
        assert!(decode_result(b"").is_err());
        assert!(matches!(
            decode_job(&vec![0u8; MAX_JOB_BYTES + 1], &vk),
            Err(JobError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_result_round_trips() {
        let r = JobResult {
            id: 3,
            nonce: 9,
            worker: "w1".into(),
            outcome: ResultOutcome::Placed {
                assignment: [("s".to_string(), "a".to_string())].into(),
                score: 0.75,
                feasible_deployments: u128::MAX,
            },
            elapsed_us: 12,
        };
        assert_eq!(decode_result(&encode_result(&r).unwrap()).unwrap(), r);
        let r2 = JobResult {
            outcome: ResultOutcome::Infeasible("no node".into()),
            ..r
        };
        assert_eq!(decode_result(&encode_result(&r2).unwrap()).unwrap(), r2);
    }

    #[test]
    fn topics() {
        assert_eq!(shared_jobs("g"), "$share/g/acoa/v1/sched/jobs");
        assert_eq!(results("w1"), "acoa/v1/sched/results/w1");
    }
}
