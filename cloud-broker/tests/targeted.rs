//! The control plane's measurement decisions beyond the peer lists (`tests/probes.rs`), as a
//! pure state machine (events in, actions out): the sparse link source (measured links and
//! marked estimates from network coordinates), the live model's estimates, and the targeted
//! probes of the links a placement uses (a change of targets alone retargets only the lists
//! concerned). Placement jobs are run inline with `run_job` (the real scheduler).

use std::collections::{BTreeMap, BTreeSet};

use acoa_shared::model;
use acoa_shared::wire;
use cloud_broker::engine::{EngineConfig, Event, Purpose};
use cloud_broker::testkit::engine::{
    edge_node, first_report as report, link_metrics, links_of, lost_when_silent, peer_jobs,
    peer_lists_published, railway, railway_app as app_text, statuses, EngineSim as Sim,
};

/// A link sample of 20 probes to `peer`, the peer having just answered.
fn sample(peer: &str, latency: f32, jitter: f32, success: f32) -> wire::LinkSample {
    wire::LinkSample {
        peer: wire::name(peer).unwrap(),
        latency_ms: latency,
        jitter_ms: jitter,
        success,
        samples: 20,
        last_answer_ms: 0,
    }
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
    let feed = |sim: &mut Sim, from: &str, s: wire::LinkSample, x: f32| {
        let mut l = link_metrics(from, [s]);
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

/// A placement that targets a node with no list sent yet (it joined after the last round)
/// cannot be retargeted alone: it takes a round of every list, which waits for the
/// membership's debounce as the join does (before, the targets' change published the round
/// at once, each time: at 50,000 nodes a join and a placement on it a round apiece).
#[test]
fn a_placement_on_a_node_without_a_list_waits_for_the_debounced_round_of_every_list() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_k: 4,
        peers_debounce_ms: 500,
        ..lost_when_silent()
    });
    sim.join_cluster(&c);
    sim.feed(Event::StartupDone);
    let lists = peer_lists_published(&sim.tick(1000), &sim.key);
    assert_eq!(lists.len(), c.nodes.len(), "every list, once");
    // a node joins in a datacenter of its own and measures the first node's datacenter
    let dc = c.nodes[0].datacenter.clone();
    let mates: Vec<&model::Node> = c.nodes.iter().filter(|n| n.datacenter == dc).collect();
    let new = edge_node("n99", "dcnew");
    sim.feed(Event::Report(Box::new(report(&new))));
    let l = link_metrics("n99", mates.iter().map(|n| sample(&n.name, 2.0, 0.1, 1.0)));
    sim.feed(Event::links(Box::new(l)));
    // an application placed across it: n99 is to probe its far end, and has no list
    let text = two_components(
        "pair",
        "{datacenter: dcnew}",
        &format!("{{datacenter: {dc}}}"),
    );
    sim.publish("pair", text.into_bytes());
    let p = sim.assignment("pair");
    assert_eq!(p["a"], "n99", "{p:?}");
    assert!(sim.e.peer_list("n99").is_none(), "no list sent to n99 yet");
    // within the debounce: nothing published, nothing computed
    let acts = sim.tick(100);
    assert!(peer_lists_published(&acts, &sim.key).is_empty());
    assert!(peer_jobs(&acts).is_empty());
    // once it is over: a round of every list (only n99's changed), naming its targeted peer
    let lists = peer_lists_published(&sim.tick(400), &sim.key);
    let got = listed(&sim, &lists, "n99");
    assert!(got.contains(&p["b"]), "n99 is to probe {}: {got:?}", p["b"]);
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
                let jitter = if r % 11 == 0 {
                    f32::NAN
                } else {
                    (r % 97) as f32 / 13.0
                };
                let success = if r % 13 == 0 {
                    f32::INFINITY
                } else {
                    1.0 - (r % 50) as f32 / 100.0
                };
                Some(sample(&p.name, (r % 4000) as f32 / 37.0, jitter, success))
            })
            .collect();
        let mut l = link_metrics(&n.name, samples);
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
