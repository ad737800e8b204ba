//! The prober's thread ([`run`]): drives a [`Prober`] on a real UDP socket, with the kernel's
//! receive and send timestamps where it gives them, a token bucket on the responder's replies,
//! and peer lists and metrics exchanged with the agent through [`ProbeIo`].
//!
//! Invariant: times handed to the state machine are the kernel's wherever it gives them (a
//! datagram's arrival backdated to its receive stamp, a ping's departure moved to its send
//! stamp), so CPU wait is not read as network delay; the responder answers at most
//! [`REPLY_RATE`] pongs a second; nothing that arrives on the socket ends the thread.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use acoa_kstamp::{
    backdate, enable_kernel_stamps, enable_send_stamps, recv_sent, recv_stamped, wall_ns,
    KernelStamps,
};
use acoa_shared::wire::{LinkMetrics, Name};

use super::machine::{Prober, Received};
use super::packet::{parse_probe, PING, PROBE_LEN, PROBE_LEN_COORD};

/// Replies per second the responder sends at most (and its burst).
const REPLY_RATE: f64 = 500.0;

/// One send timestamp from the socket's error queue ([`recv_sent`]): the sequence number of
/// the ping it belongs to (`None` for anything else we sent: pongs) and the kernel's send
/// time. `Ok(None)` when the queue is empty.
pub fn recv_send_stamp(sock: &UdpSocket) -> std::io::Result<Option<(Option<u64>, u64)>> {
    let mut buf = [0u8; 128];
    let Some((n, stamp)) = recv_sent(sock, &mut buf)? else {
        return Ok(None);
    };
    let Some(stamp) = stamp else {
        return Ok(Some((None, 0)));
    };
    // the packet ends the error queue's copy: a long ping (with its coordinate flag) or a short one
    let tail = |len: usize| (n >= len).then(|| parse_probe(&buf[n - len..n])).flatten();
    let seq = tail(PROBE_LEN_COORD)
        .or_else(|| tail(PROBE_LEN))
        .filter(|p| p.kind == PING)
        .map(|p| p.seq);
    Ok(Some((seq, stamp)))
}

/// A token bucket for the responder.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * REPLY_RATE).min(REPLY_RATE);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Where the prober thread takes its peer lists from and gives its results to.
pub trait ProbeIo: Send {
    /// A new peer-list frame, if one arrived since the last call.
    fn new_peers(&mut self) -> Option<Vec<u8>>;
    /// An accepted peer-list frame, to persist.
    fn persist_peers(&mut self, frame: &[u8]);
    /// Link metrics to publish.
    fn publish(&mut self, metrics: LinkMetrics);
}

pub struct RunConfig {
    pub node: Name,
    pub period: Duration,
    pub publish_period: Duration,
}

