//! Kubernetes' resource scores, the baselines of paper 002, implemented as in the Kubernetes
//! source of the paper's time (v1.18–v1.20, `pkg/scheduler/framework/plugins/noderesources/`):
//!
//! * `NodeResourcesLeastAllocated` (the framework form of the older `LeastRequestedPriority`):
//!   per resource `((allocatable − requested) · MaxNodeScore) / allocatable` in integer arithmetic
//!   (0 if allocatable is 0 or requested exceeds it), then the weighted average over CPU and memory
//!   with the default weights 1 and 1, again an integer division: `(cpu + mem) / 2`.
//! * `NodeResourcesBalancedAllocation` (the older `BalancedResourceAllocation`):
//!   `cpuFraction = requested/allocatable` (1 if allocatable is 0), likewise memory; 0 if either
//!   fraction is ≥ 1, else `int64((1 − |cpuFraction − memFraction|) · MaxNodeScore)`.
//!   (From v1.22 on, kubernetes/kubernetes PR #101946, this became `1 − std` over the configured
//!   resources, std = |a − b|/2 for two; [`balanced_allocation_v122`] has that form for
//!   comparison, the simulation uses the v1.20 one.)
//!
//! `MaxNodeScore` is 100 in the scheduling framework ([`MAX_NODE_SCORE`]); the legacy priority
//! functions (≤ v1.17) used `MaxPriority` = 10 ([`MAX_PRIORITY`]); both are accepted.
//! "requested" is what the pods already on the node request plus the incoming pod's request.
//! Kubernetes substitutes 100 millicores / 200 MiB for a pod that requests nothing; our pods
//! always request, so that rule never applies here.
//!
//! Filtering is `NodeResourcesFit`: the pod must fit in CPU, memory and ephemeral storage (our
//! disk metric). Bandwidth and I/O rate are not resources Kubernetes knows, so the baselines
//! neither check nor score them. Node selection among equal top scores is random in Kubernetes
//! (`selectHost`, reservoir sampling); [`select`] breaks ties by lowest index instead, and
//! [`select_host`] reproduces the reservoir sampling with a caller-supplied random source.

use super::{fits_one, Metric, NodeUtil, PodRequest};

/// `framework.MaxNodeScore` (scheduling framework, v1.17+).
pub const MAX_NODE_SCORE: i64 = 100;
/// `schedulerapi.MaxPriority` (legacy priority functions, up to v1.17).
pub const MAX_PRIORITY: i64 = 10;

/// Which Kubernetes score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeScore {
    LeastAllocated,
    BalancedAllocation,
}

/// `leastRequestedScore(requested, capacity)`.
pub fn least_requested_score(requested: i64, capacity: i64, max_score: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    ((capacity - requested) * max_score) / capacity
}

/// LeastAllocated over CPU and memory with weights 1 and 1: `requested` and `allocatable` are
/// `[cpu, memory]`.
pub fn least_allocated(requested: [i64; 2], allocatable: [i64; 2], max_score: i64) -> i64 {
    let cpu = least_requested_score(requested[0], allocatable[0], max_score);
    let mem = least_requested_score(requested[1], allocatable[1], max_score);
    (cpu + mem) / 2
}

/// `fractionOfCapacity(requested, capacity)`.
pub fn fraction_of_capacity(requested: i64, capacity: i64) -> f64 {
    if capacity == 0 {
        return 1.0;
    }
    requested as f64 / capacity as f64
}

/// BalancedAllocation (v1.18–v1.20 form) over `[cpu, memory]`.
pub fn balanced_allocation(requested: [i64; 2], allocatable: [i64; 2], max_score: i64) -> i64 {
    let cpu = fraction_of_capacity(requested[0], allocatable[0]);
    let mem = fraction_of_capacity(requested[1], allocatable[1]);
    if cpu >= 1.0 || mem >= 1.0 {
        return 0;
    }
    let diff = (cpu - mem).abs();
    ((1.0 - diff) * max_score as f64) as i64
}

