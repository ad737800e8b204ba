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
