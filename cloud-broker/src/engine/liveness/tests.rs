//! The classification on plain values: times in ms, `T` the time of the decision.

use super::*;

const T: u64 = 100_000;

fn w() -> Windows {
    Windows::default()
}

/// Nodes `(name, datacenter, last heard)`.
fn heard(nodes: &[(&str, &str, u64)]) -> Evidence {
    let mut ev = Evidence::default();
    for (n, dc, at) in nodes {
        ev.hear(
            n,
            Heard {
                datacenter: dc.to_string(),
                last_heard: *at,
                will_at: None,
                back: None,
            },
        );
    }
    ev
}

/// `by`'s sample about `about` came at `at`; `about` last answered `ago` ms before it.
fn saw(ev: &mut Evidence, by: &str, about: &str, at: u64, ago: Option<u64>) {
    ev.witness(
        by,
        about,
        Witnessed {
            at,
            answered_at: ago.map(|a| at - a),
        },
    );
}

fn state(ev: &Evidence, n: &str) -> Option<NodeState> {
    classify(ev, n, T, Liveness::Evidence, &w()).map(|v| v.state)
}

#[test]
fn a_node_heard_recently_is_online() {
    let ev = heard(&[("n13", "station", T - 1000)]);
    assert_eq!(state(&ev, "n13"), Some(NodeState::Online));
    assert_eq!(NodeState::Online.as_str(), "online");
    assert_eq!(classify(&ev, "n99", T, Liveness::Evidence, &w()), None);
}

#[test]
fn silent_but_answering_its_peers_is_unreachable_and_the_log_names_them() {
    let mut ev = heard(&[
        ("n13", "station", T - 5000),
        ("n14", "station", T - 200),
        ("n15", "station", T - 300),
    ]);
    saw(&mut ev, "n14", "n13", T - 300, Some(900));
    saw(&mut ev, "n15", "n13", T - 400, Some(1000));
    let v = classify(&ev, "n13", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Unreachable);
    assert!(
        v.evidence
            .contains("n14, n15 reach it, last answer 1.2 s ago"),
        "{}",
        v.evidence
    );
    assert!(v.evidence.contains("silent for 5.0 s"), "{}", v.evidence);
}

#[test]
fn answers_from_before_the_silence_or_too_old_are_no_evidence() {
    // n14 last had an answer before the control plane last heard n13 (a crash right after
    // its last report): not evidence that n13 still answers.
    let mut ev = heard(&[("n13", "station", T - 5000), ("n14", "station", T - 200)]);
    saw(&mut ev, "n14", "n13", T - 300, Some(4800));
    assert_eq!(
        state(&ev, "n13"),
        None,
        "its peer measured it: wait for the evidence window"
    );
    // The window is over: lost.
    let mut ev = heard(&[("n13", "station", T - 12_000), ("n14", "station", T - 200)]);
    saw(&mut ev, "n14", "n13", T - 300, Some(11_800));
    let v = classify(&ev, "n13", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost);
    assert!(
        v.evidence.contains("no peer reached it since"),
        "{}",
        v.evidence
    );
    // An answer after the silence, but older than the window (a stale sample: n14 stopped
    // probing it): lost too.
    let mut ev = heard(&[("n13", "station", T - 30_000), ("n14", "station", T - 200)]);
    saw(&mut ev, "n14", "n13", T - 15_000, Some(1000));
    assert_eq!(state(&ev, "n13"), Some(NodeState::Lost));
}

#[test]
fn a_crash_seen_by_its_peers_is_lost_once_their_answers_age_out() {
    // n13 crashes at T0 right after a report; n14 probes it every 5 s and reports every second.
    let t0 = 50_000;
    let mut ev = heard(&[("n13", "station", t0), ("n14", "station", T - 500)]);
    fn classify_at(ev: &Evidence, now: u64) -> Option<NodeState> {
        classify(ev, "n13", now, Liveness::Evidence, &Windows::default()).map(|v| v.state)
    }
    saw(&mut ev, "n14", "n13", t0 + 1000, Some(1500));
    assert_eq!(
        classify_at(&ev, t0 + 2000),
        Some(NodeState::Online),
        "not silent yet"
    );
    assert_eq!(
        classify_at(&ev, t0 + 4000),
        None,
        "silent, measured, not decided"
    );
    ev.heard_mut("n14").unwrap().last_heard = t0 + 10_000;
    saw(&mut ev, "n14", "n13", t0 + 10_000, Some(10_500));
    assert_eq!(classify_at(&ev, t0 + 10_001), Some(NodeState::Lost));
}

