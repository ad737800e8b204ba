//! The exploration rounds after a placement on estimated links, as a pure state machine
//! (events in, actions out): the links around the placement asked for, measured, and the
//! placement moved only onto measured links (the rest of the targeted probes:
//! `tests/targeted.rs`). Placement jobs are run inline with `run_job` (the real scheduler).

use std::collections::BTreeMap;

use acoa_shared::model;
use acoa_shared::wire;
use cloud_broker::engine::{Action, EngineConfig, Event, Purpose};
use cloud_broker::testkit::engine::{
    edge_node, first_report as report, links_of, statuses, EngineSim as Sim,
};

/// The exploration's fleet: n0 in datacenter a, n1 in c, n2-n4 in b, n1-n4 with a `sink`
/// device; n0 measures n1 (10 ms) and whatever `truth` names of n2-n4 (its peer list asked
/// for them), n1-n4 one another (1 ms); coordinates on a line (n0 at 0, n1 -20, n2 5, n3 6,
/// n4 9, heights 1 ms: n0 -> n2 is estimated 7 ms, n3 8, n4 11, or the median of the links
/// measured between a and b where it is shorter).
fn exploration_fleet(truth: &[(usize, f64)]) -> (model::Cluster, BTreeMap<String, f32>) {
    let name = |i: usize| format!("n{i}");
    let nodes: Vec<model::Node> = (0..5)
        .map(|i| {
            let mut n = edge_node(&name(i), ["a", "c", "b", "b", "b"][i]);
            if i > 0 {
                n.hardware = vec!["sink".into()];
            }
            n
        })
        .collect();
    let link = |a: usize, b: usize, latency_ms: f64| model::Link {
        from: name(a),
        to: name(b),
        latency_ms,
        jitter_ms: 0.1,
        success: 1.0,
    };
    let mut links = vec![link(0, 1, 10.0), link(1, 0, 10.0)];
    for a in 1..5 {
        for b in 1..5 {
            if a != b {
                links.push(link(a, b, 1.0));
            }
        }
    }
    links.extend(truth.iter().map(|&(b, l)| link(0, b, l)));
    let x = [0.0, -20.0, 5.0, 6.0, 9.0];
    let coords = (0..5).map(|i| (name(i), x[i])).collect();
    let c = model::Cluster {
        cluster: "explore".into(),
        nodes,
        links,
        ..Default::default()
    };
    (c, coords)
}

/// Every node of `c` reports its links with its coordinate (report `seq`).
fn report_links(sim: &mut Sim, c: &model::Cluster, coords: &BTreeMap<String, f32>, seq: u64) {
    for n in &c.nodes {
        let mut l = links_of(c, &n.name);
        l.seq = seq;
        l.coord = Some(wire::WireCoord {
            vec: [coords[&n.name], 0.0, 0.0],
            height: 1.0,
            error: 0.2,
        });
        sim.feed(Event::links(Box::new(l)));
    }
}

/// The exploration's fleet joined (k = 1, every node's coordinate reported), and the
/// application `pair` published: a source pinned to n0, a sink on a node with the `sink`
/// device, the response time between them.
fn exploring_pair() -> (Sim, BTreeMap<String, f32>, Vec<Action>) {
    exploring_pair_k(1)
}

/// [`exploring_pair`] with `k` neighbours per peer list.
fn exploring_pair_k(k: usize) -> (Sim, BTreeMap<String, f32>, Vec<Action>) {
    let (c, coords) = exploration_fleet(&[]);
    let mut sim = Sim::new(EngineConfig {
        peers_k: k,
        ..EngineConfig::default()
    });
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    report_links(&mut sim, &c, &coords, 1);
    sim.feed(Event::StartupDone);
    let acts = sim.publish("pair", PAIR.as_bytes().to_vec());
    (sim, coords, acts)
}

/// The application of [`exploring_pair`] (revision 1: images `:1`).
const PAIR: &str = "application: pair\n\
                    components:\n\
                    - {name: src, image: 'localhost/acoa/a:1', requires: {node: n0}}\n\
                    - {name: sink, image: 'localhost/acoa/b:1', requires: {hardware: [sink]}}\n\
                    channels:\n\
                    - {name: c, from: src, to: sink}\n\
                    paths:\n\
                    - {name: p, channels: [c]}\n\
                    criteria:\n\
                    - {type: min-e2e-response-time, path: p, weight: 1.0}\n";

