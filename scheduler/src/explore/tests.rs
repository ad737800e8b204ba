//! The exploration round's tests: small models whose estimates and measurements are known.

use super::*;
use crate::{score_all_on, LinkQ};
use acoa_shared::model::{parse_application, CoordDoc, EstimatedNode, LinkEstimates, Node};

fn node(i: usize, dc: &str) -> Node {
    crate::testkit::edge_node(format!("n{i:05}"), dc)
}

fn q(latency_ms: f64) -> LinkQ {
    LinkQ {
        latency_ms,
        success: 1.0,
    }
}

/// src pinned to n00000, sink in datacenter b; one channel, a response-time path.
/// A round's pairs to probe as a set; each is asked for once.
fn set(probe: &[(u32, u32)]) -> BTreeSet<(u32, u32)> {
    let n = probe.len();
    let s: BTreeSet<(u32, u32)> = probe.iter().copied().collect();
    assert_eq!(s.len(), n, "a pair asked for twice");
    s
}

fn app() -> Application {
    parse_application(
        "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: sink, image: i, requires: {datacenter: b}}\nchannels:\n- {name: c, from: src, to: sink}\npaths:\n- {name: p, channels: [c]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
    )
    .unwrap()
}

fn at(sink: &str) -> Assignment {
    [("src", "n00000"), ("sink", sink)]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The round after `last` on `m` (what it decided, its candidate now to compare).
fn next_round(
    m: &Infra,
    app: &Application,
    last: &Explored,
    width: usize,
    opts: &Options,
) -> Explored {
    round(
        m,
        app,
        &Ledger::new(),
        &last.next,
        last.candidate.as_ref(),
        width,
        opts,
    )
}

/// n00000 in datacenter a, n00001-n00004 in b; `measured` links, every node's coordinate
/// on a line at `x` (height 1 ms: an estimate is the distance plus 2 ms), its error 0.2.
fn model(measured: &[(u32, u32, f64)]) -> Infra {
    model_unsure(measured, [0.2; 5])
}

/// [`model`] with each node's coordinate error.
fn model_unsure(measured: &[(u32, u32, f64)], errors: [f64; 5]) -> Infra {
    let nodes: Vec<Node> = (0..5)
        .map(|i| node(i, if i == 0 { "a" } else { "b" }))
        .collect();
    on_a_line(nodes, [0.0, -20.0, 5.0, 6.0, 9.0], errors, measured)
}

/// Five nodes, each with its coordinate on a line at `x` (height 1 ms: an estimate is the
/// distance plus 2 ms) and its error, a loopback of 0.05 ms and the `measured` links.
fn on_a_line(
    nodes: Vec<Node>,
    x: [f64; 5],
    errors: [f64; 5],
    measured: &[(u32, u32, f64)],
) -> Infra {
    let mut est = LinkEstimates::default();
    for ((n, x), error) in nodes.iter().zip(x).zip(errors) {
        let coord = CoordDoc {
            position: [x, 0.0, 0.0],
            height_ms: 1.0,
            error,
        };
        let e = EstimatedNode {
            coord: Some(coord),
            median_jitter_ms: 0.1,
            median_success: 1.0,
        };
        est.nodes.insert(n.name.clone(), e);
    }
    let links = (0..5)
        .map(|i| (i, i, q(0.05)))
        .chain(measured.iter().map(|&(a, b, l)| (a, b, q(l))));
    Infra::new(nodes, links).with_estimates(&est)
}

/// The estimates say n00002 (7 ms) is better than the measured n00001 (10 ms); the truth:
/// n00002 12 ms, n00003 15 ms, n00004 5 ms (estimated 11 ms: no search on estimates
/// would try it).
#[test]
fn a_round_moves_only_onto_measured_links_and_probes_the_candidates_neighbourhood() {
    let (app, opts) = (app(), Options::default());
    let m = model(&[(0, 1, 10.0)]);
    assert_eq!(m.link(0, 2).unwrap().latency_ms, 7.0);
    assert_eq!(m.link(0, 4).unwrap().latency_ms, 11.0);
    let r1 = round(&m, &app, &Ledger::new(), &at("n00001"), None, 8, &opts);
    assert_eq!(r1.next, at("n00001"), "no move onto an estimate");
    assert_eq!(r1.candidate, Some(at("n00002")), "the search's placement");
    // the candidate's pair and, around it, the sink's other nodes (n00001 is measured)
    assert_eq!(set(&r1.probe), BTreeSet::from([(0, 2), (0, 3), (0, 4)]));
    assert!(r1.goes_on());
    // width 1: the candidate's node and the single move hoped best (n00003, 8 x 0.8 ms)
    let narrow = round(&m, &app, &Ledger::new(), &at("n00001"), None, 1, &opts);
    assert_eq!(set(&narrow.probe), BTreeSet::from([(0, 2), (0, 3)]));
    // measured: the best of the candidate (12 ms) and the measured search's (n00004)
    let m = model(&[(0, 1, 10.0), (0, 2, 12.0), (0, 3, 15.0), (0, 4, 5.0)]);
    let second = || next_round(&m, &app, &r1, 8, &opts);
    let r2 = second();
    assert_eq!(r2.next, at("n00004"));
    assert_eq!(r2.candidate, None);
    assert!(r2.probe.is_empty() && !r2.goes_on(), "{r2:?}");
    assert_eq!(second(), r2, "the same round again gives the same result");
}

/// A node whose coordinate is unsure (error 0.9) is probed though its estimate (11 ms) is
/// the worst: at its optimistic bound (1.1 ms) it could be the best. Width 1: the
/// candidate's node (n00002, 7 ms) and the single move hoped best.
#[test]
fn a_round_probes_the_node_whose_coordinate_is_least_sure() {
    let (app, opts) = (app(), Options::default());
    let sure = round(
        &model(&[(0, 1, 10.0)]),
        &app,
        &Ledger::new(),
        &at("n00001"),
        None,
        1,
        &opts,
    );
    // hoped best: n00003 (8 x 0.8 ms), before n00004 (11 x 0.8 ms)
    assert_eq!(set(&sure.probe), BTreeSet::from([(0, 2), (0, 3)]));
    let m = model_unsure(&[(0, 1, 10.0)], [0.2, 0.2, 0.2, 0.2, 0.9]);
    assert_eq!(
        m.link(0, 4).unwrap().latency_ms,
        11.0,
        "the estimate is the same"
    );
    let r = round(&m, &app, &Ledger::new(), &at("n00001"), None, 1, &opts);
    assert_eq!(r.next, at("n00001"));
    assert_eq!(r.candidate, Some(at("n00002")));
    assert_eq!(set(&r.probe), BTreeSet::from([(0, 2), (0, 4)]));
}

/// A channel's end moved to a group mate: the sink's node n00001 has three mates in
/// datacenter b, width 3 keeps the two nearest the source on the model (n00002 7 ms,
/// n00003 8 ms; not n00004, 11 ms), a measured pair is not asked for again, and the
/// source (alone in datacenter a, and pinned) has none.
#[test]
fn the_group_mates_of_a_placements_nodes_are_probed() {
    let m = model(&[(0, 1, 10.0)]);
    assert_eq!(
        mates(&m, &app(), &at("n00001"), 3),
        BTreeSet::from([(0, 2), (0, 3)])
    );
    let m = model(&[(0, 1, 10.0), (0, 2, 7.5)]);
    assert_eq!(
        mates(&m, &app(), &at("n00001"), 3),
        BTreeSet::from([(0, 3)])
    );
    assert!(
        mates(&m, &app(), &at("n00001"), 1).is_empty(),
        "width 1: none"
    );
}

/// A channel's end moved to a node near its own on measured links: the sink's node n00001
/// measures n00002 (0.7 ms), which measures n00003 (0.6 ms), a station the coordinates put
/// 42 ms from the source (33.6 ms at their optimistic bound, against the 10 ms measured:
/// no ranking on them hopes for it); n00004 measures n00001 (3 ms). n00002's pair with the
/// source is measured (12 ms). Each node a datacenter of its own; the source is pinned, so
/// it has none, and the sink runs anywhere else.
#[test]
fn the_nodes_near_a_placements_nodes_on_measured_links_are_probed() {
    let app = parse_application(
        "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: sink, image: i, requires: {hardware: [s]}}\nchannels:\n- {name: c, from: src, to: sink}\npaths:\n- {name: p, channels: [c]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
    )
    .unwrap();
    let m = |extra: &[(u32, u32, f64)]| {
        let nodes = ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, dc)| Node {
                hardware: if i > 0 { vec!["s".into()] } else { vec![] },
                ..node(i, dc)
            })
            .collect();
        let measured = [
            (0, 1, 10.0),
            (0, 2, 12.0),
            (1, 2, 0.7),
            (2, 3, 0.6),
            (4, 1, 3.0),
        ];
        let all: Vec<_> = measured.iter().chain(extra).copied().collect();
        on_a_line(nodes, [0.0, 8.0, 8.5, 40.0, 11.0], [0.2; 5], &all)
    };
    let model = m(&[]);
    assert_eq!(model.link(0, 3).unwrap().latency_ms, 42.0);
    let near = |model: &Infra, width| measured_near(model, &app, &at("n00001"), width);
    assert_eq!(near(&model, 2), BTreeSet::from([(0, 3)]));
    assert_eq!(near(&model, 3), BTreeSet::from([(0, 3), (0, 4)]));
    assert!(near(&model, 1).is_empty(), "width 1: none");
    assert_eq!(near(&m(&[(0, 3, 7.0)]), 2), BTreeSet::from([(0, 4)]));
    // the round probes it (nothing else does), and moves there once it is measured
    let opts = Options::default();
    let r = round(&model, &app, &Ledger::new(), &at("n00001"), None, 2, &opts);
    assert_eq!(set(&r.probe), BTreeSet::from([(0, 3), (0, 4)]));
    let r = round(
        &m(&[(0, 3, 7.0)]),
        &app,
        &Ledger::new(),
        &r.next,
        None,
        2,
        &opts,
    );
    assert_eq!(r.next, at("n00003"));
}

