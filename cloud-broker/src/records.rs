//! The records the control plane keeps across restarts, and the operations that change them:
//! the vocabulary shared by the pure decisions ([`crate::engine`], which emits [`PersistOp`]s
//! and starts from a [`Snapshot`]) and the stores that make them durable ([`crate::store`]).
//!
//! Invariants: plain heap-allocated values (no I/O, no fixed-size wire buffers); every record
//! names itself (an application or a node), so that a store can keep one record per name. A
//! [`DesiredDoc`] is built only from specifications that fit the wire (see
//! [`ContainerDoc::new`]), so it always converts to the bounded wire [`DesiredState`]
//! ([`DesiredDoc::to_wire`]); its JSON form is the one the wire type's serde form had.

use std::collections::BTreeMap;

use acoa_shared::geo::Position;
use acoa_shared::model::{self, Application, Capacity, Layer};
use acoa_shared::wire::{self, ContainerSpec, DesiredState, EnvVar, NodeReport, WireError};
use serde::{Deserialize, Serialize};

use crate::status::PlacementRecord;

/// The static properties a node reported last (persisted when they change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    pub datacenter: String,
    pub layer: Layer,
    pub arch: String,
    pub hardware: Vec<String>,
    pub software: Vec<String>,
    pub capacity: Capacity,
    pub probe_addr: String,
    /// Where a fixed node stands on the map (a report's position, when it checks out; none in
    /// records written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

impl NodeInfo {
    pub fn from_report(r: &NodeReport) -> NodeInfo {
        NodeInfo {
            name: r.node.to_string(),
            datacenter: r.datacenter.to_string(),
            layer: r.layer,
            arch: r.arch.to_string(),
            hardware: r.hardware.iter().map(|s| s.to_string()).collect(),
            software: r.software.iter().map(|s| s.to_string()).collect(),
            capacity: Capacity {
                cpu_millis: r.capacity.cpu_millis,
                memory_mb: r.capacity.memory_mb,
                disk_mb: r.capacity.disk_mb,
                ..Default::default()
            },
            probe_addr: r.probe_addr.to_string(),
            position: r.position.and_then(|p| p.to_position().ok()),
        }
    }
}

/// An accepted application, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppRecord {
    pub name: String,
    /// The definition's text as published.
    pub definition: String,
    pub digest: String,
    pub application: Application,
    #[serde(default)]
    pub placement: Option<PlacementRecord>,
    /// The container name of a component whose name is not `{app}.{component}` (a copy
    /// started next to the old one by a rollout keeps its name, see
    /// [`crate::engine::update`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, String>,
}

impl AppRecord {
    /// The container name of component `c`.
    pub fn container_name(&self, c: &str) -> String {
        self.names
            .get(c)
            .cloned()
            .unwrap_or_else(|| format!("{}.{c}", self.name))
    }
}

/// How many revisions of an application are kept.
pub const REVISIONS_KEPT: usize = 10;

/// One accepted definition of an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// 1 for the first accepted definition, then one more for each.
    pub number: u64,
    pub digest: String,
    /// The definition's text as published.
    pub definition: String,
    /// Why it does not run: rolled back (and why), or replaced during its rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// An application's revisions (the last [`REVISIONS_KEPT`], oldest first), which of them runs,
/// and the rollout under way, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub app: String,
    pub revisions: Vec<Revision>,
    /// The revision that runs (the last good one while a rollout is under way).
    pub current: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::engine::update::Rollout>,
}

impl History {
    pub fn new(app: &str) -> History {
        History {
            app: app.into(),
            revisions: vec![],
            current: 0,
            rollout: None,
        }
    }

    /// The newest revision's number (0: none yet).
    pub fn last(&self) -> u64 {
        self.revisions.last().map(|r| r.number).unwrap_or(0)
    }

    pub fn get(&self, number: u64) -> Option<&Revision> {
        self.revisions.iter().find(|r| r.number == number)
    }

    /// Adds the next revision (the oldest beyond [`REVISIONS_KEPT`] is forgotten); its number.
    pub fn push(&mut self, digest: &str, definition: &str) -> u64 {
        let number = self.last() + 1;
        self.revisions.push(Revision {
            number,
            digest: digest.into(),
            definition: definition.into(),
            failed: None,
        });
        if self.revisions.len() > REVISIONS_KEPT {
            let extra = self.revisions.len() - REVISIONS_KEPT;
            self.revisions.drain(..extra);
        }
        number
    }

    /// Notes why revision `number` does not run.
    pub fn fail(&mut self, number: u64, why: &str) {
        if let Some(r) = self.revisions.iter_mut().find(|r| r.number == number) {
            r.failed = Some(why.into());
        }
    }
}

/// What a node is told to run, as the control plane keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredDoc {
    pub node: String,
    /// Strictly increasing per node.
    pub generation: u64,
    /// The term of the leader that decided it (0 on the file store; absent in records
    /// written before terms).
    #[serde(default)]
    pub term: u64,
    /// Sorted by name, at most [`wire::MAX_CONTAINERS`].
    pub containers: Vec<ContainerDoc>,
}

