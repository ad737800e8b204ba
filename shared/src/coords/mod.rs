//! Network coordinates: each agent keeps a Vivaldi coordinate with a height (Dabek et al.,
//! SIGCOMM 2004), computed from its own probe samples and filtered as in "Network Coordinates
//! in the Wild" (Ledlie, Gardner and Seltzer, NSDI 2007); the control plane estimates the
//! latency of pairs nobody measures from two reported coordinates.
//!
//! - [`vivaldi`]: the coordinate ([`Coord`]: a point in `D` dimensions, a height, an error
//!   estimate) and one node's state ([`VivaldiNode`]): the adaptive-timestep update (constants
//!   `cc`, `ce`), the per-peer moving-median latency filter ([`filter::MpFilter`]) and the
//!   application-level update filter ([`filter::RelativeFilter`], RELATIVE). Fixed-size
//!   (`heapless` per-peer table), no heap, no clock, no I/O: this is the agent's side.
//! - [`neighbours`]: the peers a node probes (own group first within a bounded share, then the
//!   nearest by coordinates, then a few random ones; at most `k`): the control plane's side.
//! - [`estimate`]: latency of an unmeasured pair from two coordinates, and the rule for its
//!   jitter and success rate from each endpoint's measured links; every value is marked
//!   [`estimate::Known::Measured`] or [`estimate::Known::Estimated`].
//!
//! Units: milliseconds of one-way latency, as the agents report links (`clock = "free"`: half
//! the round trip). Coordinates model a symmetric distance; a directed link's two directions
//! estimate one value.
//!
//! Invariants: pure and deterministic (randomness only from [`SplitMix64`] with an explicit
//! seed); a [`Coord`] is always finite, its height and error non-negative, whatever samples
//! come in (a non-finite or negative sample is refused, never folded in).

pub mod estimate;
pub mod filter;
pub mod near;
pub mod neighbours;
pub mod vivaldi;

#[cfg(test)]
mod tests;

pub use estimate::{
    estimate_in_group_ms, estimate_latency_ms, medians_between, EndpointSummary, Groups, Known,
    LinkView, MeasuredLink,
};
pub use filter::{MpFilter, PeerFilters, RelativeFilter};
pub use neighbours::{
    select_all_neighbours, select_neighbours, Member, NeighbourMix, GROUP_SPREAD, MAP_PER_GROUP,
};
pub use vivaldi::{Coord, VivaldiConfig, VivaldiNode};

/// Dimensions of the coordinates the agents report (plus the height). In the simulation
/// (`coords-sim`, 2,000 nodes, k = 32) 2 dimensions gave a median relative error of 7.3 %, 3
/// and 4 both 6.9 %: 3 is the smallest of the best.
pub const DIMS: usize = 3;

/// The agent's coordinate state: [`DIMS`] dimensions, as many filtered peers as the prober
/// keeps (256), a moving median over 8 samples per peer.
pub type AgentCoords = VivaldiNode<DIMS, 256, 8>;

/// Why a coordinate or a sample was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum CoordError {
    #[error("coordinate component {0} is not finite")]
    NotFinite(usize),
    #[error("height {0} is negative or not finite")]
    BadHeight(f64),
    #[error("error estimate {0} is negative or not finite")]
    BadError(f64),
    #[error("latency sample {0} ms is negative or not finite")]
    BadSample(f64),
    #[error("latency sample {0} ms is above the largest accepted ({1} ms)")]
    SampleTooLarge(f64, f64),
}

pub use crate::rng::SplitMix64;

/// The Euclidean distance between two points (the coordinates', the map's, TOPSIS's: one
/// formula, summed in one order).
pub fn euclidean<const N: usize>(a: &[f64; N], b: &[f64; N]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}
