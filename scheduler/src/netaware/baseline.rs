//! The network-unaware baseline: Kubernetes' default scoring of the paper's time
//! (v1.18–v1.21 scheduling framework, `MaxNodeScore` = 100), ignoring the network.
//!
//! - Filter (`NodeResourcesFit`): schedulable, requested CPU and memory with the pod at most the
//!   capacity.
//! - `NodeResourcesLeastAllocated`: per resource `(capacity − requested) · 100 / capacity` in
//!   integer arithmetic, then the mean of CPU and memory (integer division).
//! - `NodeResourcesBalancedAllocation`: 0 if the CPU or memory fraction is ≥ 1, else
//!   `int64((1 − |cpuFraction − memFraction|) · 100)`.
//! - Score = the sum of the two (both plugins with weight 1); the highest wins. Kubernetes breaks
//!   ties at random (`selectHost`); here the lowest node index wins, to stay deterministic.
//!
//! "Requested" is the background plus the components already placed plus the one being placed,
//! each with its *measured* use standing in for its request (generous to the baseline: real
//! requests are usually guesses). Components are placed in declaration order, as the pods of a
//! manifest are created.

use super::{NetError, NetOutcome, Snapshot};

/// `NodeResourcesLeastAllocated` for one node (0..=100).
pub fn least_allocated(requested: (f64, f64), capacity: (f64, f64)) -> i64 {
    let one = |req: f64, cap: f64| -> i64 {
        let (req, cap) = (req.round() as i64, cap.round() as i64);
        if cap == 0 || req > cap {
            return 0;
        }
        (cap - req) * 100 / cap
    };
    (one(requested.0, capacity.0) + one(requested.1, capacity.1)) / 2
}

/// `NodeResourcesBalancedAllocation` for one node (0..=100).
pub fn balanced_allocation(requested: (f64, f64), capacity: (f64, f64)) -> i64 {
    let cpu = requested.0.round() / capacity.0.round();
    let mem = requested.1.round() / capacity.1.round();
    if cpu >= 1.0 || mem >= 1.0 {
        return 0;
    }
    ((1.0 - (cpu - mem).abs()) * 100.0) as i64
}

/// The baseline's score of component `c` on node `n` (`None` if it does not fit).
pub fn score(s: &Snapshot, assignment: &[Option<usize>], c: usize, n: usize) -> Option<i64> {
    let node = &s.nodes[n];
    if !node.schedulable || !s.is_allowed(c, n) {
        return None;
    }
    let loads = s.loads(assignment, Some(c));
    let req = (
        loads[n].0 + s.components[c].cpu,
        loads[n].1 + s.components[c].memory,
    );
    let cap = (node.cpu_capacity, node.memory_capacity);
    if req.0 > cap.0 || req.1 > cap.1 {
        return None;
    }
    Some(least_allocated(req, cap) + balanced_allocation(req, cap))
}

/// Places every component in declaration order on its highest-scoring node.
pub fn place(s: &Snapshot) -> Result<NetOutcome, NetError> {
    s.validate()?;
    Ok(super::place_in_order(
        s,
        0..s.components.len(),
        |assignment, c| {
            let mut best: Option<(usize, i64)> = None;
            for n in 0..s.nodes.len() {
                if let Some(v) = score(s, assignment, c, n) {
                    if best.is_none_or(|(_, b)| v > b) {
                        best = Some((n, v));
                    }
                }
            }
            best.map(|(n, _)| n)
        },
    ))
}
