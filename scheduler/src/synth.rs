//! Synthetic clusters and applications for the benchmark (generated in code: a full mesh
//! of 10,000 nodes would be 10^8 links, so links are sparse by design).
//!
//! Cluster: `dcs` datacenters of `per_dc` nodes, placed at random points of a 2,000 km
//! square; one in ten is a cloud datacenter (x86_64, fast-cpu, database), the others
//! edge sites (aarch64, devices: gps, smoke-sensor, dashboard, camera). Links:
//! Every edge site has each device on one of its gateways and on one other node.
//! - inside a datacenter, a full mesh with loopbacks (loopback 0.02-0.1 ms, success 1;
//!   others 0.2-3 ms, success 0.95-1);
//! - between datacenters, only between their first [`GATEWAYS`] nodes (gateways), every
//!   pair in both directions: latency 2 ms + 0.01 ms/km + up to 5 ms, success 0.85-0.999.
//!
//! Application: a few sensor sources pinned to edge sites, dashboards pinned to edge
//! sites, and a layered DAG of processing components between them (some free, some on
//! the cloud layer, some needing a database), with resource requests; several paths from
//! a source to a sink, some branching; response-time and reliability criteria on the
//! paths plus least-containers / most-free-memory on some components.
//!
//! Everything is a deterministic function of the seed.

use crate::infra::{Infra, LinkQ};
use crate::rng::SplitMix64 as Rng;
use acoa_shared::coords::{estimate_in_group_ms, EndpointSummary};
use acoa_shared::model::{
    AppPath, Application, Capacity, Channel, Component, CoordDoc, Criterion, CriterionKind,
    EstimatedNode, Layer, LinkEstimates, Node, Requirements, Resources, Usage,
};

/// Nodes per datacenter that have links to other datacenters.
pub const GATEWAYS: usize = 4;

/// The name of datacenter `d`: cloud datacenters are `cloudNNN`, edge ones `siteNNN`.
pub fn dc_name(d: usize) -> String {
    if is_cloud(d) {
        format!("cloud{d:03}")
    } else {
        format!("site{d:03}")
    }
}

fn is_cloud(d: usize) -> bool {
    d.is_multiple_of(10)
}

/// A synthetic cluster of `dcs * per_dc` nodes.
pub fn cluster(dcs: usize, per_dc: usize, seed: u64) -> Infra {
    let (nodes, links, _) = parts(dcs, per_dc, seed);
    Infra::new(nodes, links)
}

/// [`cluster`] with every pair that has no link estimated (issue 16): each node's coordinate
/// is its datacenter's place (0.01 ms/km, as the links' distance term) with a height of
/// 2.25 ms (two heights: the mean of the links' 2 ms + up to 5 ms), its medians are over its
/// links, each datacenter's median over its internal links. The measured links are those of
/// [`cluster`].
pub fn cluster_with_estimates(dcs: usize, per_dc: usize, seed: u64) -> Infra {
    let (nodes, links, pos) = parts(dcs, per_dc, seed);
    let mut success: Vec<Vec<f64>> = vec![Vec::new(); nodes.len()];
    let mut internal: Vec<Vec<f64>> = vec![Vec::new(); dcs];
    for (a, b, q) in &links {
        if a == b {
            continue;
        }
        success[*a as usize].push(q.success);
        success[*b as usize].push(q.success);
        let (da, db) = (*a as usize / per_dc, *b as usize / per_dc);
        if da == db {
            internal[da].push(q.latency_ms);
        }
    }
    let mut est = LinkEstimates::default();
    for (i, n) in nodes.iter().enumerate() {
        let Some(s) = EndpointSummary::from_jitter_success(success[i].iter().map(|s| (0.0, *s)))
        else {
            continue;
        };
        let (x, y) = pos[i / per_dc];
        est.nodes.insert(
            n.name.clone(),
            EstimatedNode {
                coord: Some(CoordDoc {
                    position: [0.01 * x, 0.01 * y, 0.0],
                    height_ms: 2.25,
                    error: 0.1,
                }),
                median_jitter_ms: 0.0,
                median_success: s.median_success,
            },
        );
    }
    for (d, l) in internal.into_iter().enumerate() {
        if let Some(m) = estimate_in_group_ms(l) {
            est.groups.insert(dc_name(d), m);
        }
    }
    Infra::new(nodes, links).with_estimates(&est)
}

type Parts = (Vec<Node>, Vec<(u32, u32, LinkQ)>, Vec<(f64, f64)>);

