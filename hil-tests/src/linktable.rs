//! Per-direction link parameters, and how one packet's fate (delay or loss) is drawn.

use std::time::Duration;

use acoa_shared::model::Link;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// What the emulator does to packets on one directed link.
///
/// - `latency_ms`: the mean one-way delay.
/// - `jitter_ms`: RFC 3550 jitter of the one-way delay, i.e. the mean absolute difference between
///   the delays of two consecutive packets. Delays are drawn from a normal distribution with
///   standard deviation `jitter_ms * sqrt(pi) / 2` (for independent normal draws the mean
///   absolute difference is `2 sigma / sqrt(pi)`), cut at zero.
/// - `loss`: the probability that a packet is dropped (`1 - success` of the scenario's link table).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    pub latency_ms: f64,
    pub jitter_ms: f64,
    pub loss: f64,
}

impl Default for LinkSpec {
    fn default() -> Self {
        Self::IDEAL
    }
}

impl LinkSpec {
    /// No delay, no jitter, no loss.
    pub const IDEAL: LinkSpec = LinkSpec {
        latency_ms: 0.0,
        jitter_ms: 0.0,
        loss: 0.0,
    };

    pub fn new(latency_ms: f64, jitter_ms: f64, loss: f64) -> Self {
        Self {
            latency_ms,
            jitter_ms,
            loss,
        }
    }

    /// The emulated link of a scenario's link table entry.
    pub fn from_link(link: &Link) -> Self {
        Self {
            latency_ms: link.latency_ms,
            jitter_ms: link.jitter_ms,
            loss: (1.0 - link.success).clamp(0.0, 1.0),
        }
    }

    /// Checks the values; the error names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.latency_ms.is_finite() && (0.0..=60_000.0).contains(&self.latency_ms)) {
            return Err(format!(
                "latency_ms {} is not within 0..=60000",
                self.latency_ms
            ));
        }
        if !(self.jitter_ms.is_finite() && (0.0..=60_000.0).contains(&self.jitter_ms)) {
            return Err(format!(
                "jitter_ms {} is not within 0..=60000",
                self.jitter_ms
            ));
        }
        if !(self.loss.is_finite() && (0.0..=1.0).contains(&self.loss)) {
            return Err(format!("loss {} is not within 0..=1", self.loss));
        }
        Ok(())
    }

    /// Draws one packet's fate: `None` if it is lost, otherwise its one-way delay.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Duration> {
        if self.loss > 0.0 && rng.gen::<f64>() < self.loss {
            return None;
        }
        let mut ms = self.latency_ms;
        if self.jitter_ms > 0.0 {
            let sigma = self.jitter_ms * std::f64::consts::PI.sqrt() / 2.0;
            ms += sigma * standard_normal(rng);
        }
        Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0))
    }
}

/// A standard normal draw (Box-Muller).
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]
    let u2: f64 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The links between `n` endpoints, row-major by (from, to). Pairs not set are ideal.
#[derive(Clone, Debug)]
pub struct LinkTable {
    n: usize,
    specs: Vec<LinkSpec>,
}

impl LinkTable {
    pub fn new(n: usize) -> Self {
        Self {
            n,
            specs: vec![LinkSpec::IDEAL; n * n],
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn get(&self, from: usize, to: usize) -> LinkSpec {
        self.specs[from * self.n + to]
    }

    pub fn set(&mut self, from: usize, to: usize, spec: LinkSpec) {
        self.specs[from * self.n + to] = spec;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn draws_match_the_spec() {
        let spec = LinkSpec::new(20.0, 1.0, 0.1);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut delays = Vec::new();
        let mut lost = 0;
        for _ in 0..100_000 {
            match spec.draw(&mut rng) {
                Some(d) => delays.push(d.as_secs_f64() * 1000.0),
                None => lost += 1,
            }
        }
        let loss = lost as f64 / 100_000.0;
        assert!((loss - 0.1).abs() < 0.005, "loss {loss}");
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((mean - 20.0).abs() < 0.02, "mean {mean}");
        // RFC 3550 jitter of consecutive draws: mean |D|
        let jit =
            delays.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / (delays.len() - 1) as f64;
        assert!((jit - 1.0).abs() < 0.02, "jitter {jit}");
    }

    #[test]
    fn ideal_link_has_no_delay_and_no_loss() {
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..1000 {
            assert_eq!(LinkSpec::IDEAL.draw(&mut rng), Some(Duration::ZERO));
        }
    }

    #[test]
    fn validation_names_the_bad_field() {
        assert!(LinkSpec::new(1.0, 0.0, 1.5)
            .validate()
            .unwrap_err()
            .contains("loss"));
        assert!(LinkSpec::new(-1.0, 0.0, 0.0)
            .validate()
            .unwrap_err()
            .contains("latency_ms"));
        assert!(LinkSpec::new(f64::NAN, 0.0, 0.0).validate().is_err());
        assert!(LinkSpec::new(10.0, 1.0, 0.2).validate().is_ok());
    }

    #[test]
    fn from_scenario_link() {
        let l = Link {
            from: "a".into(),
            to: "b".into(),
            latency_ms: 24.0,
            jitter_ms: 1.0,
            success: 0.9,
        };
        let s = LinkSpec::from_link(&l);
        assert_eq!(s.latency_ms, 24.0);
        assert!((s.loss - 0.1).abs() < 1e-12);
    }
}
