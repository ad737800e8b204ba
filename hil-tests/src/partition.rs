//! Partitions on the testbed: the real control plane and real agents in node namespaces, links
//! cut and healed in the emulated network ([`Testbed::cut`]), and what is observed from
//! outside: the control plane's log lines about nodes (online, unreachable, lost), the
//! application's status, and the containers Podman runs (ids and start times, so that a
//! needless restart is seen).
//!
//! Test harness code: errors are `anyhow`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use acoa_shared::model::Cluster;
use anyhow::{Context, Result};
use serde_json::Value;

use crate::agents::{self, AgentOptions, Proc};
use crate::dynamic::{placement_of, Cloud};
use crate::emu::{Testbed, HOST};

/// The control plane and one agent per node of `names`, on a testbed with its host endpoint
/// (the control plane's embedded broker listens there).
pub struct Plane {
    pub cloud: Cloud,
    pub cp: Option<Proc>,
    pub agents: BTreeMap<String, Proc>,
    pub names: Vec<String>,
    pub log: PathBuf,
}

impl Plane {
    /// Enrolls every node of `cluster`, starts `cloud-broker serve` with `serve_args` and the
    /// agents in their namespaces.
    pub fn up(
        tb: &Testbed,
        cluster: &Cluster,
        cloud_bin: &Path,
        agent: &AgentOptions,
        workdir: &Path,
        serve_args: &[String],
    ) -> Result<Self> {
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let host = tb
            .addr(HOST)
            .context("the testbed needs its host endpoint")?;
        std::fs::create_dir_all(workdir)?;
        let cloud = Cloud {
            bin: cloud_bin.to_path_buf(),
            data_dir: workdir.join("cloud"),
            addr: host,
        };
        let mut cfgs = BTreeMap::new();
        for n in &names {
            cfgs.insert(
                n.clone(),
                cloud.enroll_agent(tb, cluster, n, agent, &workdir.join(n))?,
            );
        }
        let log = workdir.join("cloud.log");
        let args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
        let cp = Some(cloud.serve(&log, &args)?);
        let mut procs = BTreeMap::new();
        for n in &names {
            let cmd = agents::agent_command(tb, cluster, n, agent, &cfgs[n]);
            procs.insert(
                n.clone(),
                Proc::spawn(
                    &format!("agent {n}"),
                    cmd,
                    &workdir.join(n).join("agent.log"),
                )?,
            );
        }
        Ok(Self {
            cloud,
            cp,
            agents: procs,
            names,
            log,
        })
    }

    /// The application's status document (`null` fields when it has none yet).
    pub fn status(&self, app: &str) -> Result<Value> {
        self.cloud.status(app)
    }

    pub fn placement(&self, app: &str) -> BTreeMap<String, String> {
        self.status(app)
            .map(|s| placement_of(&s))
            .unwrap_or_default()
    }

    /// A crash: the node's agent is killed, its containers removed and every link it has cut
    /// (its namespace stays, silent).
    pub fn crash(&mut self, tb: &Testbed, node: &str) -> Result<()> {
        drop(self.agents.remove(node));
        remove_node_containers(node);
        let others: Vec<&str> = tb
            .nodes()
            .iter()
            .map(|n| n.name.as_str())
            .filter(|n| *n != node)
            .collect();
        tb.cut_between(&[node], &others)?;
        Ok(())
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.agents.clear();
        self.cp.take();
    }
}

/// `cluster` with every node renamed `prefix` + name (links too). Agents own the containers
/// labelled with their node's name, so two systems on one Podman (a test and an experiment,
/// two engineers' runs) must not share node names.
pub fn prefixed(cluster: &Cluster, prefix: &str) -> Cluster {
    let mut c = cluster.clone();
    for n in &mut c.nodes {
        n.name = format!("{prefix}{}", n.name);
    }
    for l in &mut c.links {
        l.from = format!("{prefix}{}", l.from);
        l.to = format!("{prefix}{}", l.to);
    }
    c
}

/// One container as Podman reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Container {
    pub node: String,
    pub component: String,
    pub id: String,
    /// Podman's start time (Unix seconds); a restarted container keeps its id, not this.
    pub started: i64,
    pub running: bool,
}

/// The containers of application `app` on `nodes` (running or not), by node then component.
pub fn containers(app: &str, nodes: &[String]) -> Result<Vec<Container>> {
    let out = Command::new("podman")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=acoa.managed=true",
            "--filter",
        ])
        .arg(format!("label=acoa.app={app}"))
        .args(["--format", "json"])
        .output()
        .context("podman ps")?;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
    let mut r: Vec<Container> = v
        .as_array()
        .map(|a| a.iter().filter_map(container_of).collect())
        .unwrap_or_default();
    r.retain(|c| nodes.contains(&c.node));
    r.sort();
    Ok(r)
}

