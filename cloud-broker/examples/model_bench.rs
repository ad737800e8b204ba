//! What a placement costs at fleet scale, on the decision loop and on the job's thread (not a
//! test: it prints figures). The engine is driven with plain values
//! (`testkit::engine::EngineSim`, jobs taken out and run here, timed), no I/O.
//!
//! ```text
//! cargo build --release -p cloud-broker --example model_bench
//! /usr/bin/time -f "maxrss %M KB" target/release/examples/model_bench --nodes 50000
//! ```
//!
//! The fleet: the load generator's (`examples/loadgen`: a twentieth cloud nodes with a
//! database, the rest trains of 10 with one sensor each); each node reports `--peers` links
//! (its train, then peers spread over the fleet) and a network coordinate (so that the pairs
//! nobody measures are estimated). Then, each step after a change of the model
//! (a node's usage, so that nothing is cached): an application published (a new placement),
//! published again with another weight (a re-placement: the current placement, its bounds),
//! and a second application. Per step: the time the decision loop takes for the publication
//! (it hands the job over), the job's time (search and scores, on its own thread in the
//! control plane), and the process's RSS after it. After each new placement, the job of a first
//! exploration round around it (`Purpose::Explore`: two searches and the single moves scored,
//! on the job's thread) is timed too, with the number of links it asks to probe.
//! `--stages 18` publishes 20-component applications instead (a chain from the sensor to the
//! database): an exploration round searches a neighbourhood per component.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use acoa_shared::model::{Capacity, Layer, Node, Usage};
use acoa_shared::wire::{self, LinkSample};
use clap::Parser;
use cloud_broker::engine::{
    run_job, Action, EngineConfig, Event, ExploreInput, JobOutcome, Purpose,
};
use cloud_broker::testkit::engine::{chain_app_yaml, link_metrics, EngineSim};
use cloud_broker::testkit::report_of;

/// The control plane's allocator (cloud-broker/src/main.rs), so that the figures are its,
/// counting the bytes live on the heap (what a model's part holds, where RSS only grows).
#[global_allocator]
static ALLOCATOR: Counting = Counting(mimalloc::MiMalloc);

struct Counting(mimalloc::MiMalloc);

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let now = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is passed to mimalloc unchanged; only a counter is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { self.0.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { self.0.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { self.0.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        grew(new);
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { self.0.realloc(p, l, new) }
    }
}

/// Bytes live on the heap, MiB.
fn live_mib() -> f64 {
    LIVE.load(Relaxed) as f64 / (1 << 20) as f64
}

/// Runs `f`; how much more the heap held at its peak than before it, MiB.
fn peak_over<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let t = f();
    let peak = PEAK.load(Relaxed).saturating_sub(before);
    (t, peak as f64 / (1 << 20) as f64)
}

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_value = "10000,50000")]
    nodes: Vec<usize>,
    /// Links each node reports.
    #[arg(long, default_value_t = 32)]
    peers: usize,
    /// Rounds of the three steps (a median is printed; 0: none).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Fresh models whose parts are timed (a median is printed).
    #[arg(long, default_value_t = 3)]
    models: usize,
    /// Nodes whose coordinate is unsure (error 1, as an agent that has just joined reports
    /// it): the last this many of the fleet.
    #[arg(long, default_value_t = 0)]
    unsure: usize,
    /// Then this many operators' views in a row, each with its fleet document, page and
    /// `/api/fleet` (a node's usage changed before each): the heap and the RSS after them.
    #[arg(long, default_value_t = 0)]
    views: usize,
    /// The applications published get this many stages between their sensor and their
    /// database, in a chain (0: the three-component application of the other benchmarks).
    /// Every other stage may run anywhere, the others in a cloud: an exploration round then
    /// searches a neighbourhood per stage over the whole fleet.
    #[arg(long, default_value_t = 0)]
    stages: usize,
}

const TRAIN: usize = 10;

fn clouds(n: usize) -> usize {
    (n / 20).max(4)
}

fn name(i: usize, n: usize) -> String {
    if i < clouds(n) {
        format!("c{i:05}")
    } else {
        format!("e{i:05}")
    }
}

fn node(i: usize, n: usize, cpu_used: u64) -> Node {
    let cloud = i < clouds(n);
    let e = i.saturating_sub(clouds(n));
    Node {
        name: name(i, n),
        datacenter: if cloud {
            format!("cloud{}", i % 2 + 1)
        } else {
            format!("train{}", e / TRAIN)
        },
        layer: if cloud { Layer::Cloud } else { Layer::Edge },
        arch: if cloud { "x86_64" } else { "aarch64" }.into(),
        hardware: if !cloud && e.is_multiple_of(TRAIN) {
            vec!["sensor".into()]
        } else {
            vec![]
        },
        software: if cloud {
            vec!["database".into()]
        } else {
            vec![]
        },
        capacity: Capacity {
            cpu_millis: if cloud { 8000 } else { 2000 },
            memory_mb: if cloud { 16384 } else { 2048 },
            disk_mb: 16_000,
            ..Default::default()
        },
        usage: Usage {
            cpu_millis: cpu_used,
            ..Default::default()
        },
        position: None,
    }
}