#[test]
fn nobody_measuring_it_means_lost_at_once() {
    let ev = heard(&[("n1", "cloud", T - 3500), ("n2", "cloud", T)]);
    let v = classify(&ev, "n1", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost);
    assert!(v
        .evidence
        .contains("no peer the control plane hears measures it"));
    // a peer that never had an answer of it cannot tell either
    let mut ev = ev;
    saw(&mut ev, "n2", "n1", T, None);
    assert_eq!(state(&ev, "n1"), Some(NodeState::Lost));
}

#[test]
fn a_signed_last_will_makes_it_silent_at_once() {
    let mut ev = heard(&[("n13", "station", T - 500), ("n14", "station", T - 100)]);
    ev.heard_mut("n13").unwrap().will_at = Some(T - 50);
    saw(&mut ev, "n14", "n13", T - 100, Some(200));
    let v = classify(&ev, "n13", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Unreachable);
    assert!(v.evidence.contains("last will"), "{}", v.evidence);
}

#[test]
fn a_whole_train_silent_together_is_unreachable_even_if_the_station_cannot_reach_it() {
    let mut ev = heard(&[
        ("n1", "train1", T - 6000),
        ("n2", "train1", T - 5600),
        ("n3", "train1", T - 5200),
        ("s1", "station", T - 100),
    ]);
    for (a, b) in [("n1", "n2"), ("n2", "n3"), ("n3", "n1"), ("n2", "n1")] {
        let at = ev.heard(a).unwrap().last_heard;
        saw(&mut ev, a, b, at, Some(700));
    }
    // The station lost them too (the tunnel cuts every link out of the train).
    for n in ["n1", "n2", "n3"] {
        saw(&mut ev, "s1", n, T - 100, Some(8000));
    }
    for n in ["n1", "n2", "n3"] {
        let v = classify(&ev, n, T, Liveness::Evidence, &w()).unwrap();
        assert_eq!(v.state, NodeState::Unreachable, "{n}: {}", v.evidence);
        assert!(
            v.evidence
                .contains("its datacenter train1 (3 nodes) went silent together"),
            "{}",
            v.evidence
        );
    }
    // Long after: still the group's evidence (nothing newer contradicts it).
    let later = classify(&ev, "n2", T + 60_000, Liveness::Evidence, &w()).unwrap();
    assert_eq!(later.state, NodeState::Unreachable);
}

#[test]
fn a_train_leaving_its_tunnel_one_node_at_a_time_is_not_lost_meanwhile() {
    let mut ev = heard(&[
        ("n1", "train1", T - 30_000),
        ("n2", "train1", T - 29_600),
        ("n3", "train1", T - 29_200),
        ("s1", "station", T - 100),
    ]);
    for (a, b) in [("n1", "n2"), ("n2", "n3"), ("n3", "n1"), ("n2", "n1")] {
        let at = ev.heard(a).unwrap().last_heard;
        saw(&mut ev, a, b, at, Some(700));
    }
    for n in ["n1", "n2", "n3"] {
        saw(&mut ev, "s1", n, T - 100, Some(28_000));
    }
    assert_eq!(state(&ev, "n1"), Some(NodeState::Unreachable));
    // n3 is back first; its samples about n1 and n2 have not come yet
    let prev = ev.heard("n3").cloned();
    let back = Heard::on_message(prev.as_ref(), "train1", T - 50, &w());
    assert_eq!(
        back.back,
        Some(Back {
            at: T - 50,
            silent_since: T - 29_200
        })
    );
    ev.hear("n3", back);
    for n in ["n1", "n2"] {
        assert_eq!(
            state(&ev, n),
            None,
            "{n}: the returning member's samples decide"
        );
    }
    // its first sample shows n1 answering: unreachable (still silent to the cloud)
    saw(&mut ev, "n3", "n1", T, Some(300));
    assert_eq!(state(&ev, "n1"), Some(NodeState::Unreachable));
    // n2 crashed in the tunnel: n3 does not reach it, and once the evidence window after
    // n3's return is over, n2 is lost
    saw(&mut ev, "n3", "n2", T, Some(29_000));
    let later = T - 50 + w().evidence_ms + 1;
    let mut ev2 = ev.clone();
    ev2.heard_mut("n3").unwrap().last_heard = later;
    let v = classify(&ev2, "n2", later, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost, "{}", v.evidence);
    // a message without a silence before it is no return
    let again = Heard::on_message(ev.heard("s1"), "station", T + 500, &w());
    assert_eq!(again.back, None);
}

