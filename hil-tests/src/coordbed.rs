//! Network coordinates on the railway testbed (issue 16): with a small neighbour set (`serve
//! --peers-k K`) most pairs are never probed; the control plane estimates them from the
//! agents' Vivaldi coordinates. The emulator knows the truth (the scenario's link table), so
//! the estimates of the unprobed pairs are compared with it, and the placement the control
//! plane makes (first on estimates, then again once its targeted probes measured the links it
//! uses) is scored under the truth against the optimum, next to the same run with every pair
//! probed.
//!
//! The estimates are computed here from the control plane's fleet document (`/api/fleet`: the
//! measured links and every node's reported coordinate) with the control plane's own rule
//! (`acoa_shared::coords::LinkView::of_pair`'s latency: two nodes of one group, the median of
//! the group's measured internal links, [`estimate_in_group_ms`]; else the coordinates'
//! distance, [`estimate_latency_ms`], or the median of the links measured between the two
//! groups where it is shorter).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use acoa_shared::coords::{
    estimate_in_group_ms, estimate_latency_ms, medians_between, Coord, DIMS,
};
use acoa_shared::model::Cluster;
use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// What the experiment reads of `/api/fleet`.
#[derive(Debug, Clone, Deserialize)]
pub struct Fleet {
    pub datacenters: Vec<Datacenter>,
    pub links: Vec<FleetLink>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Datacenter {
    pub name: String,
    pub nodes: Vec<FleetNode>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FleetNode {
    pub name: String,
    #[serde(default)]
    pub coordinate: Option<FleetCoord>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FleetCoord {
    pub vec: Vec<f64>,
    pub height: f64,
    pub error: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FleetLink {
    pub from: String,
    pub to: String,
    pub latency_ms: f64,
}

/// GET `path` of the web view at `addr` with its bearer `token`; the body parsed as JSON.
pub fn get_json<T: serde::de::DeserializeOwned>(
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> Result<T> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connect to the web view at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("GET {path}: no header end in the answer");
    };
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(""));
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)?
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).with_context(|| format!("GET {path}: the body"))
}

/// The body of a chunked HTTP/1.1 answer.
fn dechunk(mut s: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").context("chunk size line")?;
        let n = usize::from_str_radix(size.trim(), 16).context("chunk size")?;
        if n == 0 {
            return Ok(out);
        }
        if rest.len() < n {
            bail!("a chunk shorter than its size");
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").context("chunk end")?;
    }
}

/// One unprobed directed pair: the estimate against the truth.
#[derive(Debug, Clone, PartialEq)]
pub struct PairError {
    pub from: String,
    pub to: String,
    /// Both nodes in one group (datacenter, train).
    pub in_group: bool,
    pub estimate_ms: f64,
    /// The scenario's one-way latency of this direction.
    pub true_ms: f64,
    /// The mean of both directions (what a symmetric estimate can reach at best).
    pub true_rt_ms: f64,
    /// What a guess without coordinates would say: the median of the measured links of the
    /// same kind (inside the group, or across groups).
    pub baseline_ms: f64,
}

impl PairError {
    pub fn relative(&self) -> f64 {
        (self.estimate_ms - self.true_ms).abs() / self.true_ms.max(1e-9)
    }
    pub fn relative_rt(&self) -> f64 {
        (self.estimate_ms - self.true_rt_ms).abs() / self.true_rt_ms.max(1e-9)
    }
    /// The baseline's relative error against the round trip truth.
    pub fn baseline_relative_rt(&self) -> f64 {
        (self.baseline_ms - self.true_rt_ms).abs() / self.true_rt_ms.max(1e-9)
    }
}

/// What the fleet document says of the pairs.
#[derive(Debug, Clone, Default)]
pub struct Estimates {
    /// Ordered pairs of distinct nodes.
    pub pairs: usize,
    /// Pairs with a measurement of their own (this direction).
    pub measured: usize,
    /// Pairs measured in neither direction.
    pub probed_in_neither: usize,
    /// Unprobed pairs (this direction) the control plane could estimate, against the truth.
    pub errors: Vec<PairError>,
    /// Unprobed pairs without an estimate (a node without coordinate).
    pub unknown: usize,
}

