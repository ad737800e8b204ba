//! Peer prober: UDP echo with timestamps (FR1 of the ACOA paper).
//!
//! Every agent answers probes from anyone, statelessly: a ping comes back as a pong
//! of the same size (no amplification), within a global token bucket. Each period
//! the agent pings `peers_per_period` peers in a SWIM-style rotation (round robin over
//! a shuffled list, so that the probe load per node stays bounded as the cluster
//! grows) and keeps, per peer, a smoothed one-way latency (RTT/2, EWMA), the RFC 3550
//! interarrival jitter of that estimate, and the success rate over the last `window`
//! probes. Tables are fixed-size (`heapless`): [`MAX_PEERS`] peers, [`MAX_INFLIGHT`]
//! probes in flight.
//!
//! [`Prober`] is pure (time is passed in); [`run`] is the thread that drives it on
//! real sockets.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use acoa_shared::wire::{self, LinkMetrics, LinkSample, Message, Name, MAX_LINKS_PER_MESSAGE};
use ed25519_dalek::VerifyingKey;

pub const MAX_PEERS: usize = 256;
pub const MAX_INFLIGHT: usize = 256;
pub const PROBE_LEN: usize = 32;
const MAGIC: [u8; 4] = *b"ACP1";
const PING: u8 = 1;
const PONG: u8 = 2;
/// Weight of a new sample in the smoothed latency (as TCP's SRTT).
const EWMA_ALPHA: f64 = 0.125;
/// Replies per second the responder sends at most (and its burst).
const REPLY_RATE: f64 = 500.0;

/// A probe packet: magic, kind, 3 bytes padding, sequence, sender's send time (ns).
pub fn encode_probe(kind: u8, seq: u64, t_ns: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..4].copy_from_slice(&MAGIC);
    p[4] = kind;
    p[8..16].copy_from_slice(&seq.to_be_bytes());
    p[16..24].copy_from_slice(&t_ns.to_be_bytes());
    p
}

/// `(kind, seq, t_ns)` of a well-formed probe packet.
pub fn decode_probe(b: &[u8]) -> Option<(u8, u64, u64)> {
    if b.len() != PROBE_LEN || b[..4] != MAGIC || !(b[4] == PING || b[4] == PONG) {
        return None;
    }
    let seq = u64::from_be_bytes(b[8..16].try_into().ok()?);
    let t = u64::from_be_bytes(b[16..24].try_into().ok()?);
    Some((b[4], seq, t))
}

/// Per-peer link statistics.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    latency_ms: Option<f64>,
    jitter_ms: f64,
    last_owd_ms: Option<f64>,
    /// Outcomes, newest in bit 0 (1 = answered).
    bits: u64,
    count: u32,
}

impl LinkStats {
    fn push(&mut self, ok: bool, window: usize) {
        let mask = if window >= 64 {
            u64::MAX
        } else {
            (1u64 << window) - 1
        };
        self.bits = ((self.bits << 1) | u64::from(ok)) & mask;
        self.count = (self.count + 1).min(window as u32);
    }

    pub fn on_reply(&mut self, rtt_ms: f64, window: usize) {
        let owd = rtt_ms / 2.0;
        self.latency_ms = Some(match self.latency_ms {
            None => owd,
            Some(l) => l + EWMA_ALPHA * (owd - l),
        });
        if let Some(last) = self.last_owd_ms {
            let d = (owd - last).abs();
            self.jitter_ms += (d - self.jitter_ms) / 16.0;
        }
        self.last_owd_ms = Some(owd);
        self.push(true, window);
    }

    pub fn on_loss(&mut self, window: usize) {
        self.push(false, window);
    }

    pub fn latency_ms(&self) -> Option<f64> {
        self.latency_ms
    }

    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ms
    }

    pub fn samples(&self) -> u32 {
        self.count
    }

    /// Fraction answered over the window (1 when nothing was sent yet).
    pub fn success(&self) -> f64 {
        if self.count == 0 {
            return 1.0;
        }
        let mask = if self.count >= 64 {
            u64::MAX
        } else {
            (1u64 << self.count) - 1
        };
        f64::from((self.bits & mask).count_ones()) / f64::from(self.count)
    }
}

#[derive(Debug, Clone)]
struct PeerEntry {
    name: Name,
    addr: SocketAddr,
    stats: LinkStats,
}

#[derive(Debug, Clone)]
struct InFlight {
    seq: u64,
    peer: Name,
    sent_ns: u64,
}

/// What a received packet asks of the socket.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A ping: send this pong back to the sender (if the rate bound allows).
    Reply([u8; PROBE_LEN]),
    /// One of our pongs, recorded.
    Recorded,
    /// Not a probe, a late or unknown pong: dropped.
    Dropped,
}

