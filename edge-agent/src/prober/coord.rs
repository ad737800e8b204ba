//! The agent's network coordinate ([`AgentCoord`]): Vivaldi with a height, the moving-median
//! and RELATIVE filters of `acoa_shared::coords`, fed with the round trips of the prober's
//! pongs that carry the peer's coordinate ([`super::packet::EXT_COORD`]).
//!
//! Invariant: only samples of peers outside the node's own group are given to the coordinate
//! (their list entry's [`acoa_shared::wire::Peer::group`] is false); a peer coordinate that does
//! not check out (not finite, negative height or error) or a sample the coordinate refuses
//! changes nothing; fixed size (`AgentCoords`: 256 filtered peers, no heap).

use acoa_shared::coords::{AgentCoords, VivaldiConfig};
use acoa_shared::wire::{Name, WireCoord};

/// A peer's key in the coordinate's filters: FNV-1a of its name (a collision only merges two
/// peers' median windows).
fn peer_key(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

pub struct AgentCoord {
    node: Box<AgentCoords>,
}

impl AgentCoord {
    /// At the origin with the largest error; `seed` from the node's name.
    pub fn new(seed: u64) -> Self {
        AgentCoord {
            node: Box::new(AgentCoords::new(VivaldiConfig::default(), seed)),
        }
    }

    /// One round trip `rtt_ms` to `peer`, whose pong carried `remote`. Returns whether the
    /// reported coordinate changed.
    pub fn on_sample(&mut self, peer: &Name, rtt_ms: f64, remote: &WireCoord) -> bool {
        let Ok(remote) = remote.to_coord() else {
            return false;
        };
        // one-way milliseconds, as links are reported (`coords`: units)
        self.node
            .observe(peer_key(peer), rtt_ms / 2.0, &remote)
            .unwrap_or(false)
    }

    /// A peer left the list: its filter goes.
    pub fn forget(&mut self, peer: &Name) {
        self.node.forget(peer_key(peer));
    }

    /// The coordinate pongs carry: the origin with the largest error before any sample (what
    /// lets a fleet of new agents start: Vivaldi pushes coincident nodes apart).
    pub fn current(&self) -> WireCoord {
        WireCoord::from_coord(self.node.coordinate())
    }

    /// The coordinate to report; `None` before the first sample.
    pub fn reported(&self) -> Option<WireCoord> {
        (self.node.samples() > 0).then(|| self.current())
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.node.samples()
    }
}
