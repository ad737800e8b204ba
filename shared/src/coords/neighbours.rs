//! The peers a node probes: a bounded neighbour set, built by the control plane for each node's
//! peer list.
//!
//! At most `k` peers, in this order:
//! 1. its own group (datacenter, train), at most [`NeighbourMix::group_max`] of them (drawn at
//!    random when the group is larger): the links placement uses most, measured directly;
//! 2. when the node has a [`Position`] (a station, a datacenter: [`crate::geo`]) and is one of
//!    the [`MAP_PER_GROUP`] members of its group that probe on the map, one member of each of
//!    the [`NeighbourMix::geo`] groups nearest on the map (by their nearest positioned member;
//!    which member, by a hash of the two keys: `rendezvous`): neighbouring stations, a short
//!    pair the coordinates over-estimate;
//! 3. the nearest others by coordinates (predicted latency `|x_i - x_j| + h_j`), which Vivaldi
//!    needs to place a node precisely among its neighbours: of the [`GROUP_SPREAD`] x as many
//!    nearest, the nearest of each group first (`one_per_group`), so that they measure
//!    as many pairs of groups as they can (with the slots the map left);
//! 4. [`NeighbourMix::random`] others drawn uniformly (half of the slots the group leaves), which keep the global layout right (with
//!    near neighbours only, regions of the map drift against one another) and let the set
//!    change as coordinates improve; drawn again when the member's [`Member::epoch`] changes.
//!
//! Nodes without a coordinate yet (new ones, or when `me` has none) only take random slots.
//! Deterministic: the same members, `k`, mix and seed give the same list. The cost of one
//! node's list ([`select_neighbours`]) is one scan of the members (O(n log k)); a whole fleet's
//! ([`select_all_neighbours`], the same lists) is O(n log n): the groups are collected once and
//! the nearest come from k-d trees over the coordinates and the positions ([`super::near`]).

use super::near::{Best, Far, NearIndex};
use super::vivaldi::Coord;
use crate::geo::Position;
use std::collections::HashMap;
use std::hash::Hash;

/// One node as the selection sees it.
#[derive(Debug, Clone)]
pub struct Member<G, const D: usize> {
    /// Its group (datacenter or train): members of one group are probed first.
    pub group: G,
    /// Its reported coordinate, if any.
    pub coord: Option<Coord<D>>,
    /// Its position on the map, if it has one (fixed nodes: [`crate::geo`]).
    pub place: Option<Position>,
    /// A stable identity (the control plane: a hash of the node's name). The random choices
    /// depend on it, not on the member's position, so that a node's list changes little when
    /// others join or leave (a fleet joining would otherwise change every list at every step).
    pub key: u64,
    /// Its rotation epoch: its random slots are drawn again when this changes (0, and any one
    /// value: the same draw). Vivaldi and the search for short pairs need many random peers
    /// over time, not many at once (BENCHMARKS.md, "Random slots"); its own group and the
    /// nearest do not depend on it.
    pub epoch: u64,
}

/// A 64-bit mix (SplitMix64's finaliser).
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The members on a hash ring (by their keys): the random slots are the first acceptable member
/// at or after points drawn from the node's own key. A member joining or leaving changes a pick
/// only where it lands between the point and the member picked (about `random / n` of the
/// lists per join), unlike a draw by position.
struct Ring {
    order: Vec<(u64, usize)>,
}

impl Ring {
    fn build<G, const D: usize>(members: &[Member<G, D>]) -> Ring {
        let mut order: Vec<(u64, usize)> = members
            .iter()
            .enumerate()
            .map(|(j, m)| (mix64(m.key), j))
            .collect();
        order.sort_unstable();
        Ring { order }
    }

    /// Up to `count` members that `ok` accepts (and not yet in `chosen`), appended to `chosen`.
    fn pick(
        &self,
        me_key: u64,
        epoch: u64,
        seed: u64,
        count: usize,
        chosen: &mut Vec<usize>,
        ok: impl Fn(usize) -> bool,
    ) {
        let n = self.order.len();
        if n == 0 {
            return;
        }
        let want = chosen.len() + count;
        let epoch = if epoch == 0 { 0 } else { mix64(epoch ^ 0xe70c) };
        for t in 0..(64 * count.max(1)) as u64 {
            if chosen.len() >= want {
                break;
            }
            let p = mix64(seed ^ mix64(me_key) ^ epoch ^ mix64(t.wrapping_add(0x5eed)));
            let start = self.order.partition_point(|(h, _)| *h < p);
            // the first acceptable member from the point on (a short walk: members of the
            // node's own group or already chosen are passed over)
            for s in 0..n.min(64) {
                let j = self.order[(start + s) % n].1;
                if ok(j) && !chosen.contains(&j) {
                    chosen.push(j);
                    break;
                }
            }
        }
    }
}

