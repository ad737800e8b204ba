//! TOPSIS proper: closeness of each alternative to the ideal solution.
//!
//! Vector normalisation r_ij = x_ij / √(Σ_i x_ij²) (a column of zeros stays zero), weighted
//! matrix v_ij = w_j·r_ij, ideal v⁺_j = best of column j (min for a cost criterion, max for a
//! benefit one), anti-ideal v⁻_j = worst, distances D⁺_i = ‖v_i − v⁺‖₂ and D⁻_i = ‖v_i − v⁻‖₂,
//! closeness C_i = D⁻_i / (D⁺_i + D⁻_i) ∈ [0, 1] (higher is better). When every alternative is the
//! same on every criterion (ideal = anti-ideal) all get C = 1.

use acoa_shared::coords::euclidean as distance;

/// Whether more or less of a criterion is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Lower is better (utilisation, imbalance).
    Cost,
    /// Higher is better.
    Benefit,
}

/// Closeness coefficient of each row of `rows` (alternatives × criteria).
pub fn closeness<const N: usize>(
    rows: &[[f64; N]],
    weights: &[f64; N],
    directions: &[Direction; N],
) -> Vec<f64> {
    if rows.is_empty() {
        return Vec::new();
    }
    let mut norms = [0.0; N];
    for (j, norm) in norms.iter_mut().enumerate() {
        *norm = rows.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
    }
    let weighted: Vec<[f64; N]> = rows
        .iter()
        .map(|r| {
            let mut v = [0.0; N];
            for j in 0..N {
                v[j] = if norms[j] > 0.0 {
                    weights[j] * r[j] / norms[j]
                } else {
                    0.0
                };
            }
            v
        })
        .collect();
    let mut ideal = [0.0; N];
    let mut anti = [0.0; N];
    for j in 0..N {
        let (lo, hi) = weighted
            .iter()
            .map(|v| v[j])
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            });
        match directions[j] {
            Direction::Cost => (ideal[j], anti[j]) = (lo, hi),
            Direction::Benefit => (ideal[j], anti[j]) = (hi, lo),
        }
    }
    weighted
        .iter()
        .map(|v| {
            let d_plus = distance(v, &ideal);
            let d_minus = distance(v, &anti);
            if d_plus + d_minus > 0.0 {
                d_minus / (d_plus + d_minus)
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{Benefit, Cost};

    #[test]
    fn worked_example_two_cost_criteria() {
        // x = [[0.2, 0.6], [0.4, 0.0], [0.4, 0.8]], both cost, w = (0.5, 0.5).
        // Column norms: √(0.04+0.16+0.16) = 0.6 and √(0.36+0+0.64) = 1.
        // r = [[1/3, 0.6], [2/3, 0], [2/3, 0.8]]; v = [[1/6, 0.3], [1/3, 0], [1/3, 0.4]].
        // Ideal (column minima) = (1/6, 0); anti-ideal (maxima) = (1/3, 0.4).
        // A1: D⁺ = 0.3, D⁻ = √((1/6)² + 0.1²) = √0.037778 = 0.194365, C = 0.194365/0.494365 = 0.393163
        // A2: D⁺ = 1/6, D⁻ = 0.4, C = 0.4/0.566667 = 0.705882
        // A3: D⁺ = √((1/6)² + 0.4²) = 0.433333, D⁻ = 0, C = 0
        let c = closeness(
            &[[0.2, 0.6], [0.4, 0.0], [0.4, 0.8]],
            &[0.5, 0.5],
            &[Cost, Cost],
        );
        for (got, want) in c.iter().zip([0.393163, 0.705882, 0.0]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn benefit_criterion_flips_the_ideal() {
        // One benefit criterion, x = (1, 3): r = (1/√10, 3/√10); ideal = max, so the second
        // alternative is the ideal (C = 1) and the first the anti-ideal (C = 0).
        let c = closeness(&[[1.0], [3.0]], &[1.0], &[Benefit]);
        assert_eq!(c, vec![0.0, 1.0]);
        let c = closeness(&[[1.0], [3.0]], &[1.0], &[Cost]);
        assert_eq!(c, vec![1.0, 0.0]);
    }

    #[test]
    fn identical_alternatives_all_score_one() {
        let c = closeness(&[[0.5, 0.0], [0.5, 0.0]], &[0.5, 0.5], &[Cost, Cost]);
        assert_eq!(c, vec![1.0, 1.0]);
        assert!(closeness::<2>(&[], &[0.5, 0.5], &[Cost, Cost]).is_empty());
    }
}
