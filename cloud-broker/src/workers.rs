//! Placement jobs computed by `scheduler worker` processes (`serve --scheduler-workers
//! external`) instead of in this process.
//!
//! A [`Job`] of the engine becomes a signed [`jobs::Job`] on `acoa/v1/sched/jobs`; workers take
//! jobs through a shared subscription, so each goes to one worker, and answer on
//! `acoa/v1/sched/results/{worker}`. [`Dispatch`] is the bookkeeping, a pure state machine
//! (plain values in, [`Step`]s out): at most `window` jobs are out at once, each with a deadline;
//! a job nobody answers in time is published again, and after `max_tries` publications it is
//! computed in process (log line). [`check`] is how a result is received: never trusted
//! blindly, its assignment must name every component and only known nodes, satisfy every
//! constraint and link, and fit the resources left on the job's snapshot and ledger; the score
//! and grades are computed here again. A result that fails is dropped with a log line and the
//! job is published again. The engine's optimistic commit then treats the result like any
//! other: one that no longer fits the ledger counts a collision and is recomputed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::jobs::{self, ResultOutcome};
use acoa_shared::model::Cluster;
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, Event as MqttEvent, Packet, QoS};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::engine::{finish_job, grades, run_job, Event, Job, JobOutcome, JobResult};
use crate::identity::Login;
use crate::sched;
use crate::status::PlacementRecord;

/// Tunables of the dispatch to workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkersConfig {
    /// A job not answered this long after its publication is published again.
    pub timeout_ms: u64,
    /// Publications of a job before it is computed in process.
    pub max_tries: u32,
    /// Jobs out at workers at once; more wait here.
    pub window: usize,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            timeout_ms: 10_000,
            max_tries: 3,
            window: 16,
        }
    }
}

/// What the I/O loop must do for the dispatch.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Publish this signed job frame on the jobs topic.
    Publish { id: u64, frame: Arc<Vec<u8>> },
    /// Compute the job in process.
    Local { job: Box<Job>, why: String },
    /// A result came for an outstanding job: [`check`] it, then call [`Dispatch::accepted`] or
    /// [`Dispatch::rejected`].
    Check {
        job: Box<Job>,
        result: Box<jobs::JobResult>,
    },
}

#[derive(Debug, Clone)]
struct Pending {
    job: Box<Job>,
    nonce: u128,
    frame: Arc<Vec<u8>>,
    /// Publications so far.
    tries: u32,
    /// When the current publication expires; `None` while waiting for the window.
    deadline: Option<u64>,
    checking: bool,
}

/// Counters for the operator and the benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchStats {
    pub published: u64,
    pub republished: u64,
    pub local: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub dropped: u64,
}

/// The outstanding jobs, their deadlines and tries.
#[derive(Debug, Default)]
pub struct Dispatch {
    cfg: WorkersConfig,
    pending: BTreeMap<u64, Pending>,
    queue: VecDeque<u64>,
    pub stats: DispatchStats,
}

impl Dispatch {
    pub fn new(cfg: WorkersConfig) -> Dispatch {
        Dispatch {
            cfg,
            ..Default::default()
        }
    }

    /// Jobs published and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pending
            .values()
            .filter(|p| p.deadline.is_some() || p.checking)
            .count()
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// A new job, with its nonce and signed frame (or why it cannot go to a worker).
    pub fn submit(
        &mut self,
        now: u64,
        job: Box<Job>,
        nonce: u128,
        frame: Result<Vec<u8>, String>,
    ) -> Vec<Step> {
        let frame = match frame {
            Ok(f) => f,
            Err(why) => {
                self.stats.local += 1;
                return vec![Step::Local { job, why }];
            }
        };
        let id = job.id;
        self.pending.insert(
            id,
            Pending {
                job,
                nonce,
                frame: Arc::new(frame),
                tries: 0,
                deadline: None,
                checking: false,
            },
        );
        self.queue.push_back(id);
        self.pump(now)
    }

    fn pump(&mut self, now: u64) -> Vec<Step> {
        let mut out = vec![];
        while self.in_flight() < self.cfg.window.max(1) {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let Some(p) = self.pending.get_mut(&id) else {
                continue;
            };
            p.tries += 1;
            p.deadline = Some(now + self.cfg.timeout_ms);
            self.stats.published += 1;
            out.push(Step::Publish {
                id,
                frame: p.frame.clone(),
            });
        }
        out
    }