/// How the `k` slots are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourMix {
    /// At most this many peers of the node's own group.
    pub group_max: usize,
    /// This many random peers (fewer if there are fewer others).
    pub random: usize,
    /// Of the nearest slots, at most this many go to the others nearest on the map, when the
    /// node has a position (the rest, and all of them without one, to the nearest by
    /// coordinates).
    pub geo: usize,
}

impl NeighbourMix {
    /// The default mix for `k` slots: at most a quarter for the group, then half of the rest
    /// (at least one) random, the other half nearest. Measured (`coords-sim`, 2,000 nodes,
    /// median relative error): with k = 8 (two group slots) one random slot gave 15.1 %, two
    /// 11.8 %, three (this mix) 10.9 %, four 10.4 %, all six 11.8 %; with k = 32, four 6.9 %,
    /// twelve (this mix) 6.3 %. Vivaldi needs both: near peers place a node precisely among
    /// its neighbours, far ones keep the regions of the map in place.
    ///
    /// Of the nearest slots, a half (rounded down) go to the map (k = 16: 3 of 6): see
    /// [`NeighbourMix::geo`] and BENCHMARKS.md, "Stations near on the map".
    pub fn for_k(k: usize) -> Self {
        let group_max = k / 4;
        let random = ((k - group_max) / 2).max(1).min(k);
        NeighbourMix {
            group_max,
            random,
            geo: k.saturating_sub(group_max + random) / 2,
        }
    }
}

/// The peers of `members[me]`: indices into `members`, never `me`, no repeats, at most `k`.
/// One scan of the members: for a whole fleet, [`select_all_neighbours`] gives the same lists
/// in O(n log n).
pub fn select_neighbours<G: PartialEq, const D: usize>(
    me: usize,
    members: &[Member<G, D>],
    k: usize,
    mix: NeighbourMix,
    seed: u64,
) -> Vec<usize> {
    let Some(mine) = members.get(me) else {
        return Vec::new();
    };
    let group: Vec<usize> = (0..members.len())
        .filter(|&j| j != me && members[j].group == mine.group)
        .collect();
    let ring = Ring::build(members);
    let others = |j: usize, chosen: &[usize]| {
        j != me && members[j].group != mine.group && !chosen.contains(&j)
    };
    let mapper = mine.place.is_some()
        && group
            .iter()
            .filter(|&&j| members[j].place.is_some())
            .filter(|&&j| map_rank(seed, members, j) < map_rank(seed, members, me))
            .count()
            < MAP_PER_GROUP;
    let nearest = Nearest {
        maps: mapper,
        on_map: |p: &Position, near: usize, chosen: &[usize]| {
            let here = map_point(p);
            // the nearest groups by their nearest member, one at a time
            let mut found: Vec<usize> = Vec::new();
            while found.len() < near {
                let mut best = Best::new(1);
                for (j, m) in members.iter().enumerate() {
                    let new = !found.iter().any(|&f| members[f].group == m.group);
                    if let (true, true, Some(o)) = (new, others(j, chosen), &m.place) {
                        best.offer(Far(here.euclid(&map_point(o)), j));
                    }
                }
                let Some(&j) = best.into_sorted().first() else {
                    break;
                };
                found.push(j);
            }
            found
                .iter()
                .filter_map(|&f| {
                    let g = &members[f].group;
                    let mates = (0..members.len()).filter(|&j| members[j].group == *g);
                    rendezvous(seed, mine.key, members, mates, chosen)
                })
                .collect()
        },
        by_coord: |c: &Coord<D>, near: usize, chosen: &[usize]| {
            let mut best = Best::new(near * GROUP_SPREAD);
            for (j, m) in members.iter().enumerate() {
                if let (true, Some(o)) = (others(j, chosen), &m.coord) {
                    best.offer(Far(c.euclid(o) + o.height(), j));
                }
            }
            one_per_group(members, best.into_sorted(), near)
        },
    };
    select_with(me, members, k, mix, seed, group, &ring, nearest)
}

