//! Each node's peer list, computed (pure: [`peer_lists`], [`PeersJob`]) and framed for the
//! wire; when they are computed and published is `probes.rs`'s.
//!
//! Invariant: a node's list never names the node itself, holds at most
//! [`wire::MAX_PEERS_PER_NODE`] peers and each peer once; the same members, coordinates,
//! targets and seed give the same lists.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use acoa_shared::coords::{select_all_neighbours, Coord, Member, NeighbourMix, DIMS};
use acoa_shared::geo::Position;
use acoa_shared::wire::{self, Message, Peer, PeerList, MAX_PEERS_PER_NODE};
use ed25519_dalek::SigningKey;
use tracing::error;

/// A node as a peer list names it: its name and where it answers probes, held once and
/// shared by every list that names it (50,000 lists of 32 peers: 1.6 million entries of 16
/// bytes, where two shared strings took 40).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAt {
    pub name: Box<str>,
    pub addr: Box<str>,
}

impl PeerAt {
    /// `name` probed at `addr`, to be shared by the lists that name it.
    pub fn shared(name: &str, addr: &str) -> Arc<PeerAt> {
        Arc::new(PeerAt {
            name: name.into(),
            addr: addr.into(),
        })
    }
}

/// One node as the peer lists see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub peer: Arc<PeerAt>,
    /// Its datacenter (or train).
    pub group: String,
    pub coord: Option<Coord<DIMS>>,
    /// Its position on the map (a fixed node's: `Member::place`).
    pub place: Option<Position>,
    /// Its random peers' epoch ([`rotation_epoch`]; `Member::epoch`).
    pub epoch: u64,
}

impl Candidate {
    pub fn new(
        name: &str,
        addr: &str,
        group: String,
        coord: Option<Coord<DIMS>>,
        place: Option<Position>,
        epoch: u64,
    ) -> Candidate {
        Candidate {
            peer: PeerAt::shared(name, addr),
            group,
            coord,
            place,
            epoch,
        }
    }

    pub fn name(&self) -> &str {
        &self.peer.name
    }
}

/// Node `name`'s rotation epoch at `now_ms` (wall-clock milliseconds) with a period of
/// `rotate_ms` (0: never, always 0): the nodes' epochs advance at times spread over the period
/// by their stable keys, so a rotation changes about `refresh / period` of the lists each time
/// they are computed, not every list at once.
pub fn rotation_epoch(name: &str, now_ms: u64, rotate_ms: u64) -> u64 {
    if rotate_ms == 0 {
        return 0;
    }
    now_ms.saturating_add(name_key(name) % rotate_ms) / rotate_ms
}

/// A node's stable key for the neighbour selection's random choices (FNV-1a of its name: the
/// same on every run and build).
fn name_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One peer of a node's list (in the order of the peer's name, then address).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListEntry {
    /// The candidate's own name and address, shared ([`Candidate`]).
    pub peer: Arc<PeerAt>,
    /// Of the node's own group.
    pub group: bool,
    /// In the list only because a placement targets it (not one of the node's neighbours):
    /// it leaves with the target ([`retarget`]). Not on the wire.
    pub targeted: bool,
}

/// Whether two lists name the same peers as the wire says them (the `targeted` marks aside).
pub fn same_peers(a: &[ListEntry], b: &[ListEntry]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.peer == y.peer && x.group == y.group)
}

/// `sent` with its targeted peers set to `want` (a node's targets now), its neighbours kept:
/// the entries only targeted and no longer wanted leave, the peers wanted and not listed come
/// in (`peer_of`: as a peer list names it and whether it is of the node's group, `None` when
/// it is not a candidate) while there is room, in the order of their names, as
/// [`peer_lists`] adds them. O(list + targets): a change of targets alone (an exploration
/// round) needs no new neighbour sets.
pub fn retarget(
    node: &str,
    sent: &[ListEntry],
    want: Option<&BTreeSet<String>>,
    mut peer_of: impl FnMut(&str) -> Option<(Arc<PeerAt>, bool)>,
) -> Vec<ListEntry> {
    let wanted = |p: &str| want.is_some_and(|w| w.contains(p));
    let mut list: Vec<ListEntry> = sent
        .iter()
        .filter(|e| !e.targeted || wanted(&e.peer.name))
        .cloned()
        .collect();
    for t in want.into_iter().flatten() {
        if list.len() >= MAX_PEERS_PER_NODE {
            break;
        }
        if t == node || list.iter().any(|e| *e.peer.name == **t) {
            continue;
        }
        if let Some((peer, group)) = peer_of(t) {
            list.push(ListEntry {
                peer,
                group,
                targeted: true,
            });
        }
    }
    list.sort();
    list
}

