//! The reconciler's decisions, event in, actions out, with plain values.

use super::*;
use acoa_shared::wire::{encode, name, EnvVar};
use ed25519_dalek::SigningKey;

fn cp() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn spec(n: &str, image: &str) -> ContainerSpec {
    ContainerSpec {
        name: name(n).unwrap(),
        app: name("app").unwrap(),
        component: name(n.split('.').next_back().unwrap()).unwrap(),
        image: wire::bounded("image", image).unwrap(),
        cpu_millis: 100,
        memory_mb: 32,
        env: heapless::Vec::new(),
        health: None,
    }
}

fn frame(
    node: &str,
    generation: u64,
    specs: &[ContainerSpec],
    key: Option<&SigningKey>,
) -> Vec<u8> {
    frame_of_term(node, generation, 0, specs, key)
}

fn frame_of_term(
    node: &str,
    generation: u64,
    term: u64,
    specs: &[ContainerSpec],
    key: Option<&SigningKey>,
) -> Vec<u8> {
    let ds = DesiredState {
        node: name(node).unwrap(),
        generation,
        term,
        containers: specs.iter().cloned().collect(),
    };
    encode(&Message::DesiredState(Box::new(ds)), key).unwrap()
}

/// The desired state for n1 at `generation`, signed by the control plane.
fn signed(generation: u64, specs: &[ContainerSpec]) -> Event {
    Event::DesiredFrame(frame("n1", generation, specs, Some(&cp())))
}

/// `app.a` on an allowed image.
fn app_a() -> ContainerSpec {
    spec("app.a", "localhost/acoa/x:1")
}

/// A reconciler that applied `app.a` at generation 1 and saw it running; and `app.a`.
fn running_a() -> (Reconciler, ContainerSpec) {
    let mut r = rec();
    let a = app_a();
    r.handle(signed(1, std::slice::from_ref(&a)));
    r.handle(Event::RuntimeObserved(vec![running(&a)]));
    (r, a)
}

fn rec() -> Reconciler {
    Reconciler::new(
        "n1",
        cp().verifying_key(),
        vec!["localhost/acoa/".into()],
        None,
        10_000,
    )
}

fn running(s: &ContainerSpec) -> Observed {
    Observed {
        name: s.name.to_string(),
        image: s.image.to_string(),
        spec_hash: spec_hash(s, None),
        generation: 1,
        state: RunState::Running,
    }
}

fn kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::Log(..)))
        .map(|a| match a {
            Action::Observe => "observe".to_string(),
            Action::Create { spec, .. } => format!("create {}", spec.name),
            Action::Start { name } => format!("start {name}"),
            Action::Remove { name } => format!("remove {name}"),
            Action::Restart { name } => format!("restart {name}"),
            Action::Check { name, .. } => format!("check {name}"),
            Action::PersistDesired(_) => "persist".into(),
            Action::PublishActual(a) => format!("publish g{}", a.generation),
            Action::Log(..) => unreachable!(),
        })
        .collect()
}

fn logs(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Log(_, m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn two_containers_are_created_then_kept() {
    let mut r = rec();
    let a = app_a();
    let b = spec("app.b", "localhost/acoa/x:1");
    let acts = r.handle(signed(1, &[a.clone(), b.clone()]));
    assert_eq!(kinds(&acts), ["persist", "observe"]);
    assert_eq!(r.generation(), 1);
    let acts = r.handle(Event::RuntimeObserved(vec![]));
    assert_eq!(
        kinds(&acts),
        [
            "create app.a",
            "start app.a",
            "create app.b",
            "start app.b",
            "publish g1"
        ]
    );
    // Both run: nothing to do but report the change.
    r.handle(Event::Tick { now_ms: 1000 });
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a), running(&b)]));
    assert_eq!(kinds(&acts), ["publish g1"]);
    match &acts[0] {
        Action::PublishActual(s) => {
            assert!(s
                .containers
                .iter()
                .all(|c| c.state == ContainerState::Running))
        }
        _ => unreachable!(),
    }
    // Same again: no change, no publish.
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a), running(&b)]));
    assert!(kinds(&acts).is_empty());
    // Periodic publish.
    r.handle(Event::Tick { now_ms: 11_000 });
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a), running(&b)]));
    assert_eq!(kinds(&acts), ["publish g1"]);
}