/// BalancedAllocation (v1.22+ form): fractions capped at 1, `(1 − std) · max_score`.
pub fn balanced_allocation_v122(requested: &[i64], allocatable: &[i64], max_score: i64) -> i64 {
    let fractions: Vec<f64> = requested
        .iter()
        .zip(allocatable)
        .filter(|(_, &a)| a != 0)
        .map(|(&r, &a)| (r as f64 / a as f64).min(1.0))
        .collect();
    let std = match fractions.len() {
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n if n > 2 => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
        _ => 0.0,
    };
    ((1.0 - std) * max_score as f64) as i64
}

/// `NodeResourcesFit` on the resources Kubernetes knows: CPU, memory, ephemeral storage (disk).
pub fn fits(node: &NodeUtil, pod: &PodRequest) -> bool {
    [Metric::Cpu, Metric::Memory, Metric::Disk]
        .iter()
        .all(|&m| {
            let j = m as usize;
            fits_one(node.used[j], pod.demand[j], node.capacity[j])
        })
}

/// The score of one node for `pod` (requested = node's use + the pod's request). Quantities are
/// rounded to integers, as Kubernetes' are (millicores, bytes; any integral unit gives the same
/// result since only ratios enter).
pub fn score(node: &NodeUtil, pod: &PodRequest, which: KubeScore, max_score: i64) -> i64 {
    let c = Metric::Cpu as usize;
    let m = Metric::Memory as usize;
    let requested = [
        (node.used[c] + pod.demand[c]).round() as i64,
        (node.used[m] + pod.demand[m]).round() as i64,
    ];
    let allocatable = [
        node.capacity[c].round() as i64,
        node.capacity[m].round() as i64,
    ];
    match which {
        KubeScore::LeastAllocated => least_allocated(requested, allocatable, max_score),
        KubeScore::BalancedAllocation => balanced_allocation(requested, allocatable, max_score),
    }
}

/// Scores of the nodes where `pod` fits, as `(node index, score)` in index order.
pub fn scores(
    nodes: &[NodeUtil],
    pod: &PodRequest,
    which: KubeScore,
    max_score: i64,
) -> Vec<(usize, i64)> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| fits(n, pod))
        .map(|(i, n)| (i, score(n, pod, which, max_score)))
        .collect()
}