/// Of `want` (pairs from -> to, those that matter most first), the pairs that fit in their
/// first nodes' lists: a node has `room` peers beyond its neighbours (a list holds at most
/// [`MAX_PEERS_PER_NODE`]), `listed` are the pairs targeted already, and a node takes the
/// first pairs to new peers while it has room (one to a peer listed already takes none).
/// The pairs that fit, and how many did not. A targeted peer beyond the room is never in the
/// list ([`peer_lists`], [`retarget`]), so whoever waits for its link waits in vain.
pub fn fitting<'a>(
    room: usize,
    listed: impl IntoIterator<Item = &'a (String, String)>,
    want: impl IntoIterator<Item = (String, String)>,
) -> (BTreeSet<(String, String)>, usize) {
    let mut peers: HashMap<&str, HashSet<String>> = HashMap::new();
    for (x, y) in listed {
        peers.entry(x).or_default().insert(y.clone());
    }
    let (mut fit, mut left_out) = (BTreeSet::new(), 0);
    let mut added: HashMap<String, HashSet<String>> = HashMap::new();
    for (x, y) in want {
        let there = peers.get(x.as_str());
        let new = added.entry(x.clone()).or_default();
        if there.is_some_and(|t| t.contains(&y)) || new.contains(&y) {
            fit.insert((x, y));
        } else if there.map_or(0, HashSet::len) + new.len() < room {
            new.insert(y.clone());
            fit.insert((x, y));
        } else {
            left_out += 1;
        }
    }
    (fit, left_out)
}

/// The peer list of every candidate: its `k` neighbours and, beyond them, the peers
/// `targeted` names for it (while there is room), sorted by peer name. O(n log n) in the
/// candidates (`select_all_neighbours`: the nearest from a k-d tree over the coordinates).
pub fn peer_lists(
    cands: &[Candidate],
    k: usize,
    targeted: &BTreeMap<String, BTreeSet<String>>,
    seed: u64,
) -> BTreeMap<String, Vec<ListEntry>> {
    let k = k.min(MAX_PEERS_PER_NODE);
    let members: Vec<Member<&str, DIMS>> = cands
        .iter()
        .map(|c| Member {
            group: c.group.as_str(),
            coord: c.coord,
            place: c.place,
            key: name_key(c.name()),
            epoch: c.epoch,
        })
        .collect();
    let index: HashMap<&str, usize> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name(), i))
        .collect();
    let mix = NeighbourMix::for_k(k);
    let neighbours = select_all_neighbours(&members, k, mix, seed);
    let mut out = BTreeMap::new();
    for ((i, c), sel) in cands.iter().enumerate().zip(neighbours) {
        let mut chosen: BTreeSet<usize> = sel.into_iter().collect();
        let mut only_targeted = BTreeSet::new();
        for t in targeted.get(c.name()).into_iter().flatten() {
            if chosen.len() >= MAX_PEERS_PER_NODE {
                break;
            }
            if let Some(&j) = index.get(t.as_str()) {
                if j != i && chosen.insert(j) {
                    only_targeted.insert(j);
                }
            }
        }
        let mut list: Vec<ListEntry> = chosen
            .into_iter()
            .map(|j| ListEntry {
                peer: cands[j].peer.clone(),
                group: cands[j].group == c.group,
                targeted: only_targeted.contains(&j),
            })
            .collect();
        list.sort();
        out.insert(c.name().to_string(), list);
    }
    out
}

