//! From an MQTT publication to an engine event, or to the reason it is dropped. Pure: the
//! enrolled keys come in as a value. Runs on several workers in parallel (signature checks
//! are the costly part of ingest); messages of one node always go to the same worker.
//!
//! [`Freshness`] keeps, per worker, what was last accepted from each node, so that a signed
//! message replayed (captured earlier, published again) is dropped: a node cannot be kept alive
//! or fed old measurements by replay.

use std::collections::{BTreeMap, HashMap};

use acoa_shared::topics::{self, Topic};
use acoa_shared::wire::{self, Message};
use ed25519_dalek::VerifyingKey;

use crate::engine::Event;

/// Enrolled nodes: name → public key (None until `node set-key`).
pub type Keys = BTreeMap<String, Option<VerifyingKey>>;

/// Why a publication was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    #[error("topic `{0}` is not an acoa/v1 topic")]
    UnknownTopic(String),
    #[error("{kind} for unknown node `{node}` (not in the inventory)")]
    UnknownNode { kind: &'static str, node: String },
    #[error(
        "{kind} from node `{node}` dropped: no public key enrolled (cloud-broker node set-key)"
    )]
    NoKey { kind: &'static str, node: String },
    #[error("{kind} on node `{node}`'s topic dropped: {reason}")]
    Bad {
        kind: &'static str,
        node: String,
        reason: String,
    },
    #[error("{kind} on node `{topic_node}`'s topic names node `{body_node}`: dropped")]
    WrongNode {
        kind: &'static str,
        topic_node: String,
        body_node: String,
    },
    #[error("loopback on `{0}` dropped: not a loopback payload of version 1 (17 bytes)")]
    BadLoopback(String),
    #[error("online marker of node `{node}` is not a signed presence: {reason}")]
    BadMarker { node: String, reason: String },
    #[error(
        "{kind} from node `{node}` dropped as a replay: (run, seq) ({run}, {seq}) is not newer \
         than the last accepted ({last_run}, {last_seq})"
    )]
    Stale {
        kind: &'static str,
        node: String,
        run: u64,
        seq: u64,
        last_run: u64,
        last_seq: u64,
    },
    #[error(
        "{kind} from node `{node}` shed: the control plane's ingest is behind (a queue of {queue} \
         full); the node's next one replaces it"
    )]
    Shed {
        kind: &'static str,
        node: String,
        queue: usize,
    },
}

/// Periodic telemetry, superseded by the node's next message of its kind (link metrics every
/// report period, node reports and usage at the latest every `report_max_interval_s`): what
/// the control plane may shed when its ingest is behind rather than stall its broker
/// connection (a connection that is not read misses its keep-alive and is dropped by the
/// broker, with everything else on it). Presence, actual and desired states are never shed.
pub fn sheddable(topic: &str) -> Option<&'static str> {
    match topics::parse(topic)? {
        topics::Topic::Links(_) => Some("link metrics"),
        topics::Topic::Report(_) => Some("node report"),
        topics::Topic::Usage(_) => Some("component usage"),
        _ => None,
    }
}

/// For a verified event, what [`sheddable`] names by topic: periodic telemetry that the
/// node's next message of its kind supersedes, with its kind and node. The ingest may shed
/// these when the engine is behind; nothing else is ever shed.
pub fn periodic(ev: &Event) -> Option<(&'static str, &str)> {
    match sequenced(ev)? {
        (Kind::Report | Kind::Links | Kind::Usage, name, node, _, _) => Some((name, node)),
        _ => None,
    }
}

/// The signed telemetry kinds whose freshness is checked, one watermark each per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Report,
    Links,
    Actual,
    Usage,
    /// `(run, conn)`: a presence of the current connection or a later one.
    Presence,
}

/// The last accepted `(run, seq)` of each kind from each node, for one ingest worker (a node's
/// topics all go to one worker, so each node is tracked by exactly one). A message is fresh
/// when [`wire::is_fresh`] says so: `run` counts the agent's starts and never goes back, so a
/// replayed or reordered older message is dropped and a restarted agent is not. Keys are
/// enrolled nodes only (a message reaches this after its signature verified), so memory is
/// bounded by the inventory.
#[derive(Debug, Default)]
pub struct Freshness {
    last: HashMap<(String, Kind), (u64, u64)>,
    /// Messages dropped as not fresh, since start.
    pub stale: u64,
}

