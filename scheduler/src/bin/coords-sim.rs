//! Accuracy of the agents' network coordinates at scale (issue 16), in simulation.
//!
//! A railway topology of N nodes (see [`Topology::build`]), every node runs the agent's
//! coordinate state (`acoa_shared::coords::VivaldiNode`: moving-median filter per peer,
//! Vivaldi with height, RELATIVE update filter) and probes a bounded neighbour set chosen by
//! `coords::select_neighbours` (its own group, the nearest by reported coordinates, a few
//! random; at most k), chosen again every `--reselect` rounds from the reported coordinates
//! as the control plane would (the random slots drawn again each time, unlike the control
//! plane's: `--rotate-every`). A round: every node, in a shuffled order, takes one noisy sample
//! of each of its peers. Then the estimated latency of random pairs that were never probed
//! (in either direction, in any round) is compared with their true latency, and so are the
//! short pairs between stations, which the coordinates cannot resolve (`coords-sim/near.rs`).
//!
//! `cargo run --release -p acoa-scheduler --no-default-features --bin coords-sim -- --seed 1`

use std::collections::HashSet;
use std::time::Instant;

use acoa_scheduler::rng::SplitMix64 as Rng;
use acoa_shared::coords::{
    estimate_in_group_ms, estimate_latency_ms, select_all_neighbours, Coord, Member, NeighbourMix,
    VivaldiConfig, VivaldiNode,
};
use acoa_shared::geo::Position;
use anyhow::{bail, Result};
use clap::Parser;

#[cfg(feature = "sim")]
#[path = "coords-sim/place.rs"]
mod place;
#[cfg(not(feature = "sim"))]
mod place {
    pub fn header(_: &super::Args) {
        eprintln!("--place needs the feature `sim` (the benchmark's synthetic applications)");
        std::process::exit(2);
    }
    pub fn rounds_header() {}
    pub fn compare(
        _: &super::Topology,
        _: usize,
        _: &super::Outcome,
        _: &super::Args,
    ) -> Vec<String> {
        Vec::new()
    }
}
#[path = "coords-sim/near.rs"]
mod near;
#[path = "coords-sim/rounds.rs"]
#[cfg_attr(not(feature = "sim"), allow(dead_code))]
mod rounds;

