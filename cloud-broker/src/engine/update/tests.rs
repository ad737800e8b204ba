//! The rollout state machine with plain values: records built from YAML, a [`World`] written
//! by hand, time in milliseconds.

use super::*;
use crate::status::PlacementRecord;

const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn record(images: &[(&str, &str)], nodes: &[&str], update: &str) -> AppRecord {
    let mut text = "application: shop\ncomponents:\n".to_string();
    for (c, image) in images {
        text.push_str(&format!(
            "  - {{name: {c}, image: '{image}', resources: {{cpu_millis: 100, memory_mb: 10}}}}\n"
        ));
    }
    text.push_str(update);
    let application = model::parse_application(&text).unwrap();
    let assignment = images
        .iter()
        .zip(nodes)
        .map(|((c, _), n)| (c.to_string(), n.to_string()))
        .collect();
    AppRecord {
        name: "shop".into(),
        definition: text.clone(),
        digest: crate::status::digest(text.as_bytes()),
        application,
        placement: Some(PlacementRecord {
            assignment,
            score: 1.0,
            criteria: vec![],
            feasible_deployments: 1,
        }),
        names: BTreeMap::new(),
    }
}

fn policy(batch_size: u32, canaries: u32, healthy_s: u32, deadline_s: u32) -> Update {
    Update {
        batch_size,
        canaries,
        healthy_s,
        deadline_s,
        ..Update::default()
    }
}

/// Three components a, b, c on n1, n2, n3 updated from image v1 to v2 (same nodes).
fn three(p: &Update) -> Rollout {
    let old = record(&[("a", "x:1"), ("b", "x:1"), ("c", "x:1")], &NODES, "");
    let new = record(&[("a", "x:2"), ("b", "x:2"), ("c", "x:2")], &NODES, "");
    Rollout::plan(&old, &new, 1, 2, p).unwrap()
}

fn world() -> World {
    World {
        online: NODES.iter().map(|n| n.to_string()).collect(),
        room: NODES
            .iter()
            .map(|n| (n.to_string(), (1000, 1000)))
            .collect(),
        ..World::default()
    }
}

fn seen(state: ContainerState, health: Option<Health>, restarts: u32) -> Seen {
    Seen {
        state,
        health,
        restarts,
        error: String::new(),
    }
}

/// Every container the rollout puts on the nodes reported running (and healthy), and only
/// those (the agents stopped the others).
fn all_running(r: &Rollout, w: &mut World) {
    let before = std::mem::take(&mut w.containers);
    for n in NODES {
        for c in r.containers_on(n) {
            let k = (n.to_string(), c.name.clone());
            let v = before.get(&k).cloned().unwrap_or(seen(
                ContainerState::Running,
                Some(Health::Healthy),
                0,
            ));
            w.containers.insert(k, v);
        }
    }
}

fn names_on(r: &Rollout, node: &str) -> Vec<String> {
    r.containers_on(node).into_iter().map(|c| c.name).collect()
}

fn states(r: &Rollout) -> Vec<StepState> {
    r.steps.iter().map(|s| s.state).collect()
}

#[test]
fn batches_go_one_after_the_other_canaries_first_new_beside_old() {
    let r = three(&policy(2, 1, 10, 60));
    assert_eq!(r.batches, 2);
    assert_eq!(
        r.steps.iter().map(|s| s.batch).collect::<Vec<_>>(),
        [0, 1, 1]
    );
    let mut r = r;
    let mut w = world();
    let p = r.advance(0, &w);
    assert!(
        p.lines[0].contains("batch 1/2 (canaries) started: a"),
        "{p:?}"
    );
    assert!(p.persist);
    assert_eq!(states(&r)[0], StepState::Surge);
    // the new copy of a runs beside the old one under another name
    assert_eq!(names_on(&r, "n1"), ["shop.a", "shop.a.r2"]);
    assert_eq!(names_on(&r, "n2"), ["shop.b"]);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    assert_eq!(r.status().waiting, ["healthy for 0.0 s of 10.0 s"]);
    r.advance(6_000, &w);
    assert_eq!(r.batch, 0, "healthy for 5 s of 10 s: not done");
    let p = r.advance(11_000, &w);
    assert!(
        p.lines
            .iter()
            .any(|l| l.contains("batch 1/2 (canaries) done")),
        "{p:?}"
    );
    assert_eq!(r.batch, 1);
    assert_eq!(names_on(&r, "n1"), ["shop.a.r2"], "the old copy stopped");
    assert_eq!(names_on(&r, "n2"), ["shop.b", "shop.b.r2"]);
    assert_eq!(names_on(&r, "n3"), ["shop.c", "shop.c.r2"]);
    // every component has a running copy at every moment of the rollout
    all_running(&r, &mut w);
    r.advance(12_000, &w);
    let p = r.advance(22_000, &w);
    assert_eq!(r.phase, Phase::Done);
    assert!(
        p.lines.last().unwrap().contains("done, revision 2 runs"),
        "{p:?}"
    );
    assert_eq!(names_on(&r, "n2"), ["shop.b.r2"]);
    assert!(p.nodes.contains("n2") && p.nodes.contains("n3"));
}

