//! The seeded generator, from `acoa-shared` (one for every crate).

pub use acoa_shared::rng::SplitMix64;