#[derive(Parser, Debug)]
#[command(about = "Accuracy of Vivaldi network coordinates on a simulated railway fleet")]
struct Args {
    /// Fleet sizes.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,5000,10000")]
    nodes: Vec<usize>,
    /// Neighbour set sizes (most peers a node probes).
    #[arg(long, value_delimiter = ',', default_value = "32,16,8")]
    k: Vec<usize>,
    /// Rounds (one sample of each peer per node per round).
    #[arg(long, default_value_t = 120)]
    rounds: usize,
    /// Neighbour sets are chosen again every this many rounds.
    #[arg(long, default_value_t = 10)]
    reselect: usize,
    /// Coordinate dimensions (2 to 5), plus the height.
    #[arg(long, default_value_t = 3)]
    dims: usize,
    /// Seed of the topology, the noise and the agents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Unprobed pairs the error is measured on.
    #[arg(long, default_value_t = 20_000)]
    pairs: usize,
    /// Share of samples that are outliers (3 to 10 times the latency).
    #[arg(long, default_value_t = 0.02)]
    outliers: f64,
    /// Share of backbone vertex pairs routed on a detour (30 % to 100 % longer).
    #[arg(long, default_value_t = 0.1)]
    detours: f64,
    /// Random peers in the neighbour set (default: `NeighbourMix::for_k`, half of what the
    /// group leaves).
    #[arg(long)]
    random: Option<usize>,
    /// Most peers of the node's own group (default k/4).
    #[arg(long)]
    group_max: Option<usize>,
    /// Nearest slots that go to the nearest on the map, for the stations and clouds (default:
    /// `NeighbourMix::for_k`, half of the nearest; 0: none, as before 2026-12-06).
    #[arg(long)]
    geo: Option<usize>,
    /// Experiment (`coords-sim/near.rs`): this many of each node's nearest slots go to the
    /// measured nearest of its own three measured nearest (neighbour discovery), from the
    /// second selection on.
    #[arg(long, default_value_t = 0)]
    discover: usize,
    /// The random slots are drawn again every this many selections (0: never, a seed fixed
    /// as the control plane's `NEIGHBOUR_SEED` is: a node's random peers then change only
    /// with the members).
    #[arg(long, default_value_t = 1)]
    rotate_every: usize,
    /// Moving-percentile filter: percentile (0.5 = median).
    #[arg(long, default_value_t = 0.5)]
    percentile: f64,
    /// RELATIVE update filter threshold.
    #[arg(long, default_value_t = 0.1)]
    threshold: f64,
    /// Also place this many synthetic applications of the scheduler benchmark per fleet size
    /// and k, on all pairs measured and on the k measured pairs plus estimates (the 1 % goal;
    /// needs `--features sim`, 3 dimensions; all pairs are held as links: sizes up to a few
    /// thousand nodes).
    #[arg(long, default_value_t = 0)]
    place: usize,
    /// `--place`: skip placement (c) (every pair at its measured success rate, the unmeasured
    /// at their estimated latency; the last column prints NaN): it holds a second network of
    /// every pair, about 10 GB at 10,000 nodes besides the first.
    #[arg(long)]
    place_without_c: bool,
    /// Time budget of each placement search, ms.
    #[arg(long, default_value_t = 10_000)]
    place_budget_ms: u64,
    /// After the placement on k measured pairs plus estimates: at most this many rounds of
    /// targeted probes (its estimated pairs measured) and re-evaluation (`coords-sim/rounds.rs`).
    #[arg(long, default_value_t = 3)]
    place_rounds: usize,
    /// How a re-evaluation changes the placement in force: `system` (the control plane's
    /// descheduler rule), `adopt` (the fresh search's placement whenever it scores higher),
    /// `pessimistic` (adopt, searching on pessimistic estimates), `probe` (a search's
    /// placement is adopted only after its pairs were probed, if better on measured links),
    /// `multi` (probe, with the pairs between each channel's 8 best candidate nodes per
    /// component probed too, and a search on the measured links alone).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "system,adopt"
    )]
    place_rules: Vec<rounds::Rule>,
    /// `--place-rules multi`: candidate nodes per component (at most this squared pairs probed
    /// per channel and round).
    #[arg(long, default_value_t = rounds::MULTI_WIDTH)]
    place_multi_width: usize,
    /// `--place`: also write each fleet and its applications with their placements on every
    /// measured pair to this directory (`scenario-{nodes}-k{k}.json`), for cloud-broker's
    /// `examples/explore_sim` (the control plane's exploration on the same fleet).
    #[arg(long)]
    export_dir: Option<std::path::PathBuf>,
    /// Vivaldi cc and ce.
    #[arg(long, default_value_t = 0.25)]
    cc: f64,
    /// The timestep constant of a settled node (error 0: `VivaldiConfig::cc_settled`); equal
    /// to `--cc`, Dabek's constant (the figures before 2026-12-05).
    #[arg(long, default_value_t = 0.05)]
    cc_settled: f64,
    /// The error estimate from which the timestep constant is `--cc`.
    #[arg(long, default_value_t = 0.25)]
    error_unsettled: f64,
    #[arg(long, default_value_t = 0.25)]
    ce: f64,
}

/// Per-peer latency filters the simulated agents keep (k <= 32 peers plus those replaced by a
/// new selection; the least recently sampled is dropped first).
const SIM_PEERS: usize = 64;
/// Samples in each peer's moving median.
const SIM_WINDOW: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Cloud,
    Station,
    Train,
}

