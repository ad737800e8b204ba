//! The live infrastructure model as placement jobs read it ([`LiveModel`]): taken on the
//! decision loop as plain values (the online nodes, a copy of the link table, what the
//! estimates are computed from), and turned into what a job reads where it is first read, on
//! the job's thread, once per model: the scheduler's [`Infra`] (built from the link table's
//! numbers, no name per link), the estimates of unmeasured pairs, the [`Cluster`] document
//! (remote workers, the web view) and the confidence bounds of the view's links.
//!
//! At 50,000 nodes the fleet measures 1.6 million links: building the `Cluster` (two strings
//! a link) took 1-3 s on the decision loop before every placement that followed a change, and
//! each job built its own `Infra` from it again, once per score. Here the loop copies the
//! table (numbers) and every job on the same model shares one `Infra`.
//!
//! Invariant: a `LiveModel` never changes once taken; everything derived from it is a pure
//! function of it, computed at most once ([`OnceLock`]): a job sees the same network whatever
//! thread reads it first. `Engine::cluster()` is `LiveModel::cluster()` of the current model.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use acoa_scheduler::{Infra, LinkQ};
use acoa_shared::model::{self, Cluster, CoordDoc, Link, LinkEstimates, Observed};

use super::inventory::LinkEntry;
use super::links::{LinkBounds, LOOPBACK_LATENCY_MS};
use super::linktable::LinkTable;
use super::probes::estimates_from;

/// What the estimates of unmeasured pairs are computed from, by link-table number: each
/// number's datacenter (a known node's), and for an online node its coordinate if it has one.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct EstimateInputs {
    pub(super) datacenter_of: Vec<Option<usize>>,
    pub(super) datacenters: Vec<String>,
    pub(super) online: Vec<Option<Option<CoordDoc>>>,
}

/// The live model of one moment (see the module doc).
#[derive(Debug)]
pub struct LiveModel {
    /// Online nodes, in name order (shared with the scheduler's view, [`LiveModel::infra`]).
    nodes: Arc<Vec<model::Node>>,
    links: Arc<LinkTable>,
    inputs: Arc<EstimateInputs>,
    observed: BTreeMap<String, Observed>,
    /// Shared with the models derived from this one ([`LiveModel::with_nodes`]).
    estimates: Arc<OnceLock<Option<LinkEstimates>>>,
    cluster: OnceLock<Arc<Cluster>>,
    infra: OnceLock<Arc<Infra>>,
    infra_spread: OnceLock<Arc<Vec<LinkSpread>>>,
}

impl LiveModel {
    pub(super) fn new(
        nodes: Vec<model::Node>,
        links: Arc<LinkTable>,
        inputs: EstimateInputs,
        observed: BTreeMap<String, Observed>,
    ) -> LiveModel {
        debug_assert!(nodes.windows(2).all(|w| w[0].name < w[1].name));
        LiveModel {
            nodes: Arc::new(nodes),
            links,
            inputs: Arc::new(inputs),
            observed,
            estimates: Arc::default(),
            cluster: OnceLock::new(),
            infra: OnceLock::new(),
            infra_spread: OnceLock::new(),
        }
    }

    /// The same model with `extra` nodes online too (their measured links and loopbacks with
    /// them; the estimates stay those of this model's nodes). Shares the link table.
    pub(super) fn with_nodes(&self, extra: Vec<model::Node>) -> LiveModel {
        let mut nodes = self.nodes.as_ref().clone();
        for n in extra {
            if let Err(i) = nodes.binary_search_by(|x| x.name.cmp(&n.name)) {
                nodes.insert(i, n);
            }
        }
        LiveModel {
            nodes: Arc::new(nodes),
            links: self.links.clone(),
            inputs: self.inputs.clone(),
            observed: self.observed.clone(),
            // computed once for both, where first read (not here: on the decision loop)
            estimates: self.estimates.clone(),
            cluster: OnceLock::new(),
            infra: OnceLock::new(),
            infra_spread: OnceLock::new(),
        }
    }

    /// Derives what a job reads of it ([`LiveModel::infra`], [`LiveModel::infra_spread`]),
    /// ahead of the jobs (`Action::WarmModel`).
    pub fn derive_views(&self) {
        let _ = (self.infra(), self.infra_spread());
    }

    /// Whether what a job reads of it is derived ([`LiveModel::derive_views`]): a job on it
    /// waits for no derivation.
    pub fn views_ready(&self) -> bool {
        self.infra.get().is_some() && self.infra_spread.get().is_some()
    }

    /// The online nodes, in name order.
    pub fn nodes(&self) -> &[model::Node] {
        &self.nodes
    }

    /// The online node `name`.
    pub fn node(&self, name: &str) -> Option<&model::Node> {
        let i = self
            .nodes
            .binary_search_by(|n| n.name.as_str().cmp(name))
            .ok()?;
        Some(&self.nodes[i])
    }

    /// The measured link `from` -> `to` as (latency ms, success), a loopback filled in for an
    /// online node that measured none: a link of [`LiveModel::cluster`], without building it.
    pub fn measured(&self, from: &str, to: &str) -> Option<(f64, f64)> {
        match self.links.get(from, to) {
            Some(e) => Some((e.latency_ms(), e.success())),
            None if from == to && self.node(from).is_some() => Some((LOOPBACK_LATENCY_MS, 1.0)),
            None => None,
        }
    }

    /// What the unmeasured pairs are estimated from (`None`: nothing measured yet).
    pub fn estimates(&self) -> &Option<LinkEstimates> {
        self.estimates.get_or_init(|| {
            let e = estimates_from(&self.links, &self.inputs);
            (!e.is_empty()).then_some(e)
        })
    }

