//! The control plane's measurement decisions as a pure state machine (events in, actions out):
//! each node's signed peer list of at most k neighbours, the sparse link source (measured links
//! and marked estimates from network coordinates), and the targeted probes of the links a
//! placement uses. Placement jobs are run inline with `run_job` (the real scheduler).

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::geo::Position;
use acoa_shared::model;
use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use cloud_broker::engine::{Action, EngineConfig, Event, Purpose};
use cloud_broker::testkit::engine::{
    edge_node, first_report as report, link_metrics, links_of, lost_when_silent, railway,
    railway_app as app_text, statuses, will_of, EngineSim as Sim,
};

/// The peer lists among `acts`, by node, checked: signed, for the node of their topic.
fn peer_lists_published(
    acts: &[Action],
    key: &ed25519_dalek::SigningKey,
) -> BTreeMap<String, wire::PeerList> {
    acts.iter()
        .filter_map(|a| match a {
            Action::PublishLatest { topic, payload } => match topics::parse(topic) {
                Some(topics::Topic::Peers(n)) => {
                    let Message::PeerList(pl) =
                        wire::decode_verified(payload, &key.verifying_key()).unwrap()
                    else {
                        panic!("not a peer list on {topic}")
                    };
                    assert_eq!(pl.node.as_str(), n, "the list of its topic's node");
                    Some((n.to_string(), *pl))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

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
fn the_link_source_gives_measurements_where_they_exist_and_marked_estimates_elsewhere() {
    use acoa_shared::coords::Known;
    let c = railway();
    let mut sim = Sim::new(lost_when_silent());
    // the nodes join, their links not yet measured
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    let (a, b) = (c.nodes[0].name.clone(), c.nodes[1].name.clone());
    let far = c
        .nodes
        .iter()
        .find(|n| n.datacenter != c.nodes[0].datacenter)
        .unwrap()
        .name
        .clone();
    // nothing measured, no coordinates: nothing can be said
    assert_eq!(sim.e.link_view(&a, &far), None);
    // a measures b only, b measures a only, far measures a only
    let sample = |peer: &str, latency: f32, jitter: f32, success: f32| wire::LinkSample {
        peer: wire::name(peer).unwrap(),
        latency_ms: latency,
        jitter_ms: jitter,
        success,
        samples: 20,
        last_answer_ms: 0,
    };
    let feed = |sim: &mut Sim, from: &str, s: wire::LinkSample, x: f32| {
        let mut l = cloud_broker::testkit::engine::link_metrics(from, [s]);
        l.seq = 5;
        l.coord = Some(wire::WireCoord {
            vec: [x, 0.0, 0.0],
            height: 2.0,
            error: 0.1,
        });
        sim.feed(Event::links(Box::new(l)));
    };
    // a third datacenter's node that measures only a mate of its own
    let dc = |n: &str| &c.nodes.iter().find(|x| x.name == n).unwrap().datacenter;
    let third = c
        .nodes
        .iter()
        .find(|n| ![dc(&a), dc(&b), dc(&far)].contains(&&n.datacenter))
        .unwrap();
    let mate = c
        .nodes
        .iter()
        .find(|n| n.datacenter == third.datacenter && n.name != third.name)
        .unwrap();
    feed(&mut sim, &a, sample(&b, 3.0, 0.5, 1.0), 0.0);
    feed(&mut sim, &b, sample(&a, 3.0, 1.5, 0.9), 1.0);
    feed(&mut sim, &far, sample(&a, 20.0, 2.0, 0.8), 30.0);
    feed(
        &mut sim,
        &third.name,
        sample(&mate.name, 1.0, 2.0, 0.8),
        30.0,
    );
    let m = sim.e.link_view(&a, &b).unwrap();
    assert_eq!(m.latency_ms, Known::Measured(3.0));
    assert_eq!(m.success, Known::Measured(1.0));
    // a -> third: no link measured between their datacenters, the coordinates
    let e = sim.e.link_view(&a, &third.name).unwrap();
    assert!(e.latency_ms.is_estimated() && e.jitter_ms.is_estimated() && e.success.is_estimated());
    assert_eq!(
        e.latency_ms.value(),
        30.0 + 2.0 + 2.0,
        "distance plus both heights"
    );
    // jitter: the worse endpoint's median over its measured links (a: 0.5, 1.5, 2.0 -> 1.5;
    // third: 2.0); success: the product of the medians (a: 0.9, third: 0.8)
    assert_eq!(e.jitter_ms.value(), 2.0);
    assert!((e.success.value() - 0.9 * 0.8).abs() < 1e-6, "{e:?}");
    // a -> far is not measured (far -> a is: a directed link is its prober's), but a link
    // between their datacenters is: its median, shorter than the coordinates' 34 ms
    let e = sim.e.link_view(&a, &far).unwrap();
    assert_eq!(e.latency_ms, Known::Estimated(20.0));
    assert_eq!(e.jitter_ms, Known::Estimated(2.0));
    // and the live model's estimates hold that median for the scheduler
    let live = sim.e.cluster();
    let est = live.estimates.as_ref().unwrap();
    assert_eq!(est.between_ms(dc(&far), dc(&a)), Some(20.0));
    assert_eq!(est.between_ms(dc(&a), &third.datacenter), None);
}

/// The railway's nodes each measuring its own group only (a small k) and reporting a
/// coordinate (its datacenter's place on a line: cloud far, stations and trains near one
/// another), then `smoke-monitoring` published: its placement and the channels of it that run
/// on estimated links (some do).
fn placed_on_estimates(
    sim: &mut Sim,
    c: &model::Cluster,
) -> (BTreeMap<String, String>, Vec<String>) {
    let dc = |n: &str| {
        c.nodes
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .datacenter
            .clone()
    };
    let groups: Vec<String> = c
        .nodes
        .iter()
        .map(|n| n.datacenter.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    for n in &c.nodes {
        let mut l = links_of(c, &n.name);
        l.links.retain(|s| dc(s.peer.as_str()) == n.datacenter);
        let g = groups.iter().position(|g| *g == n.datacenter).unwrap();
        l.coord = Some(wire::WireCoord {
            vec: [10.0 * g as f32, 0.0, 0.0],
            height: 1.0,
            error: 0.2,
        });
        sim.feed(Event::links(Box::new(l)));
    }
    sim.feed(Event::StartupDone);
    let acts = sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let st = statuses(&acts, "smoke-monitoring").pop().expect("a status");
    let p = st
        .placement
        .clone()
        .expect("placed on measured and estimated links");
    let estimated: Vec<String> = st
        .links
        .iter()
        .filter(|(_, s)| *s == "estimated")
        .map(|(c, _)| c.clone())
        .collect();
    assert!(!estimated.is_empty(), "{:?}", st.links);
    assert!(st
        .links
        .values()
        .all(|s| ["measured", "estimated", "local"].contains(&s.as_str())));
    (p, estimated)
}

#[test]
fn a_placement_on_estimated_links_asks_for_them_and_is_evaluated_again_once_measured() {
    let c = railway();
    let mut sim = Sim::new(lost_when_silent());
    let (p, estimated) = placed_on_estimates(&mut sim, &c);
    // the nodes of the estimated links are asked to probe them: their lists name the far end
    let lists = peer_lists_published(&sim.tick(1000), &sim.key);
    let app = model::parse_application(&String::from_utf8(app_text("smoke-monitoring")).unwrap())
        .unwrap();
    for ch in app
        .channels
        .iter()
        .filter(|ch| estimated.contains(&ch.name))
    {
        let (x, y) = (&p[&ch.from], &p[&ch.to]);
        let list = lists
            .get(x)
            .map(|l| {
                l.peers
                    .iter()
                    .map(|p| p.node.to_string())
                    .collect::<Vec<_>>()
            })
            .or_else(|| sim.e.peer_list(x))
            .unwrap();
        assert!(list.contains(y), "{x} is to probe {y}: {list:?}");
    }
    // the links are measured: the application is evaluated again, on the next tick
    measure_every_link(&mut sim, &c);
    sim.tick(1000);
    assert!(
        sim.pending_jobs
            .iter()
            .any(|j| j.app == "smoke-monitoring" && j.purpose == Purpose::Explore),
        "{:?}",
        sim.pending_jobs
            .iter()
            .map(|j| (&j.app, &j.purpose))
            .collect::<Vec<_>>()
    );
    let st = sim.e.status_now("smoke-monitoring").unwrap();
    assert!(
        st.links.values().all(|s| s != "estimated"),
        "{:?}",
        st.links
    );
}

/// Every node of `c` reports all its links (the targeted ones with them); the jobs asked for
/// from now on are kept, not run.
fn measure_every_link(sim: &mut Sim, c: &model::Cluster) {
    for n in &c.nodes {
        let mut l = links_of(c, &n.name);
        l.seq = 2;
        sim.feed(Event::links(Box::new(l)));
    }
    sim.run_jobs = false;
}

/// In a large fleet (`peers_offload_from`: its live model taken ahead) new links make no new
/// model at once, they come with the next one taken (at most `model_every_ms` later: with
/// rotating peer lists links come every few seconds there, and each made a new model whose
/// views a placement waited for); an application whose targeted links were measured is
/// evaluated again on that model, not on one without them.
#[test]
fn in_a_large_fleet_new_links_come_with_the_next_model_and_so_does_the_evaluation_they_allow() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_offload_from: c.nodes.len(),
        ..lost_when_silent()
    });
    let (p, estimated) = placed_on_estimates(&mut sim, &c);
    let app = model::parse_application(&String::from_utf8(app_text("smoke-monitoring")).unwrap())
        .unwrap();
    let pairs: Vec<(String, String)> = app
        .channels
        .iter()
        .filter(|ch| estimated.contains(&ch.name))
        .map(|ch| (p[&ch.from].clone(), p[&ch.to].clone()))
        .collect();
    let before = sim.e.model();
    // every link measured, the targeted ones with them
    measure_every_link(&mut sim, &c);
    sim.tick(10);
    assert!(
        std::sync::Arc::ptr_eq(&before, &sim.e.model()),
        "new links made a new model at once"
    );
    assert!(
        sim.pending_jobs.iter().all(|j| j.app != "smoke-monitoring"),
        "evaluated again on a model without its links"
    );
    // the next model, due a second after the last: it has them, and once its views are
    // derived (off the loop; here at once) the application is evaluated again on it
    sim.tick(1000);
    sim.tick(10);
    let job = sim
        .pending_jobs
        .iter()
        .find(|j| j.app == "smoke-monitoring" && j.purpose == Purpose::Explore)
        .expect("evaluated again once the model has its links");
    assert!(!std::sync::Arc::ptr_eq(&before, &job.model));
    let infra = job.model.infra();
    for (x, y) in &pairs {
        let (a, b) = (infra.index_of(x).unwrap(), infra.index_of(y).unwrap());
        assert!(
            infra.is_measured(a, b),
            "{x} -> {y} measured in the job's model"
        );
    }
}

/// The peers each node's list names (the last list published, or the engine's).
fn listed(sim: &Sim, lists: &BTreeMap<String, wire::PeerList>, node: &str) -> Vec<String> {
    lists
        .get(node)
        .map(|l| l.peers.iter().map(|p| p.node.to_string()).collect())
        .or_else(|| sim.e.peer_list(node))
        .unwrap_or_default()
}

/// The node pairs of `app`'s channels under `p` (other than a node's own).
fn channel_pairs(app: &str, p: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let app = model::parse_application(&String::from_utf8(app_text(app)).unwrap()).unwrap();
    app.channels
        .iter()
        .map(|ch| (p[&ch.from].clone(), p[&ch.to].clone()))
        .filter(|(x, y)| x != y)
        .collect()
}

#[test]
fn a_placements_links_stay_in_the_peer_lists_though_they_were_measured_when_it_was_placed() {
    // every pair measured at the join, but each node's own list holds 4 peers: a placement's
    // links measured then would expire once their random slot is drawn again
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_k: 4,
        peers_rotate_ms: 300_000,
        ..lost_when_silent()
    });
    sim.join_cluster(&c);
    sim.tick(1000);
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let p = sim.assignment("smoke-monitoring");
    let pairs = channel_pairs("smoke-monitoring", &p);
    assert!(!pairs.is_empty(), "{p:?}");
    let st = sim.e.status_now("smoke-monitoring").unwrap();
    assert!(
        st.links.values().all(|s| s != "estimated"),
        "{:?}",
        st.links
    );
    // through the rotation's period, every list the nodes get names the placement's far ends
    let mut lists = peer_lists_published(&sim.tick(1000), &sim.key);
    for _ in 0..12 {
        for (x, y) in &pairs {
            let l = listed(&sim, &lists, x);
            assert!(l.contains(y), "{x} is to probe {y}: {l:?}");
        }
        lists = peer_lists_published(&sim.tick(30_000), &sim.key);
    }
}

#[test]
fn a_restored_placement_has_its_links_probed_and_is_evaluated_again_once_they_are_measured() {
    let c = railway();
    let cfg = || EngineConfig {
        peers_k: 4,
        ..lost_when_silent()
    };
    let mut first = Sim::new(cfg());
    first.join_cluster(&c);
    first.feed(Event::StartupDone);
    first.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let p = first.assignment("smoke-monitoring");
    let pairs = channel_pairs("smoke-monitoring", &p);
    // a standby takes over on the store: it has heard no link yet
    let mut next = Sim::restore(cfg(), first.key.clone(), first.snap.clone());
    next.run_jobs = false;
    for n in &c.nodes {
        next.feed(Event::Report(Box::new(report(n))));
    }
    next.feed(Event::StartupDone);
    let lists = peer_lists_published(&next.tick(1000), &next.key);
    for (x, y) in &pairs {
        let l = listed(&next, &lists, x);
        assert!(l.contains(y), "{x} is to probe {y}: {l:?}");
    }
    let st = next.e.status_now("smoke-monitoring").unwrap();
    assert!(
        st.links.values().any(|s| s == "estimated"),
        "{:?}",
        st.links
    );
    // the nodes report what their lists name: the placement is evaluated again (with the
    // descheduler's hysteresis: an exploration's state is not stored)
    for n in &c.nodes {
        let l = links_of(&c, &n.name);
        next.feed(Event::links(Box::new(l)));
    }
    next.tick(1000);
    let jobs: Vec<_> = next
        .pending_jobs
        .iter()
        .filter(|j| j.app == "smoke-monitoring")
        .map(|j| j.purpose.clone())
        .collect();
    assert_eq!(jobs, vec![Purpose::Reevaluate]);
    let st = next.e.status_now("smoke-monitoring").unwrap();
    assert!(
        st.links.values().all(|s| s != "estimated"),
        "{:?}",
        st.links
    );
}

/// A fleet of `nodes` measuring `links`, joined: every node reported, its links with its
/// coordinate (`x(index, node)` on a line, `height`), start-up done.
fn joined_on_a_line(
    name: &str,
    nodes: Vec<model::Node>,
    links: Vec<model::Link>,
    height: f32,
    x: impl Fn(usize, &model::Node) -> f32,
) -> Sim {
    let c = model::Cluster {
        cluster: name.into(),
        nodes,
        links,
        ..Default::default()
    };
    let mut sim = Sim::new(lost_when_silent());
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    for (i, n) in c.nodes.iter().enumerate() {
        let mut l = links_of(&c, &n.name);
        l.coord = Some(wire::WireCoord {
            vec: [x(i, n), 0.0, 0.0],
            height,
            error: 0.1,
        });
        sim.feed(Event::links(Box::new(l)));
    }
    sim.feed(Event::StartupDone);
    sim
}

/// An application `name` of two components, `a` and `b` with their requirements, and the
/// response time of the channel from `a` to `b`.
fn two_components(name: &str, a_requires: &str, b_requires: &str) -> String {
    format!(
        "application: {name}\n\
         components:\n\
         - {{name: a, image: 'localhost/acoa/a:1', requires: {a_requires}}}\n\
         - {{name: b, image: 'localhost/acoa/b:1', requires: {b_requires}}}\n\
         channels:\n\
         - {{name: a-to-b, from: a, to: b}}\n\
         paths:\n\
         - {{name: p, channels: [a-to-b]}}\n\
         criteria:\n\
         - {{type: min-e2e-response-time, path: p, weight: 1.0}}\n"
    )
}

/// Above 500 online nodes (the live model's old limit for estimates, n^2 links) a placement
/// still uses estimated pairs: 600 nodes in 120 datacenters, each measuring only its own
/// datacenter, with coordinates; an application whose two components are pinned to two
/// datacenters can only be placed on an estimated link. The live model holds the measured
/// links and the estimates' inputs, not an estimated link per pair.
#[test]
fn a_fleet_of_600_nodes_places_on_an_estimated_pair() {
    let (dcs, per_dc) = (120usize, 5usize);
    let mut nodes = Vec::new();
    let mut links = Vec::new();
    for d in 0..dcs {
        for k in 0..per_dc {
            let name = format!("n{:04}", d * per_dc + k);
            nodes.push(edge_node(&name, &format!("dc{d:03}")));
            for j in 0..per_dc {
                if j != k {
                    links.push(model::Link {
                        from: name.clone(),
                        to: format!("n{:04}", d * per_dc + j),
                        latency_ms: 1.0,
                        jitter_ms: 0.1,
                        success: 0.99,
                    });
                }
            }
        }
    }
    let mut sim = joined_on_a_line("big", nodes, links, 2.0, |i, _| (i / per_dc) as f32);
    let live = sim.e.cluster();
    assert_eq!(live.nodes.len(), 600);
    assert_eq!(
        live.links.len(),
        dcs * per_dc * per_dc,
        "measured links and loopbacks only"
    );
    let est = live.estimates.as_ref().expect("the estimates' inputs");
    assert_eq!(est.nodes.len(), 600);
    assert_eq!(est.groups.len(), dcs);
    let text = two_components("pair", "{datacenter: dc003}", "{datacenter: dc117}");
    let acts = sim.publish("pair", text.into_bytes());
    let st = statuses(&acts, "pair").pop().expect("a status");
    let p = st.placement.clone().expect("placed on an estimated pair");
    assert!(p["a"].starts_with("n001"), "{p:?}");
    assert!(p["b"].starts_with("n058"), "{p:?}");
    assert_eq!(st.links["a-to-b"], "estimated", "{:?}", st.links);
}

/// The median latency measured between two datacenters estimates their other pairs, and the
/// scheduler places on it: dcb is 30 ms away by the coordinates and dcc 10 ms, but a link
/// measured between dca and dcb took 2 ms (two stations whose coordinates' heights
/// over-estimate them), so a component that may run in either goes to dcb. The measured link
/// is between two nodes neither component may run on, so the placement rests on the
/// estimate. Estimated by the coordinates alone, it would go to dcc.
#[test]
fn a_link_measured_between_two_datacenters_estimates_their_other_pairs_for_placements() {
    let mut nodes = Vec::new();
    let mut links = Vec::new();
    let link = |from: &str, to: &str, latency_ms: f64| model::Link {
        from: from.into(),
        to: to.into(),
        latency_ms,
        jitter_ms: 0.1,
        success: 0.99,
    };
    for dc in ["dca", "dcb", "dcc"] {
        for k in 0..3 {
            let mut n = edge_node(&format!("{dc}-{k}"), dc);
            if dc == "dca" && k == 0 {
                n.hardware = vec!["cam".into()];
            } else if dc != "dca" && k != 1 {
                n.hardware = vec!["gps".into()];
            }
            nodes.push(n);
            for j in (0..3).filter(|j| *j != k) {
                links.push(link(&format!("{dc}-{k}"), &format!("{dc}-{j}"), 0.5));
            }
        }
    }
    links.push(link("dca-1", "dcb-1", 2.0));
    let at = |_: usize, n: &model::Node| match n.datacenter.as_str() {
        "dca" => 0.0,
        "dcb" => 30.0,
        _ => 10.0,
    };
    let mut sim = joined_on_a_line("three", nodes, links, 1.0, at);
    let text = two_components("near", "{hardware: [cam]}", "{hardware: [gps]}");
    let acts = sim.publish("near", text.into_bytes());
    let st = statuses(&acts, "near").pop().expect("a status");
    let p = st.placement.clone().expect("placed");
    assert!(p["b"].starts_with("dcb-"), "{p:?}");
    assert_eq!(st.links["a-to-b"], "estimated", "{:?}", st.links);
    let est = sim.e.cluster().estimates.clone().unwrap();
    assert_eq!(est.between_ms("dcb", "dca"), Some(2.0));
    assert_eq!(est.between_ms("dca", "dcc"), None);
}

/// The peer-list computations `acts` hand to the I/O loop.
fn peer_jobs(acts: &[Action]) -> Vec<cloud_broker::engine::probes::PeersJob> {
    acts.iter()
        .filter_map(|a| match a {
            Action::ComputePeers(j) => Some((**j).clone()),
            _ => None,
        })
        .collect()
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

/// An exploration round changes a few nodes' targeted peers every few seconds: that alone
/// changes only those nodes' lists, their neighbours kept, without computing every list (a
/// round of every list took 2.8 s of a core at 50,000 nodes, every 5 s while twenty
/// applications explored).
#[test]
fn a_change_of_targeted_peers_alone_changes_only_those_lists_and_computes_no_other() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_k: 4,
        peers_offload_from: 1,
        ..lost_when_silent()
    });
    sim.join_cluster(&c);
    sim.feed(Event::StartupDone);
    assert_eq!(peer_jobs(&sim.tick(1000)).len(), 1, "every list, once");
    let listed_now = |sim: &Sim| -> BTreeMap<String, BTreeSet<String>> {
        c.nodes
            .iter()
            .map(|n| {
                let l = sim.e.peer_list(&n.name).expect("a list sent");
                (n.name.clone(), l.into_iter().collect())
            })
            .collect()
    };
    let before = listed_now(&sim);
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let p = sim.assignment("smoke-monitoring");
    let mut targets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (x, y) in channel_pairs("smoke-monitoring", &p) {
        targets.entry(x).or_default().insert(y);
    }
    let acts = sim.tick(1000);
    assert!(peer_jobs(&acts).is_empty(), "no list computed again");
    let lists = peer_lists_published(&acts, &sim.key);
    let mut changed = 0;
    for (x, ys) in &targets {
        let want: BTreeSet<String> = before[x].union(ys).cloned().collect();
        if want == before[x] {
            assert!(!lists.contains_key(x), "{x}'s list did not change");
            continue;
        }
        changed += 1;
        let got: BTreeSet<String> = lists[x].peers.iter().map(|p| p.node.to_string()).collect();
        assert_eq!(got, want, "{x}: its neighbours and its targets");
    }
    assert!(changed > 0, "k = 4: some targeted peer is not a neighbour");
    assert!(
        lists.keys().all(|n| targets.contains_key(n)),
        "only the targeting nodes' lists: {:?}",
        lists.keys()
    );
    // the application goes: its targets leave the lists, the neighbours stay
    sim.publish("smoke-monitoring", Vec::new());
    let acts = sim.tick(1000);
    assert!(peer_jobs(&acts).is_empty(), "no list computed again");
    assert_eq!(listed_now(&sim), before);
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

