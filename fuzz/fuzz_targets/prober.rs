//! The prober's UDP packets and peer lists (`edge_agent::prober`): a script of events drives a
//! `Prober` (pure, time passed in): peer lists signed by the trusted key or not, periods that
//! send pings, pongs to them with any extensions and delays, pings from any address, any
//! datagram. Nothing panics; `parse_probe` agrees with `decode_probe` and reads back what
//! `encode_pong` wrote; the link metrics stay in range (latency and jitter finite and >= 0,
//! success in [0, 1]) and are wire messages that round-trip.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use acoa_fuzz::{check_message, signed_wire_frame, signing_key, verifying_key};
use acoa_shared::wire::{self, Message, Peer, PeerList, MAX_LINKS_PER_MESSAGE};
use edge_agent::prober::{
    decode_probe, encode_pong, parse_probe, ClockMode, Prober, Received, MAX_PROBED, PROBE_LEN,
    PROBE_LEN_COORD,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Script {
    window: u8,
    per_period: u8,
    timeout_ms: u16,
    synchronized: bool,
    ops: Vec<Op>,
}

#[derive(Debug, Arbitrary)]
enum Op {
    /// A peer list signed by the control plane: (name number, port) per peer.
    Peers {
        generation: u64,
        peers: Vec<(u8, u16)>,
        restored: bool,
    },
    /// Any bytes as the body of a signed peer-list frame.
    PeersBody(Vec<u8>),
    /// Any bytes as a peer-list frame.
    PeersFrame(Vec<u8>),
    /// Time passes, the period's pings go out; the kernel stamps their send some ns later.
    Period {
        advance_ms: u16,
        send_stamp_ns: Option<u32>,
    },
    /// A pong to one of the pings sent, with extensions (and any other flag bits).
    Pong {
        which: u16,
        after_us: u32,
        recv_wall_ns: Option<u64>,
        count: Option<u16>,
        extra_flags: u8,
        same_stamp: bool,
    },
    /// A ping from an address or not.
    Ping {
        seq: u64,
        t_ns: u64,
        from: Option<([u8; 4], u16)>,
    },
    /// Any datagram.
    Datagram(Vec<u8>),
    /// Time passes, timed-out pings count as lost.
    Expire { advance_ms: u16 },
}

const ME: &str = "me";
const WALL0: u64 = 1_700_000_000_000_000_000;

fuzz_target!(|s: Script| {
    let mut p = Prober::new(
        ME,
        *verifying_key(),
        usize::from(s.window),
        usize::from(s.per_period),
        u64::from(s.timeout_ms),
    );
    if s.synchronized {
        p = p.with_clock(ClockMode::Synchronized);
    }
    let mut now: u64 = 1_000_000_000;
    let mut sent: Vec<(u64, u64)> = Vec::new();
    for op in s.ops.iter().take(256) {
        match op {
            Op::Peers {
                generation,
                peers,
                restored,
            } => {
                let peers = peers
                    .iter()
                    .take(wire::MAX_PEERS_PER_NODE)
                    .map(|(n, port)| Peer {
                        node: wire::name(&format!("p{n}")).expect("short name"),
                        addr: wire::bounded("addr", &format!("127.0.0.{}:{port}", n % 4))
                            .expect("short address"),
                        group: n % 3 == 0,
                    })
                    .collect();
                let msg = Message::PeerList(Box::new(PeerList {
                    node: wire::name(ME).expect("short name"),
                    generation: *generation,
                    peers,
                }));
                let frame = wire::encode(&msg, Some(signing_key())).expect("peer list encodes");
                let _ = p.set_peers(&frame, *restored);
            }
            Op::PeersBody(body) => {
                let _ = p.set_peers(&signed_wire_frame(body), false);
            }
            Op::PeersFrame(frame) => {
                let _ = p.set_peers(frame, false);
            }
            Op::Period {
                advance_ms,
                send_stamp_ns,
            } => {
                now += u64::from(*advance_ms) * 1_000_000;
                let due = p.pings_due();
                let pings = p.due_at(now, WALL0 + now);
                assert!(pings.len() <= due);
                for (_, ping) in pings {
                    let (_, seq, t) = decode_probe(&ping).expect("our ping decodes");
                    if let Some(d) = send_stamp_ns {
                        p.on_sent(seq, WALL0 + now + u64::from(*d));
                    }
                    sent.push((seq, t));
                }
                if sent.len() > 1024 {
                    sent.drain(..512);
                }
            }
            Op::Pong {
                which,
                after_us,
                recv_wall_ns,
                count,
                extra_flags,
                same_stamp,
            } => {
                let Some(&(seq, t)) = sent.get(usize::from(*which) % sent.len().max(1)) else {
                    continue;
                };
                now += u64::from(*after_us) * 1_000;
                let t = if *same_stamp { t } else { t ^ 1 };
                let mut pong = encode_pong(seq, t, *recv_wall_ns, *count);
                let parsed = parse_probe(&pong).expect("our pong parses");
                assert_eq!((parsed.seq, parsed.t_ns), (seq, t));
                assert_eq!(parsed.recv_wall_ns, recv_wall_ns.filter(|w| *w != 0));
                assert_eq!(parsed.count, *count);
                pong[5] |= extra_flags & !0x03;
                assert_eq!(parse_probe(&pong), Some(parsed), "unknown flag bits matter");
                let _ = p.on_datagram(&pong, None, now, WALL0 + now);
            }
            Op::Ping { seq, t_ns, from } => {
                let ping = edge_agent::prober::encode_probe(1, *seq, *t_ns);
                let from = from
                    .map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)));
                match p.on_datagram(&ping, from, now, WALL0 + now) {
                    Received::Reply(pong) => {
                        let q = parse_probe(&pong).expect("our pong parses");
                        assert_eq!((q.seq, q.t_ns), (*seq, *t_ns));
                        assert_eq!(q.count.is_some(), from.is_some());
                    }
                    other => panic!("a ping was answered with {other:?}"),
                }
            }
            Op::Datagram(bytes) => {
                datagram(bytes);
                let _ = p.on_datagram(bytes, None, now, WALL0 + now);
            }
            Op::Expire { advance_ms } => {
                now += u64::from(*advance_ms) * 1_000_000;
                p.expire(now);
            }
        }
        assert!(p.peer_count() <= MAX_PROBED);
        check_metrics(&p, false, now);
    }
    check_metrics(&p, true, now);
});