/// A site: a cloud datacenter, a station or a train; its nodes form one group.
#[derive(Debug, Clone)]
struct Site {
    kind: Kind,
    /// The backbone vertex it hangs off (a train: its station's).
    vertex: usize,
    /// One-way latency of the train's radio link to its station (0 for others).
    radio_ms: f64,
    /// One-way latency between two nodes of the site (its LAN, the train's Ethernet).
    intra_ms: f64,
}

#[derive(Debug, Clone)]
struct SimNode {
    site: usize,
    /// The node's own stack and NIC.
    access_ms: f64,
    /// Mean of the exponential queueing delay this node adds to every sample.
    jitter_ms: f64,
}

/// The railway: backbone vertices (clouds and stations) with routed latencies between every
/// two, sites hanging off them, nodes in sites.
struct Topology {
    sites: Vec<Site>,
    nodes: Vec<SimNode>,
    /// Routed one-way latency between backbone vertices (V x V, detours included).
    route: Vec<f32>,
    /// Where each backbone vertex is, km on the square.
    pos: Vec<(f64, f64)>,
    vertices: usize,
    lines: usize,
    stations: usize,
}

/// The chance that the network loses a probe, any pair.
const LOSS: f64 = 0.01;

fn km(a: (f64, f64), b: (f64, f64)) -> f64 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
}

/// Fibre: 5 µs per km, the route 1.3 times the straight line.
fn fibre_ms(a: (f64, f64), b: (f64, f64)) -> f64 {
    km(a, b) * 1.3 * 0.005
}

