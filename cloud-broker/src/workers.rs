//! Where placement jobs are computed, and the I/O of the dispatch to `scheduler worker`
//! processes: its own broker connection (jobs out, results in), the encoding and checking of
//! jobs on blocking threads, and the in-process computation.
//!
//! Invariants:
//! - Every job handed to a [`Placer`] ends as exactly one [`Event::Scheduled`] on the engine's
//!   channel (computed here, or answered by a worker and [`check`]ed), unless the process stops.
//! - The decisions (window, deadlines, re-publication, computing in process) are made by the
//!   pure [`Dispatch`]; this module only carries out its [`Step`]s and feeds it what happens.
//! - A result reaches the [`Dispatch`] only from the topic of the worker it names.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use acoa_shared::jobs;
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, Publish, QoS};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, error, info, warn};

use crate::background_threads;
use crate::conn::{self, Inbox, Link};
use crate::dispatch::{check, encode, Dispatch, PackCache, Step, WorkersConfig};
use crate::engine::{finish_job, run_job, Event, Job, JobOutcome, JobResult, Purpose};
use crate::identity::Login;

/// How often the dispatch looks for expired publications.
const DISPATCH_TICK: Duration = Duration::from_millis(100);

/// Where placement jobs are computed.
pub enum Placer {
    /// On blocking threads of this process; results go to this channel.
    InProcess(mpsc::Sender<Event>),
    /// By `scheduler worker` processes.
    Workers(Workers),
}

impl Placer {
    /// Hands `job` over; its result comes back as an [`Event::Scheduled`].
    pub async fn submit(&self, job: Box<Job>) {
        match self {
            Placer::InProcess(tx) => run_in_process(job, tx.clone()),
            // an exploration round scores thousands of moves on the live model: here
            Placer::Workers(w) if job.purpose == Purpose::Explore => {
                run_in_process(job, w.events.clone())
            }
            Placer::Workers(w) => w.submit(job).await,
        }
    }
}

/// Placement jobs computed at once in this process: one per core, the others wait their turn
/// (first come, first computed). Each job takes a core and holds its own views of the live
/// model (tens of MiB at 50,000 nodes: an exploration's, the network in the current
/// placement's favour); twenty applications' jobs at once held twenty such views and made
/// every one of them late.
fn job_slots() -> Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS
        .get_or_init(|| Arc::new(Semaphore::new(cores())))
        .clone()
}

/// Of those, the jobs that place nothing new (an exploration round, a re-evaluation) at once:
/// one fewer than the cores, at least one. A placement then always finds a core no such job
/// holds: at 50,000 nodes, twenty explorations' rounds kept new placements waiting seconds
/// for a slot.
fn background_slots() -> Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS
        .get_or_init(|| Arc::new(Semaphore::new(background_slot_count())))
        .clone()
}