/// One container of a [`DesiredDoc`] (the wire's [`ContainerSpec`], heap-allocated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerDoc {
    /// Unique on the node: `{app}.{component}`.
    pub name: String,
    pub app: String,
    pub component: String,
    pub image: String,
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub env: Vec<EnvDoc>,
    /// The component's health check, in the model's form (`null` when it has none, as the wire
    /// type writes it; absent in records written before health checks).
    #[serde(default)]
    pub health: Option<model::Health>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvDoc {
    pub name: String,
    pub value: String,
}

impl ContainerDoc {
    /// The container of component `c` of application `app`; an error when a name, the image
    /// or an environment value does not fit the wire.
    pub fn new(app: &str, c: &model::Component) -> Result<ContainerDoc, WireError> {
        ContainerDoc::named(app, c, &format!("{app}.{}", c.name))
    }

    /// [`ContainerDoc::new`] with the container name `name` (a rollout's second copy).
    pub fn named(app: &str, c: &model::Component, name: &str) -> Result<ContainerDoc, WireError> {
        let r = c.resources.unwrap_or_default();
        let doc = ContainerDoc {
            name: name.into(),
            app: app.into(),
            component: c.name.clone(),
            image: c.image.clone(),
            cpu_millis: r.cpu_millis,
            memory_mb: r.memory_mb,
            env: [("ACOA_APP", app), ("ACOA_COMPONENT", c.name.as_str())]
                .into_iter()
                .map(|(k, v)| EnvDoc {
                    name: k.into(),
                    value: v.into(),
                })
                .collect(),
            health: c.health.clone(),
        };
        doc.to_wire()?;
        Ok(doc)
    }

    pub fn to_wire(&self) -> Result<ContainerSpec, WireError> {
        let mut env = heapless::Vec::new();
        for e in &self.env {
            env.push(EnvVar {
                name: wire::bounded("env name", &e.name)?,
                value: wire::bounded("env value", &e.value)?,
            })
            .map_err(|_| WireError::TooMany {
                field: "env",
                max: wire::MAX_ENV,
            })?;
        }
        Ok(ContainerSpec {
            name: wire::name(&self.name)?,
            app: wire::name(&self.app)?,
            component: wire::name(&self.component)?,
            image: wire::bounded("image", &self.image)?,
            cpu_millis: self.cpu_millis,
            memory_mb: self.memory_mb,
            env,
            health: self
                .health
                .as_ref()
                .map(|h| wire::HealthSpec::from_model(h).map(Box::new))
                .transpose()?,
        })
    }

    pub fn from_wire(s: &ContainerSpec) -> ContainerDoc {
        ContainerDoc {
            name: s.name.to_string(),
            app: s.app.to_string(),
            component: s.component.to_string(),
            image: s.image.to_string(),
            cpu_millis: s.cpu_millis,
            memory_mb: s.memory_mb,
            env: s
                .env
                .iter()
                .map(|e| EnvDoc {
                    name: e.name.to_string(),
                    value: e.value.to_string(),
                })
                .collect(),
            health: s.health.as_ref().map(|h| h.to_model()),
        }
    }
}

impl DesiredDoc {
    /// The bounded wire value, built in place on the heap (it is large).
    pub fn to_wire(&self) -> Result<Box<DesiredState>, WireError> {
        let mut d = Box::new(DesiredState {
            node: wire::name(&self.node)?,
            generation: self.generation,
            term: self.term,
            containers: heapless::Vec::new(),
        });
        for c in &self.containers {
            d.containers
                .push(c.to_wire()?)
                .map_err(|_| WireError::TooMany {
                    field: "containers",
                    max: wire::MAX_CONTAINERS,
                })?;
        }
        Ok(d)
    }

    pub fn from_wire(d: &DesiredState) -> DesiredDoc {
        DesiredDoc {
            node: d.node.to_string(),
            generation: d.generation,
            term: d.term,
            containers: d.containers.iter().map(ContainerDoc::from_wire).collect(),
        }
    }
}

/// Counters that must survive a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub peer_generation: u64,
}

/// Everything the control plane keeps across restarts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub apps: BTreeMap<String, AppRecord>,
    pub desired: BTreeMap<String, DesiredDoc>,
    pub nodes: BTreeMap<String, NodeInfo>,
    pub meta: Meta,
    /// Per application, its revisions and rollout (absent in stores written before them).
    pub history: BTreeMap<String, History>,
}

impl Snapshot {
    /// The snapshot of the records a store read, each keyed by its name.
    pub fn from_records(
        apps: Vec<AppRecord>,
        desired: Vec<DesiredDoc>,
        nodes: Vec<NodeInfo>,
        meta: Meta,
    ) -> Snapshot {
        Snapshot {
            apps: apps.into_iter().map(|a| (a.name.clone(), a)).collect(),
            desired: desired.into_iter().map(|d| (d.node.clone(), d)).collect(),
            nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
            meta,
            history: BTreeMap::new(),
        }
    }

    /// The same snapshot with these histories.
    pub fn with_history(mut self, history: Vec<History>) -> Snapshot {
        self.history = history.into_iter().map(|h| (h.app.clone(), h)).collect();
        self
    }
}