#[test]
fn a_datacenter_silent_at_different_times_is_no_group() {
    let mut ev = heard(&[("n1", "train1", T - 30_000), ("n2", "train1", T - 5000)]);
    saw(&mut ev, "n2", "n1", T - 30_500, Some(100));
    saw(&mut ev, "n1", "n2", T - 30_000, Some(100));
    assert_eq!(state(&ev, "n1"), Some(NodeState::Lost));
    // One member still heard: no group either; it reports n1 gone.
    let mut ev = heard(&[("n1", "train1", T - 12_000), ("n2", "train1", T - 100)]);
    saw(&mut ev, "n2", "n1", T - 100, Some(12_500));
    assert_eq!(state(&ev, "n1"), Some(NodeState::Lost));
}

#[test]
fn witnesses_that_are_themselves_unreachable_do_not_count() {
    // n13's only witness n14 (another datacenter) is silent too: its samples are not fresh
    // evidence, and the two are no group.
    let mut ev = heard(&[
        ("n13", "station", T - 12_000),
        ("n14", "cloud", T - 11_000),
        ("n20", "cloud", T - 100),
    ]);
    saw(&mut ev, "n14", "n13", T - 11_000, Some(200));
    let v = classify(&ev, "n13", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost, "{}", v.evidence);
    // ... while n14 itself, whose peer n20 still reaches it, is unreachable.
    saw(&mut ev, "n20", "n14", T - 100, Some(1000));
    assert_eq!(state(&ev, "n14"), Some(NodeState::Unreachable));
}

#[test]
fn the_timer_baseline_waits_its_time_whatever_the_peers_say() {
    let mut ev = heard(&[("n13", "station", T - 39_000), ("n14", "station", T)]);
    saw(&mut ev, "n14", "n13", T, Some(39_000));
    let timer = Liveness::Timer {
        lost_after_ms: 40_000,
    };
    assert_eq!(
        classify(&ev, "n13", T, timer, &w()).unwrap().state,
        NodeState::Online
    );
    let v = classify(&ev, "n13", T + 1500, timer, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost);
    assert!(v.evidence.contains("timer"), "{}", v.evidence);
    // A partition is never told from a crash: answering peers do not keep it.
    saw(&mut ev, "n14", "n13", T + 1500, Some(100));
    assert_eq!(
        classify(&ev, "n13", T + 1500, timer, &w()).unwrap().state,
        NodeState::Lost
    );
}

#[test]
fn forgetting_a_node_drops_its_samples_both_ways() {
    let mut ev = heard(&[("a", "x", 0), ("b", "x", 0)]);
    saw(&mut ev, "a", "b", 0, None);
    saw(&mut ev, "b", "a", 0, None);
    ev.forget("a");
    assert_eq!(ev.samples(), 0);
    assert_eq!(ev.nodes_heard(), 1);
}

#[test]
fn a_forgotten_nodes_place_taken_again_carries_nothing_of_it() {
    let mut ev = heard(&[("a", "x", T), ("b", "x", T)]);
    saw(&mut ev, "b", "a", T, Some(0));
    saw(&mut ev, "a", "b", T, Some(0));
    ev.forget("a");
    // "c" takes the table's place of "a": no sample by or about "a" is its
    ev.hear(
        "c",
        Heard {
            datacenter: "y".into(),
            last_heard: T,
            will_at: None,
            back: None,
        },
    );
    assert_eq!(ev.witnesses_of("c").count(), 0);
    assert_eq!(ev.witnesses_of("b").count(), 0);
    assert_eq!(ev.sample("c", "b"), None);
    assert!(ev.heard("a").is_none());
    assert_eq!(ev.nodes_heard(), 2);
    saw(&mut ev, "c", "b", T, Some(0));
    assert_eq!(
        ev.witnesses_of("b").map(|(by, _)| by).collect::<Vec<_>>(),
        ["c"]
    );
}

