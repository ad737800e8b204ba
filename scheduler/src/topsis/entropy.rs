//! Entropy weight method: objective criterion weights from how much the alternatives differ.
//!
//! For m alternatives (rows) and a criterion j with values x_ij ≥ 0:
//! p_ij = x_ij / Σ_i x_ij, e_j = −(1 / ln m) Σ_i p_ij ln p_ij (with 0·ln 0 = 0),
//! d_j = 1 − e_j (degree of divergence), o_j = d_j / Σ_k d_k.
//! A criterion on which all alternatives are equal carries no information (e_j = 1, o_j = 0).
//! Degenerate cases (fewer than two alternatives, or no criterion that differs) give equal weights.

/// Objective weights of the criteria (columns) of `rows`; they sum to 1.
pub fn entropy_weights<const N: usize>(rows: &[[f64; N]]) -> [f64; N] {
    let equal = [1.0 / N as f64; N];
    let m = rows.len();
    if m < 2 {
        return equal;
    }
    let ln_m = (m as f64).ln();
    let mut divergence = [0.0; N];
    for (j, d) in divergence.iter_mut().enumerate() {
        let sum: f64 = rows.iter().map(|r| r[j].max(0.0)).sum();
        if !(sum > 0.0 && sum.is_finite()) {
            continue; // all zero: no information
        }
        let h: f64 = rows
            .iter()
            .map(|r| {
                let p = r[j].max(0.0) / sum;
                if p > 0.0 {
                    -p * p.ln()
                } else {
                    0.0
                }
            })
            .sum();
        *d = (1.0 - h / ln_m).max(0.0);
    }
    let total: f64 = divergence.iter().sum();
    if total <= 1e-15 {
        return equal;
    }
    divergence.map(|d| d / total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example() {
        // Three nodes, three criteria:
        //   A = (0.2, 0.2, 0.2): all equal, p = 1/3 each, e = ln 3 / ln 3 = 1, d = 0.
        //   B = (0.1, 0.3, 0.6): p = (0.1, 0.3, 0.6),
        //       e = (0.1·2.302585 + 0.3·1.203973 + 0.6·0.510826) / 1.098612
        //         = (0.230259 + 0.361192 + 0.306495) / 1.098612 = 0.897946 / 1.098612 = 0.817345,
        //       d = 0.182655.
        //   C = (0.2, 0.4, 0.6): p = (1/6, 1/3, 1/2),
        //       e = (ln 6 / 6 + ln 3 / 3 + ln 2 / 2) / ln 3 = (0.298627 + 0.366204 + 0.346574) / 1.098612
        //         = 1.011405 / 1.098612 = 0.920620, d = 0.079380.
        //   o = (0, 0.182655, 0.079380) / 0.262035 = (0, 0.697062, 0.302938).
        let rows = [[0.2, 0.1, 0.2], [0.2, 0.3, 0.4], [0.2, 0.6, 0.6]];
        let w = entropy_weights(&rows);
        for (got, want) in w.iter().zip([0.0, 0.697062, 0.302938]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn scale_invariant_per_column() {
        // p_ij only depends on ratios within a column.
        let a = entropy_weights(&[[0.1, 0.5], [0.3, 0.25]]);
        let b = entropy_weights(&[[1.0, 0.5], [3.0, 0.25]]);
        assert!((a[0] - b[0]).abs() < 1e-12 && (a[1] - b[1]).abs() < 1e-12);
    }

    #[test]
    fn degenerate_cases_give_equal_weights() {
        assert_eq!(entropy_weights(&[[0.3, 0.9]]), [0.5, 0.5]);
        assert_eq!(entropy_weights::<2>(&[]), [0.5, 0.5]);
        assert_eq!(entropy_weights(&[[0.0, 0.4], [0.0, 0.4]]), [0.5, 0.5]);
        // One zero column and one that differs: all weight on the one that differs.
        assert_eq!(entropy_weights(&[[0.0, 0.1], [0.0, 0.4]]), [0.0, 1.0]);
    }
}