#[test]
fn new_generation_removes_and_changed_spec_recreates() {
    let mut r = rec();
    let a = app_a();
    let b = spec("app.b", "localhost/acoa/x:1");
    r.handle(signed(1, &[a.clone(), b.clone()]));
    r.handle(Event::RuntimeObserved(vec![running(&a), running(&b)]));
    let mut a2 = a.clone();
    a2.env
        .push(EnvVar {
            name: wire::bounded("n", "X").unwrap(),
            value: wire::bounded("v", "1").unwrap(),
        })
        .unwrap();
    r.handle(signed(2, &[a2]));
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a), running(&b)]));
    assert_eq!(
        kinds(&acts),
        [
            "remove app.a",
            "create app.a",
            "start app.a",
            "remove app.b",
            "publish g2"
        ]
    );
}

#[test]
fn same_spec_in_new_generation_is_kept() {
    let (mut r, a) = running_a();
    r.handle(signed(5, std::slice::from_ref(&a)));
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert_eq!(kinds(&acts), ["publish g5"]);
}

#[test]
fn dead_container_is_restarted_with_backoff() {
    let (mut r, a) = running_a();
    let mut dead = running(&a);
    dead.state = RunState::Exited(Some(137));
    r.handle(Event::Tick { now_ms: 100 });
    let acts = r.handle(Event::RuntimeObserved(vec![dead.clone()]));
    assert_eq!(kinds(&acts), ["start app.a", "publish g1"]);
    assert!(logs(&acts)[0].contains("exited with code 137"));
    // Still dead 500 ms later: wait for the backoff.
    r.handle(Event::Tick { now_ms: 600 });
    let acts = r.handle(Event::RuntimeObserved(vec![dead.clone()]));
    assert!(!kinds(&acts).contains(&"start app.a".to_string()));
    r.handle(Event::Tick { now_ms: 1200 });
    let acts = r.handle(Event::RuntimeObserved(vec![dead.clone()]));
    assert!(kinds(&acts).contains(&"start app.a".to_string()));
    assert_eq!(r.actual()[0].restarts, 2);
}

#[test]
fn untrusted_frames_change_nothing() {
    let mut r = rec();
    let a = app_a();
    r.handle(signed(3, std::slice::from_ref(&a)));
    let other = SigningKey::from_bytes(&[9; 32]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"garbage".to_vec(), "dropped desired state"),
        (frame("n1", 4, &[], None), "not signed"),
        (
            frame("n1", 4, &[], Some(&other)),
            "signature does not verify",
        ),
        (
            frame("n1", 2, &[], Some(&cp())),
            "not newer than applied generation 3",
        ),
        (frame("n2", 9, &[], Some(&cp())), "for node \"n2\""),
    ];
    for (bytes, expect) in cases {
        let acts = r.handle(Event::DesiredFrame(bytes));
        assert_eq!(kinds(&acts), Vec::<String>::new(), "{expect}");
        let l = logs(&acts);
        assert_eq!(l.len(), 1);
        assert!(l[0].contains(expect), "{l:?} vs {expect}");
        assert_eq!(r.generation(), 3);
        assert_eq!(r.desired().unwrap().containers.len(), 1);
    }
    // The retained copy again: silent.
    let acts = r.handle(signed(3, &[a]));
    assert!(acts.is_empty());
}

#[test]
fn image_outside_allowlist_is_refused_and_reported() {
    let mut r = rec();
    let bad = spec("app.bad", "docker.io/evil:1");
    let acts = r.handle(signed(1, std::slice::from_ref(&bad)));
    assert!(logs(&acts)
        .iter()
        .any(|l| l.contains("outside the allowlist")));
    let acts = r.handle(Event::RuntimeObserved(vec![]));
    assert_eq!(kinds(&acts), ["publish g1"]);
    let s = &r.actual()[0];
    assert_eq!(s.state, ContainerState::Refused);
    assert!(s.error.contains("allowlist"));
    // One that somehow runs is removed.
    let acts = r.handle(Event::RuntimeObserved(vec![running(&bad)]));
    assert_eq!(kinds(&acts), ["remove app.bad"]);
}