/// The freshness key of signed telemetry: its kind (and the kind's name), node, run and
/// sequence number; `None` for other events.
fn sequenced(ev: &Event) -> Option<(Kind, &'static str, &str, u64, u64)> {
    Some(match ev {
        Event::Report(r) => (Kind::Report, "node report", r.node.as_str(), r.run, r.seq),
        Event::Links(l) => (Kind::Links, "link metrics", l.node.as_str(), l.run, l.seq),
        Event::Actual(a) => (Kind::Actual, "actual state", a.node.as_str(), a.run, a.seq),
        Event::Usage(u) => (
            Kind::Usage,
            "component usage",
            u.node.as_str(),
            u.run,
            u.seq,
        ),
        Event::Online {
            node, run, conn, ..
        } => (Kind::Presence, "presence", node.as_str(), *run, *conn),
        _ => return None,
    })
}

impl Freshness {
    /// Whether `ev` would be the first message of its kind accepted from its node's agent run
    /// (a node's first report of a run is how it joins, or returns after a restart).
    pub fn first_of_run(&self, ev: &Event) -> bool {
        let Some((kind, _, node, run, _)) = sequenced(ev) else {
            return false;
        };
        self.last
            .get(&(node.to_string(), kind))
            .is_none_or(|(last_run, _)| *last_run != run)
    }

    /// `Ok` and remembers `ev` when it is newer than what was accepted before of its kind from
    /// its node; events other than signed telemetry always pass.
    pub fn check(&mut self, ev: &Event) -> Result<(), Dropped> {
        let Some((kind, name, node, run, seq)) = sequenced(ev) else {
            return Ok(());
        };
        let key = (node.to_string(), kind);
        let last = self.last.get(&key).copied();
        // the will of a connection carries the same (run, conn) as its `online`
        let fresh = match kind {
            Kind::Presence => last.is_none_or(|l| (run, seq) >= l),
            _ => wire::is_fresh(last, run, seq),
        };
        if !fresh {
            self.stale += 1;
            let (last_run, last_seq) = last.unwrap_or_default();
            return Err(Dropped::Stale {
                kind: name,
                node: node.into(),
                run,
                seq,
                last_run,
                last_seq,
            });
        }
        self.last.insert(key, (run, seq));
        Ok(())
    }
}

/// What to do with one publication. `Ok(None)`: nothing for the engine (our own echoes).
pub fn classify(
    topic: &str,
    payload: &[u8],
    keys: &Keys,
    control_plane: &VerifyingKey,
) -> Result<Option<Event>, Dropped> {
    classify_checked(topic, payload, keys, control_plane, None)
}

/// [`classify`] of several publications `(topic, payload)`, the signatures of their node
/// telemetry (reports, links, actual states, usage: nearly all of a fleet's messages) checked
/// in one batch ([`wire::verify_all`], about half the cost of one by one): the same results,
/// in the same order.
pub fn classify_all(
    items: &[(&str, &[u8])],
    keys: &Keys,
    control_plane: &VerifyingKey,
) -> Vec<Result<Option<Event>, Dropped>> {
    // the telemetry whose node has a key and whose frame opens: its signature to check
    let mut pending: Vec<(usize, wire::Envelope<'_>, &VerifyingKey)> = Vec::new();
    for (i, (topic, payload)) in items.iter().enumerate() {
        if let Some(Topic::Report(n) | Topic::Links(n) | Topic::Actual(n) | Topic::Usage(n)) =
            topics::parse(topic)
        {
            if let (Some(Some(key)), Ok(env)) = (keys.get(n), wire::open(payload)) {
                pending.push((i, env, key));
            }
        }
    }
    let envelopes: Vec<_> = pending.iter().map(|(_, e, k)| (*e, *k)).collect();
    let mut verdicts: Vec<Option<Checked<'_>>> = vec![None; items.len()];
    for ((i, env, _), v) in pending.iter().zip(wire::verify_all(&envelopes)) {
        verdicts[*i] = Some((*env, v));
    }
    items
        .iter()
        .zip(verdicts)
        .map(|((topic, payload), v)| classify_checked(topic, payload, keys, control_plane, v))
        .collect()
}

/// A node telemetry frame opened, and what its signature check found.
type Checked<'a> = (wire::Envelope<'a>, Result<(), wire::WireError>);

