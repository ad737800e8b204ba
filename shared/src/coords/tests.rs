use super::*;
use crate::geo::Position;

type Node2 = VivaldiNode<2, 32, 8>;

/// A known metric space: a 5 x 5 grid (10 ms spacing) with heights 1..5 ms; the latency of a
/// pair is the Euclidean distance plus both heights, which Vivaldi with a height can fit
/// exactly.
fn grid() -> Vec<([f64; 2], f64)> {
    (0..25)
        .map(|i| {
            let (x, y) = ((i % 5) as f64 * 10.0, (i / 5) as f64 * 10.0);
            ([x, y], 1.0 + (i % 5) as f64)
        })
        .collect()
}

fn truth(p: &[([f64; 2], f64)], i: usize, j: usize) -> f64 {
    let (a, b) = (p[i].0, p[j].0);
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt() + p[i].1 + p[j].1
}

/// Every node samples every other, in a seeded order, `rounds` times.
fn run_grid(seed: u64, rounds: usize, noise: impl Fn(&mut SplitMix64, f64) -> f64) -> Vec<Node2> {
    let p = grid();
    let mut nodes: Vec<Node2> = (0..p.len())
        .map(|i| VivaldiNode::new(VivaldiConfig::default(), seed + i as u64))
        .collect();
    let mut rng = SplitMix64::new(seed);
    for _ in 0..rounds {
        for i in 0..p.len() {
            let j = (i + 1 + rng.below(p.len() - 1)) % p.len();
            let remote = *nodes[j].system();
            let sample = noise(&mut rng, truth(&p, i, j));
            nodes[i].observe(j as u32, sample, &remote).unwrap();
        }
    }
    nodes
}

fn median_rel_error(nodes: &[Node2]) -> f64 {
    let p = grid();
    let mut errs = Vec::new();
    for i in 0..p.len() {
        for j in i + 1..p.len() {
            let est = estimate_latency_ms(nodes[i].coordinate(), nodes[j].coordinate());
            errs.push((est - truth(&p, i, j)).abs() / truth(&p, i, j));
        }
    }
    errs.sort_by(f64::total_cmp);
    errs[errs.len() / 2]
}

#[test]
fn converges_on_a_known_metric_space() {
    let nodes = run_grid(7, 2000, |_, l| l);
    let e = median_rel_error(&nodes);
    assert!(e < 0.03, "median relative error {e}");
    // A node's own error estimate has come down from the initial 1.5.
    assert!(nodes.iter().all(|n| n.system().error() < 0.2));
}

#[test]
fn converges_with_jitter_and_outliers() {
    // 5 % jitter, and one sample in twenty ten times too late: the moving median keeps the
    // late ones out.
    let nodes = run_grid(11, 3000, |r, l| {
        let l = l * (0.95 + 0.1 * r.unit());
        if r.below(20) == 0 {
            l * 10.0
        } else {
            l
        }
    });
    let e = median_rel_error(&nodes);
    assert!(e < 0.06, "median relative error {e}");
}

#[test]
fn same_seed_same_coordinates_other_seed_other() {
    let a = run_grid(3, 200, |_, l| l);
    let b = run_grid(3, 200, |_, l| l);
    let c = run_grid(4, 200, |_, l| l);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.system(), y.system());
        assert_eq!(x.coordinate(), y.coordinate());
    }
    assert!(a.iter().zip(&c).any(|(x, z)| x.system() != z.system()));
}

#[test]
fn median_filter_rejects_outliers_and_follows_a_lasting_change() {
    let mut f = MpFilter::<8>::default();
    assert_eq!(f.value(0.5), None);
    for _ in 0..8 {
        f.push(10.0);
    }
    f.push(500.0);
    f.push(0.0);
    assert_eq!(f.value(0.5), Some(10.0));
    // Three spikes out of eight still do not move the median.
    f.push(900.0);
    f.push(900.0);
    assert_eq!(f.value(0.5), Some(10.0));
    // A lasting change wins within half a window.
    for _ in 0..5 {
        f.push(20.0);
    }
    assert_eq!(f.value(0.5), Some(20.0));
    assert_eq!(f.len(), 8);
    // Percentiles interpolate between order statistics.
    let mut g = MpFilter::<4>::default();
    for v in [4.0, 1.0, 3.0, 2.0] {
        g.push(v);
    }
    assert_eq!(g.value(0.5), Some(2.5));
    assert_eq!(g.value(0.0), Some(1.0));
    assert_eq!(g.value(1.0), Some(4.0));
    assert_eq!(g.value(0.25), Some(1.75));
}

