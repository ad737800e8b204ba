//! The control plane's peer lists as a pure state machine (events in, actions out): each
//! node's signed list of at most k neighbours (its group, the nearest on the map and by
//! coordinates, a few random ones drawn again once a period), debounced, published only when
//! changed, computed off the loop in a large fleet. The link source, the estimates and the
//! targeted probes are `tests/targeted.rs`'s.

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::geo::Position;
use acoa_shared::wire;
use cloud_broker::engine::{Action, EngineConfig, Event};
use cloud_broker::testkit::engine::{
    edge_node, first_report as report, link_metrics, links_of, lost_when_silent, peer_jobs,
    peer_lists_published, railway, will_of, EngineSim as Sim,
};

#[test]
fn peer_lists_are_per_node_signed_debounced_and_follow_membership() {
    let c = railway();
    let mut sim = Sim::new(lost_when_silent());
    sim.join_cluster(&c);
    let acts = sim.tick(1000);
    let lists = peer_lists_published(&acts, &sim.key);
    assert_eq!(
        lists.len(),
        c.nodes.len(),
        "one list per node, in one round"
    );
    let generation = lists.values().next().unwrap().generation;
    for (n, pl) in &lists {
        // k = 32 is more than the railway's nodes: every other node
        assert_eq!(pl.peers.len(), c.nodes.len() - 1, "{n}");
        assert!(pl.peers.iter().all(|p| p.node.as_str() != n));
        assert_eq!(pl.generation, generation);
        let dc = &c.nodes.iter().find(|x| &x.name == n).unwrap().datacenter;
        for p in &pl.peers {
            let pdc = &c
                .nodes
                .iter()
                .find(|x| x.name == p.node.as_str())
                .unwrap()
                .datacenter;
            assert_eq!(p.group, pdc == dc, "{n} -> {}", p.node);
        }
    }
    // nothing changed: nothing published
    let acts = sim.tick(1000);
    assert!(peer_lists_published(&acts, &sim.key).is_empty());
    sim.feed(will_of("n05"));
    let acts = sim.tick(1000);
    let lists2 = peer_lists_published(&acts, &sim.key);
    assert_eq!(
        lists2.len(),
        c.nodes.len() - 1,
        "every list named n05; n05 gets none"
    );
    for pl in lists2.values() {
        assert_eq!(pl.peers.len(), c.nodes.len() - 2);
        assert!(pl.generation > generation);
        assert!(pl.peers.iter().all(|p| p.node.as_str() != "n05"));
    }
}

#[test]
fn with_a_small_k_each_node_probes_its_group_the_nearest_and_a_few_random() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_k: 4,
        ..lost_when_silent()
    });
    sim.join_cluster(&c);
    let lists = peer_lists_published(&sim.tick(1000), &sim.key);
    assert_eq!(lists.len(), c.nodes.len());
    for (n, pl) in &lists {
        assert_eq!(pl.peers.len(), 4.min(c.nodes.len() - 1), "{n}");
        assert!(
            pl.peers.iter().filter(|p| p.group).count() <= 1,
            "a quarter of k: {n}"
        );
    }
    // coordinates reported with the link metrics change the nearest slots: published again at
    // the refresh period, not before
    let coord_of = |x: f32| wire::WireCoord {
        vec: [x, 0.0, 0.0],
        height: 1.0,
        error: 0.2,
    };
    for (i, n) in c.nodes.iter().enumerate() {
        let mut l = links_of(&c, &n.name);
        l.seq = 2;
        l.coord = Some(coord_of(10.0 * i as f32));
        sim.feed(Event::links(Box::new(l)));
    }
    assert_eq!(
        sim.e.coordinate(&c.nodes[3].name).map(|c| c.vec()[0]),
        Some(30.0)
    );
    assert!(peer_lists_published(&sim.tick(1000), &sim.key).is_empty());
    let later = peer_lists_published(&sim.tick(30_000), &sim.key);
    assert!(
        !later.is_empty(),
        "the nearest slots follow the coordinates"
    );
    // a coordinate that does not check out is ignored, the rest of the message is not
    let mut bad = links_of(&c, &c.nodes[0].name);
    bad.seq = 3;
    bad.coord = Some(wire::WireCoord {
        height: -1.0,
        ..coord_of(5.0)
    });
    sim.feed(Event::links(Box::new(bad)));
    assert_eq!(
        sim.e.coordinate(&c.nodes[0].name).map(|c| c.vec()[0]),
        Some(0.0)
    );
}

