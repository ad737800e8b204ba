//! The live model the placements read, as a pure state machine (events in, actions out): links
//! forgotten past their age, new metrics taken in at most once a period, the model taken ahead
//! and its views derived off the loop in a large fleet, the scheduler's view built from the
//! link table's numbers. Placement jobs are run inline with `run_job` (the real scheduler). The
//! other decisions are `tests/decisions.rs`'s.

use acoa_shared::model::Cluster;
use cloud_broker::engine::{run_job, Action, EngineConfig, Event, JobOutcome, Purpose};
use cloud_broker::testkit::engine::{
    first_report as report, link_metrics, links_of, railway, railway_app as app_text, reevaluating,
    EngineSim as Sim,
};
use cloud_broker::testkit::samples_of;

/// Links nobody measured for `link_max_age_ms` are forgotten, looked for once a second (a pass
/// over every link), not on every tick: gone within a second past their age, kept before it.
#[test]
fn old_links_are_forgotten_within_a_second_past_their_age() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        link_max_age_ms: 5000,
        ..reevaluating()
    });
    sim.join_cluster(&c);
    let measured = sim.e.cluster().links.len();
    assert!(measured > 0);
    // reports keep the nodes online; no link metrics come any more
    let mut gone_at = None;
    for step in 1..=40u64 {
        sim.now += 200;
        for n in &c.nodes {
            let mut r = cloud_broker::testkit::engine::first_report(n);
            r.seq = step + 1;
            sim.feed(Event::Report(Box::new(r)));
        }
        sim.feed(Event::Tick);
        if sim.e.cluster().links.len() < measured && gone_at.is_none() {
            gone_at = Some(sim.now);
        }
    }
    let at = gone_at.expect("old links forgotten");
    assert!((5000..=6200).contains(&at), "forgotten at {at} ms");
}

/// New metrics of a link already measured reach the live model the placements read at most
/// once a `LINK_MODEL_EVERY_MS` (building it is O(links): seconds at 50,000 nodes, and every
/// link report changes some metric); a link measured for the first time reaches it at once.
#[test]
fn a_links_new_metrics_reach_the_live_model_once_a_second_and_a_new_link_at_once() {
    use cloud_broker::engine::LINK_MODEL_EVERY_MS;
    let mut c = railway();
    // one pair nobody measures at first
    let (a, b) = (
        c.nodes[0].name.clone(),
        c.nodes[c.nodes.len() - 1].name.clone(),
    );
    c.links.retain(|x| !(x.from == a && x.to == b));
    let mut sim = Sim::new(EngineConfig::default());
    sim.join_cluster(&c);
    let l = c.links.iter().find(|l| l.from != l.to).unwrap().clone();
    let latency = |sim: &mut Sim, from: &str, to: &str| {
        let m = sim.e.cluster();
        m.links
            .iter()
            .find(|x| x.from == from && x.to == to)
            .map(|x| x.latency_ms)
    };
    let before = latency(&mut sim, &l.from, &l.to).unwrap();
    let slower = |ms: f64| {
        let mut m = link_metrics(
            &l.from,
            samples_of(&c, &l.from).into_iter().map(|mut s| {
                if s.peer.as_str() == l.to {
                    s.latency_ms = ms as f32;
                }
                s
            }),
        );
        m.seq = 2; // after the join's
        m
    };
    sim.now += 100;
    sim.feed(Event::links(Box::new(slower(before + 40.0))));
    assert_eq!(
        latency(&mut sim, &l.from, &l.to),
        Some(before),
        "taken at once"
    );
    sim.tick(LINK_MODEL_EVERY_MS); // the engine's clock moves with its events
    let after = latency(&mut sim, &l.from, &l.to).unwrap();
    assert!(
        (after - (before + 40.0)).abs() < 1e-6,
        "{after}: not taken a second on"
    );
    // a pair nobody measured before: in the model at once
    assert_eq!(latency(&mut sim, &a, &b), None);
    let mut first = samples_of(&c, &a);
    let mut s = first[0].clone();
    s.peer = acoa_shared::wire::name(&b).unwrap();
    s.latency_ms = 7.0;
    first.push(s);
    sim.now += 10;
    let mut m = link_metrics(&a, first);
    m.seq = 3;
    sim.feed(Event::links(Box::new(m)));
    assert_eq!(latency(&mut sim, &a, &b), Some(7.0));
}