#[test]
fn peer_table_is_bounded_and_replaces_the_least_recent() {
    let mut t = PeerFilters::<u32, 3, 4>::default();
    for (peer, l) in [(1, 5.0), (2, 6.0), (3, 7.0), (1, 5.0)] {
        t.push(peer, l, 0.5);
    }
    assert_eq!(t.len(), 3);
    // Peer 2 was sampled least recently: peer 4 takes its place.
    assert_eq!(t.push(4, 2.0, 0.5), Some(2.0));
    assert_eq!(t.len(), 3);
    assert_eq!(t.get(2), None);
    assert_eq!(t.get(1), Some(5.0));
    assert_eq!(t.nearest_ms(), Some(2.0));
    t.forget(4);
    assert_eq!(t.nearest_ms(), Some(5.0));
}

#[test]
fn height_stays_non_negative_and_coordinates_finite() {
    let mut rng = SplitMix64::new(5);
    let mut n: VivaldiNode<3, 8, 4> = VivaldiNode::new(VivaldiConfig::default(), 1);
    for i in 0..20_000u32 {
        let remote = Coord::new(
            [
                rng.unit() * 200.0 - 100.0,
                rng.unit() * 1e-9,
                rng.unit() * 50.0,
            ],
            if i % 3 == 0 { 0.0 } else { rng.unit() * 80.0 },
            rng.unit() * 2.0,
        )
        .unwrap();
        // Latencies from 0 to far below what the coordinates predict: forces that pull the
        // height down hard.
        let sample = if i % 2 == 0 { 0.0 } else { rng.unit() * 3.0 };
        n.observe(i % 8, sample, &remote).unwrap();
        for c in [n.system(), n.coordinate()] {
            assert!(c.height() >= 0.0, "height {}", c.height());
            assert!(c.vec().iter().all(|x| x.is_finite()));
            assert!(c.error() >= 0.0 && c.error() <= 1.5);
        }
    }
}

#[test]
fn bad_samples_and_coordinates_are_refused() {
    let mut n: Node2 = VivaldiNode::new(VivaldiConfig::default(), 1);
    let o = Coord::origin(0.0, 1.0);
    assert!(matches!(
        n.observe(1, f64::NAN, &o),
        Err(CoordError::BadSample(_))
    ));
    assert!(n.observe(1, -1.0, &o).is_err());
    assert!(matches!(
        n.observe(1, 1e9, &o),
        Err(CoordError::SampleTooLarge(..))
    ));
    assert_eq!(n.samples(), 0);
    assert_eq!(n.filtered_ms(1), None);
    assert_eq!(
        Coord::new([0.0, f64::INFINITY], 1.0, 1.0),
        Err(CoordError::NotFinite(1))
    );
    assert!(Coord::new([0.0, 0.0], -0.1, 1.0).is_err());
    assert!(Coord::new([0.0, 0.0], 0.0, f64::NAN).is_err());
    assert_eq!(
        CoordError::BadHeight(-1.0).to_string(),
        "height -1 is negative or not finite"
    );
}

