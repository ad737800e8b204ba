//! The tunnel experiment: the railway testbed with the whole system (control plane, one agent
//! per node, the smoke-monitoring application as workload containers), train 1 cut from the
//! cloud and the station for `cut` seconds every `period` (a tunnel), and one cloud node crashed
//! between two tunnels in the middle of the run. Each liveness policy of the control plane (an
//! "arm": `cloud-broker serve` options) runs the same schedule on the same testbed, one after
//! the other; the report compares the moves, the containers started again, how soon the crashed
//! node's components run elsewhere, and the fraction of time each path is served.
//!
//! The workload's collector sits on a testbed endpoint of its own (`obs`) that no tunnel cuts,
//! so the measurement itself never goes through a cut link.
//!
//! Test harness code: errors are `anyhow`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acoa_shared::model::{AppPath, Application, Cluster};
use anyhow::{bail, Context, Result};

use crate::agents::AgentOptions;
use crate::dynamic::{all_running, placement_of};
use crate::emu::{Testbed, HOST};
use crate::partition::{self, LogTail, NodeState, Plane};
use crate::workload::{self, Collector, Records, COLLECTOR_PORT};

/// The testbed endpoint of the workload's collector (never cut).
pub const OBS: &str = "obs";

/// When the tunnels and the crash happen, seconds from the start of the schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// (start, end) of every tunnel.
    pub tunnels: Vec<(f64, f64)>,
    pub crash_at: f64,
    pub end: f64,
}

impl Schedule {
    /// `cycles` tunnels of `cut_s`, one every `period_s`, the first at `first_s`; the crash in
    /// the middle of the gap after tunnel `(cycles - 1) / 2` (between two tunnels); the end one
    /// period after the last tunnel started.
    pub fn new(cycles: usize, period_s: f64, cut_s: f64, first_s: f64) -> Result<Self> {
        if cycles == 0 || !(cut_s > 0.0 && cut_s < period_s) {
            bail!("a schedule needs at least one cycle and a cut shorter than the period");
        }
        let tunnels = (0..cycles)
            .map(|k| {
                let s = first_s + k as f64 * period_s;
                (s, s + cut_s)
            })
            .collect();
        let m = (cycles - 1) / 2;
        let crash_at = first_s + m as f64 * period_s + cut_s + (period_s - cut_s) / 2.0;
        Ok(Self {
            tunnels,
            crash_at,
            end: first_s + cycles as f64 * period_s,
        })
    }

    pub fn in_tunnel(&self, t: f64) -> bool {
        self.tunnels.iter().any(|(a, b)| t >= *a && t < *b)
    }
}

/// One policy compared: a name and the control plane's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    pub name: String,
    pub serve_args: Vec<String>,
}

/// `evidence` (the default liveness), `timer` (lost after 40 s of silence, as Kubernetes) or
/// `timer:N` (after N s).
pub fn parse_arm(s: &str) -> Result<Arm> {
    let timer = |secs: &str| -> Result<Arm> {
        let n: u64 = secs
            .parse()
            .with_context(|| format!("arm {s}: {secs} is not a number of seconds"))?;
        Ok(Arm {
            name: format!("timer-{n}s"),
            serve_args: vec![
                "--liveness".into(),
                "timer".into(),
                "--lost-after-s".into(),
                n.to_string(),
            ],
        })
    };
    match s.split_once(':') {
        None if s == "evidence" => Ok(Arm {
            name: "evidence".into(),
            serve_args: vec!["--liveness".into(), "evidence".into()],
        }),
        None if s == "timer" => timer("40"),
        Some(("timer", n)) => timer(n),
        _ => bail!("unknown arm {s}: evidence, timer or timer:SECONDS"),
    }
}

/// A component's node changed in the control plane's placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub t: f64,
    pub component: String,
    pub from: String,
    pub to: String,
}

