//! The load generator (virtual users on the control node) and the percentiles of its requests.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::*;

/// One request of the load generator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the generator started, when it was sent.
    pub sent_s: f64,
    /// End-to-end response time; `None` when no answer came within [`REQUEST_TIMEOUT`].
    pub rt_ms: Option<f64>,
    /// The answer said every downstream call succeeded.
    pub ok: bool,
}

/// The load generator: `users` virtual users, each one request per second to the target, from
/// a socket in the control node's namespace.
pub struct Load {
    pub target: Arc<RwLock<Option<SocketAddr>>>,
    users: Arc<AtomicUsize>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    t0: Instant,
}

impl Load {
    pub fn start(sock: UdpSocket) -> Result<Self> {
        let t0 = Instant::now();
        let target: Arc<RwLock<Option<SocketAddr>>> = Arc::default();
        let users = Arc::new(AtomicUsize::new(0));
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let pending: Arc<Mutex<HashMap<u64, (Instant, f64)>>> = Arc::default();
        let rx = sock.try_clone()?;
        rx.set_read_timeout(Some(Duration::from_millis(200)))?;
        {
            let (pending, samples, stop) = (pending.clone(), samples.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, _)) = rx.recv_from(&mut buf) else {
                        continue;
                    };
                    let now = Instant::now();
                    let head = String::from_utf8_lossy(&buf[..n.min(64)]).into_owned();
                    let mut w = head.split(' ');
                    let (Some("A1"), Some(id), Some(ok)) = (w.next(), w.next(), w.next()) else {
                        continue;
                    };
                    let Ok(id) = id.parse::<u64>() else { continue };
                    let sent = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some((at, sent_s)) = sent {
                        if let Ok(mut s) = samples.lock() {
                            s.push(Sample {
                                sent_s,
                                rt_ms: Some(now.duration_since(at).as_secs_f64() * 1e3),
                                ok: ok == "1",
                            });
                        }
                    }
                }
            });
        }
        {
            let (target, users, samples, stop) =
                (target.clone(), users.clone(), samples.clone(), stop.clone());
            std::thread::spawn(move || {
                // user i of n sends at k + i/n seconds
                let mut id: u64 = 1;
                let mut next_tick = Instant::now();
                let mut slot: u64 = 0;
                let mut last_expire = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let n = users.load(Ordering::Relaxed);
                    if n == 0 {
                        std::thread::sleep(Duration::from_millis(20));
                        next_tick = Instant::now();
                        continue;
                    }
                    let gap = Duration::from_secs_f64(1.0 / n as f64);
                    let now = Instant::now();
                    if now < next_tick {
                        std::thread::sleep((next_tick - now).min(Duration::from_millis(50)));
                        continue;
                    }
                    next_tick += gap;
                    if next_tick + Duration::from_secs(1) < now {
                        next_tick = now; // do not burst after a stall
                    }
                    slot += 1;
                    let to = target.read().ok().and_then(|t| *t);
                    if let Some(to) = to {
                        let mut b = format!("Q1 {id} - ").into_bytes();
                        b.resize(200, b'x');
                        let sent_s = t0.elapsed().as_secs_f64();
                        if let Ok(mut p) = pending.lock() {
                            p.insert(id, (Instant::now(), sent_s));
                        }
                        let _ = sock.send_to(&b, to);
                        id += 1;
                    }
                    if last_expire.elapsed() > Duration::from_millis(500) {
                        last_expire = Instant::now();
                        let mut lost = Vec::new();
                        if let Ok(mut p) = pending.lock() {
                            p.retain(|_, (at, sent_s)| {
                                let keep = at.elapsed() < REQUEST_TIMEOUT;
                                if !keep {
                                    lost.push(*sent_s);
                                }
                                keep
                            });
                        }
                        if let Ok(mut s) = samples.lock() {
                            s.extend(lost.into_iter().map(|sent_s| Sample {
                                sent_s,
                                rt_ms: None,
                                ok: false,
                            }));
                        }
                    }
                }
                let _ = slot;
            });
        }
        Ok(Self {
            target,
            users,
            samples,
            stop,
            t0,
        })
    }

    pub fn set_users(&self, n: usize) {
        self.users.store(n, Ordering::Relaxed);
    }

    pub fn set_target(&self, to: Option<SocketAddr>) {
        if let Ok(mut t) = self.target.write() {
            *t = to;
        }
    }

    /// Seconds since the generator started.
    pub fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The samples of the requests sent within `[from_s, to_s)`.
    pub fn samples(&self, from_s: f64, to_s: f64) -> Vec<Sample> {
        self.samples
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|x| x.sent_s >= from_s && x.sent_s < to_s)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Percentiles of the successful requests (answered, every downstream call answered; nearest
/// rank); the others (lost, or answered after a downstream call timed out) counted as failed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub requests: usize,
    pub answered: usize,
    pub failed: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

pub fn stats(samples: &[Sample]) -> Stats {
    let answered = samples.iter().filter(|s| s.rt_ms.is_some()).count();
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.ok)
        .filter_map(|s| s.rt_ms)
        .collect();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[k - 1]
    };
    Stats {
        requests: samples.len(),
        answered,
        failed: samples
            .iter()
            .filter(|s| s.rt_ms.is_none() || !s.ok)
            .count(),
        p50: q(0.50),
        p95: q(0.95),
        p99: q(0.99),
    }
}