#[test]
fn a_settled_node_takes_smaller_steps_than_a_new_one() {
    let dabek = VivaldiConfig {
        cc_settled: VivaldiConfig::default().cc,
        ..VivaldiConfig::default()
    };
    let remote = Coord::new([10.0, 0.0], 1.0, 1.5).unwrap();
    let mut a: Node2 = VivaldiNode::new(VivaldiConfig::default(), 3);
    let mut b: Node2 = VivaldiNode::new(dabek, 3);
    // New (error 1.5, above `error_unsettled`): the paper's step.
    a.update(20.0, &remote);
    b.update(20.0, &remote);
    assert_eq!(a.system(), b.system());
    // Settled on samples that fit (error near 0): one sample 10 ms longer moves it about a
    // fifth as far (0.05 against 0.25), for the same trust `w = e_i / (e_i + e_j)`.
    for _ in 0..2000 {
        a.update(20.0, &remote);
        b.update(20.0, &remote);
    }
    let step = |n: &mut Node2| {
        let (d, e) = (n.system().distance_ms(&remote), n.system().error());
        assert!((d - 20.0).abs() < 0.1 && e < 0.05, "{:?}", n.system());
        n.update(30.0, &remote);
        (n.system().distance_ms(&remote) - d) / (e / (e + remote.error()))
    };
    let (sa, sb) = (step(&mut a), step(&mut b));
    assert!(
        sa > 0.1 * sb && sa < 0.3 * sb,
        "moved {sa} against {sb} per unit of trust"
    );
}

#[test]
fn coincident_nodes_are_pushed_apart() {
    let mut a: Node2 = VivaldiNode::new(VivaldiConfig::default(), 9);
    let b = Coord::origin(0.01, 1.5);
    a.update(20.0, &b);
    assert!(a.system().euclid(&b) > 1.0);
}

#[test]
fn the_update_filter_holds_still_coordinates_and_follows_a_move() {
    let mut f = filter::RelativeFilter::<2>::default();
    let at = |x: f64| Coord::new([x, 0.0], 1.0, 0.1).unwrap();
    // The first full window sets the application-level coordinate.
    let mut changed = 0;
    for i in 0..filter::UPDATE_WINDOW {
        changed += usize::from(f.push(&at(10.0 + 0.01 * i as f64), 5.0, 0.3));
    }
    assert_eq!(changed, 1);
    let first = *f.coord().unwrap();
    // A jiggle far below 30 % of the 5 ms to the nearest neighbour: no change.
    for i in 0..200 {
        assert!(!f.push(&at(10.0 + 0.1 * (i % 3) as f64), 5.0, 0.3));
    }
    assert_eq!(f.coord(), Some(&first));
    // A move by 10 ms: the coordinate follows, in at most two steps, to within the
    // threshold (30 % of 5 ms) of the new place.
    let mut changes = 0;
    for _ in 0..4 * filter::UPDATE_WINDOW {
        changes += usize::from(f.push(&at(20.0), 5.0, 0.3));
    }
    assert!((1..=2).contains(&changes), "{changes} changes");
    assert!((f.coord().unwrap().vec()[0] - 20.0).abs() <= 1.5);
    assert_eq!(f.updates(), 1 + changes as u64);
}

fn members(points: &[(u32, f64)]) -> Vec<Member<u32, 1>> {
    points
        .iter()
        .enumerate()
        .map(|(i, &(g, x))| Member {
            group: g,
            coord: Some(Coord::new([x], 0.5, 0.2).unwrap()),
            place: None,
            key: i as u64,
            epoch: 0,
        })
        .collect()
}

#[test]
fn neighbours_take_the_group_then_the_nearest_then_random() {
    // Node 0 in group 1 with five group mates; others of group 2 on a line.
    let mut pts = vec![(1, 0.0); 6];
    pts.extend((1..=40).map(|i| (2, i as f64)));
    let m = members(&pts);
    let mix = NeighbourMix {
        group_max: 3,
        random: 2,
        geo: 0,
    };
    let got = select_neighbours(0, &m, 10, mix, 42);
    assert_eq!(got.len(), 10);
    assert!(!got.contains(&0));
    let mut dedup = got.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), 10);
    // Three of the group (indices 1..=5), first.
    assert!(got[..3].iter().all(|&j| (1..=5).contains(&j)));
    assert_eq!(got.iter().filter(|&&j| j <= 5).count(), 3);
    // Then the five nearest others (x = 1..=5: indices 6..=10), nearest first.
    assert_eq!(&got[3..8], &[6, 7, 8, 9, 10]);
    // Then two random others.
    assert!(got[8..].iter().all(|&j| j > 10));
    // Deterministic.
    assert_eq!(select_neighbours(0, &m, 10, mix, 42), got);
    assert_ne!(select_neighbours(0, &m, 10, mix, 43)[8..], got[8..]);
}