impl Topology {
    /// `n` nodes: about 4 % in 3 clouds, 30 % in stations (1 to 4 nodes each), 66 % in trains
    /// (2 to 8 nodes each).
    ///
    /// - Lines of about 40 stations start at hubs (big stations) placed in a square of
    ///   400 km * sqrt(n / 1000) a side, heading out with a random bend at each station, 3 to
    ///   20 km apart; the line's fibre runs along the track (per-hop cost 0.1 to 0.4 ms of
    ///   switching at every station).
    /// - Hubs reach their two nearest clouds (1 ms of peering plus fibre); clouds are meshed
    ///   (1 ms plus fibre); every 25th station of a line has a regional uplink to its nearest
    ///   cloud (1 to 2 ms plus fibre).
    /// - Where stations of two lines are within 15 km, a cross-line fibre joins them with
    ///   probability 0.3.
    /// - Routes are shortest paths, then `detours` of the vertex pairs (a hash of the pair)
    ///   are routed 30 % to 100 % longer: policy routes, the triangle-inequality violations.
    /// - A train hangs off a station by a radio link of 4 to 15 ms one way; nodes of one
    ///   train see each other at 0.05 to 0.3 ms, of one station at 0.1 to 0.4 ms, of one cloud
    ///   at 0.05 to 0.2 ms; each node adds 0.01 to 0.1 ms of its own.
    /// - Jitter (the mean of an exponential delay added to each sample by each end): train
    ///   nodes 0.5 to 3 ms, station nodes 0.05 to 0.3 ms, cloud nodes 0.02 to 0.1 ms.
    fn build(n: usize, detours: f64, seed: u64) -> Topology {
        let mut r = Rng::new(seed);
        let side = 400.0 * (n as f64 / 1000.0).sqrt();
        let cloud_nodes = (n * 4 / 100).max(3);
        let station_nodes = n * 30 / 100;
        let train_nodes = n - cloud_nodes - station_nodes;
        let stations_wanted = (station_nodes as f64 / 2.5).round().max(4.0) as usize;
        let lines = stations_wanted.div_ceil(40).max(2);
        let hubs = (lines / 5).max(2);

        let mut pos: Vec<(f64, f64)> = Vec::new();
        let mut edges: Vec<Vec<(usize, f64)>> = Vec::new();
        let mut add_vertex = |p: (f64, f64), pos: &mut Vec<(f64, f64)>| {
            pos.push(p);
            edges.push(Vec::new());
            pos.len() - 1
        };
        let clouds: Vec<usize> = (0..3)
            .map(|_| add_vertex((r.range(0.0, side), r.range(0.0, side)), &mut pos))
            .collect();
        let hub_v: Vec<usize> = (0..hubs)
            .map(|_| add_vertex((r.range(0.0, side), r.range(0.0, side)), &mut pos))
            .collect();
        let mut line_of: Vec<Option<usize>> = vec![None; pos.len()];
        for &h in &hub_v {
            line_of[h] = Some(usize::MAX);
        }
        let mut link = Vec::new();
        for (i, &a) in clouds.iter().enumerate() {
            for &b in &clouds[i + 1..] {
                link.push((a, b, 1.0 + fibre_ms(pos[a], pos[b])));
            }
        }
        for &h in &hub_v {
            let mut near = clouds.clone();
            near.sort_by(|&a, &b| km(pos[h], pos[a]).total_cmp(&km(pos[h], pos[b])));
            for &c in &near[..2] {
                link.push((h, c, 1.0 + fibre_ms(pos[h], pos[c])));
            }
        }
        // Lines.
        let per_line = stations_wanted.div_ceil(lines);
        let mut station_vertices = Vec::new();
        for l in 0..lines {
            let hub = hub_v[l % hubs];
            let mut at = pos[hub];
            let mut heading = r.range(0.0, std::f64::consts::TAU);
            let mut prev = hub;
            for s in 0..per_line {
                heading += r.range(-0.25, 0.25);
                let step = r.range(3.0, 20.0);
                at = (at.0 + step * heading.cos(), at.1 + step * heading.sin());
                let v = add_vertex(at, &mut pos);
                line_of.push(Some(l));
                station_vertices.push(v);
                link.push((prev, v, fibre_ms(pos[prev], at) + r.range(0.1, 0.4)));
                if s % 25 == 24 {
                    let c = *clouds
                        .iter()
                        .min_by(|&&a, &&b| km(at, pos[a]).total_cmp(&km(at, pos[b])))
                        .expect("three clouds");
                    link.push((v, c, r.range(1.0, 2.0) + fibre_ms(at, pos[c])));
                }
                prev = v;
            }
        }
        // Cross-line fibres.
        for (i, &a) in station_vertices.iter().enumerate() {
            for &b in &station_vertices[i + 1..] {
                if line_of[a] != line_of[b] && km(pos[a], pos[b]) < 15.0 && r.chance(0.3) {
                    link.push((a, b, fibre_ms(pos[a], pos[b]) + r.range(0.1, 0.4)));
                }
            }
        }
        for &(a, b, ms) in &link {
            edges[a].push((b, ms));
            edges[b].push((a, ms));
        }
        let v = pos.len();
        let mut route = vec![0f32; v * v];
        for s in 0..v {
            let d = dijkstra(&edges, s);
            for (t, x) in d.into_iter().enumerate() {
                route[s * v + t] = x as f32;
            }
        }
        // Detours: a pair's hash decides, so both directions agree.
        for a in 0..v {
            for b in a + 1..v {
                let mut h =
                    Rng::new(seed ^ 0xDE70_0125 ^ ((a * v + b) as u64).wrapping_mul(0x9E37_79B9));
                if h.chance(detours) {
                    let f = h.range(1.3, 2.0) as f32;
                    route[a * v + b] *= f;
                    route[b * v + a] *= f;
                }
            }
        }

        // Sites and nodes.
        let mut sites = Vec::new();
        let mut nodes = Vec::new();
        let mut place = |site: Site, count: usize, r: &mut Rng, nodes: &mut Vec<SimNode>| {
            let id = sites.len();
            let kind = site.kind;
            sites.push(site);
            for _ in 0..count {
                let jitter_ms = match kind {
                    Kind::Train => r.range(0.5, 3.0),
                    Kind::Station => r.range(0.05, 0.3),
                    Kind::Cloud => r.range(0.02, 0.1),
                };
                nodes.push(SimNode {
                    site: id,
                    access_ms: r.range(0.01, 0.1),
                    jitter_ms,
                });
            }
        };
        for (i, &c) in clouds.iter().enumerate() {
            let count = cloud_nodes / 3 + usize::from(i < cloud_nodes % 3);
            let intra_ms = r.range(0.05, 0.2);
            place(
                Site {
                    kind: Kind::Cloud,
                    vertex: c,
                    radio_ms: 0.0,
                    intra_ms,
                },
                count,
                &mut r,
                &mut nodes,
            );
        }
        let mut left = station_nodes;
        let mut st = 0;
        while left > 0 {
            let count = (1 + r.below(4)).min(left);
            let intra_ms = r.range(0.1, 0.4);
            place(
                Site {
                    kind: Kind::Station,
                    vertex: station_vertices[st % station_vertices.len()],
                    radio_ms: 0.0,
                    intra_ms,
                },
                count,
                &mut r,
                &mut nodes,
            );
            left -= count;
            st += 1;
        }
        let mut left = train_nodes;
        while left > 0 {
            let count = (2 + r.below(7)).min(left);
            let vertex = station_vertices[r.below(station_vertices.len())];
            let (radio_ms, intra_ms) = (r.range(4.0, 15.0), r.range(0.05, 0.3));
            place(
                Site {
                    kind: Kind::Train,
                    vertex,
                    radio_ms,
                    intra_ms,
                },
                count,
                &mut r,
                &mut nodes,
            );
            left -= count;
        }
        Topology {
            sites,
            nodes,
            route,
            pos,
            vertices: v,
            lines,
            stations: station_vertices.len(),
        }
    }

