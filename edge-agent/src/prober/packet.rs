//! The probe packet: 32 bytes, `ACP1`, kind (ping 1, pong 2), flags, sequence number and the
//! prober's send time; a pong sets flags in byte 5 for the extensions it carries
//! ([`EXT_RECV_TIME`]: the responder's receive time in bytes 24..32, [`EXT_COUNT`]: its count of
//! this prober's pings in bytes 6..8).
//!
//! Coordinates (wire v5): a ping of [`PROBE_LEN_COORD`] bytes with [`EXT_COORD`] set asks for
//! the responder's network coordinate; the pong is as long (no amplification) and carries it
//! in bytes 32.. ([`acoa_shared::wire::WireCoord::to_bytes`]) with the same flag, or the flag
//! clear while the responder has none yet. A 32-byte ping gets a 32-byte pong, as before.
//!
//! Invariant: a packet parses only when it is exactly [`PROBE_LEN`] or [`PROBE_LEN_COORD`]
//! bytes with the magic and a known kind; parsing never panics; unknown flag bits are ignored and a pong without flags (an
//! older responder's) is still a pong, so old and new agents keep answering each other.

use acoa_shared::wire::{WireCoord, COORD_BYTES};

pub const PROBE_LEN: usize = 32;
/// A ping asking for the responder's coordinate, and its pong.
pub const PROBE_LEN_COORD: usize = PROBE_LEN + COORD_BYTES;
const MAGIC: [u8; 4] = *b"ACP1";
pub(crate) const PING: u8 = 1;
pub(crate) const PONG: u8 = 2;
/// Pong flag: bytes 24..32 hold the responder's receive time (wall clock, ns since 1970).
pub const EXT_RECV_TIME: u8 = 0x01;
/// Pong flag: bytes 6..8 hold how many pings the responder received from this prober's
/// address (wrapping).
pub const EXT_COUNT: u8 = 0x02;
/// Ping flag: send your coordinate back; pong flag: bytes 32.. hold the responder's
/// coordinate. Only in packets of [`PROBE_LEN_COORD`] bytes.
pub const EXT_COORD: u8 = 0x04;

/// A probe packet of either length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    buf: [u8; PROBE_LEN_COORD],
    len: usize,
}

impl std::ops::Deref for Packet {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::DerefMut for Packet {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl Packet {
    fn short(p: [u8; PROBE_LEN]) -> Self {
        let mut buf = [0u8; PROBE_LEN_COORD];
        buf[..PROBE_LEN].copy_from_slice(&p);
        Packet {
            buf,
            len: PROBE_LEN,
        }
    }
}

/// A ping asking for the responder's coordinate ([`PROBE_LEN_COORD`] bytes).
pub fn encode_ping_coord(seq: u64, t_ns: u64) -> Packet {
    let mut p = Packet::short(encode_probe(PING, seq, t_ns));
    p.buf[5] |= EXT_COORD;
    p.len = PROBE_LEN_COORD;
    p
}

/// The pong to a ping of `ping_len` bytes: as long as the ping, with the extensions given
/// (`coord` only in a long one).
pub fn encode_reply(
    ping_len: usize,
    seq: u64,
    t_ns: u64,
    recv_wall_ns: Option<u64>,
    count: Option<u16>,
    coord: Option<&WireCoord>,
) -> Packet {
    let mut p = Packet::short(encode_pong(seq, t_ns, recv_wall_ns, count));
    if ping_len == PROBE_LEN_COORD {
        p.len = PROBE_LEN_COORD;
        if let Some(c) = coord {
            p.buf[5] |= EXT_COORD;
            p.buf[PROBE_LEN..].copy_from_slice(&c.to_bytes());
        }
    }
    p
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    pub kind: u8,
    pub seq: u64,
    pub t_ns: u64,
    /// The responder's receive time (wall clock ns), when the pong carries it.
    pub recv_wall_ns: Option<u64>,
    /// Pings the responder received from this prober (wrapping), when the pong carries it.
    pub count: Option<u16>,
    /// The responder's coordinate, when the pong carries it (unchecked: see
    /// [`WireCoord::to_coord`]).
    pub coord: Option<WireCoord>,
    /// The packet's length: [`PROBE_LEN`] or [`PROBE_LEN_COORD`].
    pub len: usize,
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
        coord: (flags & EXT_COORD != 0 && b.len() == PROBE_LEN_COORD)
            .then(|| WireCoord::from_bytes(&b[PROBE_LEN..]))
            .flatten(),
        len: b.len(),
    })
}