#[test]
fn the_nearest_slots_spread_over_the_groups_around() {
    // Node 0 alone in group 1; around it groups 2..=9 of four members each, group g at
    // x = g - 1 .. g - 0.7, so that the four nearest are all of group 2.
    let mut pts = vec![(1, 0.0)];
    for g in 2..=9u32 {
        pts.extend((0..4).map(|i| (g, g as f64 - 1.0 + i as f64 / 10.0)));
    }
    let m = members(&pts);
    let mix = NeighbourMix {
        group_max: 0,
        random: 0,
        geo: 0,
    };
    let got = select_neighbours(0, &m, 5, mix, 42);
    let groups: Vec<u32> = got.iter().map(|&j| m[j].group).collect();
    // the nearest member of each of the five nearest groups, nearest first
    assert_eq!(groups, vec![2, 3, 4, 5, 6], "{got:?}");
    assert_eq!(got, vec![1, 5, 9, 13, 17]);
    // more slots than groups among the candidates: the nearest left fill them
    let got = select_neighbours(0, &m, 12, mix, 42);
    assert_eq!(&got[..8], &[1, 5, 9, 13, 17, 21, 25, 29]);
    assert_eq!(&got[8..], &[2, 3, 4, 6]);
    assert_eq!(select_all_neighbours(&m, 12, mix, 42)[0], got);
}

#[test]
fn a_positioned_node_measures_its_neighbours_on_the_map_first() {
    // Node 0, a station alone in group 1 at x = 0 by coordinates; groups 2..=9 of two members
    // each along a line by coordinates (group g at x = g); on the map, groups 8 and 9 are next
    // to node 0 (1 and 2 km), the others far, and group 7 has no position. The coordinates
    // over-estimate 8 and 9 (as they do a short pair): only the map finds them.
    let mut pts = vec![(1, 0.0)];
    for g in 2..=9u32 {
        pts.extend([(g, g as f64), (g, g as f64 + 0.1)]);
    }
    let mut m = members(&pts);
    let at = |km: f64| Some(Position::new(46.0 + km / 111.19, 7.0).unwrap());
    m[0].place = at(0.0);
    for (j, x) in m.iter_mut().enumerate().skip(1) {
        x.place = match x.group {
            8 => at(1.0 + j as f64 * 0.01),
            9 => at(2.0),
            7 => None,
            g => at(50.0 * g as f64),
        };
    }
    let mix = NeighbourMix {
        group_max: 0,
        random: 1,
        geo: 2,
    };
    let got = select_neighbours(0, &m, 5, mix, 42);
    let groups: Vec<u32> = got.iter().map(|&j| m[j].group).collect();
    // two on the map (one per group: 8's nearest member, then 9), then the two nearest by
    // coordinates of groups not chosen yet, then one random
    assert_eq!(&groups[..4], &[8, 9, 2, 3], "{got:?}");
    assert_eq!(got[0], 13);
    assert_eq!(got.len(), 5);
    assert_eq!(select_all_neighbours(&m, 5, mix, 42)[0], got);
    // a node without a position gives those slots to the coordinates
    let mut unplaced = m.clone();
    unplaced[0].place = None;
    let got = select_neighbours(0, &unplaced, 5, mix, 42);
    let groups: Vec<u32> = got.iter().map(|&j| unplaced[j].group).collect();
    assert_eq!(&groups[..4], &[2, 3, 4, 5], "{got:?}");
    // the default mix: half of the nearest slots on the map
    let d = NeighbourMix::for_k(16);
    assert_eq!((d.group_max, d.random, d.geo), (4, 6, 3));
    assert_eq!(NeighbourMix::for_k(32).geo, 6);
}