/// The retained document that deletes application `app` (published on its definition topic,
/// so that the last retained message there says what should exist, even when the control
/// plane is not running when it is published).
pub fn tombstone(app: &str) -> Vec<u8> {
    format!("deleted: {app}\n").into_bytes()
}

/// Whether `payload`, published on `app`'s definition topic, deletes it: empty, or
/// [`tombstone`]`(app)` (surrounding white space ignored).
pub fn is_deletion(app: &str, payload: &[u8]) -> bool {
    if payload.is_empty() {
        return true;
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return false;
    };
    text.trim()
        .strip_prefix("deleted:")
        .is_some_and(|rest| rest.trim() == app)
}

/// A request to go back to an earlier revision of application `app`, published (not retained)
/// on its definition topic by `cloud-broker rollback`: `rollback: {app}` (to the last good
/// revision before the one that runs, or, during a rollout, to the one it started from) or
/// `rollback: {app} to {revision}`.
pub fn rollback_request(app: &str, to: Option<u64>) -> Vec<u8> {
    match to {
        Some(n) => format!("rollback: {app} to {n}\n").into_bytes(),
        None => format!("rollback: {app}\n").into_bytes(),
    }
}

/// What `payload`, published on `app`'s definition topic, asks when it is a
/// [`rollback_request`]: `Some(None)` the last good revision, `Some(Some(n))` revision `n`.
pub fn is_rollback(app: &str, payload: &[u8]) -> Option<Option<u64>> {
    let text = std::str::from_utf8(payload).ok()?;
    let rest = text.trim().strip_prefix("rollback:")?.trim();
    let mut words = rest.split_whitespace();
    if words.next()? != app {
        return None;
    }
    match (words.next(), words.next(), words.next()) {
        (None, _, _) => Some(None),
        (Some("to"), Some(n), None) => n.parse().ok().map(Some),
        _ => None,
    }
}

/// What the engine asks to be made durable, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum PersistOp {
    PutApp(Box<AppRecord>),
    DeleteApp(String),
    PutDesired(Box<DesiredDoc>),
    PutNode(Box<NodeInfo>),
    PutMeta(Meta),
    /// An application's revisions and rollout ([`PersistOp::DeleteApp`] deletes them too).
    PutHistory(Box<History>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(name: &str, image: &str) -> model::Component {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "image": image,
            "resources": {"cpu_millis": 250, "memory_mb": 64},
        }))
        .unwrap()
    }

    #[test]
    fn a_desired_doc_has_the_json_shape_of_the_wire_desired_state() {
        let doc = DesiredDoc {
            node: "n1".into(),
            generation: 3,
            term: 7,
            containers: vec![ContainerDoc::new("shop", &component("db", "pg:16")).unwrap()],
        };
        let wire = doc.to_wire().unwrap();
        let as_wire = serde_json::to_value(&*wire).unwrap();
        assert_eq!(serde_json::to_value(&doc).unwrap(), as_wire);
        let back: DesiredDoc = serde_json::from_value(as_wire).unwrap();
        assert_eq!(back, doc);
        assert_eq!(DesiredDoc::from_wire(&wire), doc);
        assert_eq!(doc.containers[0].name, "shop.db");
        assert_eq!(doc.containers[0].env[1].value, "db");
    }

    #[test]
    fn a_rollback_request_reads_back_for_its_own_application_only() {
        assert_eq!(
            is_rollback("shop", &rollback_request("shop", None)),
            Some(None)
        );
        assert_eq!(
            is_rollback("shop", &rollback_request("shop", Some(3))),
            Some(Some(3))
        );
        assert_eq!(is_rollback("shop2", &rollback_request("shop", None)), None);
        assert_eq!(is_rollback("shop", b"rollback: shop to x"), None);
        assert_eq!(is_rollback("shop", b"rollback: shop to 3 4"), None);
        assert_eq!(is_rollback("shop", b"application: shop\n"), None);
    }

    #[test]
    fn a_tombstone_deletes_its_own_application_only() {
        assert!(is_deletion("shop", &tombstone("shop")));
        assert!(is_deletion("shop", b""));
        assert!(is_deletion("shop", b"  deleted:   shop \n"));
        assert!(!is_deletion("shop", &tombstone("shop2")));
        assert!(!is_deletion("shop", b"application: shop\n"));
        assert!(!is_deletion("shop", b"\xff\xfe"));
    }

    #[test]
    fn a_container_that_does_not_fit_the_wire_is_refused_when_built() {
        let long = format!("registry/{}:1", "x".repeat(300));
        let e = ContainerDoc::new("shop", &component("db", &long)).unwrap_err();
        assert!(
            matches!(e, WireError::TooLong { field: "image", .. }),
            "{e}"
        );
        let too_many = DesiredDoc {
            node: "n1".into(),
            generation: 1,
            term: 0,
            containers: vec![
                ContainerDoc::new("shop", &component("db", "pg:16")).unwrap();
                wire::MAX_CONTAINERS + 1
            ],
        };
        assert!(too_many.to_wire().is_err());
    }
}
