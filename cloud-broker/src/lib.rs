//! The ACOA control plane (`cloud-broker`): embedded MQTT broker (or an external one), node
//! inventory and identities, crash-safe store, live infrastructure model, system scheduler,
//! descheduler and desired-state publisher.
//!
//! Invariants:
//! - Decisions are pure: [`engine::Engine`] takes events (already verified messages, ticks,
//!   scheduling results) and returns actions (persist, publish, schedule); it does no I/O and
//!   is tested with plain values. [`ingest::classify`] (topic + payload + enrolled keys → event or
//!   reason for dropping) and [`engine::run_job`] (a placement computation) are pure too.
//!   [`serve`] is the thin async loop that does the I/O.
//! - Only the control plane embeds the broker ([`broker`]); agents and the CLI are clients.
//! - Every desired state and peer list leaves signed with the control plane's key; a report is
//!   used only if it verifies against the key enrolled for the node the topic names and its body
//!   names that same node.
//! - A desired state is persisted before it is published, its generation strictly increases per
//!   node, and an unchanged desired state is never published again.
#![forbid(unsafe_code)]

pub mod background_threads;
pub mod broker;
pub mod brokers;
pub mod cli;
pub mod conn;
pub mod definitions;
pub mod dispatch;
pub mod engine;
pub mod identity;
pub mod ingest;
pub mod intake;
pub mod latest;
pub mod mosquitto;
pub mod observe;
pub mod observed;
pub mod records;
pub mod sched;
pub mod serve;
pub mod service_times;
pub mod status;
pub mod store;
pub mod testkit;
pub mod warm;
pub mod workers;

/// The system clock in Unix milliseconds (0 if it is set before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