#[test]
fn restored_state_converges_before_any_broker_contact() {
    let mut r = rec();
    let a = app_a();
    let acts = r.handle(Event::Restored(frame(
        "n1",
        7,
        std::slice::from_ref(&a),
        Some(&cp()),
    )));
    assert_eq!(kinds(&acts), ["observe"]);
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert_eq!(kinds(&acts), ["publish g7"]);
    // A forged persisted file is ignored.
    let mut r = rec();
    let acts = r.handle(Event::Restored(frame("n1", 7, &[a], None)));
    assert!(kinds(&acts).is_empty());
    assert_eq!(r.generation(), 0);
}

#[test]
fn nothing_desired_means_nothing_touched() {
    let mut r = rec();
    let a = app_a();
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert!(!kinds(&acts).iter().any(|k| k.starts_with("remove")));
}

#[test]
fn failures_are_reported_and_retried_later() {
    let mut r = rec();
    let a = spec("app.a", "localhost/acoa/missing:1");
    r.handle(signed(1, std::slice::from_ref(&a)));
    r.handle(Event::RuntimeObserved(vec![]));
    let acts = r.handle(Event::ActionFailed {
        name: "app.a".into(),
        error: "image not known".into(),
    });
    match acts.iter().find(|a| matches!(a, Action::PublishActual(_))) {
        Some(Action::PublishActual(s)) => {
            assert_eq!(s.containers[0].state, ContainerState::Failed);
            assert_eq!(s.containers[0].error.as_str(), "image not known");
        }
        _ => panic!("no publish: {acts:?}"),
    }
    r.handle(Event::Tick { now_ms: 500 });
    assert!(kinds(&r.handle(Event::RuntimeObserved(vec![]))).is_empty());
    r.handle(Event::Tick { now_ms: 1000 });
    assert!(kinds(&r.handle(Event::RuntimeObserved(vec![]))).contains(&"create app.a".to_string()));
}

#[test]
fn a_new_broker_session_republishes_the_actual_state() {
    let (mut r, a) = running_a();
    assert!(kinds(&r.handle(Event::RuntimeObserved(vec![running(&a)]))).is_empty());
    assert_eq!(kinds(&r.handle(Event::Connected)), ["observe"]);
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert_eq!(kinds(&acts), ["publish g1"]);
}

#[test]
fn runtime_outage_is_logged_once() {
    let mut r = rec();
    assert_eq!(
        logs(&r.handle(Event::RuntimeUnavailable("no socket".into()))).len(),
        1
    );
    assert!(logs(&r.handle(Event::RuntimeUnavailable("no socket".into()))).is_empty());
    assert_eq!(logs(&r.handle(Event::RuntimeObserved(vec![]))).len(), 1);
}

// ------------------------------------------------------------------ health

use acoa_shared::wire::{CheckSpec, Health, HealthSpec};

/// `app.a` with a TCP check on 8080: every 5 s, 3 failures in a row, a start period of `start_s`.
fn checked_a(start_s: u16) -> ContainerSpec {
    let mut a = app_a();
    a.health = Some(Box::new(HealthSpec {
        check: CheckSpec::Tcp(8080),
        interval_s: 5,
        timeout_s: 2,
        retries: 3,
        start_period_s: start_s,
    }));
    a
}

/// What to do, but the periodic publication of the actual state.
fn work(actions: &[Action]) -> Vec<String> {
    kinds(actions)
        .into_iter()
        .filter(|k| !k.starts_with("publish"))
        .collect()
}

/// Time passes to `now`, the runtime shows `seen`: the actions.
fn at(r: &mut Reconciler, now: u64, seen: &[Observed]) -> Vec<Action> {
    r.handle(Event::Tick { now_ms: now });
    r.handle(Event::RuntimeObserved(seen.to_vec()))
}

fn check_result(r: &mut Reconciler, ok: bool) -> Vec<Action> {
    r.handle(Event::Checked {
        name: "app.a".into(),
        result: if ok {
            Ok(())
        } else {
            Err("connect to 10.88.0.2:8080: connection refused".into())
        },
    })
}