    /// A node's position on the map, as its operator would configure it: stations' and
    /// clouds' (fixed), none for trains (they move). The square's km laid out from 46° N
    /// 7° E.
    fn place(&self, i: usize) -> Option<Position> {
        let site = &self.sites[self.nodes[i].site];
        if site.kind == Kind::Train {
            return None;
        }
        let (x, y) = self.pos[site.vertex];
        let lat = 46.0 + y / 111.19;
        Position::new(lat, 7.0 + x / (111.19 * 46f64.to_radians().cos())).ok()
    }

    /// The base one-way latency between two nodes (without queueing).
    fn base_ms(&self, a: usize, b: usize) -> f64 {
        let (na, nb) = (&self.nodes[a], &self.nodes[b]);
        let (sa, sb) = (&self.sites[na.site], &self.sites[nb.site]);
        let own = na.access_ms + nb.access_ms;
        if na.site == nb.site {
            return own + sa.intra_ms;
        }
        let core = if sa.vertex == sb.vertex {
            // Two sites at one station: its switch.
            0.1
        } else {
            f64::from(self.route[sa.vertex * self.vertices + sb.vertex])
        };
        own + sa.radio_ms + sb.radio_ms + core
    }

    /// Mean queueing delay of a sample between two nodes.
    fn jitter_ms(&self, a: usize, b: usize) -> f64 {
        self.nodes[a].jitter_ms + self.nodes[b].jitter_ms
    }

    /// The true latency: the median of a sample without outliers (base plus the median of the
    /// exponential queueing delay).
    fn true_ms(&self, a: usize, b: usize) -> f64 {
        self.base_ms(a, b) + self.jitter_ms(a, b) * std::f64::consts::LN_2
    }

    /// The share of probes between two nodes the network delivers (each is lost with
    /// probability [`LOSS`]). Read by the placements (`--place`, feature `sim`).
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    fn success(&self, _a: usize, _b: usize) -> f64 {
        1.0 - LOSS
    }