/// Node `i`'s link report: its train (or the other clouds), then peers spread over the fleet.
fn links(i: usize, n: usize, peers: usize, unsure: bool) -> Event {
    let c = clouds(n);
    let group: Vec<usize> = if i < c {
        (1..=8).map(|k| (i + k) % c).collect()
    } else {
        let first = c + (i - c) / TRAIN * TRAIN;
        (first..(first + TRAIN).min(n))
            .filter(|&j| j != i)
            .collect()
    };
    let spread = (1..=n)
        .map(|s| (i + s * 7919) % n)
        .filter(|j| *j != i && !group.contains(j));
    let samples: Vec<LinkSample> = group
        .iter()
        .copied()
        .chain(spread)
        .take(peers)
        .map(|j| LinkSample {
            peer: wire::name(&name(j, n)).unwrap(),
            latency_ms: 1.0 + ((i * 31 + j * 17) % 400) as f32 / 10.0,
            jitter_ms: 0.3,
            success: 0.95 + ((i + j) % 50) as f32 / 1000.0,
            samples: 20,
            last_answer_ms: 0,
        })
        .collect();
    let mut l = link_metrics(&name(i, n), samples);
    let mut c = coord(i, n);
    if unsure {
        c.error = 1.0;
    }
    l.coord = Some(c);
    Event::links(Box::new(l))
}

/// Node `i`'s network coordinate: the clouds near one another, the trains along 100 lines.
fn coord(i: usize, n: usize) -> wire::WireCoord {
    let c = clouds(n);
    let vec = if i < c {
        [(i % 10) as f32, (i / 10 % 10) as f32, 0.0]
    } else {
        let t = (i - c) / TRAIN;
        [20.0 + (t / 100) as f32 * 0.2, (t % 100) as f32 * 2.0, 0.0]
    };
    wire::WireCoord {
        vec,
        height: 1.0,
        error: 0.2,
    }
}

fn rss_mib() -> f64 {
    acoa_test_support::proc_status_kb(None, "VmRSS").unwrap_or(0) as f64 / 1024.0
}

/// A first exploration round's job around the placement `r` found by `job`: its time (ms)
/// and how many links it asks to probe.
fn explore(
    job: &cloud_broker::engine::Job,
    r: &cloud_broker::engine::JobResult,
) -> (f64, usize, f64) {
    let JobOutcome::Placed(p) = &r.outcome else {
        panic!("{}: not placed", job.app)
    };
    let mut j = job.clone();
    j.purpose = Purpose::Explore;
    j.current = Some(p.assignment.clone());
    j.explore = Some(ExploreInput {
        candidate: None,
        width: acoa_scheduler::explore::DEFAULT_WIDTH,
    });
    let t = Instant::now();
    let (x, peak) = peak_over(|| run_job(&j));
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    (ms, x.explored.map_or(0, |f| f.probe.len()), peak)
}