#[test]
fn a_health_check_that_has_not_passed_holds_the_batch() {
    let old = record(&[("a", "x:1")], &["n1"], "");
    let mut new = record(&[("a", "x:2")], &["n1"], "");
    new.application.components[0].health =
        Some(serde_json::from_value(serde_json::json!({"check": {"tcp": 80}})).unwrap());
    let mut r = Rollout::plan(&old, &new, 1, 2, &policy(1, 0, 5, 60)).unwrap();
    let mut w = world();
    r.advance(0, &w);
    w.containers.insert(
        ("n1".into(), "shop.a.r2".into()),
        seen(ContainerState::Running, Some(Health::Starting), 0),
    );
    r.advance(10_000, &w);
    assert_eq!(r.phase, Phase::Rolling);
    assert_eq!(
        r.status().waiting,
        ["a on n1: waits for its health check to pass"]
    );
    w.containers.insert(
        ("n1".into(), "shop.a.r2".into()),
        seen(ContainerState::Running, Some(Health::Healthy), 0),
    );
    r.advance(11_000, &w);
    r.advance(16_000, &w);
    assert_eq!(r.phase, Phase::Done);
}

#[test]
fn an_unhealthy_new_copy_rolls_back_and_says_why() {
    let mut r = three(&policy(1, 0, 10, 60));
    let mut w = world();
    r.advance(0, &w);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    r.advance(11_000, &w); // batch 1 done: a runs revision 2 only
    all_running(&r, &mut w);
    assert_eq!(states(&r)[..2], [StepState::Done, StepState::Surge]);
    w.containers.insert(
        ("n2".into(), "shop.b.r2".into()),
        seen(ContainerState::Running, Some(Health::Unhealthy), 0),
    );
    let p = r.advance(12_000, &w);
    let Phase::RollingBack { reason } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert!(
        reason.contains("b on n2: the new copy is unhealthy"),
        "{reason}"
    );
    assert!(p.lines[0].contains("failed") && p.lines[0].contains("rolling back to revision 1"));
    // b's old copy never stopped: the new one goes at once; a's old copy starts again and
    // its new one stays until the old one runs
    assert_eq!(names_on(&r, "n2"), ["shop.b"]);
    assert_eq!(names_on(&r, "n1"), ["shop.a", "shop.a.r2"]);
    assert_eq!(r.status().phase, "rolling-back");
    all_running(&r, &mut w);
    let p = r.advance(13_000, &w);
    assert!(matches!(r.phase, Phase::RolledBack { .. }));
    assert_eq!(names_on(&r, "n1"), ["shop.a"]);
    assert!(
        p.lines
            .last()
            .unwrap()
            .contains("rolled back, revision 1 runs"),
        "{p:?}"
    );
}

#[test]
fn a_bad_image_that_exits_or_restarts_rolls_back() {
    for bad in [
        seen(ContainerState::Exited, None, 0),
        seen(ContainerState::Failed, None, 0),
        seen(ContainerState::Running, None, 3),
    ] {
        let mut r = three(&policy(3, 0, 10, 60));
        let mut w = world();
        r.advance(0, &w);
        all_running(&r, &mut w);
        r.advance(1_000, &w);
        w.containers
            .insert(("n3".into(), "shop.c.r2".into()), bad.clone());
        r.advance(2_000, &w);
        let Phase::RolledBack { reason } = &r.phase else {
            panic!("{bad:?}: {:?}", r.phase)
        };
        assert!(reason.starts_with("c on n3: the new copy"), "{reason}");
        for n in NODES {
            assert_eq!(names_on(&r, n).len(), 1, "only the old copy on {n}");
        }
    }
}

#[test]
fn the_deadline_fails_a_batch_that_never_gets_healthy() {
    let mut r = three(&policy(1, 0, 10, 30));
    let w = world();
    r.advance(0, &w);
    r.advance(29_000, &w);
    assert_eq!(r.phase, Phase::Rolling);
    let p = r.advance(30_000, &w);
    let Phase::RolledBack { reason } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert!(
        reason.starts_with("deadline: batch 1/3 not healthy for 10.0 s within 30.0 s (a on n1: waits for its container to be reported)"),
        "{reason}"
    );
    assert!(p.persist);
}

