//! ACOA edge agent: the node daemon.
//!
//! - [`config`]: TOML configuration overridden by flags.
//! - [`reconciler`]: the pure state machine that decides what to do with containers.
//! - [`runtime`]: Podman (REST API) and k3s (pod documents; client behind feature `k3s`).
//! - [`prober`]: UDP echo prober and responder, per-peer latency, jitter, success rate.
//! - [`report`]: node reports from `sysinfo`.
//! - [`stats`]: workload traffic stats datagrams and per-component usage messages.
//! - [`store`]: node key and persisted documents on disk.
//! - [`brokers`]: which broker of the agent's list it talks to (rotation, backoff).
//! - [`presence`]: the signed presence (online marker and last will) of each connection.
//! - [`agent`]: the thin async driver (MQTT, loops, threads).
#![forbid(unsafe_code)]

pub mod agent;
pub mod brokers;
pub mod config;
pub mod presence;
pub mod prober;
pub mod reconciler;
pub mod report;
pub mod runtime;
pub mod stats;
pub mod store;