/// The moves over a series of placements: a component placed on another node than the last
/// one it had (a component missing from a placement keeps its last node).
pub fn moves(placements: &[(f64, BTreeMap<String, String>)]) -> Vec<Move> {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for (t, p) in placements {
        for (c, to) in p {
            if let Some(from) = last.insert(c, to) {
                if from != to {
                    out.push(Move {
                        t: *t,
                        component: c.clone(),
                        from: from.to_string(),
                        to: to.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Of `moves`, those the crash needed: a component leaving `crashed` at or after `crash_at`.
pub fn needed(m: &Move, crashed: &str, crash_at: f64) -> bool {
    m.from == crashed && m.t >= crash_at
}

/// A container seen by Podman: (node, component, id, start time).
pub type Instance = (String, String, String, i64);

/// Containers started after the initial ones (`initial`: what ran when the schedule began),
/// except the first container of each component the crash moved, on its new node: the
/// needless (re)starts.
pub fn needless_starts(
    initial: &BTreeSet<Instance>,
    seen: &BTreeSet<Instance>,
    crash_moves: &[Move],
) -> Vec<Instance> {
    let mut excused: BTreeSet<(String, String)> = crash_moves
        .iter()
        .map(|m| (m.to.clone(), m.component.clone()))
        .collect();
    let mut out = Vec::new();
    // in start order, so that the first container of a crash move is the excused one
    let mut new: Vec<&Instance> = seen.difference(initial).collect();
    new.sort_by_key(|i| i.3);
    for i in new {
        if !excused.remove(&(i.0.clone(), i.1.clone())) {
            out.push(i.clone());
        }
    }
    out
}

/// The fraction of `window_s` windows in `[from, to)` in which at least one message that left
/// the source then completed the path (`origins`: origin times of the completed messages).
pub fn served_fraction(origins: &[f64], from: f64, to: f64, window_s: f64) -> (usize, usize) {
    let n = ((to - from) / window_s).floor().max(0.0) as usize;
    let mut hit = vec![false; n];
    for o in origins {
        if *o >= from && *o < from + n as f64 * window_s {
            hit[((o - from) / window_s) as usize] = true;
        }
    }
    (hit.iter().filter(|h| **h).count(), n)
}

/// (windows served, windows).
pub type Served = (usize, usize);

/// Everything one arm recorded and the figures computed from it.
#[derive(Clone, Debug, Default)]
pub struct ArmResult {
    pub arm: String,
    pub app: String,
    pub initial: BTreeMap<String, String>,
    pub placements: Vec<(f64, BTreeMap<String, String>)>,
    pub moves: Vec<Move>,
    pub needless_moves: usize,
    pub needless_starts: Vec<Instance>,
    pub crashed: String,
    /// Seconds from the crash until the control plane called the node lost.
    pub lost_after_s: Option<f64>,
    /// Seconds from the crash until every component is running and none is on the crashed node.
    pub recovered_after_s: Option<f64>,
    /// Per path: windows served over the whole schedule, and inside tunnels only.
    pub served: BTreeMap<String, (Served, Served)>,
    /// (time, path, latency ms) of every completed message.
    pub samples: Vec<(f64, String, f64)>,
    /// (time, node, state) from the control plane's log.
    pub states: Vec<(f64, String, NodeState)>,
    pub events: Vec<(f64, String)>,
}

/// What an arm runs on (shared by every arm of a run).
pub struct Rig<'a> {
    pub tb: &'a Testbed,
    pub cluster: &'a Cluster,
    pub app: &'a Application,
    pub cloud_bin: &'a Path,
    pub agent: &'a AgentOptions,
    pub collector: &'a Collector,
    pub schedule: &'a Schedule,
    pub warmup: Duration,
    pub rate_hz: f64,
    /// The node to crash; default: the cloud node of the first component placed in the cloud.
    pub crash_node: Option<String>,
}

/// The collector bound in the `obs` endpoint, answering only the testbed's nodes.
pub fn collector(tb: &Testbed) -> Result<Collector> {
    let sock = tb.udp_socket(OBS, COLLECTOR_PORT)?;
    let allowed = tb.nodes().iter().map(|n| IpAddr::V4(n.addr)).collect();
    Ok(Collector::start_from(sock, Some(allowed))?)
}

/// The application as the arm runs it: its own name, images from `image_prefix`.
pub fn arm_app(app: &Application, arm: &Arm, image_prefix: &str) -> Application {
    let mut a = app.clone();
    a.application = format!("{}-{}", short(&app.application), arm.name);
    for c in &mut a.components {
        c.image = retag(&c.image, image_prefix);
    }
    a
}

fn short(name: &str) -> &str {
    name.split('-').next().unwrap_or(name)
}

/// `localhost/acoa/smoke-level:1` -> `localhost/acoa/<prefix>smoke-level:1`.
pub fn retag(image: &str, prefix: &str) -> String {
    match image.rsplit_once('/') {
        Some((repo, name)) => format!("{repo}/{prefix}{name}"),
        None => format!("{prefix}{image}"),
    }
}

/// Runs one arm on `rig`; the testbed's links are healed at the end.
pub fn run_arm(rig: &Rig, arm: &Arm, workdir: &Path) -> Result<ArmResult> {
    let app = rig.app;
    let plane = Plane::up(
        rig.tb,
        rig.cluster,
        rig.cloud_bin,
        rig.agent,
        workdir,
        &arm.serve_args,
    )?;
    let res = run_plane(rig, arm, plane, workdir);
    rig.tb.heal_all();
    partition::remove_app_containers(&app.application);
    res
}

fn run_plane(rig: &Rig, arm: &Arm, mut plane: Plane, workdir: &Path) -> Result<ArmResult> {
    let (tb, app, sch) = (rig.tb, rig.app, rig.schedule);
    let names = plane.names.clone();
    let mut log = LogTail::at_end(&plane.log);
    tracing::info!(arm = %arm.name, "control plane and {} agents up; warming up {:?}", names.len(), rig.warmup);
    std::thread::sleep(rig.warmup);
    let file = workdir.join("app.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(app)?)?;
    plane.cloud.apply(&file, 60)?;
    let conf = |p: &BTreeMap<String, String>| {
        rig.collector.set_app(
            &app.application,
            workload::app_confs(app, p, |n| tb.addr(n).ok(), rig.rate_hz),
        )
    };
    let initial = partition::poll(Duration::from_secs(120), || {
        let st = plane.status(&app.application).ok()?;
        all_running(&st, app).then(|| placement_of(&st))
    })
    .with_context(|| format!("{} never ran; see {}", app.application, plane.log.display()))?;
    conf(&initial);
    tracing::info!(arm = %arm.name, ?initial, "running; the schedule starts in 10 s");
    std::thread::sleep(Duration::from_secs(10));

    let train: Vec<&str> = rig
        .cluster
        .nodes
        .iter()
        .filter(|n| n.datacenter == "train1")
        .map(|n| n.name.as_str())
        .collect();
    let outside: Vec<&str> = tb
        .nodes()
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| !train.contains(n) && *n != OBS)
        .collect();
    let t0 = Instant::now();
    let unix0 = partition::unix_now();
    let start_ns = workload::now_ns();
    let mut r = ArmResult {
        arm: arm.name.clone(),
        app: app.application.clone(),
        initial: initial.clone(),
        placements: vec![(0.0, initial.clone())],
        ..Default::default()
    };
    let mut current = initial.clone();
    // (start, in?) of each tunnel edge still to come, and the crash
    let mut edges: Vec<(f64, bool)> = sch
        .tunnels
        .iter()
        .flat_map(|(a, b)| [(*a, true), (*b, false)])
        .collect();
    edges.reverse();
    let mut crashed: Option<String> = None;
    let mut seen: BTreeSet<Instance> = BTreeSet::new();
    let initial_instances: BTreeSet<Instance> = instances(&app.application, &names);
    seen.extend(initial_instances.iter().cloned());
    let (mut next_status, mut next_podman) = (0.0, 0.0);
    let tail = 15.0;
    while t0.elapsed().as_secs_f64() < sch.end + tail {
        let now = t0.elapsed().as_secs_f64();
        while edges.last().is_some_and(|e| e.0 <= now) {
            let (_, into) = edges.pop().expect("an edge");
            if into {
                tb.cut_between(&train, &outside)?;
                r.events.push((now, "tunnel in".into()));
            } else {
                tb.heal_between(&train, &outside)?;
                if let Some(c) = &crashed {
                    // the crashed node stays cut off
                    tb.cut_between(
                        &[c.as_str()],
                        &outside.iter().chain(&train).copied().collect::<Vec<_>>(),
                    )?;
                }
                r.events.push((now, "tunnel out".into()));
            }
        }
        if crashed.is_none() && now >= sch.crash_at {
            let victim = match &rig.crash_node {
                Some(n) => n.clone(),
                None => cloud_node_of(rig.cluster, app, &current)
                    .context("no component placed on a cloud node to crash")?,
            };
            plane.crash(tb, &victim)?;
            r.events.push((now, format!("{victim} crashed")));
            tracing::info!(arm = %arm.name, "{victim} crashed at {now:.1} s");
            crashed = Some(victim);
        }
        if now >= next_status {
            next_status = now + 0.5;
            if let Ok(st) = plane.status(&app.application) {
                let p = placement_of(&st);
                let t = t0.elapsed().as_secs_f64();
                if !p.is_empty() && p != current {
                    // components the control plane left out keep their last node for the workload
                    let mut merged = current.clone();
                    merged.extend(p.clone());
                    conf(&merged);
                    r.placements.push((t, p.clone()));
                    current = p;
                }
                if let (Some(c), None) = (&crashed, r.recovered_after_s) {
                    if all_running(&st, app) && !current.values().any(|n| n == c) {
                        r.recovered_after_s = Some(t - sch.crash_at);
                    }
                }
            }
        }
        if now >= next_podman {
            next_podman = now + 1.0;
            seen.extend(instances(&app.application, &names));
        }
        for line in log.read() {
            for n in &names {
                if let Some(s) = partition::node_state_line(&line, n) {
                    let t = partition::line_time(&line).map_or(now, |u| u - unix0);
                    r.states.push((t, n.clone(), s));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let crashed = crashed.unwrap_or_default();
    r.crashed = crashed.clone();
    r.lost_after_s = r
        .states
        .iter()
        .find(|(t, n, s)| *n == crashed && *s == NodeState::Lost && *t >= sch.crash_at - 0.5)
        .map(|(t, _, _)| t - sch.crash_at);
    r.moves = moves(&r.placements);
    let crash_moves: Vec<Move> = r
        .moves
        .iter()
        .filter(|m| needed(m, &crashed, sch.crash_at))
        .cloned()
        .collect();
    r.needless_moves = r.moves.len() - crash_moves.len();
    // the crashed node's containers were removed by the harness, not restarted
    seen.retain(|i| i.0 != crashed || initial_instances.contains(i));
    r.needless_starts = needless_starts(&initial_instances, &seen, &crash_moves);
    // paths served
    std::thread::sleep(Duration::from_secs(2));
    let rec = rig.collector.records();
    for p in &app.paths {
        let samples = path_samples(&rec, app, p, start_ns);
        let origins: Vec<f64> = samples.iter().map(|s| s.0).collect();
        r.samples
            .extend(samples.iter().map(|(t, ms)| (*t, p.name.clone(), *ms)));
        let all = served_fraction(&origins, 0.0, sch.end, 1.0);
        let mut inside = (0, 0);
        for (a, b) in &sch.tunnels {
            let (s, n) = served_fraction(&origins, *a, *b, 1.0);
            inside = (inside.0 + s, inside.1 + n);
        }
        r.served.insert(p.name.clone(), (all, inside));
    }
    drop(plane);
    Ok(r)
}

/// The messages that completed `path` of `app` having left the source at or after `start_ns`:
/// (origin time in seconds after `start_ns`, latency in ms), each message once, in the order
/// they arrived.
pub fn path_samples(
    rec: &Records,
    app: &Application,
    path: &AppPath,
    start_ns: u128,
) -> Vec<(f64, f64)> {
    let trail = path.channels.join("/");
    let last = app
        .channels
        .iter()
        .find(|c| Some(&c.name) == path.channels.last())
        .map(|c| c.to.clone())
        .unwrap_or_default();
    let mut seqs = BTreeSet::new();
    rec.received
        .iter()
        .filter(|x| {
            x.app == app.application
                && x.component == last
                && (x.trail == trail || x.trail.ends_with(&format!("/{trail}")))
                && x.origin_ns >= start_ns
                // two copies of the source (a rollout, a partition's replacement) count from 0
                // each: a message is its sequence number and its origin time
                && seqs.insert((x.seq, x.origin_ns))
        })
        .map(|x| {
            (
                (x.origin_ns - start_ns) as f64 / 1e9,
                (x.recv_ns.saturating_sub(x.origin_ns)) as f64 / 1e6,
            )
        })
        .collect()
}

/// The node of the first component (in the application's order) placed on a cloud node.
fn cloud_node_of(
    cluster: &Cluster,
    app: &Application,
    p: &BTreeMap<String, String>,
) -> Option<String> {
    app.components.iter().find_map(|c| {
        let n = p.get(&c.name)?;
        let node = cluster.node(n)?;
        (format!("{:?}", node.layer).to_lowercase() == "cloud").then(|| n.clone())
    })
}

/// The containers of `app` on `nodes` that run now.
fn instances(app: &str, nodes: &[String]) -> BTreeSet<Instance> {
    partition::containers(app, nodes)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.running)
        .map(|c| (c.node, c.component, c.id, c.started))
        .collect()
}

/// Where an arm's files go.
pub fn arm_dir(out: &Path, arm: &Arm) -> PathBuf {
    out.join(&arm.name)
}

/// Makes sure `HOST` and `OBS` are in the testbed (both needed).
pub fn check_testbed(tb: &Testbed) -> Result<()> {
    tb.addr(HOST)
        .context("the testbed needs its host endpoint")?;
    tb.addr(OBS).context("the testbed needs the obs endpoint")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_puts_the_crash_between_two_tunnels_in_the_middle() {
        let s = Schedule::new(10, 120.0, 30.0, 20.0).unwrap();
        assert_eq!(s.tunnels.len(), 10);
        assert_eq!(s.tunnels[0], (20.0, 50.0));
        assert_eq!(s.tunnels[9], (1100.0, 1130.0));
        // after the fifth tunnel (500-530), half-way to the sixth (620)
        assert_eq!(s.crash_at, 575.0);
        assert!(!s.in_tunnel(s.crash_at));
        assert!(s.in_tunnel(25.0) && !s.in_tunnel(50.0));
        assert_eq!(s.end, 1220.0);
        let one = Schedule::new(1, 60.0, 30.0, 10.0).unwrap();
        assert_eq!(one.crash_at, 55.0);
        assert!(Schedule::new(0, 60.0, 30.0, 0.0).is_err());
        assert!(Schedule::new(2, 30.0, 30.0, 0.0).is_err());
    }

    #[test]
    fn arms_are_read_from_their_names() {
        assert_eq!(parse_arm("evidence").unwrap().name, "evidence");
        let t = parse_arm("timer").unwrap();
        assert_eq!(t.name, "timer-40s");
        assert_eq!(
            t.serve_args,
            ["--liveness", "timer", "--lost-after-s", "40"]
        );
        assert_eq!(parse_arm("timer:3").unwrap().serve_args[3], "3");
        assert!(parse_arm("timer:x").is_err());
        assert!(parse_arm("kubernetes").is_err());
    }

    fn p(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn moves_and_the_crash_s_own_moves() {
        let seq = vec![
            (0.0, p(&[("level", "n15"), ("storage", "n01")])),
            (5.0, p(&[("level", "n03"), ("storage", "n01")])), // a tunnel: needless
            (40.0, p(&[("level", "n15"), ("storage", "n01")])), // and back: needless
            (60.0, p(&[("level", "n15")])),                    // storage unplaced: not a move
            (61.0, p(&[("level", "n15"), ("storage", "n02")])), // the crash of n01
        ];
        let m = moves(&seq);
        assert_eq!(m.len(), 3);
        let needed_n: Vec<bool> = m.iter().map(|x| needed(x, "n01", 59.0)).collect();
        assert_eq!(needed_n, [false, false, true]);
        let i =
            |n: &str, c: &str, id: &str, s: i64| (n.to_string(), c.to_string(), id.to_string(), s);
        let initial: BTreeSet<Instance> =
            [i("n15", "level", "a", 1), i("n01", "storage", "b", 1)].into();
        let mut seen = initial.clone();
        seen.insert(i("n02", "storage", "c", 70)); // the crash's replacement: excused
        assert!(needless_starts(&initial, &seen, &m[2..]).is_empty());
        seen.insert(i("n15", "level", "a", 45)); // restarted in place
        seen.insert(i("n02", "storage", "d", 90)); // the replacement restarted
        let bad = needless_starts(&initial, &seen, &m[2..]);
        assert_eq!(bad.len(), 2);
        assert!(bad.iter().any(|x| x.2 == "d"));
    }

    #[test]
    fn a_window_is_served_when_one_message_got_through() {
        let origins = [0.1, 0.5, 2.2, 3.9, 9.99];
        assert_eq!(served_fraction(&origins, 0.0, 5.0, 1.0), (3, 5));
        assert_eq!(served_fraction(&origins, 2.0, 4.0, 1.0), (2, 2));
        assert_eq!(served_fraction(&[], 0.0, 3.0, 1.0), (0, 3));
        assert_eq!(served_fraction(&origins, 5.0, 5.0, 1.0), (0, 0));
        assert_eq!(
            retag("localhost/acoa/smoke-level:1", "tunnels-"),
            "localhost/acoa/tunnels-smoke-level:1"
        );
    }
}
