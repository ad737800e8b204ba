//! The 1 % goal of issue 16 in simulation: after the coordinates converged, the synthetic
//! applications of the scheduler benchmark (`acoa_scheduler::synth::application`) are placed
//! (a) on every pair measured (the truth, with measurement noise) and (b) on the k measured
//! pairs of the last peer lists plus the estimates of every other pair, the control plane's
//! rule (`coords::LinkView::of_pair` through the scheduler's `Estimator`); both placements are
//! scored on (a) and the relative difference `(score_a - score_b) / score_a` reported. A third
//! placement (c), every pair with its measured success rate and the unmeasured ones at their
//! estimated latency, tells how much of the difference the latency estimate makes (the rest
//! is the success rule's: the product of the endpoints' medians, pessimistic by design).
//!
//! After (b), `--place-rounds` rounds of targeted probes and re-evaluation by each rule of
//! `--place-rules` (`rounds.rs`), each placement in force scored on (a) again: a second table,
//! per rule and round.
//!
//! The fleet's nodes get the benchmark's attributes by their site's kind: cloud sites are the
//! cloud layer (x86_64, fast-cpu, half with a database), stations and trains edge sites
//! (aarch64, every device on the site's first node and a quarter of the others, a tenth
//! with a database); datacenters are named as in the benchmark (`synth::dc_name`, clouds
//! apart), so the applications pin their sources and dashboards to stations and trains.
//!
//! A measured link: the median of 8 samples of `Topology::sample` (noise, outliers), success
//! the share of 20 probes answered (1 % are lost), both directions measured apart.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_scheduler::rng::SplitMix64 as Rng;
use acoa_scheduler::{
    explore, place_on, score_all_on, score_on, synth, Infra, Ledger, LinkQ, Options,
    Outcome as Placed,
};
use acoa_shared::model::Node;

use super::rounds::{self, Fleet, Links, Meas, Round, Rule};
use super::{quantile, Args, Kind, Outcome, Topology};

