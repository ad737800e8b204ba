//! Resource-aware node selection with combined-weight TOPSIS (paper 002, Zhang & Wang,
//! "Kubernetes scheduling algorithm of TOPSIS based on combined weight", Computer Systems &
//! Applications 31(1), 2022), and Kubernetes' LeastAllocated and BalancedAllocation scores as
//! baselines ([`kube`]).
//!
//! Five metrics per node: CPU, memory, bandwidth, disk and I/O rate. For one pod:
//! 1. filter: nodes where the pod does not fit in every metric are dropped;
//! 2. objective weights: entropy of the candidates' current utilisations ([`entropy`]);
//! 3. subjective weights: from an AHP pairwise comparison matrix ([`ahp`], CR < 0.1);
//! 4. combined weights: `w_j = s_j·o_j / Σ_k s_k·o_k` by default ([`Combination`]);
//! 5. TOPSIS ([`closeness`]) over the utilisations each candidate would have with the pod placed
//!    (cost criteria), plus one more cost criterion with weight [`Weights::balance`]: how much the
//!    pod changes the node's imbalance (standard deviation of its five utilisations, after minus
//!    before; negative when the pod fills the node's emptiest resources). This is our addition
//!    (the paper's "improved TOPSIS" is not specified in what we have of it); with `balance = 0`
//!    the decision is over the paper's five metrics only;
//! 6. the highest closeness wins; ties go to the lowest node index.
//!
//! [`app`]: `scheduler: topsis` in an application definition, the pod-by-pod flow over the
//! domain model (nodes' capacity and usage, components' requests, the ledger).
//!
//! Everything here is pure: plain values in, plain values out, no I/O.

// Index loops read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

pub mod ahp;
pub mod app;
pub mod closeness;
pub mod entropy;
pub mod kube;
#[cfg(feature = "sim")]
pub mod sim;

use closeness::Direction;

/// Number of metrics per node.
pub const METRICS: usize = 5;

/// One value per metric, in the order of [`Metric::ALL`].
pub type Vector = [f64; METRICS];

/// The five metrics TOPSIS scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    Cpu,
    Memory,
    Bandwidth,
    Disk,
    Io,
}

impl Metric {
    pub const ALL: [Metric; METRICS] = [
        Metric::Cpu,
        Metric::Memory,
        Metric::Bandwidth,
        Metric::Disk,
        Metric::Io,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Cpu => "cpu",
            Metric::Memory => "memory",
            Metric::Bandwidth => "bandwidth",
            Metric::Disk => "disk",
            Metric::Io => "io",
        }
    }
}

/// Errors of this layer (bad weights or matrices; a pod that fits nowhere is `None`, not an error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopsisError {
    #[error("pairwise comparison matrix is empty")]
    EmptyMatrix,
    #[error("pairwise comparison matrix is not square: {n} rows but row {row} has {len} entries")]
    NotSquare { n: usize, row: usize, len: usize },
    #[error("pairwise comparison matrix has {n} rows, at most {max} are supported")]
    MatrixTooLarge { n: usize, max: usize },
    #[error(
        "pairwise comparison matrix entry ({row}, {col}) is {value}, must be a positive number"
    )]
    NotPositive { row: usize, col: usize, value: f64 },
    #[error("pairwise comparison matrix is not reciprocal at ({row}, {col}): a[j][i] must be 1/a[i][j] and the diagonal 1")]
    NotReciprocal { row: usize, col: usize },
    #[error("pairwise comparison matrix is inconsistent: consistency ratio {cr:.3} >= 0.1")]
    Inconsistent { cr: f64 },
    #[error(
        "pairwise comparison matrix must be {want}x{want} (one row per metric), got {got} rows"
    )]
    WrongSize { want: usize, got: usize },
    #[error("invalid weights: {0}")]
    InvalidWeights(String),
}

/// A node as TOPSIS sees it: capacity and what is already in use, per metric (any units, the same
/// for capacity, use and pod demand of one metric).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeUtil {
    pub capacity: Vector,
    pub used: Vector,
}

/// What one pod needs, per metric, in the units of [`NodeUtil`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodRequest {
    pub demand: Vector,
}

/// Relative slack when checking `used + demand <= capacity`, so rounding does not reject an exact fit.
const FIT_EPSILON: f64 = 1e-9;

impl NodeUtil {
    pub fn new(capacity: Vector) -> Self {
        NodeUtil {
            capacity,
            used: [0.0; METRICS],
        }
    }

