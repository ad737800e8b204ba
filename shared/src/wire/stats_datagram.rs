//! The workload stats datagram's limits, shared by its two sides: the agent that reads it
//! (edge-agent `stats`) and the `Reporter` workloads send it with (hil-tests/src/stats.rs, built
//! with plain rustc and without dependencies, includes this file by path). Constants only, no
//! `use` and no crate paths, so that it compiles on its own in either place.

/// The datagram's format version.
pub const VERSION: u32 = 1;
/// The largest datagram the agent accepts, bytes.
pub const MAX_DATAGRAM: usize = 1024;
/// Downstream components one component's traffic is counted and reported to, at most: the
/// reporter counts no more, the agent reads no more.
pub const MAX_DOWNSTREAM: usize = 16;