/// While a new revision rolls out, an exploration round does not move the placement (as the
/// periodic re-evaluation does not: a move would cut the rollout short).
#[test]
fn an_exploration_does_not_move_a_placement_while_a_revision_rolls_out() {
    let (mut sim, coords, _) = exploring_pair();
    sim.tick(1000);
    // revision 2: new images, rolled out
    let v2 = PAIR.replace(":1'", ":2'") + "update: {healthy_s: 2, deadline_s: 600}\n";
    assert!(v2.contains("a:2'") && v2.contains("b:2'"), "{v2}");
    sim.publish("pair", v2.as_bytes().to_vec());
    let st = sim.e.status_now("pair").unwrap();
    assert!(st.rollout.is_some(), "a rollout runs: {st:?}");
    assert_eq!(st.placement.as_ref().unwrap()["sink"], "n2");
    // n0 -> n2 measured (12 ms): the round finds n1 (10 ms) better, and it stays
    let (c, _) = exploration_fleet(&[(2, 12.0)]);
    report_links(&mut sim, &c, &coords, 2);
    sim.log.clear();
    sim.tick(200);
    assert!(
        sim.log
            .iter()
            .any(|a| matches!(a, Action::Schedule(j) if j.purpose == Purpose::Explore)),
        "an exploration round ran"
    );
    let st = sim.e.status_now("pair").unwrap();
    assert!(st.rollout.is_some());
    assert_eq!(
        st.placement.as_ref().unwrap()["sink"],
        "n2",
        "no move mid-rollout"
    );
}

/// A placement on an estimated link (n0 -> n2, estimated 7 ms, truly 12) is explored: its
/// link measured, a round moves it onto the measured n1 (10 ms, better than 12) and asks for
/// the links around the search's placement on estimates (n3, and n4, estimated 11 ms: no
/// search on estimates would try it); measured, the next round moves it onto n4 (truly 5 ms)
/// and the exploration ends. No move rests on an estimate.
#[test]
fn a_placement_on_estimates_is_explored_onto_measured_links_and_the_exploration_ends() {
    let (mut sim, coords, acts) = exploring_pair();
    let st = statuses(&acts, "pair").pop().expect("a status");
    assert_eq!(
        st.placement.as_ref().unwrap()["sink"],
        "n2",
        "the best on estimates"
    );
    assert_eq!(st.links["c"], "estimated");
    let list = |sim: &Sim| sim.e.peer_list("n0").unwrap_or_default();
    sim.tick(1000);
    assert!(list(&sim).contains(&"n2".to_string()), "{:?}", list(&sim));
    let jobs = |sim: &Sim, from: usize| -> Vec<Purpose> {
        sim.log[from..]
            .iter()
            .filter_map(|a| match a {
                Action::Schedule(j) if j.app == "pair" => Some(j.purpose.clone()),
                _ => None,
            })
            .collect()
    };
    // round 1, once n0 -> n2 is measured
    let (c, _) = exploration_fleet(&[(2, 12.0)]);
    report_links(&mut sim, &c, &coords, 2);
    let from = sim.log.len();
    let acts = sim.tick(200);
    assert_eq!(jobs(&sim, from), [Purpose::Explore]);
    let st = statuses(&acts, "pair").pop().expect("a status");
    assert_eq!(
        st.placement.as_ref().unwrap()["sink"],
        "n1",
        "onto the measured link"
    );
    assert_eq!(st.links["c"], "measured");
    sim.tick(1000);
    let l = list(&sim);
    for peer in ["n1", "n3", "n4"] {
        assert!(l.contains(&peer.to_string()), "n0 probes {peer}: {l:?}");
    }
    // nothing happens until they are measured (not even the periodic re-evaluation)
    let from = sim.log.len();
    for seq in 3..13 {
        report_links(&mut sim, &c, &coords, seq);
        sim.tick(1000);
    }
    assert_eq!(jobs(&sim, from), []);
    // round 2: n3 15 ms, n4 5 ms
    let (c, _) = exploration_fleet(&[(2, 12.0), (3, 15.0), (4, 5.0)]);
    report_links(&mut sim, &c, &coords, 13);
    let from = sim.log.len();
    let acts = sim.tick(200);
    assert_eq!(jobs(&sim, from), [Purpose::Explore]);
    let st = statuses(&acts, "pair").pop().expect("a status");
    assert_eq!(st.placement.as_ref().unwrap()["sink"], "n4");
    assert_eq!(st.links["c"], "measured");
    assert_eq!(
        sim.e.exploration("pair"),
        Some((2, false)),
        "ended after 2 rounds"
    );
    // ended: its own link stays in n0's list, the others it asked for leave it
    sim.tick(1000);
    let l = list(&sim);
    assert!(l.contains(&"n4".to_string()), "{l:?}");
    assert!(l.len() <= 2, "k = 1 and its placement's link: {l:?}");
    let from = sim.log.len();
    for seq in 14..20 {
        report_links(&mut sim, &c, &coords, seq);
        sim.tick(1000);
    }
    assert!(
        !jobs(&sim, from).contains(&Purpose::Explore),
        "{:?}",
        jobs(&sim, from)
    );
}