pub struct Prober {
    me: String,
    key: VerifyingKey,
    window: usize,
    per_period: usize,
    timeout_ns: u64,
    peers: heapless::Vec<PeerEntry, MAX_PEERS>,
    order: heapless::Vec<u16, MAX_PEERS>,
    cursor: usize,
    inflight: heapless::Deque<InFlight, MAX_INFLIGHT>,
    next_seq: u64,
    generation: u64,
    last_frame: Option<Vec<u8>>,
    rng: u64,
}

impl Prober {
    pub fn new(
        me: &str,
        key: VerifyingKey,
        window: usize,
        per_period: usize,
        timeout_ms: u64,
    ) -> Self {
        let seed = me.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Prober {
            me: me.to_owned(),
            key,
            window: window.clamp(1, 64),
            per_period,
            timeout_ns: timeout_ms * 1_000_000,
            peers: heapless::Vec::new(),
            order: heapless::Vec::new(),
            cursor: 0,
            inflight: heapless::Deque::new(),
            next_seq: 1,
            generation: 0,
            last_frame: None,
            rng: seed | 1,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    pub fn stats(&self, peer: &str) -> Option<&LinkStats> {
        self.peers
            .iter()
            .find(|p| p.name.as_str() == peer)
            .map(|p| &p.stats)
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    fn shuffle(&mut self) {
        self.order.clear();
        for i in 0..self.peers.len() {
            let _ = self.order.push(i as u16);
        }
        for i in (1..self.order.len()).rev() {
            let j = (self.next_rand() % (i as u64 + 1)) as usize;
            self.order.swap(i, j);
        }
        self.cursor = 0;
    }

    /// A peer-list frame from the wire (or from disk when `restored`). Returns one
    /// line for the log: `Ok` when applied (carrying the frame to persist), `Err`
    /// when refused; `Ok(None)` for the retained copy seen again.
    pub fn set_peers(&mut self, frame: &[u8], restored: bool) -> Result<Option<String>, String> {
        let msg = wire::decode_verified(frame, &self.key)
            .map_err(|e| format!("refused peer list: {e}"))?;
        let Message::PeerList(list) = msg else {
            return Err(format!("refused peer list: it is a {}", msg.kind()));
        };
        if !restored && list.generation <= self.generation {
            if self.last_frame.as_deref() == Some(frame) {
                return Ok(None);
            }
            return Err(format!(
                "refused peer list generation {}: not newer than applied generation {}",
                list.generation, self.generation
            ));
        }
        let mut peers: heapless::Vec<PeerEntry, MAX_PEERS> = heapless::Vec::new();
        let mut bad = 0usize;
        let mut dropped = 0usize;
        for p in &list.peers {
            if p.node.as_str() == self.me {
                continue;
            }
            let Ok(addr) = p.addr.parse::<SocketAddr>() else {
                bad += 1;
                continue;
            };
            if peers.iter().any(|e| e.name == p.node) {
                continue;
            }
            // Keep what was measured of a peer that stays at the same address.
            let stats = self
                .peers
                .iter()
                .find(|e| e.name == p.node && e.addr == addr)
                .map(|e| e.stats.clone())
                .unwrap_or_default();
            if peers
                .push(PeerEntry {
                    name: p.node.clone(),
                    addr,
                    stats,
                })
                .is_err()
            {
                dropped += 1;
            }
        }
        self.peers = peers;
        self.generation = list.generation;
        self.last_frame = Some(frame.to_vec());
        self.shuffle();
        let mut line = format!(
            "{} peer list generation {} ({} peers to probe)",
            if restored { "restored" } else { "accepted" },
            list.generation,
            self.peers.len()
        );
        if bad > 0 {
            line.push_str(&format!(", {bad} with an unusable address skipped"));
        }
        if dropped > 0 {
            line.push_str(&format!(
                ", {dropped} beyond the table size {MAX_PEERS} left out"
            ));
        }
        Ok(Some(line))
    }

    /// Counts the probes that timed out as lost.
    pub fn expire(&mut self, now_ns: u64) {
        while let Some(f) = self.inflight.front() {
            if now_ns.saturating_sub(f.sent_ns) < self.timeout_ns {
                break;
            }
            let f = self.inflight.pop_front().expect("front exists");
            let window = self.window;
            if let Some(p) = self.peers.iter_mut().find(|p| p.name == f.peer) {
                p.stats.on_loss(window);
            }
        }
    }

    /// The pings to send this period, with the time they are stamped with.
    pub fn due(&mut self, now_ns: u64) -> Vec<(SocketAddr, [u8; PROBE_LEN])> {
        let n = self.per_period.min(self.peers.len());
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if self.cursor >= self.order.len() {
                self.shuffle();
            }
            let idx = self.order[self.cursor] as usize;
            self.cursor += 1;
            let seq = self.next_seq;
            self.next_seq += 1;
            if self.inflight.is_full() {
                // Oldest first out: it would have timed out anyway.
                if let Some(f) = self.inflight.pop_front() {
                    let window = self.window;
                    if let Some(p) = self.peers.iter_mut().find(|p| p.name == f.peer) {
                        p.stats.on_loss(window);
                    }
                }
            }
            let peer = &self.peers[idx];
            let _ = self.inflight.push_back(InFlight {
                seq,
                peer: peer.name.clone(),
                sent_ns: now_ns,
            });
            out.push((peer.addr, encode_probe(PING, seq, now_ns)));
        }
        out
    }

    /// A datagram arrived at `now_ns`.
    pub fn on_packet(&mut self, bytes: &[u8], now_ns: u64) -> Received {
        let Some((kind, seq, t_ns)) = decode_probe(bytes) else {
            return Received::Dropped;
        };
        if kind == PING {
            return Received::Reply(encode_probe(PONG, seq, t_ns));
        }
        let Some(pos) = self.inflight.iter().position(|f| f.seq == seq) else {
            return Received::Dropped;
        };
        // Remove entry `pos` (the deque holds at most MAX_INFLIGHT).
        let mut found = None;
        let n = self.inflight.len();
        for i in 0..n {
            let f = self.inflight.pop_front().expect("len checked");
            if i == pos {
                found = Some(f);
            } else {
                let _ = self.inflight.push_back(f);
            }
        }
        let f = found.expect("position found");
        if f.sent_ns != t_ns {
            return Received::Dropped;
        }
        let rtt_ms = now_ns.saturating_sub(t_ns) as f64 / 1e6;
        let window = self.window;
        if let Some(p) = self.peers.iter_mut().find(|p| p.name == f.peer) {
            p.stats.on_reply(rtt_ms, window);
        }
        Received::Recorded
    }

    /// Link metrics of every peer probed at least once, in messages of at most
    /// [`MAX_LINKS_PER_MESSAGE`] links.
    pub fn metrics(&self, node: &Name, seq: &mut u64) -> Vec<LinkMetrics> {
        let mut out = Vec::new();
        let mut cur: Option<LinkMetrics> = None;
        for p in self.peers.iter().filter(|p| p.stats.samples() > 0) {
            let m = cur.get_or_insert_with(|| {
                *seq += 1;
                LinkMetrics {
                    node: node.clone(),
                    seq: *seq,
                    links: heapless::Vec::new(),
                }
            });
            let _ = m.links.push(LinkSample {
                peer: p.name.clone(),
                latency_ms: p.stats.latency_ms().unwrap_or(0.0) as f32,
                jitter_ms: p.stats.jitter_ms() as f32,
                success: p.stats.success() as f32,
                samples: p.stats.samples() as u16,
            });
            if m.links.len() == MAX_LINKS_PER_MESSAGE {
                out.push(cur.take().expect("just filled"));
            }
        }
        out.extend(cur);
        out
    }
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
            for (addr, ping) in prober.due(now_ns()) {
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
        if now >= next_publish {
            for m in prober.metrics(&cfg.node, &mut seq) {
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
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let t = now_ns();
                if let Received::Reply(pong) = prober.on_packet(&buf[..n], t) {
                    if bucket.take(Instant::now()) {
                        let _ = sock.send_to(&pong, from);
                    }
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
    use acoa_shared::wire::{encode, name, Peer, PeerList};
    use ed25519_dalek::SigningKey;

    fn cp() -> SigningKey {
        SigningKey::from_bytes(&[3; 32])
    }

    fn peers_frame(generation: u64, n: usize, key: &SigningKey) -> Vec<u8> {
        let peers = (0..n)
            .map(|i| Peer {
                node: name(&format!("p{i}")).unwrap(),
                addr: wire::bounded("addr", &format!("127.0.0.1:{}", 10000 + i)).unwrap(),
            })
            .collect();
        encode(
            &Message::PeerList(PeerList { generation, peers }),
            Some(key),
        )
        .unwrap()
    }

    #[test]
    fn probe_packets_round_trip_and_reject_junk() {
        let p = encode_probe(PING, 7, 99);
        assert_eq!(decode_probe(&p), Some((PING, 7, 99)));
        assert_eq!(decode_probe(&p[..31]), None);
        assert_eq!(decode_probe(&[0u8; 32]), None);
    }

    #[test]
    fn stats_follow_rfc3550_and_window() {
        let mut s = LinkStats::default();
        for _ in 0..10 {
            s.on_reply(100.0, 4);
        }
        assert!((s.latency_ms().unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(s.jitter_ms(), 0.0);
        s.on_reply(120.0, 4); // one-way 60: D = 10, J = 10/16
        assert!((s.jitter_ms() - 0.625).abs() < 1e-9);
        s.on_loss(4);
        s.on_loss(4);
        assert_eq!(s.samples(), 4);
        assert!((s.success() - 0.5).abs() < 1e-9);
        s.on_loss(4);
        s.on_loss(4);
        assert_eq!(s.success(), 0.0);
    }

    #[test]
    fn rotation_is_bounded_and_covers_everyone() {
        let mut p = Prober::new("p3", cp().verifying_key(), 20, 4, 1000);
        p.set_peers(&peers_frame(1, 10, &cp()), false).unwrap();
        assert_eq!(p.peer_count(), 9, "itself left out");
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..3u64 {
            let due = p.due(round * 1_000_000_000);
            assert!(due.len() <= 4);
            seen.extend(due.iter().map(|(a, _)| *a));
        }
        assert_eq!(seen.len(), 9, "every peer probed within ceil(9/4) periods");
    }

    #[test]
    fn replies_and_timeouts_make_the_numbers() {
        let mut p = Prober::new("me", cp().verifying_key(), 10, 1, 500);
        p.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        for i in 0..10u64 {
            let t0 = i * 1_000_000_000;
            let (_, ping) = p.due(t0)[0];
            // The peer answers: the pong echoes the ping's fields.
            let Received::Reply(pong) = p.on_packet(&ping, t0) else {
                panic!()
            };
            if i % 5 != 4 {
                assert_eq!(p.on_packet(&pong, t0 + 80_000_000), Received::Recorded);
            }
            p.expire(t0 + 600_000_000);
        }
        let s = p.stats("p0").unwrap();
        assert!((s.latency_ms().unwrap() - 40.0).abs() < 1e-6);
        assert!((s.success() - 0.8).abs() < 1e-9);
        let node = name("me").unwrap();
        let mut seq = 0;
        let m = p.metrics(&node, &mut seq);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].links[0].samples, 10);
        // A late pong (already expired) is not counted.
        let (_, ping) = p.due(20_000_000_000)[0];
        p.expire(21_000_000_000);
        let Received::Reply(pong) = p.on_packet(&ping, 0) else {
            panic!()
        };
        assert_eq!(p.on_packet(&pong, 21_000_000_001), Received::Dropped);
    }

    #[test]
    fn peer_lists_are_trusted_only_when_signed_and_newer() {
        let mut p = Prober::new("me", cp().verifying_key(), 10, 1, 500);
        let other = SigningKey::from_bytes(&[4; 32]);
        assert!(p.set_peers(b"junk", false).is_err());
        assert!(p.set_peers(&peers_frame(1, 2, &other), false).is_err());
        let f = peers_frame(5, 2, &cp());
        assert!(p.set_peers(&f, false).unwrap().is_some());
        assert_eq!(p.set_peers(&f, false), Ok(None));
        let e = p.set_peers(&peers_frame(4, 3, &cp()), false).unwrap_err();
        assert!(e.contains("not newer"), "{e}");
        assert_eq!(p.peer_count(), 2);
    }

    #[test]
    fn tables_stay_bounded() {
        let mut p = Prober::new("me", cp().verifying_key(), 10, MAX_PEERS, 10_000);
        let line = p
            .set_peers(&peers_frame(1, MAX_PEERS + 10, &cp()), false)
            .unwrap()
            .unwrap();
        assert!(line.contains("left out"), "{line}");
        assert_eq!(p.peer_count(), MAX_PEERS);
        for i in 0..5 {
            p.due(i);
        }
        assert!(p.inflight.len() <= MAX_INFLIGHT);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_datagram_or_peer_frame_is_harmless(
                bytes in proptest::collection::vec(any::<u8>(), 0..200)
            ) {
                let mut p = Prober::new("me", cp().verifying_key(), 10, 4, 500);
                p.set_peers(&peers_frame(1, 3, &cp()), false).unwrap();
                let r = p.on_packet(&bytes, 1);
                prop_assert!(matches!(r, Received::Dropped | Received::Reply(_)));
                prop_assert!(p.set_peers(&bytes, false).is_err());
                prop_assert_eq!(p.peer_count(), 3);
            }
        }
    }
}