/// The estimates the scheduler reads come from the live model (`LinkEstimates`: each node's
/// summary, the medians inside and between datacenters, all derived in one pass over the link
/// table); the link source (`Engine::link_view`) works a pair out on its own. On the railway
/// with random links (some jitter or success not finite, links inside and between
/// datacenters) and a coordinate for every node, they give every unmeasured pair the same
/// estimate.
#[test]
fn the_models_estimates_are_the_link_sources_for_every_unmeasured_pair() {
    let c = railway();
    let mut sim = Sim::new(lost_when_silent());
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    // a fixed pseudo-random sequence (xorshift)
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (i, n) in c.nodes.iter().enumerate() {
        let samples: Vec<wire::LinkSample> = c
            .nodes
            .iter()
            .filter_map(|p| {
                let r = next();
                if p.name == n.name || r % 3 != 0 {
                    return None;
                }
                let r = r / 3;
                Some(wire::LinkSample {
                    peer: wire::name(&p.name).unwrap(),
                    latency_ms: (r % 4000) as f32 / 37.0,
                    jitter_ms: if r % 11 == 0 {
                        f32::NAN
                    } else {
                        (r % 97) as f32 / 13.0
                    },
                    success: if r % 13 == 0 {
                        f32::INFINITY
                    } else {
                        1.0 - (r % 50) as f32 / 100.0
                    },
                    samples: 20,
                    last_answer_ms: 0,
                })
            })
            .collect();
        let mut l = cloud_broker::testkit::engine::link_metrics(&n.name, samples);
        l.seq = 5;
        l.coord = Some(wire::WireCoord {
            vec: [(next() % 60) as f32, (next() % 60) as f32, i as f32],
            height: 0.5 + (next() % 4) as f32,
            error: 0.2,
        });
        sim.feed(Event::links(Box::new(l)));
    }
    let live = sim.e.cluster();
    let est = live.estimates.as_ref().unwrap();
    let mut compared = 0;
    for a in &c.nodes {
        for b in c.nodes.iter().filter(|b| b.name != a.name) {
            let source = sim.e.link_view(&a.name, &b.name);
            if source.is_some_and(|v| !v.latency_ms.is_estimated()) {
                continue;
            }
            assert_eq!(est.view(a, b), source, "{} -> {}", a.name, b.name);
            compared += 1;
        }
    }
    assert!(compared > 200, "{compared} pairs estimated");
}