/// A node of the benchmark's kinds: a cloud node (x86_64, fast-cpu, half with a database,
/// 16 cores, 64 GiB) or an edge node (aarch64, device `i` of gps / smoke-sensor / dashboard /
/// camera when `device(i)` and a quarter of the others, a tenth with a database, 4 cores,
/// 4 GiB), its usage random (0 to 60 % cpu, 0 to 80 % memory, 0 to 5 containers).
pub fn node(
    name: String,
    datacenter: String,
    cloud: bool,
    device: impl Fn(usize) -> bool,
    r: &mut Rng,
) -> Node {
    let mut hardware = Vec::new();
    let mut software = Vec::new();
    if cloud {
        hardware.push("fast-cpu".to_string());
        if r.chance(0.5) {
            software.push("database".to_string());
        }
    } else {
        for (i, h) in ["gps", "smoke-sensor", "dashboard", "camera"]
            .into_iter()
            .enumerate()
        {
            if device(i) || r.chance(0.25) {
                hardware.push(h.to_string());
            }
        }
        if r.chance(0.1) {
            software.push("database".to_string());
        }
    }
    let (cpu, mem) = if cloud {
        (16_000, 65_536)
    } else {
        (4_000, 4_096)
    };
    Node {
        name,
        datacenter,
        layer: if cloud { Layer::Cloud } else { Layer::Edge },
        arch: if cloud { "x86_64" } else { "aarch64" }.to_string(),
        hardware,
        software,
        capacity: Capacity {
            cpu_millis: cpu,
            memory_mb: mem,
            disk_mb: 100_000,
            ..Default::default()
        },
        usage: Usage {
            cpu_millis: (cpu as f64 * r.range(0.0, 0.6)) as u64,
            memory_mb: (mem as f64 * r.range(0.0, 0.8)) as u64,
            disk_mb: 10_000,
            containers: r.below(6) as u32,
            ..Default::default()
        },
        position: None,
    }
}

/// The nodes, links and datacenter positions of [`cluster`].
fn parts(dcs: usize, per_dc: usize, seed: u64) -> Parts {
    let mut r = Rng::new(seed);
    let mut nodes = Vec::with_capacity(dcs * per_dc);
    for d in 0..dcs {
        let cloud = is_cloud(d);
        for k in 0..per_dc {
            // Every device on one gateway and one other node of each site.
            let device = |i: usize| k < 2 * GATEWAYS && k % GATEWAYS == i;
            nodes.push(node(
                format!("{}-n{k:03}", dc_name(d)),
                dc_name(d),
                cloud,
                device,
                &mut r,
            ));
        }
    }
    let pos: Vec<(f64, f64)> = (0..dcs)
        .map(|_| (r.range(0.0, 2000.0), r.range(0.0, 2000.0)))
        .collect();
    let g = GATEWAYS.min(per_dc);
    let mut links = Vec::with_capacity(dcs * per_dc * per_dc + dcs * dcs * g * g);
    for d in 0..dcs {
        let base = (d * per_dc) as u32;
        for i in 0..per_dc as u32 {
            for j in 0..per_dc as u32 {
                let q = if i == j {
                    LinkQ {
                        latency_ms: r.range(0.02, 0.1),
                        success: 1.0,
                    }
                } else {
                    LinkQ {
                        latency_ms: r.range(0.2, 3.0),
                        success: r.range(0.95, 1.0),
                    }
                };
                links.push((base + i, base + j, q));
            }
        }
    }
    for d in 0..dcs {
        for e in 0..dcs {
            if d == e {
                continue;
            }
            let km = ((pos[d].0 - pos[e].0).powi(2) + (pos[d].1 - pos[e].1).powi(2)).sqrt();
            for i in 0..g {
                for j in 0..g {
                    links.push((
                        (d * per_dc + i) as u32,
                        (e * per_dc + j) as u32,
                        LinkQ {
                            latency_ms: 2.0 + 0.01 * km + r.range(0.0, 5.0),
                            success: r.range(0.85, 0.999),
                        },
                    ));
                }
            }
        }
    }
    (nodes, links, pos)
}