pub fn header(args: &Args) {
    println!(
        "Placements: {} synthetic applications per size (5 / 10 / 20 components in turn, seeds 7, 8, ...), time budget {} ms per search\n",
        args.place, args.place_budget_ms
    );
    println!("| nodes | k | applications placed on both | proven (all pairs / k + estimates) | median rel. score difference | p95 | max | placements identical | channels on estimated links (b) | place time, mean (s): all pairs / k + estimates | (c) only the latency estimated: median / p95 |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
}

/// Node `i` with the benchmark's attributes of its site's kind (`synth::node`): every device
/// on the site's `first` node.
fn node(topo: &Topology, i: usize, first: bool, r: &mut Rng) -> Node {
    let site = topo.nodes[i].site;
    let cloud = topo.sites[site].kind == Kind::Cloud;
    let datacenter = if cloud {
        format!("cloud{site:03}")
    } else {
        synth::dc_name(site)
    };
    let mut node = synth::node(format!("n{i:05}"), datacenter, cloud, |_| first, r);
    node.position = topo.place(i);
    node
}

/// One directed pair measured as the prober would: latency the median of 8 samples,
/// jitter their mean absolute deviation from it, success the share of 20 probes answered.
fn measure(topo: &Topology, a: usize, b: usize, outliers: f64, r: &mut Rng) -> (LinkQ, f64) {
    let mut v: Vec<f64> = Vec::with_capacity(20);
    for _ in 0..20 {
        if let Some(s) = topo.sample(a, b, outliers, r) {
            v.push(s);
        }
    }
    let answered = v.len() as f64 / 20.0;
    v.truncate(8);
    if v.is_empty() {
        return (
            LinkQ {
                latency_ms: topo.true_ms(a, b),
                success: 0.0,
            },
            0.0,
        );
    }
    let m = quantile(&mut v, 0.5);
    let jitter = v.iter().map(|x| (x - m).abs()).sum::<f64>() / v.len() as f64;
    (
        LinkQ {
            latency_ms: m,
            success: answered,
        },
        jitter,
    )
}

fn budgeted(ms: u64) -> Options {
    Options {
        time_budget: Some(Duration::from_millis(ms)),
        ..Options::default()
    }
}

pub fn compare(topo: &Topology, k: usize, o: &Outcome, args: &Args) -> Vec<String> {
    let n = topo.nodes.len();
    let mut r = Rng::new(args.seed ^ 0x9ace);
    let mut seen_site = vec![false; topo.sites.len()];
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let s = topo.nodes[i].site;
            let first = !seen_site[s];
            seen_site[s] = true;
            node(topo, i, first, &mut r)
        })
        .collect();
    // (a) every ordered pair measured, loopbacks at 0.05 ms
    let mut all: Vec<(LinkQ, f64)> = Vec::with_capacity(n * n);
    for a in 0..n {
        for b in 0..n {
            all.push(if a == b {
                (
                    LinkQ {
                        latency_ms: 0.05,
                        success: 1.0,
                    },
                    0.0,
                )
            } else {
                measure(topo, a, b, args.outliers, &mut r)
            });
        }
    }
    let truth = Infra::new(
        nodes.clone(),
        (0..n).flat_map(|a| {
            let all = &all;
            (0..n).map(move |b| (a as u32, b as u32, all[a * n + b].0))
        }),
    );
    // (b) the last peer lists' links (and loopbacks), plus the estimates' inputs from them
    let meas = |a: usize, b: usize| {
        let (q, jitter_ms) = all[a * n + b];
        Meas { q, jitter_ms }
    };
    let mut base: Links = (0..n).map(|a| ((a as u32, a as u32), meas(a, a))).collect();
    for (a, peers) in o.peers.iter().enumerate() {
        for &b in peers {
            base.insert((a as u32, b as u32), meas(a, b));
        }
    }
    let fleet = Fleet {
        nodes: &nodes,
        site: topo.nodes.iter().map(|x| x.site).collect(),
        coords: &o.coords,
    };
    let (sparse, _) = fleet.view(&base);
    // (c), to tell the two rules apart: every pair with its measured success rate, the
    // unmeasured ones at their estimated latency (a second n^2 network: skipped with
    // --place-without-c)
    let latency_only = (!args.place_without_c).then(|| {
        Infra::new(
            nodes.clone(),
            (0..n as u32).flat_map(|a| {
                let (all, sparse) = (&all, &sparse);
                (0..n as u32).map(move |b| {
                    let q = all[a as usize * n + b as usize].0;
                    let l = match sparse.link_known(a, b) {
                        Some(acoa_shared::coords::Known::Estimated(e)) => e.latency_ms,
                        _ => q.latency_ms,
                    };
                    (
                        a,
                        b,
                        LinkQ {
                            latency_ms: l,
                            success: q.success,
                        },
                    )
                })
            }),
        )
    });
    let mut diffs_c = Vec::new();
    let (mut diffs, mut proven, mut same, mut on_est, mut chans) = (Vec::new(), (0, 0), 0, 0, 0);
    let (mut t_a, mut t_b) = (0.0, 0.0);
    let mut tally: Vec<Vec<Tally>> =
        vec![vec![Tally::default(); args.place_rounds + 1]; args.place_rules.len()];
    let measure = |a: u32, b: u32| meas(a as usize, b as usize);
    let mut exported = Vec::new();
    for i in 0..args.place {
        let started = Instant::now();
        let comps = [5, 10, 20][i % 3];
        let app = synth::application(comps, topo.sites.len(), 7 + i as u64);
        let t = Instant::now();
        let ra = place_on(
            &truth,
            &app,
            &Ledger::new(),
            &budgeted(args.place_budget_ms),
        )
        .expect("place");
        t_a += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let rb = place_on(
            &sparse,
            &app,
            &Ledger::new(),
            &budgeted(args.place_budget_ms),
        )
        .expect("place");
        t_b += t.elapsed().as_secs_f64();
        let (Placed::Placed(pa), Placed::Placed(pb)) = (&ra.outcome, &rb.outcome) else {
            continue;
        };
        proven.0 += ra.proven as usize;
        proven.1 += rb.proven as usize;
        exported.push(explore::ScenarioApp {
            application: app.clone(),
            reference: pa.assignment.clone(),
            score: pa.score,
        });
        let first = Round {
            assignment: pb.assignment.clone(),
            changed: false,
            on_estimates: sparse.estimated_channels(&app, &pb.assignment),
            probed: 0,
            proven: rb.proven,
            targeted: Vec::new(),
        };
        // per rule: its first placement (the pessimistic one searches its own) and its rounds
        let runs: Vec<(Round, Vec<Round>)> = args
            .place_rules
            .iter()
            .map(|&rule| {
                let first = match rule {
                    Rule::Pessimistic => {
                        let (model, _) = fleet.view_as(&base, rule);
                        match place_on(
                            &model,
                            &app,
                            &Ledger::new(),
                            &budgeted(args.place_budget_ms),
                        ) {
                            Ok(r) => match r.outcome {
                                Placed::Placed(p) => Round {
                                    on_estimates: model.estimated_channels(&app, &p.assignment),
                                    assignment: p.assignment,
                                    changed: false,
                                    probed: 0,
                                    proven: r.proven,
                                    targeted: Vec::new(),
                                },
                                _ => first.clone(),
                            },
                            Err(_) => first.clone(),
                        }
                    }
                    Rule::System | Rule::Adopt | Rule::Probe | Rule::Multi => first.clone(),
                };
                let done = rounds::run(
                    &fleet,
                    &base,
                    &measure,
                    &app,
                    &first.assignment,
                    rule,
                    args.place_rounds,
                    args.place_multi_width,
                    &budgeted(args.place_budget_ms),
                );
                (first, done)
            })
            .collect();
        // every placement in force scored on all pairs at once (one l_min search)
        let in_force: Vec<BTreeMap<String, String>> = std::iter::once(&first)
            .chain(
                runs.iter()
                    .flat_map(|(f, run)| std::iter::once(f).chain(run)),
            )
            .map(|r| r.assignment.clone())
            .collect();
        let diff: Vec<f64> = score_all_on(&truth, &app, &in_force, None)
            .into_iter()
            .map(|s| (pa.score - s.expect("scored on all pairs").0) / pa.score)
            .collect();
        diffs.push(diff[0]);
        let mut at = 1;
        for ((first, run), t) in runs.iter().zip(tally.iter_mut()) {
            for (j, t) in t.iter_mut().enumerate() {
                // after the last round run, the placement stays (nothing new to measure)
                let (r, d, searched) = match j.checked_sub(1).map(|i| (i, run.get(i))) {
                    None => (first, diff[at], true),
                    Some((i, Some(r))) => (r, diff[at + 1 + i], true),
                    Some(_) => match run.last() {
                        Some(r) => (r, diff[at + run.len()], false),
                        None => (first, diff[at], false),
                    },
                };
                t.add(r, d, searched && j > 0 && r.changed);
                // the targeted pairs of rounds 1..=j, per node (either end)
                let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
                let pairs = run.iter().take(j).flat_map(|r| &r.targeted);
                for &(a, b) in pairs.clone() {
                    for x in [a, b] {
                        *per_node.entry(x).or_default() += 1;
                        *t.per_node.entry(x).or_default() += 1;
                    }
                }
                t.app_max = t.app_max.max(pairs.count());
                t.node_app_max = t
                    .node_app_max
                    .max(per_node.values().copied().max().unwrap_or(0));
                t.searched += usize::from(searched);
                t.proven += usize::from(searched && r.proven);
            }
            at += 1 + run.len();
        }
        eprintln!(
            "{n} nodes, k {k}: application {i} ({comps} components) in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        if let Some(latency_only) = &latency_only {
            let rc = place_on(
                latency_only,
                &app,
                &Ledger::new(),
                &budgeted(args.place_budget_ms),
            )
            .expect("place");
            if let Placed::Placed(pc) = &rc.outcome {
                let (sc, _) = score_on(&truth, &app, &pc.assignment).expect("scored on all pairs");
                diffs_c.push((pa.score - sc) / pa.score);
            }
        }
        same += (pa.assignment == pb.assignment) as usize;
        chans += app.channels.len();
        on_est += sparse.estimated_channels(&app, &pb.assignment);
    }
    if let Some(dir) = &args.export_dir {
        export(dir, topo, &nodes, &all, o, k, exported);
    }
    let placed = diffs.len();
    let (median, p95, max) = spread(&mut diffs);
    let (mc, pc) = if diffs_c.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (quantile(&mut diffs_c, 0.5), quantile(&mut diffs_c, 0.95))
    };
    println!(
        "| {n} | {k} | {placed} of {} | {} / {} | {:.2} % | {:.2} % | {:.2} % | {same} | {on_est} of {chans} | {:.2} / {:.2} | {:.2} % / {:.2} % |",
        args.place,
        proven.0,
        proven.1,
        100.0 * median,
        100.0 * p95,
        100.0 * max,
        t_a / args.place as f64,
        t_b / args.place as f64,
        100.0 * mc,
        100.0 * pc
    );
    let mut rows = Vec::new();
    for (rule, t) in args.place_rules.iter().zip(tally.iter_mut()) {
        for (j, t) in t.iter_mut().enumerate() {
            let (median, p95, max) = spread(&mut t.diffs);
            rows.push(format!(
                "| {n} | {k} | {rule:?} | {j} | {:.2} % | {:.2} % | {:.2} % | {} of {placed} | {} of {chans} | {} | {} | {} / {} | {} of {} |",
                100.0 * median,
                100.0 * p95,
                100.0 * max,
                t.changed,
                t.on_est,
                t.probed,
                t.app_max,
                t.node_app_max,
                t.per_node.values().copied().max().unwrap_or(0),
                t.proven,
                t.searched
            ));
        }
    }
    rows
}