/// `(kind, seq, t_ns)` of a well-formed probe packet.
pub fn decode_probe(b: &[u8]) -> Option<(u8, u64, u64)> {
    if !(b.len() == PROBE_LEN || b.len() == PROBE_LEN_COORD)
        || b[..4] != MAGIC
        || !(b[4] == PING || b[4] == PONG)
    {
        return None;
    }
    let seq = u64::from_be_bytes(b[8..16].try_into().ok()?);
    let t = u64::from_be_bytes(b[16..24].try_into().ok()?);
    Some((b[4], seq, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_packets_round_trip_and_reject_junk() {
        let p = encode_probe(PING, 7, 99);
        assert_eq!(decode_probe(&p), Some((PING, 7, 99)));
        assert_eq!(decode_probe(&p[..31]), None);
        assert_eq!(decode_probe(&[0u8; 32]), None);
    }

    #[test]
    fn pongs_carry_extensions_and_old_formats_still_parse() {
        let pong = encode_pong(7, 99, Some(123_456), Some(65535));
        assert_eq!(
            parse_probe(&pong),
            Some(Probe {
                kind: PONG,
                seq: 7,
                t_ns: 99,
                recv_wall_ns: Some(123_456),
                count: Some(65535),
                coord: None,
                len: PROBE_LEN,
            })
        );
        // An old prober reads the same pong.
        assert_eq!(decode_probe(&pong), Some((PONG, 7, 99)));
        // An old responder's pong (no flags): no extensions.
        let old = encode_probe(PONG, 7, 99);
        let p = parse_probe(&old).unwrap();
        assert_eq!((p.recv_wall_ns, p.count), (None, None));
        // Flags on a ping mean nothing.
        let mut ping = encode_probe(PING, 1, 2);
        ping[5] = 0xff;
        assert_eq!(parse_probe(&ping).unwrap().count, None);
    }

    #[test]
    fn a_long_ping_gets_a_pong_as_long_with_the_coordinate() {
        let c = WireCoord {
            vec: [1.0, -2.5, 3.0],
            height: 4.0,
            error: 0.5,
        };
        let ping = encode_ping_coord(9, 77);
        assert_eq!(ping.len(), PROBE_LEN_COORD);
        let p = parse_probe(&ping).unwrap();
        assert_eq!((p.kind, p.seq, p.t_ns, p.coord), (PING, 9, 77, None));
        let pong = encode_reply(p.len, 9, 77, Some(5), Some(1), Some(&c));
        assert_eq!(pong.len(), PROBE_LEN_COORD, "no amplification");
        let q = parse_probe(&pong).unwrap();
        assert_eq!((q.kind, q.coord, q.count), (PONG, Some(c), Some(1)));
        // A responder without a coordinate yet: as long, no coordinate.
        let none = encode_reply(p.len, 9, 77, None, None, None);
        assert_eq!(
            (none.len(), parse_probe(&none).unwrap().coord),
            (PROBE_LEN_COORD, None)
        );
        // A short ping: a short pong, whatever the responder knows.
        let short = encode_reply(PROBE_LEN, 9, 77, None, None, Some(&c));
        assert_eq!(
            (short.len(), parse_probe(&short).unwrap().coord),
            (PROBE_LEN, None)
        );
        // Other lengths are not probes.
        assert_eq!(parse_probe(&ping[..40]), None);
    }
}
