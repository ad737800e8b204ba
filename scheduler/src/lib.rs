//! Placement engine (work in progress).
