//! Analytic hierarchy process: subjective criterion weights from a pairwise comparison matrix.
//!
//! The weights are the principal (Perron) eigenvector of the matrix, found by power iteration and
//! normalised to sum 1. The matrix is accepted only if Saaty's consistency ratio
//! `CR = CI / RI`, with `CI = (λmax − n) / (n − 1)`, is below 0.1.

use super::TopsisError;

/// Saaty's random consistency index RI for n = 1..=15 (index 0 is n = 1).
/// Values from Saaty, "The Analytic Hierarchy Process" (1980), as tabulated in most AHP texts.
pub const RANDOM_INDEX: [f64; 15] = [
    0.0, 0.0, 0.58, 0.90, 1.12, 1.24, 1.32, 1.41, 1.45, 1.49, 1.51, 1.48, 1.56, 1.57, 1.59,
];

/// A matrix is rejected when its consistency ratio is at or above this.
pub const MAX_CONSISTENCY_RATIO: f64 = 0.1;

/// Relative tolerance of the reciprocity check `a[j][i] == 1 / a[i][j]`.
const RECIPROCAL_TOLERANCE: f64 = 1e-6;

/// What the AHP computes from a pairwise comparison matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Ahp {
    /// Principal eigenvector, normalised to sum 1.
    pub weights: Vec<f64>,
    /// Principal eigenvalue λmax (n for a perfectly consistent matrix).
    pub lambda_max: f64,
    /// Consistency index (λmax − n) / (n − 1); 0 for n ≤ 2.
    pub ci: f64,
    /// Random index for this n.
    pub ri: f64,
    /// Consistency ratio CI / RI; 0 for n ≤ 2 (such matrices are always consistent).
    pub cr: f64,
}

/// Computes the AHP weights of `matrix` (rows of a square, positive, reciprocal matrix) and checks
/// its consistency: `Err(TopsisError::Inconsistent)` when CR ≥ 0.1.
pub fn ahp(matrix: &[Vec<f64>]) -> Result<Ahp, TopsisError> {
    let result = ahp_unchecked(matrix)?;
    if result.cr >= MAX_CONSISTENCY_RATIO {
        return Err(TopsisError::Inconsistent { cr: result.cr });
    }
    Ok(result)
}

/// Like [`ahp`] but returns the figures of an inconsistent matrix instead of rejecting it
/// (the matrix must still be square, positive and reciprocal).
pub fn ahp_unchecked(matrix: &[Vec<f64>]) -> Result<Ahp, TopsisError> {
    let n = matrix.len();
    if n == 0 {
        return Err(TopsisError::EmptyMatrix);
    }
    if n > RANDOM_INDEX.len() {
        return Err(TopsisError::MatrixTooLarge {
            n,
            max: RANDOM_INDEX.len(),
        });
    }
    for (i, row) in matrix.iter().enumerate() {
        if row.len() != n {
            return Err(TopsisError::NotSquare {
                n,
                row: i,
                len: row.len(),
            });
        }
        for (j, &a) in row.iter().enumerate() {
            if !(a.is_finite() && a > 0.0) {
                return Err(TopsisError::NotPositive {
                    row: i,
                    col: j,
                    value: a,
                });
            }
        }
    }
    for i in 0..n {
        if (matrix[i][i] - 1.0).abs() > RECIPROCAL_TOLERANCE {
            return Err(TopsisError::NotReciprocal { row: i, col: i });
        }
        for j in (i + 1)..n {
            let product = matrix[i][j] * matrix[j][i];
            if (product - 1.0).abs() > RECIPROCAL_TOLERANCE {
                return Err(TopsisError::NotReciprocal { row: j, col: i });
            }
        }
    }

    // Power iteration: a positive matrix has a simple dominant eigenvalue with a positive
    // eigenvector (Perron–Frobenius), so this converges from the uniform start.
    let mut w = vec![1.0 / n as f64; n];
    for _ in 0..10_000 {
        let mut next = mat_vec(matrix, &w);
        let sum: f64 = next.iter().sum();
        next.iter_mut().for_each(|x| *x /= sum);
        let delta = next
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        w = next;
        if delta < 1e-15 {
            break;
        }
    }
    let aw = mat_vec(matrix, &w);
    let lambda_max = aw.iter().zip(&w).map(|(a, b)| a / b).sum::<f64>() / n as f64;
    let ci = if n > 2 {
        ((lambda_max - n as f64) / (n as f64 - 1.0)).max(0.0)
    } else {
        0.0
    };
    let ri = RANDOM_INDEX[n - 1];
    let cr = if ri > 0.0 { ci / ri } else { 0.0 };
    Ok(Ahp {
        weights: w,
        lambda_max,
        ci,
        ri,
        cr,
    })
}

/// The pairwise comparison matrix of a weight vector: `a[i][j] = w[i] / w[j]` (perfectly
/// consistent, CR = 0). Handy to state a priority directly.
pub fn consistent_matrix(weights: &[f64]) -> Vec<Vec<f64>> {
    weights
        .iter()
        .map(|wi| weights.iter().map(|wj| wi / wj).collect())
        .collect()
}