#[test]
fn without_auto_rollback_a_failure_stays_where_it_is() {
    let mut p = policy(1, 0, 10, 30);
    p.auto_rollback = false;
    let mut r = three(&p);
    let w = world();
    r.advance(0, &w);
    let pr = r.advance(30_000, &w);
    assert!(matches!(r.phase, Phase::Failed { .. }));
    assert!(pr.lines[0].contains("cloud-broker rollback shop"), "{pr:?}");
    assert_eq!(names_on(&r, "n1"), ["shop.a", "shop.a.r2"]);
    assert!(r.is_active());
}

#[test]
fn a_gate_breach_during_the_healthy_time_rolls_back() {
    let mut p = policy(1, 0, 10, 60);
    p.gate = Some(model::Gate {
        path: "alarm".into(),
        max_latency_ms: Some(50.0),
        min_reliability: Some(0.99),
    });
    let mut r = three(&p);
    let mut w = world();
    r.advance(0, &w);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    assert_eq!(
        r.status().waiting,
        ["the gate waits for a measurement of path alarm"]
    );
    let good = PathQos::network(20.0, 1.0);
    w.paths.insert("alarm".into(), good);
    r.advance(2_000, &w);
    r.advance(12_000, &w);
    assert_eq!(r.batch, 1, "the gate held for the healthy time");
    all_running(&r, &mut w);
    w.paths.insert("alarm".into(), PathQos::network(80.0, 1.0));
    r.advance(13_000, &w);
    let Phase::RollingBack { reason } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert_eq!(
        reason,
        "gate broken: path alarm measures 80.0 ms, above its bound of 50 ms"
    );
    w.paths.insert("alarm".into(), PathQos::network(20.0, 0.9));
    let mut r = three(&p);
    r.advance(0, &w);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    assert!(
        matches!(&r.phase, Phase::RolledBack { reason } if reason.contains("reliability of 0.9000, below its bound of 0.99")),
        "{:?}",
        r.phase
    );
}

#[test]
fn a_node_without_room_for_both_copies_stops_the_old_one_first_and_says_so() {
    let mut r = three(&policy(3, 0, 10, 60));
    let mut w = world();
    w.room.insert("n2".into(), (50, 1000));
    let p = r.advance(0, &w);
    assert_eq!(
        states(&r),
        [StepState::Surge, StepState::Replaced, StepState::Surge]
    );
    assert!(
        p.lines.iter().any(|l| l.contains(
            "b on n2: no room for the old and the new copy side by side, the old copy stops first"
        )),
        "{p:?}"
    );
    assert_eq!(names_on(&r, "n2"), ["shop.b.r2"]);
}

#[test]
fn a_move_to_another_node_keeps_the_name_and_starts_there_first() {
    let old = record(&[("a", "x:1")], &["n1"], "");
    let new = record(&[("a", "x:1")], &["n2"], "");
    let mut r = Rollout::plan(&old, &new, 1, 2, &policy(1, 0, 1, 60)).unwrap();
    let mut w = world();
    r.advance(0, &w);
    assert_eq!(names_on(&r, "n1"), ["shop.a"]);
    assert_eq!(names_on(&r, "n2"), ["shop.a"]);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    let p = r.advance(2_000, &w);
    assert_eq!(r.phase, Phase::Done);
    assert!(names_on(&r, "n1").is_empty());
    assert!(p.nodes.contains("n1"));
}

#[test]
fn nothing_to_roll_out_when_no_container_changes() {
    let old = record(&[("a", "x:1")], &["n1"], "");
    let new = record(&[("a", "x:1")], &["n1"], "update: {}\n");
    assert!(Rollout::plan(&old, &new, 1, 2, &Update::default()).is_none());
}

#[test]
fn a_node_offline_in_its_batch_is_deferred_and_does_not_hold_the_rollout() {
    let mut r = three(&policy(1, 0, 1, 60));
    let mut w = world();
    w.online.remove("n2");
    r.advance(0, &w);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    let p = r.advance(2_000, &w);
    assert!(
        p.lines.iter().any(|l| l
            .contains("b deferred: node n2 offline, it gets the revision current when it returns")),
        "{p:?}"
    );
    assert_eq!(states(&r)[1], StepState::Deferred);
    // the desired state held for n2 names the new revision only
    assert_eq!(names_on(&r, "n2"), ["shop.b.r2"]);
    all_running(&r, &mut w);
    r.advance(3_000, &w);
    r.advance(4_000, &w);
    assert_eq!(r.phase, Phase::Done);
    // after a rollback it would get the old one
    let mut r2 = three(&policy(3, 0, 1, 60));
    r2.advance(0, &w);
    assert_eq!(states(&r2)[1], StepState::Deferred);
    let mut p = Progress::default();
    r2.start_rollback(1, "by the operator".into(), &w, &mut p);
    assert_eq!(names_on(&r2, "n2"), ["shop.b"]);
}

