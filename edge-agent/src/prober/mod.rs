//! Peer prober: UDP echo with timestamps.
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
//! One file per concern: [`packet`] (the probe packet's codec), [`clock`] (how a sample is
//! taken), [`linkstats`] (a peer's latency, jitter and success), [`machine`] (the pure
//! [`Prober`]: time is passed in), [`coord`] (the node's network coordinate, from the pongs
//! that carry the peer's) and [`thread`] ([`run`], which drives it on a real socket). The socket's kernel timestamps are the
//! `acoa-kstamp` crate's, shared with the testbed's reference prober.

pub mod clock;
pub mod coord;
pub mod linkstats;
pub mod machine;
pub mod packet;
pub mod thread;

pub use acoa_kstamp::{
    backdate, enable_kernel_stamps, enable_send_stamps, recv_sent, recv_stamped, wall_ns,
    KernelStamps,
};
pub use clock::{one_way_ms, ClockMode};
pub use coord::AgentCoord;
pub use linkstats::{DirLoss, LinkStats, LATENCY_WINDOW};
pub use machine::{Prober, Received, MAX_INFLIGHT, MAX_PEERS, MAX_PROBED};
pub use packet::{
    decode_probe, encode_ping_coord, encode_pong, encode_probe, encode_reply, parse_probe, Packet,
    Probe, EXT_COORD, EXT_COUNT, EXT_RECV_TIME, PROBE_LEN, PROBE_LEN_COORD,
};
pub use thread::{recv_send_stamp, run, ProbeIo, RunConfig};