/// Drives `prober` on `sock` until the process ends (a blocking thread: probe
/// timestamps are taken right at the socket, not after an async scheduler's delay).
pub fn run(sock: UdpSocket, mut prober: Prober, cfg: RunConfig, mut io: impl ProbeIo) {
    let epoch = Instant::now();
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    let mut bucket = Bucket {
        tokens: REPLY_RATE,
        last: Instant::now(),
    };
    let mut next_probe = Instant::now();
    let mut next_publish = Instant::now() + cfg.publish_period;
    let mut seq = 0u64;
    let mut buf = [0u8; 64];
    let mut send_errors = 0u32;
    match enable_kernel_stamps(&sock) {
        KernelStamps::Nanoseconds => {}
        KernelStamps::Microseconds => tracing::info!(
            "probe socket: kernel receive timestamps in microseconds (SO_TIMESTAMP; SO_TIMESTAMPNS refused)"
        ),
        KernelStamps::Off => tracing::warn!(
            "no kernel receive timestamps on the probe socket: delays include this thread's wake-ups"
        ),
    }
    let send_stamps = enable_send_stamps(&sock);
    if !send_stamps {
        tracing::info!(
            "probe socket: no kernel send timestamps (SO_TIMESTAMPING refused): pings count from just before the send call"
        );
    }
    loop {
        if let Some(frame) = io.new_peers() {
            match prober.set_peers(&frame, false) {
                Ok(Some(line)) => {
                    tracing::info!("{line}");
                    io.persist_peers(&frame);
                }
                Ok(None) => {}
                Err(line) => tracing::warn!("{line}"),
            }
        }
        let now = Instant::now();
        if now >= next_probe {
            prober.expire(now_ns());
            for _ in 0..prober.pings_due() {
                let Some((addr, ping)) = prober.next_ping(now_ns(), wall_ns()) else {
                    break;
                };
                if let Err(e) = sock.send_to(&ping, addr) {
                    send_errors += 1;
                    if send_errors.is_power_of_two() {
                        tracing::debug!("probe to {addr}: {e} ({send_errors} send errors)");
                    }
                }
            }
            next_probe += cfg.period;
            if next_probe < now {
                next_probe = now + cfg.period;
            }
        }
        // Send times as the kernel saw them (queued right after each send; also pongs',
        // which are dropped here). Bounded: the queue holds what the socket's buffer allows.
        if send_stamps {
            loop {
                match recv_send_stamp(&sock) {
                    Ok(Some((Some(seq), ns))) => prober.on_sent(seq, ns),
                    Ok(Some((None, _))) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
        if now >= next_publish {
            for m in prober.metrics(&cfg.node, &mut seq, now_ns()) {
                io.publish(m);
            }
            next_publish += cfg.publish_period;
            if next_publish < now {
                next_publish = now + cfg.publish_period;
            }
        }
        let wait = next_probe
            .min(next_publish)
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), Duration::from_millis(200));
        let _ = sock.set_read_timeout(Some(wait));
        match recv_stamped(&sock, &mut buf) {
            Ok((n, from, kernel)) => {
                // Arrival as the kernel saw it: the thread's wake-up is not the network's.
                let (t, w) = backdate(now_ns(), wall_ns(), kernel);
                match prober.on_datagram(&buf[..n], Some(from), t, w) {
                    Received::Reply(pong) => {
                        if bucket.take(Instant::now()) {
                            let _ = sock.send_to(&pong, from);
                        }
                    }
                    Received::RecordedWithWarning(line) => tracing::warn!("{line}"),
                    Received::Recorded | Received::Dropped => {}
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => {
                // ICMP errors from an earlier send surface here on Linux; never fatal.
                tracing::debug!("probe socket: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prober::packet::{encode_pong, encode_probe};

    #[test]
    fn the_kernel_send_time_of_each_ping_comes_back_from_the_error_queue() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(enable_send_stamps(&tx));
        assert_eq!(recv_send_stamp(&tx).unwrap(), None);
        let mut seqs = Vec::new();
        for seq in 40..43u64 {
            let before = wall_ns();
            tx.send_to(&encode_probe(PING, seq, 7), rx.local_addr().unwrap())
                .unwrap();
            seqs.push((seq, before, wall_ns()));
        }
        // Anything else we send (a pong, junk) is stamped too, and named as not a ping.
        tx.send_to(&encode_pong(9, 7, None, None), rx.local_addr().unwrap())
            .unwrap();
        tx.send_to(b"junk", rx.local_addr().unwrap()).unwrap();
        let mut got = Vec::new();
        while let Some(s) = recv_send_stamp(&tx).unwrap() {
            got.push(s);
        }
        for (seq, before, after) in seqs {
            let stamps: Vec<u64> = got
                .iter()
                .filter(|(s, _)| *s == Some(seq))
                .map(|(_, ns)| *ns)
                .collect();
            assert!(!stamps.is_empty(), "no stamp for ping {seq}: {got:?}");
            for ns in stamps {
                assert!(
                    (before..=after).contains(&ns),
                    "{before} <= {ns} <= {after}"
                );
            }
        }
        assert!(
            got.iter().filter(|(s, _)| s.is_none()).count() >= 2,
            "{got:?}"
        );
        // A socket with both on (the agent's) still reads its receive stamps: the datagram
        // then carries two stamps, and a control buffer with room for one yields none.
        let both = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(enable_kernel_stamps(&both), KernelStamps::Nanoseconds);
        assert!(enable_send_stamps(&both));
        // The kernel turns its receive stamping on a moment later (deferred work, unless
        // another socket of the system has it on already): until then the stamp is the time of
        // the recvmsg call. Retry for up to a second.
        let mut buf = [0u8; 16];
        let mut got = (0, 0);
        for _ in 0..50 {
            let before = wall_ns();
            tx.send_to(b"ping", both.local_addr().unwrap()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let (_, _, stamp) = recv_stamped(&both, &mut buf).unwrap();
            let stamp = stamp.expect("a receive stamp beside the send-stamping flags");
            got = (before, stamp);
            if stamp >= before && wall_ns() - stamp >= 15_000_000 {
                break;
            }
        }
        let (before, stamp) = got;
        assert!(
            stamp >= before && wall_ns() - stamp >= 15_000_000,
            "{before} {stamp}"
        );
    }
}
