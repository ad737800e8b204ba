//! A node's link metrics as the engine keeps them in its queue ([`LinkBatch`]): the wire's
//! [`LinkMetrics`] holds up to 64 samples inline, each peer's name in a 64-byte buffer (6.3 KB
//! a message whatever it carries); with a queue of 16,384 messages, a full queue held 100 MiB.
//! Here the peers' names are one string and the samples one vector, sized to what came: about
//! 1 KB for 32 peers.
//!
//! Invariant: the samples are the message's, in its order, each with its peer's name exactly.

use acoa_shared::wire::{LinkMetrics, WireCoord};

/// One peer's sample ([`acoa_shared::wire::LinkSample`] without the name).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerSample {
    /// Where its peer's name ends in [`LinkBatch::names`].
    end: u32,
    pub latency_ms: f32,
    pub jitter_ms: f32,
    pub success: f32,
    pub samples: u16,
    pub last_answer_ms: u32,
}

/// A node's verified link metrics, compact (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkBatch {
    pub node: String,
    pub seq: u64,
    pub run: u64,
    pub coord: Option<WireCoord>,
    /// The peers' names one after another.
    names: String,
    samples: Vec<PeerSample>,
}

impl LinkBatch {
    /// The samples, each with its peer's name, in the message's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PeerSample)> {
        let mut start = 0usize;
        self.samples.iter().map(move |s| {
            let end = s.end as usize;
            let peer = &self.names[start..end];
            start = end;
            (peer, s)
        })
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

impl From<&LinkMetrics> for LinkBatch {
    fn from(m: &LinkMetrics) -> LinkBatch {
        let mut names = String::with_capacity(m.links.iter().map(|s| s.peer.len()).sum());
        let samples = m
            .links
            .iter()
            .map(|s| {
                names.push_str(&s.peer);
                PeerSample {
                    // at most 64 names of 64 bytes
                    end: names.len() as u32,
                    latency_ms: s.latency_ms,
                    jitter_ms: s.jitter_ms,
                    success: s.success,
                    samples: s.samples,
                    last_answer_ms: s.last_answer_ms,
                }
            })
            .collect();
        LinkBatch {
            node: m.node.to_string(),
            seq: m.seq,
            run: m.run,
            coord: m.coord,
            names,
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::wire::{LinkSample, Name, MAX_LINKS_PER_MESSAGE};

    fn sample(peer: &str, i: u32) -> LinkSample {
        LinkSample {
            peer: Name::try_from(peer).unwrap(),
            latency_ms: i as f32 + 0.5,
            jitter_ms: i as f32 / 4.0,
            success: 1.0 - i as f32 / 100.0,
            samples: i as u16,
            last_answer_ms: i * 7,
        }
    }

    /// Every sample comes back with its peer's name and values, in order, whatever the names'
    /// lengths (empty, one byte, the longest a name may be), and the batch is smaller than the
    /// wire's message.
    #[test]
    fn a_batch_gives_back_every_sample_with_its_peer() {
        let long = "x".repeat(64);
        let peers: Vec<String> = (0..MAX_LINKS_PER_MESSAGE as u32)
            .map(|i| match i % 4 {
                0 => format!("peer-{i}"),
                1 => String::new(),
                2 => "é".to_string(),
                _ => long.clone(),
            })
            .collect();
        let mut m = LinkMetrics {
            node: Name::try_from("n1").unwrap(),
            seq: 9,
            run: 3,
            links: heapless::Vec::new(),
            coord: None,
        };
        for (i, p) in peers.iter().enumerate() {
            m.links.push(sample(p, i as u32)).unwrap();
        }
        let b = LinkBatch::from(&m);
        assert_eq!(
            (b.node.as_str(), b.seq, b.run, b.len()),
            ("n1", 9, 3, peers.len())
        );
        for ((peer, s), w) in b.iter().zip(&m.links) {
            assert_eq!(peer, w.peer.as_str());
            let got = (
                s.latency_ms,
                s.jitter_ms,
                s.success,
                s.samples,
                s.last_answer_ms,
            );
            let want = (
                w.latency_ms,
                w.jitter_ms,
                w.success,
                w.samples,
                w.last_answer_ms,
            );
            assert_eq!(got, want, "{peer}");
        }
        assert_eq!(b.iter().count(), peers.len());
        assert!(LinkBatch::from(&LinkMetrics {
            links: heapless::Vec::new(),
            ..m
        })
        .is_empty());
        assert!(std::mem::size_of::<PeerSample>() <= 24);
        assert!(
            std::mem::size_of::<LinkMetrics>() > 6_000,
            "what the wire type holds inline"
        );
    }
}