/// The estimates of every unprobed ordered pair of `fleet`'s nodes, against `truth`'s links
/// (the pairs the truth has no link for are left out).
pub fn estimates(fleet: &Fleet, truth: &Cluster) -> Estimates {
    let group: HashMap<&str, &str> = fleet
        .datacenters
        .iter()
        .flat_map(|d| {
            d.nodes
                .iter()
                .map(move |n| (n.name.as_str(), d.name.as_str()))
        })
        .collect();
    let coords: HashMap<&str, Coord<DIMS>> = fleet
        .datacenters
        .iter()
        .flat_map(|d| d.nodes.iter())
        .filter_map(|n| {
            let c = n.coordinate.as_ref()?;
            let v: [f64; DIMS] = c.vec.clone().try_into().ok()?;
            Some((n.name.as_str(), Coord::new(v, c.height, c.error).ok()?))
        })
        .collect();
    let measured: BTreeSet<(&str, &str)> = fleet
        .links
        .iter()
        .filter(|l| l.from != l.to)
        .map(|l| (l.from.as_str(), l.to.as_str()))
        .collect();
    let mut group_ms: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut across_ms = Vec::new();
    // the links measured between two groups
    let mut cross: Vec<(&str, &str, f64)> = Vec::new();
    for l in &fleet.links {
        if l.from == l.to {
            continue;
        }
        if group.get(l.from.as_str()) == group.get(l.to.as_str()) {
            if let Some(g) = group.get(l.from.as_str()) {
                group_ms.entry(g).or_default().push(l.latency_ms);
            }
        } else {
            across_ms.push(l.latency_ms);
            if let (Some(gx), Some(gy)) = (group.get(l.from.as_str()), group.get(l.to.as_str())) {
                cross.push((gx, gy, l.latency_ms));
            }
        }
    }
    let across_median = estimate_in_group_ms(across_ms.iter().copied());
    // per pair of groups (the lesser name first): the median of the links between them
    let between_ms: HashMap<(&str, &str), f64> = medians_between(cross)
        .into_iter()
        .map(|(x, y, m)| ((x, y), m))
        .collect();
    let truth_ms: HashMap<(&str, &str), f64> = truth
        .links
        .iter()
        .map(|l| ((l.from.as_str(), l.to.as_str()), l.latency_ms))
        .collect();
    let names: Vec<&str> = group
        .keys()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut out = Estimates::default();
    for a in &names {
        for b in &names {
            if a == b {
                continue;
            }
            out.pairs += 1;
            if measured.contains(&(*a, *b)) {
                out.measured += 1;
                continue;
            }
            if !measured.contains(&(*b, *a)) {
                out.probed_in_neither += 1;
            }
            let (Some(t), Some(back)) = (truth_ms.get(&(*a, *b)), truth_ms.get(&(*b, *a))) else {
                continue;
            };
            let in_group = group.get(a) == group.get(b);
            let in_group_ms = if in_group {
                group
                    .get(a)
                    .and_then(|g| group_ms.get(g))
                    .and_then(|v| estimate_in_group_ms(v.iter().copied()))
            } else {
                None
            };
            let by_coords = match (coords.get(a), coords.get(b)) {
                (Some(x), Some(y)) => {
                    let by_coords = estimate_latency_ms(x, y);
                    let between = group
                        .get(a)
                        .zip(group.get(b))
                        .and_then(|(gx, gy)| between_ms.get(&(*gx.min(gy), *gx.max(gy))));
                    Some(between.map_or(by_coords, |m| m.min(by_coords)))
                }
                _ => None,
            };
            let baseline = if in_group { in_group_ms } else { across_median };
            match in_group_ms.or(by_coords) {
                Some(estimate_ms) => out.errors.push(PairError {
                    from: a.to_string(),
                    to: b.to_string(),
                    in_group,
                    estimate_ms,
                    true_ms: *t,
                    true_rt_ms: (t + back) / 2.0,
                    baseline_ms: baseline.unwrap_or(f64::NAN),
                }),
                None => out.unknown += 1,
            }
        }
    }
    out
}

