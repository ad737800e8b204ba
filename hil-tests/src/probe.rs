//! A reference UDP echo prober: what the testbed measures a path with, independent of the agent.
//!
//! Probes carry a sequence number and the send time; an [`EchoServer`] sends every datagram
//! back. [`measure`] sends `count` probes at a fixed interval and collects round-trip times.
//! Times are the kernel's (send: `SO_TIMESTAMPING` from the error queue; receive:
//! `SO_TIMESTAMPNS`), with the agent's own socket code, so the round trip counts from the
//! probe leaving the device to its answer arriving, not the prober's wake-ups;
//! [`one_way_kernel`] measures one direction the same way (the namespaces share one clock).

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

    /// The mean of the round trips between the `trim` and `1 - trim` quantiles: a bias of the
    /// emulator still moves it, a few round trips that a stalled vCPU delayed by milliseconds do not.
    pub fn trimmed_mean(&self, trim: f64) -> f64 {
        let mut s = self.rtts_ms.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        let cut = (s.len() as f64 * trim).floor() as usize;
        mean(&s[cut..s.len() - cut])
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

    /// [`Rtts::jitter`] estimated from the median absolute difference of consecutive round trips
    /// instead of their mean, for normally distributed delays: the difference of two draws of
    /// sigma s is normal with sigma s*sqrt(2), its absolute value has mean s*2/sqrt(pi) (the
    /// jitter) and median s*sqrt(2)*0.6745, so jitter = median * (2/sqrt(pi)) / (sqrt(2)*0.6745).
    /// A few round trips delayed by a stalled CPU move the mean, hardly the median.
    pub fn robust_jitter(&self) -> f64 {
        let d: Vec<f64> = self
            .rtts_ms
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .collect();
        let to_mean = (2.0 / std::f64::consts::PI.sqrt()) / (std::f64::consts::SQRT_2 * 0.674_49);
        quantile(&d, 0.5) * to_mean
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
    use acoa_kstamp::{self as ap, KernelStamps};
    let token: u32 = rand::random();
    // Wall clock ns: taken before the send call, moved to the kernel's send time when known.
    let mut sent_at: Vec<Option<u64>> = vec![None; count];
    let mut rtt: Vec<Option<f64>> = vec![None; count];
    let kernel_rx = ap::enable_kernel_stamps(sock) != KernelStamps::Off;
    let kernel_tx = ap::enable_send_stamps(sock);
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut next = start;
    let mut i = 0;
    let mut deadline = None;
    loop {
        let now = Instant::now();
        if i < count && now >= next {
            sent_at[i] = Some(ap::wall_ns());
            sock.send_to(&probe_bytes(token, i as u64), to)?;
            if kernel_tx {
                drain_send_stamps(sock, token, &mut sent_at);
            }
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
        match ap::recv_stamped(sock, &mut buf) {
            Ok((n, _, kernel)) if n >= 12 => {
                let t = kernel.filter(|_| kernel_rx).unwrap_or_else(ap::wall_ns);
                if let Some(seq) = probe_seq(&buf[..n], token).filter(|s| *s < count) {
                    if let (None, Some(s)) = (rtt[seq], sent_at[seq]) {
                        rtt[seq] = Some(t.saturating_sub(s) as f64 / 1e6);
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

/// A probe: the run's token, then the sequence number.
pub(crate) fn probe_bytes(token: u32, seq: u64) -> [u8; 64] {
    let mut msg = [0u8; 64];
    msg[..4].copy_from_slice(&token.to_be_bytes());
    msg[4..12].copy_from_slice(&seq.to_be_bytes());
    msg
}

/// The sequence number of a probe of this run (`payload` at least 12 bytes from its start).
pub(crate) fn probe_seq(payload: &[u8], token: u32) -> Option<usize> {
    if payload.len() < 12 || payload[..4] != token.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(payload[4..12].try_into().ok()?) as usize)
}

/// Moves each probe's send time in `sent_at` to the kernel's (the latest of its stamps, within
/// a second of the stamp taken before the send call) from `sock`'s error queue.
pub(crate) fn drain_send_stamps(sock: &UdpSocket, token: u32, sent_at: &mut [Option<u64>]) {
    let mut buf = [0u8; 256];
    while let Ok(Some((n, stamp))) = acoa_kstamp::recv_sent(sock, &mut buf) {
        let (Some(k), true) = (stamp, n >= 64) else {
            continue;
        };
        let Some(seq) = probe_seq(&buf[n - 64..n], token) else {
            continue;
        };
        if let Some(Some(s)) = sent_at.get_mut(seq) {
            if k >= *s && k - *s < 1_000_000_000 {
                *s = k;
            }
        }
    }
}

/// One-way delays (ms) from `tx` to `rx`, which is reached at `to` (both sockets on this host's
/// clock, e.g. in two namespaces): `count` datagrams one every `interval`, each from the
/// kernel's send time to the kernel's receive time; those that did not arrive within 200 ms of
/// the last are left out. Errors if the kernel gives no send or receive timestamps.
pub fn one_way_kernel(
    tx: &UdpSocket,
    rx: &UdpSocket,
    to: SocketAddr,
    count: usize,
    interval: Duration,
) -> std::io::Result<Vec<f64>> {
    use acoa_kstamp::{self as ap, KernelStamps};
    if ap::enable_kernel_stamps(rx) != KernelStamps::Nanoseconds || !ap::enable_send_stamps(tx) {
        return Err(std::io::Error::other(
            "no kernel send or receive timestamps (SO_TIMESTAMPING, SO_TIMESTAMPNS)",
        ));
    }
    let token: u32 = rand::random();
    let mut sent_at: Vec<Option<u64>> = vec![None; count];
    let mut arrived: Vec<Option<u64>> = vec![None; count];
    rx.set_read_timeout(Some(Duration::from_millis(1)))?;
    let mut buf = [0u8; 256];
    let mut poll_until = |until: Instant, sent_at: &mut [Option<u64>]| {
        while Instant::now() < until {
            drain_send_stamps(tx, token, sent_at);
            if let Ok((n, _, Some(k))) = ap::recv_stamped(rx, &mut buf) {
                if let Some(seq) = probe_seq(&buf[..n], token).filter(|s| *s < count) {
                    arrived[seq].get_or_insert(k);
                }
            }
        }
    };
    for i in 0..count {
        sent_at[i] = Some(ap::wall_ns());
        tx.send_to(&probe_bytes(token, i as u64), to)?;
        poll_until(Instant::now() + interval, &mut sent_at);
    }
    poll_until(Instant::now() + Duration::from_millis(200), &mut sent_at);
    Ok(sent_at
        .iter()
        .zip(&arrived)
        .filter_map(|(s, a)| Some(a.as_ref()?.saturating_sub(*s.as_ref()?) as f64 / 1e6))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::rng::SplitMix64;

    /// `n` round trips of 10 ms plus a normal draw of sigma `s` (Box-Muller).
    fn normal_rtts(n: usize, s: f64) -> Rtts {
        let mut rng = SplitMix64::new(7);
        let rtts_ms = (0..n)
            .map(|_| {
                let (u, v) = (rng.unit().max(1e-12), rng.unit());
                10.0 + s * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
            })
            .collect();
        Rtts { rtts_ms, sent: n }
    }

    #[test]
    fn robust_estimates_agree_with_the_plain_ones_and_ignore_stalls() {
        let mut r = normal_rtts(20_000, 0.886);
        assert!((r.jitter() - 1.0).abs() < 0.03, "jitter {}", r.jitter());
        assert!(
            (r.robust_jitter() - 1.0).abs() < 0.03,
            "robust {}",
            r.robust_jitter()
        );
        assert!((r.trimmed_mean(0.05) - 10.0).abs() < 0.02);
        // one round trip in fifty delayed by 5 ms, as a stalled vCPU does
        for x in r.rtts_ms.iter_mut().step_by(50) {
            *x += 5.0;
        }
        assert!(r.jitter() > 1.1, "the plain jitter moves: {}", r.jitter());
        assert!(
            (r.robust_jitter() - 1.0).abs() < 0.06,
            "robust {}",
            r.robust_jitter()
        );
        assert!(r.mean() - 10.0 > 0.09, "the plain mean moves: {}", r.mean());
        assert!((r.trimmed_mean(0.05) - 10.0).abs() < 0.05);
    }
}
