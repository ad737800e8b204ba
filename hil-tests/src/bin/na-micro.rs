//! `na-micro`: one microservice (or database) of paper 003's workflow; one static binary plays
//! any of them (the testbed's `na` experiment, `hil netaware`).
//!
//! An instance accepts requests over UDP, does its service time of work, then calls its
//! downstream services stage by stage (the calls of a stage in parallel, the stages in order) and
//! answers when they all have answered. A leaf (a database) answers after its service time.
//! The work is a sleep, not a busy loop: the experiment is about the network, and the testbed's
//! machine (2 cores shared by everything) must not make CPU dominate the response time.
//!
//! What to do comes from the testbed's discovery service, asked every second (so that a
//! re-placement by the control plane is followed without a restart), the way `acoa-workload`
//! asks its collector:
//! - `ACOA_APP`, `ACOA_COMPONENT`: set by the agent for every container
//! - `ACOA_CONTROL=ip:port`: the discovery service (baked into the image by `images.sh`)
//! - `ACOA_AGENT_STATS=ip:port` (optional, set by the agent): where the traffic counters go
//!
//! Datagrams (text):
//! - config request `C1 app component`; answer
//!   `K1 port=P service_ms=F resp=B stages=m1@ip:port+m2@ip:port;m7@ip:port` (`;` between
//!   stages, `+` between the parallel calls of a stage; empty for a leaf)
//! - request `Q1 id caller padding...`, answer `A1 id ok padding...` (ok = 1 when every
//!   downstream call was answered in time, else 0); `caller` is `-` for the load generator
//! - traffic report to `ACOA_AGENT_STATS`, about every second, cumulative since the start (the
//!   contract of `hil_tests::stats`):
//!   `{"v":2,"app":"A","component":"C","container":"A.C","sent":[{"to":"D","bytes":123,"messages":4}]}`
//!   (no service time: this program does not measure one);
//!   requests count towards their callee, answers towards their caller
//!   (`hil_tests::stats::Reporter`, included by path).
#![forbid(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

// std only (built with plain rustc by images.sh): the stats reporter is included by path.
#[allow(dead_code)]
#[path = "../stats.rs"]
mod stats;

#[path = "../named_addr.rs"]
mod named_addr;

#[path = "../workload_ctl.rs"]
mod workload_ctl;

/// Bytes of a request datagram (padding included).
const REQUEST_BYTES: usize = 200;
/// How long a call waits for its answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

#[derive(Clone, Debug, Default, PartialEq)]
struct Config {
    port: u16,
    service_ms: f64,
    resp_bytes: usize,
    /// Stages in order; each a set of parallel calls (component, address).
    stages: Vec<Vec<(String, SocketAddr)>>,
}

fn parse_stages(s: &str) -> Result<Vec<Vec<(String, SocketAddr)>>, String> {
    s.split(';')
        .filter(|st| !st.trim().is_empty())
        .map(|st| named_addr::parse_list(st, '+', "call", "component"))
        .collect()
}

fn parse_config(answer: &str) -> Result<Config, String> {
    let mut cfg = Config::default();
    for (k, v) in workload_ctl::fields(answer)? {
        match k {
            "port" => cfg.port = v.parse().map_err(|_| format!("bad port {v}"))?,
            "service_ms" => {
                cfg.service_ms = v.parse().map_err(|_| format!("bad service_ms {v}"))?;
                if !cfg.service_ms.is_finite() || cfg.service_ms < 0.0 {
                    return Err(format!("bad service_ms {v}"));
                }
            }
            "resp" => cfg.resp_bytes = v.parse().map_err(|_| format!("bad resp {v}"))?,
            "stages" => cfg.stages = parse_stages(v)?,
            _ => {}
        }
    }
    if cfg.port == 0 {
        return Err("no port".into());
    }
    Ok(cfg)
}

/// A datagram of `kind id word` padded with `x` to `size` bytes (at least the header).
fn frame(kind: &str, id: u64, word: &str, size: usize) -> Vec<u8> {
    let mut b = format!("{kind} {id} {word} ").into_bytes();
    if b.len() < size {
        b.resize(size, b'x');
    }
    b
}

/// Parses `kind id word ...`.
fn parse_frame(b: &[u8]) -> Option<(&str, u64, &str)> {
    let head = &b[..b.len().min(96)];
    let text = std::str::from_utf8(head)
        .ok()
        .or_else(|| std::str::from_utf8(&head[..head.len().saturating_sub(3)]).ok())?;
    let mut w = text.split(' ');
    let kind = w.next()?;
    let id = w.next()?.parse().ok()?;
    let word = w.next()?;
    Some((kind, id, word))
}

use workload_ctl::env;

fn log(app: &str, comp: &str, msg: &str) {
    workload_ctl::log("na-micro", app, comp, msg);
}

fn ask(ctl: &UdpSocket, control: SocketAddr, app: &str, comp: &str) -> Result<Config, String> {
    match workload_ctl::ask(ctl, control, app, comp, 4096) {
        Some(answer) => parse_config(&answer),
        None => Err(format!("no answer from the discovery service at {control}")),
    }
}

fn main() {
    workload_ctl::main_with("na-micro", run);
}

struct Shared {
    app: String,
    comp: String,
    cfg: RwLock<Config>,
    /// Traffic counters for the agent (`hil_tests::stats`; a no-op without `ACOA_AGENT_STATS`).
    traffic: Mutex<stats::Reporter>,
    next_id: AtomicU64,
}

