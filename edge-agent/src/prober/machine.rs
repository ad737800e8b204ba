//! The prober and responder as a pure state machine ([`Prober`]): datagrams, times and peer
//! lists in; pings, pongs, log lines and [`LinkMetrics`] out. A ping is answered statelessly (a
//! pong of the same size: no amplification) with our receive time and the count of pings from
//! that address; each period `peers_per_period` peers are pinged in a SWIM-style rotation (round
//! robin over a shuffled list); a pong is matched to its ping in flight and becomes a sample of
//! the peer's [`LinkStats`]: the forward one-way delay with `clock = "synchronized"`, else half
//! the round trip ([`ClockMode`]). Pings ask for the peer's coordinate; a pong that carries it
//! also feeds the node's own ([`AgentCoord`]) unless the peer is of the node's group.
//!
//! Invariant: no I/O and no clock reads (time is passed in); tables are fixed-size ([`MAX_PEERS`]
//! peers, [`MAX_INFLIGHT`] pings in flight, [`MAX_PEERS`] prober addresses counted, least
//! recently seen evicted); only a peer list signed by the control plane's key, for this node and
//! newer than the applied one is taken, at most [`MAX_PROBED`] peers; no datagram can make it panic.

use std::net::SocketAddr;

use acoa_shared::wire::{
    self, LinkMetrics, LinkSample, Message, Name, MAX_LINKS_PER_MESSAGE, MAX_PEERS_PER_NODE,
};
use ed25519_dalek::VerifyingKey;

use super::clock::{one_way_ms, ClockMode};
use super::coord::AgentCoord;
use super::linkstats::LinkStats;
use super::packet::{encode_ping_coord, encode_reply, parse_probe, Packet, PING};

/// Prober addresses the responder counts (and the most pings a period may send).
pub const MAX_PEERS: usize = 256;
/// Peers a node probes: its own list's ([`MAX_PEERS_PER_NODE`]).
pub const MAX_PROBED: usize = MAX_PEERS_PER_NODE;
pub const MAX_INFLIGHT: usize = 256;
/// At most one clock warning per peer in this time.
const CLOCK_WARN_EVERY_NS: u64 = 60_000_000_000;

#[derive(Debug, Clone)]
struct PeerEntry {
    name: Name,
    addr: SocketAddr,
    stats: LinkStats,
    /// When the peer last answered (monotonic ns), if it did.
    answered_ns: Option<u64>,
    /// Of the node's own group: not given to the coordinate.
    group: bool,
}

#[derive(Debug, Clone)]
struct InFlight {
    seq: u64,
    peer: Name,
    sent_ns: u64,
    /// Wall clock at sending (0 when unknown).
    sent_wall_ns: u64,
    /// How long after `sent_wall_ns` the kernel sent it ([`Prober::on_sent`]; 0 = unknown).
    tx_delay_ns: u64,
    /// The ping's index among those sent to `peer`.
    idx: u32,
}

/// A prober address the responder counts pings from.
#[derive(Debug, Clone)]
struct Seen {
    addr: SocketAddr,
    count: u16,
    last_ns: u64,
}

/// What a received packet asks of the socket.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A ping: send this pong back to the sender (if the rate bound allows).
    Reply(Packet),
    /// One of our pongs, recorded.
    Recorded,
    /// One of our pongs, recorded, with a line for the log (clocks that disagree).
    RecordedWithWarning(String),
    /// Not a probe, a late or unknown pong: dropped.
    Dropped,
}