    /// Publishes the job again, or gives it to the process after `max_tries`.
    fn retry(&mut self, now: u64, id: u64, why: &str) -> Vec<Step> {
        let Some(p) = self.pending.get_mut(&id) else {
            return vec![];
        };
        p.checking = false;
        if p.tries >= self.cfg.max_tries {
            let p = self.pending.remove(&id).expect("present");
            self.stats.local += 1;
            let why = format!(
                "{why}; {} publications unanswered or refused, computed in process",
                p.tries
            );
            let mut out = vec![Step::Local { job: p.job, why }];
            out.extend(self.pump(now));
            return out;
        }
        p.tries += 1;
        p.deadline = Some(now + self.cfg.timeout_ms);
        self.stats.republished += 1;
        warn!(
            "placement job {id} for {}: {why}; published again (try {} of {})",
            p.job.app, p.tries, self.cfg.max_tries
        );
        vec![Step::Publish {
            id,
            frame: p.frame.clone(),
        }]
    }

    /// A decoded result; `Err` says why it is dropped (nothing else changes then).
    pub fn on_result(&mut self, r: jobs::JobResult) -> Result<Step, String> {
        let Some(p) = self.pending.get_mut(&r.id) else {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {}: no such job is outstanding (late, duplicate or forged)",
                r.worker, r.id
            ));
        };
        if p.nonce != r.nonce {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {} ({}): the nonce does not match the job's (forged)",
                r.worker, r.id, p.job.app
            ));
        }
        if p.checking || p.deadline.is_none() {
            self.stats.dropped += 1;
            return Err(format!(
                "result from worker {} for job {}: another result is being checked",
                r.worker, r.id
            ));
        }
        p.checking = true;
        Ok(Step::Check {
            job: p.job.clone(),
            result: Box::new(r),
        })
    }

    /// The checked result of job `id` was handed to the engine.
    pub fn accepted(&mut self, now: u64, id: u64) -> Vec<Step> {
        if self.pending.remove(&id).is_some() {
            self.stats.accepted += 1;
        }
        self.pump(now)
    }

    /// The result of job `id` failed its check.
    pub fn rejected(&mut self, now: u64, id: u64, why: &str) -> Vec<Step> {
        self.stats.rejected += 1;
        self.retry(now, id, why)
    }

    /// Time passes: expired publications are retried.
    pub fn on_tick(&mut self, now: u64) -> Vec<Step> {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.checking && p.deadline.is_some_and(|d| now >= d))
            .map(|(id, _)| *id)
            .collect();
        let mut out = vec![];
        let timeout = self.cfg.timeout_ms;
        for id in expired {
            out.extend(self.retry(now, id, &format!("no worker answered within {timeout} ms")));
        }
        out.extend(self.pump(now));
        out
    }
}

/// The wire form of an engine job.
pub fn wire_job(job: &Job, nonce: u128) -> jobs::Job {
    jobs::Job {
        id: job.id,
        nonce,
        app: job.app.clone(),
        application: job.application.as_ref().clone(),
        cluster: job.cluster.as_ref().clone(),
        reserved: job.reserved.clone(),
        time_budget_ms: sched::TIME_BUDGET.as_millis() as u64,
        count_budget: sched::COUNT_BUDGET,
    }
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
        .packed(&job.cluster)
        .map_err(|e| e.to_string())?;
    let w = jobs::Job {
        id: job.id,
        nonce,
        app: job.app.clone(),
        application: job.application.as_ref().clone(),
        cluster: Cluster::default(),
        reserved: job.reserved.clone(),
        time_budget_ms: sched::TIME_BUDGET.as_millis() as u64,
        count_budget: sched::COUNT_BUDGET,
    };
    jobs::encode_job_packed(&w, &packed, key).map_err(|e| e.to_string())
}