/// Publishes `payload` as `app`, timing the decision loop, then runs its job, timing it (and,
/// when `explored` is given, a first exploration round's job around its placement).
fn step(
    sim: &mut EngineSim,
    app: &str,
    payload: Vec<u8>,
    explored: Option<&mut Vec<(f64, usize, f64)>>,
) -> (f64, f64, f64) {
    let t = Instant::now();
    sim.publish(app, payload);
    let on_loop = t.elapsed().as_secs_f64() * 1000.0;
    let jobs = std::mem::take(&mut sim.pending_jobs);
    assert_eq!(jobs.len(), 1, "one job for {app}");
    let t = Instant::now();
    let (r, peak) = peak_over(|| run_job(&jobs[0]));
    let job = t.elapsed().as_secs_f64() * 1000.0;
    if let Some(e) = explored {
        e.push(explore(&jobs[0], &r));
    }
    let acts = sim.feed(Event::Scheduled(Box::new(r)));
    assert!(
        acts.iter().any(|a| matches!(a, Action::Publish { .. })),
        "{app}: nothing published after its job"
    );
    // what the control plane keeps: not every action so far (a job holds its model)
    sim.log.clear();
    (on_loop, job, peak)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    println!(
        "| nodes | links | step | decision loop (median) | job (median) | RSS after | heap at the job's peak (median) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in &args.nodes {
        let mut sim = EngineSim::new(EngineConfig {
            stats_every_ms: 0,
            ..EngineConfig::default()
        });
        sim.run_jobs = false;
        let report = |i: usize, cpu: u64| {
            let addr = format!("10.{}.{}.1:7878", i / 256, i % 256);
            Event::Report(Box::new(report_of(&node(i, n, cpu), 1, &addr)))
        };
        // a node's properties change (its probe address): the next model must not offer it
        // as it was, so one is taken at once (a usage change waits for the tick's next model
        // in a fleet this large, and the jobs read the model derived)
        let moved = |i: usize, k: usize| {
            let addr = format!("10.{}.{}.{}:7878", i / 256, i % 256, 2 + k % 250);
            Event::Report(Box::new(report_of(&node(i, n, 100), 1, &addr)))
        };
        for i in 0..n {
            sim.feed(report(i, 100));
        }
        for i in 0..n {
            sim.feed(links(i, n, args.peers, i + args.unsure >= n));
        }
        sim.tick(200);
        sim.log.clear();
        // the scheduler's view's links (as the cluster document counts them: loopbacks filled
        // in), without building that document (163 MiB held by the model at 50,000 nodes)
        let model_links = sim.e.model().infra().link_count();
        let names = [
            "new placement",
            "re-placement (current, bounds)",
            "another application",
        ];
        // per step: the loop's times, the job's, the job's heap peaks, the RSS after
        type Step = (Vec<f64>, Vec<f64>, Vec<f64>, f64);
        let mut times: Vec<Step> = vec![(vec![], vec![], vec![], 0.0); 3];
        let mut explored: Vec<(f64, usize, f64)> = vec![];
        for round in 0..args.rounds {
            for (k, t) in times.iter_mut().enumerate() {
                // a node's usage changes (taken with the tick's next model: the job reads the
                // model derived, as the control plane's do)
                let i = clouds(n) + round * 3 + k;
                sim.feed(report(i, 200 + (round * 3 + k) as u64));
                let (app, payload) = match k {
                    0 => (
                        format!("a{round}"),
                        chain_app_yaml(&format!("a{round}"), round, 0.5, args.stages).into_bytes(),
                    ),
                    1 => (
                        format!("a{round}"),
                        chain_app_yaml(&format!("a{round}"), round, 0.6, args.stages).into_bytes(),
                    ),
                    _ => (
                        format!("b{round}"),
                        chain_app_yaml(&format!("b{round}"), round + 100, 0.5, args.stages)
                            .into_bytes(),
                    ),
                };
                let (l, j, peak) = step(&mut sim, &app, payload, (k == 0).then_some(&mut explored));
                t.0.push(l);
                t.1.push(j);
                t.2.push(peak);
                t.3 = rss_mib();
            }
        }
        // the parts of a model, each timed on a model nothing has read yet
        let names_parts = [
            "taken (decision loop)",
            "estimates",
            "scheduler view (Infra)",
            "link bounds",
            "cluster document",
        ];
        let mut parts: Vec<Vec<f64>> = vec![vec![]; names_parts.len()];
        // the heap each part holds (the model before kept alive while the next is taken)
        let mut heap: Vec<Vec<f64>> = vec![vec![]; names_parts.len()];
        // and its heap at the peak while it is derived, over what was live before
        let mut peaks: Vec<Vec<f64>> = vec![vec![]; names_parts.len()];
        let mut before = None;
        for k in 0..args.models {
            sim.feed(moved(clouds(n) + k % 7, k));
            let mut time = |i: usize, f: &mut dyn FnMut()| {
                let (t, h) = (Instant::now(), live_mib());
                let ((), peak) = peak_over(&mut *f);
                parts[i].push(t.elapsed().as_secs_f64() * 1000.0);
                heap[i].push(live_mib() - h);
                peaks[i].push(peak);
            };
            let mut m = None;
            time(0, &mut || m = Some(sim.e.model()));
            let m = m.unwrap();
            time(1, &mut || {
                let _ = m.estimates();
            });
            time(2, &mut || {
                let _ = m.infra();
            });
            time(3, &mut || {
                let _ = m.infra_spread();
            });
            time(4, &mut || {
                let _ = m.cluster();
            });
            before = Some(m);
        }
        drop(before);
        for (k, (l, j, peak, rss)) in times.into_iter().enumerate().filter(|_| args.rounds > 0) {
            println!(
                "| {n} | {model_links} | {} | {:.0} ms | {:.0} ms | {rss:.0} MiB | +{:.0} MiB |",
                names[k],
                median(l),
                median(j),
                median(peak)
            );
        }
        if !explored.is_empty() {
            let ms = median(explored.iter().map(|e| e.0).collect());
            let pairs = median(explored.iter().map(|e| e.1 as f64).collect());
            let peak = median(explored.iter().map(|e| e.2).collect());
            println!(
                "| {n} | {model_links} | exploration round after the new placement ({pairs:.0} links to probe) | | {ms:.0} ms | | +{peak:.0} MiB |"
            );
        }
        for (((what, ms), mib), peak) in names_parts.iter().zip(parts).zip(heap).zip(peaks) {
            if !ms.is_empty() {
                let (ms, mib, peak) = (median(ms), median(mib), median(peak));
                println!(
                    "| {n} | {model_links} | model: {what} | {ms:.0} ms | | | held: +{mib:.0} MiB, at the peak +{peak:.0} MiB |"
                );
            }
        }
        // the operators' view (`serve --http-listen` / `--metrics-listen`): built on the
        // decision loop at most a tenth of its time (`observe::publish_every_ms`), on a model
        // nothing has read yet, then again at once; then, off the loop, the fleet document
        // (every application's paths scored on the model) and what the web view serves of it
        sim.feed(moved(clouds(n) + 8, 999));
        let mut scored = cloud_broker::observe::fleet::Scored::default();
        for what in ["a new model", "the same model"] {
            let rss = rss_mib();
            let t = Instant::now();
            let (v, view_peak) = peak_over(|| sim.e.view());
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let t = Instant::now();
            let (doc, doc_peak) =
                peak_over(|| cloud_broker::observe::fleet::build_with(&v, vec![], &mut scored));
            let doc_ms = t.elapsed().as_secs_f64() * 1000.0;
            let t = Instant::now();
            let page = cloud_broker::observe::page::body(Some(&doc));
            let json = serde_json::to_vec(&doc).map_or(0, |j| j.len());
            let serve_ms = t.elapsed().as_secs_f64() * 1000.0;
            println!(
                "| {n} | {model_links} | operators' view, {what} ({} of {} links) | {ms:.0} ms | | {:.0} MiB (before: {rss:.0}) | +{view_peak:.0} MiB |",
                v.links.len(),
                v.links_measured,
                rss_mib()
            );
            println!(
                "| {n} | {model_links} | its fleet document, off the loop ({} applications{}) | | {doc_ms:.0} ms | | +{doc_peak:.0} MiB |",
                doc.apps.len(),
                if what == "a new model" { " scored" } else { ", their scores kept" }
            );
            println!(
                "| {n} | {model_links} | the web view's page and /api/fleet ({:.1} MiB and {:.1} MiB) | | {serve_ms:.0} ms | | |",
                page.len() as f64 / (1 << 20) as f64,
                json as f64 / (1 << 20) as f64
            );
        }
        if args.views > 0 {
            let (heap, rss) = (live_mib(), rss_mib());
            let t = Instant::now();
            let mut docs = std::collections::VecDeque::new();
            for i in 0..args.views {
                sim.feed(moved(clouds(n) + 8 + i % 100, 1000 + i));
                let v = sim.e.view();
                let doc = cloud_broker::observe::fleet::build_with(&v, vec![], &mut scored);
                let page = cloud_broker::observe::page::body(Some(&doc));
                let json = serde_json::to_vec(&doc).map_or(0, |j| j.len());
                std::hint::black_box((page.len(), json));
                // as serve holds them: the last view published, the last document served
                docs.push_back((v, doc));
                if docs.len() > 1 {
                    docs.pop_front();
                }
            }
            let ms = t.elapsed().as_secs_f64() * 1000.0 / args.views as f64;
            println!(
                "| {n} | {model_links} | {} operators' views in a row, each with its document, page and JSON | {ms:.0} ms each | | heap {heap:.0} → {:.0} MiB, RSS {rss:.0} → {:.0} MiB | |",
                args.views,
                live_mib(),
                rss_mib()
            );
        }
        // what a remote scheduler worker receives of the model (packed once per model)
        let cluster = sim.e.model().cluster();
        let t = Instant::now();
        let packed = acoa_shared::jobs::pack_cluster(&cluster);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let between: usize = cluster.estimates.as_ref().map_or(0, |e| e.between.len());
        match packed {
            Ok(b) => println!(
                "| {n} | {model_links} | model: packed for scheduler workers ({:.1} MiB; {between} datacenter pairs with a median) | | {ms:.0} ms | | |",
                b.len() as f64 / (1 << 20) as f64
            ),
            Err(e) => println!(
                "| {n} | {model_links} | model: packed for scheduler workers: {e} ({between} datacenter pairs with a median) | | {ms:.0} ms | | |"
            ),
        }
    }
}
