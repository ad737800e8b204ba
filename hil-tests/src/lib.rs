//! The ACOA hardware-in-the-loop testbed.
//!
//! - [`emu`]: a user-space wide-area network emulator. Every emulated node is a network
//!   namespace with one TUN device (`emu0`) that the emulator owns; IP packets between nodes are
//!   forwarded after the configured per-direction delay, with jitter and loss (this kernel has no
//!   netem). [`emu::Testbed`] brings a set of nodes up and tears them down on drop.
//! - [`linktable`]: the per-direction link parameters and how delays are drawn.
//! - [`netns`]: the namespace plumbing (`ip netns`, `ip link`, entering a namespace from a thread).
//! - [`control`]: the line protocol of the emulator's control socket (`linkemu set ...`).
//! - [`stats`]: a workload's traffic counters reported to its node's agent (`ACOA_AGENT_STATS`).
#![forbid(unsafe_code)]

pub mod agents;
pub mod bench;
pub mod control;
pub mod coordbed;
pub mod dynamic;
pub mod emu;
pub mod fidelity;
pub mod forwarder;
pub mod linktable;
pub mod live;
pub mod named_addr;
pub mod netaware_exp;
pub mod netns;
pub mod partition;
pub mod placement;
pub mod probe;
pub mod railbed;
pub mod report;
pub mod rollouts;
pub mod stats;
pub mod tunnels;
pub mod workload;
pub mod workload_ctl;

pub use emu::{unavailable_reason, EmuError, Testbed, TestbedBuilder};
pub use linktable::LinkSpec;

/// Logs of the testbed's binaries: to standard error, at `RUST_LOG`'s level (else `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}
