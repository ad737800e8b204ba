//! `scheduler worker`: takes placement jobs from the control plane over an MQTT shared
//! subscription (one job goes to one worker of the group), computes them, publishes the results.
//!
//! Invariants: only jobs signed by the pinned control-plane key are computed; anything else on
//! the jobs topic is a log line and the worker goes on. Work in hand is bounded: at most
//! `threads` jobs compute while at most `queue` wait; a job that finds the queue full is dropped
//! with a log line (the control plane re-publishes a job nobody answers). The broker connection
//! is retried forever with a backoff bounded at 5 s. A panicking computation answers an error.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_scheduler::{place_on, Infra, Ledger, Options, Outcome};
use acoa_shared::jobs::{self, Job, JobError, JobResult, ResultOutcome};
use acoa_shared::topics::acl;
use acoa_shared::wire::keys;
use ed25519_dalek::VerifyingKey;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::{mpsc, Semaphore};
use tracing::{error, info, warn};

/// What `scheduler worker` is given.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub broker_url: String,
    pub username: String,
    pub password: String,
    pub control_plane_key: String,
    pub group: String,
    pub name: String,
    pub threads: usize,
    pub queue: usize,
}

/// `mqtt://host:port` (or `tcp://`, or plain `host:port`) → host, port.
pub fn parse_url(url: &str) -> anyhow::Result<(String, u16)> {
    use acoa_shared::topics::{broker_address, BrokerUrlError};
    broker_address(url).map_err(|e| match e {
        BrokerUrlError::Tls(_) => {
            anyhow::anyhow!("{url}: TLS brokers are not supported by this build of the worker")
        }
        e => anyhow::anyhow!("{e}"),
    })
}

/// The last snapshot unpacked, as its packed bytes, and its [`Infra`]: consecutive jobs on the
/// same live model carry the same bytes, and are computed without unpacking them again.
#[derive(Default)]
pub struct SnapshotCache {
    last: Option<(Vec<u8>, Arc<Infra>)>,
}

impl SnapshotCache {
    pub fn infra(&mut self, packed: &[u8]) -> Result<Arc<Infra>, JobError> {
        if let Some((b, i)) = &self.last {
            if b.as_slice() == packed {
                return Ok(i.clone());
            }
        }
        let cluster = jobs::unpack_cluster(packed)?;
        let infra = Arc::new(Infra::from_cluster(&cluster));
        self.last = Some((packed.to_vec(), infra.clone()));
        Ok(infra)
    }
}

/// The job's ledger: the resources other applications reserve and the containers their
/// placements put on each node.
pub fn ledger_of(job: &Job) -> Ledger {
    let mut ledger = Ledger::new();
    for (n, r) in &job.reserved {
        ledger.reserve(n, *r);
    }
    for (n, k) in &job.containers {
        ledger.add_containers(n, *k);
    }
    ledger
}

/// The placement computation, exactly as the control plane runs it in process
/// (`cloud-broker/src/sched.rs`): the search on the job's snapshot around its ledger
/// ([`ledger_of`]), within the job's budgets. Container counts that do not fit the snapshot
/// ([`jobs::check_containers`]) are an error result.
pub fn compute(job: &Job, infra: &Infra) -> ResultOutcome {
    if let Err(e) = jobs::check_containers(&job.containers, |n| infra.index_of(n).is_some()) {
        return ResultOutcome::Error(e.to_string());
    }
    let ledger = ledger_of(job);
    let opts = Options {
        time_budget: Some(Duration::from_millis(job.time_budget_ms)),
        count_budget: job.count_budget,
        ..Default::default()
    };
    match place_on(infra, &job.application, &ledger, &opts) {
        Ok(r) => match r.outcome {
            Outcome::Placed(p) => ResultOutcome::Placed {
                assignment: p.assignment,
                score: p.score,
                feasible_deployments: p.feasible_deployments,
            },
            Outcome::Infeasible(i) => ResultOutcome::Infeasible(i.reason),
        },
        Err(e) => ResultOutcome::Error(e.to_string()),
    }
}

/// [`compute`] on the job's packed snapshot, timed, with a panic turned into an error result.
pub fn answer(job: &Job, packed: &[u8], cache: &Mutex<SnapshotCache>, worker: &str) -> JobResult {
    let t = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let infra = cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .infra(packed);
        match infra {
            Ok(i) => compute(job, &i),
            Err(e) => ResultOutcome::Error(format!("the snapshot does not unpack: {e}")),
        }
    }))
    .unwrap_or_else(|_| ResultOutcome::Error("the scheduler failed (panicked)".into()));
    JobResult {
        id: job.id,
        nonce: job.nonce,
        worker: worker.to_string(),
        outcome,
        elapsed_us: t.elapsed().as_micros() as u64,
    }
}