pub struct Prober {
    me: String,
    key: VerifyingKey,
    window: usize,
    per_period: usize,
    timeout_ns: u64,
    peers: heapless::Vec<PeerEntry, MAX_PROBED>,
    order: heapless::Vec<u16, MAX_PROBED>,
    cursor: usize,
    inflight: heapless::Deque<InFlight, MAX_INFLIGHT>,
    next_seq: u64,
    generation: u64,
    last_frame: Option<Vec<u8>>,
    rng: u64,
    clock: ClockMode,
    /// The agent run its link metrics are numbered in (0 until [`Prober::with_run`]).
    run: u64,
    /// The responder's count of pings per prober address (least recently seen evicted).
    seen: heapless::Vec<Seen, MAX_PEERS>,
    /// The node's network coordinate.
    coord: AgentCoord,
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
            clock: ClockMode::Free,
            run: 0,
            seen: heapless::Vec::new(),
            coord: AgentCoord::new(seed),
        }
    }

    /// The same prober taking its latency samples the `clock` way.
    pub fn with_clock(mut self, clock: ClockMode) -> Self {
        self.clock = clock;
        self
    }

    /// The same prober numbering its link metrics in agent run `run`.
    pub fn with_run(mut self, run: u64) -> Self {
        self.run = run;
        self
    }

    pub fn clock(&self) -> ClockMode {
        self.clock
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// The node's coordinate as reported (`None` before its first sample).
    pub fn coordinate(&self) -> Option<wire::WireCoord> {
        self.coord.reported()
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
        if list.node.as_str() != self.me {
            return Err(format!(
                "refused peer list generation {}: it is node {}'s",
                list.generation, list.node
            ));
        }
        if !restored && list.generation <= self.generation {
            if self.last_frame.as_deref() == Some(frame) {
                return Ok(None);
            }
            return Err(format!(
                "refused peer list generation {}: not newer than applied generation {}",
                list.generation, self.generation
            ));
        }
        let mut peers: heapless::Vec<PeerEntry, MAX_PROBED> = heapless::Vec::new();
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
            let (stats, answered_ns) = self
                .peers
                .iter()
                .find(|e| e.name == p.node && e.addr == addr)
                .map(|e| (e.stats.clone(), e.answered_ns))
                .unwrap_or_default();
            if peers
                .push(PeerEntry {
                    name: p.node.clone(),
                    addr,
                    stats,
                    answered_ns,
                    group: p.group,
                })
                .is_err()
            {
                dropped += 1;
            }
        }
        for gone in self
            .peers
            .iter()
            .filter(|e| !peers.iter().any(|p| p.name == e.name))
        {
            self.coord.forget(&gone.name);
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
                ", {dropped} beyond the table size {MAX_PROBED} left out"
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
    pub fn due(&mut self, now_ns: u64) -> Vec<(SocketAddr, Packet)> {
        self.due_at(now_ns, 0)
    }

    /// [`Prober::due`], also knowing the wall clock at sending (`wall_ns`, 0 = unknown).
    pub fn due_at(&mut self, now_ns: u64, wall_ns: u64) -> Vec<(SocketAddr, Packet)> {
        (0..self.pings_due())
            .filter_map(|_| self.next_ping(now_ns, wall_ns))
            .collect()
    }

    /// How many pings a period sends.
    pub fn pings_due(&self) -> usize {
        self.per_period.min(self.peers.len())
    }

    /// The next ping of the rotation, stamped `now_ns` (monotonic) and `wall_ns` (wall
    /// clock, 0 = unknown): the thread takes both right before sending it, so that a
    /// period's later pings do not carry the earlier sends' time in their delays.
    pub fn next_ping(&mut self, now_ns: u64, wall_ns: u64) -> Option<(SocketAddr, Packet)> {
        if self.peers.is_empty() {
            return None;
        }
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
        let peer = &mut self.peers[idx];
        let n = peer.stats.sent;
        peer.stats.sent = n.wrapping_add(1);
        let _ = self.inflight.push_back(InFlight {
            seq,
            peer: peer.name.clone(),
            sent_ns: now_ns,
            sent_wall_ns: wall_ns,
            tx_delay_ns: 0,
            idx: n,
        });
        Some((peer.addr, encode_ping_coord(seq, now_ns)))
    }

    /// The kernel sent our ping `seq` at `kernel_wall_ns` (wall clock ns, from the socket's
    /// send timestamps): its delays count from then, not from the stamp taken before the send
    /// call (on a busy or emulated node the two differ by tenths of a millisecond). A time
    /// before the stamp or over a second after it (a clock step) is ignored.
    pub fn on_sent(&mut self, seq: u64, kernel_wall_ns: u64) {
        if let Some(f) = self.inflight.iter_mut().find(|f| f.seq == seq) {
            if f.sent_wall_ns != 0 {
                let d = kernel_wall_ns.wrapping_sub(f.sent_wall_ns);
                if kernel_wall_ns >= f.sent_wall_ns && d < 1_000_000_000 {
                    // The latest of the stamps (entering the queue, leaving the device).
                    f.tx_delay_ns = f.tx_delay_ns.max(d);
                }
            }
        }
    }

    /// A datagram arrived at `now_ns` (the responder answers in the original format).
    pub fn on_packet(&mut self, bytes: &[u8], now_ns: u64) -> Received {
        self.on_datagram(bytes, None, now_ns, 0)
    }

    /// A datagram from `from` arrived at `now_ns` (monotonic) and `wall_ns` (wall clock,
    /// 0 = unknown). A ping is answered with our receive time and, when `from` is known,
    /// the count of pings received from that address.
    pub fn on_datagram(
        &mut self,
        bytes: &[u8],
        from: Option<SocketAddr>,
        now_ns: u64,
        wall_ns: u64,
    ) -> Received {
        let Some(probe) = parse_probe(bytes) else {
            return Received::Dropped;
        };
        let (seq, t_ns) = (probe.seq, probe.t_ns);
        if probe.kind == PING {
            let count = from.map(|a| self.count_ping(a, now_ns));
            let coord = self.coord.current();
            return Received::Reply(encode_reply(
                probe.len,
                seq,
                t_ns,
                Some(wall_ns),
                count,
                Some(&coord),
            ));
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
        let rtt_ms = now_ns.saturating_sub(t_ns.saturating_add(f.tx_delay_ns)) as f64 / 1e6;
        let window = self.window;
        let clock = self.clock;
        let Some(p) = self.peers.iter_mut().find(|p| p.name == f.peer) else {
            return Received::Recorded;
        };
        p.answered_ns = Some(now_ns);
        if let (Some(c), false) = (&probe.coord, p.group) {
            self.coord.on_sample(&p.name, rtt_ms, c);
        }
        let st = &mut p.stats;
        st.answered = st.answered.wrapping_add(1);
        if let Some(c) = probe.count {
            st.dir.on_pong(f.idx, c, st.answered, window);
        }
        let stamp = probe.recv_wall_ns.filter(|_| f.sent_wall_ns != 0);
        let mut warning = None;
        let sample = match (clock, stamp) {
            (ClockMode::Synchronized, Some(recv)) => {
                match one_way_ms(f.sent_wall_ns + f.tx_delay_ns, recv, rtt_ms) {
                    Ok(owd) => owd,
                    Err(owd) => {
                        st.clock_fallbacks += 1;
                        let due = st
                            .last_clock_warn_ns
                            .is_none_or(|t| now_ns.saturating_sub(t) >= CLOCK_WARN_EVERY_NS);
                        if due {
                            warning = Some(format!(
                                "one-way delay to {} of {owd:.3} ms is outside [0, round trip {rtt_ms:.3} ms]: \
                                 clocks not synchronized? reporting rtt/2 ({} such samples since the last warning)",
                                p.name, st.clock_fallbacks
                            ));
                            st.clock_fallbacks = 0;
                            st.last_clock_warn_ns = Some(now_ns);
                        }
                        rtt_ms / 2.0
                    }
                }
            }
            _ => rtt_ms / 2.0,
        };
        st.on_sample(sample, window);
        match warning {
            Some(w) => Received::RecordedWithWarning(w),
            None => Received::Recorded,
        }
    }

    /// Counts a ping from `addr`: the new count (wrapping). The table keeps the
    /// [`MAX_PEERS`] most recently seen addresses; a forgotten one starts again at 1
    /// (its prober then starts its loss attribution over).
    fn count_ping(&mut self, addr: SocketAddr, now_ns: u64) -> u16 {
        if let Some(s) = self.seen.iter_mut().find(|s| s.addr == addr) {
            s.count = s.count.wrapping_add(1);
            s.last_ns = now_ns;
            return s.count;
        }
        let entry = Seen {
            addr,
            count: 1,
            last_ns: now_ns,
        };
        if let Err(entry) = self.seen.push(entry) {
            if let Some(oldest) = self.seen.iter_mut().min_by_key(|s| s.last_ns) {
                *oldest = entry;
            }
        }
        1
    }

    /// Link metrics of every peer probed at least once, in messages of at most
    /// [`MAX_LINKS_PER_MESSAGE`] links, numbered from `seq` on in the prober's agent run, taken
    /// at `now_ns` (monotonic, the clock of the pongs: how long ago each peer last answered).
    pub fn metrics(&self, node: &Name, seq: &mut u64, now_ns: u64) -> Vec<LinkMetrics> {
        let mut out = Vec::new();
        let mut cur: Option<LinkMetrics> = None;
        for p in self.peers.iter().filter(|p| p.stats.samples() > 0) {
            let m = cur.get_or_insert_with(|| {
                *seq += 1;
                LinkMetrics {
                    node: node.clone(),
                    seq: *seq,
                    run: self.run,
                    links: heapless::Vec::new(),
                    // in the first message of the batch
                    coord: if out.is_empty() {
                        self.coord.reported()
                    } else {
                        None
                    },
                }
            });
            let _ = m.links.push(LinkSample {
                peer: p.name.clone(),
                latency_ms: p.stats.latency_ms().unwrap_or(0.0) as f32,
                jitter_ms: p.stats.jitter_ms() as f32,
                success: p.stats.success() as f32,
                samples: p.stats.samples() as u16,
                last_answer_ms: p.answered_ns.map_or(wire::NEVER_ANSWERED, |t| {
                    (now_ns.saturating_sub(t) / 1_000_000).min(u64::from(u32::MAX - 1)) as u32
                }),
            });
            if m.links.len() == MAX_LINKS_PER_MESSAGE {
                out.push(cur.take().expect("just filled"));
            }
        }
        out.extend(cur);
        out
    }
}

#[cfg(test)]
mod tests;