    /// Current utilisation per metric (used / capacity). A metric with no capacity counts as 0
    /// when nothing uses it and as 1 (full) otherwise.
    pub fn utilisation(&self) -> Vector {
        let mut u = [0.0; METRICS];
        for (j, u) in u.iter_mut().enumerate() {
            *u = ratio(self.used[j], self.capacity[j]);
        }
        u
    }

    /// Utilisation per metric if `pod` were placed here.
    pub fn utilisation_with(&self, pod: &PodRequest) -> Vector {
        let mut u = [0.0; METRICS];
        for (j, u) in u.iter_mut().enumerate() {
            *u = ratio(self.used[j] + pod.demand[j], self.capacity[j]);
        }
        u
    }

    /// Whether `pod` fits in every metric.
    pub fn fits(&self, pod: &PodRequest) -> bool {
        (0..METRICS).all(|j| fits_one(self.used[j], pod.demand[j], self.capacity[j]))
    }

    /// Adds the pod's demand to the node's use.
    pub fn place(&mut self, pod: &PodRequest) {
        for j in 0..METRICS {
            self.used[j] += pod.demand[j];
        }
    }

    /// The node's resource imbalance: population standard deviation of its five utilisations.
    pub fn imbalance(&self) -> f64 {
        imbalance(&self.utilisation())
    }
}

pub(crate) fn fits_one(used: f64, demand: f64, capacity: f64) -> bool {
    demand <= 0.0 || used + demand <= capacity * (1.0 + FIT_EPSILON)
}

fn ratio(used: f64, capacity: f64) -> f64 {
    if capacity > 0.0 {
        used / capacity
    } else if used > 0.0 {
        1.0
    } else {
        0.0
    }
}

/// Population standard deviation of a utilisation vector.
pub fn imbalance(u: &Vector) -> f64 {
    let mean = u.iter().sum::<f64>() / METRICS as f64;
    (u.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / METRICS as f64).sqrt()
}

/// How subjective (AHP) and objective (entropy) weights are combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Combination {
    /// `w_j = s_j·o_j / Σ_k s_k·o_k` (multiplicative synthesis, the usual combination in the
    /// combined-weight TOPSIS literature, paper 002 included): a metric weighs much only if the
    /// pod cares about it *and* the candidates differ on it. Falls back to `s` when Σ s·o = 0
    /// (all candidates identical, e.g. an empty cluster).
    Multiplicative,
    /// `w_j = α·s_j + (1 − α)·o_j` with α = `subjective_share` in [0, 1].
    Linear { subjective_share: f64 },
}

impl Combination {
    /// Combines two weight vectors that each sum to 1; the result sums to 1.
    pub fn combine(self, subjective: &Vector, objective: &Vector) -> Vector {
        match self {
            Combination::Multiplicative => {
                let mut w = [0.0; METRICS];
                for j in 0..METRICS {
                    w[j] = subjective[j] * objective[j];
                }
                let sum: f64 = w.iter().sum();
                if sum > 1e-15 {
                    w.map(|x| x / sum)
                } else {
                    *subjective
                }
            }
            Combination::Linear {
                subjective_share: a,
            } => {
                let mut w = [0.0; METRICS];
                for j in 0..METRICS {
                    w[j] = a * subjective[j] + (1.0 - a) * objective[j];
                }
                w
            }
        }
    }
}

/// Share of the imbalance-change criterion used by [`Weights::equal`] and [`Weights::from_ahp`].
/// Chosen from the sweep in BENCHMARKS.md ("Resource-aware scheduling (TOPSIS)"): more of it
/// lowers the imbalance *within* nodes (mean over ten seeds of the paper's setup: 1.40 % at 0,
/// 0.98 % at 0.05, 0.87 % at 0.2) but raises the spread of load *between* nodes (0.31 %, 1.55 %,
/// 4.28 %); 0.05 takes most of the first gain for little of the second.
pub const DEFAULT_BALANCE: f64 = 0.05;

/// Everything [`select`] needs besides the nodes and the pod.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// Subjective weights per metric (sum 1), usually from [`ahp::ahp`].
    pub subjective: Vector,
    pub combination: Combination,
    /// Weight in [0, 1) of the extra imbalance-change criterion; the five metrics share the rest.
    pub balance: f64,
}

