//! The control plane's exploration (issue 16) on a simulated fleet: the 1 % goal measured
//! through the engine itself, not a model of it (not a test: it prints figures).
//!
//! ```text
//! cargo build --release -p acoa-scheduler --features sim --bin coords-sim
//! target/release/coords-sim --seed 1 --k 16 --place 12 --place-budget-ms 5000 --nodes 1000 \
//!     --place-rounds 5 --place-rules multi --export-dir /tmp/scenarios
//! cargo build --release -p cloud-broker --example explore_sim
//! target/release/examples/explore_sim --scenario /tmp/scenarios/scenario-1000-k16.json
//! ```
//!
//! `coords-sim` writes the fleet (nodes with the benchmark's attributes, the coordinates its
//! Vivaldi simulation converged to, every ordered pair as a prober measures it and as it truly
//! is) and its synthetic applications with their placements on every measured pair. Here the
//! engine is driven with plain values (`testkit::engine::EngineSim`, jobs run inline, a
//! simulated clock): every node reports itself, its coordinate, and the links of the peer list
//! the control plane published for it (k neighbours, and the links placements and explorations
//! ask for), each as the scenario measured it. The applications are published one at a time
//! (each alone, as `coords-sim` places them), left to the control plane (placement, targeted
//! probes, exploration rounds, the periodic re-evaluation) for `--seconds` of simulated time,
//! scored against the placement on every measured pair, and deleted.
//!
//! Scored on what (`--score-on`): on every pair *taken in* (as the control plane would hold a
//! measurement of each) and as *measured*, a placement is judged on the same one measurement of
//! each pair the reference was chosen on; the reference picks, among equivalent nodes, the
//! pair whose one measurement came out low (a train's jitter moves a median of 8 samples by a
//! millisecond), and so is favoured on those networks by its own noise. On the *true* network
//! (each pair's latency without the noise of one measurement) every placement is judged on what
//! the network delivers (taken in as a measurement would be: below the probers' floor, a
//! loopback and a LAN link are not told apart on any network but `measured`).
//!
//! Differences to the real fleet: nodes are never judged silent and links never expire (the
//! clock runs faster than the reports), and a newly asked link is measured at the next tick
//! (250 ms).

use std::collections::BTreeMap;
use std::time::Instant;

use acoa_scheduler::explore::Scenario;
use acoa_scheduler::score_all_on;
use acoa_shared::model::Application;
use acoa_shared::wire::{self, LinkSample};
use anyhow::Context;
use clap::{Parser, ValueEnum};
use cloud_broker::engine::{
    quantize_latency, Action, EngineConfig, Event, Purpose, LOOPBACK_LATENCY_MS,
};
use cloud_broker::testkit::engine::{link_metrics, EngineSim};
use cloud_broker::testkit::report_of;

#[derive(Parser)]
struct Args {
    /// A scenario written by `coords-sim --place N --export-dir`.
    #[arg(long)]
    scenario: std::path::PathBuf,
    /// The control plane's `--explore-rounds`.
    #[arg(long, default_value_t = cloud_broker::engine::DEFAULT_EXPLORE_ROUNDS)]
    explore_rounds: u32,
    /// The control plane's `--explore-width`.
    #[arg(long, default_value_t = acoa_scheduler::explore::DEFAULT_WIDTH)]
    explore_width: usize,
    /// Simulated time each application is left to the control plane.
    #[arg(long, default_value_t = 240)]
    seconds: u64,
    /// Only the first this many applications.
    #[arg(long)]
    apps: Option<usize>,
    /// Skip this many applications first.
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// The networks placements are scored on, each held as every pair (about 10 GB at 10,000
    /// nodes): `taken-in` (every pair measured, as the control plane takes a measurement in:
    /// rounded to the probers' step, not below their floor), `measured` (as coords-sim measured
    /// it, no floor), `true` (every pair's true quality, without the noise of one measurement,
    /// taken in; scenarios that hold it).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "taken-in,measured,true"
    )]
    score_on: Vec<Net>,
    /// Time budget of the reference placement's own search on every pair taken in, ms (0, or
    /// `taken-in` not scored on: none, coords-sim's reference only).
    #[arg(long, default_value_t = 5000)]
    reference_budget_ms: u64,
    /// Per application on stderr: the first placement against the reference and a 5-s
    /// search on the live model, and each channel of the last placement, live against the
    /// scenario.
    #[arg(long)]
    diagnose: bool,
    /// The control plane's log on stderr.
    #[arg(long)]
    log: bool,
    /// Nodes whose coordinate is unsure (error 1, as an agent that has just joined reports
    /// it): the last this many of the fleet (their coordinates as converged).
    #[arg(long, default_value_t = 0)]
    unsure: usize,
    /// The nodes report no position (the scenario's stations and clouds have one since
    /// 2026-12-06): their peer lists take no nearest on the map.
    #[arg(long)]
    no_positions: bool,
}

