//! The whole system on the testbed: the real control plane (`cloud-broker serve`, embedded
//! broker on the host endpoint), real agents in every node namespace running real Podman
//! containers (the workload images, joined to the node's namespace), and the events of
//! experiments 3 and 4: a node killed, a link degraded, the control plane restarted.
//!
//! Test harness code: errors are `anyhow`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Cluster};
use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::agents::{self, AgentOptions, Proc, MQTT_PORT};
use crate::emu::{Testbed, HOST};
use crate::workload::{self, Collector, COLLECTOR_PORT};
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

/// The whole run.
pub struct DynamicRun {
    pub events: Vec<EventResult>,
    pub initial: BTreeMap<String, String>,
    pub status_log: Vec<(f64, String)>,
    /// (seconds since start, path, latency ms) of every message that completed a path.
    pub path_samples: Vec<(f64, String, f64)>,
    pub event_times: Vec<(f64, String)>,
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

fn pubkey(agent_bin: &Path, state: &Path) -> Result<String> {
    let out = Command::new(agent_bin)
        .arg("pubkey")
        .arg("--state-dir")
        .arg(state)
        .output()?;
    if !out.status.success() {
        bail!(
            "edge-agent pubkey: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
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

/// Runs experiments 3 and 4 on `tb` (which must have the host endpoint).
pub fn run(
    tb: &Testbed,
    cluster: &Cluster,
    app: &Application,
    o: &DynamicOptions,
) -> Result<DynamicRun> {
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let host = tb
        .addr(HOST)
        .context("the testbed needs its host endpoint")?;
    std::fs::create_dir_all(&o.workdir)?;
    let cloud = Cloud {
        bin: o.cloud_bin.clone(),
        data_dir: o.workdir.join("cloud"),
        addr: host,
    };
    // enroll every agent's key, write its configuration
    let mut cfgs = BTreeMap::new();
    for n in &names {
        let dir = o.workdir.join(n);
        std::fs::create_dir_all(dir.join("state"))?;
        let key = pubkey(&o.agent.bin, &dir.join("state"))?;
        let broker = cloud.enroll(n, &key)?;
        let cfg = agents::agent_config(
            cluster,
            n,
            tb.addr(n)?,
            &broker,
            &dir.join("state"),
            &tb.netns_path(n)?,
            &o.agent,
        )?;
        let path = dir.join("agent.toml");
        std::fs::write(&path, cfg)?;
        cfgs.insert(n.clone(), path);
    }
    let cloud_log = o.workdir.join("cloud.log");
    let mut cp = Some(cloud.serve(&cloud_log, &["--node-timeout-ms", "3000"])?);
    let mut agent_procs: BTreeMap<String, Proc> = BTreeMap::new();
    for n in &names {
        let cmd = agents::agent_command(tb, cluster, n, &o.agent, &cfgs[n]);
        agent_procs.insert(
            n.clone(),
            Proc::spawn(
                &format!("agent {n}"),
                cmd,
                &o.workdir.join(n).join("agent.log"),
            )?,
        );
    }
    let collector = Collector::start(UdpSocket::bind(SocketAddrV4::new(host, COLLECTOR_PORT))?)?;
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
    drop(agent_procs.remove(&victim));
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
    events.push(EventResult {
        what: format!(
            "node {victim} killed (agent SIGKILL, its containers removed, all its links cut)"
        ),
        recovered_s: rec,
        before,
        after: after.clone(),
        note: String::new(),
    });
    placement = after;
    std::thread::sleep(o.settle);

    // experiment 3b: a link on a path is degraded (+40 ms both ways)
    // the channel to degrade: on a path whose response time is a criterion, between two
    // different nodes (a latency change elsewhere changes no score, so nothing should move)
    let timed: Vec<&str> = app
        .criteria
        .iter()
        .filter(|c| c.kind == acoa_shared::model::CriterionKind::MinE2eResponseTime)
        .filter_map(|c| c.path.as_deref())
        .collect();
    let ch = app
        .paths
        .iter()
        .filter(|p| timed.contains(&p.name.as_str()))
        .flat_map(|p| p.channels.iter())
        .filter_map(|name| app.channels.iter().find(|c| &c.name == name))
        .find(|c| placement.get(&c.from) != placement.get(&c.to))
        .cloned();
    if let Some(ch) = ch {
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
        events.push(EventResult {
            what: format!(
                "link {a} <-> {b} (channel {}) degraded by +40 ms each way",
                ch.name
            ),
            recovered_s: rec.map(|_| te.elapsed().as_secs_f64()),
            before,
            after: after.clone(),
            note: String::new(),
        });
        placement = after;
        std::thread::sleep(o.settle);
    }

    // experiment 3c: a link of a timed path merely noisy (jitter, same mean): nothing moves
    if let Some(ch) = app
        .paths
        .iter()
        .filter(|p| timed.contains(&p.name.as_str()))
        .flat_map(|p| p.channels.iter())
        .filter_map(|name| app.channels.iter().find(|c| &c.name == name))
        .find(|c| placement.get(&c.from) != placement.get(&c.to))
        .cloned()
    {
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
    drop(cp.take());
    std::thread::sleep(Duration::from_secs(2));
    cp = Some(cloud.serve(
        &o.workdir.join("cloud-2.log"),
        &["--node-timeout-ms", "3000"],
    )?);
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
    drop(agent_procs);
    drop(cp);
    remove_containers(&app.application, &names);
    Ok(DynamicRun {
        events,
        initial,
        status_log,
        path_samples,
        event_times,
    })
}