impl Weights {
    /// Subjective weights given directly (non-negative, not all zero; normalised to sum 1).
    pub fn new(subjective: Vector) -> Result<Self, TopsisError> {
        if subjective.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
            return Err(TopsisError::InvalidWeights(format!(
                "subjective weights must be finite and non-negative, got {subjective:?}"
            )));
        }
        let sum: f64 = subjective.iter().sum();
        if sum <= 0.0 {
            return Err(TopsisError::InvalidWeights(
                "subjective weights are all zero".into(),
            ));
        }
        Ok(Weights {
            subjective: subjective.map(|w| w / sum),
            combination: Combination::Multiplicative,
            balance: DEFAULT_BALANCE,
        })
    }

    /// All metrics equally important.
    pub fn equal() -> Self {
        Weights {
            subjective: [1.0 / METRICS as f64; METRICS],
            combination: Combination::Multiplicative,
            balance: DEFAULT_BALANCE,
        }
    }

    /// Subjective weights from a 5×5 pairwise comparison matrix (rows and columns in the order
    /// of [`Metric::ALL`]); rejected if its consistency ratio is 0.1 or more.
    pub fn from_ahp(matrix: &[Vec<f64>]) -> Result<Self, TopsisError> {
        if matrix.len() != METRICS {
            return Err(TopsisError::WrongSize {
                want: METRICS,
                got: matrix.len(),
            });
        }
        let r = ahp::ahp(matrix)?;
        let mut s = [0.0; METRICS];
        s.copy_from_slice(&r.weights);
        Weights::new(s)
    }

    pub fn with_combination(mut self, combination: Combination) -> Self {
        self.combination = combination;
        self
    }

    pub fn with_balance(mut self, balance: f64) -> Self {
        self.balance = balance.clamp(0.0, 0.99);
        self
    }
}

/// One feasible node and its TOPSIS figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Index into the `nodes` slice.
    pub node: usize,
    /// Closeness coefficient in [0, 1].
    pub closeness: f64,
    /// Utilisation per metric with the pod placed.
    pub utilisation: Vector,
    /// Imbalance with the pod placed.
    pub imbalance: f64,
    /// Imbalance with the pod placed minus imbalance now (the sixth criterion).
    pub imbalance_change: f64,
}

/// The full decision, for logs and explanations.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// Entropy weights over the candidates' current utilisations.
    pub objective: Vector,
    /// Combined weights of the five metrics (sum 1, before the imbalance share is taken off).
    pub combined: Vector,
    /// Feasible nodes in index order.
    pub scored: Vec<Scored>,
    /// The chosen node: highest closeness, lowest index among equals; `None` if nothing fits.
    pub chosen: Option<usize>,
}

/// Scores every node where `pod` fits and picks one.
pub fn rank(nodes: &[NodeUtil], pod: &PodRequest, weights: &Weights) -> Ranking {
    let feasible: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].fits(pod)).collect();
    let current: Vec<Vector> = feasible.iter().map(|&i| nodes[i].utilisation()).collect();
    let objective = entropy::entropy_weights(&current);
    let combined = weights.combination.combine(&weights.subjective, &objective);

    let balance = weights.balance.clamp(0.0, 0.99);
    let mut w6 = [0.0; METRICS + 1];
    for j in 0..METRICS {
        w6[j] = combined[j] * (1.0 - balance);
    }
    w6[METRICS] = balance;

    let after: Vec<Vector> = feasible
        .iter()
        .map(|&i| nodes[i].utilisation_with(pod))
        .collect();
    let rows: Vec<[f64; METRICS + 1]> = after
        .iter()
        .zip(&current)
        .map(|(u, c)| {
            let mut r = [0.0; METRICS + 1];
            r[..METRICS].copy_from_slice(u);
            r[METRICS] = imbalance(u) - imbalance(c);
            r
        })
        .collect();
    let c = closeness::closeness(&rows, &w6, &[Direction::Cost; METRICS + 1]);

    let scored: Vec<Scored> = feasible
        .iter()
        .zip(&c)
        .zip(&rows)
        .map(|((&node, &closeness), row)| {
            let mut utilisation = [0.0; METRICS];
            utilisation.copy_from_slice(&row[..METRICS]);
            Scored {
                node,
                closeness,
                utilisation,
                imbalance: imbalance(&utilisation),
                imbalance_change: row[METRICS],
            }
        })
        .collect();
    let chosen = best(scored.iter().map(|s| (s.node, s.closeness)));
    Ranking {
        objective,
        combined,
        scored,
        chosen,
    }
}

/// The node TOPSIS picks for `pod`, or `None` if it fits nowhere. Deterministic: the highest
/// closeness wins and among equal closeness (within 1e-12) the lowest index.
pub fn select(nodes: &[NodeUtil], pod: &PodRequest, weights: &Weights) -> Option<usize> {
    rank(nodes, pod, weights).chosen
}