#[test]
fn the_live_models_links_are_in_name_order_with_every_online_nodes_loopback_once() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig::default());
    sim.join_cluster(&c);
    let m = sim.e.cluster();
    let pairs: Vec<(&str, &str)> = m
        .links
        .iter()
        .map(|l| (l.from.as_str(), l.to.as_str()))
        .collect();
    let mut sorted = pairs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(pairs, sorted, "in (from, to) order, each pair once");
    for n in &m.nodes {
        let own = pairs
            .iter()
            .filter(|(a, b)| *a == n.name && *b == n.name)
            .count();
        assert_eq!(own, 1, "{}: its loopback once", n.name);
    }
    // every measured link of the cluster is there
    for l in c.links.iter().filter(|l| l.from != l.to) {
        assert!(
            pairs.contains(&(l.from.as_str(), l.to.as_str())),
            "{} -> {}",
            l.from,
            l.to
        );
    }
}

/// In a large fleet a placement never waits for a view to be derived: its job reads the last
/// model whose views are (a new one's take seconds at 50,000 nodes, and the first placements
/// after one waited 1-4 s for it). A node gone since that model was taken is closed to it (no
/// room for a container there); the next model, once derived, is read without it.
#[test]
fn in_a_large_fleet_a_job_reads_the_last_model_derived_and_keeps_off_the_nodes_gone_since() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        peers_offload_from: 2,
        node_timeout_ms: 1_000_000,
        ..EngineConfig::default()
    });
    sim.join_cluster(&c);
    sim.feed(Event::StartupDone);
    sim.tick(1000);
    sim.run_jobs = false;
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let first = sim.pending_jobs.remove(0);
    assert!(
        first.model.views_ready(),
        "the model the tick took, derived"
    );
    let r = run_job(&first);
    let JobOutcome::Placed(p) = &r.outcome else {
        panic!("placed: {:?}", r.outcome)
    };
    // storage's node (others run a database too)
    let gone = p.assignment["storage"].clone();
    sim.feed(Event::Scheduled(Box::new(r)));
    sim.pending_jobs.clear();
    // new metrics: the next tick takes a model, whose views are not derived yet (the I/O loop
    // derives them off the loop; here nobody does)
    every_link_slower(&mut sim, &c);
    sim.now += 1000;
    let taken = warmed(&sim.e.handle(sim.now, Event::Tick));
    assert_eq!(taken.len(), 1, "a model taken");
    assert!(!taken[0].views_ready());
    // a node of the placement goes: its components are placed again at once, on the model
    // derived, with the node closed
    sim.feed(Event::NodeRemoved(gone.clone()));
    let again = sim
        .pending_jobs
        .iter()
        .find(|j| matches!(j.purpose, Purpose::Place(_)))
        .expect("placed again")
        .clone();
    assert!(std::sync::Arc::ptr_eq(&again.model, &first.model));
    assert!(
        again.model.node(&gone).is_some(),
        "the node is in that model"
    );
    assert_eq!(
        again.containers.get(&gone).copied(),
        Some(acoa_shared::wire::MAX_CONTAINERS as u32),
        "closed to the job"
    );
    assert!(!again.keep.values().any(|n| *n == gone), "{:?}", again.keep);
    let out = run_job(&again).outcome;
    let JobOutcome::Placed(p) = out else {
        panic!("placed again: {out:?}")
    };
    assert!(!p.assignment.values().any(|n| *n == gone), "{p:?}");
    // the next model taken (due a second on) and derived: read, without the node
    sim.pending_jobs.clear();
    sim.tick(1000);
    sim.tick(10);
    sim.publish("speed-profiling", app_text("speed-profiling"));
    let next = sim
        .pending_jobs
        .iter()
        .find(|j| j.app == "speed-profiling")
        .expect("a job");
    assert!(next.model.views_ready());
    assert!(next.model.node(&gone).is_none());
    assert_ne!(
        next.containers.get(&gone).copied(),
        Some(acoa_shared::wire::MAX_CONTAINERS as u32),
        "nothing closed: the model has what changed"
    );
}