/// A computation of every peer list, handed to the I/O loop ([`super::Action::ComputePeers`]) when
/// the fleet is large: the same pure [`peer_lists`], and the lists due to be published
/// ([`due`]) framed and signed for the round's generation (signing is most of a round's CPU at
/// 20,000 nodes), off the decision loop. A small fleet's job runs on the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct PeersJob {
    /// Which computation this is (the engine takes only the result of the last one asked).
    pub id: u64,
    pub cands: Vec<Candidate>,
    pub k: usize,
    pub targets: BTreeMap<String, BTreeSet<String>>,
    pub seed: u64,
    /// The generation the round's published lists carry.
    pub generation: u64,
    /// The lists sent before (a snapshot: no list is sent while a job is out).
    pub sent: Arc<Sent>,
    /// Lists sent at this time (engine ms) or before are stale: one that only found other
    /// neighbours is published ([`due`]). The engine's time less `peers_refresh_ms`.
    pub stale_before: u64,
    /// The control plane's key, to sign the lists.
    pub key: SigningKey,
}

/// A peer list as last published: its generation, when (engine ms) and its peers.
#[derive(Debug, Clone, PartialEq)]
pub struct SentList {
    pub generation: u64,
    pub at_ms: u64,
    pub list: Vec<ListEntry>,
}

/// Per node, the peer list last published.
pub type Sent = BTreeMap<String, SentList>;

impl PeersJob {
    /// The lists, and those due signed (CPU only: seconds at 50,000 nodes).
    pub fn run(&self) -> PeersComputed {
        let lists = peer_lists(&self.cands, self.k, &self.targets, self.seed);
        let live: HashSet<&PeerAt> = self.cands.iter().map(|c| &*c.peer).collect();
        let Due {
            due,
            relabel,
            deferred,
        } = due(&lists, &self.sent, &self.targets, &live, self.stale_before);
        let mut signed = BTreeMap::new();
        for node in &due {
            let list = &lists[node];
            match frame(node, self.generation, list).and_then(|m| wire::encode(&m, Some(&self.key)))
            {
                Ok(bytes) => {
                    signed.insert(node.clone(), bytes);
                }
                Err(e) => error!("peer list of node {node} cannot be encoded: {e}"),
            }
        }
        PeersComputed {
            id: self.id,
            generation: self.generation,
            lists,
            due,
            relabel,
            deferred,
            signed,
        }
    }
}

/// Which lists of a round are published ([`due`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Due {
    /// The nodes whose list is published now.
    pub due: Vec<String>,
    /// The nodes whose list names the peers the one sent does, with other `targeted` marks
    /// (a targeted peer that became a neighbour, or the other way): kept as the one sent,
    /// not published again.
    pub relabel: Vec<String>,
    /// How many others differ but wait.
    pub deferred: usize,
}

/// The nodes whose list in `lists` differs from the one `sent` and is published now, and how
/// many others differ but wait. A list is published at once when the node has none yet, when
/// it grew or shrank (a small fleet's lists follow every join; an exploration's targeted
/// pairs leave the list at its end, beyond `k`), when the one sent names a peer not
/// `live` (lost, or at another address: that slot measures nothing) or lacks a peer a
/// placement targets (`targets`: the placement waits for that link). A list that only found
/// other neighbours waits until the one sent is from `stale_before` (engine ms: the round's
/// time less `peers_refresh_ms`) or earlier: while a fleet joins, its new nodes land in the
/// random and nearest slots of most lists, round after round (at 50,000 nodes joining, rounds
/// every 5 s changed 60-80 % of the lists each: 510,000-790,000 lists signed, published and
/// checked by the agents in about 100 s; BENCHMARKS.md, "Views at the fleet's pace, and peer
/// lists that wait").
pub fn due(
    lists: &BTreeMap<String, Vec<ListEntry>>,
    sent: &Sent,
    targets: &BTreeMap<String, BTreeSet<String>>,
    live: &HashSet<&PeerAt>,
    stale_before: u64,
) -> Due {
    // whether list `l` names peer `p` (a few dozen entries)
    let names = |l: &[ListEntry], p: &str| l.iter().any(|e| &*e.peer.name == p);
    let Due {
        mut due,
        mut relabel,
        mut deferred,
    } = Due::default();
    for (node, list) in lists {
        let Some(s) = sent.get(node) else {
            due.push(node.clone());
            continue;
        };
        if same_peers(&s.list, list) {
            if s.list != *list {
                relabel.push(node.clone());
            }
            continue;
        }
        let targeted_new = || {
            targets
                .get(node)
                .is_some_and(|t| t.iter().any(|p| names(list, p) && !names(&s.list, p)))
        };
        if list.len() != s.list.len()
            || s.list.iter().any(|e| !live.contains(&*e.peer))
            || targeted_new()
            || s.at_ms <= stale_before
        {
            due.push(node.clone());
        } else {
            deferred += 1;
        }
    }
    Due {
        due,
        relabel,
        deferred,
    }
}