fn health(r: &Reconciler) -> Option<Health> {
    r.actual()[0].health
}

/// A reconciler that runs `spec`, first seen running at t = 1000 ms.
fn running_checked(spec: &ContainerSpec) -> Reconciler {
    let mut r = rec();
    r.handle(signed(1, std::slice::from_ref(spec)));
    at(&mut r, 0, &[]);
    at(&mut r, 1000, &[running(spec)]);
    r
}

#[test]
fn a_check_is_due_every_interval_and_its_result_is_reported() {
    let a = checked_a(0);
    let mut r = running_checked(&a);
    assert_eq!(health(&r), Some(Health::Starting));
    // not due before one interval after the start
    assert!(work(&at(&mut r, 5999, &[running(&a)])).is_empty());
    let acts = at(&mut r, 6000, &[running(&a)]);
    assert_eq!(work(&acts), ["check app.a"]);
    match acts.iter().find(|x| matches!(x, Action::Check { .. })) {
        Some(Action::Check { check, .. }) => assert_eq!(check.check, CheckSpec::Tcp(8080)),
        _ => unreachable!(),
    }
    let acts = check_result(&mut r, true);
    assert_eq!(kinds(&acts), ["publish g1"]);
    assert_eq!(logs(&acts), ["container app.a is healthy (tcp 8080)"]);
    match &acts[1] {
        Action::PublishActual(s) => assert_eq!(s.containers[0].health, Some(Health::Healthy)),
        other => panic!("{other:?}"),
    }
    // the next one an interval after this one, not before
    assert!(work(&at(&mut r, 10_999, &[running(&a)])).is_empty());
    assert_eq!(work(&at(&mut r, 11_000, &[running(&a)])), ["check app.a"]);
    // still healthy: nothing new to publish
    assert!(kinds(&check_result(&mut r, true)).is_empty());
    assert!(logs(&check_result(&mut r, true)).is_empty());
}

#[test]
fn a_container_without_a_check_or_not_running_reports_no_health() {
    let (mut r, a) = running_a();
    assert!(work(&at(&mut r, 60_000, &[running(&a)]))
        .iter()
        .all(|k| !k.starts_with("check")));
    assert_eq!(health(&r), None);
    let a = checked_a(0);
    let mut r = running_checked(&a);
    assert_eq!(health(&r), Some(Health::Starting));
    let mut dead = running(&a);
    dead.state = RunState::Exited(Some(1));
    at(&mut r, 2000, &[dead]);
    assert_eq!(health(&r), None);
    // k3s: the kubelet checks, the agent neither checks nor reports
    let mut r = rec().with_runtime_health_checks(true);
    r.handle(signed(1, std::slice::from_ref(&a)));
    at(&mut r, 0, &[running(&a)]);
    assert!(work(&at(&mut r, 60_000, &[running(&a)])).is_empty());
    assert_eq!(health(&r), None);
}

#[test]
fn retries_failures_in_a_row_make_it_unhealthy_and_it_is_restarted_at_once() {
    let a = checked_a(0);
    let mut r = running_checked(&a);
    at(&mut r, 6000, &[running(&a)]);
    check_result(&mut r, true);
    // two failures: still healthy (a pass in between starts the count again)
    for (t, ok) in [
        (11_000, false),
        (16_000, false),
        (21_000, true),
        (26_000, false),
    ] {
        assert_eq!(work(&at(&mut r, t, &[running(&a)])), ["check app.a"]);
        check_result(&mut r, ok);
        assert_eq!(health(&r), Some(Health::Healthy), "at {t}");
    }
    at(&mut r, 31_000, &[running(&a)]);
    let acts = check_result(&mut r, false);
    assert_eq!(logs(&acts), ["container app.a: health check failed (2 of 3): tcp 8080: connect to 10.88.0.2:8080: connection refused"]);
    at(&mut r, 36_000, &[running(&a)]);
    let acts = check_result(&mut r, false);
    assert_eq!(health(&r), Some(Health::Unhealthy));
    // unhealthy: observe now, so that the restart does not wait for the next tick
    assert_eq!(kinds(&acts), ["observe", "publish g1"]);
    match &acts[2] {
        Action::PublishActual(s) => {
            assert_eq!(s.containers[0].health, Some(Health::Unhealthy));
            assert_eq!(s.containers[0].state, ContainerState::Running);
        }
        other => panic!("{other:?}"),
    }
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert_eq!(kinds(&acts), ["restart app.a", "publish g1"]);
    assert_eq!(
        logs(&acts),
        ["container app.a is unhealthy (3 failed checks in a row, the last: tcp 8080: connect to 10.88.0.2:8080: connection refused): restarting (restart 1; the next restart for health waits at least 10 s)"]
    );
    let st = &r.actual()[0];
    assert_eq!((st.restarts, st.health), (1, Some(Health::Starting)));
}