/// Writes the fleet, every pair as measured and as it truly is, and the applications with
/// their placements on all pairs (`explore::Scenario`) to `dir/scenario-{n}-k{k}.json`.
fn export(
    dir: &std::path::Path,
    topo: &Topology,
    nodes: &[Node],
    all: &[(LinkQ, f64)],
    o: &Outcome,
    k: usize,
    apps: Vec<explore::ScenarioApp>,
) {
    let n = nodes.len();
    let s = explore::Scenario {
        nodes: nodes.to_vec(),
        coords: o
            .coords
            .iter()
            .map(|(v, h, e)| ([v[0], v[1], v[2]], *h, *e))
            .collect(),
        k,
        latency_ms: all.iter().map(|(q, _)| q.latency_ms as f32).collect(),
        jitter_ms: all.iter().map(|(_, j)| *j as f32).collect(),
        success: all.iter().map(|(q, _)| q.success as f32).collect(),
        // loopbacks as measured (0.05 ms, every probe answered)
        true_latency_ms: (0..n * n)
            .map(|i| match (i / n, i % n) {
                (a, b) if a == b => all[i].0.latency_ms as f32,
                (a, b) => topo.true_ms(a, b) as f32,
            })
            .collect(),
        true_success: (0..n * n)
            .map(|i| match (i / n, i % n) {
                (a, b) if a == b => all[i].0.success as f32,
                (a, b) => topo.success(a, b) as f32,
            })
            .collect(),
        apps,
    };
    let path = dir.join(format!("scenario-{}-k{k}.json", nodes.len()));
    let written = std::fs::create_dir_all(dir)
        .map_err(anyhow::Error::from)
        .and_then(|_| Ok(std::fs::File::create(&path)?))
        .and_then(|f| Ok(serde_json::to_writer(std::io::BufWriter::new(f), &s)?));
    match written {
        Ok(()) => eprintln!("scenario written to {}", path.display()),
        Err(e) => eprintln!("scenario not written to {}: {e}", path.display()),
    }
}

/// Header of the rounds' table ([`compare`]'s rows).
pub fn rounds_header() {
    println!("| nodes | k | rule | round | median rel. score difference | p95 | max | placements changed in the round | channels on estimated links | targeted pairs measured (total) | most of one application | most of one node: one application / all | searches proven |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
}

/// One round over the applications, for one rule.
#[derive(Debug, Clone, Default)]
struct Tally {
    diffs: Vec<f64>,
    changed: usize,
    on_est: usize,
    probed: usize,
    proven: usize,
    searched: usize,
    /// Targeted pairs so far: the most of one application.
    app_max: usize,
    /// ... the most a node is an end of, for one application.
    node_app_max: usize,
    /// ... per node, over every application.
    per_node: BTreeMap<u32, usize>,
}

impl Tally {
    fn add(&mut self, r: &Round, diff: f64, changed: bool) {
        self.diffs.push(diff);
        self.changed += usize::from(changed);
        self.on_est += r.on_estimates;
        self.probed += r.probed;
    }
}

/// Median, p95 and max of `v` (NaN when empty).
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (quantile(v, 0.5), quantile(v, 0.95), max)
}