/// Stations along a line, 5 km apart, each a datacenter of its own with its position; the
/// coordinates they report scramble the line (as coordinates over-estimate short pairs): the
/// nearest on the map still reach each station's neighbours. A position that does not check
/// out is ignored, the report is not.
#[test]
fn a_station_probes_its_neighbours_on_the_map_whatever_the_coordinates_say() {
    let run = |positions: bool| {
        let mut sim = Sim::new(EngineConfig {
            peers_k: 16,
            ..lost_when_silent()
        });
        let n = 40;
        let name = |i: usize| format!("n{}", 10 + i);
        for i in 0..n {
            let mut node = edge_node(&name(i), &format!("station{i}"));
            node.position =
                positions.then(|| Position::new(46.0 + i as f64 * 5.0 / 111.19, 7.0).unwrap());
            sim.feed(Event::Report(Box::new(report(&node))));
        }
        for i in 0..n {
            let mut l = link_metrics(&name(i), []);
            l.coord = Some(wire::WireCoord {
                vec: [((i * 17) % n) as f32 * 10.0, 0.0, 0.0],
                height: 1.0,
                error: 0.2,
            });
            sim.feed(Event::links(Box::new(l)));
        }
        let lists = peer_lists_published(&sim.tick(1000), &sim.key);
        assert_eq!(lists.len(), n);
        // how many stations' lists hold both their neighbours on the line
        (1..n - 1)
            .filter(|&i| {
                let names: BTreeSet<&str> = lists[&name(i)]
                    .peers
                    .iter()
                    .map(|p| p.node.as_str())
                    .collect();
                names.contains(name(i - 1).as_str()) && names.contains(name(i + 1).as_str())
            })
            .count()
    };
    assert_eq!(run(true), 38, "every station in the middle");
    // without positions the random slots reach a neighbour now and then
    assert!(run(false) < 10, "{}", run(false));

    let mut sim = Sim::new(lost_when_silent());
    let mut r = report(&edge_node("n10", "station0"));
    r.position = Some(wire::WirePosition {
        lat_deg: 95.0,
        lon_deg: 7.0,
    });
    sim.feed(Event::Report(Box::new(r)));
    let info = &sim.snap.nodes["n10"];
    assert_eq!(info.position, None);
    assert_eq!(
        info.datacenter, "station0",
        "the rest of the report is taken"
    );
    let mut good = report(&edge_node("n10", "station0"));
    good.seq = 2;
    good.position = Some(wire::WirePosition {
        lat_deg: 46.5,
        lon_deg: 7.0,
    });
    sim.feed(Event::Report(Box::new(good)));
    assert_eq!(
        sim.snap.nodes["n10"].position,
        Some(Position::new(46.5, 7.0).unwrap()),
        "a new position is persisted"
    );
}

/// A joining fleet's new nodes land in the random and nearest slots of most lists, round after
/// round: a list that only found other neighbours waits until the one sent is
/// `peers_refresh_ms` old, while a new node's list and one that named a node now gone go out
/// at once (`peerlists::due`).
#[test]
fn a_list_that_only_found_other_neighbours_waits_until_the_refresh() {
    let c = railway();
    let cfg = EngineConfig {
        peers_k: 4,
        // nobody is judged silent here: only joins and the will below change lists
        node_timeout_ms: 3_600_000,
        ..lost_when_silent()
    };
    let debounce = cfg.peers_debounce_ms;
    let mut sim = Sim::new(cfg);
    sim.join_cluster(&c);
    let first = peer_lists_published(&sim.tick(1000), &sim.key);
    assert_eq!(first.len(), c.nodes.len());
    // twenty nodes join, each in a datacenter of its own
    let joined: BTreeSet<String> = (21..41).map(|i| format!("m{i}")).collect();
    for n in &joined {
        sim.feed(Event::Report(Box::new(report(&edge_node(
            n,
            &format!("dc-{n}"),
        )))));
    }
    let round = peer_lists_published(&sim.tick(debounce), &sim.key);
    assert_eq!(
        round.keys().cloned().collect::<BTreeSet<_>>(),
        joined,
        "only the new nodes' lists at once"
    );
    // the old lists that now name new nodes go out at the refresh, not before
    assert!(peer_lists_published(&sim.tick(1000), &sim.key).is_empty());
    let later = peer_lists_published(&sim.tick(30_000), &sim.key);
    let names = |pl: &wire::PeerList| -> BTreeSet<String> {
        pl.peers.iter().map(|p| p.node.to_string()).collect()
    };
    assert!(!later.is_empty(), "the railway's lists found the new nodes");
    for (n, pl) in &later {
        assert!(first.contains_key(n), "{n}: a railway node's");
        assert_ne!(names(pl), names(&first[n]), "{n}");
    }
    // a node gone: every list naming it goes out at the next round, however recent
    let gone = later
        .values()
        .flat_map(|pl| pl.peers.iter().map(|p| p.node.to_string()))
        .find(|p| joined.contains(p))
        .expect("a railway list names a new node");
    let naming: BTreeSet<String> = joined
        .iter()
        .chain(c.nodes.iter().map(|n| &n.name))
        .filter(|n| sim.e.peer_list(n).is_some_and(|l| l.contains(&gone)))
        .cloned()
        .collect();
    assert!(!naming.is_empty());
    sim.feed(will_of(gone.as_str()));
    let after = peer_lists_published(&sim.tick(debounce), &sim.key);
    for n in &naming {
        let pl = after
            .get(n)
            .unwrap_or_else(|| panic!("{n} still lists {gone}"));
        assert!(!names(pl).contains(&gone), "{n}");
    }
}

