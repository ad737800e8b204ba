//! How far behind the control plane hears: once a second it publishes a loopback message on
//! each of its brokers and hears it back through the very path the fleet's messages take (the
//! broker, the socket, an ingest task, the engine's queue). How long the oldest loopback not yet
//! back has been out is how late the control plane hears anything, its own lag; silence is
//! judged that much later (`disconnect::windows`), so that a control plane (or a broker) that
//! is behind does not take its own backlog for a fleet gone silent. Kubernetes' node lifecycle
//! controller guards the same case by the share of nodes gone silent at once; a loopback
//! measures the cause instead, and does not hold judgment when one train goes quiet.
//!
//! Invariants:
//! - Pure: [`Loopback`] is a function of the times and the loopbacks back; the engine asks
//!   for a publication with [`super::Action::Loopback`] and learns of one back by
//!   [`super::Event::LoopedBack`].
//! - Bounded: at most `cap_ms / every_ms + 1` loopbacks are out; one out longer than the cap
//!   is given up. So [`Loopback::behind`] is at most the cap: silence is judged at most one
//!   cap later, even when a broker never returns anything (it is down, or its rules drop the
//!   topic).
//! - A loopback of another process (`nonce`), of no broker of ours or not out is ignored.

use std::collections::VecDeque;

/// Brokers a loopback goes through (the bits of [`Out::back`]).
pub const MAX_BROKERS: usize = 8;

/// One loopback out: its number, when it was published, the brokers it came back through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Out {
    seq: u64,
    at: u64,
    back: u8,
}

/// What changed in how far behind the control plane hears, for one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// The oldest loopback out has been out `behind_ms`, more than a third of the silence
    /// window: silence is judged that much later.
    Behind { behind_ms: u64 },
    /// Every loopback is back within a third of the silence window again; the worst lag was
    /// `worst_ms`.
    CaughtUp { worst_ms: u64 },
}

/// The loopbacks out and what they say.
#[derive(Debug, Clone)]
pub struct Loopback {
    /// Published every this often (0: never; then the control plane is never behind).
    every_ms: u64,
    /// Given up after this long out (the most [`Loopback::behind`] says).
    cap_ms: u64,
    /// A lag above this is noted.
    note_ms: u64,
    /// The bits of every broker (one per broker connection).
    all: u8,
    /// This process' loopbacks (anything else on the topic is not ours).
    nonce: u64,
    next: u64,
    last_sent: Option<u64>,
    out: VecDeque<Out>,
    /// Behind above `note_ms` since the last note, and the worst lag meanwhile.
    noted: Option<u64>,
    /// Loopbacks of ours back through a broker, ever.
    returned: u64,
}

impl Loopback {
    /// Loopbacks through `brokers` connections (1 to [`MAX_BROKERS`]), one every `every_ms`,
    /// given up after `cap_ms`; lags above `note_ms` are noted.
    pub fn new(every_ms: u64, cap_ms: u64, note_ms: u64, brokers: usize, nonce: u64) -> Loopback {
        let brokers = brokers.clamp(1, MAX_BROKERS);
        Loopback {
            every_ms,
            cap_ms,
            note_ms,
            all: ((1u16 << brokers) - 1) as u8,
            nonce,
            next: 1,
            last_sent: None,
            out: VecDeque::new(),
            noted: None,
            returned: 0,
        }
    }

    /// The number of the loopback to publish at `now`, when one is due.
    pub fn due(&mut self, now: u64) -> Option<u64> {
        self.give_up(now);
        if self.every_ms == 0
            || self
                .last_sent
                .is_some_and(|t| now.saturating_sub(t) < self.every_ms)
        {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        self.last_sent = Some(now);
        self.out.push_back(Out {
            seq,
            at: now,
            back: 0,
        });
        Some(seq)
    }

    /// Loopback `seq` of process `nonce` came back through broker `broker` at `now`.
    pub fn back(&mut self, broker: usize, nonce: u64, seq: u64) {
        if nonce != self.nonce || broker >= MAX_BROKERS || (self.all >> broker) & 1 == 0 {
            return;
        }
        if let Some(o) = self.out.iter_mut().find(|o| o.seq == seq) {
            if o.back & (1 << broker) == 0 {
                self.returned += 1;
            }
            o.back |= 1 << broker;
        }
        while self.out.front().is_some_and(|o| o.back == self.all) {
            self.out.pop_front();
        }
    }

    fn give_up(&mut self, now: u64) {
        while self
            .out
            .front()
            .is_some_and(|o| now.saturating_sub(o.at) > self.cap_ms)
        {
            self.out.pop_front();
        }
    }

    /// How late the control plane hears at `now`: how long the oldest loopback not back
    /// through every broker has been out (0 when all are back), at most the cap.
    pub fn behind(&self, now: u64) -> u64 {
        self.out
            .front()
            .map_or(0, |o| now.saturating_sub(o.at))
            .min(self.cap_ms)
    }

    /// What changed since the last note, at `now` (called on every tick).
    pub fn note(&mut self, now: u64) -> Option<Note> {
        let behind = self.behind(now);
        match self.noted {
            None if behind > self.note_ms => {
                self.noted = Some(behind);
                Some(Note::Behind { behind_ms: behind })
            }
            Some(worst) if behind <= self.note_ms => {
                self.noted = None;
                Some(Note::CaughtUp { worst_ms: worst })
            }
            Some(worst) => {
                self.noted = Some(worst.max(behind));
                None
            }
            None => None,
        }
    }

    /// Loopbacks of ours back through a broker (each broker's copy counts), ever.
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// Loopbacks out (bounded by the cap).
    pub fn out(&self) -> usize {
        self.out.len()
    }
}

/// The loopback's payload: a version, the process' nonce and the loopback's number.
pub mod payload {
    /// The payload's version.
    pub const VERSION: u8 = 1;
    /// Its length.
    pub const LEN: usize = 17;