fn best(scores: impl Iterator<Item = (usize, f64)>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in scores {
        match best {
            Some((_, b)) if c <= b + 1e-12 => {}
            _ => best = Some((i, c)),
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(capacity: Vector, used: Vector) -> NodeUtil {
        NodeUtil { capacity, used }
    }

    #[test]
    fn filters_nodes_where_the_pod_does_not_fit() {
        let cap = [10.0; METRICS];
        let nodes = [
            node(cap, [9.5, 0.0, 0.0, 0.0, 0.0]), // cpu would be 10.5 > 10
            node(cap, [5.0, 5.0, 5.0, 5.0, 9.0]), // io would be exactly 10: fits
        ];
        let pod = PodRequest {
            demand: [1.0; METRICS],
        };
        let r = rank(&nodes, &pod, &Weights::equal());
        assert_eq!(r.scored.len(), 1);
        assert_eq!(r.chosen, Some(1));
        let full = [node(cap, [10.0; METRICS])];
        assert_eq!(select(&full, &pod, &Weights::equal()), None);
        assert_eq!(select(&[], &pod, &Weights::equal()), None);
    }

    #[test]
    fn worked_example_two_nodes() {
        // Capacity 10 everywhere, pod demand 1 in every metric, equal subjective weights,
        // balance share 0 so only the five utilisations count.
        // Node 0 uses (4,4,4,4,4), node 1 uses (2,6,4,4,4).
        // Current utilisations: rows (0.4,0.4,0.4,0.4,0.4) and (0.2,0.6,0.4,0.4,0.4).
        // Entropy: columns 3-5 are equal (d = 0); cpu p = (2/3, 1/3), memory p = (0.4, 0.6):
        //   e_cpu = (2/3·ln1.5 + 1/3·ln3)/ln2 = (0.270310 + 0.366204)/0.693147 = 0.918296, d = 0.081704
        //   e_mem = (0.4·ln2.5 + 0.6·ln(5/3))/ln2 = (0.366516 + 0.306495)/0.693147 = 0.970951, d = 0.029049
        //   o = (0.737711, 0.262289, 0, 0, 0); multiplicative with equal s: w = o.
        // After placing: node 0 (0.5,0.5,0.5,0.5,0.5), node 1 (0.3,0.7,0.5,0.5,0.5).
        // cpu column norm √(0.25+0.09) = 0.583095 → r = (0.857493, 0.514496)
        // mem column norm √(0.25+0.49) = 0.860233 → r = (0.581238, 0.813733)
        // v_cpu = (0.632582, 0.379549), v_mem = (0.152452, 0.213433); other columns weigh 0.
        // Node 0: D⁺ = 0.253033 (cpu), D⁻ = 0.060981 (mem), C = 0.060981/0.314014 = 0.194198
        // Node 1: D⁺ = 0.060981, D⁻ = 0.253033, C = 0.805802 → node 1.
        let cap = [10.0; METRICS];
        let nodes = [
            node(cap, [4.0; METRICS]),
            node(cap, [2.0, 6.0, 4.0, 4.0, 4.0]),
        ];
        let pod = PodRequest {
            demand: [1.0; METRICS],
        };
        let w = Weights::equal().with_balance(0.0);
        let r = rank(&nodes, &pod, &w);
        for (got, want) in r.objective.iter().zip([0.737711, 0.262289, 0.0, 0.0, 0.0]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
        assert!((r.scored[0].closeness - 0.194198).abs() < 1e-5);
        assert!((r.scored[1].closeness - 0.805802).abs() < 1e-5);
        assert_eq!(r.chosen, Some(1));
    }

    #[test]
    fn subjective_weight_steers_towards_the_pods_dominant_resource() {
        // Node 0 has spare CPU, node 1 spare memory. A CPU-heavy pod with CPU-dominant AHP weights
        // goes to node 0, a memory-heavy one with memory-dominant weights to node 1.
        let cap = [100.0; METRICS];
        let nodes = [
            node(cap, [20.0, 60.0, 40.0, 40.0, 40.0]),
            node(cap, [60.0, 20.0, 40.0, 40.0, 40.0]),
        ];
        let cpu_pod = PodRequest {
            demand: [10.0, 1.0, 1.0, 1.0, 1.0],
        };
        let mem_pod = PodRequest {
            demand: [1.0, 10.0, 1.0, 1.0, 1.0],
        };
        let cpu_w = Weights::from_ahp(&ahp::consistent_matrix(&[5.0, 1.0, 1.0, 1.0, 1.0])).unwrap();
        let mem_w = Weights::from_ahp(&ahp::consistent_matrix(&[1.0, 5.0, 1.0, 1.0, 1.0])).unwrap();
        assert_eq!(select(&nodes, &cpu_pod, &cpu_w), Some(0));
        assert_eq!(select(&nodes, &mem_pod, &mem_w), Some(1));
    }

    #[test]
    fn imbalance_change_criterion_prefers_the_node_the_pod_evens_out() {
        // Capacity 10, a pod demanding 1 of everything but CPU (0).
        // Node 0 is even (4,4,4,4,4): after (4,5,5,5,5)/10, imbalance 0 → 0.04, change +0.04.
        // Node 1 is CPU-heavy (8,3,3,3,3): after (8,4,4,4,4)/10, imbalance 0.2 → 0.16, change −0.04.
        // On the five utilisations alone node 0 is far better in CPU and slightly worse in the
        // other four: with balance 0 it wins; with a large balance share node 1 wins.
        let cap = [10.0; METRICS];
        let nodes = [
            node(cap, [4.0; METRICS]),
            node(cap, [8.0, 3.0, 3.0, 3.0, 3.0]),
        ];
        let pod = PodRequest {
            demand: [0.0, 1.0, 1.0, 1.0, 1.0],
        };
        let r = rank(&nodes, &pod, &Weights::equal().with_balance(0.9));
        assert!((r.scored[0].imbalance_change - 0.04).abs() < 1e-12);
        assert!((r.scored[1].imbalance_change + 0.04).abs() < 1e-12);
        assert!((r.scored[1].imbalance - 0.16).abs() < 1e-12);
        assert_eq!(r.chosen, Some(1));
        assert_eq!(
            select(&nodes, &pod, &Weights::equal().with_balance(0.0)),
            Some(0)
        );
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        let cap = [10.0; METRICS];
        let nodes = [node(cap, [3.0; METRICS]); 4];
        let pod = PodRequest {
            demand: [1.0; METRICS],
        };
        assert_eq!(select(&nodes, &pod, &Weights::equal()), Some(0));
        let mut nodes = nodes;
        nodes[0].used = [9.5; METRICS]; // no longer fits
        assert_eq!(select(&nodes, &pod, &Weights::equal()), Some(1));
    }

    #[test]
    fn combinations() {
        let s = [0.4, 0.3, 0.1, 0.1, 0.1];
        let o = [0.0, 0.5, 0.5, 0.0, 0.0];
        // s·o = (0, 0.15, 0.05, 0, 0), sum 0.2 → (0, 0.75, 0.25, 0, 0)
        let w = Combination::Multiplicative.combine(&s, &o);
        for (got, want) in w.iter().zip([0.0, 0.75, 0.25, 0.0, 0.0]) {
            assert!((got - want).abs() < 1e-12);
        }
        // Nothing in common: falls back to the subjective weights.
        assert_eq!(
            Combination::Multiplicative.combine(&s, &[0.0, 0.0, 0.0, 0.5, 0.5]),
            {
                let mut x = [0.0; METRICS];
                x[3] = 0.5;
                x[4] = 0.5;
                x.map(|v| v * 0.1 / 0.1) // s·o = (0,0,0,0.05,0.05) → (0,0,0,0.5,0.5)
            }
        );
        let w = Combination::Linear {
            subjective_share: 0.5,
        }
        .combine(&s, &o);
        for (got, want) in w.iter().zip([0.2, 0.4, 0.3, 0.05, 0.05]) {
            assert!((got - want).abs() < 1e-12);
        }
    }

    #[test]
    fn weights_validation() {
        assert!(Weights::new([0.0; METRICS]).is_err());
        assert!(Weights::new([1.0, -1.0, 1.0, 1.0, 1.0]).is_err());
        let w = Weights::new([2.0, 2.0, 2.0, 2.0, 2.0]).unwrap();
        assert_eq!(w.subjective, [0.2; METRICS]);
        assert!(matches!(
            Weights::from_ahp(&ahp::consistent_matrix(&[1.0, 1.0, 1.0])),
            Err(TopsisError::WrongSize { want: 5, got: 3 })
        ));
    }

    #[test]
    fn imbalance_is_population_std() {
        // (0, 0, 0, 0, 1): mean 0.2, variance (4·0.04 + 0.64)/5 = 0.16, std 0.4.
        assert!((imbalance(&[0.0, 0.0, 0.0, 0.0, 1.0]) - 0.4).abs() < 1e-12);
        assert_eq!(imbalance(&[0.3; METRICS]), 0.0);
    }
}