/// The peers of each node's list that are not of its group, and those that are.
fn split_by_group(pl: &wire::PeerList) -> (BTreeSet<String>, BTreeSet<String>) {
    let (own, other): (Vec<_>, Vec<_>) = pl.peers.iter().partition(|p| p.group);
    let names = |v: Vec<&wire::Peer>| v.into_iter().map(|p| p.node.to_string()).collect();
    (names(other), names(own))
}

#[test]
fn each_nodes_random_peers_are_drawn_again_once_a_period_a_few_nodes_at_a_time() {
    let c = railway();
    let run = |rotate_ms: u64| {
        let mut sim = Sim::new(EngineConfig {
            peers_k: 4,
            peers_rotate_ms: rotate_ms,
            // nobody is judged silent here: only the rotation changes lists
            node_timeout_ms: 3_600_000,
            ..EngineConfig::default()
        });
        sim.join_cluster(&c);
        let first = peer_lists_published(&sim.tick(1000), &sim.key);
        assert_eq!(first.len(), c.nodes.len());
        // 11 refreshes of 30 s: a little more than one period of 300 s
        let mut rounds = vec![];
        for _ in 0..11 {
            rounds.push(peer_lists_published(&sim.tick(30_000), &sim.key));
        }
        (first, rounds)
    };
    let (first, rounds) = run(0);
    assert!(
        rounds.iter().all(|r| r.is_empty()),
        "without rotation nothing changes"
    );
    let (first_rotating, rounds) = run(300_000);
    assert_eq!(first, first_rotating, "the first lists do not depend on it");
    let mut last = first.clone();
    let mut redrawn = BTreeSet::new();
    for (i, r) in rounds.iter().enumerate() {
        // the nodes' epochs are spread over the period: a few lists at a time
        assert!(r.len() <= c.nodes.len() / 2, "round {i}: {} lists", r.len());
        for (n, pl) in r {
            let (other, own) = split_by_group(pl);
            let (other_before, own_before) = split_by_group(&last[n]);
            assert_eq!(own, own_before, "{n}: its group's slot stays");
            assert_ne!(other, other_before, "{n}: its random peers change");
            redrawn.insert(n.clone());
            last.insert(n.clone(), pl.clone());
        }
    }
    assert_eq!(
        redrawn.len(),
        c.nodes.len(),
        "every node's, within a period"
    );
}

#[test]
fn a_control_plane_that_takes_over_draws_the_random_peers_its_predecessor_did() {
    let c = railway();
    // the rotation counts on the wall clock: 2023-11-14, when the first control plane starts
    let wall = 1_700_000_000_000;
    let engine = |wall_clock_at_0_ms: u64| {
        let mut sim = Sim::new(EngineConfig {
            peers_k: 4,
            peers_rotate_ms: 300_000,
            wall_clock_at_0_ms,
            node_timeout_ms: 3_600_000,
            ..EngineConfig::default()
        });
        sim.join_cluster(&c);
        sim
    };
    // the first runs 331 s: every node's random peers drawn again once
    let mut first = engine(wall);
    // the peers of each list (the generation is the store's round counter)
    let peers = |lists: BTreeMap<String, wire::PeerList>| -> BTreeMap<String, Vec<String>> {
        lists
            .into_iter()
            .map(|(n, l)| (n, l.peers.iter().map(|p| p.node.to_string()).collect()))
            .collect()
    };
    let mut lists = peers(peer_lists_published(&first.tick(1000), &first.key));
    let started = lists.clone();
    for _ in 0..11 {
        lists.extend(peers(peer_lists_published(&first.tick(30_000), &first.key)));
    }
    assert_ne!(lists, started, "the first one's lists were drawn again");
    // a standby (or the same, restarted) whose time 0 is 330 s later lists, 1 s after it
    // starts, what the first one had listed last
    let mut next = engine(wall + 330_000);
    let taken_over = peers(peer_lists_published(&next.tick(1000), &next.key));
    assert_eq!(taken_over, lists, "the epoch in force, not epoch 0 again");
    // counted from each process' start instead, it would draw the first lists again
    let mut from_start = engine(0);
    let restarted = peers(peer_lists_published(
        &from_start.tick(1000),
        &from_start.key,
    ));
    assert_ne!(restarted, lists);
}