    pub fn encode(nonce: u64, seq: u64) -> Vec<u8> {
        let mut p = Vec::with_capacity(LEN);
        p.push(VERSION);
        p.extend_from_slice(&nonce.to_le_bytes());
        p.extend_from_slice(&seq.to_le_bytes());
        p
    }

    /// The nonce and number of a payload; `None` when it is not one of this version.
    pub fn decode(p: &[u8]) -> Option<(u64, u64)> {
        if p.len() != LEN || p[0] != VERSION {
            return None;
        }
        let nonce = u64::from_le_bytes(p[1..9].try_into().ok()?);
        let seq = u64::from_le_bytes(p[9..17].try_into().ok()?);
        Some((nonce, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_out_is_the_lag_and_none_out_is_none() {
        let mut l = Loopback::new(1000, 30_000, 1000, 1, 7);
        assert_eq!(l.behind(0), 0);
        assert_eq!(l.due(0), Some(1));
        assert_eq!(l.due(500), None, "one a second");
        assert_eq!(l.behind(40), 40, "out for 40 ms: heard 40 ms late at least");
        l.back(0, 7, 1);
        l.back(0, 7, 1); // a copy again: counted once
        assert_eq!(l.behind(40), 0);
        assert_eq!(l.returned(), 1);
        assert_eq!(l.due(1000), Some(2));
        assert_eq!(l.due(2000), Some(3));
        // the older one still out holds the lag, a newer one back says nothing of it
        l.back(0, 7, 3);
        assert_eq!(l.behind(2500), 1500);
        l.back(0, 7, 2);
        assert_eq!(l.behind(2500), 0);
        assert_eq!(l.out(), 0);
    }

    #[test]
    fn every_broker_must_return_it() {
        let mut l = Loopback::new(1000, 30_000, 1000, 3, 7);
        l.due(0);
        l.back(0, 7, 1);
        l.back(2, 7, 1);
        assert_eq!(l.behind(800), 800, "broker 1 has not returned it");
        l.back(1, 7, 1);
        assert_eq!(l.behind(800), 0);
    }

    #[test]
    fn foreign_unknown_and_out_of_range_loopbacks_are_ignored() {
        let mut l = Loopback::new(1000, 30_000, 1000, 2, 7);
        l.due(0);
        l.back(0, 8, 1); // another process
        l.back(1, 8, 1);
        l.back(0, 7, 99); // never sent
        l.back(2, 7, 1); // no such broker
        l.back(200, 7, 1);
        assert_eq!(l.behind(900), 900);
    }

    #[test]
    fn the_lag_is_capped_and_what_never_comes_back_is_given_up() {
        let mut l = Loopback::new(1000, 5000, 1000, 1, 7);
        for t in (0..=20_000).step_by(1000) {
            l.due(t);
        }
        assert_eq!(l.behind(20_000), 5000);
        assert!(l.out() <= 6, "bounded: {} out", l.out());
        // once they come back again the lag falls to what is out
        for seq in 1..=21 {
            l.back(0, 7, seq);
        }
        assert_eq!(l.behind(20_100), 0);
    }

    #[test]
    fn off_means_never_behind() {
        let mut l = Loopback::new(0, 30_000, 1000, 1, 7);
        assert_eq!(l.due(0), None);
        assert_eq!(l.behind(100_000), 0);
    }

    #[test]
    fn a_lag_is_noted_once_and_its_end_with_the_worst() {
        let mut l = Loopback::new(1000, 30_000, 1000, 1, 7);
        l.due(0);
        assert_eq!(l.note(900), None);
        assert_eq!(l.note(1500), Some(Note::Behind { behind_ms: 1500 }));
        assert_eq!(l.note(4000), None);
        l.back(0, 7, 1);
        assert_eq!(l.note(4100), Some(Note::CaughtUp { worst_ms: 4000 }));
        assert_eq!(l.note(4200), None);
    }

    #[test]
    fn the_payload_reads_back_and_anything_else_is_refused() {
        let p = payload::encode(0xdead_beef, 42);
        assert_eq!(payload::decode(&p), Some((0xdead_beef, 42)));
        assert_eq!(payload::decode(&p[..16]), None);
        let mut v2 = p.clone();
        v2[0] = 2;
        assert_eq!(payload::decode(&v2), None);
        assert_eq!(payload::decode(b""), None);
    }
}