/// Receives a worker's result for `job`: checks it against the job's snapshot and ledger,
/// scores it again, and completes it as [`run_job`] would have. `Err` says why it is refused.
pub fn check(job: &Job, r: &jobs::JobResult) -> Result<JobResult, String> {
    let started = Instant::now();
    let outcome = match &r.outcome {
        ResultOutcome::Placed {
            assignment,
            score,
            feasible_deployments,
        } => {
            let app = job.application.as_ref();
            let cluster = job.cluster.as_ref();
            if let Some(why) = overcommitted(job, assignment) {
                return Err(format!("the placement does not fit: {why}"));
            }
            let (s, g) = sched::score(cluster, app, assignment)
                .map_err(|e| format!("the placement does not hold: {e}"))?;
            if (s - score).abs() > 1e-9 {
                warn!(
                    "worker {} scored job {} ({}) {score:.9}, recomputed {s:.9}: the recomputed score is used",
                    r.worker, r.id, job.app
                );
            }
            JobOutcome::Placed(PlacementRecord {
                assignment: assignment.clone(),
                score: s,
                criteria: grades(&g),
                feasible_deployments: *feasible_deployments,
            })
        }
        // An infeasibility cannot be checked short of searching: it is taken as said (the job
        // is retried when a node joins and on every re-evaluation).
        ResultOutcome::Infeasible(why) => JobOutcome::Infeasible(why.clone()),
        ResultOutcome::Error(e) => return Err(format!("the worker failed: {e}")),
    };
    let mut res = finish_job(job, outcome);
    res.elapsed_us = r.elapsed_us + started.elapsed().as_micros() as u64;
    Ok(res)
}

/// Whether the requests placed on each node exceed what it has left (capacity - usage - what
/// other applications reserve), the scheduler's resource rule.
fn overcommitted(job: &Job, assignment: &BTreeMap<String, String>) -> Option<String> {
    let mut want: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for c in &job.application.components {
        let (Some(r), Some(n)) = (c.resources, assignment.get(&c.name)) else {
            continue;
        };
        let e = want.entry(n.as_str()).or_default();
        e.0 += r.cpu_millis;
        e.1 += r.memory_mb;
    }
    for (n, (cpu, mem)) in want {
        let node = job.cluster.node(n)?;
        let res = job.reserved.get(n).copied().unwrap_or_default();
        let left_cpu =
            node.capacity.cpu_millis as i64 - node.usage.cpu_millis as i64 - res.cpu_millis as i64;
        let left_mem =
            node.capacity.memory_mb as i64 - node.usage.memory_mb as i64 - res.memory_mb as i64;
        if cpu as i64 > left_cpu || mem as i64 > left_mem {
            return Some(format!(
                "node {n} has {left_cpu} mCPU and {left_mem} MB left, the placement asks {cpu} mCPU and {mem} MB"
            ));
        }
    }
    None
}

/// Computes `job` on a blocking thread of this process and hands the result to the engine.
/// A scheduler bug must not leave the application unscheduled forever: a panic is an error.
pub fn run_in_process(job: Box<Job>, tx: mpsc::Sender<Event>) {
    tokio::task::spawn_blocking(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(&job))).or_else(
            |_| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    finish_job(
                        &job,
                        JobOutcome::Error("the scheduler failed (panicked)".into()),
                    )
                }))
            },
        );
        match r {
            Ok(r) => {
                let _ = tx.blocking_send(Event::Scheduled(Box::new(r)));
            }
            Err(_) => error!(
                "placement job {} for {}: the scheduler panicked, and so did scoring the current placement",
                job.id, job.app
            ),
        }
    });
}

enum In {
    Job(Box<Job>),
    Encoded(Box<Job>, u128, Result<Vec<u8>, String>),
    Result(Box<jobs::JobResult>),
    Checked(u64, Result<Box<JobResult>, String>),
}

/// The dispatch to workers, running: jobs in, results to the engine's event channel.
#[derive(Clone)]
pub struct Workers {
    tx: mpsc::Sender<In>,
}