    /// One probe's one-way sample, or `None` if it was lost ([`LOSS`]).
    fn sample(&self, a: usize, b: usize, outliers: f64, r: &mut Rng) -> Option<f64> {
        if r.chance(LOSS) {
            return None;
        }
        let s = self.base_ms(a, b) + r.exp(self.jitter_ms(a, b));
        Some(if r.chance(outliers) {
            s * r.range(3.0, 10.0)
        } else {
            s
        })
    }

    /// Share of sampled pairs (a, c) with some b (of 200 sampled) such that
    /// l(a, b) + l(b, c) < l(a, c): the pairs whose latency violates the triangle inequality.
    fn tiv_share(&self, seed: u64) -> f64 {
        let mut r = Rng::new(seed ^ 0x7171);
        let n = self.nodes.len();
        let pairs = 2000;
        let mut bad = 0;
        for _ in 0..pairs {
            let (a, c) = (r.below(n), r.below(n));
            if a == c {
                continue;
            }
            let direct = self.true_ms(a, c);
            if (0..200).any(|_| {
                let b = r.below(n);
                b != a && b != c && self.true_ms(a, b) + self.true_ms(b, c) < direct
            }) {
                bad += 1;
            }
        }
        bad as f64 / pairs as f64
    }
}

fn dijkstra(edges: &[Vec<(usize, f64)>], s: usize) -> Vec<f64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    #[derive(PartialEq)]
    struct D(f64);
    impl Eq for D {}
    impl PartialOrd for D {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for D {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0)
        }
    }
    let mut dist = vec![f64::INFINITY; edges.len()];
    let mut heap = BinaryHeap::new();
    dist[s] = 0.0;
    heap.push(Reverse((D(0.0), s)));
    while let Some(Reverse((D(d), u))) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for &(w, ms) in &edges[u] {
            let nd = d + ms;
            if nd < dist[w] {
                dist[w] = nd;
                heap.push(Reverse((D(nd), w)));
            }
        }
    }
    dist
}