#[test]
fn failures_in_the_start_period_do_not_count_but_a_pass_does() {
    let a = checked_a(20);
    let mut r = running_checked(&a);
    // started at 1000: failures until 21_000 do not count
    for t in [6000, 11_000, 16_000] {
        assert_eq!(work(&at(&mut r, t, &[running(&a)])), ["check app.a"]);
        let acts = check_result(&mut r, false);
        assert!(logs(&acts).is_empty(), "{acts:?}");
        assert_eq!(health(&r), Some(Health::Starting), "at {t}");
    }
    // past it they count: three more make it unhealthy
    for t in [21_000, 26_000] {
        at(&mut r, t, &[running(&a)]);
        check_result(&mut r, false);
        assert_eq!(health(&r), Some(Health::Starting), "at {t}");
    }
    at(&mut r, 31_000, &[running(&a)]);
    check_result(&mut r, false);
    assert_eq!(health(&r), Some(Health::Unhealthy));
    // a pass in the start period makes it healthy at once
    let mut r = running_checked(&a);
    at(&mut r, 6000, &[running(&a)]);
    check_result(&mut r, true);
    assert_eq!(health(&r), Some(Health::Healthy));
}

/// Every second from `from` to `to` (excluded): the tick and observation, the check when one is
/// due (failing), the observation it asks for. The times of restarts and every log line.
fn failing_every_check(
    r: &mut Reconciler,
    a: &ContainerSpec,
    from: u64,
    to: u64,
) -> (Vec<u64>, Vec<String>) {
    let (mut restarts, mut said) = (vec![], vec![]);
    for t in (from..to).step_by(1000) {
        let mut acts = at(r, t, &[running(a)]);
        if kinds(&acts).contains(&"check app.a".to_string()) {
            let more = check_result(r, false);
            if kinds(&more).contains(&"observe".to_string()) {
                acts.extend(r.handle(Event::RuntimeObserved(vec![running(a)])));
            }
            acts.extend(more);
        }
        if kinds(&acts).contains(&"restart app.a".to_string()) {
            restarts.push(t);
        }
        said.extend(logs(&acts));
    }
    (restarts, said)
}

#[test]
fn restarts_for_health_back_off_and_a_long_healthy_run_forgives_them() {
    let a = checked_a(0);
    let mut r = running_checked(&a);
    let (restarts, said) = failing_every_check(&mut r, &a, 2000, 200_000);
    // each run needs 15 s to fail 3 checks; the first restart comes at once, each further one
    // no sooner than 10 s, 20 s, 40 s, 80 s after the previous
    assert_eq!(restarts, [16_000, 31_000, 51_000, 91_000, 171_000]);
    assert_eq!(r.actual()[0].restarts, 5);
    // a restart that waits for its backoff is said once, with the time left
    let waits: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("restarting in"))
        .collect();
    assert_eq!(waits.len(), 4, "{said:#?}");
    assert_eq!(
        waits[0],
        "container app.a is unhealthy (3 failed checks in a row, the last: tcp 8080: connect to 10.88.0.2:8080: connection refused): restarting in 5 s (backoff after 2 restarts for health)"
    );
    let t = 200_000;
    // healthy for 5 minutes: the next restart for health comes at once again
    at(&mut r, t + 5000, &[running(&a)]);
    check_result(&mut r, true);
    assert_eq!(health(&r), Some(Health::Healthy));
    let mut t = t + 5000 + FORGIVE_AFTER_MS;
    for _ in 0..3 {
        t += 5000;
        assert_eq!(work(&at(&mut r, t, &[running(&a)])), ["check app.a"]);
        check_result(&mut r, false);
    }
    assert_eq!(health(&r), Some(Health::Unhealthy));
    let acts = r.handle(Event::RuntimeObserved(vec![running(&a)]));
    assert!(kinds(&acts).contains(&"restart app.a".to_string()));
    assert_eq!(restart_backoff_ms(1), 10_000);
    assert_eq!(restart_backoff_ms(6), 300_000);
    assert_eq!(restart_backoff_ms(60), 300_000);
}

