//! Peer prober: UDP echo with timestamps (FR1 of the ACOA paper).
//!
//! Every agent answers probes from anyone, statelessly: a ping comes back as a pong
//! of the same size (no amplification), within a global token bucket. Each period
//! the agent pings `peers_per_period` peers in a SWIM-style rotation (round robin over
//! a shuffled list, so that the probe load per node stays bounded as the cluster
//! grows) and keeps, per peer, a one-way latency, the RFC 3550 interarrival jitter of that
//! estimate, and the success rate over the last `window` probes. The latency is the mean of
//! the last [`LATENCY_WINDOW`] samples less their highest and lowest eighth (standard deviation
//! about 0.19 of the link's jitter against 0.26 for TCP's smoothed RTT: on 380 jittery pairs
//! the difference between a 5 % miss now and then and none; one late packet does not move it),
//! restarted from the newest samples when a fast tracker (TCP's EWMA) leaves it by more than
//! its own noise: a changed link is followed within a few samples. Tables are fixed-size
//! (`heapless`): [`MAX_PEERS`] peers, [`MAX_INFLIGHT`] probes in flight, [`MAX_PEERS`] probers
//! counted by the responder.
//!
//! One-way delay ([`ClockMode`]): with `clock = "free"` (the default) a sample is half the
//! round trip, which cannot tell A -> B from B -> A. With `clock = "synchronized"` (nodes
//! on GPS, PTP or NTP time, or namespaces sharing one host clock) a sample is the pong's
//! receive timestamp (the responder's wall clock) minus the ping's send time (ours): the
//! delay of the direction from this node to the peer; the peer measures the other one
//! when it probes us. A sample outside `[0, round trip]` means the clocks disagree: it
//! falls back to RTT/2 with a warning naming the peer (at most one a minute per peer).
//!
//! Loss per direction: the responder counts the pings it received from each prober
//! address and returns the count in the pong. Between two pongs the prober knows how many
//! of its pings arrived (forward) and how many of those came back (reverse); the success
//! it reports is that of the forward direction, `round-trip success / reverse success`.
//! This needs no clocks, so it applies in both modes whenever the peer's responder counts.
//!
//! Timestamps: the socket has `SO_TIMESTAMPNS` on (or `SO_TIMESTAMP`, in microseconds, where
//! only that one is known: qemu's user-mode emulation), so a datagram's arrival (a pong at the
//! prober, a ping at the responder) is the kernel's receive time, not the moment this thread
//! woke up to read it; on a busy node that wake-up is most of the error otherwise. Pings are
//! stamped right before their own send, and where the kernel gives send timestamps
//! (`SO_TIMESTAMPING`, read back from the socket's error queue) the delays count from the
//! moment the ping left instead ([`Prober::on_sent`]).
//!
//! The packet is versioned: a ping is the original 32-byte format; a pong sets extension
//! flags in byte 5 ([`EXT_RECV_TIME`], [`EXT_COUNT`]) for the fields it carries. An old
//! prober ignores them; an old responder's pong (no flags) yields RTT/2 and round-trip
//! success.
//!
//! [`Prober`] is pure (time is passed in); [`run`] is the thread that drives it on
//! real sockets.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use acoa_shared::wire::{self, LinkMetrics, LinkSample, Message, Name, MAX_LINKS_PER_MESSAGE};
use ed25519_dalek::VerifyingKey;

pub const MAX_PEERS: usize = 256;
pub const MAX_INFLIGHT: usize = 256;
pub const PROBE_LEN: usize = 32;
const MAGIC: [u8; 4] = *b"ACP1";
const PING: u8 = 1;
const PONG: u8 = 2;
/// Weight of a new sample in the fast latency tracker (as TCP's SRTT).
const EWMA_ALPHA: f64 = 0.125;
/// One-way samples per peer the reported latency is the mean of (at most).
pub const LATENCY_WINDOW: usize = 32;
/// Samples kept when a level shift restarts the window.
const SHIFT_KEEP: usize = 6;
/// Replies per second the responder sends at most (and its burst).
const REPLY_RATE: f64 = 500.0;
/// Pong flag: bytes 24..32 hold the responder's receive time (wall clock, ns since 1970).
pub const EXT_RECV_TIME: u8 = 0x01;
/// Pong flag: bytes 6..8 hold how many pings the responder received from this prober's
/// address (wrapping).
pub const EXT_COUNT: u8 = 0x02;
/// At most one clock warning per peer in this time.
const CLOCK_WARN_EVERY_NS: u64 = 60_000_000_000;

/// How a latency sample is taken (config `[probe] clock`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Clocks may differ: a sample is half the round trip (both directions alike).
    #[default]
    Free,
    /// Clocks agree (GPS, PTP, NTP, one host): a sample is the forward one-way delay.
    Synchronized,
}

