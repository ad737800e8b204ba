//! The whole system on the testbed: the real control plane (`cloud-broker serve`, embedded
//! broker on the host endpoint), real agents in every node namespace running real Podman
//! containers (the workload images, joined to the node's namespace), and the events of
//! experiments 3 and 4: a node killed, a link degraded, the control plane restarted.
//!
//! Test harness code: errors are `anyhow`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Cluster};
use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::agents::{self, AgentOptions, Proc, MQTT_PORT};
use crate::emu::{Testbed, HOST};
use crate::workload::{self, Collector};
use crate::LinkSpec;

/// The control plane's command line, with its data directory and broker.
#[derive(Clone, Debug)]
pub struct Cloud {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub addr: Ipv4Addr,
}

impl Cloud {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--data-dir").arg(&self.data_dir);
        c
    }

    pub fn url(&self) -> String {
        format!("mqtt://{}:{MQTT_PORT}", self.addr)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .cmd()
            .args(args)
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "cloud-broker {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Enrolls `node` with its agent's public key; returns the agent's `[broker]` section.
    pub fn enroll(&self, node: &str, pubkey: &str) -> Result<String> {
        self.run(&[
            "node",
            "add",
            node,
            "--public-key",
            pubkey,
            "--broker-url",
            &self.url(),
        ])
    }

    /// Enrolls the agent of `node` (its key made in `dir/state`) and writes its configuration
    /// to `dir/agent.toml`; returns that path.
    pub fn enroll_agent(
        &self,
        tb: &Testbed,
        cluster: &Cluster,
        node: &str,
        agent: &AgentOptions,
        dir: &Path,
    ) -> Result<PathBuf> {
        let state = dir.join("state");
        std::fs::create_dir_all(&state)?;
        let key = agents::pubkey(&agent.bin, &state)?;
        let broker = self.enroll(node, &key)?;
        let cfg = agents::agent_config(
            cluster,
            node,
            tb.addr(node)?,
            &broker,
            &state,
            &tb.netns_path(node)?,
            agent,
        )?;
        let path = dir.join("agent.toml");
        std::fs::write(&path, cfg)?;
        Ok(path)
    }

    /// Starts `serve`; waits until its broker accepts connections.
    pub fn serve(&self, log: &Path, extra: &[&str]) -> Result<Proc> {
        let mut c = self.cmd();
        let listen = format!("{}:{MQTT_PORT}", self.addr);
        c.args(["serve", "--listen", &listen]).args(extra);
        let mut p = Proc::spawn("cloud-broker", c, log)?;
        let t = Instant::now();
        while std::net::TcpStream::connect((self.addr, MQTT_PORT)).is_err() {
            if !p.alive() || t.elapsed() > Duration::from_secs(20) {
                bail!("the control plane did not start; see {}", log.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(p)
    }

    pub fn apply(&self, file: &Path, wait_s: u64) -> Result<Value> {
        let out = self.run(&[
            "apply",
            &file.display().to_string(),
            "--broker-url",
            &self.url(),
            "--wait-s",
            &wait_s.to_string(),
        ])?;
        Ok(serde_json::from_str(out.lines().last().unwrap_or("null"))?)
    }

    pub fn delete(&self, app: &str) -> Result<()> {
        self.run(&["delete", app, "--broker-url", &self.url()])?;
        Ok(())
    }

    pub fn status(&self, app: &str) -> Result<Value> {
        let out = self.run(&["status", app, "--broker-url", &self.url()])?;
        Ok(serde_json::from_str(out.lines().last().unwrap_or("null"))?)
    }
}

/// The placement (component -> node) in a status document.
pub fn placement_of(st: &Value) -> BTreeMap<String, String> {
    st["placement"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A status says running, with every component of `app` running.
pub fn all_running(st: &Value, app: &Application) -> bool {
    st["state"] == "running"
        && app.components.iter().all(|c| {
            st["running"].as_array().is_some_and(|r| {
                r.iter()
                    .any(|x| x.as_str().is_some_and(|s| s.contains(&c.name)))
            })
        })
}

/// One event and how long the system took to get over it.
#[derive(Clone, Debug)]
pub struct EventResult {
    pub what: String,
    /// Seconds from the event until the placement no longer uses what was lost and every
    /// component runs; `None` if that did not happen within the time allowed.
    pub recovered_s: Option<f64>,
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    pub note: String,
}

impl EventResult {
    /// An event the placement got over (or not) by moving from `before` to `after`, no note.
    fn moved(
        what: String,
        recovered_s: Option<f64>,
        before: BTreeMap<String, String>,
        after: BTreeMap<String, String>,
    ) -> EventResult {
        EventResult {
            what,
            recovered_s,
            before,
            after,
            note: String::new(),
        }
    }
}

/// The whole run.
pub struct DynamicRun {
    pub events: Vec<EventResult>,
    pub initial: BTreeMap<String, String>,
    pub status_log: Vec<(f64, String)>,
    /// (seconds since start, path, latency ms) of every message that completed a path.
    pub path_samples: Vec<(f64, String, f64)>,
    pub event_times: Vec<(f64, String)>,
    /// Experiment 3b computed: per path through the degraded link.
    pub recovery: Vec<PathRecovery>,
}

pub struct DynamicOptions {
    pub cloud_bin: PathBuf,
    pub agent: AgentOptions,
    pub app_file: PathBuf,
    pub workdir: PathBuf,
    pub warmup: Duration,
    pub settle: Duration,
    pub timeout: Duration,
    pub rate_hz: f64,
    /// How long a link stays noisy (experiment 3c).
    pub noise: Duration,
}

/// Removes the containers the agents of this run made (by label and node), whatever happens.
pub fn remove_containers(app: &str, nodes: &[String]) {
    for n in nodes {
        let _ = Command::new("podman")
            .args([
                "ps",
                "-aq",
                "--filter",
                "label=acoa.managed=true",
                "--filter",
            ])
            .arg(format!("label=acoa.node={n}"))
            .arg("--filter")
            .arg(format!("label=acoa.app={app}"))
            .output()
            .map(|o| {
                for id in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("podman")
                        .args(["rm", "-f", "-t", "0", id])
                        .output();
                }
            });
    }
}

/// The running system on a testbed: the control plane, one agent per node, the collector of
/// the workload containers. Dropping it stops the agents and the control plane (containers are
/// removed by [`remove_containers`], per application).
pub struct System {
    pub cloud: Cloud,
    pub cp: Option<Proc>,
    pub agents: BTreeMap<String, Proc>,
    pub collector: Collector,
    pub names: Vec<String>,
    pub workdir: PathBuf,
}

/// The control plane's options on the testbed (node timeout 3 s).
pub const SERVE_ARGS: &[&str] = &["--node-timeout-ms", "3000"];

impl System {
    /// Enrolls every node's agent, starts the control plane on the host endpoint and the agents
    /// in their namespaces (`tb` must have the host endpoint).
    pub fn up(
        tb: &Testbed,
        cluster: &Cluster,
        cloud_bin: &Path,
        agent: &AgentOptions,
        workdir: &Path,
    ) -> Result<Self> {
        let serve_args: Vec<String> = SERVE_ARGS.iter().map(|a| a.to_string()).collect();
        let mut plane =
            crate::partition::Plane::up(tb, cluster, cloud_bin, agent, workdir, &serve_args)?;
        let host = plane.cloud.addr;
        let (cp, agent_procs, names) = (
            plane.cp.take(),
            std::mem::take(&mut plane.agents),
            std::mem::take(&mut plane.names),
        );
        let cloud = plane.cloud.clone();
        drop(plane);
        let collector = Collector::start_on(tb, host)?;
        Ok(Self {
            cloud,
            cp,
            agents: agent_procs,
            collector,
            names,
            workdir: workdir.to_path_buf(),
        })
    }

    /// Polls the status of `app` every 0.25 s until every component runs on a placement that
    /// `ok` accepts; returns the seconds it took (None: not within `deadline`) and the last
    /// placement seen.
    pub fn wait_running(
        &self,
        app: &Application,
        deadline: Duration,
        ok: &dyn Fn(&BTreeMap<String, String>) -> bool,
        on_change: &mut dyn FnMut(&BTreeMap<String, String>, &Value),
    ) -> (Option<f64>, BTreeMap<String, String>) {
        let start = Instant::now();
        let mut last = BTreeMap::new();
        while start.elapsed() < deadline {
            if let Ok(st) = self.cloud.status(&app.application) {
                let p = placement_of(&st);
                if p != last {
                    on_change(&p, &st);
                    last = p.clone();
                }
                if all_running(&st, app) && ok(&p) {
                    return (Some(start.elapsed().as_secs_f64()), p);
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        (None, last)
    }
}

impl Drop for System {
    fn drop(&mut self) {
        self.agents.clear();
        self.cp.take();
    }
}

/// Removes every container the agents of this run made for any of `apps` on one of `nodes`,
/// with one listing (many applications: `remove_containers` lists per node).
pub fn remove_containers_of(apps: &[String], nodes: &[String]) {
    let Ok(out) = Command::new("podman")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=acoa.managed=true",
            "--format",
        ])
        .arg("{{.ID}} {{index .Labels \"acoa.node\"}} {{index .Labels \"acoa.app\"}}")
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [id, node, app] = w.as_slice() {
            if nodes.iter().any(|n| n == node) && apps.iter().any(|a| a == app) {
                let _ = Command::new("podman")
                    .args(["rm", "-f", "-t", "0", id])
                    .output();
            }
        }
    }
}

/// Runs experiments 3 and 4 on `tb` (which must have the host endpoint).
pub fn run(
    tb: &Testbed,
    cluster: &Cluster,
    app: &Application,
    o: &DynamicOptions,
) -> Result<DynamicRun> {
    let mut sys = System::up(tb, cluster, &o.cloud_bin, &o.agent, &o.workdir)?;
    let names = sys.names.clone();
    let cloud = sys.cloud.clone();
    let cloud_log = o.workdir.join("cloud.log");
    let collector = &sys.collector;
    let t0 = Instant::now();
    let since = |t: Instant| t.duration_since(t0).as_secs_f64();
    tracing::info!(
        "control plane and {} agents up; warming up {:?}",
        names.len(),
        o.warmup
    );
    std::thread::sleep(o.warmup);

    let st = cloud.apply(&o.app_file, 60)?;
    let mut status_log = vec![(since(Instant::now()), st.to_string())];
    let mut placement = placement_of(&st);
    let set_conf = |p: &BTreeMap<String, String>| {
        collector.set_app(
            &app.application,
            workload::app_confs(app, p, |n| tb.addr(n).ok(), o.rate_hz),
        )
    };
    set_conf(&placement);
    // wait until every component runs
    let wait_running = |deadline: Duration,
                        ok: &dyn Fn(&BTreeMap<String, String>) -> bool,
                        log: &mut Vec<(f64, String)>|
     -> Result<(Option<f64>, BTreeMap<String, String>)> {
        let start = Instant::now();
        let mut last = BTreeMap::new();
        while start.elapsed() < deadline {
            if let Ok(st) = cloud.status(&app.application) {
                let p = placement_of(&st);
                if p != last {
                    log.push((since(Instant::now()), st.to_string()));
                    set_conf(&p);
                    last = p.clone();
                }
                if all_running(&st, app) && ok(&p) {
                    return Ok((Some(start.elapsed().as_secs_f64()), p));
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok((None, last))
    };
    let (up, p) = wait_running(o.timeout, &|_| true, &mut status_log)?;
    if up.is_none() {
        bail!("the application never ran; see {}", cloud_log.display());
    }
    placement = p;
    let initial = placement.clone();
    tracing::info!(?placement, "application running");
    std::thread::sleep(o.settle);
    let mut events = Vec::new();
    let mut event_times = Vec::new();

    // experiment 3a: a node is killed (agent and containers gone, node cut off)
    let victim = app
        .components
        .iter()
        .filter(|c| c.requires.datacenter.is_none() && c.requires.hardware.is_empty())
        .filter_map(|c| placement.get(&c.name))
        .next()
        .or_else(|| placement.values().next())
        .cloned()
        .context("nothing placed")?;
    let before = placement.clone();
    let te = Instant::now();
    event_times.push((since(te), format!("node {victim} killed")));
    drop(sys.agents.remove(&victim));
    remove_containers(&app.application, std::slice::from_ref(&victim));
    for n in names.iter().chain(std::iter::once(&HOST.to_string())) {
        if n != &victim {
            tb.set_link(&victim, n, LinkSpec::new(0.0, 0.0, 1.0))?;
            tb.set_link(n, &victim, LinkSpec::new(0.0, 0.0, 1.0))?;
        }
    }
    let v2 = victim.clone();
    let (rec, after) = wait_running(
        o.timeout,
        &move |p| !p.values().any(|n| *n == v2),
        &mut status_log,
    )?;
    let rec = rec.map(|_| te.elapsed().as_secs_f64());
    let what =
        format!("node {victim} killed (agent SIGKILL, its containers removed, all its links cut)");
    events.push(EventResult::moved(what, rec, before, after.clone()));
    placement = after;
    std::thread::sleep(o.settle);

    // experiment 3b: a link on a path is degraded (+40 ms both ways)
    // (path, event time since t0, re-placed after s, expected latency on the new placement)
    let mut pending: Vec<(String, f64, Option<f64>, f64)> = Vec::new();
    // the channel to degrade: on a path whose response time is a criterion, between two
    // different nodes (a latency change elsewhere changes no score, so nothing should move)
    let timed: Vec<&str> = app
        .criteria
        .iter()
        .filter(|c| c.kind == acoa_shared::model::CriterionKind::MinE2eResponseTime)
        .filter_map(|c| c.path.as_deref())
        .collect();
    if let Some(ch) = channel_across(app, &timed, &placement) {
        let (a, b) = (placement[&ch.from].clone(), placement[&ch.to].clone());
        let before = placement.clone();
        let (ab, ba) = (tb.link(&a, &b)?, tb.link(&b, &a)?);
        let te = Instant::now();
        event_times.push((since(te), format!("link {a} <-> {b} +40 ms")));
        tb.set_link(
            &a,
            &b,
            LinkSpec::new(ab.latency_ms + 40.0, ab.jitter_ms, ab.loss),
        )?;
        tb.set_link(
            &b,
            &a,
            LinkSpec::new(ba.latency_ms + 40.0, ba.jitter_ms, ba.loss),
        )?;
        let (a2, b2) = (a.clone(), b.clone());
        let (from_c, to_c) = (ch.from.clone(), ch.to.clone());
        let (rec, after) = wait_running(
            o.timeout,
            &move |p| !(p.get(&from_c) == Some(&a2) && p.get(&to_c) == Some(&b2)),
            &mut status_log,
        )?;
        let replaced_s = rec.map(|_| te.elapsed().as_secs_f64());
        // what every path through the degraded channel should take on the new placement:
        // the emulated one-way delays of its channels (the degraded link still degraded)
        for p in app.paths.iter().filter(|p| p.channels.contains(&ch.name)) {
            let mut expected = 0.0;
            for cn in &p.channels {
                let Some(c) = app.channels.iter().find(|c| &c.name == cn) else {
                    continue;
                };
                if let (Some(x), Some(y)) = (after.get(&c.from), after.get(&c.to)) {
                    if x != y {
                        expected += tb.link(x, y)?.latency_ms;
                    }
                }
            }
            pending.push((p.name.clone(), since(te), replaced_s, expected));
        }
        let what = format!(
            "link {a} <-> {b} (channel {}) degraded by +40 ms each way",
            ch.name
        );
        events.push(EventResult::moved(what, replaced_s, before, after.clone()));
        placement = after;
        std::thread::sleep(o.settle);
    }

    // experiment 3c: a link of a timed path merely noisy (jitter, same mean): nothing moves
    if let Some(ch) = channel_across(app, &timed, &placement) {
        let (a, b) = (placement[&ch.from].clone(), placement[&ch.to].clone());
        let (ab, ba) = (tb.link(&a, &b)?, tb.link(&b, &a)?);
        let before = placement.clone();
        let te = Instant::now();
        event_times.push((since(te), format!("link {a} <-> {b} jitter 3 ms")));
        tb.set_link(&a, &b, LinkSpec::new(ab.latency_ms, 3.0, ab.loss))?;
        tb.set_link(&b, &a, LinkSpec::new(ba.latency_ms, 3.0, ba.loss))?;
        let mut changes = 0;
        let mut last = before.clone();
        while te.elapsed() < o.noise {
            if let Ok(st) = cloud.status(&app.application) {
                let p = placement_of(&st);
                if !p.is_empty() && p != last {
                    changes += 1;
                    status_log.push((since(Instant::now()), st.to_string()));
                    set_conf(&p);
                    last = p;
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        tb.set_link(&a, &b, ab)?;
        tb.set_link(&b, &a, ba)?;
        events.push(EventResult {
            what: format!(
                "link {a} <-> {b} (channel {}) noisy: jitter 3 ms each way, same mean, for {} s",
                ch.name,
                o.noise.as_secs()
            ),
            recovered_s: None,
            before,
            after: last.clone(),
            note: format!("{changes} placement changes (no flapping: 0)"),
        });
        placement = last;
    }

    // experiment 4: the control plane restarted mid-run
    let before = placement.clone();
    let te = Instant::now();
    event_times.push((since(te), "control plane restarted".into()));
    drop(sys.cp.take());
    std::thread::sleep(Duration::from_secs(2));
    sys.cp = Some(cloud.serve(&o.workdir.join("cloud-2.log"), SERVE_ARGS)?);
    let (rec, after) = wait_running(o.timeout, &|_| true, &mut status_log)?;
    events.push(EventResult {
        what: "control plane killed, restarted 2 s later on the same data directory".into(),
        recovered_s: rec.map(|_| te.elapsed().as_secs_f64()),
        note: if after == before {
            "placement unchanged".into()
        } else {
            "placement changed".into()
        },
        before,
        after,
    });
    std::thread::sleep(o.settle);

    let recs = collector.records();
    let mut path_samples = Vec::new();
    let start_ns = workload::now_ns() - t0.elapsed().as_nanos();
    for p in &app.paths {
        let trail = p.channels.join("/");
        let last = app
            .channels
            .iter()
            .find(|c| Some(&c.name) == p.channels.last());
        for r in &recs.received {
            if r.app == app.application
                && Some(&r.component) == last.map(|c| &c.to)
                && r.trail.ends_with(&trail)
            {
                path_samples.push((
                    (r.origin_ns.saturating_sub(start_ns)) as f64 / 1e9,
                    p.name.clone(),
                    (r.recv_ns.saturating_sub(r.origin_ns)) as f64 / 1e6,
                ));
            }
        }
    }
    let recovery = pending
        .into_iter()
        .map(|(path, event_t, replaced_s, expected_ms)| {
            let end_t = event_times
                .iter()
                .map(|(t, _)| *t)
                .find(|t| *t > event_t + 1.0)
                .unwrap_or(f64::INFINITY);
            let pts: Vec<(f64, f64)> = path_samples
                .iter()
                .filter(|s| s.1 == path && s.0 >= event_t && s.0 < end_t)
                .map(|s| (s.0 - event_t, s.2))
                .collect();
            let before: Vec<f64> = path_samples
                .iter()
                .filter(|s| s.1 == path && s.0 < event_t && s.0 >= event_t - 10.0)
                .map(|s| s.2)
                .collect();
            let tolerance_ms = recovery_tolerance_ms(expected_ms);
            PathRecovery {
                recovered_s: latency_recovered_after(&pts, expected_ms, tolerance_ms, 1.0, 3),
                degraded_ms: crate::probe::quantile(
                    &pts.iter()
                        .filter(|p| replaced_s.is_none_or(|r| p.0 < r))
                        .map(|p| p.1)
                        .collect::<Vec<_>>(),
                    0.5,
                ),
                before_ms: crate::probe::quantile(&before, 0.5),
                path,
                expected_ms,
                tolerance_ms,
                replaced_s,
            }
        })
        .collect();
    drop(sys);
    remove_containers(&app.application, &names);
    Ok(DynamicRun {
        events,
        initial,
        status_log,
        path_samples,
        event_times,
        recovery,
    })
}

/// How a path's measured latency came back after a link on it was degraded.
#[derive(Clone, Debug)]
pub struct PathRecovery {
    pub path: String,
    /// The emulated one-way delays of its channels on the new placement, ms.
    pub expected_ms: f64,
    pub tolerance_ms: f64,
    /// Seconds from the degradation until the control plane's status showed the new placement
    /// running.
    pub replaced_s: Option<f64>,
    /// Seconds from the degradation until the path's measured latency (median over 1 s windows
    /// of the messages' origin time) was within the tolerance of `expected_ms` for 3 windows in
    /// a row.
    pub recovered_s: Option<f64>,
    /// Median measured latency in the 10 s before the degradation, and between the degradation
    /// and the re-placement.
    pub before_ms: f64,
    pub degraded_ms: f64,
}

/// The tolerance a recovered path's latency is judged with: 10 % of the expected value or
/// 1 ms, whichever is larger (the workload's own hops and the containers' scheduling add a
/// few tenths of a millisecond on this machine).
pub fn recovery_tolerance_ms(expected_ms: f64) -> f64 {
    (0.10 * expected_ms).max(1.0)
}

/// Seconds (from 0, the event) until the median of `(t, latency)` samples over consecutive
/// windows of `window_s` is within `tol` of `expected` for `hold` windows in a row; the start
/// of the first such window. Empty windows break a run (nothing arrived: not recovered).
pub fn latency_recovered_after(
    samples: &[(f64, f64)],
    expected: f64,
    tol: f64,
    window_s: f64,
    hold: usize,
) -> Option<f64> {
    let end = samples
        .iter()
        .map(|s| s.0)
        .fold(f64::NEG_INFINITY, f64::max);
    if !end.is_finite() || window_s <= 0.0 {
        return None;
    }
    let n = (end / window_s).floor() as usize + 1;
    let ok: Vec<bool> = (0..n)
        .map(|k| {
            let (a, b) = (k as f64 * window_s, (k + 1) as f64 * window_s);
            let v: Vec<f64> = samples
                .iter()
                .filter(|s| s.0 >= a && s.0 < b)
                .map(|s| s.1)
                .collect();
            !v.is_empty() && (crate::probe::quantile(&v, 0.5) - expected).abs() <= tol
        })
        .collect();
    let hold = hold.max(1);
    (0..n)
        .find(|&k| k + hold <= n && ok[k..k + hold].iter().all(|x| *x))
        .map(|k| k as f64 * window_s)
}

/// The first channel of one of the `paths` of `app` whose two ends `placement` puts on
/// different nodes.
fn channel_across(
    app: &Application,
    paths: &[&str],
    placement: &BTreeMap<String, String>,
) -> Option<acoa_shared::model::Channel> {
    app.paths
        .iter()
        .filter(|p| paths.contains(&p.name.as_str()))
        .flat_map(|p| p.channels.iter())
        .filter_map(|name| app.channels.iter().find(|c| &c.name == name))
        .find(|c| placement.get(&c.from) != placement.get(&c.to))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_the_first_window_of_a_run_within_tolerance() {
        // 0-5 s degraded (41 ms), 5-6 s one good window then a bad one, from 7 s good (1.2 ms)
        let mut s = Vec::new();
        for i in 0..150 {
            let t = i as f64 * 0.1;
            let v = if t < 5.0 || (6.0..7.0).contains(&t) {
                41.0
            } else {
                1.2
            };
            s.push((t, v));
        }
        assert_eq!(latency_recovered_after(&s, 1.0, 1.0, 1.0, 3), Some(7.0));
        assert_eq!(latency_recovered_after(&s, 1.0, 1.0, 1.0, 1), Some(5.0));
        // never within tolerance
        assert_eq!(latency_recovered_after(&s, 20.0, 1.0, 1.0, 3), None);
        assert_eq!(latency_recovered_after(&[], 1.0, 1.0, 1.0, 3), None);
        assert_eq!(recovery_tolerance_ms(40.0), 4.0);
        assert_eq!(recovery_tolerance_ms(2.0), 1.0);
    }
}
