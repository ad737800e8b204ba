//! A reference UDP echo prober: what the testbed measures a path with, independent of the agent.
//!
//! Probes carry a sequence number and the send time; an [`EchoServer`] sends every datagram
//! back. [`measure`] sends `count` probes at a fixed interval and collects round-trip times.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Echoes every datagram back to its sender until dropped.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub local: SocketAddr,
}

impl EchoServer {
    pub fn start(sock: UdpSocket) -> std::io::Result<Self> {
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let local = sock.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("echo".into())
            .spawn(move || {
                crate::forwarder::tune_thread(true, "echo");
                let mut buf = [0u8; 2048];
                while !stop2.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
            local,
        })
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Round-trip times (ms) of the probes that came back, in send order, and how many did not.
#[derive(Clone, Debug, Default)]
pub struct Rtts {
    pub rtts_ms: Vec<f64>,
    pub sent: usize,
}

impl Rtts {
    pub fn lost(&self) -> usize {
        self.sent - self.rtts_ms.len()
    }

    pub fn success(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        self.rtts_ms.len() as f64 / self.sent as f64
    }

    pub fn mean(&self) -> f64 {
        mean(&self.rtts_ms)
    }

    pub fn median(&self) -> f64 {
        quantile(&self.rtts_ms, 0.5)
    }

    pub fn quantile(&self, q: f64) -> f64 {
        quantile(&self.rtts_ms, q)
    }

    /// RFC 3550 style: the mean absolute difference of consecutive round-trip times.
    pub fn jitter(&self) -> f64 {
        if self.rtts_ms.len() < 2 {
            return 0.0;
        }
        self.rtts_ms
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .sum::<f64>()
            / (self.rtts_ms.len() - 1) as f64
    }
}

pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i]
}

/// Sends `count` probes from `sock` to `to`, one every `interval`, and waits `grace` after the
/// last for late answers. Answers are matched by sequence number, so late or reordered answers
/// are counted right. Runs on its own SCHED_FIFO thread (where allowed), so that a busy machine
/// adds as little as possible to what is measured.
pub fn measure(
    sock: &UdpSocket,
    to: SocketAddr,
    count: usize,
    interval: Duration,
    grace: Duration,
) -> std::io::Result<Rtts> {
    let sock = sock.try_clone()?;
    std::thread::spawn(move || {
        crate::forwarder::tune_thread(true, "prober");
        measure_here(&sock, to, count, interval, grace)
    })
    .join()
    .map_err(|_| std::io::Error::other("prober thread panicked"))?
}

/// [`measure`] on the calling thread.
pub fn measure_here(
    sock: &UdpSocket,
    to: SocketAddr,
    count: usize,
    interval: Duration,
    grace: Duration,
) -> std::io::Result<Rtts> {
    let token: u32 = rand::random();
    let mut sent_at: Vec<Option<Instant>> = vec![None; count];
    let mut rtt: Vec<Option<f64>> = vec![None; count];
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut next = start;
    let mut i = 0;
    let mut deadline = None;
    loop {
        let now = Instant::now();
        if i < count && now >= next {
            let mut msg = [0u8; 64];
            msg[..4].copy_from_slice(&token.to_be_bytes());
            msg[4..12].copy_from_slice(&(i as u64).to_be_bytes());
            sent_at[i] = Some(Instant::now());
            sock.send_to(&msg, to)?;
            i += 1;
            next += interval;
            if i == count {
                deadline = Some(Instant::now() + grace);
            }
            continue;
        }
        if let Some(d) = deadline {
            if now >= d {
                break;
            }
        }
        let wait = if i < count {
            next.saturating_duration_since(now)
        } else {
            deadline.expect("set").saturating_duration_since(now)
        }
        .max(Duration::from_micros(100));
        sock.set_read_timeout(Some(wait))?;
        match sock.recv_from(&mut buf) {
            Ok((n, _)) if n >= 12 => {
                let t = Instant::now();
                if buf[..4] != token.to_be_bytes() {
                    continue;
                }
                let seq = u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes")) as usize;
                if seq < count && rtt[seq].is_none() {
                    if let Some(s) = sent_at[seq] {
                        rtt[seq] = Some((t - s).as_secs_f64() * 1000.0);
                    }
                }
            }
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(e),
        }
        if i == count && rtt.iter().all(|r| r.is_some()) {
            break;
        }
    }
    Ok(Rtts {
        rtts_ms: rtt.into_iter().flatten().collect(),
        sent: count,
    })
}