impl std::str::FromStr for ClockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "free" => Ok(ClockMode::Free),
            "synchronized" => Ok(ClockMode::Synchronized),
            _ => Err(format!("`{s}` is not free or synchronized")),
        }
    }
}

impl std::fmt::Display for ClockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockMode::Free => "free",
            ClockMode::Synchronized => "synchronized",
        })
    }
}

/// A probe packet: magic, kind, 3 bytes padding, sequence, sender's send time (ns).
pub fn encode_probe(kind: u8, seq: u64, t_ns: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..4].copy_from_slice(&MAGIC);
    p[4] = kind;
    p[8..16].copy_from_slice(&seq.to_be_bytes());
    p[16..24].copy_from_slice(&t_ns.to_be_bytes());
    p
}

/// A pong answering ping `seq` stamped `t_ns`, with the extensions that are given.
pub fn encode_pong(
    seq: u64,
    t_ns: u64,
    recv_wall_ns: Option<u64>,
    count: Option<u16>,
) -> [u8; PROBE_LEN] {
    let mut p = encode_probe(PONG, seq, t_ns);
    if let Some(w) = recv_wall_ns.filter(|w| *w != 0) {
        p[5] |= EXT_RECV_TIME;
        p[24..32].copy_from_slice(&w.to_be_bytes());
    }
    if let Some(c) = count {
        p[5] |= EXT_COUNT;
        p[6..8].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// A well-formed probe packet with its optional pong extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub kind: u8,
    pub seq: u64,
    pub t_ns: u64,
    /// The responder's receive time (wall clock ns), when the pong carries it.
    pub recv_wall_ns: Option<u64>,
    /// Pings the responder received from this prober (wrapping), when the pong carries it.
    pub count: Option<u16>,
}

/// Parses any probe packet: the original format and pongs with extensions (unknown
/// flag bits are ignored, so that later extensions stay readable).
pub fn parse_probe(b: &[u8]) -> Option<Probe> {
    let (kind, seq, t_ns) = decode_probe(b)?;
    let flags = if kind == PONG { b[5] } else { 0 };
    let recv = u64::from_be_bytes(b[24..32].try_into().ok()?);
    Some(Probe {
        kind,
        seq,
        t_ns,
        recv_wall_ns: (flags & EXT_RECV_TIME != 0 && recv != 0).then_some(recv),
        count: (flags & EXT_COUNT != 0).then(|| u16::from_be_bytes([b[6], b[7]])),
    })
}

/// The forward one-way delay in ms from our send time and the responder's receive time
/// (both wall clock ns): `Ok` when it lies within `[0, rtt_ms]`, else `Err(value)`: the
/// clocks disagree by more than the link's delay.
pub fn one_way_ms(sent_wall_ns: u64, recv_wall_ns: u64, rtt_ms: f64) -> Result<f64, f64> {
    let owd = (i128::from(recv_wall_ns) - i128::from(sent_wall_ns)) as f64 / 1e6;
    if (0.0..=rtt_ms).contains(&owd) {
        Ok(owd)
    } else {
        Err(owd)
    }
}

/// The wall clock in ns since 1970 (0 if the clock is before 1970).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A pong this many pings older than the latest is a reordered one; further back, the
/// numbering has restarted.
const REORDER_LIMIT: u32 = 256;

/// The kernel receive timestamps a probe socket delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelStamps {
    /// `SO_TIMESTAMPNS`: nanoseconds.
    Nanoseconds,
    /// `SO_TIMESTAMP`: microseconds (qemu's user-mode emulation knows only this one).
    Microseconds,
    /// None: a datagram's arrival is when the thread reads it.
    Off,
}

/// Turns on the kernel's receive timestamps on the probe socket: `SO_TIMESTAMPNS`, else
/// `SO_TIMESTAMP`; [`KernelStamps::Off`] where the system refuses both.
pub fn enable_kernel_stamps(sock: &UdpSocket) -> KernelStamps {
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(sock, sockopt::ReceiveTimestampns, &true).is_ok() {
        KernelStamps::Nanoseconds
    } else if setsockopt(sock, sockopt::ReceiveTimestamp, &true).is_ok() {
        KernelStamps::Microseconds
    } else {
        KernelStamps::Off
    }
}

/// Turns on the kernel's software send timestamps (`SO_TIMESTAMPING`, returned with the sent
/// packet on the socket's error queue, read by [`recv_send_stamp`]); false where the system
/// refuses (qemu's user-mode emulation does).
pub fn enable_send_stamps(sock: &UdpSocket) -> bool {
    use nix::sys::socket::{setsockopt, sockopt, TimestampingFlag};
    let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::from_bits_retain(nix::libc::SOF_TIMESTAMPING_TX_SCHED);
    setsockopt(sock, sockopt::Timestamping, &flags).is_ok()
}