pub fn run(args: WorkerArgs) -> anyhow::Result<()> {
    acoa_shared::model::check_name("--name", &args.name)
        .map_err(|e| anyhow::anyhow!("--name {}: {}", args.name, e.reason))?;
    if args.group.is_empty() || args.group.contains(['/', '+', '#']) {
        anyhow::bail!("--group {}: one topic level expected", args.group);
    }
    let key = keys::public_from_hex(&args.control_plane_key)
        .map_err(|e| anyhow::anyhow!("--control-plane-key: {e}"))?;
    let (host, port) = parse_url(&args.broker_url)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(args, key, host, port))
}

async fn serve(a: WorkerArgs, key: VerifyingKey, host: String, port: u16) -> anyhow::Result<()> {
    let mut o = MqttOptions::new(
        format!("{}{}", acl::WORKER_CLIENT_PREFIX, a.name),
        host,
        port,
    );
    o.set_credentials(&a.username, &a.password);
    o.set_keep_alive(Duration::from_secs(10));
    let max = jobs::MAX_JOB_BYTES + 4096;
    o.set_max_packet_size(max, max);
    o.set_clean_session(true);
    let (client, mut eventloop) = AsyncClient::new(o, 64);

    // Bounded work: `threads` computing, `queue` waiting.
    let (job_tx, mut job_rx) = mpsc::channel::<(Job, Vec<u8>)>(a.queue.max(1));
    let cache = Arc::new(Mutex::new(SnapshotCache::default()));
    let permits = Arc::new(Semaphore::new(a.threads.max(1)));
    let pub_client = client.clone();
    let name = a.name.clone();
    tokio::spawn(async move {
        while let Some((job, packed)) = job_rx.recv().await {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let c = pub_client.clone();
            let name = name.clone();
            let cache = cache.clone();
            tokio::spawn(async move {
                let (id, app) = (job.id, job.app.clone());
                let worker = name.clone();
                let r = match tokio::task::spawn_blocking(move || {
                    answer(&job, &packed, &cache, &worker)
                })
                .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        error!("job {id} for {app}: the computation did not finish: {e}");
                        return;
                    }
                };
                drop(permit);
                match &r.outcome {
                    ResultOutcome::Placed { score, .. } => info!(
                        "job {id} for {app}: placed with score {score:.6} in {} µs",
                        r.elapsed_us
                    ),
                    ResultOutcome::Infeasible(why) => {
                        info!("job {id} for {app}: cannot be placed: {why}")
                    }
                    ResultOutcome::Error(e) => warn!("job {id} for {app}: error: {e}"),
                }
                match jobs::encode_result(&r) {
                    Ok(bytes) => {
                        if let Err(e) = c
                            .publish(jobs::results(&name), QoS::AtLeastOnce, false, bytes)
                            .await
                        {
                            error!("job {id} for {app}: result not published: {e}");
                        }
                    }
                    Err(e) => error!("job {id} for {app}: result not encoded: {e}"),
                }
            });
        }
    });

    let filter = jobs::shared_jobs(&a.group);
    let mut shutdown = Box::pin(shutdown_signal());
    let mut backoff = 100u64;
    info!(
        "scheduler worker {} starting: broker {}, group {}, {} threads, queue {}",
        a.name, a.broker_url, a.group, a.threads, a.queue
    );
    loop {
        let ev = tokio::select! {
            _ = &mut shutdown => {
                info!("scheduler worker {} stopping (signal)", a.name);
                let _ = client.disconnect().await;
                return Ok(());
            }
            ev = eventloop.poll() => ev,
        };
        match ev {
            Ok(Event::Incoming(Packet::Publish(p))) => {
                if p.topic != jobs::JOBS {
                    warn!("message on unexpected topic {} ignored", p.topic);
                    continue;
                }
                match jobs::open_job(&p.payload, &key) {
                    Err(e) => warn!("job dropped ({} bytes): {e}", p.payload.len()),
                    Ok((job, packed)) => {
                        let (id, app) = (job.id, job.app.clone());
                        match job_tx.try_send((job, packed)) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Full(_)) => warn!(
                                "job {id} for {app} dropped: {} jobs already waiting (the control plane re-publishes it)",
                                a.queue
                            ),
                            Err(mpsc::error::TrySendError::Closed(_)) => {
                                anyhow::bail!("the computation loop stopped")
                            }
                        }
                    }
                }
            }
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                backoff = 100;
                info!("connected to the broker");
                let c = client.clone();
                let f = filter.clone();
                tokio::spawn(async move {
                    if let Err(e) = c.subscribe(f.clone(), QoS::AtLeastOnce).await {
                        error!("cannot subscribe to {f}: {e}");
                    }
                });
            }
            Ok(Event::Incoming(Packet::SubAck(s))) => {
                if s.return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                {
                    error!("the broker refused the subscription to {filter}");
                } else {
                    info!("worker {} takes jobs from {filter}", a.name);
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!("broker connection: {e}; retrying in {backoff} ms");
                tokio::time::sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(5000);
            }
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_scheduler::ledger::NODE_CONTAINER_LIMIT;
    use acoa_shared::model;
    use ed25519_dalek::SigningKey;
    use std::collections::BTreeMap;

    fn railway(file: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/railway")
            .join(file)
    }

    /// A smoke-monitoring job on the railway snapshot, through its signed frame: what
    /// [`answer`] is given once the worker opened it.
    fn decoded(containers: BTreeMap<String, u32>) -> (Job, Vec<u8>) {
        let cluster = model::load_cluster(&railway("cluster.yaml")).unwrap();
        let application = model::load_application(&railway("smoke-monitoring.yaml")).unwrap();
        let job = Job {
            id: 1,
            nonce: 2,
            app: "smoke-monitoring".into(),
            application,
            cluster,
            reserved: BTreeMap::new(),
            containers,
            time_budget_ms: 5000,
            count_budget: 1000,
        };
        let key = SigningKey::from_bytes(&[9; 32]);
        let frame = jobs::encode_job(&job, &key).unwrap();
        jobs::open_job(&frame, &key.verifying_key()).unwrap()
    }

    fn outcome(containers: BTreeMap<String, u32>) -> ResultOutcome {
        let (job, packed) = decoded(containers);
        answer(&job, &packed, &Mutex::new(SnapshotCache::default()), "w").outcome
    }

    #[test]
    fn a_node_at_the_container_limit_is_refused() {
        let ResultOutcome::Placed { assignment, .. } = outcome(BTreeMap::new()) else {
            panic!("the railway places smoke-monitoring")
        };
        // the node of the first component is full with other applications' containers
        let full = assignment["measurement"].clone();
        let counts: BTreeMap<String, u32> = [(full.clone(), NODE_CONTAINER_LIMIT)].into();
        match outcome(counts) {
            ResultOutcome::Placed { assignment, .. } => {
                assert!(!assignment.values().any(|n| *n == full), "{assignment:?}")
            }
            ResultOutcome::Infeasible(why) => {
                assert!(
                    why.contains(&format!("{full} already runs 32 containers")),
                    "{why}"
                )
            }
            e => panic!("{e:?}"),
        }
        // every node full: nothing can be placed, and the reason names the limit
        let cluster = model::load_cluster(&railway("cluster.yaml")).unwrap();
        let all = cluster
            .nodes
            .iter()
            .map(|n| (n.name.clone(), NODE_CONTAINER_LIMIT))
            .collect();
        match outcome(all) {
            ResultOutcome::Infeasible(why) => {
                assert!(
                    why.contains("the most a node's desired state carries"),
                    "{why}"
                )
            }
            o => panic!("{o:?}"),
        }
        // one below the limit: room for one container there
        let counts = [(full.clone(), NODE_CONTAINER_LIMIT - 1)].into();
        let ResultOutcome::Placed { assignment, .. } = outcome(counts) else {
            panic!()
        };
        assert!(assignment.values().filter(|n| **n == full).count() <= 1);
    }

    #[test]
    fn counts_outside_the_snapshot_are_an_error_result() {
        let (mut job, packed) = decoded(BTreeMap::new());
        job.containers.insert("nowhere".into(), 3);
        let r = answer(&job, &packed, &Mutex::new(SnapshotCache::default()), "w");
        assert!(
            matches!(&r.outcome, ResultOutcome::Error(e) if e.contains("nowhere")),
            "{:?}",
            r.outcome
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884").unwrap(),
            ("127.0.0.1".into(), 1884)
        );
        assert_eq!(parse_url("broker").unwrap(), ("broker".into(), 1883));
        assert!(parse_url("mqtts://h:8883").is_err());
        assert!(parse_url("mqtt://:1").is_err());
        assert!(parse_url("mqtt://h:x").is_err());
    }
}