fn container_of(c: &Value) -> Option<Container> {
    let labels = &c["Labels"];
    Some(Container {
        node: labels["acoa.node"].as_str()?.to_string(),
        component: labels["acoa.component"].as_str()?.to_string(),
        id: c["Id"].as_str()?.to_string(),
        started: c["StartedAt"].as_i64().unwrap_or(0),
        running: c["State"].as_str() == Some("running"),
    })
}

/// Containers of `before` that still exist in `after` on the same node with another start
/// time, or whose component runs on that node in `after` under another id: restarted or
/// recreated in place. `node/component` each.
pub fn restarted(before: &[Container], after: &[Container]) -> Vec<String> {
    let mut out = Vec::new();
    for b in before.iter().filter(|b| b.running) {
        let same_place: Vec<&Container> = after
            .iter()
            .filter(|a| a.node == b.node && a.component == b.component)
            .collect();
        if same_place.is_empty() {
            continue; // moved away or removed: a move, not a restart
        }
        if !same_place
            .iter()
            .any(|a| a.id == b.id && a.started == b.started)
        {
            out.push(format!("{}/{}", b.node, b.component));
        }
    }
    out
}

/// Components that run in more than one container: `component: node, node`.
pub fn duplicates(cs: &[Container]) -> Vec<String> {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in cs.iter().filter(|c| c.running) {
        by.entry(&c.component).or_default().push(&c.node);
    }
    by.into_iter()
        .filter(|(_, n)| n.len() > 1)
        .map(|(c, n)| format!("{c}: {}", n.join(", ")))
        .collect()
}

/// Removes every container the agents made on `node` (any application).
pub fn remove_node_containers(node: &str) {
    acoa_remove(&[format!("label=acoa.node={node}")]);
}

/// Removes every container of `app` (any node).
pub fn remove_app_containers(app: &str) {
    acoa_remove(&[format!("label=acoa.app={app}")]);
}

fn acoa_remove(filters: &[String]) {
    let mut all = vec!["label=acoa.managed=true".to_string()];
    all.extend_from_slice(filters);
    acoa_test_support::remove_containers_where(&all);
}

/// A node's state as the control plane's log names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Online,
    Unreachable,
    Lost,
}

/// A log line about a node's state: (state, node) if `line` says one, e.g. `node n13 lost (...)`,
/// `node n13 unreachable: n14, n15 reach it ...`, `node n13 joined`, `node n13 is back`.
pub fn node_state_line(line: &str, node: &str) -> Option<NodeState> {
    let msg = message_of(line);
    let words: Vec<&str> = msg
        .split(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| *w == node)?;
    // the state word is the one after the node's name, or after an "is" or "now" there
    // ("node n10: the broker lost its connection" names no state)
    let mut next = words[at + 1..].iter();
    let w = match next.next()? {
        &"is" | &"now" => next.next()?,
        w => w,
    };
    match *w {
        "online" | "joined" | "back" => Some(NodeState::Online),
        "unreachable" => Some(NodeState::Unreachable),
        "lost" => Some(NodeState::Lost),
        _ => None,
    }
}

/// The message of a `tracing` line: what follows the level and the target.
fn message_of(line: &str) -> &str {
    for lvl in [" ERROR ", " WARN ", " INFO ", " DEBUG ", " TRACE "] {
        if let Some(i) = line.find(lvl) {
            let rest = line[i + lvl.len()..].trim_start();
            // `target: message`
            return match rest.find(": ") {
                Some(j) if !rest[..j].contains(' ') => &rest[j + 2..],
                _ => rest,
            };
        }
    }
    line
}

/// The Unix time (s) of a line that starts with an RFC 3339 UTC time stamp
/// (`2026-12-01T19:20:03.123456Z ...`, `tracing`'s default).
pub fn line_time(line: &str) -> Option<f64> {
    let ts = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let s: f64 = t.next()?.parse().ok()?;
    // days from the civil date (Howard Hinnant's algorithm)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60) as f64 + s)
}

/// Unix time now, s.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Reads the lines a log file gained since the last read.
pub struct LogTail {
    path: PathBuf,
    pos: u64,
    partial: String,
    /// Every complete line read so far.
    pub seen: Vec<String>,
}

impl LogTail {
    /// From the file's current end (or its start if it does not exist yet).
    pub fn at_end(path: &Path) -> Self {
        let pos = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Self {
            path: path.to_path_buf(),
            pos,
            partial: String::new(),
            seen: Vec::new(),
        }
    }

    /// The complete lines written since the last call.
    pub fn read(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.pos += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let mut lines: Vec<String> = self.partial.split('\n').map(str::to_string).collect();
        self.partial = lines.pop().unwrap_or_default();
        self.seen.extend(lines.iter().cloned());
        lines
    }