impl Workers {
    /// Connects to the broker at `url` as the control plane (its own connection), subscribes
    /// to the results, and dispatches the jobs given to [`Workers::submit`].
    pub fn spawn(
        url: &str,
        login: &Login,
        key: SigningKey,
        cfg: WorkersConfig,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<Workers> {
        let o = crate::serve::mqtt_options(url, "acoa-control-plane-sched", login)?;
        let (client, mut eventloop) = AsyncClient::new(o, 1000);
        let (tx, mut rx) = mpsc::channel::<In>(4096);
        info!(
            "placement jobs go to scheduler workers on {} (re-published after {} ms, in process after {} tries, {} out at once)",
            jobs::JOBS,
            cfg.timeout_ms,
            cfg.max_tries,
            cfg.window
        );

        // results in
        let sub = client.clone();
        let results_tx = tx.clone();
        tokio::spawn(async move {
            let mut backoff = 100u64;
            loop {
                match eventloop.poll().await {
                    Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                        let from = p.topic.rsplit('/').next().unwrap_or("").to_string();
                        match jobs::decode_result(&p.payload) {
                            Err(e) => warn!(
                                "result dropped ({} bytes on {}): {e}",
                                p.payload.len(),
                                p.topic
                            ),
                            Ok(r) if r.worker != from => warn!(
                                "result dropped: worker {} answered on {}'s topic",
                                r.worker, from
                            ),
                            Ok(r) => {
                                if results_tx.send(In::Result(Box::new(r))).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                        backoff = 100;
                        debug!("connected to the broker for scheduler workers");
                        let c = sub.clone();
                        tokio::spawn(async move {
                            if let Err(e) =
                                c.subscribe(jobs::RESULTS_WILDCARD, QoS::AtLeastOnce).await
                            {
                                error!("cannot subscribe to {}: {e}", jobs::RESULTS_WILDCARD);
                            }
                        });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(
                            "broker connection (scheduler workers): {e}; retrying in {backoff} ms"
                        );
                        tokio::time::sleep(Duration::from_millis(backoff)).await;
                        backoff = (backoff * 2).min(5000);
                    }
                }
            }
        });

        // the dispatch
        let self_tx = tx.clone();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let now = || t0.elapsed().as_millis() as u64;
            let mut d = Dispatch::new(cfg);
            let packs = Arc::new(Mutex::new(PackCache::default()));
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                let steps = tokio::select! {
                    m = rx.recv() => match m {
                        None => return,
                        Some(In::Job(job)) => {
                            let tx = self_tx.clone();
                            let key = key.clone();
                            let packs = packs.clone();
                            tokio::task::spawn_blocking(move || {
                                let nonce: u128 = rand::random();
                                let frame = encode(&job, nonce, &key, &packs);
                                let _ = tx.blocking_send(In::Encoded(job, nonce, frame));
                            });
                            vec![]
                        }
                        Some(In::Encoded(job, nonce, frame)) => d.submit(now(), job, nonce, frame),
                        Some(In::Result(r)) => match d.on_result(*r) {
                            Ok(step) => vec![step],
                            Err(why) => {
                                warn!("{why}; dropped");
                                vec![]
                            }
                        },
                        Some(In::Checked(id, Ok(res))) => {
                            if events.send(Event::Scheduled(res)).await.is_err() {
                                return;
                            }
                            d.accepted(now(), id)
                        }
                        Some(In::Checked(id, Err(why))) => {
                            warn!("result for placement job {id} dropped: {why}");
                            d.rejected(now(), id, &why)
                        }
                    },
                    _ = tick.tick() => d.on_tick(now()),
                };
                for s in steps {
                    match s {
                        Step::Publish { id, frame } => {
                            debug!("placement job {id} published ({} bytes)", frame.len());
                            if let Err(e) = client
                                .publish(jobs::JOBS, QoS::AtLeastOnce, false, frame.to_vec())
                                .await
                            {
                                error!("cannot publish placement job {id}: {e}");
                            }
                        }
                        Step::Local { job, why } => {
                            warn!(
                                "placement job {} for {} computed in process: {why}",
                                job.id, job.app
                            );
                            run_in_process(job, events.clone());
                        }
                        Step::Check { job, result } => {
                            let tx = self_tx.clone();
                            tokio::task::spawn_blocking(move || {
                                let id = job.id;
                                let r =
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        check(&job, &result)
                                    }))
                                    .unwrap_or_else(|_| Err("checking it panicked".into()));
                                if let Ok(res) = &r {
                                    debug!(
                                        "placement job {id} for {} answered by worker {}",
                                        res.app, result.worker
                                    );
                                }
                                let _ = tx.blocking_send(In::Checked(id, r.map(Box::new)));
                            });
                        }
                    }
                }
            }
        });
        Ok(Workers { tx })
    }

    /// Hands a job to the dispatch.
    pub async fn submit(&self, job: Box<Job>) {
        if self.tx.send(In::Job(job)).await.is_err() {
            error!("the scheduler-worker dispatch stopped: job lost");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Action, Engine, EngineConfig};
    use crate::store::Snapshot;
    use crate::testkit::{report_of, samples_of};
    use acoa_shared::model;
    use acoa_shared::wire::{self, LinkMetrics};

    fn railway() -> model::Cluster {
        model::load_cluster(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scenarios/railway/cluster.yaml"),
        )
        .unwrap()
    }

    /// Placement jobs as the engine makes them, for the railway nodes and `apps`.
    #[allow(clippy::vec_box)] // the engine hands jobs out boxed
    fn jobs_for(apps: &[&str]) -> Vec<Box<Job>> {
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
                    Event::Links(Box::new(LinkMetrics {
                        node: wire::name(&n.name).unwrap(),
                        seq: 1,
                        links: heapless::Vec::from_slice(chunk).unwrap(),
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

    fn cfg() -> WorkersConfig {
        WorkersConfig {
            timeout_ms: 1000,
            max_tries: 3,
            window: 1,
        }
    }

    fn published(steps: &[Step]) -> Vec<u64> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Publish { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    }

    fn answer(job: &Job, nonce: u128) -> jobs::JobResult {
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

    #[test]
    fn a_window_of_jobs_goes_out_and_the_next_follows_an_answer() {
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        let (a, b) = (js[0].clone(), js[1].clone());
        let mut d = Dispatch::new(cfg());
        assert_eq!(
            published(&d.submit(0, a.clone(), 11, Ok(vec![1]))),
            vec![a.id]
        );
        assert!(published(&d.submit(0, b.clone(), 22, Ok(vec![2]))).is_empty());
        assert_eq!((d.in_flight(), d.outstanding()), (1, 2));
        // a result for b (not out yet), or with the wrong nonce, or for no job: dropped
        assert!(d.on_result(answer(&b, 22)).is_err());
        assert!(d.on_result(answer(&a, 99)).is_err());
        assert!(d
            .on_result(answer(
                &Job {
                    id: 77,
                    ..(*a).clone()
                },
                11
            ))
            .is_err());
        assert_eq!(d.stats.dropped, 3);
        let Ok(Step::Check { job, result }) = d.on_result(answer(&a, 11)) else {
            panic!()
        };
        assert_eq!(job.id, a.id);
        // a second answer while the first is being checked is dropped
        assert!(d.on_result(answer(&a, 11)).is_err());
        let r = check(&job, &result).unwrap();
        assert!(
            matches!(r.outcome, JobOutcome::Placed(_)),
            "{:?}",
            r.outcome
        );
        assert_eq!(r, {
            let mut x = crate::engine::run_job(&a);
            x.elapsed_us = r.elapsed_us;
            x
        });
        assert_eq!(published(&d.accepted(10, a.id)), vec![b.id]);
        assert_eq!((d.in_flight(), d.outstanding()), (1, 1));
    }

    #[test]
    fn unanswered_jobs_are_published_again_then_computed_in_process() {
        let js = jobs_for(&["smoke-monitoring"]);
        let mut d = Dispatch::new(cfg());
        assert_eq!(
            published(&d.submit(0, js[0].clone(), 1, Ok(vec![1]))).len(),
            1
        );
        assert!(d.on_tick(999).is_empty());
        assert_eq!(published(&d.on_tick(1000)), vec![js[0].id]);
        assert!(d.on_tick(1999).is_empty());
        assert_eq!(published(&d.on_tick(2000)), vec![js[0].id]);
        let last = d.on_tick(3000);
        assert!(
            matches!(&last[..], [Step::Local { job, why }] if job.id == js[0].id && why.contains("3 publications")),
            "{last:?}"
        );
        assert_eq!(d.outstanding(), 0);
        assert_eq!(d.stats.republished, 2);
        assert_eq!(d.stats.local, 1);
        // a job that cannot be encoded for workers is computed in process at once
        let s = d.submit(0, js[0].clone(), 1, Err("too large".into()));
        assert!(matches!(&s[..], [Step::Local { why, .. }] if why == "too large"));
    }

    #[test]
    fn a_refused_result_publishes_the_job_again() {
        let js = jobs_for(&["smoke-monitoring"]);
        let mut d = Dispatch::new(cfg());
        d.submit(0, js[0].clone(), 1, Ok(vec![1]));
        assert!(d.on_result(answer(&js[0], 1)).is_ok());
        // checking: no deadline runs
        assert!(d.on_tick(5000).is_empty());
        assert_eq!(
            published(&d.rejected(5000, js[0].id, "bad")),
            vec![js[0].id]
        );
        assert_eq!(d.stats.rejected, 1);
        assert!(d.on_result(answer(&js[0], 1)).is_ok());
    }

    #[test]
    fn results_are_checked_against_the_snapshot_and_scored_again() {
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        let job = &js[0];
        let good = answer(job, 1);
        let ResultOutcome::Placed {
            assignment, score, ..
        } = good.outcome.clone()
        else {
            panic!()
        };
        let with = |a: BTreeMap<String, String>, s: f64| jobs::JobResult {
            outcome: ResultOutcome::Placed {
                assignment: a,
                score: s,
                feasible_deployments: 1,
            },
            ..good.clone()
        };
        // a wrong score is replaced by the recomputed one
        let r = check(job, &with(assignment.clone(), 1.0)).unwrap();
        let JobOutcome::Placed(p) = &r.outcome else {
            panic!()
        };
        assert!((p.score - score).abs() < 1e-12);
        // an unknown node, a missing component, an extra component
        let first = assignment.keys().next().unwrap().clone();
        let mut a = assignment.clone();
        a.insert(first.clone(), "nowhere".into());
        assert!(check(job, &with(a, score)).unwrap_err().contains("nowhere"));
        let mut a = assignment.clone();
        a.remove(&first);
        assert!(check(job, &with(a, score)).unwrap_err().contains(&first));
        let mut a = assignment.clone();
        a.insert("intruder".into(), "n01".into());
        assert!(check(job, &with(a, score))
            .unwrap_err()
            .contains("intruder"));
        // a node that does not satisfy a component's constraints
        let sensor = job
            .application
            .components
            .iter()
            .find(|c| !c.requires.hardware.is_empty())
            .unwrap();
        let mut a = assignment.clone();
        let bad = job
            .cluster
            .nodes
            .iter()
            .find(|n| !n.satisfies(&sensor.requires))
            .unwrap();
        a.insert(sensor.name.clone(), bad.name.clone());
        assert!(check(job, &with(a, score)).is_err());
        // more than a node has left
        let mut big = (*js[0]).clone();
        let mut app = (*big.application).clone();
        app.components[0].resources = Some(model::Resources {
            cpu_millis: 1_000_000,
            ..Default::default()
        });
        big.application = Arc::new(app);
        assert!(check(&big, &with(assignment.clone(), score))
            .unwrap_err()
            .contains("does not fit"));
        // a worker error is refused (the job goes out again), an infeasibility is taken
        let err = jobs::JobResult {
            outcome: ResultOutcome::Error("boom".into()),
            ..good.clone()
        };
        assert!(check(job, &err).unwrap_err().contains("boom"));
        let inf = jobs::JobResult {
            outcome: ResultOutcome::Infeasible("no gps".into()),
            ..good.clone()
        };
        assert_eq!(
            check(job, &inf).unwrap().outcome,
            JobOutcome::Infeasible("no gps".into())
        );
    }

    #[test]
    fn engine_jobs_travel_to_workers_exactly() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let cache = Mutex::new(PackCache::default());
        let js = jobs_for(&["smoke-monitoring", "speed-profiling"]);
        // the engine's live model did not change between the two: one snapshot, packed once
        assert!(Arc::ptr_eq(&js[0].cluster, &js[1].cluster));
        for j in js {
            let w = wire_job(&j, 42);
            let bytes = encode(&j, 42, &key, &cache).unwrap();
            assert_eq!(jobs::decode_job(&bytes, &key.verifying_key()).unwrap(), w);
        }
    }
}
