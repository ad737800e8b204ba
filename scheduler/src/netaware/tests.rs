//! Hand-computed examples. The fixture, used throughout:
//!
//! ```text
//! nodes (cpu, memory capacity 1000 each; background cpu/memory):
//!   n0 200/100   n1 0/0   n2 500/500          all schedulable, ingress n0
//! one-way latency ms: n0-n1 10, n0-n2 20, n1-n2 40 (symmetric), 0 within a node; L_max = 40
//! components (cpu/memory): a 100/200 (entry), b 200/100, c 100/100
//! traffic B/s: a->b 300, b->a 100, a->c 50, c->a 50, c->b 200
//!   exchanged: a-b 400, a-c 100, b-c 200
//! weights: α 0.25, β 0.15, γ 0.5, δ 0.1, max utilisation 0.8
//! ```

use super::desched::{evaluate, Action, Config, Descheduler, Event};
use super::*;
use crate::rng::SplitMix64 as Rng;

fn node(name: &str, cpu_bg: f64, mem_bg: f64) -> NodeState {
    NodeState {
        name: name.into(),
        cpu_capacity: 1000.0,
        memory_capacity: 1000.0,
        cpu_background: cpu_bg,
        memory_background: mem_bg,
        schedulable: true,
    }
}

fn comp(name: &str, cpu: f64, memory: f64) -> ComponentUse {
    ComponentUse {
        name: name.into(),
        cpu,
        memory,
    }
}

/// The latency matrix of a test snapshot.
fn matrix(s: &mut Snapshot) -> &mut Vec<Vec<f64>> {
    match &mut s.latency {
        Latency::Matrix(m) => m,
        Latency::Links { .. } => panic!("a test snapshot has a matrix"),
    }
}

fn fixture() -> Snapshot {
    Snapshot {
        nodes: vec![
            node("n0", 200.0, 100.0),
            node("n1", 0.0, 0.0),
            node("n2", 500.0, 500.0),
        ],
        latency: Latency::Matrix(vec![
            vec![0.0, 10.0, 20.0],
            vec![10.0, 0.0, 40.0],
            vec![20.0, 40.0, 0.0],
        ]),
        components: vec![
            comp("a", 100.0, 200.0),
            comp("b", 200.0, 100.0),
            comp("c", 100.0, 100.0),
        ],
        traffic: vec![
            vec![0.0, 300.0, 50.0],
            vec![100.0, 0.0, 0.0],
            vec![50.0, 200.0, 0.0],
        ],
        entry: 0,
        ingress: 0,
        allowed: Vec::new(),
    }
}