/// The result of a [`PeersJob`].
#[derive(Debug, Clone, PartialEq)]
pub struct PeersComputed {
    pub id: u64,
    /// The generation `signed` carries.
    pub generation: u64,
    pub lists: BTreeMap<String, Vec<ListEntry>>,
    /// The nodes whose lists are published, those kept with other marks, and how many changed
    /// lists wait ([`Due`]).
    pub due: Vec<String>,
    pub relabel: Vec<String>,
    pub deferred: usize,
    /// The lists due, framed and signed: what is published.
    pub signed: BTreeMap<String, Vec<u8>>,
}

pub(super) fn frame(
    node: &str,
    generation: u64,
    list: &[ListEntry],
) -> Result<Message, wire::WireError> {
    let mut peers = heapless::Vec::new();
    for e in list {
        let p = Peer {
            node: wire::name(&e.peer.name)?,
            addr: wire::bounded("probe_addr", &e.peer.addr)?,
            group: e.group,
        };
        peers.push(p).map_err(|_| wire::WireError::TooMany {
            field: "peer list",
            max: MAX_PEERS_PER_NODE,
        })?;
    }
    Ok(Message::PeerList(Box::new(PeerList {
        node: wire::name(node)?,
        generation,
        peers,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(name: &str, group: &str, x: f64) -> Candidate {
        Candidate::new(
            name,
            &format!("10.0.0.1:{}", 7000 + name.len()),
            group.into(),
            Some(Coord::new([x, 0.0, 0.0], 1.0, 0.2).unwrap()),
            None,
            0,
        )
    }

    /// A list's entry is a pointer to its peer, shared with every other list naming it.
    #[test]
    fn an_entry_is_a_shared_pointer_to_its_peer() {
        assert_eq!(std::mem::size_of::<ListEntry>(), 16);
        let cands: Vec<Candidate> = (0..40)
            .map(|i| cand(&format!("n{i}"), &format!("dc{}", i % 4), i as f64))
            .collect();
        let lists = peer_lists(&cands, 8, &BTreeMap::new(), 1);
        for e in lists.values().flatten() {
            let c = cands.iter().find(|c| c.name() == &*e.peer.name).unwrap();
            assert!(Arc::ptr_eq(&c.peer, &e.peer), "{}", e.peer.name);
        }
    }

    #[test]
    fn lists_are_bounded_by_k_plus_targets_and_never_name_their_node() {
        let cands: Vec<Candidate> = (0..200)
            .map(|i| cand(&format!("n{i}"), &format!("dc{}", i % 10), i as f64))
            .collect();
        let none = BTreeMap::new();
        let lists = peer_lists(&cands, 8, &none, 1);
        assert_eq!(lists.len(), 200);
        for (n, l) in &lists {
            assert_eq!(l.len(), 8, "{n}");
            assert!(l.iter().all(|e| *e.peer.name != **n));
            let group = l.iter().filter(|e| e.group).count();
            assert_eq!(group, 2, "a quarter of k for the node's own group: {n}");
        }
        assert_eq!(lists, peer_lists(&cands, 8, &none, 1), "deterministic");
        // a targeted peer comes on top of the k neighbours, once
        let far = "n199".to_string();
        let t = BTreeMap::from([("n0".to_string(), BTreeSet::from([far.clone(), "n0".into()]))]);
        let with = peer_lists(&cands, 8, &t, 1);
        let l = &with["n0"];
        assert!(l.iter().any(|e| *e.peer.name == *far));
        assert!(l.len() <= 9 && l.iter().all(|e| &*e.peer.name != "n0"));
        assert_eq!(with["n1"], lists["n1"], "other lists unchanged");
        // k above the wire's bound is cut to it
        let big = peer_lists(&cands, 1000, &none, 1);
        assert!(big.values().all(|l| l.len() == MAX_PEERS_PER_NODE));
    }
    /// A node takes the pairs asked of it while it has room beyond its neighbours, the first
    /// first; a pair to a peer it lists already takes no room; another node has its own room.
    #[test]
    fn a_nodes_targets_fit_in_its_room_the_first_first() {
        let p = |x: &str, y: &str| (x.to_string(), y.to_string());
        let listed = [p("n0", "n1"), p("n0", "n2")];
        let want = [
            p("n0", "n9"),
            p("n0", "n2"),
            p("n1", "n3"),
            p("n0", "n8"),
            p("n0", "n7"),
            p("n1", "n4"),
        ];
        let (fit, left_out) = fitting(3, &listed, want.clone());
        assert_eq!(
            fit,
            BTreeSet::from([p("n0", "n9"), p("n0", "n2"), p("n1", "n3"), p("n1", "n4")])
        );
        assert_eq!(left_out, 2, "n0 -> n8 and n0 -> n7: n0 lists n1, n2 and n9");
        let (fit, left_out) = fitting(MAX_PEERS_PER_NODE, &listed, want.clone());
        assert_eq!((fit.len(), left_out), (want.len(), 0));
        assert_eq!(fitting(0, &listed, want).0, BTreeSet::from([p("n0", "n2")]));
    }

    /// A targeted peer that is not a neighbour is marked; retargeting a list gives what
    /// computing every list with the new targets gives; a list that only changed its marks is
    /// kept, not published.
    #[test]
    fn retargeting_a_list_gives_what_computing_it_again_gives() {
        let cands: Vec<Candidate> = (0..200)
            .map(|i| cand(&format!("n{i}"), &format!("dc{}", i % 10), i as f64))
            .collect();
        let none = BTreeMap::new();
        let base = peer_lists(&cands, 8, &none, 1);
        assert!(base.values().flatten().all(|e| !e.targeted));
        let neighbour = base["n0"][0].peer.name.to_string();
        let t = |peers: &[&str]| {
            BTreeMap::from([(
                "n0".to_string(),
                peers.iter().map(|p| p.to_string()).collect::<BTreeSet<_>>(),
            )])
        };
        let listed = |p: &str| base["n0"].iter().any(|e| &*e.peer.name == p);
        let far: Vec<String> = (100..200)
            .rev()
            .map(|i| format!("n{i}"))
            .filter(|p| !listed(p))
            .take(3)
            .collect();
        let first = t(&[&far[0], &far[1], &neighbour]);
        let with = peer_lists(&cands, 8, &first, 1);
        let marked: Vec<&str> = with["n0"]
            .iter()
            .filter(|e| e.targeted)
            .map(|e| &*e.peer.name)
            .collect();
        assert_eq!(
            marked,
            [&far[1], &far[0]],
            "the neighbour targeted is not marked"
        );
        let peer_of = |p: &str| {
            let c = cands.iter().find(|c| c.name() == p)?;
            Some((c.peer.clone(), c.group == "dc0"))
        };
        for next in [
            t(&[&far[0], &far[2]]),
            t(&[]),
            t(&["n0", &neighbour]),
            first.clone(),
        ] {
            let got = retarget("n0", &with["n0"], next.get("n0"), peer_of);
            assert_eq!(got, peer_lists(&cands, 8, &next, 1)["n0"], "{next:?}");
        }
        // marks alone differ: kept as sent with the new marks, not published
        let sent: Sent = with
            .iter()
            .map(|(n, l)| {
                let mut list = l.clone();
                list.iter_mut().for_each(|e| e.targeted = false);
                let s = SentList {
                    generation: 1,
                    at_ms: 0,
                    list,
                };
                (n.clone(), s)
            })
            .collect();
        let live: HashSet<&PeerAt> = cands.iter().map(|c| &*c.peer).collect();
        let d = due(&with, &sent, &first, &live, 0);
        assert_eq!(
            (d.due.len(), d.relabel, d.deferred),
            (0, vec!["n0".to_string()], 0)
        );
    }
}