#[test]
fn a_node_heard_in_another_datacenter_leaves_its_old_group() {
    // n1 and n2 of train1 went silent together, n1 reached by n2 before: a group cut off
    let mut ev = heard(&[("n1", "train1", T - 12_000), ("n2", "train1", T - 12_000)]);
    saw(&mut ev, "n2", "n1", T - 12_000, Some(500));
    assert_eq!(state(&ev, "n1"), Some(NodeState::Unreachable));
    // n2 was heard in a station since (then went silent there): n1 is alone in train1
    let mut moved = ev.heard("n2").unwrap().clone();
    moved.datacenter = "station".into();
    ev.hear("n2", moved);
    let v = classify(&ev, "n1", T, Liveness::Evidence, &w()).unwrap();
    assert_eq!(v.state, NodeState::Lost, "{}", v.evidence);
    assert_eq!(ev.silent_nodes(T, &w()).count(), 2);
}

/// A sample is held in 16 bytes and read back as it came (an answer never had, one just now,
/// one long ago).
#[test]
fn a_sample_is_small_and_read_back_as_it_came() {
    assert_eq!(std::mem::size_of::<Sample>(), 16);
    let mut ev = heard(&[("a", "x", T), ("b", "x", T)]);
    for ago in [None, Some(0), Some(1), Some(30_000), Some(T)] {
        saw(&mut ev, "a", "b", T, ago);
        assert_eq!(
            ev.sample("a", "b"),
            Some(Witnessed {
                at: T,
                answered_at: ago.map(|a| T - a)
            })
        );
    }
}

/// A witness that stopped measuring a node (its sample grows old) is forgotten as one, unless
/// the sample is by or about a node kept (unreachable: its last samples stand); the fresh
/// ones stay.
#[test]
fn old_samples_are_forgotten_except_those_of_nodes_kept() {
    let mut ev = heard(&[("a", "x", T), ("b", "x", T), ("c", "y", T), ("u", "y", T)]);
    saw(&mut ev, "a", "b", T - 70_000, Some(0)); // old: forgotten
    saw(&mut ev, "c", "b", T - 1_000, Some(0)); // fresh
    saw(&mut ev, "u", "b", T - 70_000, Some(0)); // old, by a node kept
    saw(&mut ev, "a", "u", T - 70_000, Some(0)); // old, about a node kept
    ev.forget_older_than(T, 60_000, |n| n == "u");
    let of_b: Vec<&str> = ev.witnesses_of("b").map(|(by, _)| by).collect();
    assert_eq!(of_b, ["c", "u"]);
    assert!(ev.sample("a", "u").is_some());
}

/// A hub measured by thousands of nodes, in any order, again and again, some of them
/// forgotten: each witness's latest sample is found, once (the samples are kept sorted by
/// their witness, for a binary search).
#[test]
fn a_hub_with_thousands_of_witnesses_keeps_each_ones_latest_sample() {
    let names: Vec<String> = (0..3000).map(|i| format!("n{i}")).collect();
    let mut ev = heard(&[("hub", "x", T)]);
    for n in &names {
        ev.hear(
            n,
            Heard {
                datacenter: "y".into(),
                last_heard: T,
                will_at: None,
                back: None,
            },
        );
    }
    // three rounds, each in another order (a stride prime to 3000), the last one latest
    for (round, stride) in [(0u64, 7usize), (1, 11), (2, 13)] {
        for k in 0..names.len() {
            let n = &names[(k * stride) % names.len()];
            saw(&mut ev, n, "hub", T - 100 + round, Some(round));
        }
    }
    for n in names.iter().step_by(3) {
        ev.forget(n);
    }
    assert_eq!(ev.witnesses_of("hub").count(), 2000);
    assert_eq!(ev.samples(), 2000);
    for (i, n) in names.iter().enumerate() {
        let want = (i % 3 != 0).then_some(Witnessed {
            at: T - 98,
            answered_at: Some(T - 100),
        });
        assert_eq!(ev.sample(n, "hub"), want, "{n}");
    }
}