/// A source pinned to n00000 feeds `mid` (on n00001 or n00002: hardware m), which feeds the
/// sink (n00003 or n00004: hardware s); one response-time path over both channels.
fn chain() -> Application {
    parse_application(
        "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n- {name: mid, image: i, requires: {hardware: [m]}}\n- {name: sink, image: i, requires: {hardware: [s]}}\nchannels:\n- {name: a, from: src, to: mid}\n- {name: b, from: mid, to: sink}\npaths:\n- {name: p, channels: [a, b]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n",
    )
    .unwrap()
}

/// The five nodes of [`chain`], each a datacenter of its own.
fn chain_nodes() -> Vec<Node> {
    (0..5)
        .map(|i| Node {
            hardware: match i {
                1 | 2 => vec!["m".into()],
                3 | 4 => vec!["s".into()],
                _ => vec![],
            },
            ..node(i, &format!("d{i}"))
        })
        .collect()
}

/// The nodes of [`chain`] with the `links` (from, to, latency) measured, nothing estimated.
fn chain_measured(links: &[(u32, u32, f64)]) -> Infra {
    Infra::new(chain_nodes(), links.iter().map(|&(a, b, l)| (a, b, q(l))))
}

/// A placement of [`chain`].
fn placed3(mid: &str, sink: &str) -> Assignment {
    [("src", "n00000"), ("mid", mid), ("sink", sink)]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Two components that move together: the source (pinned to n00000) feeds `mid` (n00001
/// or n00002), which feeds the sink (n00003 or n00004), each node a datacenter of its own.
/// The placement in force, n00001 and n00003, is measured at 10 + 10 ms; the estimates
/// put n00002 and n00004 at 12 + 12 ms, and either alone far from the other's first node
/// (112 and 72 ms). Their coordinates are unsure (error 0.9): hoped for together, they
/// could be 1.2 + 1.2 ms. Width 1, so that steps 4-6 probe only single moves: the pair
/// between n00002 and n00004 is probed by the hopeful search alone, and once it is
/// measured the next round moves there.
#[test]
fn a_round_probes_the_placement_that_moves_several_components_at_once_hopefully() {
    let app = chain();
    let model = |measured: &[(u32, u32, f64)]| {
        let x = [0.0, -50.0, 10.0, -100.0, 20.0];
        on_a_line(chain_nodes(), x, [0.2, 0.2, 0.9, 0.2, 0.9], measured)
    };
    let placed = placed3;
    let opts = Options::default();
    let m = model(&[(0, 1, 10.0), (1, 3, 10.0)]);
    assert_eq!(m.link(2, 4).unwrap().latency_ms, 12.0);
    assert!((m.hopeful().link(2, 4).unwrap().latency_ms - 1.2).abs() < 1e-9);
    assert_eq!(
        m.hopeful().link(1, 3).unwrap().latency_ms,
        10.0,
        "measured: as is"
    );
    let current = placed("n00001", "n00003");
    let r1 = round(&m, &app, &Ledger::new(), &current, None, 1, &opts);
    assert_eq!(r1.next, current, "no move onto an estimate");
    // the search on estimates keeps the measured placement: the hopeful one is compared
    assert_eq!(r1.candidate, Some(placed("n00002", "n00004")));
    // the single moves hoped best (mid to n00002, sink to n00004) and the hopeful search's
    assert_eq!(
        set(&r1.probe),
        BTreeSet::from([(0, 2), (1, 4), (2, 3), (2, 4)])
    );
    let m = model(&[
        (0, 1, 10.0),
        (1, 3, 10.0),
        (0, 2, 3.0),
        (1, 4, 60.0),
        (2, 3, 90.0),
        (2, 4, 3.0),
    ]);
    let r2 = next_round(&m, &app, &r1, 1, &opts);
    assert_eq!(r2.next, placed("n00002", "n00004"));
    assert_eq!(r2.candidate, None);
}

/// In a fleet larger than [`MOVES_PER_COMPONENT`], a component's single moves are the
/// nodes nearest the other end of its channel, not the first by name.
#[test]
fn a_large_fleets_single_moves_are_bounded_and_the_nearest() {
    let n = MOVES_PER_COMPONENT + 1000;
    let nodes: Vec<Node> = (0..=n)
        .map(|i| node(i, if i == 0 { "a" } else { "b" }))
        .collect();
    // n00000 -> node i: (n + 1 - i) ms, the last nodes the nearest
    let links = (1..=n as u32).map(|i| (0, i, q((n as u32 + 1 - i) as f64)));
    let m = Infra::new(nodes, links);
    let moves = single_moves(&m, &app(), &at("n00001"));
    assert_eq!(moves.len(), MOVES_PER_COMPONENT, "src is pinned: no move");
    let sinks: Vec<u32> = moves.iter().map(|(_, i)| *i).collect();
    let want: Vec<u32> = (n as u32 + 1 - MOVES_PER_COMPONENT as u32..=n as u32).collect();
    assert_eq!(sinks, want);
    assert!(moves.iter().all(|(c, _)| *c == 1));
}

/// A source pinned to n00000 feeds `mid` (n00001 or n00002), which feeds the sink (n00003
/// or n00004), each node a datacenter of its own and every pair measured: the placement in
/// force (n00001, n00003) takes 10 + 10 ms, either single move is worse (3 + 90 ms, 10 +
/// 60 ms), both moves at once take 3 + 3 ms.
fn two_together() -> (Application, Infra, Assignment) {
    let app = chain();
    let links = [
        (0, 1, 10.0),
        (1, 3, 10.0),
        (0, 2, 3.0),
        (2, 4, 3.0),
        (1, 4, 60.0),
        (2, 3, 90.0),
    ];
    let m = chain_measured(&links);
    (app, m, placed3("n00001", "n00003"))
}

/// The large-neighbourhood search moves both components at once where no single move
/// improves, and finds nothing above the best placement.
#[test]
fn the_neighbourhood_search_moves_two_components_at_once() {
    let (app, m, current) = two_together();
    let opts = Options::default();
    let single = single_moves(&m, &app, &current);
    let all = score_with_moves_on(
        &m,
        &app,
        std::slice::from_ref(&current),
        &current,
        &single,
        None,
    );
    let base = all[0].as_ref().unwrap().0;
    let scores = &all[1..];
    assert_eq!(scores.len(), single.len());
    assert!(
        scores.iter().all(|s| s.as_ref().unwrap().0 < base),
        "no single move improves"
    );
    let best = placed3("n00002", "n00004");
    assert_eq!(
        improved(&m, &app, &Ledger::new(), &current, &opts),
        vec![best.clone()]
    );
    assert!(improved(&m, &app, &Ledger::new(), &best, &opts).is_empty());
}

/// A source pinned to n00000 feeds four components in a row (`b`, `c`, `d`, `e`: on n00001
/// or n00002, hardware m), the last of which feeds the sink pinned to n00003, on the nodes
/// of [`chain`] (each a datacenter of its own; n00004 unused), every pair measured: the placement in force, all four on
/// n00001, takes 10 + 3 x 0.05 + 10 ms; all four on n00002 take 5 + 3 x 0.05 + 5 ms; any
/// fewer moved cross between n00001 and n00002 (20 ms) and are worse. A component and the
/// other ends of its channels free together are at most three of the four; a channel's two
/// ends and theirs are all four.
#[test]
fn the_neighbourhood_search_moves_a_chain_of_four_at_once() {
    let mut yaml = String::from(
        "application: t\ncomponents:\n- {name: src, image: i, requires: {node: n00000}}\n",
    );
    for c in ["b", "c", "d", "e"] {
        yaml += &format!("- {{name: {c}, image: i, requires: {{hardware: [m]}}}}\n");
    }
    yaml += "- {name: sink, image: i, requires: {node: n00003}}\nchannels:\n";
    let row = ["src", "b", "c", "d", "e", "sink"];
    for (i, w) in row.windows(2).enumerate() {
        yaml += &format!("- {{name: c{i}, from: {}, to: {}}}\n", w[0], w[1]);
    }
    yaml += "paths:\n- {name: p, channels: [c0, c1, c2, c3, c4]}\ncriteria:\n- {type: min-e2e-response-time, path: p, weight: 1.0}\n";
    let app = parse_application(&yaml).unwrap();
    let links = [
        (0, 1, 10.0),
        (1, 3, 10.0),
        (0, 2, 5.0),
        (2, 3, 5.0),
        (1, 2, 20.0),
        (2, 1, 20.0),
        (1, 1, 0.05),
        (2, 2, 0.05),
    ];
    let m = chain_measured(&links);
    let placed = |mid: &str| -> Assignment {
        row.iter()
            .map(|c| {
                let n = match *c {
                    "src" => "n00000",
                    "sink" => "n00003",
                    _ => mid,
                };
                (c.to_string(), n.to_string())
            })
            .collect()
    };
    let (current, best) = (placed("n00001"), placed("n00002"));
    let opts = Options::default();
    assert_eq!(
        improved(&m, &app, &Ledger::new(), &current, &opts),
        vec![best.clone()]
    );
    assert!(improved(&m, &app, &Ledger::new(), &best, &opts).is_empty());
}

/// Single moves scored by node number score as their placements of names do, after the
/// placements given; a move onto a node the component may not run on is that error.
#[test]
fn single_moves_score_as_their_placements_do() {
    let (app, m, current) = two_together();
    let mut moves = single_moves(&m, &app, &current);
    // mid needs the hardware `m`, which n00003 does not have
    moves.push((1, 3));
    let best = placed3("n00002", "n00004");
    let by_number = score_with_moves_on(
        &m,
        &app,
        std::slice::from_ref(&best),
        &current,
        &moves,
        None,
    );
    let placements: Vec<Assignment> = std::iter::once(best)
        .chain(moves.iter().map(|&(c, n)| {
            let mut a = current.clone();
            a.insert(app.components[c].name.clone(), m.node(n).name.clone());
            a
        }))
        .collect();
    assert_eq!(by_number, score_all_on(&m, &app, &placements, None));
    assert!(by_number[1..moves.len()].iter().all(Result::is_ok));
    assert!(
        matches!(&by_number[moves.len()], Err(crate::ScheduleError::Unsatisfied { component, .. }) if component == "mid"),
        "{:?}",
        by_number[moves.len()]
    );
}

/// Restrictions searched on one l_min score as [`crate::score_on`] does (l_min proven), each
/// the best within its own nodes; a restriction with no deployment gives none.
#[test]
fn placements_within_restrictions_score_as_the_placement_does() {
    let (app, m, current) = two_together();
    let pin = |mid: u32, sink: u32| -> BTreeMap<String, Vec<u32>> {
        [("src", vec![0]), ("mid", vec![mid]), ("sink", vec![sink])]
            .into_iter()
            .map(|(c, n)| (c.to_string(), n))
            .collect()
    };
    let mut free_sink = pin(1, 3);
    free_sink.insert("sink".into(), vec![3, 4]);
    let only_mid = BTreeMap::from([("mid".to_string(), vec![2])]);
    let within = [pin(1, 3), free_sink, only_mid, pin(3, 3)];
    let found = place_within_on(&m, &app, &Ledger::new(), &within, &Options::default()).unwrap();
    let score = |a: &Assignment| crate::score_on(&m, &app, a).unwrap().0;
    let got: Vec<Option<(Assignment, f64)>> = found
        .into_iter()
        .map(|p| p.map(|p| (p.assignment, p.score)))
        .collect();
    let best = placed3("n00002", "n00004");
    assert_eq!(
        got,
        vec![
            Some((current.clone(), score(&current))),
            Some((current.clone(), score(&current))),
            Some((best.clone(), score(&best))),
            None,
        ]
    );
}