#[test]
fn a_large_fleets_peer_lists_are_computed_off_the_loop_and_give_the_same_lists() {
    let c = railway();
    // inline (the railway's 20 nodes are under the default threshold)
    let mut inline = Sim::new(lost_when_silent());
    inline.join_cluster(&c);
    let expected = peer_lists_published(&inline.tick(1000), &inline.key);
    assert_eq!(expected.len(), c.nodes.len());

    // off the loop: the tick asks for the computation and publishes nothing itself
    let cfg = EngineConfig {
        peers_offload_from: 1,
        ..lost_when_silent()
    };
    let mut sim = Sim::new(cfg);
    sim.join_cluster(&c);
    sim.now += 1000;
    let acts = sim.e.handle(sim.now, Event::Tick);
    assert!(peer_lists_published(&acts, &sim.key).is_empty());
    let jobs = peer_jobs(&acts);
    assert_eq!(jobs.len(), 1, "one computation asked for");
    // while it computes, membership changes do not start another
    sim.now += 1000;
    sim.e.handle(sim.now, will_of("n05"));
    sim.now += 1000;
    let acts = sim.e.handle(sim.now, Event::Tick);
    assert!(!acts.iter().any(|a| matches!(a, Action::ComputePeers(_))));
    // its result: the same lists as inline, for the nodes not lost since, every one signed
    // by the computation (all are new)
    let result = jobs[0].run();
    assert_eq!(result.signed.len(), c.nodes.len());
    let acts = sim
        .e
        .handle(sim.now, Event::PeersComputed(Box::new(result)));
    let lists = peer_lists_published(&acts, &sim.key);
    assert_eq!(
        lists.len(),
        c.nodes.len() - 1,
        "n05 was lost meanwhile: no list"
    );
    assert!(!lists.contains_key("n05"));
    for (n, pl) in &lists {
        let names = |l: &wire::PeerList| -> Vec<String> {
            l.peers.iter().map(|p| p.node.to_string()).collect()
        };
        assert_eq!(names(pl), names(&expected[n]), "{n}");
    }
    // the change made meanwhile is the next round's: now a new computation
    sim.now += 1000;
    let acts = sim.e.handle(sim.now, Event::Tick);
    let next = peer_jobs(&acts);
    assert_eq!(
        next.len(),
        1,
        "the membership change asks for another round"
    );
    // a result that is not the last asked for is ignored
    let stale = jobs[0].run();
    assert!(peer_lists_published(
        &sim.e.handle(sim.now, Event::PeersComputed(Box::new(stale))),
        &sim.key
    )
    .is_empty());
    // the loop publishes the bytes the computation signed (signatures are deterministic:
    // one is marked to tell)
    let mut r = next[0].run();
    let (marked, bytes) = r.signed.iter_mut().next().expect("a list changed");
    *bytes = b"as the computation signed it".to_vec();
    let marked = marked.clone();
    let acts = sim.e.handle(sim.now, Event::PeersComputed(Box::new(r)));
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::PublishLatest { topic, payload }
            if *topic == acoa_shared::topics::peers(&marked)
                && payload.as_slice() == b"as the computation signed it")),
        "{marked}'s list was signed again on the loop"
    );
    let others: Vec<Action> = acts
        .into_iter()
        .filter(|a| !matches!(a, Action::PublishLatest { topic, .. } if *topic == acoa_shared::topics::peers(&marked)))
        .collect();
    assert!(
        !peer_lists_published(&others, &sim.key).is_empty(),
        "the lists without n05's will changed"
    );
}

/// A round of peer lists computes every list (O(fleet)) and a joining fleet changes lists with
/// every join: the debounce grows with the fleet, a millisecond per
/// `PEERS_DEBOUNCE_NODES_PER_MS` nodes beyond `peers_debounce_ms` (at 30,000 nodes joining,
/// rounds every 500 ms were a third of the control plane's CPU).
#[test]
fn a_larger_fleets_peer_lists_wait_longer_for_more_joins() {
    use cloud_broker::engine::PEERS_DEBOUNCE_NODES_PER_MS;
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_debounce_ms: 0,
        ..Default::default()
    });
    sim.join_cluster(&c);
    let wait = c.nodes.len() as u64 / PEERS_DEBOUNCE_NODES_PER_MS;
    assert!(wait >= 2, "{wait}");
    let acts = sim.tick(wait - 1);
    assert!(
        peer_lists_published(&acts, &sim.key).is_empty(),
        "lists {} ms after the joins",
        wait - 1
    );
    let acts = sim.tick(1);
    assert_eq!(peer_lists_published(&acts, &sim.key).len(), c.nodes.len());
}