#[test]
fn a_large_datacenter_sends_few_of_its_members_to_the_map() {
    // a datacenter of 200 nodes at one place, a station of 2 next to it, 60 nodes of other
    // groups far away by coordinates and without a position
    let dc = Position::new(47.0, 8.0).unwrap();
    let station = Position::new(47.01, 8.0).unwrap();
    let mut m: Vec<Member<u32, 1>> = Vec::new();
    for i in 0..262usize {
        let (group, place, x) = match i {
            0..200 => (1, Some(dc), 0.0),
            200..202 => (2, Some(station), 0.0),
            _ => (3 + i as u32, None, 100.0 + i as f64),
        };
        m.push(Member {
            group,
            coord: Some(Coord::new([x], 0.5, 0.2).unwrap()),
            place,
            key: (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            epoch: 0,
        });
    }
    let with = NeighbourMix {
        group_max: 2,
        random: 2,
        geo: 2,
    };
    let without = NeighbourMix { geo: 0, ..with };
    let a = select_all_neighbours(&m, 8, with, 5);
    let b = select_all_neighbours(&m, 8, without, 5);
    let changed: Vec<usize> = (0..200).filter(|&i| a[i] != b[i]).collect();
    assert_eq!(changed.len(), MAP_PER_GROUP, "{changed:?}");
    for &i in &changed {
        assert!(
            a[i].iter().any(|&j| m[j].group == 2),
            "mapper {i} lists the station"
        );
    }
    // the station's two members both probe on the map: the datacenter is their nearest group
    for list in &a[200..202] {
        assert!(list.iter().any(|&j| m[j].group == 1), "{list:?}");
    }
    // one list at a time gives the same
    for i in [0, 1, 57, 200, 201, 230] {
        assert_eq!(select_neighbours(i, &m, 8, with, 5), a[i], "member {i}");
    }
}

#[test]
fn neighbours_without_coordinates_or_with_few_nodes() {
    let mut m = members(&[(1, 0.0), (2, 1.0), (2, 2.0), (3, 3.0)]);
    // Everyone but me, whatever k says.
    let got = select_neighbours(0, &m, 32, NeighbourMix::for_k(32), 1);
    let mut s = got.clone();
    s.sort();
    assert_eq!(s, vec![1, 2, 3]);
    // No coordinate of my own: random slots only, still k at most.
    m[0].coord = None;
    let got = select_neighbours(0, &m, 2, NeighbourMix::for_k(2), 1);
    assert_eq!(got.len(), 2);
    assert!(!got.contains(&0));
    assert!(select_neighbours(9, &m, 2, NeighbourMix::for_k(2), 1).is_empty());
    assert!(select_neighbours(0, &m, 0, NeighbourMix::for_k(0), 1).is_empty());
}

#[test]
fn a_measured_pair_is_measured_an_unmeasured_one_estimated() {
    let a = Coord::new([0.0, 0.0], 2.0, 0.1).unwrap();
    let b = Coord::new([3.0, 4.0], 1.0, 0.1).unwrap();
    assert_eq!(estimate_latency_ms(&a, &b), 8.0);
    let link = |j, s| MeasuredLink {
        latency_ms: 1.0,
        jitter_ms: j,
        success: s,
    };
    let sa =
        EndpointSummary::from_links([link(1.0, 0.99), link(3.0, 0.9), link(2.0, 1.0)]).unwrap();
    assert_eq!(sa.median_jitter_ms, 2.0);
    assert_eq!(sa.median_success, 0.99);
    let sb = EndpointSummary::from_links([link(0.5, 0.98), link(f64::NAN, 0.1), link(0.7, 0.96)])
        .unwrap();
    assert_eq!(sb.links, 2);
    assert!((sb.median_jitter_ms - 0.6).abs() < 1e-12);
    assert!(EndpointSummary::from_links([]).is_none());

    let est =
        LinkView::of_pair(None, Some((&a, &b)), Groups::Unmeasured, Some((&sa, &sb))).unwrap();
    assert_eq!(est.latency_ms, Known::Estimated(8.0));
    assert_eq!(est.jitter_ms, Known::Estimated(2.0));
    assert!(est.success.is_estimated());
    assert!((est.success.value() - 0.99 * 0.97).abs() < 1e-12);

    let m = link(0.3, 0.5);
    let meas = LinkView::of_pair(
        Some(m),
        Some((&a, &b)),
        Groups::Unmeasured,
        Some((&sa, &sb)),
    )
    .unwrap();
    assert_eq!(meas.latency_ms, Known::Measured(1.0));
    assert_eq!(meas.success, Known::Measured(0.5));
    assert!(!meas.jitter_ms.is_estimated());

    assert_eq!(
        LinkView::of_pair::<2>(None, None, Groups::Unmeasured, Some((&sa, &sb))),
        None
    );
    assert_eq!(
        LinkView::of_pair::<2>(None, Some((&a, &b)), Groups::Unmeasured, None),
        None
    );
    // Inside a group: the median of the group's measured links, not the coordinates.
    let g = estimate_in_group_ms([0.2, f64::NAN, 0.1, 0.3]);
    assert_eq!(g, Some(0.2));
    assert_eq!(estimate_in_group_ms([]), None);
    let g = Groups::Inside(g.unwrap());
    let inside = LinkView::of_pair(None, Some((&a, &b)), g, Some((&sa, &sb))).unwrap();
    assert_eq!(inside.latency_ms, Known::Estimated(0.2));
    let no_coords = LinkView::of_pair::<2>(None, None, g, Some((&sa, &sb))).unwrap();
    assert_eq!(no_coords.latency_ms, Known::Estimated(0.2));
    // Between two groups with a measured link: their median where it is shorter than the
    // coordinates' 8 ms; without coordinates nothing (a node without one is estimated only
    // inside its group).
    let between = Groups::Between(3.5);
    let b2 = LinkView::of_pair(None, Some((&a, &b)), between, Some((&sa, &sb))).unwrap();
    assert_eq!(b2.latency_ms, Known::Estimated(3.5));
    assert_eq!(b2.jitter_ms, est.jitter_ms);
    let longer = LinkView::of_pair(None, Some((&a, &b)), Groups::Between(9.0), Some((&sa, &sb)));
    assert_eq!(longer.unwrap().latency_ms, Known::Estimated(8.0));
    assert_eq!(
        LinkView::of_pair::<2>(None, None, between, Some((&sa, &sb))),
        None
    );
    assert_eq!(
        serde_json::to_string(&est.latency_ms).unwrap(),
        r#"{"estimated":8.0}"#
    );
}

#[test]
fn the_agents_state_is_fixed_size() {
    // Nothing in it grows with the fleet: the whole state is inline (heapless tables).
    let size = std::mem::size_of::<AgentCoords>();
    assert!(size < 32 * 1024, "{size} bytes");
    let mut n = AgentCoords::new(VivaldiConfig::default(), 1);
    let o = Coord::origin(1.0, 1.0);
    for peer in 0..10_000u32 {
        n.observe(peer, 5.0, &o).unwrap();
    }
    // At most 256 peers kept: the first ones were replaced.
    assert_eq!(n.filtered_ms(0), None);
    assert_eq!(n.filtered_ms(9_999), Some(5.0));
}

#[test]
fn the_whole_fleets_lists_are_each_nodes_own() {
    // Fleets with clustered and duplicate coordinates (ties), members without one, groups of
    // one to hundreds: the k-d tree gives exactly the lists of one scan per node.
    for (n, k, seed) in [
        (1, 8, 1),
        (7, 32, 2),
        (300, 8, 3),
        (1200, 32, 4),
        (2000, 16, 5),
    ] {
        let mut rng = SplitMix64::new(seed);
        let m: Vec<Member<u64, DIMS>> = (0..n)
            .map(|i| {
                let cluster = rng.below(5) as f64 * 40.0;
                let mut x = [0.0; DIMS];
                for v in x.iter_mut() {
                    // a few exact duplicates, most spread around their cluster
                    *v = cluster + (rng.below(50) as f64) * 0.5;
                }
                Member {
                    group: if i % 3 == 0 { 0 } else { (i / 10) as u64 + 1 },
                    coord: (rng.below(10) != 0)
                        .then(|| Coord::new(x, rng.below(4) as f64, 0.2).unwrap()),
                    // a third with a position, on a few streets (exact duplicates too)
                    place: (rng.below(3) == 0).then(|| {
                        let (a, b) = (rng.below(30) as f64, rng.below(30) as f64);
                        Position::new(46.0 + a * 0.01, 7.0 + b * 0.013).unwrap()
                    }),
                    key: i as u64,
                    epoch: i as u64 % 3,
                }
            })
            .collect();
        let mix = NeighbourMix::for_k(k);
        let all = select_all_neighbours(&m, k, mix, seed);
        assert_eq!(all.len(), n);
        for (me, got) in all.iter().enumerate() {
            assert_eq!(
                got,
                &select_neighbours(me, &m, k, mix, seed),
                "n {n}, member {me}"
            );
        }
    }
}

#[test]
fn a_node_joining_changes_few_lists() {
    // 2,000 nodes in groups of 10, half without a coordinate (random slots only)
    let member = |i: usize| Member {
        group: (i / 10) as u32,
        coord: i
            .is_multiple_of(2)
            .then(|| Coord::new([(i % 97) as f64, (i % 89) as f64], 1.0, 0.2).unwrap()),
        place: None,
        key: (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        epoch: 0,
    };
    let before: Vec<Member<u32, 2>> = (0..2000).map(member).collect();
    let mut after = before.clone();
    after.push(member(2000));
    let k = 32;
    let mix = NeighbourMix::for_k(k);
    let a = select_all_neighbours(&before, k, mix, 7);
    let b = select_all_neighbours(&after, k, mix, 7);
    let changed = (0..2000)
        .filter(|&i| {
            let mut x = a[i].clone();
            let mut y = b[i].clone();
            x.sort_unstable();
            y.sort_unstable();
            x != y
        })
        .count();
    // a new node takes a random slot of about random/n of the lists, a nearest slot of those
    // it is nearest to, a group slot of its group's (none here: its group is new)
    assert!(changed < 100, "{changed} of 2000 lists changed");
}

#[test]
fn a_new_epoch_draws_the_random_slots_again_and_keeps_the_group_and_the_nearest() {
    // 2,000 nodes in groups of 10 on a plane; k = 16: 4 of the group, 6 nearest, 6 random
    let member = |i: usize| Member {
        group: (i / 10) as u32,
        coord: Some(Coord::new([(i % 97) as f64, (i % 89) as f64], 1.0, 0.2).unwrap()),
        place: None,
        key: (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        epoch: 0,
    };
    let before: Vec<Member<u32, 2>> = (0..2000).map(member).collect();
    let k = 16;
    let mix = NeighbourMix::for_k(k);
    let a = select_all_neighbours(&before, k, mix, 7);
    let mut seen: std::collections::BTreeSet<usize> = a[5].iter().copied().collect();
    for epoch in 1..=4 {
        let mut after = before.clone();
        after[5].epoch = epoch;
        let b = select_all_neighbours(&after, k, mix, 7);
        // only node 5's list changes, and only in its random slots (the last `random`)
        let kept = k - mix.random;
        assert_eq!(a[5][..kept], b[5][..kept], "epoch {epoch}");
        assert_ne!(a[5][kept..], b[5][kept..], "epoch {epoch}");
        assert!((0..2000).filter(|&i| i != 5).all(|i| a[i] == b[i]));
        seen.extend(b[5].iter().copied());
        // the same epoch, the same draw
        assert_eq!(b, select_all_neighbours(&after, k, mix, 7));
    }
    // five epochs: about five times the random peers (draws may meet)
    let least = k + 4 * mix.random * 3 / 4;
    assert!(seen.len() >= least, "{} peers over 5 epochs", seen.len());
}

#[test]
fn medians_between_groups_take_both_directions_and_skip_links_inside_one() {
    let m = medians_between([
        ("b", "a", 4.0),
        ("a", "b", 2.0),
        ("a", "b", f64::NAN),
        ("a", "a", 0.5),
        ("c", "a", 9.0),
        ("a", "b", 3.0),
    ]);
    assert_eq!(m, vec![("a", "b", 3.0), ("a", "c", 9.0)]);
    assert!(medians_between::<u32>([]).is_empty());
    assert!(medians_between([(1, 2, f64::NAN)]).is_empty());
}