/// One sent packet back from the socket's error queue with its kernel send time (wall clock
/// ns, `None` if the entry carried none): the packet fills `buf[..len]` as the kernel returns
/// it (IP and UDP headers, on some devices a link header, then the payload: the payload is its
/// tail). `Ok(None)` when the queue is empty.
pub fn recv_sent(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Option<u64>)>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(
        nix::sys::socket::Timestamps,
        nix::libc::sock_extended_err,
        nix::libc::sockaddr_in6
    );
    let msg = match recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(m) => m,
        Err(nix::errno::Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampsns(ts) = c {
                stamp = timespec_ns(&ts.system);
            }
        }
    }
    // A truncated packet's tail is not its payload's.
    let len = if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        0
    } else {
        msg.bytes
    };
    Ok(Some((len, stamp)))
}

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
    let seq = (n >= PROBE_LEN)
        .then(|| parse_probe(&buf[n - PROBE_LEN..n]))
        .flatten()
        .filter(|p| p.kind == PING)
        .map(|p| p.seq);
    Ok(Some((seq, stamp)))
}

fn timespec_ns(ts: &nix::sys::time::TimeSpec) -> Option<u64> {
    let ns = i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec());
    u64::try_from(ns).ok().filter(|n| *n != 0)
}

/// Receives a datagram with the kernel's receive time (wall clock ns) when the socket has
/// receive timestamps on ([`enable_kernel_stamps`]): the time the datagram arrived, not when
/// this thread woke up.
pub fn recv_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<u64>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    // Room for both stamps a socket with send timestamps on also gets with each datagram
    // (SCM_TIMESTAMPNS and SCM_TIMESTAMPING): a truncated control buffer yields none.
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec, nix::sys::socket::Timestamps);
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .map_err(std::io::Error::from)?;
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampns(ts) => stamp = timespec_ns(&ts),
                ControlMessageOwned::ScmTimestamp(tv) => {
                    let ns =
                        i128::from(tv.tv_sec()) * 1_000_000_000 + i128::from(tv.tv_usec()) * 1_000;
                    stamp = u64::try_from(ns).ok().filter(|n| *n != 0);
                }
                _ => {}
            }
        }
    }
    let from = msg.address.as_ref().and_then(|a| {
        a.as_sockaddr_in()
            .map(|v4| SocketAddr::from(*v4))
            .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6)))
    });
    let n = msg.bytes;
    let from = from.ok_or_else(|| std::io::Error::other("datagram without a source address"))?;
    Ok((n, from, stamp))
}

/// `(now_ns, wall_ns)` moved back to the kernel's receive time `kernel_wall_ns` when it is
/// plausible (at most 1 s ago; a clock step in between leaves both as they are).
pub fn backdate(now_ns: u64, wall_ns: u64, kernel_wall_ns: Option<u64>) -> (u64, u64) {
    match kernel_wall_ns {
        Some(k) if k <= wall_ns && wall_ns - k < 1_000_000_000 => {
            (now_ns.saturating_sub(wall_ns - k), k)
        }
        _ => (now_ns, wall_ns),
    }
}

/// One pong seen by the loss attribution: our ping's index, the responder's count and how
/// many pongs we had received in all.
#[derive(Debug, Clone, Copy)]
struct Mark {
    idx: u32,
    count: u16,
    answered: u32,
}

/// Splits round-trip loss into its two directions from the responder's counts, over the
/// span between an anchor pong and the latest one (`window` to `2 * window` pings).
#[derive(Debug, Clone, Default)]
pub struct DirLoss {
    anchor: Option<Mark>,
    mid: Option<Mark>,
    last: Option<Mark>,
}

impl DirLoss {
    /// A pong answering our ping number `idx` says the responder has received `count`
    /// pings from us; `answered` counts our pongs received, this one included.
    pub fn on_pong(&mut self, idx: u32, count: u16, answered: u32, window: usize) {
        let m = Mark {
            idx,
            count,
            answered,
        };
        if let Some(last) = self.last {
            let di = idx.wrapping_sub(last.idx);
            let behind = last.idx.wrapping_sub(idx);
            if di == 0 || behind <= REORDER_LIMIT {
                return; // a reordered (older) pong: nothing new
            }
            let dc = u32::from(count.wrapping_sub(last.count));
            if behind < di || dc == 0 || dc > di {
                // Our numbering restarted (far behind: the peer's stats were replaced), or
                // the responder restarted or forgot us: start over.
                *self = DirLoss::default();
            }
        }
        match (self.anchor, self.mid) {
            (None, _) | (_, None) => {
                self.anchor = Some(m);
                self.mid = Some(m);
            }
            (Some(_), Some(mid)) => {
                if idx.wrapping_sub(mid.idx) as usize >= window {
                    self.anchor = Some(mid);
                    self.mid = Some(m);
                }
            }
        }
        self.last = Some(m);
    }