/// The highest-scoring feasible node (framework scores, max 100), lowest index among equals.
pub fn select(nodes: &[NodeUtil], pod: &PodRequest, which: KubeScore) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    for (i, s) in scores(nodes, pod, which, MAX_NODE_SCORE) {
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

/// Kubernetes' `selectHost`: the first maximum, replaced by each later equal maximum with
/// probability 1/count (reservoir sampling). `below(n)` must return a uniform integer in `0..n`.
pub fn select_host(scores: &[(usize, i64)], mut below: impl FnMut(u64) -> u64) -> Option<usize> {
    let (&(first, first_score), rest) = scores.split_first()?;
    let (mut selected, mut max, mut count) = (first, first_score, 1u64);
    for &(i, s) in rest {
        if s > max {
            (selected, max, count) = (i, s, 1);
        } else if s == max {
            count += 1;
            if below(count) == 0 {
                selected = i;
            }
        }
    }
    Some(selected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_requested_matches_the_kubernetes_formula() {
        // Node 4000m / 10000 MiB, requested 3000m / 5000 MiB (with the pod):
        // cpu ((4000−3000)·100)/4000 = 25, mem ((10000−5000)·100)/10000 = 50, (25+50)/2 = 37 (integer).
        assert_eq!(
            least_allocated([3000, 5000], [4000, 10000], MAX_NODE_SCORE),
            37
        );
        // Legacy MaxPriority 10: cpu 1000·10/4000 = 2 (2.5 truncated), mem 5, (2+5)/2 = 3.
        assert_eq!(
            least_allocated([3000, 5000], [4000, 10000], MAX_PRIORITY),
            3
        );
        // Over capacity and zero capacity score 0.
        assert_eq!(least_requested_score(5000, 4000, MAX_NODE_SCORE), 0);
        assert_eq!(least_requested_score(0, 0, MAX_NODE_SCORE), 0);
        // Empty node, tiny pod: ((4000−1)·100)/4000 = 99 (99.975 truncated).
        assert_eq!(least_requested_score(1, 4000, MAX_NODE_SCORE), 99);
    }

    #[test]
    fn balanced_allocation_matches_the_kubernetes_formula() {
        // cpu 3000/4000 = 0.75, mem 5000/10000 = 0.5: (1 − 0.25)·100 = 75.
        assert_eq!(
            balanced_allocation([3000, 5000], [4000, 10000], MAX_NODE_SCORE),
            75
        );
        // Legacy: (1 − 0.25)·10 = 7.5 → 7.
        assert_eq!(
            balanced_allocation([3000, 5000], [4000, 10000], MAX_PRIORITY),
            7
        );
        // cpu 1000/3000 = 0.333…, mem 0: (1 − 0.333…)·100 = 66.66… → 66.
        assert_eq!(
            balanced_allocation([1000, 0], [3000, 10000], MAX_NODE_SCORE),
            66
        );
        // A fraction at or above 1 scores 0, even when perfectly balanced.
        assert_eq!(
            balanced_allocation([4000, 10000], [4000, 10000], MAX_NODE_SCORE),
            0
        );
        // v1.22 form: std of (0.75, 0.5) = 0.125 → 87; three fractions (0.2, 0.4, 0.6):
        // mean 0.4, std √(0.08/3) = 0.163299 → 83.
        assert_eq!(
            balanced_allocation_v122(&[3000, 5000], &[4000, 10000], 100),
            87
        );
        assert_eq!(balanced_allocation_v122(&[2, 4, 6], &[10, 10, 10], 100), 83);
    }

    fn node(cpu: f64, mem: f64, used_cpu: f64, used_mem: f64) -> NodeUtil {
        let mut n = NodeUtil::new([cpu, mem, 100.0, 100.0, 100.0]);
        n.used[0] = used_cpu;
        n.used[1] = used_mem;
        n
    }

    #[test]
    fn select_uses_cpu_memory_and_disk_only() {
        let pod = PodRequest {
            demand: [1000.0, 1000.0, 50.0, 10.0, 50.0],
        };
        let mut busy_bandwidth = node(4000.0, 4000.0, 0.0, 0.0);
        busy_bandwidth.used[Metric::Bandwidth as usize] = 100.0; // full, but Kubernetes cannot see it
        let half = node(4000.0, 4000.0, 2000.0, 2000.0);
        let nodes = [half, busy_bandwidth];
        // LeastAllocated: half → 25, empty → 75: picks the node with full bandwidth.
        assert_eq!(
            scores(&nodes, &pod, KubeScore::LeastAllocated, 100),
            vec![(0, 25), (1, 75)]
        );
        assert_eq!(select(&nodes, &pod, KubeScore::LeastAllocated), Some(1));
        // Disk is checked (ephemeral storage).
        let mut no_disk = nodes[1];
        no_disk.used[Metric::Disk as usize] = 95.0;
        assert!(!fits(&no_disk, &pod));
        // BalancedAllocation: both perfectly balanced (100), tie → lowest index.
        assert_eq!(select(&nodes, &pod, KubeScore::BalancedAllocation), Some(0));
    }

    #[test]
    fn select_host_is_reservoir_sampling() {
        let s = [(0, 5), (1, 9), (2, 9), (3, 1), (4, 9)];
        // below(n) = 0 always: every later tie replaces → last maximum.
        assert_eq!(select_host(&s, |_| 0), Some(4));
        // below(n) = n − 1: never replaces → first maximum.
        assert_eq!(select_host(&s, |n| n - 1), Some(1));
        assert_eq!(select_host(&[], |_| 0), None);
    }
}