/// A synthetic application of `n` components (n >= 3) for a cluster of `dcs`
/// datacenters.
pub fn application(n: usize, dcs: usize, seed: u64) -> Application {
    let mut r = Rng::new(seed ^ 0x5eed);
    let edge_dc = |r: &mut Rng| loop {
        let d = r.below(dcs);
        if !is_cloud(d) {
            return dc_name(d);
        }
    };
    let sources = (n / 5).max(1);
    let sinks = (n / 5).max(1);
    let middle = n - sources - sinks;
    let home = edge_dc(&mut r);
    let mut components = Vec::new();
    let image = |name: &str| format!("localhost/acoa/{name}:1");
    // a source or a sink: its device `hardware`, the first in the home datacenter, the others
    // each in an edge datacenter of its own
    let device = |r: &mut Rng, name: String, i: usize, hardware: &str, memory_mb: u64| Component {
        image: image(&name),
        name,
        requires: Requirements {
            hardware: vec![hardware.to_string()],
            datacenter: Some(if i == 0 { home.clone() } else { edge_dc(r) }),
            ..Requirements::default()
        },
        resources: Some(Resources {
            cpu_millis: 100,
            memory_mb,
            ..Default::default()
        }),
        health: None,
    };
    for i in 0..sources {
        let hardware = ["gps", "smoke-sensor", "camera"][i % 3];
        components.push(device(&mut r, format!("source-{i}"), i, hardware, 64));
    }
    for i in 0..middle {
        let name = format!("stage-{i}");
        let mut requires = Requirements::default();
        match r.below(4) {
            0 => requires.layer = Some(Layer::Cloud),
            1 => requires.software = vec!["database".to_string()],
            2 => requires.arch = Some("aarch64".to_string()),
            _ => {}
        }
        components.push(Component {
            image: image(&name),
            name,
            requires,
            resources: Some(Resources {
                cpu_millis: 250 * (1 + r.below(4) as u64),
                memory_mb: 256 * (1 + r.below(4) as u64),
                ..Default::default()
            }),
            health: None,
        });
    }
    for i in 0..sinks {
        components.push(device(&mut r, format!("sink-{i}"), i, "dashboard", 128));
    }
    // Layered DAG: each stage reads from a source or an earlier stage; each sink from a
    // stage; extra forward edges make branches.
    let src = |i: usize| i;
    let stage = |i: usize| sources + i;
    let sink = |i: usize| sources + middle + i;
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for i in 0..middle {
        let from = if i == 0 || r.chance(0.3) {
            src(r.below(sources))
        } else {
            stage(r.below(i))
        };
        edges.push((from, stage(i)));
        if i > 1 && r.chance(0.3) {
            let extra = stage(r.below(i));
            if !edges.contains(&(extra, stage(i))) {
                edges.push((extra, stage(i)));
            }
        }
    }
    for i in 0..sinks {
        let from = stage(middle - 1 - r.below(middle.min(3)));
        edges.push((from, sink(i)));
    }
    // Every stage without a consumer feeds a sink.
    for i in 0..middle {
        if !edges.iter().any(|(f, _)| *f == stage(i)) {
            edges.push((stage(i), sink(r.below(sinks))));
        }
    }
    let cname = |c: usize, comps: &[Component]| comps[c].name.clone();
    let channels: Vec<Channel> = edges
        .iter()
        .map(|(f, t)| Channel {
            name: format!("{}-to-{}", cname(*f, &components), cname(*t, &components)),
            from: cname(*f, &components),
            to: cname(*t, &components),
        })
        .collect();
    // Paths: walk back from each sink (and from some stages) to a source; every other
    // path takes all the in-edges of one step (a branch).
    let mut paths = Vec::new();
    let want = (n / 3).max(2);
    let mut k = 0;
    while paths.len() < want && k < 10 * want {
        let end = if k < sinks {
            sink(k)
        } else {
            stage(r.below(middle))
        };
        k += 1;
        let branching = paths.len() % 2 == 1;
        let mut chans: Vec<usize> = Vec::new();
        let mut frontier = vec![end];
        while let Some(v) = frontier.pop() {
            let ins: Vec<usize> = (0..edges.len()).filter(|e| edges[*e].1 == v).collect();
            if ins.is_empty() {
                continue;
            }
            let take: Vec<usize> = if branching && ins.len() > 1 {
                ins
            } else {
                vec![ins[r.below(ins.len())]]
            };
            for e in take {
                if !chans.contains(&e) {
                    chans.push(e);
                    frontier.push(edges[e].0);
                }
            }
        }
        if chans.is_empty() {
            continue;
        }
        chans.sort_unstable();
        let names: Vec<String> = chans.iter().map(|e| channels[*e].name.clone()).collect();
        if paths.iter().any(|p: &AppPath| p.channels == names) {
            continue;
        }
        paths.push(AppPath {
            name: format!("path-{}", paths.len()),
            channels: names,
        });
    }
    let mut criteria = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        criteria.push(Criterion {
            kind: CriterionKind::MinE2eResponseTime,
            path: Some(p.name.clone()),
            component: None,
            weight: 1.0,
        });
        if i % 2 == 0 {
            criteria.push(Criterion {
                kind: CriterionKind::MaxE2eReliability,
                path: Some(p.name.clone()),
                component: None,
                weight: 0.5,
            });
        }
    }
    for i in (0..middle).step_by(4) {
        criteria.push(Criterion {
            kind: if i % 8 == 0 {
                CriterionKind::LeastContainers
            } else {
                CriterionKind::MostFreeMemory
            },
            path: None,
            component: Some(format!("stage-{i}")),
            weight: 0.25,
        });
    }
    crate::qos::application(
        &format!("synthetic-{n}"),
        components,
        channels,
        paths,
        criteria,
    )
}