fn mat_vec(matrix: &[Vec<f64>], v: &[f64]) -> Vec<f64> {
    matrix
        .iter()
        .map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consistent_matrix_gives_exact_weights_and_zero_cr() {
        // a[i][j] = w[i]/w[j] for w = (0.4, 0.3, 0.2, 0.1): A·w = 4·w exactly, so λmax = n = 4,
        // CI = 0, CR = 0 and the eigenvector is w itself.
        let w = [0.4, 0.3, 0.2, 0.1];
        let r = ahp(&consistent_matrix(&w)).unwrap();
        for (got, want) in r.weights.iter().zip(w) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        assert!((r.lambda_max - 4.0).abs() < 1e-12);
        assert!(r.ci.abs() < 1e-12 && r.cr.abs() < 1e-12);
        assert_eq!(r.ri, 0.90);
    }

    #[test]
    fn textbook_three_by_three() {
        // The classic example [[1,3,5],[1/3,1,3],[1/5,1/3,1]] found in AHP tutorials:
        // weights ≈ (0.637, 0.258, 0.105), λmax ≈ 3.0385, CI ≈ 0.0193, RI = 0.58, CR ≈ 0.033.
        let a = vec![
            vec![1.0, 3.0, 5.0],
            vec![1.0 / 3.0, 1.0, 3.0],
            vec![1.0 / 5.0, 1.0 / 3.0, 1.0],
        ];
        let r = ahp(&a).unwrap();
        let want = [0.637, 0.258, 0.105];
        for (got, want) in r.weights.iter().zip(want) {
            assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        }
        assert!((r.lambda_max - 3.0385).abs() < 1e-3);
        assert!((r.ci - 0.0193).abs() < 1e-3);
        assert!((r.cr - 0.033).abs() < 1e-3);
    }

    #[test]
    fn four_by_four_against_independent_computation() {
        // [[1,5,3,7],[1/5,1,1/3,3],[1/3,3,1,5],[1/7,1/3,1/5,1]]; an independent power iteration
        // (plain Python, 1e-15 convergence) gives w = (0.5650, 0.1175, 0.2622, 0.0553),
        // λmax = 4.1170, CI = 0.0390, CR = 0.0390/0.90 = 0.0433.
        let a = vec![
            vec![1.0, 5.0, 3.0, 7.0],
            vec![1.0 / 5.0, 1.0, 1.0 / 3.0, 3.0],
            vec![1.0 / 3.0, 3.0, 1.0, 5.0],
            vec![1.0 / 7.0, 1.0 / 3.0, 1.0 / 5.0, 1.0],
        ];
        let r = ahp(&a).unwrap();
        for (got, want) in r.weights.iter().zip([0.5650, 0.1175, 0.2622, 0.0553]) {
            assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        }
        assert!((r.lambda_max - 4.1170).abs() < 1e-3);
        assert!((r.cr - 0.0433).abs() < 1e-3);
    }

    #[test]
    fn inconsistent_matrix_is_rejected_naming_the_cr() {
        // A cyclic preference (1 ≻ 2 ≻ 3 ≻ 1, each 9×): λmax = 1 + 9 + 1/9 ≈ 10.11 (w is uniform by
        // symmetry), CI = (10.11 − 3)/2 ≈ 3.556, CR ≈ 6.13.
        let a = vec![
            vec![1.0, 9.0, 1.0 / 9.0],
            vec![1.0 / 9.0, 1.0, 9.0],
            vec![9.0, 1.0 / 9.0, 1.0],
        ];
        let err = ahp(&a).unwrap_err();
        match err {
            TopsisError::Inconsistent { cr } => assert!((cr - 6.130).abs() < 1e-3, "{cr}"),
            other => panic!("unexpected {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("6.130"), "{msg}");
        assert!(msg.contains("0.1"), "{msg}");
    }

    #[test]
    fn mildly_inconsistent_but_above_threshold_is_rejected() {
        // [[1,3,1/3],[1/3,1,3],[3,1/3,1]] is cyclic too: λmax = 1 + 3 + 1/3 = 4.333,
        // CI = 0.667, CR = 1.149 ≥ 0.1.
        let a = vec![
            vec![1.0, 3.0, 1.0 / 3.0],
            vec![1.0 / 3.0, 1.0, 3.0],
            vec![3.0, 1.0 / 3.0, 1.0],
        ];
        let r = ahp_unchecked(&a).unwrap();
        assert!((r.cr - (1.0 + 3.0 + 1.0 / 3.0 - 3.0) / 2.0 / 0.58).abs() < 1e-9);
        assert!(matches!(ahp(&a), Err(TopsisError::Inconsistent { .. })));
    }

    #[test]
    fn malformed_matrices_are_errors() {
        assert!(matches!(ahp(&[]), Err(TopsisError::EmptyMatrix)));
        assert!(matches!(
            ahp(&[vec![1.0, 2.0], vec![0.5]]),
            Err(TopsisError::NotSquare { row: 1, .. })
        ));
        assert!(matches!(
            ahp(&[vec![1.0, -2.0], vec![-0.5, 1.0]]),
            Err(TopsisError::NotPositive { row: 0, col: 1, .. })
        ));
        assert!(matches!(
            ahp(&[vec![1.0, 2.0], vec![2.0, 1.0]]),
            Err(TopsisError::NotReciprocal { row: 1, col: 0 })
        ));
        // n ≤ 2 is always consistent.
        let r = ahp(&[vec![1.0, 3.0], vec![1.0 / 3.0, 1.0]]).unwrap();
        assert!((r.weights[0] - 0.75).abs() < 1e-12 && r.cr == 0.0);
    }
}