#[test]
fn a_result_of_an_earlier_run_is_ignored_and_a_changed_check_recreates() {
    let a = checked_a(0);
    let mut r = running_checked(&a);
    at(&mut r, 6000, &[running(&a)]);
    // it exits before the result comes
    let mut dead = running(&a);
    dead.state = RunState::Exited(Some(1));
    at(&mut r, 6500, &[dead]);
    assert!(logs(&check_result(&mut r, true)).is_empty());
    assert_eq!(health(&r), None);
    // a different check is a different spec: the container is created again
    let mut b = a.clone();
    b.health.as_mut().unwrap().retries = 5;
    assert_ne!(spec_hash(&a, None), spec_hash(&b, None));
    r.handle(signed(2, std::slice::from_ref(&b)));
    let acts = at(&mut r, 7000, &[running(&a)]);
    assert_eq!(
        kinds(&acts)[..3],
        ["remove app.a", "create app.a", "start app.a"]
    );
}

#[test]
fn a_spec_without_a_check_hashes_as_before_health_checks() {
    // the value an agent of wire v3 computed for `app_a()`: an upgrade recreates nothing
    assert_eq!(spec_hash(&app_a(), None), "ea165ef7fefb7e1e");
    assert_ne!(spec_hash(&checked_a(0), None), "ea165ef7fefb7e1e");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_bytes_on_the_desired_topic_change_nothing(
            bytes in proptest::collection::vec(any::<u8>(), 0..600)
        ) {
            let mut r = rec();
            let a = app_a();
            r.handle(signed(3, std::slice::from_ref(&a)));
            let acts = r.handle(Event::DesiredFrame(bytes));
            prop_assert!(kinds(&acts).is_empty());
            prop_assert_eq!(r.generation(), 3);
        }

        #[test]
        fn a_flipped_bit_in_a_signed_frame_is_refused(pos in 0usize..10_000, bit in 0u8..8) {
            let mut r = rec();
            let a = app_a();
            let mut f = frame("n1", 4, std::slice::from_ref(&a), Some(&cp()));
            let pos = pos % f.len();
            f[pos] ^= 1 << bit;
            let acts = r.handle(Event::DesiredFrame(f));
            prop_assert!(!kinds(&acts).contains(&"persist".to_string()));
            prop_assert_eq!(r.generation(), 0);
        }
    }
}

#[test]
fn orders_of_an_older_term_are_refused_however_well_signed() {
    let mut r = rec();
    let a = app_a();
    let b = spec("app.b", "localhost/acoa/y:1");
    let term = |g, t, specs: &[ContainerSpec]| {
        Event::DesiredFrame(frame_of_term("n1", g, t, specs, Some(&cp())))
    };
    assert_eq!(
        kinds(&r.handle(term(3, 5, std::slice::from_ref(&a)))),
        ["persist", "observe"]
    );
    // a deposed leader (term 4) with a newer generation: refused, said why
    let out = r.handle(term(10, 4, std::slice::from_ref(&b)));
    assert!(kinds(&out).is_empty(), "{out:?}");
    assert!(
        logs(&out)
            .iter()
            .any(|m| m.contains("of term 4") && m.contains("leads in term 5")),
        "{out:?}"
    );
    assert_eq!(r.generation(), 3);
    // the next leader (term 6) is followed
    assert_eq!(
        kinds(&r.handle(term(4, 6, &[a, b]))),
        ["persist", "observe"]
    );
    assert_eq!(r.desired().map(|d| d.term), Some(6));
}