    /// Of the pings that reached the responder in the span, the fraction whose pong came
    /// back; `None` before two pongs with counts.
    pub fn reverse_success(&self) -> Option<f64> {
        let (a, l) = (self.anchor?, self.last?);
        let arrived = l.count.wrapping_sub(a.count);
        if arrived == 0 {
            return None;
        }
        let back = l.answered.wrapping_sub(a.answered);
        Some((f64::from(back) / f64::from(arrived)).clamp(0.0, 1.0))
    }
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

/// Mean and (population) standard deviation.
fn mean_sd(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let (n, sum) = values.clone().fold((0u32, 0.0), |(n, s), v| (n + 1, s + v));
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = sum / f64::from(n);
    let var = values.map(|v| (v - mean) * (v - mean)).sum::<f64>() / f64::from(n);
    (mean, var.sqrt())
}

/// Per-peer link statistics.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// The fast tracker (EWMA), which detects level shifts.
    tracker_ms: Option<f64>,
    /// The newest one-way samples, oldest first; the reported latency is their trimmed mean.
    recent: heapless::Deque<f32, LATENCY_WINDOW>,
    jitter_ms: f64,
    last_owd_ms: Option<f64>,
    /// Outcomes, newest in bit 0 (1 = answered).
    bits: u64,
    count: u32,
    /// Pings sent to this peer (wrapping): the index of the next one.
    sent: u32,
    /// Pongs received from this peer (wrapping).
    answered: u32,
    dir: DirLoss,
    /// Samples that fell back to RTT/2 since the last clock warning.
    clock_fallbacks: u32,
    last_clock_warn_ns: Option<u64>,
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

    /// A round trip of `rtt_ms`: a sample of RTT/2.
    pub fn on_reply(&mut self, rtt_ms: f64, window: usize) {
        self.on_sample(rtt_ms / 2.0, window);
    }

