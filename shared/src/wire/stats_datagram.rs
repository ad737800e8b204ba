//! The workload stats datagram's limits, shared by its two sides: the agent that reads it
//! (edge-agent `stats`) and the `Reporter` workloads send it with (hil-tests/src/stats.rs, built
//! with plain rustc and without dependencies, includes this file by path). Constants only, no
//! `use` and no crate paths, so that it compiles on its own in either place.

/// The datagram's format version. Version 2 adds the container's name (`container`, from
/// `ACOA_CONTAINER`) and its service time (`service`: cumulative microseconds and messages).
pub const VERSION: u32 = 2;
/// The versions before that the agent still reads (version 1: traffic only).
pub const OLD_VERSIONS: &[u32] = &[1];
/// The largest datagram the agent accepts, bytes.
pub const MAX_DATAGRAM: usize = 1024;
/// Downstream components one component's traffic is counted and reported to, at most: the
/// reporter counts no more, the agent reads no more.
pub const MAX_DOWNSTREAM: usize = 16;
/// The longest mean service time per message the agent reports, ms (one minute): a longer one
/// is reported as this (a workload that slow breaks any gate anyway).
pub const MAX_SERVICE_MS: f32 = 60_000.0;