/// How [`select_with`] finds the `near` nearest others (not of the node's group, not the node,
/// not already `chosen`), nearest first, one per group first: on the map and by coordinates.
struct Nearest<M, C> {
    /// The node is one of its group's [`MAP_PER_GROUP`] that take slots on the map.
    maps: bool,
    on_map: M,
    by_coord: C,
}

/// The peers of every member, as [`select_neighbours`] gives them one by one (the same lists),
/// with the groups collected once and the nearest found in a k-d tree ([`NearIndex`]):
/// O(n log n) for the fleet instead of O(n^2).
pub fn select_all_neighbours<G: Eq + Hash, const D: usize>(
    members: &[Member<G, D>],
    k: usize,
    mix: NeighbourMix,
    seed: u64,
) -> Vec<Vec<usize>> {
    let mut groups: HashMap<&G, Vec<usize>> = HashMap::new();
    for (j, m) in members.iter().enumerate() {
        groups.entry(&m.group).or_default().push(j);
    }
    let ring = Ring::build(members);
    let index = NearIndex::build(
        members
            .iter()
            .enumerate()
            .filter_map(|(j, m)| Some((j, m.coord?))),
    );
    // the positions as points in km, height 0: the index's distance is the chord's
    let map = NearIndex::build(
        members
            .iter()
            .enumerate()
            .filter_map(|(j, m)| Some((j, map_point(m.place.as_ref()?)))),
    );
    // the members of each group that take slots on the map
    let mut mapper = vec![false; members.len()];
    for list in groups.values() {
        let mut placed: Vec<usize> = list
            .iter()
            .copied()
            .filter(|&j| members[j].place.is_some())
            .collect();
        placed.sort_by_key(|&j| map_rank(seed, members, j));
        for &j in placed.iter().take(MAP_PER_GROUP) {
            mapper[j] = true;
        }
    }
    (0..members.len())
        .map(|me| {
            let mine = &members[me].group;
            let group: Vec<usize> = groups[mine].iter().copied().filter(|&j| j != me).collect();
            let others = |j: usize, chosen: &[usize]| {
                j != me && members[j].group != *mine && !chosen.contains(&j)
            };
            let nearest = Nearest {
                maps: mapper[me],
                on_map: |p: &Position, near: usize, chosen: &[usize]| {
                    let here = map_point(p);
                    let mut found: Vec<usize> = Vec::new();
                    while found.len() < near {
                        let next = map.nearest(&here, 1, |j| {
                            others(j, chosen)
                                && !found.iter().any(|&f| members[f].group == members[j].group)
                        });
                        let Some(&j) = next.first() else { break };
                        found.push(j);
                    }
                    found
                        .iter()
                        .filter_map(|&f| {
                            let mates = groups[&members[f].group].iter().copied();
                            rendezvous(seed, members[me].key, members, mates, chosen)
                        })
                        .collect()
                },
                by_coord: |c: &Coord<D>, near: usize, chosen: &[usize]| {
                    let cands = index.nearest(c, near * GROUP_SPREAD, |j| others(j, chosen));
                    one_per_group(members, cands, near)
                },
            };
            select_with(me, members, k, mix, seed, group, &ring, nearest)
        })
        .collect()
}

/// At most this many members of a group take slots on the map (those whose keys hash lowest,
/// [`map_rank`]): the control plane estimates every pair of two groups from the median
/// measured between them, so a few members of a datacenter measure its neighbours for all of
/// it; were every member of a large datacenter to probe the station nearest to it, that
/// station would answer thousands of lists.
pub const MAP_PER_GROUP: usize = 4;

/// A member's rank for [`MAP_PER_GROUP`] within its group (lower first; ties by index).
fn map_rank<G, const D: usize>(seed: u64, members: &[Member<G, D>], j: usize) -> (u64, usize) {
    (mix64(seed ^ 0x3a9_60e0 ^ members[j].key), j)
}

/// A position as a point of the map's k-d tree: km from the Earth's centre, height 0.
fn map_point(p: &Position) -> Coord<3> {
    Coord::from_parts(p.ecef_km(), 0.0, 0.0)
}

