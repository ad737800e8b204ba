//! How a latency sample is taken ([`ClockMode`]): half the round trip where clocks may differ,
//! the forward one-way delay (the responder's receive time minus our send time) where they are
//! synchronized.
//!
//! Invariant: a one-way sample is accepted only within `[0, round trip]`; outside it the clocks
//! disagree and the caller falls back to half the round trip.

/// How a latency sample is taken (config `[probe] clock`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Clocks may differ: a sample is half the round trip (both directions alike).
    #[default]
    Free,
    /// Clocks agree (GPS, PTP, NTP, one host): a sample is the forward one-way delay.
    Synchronized,
}

impl std::str::FromStr for ClockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "free" => Ok(ClockMode::Free),
            "synchronized" => Ok(ClockMode::Synchronized),
            _ => Err(format!("`{s}` is not free or synchronized")),
        }
    }
}

impl std::fmt::Display for ClockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockMode::Free => "free",
            ClockMode::Synchronized => "synchronized",
        })
    }
}

/// The forward one-way delay in ms from our send time and the responder's receive time
/// (both wall clock ns): `Ok` when it lies within `[0, rtt_ms]`, else `Err(value)`: the
/// clocks disagree by more than the link's delay.
pub fn one_way_ms(sent_wall_ns: u64, recv_wall_ns: u64, rtt_ms: f64) -> Result<f64, f64> {
    let owd = (i128::from(recv_wall_ns) - i128::from(sent_wall_ns)) as f64 / 1e6;
    if (0.0..=rtt_ms).contains(&owd) {
        Ok(owd)
    } else {
        Err(owd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_way_estimates_are_bounded_by_the_round_trip() {
        assert_eq!(one_way_ms(1_000_000, 3_000_000, 10.0), Ok(2.0));
        assert_eq!(one_way_ms(1_000_000, 1_000_000, 10.0), Ok(0.0));
        assert_eq!(one_way_ms(1_000_000, 11_000_000, 10.0), Ok(10.0));
        assert_eq!(one_way_ms(3_000_000, 1_000_000, 10.0), Err(-2.0));
        assert_eq!(one_way_ms(1_000_000, 12_000_000, 10.0), Err(11.0));
        assert_eq!(
            one_way_ms(0, u64::MAX, 10.0).map_err(|v| v > 1e9),
            Err(true)
        );
    }
}
