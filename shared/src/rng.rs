//! SplitMix64: the small seeded generator of the coordinates, the simulations, the synthetic
//! benchmark and the tests (reproducible draws without a dependency; one for every crate).

/// SplitMix64 (Steele, Lea and Flood 2014): each draw adds the golden-ratio increment to the
/// state and mixes it.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// In 0..n (n > 0), by the remainder: a bias of at most n / 2^64, one draw.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// [`SplitMix64::below`] for a `u64` bound.
    pub fn below_u64(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in 0..n (n > 0), by rejection so it is unbiased.
    pub fn below_unbiased(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference sequence of SplitMix64 seeded with 1234567.
    #[test]
    fn reference_sequence() {
        let mut r = SplitMix64::new(1234567);
        let want = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = SplitMix64::new(9);
        for _ in 0..1000 {
            assert!((0.0..1.0).contains(&r.unit()));
            assert!(r.below(7) < 7);
            assert!(r.below_unbiased(3) < 3);
            assert!((2.0..5.0).contains(&r.range(2.0, 5.0)));
        }
    }
}