/// The member of `mates` (a group found on the map, none of them chosen yet) that the node
/// of key `me_key` probes: the one whose key hashes lowest with its own (rendezvous), so that
/// the nodes that find one station spread over its members, and a member joining displaces
/// few choices.
fn rendezvous<G, const D: usize>(
    seed: u64,
    me_key: u64,
    members: &[Member<G, D>],
    mates: impl Iterator<Item = usize>,
    chosen: &[usize],
) -> Option<usize> {
    let mine = mix64(seed ^ me_key);
    mates
        .filter(|j| !chosen.contains(j))
        .min_by_key(|&j| (mix64(mine ^ members[j].key), j))
}

/// The nearest slots are chosen among this many times as many nearest candidates: one per
/// group first (`one_per_group`).
pub const GROUP_SPREAD: usize = 4;

/// `near` of `cands` (nearest first): the nearest member of each group first, then the
/// nearest left. Members of one datacenter or train reach the others through the same access
/// link, so a second member of a group measures about what the first does; the slots spread
/// over the groups around a node measure more pairs of groups, and the control plane
/// estimates every pair of two groups from the median measured between them. Coordinates
/// over-estimate short pairs by milliseconds, so the neighbouring stations are often not the
/// nearest by coordinates: spread over groups, the slots reach more of them (BENCHMARKS.md,
/// "Nearest slots spread over groups").
fn one_per_group<G: PartialEq, const D: usize>(
    members: &[Member<G, D>],
    cands: Vec<usize>,
    near: usize,
) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(near);
    let mut rest = Vec::new();
    for j in cands {
        if out.len() < near && !out.iter().any(|&o| members[o].group == members[j].group) {
            out.push(j);
        } else {
            rest.push(j);
        }
    }
    let left = near - out.len();
    out.extend(rest.into_iter().take(left));
    out
}

/// The selection, given the other members of `me`'s group (in index order), the fleet's hash
/// ring and how to find the nearest others ([`Nearest`]).
#[allow(clippy::too_many_arguments)]
fn select_with<G: PartialEq, const D: usize, M, C>(
    me: usize,
    members: &[Member<G, D>],
    k: usize,
    mix: NeighbourMix,
    seed: u64,
    mut group: Vec<usize>,
    ring: &Ring,
    nearest: Nearest<M, C>,
) -> Vec<usize>
where
    M: FnOnce(&Position, usize, &[usize]) -> Vec<usize>,
    C: FnOnce(&Coord<D>, usize, &[usize]) -> Vec<usize>,
{
    let mine = &members[me];
    let mut chosen: Vec<usize> = Vec::with_capacity(k);

    // 1. Own group; when it is larger than its share, the members whose keys hash lowest
    //    with ours (rendezvous: a member joining the group displaces at most one).
    let take = mix.group_max.min(k).min(group.len());
    if take < group.len() {
        let mine_key = mix64(seed ^ mine.key);
        group.sort_by_cached_key(|&j| (mix64(mine_key ^ members[j].key), j));
    }
    chosen.extend_from_slice(&group[..take]);

    // 2. Nearest others on the map, 3. by coordinates (the slots the map left).
    let others = members.len() - 1 - group.len();
    let random = mix.random.min(k - chosen.len()).min(others);
    let near_end = k - random;
    if let (Some(p), true) = (&mine.place, mix.geo > 0 && nearest.maps) {
        let on_map = (nearest.on_map)(p, mix.geo.min(near_end - chosen.len()), &chosen);
        chosen.extend(on_map);
    }
    let near = near_end - chosen.len();
    if let (Some(c), true) = (&mine.coord, near > 0) {
        let by_coord = (nearest.by_coord)(c, near, &chosen);
        chosen.extend(by_coord);
    }

    // 4. Random others to fill up to k (the random share, plus nearest slots left empty),
    //    from the hash ring.
    let want = k.min(take + others);
    let missing = want.saturating_sub(chosen.len());
    ring.pick(mine.key, mine.epoch, seed, missing, &mut chosen, |j| {
        j != me && members[j].group != mine.group
    });
    if chosen.len() < want {
        // Few others, or a crowded stretch of the ring: the first ones not yet chosen.
        for (j, m) in members.iter().enumerate() {
            if chosen.len() >= want {
                break;
            }
            if j != me && m.group != mine.group && !chosen.contains(&j) {
                chosen.push(j);
            }
        }
    }
    chosen
}