fn datagram(bytes: &[u8]) {
    let decoded = decode_probe(bytes);
    let parsed = parse_probe(bytes);
    assert_eq!(
        decoded,
        parsed.map(|q| (q.kind, q.seq, q.t_ns)),
        "parse_probe and decode_probe disagree"
    );
    if parsed.is_some() {
        assert!(bytes.len() == PROBE_LEN || bytes.len() == PROBE_LEN_COORD);
    }
}

fn check_metrics(p: &Prober, round_trip: bool, now_ns: u64) {
    let node = wire::name("me").expect("short name");
    let mut seq = 0;
    for m in p.metrics(&node, &mut seq, now_ns) {
        assert!(m.links.len() <= MAX_LINKS_PER_MESSAGE);
        for l in &m.links {
            assert!(
                l.latency_ms.is_finite() && l.latency_ms >= 0.0,
                "latency {} ms to {}",
                l.latency_ms,
                l.peer
            );
            assert!(
                l.jitter_ms.is_finite() && l.jitter_ms >= 0.0,
                "jitter {} ms to {}",
                l.jitter_ms,
                l.peer
            );
            assert!(
                (0.0..=1.0).contains(&l.success),
                "success {} to {}",
                l.success,
                l.peer
            );
        }
        if round_trip {
            check_message(&Message::LinkMetrics(Box::new(m)));
        }
    }
}