    /// The model as a cluster document (what remote workers and the web view read): the
    /// measured links in (from, to) name order, each online node's loopback merged in where it
    /// measured none. Built once, on first use.
    pub fn cluster(&self) -> Arc<Cluster> {
        self.cluster
            .get_or_init(|| {
                let link = |a: &str, b: &str, latency_ms, jitter_ms, success| Link {
                    from: a.to_string(),
                    to: b.to_string(),
                    latency_ms,
                    jitter_ms,
                    success,
                };
                let loopback = |n: &str| link(n, n, LOOPBACK_LATENCY_MS, 0.0, 1.0);
                let mut links = Vec::with_capacity(self.links.len() + self.nodes.len());
                let mut loops = self
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .filter(|n| !self.links.contains(n, n))
                    .peekable();
                for (a, b, e) in self.links.in_name_order() {
                    while let Some(n) = loops.next_if(|n| (*n, *n) < (a, b)) {
                        links.push(loopback(n));
                    }
                    links.push(link(a, b, e.latency_ms(), e.jitter_ms(), e.success()));
                }
                links.extend(loops.map(loopback));
                Arc::new(Cluster {
                    cluster: "live".into(),
                    datacenters: vec![],
                    nodes: self.nodes.as_ref().clone(),
                    links,
                    observed: self.observed.clone(),
                    estimates: self.estimates().clone(),
                })
            })
            .clone()
    }

    /// Every link of the scheduler's view, once each (in no particular order): each measured
    /// link between online nodes (by their places in [`LiveModel::nodes`]), then the
    /// loopbacks filled in.
    fn each_infra_link(&self, mut visit: impl FnMut(u32, u32, Option<&LinkEntry>)) {
        let at: HashMap<&str, u32> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i as u32))
            .collect();
        let (names, links) = self.links.numbered();
        let pos: Vec<Option<u32>> = names.iter().map(|n| at.get(n).copied()).collect();
        let mut looped = vec![false; self.nodes.len()];
        for (a, b, e) in links {
            let (Some(pa), Some(pb)) = (pos[a], pos[b]) else {
                continue;
            };
            if pa == pb {
                looped[pa as usize] = true;
            }
            visit(pa, pb, Some(e));
        }
        for (i, _) in looped.iter().enumerate().filter(|(_, l)| !**l) {
            visit(i as u32, i as u32, None);
        }
    }

    /// The scheduler's view of the model, built from the link table's numbers (the same view
    /// as `Infra::from_cluster(&self.cluster())`, without the cluster): once, on first use.
    pub fn infra(&self) -> Arc<Infra> {
        self.infra
            .get_or_init(|| {
                let mut qs: Vec<(u32, u32, LinkQ)> =
                    Vec::with_capacity(self.links.len() + self.nodes.len());
                self.each_infra_link(|a, b, e| {
                    let q = match e {
                        Some(e) => LinkQ {
                            latency_ms: e.latency_ms(),
                            success: e.success(),
                        },
                        None => LinkQ {
                            latency_ms: LOOPBACK_LATENCY_MS,
                            success: 1.0,
                        },
                    };
                    qs.push((a, b, q));
                });
                let infra =
                    Infra::of_sorted(self.nodes.clone(), qs).with_observed(self.observed.clone());
                Arc::new(match self.estimates() {
                    Some(e) => infra.with_estimates(e),
                    None => infra,
                })
            })
            .clone()
    }

    /// What the confidence bounds of the links of [`LiveModel::infra`] are computed from
    /// beside their quality, by the view's link number (the links in (from, to) order of the
    /// nodes' places, which are the view's own): 8 bytes a link, where the bounds themselves
    /// took 32 ([`LinkSpread::bounds`]).
    pub fn infra_spread(&self) -> Arc<Vec<LinkSpread>> {
        self.infra_spread
            .get_or_init(|| {
                let mut b = Vec::with_capacity(self.links.len() + self.nodes.len());
                self.each_infra_link(|x, y, e| {
                    let spread = e.map_or(LinkSpread::default(), |e| LinkSpread {
                        jitter_ms: e.jitter_ms() as f32,
                        samples: e.samples,
                    });
                    b.push((x, y, spread));
                });
                b.sort_unstable_by_key(|(x, y, _)| (*x, *y));
                // a new vector: collected in place, it would keep the 16 bytes a link of `b`
                let mut spread = Vec::with_capacity(b.len());
                spread.extend(b.iter().map(|(_, _, s)| *s));
                Arc::new(spread)
            })
            .clone()
    }
}

/// A measured link's spread: its jitter (as measured, the wire's `f32`) and the samples it
/// was measured over.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkSpread {
    pub jitter_ms: f32,
    pub samples: u16,
}

impl LinkSpread {
    /// The confidence bounds of the view's link `from` -> `to` of quality `q` with this
    /// spread: measured, exact for a loopback (a node's own loopback carries no network: what
    /// its prober loses there is the host's scheduling, not a link's quality; one filled in is
    /// exact too).
    pub fn bounds(&self, from: u32, to: u32, q: LinkQ) -> LinkBounds {
        if from == to {
            LinkBounds::exact(q.latency_ms, q.success)
        } else {
            LinkBounds::measured(
                q.latency_ms,
                f64::from(self.jitter_ms),
                q.success,
                self.samples,
            )
        }
    }
}

/// The same model: the same cluster document (tests compare jobs).
impl PartialEq for LiveModel {
    fn eq(&self, other: &LiveModel) -> bool {
        std::ptr::eq(self, other) || self.cluster() == other.cluster()
    }
}
