//! What a standby replica hears of the fleet while it waits to lead, so that the engine it
//! starts on taking over has a warm live model: it does not wait for the agents' next reports.
//!
//! Invariants:
//! - Pure: events in (with the time they came), events out; no I/O.
//! - Bounded by the fleet, not by the time waited: per node the latest report, usage, actual
//!   state, presence and retained desired state; link metrics (a node's table may come in
//!   several messages) only while younger than the window, and at most [`MAX_LINK_MESSAGES`].
//! - Only what is still fresh is handed over: what came more than the window before the
//!   takeover is left out (the engine would take it as heard just now), except the retained
//!   desired states (the broker's documents, not signs of life).

use std::collections::{HashMap, VecDeque};

use crate::engine::Event;

/// Link-metrics messages kept at the most (older ones go first).
pub const MAX_LINK_MESSAGES: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Report,
    Usage,
    Actual,
    Presence,
    Retained,
}

/// The standby's warm buffer.
#[derive(Debug)]
pub struct Warm {
    window_ms: u64,
    /// (kind, node) → (arrival order, arrival ms, event)
    latest: HashMap<(Kind, String), (u64, u64, Event)>,
    links: VecDeque<(u64, u64, Event)>,
    order: u64,
}

/// What a takeover starts from: the events to hand to the engine, in arrival order, and how
/// many nodes they are about.
#[derive(Debug)]
pub struct Handover {
    pub events: Vec<Event>,
    pub nodes: usize,
}

impl Warm {
    /// A buffer that hands over what came within `window_ms` of the takeover (the liveness
    /// silence window suits: older reports would be judged silent anyway).
    pub fn new(window_ms: u64) -> Warm {
        Warm {
            window_ms,
            latest: HashMap::new(),
            links: VecDeque::new(),
            order: 0,
        }
    }

    /// Notes a telemetry event that came at `now`; other events are not kept.
    pub fn note(&mut self, now: u64, ev: Event) {
        self.order += 1;
        let key = match &ev {
            Event::Report(r) => (Kind::Report, r.node.to_string()),
            Event::Usage(u) => (Kind::Usage, u.node.to_string()),
            Event::Actual(a) => (Kind::Actual, a.node.to_string()),
            Event::Online { node, .. } => (Kind::Presence, node.clone()),
            Event::RetainedDesired { node, .. } => (Kind::Retained, node.clone()),
            Event::Links(_) => {
                while self
                    .links
                    .front()
                    .is_some_and(|(_, at, _)| now.saturating_sub(*at) > self.window_ms)
                    || self.links.len() >= MAX_LINK_MESSAGES
                {
                    self.links.pop_front();
                }
                self.links.push_back((self.order, now, ev));
                return;
            }
            _ => return,
        };
        self.latest.insert(key, (self.order, now, ev));
    }

    /// The fresh events at `now`, in the order they came.
    pub fn take(self, now: u64) -> Handover {
        let window = self.window_ms;
        let fresh = |at: u64| now.saturating_sub(at) <= window;
        let mut v: Vec<(u64, Event)> = self
            .latest
            .into_iter()
            .filter(|((kind, _), (_, at, _))| *kind == Kind::Retained || fresh(*at))
            .map(|(_, (order, _, ev))| (order, ev))
            .chain(
                self.links
                    .into_iter()
                    .filter(|(_, at, _)| fresh(*at))
                    .map(|(order, _, ev)| (order, ev)),
            )
            .collect();
        v.sort_by_key(|(order, _)| *order);
        let mut nodes: Vec<&str> = v
            .iter()
            .filter_map(|(_, ev)| match ev {
                Event::Report(r) => Some(r.node.as_str()),
                _ => None,
            })
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let nodes = nodes.len();
        Handover {
            events: v.into_iter().map(|(_, ev)| ev).collect(),
            nodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::wire::{self, LinkMetrics};

    fn report(node: &str, seq: u64) -> Event {
        let n: acoa_shared::model::Node = serde_json::from_value(serde_json::json!({
            "name": node, "datacenter": "dc1", "layer": "edge", "arch": "aarch64",
            "capacity": {"cpu_millis": 1000, "memory_mb": 512, "disk_mb": 1024},
        }))
        .unwrap();
        Event::Report(Box::new(crate::testkit::report_of(&n, seq, "127.0.0.1:1")))
    }

    fn links(node: &str, seq: u64) -> Event {
        Event::links(Box::new(LinkMetrics {
            node: wire::name(node).unwrap(),
            seq,
            run: 1,
            links: heapless::Vec::new(),
            coord: None,
        }))
    }

    fn seqs(h: &Handover) -> Vec<(String, u64)> {
        h.events
            .iter()
            .map(|e| match e {
                Event::Report(r) => (format!("report {}", r.node), r.seq),
                Event::Links(l) => (format!("links {}", l.node), l.seq),
                Event::RetainedDesired { node, generation } => {
                    (format!("retained {node}"), *generation)
                }
                other => (format!("{other:?}"), 0),
            })
            .collect()
    }

    #[test]
    fn the_latest_report_per_node_and_the_fresh_links_are_handed_over_in_order() {
        let mut w = Warm::new(3000);
        w.note(0, report("n1", 1));
        w.note(100, links("n1", 2));
        w.note(
            200,
            Event::RetainedDesired {
                node: "n1".into(),
                generation: 4,
            },
        );
        w.note(1000, report("n2", 1));
        w.note(5000, report("n1", 3));
        w.note(5100, links("n1", 4));
        w.note(5200, links("n1", 5));
        w.note(5300, Event::Tick);
        let h = w.take(6000);
        // n2's report (5 s old) and n1's first links are stale; the retained state is not
        assert_eq!(
            seqs(&h),
            [
                ("retained n1".to_string(), 4),
                ("report n1".into(), 3),
                ("links n1".into(), 4),
                ("links n1".into(), 5),
            ]
        );
        assert_eq!(h.nodes, 1);
    }

    #[test]
    fn link_messages_are_bounded() {
        let mut w = Warm::new(u64::MAX);
        for i in 0..(MAX_LINK_MESSAGES as u64 + 10) {
            w.note(i, links("n1", i));
        }
        let h = w.take(0);
        assert_eq!(h.events.len(), MAX_LINK_MESSAGES);
        assert_eq!(seqs(&h)[0].1, 10);
    }
}