fn w() -> Weights {
    Weights::default()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn default_weights_are_the_documented_ones() {
    let w = w();
    assert_eq!(
        (w.alpha, w.beta, w.gamma, w.delta, w.max_utilisation),
        (0.25, 0.15, 0.5, 0.1, 0.8)
    );
}

#[test]
fn score_of_a_non_entry_component_by_hand() {
    // b on n1, a on n0, c on n2:
    // H_cpu = 1 - 200/1000 = 0.8, H_mem = 1 - 100/1000 = 0.9
    // N = 1 - (400·L(n1,n0)=10 + 200·L(n1,n2)=40) / (600·40) = 1 - 12000/24000 = 0.5
    // S = (0.25·0.8 + 0.15·0.9 + 0.5·0.5) / 0.9 = 0.585/0.9 = 0.65
    let s = fixture();
    let p = score_parts(&s, &w(), &[Some(0), None, Some(2)], 1, 1);
    assert!(close(p.cpu_headroom, 0.8), "{p:?}");
    assert!(close(p.memory_headroom, 0.9), "{p:?}");
    assert!(close(p.network, 0.5), "{p:?}");
    assert_eq!(p.entry, None);
    assert!(close(p.total, 0.65), "{p:?}");
    // b's own entry in the assignment is ignored.
    assert!(close(
        score(&s, &w(), &[Some(0), Some(2), Some(2)], 1, 1),
        0.65
    ));
}

#[test]
fn score_of_the_entry_component_by_hand() {
    // a on n2, b on n1, c on n2: load on n2 = 500/500 + c 100/100 + a 100/200 = 700/800
    // H_cpu 0.3, H_mem 0.2; N = 1 - (400·40 + 100·0)/(500·40) = 0.2; E = 1 - 20/40 = 0.5
    // S = 0.25·0.3 + 0.15·0.2 + 0.5·0.2 + 0.1·0.5 = 0.255 (weights sum to 1)
    let s = fixture();
    let a = [None, Some(1), Some(2)];
    let p = score_parts(&s, &w(), &a, 0, 2);
    assert!(close(p.cpu_headroom, 0.3), "{p:?}");
    assert!(close(p.memory_headroom, 0.2), "{p:?}");
    assert!(close(p.network, 0.2), "{p:?}");
    assert!(close(p.entry.unwrap(), 0.5), "{p:?}");
    assert!(close(p.total, 0.255), "{p:?}");
    // memory 800 = 0.8·1000 exactly: fits; with c's 100 MB more it would not.
    assert!(fits(&s, &w(), &a, 0, 2));
    let mut s2 = s.clone();
    s2.components[2].memory = 101.0;
    assert!(!fits(&s2, &w(), &a, 0, 2));
}

#[test]
fn no_placed_peer_or_no_latency_makes_the_network_term_neutral() {
    let s = fixture();
    assert!(close(score_parts(&s, &w(), &[None; 3], 1, 2).network, 1.0));
    let mut z = fixture();
    z.latency = Latency::Matrix(vec![vec![0.0; 3]; 3]);
    let p = score_parts(&z, &w(), &[Some(0), None, Some(2)], 1, 1);
    assert!(close(p.network, 1.0) && close(p.total, (0.2 + 0.135 + 0.5) / 0.9));
}

#[test]
fn placement_order_by_hand() {
    // Fixture: a (entry); to {a}: b 400, c 100 -> b; then c.
    assert_eq!(placement_order(&fixture()), vec![0, 1, 2]);
    // e(0) entry; x(1), y(2), z(3), w(4); exchanged e-x 100, e-y 100, y-z 50, w none.
    // After e: x and y both 100 to {e}; y's total (150) beats x's (100) -> y.
    // To {e, y}: x 100, z 50 -> x; then z; w (no traffic at all) last.
    let mut s = fixture();
    s.components = (0..5).map(|i| comp(&format!("c{i}"), 1.0, 1.0)).collect();
    s.traffic = vec![vec![0.0; 5]; 5];
    s.traffic[0][1] = 100.0;
    s.traffic[2][0] = 100.0;
    s.traffic[2][3] = 30.0;
    s.traffic[3][2] = 20.0;
    assert_eq!(placement_order(&s), vec![0, 2, 1, 3, 4]);
    // Another entry: starts there.
    s.entry = 3;
    assert_eq!(placement_order(&s), vec![3, 2, 0, 1, 4]);
}

#[test]
fn allowed_restricts_where_each_component_may_go() {
    // a may not go on n1 (its best, 0.92): n0 (0.88) beats n2 (0.695). c may only go on n1.
    let mut s = fixture();
    s.allowed = vec![
        vec![true, false, true],
        vec![true, true, true],
        vec![false, true, false],
    ];
    let NetOutcome::Placed(a) = place(&s, &w()).unwrap() else {
        panic!("placed")
    };
    assert_eq!((a[0], a[2]), (0, 1));
    assert!(close(best_node(&s, &w(), &[None; 3], 0).unwrap().1, 0.88));
    assert!(!fits(&s, &w(), &[None; 3], 0, 1));
    // The descheduler's gains skip the nodes a component may not go on.
    let g = desched::gains(&s, &w(), &a, 2);
    assert!(g.iter().all(Option::is_none), "{g:?}");
    assert!(desched::gains(&s, &w(), &a, 0)[1].is_none());
    // The baseline respects it too.
    let NetOutcome::Placed(b) = baseline::place(&s).unwrap() else {
        panic!("placed")
    };
    assert!(b.iter().enumerate().all(|(c, &n)| s.allowed[c][n]));
    // A mask of the wrong shape is bad input.
    s.allowed.pop();
    assert!(matches!(s.validate(), Err(NetError::Shape { .. })));
    s.allowed = vec![vec![true; 2]; 3];
    assert!(matches!(s.validate(), Err(NetError::Shape { .. })));
}

#[test]
fn placement_by_hand() {
    // a: n0 0.175+0.105+0.5+0.1 = 0.88; n1 0.225+0.12+0.5+0.075 = 0.92; n2 0.695 -> n1
    // b (peer a on n1): n0 0.645/0.9; n1 0.78/0.9; n2 0.135/0.9 -> n1
    // c (peers a, b on n1): n0 0.67/0.9; n1 (load 400/400) 0.74/0.9 -> n1
    let s = fixture();
    assert_eq!(place(&s, &w()).unwrap(), NetOutcome::Placed(vec![1, 1, 1]));
    assert!(close(best_node(&s, &w(), &[None; 3], 0).unwrap().1, 0.92));
    // At most 35 %: c no longer fits on n1 (400 > 350) nor n2, goes to n0.
    let tight = Weights {
        max_utilisation: 0.35,
        ..w()
    };
    assert_eq!(
        place(&s, &tight).unwrap(),
        NetOutcome::Placed(vec![1, 1, 0])
    );
    // At most 5 %: a (100 millicores) fits nowhere; a value, not an error.
    let none = Weights {
        max_utilisation: 0.05,
        ..w()
    };
    assert_eq!(
        place(&s, &none).unwrap(),
        NetOutcome::Unschedulable {
            component: "a".into(),
            partial: vec![None; 3]
        }
    );
}

#[test]
fn unschedulable_nodes_are_never_chosen() {
    let mut s = fixture();
    s.nodes[1].schedulable = false;
    let NetOutcome::Placed(a) = place(&s, &w()).unwrap() else {
        panic!("placed")
    };
    assert!(a.iter().all(|&n| n != 1), "{a:?}");
}

#[test]
fn bad_input_is_an_error_naming_what_is_wrong() {
    let mut s = fixture();
    matrix(&mut s)[1].pop();
    let e = place(&s, &w()).unwrap_err();
    assert_eq!(e.to_string(), "latency_ms row 1: expected 3 entries, got 2");
    let mut s = fixture();
    s.traffic[0][1] = f64::NAN;
    assert!(place(&s, &w())
        .unwrap_err()
        .to_string()
        .starts_with("traffic[0][1]: must be finite"));
    let mut s = fixture();
    s.entry = 7;
    assert_eq!(
        place(&s, &w()).unwrap_err().to_string(),
        "entry: no component 7"
    );
    let bad = Weights { alpha: -1.0, ..w() };
    assert!(place(&fixture(), &bad).is_err());
}

#[test]
fn kubernetes_formulas_by_hand() {
    // LeastAllocated: ((cap - req)·100/cap) per resource, integer, then mean.
    assert_eq!(
        baseline::least_allocated((250.0, 1000.0), (1000.0, 4000.0)),
        75
    );
    assert_eq!(
        baseline::least_allocated((333.0, 0.0), (1000.0, 1000.0)),
        83
    ); // (66 + 100)/2
    assert_eq!(
        baseline::least_allocated((1200.0, 0.0), (1000.0, 1000.0)),
        50
    ); // (0 + 100)/2
       // BalancedAllocation: (1 - |cpu - mem|)·100, 0 when a fraction is >= 1.
    assert_eq!(
        baseline::balanced_allocation((500.0, 250.0), (1000.0, 1000.0)),
        75
    );
    assert_eq!(
        baseline::balanced_allocation((300.0, 300.0), (1000.0, 1000.0)),
        100
    );
    assert_eq!(
        baseline::balanced_allocation((1000.0, 0.0), (1000.0, 1000.0)),
        0
    );
}

#[test]
fn baseline_placement_by_hand() {
    // Declaration order, network ignored.
    // a: n0 req 300/300 -> LA 70 + BA 100 = 170; n1 100/200 -> 85 + 90 = 175; n2 600/700 -> 35 + 90
    // b: n0 400/200 -> 70 + 80 = 150; n1 300/300 -> 70 + 100 = 170; n2 700/600 -> 35 + 90
    // c: n0 300/200 -> 75 + 90 = 165; n1 400/400 -> 60 + 100 = 160; n2 600/600 -> 40 + 100
    let s = fixture();
    assert_eq!(baseline::score(&s, &[None; 3], 0, 1), Some(175));
    assert_eq!(
        baseline::score(&s, &[Some(1), Some(1), None], 2, 0),
        Some(165)
    );
    assert_eq!(
        baseline::score(&s, &[Some(1), Some(1), None], 2, 1),
        Some(160)
    );
    assert_eq!(
        baseline::score(&s, &[Some(1), Some(1), None], 2, 2),
        Some(140)
    );
    assert_eq!(
        baseline::place(&s).unwrap(),
        NetOutcome::Placed(vec![1, 1, 0])
    );
    // Only capacity filters the baseline: c (100) no longer fits n0 with 950 in the background.
    let mut full = fixture();
    full.nodes[0].cpu_background = 950.0;
    assert_eq!(
        baseline::score(&full, &[Some(1), Some(1), None], 2, 0),
        None
    );
}

/// The one action of `acts`, a move: (component, from, to); panics on anything else.
fn the_move(acts: &[Action]) -> (usize, usize, usize) {
    match acts {
        [Action::Move {
            component,
            from,
            to,
            ..
        }] => (*component, *from, *to),
        _ => panic!("not one move: {acts:?}"),
    }
}

/// Observing `a` completes the move in flight, and `a` then stays put for `ticks` ticks.
fn settles_on(d: &mut Descheduler, s: &Snapshot, a: &[usize], ticks: usize) {
    assert!(tick(d, s, a).is_empty());
    assert_eq!(d.in_flight(), None);
    for _ in 0..ticks {
        assert!(tick(d, s, a).is_empty());
    }
}

fn tick(d: &mut Descheduler, s: &Snapshot, a: &[usize]) -> Vec<Action> {
    d.handle(Event::Tick {
        snapshot: s.clone(),
        assignment: a.to_vec(),
    })
    .unwrap()
}

/// No smoothing, threshold 15 %, 3 ticks: each tick's gain as measured (the hand-computed
/// tests).
fn raw() -> Config {
    Config {
        threshold: 0.15,
        sustain: 3,
        smoothing: 1.0,
        confirm_timeout: 10,
        weights: Weights::default(),
        group_moves: true,
    }
}

#[test]
fn descheduler_moves_after_a_sustained_gain_and_waits_for_confirmation() {
    // c on n2: S = (0.25·0.4 + 0.15·0.4 + 0.5·0)/0.9 = 0.1778; on n1: 0.74/0.9 = 0.8222;
    // gain 3.625.
    let s = fixture();
    let (to, gain) = evaluate(&s, &w(), &[1, 1, 2], 2).unwrap();
    assert_eq!(to, 1);
    assert!(close(gain, 0.74 / 0.16 - 1.0), "{gain}");
    let mut d = Descheduler::new(raw()).unwrap();
    let a = [1, 1, 2];
    assert!(tick(&mut d, &s, &a).is_empty());
    assert_eq!(d.streak(2), Some((1, 1)));
    assert!(tick(&mut d, &s, &a).is_empty());
    let acts = tick(&mut d, &s, &a);
    assert_eq!(the_move(&acts), (2, 2, 1));
    assert_eq!(d.in_flight(), Some((2, 1)));
    // Not yet observed: nothing else happens.
    for _ in 0..3 {
        assert!(tick(&mut d, &s, &a).is_empty());
    }
    // Observed on n1: done; the fixed point [1, 1, 1] stays put.
    settles_on(&mut d, &s, &[1, 1, 1], 20);
}

#[test]
fn an_interrupted_streak_starts_again() {
    // "calm": c exchanges nothing and n2 is empty: c on n2 (0.9/0.9 headroom) beats every
    // other node, no gain.
    let bad = fixture();
    let mut calm = fixture();
    calm.traffic = vec![vec![0.0; 3]; 3];
    calm.nodes[2].cpu_background = 0.0;
    calm.nodes[2].memory_background = 0.0;
    let a = [1, 1, 2];
    let mut d = Descheduler::new(raw()).unwrap();
    for s in [&bad, &bad, &calm, &bad, &bad] {
        assert!(tick(&mut d, s, &a).is_empty());
    }
    assert_eq!(d.streak(2), Some((1, 2)));
    assert_eq!(tick(&mut d, &bad, &a).len(), 1);
}

#[test]
fn one_move_at_a_time_largest_gain_first() {
    // b and c both on n2. b: S(n2) = (0.05 + 0.045 + 0.5/3)/0.9, best n1 = (0.175 + 0.105 +
    // 0.5·2/3)/0.9, gain 1.344; c: best n0, gain 0.37. Both above 0.15 from the first tick.
    let s = fixture();
    let a = [1, 2, 2];
    let (to, gain) = evaluate(&s, &w(), &a, 1).unwrap();
    assert_eq!(to, 1);
    assert!(
        close(gain, (0.28 + 1.0 / 3.0) / (0.095 + 0.5 / 3.0) - 1.0),
        "{gain}"
    );
    let (to, gain) = evaluate(&s, &w(), &a, 2).unwrap();
    assert_eq!(to, 0);
    assert!(gain > 0.15, "{gain}");
    // Components alone (the group {b, c} would win: see the next test).
    let mut d = Descheduler::new(Config {
        group_moves: false,
        ..raw()
    })
    .unwrap();
    tick(&mut d, &s, &a);
    tick(&mut d, &s, &a);
    let acts = tick(&mut d, &s, &a);
    assert_eq!(the_move(&acts), (1, 2, 1));
    // c stays due, but waits for b's move to be observed...
    assert!(tick(&mut d, &s, &a).is_empty());
    // ...and then gathers its evidence again, on the new state (c now prefers n1: 3.625).
    let a = [1, 1, 2];
    assert!(tick(&mut d, &s, &a).is_empty()); // confirmation tick
    assert!(tick(&mut d, &s, &a).is_empty());
    assert!(tick(&mut d, &s, &a).is_empty());
    let acts = tick(&mut d, &s, &a);
    assert_eq!(the_move(&acts), (2, 2, 1));
}

#[test]
fn a_group_moves_one_component_at_a_time() {
    // b and c on n2 talk to each other (200 B/s): a group. To n1 together: both score
    // 0.74/0.9 there; before b 0.261667/0.9, c 0.428333/0.9. Gain = total improvement over
    // the mean score before = (1.48 - 0.69)/0.9 / (0.69/0.9/2) = 2.2899, above b alone (1.344).
    let s = fixture();
    let a = [1, 2, 2];
    assert_eq!(super::desched::groups(&s, &a), vec![vec![0], vec![1, 2]]);
    let g = super::desched::group_gains(&s, &w(), &a, &[1, 2]);
    assert!(close(g[1].unwrap(), 0.79 / 0.345), "{g:?}");
    let mut d = Descheduler::new(raw()).unwrap();
    tick(&mut d, &s, &a);
    tick(&mut d, &s, &a);
    assert_eq!(d.streak_of(&[1, 2]), Some((1, 2)));
    let acts = tick(&mut d, &s, &a);
    assert_eq!(the_move(&acts), (1, 2, 1));
    let Action::Move { gain, .. } = acts[0] else {
        unreachable!()
    };
    assert!(close(gain, 0.79 / 0.345));
    // b not observed yet: c waits.
    assert!(tick(&mut d, &s, &a).is_empty());
    // b observed on n1: c's move on the same tick.
    let acts = tick(&mut d, &s, &[1, 1, 2]);
    assert_eq!(the_move(&acts), (2, 2, 1));
    assert_eq!(d.in_flight(), Some((2, 1)));
    settles_on(&mut d, &s, &[1, 1, 1], 10);
}

#[test]
fn a_move_never_observed_is_abandoned_and_a_failed_one_released() {
    let s = fixture();
    let a = [1, 1, 2];
    let cfg = Config {
        confirm_timeout: 4,
        ..raw()
    };
    let mut d = Descheduler::new(cfg).unwrap();
    for _ in 0..3 {
        tick(&mut d, &s, &a);
    }
    assert_eq!(d.in_flight(), Some((2, 1)));
    for _ in 0..3 {
        assert!(tick(&mut d, &s, &a).is_empty());
    }
    assert_eq!(
        tick(&mut d, &s, &a),
        vec![Action::Abandoned {
            component: 2,
            to: 1
        }]
    );
    assert_eq!(d.in_flight(), None);
    // Evidence again from scratch: three ticks, then the move is asked for again.
    tick(&mut d, &s, &a);
    tick(&mut d, &s, &a);
    assert_eq!(tick(&mut d, &s, &a).len(), 1);
    d.handle(Event::MoveFailed { component: 2 }).unwrap();
    assert_eq!(d.in_flight(), None);
}

#[test]
fn descheduler_rejects_bad_config_and_input() {
    assert!(Descheduler::new(Config {
        sustain: 0,
        ..Config::default()
    })
    .is_err());
    assert!(Descheduler::new(Config {
        smoothing: 0.0,
        ..Config::default()
    })
    .is_err());
    let mut d = Descheduler::new(Config::default()).unwrap();
    let e = d
        .handle(Event::Tick {
            snapshot: fixture(),
            assignment: vec![0, 1],
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "assignment: expected 3 entries, got 2");
    let e = d
        .handle(Event::Tick {
            snapshot: fixture(),
            assignment: vec![0, 1, 9],
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "assignment: no node 9");
}

/// Two equivalent homes for y: x sits on n0 (and fits nowhere else), n1 and n2 are identical and equally far
/// from n0 (50 ms, also from each other). Each tick every latency is measured with a uniform
/// error of up to ±`noise`.
fn equidistant(noise: f64, rng: &mut Rng) -> Snapshot {
    let mut s = Snapshot {
        nodes: vec![
            node("n0", 0.0, 0.0),
            node("n1", 100.0, 100.0),
            node("n2", 100.0, 100.0),
        ],
        latency: Latency::Matrix(vec![
            vec![0.0, 50.0, 50.0],
            vec![50.0, 0.0, 50.0],
            vec![50.0, 50.0, 0.0],
        ]),
        components: vec![comp("x", 750.0, 50.0), comp("y", 100.0, 100.0)],
        traffic: vec![vec![0.0, 1000.0], vec![3000.0, 0.0]],
        entry: 0,
        ingress: 0,
        allowed: Vec::new(),
    };
    for a in 0..3 {
        for b in 0..3 {
            if a != b {
                matrix(&mut s)[a][b] *= 1.0 + noise * (2.0 * rng.unit() - 1.0);
            }
        }
    }
    s
}

fn moves_under_noise(cfg: Config, noise: f64, ticks: usize, seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    let mut d = Descheduler::new(cfg).unwrap();
    let mut a = vec![0, 1];
    let mut moves = 0;
    for _ in 0..ticks {
        let s = equidistant(noise, &mut rng);
        for act in tick(&mut d, &s, &a) {
            if let Action::Move { component, to, .. } = act {
                a[component] = to; // carried out at once, observed next tick
                moves += 1;
            }
        }
    }
    moves
}

#[test]
fn noisy_latencies_do_not_make_it_flap() {
    // Without hysteresis (no smoothing, no threshold, one tick) the noise moves y back and
    // forth between n1 and n2 all the time...
    let naive = Config {
        threshold: 0.0,
        sustain: 1,
        smoothing: 1.0,
        ..Config::default()
    };
    let flaps = moves_under_noise(naive, 0.1, 1000, 7);
    assert!(flaps > 100, "{flaps}");
    // ...with the defaults nothing moves, over 10 seeds × 1000 ticks, even at ±20 %.
    for seed in 0..10 {
        for noise in [0.1, 0.2] {
            let moves = moves_under_noise(Config::default(), noise, 1000, seed);
            assert_eq!(moves, 0, "seed {seed}, noise {noise}");
        }
    }
}

#[test]
fn a_real_change_still_moves_it_under_noise() {
    // Same noise, but n2 becomes 5 ms from n0: y moves to n2 within a few ticks, once.
    let mut rng = Rng::new(3);
    let mut d = Descheduler::new(Config::default()).unwrap();
    let mut a = vec![0, 1];
    let mut moved_at = Vec::new();
    for t in 0..200 {
        let mut s = equidistant(0.1, &mut rng);
        if t >= 50 {
            matrix(&mut s)[0][2] *= 0.1;
            matrix(&mut s)[2][0] *= 0.1;
        }
        for act in tick(&mut d, &s, &a) {
            if let Action::Move { component, to, .. } = act {
                a[component] = to;
                moved_at.push(t);
            }
        }
    }
    assert_eq!(a, vec![0, 2]);
    assert_eq!(moved_at.len(), 1, "{moved_at:?}");
    assert!((50..65).contains(&moved_at[0]), "{moved_at:?}");
}