/// The placement's links in a status document: channel -> `measured` | `estimated` | `local`.
pub fn link_kinds(status: &serde_json::Value) -> BTreeMap<String, String> {
    status
        .get("links")
        .and_then(|l| l.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coord(x: f64) -> Option<FleetCoord> {
        Some(FleetCoord {
            vec: vec![x, 0.0, 0.0],
            height: 0.0,
            error: 0.1,
        })
    }

    #[test]
    fn unprobed_pairs_are_estimated_from_coordinates_and_group_medians() {
        let mut text = String::from(
            "cluster: t\ndatacenters:\n- {name: g, layer: cloud}\n- {name: h, layer: cloud}\nnodes:\n",
        );
        for (n, dc) in [("a", "g"), ("b", "g"), ("c", "h")] {
            text += &format!("- {{name: {n}, datacenter: {dc}, layer: cloud, arch: x86_64, capacity: {{cpu_millis: 1000, memory_mb: 1000, disk_mb: 1000}}}}\n");
        }
        text += "links:\n";
        for (f, t, ms) in [
            ("a", "b", 1.0),
            ("b", "a", 1.0),
            ("a", "c", 10.0),
            ("c", "a", 10.0),
            ("b", "c", 12.0),
            ("c", "b", 8.0),
        ] {
            text += &format!(
                "- {{from: {f}, to: {t}, latency_ms: {ms}, jitter_ms: 0.1, success: 1.0}}\n"
            );
        }
        let truth = acoa_shared::model::parse_cluster(&text).unwrap();
        let fleet = Fleet {
            datacenters: vec![
                Datacenter {
                    name: "g".into(),
                    nodes: vec![
                        FleetNode {
                            name: "a".into(),
                            coordinate: coord(0.0),
                        },
                        FleetNode {
                            name: "b".into(),
                            coordinate: coord(1.0),
                        },
                    ],
                },
                Datacenter {
                    name: "h".into(),
                    nodes: vec![FleetNode {
                        name: "c".into(),
                        coordinate: coord(11.0),
                    }],
                },
            ],
            links: vec![
                FleetLink {
                    from: "a".into(),
                    to: "b".into(),
                    latency_ms: 1.2,
                },
                FleetLink {
                    from: "a".into(),
                    to: "c".into(),
                    latency_ms: 10.0,
                },
            ],
        };
        let e = estimates(&fleet, &truth);
        assert_eq!(e.pairs, 6);
        assert_eq!(e.measured, 2);
        // b->a (in the group: the group's median 1.2), b->c, c->a, c->b; of them only b->c
        // and c->b are probed in neither direction
        assert_eq!(e.probed_in_neither, 2);
        assert_eq!(e.errors.len(), 4);
        let ba = e
            .errors
            .iter()
            .find(|x| x.from == "b" && x.to == "a")
            .unwrap();
        assert!(ba.in_group && (ba.estimate_ms - 1.2).abs() < 1e-9);
        let bc = e
            .errors
            .iter()
            .find(|x| x.from == "b" && x.to == "c")
            .unwrap();
        assert!((bc.estimate_ms - 10.0).abs() < 1e-9, "{bc:?}");
        assert!((bc.relative() - 2.0 / 12.0).abs() < 1e-9);
        assert!(bc.relative_rt().abs() < 1e-9);
        // without coordinates: the median of the measured links across groups (a->c, 10)
        assert!((bc.baseline_ms - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(
            dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            "abcde"
        );
        assert!(dechunk("5\r\nab").is_err());
    }
}
