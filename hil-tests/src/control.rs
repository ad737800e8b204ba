//! The emulator's control socket: one request line in, one JSON line out.
//!
//! Requests:
//! - `set FROM TO [latency_ms=X] [jitter_ms=J] [loss=L]`: changes the directed link (fields not
//!   given keep their value); takes effect for the next packet
//! - `get FROM TO`: the link, as JSON
//! - `links`: every link that is not ideal
//! - `stats`: counters and delivery lateness
//! - `reset-stats`
//! - `compensate US`: subtract US µs from every non-zero delay (the emulator's own overhead)
//! - `nodes`: name, namespace and address of every node
//! - `reload`: reads the link table again from the scenario file the emulator was started with
//!
//! Answers: `{"ok":true,...}` or `{"ok":false,"error":"..."}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use crate::emu::TestbedNode;
use crate::forwarder::Shared;
use crate::linktable::LinkSpec;

/// Re-reads the scenario's links; returns how many were set.
pub type ReloadFn = dyn Fn() -> Result<usize, String> + Send + Sync;

/// Answers one request line.
pub fn handle(
    line: &str,
    shared: &Shared,
    nodes: &[TestbedNode],
    reload: Option<&ReloadFn>,
) -> Value {
    match handle_inner(line, shared, nodes, reload) {
        Ok(v) => v,
        Err(e) => json!({"ok": false, "error": e}),
    }
}

fn handle_inner(
    line: &str,
    shared: &Shared,
    nodes: &[TestbedNode],
    reload: Option<&ReloadFn>,
) -> Result<Value, String> {
    let mut words = line.split_whitespace();
    let cmd = words.next().ok_or("empty request")?;
    let idx = |name: Option<&str>| -> Result<(usize, String), String> {
        let name = name.ok_or("expected FROM TO")?;
        shared
            .index_of(name)
            .map(|i| (i, name.to_string()))
            .ok_or_else(|| format!("unknown node {name}"))
    };
    match cmd {
        "set" => {
            let (f, from) = idx(words.next())?;
            let (t, to) = idx(words.next())?;
            let mut spec = shared.link(f, t);
            for kv in words {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("expected key=value, got {kv}"))?;
                let v: f64 = v.parse().map_err(|_| format!("{k}: {v} is not a number"))?;
                match k {
                    "latency_ms" => spec.latency_ms = v,
                    "jitter_ms" => spec.jitter_ms = v,
                    "loss" => spec.loss = v,
                    "success" => spec.loss = 1.0 - v,
                    other => return Err(format!("unknown field {other}")),
                }
            }
            spec.validate()
                .map_err(|r| format!("invalid link {from} -> {to}: {r}"))?;
            shared.set_link(f, t, spec);
            tracing::info!(%from, %to, latency_ms = spec.latency_ms, jitter_ms = spec.jitter_ms, loss = spec.loss, "link changed");
            Ok(json!({"ok": true, "from": from, "to": to, "link": spec}))
        }
        "get" => {
            let (f, from) = idx(words.next())?;
            let (t, to) = idx(words.next())?;
            Ok(json!({"ok": true, "from": from, "to": to, "link": shared.link(f, t)}))
        }
        "links" => {
            let n = shared.names.len();
            let mut out = Vec::new();
            for f in 0..n {
                for t in 0..n {
                    let s = shared.link(f, t);
                    if f != t && s != LinkSpec::IDEAL {
                        out.push(
                            json!({"from": shared.names[f], "to": shared.names[t], "link": s}),
                        );
                    }
                }
            }
            Ok(json!({"ok": true, "links": out}))
        }
        "stats" => Ok(json!({"ok": true, "stats": shared.stats()})),
        "compensate" => {
            let us: f64 = words
                .next()
                .ok_or("expected compensate MICROSECONDS")?
                .parse()
                .map_err(|_| "compensation: not a number".to_string())?;
            if !(0.0..=10_000.0).contains(&us) {
                return Err("compensation must be within 0..=10000 µs".into());
            }
            shared.set_compensation(Duration::from_secs_f64(us / 1e6));
            Ok(json!({"ok": true, "compensate_us": us}))
        }
        "reset-stats" => {
            shared.reset_stats();
            Ok(json!({"ok": true}))
        }
        "nodes" => Ok(json!({"ok": true, "nodes": nodes})),
        "reload" => {
            let r = reload.ok_or("no scenario file to reload")?;
            let n = r()?;
            Ok(json!({"ok": true, "links": n}))
        }
        other => Err(format!("unknown request {other}")),
    }
}

/// A control socket served on a thread; stops on drop.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    pub fn start(
        path: &Path,
        shared: Arc<Shared>,
        nodes: Vec<TestbedNode>,
        reload: Option<Arc<ReloadFn>>,
    ) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("linkemu-control".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let _ = serve(stream, &shared, &nodes, reload.as_deref());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "control socket accept failed");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

fn serve(
    stream: UnixStream,
    shared: &Shared,
    nodes: &[TestbedNode],
    reload: Option<&ReloadFn>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut w = stream.try_clone()?;
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = handle(&line, shared, nodes, reload);
        writeln!(w, "{answer}")?;
    }
    Ok(())
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one request to the control socket at `path`; returns the answer, or an error with the
/// emulator's message if it said no.
pub fn request(path: &Path, line: &str) -> anyhow::Result<Value> {
    use anyhow::Context;
    let mut s = UnixStream::connect(path)
        .with_context(|| format!("cannot reach the emulator at {}", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{line}")?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    let v: Value = serde_json::from_str(answer.trim())
        .with_context(|| format!("bad answer from the emulator: {answer:?}"))?;
    if v["ok"] != json!(true) {
        anyhow::bail!(
            "emulator: {}",
            v["error"].as_str().unwrap_or("request refused")
        );
    }
    Ok(v)
}