const TICK_MS: u64 = 250;

/// The most ticks the fleet is given to join (every node listed, the lists settled).
const JOIN_TICKS_MAX: usize = 400;

/// A network placements are scored on (`--score-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Net {
    TakenIn,
    Measured,
    True,
}

impl Net {
    fn what(self) -> &'static str {
        match self {
            Net::TakenIn => "every pair measured as the control plane takes it in",
            Net::Measured => "every pair as coords-sim measured it, no floor",
            Net::True => "every pair's true quality as the control plane takes it in",
        }
    }

    /// The pair (a, b) on this network, if the scenario holds it.
    fn pair(self, s: &Scenario, a: usize, b: usize) -> Option<acoa_scheduler::LinkQ> {
        // its latency rounded to what the probers resolve, never below their floor; a loopback
        // at the floor
        let taken_in = |mut q: acoa_scheduler::LinkQ| {
            q.latency_ms = if a == b {
                LOOPBACK_LATENCY_MS
            } else {
                quantize_latency(q.latency_ms)
            };
            q
        };
        match self {
            Net::TakenIn => Some(taken_in(s.pair(a, b).0)),
            Net::Measured => Some(s.pair(a, b).0),
            Net::True => s.true_pair(a, b).map(taken_in),
        }
    }
}

/// One application's outcome.
struct Run {
    components: usize,
    /// Per network scored on (`--score-on`, in order): below the better reference placement
    /// there, first and after the exploration.
    first: Vec<f64>,
    last: Vec<f64>,
    rounds: u32,
    explorations: usize,
    moves: usize,
    /// Moves after the exploration ended.
    moves_after: usize,
    asked: usize,
    secs: f64,
}

/// How the control plane's live model sees the fleet against the scenario's measurements:
/// the relative error of the estimated latencies and success rates, on pairs drawn at random.
fn estimates_against_truth(sim: &mut EngineSim, s: &Scenario) {
    let model = sim.e.model();
    let infra = model.infra();
    let n = s.nodes.len();
    let mut r = acoa_shared::rng::SplitMix64::new(7);
    let (mut lat, mut suc, mut measured, mut unknown) = (vec![], vec![], 0, 0);
    for _ in 0..20_000 {
        let (i, j) = (r.below(n), r.below(n));
        if i == j {
            continue;
        }
        let ends = infra
            .index_of(&s.nodes[i].name)
            .zip(infra.index_of(&s.nodes[j].name));
        let (truth, _) = s.pair(i, j);
        match ends.and_then(|(a, b)| infra.link_known(a, b)) {
            Some(acoa_shared::coords::Known::Estimated(q)) => {
                lat.push((q.latency_ms - truth.latency_ms).abs() / truth.latency_ms);
                suc.push((q.success - truth.success).abs());
            }
            Some(_) => measured += 1,
            None => unknown += 1,
        }
    }
    // the control plane sees the nodes as the scenario has them (else the references, placed
    // on the scenario's nodes, would not be its optimum); the scheduler's model holds no
    // positions (only the peer lists read them)
    let differ = s
        .nodes
        .iter()
        .filter(|x| {
            let unplaced = acoa_shared::model::Node {
                position: None,
                ..(*x).clone()
            };
            infra.index_of(&x.name).map(|i| infra.node(i)) != Some(&unplaced)
        })
        .count();
    if differ > 0 {
        eprintln!("warning: {differ} nodes differ between the live model and the scenario");
    }
    let (lm, lp, _) = spread(lat);
    let (sm, sp, _) = spread(suc);
    eprintln!(
        "live model against the scenario: estimated latency relative error median {:.1} % (p95 {:.1} %), success absolute error median {:.3} (p95 {:.3}); {measured} pairs measured, {unknown} unknown",
        100.0 * lm,
        100.0 * lp,
        sm,
        sp
    );
}