/// Placing the waiting applications again for joins needs a live model with them (O(links):
/// seconds at 50,000 nodes): with many links it waits as long as the model takes new link
/// metrics (a millisecond per hundred links, `LINK_MODEL_LINKS_PER_MS`), not a second, and
/// in a large fleet (2,000 nodes here) for the model the tick took to be derived.
#[test]
fn with_many_links_the_retry_for_joins_waits_as_long_as_the_live_model() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig {
        stats_every_ms: 0,
        ..EngineConfig::default()
    });
    sim.run_jobs = false;
    sim.feed(Event::StartupDone);
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let job = sim.pending_jobs.remove(0);
    sim.feed(Event::Scheduled(Box::new(run_job(&job))));
    let searches = |sim: &mut Sim| {
        let n = sim.pending_jobs.len();
        for j in std::mem::take(&mut sim.pending_jobs) {
            sim.feed(Event::Scheduled(Box::new(run_job(&j))));
        }
        n
    };
    // 2,000 nodes join, each then measuring 60 others: 120,000 links, a model every 1.2 s
    const N: usize = 2000;
    let name = |i: usize| format!("b{i:04}");
    for i in 0..N {
        let mut n = c.nodes[0].clone();
        n.name = name(i);
        n.datacenter = "bulk".into();
        let r =
            cloud_broker::testkit::report_of(&n, 1, &format!("10.1.{}.{}:7878", i / 250, i % 250));
        sim.feed(Event::Report(Box::new(r)));
    }
    assert_eq!(searches(&mut sim), 1, "the first join at once");
    for i in 0..N {
        let samples = (1..=60).map(|d| acoa_shared::wire::LinkSample {
            peer: acoa_shared::wire::name(&name((i + d) % N)).unwrap(),
            latency_ms: 5.0,
            jitter_ms: 0.5,
            success: 1.0,
            samples: 20,
            last_answer_ms: 0,
        });
        sim.feed(Event::links(Box::new(link_metrics(&name(i), samples))));
    }
    sim.tick(1000);
    assert_eq!(searches(&mut sim), 0, "a second on: the model is not due");
    sim.tick(200);
    assert_eq!(
        searches(&mut sim),
        0,
        "1.2 s on: the model with the joins is taken, its views derived off the loop"
    );
    sim.tick(1000);
    assert!(
        sim.pending_jobs
            .iter()
            .all(|j| j.model.node(&name(N - 1)).is_some() && j.model.views_ready()),
        "the retry reads the model that has the joins, derived"
    );
    assert_eq!(searches(&mut sim), 1, "then the joins since, once");
}