#[cfg_attr(not(feature = "sim"), allow(dead_code))]
struct Outcome {
    /// Each node's reported coordinate at the end (position, height, error).
    coords: Vec<(Vec<f64>, f64, f64)>,
    /// Each node's last peer list (what the control plane has measured links for).
    peers: Vec<Vec<usize>>,
    median: f64,
    p90: f64,
    median_sys: f64,
    probed_share: f64,
    app_updates: f64,
    seconds: f64,
    short: near::ShortPairs,
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn pair_key(a: usize, b: usize) -> u64 {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    ((lo as u64) << 32) | hi as u64
}

fn simulate<const D: usize>(topo: &Topology, k: usize, args: &Args) -> Outcome {
    let started = Instant::now();
    let n = topo.nodes.len();
    let cfg = VivaldiConfig {
        cc: args.cc,
        cc_settled: args.cc_settled,
        error_unsettled: args.error_unsettled,
        ce: args.ce,
        percentile: args.percentile,
        relative_threshold: args.threshold,
        ..VivaldiConfig::default()
    };
    let mut agents: Vec<VivaldiNode<D, SIM_PEERS, SIM_WINDOW>> = (0..n)
        .map(|i| VivaldiNode::new(cfg, args.seed.wrapping_mul(1_000_003) ^ i as u64))
        .collect();
    let mut mix = NeighbourMix::for_k(k);
    if let Some(x) = args.random {
        mix.random = x.min(k);
    }
    if let Some(x) = args.group_max {
        mix.group_max = x;
    }
    if let Some(x) = args.geo {
        mix.geo = x;
    }
    let mut r = Rng::new(args.seed ^ 0x5EED ^ (k as u64) << 40);
    let mut peers: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut probed: HashSet<u64> = HashSet::new();
    let mut order: Vec<usize> = (0..n).collect();
    for round in 0..args.rounds {
        if round % args.reselect.max(1) == 0 {
            // The control plane's view: the reported (application-level) coordinates, none
            // before the first round.
            let members: Vec<Member<usize, D>> = (0..n)
                .map(|i| Member {
                    group: topo.nodes[i].site,
                    coord: (round > 0).then(|| *agents[i].coordinate()),
                    place: topo.place(i),
                    key: i as u64,
                    // the rotation is the seed's (`--rotate-every`)
                    epoch: 0,
                })
                .collect();
            let drawn = r.next_u64();
            let selection = (round / args.reselect.max(1)) as u64;
            let seed = match args.rotate_every {
                0 => args.seed ^ 0x16_c00d,
                1 => drawn,
                e => (args.seed ^ 0x16_c00d).wrapping_add(selection / e as u64),
            };
            let previous = (args.discover > 0 && round > 0).then(|| peers.clone());
            // The whole fleet's lists at once (the same lists as `select_neighbours` node by
            // node, in O(n log n) instead of O(n^2)).
            peers = select_all_neighbours(&members, k, mix, seed);
            for (i, p) in peers.iter_mut().enumerate() {
                if let Some(previous) = &previous {
                    let near_end = k.saturating_sub(mix.random);
                    near::discover(i, p, near_end, args.discover, previous, topo, |a, b| {
                        agents[a].filtered_ms(b as u32)
                    });
                }
                for &j in p.iter() {
                    probed.insert(pair_key(i, j));
                }
            }
        }
        for i in (1..n).rev() {
            order.swap(i, r.below(i + 1));
        }
        for &i in &order {
            for &j in &peers[i] {
                if topo.nodes[i].site == topo.nodes[j].site {
                    // Measured directly, and not fed to the coordinate (see
                    // `VivaldiNode::observe`): the height stands for the access link, which
                    // links inside a group do not cross.
                    continue;
                }
                let Some(s) = topo.sample(i, j, args.outliers, &mut r) else {
                    continue;
                };
                let remote: Coord<D> = *agents[j].system();
                // Samples are finite, non-negative and far below the 10 s limit.
                let _ = agents[i].observe(j as u32, s, &remote);
            }
        }
    }
    let mut site_nodes: Vec<Vec<usize>> = vec![Vec::new(); topo.sites.len()];
    for (i, nd) in topo.nodes.iter().enumerate() {
        site_nodes[nd.site].push(i);
    }
    let mut errs = Vec::with_capacity(args.pairs);
    let mut errs_sys = Vec::with_capacity(args.pairs);
    let mut tries = 0;
    while errs.len() < args.pairs && tries < args.pairs * 100 {
        tries += 1;
        let (a, b) = (r.below(n), r.below(n));
        if a == b || probed.contains(&pair_key(a, b)) {
            continue;
        }
        let t = topo.true_ms(a, b);
        let site = topo.nodes[a].site;
        let in_group = if site == topo.nodes[b].site {
            // Inside a group: the median of its measured (probed) internal pairs.
            let members = &site_nodes[site];
            let probed = &probed;
            let measured = members.iter().enumerate().flat_map(|(x, &u)| {
                members[x + 1..]
                    .iter()
                    .filter(move |&&v| probed.contains(&pair_key(u, v)))
                    .map(move |&v| topo.true_ms(u, v))
            });
            estimate_in_group_ms(measured)
        } else {
            None
        };
        let est = in_group
            .unwrap_or_else(|| estimate_latency_ms(agents[a].coordinate(), agents[b].coordinate()));
        errs.push((est - t).abs() / t);
        let est = estimate_latency_ms(agents[a].system(), agents[b].system());
        errs_sys.push((est - t).abs() / t);
    }
    let total_pairs = n as f64 * (n as f64 - 1.0) / 2.0;
    let reported: Vec<Coord<D>> = agents.iter().map(|a| *a.coordinate()).collect();
    Outcome {
        short: near::ShortPairs::measure(topo, &reported, &probed),
        coords: agents
            .iter()
            .map(|a| {
                let c = a.coordinate();
                (c.vec().to_vec(), c.height(), c.error())
            })
            .collect(),
        peers,
        median: quantile(&mut errs, 0.5),
        p90: quantile(&mut errs, 0.9),
        median_sys: quantile(&mut errs_sys, 0.5),
        probed_share: probed.len() as f64 / total_pairs,
        app_updates: agents.iter().map(|a| a.app_updates() as f64).sum::<f64>() / n as f64,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(2..=5).contains(&args.dims) {
        bail!("--dims must be 2 to 5");
    }
    if args.k.iter().any(|&k| k == 0 || k > 32) {
        bail!("--k must be 1 to 32 (the simulated agents filter at most {SIM_PEERS} peers)");
    }
    println!(
        "seed {}, {} dimensions + height, {} rounds, neighbour sets chosen again every {} rounds, \
         moving percentile {} over {} samples, RELATIVE threshold {}, cc {} (settled {} below error {}) ce {}, outliers {}, detours {}",
        args.seed,
        args.dims,
        args.rounds,
        args.reselect,
        args.percentile,
        SIM_WINDOW,
        args.threshold,
        args.cc,
        args.cc_settled,
        args.error_unsettled,
        args.ce,
        args.outliers,
        args.detours
    );
    println!();
    if args.place > 0 {
        if args.dims != 3 {
            bail!("--place needs --dims 3 (the coordinates the control plane keeps)");
        }
        place::header(&args);
    } else {
        println!("| nodes | sites (lines, stations) | TIV pairs | k | rounds | samples/node | median rel. error | p90 rel. error | median (system coords) | pairs probed | app-coord updates/node | time (s) |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let mut round_rows = Vec::new();
    let mut short_rows = Vec::new();
    for &n in &args.nodes {
        let started = Instant::now();
        let topo = Topology::build(n, args.detours, args.seed);
        let tiv = topo.tiv_share(args.seed);
        let built = started.elapsed().as_secs_f64();
        for &k in &args.k {
            let o = match args.dims {
                2 => simulate::<2>(&topo, k, &args),
                3 => simulate::<3>(&topo, k, &args),
                4 => simulate::<4>(&topo, k, &args),
                _ => simulate::<5>(&topo, k, &args),
            };
            let s = o.short;
            short_rows.push(format!(
                "| {} | {} | {} | {} | {:.2} / {:.2} | {:.0} / {:.0} | {:.2} / {:.2} |",
                topo.nodes.len(),
                k,
                s.unprobed,
                s.probed,
                s.ratio_median,
                s.ratio_p90,
                s.rank_median,
                s.rank_p90,
                s.height_median,
                s.height_p90
            ));
            if args.place > 0 {
                round_rows.extend(place::compare(&topo, k, &o, &args));
                continue;
            }
            println!(
                "| {} | {} ({}, {}) | {:.1} % | {} | {} | {} | {:.1} % | {:.1} % | {:.1} % | {:.2} % | {:.1} | {:.1} (+{:.1} topology) |",
                topo.nodes.len(),
                topo.sites.len(),
                topo.lines,
                topo.stations,
                100.0 * tiv,
                k,
                args.rounds,
                args.rounds * k,
                100.0 * o.median,
                100.0 * o.p90,
                100.0 * o.median_sys,
                100.0 * o.probed_share,
                o.app_updates,
                o.seconds,
                built
            );
        }
    }
    println!(
        "\nShort pairs: stations of two sites under {} ms (coords-sim/near.rs)\n",
        near::SHORT_MS
    );
    println!("| nodes | k | unprobed | probed at some time | estimate / true, unprobed: median / p90 | rank by coordinates, unprobed: median / p90 | stations' height (ms): median / p90 |");
    println!("|---|---|---|---|---|---|---|");
    for r in short_rows {
        println!("{r}");
    }
    if !round_rows.is_empty() {
        println!("\nAfter the placement on k measured pairs plus estimates: rounds of targeted probes and re-evaluation (round 0: the first placement)\n");
        place::rounds_header();
        for r in round_rows {
            println!("{r}");
        }
    }
    Ok(())
}