    /// A one-way latency sample of an answered probe.
    pub fn on_sample(&mut self, owd: f64, window: usize) {
        let ewma = match self.tracker_ms {
            None => owd,
            Some(l) => l + EWMA_ALPHA * (owd - l),
        };
        self.tracker_ms = Some(ewma);
        if self.recent.is_full() {
            self.recent.pop_front();
        }
        let _ = self.recent.push_back(owd as f32);
        // A level shift: the tracker leaves the window's mean by more than three of its own
        // standard deviations (sd * sqrt(a / (2 - a)) for white noise) plus 0.05 ms. The
        // window restarts from the newest run of samples nearer the tracker than the old mean
        // (at most SHIFT_KEEP, at least the newest).
        let n = self.recent.len();
        if n > SHIFT_KEEP {
            let (mean, sd) = mean_sd(self.recent.iter().map(|v| f64::from(*v)));
            let noise = sd * (EWMA_ALPHA / (2.0 - EWMA_ALPHA)).sqrt();
            if (ewma - mean).abs() > 3.0 * noise + 0.05 {
                let keep = self
                    .recent
                    .iter()
                    .rev()
                    .take(SHIFT_KEEP)
                    .take_while(|v| (f64::from(**v) - ewma).abs() < (f64::from(**v) - mean).abs())
                    .count()
                    .max(1);
                while self.recent.len() > keep {
                    self.recent.pop_front();
                }
                // The tracker restarts at the new level (else it would trigger again and
                // again while it catches up).
                self.tracker_ms = Some(mean_sd(self.recent.iter().map(|v| f64::from(*v))).0);
            }
        }
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

    /// The recent one-way samples' mean less their highest and lowest eighth (a trimmed
    /// mean: one late packet on a quiet link does not move it; `None` before the first).
    pub fn latency_ms(&self) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: heapless::Vec<f32, LATENCY_WINDOW> = self.recent.iter().copied().collect();
        v.sort_unstable_by(|a, b| a.total_cmp(b));
        let k = v.len() / 8;
        Some(mean_sd(v[k..v.len() - k].iter().map(|x| f64::from(*x))).0)
    }

    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ms
    }

    pub fn samples(&self) -> u32 {
        self.count
    }

    /// Success of the direction to the peer: the round-trip success over the window
    /// divided by the reverse direction's success, when the responder counts; else the
    /// round-trip success.
    pub fn success(&self) -> f64 {
        let rt = self.round_trip_success();
        match self.dir.reverse_success() {
            Some(r) if r > 0.0 => (rt / r).clamp(0.0, 1.0),
            _ => rt,
        }
    }

    /// Fraction answered over the window (1 when nothing was sent yet).
    pub fn round_trip_success(&self) -> f64 {
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
    Reply([u8; PROBE_LEN]),
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
    peers: heapless::Vec<PeerEntry, MAX_PEERS>,
    order: heapless::Vec<u16, MAX_PEERS>,
    cursor: usize,
    inflight: heapless::Deque<InFlight, MAX_INFLIGHT>,
    next_seq: u64,
    generation: u64,
    last_frame: Option<Vec<u8>>,
    rng: u64,
    clock: ClockMode,
    /// The responder's count of pings per prober address (least recently seen evicted).
    seen: heapless::Vec<Seen, MAX_PEERS>,
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
            seen: heapless::Vec::new(),
        }
    }

    /// The same prober taking its latency samples the `clock` way.
    pub fn with_clock(mut self, clock: ClockMode) -> Self {
        self.clock = clock;
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
        self.due_at(now_ns, 0)
    }

    /// [`Prober::due`], also knowing the wall clock at sending (`wall_ns`, 0 = unknown).
    pub fn due_at(&mut self, now_ns: u64, wall_ns: u64) -> Vec<(SocketAddr, [u8; PROBE_LEN])> {
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
    pub fn next_ping(
        &mut self,
        now_ns: u64,
        wall_ns: u64,
    ) -> Option<(SocketAddr, [u8; PROBE_LEN])> {
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
        Some((peer.addr, encode_probe(PING, seq, now_ns)))
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
            return Received::Reply(encode_pong(seq, t_ns, Some(wall_ns), count));
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

    /// A normal draw (Box-Muller over a small LCG): deterministic noise for the tests.
    fn normal(state: &mut u64) -> f64 {
        let mut u = || {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let (u1, u2) = (u(), u());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    #[test]
    fn a_jittery_link_reads_steadily_and_a_changed_one_is_followed_within_a_few_samples() {
        // 20 ms with 1.3 ms of noise (the railway table's longest links): over many runs the
        // reported latency after 64 samples stays within 5 % far more often than TCP's EWMA
        // (sd 0.26 sigma) would; the window mean's sd is sigma / sqrt(32).
        let mut rng = 7u64;
        let mut worst = 0.0f64;
        for _ in 0..300 {
            let mut s = LinkStats::default();
            for _ in 0..64 {
                s.on_sample(20.0 + 1.3 * normal(&mut rng), 64);
            }
            worst = worst.max((s.latency_ms().unwrap() - 20.0).abs());
        }
        assert!(worst < 1.0, "worst error {worst} ms over 300 runs");
        // A step from 1 ms to 6 ms on a quiet link: the old level is forgotten within 8 samples.
        let mut s = LinkStats::default();
        for _ in 0..40 {
            s.on_sample(1.0 + 0.03 * normal(&mut rng), 64);
        }
        // (One packet 2.5 ms late on it first: the trimmed mean does not move.)
        s.on_sample(3.5, 64);
        assert!(
            (s.latency_ms().unwrap() - 1.0).abs() < 0.02,
            "{:?}",
            s.latency_ms()
        );
        for i in 1..=8 {
            s.on_sample(6.0 + 0.03 * normal(&mut rng), 64);
            if i == 8 {
                let got = s.latency_ms().unwrap();
                assert!((got - 6.0).abs() < 0.1, "after {i} samples: {got}");
            }
        }
        // And the same step on a jittery link: followed within 12 samples (to 10 %).
        let mut s = LinkStats::default();
        for _ in 0..40 {
            s.on_sample(20.0 + 1.3 * normal(&mut rng), 64);
        }
        for _ in 0..12 {
            s.on_sample(30.0 + 1.3 * normal(&mut rng), 64);
        }
        let got = s.latency_ms().unwrap();
        assert!((got - 30.0).abs() < 3.0, "{got}");
        // Settled at the new level: the window fills again (no restarts on mere noise).
        for _ in 0..LATENCY_WINDOW {
            s.on_sample(30.0 + 1.3 * normal(&mut rng), 64);
        }
        assert_eq!(s.recent.len(), LATENCY_WINDOW);
        assert!((s.latency_ms().unwrap() - 30.0).abs() < 1.0);
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

    #[test]
    fn pongs_carry_extensions_and_old_formats_still_work() {
        let pong = encode_pong(7, 99, Some(123_456), Some(65535));
        assert_eq!(
            parse_probe(&pong),
            Some(Probe {
                kind: PONG,
                seq: 7,
                t_ns: 99,
                recv_wall_ns: Some(123_456),
                count: Some(65535),
            })
        );
        // An old prober reads the same pong.
        assert_eq!(decode_probe(&pong), Some((PONG, 7, 99)));
        // An old responder's pong (no flags): no extensions.
        let old = encode_probe(PONG, 7, 99);
        let p = parse_probe(&old).unwrap();
        assert_eq!((p.recv_wall_ns, p.count), (None, None));
        // An old-format ping gets an answer with the extensions.
        let mut r = Prober::new("me", cp().verifying_key(), 10, 1, 500);
        let from: SocketAddr = "10.0.0.1:5".parse().unwrap();
        let Received::Reply(pong) = r.on_datagram(&encode_probe(PING, 3, 4), Some(from), 1, 1_000)
        else {
            panic!()
        };
        let p = parse_probe(&pong).unwrap();
        assert_eq!((p.seq, p.t_ns), (3, 4));
        assert_eq!((p.recv_wall_ns, p.count), (Some(1_000), Some(1)));
        // Flags on a ping mean nothing.
        let mut ping = encode_probe(PING, 1, 2);
        ping[5] = 0xff;
        assert_eq!(parse_probe(&ping).unwrap().count, None);
    }

    #[test]
    fn one_way_estimates_are_bounded_by_the_round_trip() {
        assert_eq!(one_way_ms(1_000_000, 3_000_000, 10.0), Ok(2.0));
        assert_eq!(one_way_ms(1_000_000, 1_000_000, 10.0), Ok(0.0));
        assert_eq!(one_way_ms(1_000_000, 11_000_000, 10.0), Ok(10.0));
        assert_eq!(one_way_ms(3_000_000, 1_000_000, 10.0), Err(-2.0));
        assert_eq!(one_way_ms(1_000_000, 12_000_000, 10.0), Err(11.0));
        assert_eq!(
            one_way_ms(0, u64::MAX, 10.0).map_err(|v| v > 1e9),
            Err(true)
        );
    }

    /// Ping from `a` at (mono `t0`, wall `w0`); the responder stamps `recv_wall`; the pong
    /// is back at mono `t0 + rtt_ms`.
    fn exchange(
        a: &mut Prober,
        b: &mut Prober,
        t0: u64,
        w0: u64,
        recv_wall: u64,
        rtt_ms: f64,
    ) -> Received {
        let (_, ping) = a.due_at(t0, w0)[0];
        let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
        let Received::Reply(pong) = b.on_datagram(&ping, Some(from), t0, recv_wall) else {
            panic!("no reply")
        };
        a.on_datagram(&pong, None, t0 + (rtt_ms * 1e6) as u64, 0)
    }

    #[test]
    fn synchronized_clocks_give_the_forward_delay_free_clocks_half_the_round_trip() {
        let key = cp().verifying_key();
        let w0 = 1_700_000_000_000_000_000u64;
        for (clock, expected) in [(ClockMode::Synchronized, 2.0), (ClockMode::Free, 5.0)] {
            let mut a = Prober::new("me", key, 10, 1, 500).with_clock(clock);
            a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
            let mut b = Prober::new("p0", key, 10, 1, 500);
            for i in 0..10u64 {
                let t0 = i * 1_000_000_000;
                // 2 ms out (plus 0.1 ms of alternating noise), 8 ms back.
                let out = 2_000_000 + (i % 2) * 100_000;
                let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + out, 10.0);
                assert_eq!(r, Received::Recorded);
            }
            let s = a.stats("p0").unwrap();
            assert!(
                (s.latency_ms().unwrap() - expected).abs() < 0.06,
                "{clock}: {:?}",
                s.latency_ms()
            );
            if clock == ClockMode::Synchronized {
                // RFC 3550 on the one-way samples: |D| = 0.1 ms each time.
                assert!(
                    s.jitter_ms() > 0.03 && s.jitter_ms() < 0.1,
                    "{}",
                    s.jitter_ms()
                );
            } else {
                assert_eq!(s.jitter_ms(), 0.0);
            }
        }
    }

    #[test]
    fn clocks_that_disagree_fall_back_to_half_the_round_trip_with_a_rate_limited_warning() {
        let key = cp().verifying_key();
        let mut a = Prober::new("me", key, 10, 1, 500).with_clock(ClockMode::Synchronized);
        a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        let mut b = Prober::new("p0", key, 10, 1, 500);
        let w0 = 1_700_000_000_000_000_000u64;
        // The peer's clock is 50 ms behind: a negative one-way delay.
        let Received::RecordedWithWarning(line) =
            exchange(&mut a, &mut b, 0, w0, w0 - 50_000_000, 10.0)
        else {
            panic!("no warning")
        };
        assert!(line.contains("p0") && line.contains("rtt/2"), "{line}");
        assert!((a.stats("p0").unwrap().latency_ms().unwrap() - 5.0).abs() < 1e-9);
        // 50 ms ahead: beyond the round trip; warned about again only a minute later.
        for i in 1..30u64 {
            let t0 = i * 1_000_000_000;
            let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + 50_000_000, 10.0);
            assert_eq!(r, Received::Recorded, "probe {i}");
        }
        let t0 = 61_000_000_000;
        let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + 50_000_000, 10.0);
        let Received::RecordedWithWarning(line) = r else {
            panic!("{r:?}")
        };
        assert!(line.contains("30 such samples"), "{line}");
        assert!((a.stats("p0").unwrap().latency_ms().unwrap() - 5.0).abs() < 1e-9);
        // A peer whose pongs carry no receive time (an older agent): RTT/2, no warning.
        let mut c = Prober::new("me", key, 10, 1, 500).with_clock(ClockMode::Synchronized);
        c.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        let (_, ping) = c.due_at(0, w0)[0];
        let Received::Reply(pong) = b.on_packet(&ping, 0) else {
            panic!()
        };
        let mut old = pong;
        old[5] = 0;
        assert_eq!(c.on_datagram(&old, None, 6_000_000, 0), Received::Recorded);
        assert!((c.stats("p0").unwrap().latency_ms().unwrap() - 3.0).abs() < 1e-9);
    }

    /// 200 probes with every `fwd`th ping and every `rev`th pong lost (0 = none): the
    /// success the prober reports and its round-trip success.
    fn lossy_run(fwd: u64, rev: u64, counting: bool) -> (f64, f64) {
        let key = cp().verifying_key();
        let mut a = Prober::new("me", key, 20, 1, 500);
        a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        let mut b = Prober::new("p0", key, 20, 1, 500);
        let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
        let mut pongs = 0u64;
        for i in 1..=200u64 {
            let t0 = i * 1_000_000_000;
            a.expire(t0);
            let (_, ping) = a.due_at(t0, t0)[0];
            if fwd > 0 && i.is_multiple_of(fwd) {
                continue;
            }
            let Received::Reply(pong) =
                b.on_datagram(&ping, counting.then_some(from), t0, t0 + 1_000_000)
            else {
                panic!()
            };
            pongs += 1;
            if rev > 0 && pongs.is_multiple_of(rev) {
                continue;
            }
            a.on_datagram(&pong, None, t0 + 2_000_000, 0);
        }
        a.expire(1_000_000_000_000);
        let s = a.stats("p0").unwrap();
        (s.success(), s.round_trip_success())
    }

    #[test]
    fn loss_is_attributed_to_its_direction() {
        // Pings lost on the way out: the forward direction is lossy.
        let (fwd, rt) = lossy_run(5, 0, true);
        assert!(
            (rt - 0.8).abs() < 0.051 && (fwd - rt).abs() < 1e-9,
            "{fwd} {rt}"
        );
        // Pongs lost on the way back: the forward direction is clean.
        let (fwd, rt) = lossy_run(0, 4, true);
        assert!((rt - 0.75).abs() < 0.051, "{rt}");
        assert!((fwd - 1.0).abs() < 0.06, "{fwd}");
        // Both: 0.8 out, 0.75 back.
        let (fwd, rt) = lossy_run(5, 4, true);
        assert!((rt - 0.6).abs() < 0.06, "{rt}");
        assert!((fwd - 0.8).abs() < 0.06, "{fwd}");
        // A responder that does not count: round-trip success.
        let (fwd, rt) = lossy_run(0, 4, false);
        assert_eq!(fwd, rt);
    }

    #[test]
    fn a_dead_peer_goes_to_zero_and_a_restarted_responder_is_followed() {
        let mut d = DirLoss::default();
        for i in 0..30u32 {
            d.on_pong(i, (i + 1) as u16, i + 1, 10);
        }
        assert_eq!(d.reverse_success(), Some(1.0));
        // The responder restarted: its count starts again at 1.
        d.on_pong(30, 1, 31, 10);
        assert_eq!(d.reverse_success(), None);
        d.on_pong(31, 2, 32, 10);
        assert_eq!(d.reverse_success(), Some(1.0));
        // A reordered older pong changes nothing.
        d.on_pong(29, 5, 33, 10);
        assert_eq!(d.reverse_success(), Some(1.0));
        // The pings' numbering restarted (the peer's stats were replaced): follow it.
        let mut r = DirLoss::default();
        r.on_pong(5000, 100, 1, 10);
        r.on_pong(0, 101, 2, 10);
        r.on_pong(1, 102, 3, 10);
        assert_eq!(r.reverse_success(), Some(1.0));
        // Wrapping counts.
        let mut w = DirLoss::default();
        w.on_pong(0, 65535, 1, 10);
        w.on_pong(2, 1, 2, 10);
        assert_eq!(w.reverse_success(), Some(0.5));
        // A peer that stops answering: the round-trip window empties, so does success.
        let mut s = LinkStats::default();
        for i in 0..10u32 {
            s.answered += 1;
            s.dir.on_pong(i, (i + 1) as u16, s.answered, 10);
            s.on_reply(2.0, 10);
        }
        for _ in 0..10 {
            s.on_loss(10);
        }
        assert_eq!(s.success(), 0.0);
    }

    #[test]
    fn the_responder_table_is_bounded() {
        let mut r = Prober::new("me", cp().verifying_key(), 10, 1, 500);
        let ping = encode_probe(PING, 1, 1);
        for i in 0..(MAX_PEERS as u64 + 50) {
            let from = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 7878));
            assert!(matches!(
                r.on_datagram(&ping, Some(from), i, i),
                Received::Reply(_)
            ));
        }
        assert_eq!(r.seen.len(), MAX_PEERS);
        // The most recent prober is still counted.
        let last = SocketAddr::from(([10, 0, 1, 49], 7878));
        let Received::Reply(p) = r.on_datagram(&ping, Some(last), 1000, 1000) else {
            panic!()
        };
        assert_eq!(parse_probe(&p).unwrap().count, Some(2));
    }

    #[test]
    fn the_kernel_receive_time_is_when_the_datagram_arrived() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(enable_kernel_stamps(&rx), KernelStamps::Nanoseconds);
        // The kernel turns its receive stamping on a moment later (deferred work): until
        // then the stamp is the time of the recvmsg call. Retry for up to 5 s.
        let mut buf = [0u8; 16];
        let mut late_ms = 0.0;
        for _ in 0..50 {
            tx.send_to(b"ping", rx.local_addr().unwrap()).unwrap();
            // The receiving thread wakes up late: the stamp is still the arrival.
            std::thread::sleep(Duration::from_millis(50));
            let (n, from, stamp) = recv_stamped(&rx, &mut buf).unwrap();
            assert_eq!((n, from), (4, tx.local_addr().unwrap()));
            late_ms = (wall_ns() - stamp.expect("a kernel stamp")) as f64 / 1e6;
            if late_ms >= 45.0 {
                break;
            }
        }
        assert!((45.0..5000.0).contains(&late_ms), "{late_ms}");
        // Without the option: no stamp; a timeout is WouldBlock as with recv_from.
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", plain.local_addr().unwrap()).unwrap();
        assert_eq!(recv_stamped(&plain, &mut buf).unwrap().2, None);
        plain
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let e = recv_stamped(&plain, &mut buf).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        );
    }

    #[test]
    fn a_kernel_send_time_moves_both_delays_to_when_the_ping_left() {
        let key = cp().verifying_key();
        let w0 = 1_700_000_000_000_000_000u64;
        let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
        for (clock, expected) in [(ClockMode::Synchronized, 1.0), (ClockMode::Free, 1.0)] {
            let mut a = Prober::new("me", key, 10, 1, 500).with_clock(clock);
            a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
            let mut b = Prober::new("p0", key, 10, 1, 500);
            // Stamped at t0, left 0.3 ms later (a slow send path), 1 ms each way.
            let (t0, lag) = (5_000_000_000u64, 300_000u64);
            let (_, ping) = a.due_at(t0, w0)[0];
            let seq = parse_probe(&ping).unwrap().seq;
            a.on_sent(seq, w0 - 5); // before the stamp: ignored
            a.on_sent(seq, w0 + 2_000_000_000); // a clock step: ignored
            a.on_sent(seq + 1, w0 + lag); // another ping: ignored
            a.on_sent(seq, w0 + lag / 2); // entering the queue
            a.on_sent(seq, w0 + lag); // leaving the device: the latest counts
            a.on_sent(seq, w0 + lag / 3);
            let recv = w0 + lag + 1_000_000;
            let Received::Reply(pong) = b.on_datagram(&ping, Some(from), t0, recv) else {
                panic!("no reply")
            };
            let r = a.on_datagram(&pong, None, t0 + lag + 2_000_000, 0);
            assert_eq!(r, Received::Recorded);
            let got = a.stats("p0").unwrap().latency_ms().unwrap();
            assert!((got - expected).abs() < 1e-9, "{clock}: {got}");
        }
    }

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
        let before = wall_ns();
        tx.send_to(b"ping", both.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0u8; 16];
        let (_, _, stamp) = recv_stamped(&both, &mut buf).unwrap();
        let stamp = stamp.expect("a receive stamp beside the send-stamping flags");
        assert!(
            stamp >= before && wall_ns() - stamp >= 15_000_000,
            "{before} {stamp}"
        );
    }

    #[test]
    fn microsecond_receive_stamps_are_read_where_nanoseconds_are_refused() {
        // qemu's user-mode emulation refuses SO_TIMESTAMPNS but translates SO_TIMESTAMP.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::ReceiveTimestamp, &true)
            .unwrap();
        let mut buf = [0u8; 16];
        let before = wall_ns() / 1000 * 1000;
        tx.send_to(b"ping", rx.local_addr().unwrap()).unwrap();
        let (n, _, stamp) = recv_stamped(&rx, &mut buf).unwrap();
        let stamp = stamp.expect("a microsecond stamp");
        assert_eq!(n, 4);
        assert_eq!(stamp % 1000, 0);
        assert!((before..=wall_ns()).contains(&stamp), "{before} <= {stamp}");
    }

    #[test]
    fn backdating_moves_both_clocks_to_the_arrival() {
        assert_eq!(backdate(10_000, 50_000, Some(48_000)), (8_000, 48_000));
        assert_eq!(backdate(10_000, 50_000, None), (10_000, 50_000));
        // A stamp from the future or from long ago (clock stepped): ignored.
        assert_eq!(backdate(10_000, 50_000, Some(60_000)), (10_000, 50_000));
        let w = 5_000_000_000;
        assert_eq!(backdate(10, w, Some(w - 2_000_000_000)), (10, w));
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