/// The scheduler's view of the live model is built from the link table's numbers, not from
/// the model's cluster document (1.6 million links of two strings each at 50,000 nodes): it
/// is the same view, pair by pair, measured or estimated. And the jobs on one model read one
/// view, built once (each job built its own from the cluster, again for every score).
#[test]
fn the_scheduler_view_of_the_live_model_is_its_cluster_documents_and_jobs_share_it() {
    let c = railway();
    let mut sim = Sim::new(EngineConfig::default());
    for n in &c.nodes {
        sim.feed(Event::Report(Box::new(report(n))));
    }
    // half the nodes measure: the other pairs are estimated
    for n in c.nodes.iter().step_by(2) {
        sim.feed(Event::links(Box::new(links_of(&c, &n.name))));
    }
    let m = sim.e.model();
    let (a, b) = (m.infra(), acoa_scheduler::Infra::from_cluster(&m.cluster()));
    assert_eq!(a.len(), c.nodes.len());
    assert_eq!(a.link_count(), b.link_count());
    let (mut measured, mut estimated) = (0, 0);
    for x in m.nodes() {
        for y in m.nodes() {
            let on = |i: &acoa_scheduler::Infra| {
                i.link_known(i.index_of(&x.name).unwrap(), i.index_of(&y.name).unwrap())
            };
            let known = on(&a);
            assert_eq!(known, on(&b), "{} -> {}", x.name, y.name);
            match known {
                Some(k) if k.is_estimated() => estimated += 1,
                Some(_) => measured += 1,
                None => {}
            }
        }
    }
    assert!(
        measured > c.nodes.len() && estimated > 0,
        "{measured} {estimated}"
    );
    // two applications published at once: two jobs on one model, one view
    sim.run_jobs = false;
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    sim.publish("speed-profiling", app_text("speed-profiling"));
    let js = std::mem::take(&mut sim.pending_jobs);
    assert_eq!(js.len(), 2);
    assert!(std::sync::Arc::ptr_eq(&js[0].model, &js[1].model));
    assert!(std::sync::Arc::ptr_eq(
        &js[0].model.infra(),
        &js[1].model.infra()
    ));
    for j in &js {
        assert!(
            matches!(run_job(j).outcome, JobOutcome::Placed(_)),
            "{}",
            j.app
        );
    }
}

/// Every node of `c` reports its links again, each a millisecond slower.
fn every_link_slower(sim: &mut Sim, c: &Cluster) {
    for n in &c.nodes {
        let mut l = links_of(c, &n.name);
        l.seq += 1;
        for s in l.links.iter_mut() {
            s.latency_ms += 1.0;
        }
        sim.feed(Event::links(Box::new(l)));
    }
}

/// The live models `acts` ask to be derived ahead.
fn warmed(acts: &[Action]) -> Vec<std::sync::Arc<cloud_broker::engine::LiveModel>> {
    acts.iter()
        .filter_map(|a| match a {
            Action::WarmModel(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn in_a_large_fleet_the_live_model_is_taken_ahead_once_it_changes_and_the_next_job_reads_it() {
    let c = railway();
    // "large": from 2 nodes on (50,000 in a fleet, where deriving the view takes seconds)
    let cfg = EngineConfig {
        peers_offload_from: 2,
        ..reevaluating()
    };
    let mut sim = Sim::new(cfg);
    sim.join_cluster(&c);
    sim.feed(Event::StartupDone);
    let first = warmed(&sim.tick(1000));
    assert_eq!(
        first.len(),
        1,
        "the fleet joined: the model it changed is taken ahead"
    );
    for _ in 0..3 {
        assert!(
            warmed(&sim.tick(1000)).is_empty(),
            "nothing changed: nothing taken again"
        );
    }
    // new link metrics: taken again, at most once per model period (1 s here)
    every_link_slower(&mut sim, &c);
    let again = warmed(&sim.tick(1000));
    assert_eq!(again.len(), 1);
    assert!(!std::sync::Arc::ptr_eq(&again[0], &first[0]));
    // a placement now is computed on the model taken ahead (its view derived once, off the loop)
    sim.run_jobs = false;
    sim.publish("smoke-monitoring", app_text("smoke-monitoring"));
    let job = sim.pending_jobs.pop().expect("a placement job");
    assert!(std::sync::Arc::ptr_eq(&job.model, &again[0]));

    // a small fleet (the default: from 2,000 nodes) derives it when a job needs it
    let mut sim = Sim::new(reevaluating());
    sim.join_cluster(&c);
    sim.feed(Event::StartupDone);
    for _ in 0..3 {
        assert!(warmed(&sim.tick(1000)).is_empty());
    }
}
