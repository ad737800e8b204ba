//! Shared vocabulary of ACOA: the infrastructure and workload models of
//! `spec/model.md` (with their validation), the wire messages that cross MQTT,
//! and the topic names.
//!
//! Invariants: no network or process I/O here (reading a model file is the one
//! exception, in [`model::load_cluster`] / [`model::load_application`]); wire types
//! are separate from domain types, versioned, and bounded in size.
#![forbid(unsafe_code)]

pub mod coords;
pub mod geo;
pub mod jobs;
pub mod model;
pub mod rng;
pub mod topics;
pub mod wire;

pub use model::{Application, Cluster, ModelError};