/// How many jobs that place nothing new this process computes at once ([`background_slots`]);
/// the engine lets as many run (`EngineConfig::background_jobs`), the others wait there.
pub fn background_slot_count() -> usize {
    cores().saturating_sub(1).max(1)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Runs `work` on a blocking thread once one of `slots` is free, and, for `background` work,
/// one of its slots first (it holds them while it runs) and on a thread of its own at a lower
/// priority ([`background_threads`]). Needs a Tokio runtime.
fn run_bounded(
    slots: Arc<Semaphore>,
    background_slots: Option<Arc<Semaphore>>,
    work: impl FnOnce() + Send + 'static,
) {
    tokio::spawn(async move {
        let background = background_slots.is_some();
        // the semaphores are never closed
        let held = match background_slots {
            Some(b) => match b.acquire_owned().await {
                Ok(p) => Some(p),
                Err(_) => return,
            },
            None => None,
        };
        let Ok(slot) = slots.acquire_owned().await else {
            return;
        };
        let work = move || {
            work();
            drop((slot, held));
        };
        if background {
            background_threads::spawn("acoa-background", work);
        } else {
            tokio::task::spawn_blocking(work);
        }
    });
}

/// Computes `job` on a blocking thread of this process, when a core is free for it
/// ([`job_slots`], [`background_slots`]), and hands the result to the engine. A scheduler bug
/// must not leave the application unscheduled forever: a panic is an error.
pub fn run_in_process(job: Box<Job>, tx: mpsc::Sender<Event>) {
    let background = job.purpose.in_background().then(background_slots);
    run_bounded(job_slots(), background, move || {
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

/// What the dispatch task receives.
enum In {
    Job(Box<Job>),
    Encoded(Box<Job>, u128, Result<Vec<u8>, String>),
    Result(Box<jobs::JobResult>),
    Checked(u64, Result<Box<JobResult>, String>),
}

/// Results from workers: decoded, and taken only from the topic of the worker they name.
struct Results(mpsc::Sender<In>);

impl Inbox for Results {
    async fn publish(&mut self, p: Publish) -> bool {
        let from = p.topic.rsplit('/').next().unwrap_or("");
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
            Ok(r) => return self.0.send(In::Result(Box::new(r))).await.is_ok(),
        }
        true
    }
}

/// The dispatch to workers, running: jobs in, results to the engine's event channel.
#[derive(Clone)]
pub struct Workers {
    tx: mpsc::Sender<In>,
    /// The engine's events (an exploration's result, computed in process).
    events: mpsc::Sender<Event>,
}

impl Workers {
    /// Connects to the broker at `url` as the control plane (its own connection, `client_id`:
    /// a replica's own under etcd), subscribes to the results, and dispatches the jobs given to
    /// [`Workers::submit`].
    pub fn spawn(
        url: &str,
        client_id: &str,
        login: &Login,
        key: SigningKey,
        cfg: WorkersConfig,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<Workers> {
        let o = conn::mqtt_options(url, client_id, login)?;
        let (tx, rx) = mpsc::channel::<In>(4096);
        info!(
            "placement jobs go to scheduler workers on {} (re-published after {} ms, in process after {} tries, {} out at once)",
            jobs::JOBS,
            cfg.timeout_ms,
            cfg.max_tries,
            cfg.window
        );
        let link = Link {
            filters: &[jobs::RESULTS_WILDCARD],
            purpose: Some("scheduler workers"),
        };
        let client = conn::spawn(o, 1000, link, Results(tx.clone())).client;
        let driver = Driver {
            dispatch: Dispatch::new(cfg),
            t0: Instant::now(),
            client,
            key,
            packs: Arc::new(Mutex::new(PackCache::default())),
            me: tx.clone(),
            events: events.clone(),
        };
        tokio::spawn(driver.run(rx));
        Ok(Workers { tx, events })
    }

    /// Hands a job to the dispatch.
    pub async fn submit(&self, job: Box<Job>) {
        if self.tx.send(In::Job(job)).await.is_err() {
            error!("the scheduler-worker dispatch stopped: job lost");
        }
    }
}

/// The task that runs the [`Dispatch`]: feeds it what happens, carries out its steps.
struct Driver {
    dispatch: Dispatch,
    t0: Instant,
    client: AsyncClient,
    key: SigningKey,
    packs: Arc<Mutex<PackCache>>,
    /// Back to this task, from the blocking threads.
    me: mpsc::Sender<In>,
    events: mpsc::Sender<Event>,
}

impl Driver {
    async fn run(mut self, mut rx: mpsc::Receiver<In>) {
        let mut tick = tokio::time::interval(DISPATCH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let steps = tokio::select! {
                m = rx.recv() => match m {
                    None => return,
                    Some(m) => match self.input(m).await {
                        Some(steps) => steps,
                        None => return,
                    },
                },
                _ = tick.tick() => self.dispatch.on_tick(self.now()),
            };
            for s in steps {
                self.carry_out(s).await;
            }
        }
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// The dispatch's steps for one input; `None` once the engine is gone.
    async fn input(&mut self, m: In) -> Option<Vec<Step>> {
        let now = self.now();
        let d = &mut self.dispatch;
        Some(match m {
            In::Job(job) => {
                self.encode(job);
                vec![]
            }
            In::Encoded(job, nonce, frame) => d.submit(now, job, nonce, frame),
            In::Result(r) => match d.on_result(*r) {
                Ok(step) => vec![step],
                Err(why) => {
                    warn!("{why}; dropped");
                    vec![]
                }
            },
            In::Checked(id, Ok(res)) => {
                self.events.send(Event::Scheduled(res)).await.ok()?;
                self.dispatch.accepted(now, id)
            }
            In::Checked(id, Err(why)) => {
                warn!("result for placement job {id} dropped: {why}");
                d.rejected(now, id, &why)
            }
        })
    }

    /// Signs `job` with a fresh nonce on a blocking thread; comes back as [`In::Encoded`].
    fn encode(&self, job: Box<Job>) {
        let tx = self.me.clone();
        let key = self.key.clone();
        let packs = self.packs.clone();
        tokio::task::spawn_blocking(move || {
            let nonce: u128 = rand::random();
            let frame = encode(&job, nonce, &key, &packs);
            let _ = tx.blocking_send(In::Encoded(job, nonce, frame));
        });
    }

    async fn carry_out(&self, s: Step) {
        match s {
            Step::Publish { id, frame } => {
                debug!("placement job {id} published ({} bytes)", frame.len());
                if let Err(e) = self
                    .client
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
                run_in_process(job, self.events.clone());
            }
            Step::Check { job, result } => {
                let tx = self.me.clone();
                tokio::task::spawn_blocking(move || {
                    let id = job.id;
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// No more than the slots' count of jobs run at once, and every one runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_in_process_run_no_more_at_once_than_there_are_slots() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let slots = Arc::new(Semaphore::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (tx, mut done) = mpsc::channel(16);
        for i in 0..8 {
            let (running, most, tx) = (running.clone(), most.clone(), tx.clone());
            run_bounded(slots.clone(), None, move || {
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                std::thread::sleep(Duration::from_millis(30));
                running.fetch_sub(1, SeqCst);
                let _ = tx.blocking_send(i);
            });
        }
        let mut got = vec![];
        for _ in 0..8 {
            got.push(done.recv().await.expect("every job runs"));
        }
        got.sort();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        assert_eq!(
            most.load(SeqCst),
            2,
            "at most 2 at once, and 2 did run at once"
        );
    }

    /// Background work (explorations, re-evaluations) holds at most its own slots, at a lower
    /// priority: a placement submitted behind three of them runs at once on the core they
    /// leave, at the caller's priority.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_placement_finds_a_core_that_background_jobs_leave() {
        let slots = Arc::new(Semaphore::new(2));
        let background = Arc::new(Semaphore::new(1));
        let started = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut done) = mpsc::channel(16);
        let job = |name: &'static str, bg: bool| {
            let (started, tx) = (started.clone(), tx.clone());
            run_bounded(slots.clone(), bg.then(|| background.clone()), move || {
                let nice = background_threads::nice().expect("a nice value");
                started.lock().unwrap().push((name, nice));
                std::thread::sleep(Duration::from_millis(100));
                let _ = tx.blocking_send(name);
            });
        };
        for name in ["explore-1", "explore-2", "explore-3"] {
            job(name, true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        job("place", false);
        for _ in 0..4 {
            done.recv().await.expect("every job runs");
        }
        let started = started.lock().unwrap().clone();
        assert!(started[0].0.starts_with("explore"), "{started:?}");
        assert_eq!(started[1].0, "place", "{started:?}");
        let ours = background_threads::nice().expect("the test's nice value");
        for (name, nice) in &started {
            let lower = (ours + background_threads::BACKGROUND_NICE).min(19);
            let want = if name.starts_with("explore") {
                lower
            } else {
                ours
            };
            assert_eq!(*nice, want, "{name}: {started:?}");
        }
    }
    use crate::dispatch::fixtures::jobs_for;
    use crate::engine::ExploreInput;

    /// An exploration round scores thousands of moves on the live model: it is computed in
    /// this process even when placements go to scheduler workers.
    #[tokio::test]
    async fn an_exploration_round_is_computed_in_process_not_sent_to_workers() {
        let (tx, mut to_workers) = mpsc::channel(4);
        let (events, mut back) = mpsc::channel(4);
        let placer = Placer::Workers(Workers { tx, events });
        let job = jobs_for(&["smoke-monitoring"]).remove(0);
        let JobOutcome::Placed(p) = run_job(&job).outcome else {
            panic!("smoke-monitoring placed on the railway")
        };
        let mut explore = job.clone();
        explore.purpose = Purpose::Explore;
        explore.current = Some(p.assignment);
        explore.explore = Some(ExploreInput {
            candidate: None,
            width: 8,
        });
        placer.submit(explore).await;
        let got = tokio::time::timeout(Duration::from_secs(60), back.recv())
            .await
            .expect("a result in time")
            .expect("the channel open");
        assert!(
            matches!(&got, Event::Scheduled(r) if r.purpose == Purpose::Explore && r.explored.is_some()),
            "{got:?}"
        );
        assert!(to_workers.try_recv().is_err(), "nothing for the workers");
        placer.submit(job).await;
        assert!(matches!(to_workers.try_recv(), Ok(In::Job(_))));
    }
}