/// [`classify`], with the node telemetry's frame opened and its signature checked already
/// when `checked` is given.
fn classify_checked(
    topic: &str,
    payload: &[u8],
    keys: &Keys,
    control_plane: &VerifyingKey,
    checked: Option<Checked<'_>>,
) -> Result<Option<Event>, Dropped> {
    let Some(t) = topics::parse(topic) else {
        return Err(Dropped::UnknownTopic(topic.chars().take(200).collect()));
    };
    match t {
        Topic::Report(n) | Topic::Links(n) | Topic::Actual(n) | Topic::Usage(n) => {
            let kind = match t {
                Topic::Report(_) => "node report",
                Topic::Links(_) => "link metrics",
                Topic::Usage(_) => "component usage",
                _ => "actual state",
            };
            let key = match keys.get(n) {
                None => {
                    return Err(Dropped::UnknownNode {
                        kind,
                        node: n.into(),
                    })
                }
                Some(None) => {
                    return Err(Dropped::NoKey {
                        kind,
                        node: n.into(),
                    })
                }
                Some(Some(k)) => k,
            };
            let msg = match checked {
                None => wire::decode_verified(payload, key),
                Some((env, verdict)) => verdict.and_then(|()| env.message()),
            };
            let msg = msg.map_err(|e| Dropped::Bad {
                kind,
                node: n.into(),
                reason: e.to_string(),
            })?;
            let (body_node, ev) = match (t, msg) {
                (Topic::Report(_), Message::NodeReport(r)) => (r.node.clone(), Event::Report(r)),
                (Topic::Links(_), Message::LinkMetrics(l)) => (l.node.clone(), Event::links(l)),
                (Topic::Actual(_), Message::ActualState(a)) => (a.node.clone(), Event::Actual(a)),
                (Topic::Usage(_), Message::ComponentUsage(u)) => (u.node.clone(), Event::Usage(u)),
                (_, other) => {
                    return Err(Dropped::Bad {
                        kind,
                        node: n.into(),
                        reason: format!("carries a {}", other.kind()),
                    })
                }
            };
            if body_node.as_str() != n {
                return Err(Dropped::WrongNode {
                    kind,
                    topic_node: n.into(),
                    body_node: body_node.to_string(),
                });
            }
            Ok(Some(ev))
        }
        Topic::Online(n) => {
            let key = match keys.get(n) {
                None => {
                    return Err(Dropped::UnknownNode {
                        kind: "online marker",
                        node: n.into(),
                    })
                }
                // an empty payload clears a retained marker: nothing to say
                _ if payload.is_empty() => return Ok(None),
                Some(None) => {
                    return Err(Dropped::NoKey {
                        kind: "online marker",
                        node: n.into(),
                    })
                }
                Some(Some(k)) => k,
            };
            let bad = |reason: String| Dropped::BadMarker {
                node: n.into(),
                reason,
            };
            let p = match wire::decode_verified(payload, key) {
                Ok(Message::Presence(p)) => p,
                Ok(other) => return Err(bad(format!("carries a {}", other.kind()))),
                Err(e) => return Err(bad(e.to_string())),
            };
            if p.node.as_str() != n {
                return Err(Dropped::WrongNode {
                    kind: "online marker",
                    topic_node: n.into(),
                    body_node: p.node.to_string(),
                });
            }
            Ok(Some(Event::Online {
                node: n.into(),
                online: p.online,
                run: p.run,
                conn: p.conn,
            }))
        }
        Topic::Desired(n) => {
            // Our own publications (retained ones at start-up tell what the agents can see).
            match wire::decode_verified(payload, control_plane) {
                Ok(Message::DesiredState(d)) if d.node.as_str() == n => {
                    Ok(Some(Event::RetainedDesired {
                        node: n.into(),
                        generation: d.generation,
                    }))
                }
                _ => Ok(None),
            }
        }
        Topic::Peers(_) | Topic::AppStatus(_) => Ok(None),
        // a control plane's own (the engine ignores another process' by its nonce)
        Topic::Loopback(b) => match crate::engine::loopback::payload::decode(payload) {
            Some((nonce, seq)) => Ok(Some(Event::LoopedBack {
                broker: b.into(),
                nonce,
                seq,
            })),
            None => Err(Dropped::BadLoopback(topic.into())),
        },
        Topic::App(a) => Ok(Some(Event::AppPublished {
            app: a.into(),
            payload: payload.to_vec(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::model::Layer;
    use acoa_shared::wire::{NodeLoad, NodeReport};
    use ed25519_dalek::SigningKey;

    fn report(node: &str) -> Message {
        Message::NodeReport(Box::new(NodeReport {
            node: wire::name(node).unwrap(),
            seq: 1,
            run: 0,
            timestamp_ms: 0,
            datacenter: wire::name("dc").unwrap(),
            layer: Layer::Edge,
            arch: wire::name("aarch64").unwrap(),
            hardware: Default::default(),
            software: Default::default(),
            capacity: Default::default(),
            load: NodeLoad::default(),
            probe_addr: wire::bounded("probe", "127.0.0.1:1").unwrap(),
            position: None,
        }))
    }

    #[test]
    fn a_loopback_is_read_and_a_malformed_one_is_dropped_with_its_topic() {
        let cp = SigningKey::from_bytes(&[9; 32]).verifying_key();
        let p = crate::engine::loopback::payload::encode(5, 42);
        let t = topics::loopback(3);
        assert_eq!(
            classify(&t, &p, &Keys::new(), &cp),
            Ok(Some(Event::LoopedBack {
                broker: 3,
                nonce: 5,
                seq: 42
            }))
        );
        assert_eq!(
            classify(&t, &p[..3], &Keys::new(), &cp),
            Err(Dropped::BadLoopback(t.clone()))
        );
        assert_eq!(
            Dropped::BadLoopback(t).to_string(),
            "loopback on `acoa/v1/control/loopback/3` dropped: not a loopback payload of version 1 (17 bytes)"
        );
    }

    /// A node's sample about a peer is the link from the node to the peer, and stays so:
    /// the agents measure one-way delay per direction (`clock = "synchronized"`), and the
    /// railway table is asymmetric. Nothing fills in or averages the other direction.
    #[test]
    fn a_directed_sample_becomes_the_directed_link_and_is_never_symmetrized() {
        use crate::engine::{Engine, EngineConfig};
        use acoa_shared::wire::{LinkMetrics, LinkSample};
        let cp = SigningKey::from_bytes(&[9; 32]);
        let ks: Vec<SigningKey> = (1..=3u8)
            .map(|i| SigningKey::from_bytes(&[i; 32]))
            .collect();
        let mut keys = Keys::new();
        for (i, k) in ks.iter().enumerate() {
            keys.insert(format!("n{}", i + 1), Some(k.verifying_key()));
        }
        let mut e = Engine::new(EngineConfig::default(), cp.clone(), Default::default(), 0);
        let mut feed = |topic: &str, msg: &Message, k: &SigningKey| {
            let frame = wire::encode(msg, Some(k)).unwrap();
            let ev = classify(topic, &frame, &keys, &cp.verifying_key())
                .unwrap()
                .unwrap();
            e.handle(0, ev);
        };
        for (i, k) in ks.iter().enumerate() {
            let n = format!("n{}", i + 1);
            feed(&format!("acoa/v1/nodes/{n}/report"), &report(&n), k);
        }
        let links = |node: &str, samples: &[(&str, f32, f32)]| {
            let mut l = LinkMetrics {
                node: wire::name(node).unwrap(),
                seq: 1,
                run: 0,
                links: Default::default(),
                coord: None,
            };
            for (peer, latency_ms, success) in samples {
                l.links
                    .push(LinkSample {
                        peer: wire::name(peer).unwrap(),
                        latency_ms: *latency_ms,
                        jitter_ms: 0.1,
                        success: *success,
                        samples: 20,
                        last_answer_ms: 0,
                    })
                    .unwrap();
            }
            Message::LinkMetrics(Box::new(l))
        };
        feed(
            "acoa/v1/nodes/n1/links",
            &links("n1", &[("n2", 2.0, 0.8)]),
            &ks[0],
        );
        feed(
            "acoa/v1/nodes/n2/links",
            &links("n2", &[("n1", 8.0, 1.0)]),
            &ks[1],
        );
        // n3 only says how it reaches n1.
        feed(
            "acoa/v1/nodes/n3/links",
            &links("n3", &[("n1", 5.0, 0.9)]),
            &ks[2],
        );
        let c = e.cluster();
        let link = |a: &str, b: &str| {
            c.links
                .iter()
                .find(|l| l.from == a && l.to == b)
                .map(|l| (l.latency_ms, l.success))
        };
        assert_eq!(link("n1", "n2"), Some((2.0, 0.8f32 as f64)));
        assert_eq!(link("n2", "n1"), Some((8.0, 1.0)));
        assert_eq!(link("n3", "n1"), Some((5.0, 0.9f32 as f64)));
        // no reverse measurement is made up: the live model holds no link there but what it
        // is estimated from, and the scheduler's view of it an estimate (issue 16: the median
        // of the group's measured links), marked as one
        let infra = acoa_scheduler::Infra::from_cluster(&c);
        let at = |n: &str| infra.index_of(n).unwrap();
        for (a, b) in [("n1", "n3"), ("n2", "n3"), ("n3", "n2")] {
            assert_eq!(link(a, b), None, "{a} -> {b}");
            match infra.link_known(at(a), at(b)) {
                Some(acoa_shared::coords::Known::Estimated(q)) => {
                    assert_eq!(q.latency_ms, 5.0, "{a} -> {b}")
                }
                other => panic!("{a} -> {b}: {other:?}"),
            }
            let v = e.link_view(a, b).unwrap();
            assert!(v.latency_ms.is_estimated() && v.success.is_estimated());
        }
        assert!(!e.link_view("n3", "n1").unwrap().latency_ms.is_estimated());
    }

    #[test]
    fn reports_are_checked_against_the_topic_node_key() {
        let k1 = SigningKey::from_bytes(&[1; 32]);
        let k2 = SigningKey::from_bytes(&[2; 32]);
        let cp = SigningKey::from_bytes(&[9; 32]).verifying_key();
        let mut keys = Keys::new();
        keys.insert("n1".into(), Some(k1.verifying_key()));
        keys.insert("n2".into(), Some(k2.verifying_key()));
        keys.insert("n3".into(), None);

        let good = wire::encode(&report("n1"), Some(&k1)).unwrap();
        assert!(matches!(
            classify("acoa/v1/nodes/n1/report", &good, &keys, &cp),
            Ok(Some(Event::Report(_)))
        ));
        // n2 speaking in n1's name, signed with its own key: dropped
        let forged = wire::encode(&report("n1"), Some(&k2)).unwrap();
        assert!(matches!(
            classify("acoa/v1/nodes/n1/report", &forged, &keys, &cp),
            Err(Dropped::Bad { .. })
        ));
        // n1's signed report replayed on n2's topic: the key does not match
        assert!(classify("acoa/v1/nodes/n2/report", &good, &keys, &cp).is_err());
        // n2's own key, body naming n1, on n2's topic: wrong node
        let wrong = wire::encode(&report("n1"), Some(&k2)).unwrap();
        assert!(matches!(
            classify("acoa/v1/nodes/n2/report", &wrong, &keys, &cp),
            Err(Dropped::WrongNode { .. })
        ));
        let unsigned = wire::encode(&report("n1"), None).unwrap();
        assert!(classify("acoa/v1/nodes/n1/report", &unsigned, &keys, &cp).is_err());
        assert!(matches!(
            classify("acoa/v1/nodes/n3/report", &good, &keys, &cp),
            Err(Dropped::NoKey { .. })
        ));
        assert!(matches!(
            classify("acoa/v1/nodes/zz/report", &good, &keys, &cp),
            Err(Dropped::UnknownNode { .. })
        ));
        assert!(classify("acoa/v1/nodes/n1/report", b"\xff\x00garbage", &keys, &cp).is_err());
        assert!(classify("acoa/v1/nodes/n1/links", &good, &keys, &cp).is_err());
        assert!(classify("other/topic", b"", &keys, &cp).is_err());
        // the text markers of wire v2 are no presence
        assert!(matches!(
            classify("acoa/v1/nodes/n1/online", b"offline", &keys, &cp),
            Err(Dropped::BadMarker { .. })
        ));
        assert!(classify("acoa/v1/nodes/n1/online", b"maybe", &keys, &cp).is_err());
    }

    /// The ingest tasks classify what waits in their queue together, the signatures in one
    /// batch: each publication gets what it gets alone, good ones beside bad ones included.
    #[test]
    fn classified_together_each_gets_what_it_gets_alone() {
        let ks: Vec<SigningKey> = (1..=20u8)
            .map(|i| SigningKey::from_bytes(&[i; 32]))
            .collect();
        let cp = SigningKey::from_bytes(&[99; 32]).verifying_key();
        let mut keys = Keys::new();
        for (i, k) in ks.iter().enumerate() {
            keys.insert(format!("n{}", i + 1), Some(k.verifying_key()));
        }
        keys.insert("n0".into(), None);
        let topic = |n: usize, what: &str| format!("acoa/v1/nodes/n{n}/{what}");
        let mut good: Vec<(String, Vec<u8>)> = (1..=20)
            .map(|n| {
                let f = wire::encode(&report(&format!("n{n}")), Some(&ks[n - 1])).unwrap();
                (topic(n, "report"), f)
            })
            .collect();
        let mut flipped = good[4].1.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let bad: Vec<(String, Vec<u8>)> = vec![
            (topic(5, "report"), flipped),
            // n2's report signed by n3
            (
                topic(2, "report"),
                wire::encode(&report("n2"), Some(&ks[2])).unwrap(),
            ),
            (
                topic(2, "report"),
                wire::encode(&report("n2"), None).unwrap(),
            ),
            (topic(3, "report"), good[0].1.clone()),
            (topic(0, "report"), good[0].1.clone()),
            (topic(77, "report"), good[0].1.clone()),
            (topic(1, "links"), good[0].1.clone()),
            (topic(1, "report"), b"\xff\x00garbage".to_vec()),
            ("other/topic".into(), vec![]),
            (topic(1, "online"), b"offline".to_vec()),
        ];
        let check = |list: &[(String, Vec<u8>)]| {
            let items: Vec<(&str, &[u8])> = list
                .iter()
                .map(|(t, p)| (t.as_str(), p.as_slice()))
                .collect();
            let alone: Vec<_> = items
                .iter()
                .map(|(t, p)| classify(t, p, &keys, &cp))
                .collect();
            assert_eq!(classify_all(&items, &keys, &cp), alone);
            alone
        };
        assert!(check(&good)
            .iter()
            .all(|r| matches!(r, Ok(Some(Event::Report(_))))));
        // the bad ones among the good, each where it came
        for (i, b) in bad.into_iter().enumerate() {
            good.insert(i * 2 + 1, b);
        }
        let r = check(&good);
        assert_eq!(r.iter().filter(|r| r.is_err()).count(), 10);
    }

    fn report_at(node: &str, run: u64, seq: u64) -> Event {
        let Message::NodeReport(mut r) = report(node) else {
            unreachable!()
        };
        r.run = run;
        r.seq = seq;
        Event::Report(r)
    }

    fn links_at(node: &str, run: u64, seq: u64) -> Event {
        Event::links(Box::new(wire::LinkMetrics {
            node: wire::name(node).unwrap(),
            seq,
            run,
            links: Default::default(),
            coord: None,
        }))
    }

    #[test]
    fn a_replayed_message_is_dropped_and_a_new_agent_run_is_accepted() {
        let mut f = Freshness::default();
        assert_eq!(f.check(&report_at("n1", 1, 1)), Ok(()));
        assert_eq!(f.check(&report_at("n1", 1, 2)), Ok(()));
        assert_eq!(f.check(&links_at("n1", 1, 2)), Ok(()));
        // the same report again, and an older one: replays
        assert!(matches!(
            f.check(&report_at("n1", 1, 2)),
            Err(Dropped::Stale {
                seq: 2,
                last_seq: 2,
                ..
            })
        ));
        assert!(f.check(&report_at("n1", 1, 1)).is_err());
        assert!(f.check(&links_at("n1", 1, 2)).is_err());
        assert!(f.check(&links_at("n1", 1, 1)).is_err());
        assert_eq!(f.stale, 4);
        // each kind and each node has its own watermark
        assert_eq!(f.check(&links_at("n1", 1, 3)), Ok(()));
        assert_eq!(f.check(&report_at("n2", 1, 1)), Ok(()));
        assert_eq!(f.check(&links_at("n2", 1, 1)), Ok(()));
        // the agent of n1 restarts: the next run, seq from 1 again
        assert_eq!(f.check(&report_at("n1", 2, 1)), Ok(()));
        assert_eq!(f.check(&links_at("n1", 2, 1)), Ok(()));
        // a message of the old run with a higher seq is still a replay
        assert!(f.check(&report_at("n1", 1, 9)).is_err());
        assert!(f.check(&links_at("n1", 1, 9)).is_err());
        assert_eq!(f.check(&report_at("n1", 2, 2)), Ok(()));
        // events that are not signed agent messages pass
        let app = Event::AppPublished {
            app: "a".into(),
            payload: vec![],
        };
        assert_eq!(f.check(&app), Ok(()));
        assert_eq!(f.check(&app), Ok(()));
    }

    fn presence(node: &str, run: u64, conn: u64, online: bool) -> Message {
        Message::Presence(wire::Presence {
            node: wire::name(node).unwrap(),
            run,
            conn,
            online,
        })
    }

    /// The topic, the keys (n1 enrolled with `k1`) and the control plane's key.
    fn n1_keys(k1: &SigningKey) -> (Keys, VerifyingKey) {
        let mut keys = Keys::new();
        keys.insert("n1".into(), Some(k1.verifying_key()));
        keys.insert("n2".into(), None);
        (keys, SigningKey::from_bytes(&[3; 32]).verifying_key())
    }

    #[test]
    fn a_presence_counts_only_signed_by_its_node_and_of_its_connection() {
        let k1 = SigningKey::from_bytes(&[1; 32]);
        let (keys, cp) = n1_keys(&k1);
        let topic = "acoa/v1/nodes/n1/online";
        let will = wire::encode(&presence("n1", 4, 2, false), Some(&k1)).unwrap();
        assert_eq!(
            classify(topic, &will, &keys, &cp),
            Ok(Some(Event::Online {
                node: "n1".into(),
                online: false,
                run: 4,
                conn: 2
            }))
        );
        // unsigned, signed by another key, naming another node, another message, text
        let unsigned = wire::encode(&presence("n1", 4, 2, false), None).unwrap();
        let other = SigningKey::from_bytes(&[2; 32]);
        let forged = wire::encode(&presence("n1", 4, 2, false), Some(&other)).unwrap();
        let named = wire::encode(&presence("n2", 4, 2, false), Some(&k1)).unwrap();
        let report = wire::encode(&report("n1"), Some(&k1)).unwrap();
        for bad in [&unsigned, &forged, &report, &b"offline".to_vec()] {
            let e = classify(topic, bad, &keys, &cp).unwrap_err();
            assert!(matches!(e, Dropped::BadMarker { .. }), "{e}");
            assert!(e.to_string().contains("not a signed presence"), "{e}");
        }
        assert!(matches!(
            classify(topic, &named, &keys, &cp),
            Err(Dropped::WrongNode { .. })
        ));
        // a node without a key: refused; a cleared retained marker: nothing
        assert!(matches!(
            classify("acoa/v1/nodes/n2/online", &will, &keys, &cp),
            Err(Dropped::NoKey { .. })
        ));
        assert_eq!(classify(topic, b"", &keys, &cp), Ok(None));
    }

    #[test]
    fn the_will_of_an_earlier_connection_replayed_is_dropped() {
        let k1 = SigningKey::from_bytes(&[1; 32]);
        let (keys, cp) = n1_keys(&k1);
        let topic = "acoa/v1/nodes/n1/online";
        let ev = |run, conn, online| {
            let b = wire::encode(&presence("n1", run, conn, online), Some(&k1)).unwrap();
            classify(topic, &b, &keys, &cp).unwrap().unwrap()
        };
        let mut f = Freshness::default();
        // connection 1 of run 4: online, then its will (same connection)
        assert_eq!(f.check(&ev(4, 1, true)), Ok(()));
        let old_will = ev(4, 1, false);
        assert_eq!(f.check(&old_will), Ok(()));
        // connection 2 comes online: the first will, captured and published again, is a replay
        assert_eq!(f.check(&ev(4, 2, true)), Ok(()));
        let e = f.check(&old_will).unwrap_err();
        assert!(e.to_string().contains("as a replay"), "{e}");
        assert!(e.to_string().contains("presence"), "{e}");
        // the current connection's will counts; a later run's online too
        assert_eq!(f.check(&ev(4, 2, false)), Ok(()));
        assert_eq!(f.check(&ev(5, 1, true)), Ok(()));
        assert!(
            f.check(&ev(4, 9, false)).is_err(),
            "any will of an earlier run"
        );
    }
}