    /// Reads what is new and returns how many lines were read so far: a mark for
    /// [`wait_for`](Self::wait_for) (lines after it).
    pub fn mark(&mut self) -> usize {
        self.read();
        self.seen.len()
    }

    /// Waits (polling every 100 ms) for a line after mark `since` that `pred` accepts;
    /// returns it.
    pub fn wait_for(
        &mut self,
        since: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let t = Instant::now();
        loop {
            self.read();
            if let Some(l) = self.seen.iter().skip(since).find(|l| pred(l)) {
                return Some(l.clone());
            }
            if t.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a line after mark `since` saying `node` is in `state`.
    pub fn wait_state(
        &mut self,
        node: &str,
        state: NodeState,
        since: usize,
        timeout: Duration,
    ) -> Option<String> {
        self.wait_for(since, timeout, |l| node_state_line(l, node) == Some(state))
    }

    /// The states the lines after mark `since` gave `node`, in order.
    pub fn states_since(&mut self, node: &str, since: usize) -> Vec<NodeState> {
        self.read();
        self.seen
            .iter()
            .skip(since)
            .filter_map(|l| node_state_line(l, node))
            .collect()
    }
}

/// Polls `f` every 250 ms until it gives a value or `timeout` passes.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(node: &str, comp: &str, id: &str, started: i64) -> Container {
        Container {
            node: node.into(),
            component: comp.into(),
            id: id.into(),
            started,
            running: true,
        }
    }

    #[test]
    fn node_states_are_read_from_the_log_lines() {
        let l = "2026-12-01T19:20:03.123456Z  WARN cloud_broker::engine::inventory: node n13 lost (no report for 3.1 s); re-placing smoke";
        assert_eq!(node_state_line(l, "n13"), Some(NodeState::Lost));
        assert_eq!(node_state_line(l, "n1"), None);
        let l = "2026-12-01T19:20:03Z  INFO cloud_broker::engine: n13 unreachable: n14, n15 reach it, last sample 1.2 s ago; its components stay";
        assert_eq!(node_state_line(l, "n13"), Some(NodeState::Unreachable));
        // another node named in the evidence is not the subject
        assert_eq!(node_state_line(l, "n14"), None);
        let l = "2026-12-01T19:20:03Z  INFO cloud_broker::engine: node n13 is online again";
        assert_eq!(node_state_line(l, "n13"), Some(NodeState::Online));
        assert_eq!(node_state_line("node n13 reported", "n13"), None);
        let l = "2026-12-01T19:36:18.741710Z  INFO cloud_broker::engine::disconnect: node n07 is back; what it runs is settled on its next actual state";
        assert_eq!(node_state_line(l, "n07"), Some(NodeState::Online));
        let l = "2026-12-01T19:35:58.748578Z  INFO cloud_broker::engine::inventory: node n07 joined: cloud2 cloud x86_64";
        assert_eq!(node_state_line(l, "n07"), Some(NodeState::Online));
        // a will is no verdict (it was read as "lost" in the tunnel experiment)
        let l = "2026-12-01T21:14:10.839554Z  INFO cloud_broker::engine::disconnect: node tc-n10: the broker lost its connection (signed last will), last heard 0.7 s ago";
        assert_eq!(node_state_line(l, "tc-n10"), None);
    }

    #[test]
    fn log_time_stamps_are_unix_seconds() {
        let t = line_time("2026-12-01T19:20:03.5Z  INFO x: y").unwrap();
        // 2026-12-01T00:00:00Z is 1_796_083_200
        assert!((t - (1_796_083_200.0 + 19.0 * 3600.0 + 20.0 * 60.0 + 3.5)).abs() < 1e-6);
        assert_eq!(line_time("1970-01-01T00:00:00Z x"), Some(0.0));
        assert_eq!(line_time("no time here"), None);
    }

    #[test]
    fn restarts_and_duplicates_are_told_apart_from_moves() {
        let before = vec![
            c("n13", "measurement", "a", 10),
            c("n01", "storage", "b", 10),
        ];
        // storage moved to n02 (not a restart); measurement kept
        let after = vec![
            c("n13", "measurement", "a", 10),
            c("n02", "storage", "c", 20),
        ];
        assert!(restarted(&before, &after).is_empty());
        // measurement restarted in place (same id, new start) and recreated (new id)
        let after = vec![c("n13", "measurement", "a", 30)];
        assert_eq!(restarted(&before, &after), vec!["n13/measurement"]);
        let after = vec![c("n13", "measurement", "z", 10)];
        assert_eq!(restarted(&before, &after), vec!["n13/measurement"]);
        let two = vec![c("n01", "storage", "b", 10), c("n02", "storage", "c", 20)];
        assert_eq!(duplicates(&two), vec!["storage: n01, n02"]);
        assert!(duplicates(&before).is_empty());
    }
}