fn run(app: &str, comp: &str) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let control: SocketAddr = env("ACOA_CONTROL")
        .ok_or("ACOA_CONTROL is not set")?
        .parse()
        .map_err(|_| "ACOA_CONTROL: bad address".to_string())?;
    let ctl = UdpSocket::bind("0.0.0.0:0").map_err(io)?;
    ctl.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let cfg = loop {
        match ask(&ctl, control, app, comp) {
            Ok(c) => break c,
            Err(e) => {
                log(app, comp, &format!("{e}, retrying"));
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    let sock = UdpSocket::bind(("0.0.0.0", cfg.port)).map_err(io)?;
    log(
        app,
        comp,
        &format!(
            "listening on {}, service {} ms, {} stages",
            sock.local_addr().map_err(io)?,
            cfg.service_ms,
            cfg.stages.len()
        ),
    );
    let seed = std::process::id() as u64 ^ (Instant::now().elapsed().as_nanos() as u64);
    let shared = Arc::new(Shared {
        app: app.into(),
        comp: comp.into(),
        cfg: RwLock::new(cfg),
        traffic: Mutex::new(stats::Reporter::from_env()),
        next_id: AtomicU64::new(seed << 32),
    });
    // configuration refresh and traffic reports, every second
    {
        let sh = shared.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            match ask(&ctl, control, &sh.app, &sh.comp) {
                Ok(new) => {
                    let mut cur = sh.cfg.write().unwrap_or_else(|e| e.into_inner());
                    if new.port != cur.port {
                        log(&sh.app, &sh.comp, "port changed; restart to follow it");
                    }
                    let new = Config {
                        port: cur.port,
                        ..new
                    };
                    if new != *cur {
                        log(&sh.app, &sh.comp, "downstream addresses changed");
                        *cur = new;
                    }
                }
                Err(e) => log(&sh.app, &sh.comp, &e),
            }
            sh.count_flush();
        });
    }
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let Some(("Q1", id, caller)) = parse_frame(&buf[..n]) else {
            continue; // not a request: ignored
        };
        let caller = caller.to_string();
        let reply = sock.try_clone().map_err(io)?;
        let sh = shared.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || handle(&sh, &reply, from, id, &caller));
        if let Err(e) = spawned {
            log(app, comp, &format!("cannot start a handler: {e}"));
        }
    }
}

impl Shared {
    /// Counts a message to `to` (`-`: the load generator, not a component).
    fn count(&self, to: &str, bytes: usize) {
        if to != "-" {
            if let Ok(mut r) = self.traffic.lock() {
                r.record(to, bytes);
            }
        }
    }

    fn count_flush(&self) {
        if let Ok(mut r) = self.traffic.lock() {
            r.flush();
        }
    }
}

/// One request: the work, the downstream calls stage by stage, the answer.
fn handle(sh: &Shared, reply: &UdpSocket, from: SocketAddr, id: u64, caller: &str) {
    let cfg = sh.cfg.read().map(|c| c.clone()).unwrap_or_default();
    std::thread::sleep(Duration::from_secs_f64(cfg.service_ms / 1000.0));
    let mut ok = true;
    if !cfg.stages.is_empty() {
        ok = match UdpSocket::bind("0.0.0.0:0") {
            Ok(s) => cfg.stages.iter().all(|st| call_stage(sh, &s, st)),
            Err(_) => false,
        };
    }
    let b = frame("A1", id, if ok { "1" } else { "0" }, cfg.resp_bytes);
    if reply.send_to(&b, from).is_ok() {
        sh.count(caller, b.len());
    }
}

/// Calls every component of a stage in parallel; true when all answered in time with ok.
fn call_stage(sh: &Shared, s: &UdpSocket, stage: &[(String, SocketAddr)]) -> bool {
    let mut pending: Vec<u64> = Vec::with_capacity(stage.len());
    let mut ok = true;
    for (name, to) in stage {
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
        let b = frame("Q1", id, &sh.comp, REQUEST_BYTES);
        if s.send_to(&b, to).is_ok() {
            sh.count(name, b.len());
            pending.push(id);
        } else {
            ok = false;
        }
    }
    let deadline = Instant::now() + CALL_TIMEOUT;
    let mut buf = vec![0u8; 65536];
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        let Ok((n, _)) = s.recv_from(&mut buf) else {
            return false;
        };
        if let Some(("A1", id, good)) = parse_frame(&buf[..n]) {
            if let Some(i) = pending.iter().position(|&p| p == id) {
                pending.swap_remove(i);
                ok &= good == "1";
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_config_answers() {
        let c = parse_config(
            "K1 port=9201 service_ms=2.5 resp=1000 stages=m6@10.78.0.2:9206;m7@10.78.0.3:9207+m8@10.78.0.3:9208",
        )
        .unwrap();
        assert_eq!(c.port, 9201);
        assert_eq!(c.service_ms, 2.5);
        assert_eq!(c.resp_bytes, 1000);
        assert_eq!(c.stages.len(), 2);
        assert_eq!(c.stages[1].len(), 2);
        assert_eq!(c.stages[1][1].0, "m8");
        let leaf = parse_config("K1 port=9216 service_ms=4 resp=1400 stages=").unwrap();
        assert!(leaf.stages.is_empty());
        assert!(parse_config("X").is_err());
        assert!(parse_config("K1 port=1 service_ms=-1").is_err());
        assert!(parse_stages("m1@nope").unwrap_err().contains("bad address"));
    }

    #[test]
    fn frames_round_trip() {
        let b = frame("Q1", 42, "m3", REQUEST_BYTES);
        assert_eq!(b.len(), REQUEST_BYTES);
        assert_eq!(parse_frame(&b), Some(("Q1", 42, "m3")));
        assert_eq!(parse_frame(b"A1 7 1 "), Some(("A1", 7, "1")));
        assert_eq!(parse_frame(b"garbage"), None);
        assert_eq!(parse_frame(&[0xff, 0xfe]), None);
    }
}