#[test]
fn a_restarted_control_plane_resumes_the_batch_from_the_persisted_rollout() {
    let mut r = three(&policy(1, 0, 10, 60));
    let mut w = world();
    r.advance(0, &w);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    r.advance(11_000, &w); // batch 1 done, batch 2 started
    assert_eq!(r.batch, 1);
    let json = serde_json::to_string(&r).unwrap();
    let mut back: Rollout = serde_json::from_str(&json).unwrap();
    assert_eq!(back.steps, r.steps);
    assert_eq!(back.started_at, None, "timers are not persisted");
    // a new process: time starts again near 0
    for n in NODES {
        assert_eq!(back.containers_on(n), r.containers_on(n));
    }
    let p = back.advance(500, &w);
    assert!(
        p.lines[0].contains("batch 2/3 resumed after a restart"),
        "{p:?}"
    );
    assert_eq!(back.batch, 1, "the batch is not started again");
    all_running(&back, &mut w);
    back.advance(1_000, &w);
    back.advance(11_000, &w);
    assert_eq!(back.batch, 2);
    all_running(&back, &mut w);
    back.advance(12_000, &w);
    back.advance(22_000, &w);
    assert_eq!(back.phase, Phase::Done);
}

#[test]
fn added_and_removed_components_are_steps_too() {
    let old = record(&[("a", "x:1"), ("gone", "x:1")], &["n1", "n2"], "");
    let new = record(&[("a", "x:1"), ("fresh", "x:1")], &["n1", "n3"], "");
    let mut r = Rollout::plan(&old, &new, 1, 2, &policy(5, 0, 1, 60)).unwrap();
    let comps: Vec<&str> = r.steps.iter().map(|s| s.component.as_str()).collect();
    assert_eq!(comps, ["fresh", "gone"]);
    let mut w = world();
    r.advance(0, &w);
    assert_eq!(
        names_on(&r, "n2"),
        ["shop.gone"],
        "stays until its batch is done"
    );
    assert_eq!(names_on(&r, "n3"), ["shop.fresh"]);
    all_running(&r, &mut w);
    r.advance(1_000, &w);
    r.advance(2_000, &w);
    assert_eq!(r.phase, Phase::Done);
    assert!(names_on(&r, "n2").is_empty());
}

fn gated(max_latency_ms: f64) -> Update {
    let mut p = policy(1, 0, 10, 60);
    p.gate = Some(model::Gate {
        path: "alarm".into(),
        max_latency_ms: Some(max_latency_ms),
        min_reliability: None,
    });
    p
}

#[test]
fn a_new_copy_whose_service_time_breaks_the_bound_rolls_back_and_says_so() {
    let mut r = three(&gated(10.0));
    let mut w = world();
    r.advance(0, &w);
    all_running(&r, &mut w);
    // the network alone is well within the bound; a's new copy (serving now) takes 60.1 ms
    // per message, b's copy 0.1 ms
    let q = PathQos {
        network_ms: 1.1,
        reliability: 1.0,
        service: vec![("a".into(), 60.1), ("b".into(), 0.1)],
    };
    assert!((q.latency_ms() - 61.3).abs() < 1e-9);
    w.paths.insert("alarm".into(), q);
    let p = r.advance(1_000, &w);
    let Phase::RolledBack { reason } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert_eq!(
        reason,
        "gate broken: path alarm measures 61.3 ms (network 1.1 ms + service 60.2 ms: a 60.1 ms, b 0.1 ms), above its bound of 10 ms"
    );
    assert!(p.lines[0].contains(reason.as_str()), "{p:?}");
    assert_eq!(r.status().reason.as_deref(), Some(reason.as_str()));
    assert_eq!(
        r.status().gate.as_deref(),
        Some("path alarm: 61.3 ms (network 1.1 ms + service 60.2 ms: a 60.1 ms, b 0.1 ms), bound 10 ms")
    );
}

#[test]
fn the_gate_adds_service_times_that_hold() {
    let mut r = three(&gated(10.0));
    let mut w = world();
    r.advance(0, &w);
    all_running(&r, &mut w);
    // a's new copy takes 2 ms: 3.1 ms in all, within the bound: the batch is done after its
    // healthy time
    let mut q = PathQos::network(1.1, 1.0);
    q.service = vec![("a".into(), 2.0)];
    w.paths.insert("alarm".into(), q);
    r.advance(1_000, &w);
    assert_eq!(
        r.status().gate.as_deref(),
        Some("path alarm: 3.1 ms (network 1.1 ms + service 2.0 ms: a 2.0 ms), bound 10 ms")
    );
    r.advance(11_000, &w);
    assert_eq!(r.batch, 1, "{:?}", r.status());
}