/// A round whose links are never measured (a node's list full, a node silent) does not hold
/// the exploration: after `EXPLORE_WAIT_MS` the next round runs on what was measured, and it
/// does not move onto the links still estimated.
#[test]
fn an_exploration_round_waits_for_its_links_30_s_at_most_and_never_moves_onto_an_estimate() {
    let (mut sim, coords, _) = exploring_pair();
    sim.tick(1000);
    // round 1 once n0 -> n2 is measured: onto n1; it asks for n3 and n4, which never come
    let (c, _) = exploration_fleet(&[(2, 12.0)]);
    report_links(&mut sim, &c, &coords, 2);
    sim.tick(200);
    assert_eq!(sim.e.exploration("pair"), Some((1, true)));
    let explorations = |sim: &Sim| {
        sim.log
            .iter()
            .filter(|a| matches!(a, Action::Schedule(j) if j.purpose == Purpose::Explore))
            .count()
    };
    assert_eq!(explorations(&sim), 1);
    let wait = cloud_broker::engine::EXPLORE_WAIT_MS;
    let mut seq = 3;
    let mut waited = 0;
    while waited + 1000 < wait {
        report_links(&mut sim, &c, &coords, seq);
        seq += 1;
        sim.tick(1000);
        waited += 1000;
    }
    assert_eq!(explorations(&sim), 1, "still waiting after {waited} ms");
    report_links(&mut sim, &c, &coords, seq);
    sim.tick(1000);
    sim.tick(200);
    assert_eq!(explorations(&sim), 2, "the next round after {} ms", wait);
    let st = sim.e.status_now("pair").unwrap();
    assert_eq!(
        st.placement.as_ref().unwrap()["sink"],
        "n1",
        "n4 (estimated 11 ms) and n3 (estimated 8 ms) are not measured: no move"
    );
    assert_eq!(st.links["c"], "measured");
}

/// A round asks only for the links that fit in their first node's peer list (at most
/// `MAX_PEERS_PER_NODE` peers, `k` of them neighbours, the placement's own link targeted),
/// those that decide first: here room for one, the candidate's (n0 -> n3, estimated 8 ms),
/// not n0 -> n4. A link it did not ask for is never probed, so the round does not wait for
/// it: once n0 -> n3 is measured the next round runs at once (not after 30 s), asks for
/// n0 -> n4, and when that is measured the placement moves onto it.
#[test]
fn a_round_asks_only_for_the_links_that_fit_in_a_list_and_waits_for_no_other() {
    let (mut sim, coords, _) = exploring_pair_k(wire::MAX_PEERS_PER_NODE - 2);
    sim.tick(1000);
    let (c, _) = exploration_fleet(&[(2, 12.0)]);
    report_links(&mut sim, &c, &coords, 2);
    sim.tick(200);
    assert_eq!(sim.e.exploration("pair"), Some((1, true)));
    let sink = |sim: &Sim| sim.e.status_now("pair").unwrap().placement.unwrap()["sink"].clone();
    assert_eq!(sink(&sim), "n1", "onto the measured link");
    // n0 -> n3 measured (15 ms): the round asked for nothing else, the next one runs now
    let (c, _) = exploration_fleet(&[(2, 12.0), (3, 15.0)]);
    report_links(&mut sim, &c, &coords, 3);
    sim.tick(200);
    assert_eq!(
        sim.e.exploration("pair"),
        Some((2, true)),
        "the second round at once, waiting for n0 -> n4 now"
    );
    let (c, _) = exploration_fleet(&[(2, 12.0), (3, 15.0), (4, 5.0)]);
    report_links(&mut sim, &c, &coords, 4);
    sim.tick(200);
    assert_eq!(sink(&sim), "n4", "onto n0 -> n4, measured 5 ms");
    assert_eq!(sim.e.exploration("pair").map(|e| e.0), Some(3));
}

/// When nothing a round names fits (every slot beyond the neighbours taken), the round asks
/// for nothing and waits `EXPLORE_WAIT_MS`, as for links never measured: the exploration does
/// not run its rounds back to back on nothing new, nor end while there is more to probe.
#[test]
fn a_round_with_no_room_waits_and_does_not_end() {
    let (mut sim, coords, _) = exploring_pair_k(wire::MAX_PEERS_PER_NODE);
    sim.tick(1000);
    let (c, _) = exploration_fleet(&[(2, 12.0)]);
    report_links(&mut sim, &c, &coords, 2);
    sim.tick(200);
    assert_eq!(sim.e.exploration("pair"), Some((1, true)), "round 1 waits");
    let wait = cloud_broker::engine::EXPLORE_WAIT_MS;
    let mut waited = 0;
    for seq in 3.. {
        report_links(&mut sim, &c, &coords, seq);
        sim.tick(1000);
        waited += 1000;
        if waited + 1000 >= wait {
            break;
        }
    }
    assert_eq!(sim.e.exploration("pair"), Some((1, true)), "still waiting");
    sim.tick(2000);
    sim.tick(200);
    assert_eq!(
        sim.e.exploration("pair").map(|e| e.0),
        Some(2),
        "the next round after {wait} ms"
    );
}