/// The pair x -> y as the live model holds it, and on each network scored on.
fn pair_everywhere(
    live: &acoa_scheduler::Infra,
    nets: &[(Net, acoa_scheduler::Infra)],
    s: &Scenario,
    index: &BTreeMap<&str, usize>,
    x: &str,
    y: &str,
) -> (
    Option<acoa_shared::coords::Known<acoa_scheduler::LinkQ>>,
    Vec<Option<acoa_scheduler::LinkQ>>,
) {
    let e = live
        .index_of(x)
        .zip(live.index_of(y))
        .and_then(|(i, j)| live.link_known(i, j));
    let ends = index.get(x).zip(index.get(y));
    let t = nets
        .iter()
        .map(|(net, _)| ends.and_then(|(i, j)| net.pair(s, *i, *j)))
        .collect();
    (e, t)
}

/// The exploration rounds' jobs among the actions since the log was cleared.
fn count_explorations(sim: &EngineSim) -> usize {
    sim.log
        .iter()
        .filter(|a| matches!(a, Action::Schedule(j) if j.purpose == Purpose::Explore))
        .count()
}

/// The l_min search's budget when the diagnosis scores on the live model: with an estimate
/// for every pair, an unbounded search over 10,000 nodes did not end in 8 minutes.
const LIVE_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// `placements` scored together on `infra`, one l_min search cut by `budget` if any (then the
/// scores compare with one another only); NaN where one cannot be scored.
fn scores(
    infra: &acoa_scheduler::Infra,
    app: &Application,
    placements: &[BTreeMap<String, String>],
    budget: Option<std::time::Duration>,
) -> Vec<f64> {
    score_all_on(infra, app, placements, budget)
        .into_iter()
        .map(|r| r.map_or(f64::NAN, |x| x.0))
        .collect()
}

/// The application placed alone on `infra` with `budget_ms` for its search.
fn search(
    infra: &acoa_scheduler::Infra,
    app: &Application,
    budget_ms: u64,
) -> Result<acoa_scheduler::Report, acoa_scheduler::ScheduleError> {
    acoa_scheduler::place_on(
        infra,
        app,
        &acoa_scheduler::Ledger::new(),
        &acoa_scheduler::Options {
            time_budget: Some(std::time::Duration::from_millis(budget_ms)),
            ..Default::default()
        },
    )
}

