//! The probe packet: 32 bytes, `ACP1`, kind (ping 1, pong 2), flags, sequence number and the
//! prober's send time; a pong sets flags in byte 5 for the extensions it carries
//! ([`EXT_RECV_TIME`]: the responder's receive time in bytes 24..32, [`EXT_COUNT`]: its count of
//! this prober's pings in bytes 6..8).
//!
//! Invariant: a packet parses only when it is exactly [`PROBE_LEN`] bytes with the magic and a
//! known kind; parsing never panics; unknown flag bits are ignored and a pong without flags (an
//! older responder's) is still a pong, so old and new agents keep answering each other.

pub const PROBE_LEN: usize = 32;
const MAGIC: [u8; 4] = *b"ACP1";
pub(crate) const PING: u8 = 1;
pub(crate) const PONG: u8 = 2;
/// Pong flag: bytes 24..32 hold the responder's receive time (wall clock, ns since 1970).
pub const EXT_RECV_TIME: u8 = 0x01;
/// Pong flag: bytes 6..8 hold how many pings the responder received from this prober's
/// address (wrapping).
pub const EXT_COUNT: u8 = 0x02;

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

/// `(kind, seq, t_ns)` of a well-formed probe packet.
pub fn decode_probe(b: &[u8]) -> Option<(u8, u64, u64)> {
    if b.len() != PROBE_LEN || b[..4] != MAGIC || !(b[4] == PING || b[4] == PONG) {
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
}
