//! The agent's presence on `acoa/v1/nodes/{node}/online`: signed like every other message and
//! bound to one connection, so that the control plane takes an `offline` only for the node's
//! current connection (a will captured from an earlier one and published again is a replay).
//!
//! Before each connection attempt the agent sets the connection's last will to
//! [`Presence::will_for_next`] (the counter moves on: the will is signed in advance for that
//! connection); once connected it publishes [`Presence::online`], and on a clean shutdown
//! [`Presence::goodbye`], both of the same connection.
//!
//! Invariant: pure (no I/O); `(run, conn)` never goes back within a run, and the run counter is
//! persisted, so it never goes back over the node's life.

use acoa_shared::wire::{self, Message};
use ed25519_dalek::SigningKey;

/// The presence frames of one agent run.
pub struct Presence {
    node: wire::Name,
    key: SigningKey,
    run: u64,
    /// The connection the latest will was signed for (0 before the first).
    conn: u64,
}

impl Presence {
    pub fn new(node: &str, key: SigningKey, run: u64) -> Result<Presence, wire::WireError> {
        Ok(Presence {
            node: wire::name(node)?,
            key,
            run,
            conn: 0,
        })
    }

    /// The connection the frames are about now.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    fn frame(&self, online: bool) -> Vec<u8> {
        let msg = Message::Presence(wire::Presence {
            node: self.node.clone(),
            run: self.run,
            conn: self.conn,
            online,
        });
        // a presence is a few dozen bytes: it always encodes
        wire::encode(&msg, Some(&self.key)).unwrap_or_default()
    }

    /// The last will of the next connection: `offline`, signed now for that connection.
    pub fn will_for_next(&mut self) -> Vec<u8> {
        self.conn += 1;
        self.frame(false)
    }

    /// `online` for the current connection (the one the latest will was signed for).
    pub fn online(&self) -> Vec<u8> {
        self.frame(true)
    }

    /// `offline` for the current connection, published on a clean shutdown.
    pub fn goodbye(&self) -> Vec<u8> {
        self.frame(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(frame: &[u8], key: &SigningKey) -> wire::Presence {
        match wire::decode_verified(frame, &key.verifying_key()).unwrap() {
            Message::Presence(p) => p,
            other => panic!("{}", other.kind()),
        }
    }

    #[test]
    fn each_connection_has_its_own_signed_will_and_online() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let mut p = Presence::new("n13", key.clone(), 7).unwrap();
        let w1 = open(&p.will_for_next(), &key);
        let on1 = open(&p.online(), &key);
        assert_eq!((w1.run, w1.conn, w1.online), (7, 1, false));
        assert_eq!((on1.run, on1.conn, on1.online), (7, 1, true));
        assert_eq!(w1.node.as_str(), "n13");
        let w2 = open(&p.will_for_next(), &key);
        assert_eq!((w2.conn, w2.online), (2, false));
        assert_eq!(open(&p.goodbye(), &key).conn, 2);
        assert_eq!(p.conn(), 2);
        assert!(Presence::new(&"x".repeat(80), key, 1).is_err());
    }
}