/// Median, p95 and max of `v`.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (q(0.5), q(0.95), q(1.0))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.log {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::io::stderr)
            .init();
    }
    let t = Instant::now();
    let f = std::fs::File::open(&args.scenario)
        .with_context(|| format!("cannot open {}", args.scenario.display()))?;
    let s: Scenario = serde_json::from_reader(std::io::BufReader::new(f))
        .with_context(|| format!("{} is not a scenario", args.scenario.display()))?;
    let n = s.nodes.len();
    eprintln!(
        "{}: {n} nodes, k {}, {} applications, read in {:.1} s",
        args.scenario.display(),
        s.k,
        s.apps.len(),
        t.elapsed().as_secs_f64()
    );
    // the networks placements are scored on, every pair on each
    let nets: Vec<(Net, acoa_scheduler::Infra)> = args
        .score_on
        .iter()
        .filter(|net| {
            let held = net.pair(&s, 0, 0).is_some();
            if !held {
                eprintln!("{net:?}: not in this scenario, not scored on");
            }
            held
        })
        .map(|&net| {
            let t = Instant::now();
            let infra = s.every_pair(|a, b| net.pair(&s, a, b).expect("held"));
            eprintln!(
                "{}: {} links, {:.1} s",
                net.what(),
                infra.link_count(),
                t.elapsed().as_secs_f64()
            );
            (net, infra)
        })
        .collect();
    anyhow::ensure!(!nets.is_empty(), "no network to score on");
    // the reference's own search: on every pair taken in ("the placement computed on all
    // measured pairs")
    let taken_in = nets
        .iter()
        .find(|(net, _)| *net == Net::TakenIn)
        .map(|(_, infra)| infra)
        .filter(|_| args.reference_budget_ms > 0);
    let mut sim = EngineSim::new(EngineConfig {
        peers_k: s.k,
        explore_rounds: args.explore_rounds,
        explore_width: args.explore_width,
        // the simulated clock runs ahead of the reports: nothing is judged silent or expires
        node_timeout_ms: 1 << 40,
        link_max_age_ms: 1 << 40,
        stats_every_ms: 0,
        ..EngineConfig::default()
    });
    let coord = |i: usize| {
        let (v, h, e) = s.coords[i];
        wire::WireCoord {
            vec: [v[0] as f32, v[1] as f32, v[2] as f32],
            height: h as f32,
            error: if i + args.unsure >= s.nodes.len() {
                1.0
            } else {
                e as f32
            },
        }
    };
    for (i, node) in s.nodes.iter().enumerate() {
        let mut r = report_of(node, 1, &format!("10.{}.{}.1:7878", i / 256, i % 256));
        r.capacity.net_mbps = node.capacity.net_mbps.map_or(0, |x| x as u64);
        if args.no_positions {
            r.position = None;
        }
        sim.feed(Event::Report(Box::new(r)));
    }
    let mut seq = 1;
    for (i, node) in s.nodes.iter().enumerate() {
        let mut l = link_metrics(&node.name, []);
        l.coord = Some(coord(i));
        sim.feed(Event::links(Box::new(l)));
    }
    sim.feed(Event::StartupDone);
    let index: BTreeMap<&str, usize> = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, x)| (x.name.as_str(), i))
        .collect();
    // each node reports the links of its list when the list changed: how many did, and how
    // many nodes have a list
    let mut reported: Vec<Vec<String>> = vec![Vec::new(); n];
    let mut report_lists = |sim: &mut EngineSim, seq: u64| -> (usize, usize) {
        let (mut changed, mut listed) = (0, 0);
        for (i, node) in s.nodes.iter().enumerate() {
            let list = sim.e.peer_list(&node.name).unwrap_or_default();
            listed += usize::from(!list.is_empty());
            if list == reported[i] {
                continue;
            }
            changed += 1;
            let samples = list.iter().filter_map(|p| {
                let j = *index.get(p.as_str())?;
                let (q, jitter) = s.pair(i, j);
                Some(LinkSample {
                    peer: wire::name(p).ok()?,
                    latency_ms: q.latency_ms as f32,
                    jitter_ms: jitter as f32,
                    success: q.success as f32,
                    samples: 20,
                    last_answer_ms: 0,
                })
            });
            let mut l = link_metrics(&node.name, samples);
            l.seq = seq;
            l.coord = Some(coord(i));
            sim.feed(Event::links(Box::new(l)));
            reported[i] = list;
        }
        (changed, listed)
    };
    // until every node has its list, none changed and the live model took the links in and
    // held them for a while (a larger fleet's lists wait for the membership to settle, a
    // millisecond per 10 nodes, and its model takes new links at most every 1 s per 100,000
    // links), at least 8 ticks
    let (mut quiet, mut held) = (0, 0);
    for i in 0..JOIN_TICKS_MAX {
        seq += 1;
        let (changed, listed) = report_lists(&mut sim, seq);
        sim.tick(TICK_MS);
        let links = sim.e.cluster().links.len();
        let settled = changed == 0 && listed == n && links > n && links == held;
        quiet = if settled { quiet + 1 } else { 0 };
        held = links;
        if i >= 8 && quiet >= 4 {
            break;
        }
    }
    eprintln!(
        "fleet joined: {} links measured, {:.1} s",
        sim.e.cluster().links.len(),
        t.elapsed().as_secs_f64()
    );
    estimates_against_truth(&mut sim, &s);
    let mut runs = Vec::new();
    let chosen = s.apps.iter().enumerate().skip(args.skip);
    for (i, a) in chosen.take(args.apps.unwrap_or(usize::MAX)) {
        let started = Instant::now();
        let name = format!("app{i:02}");
        let mut app = a.application.clone();
        app.application = name.clone();
        sim.log.clear();
        sim.publish(&name, serde_json::to_vec(&app)?);
        let mut explorations = count_explorations(&sim);
        let placed = |sim: &EngineSim| {
            sim.e
                .status_now(&name)
                .and_then(|st| st.placement)
                .context("not placed")
        };
        let first = placed(&sim)?;
        if args.diagnose {
            let model = sim.e.model();
            let infra = model.infra();
            let long = search(&infra, &app, 5_000)?;
            let long_a = match &long.outcome {
                acoa_scheduler::Outcome::Placed(p) => p.assignment.clone(),
                _ => first.clone(),
            };
            let live = scores(
                &infra,
                &app,
                &[a.reference.clone(), first.clone(), long_a.clone()],
                Some(LIVE_BUDGET),
            );
            // coords-sim's reference was placed and scored on the pairs as measured
            let on_measured = nets.iter().find(|(net, _)| *net == Net::Measured);
            let t = |x: &BTreeMap<String, String>| {
                on_measured.map_or(f64::NAN, |(_, infra)| {
                    acoa_scheduler::score_on(infra, &app, x)
                        .map_or(f64::NAN, |v| (a.score - v.0) / a.score)
                })
            };
            eprintln!(
                "{name}: on the live model: reference {:.6}, first {:.6}, 5-s search {:.6} (proven {}); on all pairs: first {:.2} %, 5-s search {:.2} %; first on estimates: {} of {} channels",
                live[0],
                live[1],
                live[2],
                long.proven,
                100.0 * t(&first),
                100.0 * t(&long_a),
                infra.estimated_channels(&app, &first),
                app.channels.len()
            );
        }
        let (mut moves, mut asked, mut moves_after, mut was_ended) = (0, 0, 0, false);
        let mut last = first.clone();
        for _ in 0..args.seconds * 1000 / TICK_MS {
            seq += 1;
            sim.log.clear();
            asked += report_lists(&mut sim, seq).0;
            sim.tick(TICK_MS);
            explorations += count_explorations(&sim);
            let now = placed(&sim)?;
            moves += usize::from(now != last);
            // a move once the exploration ended: the periodic re-evaluation's
            let ended = sim
                .e
                .exploration(&name)
                .is_some_and(|(r, goes_on)| r > 0 && !goes_on);
            moves_after += usize::from(now != last && ended && was_ended);
            was_ended = ended;
            last = now;
        }
        if args.diagnose {
            let model = sim.e.model();
            let infra = model.infra();
            // what a longer search on the final live model finds: a gap the live model could
            // close is the search's, not the probes'
            let long = search(&infra, &app, 5_000)?;
            if let acoa_scheduler::Outcome::Placed(p) = &long.outcome {
                let both = [last.clone(), p.assignment.clone()];
                eprintln!(
                    "{name}: last against a 5-s search on the final live model (proven {}, {} of {} channels on estimates): live {:?}",
                    long.proven,
                    infra.estimated_channels(&app, &p.assignment),
                    app.channels.len(),
                    scores(&infra, &app, &both, Some(LIVE_BUDGET)),
                );
                for (net, on) in &nets {
                    eprintln!("  on {}: {:?}", net.what(), scores(on, &app, &both, None));
                }
            }
            eprintln!(
                "{name}: last placement scored on the live model {:.6}; coords-sim's reference on the pairs as measured {:.6}",
                scores(&infra, &app, std::slice::from_ref(&last), Some(LIVE_BUDGET))[0],
                a.score
            );
            for ch in &app.channels {
                let (x, y) = (&last[&ch.from], &last[&ch.to]);
                let (e, t) = pair_everywhere(&infra, &nets, &s, &index, x, y);
                eprintln!(
                    "  {} {x} -> {y}: live {e:?}, {:?}: {t:?}",
                    ch.name, args.score_on
                );
            }
        }
        let reference = match taken_in {
            Some(seen) => match search(seen, &app, args.reference_budget_ms)?.outcome {
                acoa_scheduler::Outcome::Placed(p) => p.assignment,
                acoa_scheduler::Outcome::Infeasible(_) => a.reference.clone(),
            },
            None => a.reference.clone(),
        };
        let all = [first, last, reference, a.reference.clone()];
        let on = |infra: &acoa_scheduler::Infra| -> anyhow::Result<Vec<f64>> {
            Ok(score_all_on(infra, &app, &all, None)
                .into_iter()
                .map(|r| r.map(|x| x.0))
                .collect::<Result<_, _>>()?)
        };
        let scores = nets
            .iter()
            .map(|(_, infra)| on(infra))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if args.diagnose {
            for ((net, _), sc) in nets.iter().zip(&scores) {
                eprintln!(
                    "{name}: scores of first, last, reference, coords-sim's reference on {}: {sc:?}",
                    net.what()
                );
            }
            eprintln!("{name}: reference {:?}\n  last {:?}", all[2], all[1]);
            let model = sim.e.model();
            let infra = model.infra();
            // the reference's estimated pairs with their value on the first network scored on
            let mut extra = Vec::new();
            for ch in &app.channels {
                let (x, y) = (&all[2][&ch.from], &all[2][&ch.to]);
                let (e, t) = pair_everywhere(&infra, &nets, &s, &index, x, y);
                let ends = infra.index_of(x).zip(infra.index_of(y));
                if let (
                    Some(acoa_shared::coords::Known::Estimated(_)),
                    Some(Some(q)),
                    Some((i, j)),
                ) = (e, t.first(), ends)
                {
                    extra.push((i, j, *q));
                }
                // what the two datacenters' other pairs measure in the live model (would an
                // estimate from the group pair have found this pair?)
                let mates = |z: &str| -> Vec<u32> {
                    let Some(dc) = infra.index_of(z).map(|i| &infra.node(i).datacenter) else {
                        return Vec::new();
                    };
                    (0..infra.len() as u32)
                        .filter(|i| infra.node(*i).datacenter == *dc)
                        .collect()
                };
                let (gx, gy) = (mates(x), mates(y));
                let mut between: Vec<f64> = gx
                    .iter()
                    .flat_map(|i| gy.iter().map(move |j| (*i, *j)))
                    .filter(|(i, j)| i != j)
                    .filter_map(|(i, j)| match infra.link_known(i, j) {
                        Some(acoa_shared::coords::Known::Measured(q)) => Some(q.latency_ms),
                        _ => None,
                    })
                    .collect();
                between.sort_by(f64::total_cmp);
                // the shortest path of two measured links between them: could a rule that
                // probes two-link shortcuts find this pair? (BENCHMARKS.md, "Why 10,000
                // nodes miss": tried, not kept)
                let two = ends.and_then(|(i, j)| {
                    let near = |n: u32| {
                        let (o, oq) = infra.out_links(n);
                        let (p, pq) = infra.inn_links(n);
                        o.iter()
                            .zip(oq.iter().copied())
                            .chain(p.iter().zip(pq.iter()))
                            .map(|(&m, q)| (m, q.latency_ms))
                            .collect::<Vec<_>>()
                    };
                    near(i)
                        .into_iter()
                        .flat_map(|(b, d)| {
                            near(b)
                                .into_iter()
                                .filter(|&(m, _)| m == j)
                                .map(move |(_, e)| (d + e, b))
                        })
                        .min_by(|p, q| p.0.total_cmp(&q.0))
                });
                eprintln!(
                    "  reference {} {x} -> {y}: live {e:?}, {:?}: {t:?}; the datacenters' pairs measured: {} of {}, latency {:?}; two measured links: {two:?}",
                    ch.name,
                    args.score_on,
                    between.len(),
                    gx.len() * gy.len(),
                    between
                );
            }
            // the final live model's view of the reference: as it stands, then with those
            // pairs given. Preferred to the last placement as it stands: the searches' gap
            // (none found it); only once its pairs are given: the probes' (nobody measured them)
            let probed = infra.requalified(|_, _, _, q| q, &extra);
            let pair = [all[1].clone(), all[2].clone()];
            eprintln!(
                "{name}: last, reference on the final live model {:?}; with the reference's {} estimated pairs as on {}: {:?}",
                self::scores(&infra, &app, &pair, Some(LIVE_BUDGET)),
                extra.len(),
                nets.first().map_or("-", |(n, _)| n.what()),
                self::scores(&probed, &app, &pair, Some(LIVE_BUDGET)),
            );
        }
        // the better of the two references on each network (a search cut by its budget may
        // miss the other's)
        let below = |at: usize| -> Vec<f64> {
            scores
                .iter()
                .map(|sc| {
                    let best = sc[2].max(sc[3]);
                    (best - sc[at]) / best
                })
                .collect()
        };
        let run = Run {
            components: app.components.len(),
            first: below(0),
            last: below(1),
            rounds: sim.e.exploration(&name).map_or(0, |x| x.0),
            explorations,
            moves,
            moves_after,
            asked,
            secs: started.elapsed().as_secs_f64(),
        };
        let on_each: Vec<String> = nets
            .iter()
            .enumerate()
            .map(|(j, (net, _))| {
                format!(
                    "{:.2} % → {:.2} % on {}",
                    100.0 * run.first[j],
                    100.0 * run.last[j],
                    net.what()
                )
            })
            .collect();
        eprintln!(
            "{name} ({} components): below the placement on all pairs {}; {} exploration rounds, {} moves ({} after the exploration), {:.0} s",
            run.components,
            on_each.join(", "),
            run.rounds,
            run.moves,
            run.moves_after,
            run.secs
        );
        runs.push(run);
        sim.publish(&name, Vec::new());
    }
    let labels: Vec<String> = nets.iter().map(|(net, _)| format!("{net:?}")).collect();
    println!(
        "| application | components | below the reference, first / after {} s: {} | exploration rounds | exploration jobs | moves (after the exploration) | node reports with a new list | wall time (s) |",
        args.seconds,
        labels.join(" | ")
    );
    println!("|---|---|{}---|---|---|---|---|", "---|".repeat(nets.len()));
    for (i, r) in runs.iter().enumerate() {
        let each: Vec<String> = (0..nets.len())
            .map(|j| format!("{:.2} / {:.2} %", 100.0 * r.first[j], 100.0 * r.last[j]))
            .collect();
        println!(
            "| app{i:02} | {} | {} | {} | {} | {} ({}) | {} | {:.0} |",
            r.components,
            each.join(" | "),
            r.rounds,
            r.explorations,
            r.moves,
            r.moves_after,
            r.asked,
            r.secs
        );
    }
    for (j, (net, _)) in nets.iter().enumerate() {
        let (f, l): (Vec<f64>, Vec<f64>) = runs.iter().map(|r| (r.first[j], r.last[j])).unzip();
        let ((fm, fp, fx), (lm, lp, lx)) = (spread(f), spread(l));
        println!(
            "\n{n} nodes, k {}: below the placement on {}, median / p95 / max: first placement {:.2} / {:.2} / {:.2} %, after the exploration {:.2} / {:.2} / {:.2} %",
            s.k,
            net.what(),
            100.0 * fm,
            100.0 * fp,
            100.0 * fx,
            100.0 * lm,
            100.0 * lp,
            100.0 * lx
        );
    }
    Ok(())
}
